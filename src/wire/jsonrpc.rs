//! JSON-RPC envelopes: the borrowed peek, the strict parse of an MRTR call, the rewrite of its
//! params, the error table, and the one reply builder every wing answers with ([`Reply`], its
//! kinds and their HTTP statuses; [`response`] and [`RpcError`] for a message as a value).

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

use http::StatusCode;
use memchr::memmem::Finder;
use serde::Serialize;
use serde::de;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

pub(crate) use super::edit::with_members;
use super::edit::{comma, write_json, write_key};
use super::json::{BorrowedStr, Object, ObjectOr, StrictValue, duplicate, strip_position};
use super::mcp::{Declared, Method, TaskMethod};

/// Invalid JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// Not a valid request object (batches with MRTR methods, duplicated keys).
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// Invalid params: bad `requestState`, malformed `inputResponses`.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// The layer could not produce a valid answer.
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// The request needs a client capability that it did not declare.
pub(crate) const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// A server error of the 2025-era session layer: too many sessions, a store that cannot be
/// reached, a request the bridge cannot serve.
pub(crate) const SERVER_ERROR: i64 = -32000;
/// The session named by `Mcp-Session-Id` does not exist (or is not the caller's).
pub(crate) const SESSION_NOT_FOUND: i64 = -32001;

/// A JSON-RPC reply a wing makes itself, with what kind of answer it is: the transport frames
/// it (the HTTP adapter picks the status with [`ReplyKind::status`]), the engine only says what
/// happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) kind: ReplyKind,
    pub(crate) body: Vec<u8>,
}

/// What a reply of the crate's own is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyKind {
    /// An answer to the call in the protocol's own terms: a result (an ask, a re-ask, a gate's
    /// refusal) or a JSON-RPC error about its params or its state.
    Answer,
    /// The request cannot be read as one the layer can judge.
    BadRequest,
    /// The request names a host or an origin the bridge does not answer to.
    Forbidden,
    /// The session the request names does not exist (or is not the caller's).
    SessionNotFound,
    /// The call needs a client capability it did not declare.
    MissingCapability,
    /// The request body is over the limit.
    TooLarge,
    /// The request body is encoded, so the layer cannot see inside it.
    Encoded,
    /// The inner service's answer could not be read or used.
    InnerFailed,
    /// What the call depends on (the store of single-use token ids, the bridge's sessions)
    /// cannot be reached now.
    Unavailable,
}

impl ReplyKind {
    /// Whether the reply can stand where the inner service's answer would have (inside an event
    /// stream, say); every other kind answers the request on its own.
    pub(crate) fn in_band(self) -> bool {
        self == Self::Answer
    }

    /// The kind of an answer carrying a JSON-RPC error `code`: a capability the client did not
    /// declare (`-32021`) is a request the client must change, any other an answer in band.
    pub(crate) fn of_code(code: Option<i64>) -> Self {
        if code == Some(MISSING_REQUIRED_CLIENT_CAPABILITY) {
            Self::MissingCapability
        } else {
            Self::Answer
        }
    }

    /// The kind of a JSON-RPC response `message` made as a value: by its error's code
    /// ([`of_code`](Self::of_code)), an answer when it has none.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(crate) fn of_response(message: &Value) -> Self {
        let code = message
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_i64);
        Self::of_code(code)
    }

    /// The HTTP status a reply of this kind goes out with: the one mapping of every wing.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Self::Answer => StatusCode::OK,
            Self::BadRequest | Self::MissingCapability => StatusCode::BAD_REQUEST,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Encoded => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::InnerFailed => StatusCode::BAD_GATEWAY,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A JSON-RPC error object (`code`, `message`, perhaps `data`): one the crate makes, or one a
/// peer (the inner service, an upstream server) answered, passed on as it came.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RpcError {
    /// An error of the crate's own ([`new`](Self::new), [`with_data`](Self::with_data)).
    Own {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// A peer's error object, passed on unchanged, whatever its shape
    /// ([`relayed`](Self::relayed)).
    Relayed(Value),
}

impl RpcError {
    /// An error of the crate's own.
    pub(crate) fn new(code: i64, message: &str) -> Self {
        Self::Own {
            code,
            message: message.to_owned(),
            data: None,
        }
    }

    /// The error with `data` beside its code and message (a peer's error is left as it came).
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(crate) fn with_data(mut self, data: Value) -> Self {
        if let Self::Own { data: slot, .. } = &mut self {
            *slot = Some(data);
        }
        self
    }

    /// A peer's error object, passed on unchanged (whatever its shape).
    pub(crate) fn relayed(error: Value) -> Self {
        Self::Relayed(error)
    }

