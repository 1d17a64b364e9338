//! Reading a whole body: the one reader both wings use, the one default bound, and the one
//! strict read of a JSON-RPC request body (within its bound, no key given twice) that the bridge
//! and the upstream adapter share.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::{LengthLimitError, Limited};
use pin_project_lite::pin_project;
use serde_json::Value;

use crate::BoxError;
use crate::wire::json::StrictValue;
use crate::wire::jsonrpc::{INVALID_REQUEST, PARSE_ERROR, Reply, ReplyKind, RpcError, response};

/// Default bound on a request body either layer reads: 4 MiB.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

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

/// Why a request body could not be read: what to answer, as HTTP and as JSON-RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Over the bound: 413, `-32600`.
    TooLarge,
    /// The body failed while it was read (the connection broke, a bad chunk): 400, `-32700`.
    Unreadable,
}

impl BodyError {
    /// The reply: a JSON-RPC error without an id (413 `-32600` over the bound, 400 `-32700` for
    /// a body that failed while it was read).
    pub(crate) fn reply(self) -> Reply {
        let (kind, code, message) = match self {
            Self::TooLarge => (
                ReplyKind::TooLarge,
                INVALID_REQUEST,
                "Request body too large",
            ),
            Self::Unreadable => (
                ReplyKind::BadRequest,
                PARSE_ERROR,
                "Cannot read the request body",
            ),
        };
        Reply::message(
            kind,
            &response(&Value::Null, Err(RpcError::new(code, message))),
        )
    }
}

/// Reads the whole request body, no more than `max` bytes of it.
pub(crate) async fn read_limited<B>(body: B, max: usize) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match ReadAll::new(Limited::new(body, max)).await {
        Ok(bytes) => Ok(bytes),
        Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(BodyError::TooLarge)
        }
        Err(_) => Err(BodyError::Unreadable),
    }
}

/// Reads a body's bytes as JSON, refusing an object that names a key twice (at any depth): one
/// reading of the message for every part of the crate that looks at it.
///
/// # Errors
///
/// When the bytes are not JSON, or repeat a key.
pub(crate) fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<StrictValue>(bytes).map(|strict| strict.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http_body::Frame;
    use http_body_util::Full;
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
