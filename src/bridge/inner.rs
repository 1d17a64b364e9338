//! The bridge as a 2026-07-28 client of what it wraps: the request it sends for each round, and
//! the reading of the answer (JSON, or an event stream with notifications before the response).

use std::pin::Pin;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::{Map, Value};
use tower_service::Service;

use super::body::RequestBody;
use crate::BoxError;
use crate::util::body::ReadAll;
use crate::wire::json::StrictValue;
use crate::wire::mcp::{MRTR_VERSION, header};
use crate::wire::sse::Splitter;

/// `Mcp-Session-Id`: a 2025 session, never sent to the inner service.
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static(header::SESSION_ID);
/// `MCP-Protocol-Version`.
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static(header::PROTOCOL_VERSION);
const MCP_METHOD: HeaderName = HeaderName::from_static(header::METHOD);
const MCP_NAME: HeaderName = HeaderName::from_static(header::NAME);
/// The largest inner answer read whole (a JSON body, or one event).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What the bridge asks of the inner service's response body, written once for every function
/// that reads one: bytes, and an error that can be boxed.
pub(crate) trait InnerBody: Body<Data = Bytes, Error: Into<BoxError>> {}

impl<B: Body<Data = Bytes, Error: Into<BoxError>>> InnerBody for B {}

/// Headers of the caller that are about the 2025 transport, or that the bridge sets itself.
fn is_dropped(name: &HeaderName) -> bool {
    use http::header::{ACCEPT, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
    let dropped = [
        ACCEPT,
        CONTENT_TYPE,
        CONTENT_LENGTH,
        CONTENT_ENCODING,
        TRANSFER_ENCODING,
    ];
    let name = name.as_str();
    [
        header::SESSION_ID,
        header::PROTOCOL_VERSION,
        header::METHOD,
        header::NAME,
        header::LAST_EVENT_ID,
    ]
    .contains(&name)
        || dropped.iter().any(|header| header.as_str() == name)
        || name.starts_with(header::PARAM_PREFIX)
}

/// The JSON-RPC request `method` with `params`, as the body of a request to the inner service.
/// It is serialized from borrowed parts: the params (a retry's `requestState` and answers among
/// them) are not copied into a `Value` first.
fn message(id: &str, method: &str, params: &Map<String, Value>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Message<'a> {
        jsonrpc: &'static str,
        id: &'a str,
        method: &'a str,
        params: &'a Map<String, Value>,
    }
    let message = Message {
        jsonrpc: "2.0",
        id,
        method,
        params,
    };
    // Strings and a map of `Value`s always serialize into a `Vec`.
    serde_json::to_vec(&message).unwrap_or_default()
}

/// The 2026 request for one round: the caller's own headers (`Authorization`, `Host`, …) and
/// extensions, the 2026 headers set, `Mcp-Session-Id` removed, and as its body the JSON-RPC
/// request `id` of `method` with `params` ([`message`]); `name` is what it names (`Mcp-Name`).
pub(crate) fn request(
    caller: &Parts,
    id: &str,
    method: &str,
    name: Option<&str>,
    params: &Map<String, Value>,
) -> Request<RequestBody> {
    let mut request = Request::new(RequestBody::new(message(id, method, params)));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = caller.uri.clone();
    *request.version_mut() = caller.version;
    *request.extensions_mut() = caller.extensions.clone();
    let headers = request.headers_mut();
    for (header, value) in &caller.headers {
        if !is_dropped(header) {
            headers.append(header, value.clone());
        }
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(PROTOCOL_VERSION, HeaderValue::from_static(MRTR_VERSION));
    if let Ok(value) = HeaderValue::from_str(method) {
        headers.insert(MCP_METHOD, value);
    }
    if let Some(name) = name {
        headers.insert(MCP_NAME, header::text(name));
    }
    let length = request.body().size_hint().exact().unwrap_or(0);
    request
        .headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(length));
    request
}

/// Drives `inner` to readiness and calls it.
pub(crate) async fn call<S, ResBody>(
    inner: &mut S,
    request: Request<RequestBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(request).await
}

/// One message of the inner service's answer.
#[derive(Debug)]
pub(crate) enum Message {
    /// A notification sent before the response (progress, a log message).
    Notification(Value),
    /// The JSON-RPC response.
    Response(Value),
}