    /// The error's code, when it has an integer one.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(crate) fn code(&self) -> Option<i64> {
        match self {
            Self::Own { code, .. } => Some(*code),
            Self::Relayed(error) => error.get("code").and_then(Value::as_i64),
        }
    }

    /// The error's message, when it has a text one.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(crate) fn message(&self) -> Option<&str> {
        match self {
            Self::Own { message, .. } => Some(message),
            Self::Relayed(error) => error.get("message").and_then(Value::as_str),
        }
    }

    /// The error object as it goes on the wire.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Own {
                code,
                message,
                data,
            } => {
                let mut error = json!({"code": code, "message": message});
                if let (Some(data), Value::Object(members)) = (data, &mut error) {
                    members.insert("data".to_owned(), data);
                }
                error
            }
            Self::Relayed(error) => error,
        }
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.clone().into_value(), f)
    }
}

/// A JSON-RPC response to `id`, as a value: its result, or its error.
pub(crate) fn response(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    // Built member by member: `json!` would copy the result (a whole tool result) through
    // `to_value`, where it can be moved.
    let (name, member) = match outcome {
        Ok(result) => ("result", result),
        Err(error) => ("error", error.into_value()),
    };
    let mut message = Map::with_capacity(3);
    message.insert("jsonrpc".to_owned(), Value::from("2.0"));
    message.insert("id".to_owned(), id.clone());
    message.insert(name.to_owned(), member);
    Value::Object(message)
}

impl Reply {
    /// A whole JSON-RPC message made as a value ([`response`]), of the kind given.
    pub(crate) fn message(kind: ReplyKind, message: &Value) -> Self {
        Self {
            kind,
            body: serde_json::to_vec(message).unwrap_or_default(),
        }
    }

    /// A JSON-RPC response made as a value, of the kind its error's code says
    /// ([`ReplyKind::of_response`]): an answer, or a refusal for a capability.
    #[cfg_attr(not(feature = "upstream"), allow(dead_code))]
    pub(crate) fn by_code(message: &Value) -> Self {
        Self::message(ReplyKind::of_response(message), message)
    }

    /// A JSON-RPC error reply.
    pub(crate) fn error(
        kind: ReplyKind,
        id: Option<&RawValue>,
        code: i64,
        message: &str,
        data: Option<Value>,
    ) -> Self {
        #[derive(Serialize)]
        struct Error<'a> {
            code: i64,
            message: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<Value>,
        }
        #[derive(Serialize)]
        struct Envelope<'a> {
            jsonrpc: &'static str,
            id: &'a RawValue,
            error: Error<'a>,
        }
        let null = null_id();
        let envelope = Envelope {
            jsonrpc: "2.0",
            id: id.unwrap_or(&null),
            error: Error {
                code,
                message,
                data,
            },
        };
        Self {
            kind,
            body: serde_json::to_vec(&envelope).unwrap_or_default(),
        }
    }

    /// The layer's `-32603 Internal error`, an answer in band: what went wrong goes to `tracing`.
    pub(crate) fn internal(id: Option<&RawValue>) -> Self {
        Self::error(
            ReplyKind::Answer,
            id,
            INTERNAL_ERROR,
            "Internal error",
            None,
        )
    }

    /// A JSON-RPC result reply, in band.
    pub(crate) fn result<R: Serialize + ?Sized>(id: Option<&RawValue>, result: &R) -> Self {
        #[derive(Serialize)]
        struct Envelope<'a, R: ?Sized> {
            jsonrpc: &'static str,
            id: &'a RawValue,
            result: &'a R,
        }
        let null = null_id();
        let envelope = Envelope {
            jsonrpc: "2.0",
            id: id.unwrap_or(&null),
            result,
        };
        Self {
            kind: ReplyKind::Answer,
            body: serde_json::to_vec(&envelope).unwrap_or_default(),
        }
    }
}

fn null_id() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

