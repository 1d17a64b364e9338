//! What every transport shares: where the adapter stands with the server, the calls waiting on
//! their ids, the routing of the server's messages (responses to the call waiting on their id,
//! server-to-client requests to the call that made them or holds the floor), and the handshake.
//! A transport carries whole JSON-RPC messages: it reads them from the server into
//! [`Core::route`], and writes what comes on its [`Link`]'s queue.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, broadcast, mpsc, watch};

use super::bounds::Bounds;
use super::config::{Era, Server, ServerQuestions, Settings};
use super::parked::{Event, ParkedCalls};
use super::session::{Negotiated, client_capabilities, speaks_mrtr};
use super::trace::TraceContext;
use crate::texts;
use crate::wire::jsonrpc::{self, INTERNAL_ERROR, RpcError};
use crate::wire::legacy::LEGACY_VERSIONS;
use crate::wire::mcp::MRTR_VERSION;

/// `METHOD_NOT_FOUND`: what a server-to-client request no call can take is answered.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// How many messages wait for the transport, and for one call, before back-pressure.
pub(crate) const QUEUE: usize = 256;

/// The target of the adapter's `tracing` events.
pub(crate) const TARGET: &str = "tower_elicitation::upstream";

/// Where the adapter stands with the server.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Starting,
    Ready(Arc<Link>),
    Down(String),
    Stopped,
}

/// A handshaken server: where to write, and what it is.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) writer: mpsc::Sender<Value>,
    pub(crate) negotiated: Negotiated,
    /// The log level last set in this session (`logging/setLevel`), if any.
    log_level: Mutex<Option<String>>,
}

impl Link {
    pub(crate) fn new(writer: mpsc::Sender<Value>, negotiated: Negotiated) -> Self {
        Self {
            writer,
            negotiated,
            log_level: Mutex::default(),
        }
    }

    /// Records `level` as the session's; `false` when it already was.
    pub(crate) fn set_log_level(&self, level: &str) -> bool {
        let mut current = lock(&self.log_level);
        if current.as_deref() == Some(level) {
            return false;
        }
        *current = Some(level.to_owned());
        true
    }

    /// Sends one message.
    pub(crate) async fn send(&self, message: &Value) -> bool {
        self.writer.send(message.clone()).await.is_ok()
    }

    /// Sends one message if the queue has room (from a `Drop`, or a timer); else it is lost.
    pub(crate) fn send_now(&self, message: &Value) {
        let _ = self.writer.try_send(message.clone());
    }
}

/// What the sessions of one adapter share (the `sessions` of its pool):
/// its name among replicas and its bounds.
#[derive(Debug, Clone)]
pub(crate) struct PoolState {
    /// This adapter's name among replicas: the first part of every parked call's state.
    pub(crate) replica: String,
    /// The requests in flight, every session's.
    pub(crate) in_flight: Arc<Semaphore>,
    /// The parked calls' bound, and each caller's share of both.
    pub(crate) bounds: Arc<Bounds>,
}

impl PoolState {
    pub(crate) fn new(settings: &Settings) -> Self {
        let max_in_flight = settings.max_in_flight.max(1);
        Self {
            replica: super::routes::new_replica(),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            bounds: Bounds::new(max_in_flight, settings.max_parked, settings.fair_share),
        }
    }
}

