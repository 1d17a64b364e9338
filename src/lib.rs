//! Tower middleware for MCP multi round-trip elicitation (MCP 2026-07-28, SEP-2322).
//!
//! In MCP 2026-07-28 a `tools/call`, `prompts/get` or `resources/read` may answer
//! `resultType: "input_required"` with `inputRequests` (elicitation forms and URLs, sampling,
//! roots) and an opaque `requestState`; the client asks its user, then retries the call with
//! `inputResponses` and the same `requestState`. Every round re-runs the handler from the top.
//!
//! [`ElicitationLayer`] does the server's side of that for any Tower service speaking MCP
//! JSON-RPC over Streamable HTTP (an rmcp `StreamableHttpService`, an axum router, a
//! `service_fn`):
//!
//! - **Seals `requestState`.** Every `input_required` leaving the inner service, as JSON or as an
//!   event stream, gets an HMAC-signed token as its `requestState`, binding the method, the tool
//!   (or prompt, or resource), the arguments, the caller, the audience, an expiry, the round and
//!   the questions asked. On the retry the token is verified before anything else; the inner
//!   service gets its own state back, or none. A tampered, expired or misbound token never
//!   reaches it: the client gets `-32602` `Invalid or expired requestState`.
//! - **Validates answers.** Accepted form content must match the `requestedSchema` that was asked
//!   (checked with `jsonschema`, formats included). A missing or invalid answer is asked again by
//!   the layer itself, with a hint of what was wrong, without calling the inner service. Unknown
//!   keys and fields are dropped. The inner service only ever sees answers to its own questions.
//! - **Respects capabilities.** An input request of a kind the request's own `_meta` capabilities
//!   do not declare becomes `-32021` (HTTP 400) instead.
//! - **Retrofits approval.** [Gates](Gate) make the layer ask a form or URL question of its own
//!   before a call may reach a server that knows nothing of elicitation.
//! - **Single-use tokens, when asked.** With [`ElicitationLayer::single_use`] a retry goes on
//!   only once a [`TokenStore`] (in process, or Redis with the `redis` feature, shared by every
//!   replica) has consumed its token's id; a replay gets `-32602`, and a store that cannot be
//!   reached fails closed (`-32603`, HTTP 503).
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use serde_json::{Value, json};
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_elicitation::{ElicitationLayer, Keyring};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // An inner MCP server that asks for approval and knows nothing of signing or validation.
//! let inner = tower::service_fn(|request: Request<tower_elicitation::RequestBody<Full<Bytes>>>| async move {
//!     let call: Value = serde_json::from_slice(&request.into_body().collect().await?.to_bytes())?;
//!     let result = match call["params"]["inputResponses"]["approval"]["content"]["approve"].as_bool() {
//!         Some(true) => json!({"resultType": "complete", "content": [{"type": "text", "text": "Deployed"}]}),
//!         _ => json!({"resultType": "input_required", "inputRequests": {"approval": {
//!             "method": "elicitation/create",
//!             "params": {"message": "Deploy to staging?", "requestedSchema": {
//!                 "type": "object",
//!                 "properties": {"approve": {"type": "boolean"}},
//!                 "required": ["approve"]}}}}}),
//!     };
//!     let body = json!({"jsonrpc": "2.0", "id": call["id"], "result": result});
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
//!         Response::builder()
//!             .header("content-type", "application/json")
//!             .body(Full::new(Bytes::from(body.to_string())))?,
//!     )
//! });
//!
//! let service = ServiceBuilder::new()
//!     .layer(ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?))
//!     .service(inner);
//!
//! let call = |id: u32, extra: Value| {
//!     let mut params = json!({"name": "deploy", "arguments": {}, "_meta": {
//!         "io.modelcontextprotocol/protocolVersion": "2026-07-28",
//!         "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
//!     params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
//!     let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
//!     Request::post("/mcp")
//!         .header("content-type", "application/json")
//!         .body(Full::new(Bytes::from(body.to_string())))
//!         .unwrap()
//! };
//! let send = |request| {
//!     let service = service.clone();
//!     async move {
//!         let response = service.oneshot(request).await?;
//!         let bytes = response.into_body().collect().await?.to_bytes();
//!         Ok::<Value, Box<dyn std::error::Error + Send + Sync>>(serde_json::from_slice(&bytes)?)
//!     }
//! };
//!
//! // Round 1: the layer seals the state of the inner service's question.
//! let first = send(call(1, json!({}))).await?;
//! let state = first["result"]["requestState"].as_str().unwrap().to_owned();
//! assert!(state.starts_with("v1.k1."));
//!
//! // An invalid answer never reaches the inner service: the layer asks again, with a hint.
//! let retry = send(call(2, json!({"requestState": state,
//!     "inputResponses": {"approval": {"action": "accept", "content": {"approve": "yes"}}}}))).await?;
//! let message = retry["result"]["inputRequests"]["approval"]["params"]["message"].as_str().unwrap();
//! assert!(message.starts_with("Deploy to staging?") && message.contains("approve"));
//!
//! // A valid answer, with the state the layer issued, goes through.
//! let state = retry["result"]["requestState"].as_str().unwrap();
//! let done = send(call(3, json!({"requestState": state,
//!     "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}}}))).await?;
//! assert_eq!(done["result"]["content"][0]["text"], "Deployed");
//!
//! // A tampered state is refused.
//! let forged = send(call(4, json!({"requestState": format!("{state}x")}))).await?;
//! assert_eq!(forged["error"]["message"], "Invalid or expired requestState");
//! # Ok(())
//! # }
//! ```
//!
//! # Where it goes
//!
//! Put it directly in front of the MCP endpoint (`Router::nest_service("/mcp", …)` or
//! `route_layer`), after any authentication layer whose identity it should bind
//! ([`ElicitationLayer::principal_from`]), and inside any compression layer: it asks the inner
//! service for unencoded answers to the calls it acts on, and refuses (`-32603`) an answer it
//! cannot read rather than pass on an `input_required` it has not sealed. It judges every request
//! body the same way, whatever the HTTP method: one that could name `tools/call`, `prompts/get` or
//! `resources/read` is read strictly and refused with a JSON-RPC error when it cannot be read, so
//! don't put it in front of endpoints that take other kinds of body.

