//! `[identity] pass_to_upstream`: each caller's `Authorization` goes to a URL upstream, on a
//! connection (and, for a 2025-era server, a session) of that caller's own.
//!
//! The upstream adapter sends the headers it was built with on every request and none of the
//! front's (one connection, one session, for every caller). So the proxy keeps one adapter per
//! caller credential, built like the first with the caller's `Authorization` in place of the
//! file's, made on the caller's first call; at most [`MAX_CALLERS`] are kept, the oldest shut
//! down past that. A call with no `Authorization` goes to the first adapter (the file's own
//! headers).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use tower::{Service, ServiceExt};
use tower_elicitation::BoxError;
use tower_elicitation::upstream::{ResponseBody, Upstream};

use crate::Error;

/// Adapters kept for callers at once.
pub const MAX_CALLERS: usize = 256;

type Make = dyn Fn(&HeaderValue) -> Result<Upstream, Error> + Send + Sync;

/// The upstream for each call: the first, or the caller's own.
#[derive(Clone)]
pub struct Routed {
    first: Upstream,
    per_caller: Option<Arc<PerCaller>>,
}

struct PerCaller {
    make: Box<Make>,
    made: Mutex<Made>,
}

#[derive(Default)]
struct Made {
    upstreams: HashMap<HeaderValue, Upstream>,
    order: VecDeque<HeaderValue>,
}

impl Routed {
    /// Every call to `first`.
    pub fn single(first: Upstream) -> Self {
        Self {
            first,
            per_caller: None,
        }
    }

    /// A call with an `Authorization` to the adapter `make` builds for it (once).
    pub fn per_caller(first: Upstream, make: Box<Make>) -> Self {
        Self {
            first,
            per_caller: Some(Arc::new(PerCaller {
                make,
                made: Mutex::default(),
            })),
        }
    }

    /// Returns how many calls every adapter holds now, for the metrics' gauge.
    pub fn parked_calls(&self) -> usize {
        let mut parked = self.first.parked_calls();
        if let Some(per_caller) = &self.per_caller {
            let made = per_caller.made.lock().unwrap_or_else(|e| e.into_inner());
            parked += made
                .upstreams
                .values()
                .map(Upstream::parked_calls)
                .sum::<usize>();
        }
        parked
    }

    fn upstream_for(&self, authorization: Option<&HeaderValue>) -> Result<Upstream, Error> {
        let (Some(per_caller), Some(authorization)) = (&self.per_caller, authorization) else {
            return Ok(self.first.clone());
        };
        let mut made = per_caller.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(upstream) = made.upstreams.get(authorization) {
            return Ok(upstream.clone());
        }
        let upstream = (per_caller.make)(authorization)?;
        made.upstreams
            .insert(authorization.clone(), upstream.clone());
        made.order.push_back(authorization.clone());
        while made.order.len() > MAX_CALLERS {
            if let Some(oldest) = made.order.pop_front()
                && let Some(gone) = made.upstreams.remove(&oldest)
            {
                tokio::spawn(async move { gone.shutdown().await });
            }
        }
        Ok(upstream)
    }
}

impl<B> Service<Request<B>> for Routed
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<ResponseBody, Full<Bytes>>>;
    type Error = Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let upstream = self.upstream_for(request.headers().get(http::header::AUTHORIZATION));
        Box::pin(async move {
            match upstream {
                Ok(upstream) => {
                    let response = upstream.oneshot(request).await?;
                    Ok(response.map(Either::Left))
                }
                Err(why) => {
                    tracing::error!(%why, "cannot reach the upstream with the caller's credentials");
                    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                        "code": -32603,
                        "message": "The proxy cannot reach the server with your credentials."}});
                    let mut response =
                        Response::new(Either::Right(Full::new(Bytes::from(body.to_string()))));
                    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    Ok(response)
                }
            }
        })
    }
}
