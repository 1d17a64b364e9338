//! Fronts any MCP server, 2025-era or 2026-07-28, run as a stdio child or (feature
//! `upstream-http`) reached over Streamable HTTP, as a 2026-07-28 multi round-trip service: the
//! upstream adapter (feature `upstream`).
//!
//! [`Upstream`] is a leaf Tower service (`Service<http::Request<B>>`, JSON-RPC over HTTP POST,
//! `application/json` answers) that [`ElicitationLayer`](crate::ElicitationLayer) and the
//! [legacy bridge](crate::bridge) go in front of, as they go in front of an rmcp
//! `StreamableHttpService`. Behind it is a real server ([`Server`]: a [`Stdio`] child, or an
//! `Http` endpoint):
//!
//! - **stdio**: it spawns the child ([`Stdio`]: command, args, env, working directory) and speaks
//!   newline-delimited JSON-RPC on its stdin and stdout; the child's stderr lines go to `tracing`
//!   (target `tower_elicitation::upstream`). A child that exits is restarted with back-off
//!   (100 ms doubling to 10 s); the calls in flight get a JSON-RPC error (`-32603`, "The server
//!   exited while handling this request…"). The child is killed when the last clone of the
//!   service is dropped (and `kill_on_drop` when the runtime goes), or at
//!   [`Upstream::shutdown`]. Requests in flight are bounded
//!   ([`UpstreamBuilder::max_in_flight`]). With [`UpstreamBuilder::sessions`]`(n)` it runs `n`
//!   children of the command (a pool, for a stateless server only: see there), each with its
//!   own floor; a call takes the least loaded live one, a parked call resumes in its own, and a
//!   child that exits is restarted alone. The child is pinged every 30 s
//!   ([`UpstreamBuilder::keep_alive`]); one that does not answer is taken for hung, killed,
//!   and started and initialized again.
//! - **Streamable HTTP** (feature `upstream-http`, `upstream::Http`: URL, headers, timeouts): each
//!   message is POSTed to the URL with `Accept: application/json, text/event-stream`; the answer
//!   is JSON or an event stream, whose events before the response may be the server's own
//!   requests (`elicitation/create`, …: they go through the reverse bridge below, to the call
//!   whose POST carried them, and their answers are POSTed back). The headers given
//!   (`Http::header`, e.g. the upstream's own `Authorization`) go with every request; the
//!   front's are not passed on. A 2025-era server's `Mcp-Session-Id` (from its `initialize`
//!   answer) is sent back with `MCP-Protocol-Version`; when the server no longer knows the
//!   session (404, or the 400 naming the session that the TypeScript SDK's example servers
//!   answer), a new session is opened and the requests it refused so (which never ran there)
//!   are sent again in it, once; the calls that were running in the old session get a JSON-RPC
//!   error (`-32603`, "The server lost the session…"), and parked calls are gone with it. At
//!   shutdown the session is ended with `DELETE`. A server that cannot be reached fails the request with an error saying so; a
//!   failed handshake is tried again with back-off. `Http::connect_timeout` bounds each
//!   connection and `Http::timeout` the wait for an answer's head; an event stream stays open
//!   as long as its call may run and wait. Redirects are not followed. `https://` takes feature
//!   `upstream-https` (the system's TLS; `Http::root_certificate` trusts a private CA). A
//!   2025-era session's standalone `GET` stream is opened before the session is ready and read
//!   while it lasts: what comes there belongs to no call, so a request is refused (`-32601`, as
//!   a client with no call to carry it), progress reaches the call its token names, a log line
//!   is logged; a server without one (`405`) is fine.
//! - **listens**: a 2025-era server is never sent `subscriptions/listen` (2026 only): the adapter
//!   answers it from the session's own `list_changed` notifications, acknowledging the list
//!   changes the server declares (not resource subscriptions); at most 256 per session.
//! - **era** ([`Era`]): `server/discover` first; a server that does not answer it as a
//!   2026-07-28 one gets `initialize` offering 2025-11-25 (2025-06-18 and 2025-03-26 are taken
//!   too); or the era is pinned. A 2026 upstream's requests pass through as they are, under an id
//!   of the adapter's. A 2025-era upstream is held in one session (`initialize` declaring
//!   elicitation form and URL, sampling and roots, then `notifications/initialized`), into which
//!   each stateless request is forwarded with a fresh id; the `_meta` keys the protocol reserves
//!   are taken out (other `_meta` entries stay), results gain `resultType: "complete"` (and a
//!   cacheable one, a list or `resources/read`, `ttlMs: 0` and `cacheScope: "private"`: the
//!   adapter cannot know how long it holds), and `server/discover` is answered from the
//!   `InitializeResult`. The log level a request carries (`_meta`'s
//!   `io.modelcontextprotocol/logLevel`) is set on the session with `logging/setLevel` when it
//!   changes it (one session, one level: the last request's).
//! - **notifications**: a call's `notifications/progress` (under the progress token the adapter
//!   gave it, the call's own id, so that two clients' tokens never meet) and the log messages
//!   sent while it runs reach the front on the answer's event stream, with the front's own
//!   token, before the answer (a front that accepts `text/event-stream` gets one, as from
//!   rmcp's and the TypeScript SDK's servers; one that takes only JSON gets one JSON answer,
//!   the notifications only logged; a `-32021` refusal is JSON, HTTP 400). On stdio a 2025-era server's log line names no call: it goes to the
//!   call that holds the floor (see below).
//! - **the reverse bridge**: while a forwarded `tools/call`, `prompts/get` or `resources/read`
//!   runs, a 2025-era upstream may send `elicitation/create`, `sampling/createMessage` or
//!   `roots/list`. The adapter parks the call and answers `input_required`: the upstream's
//!   requests are its `inputRequests` under stable keys (`elicitation-1`, `sampling-2`, …, or
//!   the key a server that knows the adapter names in its request's `_meta` under
//!   `tower-elicitation/inputKey`), and its `requestState` names this adapter (its replica) and
//!   the parked call's random id (122 bits). Questions of a kind the client did not declare
//!   (its request's `_meta` capabilities) are refused to the server, as a client without the
//!   capability would (`roots/list` always: a server asks for roots when it likes, not for one
//!   call); when the client can answer none of what the call asked, the call is ended at the
//!   server and the client gets `-32021` (HTTP 400) naming what it lacks. On the retry each
//!   `inputResponses` answer goes to the upstream as the response to its request; the answer to
//!   the retry is the next round of questions, or the result. A parked call is bound to the
//!   caller, the method and the target (the caller as the layer takes it, by a keyed tag made
//!   with the layer's keyring, given [`UpstreamBuilder::caller_from`]; else a keyed tag of the
//!   `Authorization` header); it is taken
//!   out once, so nothing runs twice; a retry for a call that is not parked (finished, expired,
//!   another caller's, the child restarted) gets `-32602` with a clear message. Parked calls
//!   expire ([`UpstreamBuilder::parked_timeout`]: the upstream gets `notifications/cancelled`)
//!   and their number is bounded ([`UpstreamBuilder::max_parked`]). No caller holds more than
//!   its share of the parked and the in-flight bounds ([`UpstreamBuilder::fair_share`], a
//!   quarter by default; every anonymous caller is one caller): beyond it, a JSON-RPC error
//!   that names the bound.
//! - **several replicas**: each runs its own child. A retry that lands on another replica than
//!   the one holding its call is routed there, and the answer back, through a shared registry
//!   ([`UpstreamBuilder::route_retries`]: the bridge's `PendingAnswers`, e.g. Redis's); the
//!   caller goes as its keyed tag, never as itself. Without routes, it gets `-32602` saying it
//!   must reach the replica that asked.
//!
//! Put [`ElicitationLayer`](crate::ElicitationLayer) in front: it seals the adapter's
//! `requestState` (binding it to the caller, the call and its arguments, with an expiry),
//! validates each answer against the schema the upstream asked with and asks again when it does
//! not match (which no 2025-era SDK does strictly), and refuses with `-32021` a question the
//! client did not declare the capability for. The adapter alone does none of that.
//!
//! A 2025-era server's requests to the client name no call on stdio, so there the adapter lets
//! one `tools/call`, `prompts/get` or `resources/read` run in the session at a time (a pool of
//! [`sessions`](UpstreamBuilder::sessions) runs one in each; the others wait their turn; a parked call keeps the turn a few milliseconds more, so that what its server
//! asks in the same breath is its own, for its next round), and refuses a server-to-client
//! request made while none runs. Over Streamable HTTP each request comes on the event stream
//! answering its call's POST, so it is that call's: calls run concurrently, and a request on
//! another call's stream is refused. Other requests run concurrently. A server whose questions are not to reach the
//! client ([`UpstreamBuilder::server_questions`]`(`[`ServerQuestions::Off`]`)`) is declared none
//! of those capabilities in `initialize`, has any such request refused (`-32601`, logged), and
//! runs every call concurrently.
//!
//! # Why not rmcp's client transports
//!
//! rmcp's `TokioChildProcess` and streamable HTTP client carry typed messages
//! (`ServerJsonRpcMessage`): a result is decoded into rmcp's model (`CallToolResult`, …) and
//! encoded again, which drops every field the model does not name (unknown result fields, parts
//! of MCP Apps resources), and ties the adapter to rmcp's version of the protocol. The adapter
//! must carry messages whole, so it frames them itself: over `tokio::process`, one JSON object a
//! line; over HTTP, a `reqwest` POST whose JSON or events are read as they are. Both bounded in
//! size ([`UpstreamBuilder::max_message_bytes`]).
//!
//! # Example
//!
//! A gate before `write_file` of the reference filesystem server:
//!
//! ```no_run
//! use tower::ServiceBuilder;
//! use tower_elicitation::upstream::{Stdio, Upstream};
//! use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     let server = Stdio::new("npx")
//!         .args(["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/srv/data"]);
//!     let approval = Gate::form(
//!         "write-approval",
//!         r#"{"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}"#,
//!     )?
//!     .require(|answer, _call| answer["approve"] == true);
//!     let layer = ElicitationLayer::new(Keyring::from_env()?)
//!         .gate(GateTarget::tool("write_file"), approval)?;
//!     // Parked calls bound to the caller as the layer identifies it, with its keys.
//!     let upstream = Upstream::builder(server).caller_from(&layer).spawn()?;
//!     let mcp = ServiceBuilder::new().layer(layer).service(upstream);
//!     let app = axum::Router::new().route_service("/mcp", mcp);
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```

mod bounds;
mod call;
mod child;
mod config;
mod core;
mod listen;
mod parked;
mod pool;
mod routes;
mod service;
mod session;
#[cfg(feature = "upstream-http")]
mod streamable;

#[cfg(feature = "upstream-http")]
pub use config::Http;
pub use config::{Era, Server, ServerQuestions, Stdio};
pub use service::{ResponseBody, ResponseFuture, Upstream, UpstreamBuilder};
