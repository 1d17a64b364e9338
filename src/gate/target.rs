//! Which calls a gate applies to: [`GateTarget`], and the matching it is made of ([`Target`]).

use std::fmt;

use super::error::GateError;
use super::pattern::Pattern;
use super::uri::Spellings;
use crate::wire::mcp::Method;

/// Which calls a gate applies to: a tool, a prompt, a resource URI or a prefix of one.
///
/// Made by its constructors; what it holds is private, so that more kinds of target can come
/// without a breaking change.
#[derive(Clone)]
pub struct GateTarget {
    target: Target,
}

impl fmt::Debug for GateTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GateTarget").field(&self.target).finish()
    }
}

impl GateTarget {
    /// Targets `tools/call` of the tool `name`.
    pub fn tool(name: impl Into<String>) -> Self {
        Self::from(Target::Tool(name.into()))
    }

    /// Targets `prompts/get` of the prompt `name`.
    pub fn prompt(name: impl Into<String>) -> Self {
        Self::from(Target::Prompt(name.into()))
    }

    /// Targets `resources/read` of `uri`, however the call spells it.
    ///
    /// The gate applies when the call's URI, as sent or normalized, is `uri` as declared or
    /// normalized: RFC 3986 normalization (scheme and host case, dot segments, percent-encoded
    /// unreserved characters decoded and the hex digits of other escapes uppercased, an empty or
    /// default port), with no authority, an empty one and `localhost` alike for `file:`. It also
    /// applies when the two are the same as a service that decodes every escape in the path reads
    /// them (`file:///secrets%2Fkey` is `file:///secrets/key`; `\` is `/`; dot segments and
    /// repeated `/` resolved; a `file:` URI's host, query and fragment ignored). A call URI that
    /// does not parse is compared as sent and as such a service would read it. The case of the
    /// path is not normalized (`file:///Secrets/key` is another URI, even where a case-insensitive
    /// file system reads it as the same file), nor are Unicode forms, links or mounts: gate every
    /// spelling an inner service accepts.
    ///
    /// The normalized forms only choose the gates: the sealed token and the inner service get the
    /// URI as the client sent it.
    pub fn resource(uri: impl Into<String>) -> Self {
        Self::from(Target::Resource(Spellings::new(uri.into())))
    }

    /// Targets `resources/read` of every URI starting with `prefix`, however the call spells it.
    ///
    /// The prefix and the call's URI are compared in the same spellings as for
    /// [`resource`](Self::resource): so `file:///secrets/` gates `FILE:///secrets/x`,
    /// `file:///./secrets/x`, `file:///a/../secrets/x`, `file:///%73ecrets/x`,
    /// `file://localhost/secrets/x` and `file:///secrets%2Fx`, but not `file:///secretsX/y`. The
    /// case of the path is not normalized. End a directory prefix with `/`: `file:///secrets` also
    /// gates `file:///secrets-public/x`.
    pub fn resource_prefix(prefix: impl Into<String>) -> Self {
        Self::from(Target::ResourcePrefix(Spellings::new(prefix.into())))
    }

    /// Targets `tools/call` of every tool whose name matches `glob`, checked on each call
    /// against the call's own name: a tool the server adds later, or accepts without listing
    /// it, is gated as soon as its name matches.
    ///
    /// `*` matches any run of characters (none too), `?` any one character; every other
    /// character is itself. A glob without `*` or `?` is [`tool`](Self::tool).
    ///
    /// ```
    /// use tower_elicitation::GateTarget;
    ///
    /// let deletes = GateTarget::tool_glob("delete_*")?;
    /// assert!(GateTarget::tool_glob("delete_[ab]*").is_err());
    /// # let _ = deletes;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`GateError::Pattern`] for an empty glob, or one with `[`, `]`, `{`, `}`, `\` or three
    /// `*` in a row, which this matcher does not read as syntax: name each tool instead.
    pub fn tool_glob(glob: &str) -> Result<Self, GateError> {
        let glob = Self::name_pattern(glob)?;
        if glob.is_literal() {
            return Ok(Self::tool(glob.text()));
        }
        Ok(Self::from(Target::ToolPattern(glob)))
    }

