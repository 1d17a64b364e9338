//! Helpers for driving `ElicitationLayer` end to end: a builder for MCP 2026-07-28 calls, a
//! scriptable fake MCP server (a `tower::service_fn` that records what it receives), and a reader
//! for JSON and event-stream responses.
//!
//! Its submodules: `rmcp` (a real rmcp server driven in-process), `redis` (the Redis the Redis
//! tests use, and whether one answers), `legacy_stream` (a 2025-era client's event stream), and
//! the example sources the tests drive, each included once: `server` (`examples/deploy`),
//! `stack` (`examples/stack`), `form` (`examples/client`), and `example_*`, the task-shaped
//! examples (`examples/minimal.rs` and the others), each of which `examples` serves.

pub mod legacy_stream;
// Only `tests/services`, which includes this module too, uses it.
#[allow(
    dead_code,
    reason = "tests/it has no Redis test: tests/services has them all"
)]
pub mod redis;
pub mod rmcp;

// Its `main.rs` (and `stack`'s) use the rest: the listener, the Redis bridge, the base URL.
#[expect(
    dead_code,
    reason = "the parts of the deploy server only the example binaries use"
)]
#[path = "../../../examples/deploy/server.rs"]
pub mod server;

#[path = "../../../examples/stack/app.rs"]
pub mod stack;

#[path = "../../../examples/client/form.rs"]
pub mod form;

#[expect(dead_code, reason = "its `main`: the tests serve its `app`")]
#[path = "../../../examples/minimal.rs"]
pub mod example_minimal;

#[expect(dead_code, reason = "its `main`: the tests serve its `app`")]
#[path = "../../../examples/gates.rs"]
pub mod example_gates;

#[expect(dead_code, reason = "its `main`: the tests serve its `app`")]
#[path = "../../../examples/single_use_redis.rs"]
pub mod example_single_use_redis;

#[expect(dead_code, reason = "its `main`: the tests serve its `app`")]
#[path = "../../../examples/bridge.rs"]
pub mod example_bridge;

use std::convert::Infallible;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use serde_json::{Map, Value, json};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::{Elicitation, ElicitationLayer, Keyring, RequestBody, ResponseBody};

/// The bound on every wait in these tests.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Request and response bodies on both sides of the layer.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The fake MCP server, boxed so that the layered service has a name.
pub type Inner = BoxCloneSyncService<Request<RequestBody<Body>>, Response<Body>, Infallible>;

/// The test keyring: key id `k1`, key `[7; 32]`.
pub fn keyring() -> Keyring {
    Keyring::new("k1", [7u8; 32]).expect("a valid test key")
}

/// The layer with every option at its default.
pub fn layer() -> ElicitationLayer {
    ElicitationLayer::new(keyring())
}

/// A body of one chunk.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A body of several chunks, one frame each (no length known in advance).
pub fn chunked(chunks: impl IntoIterator<Item = Bytes>) -> Body {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> =
        chunks.into_iter().map(|c| Ok(Frame::data(c))).collect();
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

/// A POST to `/mcp` with `bytes` as they are.
pub fn post(bytes: impl Into<Bytes>) -> Request<Body> {
    Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(full(bytes))
        .expect("a valid request")
}

/// JSON as the fake server writes it.
pub fn encode(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("JSON values serialize"))
}

/// `{"jsonrpc":"2.0","id":id,"result":result}`.
pub fn result_message(id: impl Into<Value>, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.into(), "result": result})
}

/// `{"jsonrpc":"2.0","id":id,"error":{"code":code,"message":message[,"data":data]}}`.
pub fn error_message(id: impl Into<Value>, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id.into(), "error": error})
}

