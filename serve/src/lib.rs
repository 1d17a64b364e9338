//! Serves an axum app on a TCP listener with the bounds a server facing clients it does not trust
//! needs, which `axum::serve` lacks: how long a request's head and body may take to arrive, how
//! many connections are served at once and from one peer, and how long the requests in flight
//! may take to finish at shutdown.
//!
//! The loop is hyper-util's connection builder (HTTP/1.1 and HTTP/2 with prior knowledge),
//! written out here because hyper's `header_read_timeout` does not cover the read that detects
//! the HTTP version: a connection that never sends a byte would hold its slot for ever. So each
//! connection is closed unless its first request head is complete within
//! [`Limits::header_read_timeout`] of its accept; later heads on a kept-alive HTTP/1 connection
//! are bounded by hyper's own header timeout, set to the same value.
//!
//! The workspace's one accept loop: `elicitation-proxy`, the `deploy` and `stack` examples and
//! the tools serve through it.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! let app = axum::Router::new();
//! serve::serve(listener, app, serve::Limits::default(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// The bounds [`serve`] applies.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Limits {
    /// A connection whose first request head is not complete this long after its accept is
    /// closed; the same bounds later heads on a kept-alive connection (hyper's
    /// `header_read_timeout`).
    pub header_read_timeout: Duration,
    /// A request whose body is not complete after this gets an error as its body's next frame
    /// (tower-http's `RequestBodyTimeoutLayer`): the service reading it answers HTTP 400.
    pub body_read_timeout: Duration,
    /// Connections served at once; the next ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Connections served at once from one peer address; a connection over it is closed at its
    /// accept, so that one peer cannot take every slot.
    pub max_connections_per_peer: usize,
    /// How long the requests in flight may take to finish once the shutdown future resolves;
    /// then the connections still open are dropped.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    /// 10 s for a request's head, 30 s for its body, 1,024 connections (all from one peer if
    /// need be), 30 s of grace at shutdown.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_connections_per_peer: 1024,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// Sets [`Limits::header_read_timeout`].
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`Limits::body_read_timeout`].
    #[must_use]
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Sets [`Limits::max_connections`].
    #[must_use]
    pub fn max_connections(mut self, cap: usize) -> Self {
        self.max_connections = cap;
        self
    }

    /// Sets [`Limits::max_connections_per_peer`].
    #[must_use]
    pub fn max_connections_per_peer(mut self, cap: usize) -> Self {
        self.max_connections_per_peer = cap;
        self
    }

    /// Sets [`Limits::shutdown_grace`].
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets the requests
/// in flight finish for up to [`Limits::shutdown_grace`]. `TCP_NODELAY` is set on every socket.
///
/// As `axum::serve` does, an `accept` that fails is logged and the listener goes on: at once
/// after a failure of one connection (aborted, refused, reset), after a second after one of the
/// listener's (out of descriptors), so that the loop does not spin.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let app = app.layer(RequestBodyTimeoutLayer::new(limits.body_read_timeout));
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let peers = Peers::default();
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
        let (tcp, peer, slot) = match accepted {
            (Ok(slot), Ok((tcp, peer))) => (tcp, peer, slot),
            (_, Err(error)) => {
                tracing::warn!(%error, "cannot accept a connection");
                if !matches!(
                    error.kind(),
                    ConnectionAborted | ConnectionRefused | ConnectionReset
                ) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
            // The semaphore is never closed; were it, there would be nothing left to serve.
            (Err(_closed), _) => break,
        };
        let Some(peer_slot) = peers.take(peer.ip(), limits.max_connections_per_peer) else {
            tracing::warn!(
                peer = %peer.ip(),
                cap = limits.max_connections_per_peer,
                "a peer over its connection cap: closed"
            );
            continue;
        };
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "cannot set TCP_NODELAY");
        }
        let headed = Arc::new(AtomicBool::new(false));
        let service = {
            let (app, headed) = (app.clone(), Arc::clone(&headed));
            hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                // hyper calls the service once a request's head is complete.
                headed.store(true, Ordering::Relaxed);
                app.clone().oneshot(request.map(axum::body::Body::new))
            })
        };
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service);
        let connection = graceful.watch(connection.into_owned());
        let head_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = &mut connection => Some(ended),
                () = tokio::time::sleep(head_timeout) => None,
            };
            let ended = match ended {
                Some(ended) => ended,
                None if !headed.load(Ordering::Relaxed) => {
                    tracing::debug!(%peer, ?head_timeout, "no request head in time: closed");
                    return drop((slot, peer_slot));
                }
                None => connection.await,
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop((slot, peer_slot));
        });
    }
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace = ?limits.shutdown_grace,
            "requests still in flight after the shutdown grace: stopping anyway"
        );
    }
}

/// Connections each peer address holds now; an entry leaves with its last connection, so the
/// map holds at most [`Limits::max_connections`] entries.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection counted for its peer, until dropped.
struct PeerSlot {
    peers: Peers,
    address: IpAddr,
}

impl Peers {
    /// A slot for `address`, unless it holds `cap` connections already.
    fn take(&self, address: IpAddr, cap: usize) -> Option<PeerSlot> {
        let mut peers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let held = peers.entry(address).or_default();
        if *held >= cap {
            return None;
        }
        *held += 1;
        Some(PeerSlot {
            peers: self.clone(),
            address,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut peers = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = peers.get_mut(&self.address) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                peers.remove(&self.address);
            }
        }
    }
}
