//! Serving: the stack (bridge → the current exposure → the current layer → the upstream),
//! `/healthz`, bounded read times and connections, SIGHUP reloads, and a graceful shutdown.
//!
//! The accept loop is the workspace's one (`serve/`, shared with the examples and tools):
//! `axum::serve` bounds neither how long a request's head may take nor how many connections
//! are served.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::IntoResponse as _;
use tower::Service;
use tower::util::Oneshot;
use tower::{Layer, ServiceExt};
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::MemorySessionStore;
use tower_elicitation::{Elicitation, ElicitationLayer};

use crate::config::{Bound, Config};
use crate::error::Error;
use crate::exposure::{self, Exposed, Exposure};
use crate::metrics::Metrics;
use crate::routed::Routed;

/// The bridge (fixed: its sessions live across reloads) in front of the current exposure and
/// the current layer.
#[derive(Clone)]
pub struct Stack {
    current: Arc<RwLock<Elicitation<Routed>>>,
    exposure: exposure::Current,
    upstream: Routed,
    bridge: LegacyBridgeLayer,
}

impl Stack {
    /// The stack for `config`: the bridge with `[listen]`'s answer timeout, round cap, body
    /// bound and host names.
    ///
    /// # Errors
    ///
    /// A bound out of range (the file's check says so first, at its line).
    pub fn new(
        config: &Config,
        layer: ElicitationLayer,
        exposure: Exposure,
        upstream: Routed,
        redis: Option<&RedisStore>,
    ) -> Result<Self, Error> {
        let listen = &config.listen;
        let max_rounds = Bound::MAX_ROUNDS.of(listen.max_rounds.as_ref())?;
        let mut bridge = LegacyBridgeLayer::for_layer(&layer)
            .max_rounds(u32::try_from(max_rounds).unwrap_or(u32::MAX))
            .max_body_bytes(Bound::MAX_BODY_BYTES.count(listen.max_body_bytes.as_ref())?);
        if let Some(timeout) = &config.listen.answer_timeout_secs {
            bridge = bridge.answer_timeout(std::time::Duration::from_secs(*timeout.get_ref()));
        }
        if !config.listen.allowed_hosts.is_empty() {
            let hosts = ["localhost", "127.0.0.1", "::1"]
                .into_iter()
                .map(str::to_owned)
                .chain(config.listen.allowed_hosts.iter().cloned());
            bridge = bridge.allowed_hosts(hosts.collect::<Vec<_>>());
        }
        if let Some(redis) = redis {
            bridge = bridge
                .session_store(redis.sessions(MemorySessionStore::DEFAULT_IDLE))
                .pending_answers(redis.pending_answers());
        }
        Ok(Self {
            current: Arc::new(RwLock::new(layer.layer(upstream.clone()))),
            exposure: Arc::new(RwLock::new(Arc::new(exposure))),
            upstream,
            bridge,
        })
    }

    /// Puts `layer` (new gates), behind `exposure`, in front of the upstream for every request
    /// from now on.
    pub fn replace(&self, layer: ElicitationLayer, exposure: Exposure) {
        let service = layer.layer(self.upstream.clone());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = service;
        *self.exposure.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(exposure);
    }
}

/// The current layer, taken afresh for each request.
#[derive(Clone)]
struct Swap {
    current: Arc<RwLock<Elicitation<Routed>>>,
}

impl<R> Service<R> for Swap
where
    Elicitation<Routed>: Service<R>,
{
    type Response = <Elicitation<Routed> as Service<R>>::Response;
    type Error = <Elicitation<Routed> as Service<R>>::Error;
    type Future = Oneshot<Elicitation<Routed>, R>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        let service = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        service.oneshot(request)
    }
}

/// The app both listeners serve: `/mcp` (bridge → the current exposure → the current layer →
/// the upstream), `/healthz`, `/metrics` and `pages` (the approval pages), each answering only
/// to the names `/mcp` answers to.
pub fn app(stack: &Stack, metrics: Metrics, pages: axum::Router) -> axum::Router {
    let swap = Swap {
        current: Arc::clone(&stack.current),
    };
    let mcp = stack
        .bridge
        .clone()
        .layer(Exposed::new(swap, Arc::clone(&stack.exposure)));
    let upstream = stack.upstream.clone();
    let checked = stack.upstream.clone();
    let bridge = stack.bridge.clone();
    axum::Router::new()
        .route(
            "/healthz",
            axum::routing::get(move |query: axum::extract::RawQuery| {
                let upstream = checked.clone();
                async move { health(&upstream, query.0.as_deref()) }
            }),
        )
        .route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = metrics.clone();
                let upstream = upstream.clone();
                async move { metrics.render(upstream.parked_calls(), &upstream.health()) }
            }),
        )
        .nest_service("/mcp", mcp)
        .merge(pages)
        // Every route answers to the names `/mcp` answers to (DNS rebinding): `/metrics`,
        // `/healthz` and the approval pages as well.
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let refusal = bridge.host_refusal(&request_head(&request));
                async move {
                    match refusal {
                        Some(why) => {
                            (http::StatusCode::FORBIDDEN, format!("{why}\n")).into_response()
                        }
                        None => next.run(request).await,
                    }
                }
            },
        ))
}