/// Reads the inner service's answer message by message.
pub(crate) struct Reader<B> {
    body: Pin<Box<B>>,
    status: http::StatusCode,
    stream: bool,
    splitter: Splitter,
    done: bool,
}

impl<B> Reader<B>
where
    B: InnerBody,
{
    pub(crate) fn new(response: Response<B>) -> Self {
        let stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let status = response.status();
        Self {
            body: Box::pin(response.into_body()),
            status,
            stream,
            splitter: Splitter::default(),
            done: false,
        }
    }

    /// The next message; `Err` says why there is no response to be had.
    pub(crate) async fn next(&mut self) -> Result<Message, String> {
        if self.done {
            return Err("the inner service's answer has ended".to_owned());
        }
        if !self.stream {
            self.done = true;
            let bytes = ReadAll::new(http_body_util::Limited::new(
                self.body.as_mut(),
                MAX_ANSWER_BYTES,
            ))
            .await
            .map_err(|e| format!("cannot read the inner service's answer: {e}"))?;
            return match serde_json::from_slice::<StrictValue>(&bytes).map(|s| s.0) {
                Ok(message) if is_response(&message) => Ok(Message::Response(message)),
                _ => Err(format!(
                    "the inner service answered HTTP {} without a JSON-RPC response",
                    self.status.as_u16()
                )),
            };
        }
        loop {
            while let Some(event) = self.splitter.next_event() {
                let Some(text) = event.data() else { continue };
                let Ok(message) = serde_json::from_slice::<StrictValue>(&text).map(|s| s.0) else {
                    continue;
                };
                if is_response(&message) {
                    self.done = true;
                    return Ok(Message::Response(message));
                }
                if message.get("method").is_some() && message.get("id").is_none() {
                    return Ok(Message::Notification(message));
                }
            }
            match self.body.as_mut().frame().await {
                Some(Ok(frame)) => {
                    if let Ok(chunk) = frame.into_data() {
                        self.splitter.push(chunk);
                    }
                }
                Some(Err(error)) => {
                    self.done = true;
                    let error: BoxError = error.into();
                    return Err(format!("the inner service's stream failed: {error}"));
                }
                None => {
                    self.done = true;
                    return Err("the inner service's stream ended without a response".to_owned());
                }
            }
        }
    }
}

fn is_response(message: &Value) -> bool {
    message.get("method").is_none()
        && message.get("id").is_some()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// What the bridge asks of the service it wraps (the bounds of its `Service` impl, written once
/// for the functions behind it): a 2026-07-28 service of buffered bodies, its future sendable.
pub(super) trait Wrapped<ResBody>:
    Service<
        Request<RequestBody>,
        Response = Response<ResBody>,
        Future: Send + 'static,
        Error: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, ResBody> Wrapped<ResBody> for S
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
}

/// The value of header `name`, if it is text.
pub(super) fn header<'a>(parts: &'a Parts, name: &http::header::HeaderName) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_header_safe_are_encoded() {
        assert_eq!(header::text("deploy"), "deploy");
        assert_eq!(header::text("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header::text(" x"), "=?base64?IHg=?=");
    }

    #[test]
    fn the_session_never_reaches_the_inner_service() {
        let (mut parts, ()) = Request::new(()).into_parts();
        parts
            .headers
            .insert(SESSION_ID, HeaderValue::from_static("abc"));
        parts
            .headers
            .insert("authorization", HeaderValue::from_static("Bearer t"));
        parts
            .headers
            .insert(PROTOCOL_VERSION, HeaderValue::from_static("2025-11-25"));
        let params = Map::new();
        let request = request(&parts, "1", "tools/call", Some("deploy"), &params);
        let body_length = message("1", "tools/call", &params).len().to_string();
        let headers = request.headers();
        assert!(headers.get(SESSION_ID).is_none());
        assert_eq!(headers["authorization"], "Bearer t");
        assert_eq!(headers[PROTOCOL_VERSION], MRTR_VERSION);
        assert_eq!(headers[MCP_METHOD], "tools/call");
        assert_eq!(headers[MCP_NAME], "deploy");
        assert_eq!(headers[CONTENT_LENGTH], body_length.as_str());
    }
}
