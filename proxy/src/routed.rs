//! `[identity] pass_to_upstream`: each caller's `Authorization` goes to a URL upstream, on a
//! connection (and, for a 2025-era server, a session) of that caller's own.
//!
//! The upstream adapter sends the headers it was built with on every request and none of the
//! front's (one connection, one session, for every caller). So the proxy keeps one adapter per
//! caller credential, built like the first with the caller's `Authorization` in place of the
//! file's, made on the caller's first call. At most [`MAX_CALLERS`] are kept: past that the one
//! used least recently *and idle* is shut down (no call in flight, no response still streaming,
//! none parked); when every one is busy the new caller is refused (HTTP 503) rather than another's
//! call cut. A call with no `Authorization` is refused (HTTP 401) unless `[identity]
//! allow_anonymous = true`, which sends it to the first adapter (the file's own headers).
//!
//! With several `[[upstream]]` every call goes to the fan-out instead ([`crate::fanout`]), which
//! routes it to the upstream whose name it bears (`pass_to_upstream` is refused there).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Either;
use tower::{Service, ServiceExt};
use tower_elicitation::BoxError;
use tower_elicitation::upstream::{ResponseBody, Upstream};
use tracing::Instrument as _;

use crate::error::Error;
use crate::fanout::{Fanout, Health, OwnBody};

/// Adapters kept for callers at once.
pub const MAX_CALLERS: usize = 256;

type Make = dyn Fn(&HeaderValue) -> Result<Upstream, Error> + Send + Sync;

/// The upstream for each call: the first, the caller's own, or (several `[[upstream]]`) the
/// one the fan-out routes it to.
#[derive(Clone)]
pub struct Routed {
    first: Upstream,
    /// The lone `[upstream]`'s name and sessions, for `/healthz` and `/metrics`.
    name: Arc<str>,
    sessions: usize,
    per_caller: Option<Arc<PerCaller>>,
    fanout: Option<Arc<Fanout>>,
}

struct PerCaller {
    make: Box<Make>,
    anonymous: bool,
    max: usize,
    made: Mutex<Made>,
}

/// One caller's adapter; `busy` is cloned into each of its calls until its response ends.
struct Entry {
    upstream: Upstream,
    busy: Arc<()>,
    used: u64,
}

impl Entry {
    fn idle(&self) -> bool {
        Arc::strong_count(&self.busy) == 1 && self.upstream.parked_calls() == 0
    }
}

#[derive(Default)]
struct Made {
    upstreams: HashMap<HeaderValue, Entry>,
    /// A counter of uses: an entry's `used` is its last.
    clock: u64,
}

/// Where a call goes, or why it does not.
enum Route {
    To(Upstream, Option<Arc<()>>),
    Refused(StatusCode, &'static str),
    Failed(Error),
}

impl Routed {
    /// Every call to `first`.
    pub fn single(first: Upstream) -> Self {
        Self {
            first,
            name: crate::config::Upstream::DEFAULT_NAME.into(),
            sessions: 1,
            per_caller: None,
            fanout: None,
        }
    }

    /// The lone upstream's `name` and `sessions`, as `/healthz` and `/metrics` say them.
    pub fn named(mut self, name: &str, sessions: usize) -> Self {
        self.name = name.into();
        self.sessions = sessions;
        self
    }

    /// Every call to the upstream `fanout` routes it to.
    pub fn fanout(fanout: Fanout) -> Self {
        let first = fanout.members()[0].upstream.clone();
        Self {
            name: fanout.members()[0].name.as_str().into(),
            sessions: fanout.members()[0].sessions,
            first,
            per_caller: None,
            fanout: Some(Arc::new(fanout)),
        }
    }

    /// The fan-out, with several upstreams.
    pub fn several(&self) -> Option<&Fanout> {
        self.fanout.as_deref()
    }

    /// Each upstream's state; a lone `[upstream]`'s first adapter's.
    pub fn health(&self) -> Vec<Health> {
        match &self.fanout {
            Some(fanout) => fanout.health(),
            None => vec![Health {
                name: self.name.to_string(),
                up: self.first.live_sessions() > 0,
                live_sessions: self.first.live_sessions(),
                sessions: self.sessions,
            }],
        }
    }

    /// Stops the file's upstreams (every one of several) and waits until they are gone.
    pub async fn shutdown(&self) {
        match &self.fanout {
            Some(fanout) => {
                let stops = fanout.members().iter().map(|m| m.upstream.shutdown());
                futures_util::future::join_all(stops).await;
            }
            None => self.first.shutdown().await,
        }
    }

