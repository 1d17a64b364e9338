//! [`LegacyBridgeLayer`]: the bridge's options, and `impl Layer`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tower_layer::Layer;

use super::config::{self, Settings};
use super::hosts::AllowedHosts;
use super::service::LegacyBridge;
use crate::ElicitationLayer;
use crate::store::PendingAnswers;
use crate::store::{MemorySessionStore, SessionStore};

/// Tower layer that serves 2025-era MCP clients (sessions, `initialize`, server-to-client
/// requests) in front of a 2026-07-28 multi round-trip service. Put it outermost:
/// `LegacyBridgeLayer → ElicitationLayer → inner`.
///
/// Clones share their sessions, their pending answers and the bound on waiting calls.
///
/// It needs a Tokio runtime with timers (as `#[tokio::main]` and axum give): each bridged call
/// runs its rounds in a task of its own, and waits are timed. Sessions and waiting calls live in
/// this process unless [`session_store`](Self::session_store) and
/// [`pending_answers`](Self::pending_answers) say otherwise: with several replicas and these
/// defaults, route by `Mcp-Session-Id` (sticky sessions), since a client's answer must reach the
/// replica holding the call's stream. With the `redis` feature, `RedisStore::sessions` and
/// `RedisStore::pending_answers` share both through Redis, and no sticky routing is needed.
///
/// See the [crate docs](crate#serving-2025-era-clients-the-legacy-bridge) for what a client sees.
#[derive(Clone)]
pub struct LegacyBridgeLayer {
    settings: Settings,
}

impl LegacyBridgeLayer {
    /// Default wait for the client's answers to one round: 600 seconds.
    pub const DEFAULT_ANSWER_TIMEOUT: Duration = config::DEFAULT_ANSWER_TIMEOUT;
    /// Default cap on `input_required` rounds of one call: 8.
    pub const DEFAULT_MAX_ROUNDS: u32 = config::DEFAULT_MAX_ROUNDS;
    /// Default bound on calls waiting for the client at once: 1,024.
    pub const DEFAULT_MAX_PENDING: usize = config::DEFAULT_MAX_PENDING;
    /// Default wait for a URL flow the person accepted to complete: 600 seconds.
    pub const DEFAULT_URL_WAIT_TIMEOUT: Duration = config::DEFAULT_URL_WAIT_TIMEOUT;
    /// Default time the bridge re-checks an accepted URL flow before asking the person again: 5
    /// seconds.
    pub const DEFAULT_URL_GRACE: Duration = config::DEFAULT_URL_GRACE;

    /// Creates a bridge for `layer`, with in-process sessions and pending answers and every
    /// option at its default.
    ///
    /// The bridge takes the caller's identity as `layer` does (the `Authorization` header, or
    /// [`ElicitationLayer::principal_from`]) and binds each session to a keyed tag of it, made
    /// with `layer`'s keyring, as tokens are: the identity is configured once, and what a shared
    /// store keeps of it cannot be turned back into a credential without the keys. Build it from
    /// the finished layer: options set on `layer` afterwards do not reach the bridge.
    ///
    /// ```
    /// use tower_elicitation::bridge::LegacyBridgeLayer;
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
    ///     .principal_from(|parts| parts.headers.get("x-user").map(|v| v.as_bytes().to_vec()));
    /// let bridge = LegacyBridgeLayer::for_layer(&layer);
    /// let stack = tower::ServiceBuilder::new().layer(bridge).layer(layer);
    /// # let _ = stack;
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn for_layer(layer: &ElicitationLayer) -> Self {
        Self {
            settings: Settings::new(layer.caller_binding()),
        }
    }

    /// Sets how long the bridge waits for the client to answer the requests of one round. Past it,
    /// the requests are cancelled (`notifications/cancelled`) and the call ends with an error.
    /// Default: [`DEFAULT_ANSWER_TIMEOUT`](Self::DEFAULT_ANSWER_TIMEOUT).
    pub fn answer_timeout(mut self, timeout: Duration) -> Self {
        self.settings.answer_timeout = timeout;
        self
    }

    /// Sets the most `input_required` rounds the bridge runs for one call before it ends it with an
    /// error. The bridge's re-checks of a URL flow the person accepted, and its re-asks of that
    /// flow, are not rounds: [`url_wait_timeout`](Self::url_wait_timeout) bounds them.
    /// Default: [`DEFAULT_MAX_ROUNDS`](Self::DEFAULT_MAX_ROUNDS).
    pub fn max_rounds(mut self, max: u32) -> Self {
        self.settings.max_rounds = max;
        self
    }

    /// Sets the most calls waiting for the client at once. Over it, a call that needs input is
    /// refused with an error before anything is sent to the client; calls already waiting go
    /// on. Default: [`DEFAULT_MAX_PENDING`](Self::DEFAULT_MAX_PENDING).
    pub fn max_pending(mut self, max: usize) -> Self {
        self.settings.max_pending = max;
        self.settings.waiting = Arc::new(Semaphore::new(max));
        self
    }