/// A JSON-RPC result message: `result`'s members as they came (raw), but for `inputRequests`
/// (the member given as `None`), written from `requests`, and `requestState`, which becomes
/// `state` (a sealed token).
pub(crate) fn result_with_state(
    id: Option<&RawValue>,
    result: &[(Cow<'_, str>, Option<&RawValue>)],
    requests: &indexmap::IndexMap<String, Box<RawValue>>,
    state: &str,
) -> Vec<u8> {
    let size = |(k, v): (&str, &str)| k.len() + v.len() + 4;
    let mut out = Vec::with_capacity(
        64 + state.len()
            + result
                .iter()
                .filter_map(|(k, v)| Some(size((k, v.as_ref()?.get()))))
                .sum::<usize>()
            + requests
                .iter()
                .map(|(k, v)| size((k, v.get())))
                .sum::<usize>(),
    );
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.map_or("null", RawValue::get).as_bytes());
    out.extend_from_slice(b",\"result\":{");
    let mut first = true;
    for (key, raw) in result.iter().filter(|(key, _)| key != "requestState") {
        comma(&mut out, &mut first);
        write_key(&mut out, key);
        match raw {
            Some(raw) => out.extend_from_slice(raw.get().as_bytes()),
            None => {
                out.push(b'{');
                let mut first = true;
                for (key, request) in requests {
                    comma(&mut out, &mut first);
                    write_key(&mut out, key);
                    out.extend_from_slice(request.get().as_bytes());
                }
                out.push(b'}');
            }
        }
    }
    comma(&mut out, &mut first);
    write_key(&mut out, "requestState");
    // A sealed token is base64url and dots: it needs no escaping.
    debug_assert!(
        state
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    );
    out.push(b'"');
    out.extend_from_slice(state.as_bytes());
    out.push(b'"');
    out.extend_from_slice(b"}}");
    out
}

/// What the borrowed peek found in a POST body.
#[derive(Debug)]
pub(crate) enum Peek<'a> {
    /// A single request of one of the three MRTR methods, read in the same pass.
    Call(Call<'a>),
    /// A single request of a task method the layer judges, read as strictly.
    Task(Call<'a, TaskMethod>),
    /// Anything the layer does not act on: other methods, notifications, responses, arrays
    /// without MRTR methods. Forwarded with the original bytes.
    Other,
    /// A batch that carries an MRTR method (or an element the peek cannot read).
    Batch,
    /// Not JSON, or an envelope with a duplicated or mistyped standard key.
    Invalid { code: i64, message: &'static str },
    /// An MRTR call the layer refuses as it is: a repeated key, or `params` not an object.
    Refuse(Reply),
}

/// Whether `body` certainly names none of the three MRTR methods, in any way a JSON parser
/// could read it: it is UTF-8, spells none of them out, and has no escape (`\/`, `\u0074`) or NUL
/// (UTF-16 or UTF-32 text) that could hide one. Such a body is forwarded without a parse.
pub(crate) fn names_no_mrtr_method(body: &[u8]) -> bool {
    !spells_an_mrtr_method(body)
        && memchr::memchr2(b'\\', 0, body).is_none()
        && std::str::from_utf8(body).is_ok()
}

/// Whether `tools/call`, `prompts/get`, `resources/read` or a task method the layer judges
/// (`tasks/get`, `tasks/update`, `tasks/cancel`) occurs in `body`: one pass over its `s/` pairs,
/// each checked for a method name around it.
fn spells_an_mrtr_method(body: &[u8]) -> bool {
    // Each of those names ends in `s` before its slash: one search for `s/` passes over every
    // other slash (a URL's, a `_meta` key's `io.modelcontextprotocol/`) without stopping.
    static S_SLASH: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"s/"));
    S_SLASH.find_iter(body).any(|s| {
        let (before, after) = body.split_at(s + 1);
        (before.ends_with(b"tools") && after.starts_with(b"/call"))
            || (before.ends_with(b"prompts") && after.starts_with(b"/get"))
            || (before.ends_with(b"resources") && after.starts_with(b"/read"))
            || (before.ends_with(b"tasks")
                && (after.starts_with(b"/get")
                    || after.starts_with(b"/update")
                    || after.starts_with(b"/cancel")))
    })
}

/// Reads a POST body in one borrowed pass: its method and, for an MRTR call, every field of the
/// envelope and of `params` as raw text. No tree is built.
pub(crate) fn peek(body: &[u8]) -> Peek<'_> {
    const PARSE: Peek<'static> = Peek::Invalid {
        code: PARSE_ERROR,
        message: "Parse error",
    };
    const INVALID: Peek<'static> = Peek::Invalid {
        code: INVALID_REQUEST,
        message: "Invalid Request",
    };
    // JSON is UTF-8 (RFC 8259); serde skips unread strings without checking them, so check here.
    let Ok(body) = std::str::from_utf8(body) else {
        return PARSE;
    };
    let first = body.bytes().find(|b| !b.is_ascii_whitespace());
    if first == Some(b'[') {
        return match serde_json::from_str::<Vec<&RawValue>>(body) {
            Err(_) => PARSE,
            Ok(items) => {
                let dangerous = items.iter().any(|item| {
                    let text = item.get().trim_start();
                    text.starts_with('{')
                        && match Object::read(text, &[]) {
                            Ok(ObjectOr::Object(message)) => {
                                !matches!(method(&message), Ok(None | Some(None)))
                                    || task_method(&message).is_some()
                            }
                            _ => true,
                        }
                });
                if dangerous { Peek::Batch } else { Peek::Other }
            }
        };
    }
    if first != Some(b'{') {
        // A scalar is valid JSON but no request; let the inner service say so.
        return match serde_json::from_str::<de::IgnoredAny>(body) {
            Ok(_) => Peek::Other,
            Err(_) => PARSE,
        };
    }
    let message = match Object::read(body, &["params"]) {
        Ok(ObjectOr::Object(message)) => message,
        Err(e) if e.is_syntax() || e.is_eof() => return PARSE,
        _ => return INVALID,
    };
    let method = match method(&message) {
        Ok(Some(Some(method))) => Ok(method),
        Ok(Some(None)) => match task_method(&message) {
            Some(task) => Err(task),
            None => return Peek::Other,
        },
        Ok(None) => return Peek::Other,
        Err(()) => return INVALID,
    };
    let id = message.get("id");
    if matches!(message.nested(), ObjectOr::NotObject) {
        return Peek::Refuse(Reply::error(
            ReplyKind::Answer,
            id,
            INVALID_PARAMS,
            "Invalid params: params must be an object",
            None,
        ));
    }
    let repeated = message.repeated().or_else(|| match message.nested() {
        ObjectOr::Object(params) => params.repeated(),
        _ => None,
    });
    if let Some(key) = repeated {
        let message = format!("Invalid Request: duplicate key {key:?}");
        return Peek::Refuse(Reply::error(
            ReplyKind::BadRequest,
            id,
            INVALID_REQUEST,
            &message,
            None,
        ));
    }
    match method {
        Ok(method) => Peek::Call(Call {
            method,
            id,
            message,
            len: body.len(),
        }),
        Err(method) => Peek::Task(Call {
            method,
            id,
            message,
            len: body.len(),
        }),
    }
}

