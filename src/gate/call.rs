//! The call a gate is asked about ([`GateCall`]), and the accepted answers the inner service
//! gets ([`Answers`]).

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::util::principal::VerifiedCaller;

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
    /// it; see [`UrlFlow`](super::UrlFlow) for why a completion should be spent once.
    pub fn handle(&self) -> &'a str {
        self.handle
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