/// An MCP 2026-07-28 request, built up field by field.
#[derive(Clone, Debug)]
pub struct Call {
    id: Value,
    method: &'static str,
    params: Map<String, Value>,
    uri: &'static str,
    headers: Vec<(&'static str, String)>,
}

impl Call {
    /// `method` with `params` plus a `_meta` declaring 2026-07-28 and every client capability.
    pub fn new(method: &'static str, params: Value) -> Self {
        let Value::Object(mut params) = params else {
            panic!("params must be an object")
        };
        params.insert(
            "_meta".into(),
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "elicitation": {"form": {}, "url": {}},
                    "sampling": {},
                    "roots": {"listChanged": true}
                }
            }),
        );
        Self {
            id: json!(1),
            method,
            params,
            uri: "/mcp",
            headers: Vec::new(),
        }
    }

    /// `tools/call` of `name` with empty arguments.
    pub fn tool(name: &str) -> Self {
        Self::new("tools/call", json!({"name": name, "arguments": {}}))
    }

    /// `prompts/get` of `name` with empty arguments.
    pub fn prompt(name: &str) -> Self {
        Self::new("prompts/get", json!({"name": name, "arguments": {}}))
    }

    /// `resources/read` of `uri`.
    pub fn resource(uri: &str) -> Self {
        Self::new("resources/read", json!({"uri": uri}))
    }

    pub fn id(mut self, id: impl Into<Value>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets `params.<key>`.
    pub fn param(mut self, key: &str, value: Value) -> Self {
        self.params.insert(key.into(), value);
        self
    }

    pub fn args(self, arguments: Value) -> Self {
        self.param("arguments", arguments)
    }

    pub fn state(self, token: &str) -> Self {
        self.param("requestState", json!(token))
    }

    pub fn answers(self, input_responses: Value) -> Self {
        self.param("inputResponses", input_responses)
    }

    /// Sets `_meta["io.modelcontextprotocol/clientCapabilities"]`.
    pub fn caps(mut self, capabilities: Value) -> Self {
        self.params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities;
        self
    }

    /// Sets `_meta["io.modelcontextprotocol/protocolVersion"]`.
    pub fn version(mut self, version: &str) -> Self {
        self.params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(version);
        self
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    pub fn request_id(&self) -> Value {
        self.id.clone()
    }

    /// The JSON-RPC message.
    pub fn body(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "method": self.method, "params": self.params})
    }

    pub fn request(&self) -> Request<Body> {
        let mut request = post(encode(&self.body()));
        *request.uri_mut() = self.uri.parse().expect("a valid path");
        for (name, value) in &self.headers {
            request
                .headers_mut()
                .append(*name, value.parse().expect("a valid header value"));
        }
        request
    }
}

/// What the fake server was given.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: Method,
    pub headers: HeaderMap,
    pub bytes: Bytes,
}

impl Received {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|e| panic!("the inner service got non-JSON ({e}): {:?}", self.bytes))
    }
}

/// How the fake server sends its answer.
#[derive(Clone, Copy, Debug)]
pub enum Transport {
    /// One `application/json` response.
    Json,
    /// `text/event-stream` with only the response event.
    Sse,
    /// `text/event-stream`: a `notifications/progress` event, then the response event, each in
    /// its own chunk.
    SseAfterProgress,
    /// Like `SseAfterProgress`, but the stream is cut into chunks of this many bytes.
    SseInPieces(usize),
}

impl Transport {
    /// The HTTP response carrying `message`.
    pub fn respond(self, message: &Value) -> Response<Body> {
        match self {
            Self::Json => raw_response(StatusCode::OK, "application/json", encode(message)),
            Self::Sse => sse_chunks(vec![sse_event(2, message)]),
            Self::SseAfterProgress => sse_chunks(vec![progress_event(), sse_event(2, message)]),
            Self::SseInPieces(size) => {
                let mut stream = progress_event().to_vec();
                stream.extend_from_slice(&sse_event(2, message));
                sse_chunks(stream.chunks(size).map(Bytes::copy_from_slice).collect())
            }
        }
    }
}

/// A `200 text/event-stream` response of `chunks`, one frame each, with its Content-Length (as a
/// server that buffers its stream would send it).
fn sse_chunks(chunks: Vec<Bytes>) -> Response<Body> {
    let len: usize = chunks.iter().map(Bytes::len).sum();
    let mut response = sse_response(chunked(chunks));
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, len.into());
    response
}

/// A response with exactly this status, content type and body.
pub fn raw_response(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(full(body))
        .expect("a valid response")
}

/// A `200 text/event-stream` response with `body`.
pub fn sse_response(body: Body) -> Response<Body> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(body)
        .expect("a valid response")
}

/// `event: message`, `id: <id>`, `data: <message>`.
pub fn sse_event(id: u32, message: &Value) -> Bytes {
    Bytes::from(format!("event: message\nid: {id}\ndata: {message}\n\n"))
}

/// The `notifications/progress` event the fake server sends before its response.
pub fn progress_event() -> Bytes {
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": "p-1", "progress": 1, "total": 2, "message": "thinking"}});
    sse_event(1, &notification)
}

type Respond = dyn Fn(&Received) -> Response<Body> + Send + Sync;

/// A fake MCP server: records every request it gets, answers from a closure.
#[derive(Clone)]
pub struct FakeMcp {
    received: Arc<Mutex<Vec<Received>>>,
    respond: Arc<Respond>,
}

impl FakeMcp {
    /// Answers every request with whatever `respond` makes of it.
    pub fn new(respond: impl Fn(&Received) -> Response<Body> + Send + Sync + 'static) -> Self {
        Self {
            received: Arc::default(),
            respond: Arc::new(respond),
        }
    }

