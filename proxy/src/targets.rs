//! The file's names and patterns as the layer's targets: one reading for every key that names
//! tools, prompts or resources, so that a pattern means the same in a `[[gate]]`, in
//! `[upstream] expose` and `hide`, and in `--explain`.
//!
//! A tool or prompt pattern is a name glob (`delete_*`; `*` any run of characters, `?` one);
//! a resource pattern is a URI, or a URI pattern when it has `*` or `?` (`file:///srv/**`). The
//! matching is the layer's own ([`GateTarget::applies_to`]): a pattern the file holds matches
//! exactly what a gate of it would. Where one list names all three kinds (`expose`, `hide`,
//! `--explain`), an entry is a tool bare, a prompt as `prompt:NAME`, a resource as
//! `resource:URI`.

use tower_elicitation::GateTarget;

/// What a name or URI is of: a tool, a prompt or a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    Resource,
}

impl Kind {
    /// Every kind, in the order `--check` prints them.
    pub const ALL: [Kind; 3] = [Kind::Tool, Kind::Prompt, Kind::Resource];

    /// The kind as the file and the messages name it: `tool`, `prompt`, `resource`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::Resource => "resource",
        }
    }

    /// Its plural, as `[[gate]]` keys and `--check` name it.
    pub fn plural(self) -> &'static str {
        match self {
            Self::Tool => "tools",
            Self::Prompt => "prompts",
            Self::Resource => "resources",
        }
    }

    /// The method whose calls a target of this kind matches.
    pub fn method(self) -> &'static str {
        match self {
            Self::Tool => "tools/call",
            Self::Prompt => "prompts/get",
            Self::Resource => "resources/read",
        }
    }

    /// What a call of `method` is of: `tools/call` a tool, `prompts/get` a prompt, anything
    /// else a resource.
    pub fn of_method(method: &str) -> Self {
        match method {
            "tools/call" => Self::Tool,
            "prompts/get" => Self::Prompt,
            _ => Self::Resource,
        }
    }

    /// Its place in [`ALL`](Self::ALL), for a table per kind.
    pub fn index(self) -> usize {
        match self {
            Self::Tool => 0,
            Self::Prompt => 1,
            Self::Resource => 2,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kind an entry of a list naming all three kinds is, and the pattern after its prefix:
/// `prompt:NAME` a prompt, `resource:URI` a resource, anything else a tool.
pub fn split(entry: &str) -> (Kind, &str) {
    match entry.split_once(':') {
        Some(("prompt", name)) => (Kind::Prompt, name),
        Some(("resource", uri)) => (Kind::Resource, uri),
        _ => (Kind::Tool, entry),
    }
}

/// `pattern` as the target of `kind`: a name glob for a tool or a prompt; for a resource a URI
/// pattern when it has `*` or `?`, else the URI (however a call spells it).
///
/// # Errors
///
/// What the pattern's syntax refuses, naming the kind (`tool pattern "delete_[ab]": …`).
pub fn target(kind: Kind, pattern: &str) -> Result<GateTarget, String> {
    match kind {
        Kind::Tool => GateTarget::tool_glob(pattern),
        Kind::Prompt => GateTarget::prompt_glob(pattern),
        Kind::Resource if pattern.contains(['*', '?']) => GateTarget::resource_pattern(pattern),
        Kind::Resource => Ok(GateTarget::resource(pattern.to_owned())),
    }
    .map_err(|error| format!("{kind} {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_tool_unless_its_prefix_names_a_prompt_or_a_resource() {
        assert_eq!(split("read_*"), (Kind::Tool, "read_*"));
        assert_eq!(split("prompt:echo"), (Kind::Prompt, "echo"));
        assert_eq!(
            split("resource:file:///srv/**"),
            (Kind::Resource, "file:///srv/**")
        );
        assert_eq!(split("ns:tool"), (Kind::Tool, "ns:tool"));
    }

    #[test]
    fn patterns_match_as_the_layers_gates_do() {
        let tools = target(Kind::Tool, "read_*").unwrap();
        assert!(tools.applies_to(Kind::Tool.method(), "read_file"));
        assert!(!tools.applies_to(Kind::Prompt.method(), "read_file"));
        let uris = target(Kind::Resource, "file:///srv/secret/**").unwrap();
        assert!(uris.applies_to(Kind::Resource.method(), "file:///srv/./secret/a/b"));
        let uri = target(Kind::Resource, "file:///srv/a.txt").unwrap();
        assert!(uri.applies_to(Kind::Resource.method(), "FILE:///srv/a.txt"));
        let error = target(Kind::Tool, "read_[ab]").unwrap_err();
        assert!(error.starts_with("tool pattern \"read_[ab]\""), "{error}");
        assert!(target(Kind::Prompt, "").is_err());
    }
}
