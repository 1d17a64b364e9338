//! Serves 2025-era MCP hosts from a 2026-07-28 multi round-trip service: the legacy bridge.
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
//! `RedisStore::sessions` and `RedisStore::pending_answers` (in `redis`) are those stores: sticky
//! routing is then no longer required (a session opened on one replica is served, and ended, on any; an
//! answer POSTed to any replica reaches the call waiting on another).
//!
//! ```
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use tower_elicitation::bridge::LegacyBridgeLayer;
//! use tower_elicitation::{ElicitationLayer, Keyring};
//!
//! # fn inner() -> impl tower::Service<
//! #     http::Request<tower_elicitation::RequestBody<http_body_util::Full<bytes::Bytes>>>,
//! #     Response = http::Response<http_body_util::Full<bytes::Bytes>>,
//! #     Error = std::convert::Infallible, Future: Send> + Clone + Send + 'static {
//! #     tower::service_fn(|_| async { Ok(http::Response::new(http_body_util::Full::default())) })
//! # }
//! # fn main() -> Result<(), tower_elicitation::KeyringError> {
//! let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?);
//! // The bridge takes the caller's identity, and the keys its sessions are bound with, from the
//! // layer: build it from the finished layer.
//! let bridge = LegacyBridgeLayer::new(&layer)
//!     .answer_timeout(Duration::from_secs(120))
//!     .max_rounds(8)
//!     .max_pending(512)
//!     .memory_sessions(Duration::from_secs(3600), 10_000);
//! let service = ServiceBuilder::new()
//!     .layer(bridge)
//!     .layer(layer)
//!     .service(inner());
//! # let _ = service;
//! # Ok(())
//! # }
//! ```

mod body;
mod config;
pub(crate) mod convert;
mod future;
pub(crate) mod ids;
mod inner;
mod layer;
mod pending;
mod rounds;
mod service;
mod session;

pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::LegacyBridgeLayer;
pub use pending::{AnswerKey, MemoryPendingAnswers, PendingAnswers};
pub use service::LegacyBridge;
pub use session::{MemorySessionStore, SessionRecord, SessionStore};