/// The task method a message names, if it names one the layer judges (its `method` was read
/// once by [`method`] already).
fn task_method(message: &Object<'_>) -> Option<TaskMethod> {
    let raw = message.get("method")?;
    let method = serde_json::from_str::<BorrowedStr<'_>>(raw.get()).ok()?;
    TaskMethod::parse(&method.0)
}

/// The method a message names: `None` when it names none (no `method`, or `null`), `Some(None)`
/// when it is not one of the three MRTR methods. `Err` when it cannot be read one way only: a
/// standard member given twice, or a `method` that is not a string.
fn method(message: &Object<'_>) -> Result<Option<Option<Method>>, ()> {
    // The members any JSON-RPC reader looks at may not be read two ways, whatever the method.
    for standard in ["id", "method", "params", "jsonrpc"] {
        if message
            .members()
            .iter()
            .filter(|(key, _)| key == standard)
            .count()
            > 1
        {
            return Err(());
        }
    }
    match message.get("method") {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => serde_json::from_str::<BorrowedStr<'_>>(raw.get())
            .map(|method| Some(Method::parse(&method.0)))
            .map_err(drop),
    }
}

/// An MRTR call, read strictly: every key the layer reads is unique at every level, and every
/// field the layer does not change keeps its original bytes.
#[derive(Debug)]
pub(crate) struct Call<'a, M = Method> {
    pub(crate) method: M,
    pub(crate) id: Option<&'a RawValue>,
    /// The envelope as it came, with `params` read as an object.
    message: Object<'a>,
    /// The length of the body it was read from.
    len: usize,
}
/// A field of `params`, parsed strictly into a `Value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Field {
    Absent,
    Present(Value),
}

impl Field {
    pub(crate) fn as_ref(&self) -> Option<&Value> {
        match self {
            Self::Absent => None,
            Self::Present(v) => Some(v),
        }
    }
}

/// What `params._meta` says about the call.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    /// `io.modelcontextprotocol/protocolVersion`, when it is a string.
    pub(crate) version: Option<String>,
    /// What `io.modelcontextprotocol/clientCapabilities` declares.
    pub(crate) declared: Declared,
}

/// The names of the two `params._meta` entries the layer reads.
const VERSION: &str = super::mcp::meta::PROTOCOL_VERSION;
const CAPABILITIES: &str = super::mcp::meta::CLIENT_CAPABILITIES;

/// The two entries of `params._meta` the layer reads, as the raw text they came in: a [`Meta`] is
/// a function of these two texts alone, whatever else `_meta` carries (client info, a progress
/// token, …), which is skipped without building anything.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MetaMembers<'a> {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub(crate) version: Option<&'a RawValue>,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub(crate) capabilities: Option<&'a RawValue>,
}

impl<'a> MetaMembers<'a> {
    /// Finds the two entries in the text of `params._meta` in one borrowed pass, skipping the
    /// rest; either one given twice is refused. Anything but an object has neither.
    pub(crate) fn find(text: &'a str) -> Result<Self, Malformed> {
        let meta = match Object::read(text, &[]) {
            Ok(ObjectOr::Object(meta)) => meta,
            Ok(_) => return Ok(Self::default()),
            Err(e) => return Err(meta_error(&strip_position(&e))),
        };
        let read = [VERSION, CAPABILITIES];
        let keys = meta.members().iter().map(|(key, _)| key.as_ref());
        if let Some(name) = duplicate(keys.filter(|key| read.contains(key))) {
            return Err(meta_error(&format!("duplicate field `{name}`")));
        }
        Ok(Self {
            version: meta.get(VERSION),
            capabilities: meta.get(CAPABILITIES),
        })
    }

    /// What the two entries say, each parsed strictly (a key repeated inside one is refused).
    pub(crate) fn read(&self) -> Result<Meta, Malformed> {
        let strict = |raw: Option<&RawValue>| match raw {
            None => Ok(None),
            Some(raw) => serde_json::from_str::<Option<StrictValue>>(raw.get())
                .map_err(|e| meta_error(&strip_position(&e))),
        };
        Ok(Meta {
            version: match strict(self.version)? {
                Some(StrictValue(Value::String(version))) => Some(version),
                _ => None,
            },
            declared: strict(self.capabilities)?
                .map_or_else(Declared::default, |StrictValue(capabilities)| {
                    Declared::of(&capabilities)
                }),
        })
    }
}

