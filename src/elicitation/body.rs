//! Bodies: what the inner service receives and what the client receives.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;

use super::sse_body::SseBody;
use crate::BoxError;

opaque_body! {
    /// The request body the inner service receives: the buffered (possibly rewritten) bytes of a
    /// body the layer read, or the untouched body of a request it had no need to read.
    ///
    /// Its error is boxed: a buffered body cannot fail, an untouched one fails as it would have.
    pub struct RequestBody<B>(inner: Either<Full<Bytes>, B>) -> Error = BoxError
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
}

impl<B> RequestBody<B> {
    /// The bytes the layer read (and may have rewritten).
    pub(crate) fn buffered(bytes: Bytes) -> Self {
        Self {
            inner: Either::Left(Full::new(bytes)),
        }
    }

    /// A body the layer did not read.
    pub(crate) fn untouched(body: B) -> Self {
        Self {
            inner: Either::Right(body),
        }
    }
}

impl<B> std::fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.inner {
            Either::Left(_) => "RequestBody::Buffered",
            Either::Right(_) => "RequestBody::Untouched",
        })
    }
}

pin_project! {
    /// The response body the client receives: the layer's own answer, the inner service's body
    /// untouched, or its event stream with the one response event rewritten.
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Full { #[pin] body: Full<Bytes> },
        Inner { #[pin] body: B },
        Sse { #[pin] body: Pin<Box<SseBody<B>>> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            kind: ResponseKind::Full {
                body: Full::new(bytes.into()),
            },
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: ResponseKind::Inner { body },
        }
    }

    pub(crate) fn sse(body: Pin<Box<SseBody<B>>>) -> Self {
        Self {
            kind: ResponseKind::Sse { body },
        }
    }
}

impl<B> Default for ResponseBody<B> {
    /// An empty body: lets layers in front of this one (an authorization layer's 401) answer
    /// with the same body type.
    fn default() -> Self {
        Self::full(Bytes::new())
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            ResponseKindProj::Full { body } => body.poll_frame(cx).map_err(never),
            ResponseKindProj::Inner { body } => body.poll_frame(cx),
            ResponseKindProj::Sse { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Full { body } => body.is_end_stream(),
            ResponseKind::Inner { body } => body.is_end_stream(),
            ResponseKind::Sse { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Full { body } => body.size_hint(),
            ResponseKind::Inner { body } => body.size_hint(),
            ResponseKind::Sse { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            ResponseKind::Full { .. } => "ResponseBody::Full",
            ResponseKind::Inner { .. } => "ResponseBody::Inner",
            ResponseKind::Sse { .. } => "ResponseBody::Sse",
        })
    }
}

fn never<E>(e: Infallible) -> E {
    match e {}
}
