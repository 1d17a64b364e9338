//! `Upstream`: the Tower service in front of the child, speaking 2026-07-28 JSON-RPC over HTTP.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tokio::sync::watch;
use tower_service::Service;

use super::child;
use super::config::{Era, Routes, Server, ServerQuestions, Settings};
use super::core::{Core, PoolState, State};
use super::front::{ResponseBody, serve};
use super::pool::Pool;
#[cfg(feature = "upstream-http")]
use super::streamable;
use crate::store::PendingAnswers;
use crate::util::BoxFuture;
use crate::{BoxError, ElicitationLayer};

/// The future of [`Upstream`]'s response.
pub struct ResponseFuture {
    inner: BoxFuture<'static, Response<ResponseBody>>,
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<ResponseBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx).map(Ok)
    }
}

/// Makes an MCP server (a child process, or a Streamable HTTP endpoint) look like a 2026-07-28
/// multi round-trip server behind HTTP: a leaf Tower service to put
/// [`ElicitationLayer`] in front of. Cheap to clone; the child is
/// killed (an HTTP session ended) when the last clone is dropped, or at
/// [`shutdown`](Self::shutdown). Built with [`Upstream::builder`]. See the [module](super).
#[derive(Clone, Debug)]
pub struct Upstream {
    pool: Arc<Pool>,
    handle: Arc<Handle>,
}

/// The last clone's drop stops the child.
#[derive(Debug)]
struct Handle {
    shutdown: watch::Sender<bool>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

impl Upstream {
    /// Creates the builder of the adapter for `server` (a [`Stdio`](super::Stdio) child, or an
    /// [`Http`](super::Http) endpoint with feature `upstream-http`), every setting at its
    /// default; [`UpstreamBuilder::spawn`] starts it.
    pub fn builder(server: impl Into<Server>) -> UpstreamBuilder {
        UpstreamBuilder {
            settings: Settings::new(server.into()),
        }
    }

    /// Returns how many calls are parked now: held while the client answers the server's own
    /// questions, at most [`UpstreamBuilder::max_parked`]. For a gauge.
    pub fn parked_calls(&self) -> usize {
        self.pool.first().bounds.parked()
    }

    /// Returns how many of the adapter's sessions are up now (handshaken, not restarting), of
    /// [`UpstreamBuilder::sessions`]. For a gauge, or to wait for a pool to start.
    pub fn live_sessions(&self) -> usize {
        self.pool
            .sessions()
            .iter()
            .filter(|core| core.is_ready())
            .count()
    }

    /// Stops the child (killed if it does not exit), or ends the HTTP session, and waits until
    /// it is gone. Requests after
    /// it are answered with an error; clones stop with it.
    pub async fn shutdown(&self) {
        self.handle.shutdown.send_replace(true);
        for core in self.pool.sessions() {
            let mut state = core.state.subscribe();
            let _ = state.wait_for(|s| matches!(s, State::Stopped)).await;
        }
    }
}

/// The settings of an [`Upstream`], then [`spawn`](Self::spawn).
#[derive(Debug, Clone)]
#[must_use]
pub struct UpstreamBuilder {
    settings: Settings,
}

impl UpstreamBuilder {
    /// Sets the upstream's era: found out by default ([`Era::Detect`]).
    pub fn era(mut self, era: Era) -> Self {
        self.settings.era = era;
        self
    }

    /// Sets whether a 2025-era server may ask the client questions (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`) through the adapter: [`ServerQuestions::Relay`]
    /// by default (the reverse bridge; one call at a time in a stdio session, since the server's
    /// requests name no call). [`ServerQuestions::Off`] declares none of those capabilities in
    /// `initialize`, refuses such a request to the server, and runs calls concurrently.
    ///
    /// ```
    /// use tower_elicitation::upstream::{ServerQuestions, Stdio, Upstream};
    ///
    /// // The gates in front ask; the server's tools never do.
    /// let builder = Upstream::builder(Stdio::new("my-mcp-server"))
    ///     .server_questions(ServerQuestions::Off);
    /// # let _ = builder;
    /// ```
    pub fn server_questions(mut self, questions: ServerQuestions) -> Self {
        self.settings.questions = questions;
        self
    }

    /// Sets how many requests go to the upstream at the same time (default 64); more wait their
    /// turn.
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.settings.max_in_flight = max;
        self
    }

    /// Sets how many calls may be parked for the client's answers at once (default 256); one more is
    /// cancelled at the upstream and answered with an error.
    pub fn max_parked(mut self, max: usize) -> Self {
        self.settings.max_parked = max;
        self
    }

