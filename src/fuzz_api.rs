//! **Not public API**: thin wrappers over crate internals, for fuzzing and property tests only.
//!
//! `tests/it/properties.rs` and the targets under `fuzz/` reach the token format, the SSE splitter
//! and the envelope peek through this module, and drive the whole layer synchronously with
//! [`exchange`](crate::__fuzz::exchange); `tests/it/cache_bounds.rs` reads what the layer's caches
//! weigh with [`cache_weight`](crate::__fuzz::cache_weight). Nothing here is covered by semver:
//! it may change or disappear in any release, and no application should call it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use serde_json::Value;
use tower_layer::Layer;
use tower_service::Service;

use crate::token::claims::{self, Claims};
use crate::token::sealed::Sealed;
use crate::token::{self, Clock};
use crate::wire::jsonrpc::{self, Peek};
use crate::{ElicitationLayer, Keyring, RequestBody};

/// What a request must match for a token to open (the token binding, with the arguments given
/// as their digest, see [`args_digest`]).
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'a str,
    /// Tool or prompt name, or resource URI.
    pub target: &'a str,
    /// [`args_digest`] of the arguments.
    pub args_digest: &'a str,
    /// The caller's principal, as the layer would take it from the request.
    pub principal: Option<&'a [u8]>,
    /// The layer's configured audience.
    pub audience: Option<&'a str>,
}

/// The digest the layer binds for `arguments` (`None`, `null` and `{}` are the same call).
pub fn args_digest(arguments: Option<&Value>) -> String {
    let raw = arguments.and_then(|v| serde_json::value::RawValue::from_string(v.to_string()).ok());
    claims::args_digest(raw.as_deref()).unwrap_or_default()
}

/// The digest the layer binds for arguments written as `text` (numbers as written; `None` when
/// the text is not JSON or repeats a key).
pub fn args_digest_json(text: &str) -> Option<String> {
    let raw = serde_json::value::RawValue::from_string(text.to_owned()).ok()?;
    claims::args_digest(Some(&raw)).ok()
}

/// Whether the layer's one-pass JSON reader and serde_json read `text` alike, along each path
/// the layer reads (the message alone, `params`, `result.inputRequests`): wherever the fast
/// reader reads an object, serde_json reads the same members. `true` when the fast reader leaves
/// the text to serde_json.
pub fn json_reads_agree(text: &str) -> bool {
    crate::wire::json::READ_PATHS
        .iter()
        .all(|path| crate::wire::json::skim_agrees(text, path))
}

/// Whether the layer's one-pass JSON reader reads `text` (an object) itself, rather than leaving
/// it to serde_json: it should, for every JSON object nested no deeper than 64.
pub fn json_skims(text: &str) -> bool {
    crate::wire::json::skims(text, &[])
}

/// Seals claims given as JSON (the token's claims object, field names as in the token) with the
/// keyring's active key, tagging `principal`. `None` when the JSON is not claims.
pub fn seal_claims_json(
    keyring: &Keyring,
    claims_json: &[u8],
    principal: Option<&[u8]>,
) -> Option<String> {
    seal(keyring, claims_json, principal, None)
}

/// How a token is opened: the size bound, now (Unix seconds) and the clock skew tolerated.
#[derive(Debug, Clone, Copy)]
pub struct Opening {
    /// The longest token accepted.
    pub max_len: usize,
    /// Now, in Unix seconds.
    pub now: u64,
    /// Seconds of clock skew tolerated.
    pub skew: u64,
}

/// Opens `token` as the layer does on a retry: size bound, format, key id, MAC, claims, time,
/// then every binding. `Ok` holds the claims as JSON; `Err` the reason (which the layer only
/// logs).
pub fn open_token(
    keyring: &Keyring,
    token: &str,
    at: Opening,
    binding: &Binding<'_>,
) -> Result<Value, String> {
    open(keyring, None, token, at, binding)
}

/// The tokens a layer keeps after sealing them, so that their retries skip the MAC and claims
/// passes. [`SealedTokens::seal_claims_json`] seals and keeps; [`SealedTokens::open_token`] opens a kept token
/// from here and any other in full, as the layer does.
#[derive(Default)]
pub struct SealedTokens(Sealed);

impl SealedTokens {
    /// [`seal_claims_json`], keeping the token.
    pub fn seal_claims_json(
        &self,
        keyring: &Keyring,
        claims_json: &[u8],
        principal: Option<&[u8]>,
    ) -> Option<String> {
        seal(keyring, claims_json, principal, Some(&self.0))
    }

    /// [`open_token`], through the kept tokens.
    pub fn open_token(
        &self,
        keyring: &Keyring,
        token: &str,
        at: Opening,
        binding: &Binding<'_>,
    ) -> Result<Value, String> {
        open(keyring, Some(&self.0), token, at, binding)
    }
}

fn seal(
    keyring: &Keyring,
    claims_json: &[u8],
    principal: Option<&[u8]>,
    kept: Option<&Sealed>,
) -> Option<String> {
    let mut claims: Claims = serde_json::from_slice(claims_json).ok()?;
    let token = token::seal(keyring, &mut claims, principal);
    if let Some(kept) = kept {
        kept.insert(&token, Arc::new(claims));
    }
    Some(token)
}