fn meta_error(why: &str) -> Malformed {
    Malformed {
        code: INVALID_REQUEST,
        message: format!("Invalid Request: params._meta: {why}"),
    }
}

/// Why a body could not be parsed as an MRTR call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl Malformed {
    /// The layer's answer to the call `id` it could not parse: a JSON-RPC error, HTTP 400.
    pub(crate) fn reply(&self, id: Option<&RawValue>) -> Reply {
        Reply::error(ReplyKind::BadRequest, id, self.code, &self.message, None)
    }
}

impl<'a, M> Call<'a, M> {
    /// A field of `params`, parsed strictly (duplicate keys at any depth are refused).
    pub(crate) fn field(&self, name: &str) -> Result<Field, Malformed> {
        let Some(raw) = self.raw_field(name) else {
            return Ok(Field::Absent);
        };
        serde_json::from_str::<StrictValue>(raw.get())
            .map(|s| Field::Present(s.0))
            .map_err(|e| Malformed {
                code: INVALID_REQUEST,
                message: format!("Invalid Request: params.{name}: {}", strip_position(&e)),
            })
    }

    /// A field of `params` as gates see it: parsed as [`field`](Self::field) does, except that a
    /// number no `f64` can hold (`1e400`) is `null` in the view, so that gating a tool never
    /// changes which arguments are accepted (the arguments' digest binds such numbers as written,
    /// and the inner service receives them as sent).
    pub(crate) fn gate_view(&self, name: &str) -> Result<Field, Malformed> {
        let strict = self.field(name);
        if strict.is_ok() {
            return strict;
        }
        match self
            .raw_field(name)
            .map(|raw| unrepresentable_numbers_as_null(raw.get()))
        {
            Some(Cow::Owned(text)) => serde_json::from_str::<StrictValue>(&text)
                .map(|s| Field::Present(s.0))
                .or(strict),
            _ => strict,
        }
    }

    /// `params.requestState`: absent or `null` is `None`; anything but a string is `Err`.
    pub(crate) fn state(&self) -> Result<Option<Cow<'a, str>>, ()> {
        match self.raw_field("requestState") {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => {
                let text = raw.get();
                // The peek read it as JSON: a string without a backslash is its own text
                // between the quotes (tokens are), which spares a second pass over it.
                if let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"'))
                    && memchr::memchr(b'\\', inner.as_bytes()).is_none()
                {
                    return Ok(Some(Cow::Borrowed(inner)));
                }
                serde_json::from_str::<BorrowedStr<'a>>(text)
                    .map(|s| Some(s.0))
                    .map_err(drop)
            }
        }
    }

    /// A field of `params`, unparsed.
    pub(crate) fn raw_field(&self, name: &str) -> Option<&'a RawValue> {
        match self.message.nested() {
            ObjectOr::Object(params) => params.get(name),
            _ => None,
        }
    }

    /// The body with `params.requestState` and `params.inputResponses` replaced (`None`: removed)
    /// and `params.arguments` replaced by the JSON text `arguments` when it is given. Every other
    /// byte of every other field is kept.
    pub(crate) fn rewrite(
        &self,
        request_state: Option<&str>,
        input_responses: Option<&Map<String, Value>>,
        arguments: Option<&str>,
    ) -> Vec<u8> {
        // A large body gets room for all of it and what goes in, so that the buffer is never
        // grown: growing it copies what was written (64 KiB of arguments, twice). A small one
        // starts small, which costs less than one large allocation.
        let capacity = if self.len > 4096 {
            self.len
                + 64
                + arguments.map_or(0, str::len)
                + request_state.map_or(0, str::len)
                + input_responses.map_or(0, |_| 512)
        } else {
            512
        };
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        let mut first = true;
        for (key, raw) in self.message.members() {
            comma(&mut out, &mut first);
            write_key(&mut out, key);
            match (raw, self.message.nested()) {
                (Some(raw), _) => out.extend_from_slice(raw.get().as_bytes()),
                (None, ObjectOr::Object(params)) => {
                    out.push(b'{');
                    let mut first = true;
                    for (key, raw) in params.members() {
                        // `params` is read to its own members only: each has its text.
                        let Some(raw) = raw else { continue };
                        let replaced = match key.as_ref() {
                            "requestState" | "inputResponses" => true,
                            "arguments" => arguments.is_some(),
                            _ => false,
                        };
                        if !replaced {
                            comma(&mut out, &mut first);
                            write_key(&mut out, key);
                            out.extend_from_slice(raw.get().as_bytes());
                        }
                    }
                    if let Some(arguments) = arguments {
                        comma(&mut out, &mut first);
                        write_key(&mut out, "arguments");
                        out.extend_from_slice(arguments.as_bytes());
                    }
                    if let Some(responses) = input_responses {
                        comma(&mut out, &mut first);
                        write_key(&mut out, "inputResponses");
                        write_json(&mut out, responses);
                    }
                    if let Some(state) = request_state {
                        comma(&mut out, &mut first);
                        write_key(&mut out, "requestState");
                        write_json(&mut out, state);
                    }
                    out.push(b'}');
                }
                // `params: null` (the peek refused any other non-object).
                (None, _) => out.extend_from_slice(b"null"),
            }
        }
        out.push(b'}');
        out
    }
}