    /// Sets the most of the in-flight bound ([`max_in_flight`](Self::max_in_flight)) and of the
    /// parked bound ([`max_parked`](Self::max_parked)) one caller may hold (default `0.25`, a
    /// quarter; at least one each), so that one caller cannot starve the others. Callers are
    /// told apart as parked calls are bound to them (their keyed tag, see
    /// [`for_layer`](Self::for_layer)); every anonymous caller counts as one caller. A
    /// request of a caller that holds its share of the in-flight bound (its requests running or
    /// waiting for a turn) is refused at once, and a call that would park beyond its share of
    /// the parked bound is cancelled at the upstream; each gets a JSON-RPC error (`-32603`) that
    /// names the bound ("This caller holds 4 of 16 parked calls (a quarter …)"). `1.0` lets a
    /// caller hold whole bounds.
    ///
    /// A share not above 0, or above 1, is an error at [`spawn`](Self::spawn).
    ///
    /// ```
    /// use tower_elicitation::upstream::{Stdio, Upstream};
    ///
    /// // Of 64 requests in flight, a caller gets 16; of 32 parked calls, 8.
    /// let builder = Upstream::builder(Stdio::new("my-mcp-server"))
    ///     .max_parked(32)
    ///     .fair_share(0.25);
    /// # let _ = builder;
    /// ```
    pub fn fair_share(mut self, share: f64) -> Self {
        self.settings.fair_share = share;
        self
    }

    /// Sets how many sessions with a stdio server run at once (default 1): `n` children of the
    /// same command, each with its own floor (a 2025-era server's questions over stdio name no
    /// call, so each session runs one call that may be asked at a time:
    /// [`server_questions`](Self::server_questions)). A call takes the least loaded live
    /// session; a parked call's rounds resume in the session holding it (its `requestState`
    /// names the session; a retry routed from another replica reaches it the same way). A
    /// session whose child exits is restarted alone: its calls in flight get an error, its
    /// parked calls are gone (their retries are refused as for an expired call), the others
    /// keep serving. The bounds ([`max_in_flight`](Self::max_in_flight),
    /// [`max_parked`](Self::max_parked)) are the whole pool's. A call's progress and log
    /// notifications come from its own session; other notifications (`list_changed`, …) are
    /// logged per session, as with one.
    ///
    /// **Only for a stateless server**: each child has its own memory, and the calls of one
    /// caller land in any of them. A server whose tools read and write files, a database or an
    /// API may be pooled (`server-filesystem`, `server-fetch`, most API wrappers); one that holds
    /// state in its process may not (`server-memory`'s knowledge graph, a server that keeps a
    /// browser page or a shell open between calls, one that counts or caches per session): its
    /// callers would see a different state on each call. `0` is an error at
    /// [`spawn`](Self::spawn), as is more than 1 with an HTTP server (one session takes its
    /// calls at once).
    ///
    /// ```
    /// use tower_elicitation::upstream::{Stdio, Upstream};
    ///
    /// // A stateless server whose tools ask: four calls that may be asked run at once.
    /// let builder = Upstream::builder(Stdio::new("my-stateless-mcp-server")).sessions(4);
    /// # let _ = builder;
    /// ```
    pub fn sessions(mut self, n: usize) -> Self {
        self.settings.sessions = n;
        self
    }

    /// Sets how long a parked call waits for the retry with the answers (default 600 s, the layer's
    /// token lifetime); then the upstream gets `notifications/cancelled`.
    pub fn parked_timeout(mut self, timeout: Duration) -> Self {
        self.settings.parked_timeout = timeout;
        self
    }

