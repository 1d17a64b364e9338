//! Where each request goes: the lone `[upstream]`'s adapter, the caller's own
//! (`[identity] pass_to_upstream`, [`crate::callers`]), or, with several `[[upstream]]`, the
//! fan-out ([`crate::fanout`]), which routes it to the upstream whose name it bears.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Either;
use tower::{Service, ServiceExt};
use tower_elicitation::BoxError;
use tower_elicitation::upstream::Upstream;
use tracing::Instrument as _;

use crate::callers::{Held, PerCaller, Route};
use crate::fanout::{self, Fanout, OwnBody};
use crate::metrics::Health;

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

    /// A call with an `Authorization` to the caller's own adapter `per_caller` holds (see
    /// [`crate::callers`]); none given, every call to the first.
    pub fn with_callers(mut self, per_caller: Option<PerCaller>) -> Self {
        self.per_caller = per_caller.map(Arc::new);
        self
    }

    /// Returns how many calls every adapter holds now, for the metrics' gauge.
    pub fn parked_calls(&self) -> usize {
        if let Some(fanout) = &self.fanout {
            return fanout
                .members()
                .iter()
                .map(|member| {
                    let callers = member.callers.as_ref().map_or(0, PerCaller::parked_calls);
                    member.upstream.parked_calls() + callers
                })
                .sum();
        }
        let callers = self.per_caller.as_ref().map_or(0, |per| per.parked_calls());
        self.first.parked_calls() + callers
    }

    fn upstream_for(&self, authorization: Option<&HeaderValue>) -> Route {
        match &self.per_caller {
            Some(per_caller) => per_caller.route(&self.first, authorization),
            None => Route::To(self.first.clone(), None),
        }
    }
}

/// A JSON-RPC error answer of the proxy's own.
fn error(status: StatusCode, message: &str) -> Response<Either<Held, OwnBody>> {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
        "code": -32603, "message": message}});
    let mut response = Response::new(Either::Right(fanout::whole(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
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
            return Box::pin(async move { Ok(fanout.serve(request).await) }.instrument(leg));
        }
        let route = self.upstream_for(request.headers().get(http::header::AUTHORIZATION));
        let name = Arc::clone(&self.name);
        Box::pin(async move {
            match route {
                Route::To(upstream, busy) => {
                    let response = upstream.oneshot(request).await?;
                    crate::metrics::upstream_answered(&name, Some(response.status()));
                    Ok(response.map(|body| Either::Left(Held::new(body, busy))))
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