/// `/healthz`: `ok`; with several upstreams, 503 `degraded: NAME down` while one is down.
/// `?verbose`: JSON with each upstream's state. A lone `[upstream]` answers 200 as it always
/// has (its adapter restarts it; the verbose answer says whether it is up now).
fn health(upstream: &Routed, query: Option<&str>) -> axum::response::Response {
    let states = upstream.health();
    let down: Vec<&str> = states
        .iter()
        .filter(|state| !state.up)
        .map(|state| state.name.as_str())
        .collect();
    let degraded = upstream.several().is_some() && !down.is_empty();
    let status = if degraded {
        http::StatusCode::SERVICE_UNAVAILABLE
    } else {
        http::StatusCode::OK
    };
    let verbose = query.is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some("verbose"))
    });
    if verbose {
        let upstreams: serde_json::Map<String, serde_json::Value> = states
            .iter()
            .map(|state| {
                (
                    state.name.clone(),
                    serde_json::json!({"up": state.up, "live_sessions": state.live_sessions, "sessions": state.sessions}),
                )
            })
            .collect();
        let body = serde_json::json!({
            "status": if degraded { "degraded" } else { "ok" },
            "down": down,
            "upstreams": upstreams,
        });
        return (status, axum::Json(body)).into_response();
    }
    if degraded {
        return (status, format!("degraded: {} down\n", down.join(", "))).into_response();
    }
    (status, "ok\n").into_response()
}

/// The head of `request` (method, URI and headers), for the Host and Origin check.
fn request_head(request: &axum::extract::Request) -> http::request::Parts {
    let mut head = http::Request::new(());
    *head.method_mut() = request.method().clone();
    *head.uri_mut() = request.uri().clone();
    *head.headers_mut() = request.headers().clone();
    head.into_parts().0
}

/// Runs `reload` on each SIGHUP, in a task of its own, logging what it did.
///
/// # Errors
///
/// When the signal handler cannot be installed.
pub fn reload_on_hangup<F, R>(reload: F) -> Result<(), Error>
where
    F: Fn() -> R + Send + 'static,
    R: Future<Output = Result<usize, Error>> + Send,
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            report_reload("SIGHUP", reload().await);
        }
    });
    Ok(())
}

/// Runs `reload` when the file at `path` changes, as it does on SIGHUP (in a task of its own;
/// the reload itself waits for any other to end).
///
/// The file is polled (its modification time and length, each [`WATCH_EVERY`]) rather than
/// watched with `notify`: a poll of one file is a few lines, sees an editor's rename-over-save
/// as well as an in-place write or a ConfigMap's symlink swap, and needs no inotify limits.
pub fn reload_on_change<F, R>(path: std::path::PathBuf, reload: F)
where
    F: Fn() -> R + Send + 'static,
    R: Future<Output = Result<usize, Error>> + Send,
{
    let stamp = |path: &std::path::Path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    tokio::spawn(async move {
        let mut seen = stamp(&path);
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let now = stamp(&path);
            if now != seen && now.is_some() {
                seen = now;
                report_reload("file changed", reload().await);
            }
        }
    });
}

/// How often [`reload_on_change`] looks at the file.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Logs a reload's outcome.
pub fn report_reload(why: &str, outcome: Result<usize, Error>) {
    match outcome {
        Ok(count) => {
            tracing::info!(
                trigger = why,
                gates = count,
                "reloaded: the new gates apply from now on"
            )
        }
        Err(error) => tracing::error!(trigger = why, %error, "reload refused: the old gates stay"),
    }
}

/// Listens on `[listen] http`, saying where in the log, and on stdout when `announce` (stdout is
/// not MCP's).
///
/// # Errors
///
/// When the address cannot be listened on.
pub async fn bind(config: &Config, announce: bool) -> Result<tokio::net::TcpListener, Error> {
    let http = config.listen.http();
    let listener = tokio::net::TcpListener::bind(http)
        .await
        .map_err(|error| format!("cannot listen on {http}: {error}"))?;
    let address = listener.local_addr()?;
    tracing::info!("listening on http://{address}/mcp");
    if announce {
        println!("listening on http://{address}/mcp");
    }
    Ok(listener)
}

/// Serves HTTP on `listener` until SIGTERM, Ctrl-C or `stop`, letting the requests in flight
/// finish.
///
/// # Errors
///
/// When a bound in `[listen]` is out of range, or the signal handler cannot be installed.
pub async fn run(
    config: &Config,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};

    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            _ = stop => {}
        }
        tracing::info!("shutting down: no new connections, the requests in flight may finish");
    };
    let listen = &config.listen;
    let limits = serve::Limits::default()
        .header_read_timeout(Duration::from_secs(*listen.head_timeout_secs.get_ref()))
        .body_read_timeout(Bound::BODY_TIMEOUT.secs(listen.body_timeout_secs.as_ref())?)
        .max_connections(Bound::MAX_CONNECTIONS.count(listen.max_connections.as_ref())?)
        .max_connections_per_peer(*listen.max_connections_per_peer.get_ref())
        .shutdown_grace(Bound::SHUTDOWN_GRACE.secs(listen.shutdown_grace_secs.as_ref())?);
    serve::serve(listener, app, limits, shutdown).await;
    Ok(())
}