    /// Targets `prompts/get` of every prompt whose name matches `glob`, checked on each call;
    /// the syntax is [`tool_glob`](Self::tool_glob)'s.
    ///
    /// # Errors
    ///
    /// [`GateError::Pattern`], as for [`tool_glob`](Self::tool_glob).
    pub fn prompt_glob(glob: &str) -> Result<Self, GateError> {
        let glob = Self::name_pattern(glob)?;
        if glob.is_literal() {
            return Ok(Self::prompt(glob.text()));
        }
        Ok(Self::from(Target::PromptPattern(glob)))
    }

    /// Targets `resources/read` of every URI matching `pattern`, however the call spells it,
    /// checked on each call (listed or not).
    ///
    /// `**` matches any run of characters, `/` included; `*` any run within one path segment,
    /// except a `*` that ends the pattern, which matches the rest of the URI (a prefix); `?`
    /// any one character but `/`. So `file:///srv/secret/**` (or `file:///srv/secret/*`) gates
    /// `file:///srv/secret/sub/id_rsa`, and `file:///srv/*/key` gates `file:///srv/a/key` but
    /// not `file:///srv/a/b/key`. The pattern and the call's URI are compared in the spellings
    /// [`resource`](Self::resource) uses (as written, normalized, decoded): the gate applies
    /// when any spelling of the call matches any spelling of the pattern.
    ///
    /// ```
    /// use tower_elicitation::GateTarget;
    ///
    /// let secrets = GateTarget::resource_pattern("file:///srv/secret/**")?;
    /// # let _ = secrets;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`GateError::Pattern`] for an empty pattern, or one with `[`, `]`, `{`, `}`, `\` or
    /// three `*` in a row: name each URI, or use [`resource_prefix`](Self::resource_prefix).
    pub fn resource_pattern(pattern: &str) -> Result<Self, GateError> {
        Pattern::uri(pattern).map_err(|error| GateError::Pattern {
            pattern: pattern.to_owned(),
            reason: error.to_string(),
        })?;
        let spellings = Spellings::new(pattern.to_owned());
        let patterns = spellings.each().map(Pattern::uri_spelling).collect();
        Ok(Self::from(Target::ResourcePattern(patterns)))
    }

    /// Returns whether this target gates a call of `method` (`tools/call`, `prompts/get`,
    /// `resources/read`) naming `target` (the tool's or prompt's name, the resource's URI): the
    /// very test the layer makes on each call.
    ///
    /// ```
    /// use tower_elicitation::GateTarget;
    ///
    /// let secrets = GateTarget::resource_pattern("file:///srv/secret/**")?;
    /// assert!(secrets.applies_to("resources/read", "file:///srv/./secret/sub/id_rsa"));
    /// assert!(!secrets.applies_to("resources/read", "file:///srv/public/a"));
    /// assert!(!secrets.applies_to("tools/call", "file:///srv/secret/a"));
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn applies_to(&self, method: &str, target: &str) -> bool {
        Method::parse(method).is_some_and(|method| self.target.matches(method, target, &mut None))
    }

    fn name_pattern(glob: &str) -> Result<Pattern, GateError> {
        Pattern::name(glob).map_err(|error| GateError::Pattern {
            pattern: glob.to_owned(),
            reason: error.to_string(),
        })
    }

    fn from(target: Target) -> Self {
        Self { target }
    }
}

