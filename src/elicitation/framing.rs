//! The adapter's HTTP framing, shared by the MRTR path and the Tasks path: the request for the
//! inner service (its original body, or a rebuilt one with honest framing headers), the inner
//! service's answer sorted and its message found, and the layer's own replies as responses.

use bytes::Bytes;
use http::header::{
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING,
};
use http::{Request, Response};

use super::body::{RequestBody, ResponseBody};
use crate::engine::{self, Answer};
use crate::wire::jsonrpc::Reply;
use crate::wire::sse;

/// The request for the inner service with the original `body`: under its original headers when
/// they describe it (`framed`: one `Content-Length`, equal to its length, and no
/// `Transfer-Encoding`), else as [`rebuild`] makes them.
pub(crate) fn forward<B>(
    parts: http::request::Parts,
    body: Bytes,
    framed: Option<u64>,
) -> Request<RequestBody<B>> {
    if framed == Some(body.len() as u64) {
        Request::from_parts(parts, RequestBody::buffered(body))
    } else {
        rebuild(parts, body)
    }
}

/// The request for the inner service, with `body` and a matching `Content-Length`.
pub(crate) fn rebuild<B>(mut parts: http::request::Parts, body: Bytes) -> Request<RequestBody<B>> {
    // The body is now a buffer of known length: a `Transfer-Encoding` beside the new
    // `Content-Length` would let a proxying inner service frame it two ways.
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    Request::from_parts(parts, RequestBody::buffered(body))
}

/// The inner service's answer to an MRTR call, as [`engine::answer`] sorts it.
pub(crate) fn answer<B>(response: &Response<B>) -> Result<Answer, &'static str> {
    let headers = response.headers();
    engine::answer(
        response.status().is_success(),
        headers
            .get_all(CONTENT_ENCODING)
            .iter()
            .map(HeaderValue::as_bytes),
        headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()),
    )
}

/// The answer message in a successful response's `body` of `kind`: the body itself when JSON, the
/// first event `is_answer` takes when an event stream.
pub(crate) fn answer_message(
    body: &[u8],
    kind: Answer,
    is_answer: impl Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    match kind {
        Answer::Json => Some(body.to_vec()),
        Answer::EventStream => sse::events(body)
            .iter()
            .filter_map(|event| event.data().map(std::borrow::Cow::into_owned))
            .find(|data| is_answer(data)),
        Answer::PassThrough => None,
    }
}

/// A response made of the layer's own reply, keeping the inner response's other headers.
pub(crate) fn replace<B>(
    mut parts: http::response::Parts,
    reply: Reply,
) -> Response<ResponseBody<B>> {
    parts.status = reply.kind.status();
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(reply.body.len()));
    Response::from_parts(parts, ResponseBody::full(reply.body))
}

/// The layer's own reply as a response of its own.
pub(crate) fn reply_response<B>(reply: Reply) -> Response<ResponseBody<B>> {
    let (parts, ()) = Response::new(()).into_parts();
    replace(parts, reply)
}
