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
//! - **Seals `requestState`** in every `input_required`, JSON or event stream, binding the call,
//!   the caller, the audience, an expiry and the questions asked; a tampered, expired or misbound
//!   token never reaches the inner service (`-32602` `Invalid or expired requestState`).
//! - **Validates answers** against the `requestedSchema` that was asked (`jsonschema`, formats
//!   included), and asks again itself, with a hint, when one is missing or invalid.
//! - **Respects capabilities**: an input request the client's `_meta` does not declare becomes
//!   `-32021` (HTTP 400).
//! - **Retrofits approval**: [gates](Gate) ask a form or URL question before a call reaches a
//!   server that knows nothing of elicitation.
//! - **Single-use tokens, when asked** ([`ElicitationLayer::single_use`]), in process or in Redis,
//!   failing closed (HTTP 503) when the store cannot say.
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
#![doc = include_str!("../docs/round-trip.md")]
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
#![doc = include_str!("../docs/composing.md")]
//!
//! # The rest of the crate
//!
//! - [`bridge`]: [`LegacyBridgeLayer`](bridge::LegacyBridgeLayer) serves 2025-era hosts
//!   (sessions, `initialize`, questions on the call's event stream) from a 2026-07-28 service.
//! - [`store`]: every store trait, each with a bounded in-process default: where single-use
//!   tokens are spent ([`TokenStore`](store::TokenStore)), what the layer remembers per task
//!   ([`TaskStore`](store::TaskStore)), the bridge's sessions
//!   ([`SessionStore`](store::SessionStore)), and where a call waits for its answer
//!   ([`PendingAnswers`](store::PendingAnswers)).
//! - `redis` (feature `redis`): every store above (`RedisStore`, `RedisTaskStore`,
//!   `RedisSessionStore`, `RedisPendingAnswers`), and URL flows, shared by all replicas through
//!   Redis, and what Redis must be for single-use to hold.
//! - `upstream` (feature `upstream`): `Upstream` fronts any MCP server, a stdio child or (feature
//!   `upstream-http`) a Streamable HTTP endpoint, 2025-era or 2026-07-28, as a 2026-07-28
//!   service; a 2025-era server's own questions become `input_required` rounds.
//! - [`ElicitationLayer`]: [every option](ElicitationLayer#configuration) and
//!   [what the client gets](ElicitationLayer#what-the-client-gets) in each case.
//! - [`Gate`] and [`UrlFlow`]: approval retrofitted onto any server, and URL flows checked on your
//!   own backend.
//!
//! # Feature flags
//!
//! - `schemars` (default): [`Gate::form_for`], a gate's form derived from a Rust type.
//! - `redis` (off by default, so the default build has no Redis code): the `redis` module,
//!   `RedisStore`, `RedisTaskStore`, `RedisUrlFlows`, `RedisSessionStore` and
//!   `RedisPendingAnswers`.
//! - `upstream` (off by default): the `upstream` module, `Upstream` and its builder, with a
//!   stdio child as the server (tokio's `process` and `io-util`); `upstream-http` adds a server
//!   reached over Streamable HTTP.
//! - `upstream-http` (off by default): `upstream::Http`, a server reached over Streamable HTTP
//!   (`http://`; a reqwest client without TLS).
//! - `upstream-https` (off by default): `https://` URLs too, through the system's TLS (OpenSSL on
//!   Linux, whose headers the build needs), and `Http::root_certificate`.
//! - `preserve_order`: turns on serde_json's (and schemars') `preserve_order` for the whole build,
//!   so that a `json!` form given to [`Gate::form`], and [`Gate::form_for`]'s fields, reach the
//!   client in the order declared. Not needed for a form given as JSON text, nor for the inner
//!   service's own questions, which keep their order without it: `inputRequests` and every
//!   question in it reach the client in the order the inner service (then the gates) wrote them.
//!   Without the feature a `json!` form's keys, and `Gate::form_for`'s fields, are sorted.
//!
#![doc = include_str!("../docs/compatibility.md")]
#![doc = include_str!("../docs/security-model.md")]
#![doc = include_str!("../docs/performance.md")]
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
mod util;
pub mod bridge;
mod elicitation;
mod engine;
mod form;
mod gate;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
pub mod store;
mod texts;
mod token;
#[cfg(feature = "upstream")]
#[cfg_attr(docsrs, doc(cfg(feature = "upstream")))]
pub mod upstream;
mod wire;

pub use elicitation::body::{RequestBody, ResponseBody};
pub use elicitation::future::ResponseFuture;
pub use elicitation::layer::ElicitationLayer;
pub use elicitation::service::Elicitation;
pub use engine::policy::{AnswersWithoutState, UnrecordedTasks};
pub use form::FormSchemaError;
pub use gate::{Answers, Gate, GateCall, GateError, GateTarget, IntoFormSchema, UrlFlow};
pub use token::{KEYS_ENV, Keyring, KeyringError, MIN_KEY_LEN};
pub use util::principal::VerifiedCaller;

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The boxed error type of [`UrlFlow::url`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