fn open(
    keyring: &Keyring,
    kept: Option<&Sealed>,
    token: &str,
    at: Opening,
    binding: &Binding<'_>,
) -> Result<Value, String> {
    let clock = Clock {
        now: at.now,
        skew: at.skew,
    };
    let args = claims::Arguments::from_digest(binding.args_digest.to_owned());
    let binding = claims::Binding {
        method: binding.method,
        target: binding.target,
        args: &args,
        principal: binding.principal,
        audience: binding.audience,
    };
    token::open(keyring, kept, token, at.max_len, clock, &binding)
        .map(|claims| serde_json::to_value(&*claims).unwrap_or(Value::Null))
        .map_err(|reject| reject.to_string())
}

/// What a layer's caches of questions and `_meta` readings weigh, in bytes: each entry as its
/// key text and an estimate of what its value keeps alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheWeight {
    /// The compiled validators, the questions they belong to and their spellings.
    pub questions: usize,
    /// What each kept `_meta` text says.
    pub metas: usize,
    /// The most the two may weigh together.
    pub max: usize,
}

/// What `layer`'s caches of questions, validators and `_meta` readings weigh.
pub fn cache_weight(layer: &ElicitationLayer) -> CacheWeight {
    let (questions, metas, max) = layer.cache_weight();
    CacheWeight {
        questions,
        metas,
        max,
    }
}

/// Feeds `chunks` to the layer's incremental SSE splitter: the complete events in order, and
/// what is left after the last one. Panics when what the splitter noted of an event (where its
/// `data` line is) reads or rewrites it otherwise than its lines do.
pub fn sse_split(chunks: &[&[u8]]) -> (Vec<Bytes>, Bytes) {
    crate::wire::sse::split_all(chunks)
}

/// An event's `data` as the layer reads it (its `data:` lines joined by `\n`).
pub fn sse_data(event: &[u8]) -> Option<Vec<u8>> {
    crate::wire::sse::data(event).map(std::borrow::Cow::into_owned)
}

/// What the layer's borrowed peek makes of a POST body: `"call <method>"`, `"other"`,
/// `"batch"` or `"invalid <code>"`.
pub fn peek(body: &[u8]) -> String {
    match jsonrpc::peek(body) {
        Peek::Call(call) => format!("call {}", call.method.as_str()),
        Peek::Task(call) => format!("task {}", call.method.as_str()),
        Peek::Refuse(reply) => format!("refuse {:?}", reply.kind),
        Peek::Other => "other".to_owned(),
        Peek::Batch => "batch".to_owned(),
        Peek::Invalid { code, .. } => format!("invalid {code}"),
    }
}

/// A body of the given chunks, one data frame each, with no length known in advance.
#[derive(Debug, Default, Clone)]
pub struct Chunks(VecDeque<Bytes>);

impl Chunks {
    /// The chunks, in order (empty chunks are kept: a body may send them).
    pub fn new<I: IntoIterator<Item = B>, B: Into<Bytes>>(chunks: I) -> Self {
        Self(chunks.into_iter().map(Into::into).collect())
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// What the inner service was given: the request head and the whole body.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request head as the inner service got it.
    pub parts: http::request::Parts,
    /// The body it read.
    pub body: Bytes,
}

/// One request through the layer.
#[derive(Debug)]
pub struct Exchange {
    /// The response head the client got.
    pub parts: http::response::Parts,
    /// The whole body the client got.
    pub body: Bytes,
    /// Every request the inner service was given, in order.
    pub received: Vec<Received>,
}

type Respond = dyn Fn(&Received) -> Response<Chunks> + Send + Sync;

#[derive(Clone)]
struct Inner {
    respond: Arc<Respond>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Service<Request<RequestBody<Chunks>>> for Inner {
    type Response = Response<Chunks>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Chunks>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody<Chunks>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // Neither the layer's buffered bytes nor `Chunks` can fail; were one to, the client
            // would see a 500 the inner service never answered, and no request recorded.
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(_) => {
                    let mut failed = Response::new(Chunks::default());
                    *failed.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                    return Ok(failed);
                }
            };
            let received = Received { parts, body };
            let response = (this.respond)(&received);
            this.received
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(received);
            Ok(response)
        })
    }
}

/// Sends `request` through `layer` in front of an inner service that answers each request with
/// `respond`, and reads the whole response, without any runtime: everything involved is ready
/// at once, so the futures are polled to completion on the spot.
///
/// # Panics
///
/// If the layer is still pending after many polls with nothing left to wait for (it would hang).
pub fn exchange(
    layer: &ElicitationLayer,
    request: Request<Chunks>,
    respond: impl Fn(&Received) -> Response<Chunks> + Send + Sync + 'static,
) -> Exchange {
    let received = Arc::new(Mutex::new(Vec::new()));
    let inner = Inner {
        respond: Arc::new(respond),
        received: received.clone(),
    };
    let mut service = layer.layer(inner);
    let response = block_on(async move {
        std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
        let response = service.call(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok::<_, Infallible>((parts, body))
    });
    let (parts, body) = match response {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let received = std::mem::take(&mut *received.lock().unwrap_or_else(PoisonError::into_inner));
    Exchange {
        parts,
        body,
        received,
    }
}

/// Polls `future` with a no-op waker until it is ready.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the layer stayed pending with nothing to wait for");
}
