//! Declared gates: questions the layer asks before a call may reach the inner service.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use self::pattern::Pattern;
use self::uri::Spellings;
use crate::form::FormSchemaError;
use crate::wire::mcp::Method;

use crate::BoxError;
use crate::util::BoxFuture;
use crate::util::principal::VerifiedCaller;

pub(crate) mod pattern;
pub(crate) mod uri;

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

/// What [`Gate::form`] takes as a schema: JSON text (`&str`, `String`), kept in the order it
/// was written, or a [`Value`], kept in the order the value holds.
///
/// Sealed: only this crate implements it.
pub trait IntoFormSchema: sealed::Sealed {
    #[doc(hidden)]
    fn into_form_schema(self) -> Result<Box<RawValue>, String>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
    impl Sealed for serde_json::Value {}
    impl Sealed for &serde_json::Value {}
}

/// JSON text minified, its members in the order written; refused when it is not one JSON value
/// or repeats a key at any depth.
fn form_schema_text(text: &str) -> Result<Box<RawValue>, String> {
    let raw: Box<RawValue> =
        serde_json::from_str(text).map_err(|error| crate::wire::json::strip_position(&error))?;
    // The canonical pass is the one that finds a repeated key.
    crate::wire::canonical::canonical_raw(&raw).map_err(|error| error.to_string())?;
    crate::wire::canonical::minified_raw(&raw).map_err(|error| error.to_string())
}

impl IntoFormSchema for &str {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(self)
    }
}

impl IntoFormSchema for String {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(&self)
    }
}

impl IntoFormSchema for &String {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(self)
    }
}

impl IntoFormSchema for Value {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        (&self).into_form_schema()
    }
}

impl IntoFormSchema for &Value {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        serde_json::value::to_raw_value(self).map_err(|error| error.to_string())
    }
}

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

/// The call a gate is asked about.
#[derive(Debug, Clone, Copy)]
pub struct GateCall<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) arguments: &'a Value,
    pub(crate) handle: &'a str,
    pub(crate) principal: Option<&'a [u8]>,
    pub(crate) caller: Option<&'a VerifiedCaller>,
}

impl<'a> GateCall<'a> {
    /// Returns the method: `tools/call`, `prompts/get` or `resources/read`.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// Returns the tool or prompt name, or the resource URI.
    pub fn target(&self) -> &'a str {
        self.target
    }

    /// Returns the call's arguments as the client sent them (`null` when there are none).
    pub fn arguments(&self) -> &'a Value {
        self.arguments
    }

    /// Returns one argument.
    pub fn argument(&self, name: &str) -> Option<&'a Value> {
        self.arguments.get(name)
    }

    /// Returns one argument, when it is a string.
    pub fn argument_str(&self, name: &str) -> Option<&'a str> {
        self.argument(name).and_then(Value::as_str)
    }

    /// Returns the caller's identity as the layer took it (what
    /// [`ElicitationLayer::principal_from`](crate::ElicitationLayer::principal_from) returns when
    /// set, else the [`VerifiedCaller`]'s principal, else the `Authorization` header); `None` for
    /// an anonymous caller. A flow can record whose it is.
    pub fn principal(&self) -> Option<&'a [u8]> {
        self.principal
    }

    /// Returns the caller an authenticating layer in front verified for this request (a
    /// [`VerifiedCaller`] in its extensions), with its claims; `None` when there is none. Each
    /// round takes it from that round's own request, never from the sealed `requestState`.
    ///
    /// ```
    /// use tower_elicitation::{Gate, GateCall};
    ///
    /// // Only admins may approve a deploy.
    /// let gate = Gate::form("approval", r#"{"type": "object", "properties": {}}"#)?
    ///     .check_call(|call: &GateCall<'_>| {
    ///         let admin = call.caller().is_some_and(|caller| {
    ///             let roles = caller.claims().get("roles").and_then(|r| r.as_array());
    ///             roles.is_some_and(|roles| roles.iter().any(|role| role == "admin"))
    ///         });
    ///         if admin { Ok(()) } else { Err("Only an admin may deploy.".to_owned()) }
    ///     });
    /// # let _ = gate;
    /// # Ok::<(), tower_elicitation::GateError>(())
    /// ```
    pub fn caller(&self) -> Option<&'a VerifiedCaller> {
        self.caller
    }

    /// Returns an unguessable handle for this call: the same for every round of the same call (a
    /// random nonce drawn on its first round is sealed in its tokens), and different for any
    /// other call, even an identical one by the same caller. It is bound to the method, target,
    /// arguments, gate and principal, keyed with the signing key. URL flows key their state by
    /// it; see [`UrlFlow`] for why a completion should be spent once.
    pub fn handle(&self) -> &'a str {
        self.handle
    }
}