/// `text` (JSON) with every number that no `f64` can hold written as `null`; borrowed when it has
/// none.
fn unrepresentable_numbers_as_null(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'"' => {
                at += 1;
                while at < bytes.len() && bytes[at] != b'"' {
                    at += if bytes[at] == b'\\' { 2 } else { 1 };
                }
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = at;
                while at < bytes.len()
                    && matches!(bytes[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    at += 1;
                }
                let number = &text[start..at];
                if number.parse::<f64>().is_ok_and(|n| !n.is_finite()) {
                    let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
                    out.push_str(&text[copied..start]);
                    out.push_str("null");
                    copied = at;
                }
            }
            _ => at += 1,
        }
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_of_our_own_and_a_peers_go_out_as_written() {
        let own = RpcError::new(MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing")
            .with_data(json!({"requiredCapabilities": {"elicitation": {}}}));
        assert_eq!(own.code(), Some(-32021));
        let message = response(&json!(3), Err(own));
        assert_eq!(
            message,
            json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32021, "message": "Missing",
                "data": {"requiredCapabilities": {"elicitation": {}}}}})
        );
        assert_eq!(
            ReplyKind::of_response(&message),
            ReplyKind::MissingCapability
        );
        assert_eq!(
            Reply::by_code(&message).kind.status(),
            StatusCode::BAD_REQUEST
        );
        // A peer's error keeps its shape, odd members and all; data is not added to it.
        let odd = json!({"code": "x", "message": 5, "extra": true});
        let peer = RpcError::relayed(odd.clone()).with_data(json!(1));
        assert_eq!((peer.code(), peer.message()), (None, None));
        let message = response(&Value::Null, Err(peer));
        assert_eq!(message["error"], odd);
        assert_eq!(ReplyKind::of_response(&message), ReplyKind::Answer);
        assert_eq!(
            response(&json!("a"), Ok(json!({}))),
            json!({"jsonrpc": "2.0", "id": "a", "result": {}})
        );
    }

    #[test]
    fn each_kind_of_reply_has_one_status() {
        let statuses = [
            (ReplyKind::Answer, 200),
            (ReplyKind::BadRequest, 400),
            (ReplyKind::MissingCapability, 400),
            (ReplyKind::Forbidden, 403),
            (ReplyKind::SessionNotFound, 404),
            (ReplyKind::TooLarge, 413),
            (ReplyKind::Encoded, 415),
            (ReplyKind::InnerFailed, 502),
            (ReplyKind::Unavailable, 503),
        ];
        for (kind, status) in statuses {
            assert_eq!(kind.status().as_u16(), status, "{kind:?}");
            assert_eq!(kind.in_band(), kind == ReplyKind::Answer);
        }
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn meta_is_read_from_its_two_entries_alone() {
        let read = |text: &str| {
            MetaMembers::find(text)
                .and_then(|members| members.read())
                .map(|m| (m.version, m.declared))
        };
        let form = read(r#"{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#);
        let (version, declared) = read(
            r#"{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28",
              "io.modelcontextprotocol/clientInfo":{"name":"x"},"progressToken":8,
              "io.modelcontextprotocol/client\u0043apabilities":{"elicitation":{}}}"#,
        )
        .unwrap();
        assert_eq!(version.as_deref(), Some("2026-07-28"));
        assert_eq!(declared, form.unwrap().1);
        for text in ["null", "[]", "1", r#""x""#] {
            assert_eq!(read(text).unwrap(), (None, Declared::default()), "{text}");
        }
        let members =
            MetaMembers::find(r#"{"a":1,"io.modelcontextprotocol/protocolVersion" : "v" ,"b":{}}"#)
                .unwrap();
        assert_eq!(members.version.map(RawValue::get), Some(r#""v""#));
        assert!(members.capabilities.is_none());

        for (text, message) in [
            (
                r#"{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{}}"#,
                "Invalid Request: params._meta: duplicate field `io.modelcontextprotocol/clientCapabilities`",
            ),
            (
                r#"{"io.modelcontextprotocol/protocolVersion":"a","x":1,"io.modelcontextprotocol/protocolVersion":"a"}"#,
                "Invalid Request: params._meta: duplicate field `io.modelcontextprotocol/protocolVersion`",
            ),
            (
                r#"{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"elicitation":{}}}"#,
                r#"Invalid Request: params._meta: duplicate key "elicitation""#,
            ),
        ] {
            let refused = read(text).unwrap_err();
            assert_eq!(refused.code, INVALID_REQUEST, "{text}");
            assert_eq!(refused.message, message, "{text}");
        }
    }

    #[test]
    fn injected_members_leave_every_other_byte_as_sent() {
        let set = [("approval", json!({"approve": true}))];
        let cases = [
            // (arguments as sent, as the inner service receives them)
            (r#"{}"#, r#"{"approval":{"approve":true}}"#),
            (r#"{ }"#, r#"{ "approval":{"approve":true}}"#),
            (
                r#"{"n": 18446744073709551617, "x":1e400 }"#,
                r#"{"n": 18446744073709551617, "x":1e400 ,"approval":{"approve":true}}"#,
            ),
            (
                r#"{"approval":"forged","n":1.50}"#,
                r#"{"n":1.50,"approval":{"approve":true}}"#,
            ),
            (
                r#"{"a":"x\"approval\"", "approval" : [1,2] , "b":{"c":2}}"#,
                r#"{"a":"x\"approval\"", "b":{"c":2},"approval":{"approve":true}}"#,
            ),
            (
                r#"{"a":1,"approval":null}"#,
                r#"{"a":1,"approval":{"approve":true}}"#,
            ),
            (r#"{"approval":1}"#, r#"{"approval":{"approve":true}}"#),
            (
                r#"{"approval":1,"z":"é"}"#,
                r#"{"z":"é","approval":{"approve":true}}"#,
            ),
        ];
        for (sent, received) in cases {
            let out = with_members(Some(&raw(sent)), &set);
            assert_eq!(out, received, "{sent}");
            // JSON, with no key twice.
            assert!(
                crate::wire::canonical::write_canonical(&out, &mut Vec::new()).is_ok(),
                "{out}"
            );
        }
        // Not an object, or absent: an object of the injected members alone.
        for sent in [None, Some(raw("null")), Some(raw("[1]")), Some(raw("7"))] {
            assert_eq!(
                with_members(sent.as_deref(), &set),
                r#"{"approval":{"approve":true}}"#
            );
        }
        // Two injected members, the last two sent.
        let two = [("a", json!(1)), ("b", json!(2))];
        assert_eq!(
            with_members(Some(&raw(r#"{"k":0, "a":9, "b":9}"#)), &two),
            r#"{"k":0,"a":1,"b":2}"#
        );
        assert_eq!(
            with_members(Some(&raw(r#"{"a":9, "b":9, "k":0}"#)), &two),
            r#"{"k":0,"a":1,"b":2}"#
        );
    }

    #[test]
    fn a_gate_view_reads_numbers_no_f64_can_hold_as_null() {
        assert_eq!(
            unrepresentable_numbers_as_null(r#"{"a":1e400,"b":"1e400","c":[-1E+999,2.5e3]}"#),
            r#"{"a":null,"b":"1e400","c":[null,2.5e3]}"#
        );
        assert!(matches!(
            unrepresentable_numbers_as_null(r#"{"a":18446744073709551617,"b":"\"1e400"}"#),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn peek_finds_mrtr_methods_without_parsing_params() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
        match peek(body) {
            Peek::Call(call) => {
                assert_eq!(call.method, Method::ToolsCall);
                assert_eq!(call.id.unwrap().get(), "7");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            peek(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Peek::Other
        ));
        assert!(matches!(
            peek(br#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#),
            Peek::Call(_)
        ));
        assert!(matches!(peek(b"42"), Peek::Other));
        assert!(matches!(
            peek(br#"{"id":1,"method":"tools/call","params":[1]}"#),
            Peek::Refuse(Reply {
                kind: ReplyKind::Answer,
                ..
            })
        ));
        assert!(matches!(
            peek(br#"{"id":1,"method":"tools/list","params":{"a":1,"a":2}}"#),
            Peek::Other
        ));
        assert!(matches!(
            peek(br#"{"id":1,"method":null,"result":"tools/call"}"#),
            Peek::Other
        ));
    }

    #[test]
    fn the_request_state_is_read_as_json_reads_it() {
        let state = |value: &str| {
            let body =
                format!(r#"{{"id":1,"method":"tools/call","params":{{"requestState":{value}}}}}"#);
            match peek(body.as_bytes()) {
                Peek::Call(call) => call.state().map(|s| s.map(Cow::into_owned)),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            state(r#""v1.k1.abc.def""#),
            Ok(Some("v1.k1.abc.def".into()))
        );
        assert_eq!(state(r#""""#), Ok(Some(String::new())));
        assert_eq!(
            state(r#""v1\u002ek1\/x\"""#),
            Ok(Some(r#"v1.k1/x""#.into()))
        );
        assert_eq!(state(r#""\\""#), Ok(Some("\\".into())));
        assert_eq!(state("null"), Ok(None));
        assert_eq!(state("7"), Err(()));
        assert_eq!(state(r#"["a"]"#), Err(()));
        assert_eq!(state(r#"{"a":"b"}"#), Err(()));
    }

    #[test]
    fn peek_refuses_what_could_be_read_two_ways() {
        for body in [
            r#"{"id":1,"method":"tools/list","method":"tools/call"}"#,
            r#"{"id":1,"method":"tools/call","params":{},"params":{}}"#,
            r#"{"id":1,"id":2,"method":"tools/call"}"#,
            r#"{"id":1,"method":7}"#,
        ] {
            assert!(
                matches!(
                    peek(body.as_bytes()),
                    Peek::Invalid {
                        code: INVALID_REQUEST,
                        ..
                    }
                ),
                "{body}"
            );
        }
        assert!(matches!(
            peek(b"{\"id\":1,"),
            Peek::Invalid {
                code: PARSE_ERROR,
                ..
            }
        ));
        assert!(matches!(
            peek(b"{\"method\":\"tools/call\",\"x\":\"\xff\"}"),
            Peek::Invalid { .. }
        ));
    }

    #[test]
    fn batches() {
        assert!(matches!(
            peek(br#"[{"id":1,"method":"tools/list"},{"id":2,"method":"tools/call"}]"#),
            Peek::Batch
        ));
        assert!(matches!(
            peek(br#"[{"id":1,"method":"tools/list","method":"tools/call"}]"#),
            Peek::Batch
        ));
        assert!(matches!(
            peek(br#"[{"id":1,"method":"tools/list"}, 3]"#),
            Peek::Other
        ));
    }

    fn call(body: &str) -> Result<Call<'_>, Reply> {
        match peek(body.as_bytes()) {
            Peek::Call(call) => Ok(call),
            Peek::Refuse(reply) => Err(reply),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_prefilter_only_passes_bodies_that_name_no_mrtr_method() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#[..],
            br#"{"method":"prompts/list","x":"/call tools/ /get resources /read"}"#,
            b"/",
            b"",
        ] {
            assert!(names_no_mrtr_method(body), "{body:?}");
        }
        for body in [
            &br#"{"method":"tools/call"}"#[..],
            br#"{"method":"tools\/call"}"#,
            br#"{"method":"\u0074ools/call"}"#,
            b"{\"method\":\"tools/list\",\"x\":\"\xff\"}",
            b"{\0\"\0m\0",
            br#"{"method":"tools/list","params":{"note":"resources/read"}}"#,
            br#"{"method":"prompts/get"}"#,
            br#"{"method":"resources/read"}"#,
        ] {
            assert!(!names_no_mrtr_method(body), "{body:?}");
        }
    }

    #[test]
    fn duplicates_at_any_depth_are_refused() {
        let m = r#""method":"tools/call""#;
        assert!(call(&format!(r#"{{{m},"params":{{"name":"a","name":"b"}}}}"#)).is_err());
        assert!(call(&format!(r#"{{{m},"x":1,"params":{{}},"x":2}}"#)).is_err());
        let body =
            format!(r#"{{{m},"params":{{"arguments":{{"env":"staging","env":"production"}}}}}}"#);
        let c = call(&body).unwrap();
        assert!(c.field("arguments").is_err());
        let body = format!(r#"{{{m},"params":{{"arguments":{{"a":[{{"k":1,"k":2}}]}}}}}}"#);
        let c = call(&body).unwrap();
        assert!(c.field("arguments").is_err());
        let body = format!(r#"{{{m},"params":{{"arguments":{{"a":[{{"k":1,"j":2}}]}}}}}}"#);
        let c = call(&body).unwrap();
        assert_eq!(
            c.field("arguments").unwrap(),
            Field::Present(json!({"a": [{"k": 1, "j": 2}]}))
        );
        assert_eq!(c.field("missing").unwrap(), Field::Absent);
    }

    #[test]
    fn rewrite_keeps_every_other_byte() {
        let body = r#"{"jsonrpc":"2.0", "id":"a", "method":"tools/call", "params":{"name":"x","arguments":{"n":12345678901234567890123,"s":"\u00e9"},"requestState":"tok","inputResponses":{"junk":{}},"_meta":{"k":1}}}"#;
        let c = call(body).unwrap();
        let mut responses = Map::new();
        responses.insert(
            "q".into(),
            json!({"action": "accept", "content": {"ok": true}}),
        );
        let out = String::from_utf8(c.rewrite(Some("inner"), Some(&responses), None)).unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{"n":12345678901234567890123,"s":"\u00e9"},"_meta":{"k":1},"inputResponses":{"q":{"action":"accept","content":{"ok":true}}},"requestState":"inner"}}"#
        );
        let stripped = String::from_utf8(c.rewrite(None, None, None)).unwrap();
        assert!(!stripped.contains("requestState") && !stripped.contains("inputResponses"));
        let args = String::from_utf8(c.rewrite(None, None, Some(r#"{"n":1}"#))).unwrap();
        assert!(args.contains(r#""arguments":{"n":1}"#));
    }

    #[test]
    fn error_replies() {
        let id = RawValue::from_string("5".into()).unwrap();
        let r = Reply::error(
            ReplyKind::BadRequest,
            Some(&id),
            INVALID_PARAMS,
            "bad",
            Some(json!({"k": 1})),
        );
        assert_eq!(r.kind, ReplyKind::BadRequest);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 5, "error": {"code": -32602, "message": "bad", "data": {"k": 1}}})
        );
        let r = Reply::error(
            ReplyKind::TooLarge,
            None,
            INVALID_REQUEST,
            "too large",
            None,
        );
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["id"], Value::Null);
    }
}
