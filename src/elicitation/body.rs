//! Bodies: what the inner service receives and what the client receives.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

use super::sse_body::SseBody;
use crate::BoxError;

pin_project! {
    /// Reads a whole body into one buffer. A body that comes in one data frame, as a buffered
    /// request does, is kept as that frame's bytes: no copy and no allocation. Later frames are
    /// joined into one buffer; trailers are dropped.
    pub(crate) struct ReadAll<B> {
        #[pin]
        body: B,
        first: Option<Bytes>,
        joined: Option<BytesMut>,
    }
}

impl<B> ReadAll<B> {
    pub(crate) fn new(body: B) -> Self {
        Self {
            body,
            first: None,
            joined: None,
        }
    }
}

impl<B: Body<Data = Bytes>> std::future::Future for ReadAll<B> {
    type Output = Result<Bytes, B::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let Some(frame) = ready!(this.body.as_mut().poll_frame(cx)) else {
                let bytes = match (this.joined.take(), this.first.take()) {
                    (Some(joined), _) => joined.freeze(),
                    (None, first) => first.unwrap_or_default(),
                };
                return Poll::Ready(Ok(bytes));
            };
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            if let Some(joined) = this.joined.as_mut() {
                joined.extend_from_slice(&data);
            } else if let Some(first) = this.first.take() {
                let mut joined = BytesMut::with_capacity(first.len() + data.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
                *this.joined = Some(joined);
            } else {
                *this.first = Some(data);
            }
        }
    }
}

pin_project! {
    /// The request body the inner service receives: the buffered (possibly rewritten) bytes of a
    /// body the layer read, or the untouched body of a request it had no need to read.
    ///
    /// Its error is boxed: a buffered body cannot fail, an untouched one fails as it would have.
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestKindProj]
    enum RequestKind<B> {
        Buffered { #[pin] body: Full<Bytes> },
        Untouched { #[pin] body: B },
    }
}

impl<B> RequestBody<B> {
    /// The bytes the layer read (and may have rewritten).
    pub(crate) fn buffered(bytes: Bytes) -> Self {
        Self {
            kind: RequestKind::Buffered {
                body: Full::new(bytes),
            },
        }
    }

    /// A body the layer did not read.
    pub(crate) fn untouched(body: B) -> Self {
        Self {
            kind: RequestKind::Untouched { body },
        }
    }
}

impl<B> Body for RequestBody<B>
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
            RequestKindProj::Buffered { body } => body.poll_frame(cx).map_err(never),
            RequestKindProj::Untouched { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Buffered { body } => body.is_end_stream(),
            RequestKind::Untouched { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Buffered { body } => body.size_hint(),
            RequestKind::Untouched { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            RequestKind::Buffered { .. } => "RequestBody::Buffered",
            RequestKind::Untouched { .. } => "RequestBody::Untouched",
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http_body_util::StreamBody;

    type Frames = Vec<Result<Frame<Bytes>, &'static str>>;

    fn stream(frames: Frames) -> impl Body<Data = Bytes, Error = &'static str> {
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn data(text: &'static str) -> Result<Frame<Bytes>, &'static str> {
        Ok(Frame::data(Bytes::from_static(text.as_bytes())))
    }

    #[tokio::test]
    async fn a_body_in_one_frame_is_kept_without_a_copy() {
        let bytes = Bytes::from(b"{\"jsonrpc\":\"2.0\"}".to_vec());
        let read = ReadAll::new(Full::new(bytes.clone())).await.unwrap();
        assert_eq!(read, bytes);
        assert_eq!(read.as_ptr(), bytes.as_ptr());
    }

    #[tokio::test]
    async fn frames_are_joined_in_order_and_trailers_dropped() {
        let frames = vec![
            data("{\"a\":"),
            data(""),
            data("1,"),
            Ok(Frame::trailers(HeaderMap::new())),
            data("\"b\":2}"),
        ];
        let read = ReadAll::new(stream(frames)).await.unwrap();
        assert_eq!(read, "{\"a\":1,\"b\":2}");
    }

    #[tokio::test]
    async fn an_empty_body_reads_as_no_bytes() {
        assert!(
            ReadAll::new(Full::new(Bytes::new()))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(ReadAll::new(stream(vec![])).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failing_body_is_an_error() {
        let frames = vec![data("{\"a\":"), Err("reset"), data("1}")];
        assert_eq!(ReadAll::new(stream(frames)).await, Err("reset"));
    }
}