    /// Answers every JSON-RPC request with `result(params)` under the request's id.
    pub fn answering(
        transport: Transport,
        result: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Self {
        Self::new(move |request| {
            let call = request.json();
            transport.respond(&result_message(call["id"].clone(), result(&call["params"])))
        })
    }

    /// The fake as a Tower service over any request body.
    pub fn service<B>(
        &self,
    ) -> impl Service<
        Request<RequestBody<B>>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<tower::BoxError>,
    {
        let fake = self.clone();
        tower::service_fn(move |request: Request<RequestBody<B>>| {
            let fake = fake.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.expect("request body").to_bytes();
                let received = Received {
                    method: parts.method,
                    headers: parts.headers,
                    bytes,
                };
                assert_length(&received.headers, &received.bytes, "the inner service");
                fake.received.lock().unwrap().push(received.clone());
                Ok((fake.respond)(&received))
            }
        })
    }

    pub fn boxed(&self) -> Inner {
        BoxCloneSyncService::new(self.service())
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Every request body received so far, as JSON.
    pub fn bodies(&self) -> Vec<Value> {
        self.received().iter().map(Received::json).collect()
    }

    pub fn calls(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// The last request received.
    pub fn last(&self) -> Received {
        self.received().pop().expect("the inner service was called")
    }
}

/// The fake server behind `ElicitationLayer`.
pub struct Harness {
    pub fake: FakeMcp,
    service: Elicitation<Inner>,
}

impl Harness {
    pub fn new(layer: ElicitationLayer, fake: FakeMcp) -> Self {
        let service = ServiceBuilder::new().layer(layer).service(fake.boxed());
        Self { fake, service }
    }

    /// The response, before its body is read.
    pub async fn respond(&self, request: Request<Body>) -> Response<ResponseBody<Body>> {
        tokio::time::timeout(TIMEOUT, self.service.clone().oneshot(request))
            .await
            .expect("the layer answers within the timeout")
            .unwrap_or_else(|never| match never {})
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        send(self.service.clone(), request).await
    }

    pub async fn call(&self, call: &Call) -> Reply {
        self.send(call.request()).await
    }
}

/// Sends `request` through `service` and reads the whole response.
pub async fn send<S, B, RB>(service: S, request: Request<B>) -> Reply
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Debug,
    RB: http_body::Body,
    RB::Error: Debug,
{
    let response = tokio::time::timeout(TIMEOUT, service.oneshot(request))
        .await
        .expect("the service answers within the timeout")
        .expect("the service does not fail");
    Reply::read(response).await
}

/// A whole HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Bytes,
}

impl Reply {
    pub async fn read<B>(response: Response<B>) -> Self
    where
        B: http_body::Body,
        B::Error: Debug,
    {
        let (parts, body) = response.into_parts();
        let bytes = tokio::time::timeout(TIMEOUT, body.collect())
            .await
            .expect("the body ends within the timeout")
            .expect("the body does not fail")
            .to_bytes();
        assert_length(&parts.headers, &bytes, "the client");
        Self {
            status: parts.status,
            headers: parts.headers,
            bytes,
        }
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|e| panic!("the client got non-JSON ({e}): {:?}", self.bytes))
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .map_or("", |v| v.to_str().expect("an ASCII content type"))
    }

    /// `result.requestState` of a JSON response.
    pub fn state(&self) -> String {
        let message = self.json();
        match message["result"]["requestState"].as_str() {
            Some(state) => state.to_owned(),
            None => panic!("no result.requestState in {message}"),
        }
    }

    /// The events of an event-stream response, each with its terminating blank line.
    pub fn events(&self) -> Vec<String> {
        let text = std::str::from_utf8(&self.bytes).expect("a UTF-8 event stream");
        text.split_inclusive("\n\n").map(str::to_owned).collect()
    }
}

/// The JSON in an event's `data:` line.
pub fn event_data(event: &str) -> Value {
    let data = event
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no data line in {event:?}"));
    serde_json::from_str(data).expect("event data is JSON")
}

/// An event's lines other than `data:`.
pub fn event_fields(event: &str) -> Vec<&str> {
    event
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with("data:"))
        .collect()
}

/// Takes `result.requestState` out of a response message, returning it.
pub fn take_state(message: &mut Value) -> String {
    match message["result"]
        .as_object_mut()
        .and_then(|result| result.remove("requestState"))
    {
        Some(Value::String(state)) => state,
        other => panic!("no string result.requestState in {message} ({other:?})"),
    }
}

/// A Content-Length, when there is one, must be the length of the body that came with it.
fn assert_length(headers: &HeaderMap, body: &Bytes, who: &str) {
    if let Some(declared) = headers.get(header::CONTENT_LENGTH) {
        assert_eq!(
            declared.to_str().unwrap(),
            body.len().to_string(),
            "{who} got a Content-Length that does not match the body"
        );
    }
}