/// A gate's target as the layer keeps it: a resource URI's spellings are worked out once, when
/// the gate is declared.
#[derive(Clone)]
pub(crate) enum Target {
    Tool(String),
    Prompt(String),
    Resource(Spellings<'static>),
    ResourcePrefix(Spellings<'static>),
    ToolPattern(Pattern),
    PromptPattern(Pattern),
    /// The pattern as written first, then as each other spelling of its text reads.
    ResourcePattern(Vec<Pattern>),
}

impl Target {
    pub(crate) fn new(target: GateTarget) -> Self {
        target.target
    }

    /// Whether a `method` call of `target` is gated. A `resources/read` URI's spellings are
    /// worked out into `uri` when a resource gate first needs them, once per call.
    pub(crate) fn matches<'t>(
        &self,
        method: Method,
        target: &'t str,
        uri: &mut Option<Spellings<'t>>,
    ) -> bool {
        match (self, method) {
            (Self::Tool(name), Method::ToolsCall) | (Self::Prompt(name), Method::PromptsGet) => {
                name == target
            }
            (Self::Resource(gate), Method::ResourcesRead) => {
                uri.get_or_insert_with(|| Spellings::new(target)).is(gate)
            }
            (Self::ResourcePrefix(prefix), Method::ResourcesRead) => uri
                .get_or_insert_with(|| Spellings::new(target))
                .starts_with(prefix),
            (Self::ToolPattern(glob), Method::ToolsCall)
            | (Self::PromptPattern(glob), Method::PromptsGet) => glob.matches(target),
            (Self::ResourcePattern(patterns), Method::ResourcesRead) => {
                let spellings = uri.get_or_insert_with(|| Spellings::new(target));
                spellings
                    .each()
                    .any(|spelling| patterns.iter().any(|p| p.matches(spelling)))
            }
            _ => false,
        }
    }

    /// Whether some call could match both targets.
    pub(crate) fn overlaps(&self, other: &Self) -> bool {
        use Target::*;
        match (self, other) {
            (Tool(a), Tool(b)) | (Prompt(a), Prompt(b)) => a == b,
            (Resource(a), Resource(b)) => a.is(b),
            (Resource(uri), ResourcePrefix(prefix)) | (ResourcePrefix(prefix), Resource(uri)) => {
                uri.starts_with(prefix)
            }
            (ResourcePrefix(a), ResourcePrefix(b)) => a.starts_with(b) || b.starts_with(a),
            (ToolPattern(glob), Tool(name))
            | (Tool(name), ToolPattern(glob))
            | (PromptPattern(glob), Prompt(name))
            | (Prompt(name), PromptPattern(glob)) => glob.matches(name),
            (ToolPattern(a), ToolPattern(b)) | (PromptPattern(a), PromptPattern(b)) => {
                a.overlaps(b)
            }
            (ResourcePattern(patterns), Resource(uri))
            | (Resource(uri), ResourcePattern(patterns)) => uri
                .each()
                .any(|spelling| patterns.iter().any(|p| p.matches(spelling))),
            (ResourcePattern(patterns), ResourcePrefix(prefix))
            | (ResourcePrefix(prefix), ResourcePattern(patterns)) => {
                prefix.each().any(|spelling| {
                    let prefix = Pattern::prefix(spelling);
                    patterns.iter().any(|p| p.overlaps(&prefix))
                })
            }
            (ResourcePattern(a), ResourcePattern(b)) => {
                a.iter().any(|p| b.iter().any(|q| p.overlaps(q)))
            }
            _ => false,
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (variant, text) = match self {
            Self::Tool(name) => ("Tool", name.as_str()),
            Self::Prompt(name) => ("Prompt", name.as_str()),
            Self::Resource(uri) => ("Resource", uri.raw()),
            Self::ResourcePrefix(prefix) => ("ResourcePrefix", prefix.raw()),
            Self::ToolPattern(glob) => ("ToolPattern", glob.text()),
            Self::PromptPattern(glob) => ("PromptPattern", glob.text()),
            Self::ResourcePattern(patterns) => (
                "ResourcePattern",
                patterns.first().map_or("", Pattern::text),
            ),
        };
        f.debug_tuple(variant).field(&text).finish()
    }
}