/// An out-of-band flow behind a URL gate, checked on the server.
///
/// The layer asks for the URL when it asks the gate, and checks completion when the client
/// answers `accept`, which means only that the user consented to open it. Until
/// [`is_complete`](Self::is_complete) says so, the layer asks again with the same URL, its
/// message followed by a line saying the flow is not finished ([`Gate::incomplete_hint`]).
///
/// ```
/// use std::collections::HashSet;
/// use std::sync::{Arc, Mutex};
/// use tower_elicitation::{GateCall, UrlFlow};
///
/// #[derive(Clone, Default)]
/// struct Flows {
///     completed: Arc<Mutex<HashSet<String>>>,
/// }
///
/// impl UrlFlow for Flows {
///     async fn url(&self, call: &GateCall<'_>) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
///         Ok(format!("https://auth.example.com/flows/{}", call.handle()))
///     }
///
///     async fn is_complete(&self, call: &GateCall<'_>) -> bool {
///         // Your OAuth callback inserts the handle when the flow succeeds.
///         self.completed.lock().unwrap().contains(call.handle())
///     }
/// }
/// ```
///
#[doc = include_str!("../../docs/url-flows.md")]
pub trait UrlFlow: Send + Sync + 'static {
    /// Returns the URL for this call's flow, creating the flow if it does not exist yet. It must not
    /// carry secrets or pre-authenticated links: the client sees it, and so may others.
    ///
    /// # Errors
    ///
    /// Any error when the URL cannot be made: the layer then answers the call `-32603`, forwards
    /// nothing, and logs the error.
    fn url(&self, call: &GateCall<'_>) -> impl Future<Output = Result<String, BoxError>> + Send;

    /// Returns whether this call's flow has completed. Answer `true` once per handle (take the
    /// completion as you read it): the layer asks again only while the answer is `false`.
    fn is_complete(&self, call: &GateCall<'_>) -> impl Future<Output = bool> + Send;
}

/// A shared flow is the flow it points to: one [`UrlFlow`] behind several gates.
impl<T: UrlFlow + ?Sized> UrlFlow for Arc<T> {
    fn url(&self, call: &GateCall<'_>) -> impl Future<Output = Result<String, BoxError>> + Send {
        T::url(self, call)
    }

    fn is_complete(&self, call: &GateCall<'_>) -> impl Future<Output = bool> + Send {
        T::is_complete(self, call)
    }
}

/// [`UrlFlow`] in a form that can be stored behind `dyn`.
pub(crate) trait ErasedFlow: Send + Sync {
    fn url<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, Result<String, BoxError>>;
    fn is_complete<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, bool>;
}

impl<T: UrlFlow> ErasedFlow for T {
    fn url<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, Result<String, BoxError>> {
        Box::pin(UrlFlow::url(self, call))
    }

    fn is_complete<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, bool> {
        Box::pin(UrlFlow::is_complete(self, call))
    }
}

/// Accepted gate answers, as a request extension for the inner service.
///
/// An axum handler reads it with `Extension<Answers>`; an rmcp handler from the
/// `http::request::Parts` rmcp puts in the request context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    answers: Map<String, Value>,
}