//!
//! # Serving 2025-era clients: the legacy bridge
//!
//! Most MCP hosts still speak 2025-06-18 or 2025-11-25: a session opened with `initialize`, and
//! questions asked as server-to-client requests on the event stream of the call's POST.
//! [`LegacyBridgeLayer`] is opt-in and goes outermost (`bridge → ElicitationLayer → inner`).
//! Toward what it wraps it is a 2026-07-28 client; toward a 2025-era host it is a 2025-11-25
//! server:
//!
//! - it answers `initialize` itself (`capabilities`, `serverInfo`, `instructions` from the inner
//!   service's `server/discover`), `ping` and `logging/setLevel` (`{}`), `notifications/*` (202),
//!   GET (405) and DELETE (204, then 404 for that session);
//! - it forwards every other request as a stateless 2026-07-28 one, with the session's
//!   capabilities, client info and log level in `_meta`, and the caller's own headers;
//! - when a `tools/call`, `prompts/get` or `resources/read` answers `input_required`, it asks the
//!   client on the call's event stream (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`), waits for the answers the client POSTs back (202), and retries with
//!   `inputResponses` and the `requestState`, as a 2026 client would.
//!
//! 2026-07-28 requests (those whose `_meta` names a protocol version) pass through untouched.
//! Sessions and waiting calls live in this process by default ([`MemorySessionStore`],
//! [`MemoryPendingAnswers`]): with several replicas, route by `Mcp-Session-Id` (sticky), or give
//! the bridge shared stores ([`SessionStore`], [`PendingAnswers`]). With the `redis` feature,
//! `RedisStore::sessions` and `RedisStore::pending_answers` are those stores: sticky routing is
//! then no longer required (a session opened on one replica is served, and ended, on any; an
//! answer POSTed to any replica reaches the call waiting on another).
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_elicitation::{ElicitationLayer, Keyring, LegacyBridgeLayer};
//!
//! # fn inner() -> impl tower::Service<
//! #     http::Request<tower_elicitation::RequestBody<http_body_util::Full<bytes::Bytes>>>,
//! #     Response = http::Response<http_body_util::Full<bytes::Bytes>>,
//! #     Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static {
//! #     tower::service_fn(|_| async { Ok(http::Response::new(http_body_util::Full::default())) })
//! # }
//! # fn main() -> Result<(), tower_elicitation::KeyringError> {
//! let service = ServiceBuilder::new()
//!     .layer(
//!         LegacyBridgeLayer::new()
//!             .answer_timeout(Duration::from_secs(120))
//!             .max_rounds(8)
//!             .max_pending(512)
//!             .memory_sessions(Duration::from_secs(3600), 10_000),
//!     )
//!     .layer(ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?))
//!     .service(inner());
//! # let _ = service;
//! # Ok(())
//! # }
//! ```
//!
//! # How the crate is laid out
//!
//! The engine decides on JSON alone; the HTTP adapter only moves bytes and maps the engine's kinds
//! of reply to statuses. No module imports, directly or through others, one that imports it
//! (`scripts/module_cycles.py` checks). Each row of the README's decision table lives in one place:
//!
//! | module | what it holds |
//! |---|---|
//! | `layer` | [`ElicitationLayer`]: the builder of every option, and `impl Layer` |
//! | `config` | the engine's policy (`Config`): keys, TTL, bounds, gates, caches; no HTTP types |
//! | `shared` | `Config` and the adapter's own settings (principal extractor, body limit), one `Arc` |
//! | `service` | [`Elicitation`]: the `Service` impl; requests without a body pass untouched |
//! | `future` | [`ResponseFuture`]: reads the body, forwards what names no MRTR method, else the MRTR path |
//! | `call` | the MRTR path: asks the inner service for `identity`, gives the engine its one-call step (the probe), calls it, frames replies (kind → status) |
//! | `body` | [`RequestBody`] (`http-body-util`'s `Either`), [`ResponseBody`] and `ReadAll` (a body in one frame is kept without a copy) |
//! | `sse` | event-stream parsing, and the body that rewrites the one response event |
//! | `engine::intake` | the byte scan, the strict peek's verdict, how the inner's answer is sorted (status, encoding, type) |
//! | `engine::inbound` | a call: its state verified, its answers checked, forwarded or answered; `decide` asks URL flows and runs the probe over an abstract inner step |
//! | `engine::gates` | declared gates on a call: ask, judge, refuse, deliver (injected into the arguments' own text) |
//! | `engine::answers` | each answer against the question asked: accept, re-ask with a hint, drop what was not asked |
//! | `engine::outbound` | the inner's answer: seal an `input_required`, refuse one the client cannot answer, judge each event |
//! | `engine::reply` | the layer's own answers: asks, re-asks, refusals, the round cap, the seal and its size bound |
//! | `engine::decision` | what is known of a call (`Round`), what is decided (`Decided`), and the inner step the engine may take (`Inner`) |
//! | `json` | the one strict reader (objects as raw members along a path, `Strict` values) and the one duplicate-key detector |
//! | `jsonrpc` | envelopes read through `json`: the peek, the rewrite of `params`, the error table, `Reply` and its `Kind` |
//! | `canonical` | the one canonical writer (digests, cache keys) and its order-keeping minified form (what is shown) |
//! | `state` | the [`Keyring`], the token format and MAC, the claims, the tokens this layer sealed |
//! | `store` | single-use tokens: [`TokenStore`], the bounded in-process [`MemoryTokenStore`] |
//! | `store::redis` | feature `redis`: `RedisStore` (spent token ids, `SET … NX PXAT`) and `RedisUrlFlows` |
//! | `form` | the MCP form subset (`Gate::form` checks it) and compiled validators with their hints |
//! | `gate`, `uri` | [`Gate`], [`GateTarget`] and their matching (resource URIs compared normalized) |
//! | `texts` | every text the layer writes for a person (hints, the gates' default texts), in one place |
//! | `mcp` | the few MCP 2026-07-28 wire facts the layer reads: methods, request kinds, capabilities |
//! | `memo` | caches bounded in entries and in bytes |
//! | `macros` | the inner-service accessors (`get_ref`, `get_mut`, `into_inner`) both services share |
//! | `principal` | whose call it is: the `Authorization` header, or [`ElicitationLayer::principal_from`] |
//! | `bridge::layer` | [`LegacyBridgeLayer`]: the bridge's options, and `impl Layer` |
//! | `bridge::config` | the bridge's settings (timeouts, bounds, stores, principal), one `Arc` |
//! | `bridge::service` | [`LegacyBridge`]: tells the eras apart; the handshake, utilities, sessions and answers |
//! | `bridge::rounds` | the MRTR loop for a 2025 client: requests on the call's stream, answers, retries |
//! | `bridge::inner` | the bridge as a 2026 client: the request of each round, the reading of the answer |
//! | `bridge::convert` | 2025 ↔ 2026 shapes: versions, capabilities, `_meta`, results, errors, down-levelling |
//! | `bridge::session` | [`SessionStore`], [`SessionRecord`] and [`MemorySessionStore`] |
//! | `bridge::pending` | [`PendingAnswers`], [`LegKey`] and [`MemoryPendingAnswers`] |
//! | `bridge::redis` | feature `redis`: `RedisSessionStore` (`SET … NX PX`, `GETEX`, `DEL`) and `RedisPendingAnswers` (local waiters, one pub/sub channel) |
//! | `bridge::body` | [`BridgeBody`]: the inner's body, the bridge's own answer, or a call's stream |
//! | `bridge::ids` | session ids, request ids on a stream, `elicitationId`s: all from the CSPRNG |

