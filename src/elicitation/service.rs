//! [`Elicitation`]: the HTTP service. It moves bytes; the engine decides.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{Request, Response};
use http_body::Body;
use http_body_util::Limited;
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::framing::reply_response;
use super::future::{Pending, ResponseFuture};
use super::pipeline;
use super::shared::Shared;
use crate::BoxError;
use crate::engine;
use crate::token::Keyring;
use crate::util::body::ReadAll;

/// The service [`ElicitationLayer`](crate::ElicitationLayer) wraps around an MCP Streamable HTTP service.
///
/// Its own answers (bad `requestState`, re-asks, refusals, 413) are HTTP responses; `Err` only
/// ever comes from the inner service.
///
/// See the [crate docs](crate) for an example.
#[derive(Clone)]
pub struct Elicitation<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Elicitation<S> {
    /// Wraps `inner` with every option at its default; see [`ElicitationLayer`](crate::ElicitationLayer) for options.
    pub fn new(inner: S, keyring: Keyring) -> Self {
        Self::from_shared(inner, Arc::new(Shared::new(keyring)))
    }

    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    define_inner_service_accessors!();
}

impl<S: std::fmt::Debug> std::fmt::Debug for Elicitation<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elicitation")
            .field("inner", &self.inner)
            .field("config", &self.shared)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Elicitation<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was driven to readiness goes into the future; a fresh clone stays.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        // MCP sends JSON-RPC in POSTs, but an inner service may ignore the HTTP method: a body is
        // judged the same in every method. Only a request with no body at all passes untouched.
        let body = request.body();
        if request.method() != http::Method::POST
            && (body.is_end_stream() || body.size_hint().exact() == Some(0))
        {
            return ResponseFuture::forwarding(inner.call(request.map(RequestBody::untouched)));
        }
        let (parts, body) = request.into_parts();
        // The three headers the layer reads, in one pass over them all (a lookup hashes its name):
        // the first `Content-Length` and whether there is another, any `Transfer-Encoding`, the
        // first `Content-Encoding`.
        let mut content_length = None;
        let mut lengths = 0_usize;
        let mut transfer_encoding = false;
        let mut content_encoding = None;
        for (name, value) in &parts.headers {
            if name == CONTENT_LENGTH {
                if lengths == 0 {
                    content_length = value.to_str().ok().and_then(|v| v.parse::<u64>().ok());
                }
                lengths += 1;
            } else if name == TRANSFER_ENCODING {
                transfer_encoding = true;
            } else if name == CONTENT_ENCODING && content_encoding.is_none() {
                content_encoding = Some(value.as_bytes());
            }
        }
        // The length the headers give the body, if they give exactly one and no other framing.
        let framed = content_length.filter(|_| lengths == 1 && !transfer_encoding);
        let head = engine::Head {
            content_encoding,
            content_length,
        };
        if let Some(reply) = engine::refuse_unread(head, self.shared.max_body_bytes) {
            return ResponseFuture::ready(reply_response(reply));
        }
        ResponseFuture::reading(
            ReadAll::new(Limited::new(body, self.shared.max_body_bytes)),
            Pending {
                inner,
                shared: Arc::clone(&self.shared),
                parts,
                framed,
            },
            |inner, shared, parts, bytes, framed| {
                Box::pin(pipeline::handle(inner, shared, parts, bytes, framed))
            },
        )
    }
}