    /// Sets how long the upstream may take to answer one request (default 300 s); then it is
    /// cancelled.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.settings.request_timeout = timeout;
        self
    }

    /// Sets how long a request waits for an upstream that is (re)starting (default 30 s), and how long
    /// the handshake may take.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.settings.start_timeout = timeout;
        self
    }

    /// Sets the longest wait before the adapter starts again a child that exited, or retries the
    /// handshake with a server that failed it (default 10 s; less than 100 ms counts as 100 ms).
    /// The first wait is 100 ms and doubles after each failed start up to `max`; it starts over
    /// once a child has run for 30 s. Requests meanwhile get a JSON-RPC error saying why the
    /// server is down.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_elicitation::upstream::{Stdio, Upstream};
    ///
    /// // A server that crashes is tried again at least every 2 seconds.
    /// let builder = Upstream::builder(Stdio::new("my-mcp-server"))
    ///     .restart_backoff(Duration::from_secs(2));
    /// # let _ = builder;
    /// ```
    pub fn restart_backoff(mut self, max: Duration) -> Self {
        self.settings.max_backoff = max.max(super::config::FIRST_BACKOFF);
        self
    }

    /// Sets how often the adapter pings the server (default every 30 s; `None`: never). A child
    /// that does not answer within the [start timeout](Self::start_timeout) is taken for hung:
    /// it is killed, and started and initialized again (the calls in flight get an error). Over
    /// HTTP the ping keeps a 2025-era session alive, and finds out when the server has expired
    /// it (its 404): a new session is then opened.
    pub fn keep_alive(mut self, interval: Option<Duration>) -> Self {
        self.settings.keep_alive = interval;
        self
    }

    /// Takes the caller's identity as `layer` does (the `Authorization` header, or
    /// [`ElicitationLayer::principal_from`]), and binds each parked call to a keyed tag of it made
    /// with `layer`'s keyring, as the layer binds its tokens and the
    /// [legacy bridge](crate::bridge::LegacyBridgeLayer::for_layer) its sessions: one identity,
    /// configured once. Give it the finished layer (options set on `layer` afterwards do not
    /// reach the adapter). Without it the adapter binds parked calls to the `Authorization`
    /// header, under a key of its own: with a layer that takes the principal from elsewhere (a
    /// proxy's header, an extension), call this, or a retry is taken as the caller the header
    /// names rather than the one the layer checked.
    pub fn for_layer(mut self, layer: &ElicitationLayer) -> Self {
        self.settings.callers = layer.caller_binding();
        self
    }

    /// Routes a retry that lands on another replica than the one holding its parked call to
    /// that replica, and the answer back, through `pending`: the legacy bridge's registry of
    /// waiting calls, e.g. `RedisStore::pending_answers()` (feature `redis`), shared by every
    /// replica. Without it, such a retry gets an error saying it must reach the replica that
    /// asked. A routed retry's progress and log notifications are not relayed: its answer is one
    /// JSON message.
    ///
    /// ```
    /// use tower_elicitation::store::MemoryPendingAnswers;
    /// use tower_elicitation::upstream::{Stdio, Upstream};
    ///
    /// // In one process; with Redis, `redis.pending_answers()` reaches every replica.
    /// let builder = Upstream::builder(Stdio::new("my-mcp-server"))
    ///     .route_retries(MemoryPendingAnswers::new());
    /// # let _ = builder;
    /// ```
    pub fn route_retries(mut self, pending: impl PendingAnswers) -> Self {
        self.settings.routes = Some(Routes(Arc::new(pending)));
        self
    }

    /// The largest request body read from the front (default 4 MiB; 413 above, 400 for a body
    /// that fails while it is read).
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.settings.max_body_bytes = max;
        self
    }

    /// The largest message read from the server (default 16 MiB): a line from a child (a longer
    /// one is skipped), an HTTP answer's JSON body (skipped) or one of its events (the stream is
    /// left).
    pub fn max_message_bytes(mut self, max: usize) -> Self {
        self.settings.max_message_bytes = max;
        self
    }

    /// The `clientInfo` given to a 2025-era upstream's `initialize` (default
    /// `tower-elicitation-upstream` and the crate's version).
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.settings.client_info = (name.into(), version.into());
        self
    }

    /// Starts the child, or the HTTP connection, and the task that supervises it (handshake,
    /// restarts, new sessions); requests wait for the handshake. Call it inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for [`sessions`](Self::sessions) of 0 (or more than 1 with an HTTP
    /// server) or a [`fair_share`](Self::fair_share) out of range.
    /// When the command cannot be started (not found, not executable, a bad working directory);
    /// for an HTTP server, when its URL is not a valid `http://` URL or a header given is not
    /// valid (`InvalidInput`). A child that starts and then exits, or fails its handshake, is
    /// restarted with back-off, as is the handshake with an HTTP server that cannot be reached;
    /// requests meanwhile get a JSON-RPC error saying why.
    pub fn spawn(self) -> std::io::Result<Upstream> {
        let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let settings = self.settings;
        if settings.sessions == 0 {
            return Err(invalid(
                "sessions: at least 1 (one child of the command; more only for a stateless server)",
            ));
        }
        if !(settings.fair_share > 0.0 && settings.fair_share <= 1.0) {
            return Err(invalid(
                "fair_share: more than 0 and at most 1 (a caller's share of the in-flight and parked bounds)",
            ));
        }
        let shared = PoolState::new(&settings);
        let (shutdown, stop) = watch::channel(false);
        // Dropped on an error below: the sessions started already stop with it.
        let handle = Arc::new(Handle { shutdown });
        let mut sessions = Vec::with_capacity(settings.sessions);
        match &settings.server {
            Server::Stdio(stdio) => {
                for session in 0..settings.sessions {
                    let core = Core::new(settings.clone(), &shared, session);
                    child::start(&core, stdio.clone(), stop.clone())?;
                    sessions.push(core);
                }
            }
            #[cfg(feature = "upstream-http")]
            Server::Http(http) => {
                if settings.sessions != 1 {
                    return Err(invalid(
                        "sessions: an HTTP server takes calls at once in one session; a pool is for stdio servers",
                    ));
                }
                let core = Core::new(settings.clone(), &shared, 0);
                streamable::start(&core, http.clone(), stop)?;
                sessions.push(core);
            }
        }
        Ok(Upstream {
            pool: Arc::new(Pool::new(sessions)),
            handle,
        })
    }
}

impl<B> Service<Request<B>> for Upstream
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    #[inline]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        ResponseFuture {
            inner: Box::pin(serve(Arc::clone(&self.pool), request)),
        }
    }
}