/// One session with the server (a child, or the HTTP session), as the service's clones and the
/// transport's tasks share it: an adapter has `sessions` of them.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) settings: Settings,
    /// This adapter's name among replicas: the first part of every parked call's state.
    pub(crate) replica: String,
    /// This session's number in the adapter's pool (from 0): the second part of the state of
    /// each call parked in it.
    pub(crate) session: usize,
    /// The front's requests this session serves now (running, or waiting for its floor): the
    /// pool gives a new call to the least loaded.
    load: AtomicUsize,
    pub(crate) bounds: Arc<Bounds>,
    next_id: AtomicU64,
    waiters: Mutex<HashMap<u64, Waiter>>,
    /// The upstream id of the call that takes server-to-client requests now.
    floor_holder: Mutex<Option<u64>>,
    /// The calls that may be asked (the reverse bridge's, once they held the floor): a request
    /// that comes in the answer to another call's POST is refused, not given to them.
    askers: Mutex<HashSet<u64>>,
    /// One call at a time may be asked questions by a 2025-era upstream: its requests name no
    /// call, so only the one running call can be their author.
    pub(crate) floor: Arc<Semaphore>,
    pub(crate) in_flight: Arc<Semaphore>,
    pub(crate) state: watch::Sender<State>,
    pub(crate) parked: ParkedCalls,
    /// A 2025-era server's list changes and resource updates, for the front's listens
    /// ([`listen`](super::listen)).
    pub(crate) changes: broadcast::Sender<Map<String, Value>>,
    /// The listens the session serves at once, at most [`MAX_LISTENS`].
    pub(crate) listens: Arc<Semaphore>,
}

/// A request waiting for its answer: where its events go, and the trace context its POST
/// carries (an HTTP server's; the front's, see [`TraceContext`]).
#[derive(Debug, Clone)]
struct Waiter {
    events: mpsc::Sender<Event>,
    trace: Option<TraceContext>,
}

/// The most `subscriptions/listen` requests one 2025-era session serves at once.
pub(crate) const MAX_LISTENS: usize = 256;

/// The notifications a 2025-era server sends of its lists and resources, which a front's
/// `subscriptions/listen` may ask for.
pub(crate) const CHANGES: [&str; 4] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
    "notifications/resources/updated",
];

impl Core {
    /// Session number `session` of an adapter whose sessions share `shared`.
    pub(crate) fn new(settings: Settings, shared: &PoolState, session: usize) -> Arc<Self> {
        Arc::new(Self {
            settings,
            replica: shared.replica.clone(),
            session,
            load: AtomicUsize::new(0),
            bounds: Arc::clone(&shared.bounds),
            next_id: AtomicU64::new(1),
            waiters: Mutex::default(),
            floor_holder: Mutex::default(),
            askers: Mutex::default(),
            floor: Arc::new(Semaphore::new(1)),
            in_flight: Arc::clone(&shared.in_flight),
            state: watch::Sender::new(State::Starting),
            parked: ParkedCalls::default(),
            changes: broadcast::channel(64).0,
            listens: Arc::new(Semaphore::new(MAX_LISTENS)),
        })
    }

    /// How busy the session is, for the pool's choice: the front's requests it serves now, and
    /// one more while its floor is taken. A call that parked keeps the floor for its retry a
    /// little while (see `GATHER`) and counts as no request then: without the floor counted, a
    /// new call would be given to that session and wait there while others stand idle.
    pub(crate) fn load(&self) -> usize {
        let floor_taken = self.floor.available_permits() == 0;
        self.load.load(Ordering::Relaxed) + usize::from(floor_taken)
    }

