//! Declared gates: questions the layer asks before a call may reach the inner service.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod call;
mod error;
mod flow;
mod form;
pub(crate) mod pattern;
mod target;
pub(crate) mod uri;

pub use call::{Answers, GateCall};
pub use error::GateError;
pub(crate) use flow::ErasedFlow;
pub use flow::UrlFlow;
pub use form::IntoFormSchema;
#[cfg(feature = "schemars")]
use form::flatten_schemars;
pub use target::GateTarget;
pub(crate) use target::Target;

type MessageFn = dyn Fn(&GateCall<'_>) -> String + Send + Sync;
type PredicateFn = dyn Fn(&Map<String, Value>, &GateCall<'_>) -> bool + Send + Sync;
type BindingFn = dyn Fn(&GateCall<'_>) -> String + Send + Sync;
type CheckFn = dyn Fn(&GateCall<'_>) -> Result<(), String> + Send + Sync;
type ConditionFn = dyn Fn(&GateCall<'_>) -> Result<bool, String> + Send + Sync;
type MetaFn = dyn Fn(&GateCall<'_>) -> Map<String, Value> + Send + Sync;

/// A question the layer asks before a call may reach the inner service.
///
/// A gate retrofits an approval step onto a server that knows nothing of elicitation. Before a
/// `tools/call` of a gated tool (or a `prompts/get` of a gated prompt, or a `resources/read` of a
/// gated URI) reaches the inner service, the layer asks the gate's question itself, validates the
/// answer, and forwards the call only after an acceptable one: a form answer that matches the
/// schema (and the gate's predicate, if it has one), or a URL flow that the server confirms is
/// complete. A decline, a cancel or a failed predicate ends the call with the gate's refusal; the
/// inner service is never called. A gate with a [`Gate::retry_hint`] asks again after a failed
/// predicate instead, while the call has rounds left, so a typo does not end the call.
///
/// Accepted answers reach the inner service in `params.inputResponses`, as the [`Answers`]
/// request extension, and, for gates configured with [`Gate::inject_as`], inside
/// `params.arguments`. They ride in the sealed token, so a gate is asked once per call even when
/// the inner service then asks questions of its own.
///
/// # Example
///
/// ```
/// use serde_json::json;
/// use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};
///
/// let confirm = Gate::form(
///     "confirm-delete",
///     json!({
///         "type": "object",
///         "properties": {"confirm": {"type": "string", "title": "Branch name"}},
///         "required": ["confirm"],
///     }),
/// )?
/// .message(|call| format!("Type the branch name to delete {}", call.argument_str("name").unwrap_or("")))
/// .require(|content, call| content.get("confirm") == call.argument("name"))
/// .retry_hint("That is not the branch name.")
/// .refusal("Branch was not deleted.");
///
/// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
///     .gate(GateTarget::tool("delete_branch"), confirm)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
#[doc = include_str!("../../docs/gates.md")]
#[derive(Clone)]
pub struct Gate {
    pub(crate) key: String,
    pub(crate) kind: GateKind,
    message: Option<Arc<MessageFn>>,
    pub(crate) refusal: String,
    predicate: Option<Arc<PredicateFn>>,
    /// Ask again, with this line, when the predicate refuses.
    pub(crate) retry_hint: Option<String>,
    /// The line a URL gate's question gains when its flow is not complete yet.
    pub(crate) incomplete_hint: String,
    pub(crate) inject: Option<String>,
    binding: Option<Arc<BindingFn>>,
    check: Option<Arc<CheckFn>>,
    condition: Option<Arc<ConditionFn>>,
    meta: Option<Arc<MetaFn>>,
    refusal_for: Option<Arc<MessageFn>>,
    /// How long its question's `requestState` holds, in seconds, when shorter than the layer's.
    pub(crate) approval_ttl: Option<u64>,
}

#[derive(Clone)]
pub(crate) enum GateKind {
    /// An elicitation form with this `requestedSchema`: minified text, its members in the order
    /// they were declared.
    Form { schema: Box<RawValue> },
    /// A URL-mode elicitation backed by a flow the server can check.
    Url { flow: Arc<dyn ErasedFlow> },
}

impl Gate {
    /// Creates a gate asking a form with `schema` as its `requestedSchema`.
    ///
    /// The schema must be inside the MCP form subset (checked here); a schema outside
    /// it is refused here, when the layer is built, not when a client first meets it.
    ///
    /// The client is shown the schema's members in the order `schema` holds them. Given as JSON
    /// text (`&str`, `String`), that is the order they were written in, whatever the build's
    /// features. Given as a [`Value`] (`json!`), it is the order the value keeps, which is sorted
    /// unless something in the build turns on serde_json's `preserve_order`.
    ///
    /// ```
    /// use tower_elicitation::Gate;
    ///
    /// let gate = Gate::form("approval", r#"{
    ///     "type": "object",
    ///     "properties": {
    ///         "target": {"type": "string", "title": "Target"},
    ///         "approve": {"type": "boolean", "title": "Approve"}
    ///     },
    ///     "required": ["approve"]
    /// }"#)?;
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`GateError::EmptyKey`] for an empty key, [`GateError::SchemaText`] for text that is not
    /// one JSON value (or repeats a key), [`GateError::Schema`] for a schema outside the subset,
    /// [`GateError::SchemaCompile`] for one the validator cannot compile.
    pub fn form(key: impl Into<String>, schema: impl IntoFormSchema) -> Result<Self, GateError> {
        let key = checked_key(key.into())?;
        let text = match schema.into_form_schema() {
            Ok(text) => text,
            Err(reason) => return Err(GateError::SchemaText { key, reason }),
        };
        let value: Value = match serde_json::from_str(text.get()) {
            Ok(value) => value,
            Err(error) => {
                let reason = crate::wire::json::strip_position(&error);
                return Err(GateError::SchemaText { key, reason });
            }
        };
        crate::form::check(&value).map_err(|error| GateError::Schema {
            key: key.clone(),
            error,
        })?;
        if let Err(reason) = crate::form::validate::FormValidator::compile(&value) {
            return Err(GateError::SchemaCompile { key, reason });
        }
        Ok(Self::new(key, GateKind::Form { schema: text }))
    }

    /// Creates a gate asking a form whose schema is derived from `T` with `schemars`.
    ///
    /// `Option` fields become optional properties; integer formats (`uint32`, …) are dropped, and
    /// subschemas are inlined. The client is shown the fields sorted by name, or, with the
    /// `preserve_order` feature (off by default: it turns on serde_json's `preserve_order` for
    /// the whole build), in the order the struct declares them. A type that cannot be a flat form (a nested struct, a `Vec` of
    /// anything but a string enum, a map) is refused with an error naming the field.
    ///
    /// ```
    /// use tower_elicitation::Gate;
    ///
    /// #[derive(schemars::JsonSchema, serde::Deserialize)]
    /// struct Approval {
    ///     /// Approve the deployment
    ///     approve: bool,
    ///     /// Why (optional)
    ///     note: Option<String>,
    /// }
    ///
    /// #[derive(schemars::JsonSchema, serde::Deserialize)]
    /// struct Nested {
    ///     approval: Approval,
    /// }
    ///
    /// assert!(Gate::form_for::<Approval>("approval").is_ok());
    /// let error = Gate::form_for::<Nested>("nested").unwrap_err();
    /// assert!(error.to_string().contains("/properties/approval"), "{error}");
    /// ```
    ///
    /// # Errors
    ///
    /// [`GateError::EmptyKey`] when `key` is empty; [`GateError::Schema`] when `T`'s schema cannot
    /// be a flat form (a nested struct, a map), naming the field; [`GateError::SchemaCompile`] when
    /// the validator cannot compile it.
    #[cfg(feature = "schemars")]
    #[cfg_attr(docsrs, doc(cfg(feature = "schemars")))]
    pub fn form_for<T: schemars::JsonSchema>(key: impl Into<String>) -> Result<Self, GateError> {
        let generator = schemars::generate::SchemaSettings::draft2020_12()
            .with(|s| s.inline_subschemas = true)
            .into_generator();
        let schema = flatten_schemars(generator.into_root_schema_for::<T>().to_value());
        Self::form(key, schema)
    }

    /// Creates a gate asking the user to complete a flow at a URL (an OAuth authorization, a
    /// payment, a signature), which the server then confirms with [`UrlFlow::is_complete`].
    ///
    /// # Errors
    ///
    /// [`GateError::EmptyKey`] when `key` is empty.
    pub fn url(key: impl Into<String>, flow: impl UrlFlow) -> Result<Self, GateError> {
        let key = checked_key(key.into())?;
        Ok(Self::new(
            key,
            GateKind::Url {
                flow: Arc::new(flow),
            },
        ))
    }

    fn new(key: String, kind: GateKind) -> Self {
        Self {
            key,
            kind,
            message: None,
            refusal: crate::texts::GATE_REFUSAL.to_owned(),
            predicate: None,
            retry_hint: None,
            incomplete_hint: crate::texts::URL_NOT_FINISHED.to_owned(),
            inject: None,
            binding: None,
            check: None,
            condition: None,
            meta: None,
            refusal_for: None,
            approval_ttl: None,
        }
    }

    /// Sets the message shown to the user, built from the call. Default: `Allow <target>?`.
    pub fn message<F>(mut self, message: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> String + Send + Sync + 'static,
    {
        self.message = Some(Arc::new(message));
        self
    }

    /// Sets the text of the refusal after a decline, a cancel or a failed predicate: the text of a
    /// `tools/call` error result, or the message of the JSON-RPC error for prompts and
    /// resources. Default: `The request was not approved.`
    pub fn refusal(mut self, text: impl Into<String>) -> Self {
        self.refusal = text.into();
        self
    }

    /// Sets the refusal's text built from the call, in place of [`refusal`](Self::refusal)'s:
    /// to name what was refused, or a decision's id a person can quote.
    ///
    /// ```
    /// use tower_elicitation::Gate;
    ///
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .refusal_for(|call| format!("{} was not approved.", call.target()));
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn refusal_for<F>(mut self, refusal: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> String + Send + Sync + 'static,
    {
        self.refusal_for = Some(Arc::new(refusal));
        self
    }

    /// Sets how long the person has to answer the gate's question: the `requestState` sealed
    /// with it holds for at most `ttl` (whole seconds, at least one), so an approval is good only
    /// for a retry that soon. Default: the layer's [`ttl`](crate::ElicitationLayer::ttl); a
    /// longer `ttl` than the layer's changes nothing. Each round asking the gate (again) gets the
    /// same bound.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_elicitation::Gate;
    ///
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .approval_ttl(Duration::from_secs(60));
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        self.approval_ttl = Some(ttl.as_secs().max(1));
        self
    }

    /// Sets members of the question's `_meta`, built from the call: what a host may show or
    /// record beside the question (a decision's id, say). The same call must get the same
    /// members on every round, as the question is sealed with them.
    ///
    /// ```
    /// use serde_json::{Map, Value};
    /// use tower_elicitation::Gate;
    ///
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .meta(|call| {
    ///         let mut meta = Map::new();
    ///         meta.insert("example.com/tool".into(), Value::from(call.target()));
    ///         meta
    ///     });
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn meta<F>(mut self, meta: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> Map<String, Value> + Send + Sync + 'static,
    {
        self.meta = Some(Arc::new(meta));
        self
    }

    /// Sets a condition on the accepted form content (already valid against the schema); when it
    /// returns `false` the call is refused (or, with a [`retry_hint`](Self::retry_hint), asked
    /// again). Form gates only: a URL gate ignores it.
    pub fn require<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&Map<String, Value>, &GateCall<'_>) -> bool + Send + Sync + 'static,
    {
        self.predicate = Some(Arc::new(predicate));
        self
    }

    /// Sets a condition like [`require`](Self::require), on the content deserialized as `T`;
    /// content that does not deserialize is refused.
    pub fn require_as<T, F>(self, predicate: F) -> Self
    where
        T: DeserializeOwned,
        F: Fn(&T, &GateCall<'_>) -> bool + Send + Sync + 'static,
    {
        self.require(move |content, call| {
            serde_json::from_value::<T>(Value::Object(content.clone()))
                .is_ok_and(|typed| predicate(&typed, call))
        })
    }

    /// When the [`require`](Self::require) predicate refuses an answer, asks the question again
    /// instead of refusing the call: the same form, nothing pre-filled, with `text` (such as
    /// `That is not the branch name.`) where a form shows a problem when it has one field (first
    /// in that field's `description`, the message followed by a blank line and `Please correct:`
    /// with the field's title), else after its message and a blank line. It asks again while
    /// the call has rounds left ([`ElicitationLayer::max_rounds`](crate::ElicitationLayer::max_rounds));
    /// the answer after the last one is refused with the [`refusal`](Self::refusal). A decline
    /// or a cancel is still refused at once. Without it, a failed predicate ends the call.
    pub fn retry_hint(mut self, text: impl Into<String>) -> Self {
        self.retry_hint = Some(text.into());
        self
    }

    /// Sets the line a URL gate's question gains when the client accepts it before
    /// [`UrlFlow::is_complete`] says the flow is done: the layer asks again with the same URL,
    /// its message followed by a blank line and `text`. Default: `Not finished yet: complete it
    /// in the browser, then continue.` A form gate ignores it.
    pub fn incomplete_hint(mut self, text: impl Into<String>) -> Self {
        self.incomplete_hint = text.into();
        self
    }

    /// Also delivers the accepted answer inside `params.arguments` under `argument`, so a tool
    /// that takes an ordinary argument can receive it: the form content for a form gate, `true`
    /// for a URL gate. Whatever the client put under that name is replaced.
    pub fn inject_as(mut self, argument: impl Into<String>) -> Self {
        self.inject = Some(argument.into());
        self
    }

    /// Binds an approval to what `binding` says of the call: the definition of the tool the
    /// person was shown, the version of the policy that asked.
    ///
    /// The layer seals a digest of `binding`'s text for the call with the gate's question, and
    /// with every later round's token while the call goes on. On each retry it asks `binding`
    /// again: when the text differs (the tool's definition changed, a reload changed the gate),
    /// the sealed answer is not accepted, and the gate is asked again, its message followed by a
    /// blank line and a line saying that what was approved changed. Nothing reaches the inner
    /// service on the old approval.
    ///
    /// ```
    /// use std::sync::{Arc, RwLock};
    /// use tower_elicitation::Gate;
    ///
    /// let definition = Arc::new(RwLock::new(String::from("v1: writes a file")));
    /// let seen = Arc::clone(&definition);
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .bound_to(move |_call| seen.read().unwrap().clone());
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn bound_to<F>(mut self, binding: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> String + Send + Sync + 'static,
    {
        self.binding = Some(Arc::new(binding));
        self
    }

    /// Sets a check of the call itself, run before the gate is asked and again on every retry:
    /// when it returns `Err(text)`, the call is refused with `text` (a `tools/call` error
    /// result, or a `-32602` error for prompts and resources), nobody is asked, and nothing
    /// reaches the inner service. So nobody approves a call that is bound to fail, such as one
    /// whose arguments the tool's `inputSchema` refuses.
    ///
    /// ```
    /// use tower_elicitation::Gate;
    ///
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .check_call(|call| match call.argument_str("path") {
    ///         Some(_) => Ok(()),
    ///         None => Err("`path` must be a string".to_owned()),
    ///     });
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn check_call<F>(mut self, check: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> Result<(), String> + Send + Sync + 'static,
    {
        self.check = Some(Arc::new(check));
        self
    }

    /// Sets when the gate applies: on each round of a call its target matches, `condition` says
    /// whether the gate asks (`Ok(true)`), stays out of this call as if it were not declared
    /// (`Ok(false)`), or refuses the call with a text (`Err(text)`: nobody is asked and nothing
    /// reaches the inner service). A condition that cannot decide (a value missing, a lookup
    /// failing) should say `Err`: the call then fails closed.
    ///
    /// It runs before [`check_call`](Self::check_call), on every round, with that round's
    /// request (its caller too), so a retry is judged as its first round was. On a retry it runs
    /// again once the `requestState` is verified, then with the call's own
    /// [`handle`](GateCall::handle) (before, the handle is not yet the call's). Two gates of one
    /// key may be declared on the same calls when either has a condition; a call on which both
    /// apply at once is refused (`-32603`), so conditions of one key should not overlap.
    ///
    /// ```
    /// use tower_elicitation::Gate;
    ///
    /// // Asks only for writes under /srv/prod/; a call without a `path` is refused.
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .when(|call| match call.argument_str("path") {
    ///         Some(path) => Ok(path.starts_with("/srv/prod/")),
    ///         None => Err("`path` must be a string".to_owned()),
    ///     });
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn when<F>(mut self, condition: F) -> Self
    where
        F: Fn(&GateCall<'_>) -> Result<bool, String> + Send + Sync + 'static,
    {
        self.condition = Some(Arc::new(condition));
        self
    }

    /// Returns the gate's key in `inputRequests` and `inputResponses`.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn message_for(&self, call: &GateCall<'_>) -> String {
        match &self.message {
            Some(message) => message(call),
            None => crate::texts::gate_message(call.target()),
        }
    }

    /// The digest of what [`bound_to`](Self::bound_to) says of `call`; `None` without it.
    pub(crate) fn binding_for(&self, call: &GateCall<'_>) -> Option<String> {
        let binding = self.binding.as_ref()?;
        Some(crate::token::claims::binding_digest(&binding(call)))
    }

    /// What [`check_call`](Self::check_call) says of `call`.
    pub(crate) fn check(&self, call: &GateCall<'_>) -> Result<(), String> {
        self.check.as_ref().map_or(Ok(()), |check| check(call))
    }

    /// What [`meta`](Self::meta) says of `call`; `None` without it, or when it says nothing.
    pub(crate) fn meta_for(&self, call: &GateCall<'_>) -> Option<Map<String, Value>> {
        self.meta
            .as_ref()
            .map(|meta| meta(call))
            .filter(|meta| !meta.is_empty())
    }

    /// The refusal's text for `call`.
    pub(crate) fn refusal_text(&self, call: &GateCall<'_>) -> String {
        match &self.refusal_for {
            Some(refusal) => refusal(call),
            None => self.refusal.clone(),
        }
    }

    /// What [`when`](Self::when) says of `call`: always `Ok(true)` without a condition.
    pub(crate) fn applies(&self, call: &GateCall<'_>) -> Result<bool, String> {
        self.condition
            .as_ref()
            .map_or(Ok(true), |condition| condition(call))
    }

    /// Whether the gate has a [`when`](Self::when) condition.
    pub(crate) fn is_conditional(&self) -> bool {
        self.condition.is_some()
    }

    pub(crate) fn allows(&self, content: &Map<String, Value>, call: &GateCall<'_>) -> bool {
        self.predicate
            .as_ref()
            .is_none_or(|predicate| predicate(content, call))
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("key", &self.key)
            .field(
                "kind",
                &match self.kind {
                    GateKind::Form { .. } => "form",
                    GateKind::Url { .. } => "url",
                },
            )
            .field("refusal", &self.refusal)
            .field("retry_hint", &self.retry_hint)
            .field("incomplete_hint", &self.incomplete_hint)
            .field("inject", &self.inject)
            .finish_non_exhaustive()
    }
}

fn checked_key(key: String) -> Result<String, GateError> {
    if key.is_empty() {
        Err(GateError::EmptyKey)
    } else {
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::FormSchemaError;
    use crate::wire::mcp::Method;

    #[test]
    fn a_schema_outside_the_subset_names_the_gate_and_gives_its_cause_as_source() {
        use std::error::Error as _;
        let schema = serde_json::json!({"type": "object", "properties": {"x": {"type": "array"}}});
        let error = Gate::form("change", schema).unwrap_err();
        assert!(error.to_string().starts_with("gate `change`: "), "{error}");
        let source = error.source().expect("the schema error is the source");
        let cause = source
            .downcast_ref::<FormSchemaError>()
            .expect("a FormSchemaError");
        assert_eq!(cause.path, "/properties/x");
    }

    #[test]
    fn a_target_shows_what_it_gates_but_not_how_it_is_kept() {
        assert_eq!(
            format!("{:?}", GateTarget::tool("deploy")),
            "GateTarget(Tool(\"deploy\"))"
        );
        assert_eq!(
            format!("{:?}", GateTarget::resource_prefix("file:///secrets/")),
            "GateTarget(ResourcePrefix(\"file:///secrets/\"))"
        );
    }

    /// The spellings among `uris` that `target` does not gate.
    fn ungated<'u>(target: GateTarget, uris: &[&'u str]) -> Vec<&'u str> {
        let target = Target::new(target);
        uris.iter()
            .copied()
            .filter(|uri| !target.matches(Method::ResourcesRead, uri, &mut None))
            .collect()
    }

    const NONE: [&str; 0] = [];

    const SECRET_SPELLINGS: &[&str] = &[
        "file:///secrets/x",
        "FILE:///secrets/x",
        "file:///./secrets/x",
        "file:///a/../secrets/x",
        "file:///%73ecrets/x",
        "file://localhost/secrets/x",
        "file://LOCALHOST/secrets/x",
        "file:///secrets%2Fx",
    ];

    #[test]
    fn a_resource_prefix_gates_every_spelling_of_its_files() {
        let prefix = || GateTarget::resource_prefix("file:///secrets/");
        assert_eq!(ungated(prefix(), SECRET_SPELLINGS), NONE);
        let web = ["HTTPS://Example.COM:443/secrets/x"];
        let web_prefix = GateTarget::resource_prefix("https://example.com/secrets/");
        assert_eq!(ungated(web_prefix, &web), NONE);
        let others = [
            "file:///secretsX/y",
            "file:///public/x",
            "file:///Secrets/x",
        ];
        assert_eq!(ungated(prefix(), &others), others);
    }

    #[test]
    fn a_resource_gates_every_spelling_of_its_uri() {
        let uri = || GateTarget::resource("file:///secrets/x");
        assert_eq!(ungated(uri(), SECRET_SPELLINGS), NONE);
        let others = [
            "file:///secrets/x/y",
            "file:///secrets/",
            "file:///public/x",
        ];
        assert_eq!(ungated(uri(), &others), others);
        let declared_otherwise = GateTarget::resource("FILE://localhost/secrets/%78");
        assert_eq!(ungated(declared_otherwise, SECRET_SPELLINGS), NONE);
    }

    #[test]
    fn tool_and_prompt_names_are_compared_as_they_are() {
        let tool = Target::new(GateTarget::tool("deploy"));
        assert!(tool.matches(Method::ToolsCall, "deploy", &mut None));
        assert!(!tool.matches(Method::ToolsCall, "Deploy", &mut None));
        assert!(!tool.matches(Method::ResourcesRead, "deploy", &mut None));
        let prompt = Target::new(GateTarget::prompt("a/../b"));
        assert!(!prompt.matches(Method::PromptsGet, "b", &mut None));
        let mut uri = None;
        assert!(!tool.matches(Method::ToolsCall, "file:///x", &mut uri));
        assert!(uri.is_none(), "a tool name is never normalized");
    }

    #[test]
    fn overlaps_compare_normalized_targets() {
        let overlap = |a: GateTarget, b: GateTarget| Target::new(a).overlaps(&Target::new(b));
        let secrets = || GateTarget::resource_prefix("file:///secrets/");
        assert!(overlap(
            secrets(),
            GateTarget::resource("FILE:///secrets/x")
        ));
        assert!(overlap(
            GateTarget::resource("file://localhost/secrets/x"),
            secrets()
        ));
        assert!(overlap(
            secrets(),
            GateTarget::resource_prefix("file:///%73ecrets/x/")
        ));
        assert!(overlap(
            GateTarget::resource("file:///a/../x"),
            GateTarget::resource("file:///x")
        ));
        assert!(!overlap(
            secrets(),
            GateTarget::resource_prefix("file:///public/")
        ));
        assert!(!overlap(secrets(), GateTarget::tool("file:///secrets/x")));
    }
}
