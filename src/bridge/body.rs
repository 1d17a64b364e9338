//! [`ResponseBody`]: the inner service's body, the bridge's own answer, or a bridged call's stream.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::sync::mpsc;

use crate::BoxError;

opaque_body! {
    /// The request body the bridge sends the service it wraps: one whole 2026-07-28 request, in
    /// memory. It cannot fail.
    #[derive(Debug, Default)]
    pub struct RequestBody(inner: Full<Bytes>) -> Error = std::convert::Infallible
}

impl RequestBody {
    pub(crate) fn new(bytes: impl Into<Bytes>) -> Self {
        Self {
            inner: Full::new(bytes.into()),
        }
    }
}

pin_project! {
    /// The response body of [`LegacyBridge`](crate::bridge::LegacyBridge).
    pub struct ResponseBody<B> {
        #[pin]
        kind: BodyKind<B>,
    }
}

pin_project! {
    #[project = BodyKindProj]
    enum BodyKind<B> {
        Inner { #[pin] body: B },
        Full { #[pin] body: Full<Bytes> },
        Stream { events: mpsc::Receiver<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: BodyKind::Inner { body },
        }
    }

    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            kind: BodyKind::Full {
                body: Full::new(bytes.into()),
            },
        }
    }

    /// The events a bridged call sends; the body ends when the sender is dropped, and dropping
    /// the body (the client went away) is what the call sees as a disconnect.
    pub(crate) fn stream(events: mpsc::Receiver<Bytes>) -> Self {
        Self {
            kind: BodyKind::Stream { events },
        }
    }
}

impl<B> Default for ResponseBody<B> {
    fn default() -> Self {
        Self::full(Bytes::new())
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            BodyKindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            BodyKindProj::Full { body } => body.poll_frame(cx).map_err(|never| match never {}),
            BodyKindProj::Stream { events } => {
                events.poll_recv(cx).map(|e| e.map(|b| Ok(Frame::data(b))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Inner { body } => body.is_end_stream(),
            BodyKind::Full { body } => body.is_end_stream(),
            BodyKind::Stream { .. } => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Inner { body } => body.size_hint(),
            BodyKind::Full { body } => body.size_hint(),
            BodyKind::Stream { .. } => SizeHint::default(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            BodyKind::Inner { .. } => "ResponseBody::Inner",
            BodyKind::Full { .. } => "ResponseBody::Full",
            BodyKind::Stream { .. } => "ResponseBody::Stream",
        })
    }
}