    /// Counts one request of the front's in this session until the guard is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        self.load.fetch_add(1, Ordering::Relaxed);
        Busy(Arc::clone(self))
    }

    /// Whether the session is up (handshaken, not restarting).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(&*self.state.borrow(), State::Ready(_))
    }

    /// A fresh JSON-RPC id for a request to the server, and the channel its events come on.
    pub(crate) fn register(&self) -> (u64, mpsc::Receiver<Event>) {
        self.register_traced(None)
    }

    /// [`register`](Self::register), for a request whose POST to an HTTP server carries
    /// `trace` (a stdio server's request carries none: it is not kept).
    pub(crate) fn register_traced(
        &self,
        trace: Option<TraceContext>,
    ) -> (u64, mpsc::Receiver<Event>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = mpsc::channel(QUEUE);
        let trace = trace.filter(|_| self.by_stream());
        lock(&self.waiters).insert(id, Waiter { events, trace });
        (id, rx)
    }

    /// The trace context the request `id` is sent with, while it waits for its answer.
    #[cfg_attr(not(feature = "upstream-http"), allow(dead_code))]
    pub(crate) fn trace_of(&self, id: u64) -> Option<TraceContext> {
        lock(&self.waiters).get(&id)?.trace.clone()
    }

    /// A fresh JSON-RPC id whose events come on the channel of the call `of` (its barrier's
    /// ping), or `None` when that call waits for nothing.
    pub(crate) fn alias(&self, of: u64) -> Option<u64> {
        let mut waiters = lock(&self.waiters);
        let waiter = waiters.get(&of)?.clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        waiters.insert(id, waiter);
        Some(id)
    }

    /// Forgets the call `id` (answered, given up, or expired).
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.waiters).remove(&id);
        lock(&self.askers).remove(&id);
        let mut holder = lock(&self.floor_holder);
        if *holder == Some(id) {
            *holder = None;
        }
    }

    /// Makes `id` the call the server's requests go to (`None`: no call): over stdio, those
    /// that name no call; over HTTP (see [`by_stream`](Self::by_stream)), only those that come
    /// on its own answer, and no floor is held.
    pub(crate) fn hold_floor(&self, id: Option<u64>) {
        if let Some(id) = id {
            lock(&self.askers).insert(id);
        }
        if !self.by_stream() {
            *lock(&self.floor_holder) = id;
        }
    }

    /// Whether the server's requests come on the answer of the call they are for (Streamable
    /// HTTP: each call's POST has its own event stream), so that calls that may be asked need no
    /// floor; over stdio they name no call.
    pub(crate) fn by_stream(&self) -> bool {
        match &self.settings.server {
            Server::Stdio(_) => false,
            #[cfg(feature = "upstream-http")]
            Server::Http(_) => true,
        }
    }

    /// Hands the floor on from the call `id`: the server's requests are no longer its (unless
    /// another call holds it already).
    pub(crate) fn release_floor(&self, id: u64) {
        let mut holder = lock(&self.floor_holder);
        if *holder == Some(id) {
            *holder = None;
        }
    }

    /// What a call in flight is told when the server went away: the child exited, or the
    /// HTTP server lost the session.
    pub(crate) fn lost_text(&self) -> &'static str {
        match &self.settings.server {
            Server::Stdio(_) => texts::UPSTREAM_EXITED,
            #[cfg(feature = "upstream-http")]
            Server::Http(_) => texts::UPSTREAM_SESSION_LOST,
        }
    }

    /// Whether the call `id` still waits for its response.
    #[cfg_attr(not(feature = "upstream-http"), allow(dead_code))]
    pub(crate) fn is_waiting(&self, id: u64) -> bool {
        lock(&self.waiters).contains_key(&id)
    }

    /// Ends the call `id` with `error` as its response, if it still waits (the transport could
    /// not deliver the request, or its answer ended without a response).
    #[cfg_attr(not(feature = "upstream-http"), allow(dead_code))]
    pub(crate) fn fail(&self, id: u64, error: RpcError) {
        let waiter = lock(&self.waiters).remove(&id);
        if let Some(waiter) = waiter
            && let Value::Object(response) = jsonrpc::response(&json!(id), Err(error))
        {
            let _ = waiter.events.try_send(Event::Response(response));
        }
    }

    /// The running link, waiting for a start in progress (bounded by the start timeout).
    pub(crate) async fn link(&self) -> Result<Arc<Link>, String> {
        let mut state = self.state.subscribe();
        let wait = state.wait_for(|s| !matches!(s, State::Starting));
        match tokio::time::timeout(self.settings.start_timeout, wait).await {
            Err(_) => Err("it is still starting".to_owned()),
            Ok(Err(_)) => Err("it was shut down".to_owned()),
            Ok(Ok(state)) => match &*state {
                State::Ready(link) => Ok(Arc::clone(link)),
                State::Down(why) => Err(why.clone()),
                State::Stopped => Err("it was shut down".to_owned()),
                State::Starting => Err("it is still starting".to_owned()),
            },
        }
    }

    /// Routes one message from the server, as bytes (a line, an event's data, a body).
    pub(crate) async fn route_bytes(
        &self,
        writer: &mpsc::Sender<Value>,
        bytes: &[u8],
        origin: Option<u64>,
    ) {
        match serde_json::from_slice(bytes) {
            Ok(Value::Object(message)) => self.route(writer, message, origin).await,
            Ok(Value::Array(batch)) => {
                for message in batch {
                    match message {
                        Value::Object(message) => self.route(writer, message, origin).await,
                        _ => {
                            tracing::warn!(target: TARGET, "the server sent a batch member that is not a JSON-RPC message")
                        }
                    }
                }
            }
            _ => {
                tracing::warn!(target: TARGET, "the server sent something that is not a JSON-RPC message");
            }
        }
    }

    /// Routes one message from the server. `origin`: the call whose answer carried it (an event
    /// stream in answer to a POST), which takes its requests before whoever holds the floor.
    pub(crate) async fn route(
        &self,
        writer: &mpsc::Sender<Value>,
        message: Map<String, Value>,
        origin: Option<u64>,
    ) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method.as_deref(), message.get("id")) {
            (Some(method), Some(id)) => {
                let id = id.clone();
                if method == "ping" {
                    let _ = writer.send(jsonrpc::response(&id, Ok(json!({})))).await;
                    return;
                }
                // The call whose answer carried the request, if it may be asked (a parked one
                // takes it when it resumes); else, with no such answer (stdio), the floor's.
                let author = match origin {
                    Some(origin) => lock(&self.askers).contains(&origin).then_some(origin),
                    None => *lock(&self.floor_holder),
                };
                let waiter = author.and_then(|id| lock(&self.waiters).get(&id).cloned());
                let delivered = match waiter {
                    Some(waiter) => waiter.events.try_send(Event::Request(message)).is_ok(),
                    None => false,
                };
                if !delivered {
                    let error = if self.settings.questions == ServerQuestions::Off {
                        // Declared to it as none of the client's capabilities: refused so.
                        tracing::info!(target: TARGET, method, "the server asked, and its questions are off (server_questions): refused");
                        RpcError::new(METHOD_NOT_FOUND, &texts::upstream_undeclared(method))
                    } else {
                        tracing::debug!(target: TARGET, method, "a server-to-client request outside any call: refused");
                        RpcError::new(
                            METHOD_NOT_FOUND,
                            "no call is running that could carry this request to the client",
                        )
                    };
                    let _ = writer.send(jsonrpc::response(&id, Err(error))).await;
                }
            }
            (Some(method), None) => {
                // Progress names its call by the token the adapter gave it (the call's id); a log
                // message, by the answer that carried it or (stdio) the call holding the floor.
                let about = match method {
                    "notifications/progress" => message
                        .get("params")
                        .and_then(|p| p.get("progressToken"))
                        .and_then(Value::as_u64),
                    "notifications/message" => origin.or(*lock(&self.floor_holder)),
                    _ => None,
                };
                let waiter = about.and_then(|id| lock(&self.waiters).get(&id).cloned());
                // Copied only for a listen that is open.
                if CHANGES.contains(&method) && self.changes.receiver_count() > 0 {
                    let _ = self.changes.send(message.clone());
                }
                if method == "notifications/message" {
                    let params = message.get("params").cloned().unwrap_or(Value::Null);
                    tracing::info!(target: TARGET, %params, "the server logged");
                } else {
                    tracing::debug!(target: TARGET, method, "a notification from the server");
                }
                if let Some(waiter) = waiter {
                    // Lost when the call's queue is full: notifications are not worth a stall.
                    let _ = waiter.events.try_send(Event::Notification(message));
                }
            }
            (None, Some(id)) => {
                let waiter = id.as_u64().and_then(|id| lock(&self.waiters).remove(&id));
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.events.try_send(Event::Response(message));
                    }
                    None => tracing::debug!(target: TARGET, %id, "a response no call waits for"),
                }
            }
            (None, None) => {
                tracing::warn!(target: TARGET, "the server sent a message without method or id");
            }
        }
    }

    /// Every call in flight learns that the server is gone (the child exited, the session was
    /// lost); parked calls are gone with it.
    pub(crate) fn connection_lost(&self) {
        self.connection_lost_but(|_| false);
    }

    /// [`connection_lost`](Self::connection_lost), but the calls `keep` names still wait (the
    /// server never saw their request: it is sent again in the new session).
    pub(crate) fn connection_lost_but(&self, keep: impl Fn(u64) -> bool) {
        // New requests wait for the restart rather than write to a closed pipe.
        self.state.send_if_modified(|state| {
            let ready = matches!(state, State::Ready(_));
            if ready {
                *state = State::Starting;
            }
            ready
        });
        let waiters = {
            let mut waiters = lock(&self.waiters);
            let all = std::mem::take(&mut *waiters);
            let (kept, gone): (HashMap<_, _>, HashMap<_, _>) =
                all.into_iter().partition(|(id, _)| keep(*id));
            *waiters = kept;
            gone
        };
        lock(&self.askers).retain(|id| keep(*id));
        for waiter in waiters.into_values() {
            let _ = waiter.events.try_send(Event::Exited);
        }
        self.hold_floor(None);
        self.parked.clear();
    }

    /// A request of the adapter's own (the handshake), answered or not within the start timeout.
    pub(crate) async fn ask(
        &self,
        writer: &mpsc::Sender<Value>,
        method: &str,
        params: Value,
    ) -> Result<Value, Unanswered> {
        let (id, mut events) = self.register();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let _ = writer.send(request).await;
        let deadline = tokio::time::Instant::now() + self.settings.start_timeout;
        let outcome = loop {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                // A log line the server sent while it answered: not the answer.
                Ok(Some(Event::Notification(_))) => {}
                outcome => break outcome,
            }
        };
        self.forget(id);
        match outcome {
            Ok(Some(Event::Response(mut response))) => match response.remove("result") {
                Some(result) => Ok(result),
                None => Err(Unanswered::Refused(RpcError::relayed(
                    response.remove("error").unwrap_or(Value::Null),
                ))),
            },
            Ok(_) => Err(Unanswered::Failed("the server went away")),
            Err(_) => Err(Unanswered::Failed("no answer in time")),
        }
    }

    /// Pings the server every keep-alive interval; resolves when a ping went unanswered for the
    /// start timeout (never, with no interval). An error answer is an answer: the server lives.
    pub(crate) async fn unresponsive(&self, writer: &mpsc::Sender<Value>) {
        let Some(interval) = self.settings.keep_alive else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(interval).await;
            // An error the server answered is an answer: it lives.
            if let Err(Unanswered::Failed(why)) = self.ask(writer, "ping", json!({})).await {
                tracing::warn!(target: TARGET, %why, "the server did not answer a ping");
                return;
            }
        }
    }

    /// Tells the server about a notification of the adapter's own.
    pub(crate) async fn notify(link: &Link, method: &str, params: Value) {
        link.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }
}

