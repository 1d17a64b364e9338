//! Serving: the stack (bridge → the current layer → the upstream), `/healthz`, bounded read
//! times and connections, SIGHUP reloads, and a graceful shutdown.
//!
//! The accept loop is hyper-util's, as in `examples/deploy/server.rs`: `axum::serve` bounds
//! neither how long a request's head may take nor how many connections are served.

use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tower::Service;
use tower::util::Oneshot;
use tower::{Layer, ServiceExt};
use tower_elicitation::bridge::{LegacyBridgeLayer, MemorySessionStore};
use tower_elicitation::redis::RedisStore;
use tower_elicitation::{Elicitation, ElicitationLayer};

use crate::Error;
use crate::config::{Config, PrincipalFrom};
use crate::metrics::Metrics;
use crate::routed::Routed;
use tracing::Instrument;

/// How long a request's head may take to arrive, and its body.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 1024;
/// How long the requests in flight may take to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The bridge (fixed: its sessions live across reloads) in front of the current layer.
#[derive(Clone)]
pub struct Stack {
    current: Arc<RwLock<Elicitation<Routed>>>,
    upstream: Routed,
    bridge: LegacyBridgeLayer,
}

impl Stack {
    pub fn new(
        config: &Config,
        layer: ElicitationLayer,
        upstream: Routed,
        redis: Option<&RedisStore>,
    ) -> Self {
        let mut bridge = LegacyBridgeLayer::new(&layer);
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
        Self {
            current: Arc::new(RwLock::new(layer.layer(upstream.clone()))),
            upstream,
            bridge,
        }
    }

    /// Puts `layer` (new gates) in front of the upstream for every request from now on.
    pub fn replace(&self, layer: ElicitationLayer) {
        let service = layer.layer(self.upstream.clone());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = service;
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

/// The app both listeners serve: `/mcp` (bridge → the current layer → the upstream),
/// `/healthz` and `/metrics`.
///
/// Each request to `/mcp` runs in a span naming the caller's tag (for the decision log),
/// taken as `principal` says.
pub fn app(stack: &Stack, metrics: Metrics, principal: PrincipalFrom) -> axum::Router {
    let mcp = stack.bridge.clone().layer(Swap {
        current: Arc::clone(&stack.current),
    });
    let upstream = stack.upstream.clone();
    axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = metrics.clone();
                let upstream = upstream.clone();
                async move { metrics.render(upstream.parked_calls()) }
            }),
        )
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let span = crate::decisions::caller_span(&principal, request.headers());
                next.run(request).instrument(span)
            },
        ))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_READ_TIMEOUT,
        ))
}

/// Runs `reload` on each SIGHUP, logging what it did.
///
/// # Errors
///
/// When the signal handler cannot be installed.
pub fn reload_on_hangup<F>(reload: Arc<F>) -> Result<(), Error>
where
    F: Fn() -> Result<usize, Error> + Send + Sync + 'static,
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            report_reload("SIGHUP", reload());
        }
    });
    Ok(())
}

/// Runs `reload` when the file at `path` changes, as it does on SIGHUP.
///
/// The file is polled (its modification time and length, each [`WATCH_EVERY`]) rather than
/// watched with `notify`: a poll of one file is a few lines, sees an editor's rename-over-save
/// as well as an in-place write or a ConfigMap's symlink swap, and needs no inotify limits.
pub fn reload_on_change<F>(path: std::path::PathBuf, reload: Arc<F>)
where
    F: Fn() -> Result<usize, Error> + Send + Sync + 'static,
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
                report_reload("file changed", reload());
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

/// Serves HTTP until SIGTERM or Ctrl-C.
///
/// # Errors
///
/// When the address cannot be listened on.
pub async fn run(config: &Config, app: axum::Router) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};

    let listener = tokio::net::TcpListener::bind(&config.listen.http)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", config.listen.http))?;
    let address = listener.local_addr()?;
    tracing::info!("listening on http://{address}/mcp");
    println!("listening on http://{address}/mcp");

    let mut terminate = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutting down: no new connections, the requests in flight may finish");
    };
    accept(listener, app, shutdown).await;
    Ok(())
}

async fn accept(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = async {
                let slot = Arc::clone(&slots).acquire_owned().await;
                (slot, listener.accept().await)
            } => accepted,
            () = &mut shutdown => break,
        };
        let (tcp, slot) = match accepted {
            (Ok(slot), Ok((tcp, _))) => (tcp, slot),
            (_, Err(error)) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            (Err(_closed), _) => break,
        };
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "cannot set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {SHUTDOWN_GRACE:?}: stopping anyway");
    }
}
