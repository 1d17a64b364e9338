//! `[identity] pass_to_upstream`: each caller's `Authorization` goes to a URL upstream, on a
//! connection (and, for a 2025-era server, a session) of that caller's own.
//!
//! The upstream adapter sends the headers it was built with on every request and none of the
//! front's (one connection, one session, for every caller). So the proxy keeps one adapter per
//! caller credential ([`PerCaller`]), built like the first with the caller's `Authorization` in
//! place of the file's, made on the caller's first call. At most `max_callers` are kept: past
//! that the one used least recently *and idle* is shut down (no call in flight, no response still
//! streaming, none parked); when every one is busy the new caller is refused (HTTP 503) rather
//! than another's call cut. A call with no `Authorization` is refused (HTTP 401) unless
//! `[identity] allow_anonymous = true`, which sends it to the first adapter (the file's own
//! headers).
//!
//! A lone `[upstream]` has one [`PerCaller`] ([`crate::routed`]); with several `[[upstream]]`,
//! each upstream that `pass_to_upstream` names has its own ([`crate::fanout`]), so a caller's
//! credentials reach only the upstreams the file says they are for.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use tower_elicitation::upstream::{ResponseBody, Upstream};

use crate::error::Error;

/// Marks a request the proxy makes of its own (its listings at start, at a reload, after a tool
/// changed): it goes on the file's own adapter, whatever `allow_anonymous` says of callers.
#[derive(Debug, Clone, Copy)]
pub struct ProxysOwn;

/// The header the fan-out carries [`ProxysOwn`] in, down to the member that routes it: set only
/// from the request's extension, and taken off every request that comes from outside.
pub const PROXYS_OWN: http::HeaderName = http::HeaderName::from_static("x-elicitation-proxy-own");

/// Adapters kept for callers at once, by default.
pub const MAX_CALLERS: usize = 256;

/// Builds the adapter of one caller's credentials.
pub type Make = dyn Fn(&HeaderValue) -> Result<Upstream, Error> + Send + Sync;

/// The adapters of callers' own credentials, for one upstream.
pub struct PerCaller {
    make: Box<Make>,
    anonymous: bool,
    max: usize,
    made: Mutex<Adapters>,
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

/// The adapters made so far, one for each caller's credentials, and when each was last used.
#[derive(Default)]
struct Adapters {
    upstreams: HashMap<HeaderValue, Entry>,
    /// A counter of uses: an entry's `used` is its last.
    clock: u64,
}

/// Where a call goes, or why it does not.
pub enum Route {
    /// To this adapter, held busy (a caller's own) while the guard lives.
    To(Upstream, Option<Arc<()>>),
    Refused(StatusCode, &'static str),
    Failed(Error),
}

impl PerCaller {
    /// Adapters `make` builds, one per caller credential, at most `max` kept; a call without
    /// credentials goes to the file's own adapter when `anonymous`, else is refused.
    pub fn new(anonymous: bool, max: usize, make: Box<Make>) -> Self {
        Self {
            make,
            anonymous,
            max: max.max(1),
            made: Mutex::default(),
        }
    }

    /// How many calls the callers' adapters hold parked now.
    pub fn parked_calls(&self) -> usize {
        let made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        made.upstreams
            .values()
            .map(|entry| entry.upstream.parked_calls())
            .sum()
    }

    /// The adapter for a call bearing `authorization`: the caller's own (made on its first
    /// call), `first` (the file's own) for an anonymous call where allowed, or why not.
    pub fn route(&self, first: &Upstream, authorization: Option<&HeaderValue>) -> Route {
        self.route_as(first, authorization, false)
    }

    /// [`route`](Self::route), or the file's own adapter for a request of the proxy's own.
    pub fn route_as(
        &self,
        first: &Upstream,
        authorization: Option<&HeaderValue>,
        proxys_own: bool,
    ) -> Route {
        if proxys_own {
            return Route::To(first.clone(), None);
        }
        let Some(authorization) = authorization else {
            return if self.anonymous {
                Route::To(first.clone(), None)
            } else {
                Route::Refused(
                    StatusCode::UNAUTHORIZED,
                    "This proxy passes each caller's credentials to the server: send an Authorization header.",
                )
            };
        };
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        made.clock += 1;
        let now = made.clock;
        if let Some(entry) = made.upstreams.get_mut(authorization) {
            entry.used = now;
            return Route::To(entry.upstream.clone(), Some(Arc::clone(&entry.busy)));
        }
        if made.upstreams.len() >= self.max {
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
        let upstream = match (self.make)(authorization) {
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

/// An adapter's response body, holding its caller's adapter busy until it ends.
pub struct Held {
    body: ResponseBody,
    _busy: Option<Arc<()>>,
}

impl Held {
    /// `body`, holding `busy` (a caller's adapter's guard, if any) until it is dropped.
    pub fn new(body: ResponseBody, busy: Option<Arc<()>>) -> Self {
        Self { body, _busy: busy }
    }
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