/// One of the front's requests in a session, counted in its load until dropped.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Core>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.load.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a request of the adapter's own got no result.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The server answered it with an error.
    Refused(RpcError),
    /// No answer came: the server went away, or did not answer in time.
    Failed(&'static str),
}

/// `server/discover`, then `initialize` (unless the era is pinned).
pub(crate) async fn handshake(
    core: &Core,
    writer: &mpsc::Sender<Value>,
) -> Result<Negotiated, String> {
    let era = core.settings.era;
    if era != Era::V2025 {
        // What every 2026-07-28 request carries (a server may refuse a request without it).
        let (name, version) = &core.settings.client_info;
        let meta = json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": MRTR_VERSION,
            "io.modelcontextprotocol/clientCapabilities": client_capabilities(core.settings.questions),
            "io.modelcontextprotocol/clientInfo": {"name": name, "version": version},
        }});
        match core.ask(writer, "server/discover", meta).await {
            Ok(discovered) if speaks_mrtr(&discovered) => return Ok(Negotiated::V2026),
            Ok(_) | Err(_) if era == Era::V2026 => {
                return Err("it did not answer server/discover as a 2026-07-28 server".to_owned());
            }
            _ => {}
        }
    }
    let (name, version) = &core.settings.client_info;
    let params = json!({
        "protocolVersion": LEGACY_VERSIONS[0],
        "capabilities": client_capabilities(core.settings.questions),
        "clientInfo": {"name": name, "version": version},
    });
    let initialized = core
        .ask(writer, "initialize", params)
        .await
        .map_err(|unanswered| match unanswered {
            // The transport's own failure (the server could not be reached, …), as it says it.
            Unanswered::Refused(error) => match error.message() {
                Some(message) if error.code() == Some(INTERNAL_ERROR) => {
                    format!("its initialize failed: {}", message.trim_end_matches('.'))
                }
                _ => format!("it refused initialize ({error})"),
            },
            Unanswered::Failed(why) => format!("it refused initialize ({})", Value::from(why)),
        })?;
    let version = initialized
        .get("protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .ok_or_else(|| {
            format!(
                "it answered initialize with a protocol version the adapter does not speak ({})",
                initialized.get("protocolVersion").unwrap_or(&Value::Null)
            )
        })?
        .to_owned();
    Ok(Negotiated::V2025 {
        version,
        initialized,
    })
}