#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs, rust_2018_idioms, clippy::all)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Internals for the fuzz targets and the crate's own tests: built only with the `__fuzz`
/// feature, never part of the public API.
#[cfg(feature = "__fuzz")]
#[doc(hidden)]
#[path = "fuzz_api.rs"]
pub mod __fuzz;
#[macro_use]
mod macros;
mod body;
mod bridge;
mod call;
mod canonical;
mod config;
mod engine;
mod form;
mod future;
mod gate;
mod json;
mod jsonrpc;
mod layer;
mod mcp;
mod memo;
mod principal;
mod service;
mod shared;
mod sse;
mod state;
mod store;
mod texts;
mod uri;

pub use body::{RequestBody, ResponseBody};
pub use bridge::{
    BridgeBody, BridgeFuture, LegKey, LegacyBridge, LegacyBridgeLayer, MemoryPendingAnswers,
    MemorySessionStore, PendingAnswers, SessionRecord, SessionStore, StoreFuture, Waiter,
};
#[cfg(feature = "redis")]
pub use bridge::{RedisPendingAnswers, RedisSessionStore};
pub use config::AnswersWithoutState;
pub use form::FormSchemaError;
pub use future::ResponseFuture;
pub use gate::{Answers, Gate, GateCall, GateError, GateTarget, UrlFlow};
pub use layer::ElicitationLayer;
pub use service::Elicitation;
pub use state::{KEYS_ENV, Keyring, KeyringError, MIN_KEY_LEN};
#[cfg(feature = "redis")]
pub use store::redis::{RedisStore, RedisStoreBuilder, RedisUrlFlows};
pub use store::{Consumed, MemoryTokenStore, StoreError, TokenStore};

/// The boxed error type of [`UrlFlow::url`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