impl Answers {
    pub(crate) fn new(answers: Map<String, Value>) -> Self {
        Self { answers }
    }

    /// Returns the accepted form content of gate `key`, deserialized as `T`.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        let content = self.answers.get(key)?.get("content")?;
        serde_json::from_value(content.clone()).ok()
    }

    /// Returns the answer of gate `key` as an `ElicitResult` (`{"action": "accept", "content": …}`).
    pub fn raw(&self, key: &str) -> Option<&Value> {
        self.answers.get(key)
    }

    /// Returns whether gate `key` was answered (accepted: refused calls never reach the inner service).
    pub fn contains(&self, key: &str) -> bool {
        self.answers.contains_key(key)
    }
}

/// Why a gate could not be declared.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GateError {
    /// A gate key is empty.
    EmptyKey,
    /// A form gate's schema is outside the MCP form subset; the [`FormSchemaError`] (also its
    /// [`source`](std::error::Error::source)) says where and why.
    Schema {
        /// The gate.
        key: String,
        /// Where and why.
        error: FormSchemaError,
    },
    /// A form gate's schema, given as text, is not one JSON value, or repeats a key.
    SchemaText {
        /// The gate.
        key: String,
        /// What is wrong with the text.
        reason: String,
    },
    /// A form gate's schema is inside the subset, but the validator cannot compile it (a `$ref`
    /// that does not resolve, say).
    SchemaCompile {
        /// The gate.
        key: String,
        /// What the validator said.
        reason: String,
    },
    /// Two gates that can apply to the same call share a key.
    DuplicateKey(String),
    /// A glob or resource pattern the matcher cannot honour as written.
    Pattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EmptyKey => f.write_str("a gate key must not be empty"),
            Self::Schema { key, error } => {
                let path = if error.path.is_empty() {
                    "/"
                } else {
                    &error.path
                };
                write!(
                    f,
                    "gate `{key}`: its form schema is outside the MCP form subset at {path}"
                )
            }
            Self::SchemaText { key, reason } => {
                write!(f, "gate `{key}`: its form schema is not JSON: {reason}")
            }
            Self::SchemaCompile { key, reason } => {
                write!(
                    f,
                    "gate `{key}`: its form schema cannot be compiled: {reason}"
                )
            }
            Self::DuplicateKey(key) => write!(
                f,
                "two gates that can apply to the same call share the key `{key}`"
            ),
            Self::Pattern { reason, .. } => write!(f, "pattern {reason}"),
        }
    }
}

impl std::error::Error for GateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Schema { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Turns a schemars root schema into the shape of an MCP form: nullable `Option` fields become
/// plain optional ones, integer formats go, and a `null` default disappears.
#[cfg(feature = "schemars")]
fn flatten_schemars(mut schema: Value) -> Value {
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for property in properties.values_mut() {
            let Some(object) = property.as_object_mut() else {
                continue;
            };
            // `Option<T>`: `"type": ["T", "null"]` …
            if let Some(Value::Array(types)) = object.get("type") {
                let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                if let [only] = non_null[..] {
                    let only = only.clone();
                    object.insert("type".into(), only);
                }
            }
            // … or `"anyOf": [{…}, {"type": "null"}]`.
            if let Some(Value::Array(variants)) = object.get("anyOf") {
                let non_null: Vec<&Value> = variants
                    .iter()
                    .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                if let ([Value::Object(only)], true) =
                    (&non_null[..], non_null.len() < variants.len())
                {
                    let only = only.clone();
                    // `retain`, not `remove`: it keeps the other members in order whether or
                    // not serde_json preserves it (`remove` is `swap_remove` when it does).
                    object.retain(|key, _| key != "anyOf");
                    for (k, v) in only {
                        object.entry(k).or_insert(v);
                    }
                }
            }
            if object.get("default") == Some(&Value::Null) {
                object.retain(|key, _| key != "default");
            }
            let numeric = matches!(
                object.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            );
            if numeric {
                object.retain(|key, _| key != "format");
            }
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

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
