//! The bridge's settings, shared by every clone of its service in one `Arc`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;

use super::hosts::AllowedHosts;
use super::listeners::Listeners;
use super::params::ToolHeaders;
use crate::store::{ErasedPendingAnswers, MemoryPendingAnswers};
use crate::store::{ErasedSessionStore, MemorySessionStore};
use crate::util::principal::CallerBinding;

pub(crate) const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(600);
pub(crate) const DEFAULT_MAX_ROUNDS: u32 = 8;
pub(crate) const DEFAULT_MAX_PENDING: usize = 1024;
pub(crate) const DEFAULT_URL_WAIT_TIMEOUT: Duration = Duration::from_secs(600);
pub(crate) const DEFAULT_URL_GRACE: Duration = Duration::from_secs(5);
use crate::util::body::DEFAULT_MAX_BODY_BYTES;
/// How often an SSE comment goes out while a call waits on a person.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) answer_timeout: Duration,
    pub(crate) max_rounds: u32,
    pub(crate) max_pending: usize,
    pub(crate) max_body_bytes: usize,
    /// The first wait before asking the inner service again about a URL flow the client has
    /// consented to; it doubles up to ten times this.
    pub(crate) url_retry: Duration,
    /// How long a URL flow may stay incomplete after the person first accepted it.
    pub(crate) url_wait_timeout: Duration,
    /// How long the bridge re-checks an accepted, incomplete URL flow before it asks the person
    /// again, with the same URL and the "not finished" hint.
    pub(crate) url_grace: Duration,
    /// The names requests may be addressed to (`Host`, `Origin`).
    pub(crate) hosts: AllowedHosts,
    pub(crate) sessions: Arc<dyn ErasedSessionStore>,
    pub(crate) pending: Arc<dyn ErasedPendingAnswers>,
    /// One permit per call waiting for the client.
    pub(crate) waiting: Arc<Semaphore>,
    /// How a session's caller is told apart and tagged (the [`ElicitationLayer`]'s principal and
    /// keys).
    ///
    /// [`ElicitationLayer`]: crate::ElicitationLayer
    pub(crate) callers: CallerBinding,
    /// The identity answered in `serverInfo` when the inner service's discovery gives none.
    pub(crate) server_info: Value,
    /// The inner's `server/discover` result, when it said it may be kept (`cacheScope: public`).
    pub(crate) discovered: Arc<Mutex<Option<(Instant, Value)>>>,
    /// The sessions with a GET stream open in this process, told when their subscriptions change.
    pub(crate) listeners: Arc<Listeners>,
    /// The `x-mcp-header` arguments of the inner's tools, mirrored into `Mcp-Param-*`.
    pub(crate) tool_headers: Arc<ToolHeaders>,
    next_id: Arc<AtomicU64>,
}

impl Settings {
    pub(crate) fn new(callers: CallerBinding) -> Self {
        Self {
            answer_timeout: DEFAULT_ANSWER_TIMEOUT,
            max_rounds: DEFAULT_MAX_ROUNDS,
            max_pending: DEFAULT_MAX_PENDING,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            url_retry: Duration::from_secs(1),
            url_wait_timeout: DEFAULT_URL_WAIT_TIMEOUT,
            url_grace: DEFAULT_URL_GRACE,
            hosts: AllowedHosts::default(),
            sessions: Arc::new(MemorySessionStore::default()),
            pending: Arc::new(MemoryPendingAnswers::default()),
            waiting: Arc::new(Semaphore::new(DEFAULT_MAX_PENDING)),
            callers,
            server_info: serde_json::json!({
                "name": "tower-elicitation-bridge",
                "version": env!("CARGO_PKG_VERSION"),
            }),
            discovered: Arc::default(),
            listeners: Arc::default(),
            tool_headers: Arc::default(),
            next_id: Arc::default(),
        }
    }

    /// A fresh id for a request to the inner service.
    pub(crate) fn inner_id(&self) -> String {
        format!("bridge-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LegacyBridge")
            .field("answer_timeout", &self.answer_timeout)
            .field("max_rounds", &self.max_rounds)
            .field("max_pending", &self.max_pending)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("url_retry", &self.url_retry)
            .field("url_wait_timeout", &self.url_wait_timeout)
            .field("url_grace", &self.url_grace)
            .field("hosts", &self.hosts)
            .field("principal", &self.callers.principal)
            .finish_non_exhaustive()
    }
}