/// Resolves once the adapter is shut down (its last clone dropped, or `shutdown`).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// A JSON-RPC error for a call the server could not finish.
pub(crate) fn failure(message: &str) -> RpcError {
    RpcError::new(INTERNAL_ERROR, message)
}

#[cfg(test)]
mod tests {
    use super::super::config::Stdio;
    use super::*;

    fn request(id: u64) -> Map<String, Value> {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create"});
        request.as_object().cloned().unwrap()
    }

    #[tokio::test]
    async fn a_request_goes_to_the_call_whose_answer_carried_it_if_it_may_be_asked() {
        let settings = Settings::new(Server::Stdio(Stdio::new("unused")));
        let core = Core::new(settings.clone(), &PoolState::new(&settings), 0);
        let (writer, mut written) = mpsc::channel(8);
        let (asking, mut asking_events) = core.register();
        let (plain, mut plain_events) = core.register();
        // A reverse-bridge call held the floor, then was parked (the floor is free again).
        core.hold_floor(Some(asking));
        core.hold_floor(None);

        core.route(&writer, request(100), Some(asking)).await;
        assert!(matches!(asking_events.try_recv(), Ok(Event::Request(_))));

        // In the answer to a call that may not be asked: refused, given to no one.
        core.route(&writer, request(101), Some(plain)).await;
        assert!(plain_events.try_recv().is_err());
        assert!(asking_events.try_recv().is_err());
        let refused = written.try_recv().unwrap();
        assert_eq!(
            (refused["id"].as_u64(), refused["error"]["code"].as_i64()),
            (Some(101), Some(METHOD_NOT_FOUND))
        );

        // With no answer to come in (stdio): the floor's, and nobody holds it.
        core.route(&writer, request(102), None).await;
        assert_eq!(written.try_recv().unwrap()["id"], 102);
        core.hold_floor(Some(asking));
        core.route(&writer, request(103), None).await;
        assert!(matches!(asking_events.try_recv(), Ok(Event::Request(_))));

        // A forgotten call is asked nothing more.
        core.forget(asking);
        core.route(&writer, request(104), Some(asking)).await;
        assert_eq!(written.try_recv().unwrap()["id"], 104);
    }
}