    /// Sets the largest request body read; larger ones are answered 413. Default: 4 MiB.
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.settings.max_body_bytes = max;
        self
    }

    /// Uses a fresh in-process session store whose sessions expire after `idle` without a
    /// request and which holds at most `cap` of them (then `initialize` is refused, 503).
    /// Default: [`MemorySessionStore::DEFAULT_IDLE`], [`MemorySessionStore::DEFAULT_CAPACITY`].
    pub fn memory_sessions(self, idle: Duration, cap: usize) -> Self {
        self.session_store(MemorySessionStore::with_capacity(cap).idle(idle))
    }

    /// Keeps sessions in `store` instead of in this process.
    pub fn session_store(mut self, store: impl SessionStore) -> Self {
        self.settings.sessions = Arc::new(store);
        self
    }

    /// Keeps calls waiting for an answer in `pending` instead of in this process.
    pub fn pending_answers(mut self, pending: impl PendingAnswers) -> Self {
        self.settings.pending = Arc::new(pending);
        self
    }

    /// Sets the identity answered in `serverInfo` when the inner service's `server/discover` names
    /// none. Default: `tower-elicitation-bridge` and this crate's version.
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.settings.server_info =
            serde_json::json!({"name": name.into(), "version": version.into()});
        self
    }

    /// Sets the first wait before the bridge asks the inner service again about a URL flow the
    /// client has consented to but that is not complete; each further wait doubles, up to ten
    /// times this. Default: one second.
    pub fn url_retry_delay(mut self, delay: Duration) -> Self {
        self.settings.url_retry = delay;
        self
    }

    /// Sets how long a URL flow may stay incomplete after the person first accepted it (clicked
    /// that they finished it), re-asks included. Past it, the call ends with an error saying the
    /// step in the browser was not finished. These waits are not `input_required` rounds: they do
    /// not count against [`max_rounds`](Self::max_rounds). A re-ask still open at that moment is
    /// bounded by [`answer_timeout`](Self::answer_timeout), as every question is.
    /// Default: [`DEFAULT_URL_WAIT_TIMEOUT`](Self::DEFAULT_URL_WAIT_TIMEOUT).
    pub fn url_wait_timeout(mut self, timeout: Duration) -> Self {
        self.settings.url_wait_timeout = timeout;
        self
    }

    /// Sets how long the bridge quietly asks the server again about a URL flow the person accepted
    /// before it is complete. Past it, the person is asked again: the same URL and
    /// `elicitationId`, the message followed by "Not finished yet: complete it in the browser,
    /// then continue.", as a 2026-07-28 client is asked by the elicitation layer.
    /// Default: [`DEFAULT_URL_GRACE`](Self::DEFAULT_URL_GRACE).
    pub fn url_grace(mut self, grace: Duration) -> Self {
        self.settings.url_grace = grace;
        self
    }

    /// Sets the names the bridge answers to, replacing the default loopback names (`localhost`,
    /// `127.0.0.1`, `::1`). A request whose `Host`, or whose `Origin` when a browser sent one,
    /// names another host gets HTTP 403 before anything is read: a page on another site cannot
    /// reach a server on the person's machine through the browser (DNS rebinding). An entry
    /// without a port allows every port; one with a port (`mcp.example.com:8443`) only that one.
    ///
    /// A server reached under a public name lists it:
    ///
    /// ```
    /// use tower_elicitation::bridge::LegacyBridgeLayer;
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?);
    /// let bridge = LegacyBridgeLayer::for_layer(&layer).allowed_hosts(["mcp.example.com", "localhost"]);
    /// # let _ = bridge;
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn allowed_hosts<I, H>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = H>,
        H: AsRef<str>,
    {
        self.settings.hosts = AllowedHosts::list(hosts);
        self
    }

    /// Returns why the `Host` and `Origin` check of [`allowed_hosts`](Self::allowed_hosts) refuses
    /// a request with this head (`None`: it passes), so that a server's other routes (its
    /// `/healthz`, `/metrics`) answer to the same names as the bridge.
    ///
    /// ```
    /// use tower_elicitation::bridge::LegacyBridgeLayer;
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    ///
    /// let bridge = LegacyBridgeLayer::for_layer(&ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?));
    /// let head = |host| http::Request::get("/metrics").header("host", host).body(()).unwrap().into_parts().0;
    /// assert!(bridge.host_refusal(&head("localhost:3000")).is_none());
    /// assert!(bridge.host_refusal(&head("attacker.example")).is_some());
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn host_refusal(&self, parts: &http::request::Parts) -> Option<&'static str> {
        self.settings.hosts.refusal(parts)
    }

    /// Turns the `Host` and `Origin` check of [`allowed_hosts`](Self::allowed_hosts) off, for a
    /// deployment where something in front (a reverse proxy, a gateway) checks them.
    pub fn allow_any_host(mut self) -> Self {
        self.settings.hosts = AllowedHosts::any();
        self
    }
}

impl<S> Layer<S> for LegacyBridgeLayer {
    type Service = LegacyBridge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        LegacyBridge::from_settings(inner, Arc::new(self.settings.clone()))
    }
}

impl fmt::Debug for LegacyBridgeLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}