    /// A call with an `Authorization` to the adapter `make` builds for it (once), at most `max`
    /// kept; one without to `first` when `anonymous`, else refused.
    pub fn per_caller(first: Upstream, anonymous: bool, max: usize, make: Box<Make>) -> Self {
        Self {
            per_caller: Some(Arc::new(PerCaller {
                make,
                anonymous,
                max: max.max(1),
                made: Mutex::default(),
            })),
            ..Self::single(first)
        }
    }

    /// Returns how many calls every adapter holds now, for the metrics' gauge.
    pub fn parked_calls(&self) -> usize {
        if let Some(fanout) = &self.fanout {
            return fanout
                .members()
                .iter()
                .map(|member| member.upstream.parked_calls())
                .sum();
        }
        let mut parked = self.first.parked_calls();
        if let Some(per_caller) = &self.per_caller {
            let made = per_caller.made.lock().unwrap_or_else(|e| e.into_inner());
            parked += made
                .upstreams
                .values()
                .map(|entry| entry.upstream.parked_calls())
                .sum::<usize>();
        }
        parked
    }

    fn upstream_for(&self, authorization: Option<&HeaderValue>) -> Route {
        let Some(per_caller) = &self.per_caller else {
            return Route::To(self.first.clone(), None);
        };
        let Some(authorization) = authorization else {
            return if per_caller.anonymous {
                Route::To(self.first.clone(), None)
            } else {
                Route::Refused(
                    StatusCode::UNAUTHORIZED,
                    "This proxy passes each caller's credentials to the server: send an Authorization header.",
                )
            };
        };
        let mut made = per_caller.made.lock().unwrap_or_else(|e| e.into_inner());
        made.clock += 1;
        let now = made.clock;
        if let Some(entry) = made.upstreams.get_mut(authorization) {
            entry.used = now;
            return Route::To(entry.upstream.clone(), Some(Arc::clone(&entry.busy)));
        }
        if made.upstreams.len() >= per_caller.max {
            // The least recently used of the idle ones goes; a busy one never.
            let oldest = made
                .upstreams
                .iter()
                .filter(|(_, entry)| entry.idle())
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else {
                return Route::Refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The proxy holds as many callers' connections to the server as it may, all busy: try again shortly.",
                );
            };
            if let Some(gone) = made.upstreams.remove(&oldest) {
                tokio::spawn(async move { gone.upstream.shutdown().await });
            }
        }
        let upstream = match (per_caller.make)(authorization) {
            Ok(upstream) => upstream,
            Err(why) => return Route::Failed(why),
        };
        let busy = Arc::new(());
        made.upstreams.insert(
            authorization.clone(),
            Entry {
                upstream: upstream.clone(),
                busy: Arc::clone(&busy),
                used: now,
            },
        );
        Route::To(upstream, Some(busy))
    }
}

/// A JSON-RPC error answer of the proxy's own.
fn error(status: StatusCode, message: &str) -> Response<Either<Held, OwnBody>> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
        "code": -32603, "message": message}});
    let mut response = Response::new(Either::Right(OwnBody::whole(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An adapter's response body, holding its caller's adapter busy until it ends.
pub struct Held {
    body: ResponseBody,
    _busy: Option<Arc<()>>,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl<B> Service<Request<B>> for Routed
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<Held, OwnBody>>;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // `[telemetry]`: the leg's span, whose context the upstream's request carries (with
        // several upstreams, one span for the fan-out: each member's request carries it).
        let (request, leg) = crate::telemetry::leg(request);
        if let Some(fanout) = &self.fanout {
            let fanout = Arc::clone(fanout);
            return Box::pin(
                async move {
                    let response = fanout.serve(request).await;
                    Ok(response.map(|body| match body {
                        Either::Left(body) => Either::Left(Held { body, _busy: None }),
                        Either::Right(own) => Either::Right(own),
                    }))
                }
                .instrument(leg),
            );
        }
        let route = self.upstream_for(request.headers().get(http::header::AUTHORIZATION));
        let name = Arc::clone(&self.name);
        Box::pin(async move {
            match route {
                Route::To(upstream, busy) => {
                    let response = upstream.oneshot(request).await?;
                    crate::metrics::upstream_answered(&name, Some(response.status()));
                    Ok(response.map(|body| Either::Left(Held { body, _busy: busy })))
                }
                Route::Refused(status, why) => {
                    tracing::warn!(%status, why, "a call refused before the upstream");
                    Ok(error(status, why))
                }
                Route::Failed(why) => {
                    crate::metrics::upstream_answered(&name, None);
                    tracing::error!(%why, "cannot reach the upstream with the caller's credentials");
                    Ok(error(
                        StatusCode::BAD_GATEWAY,
                        "The proxy cannot reach the server with your credentials.",
                    ))
                }
            }
        }
        .instrument(leg))
    }
}
