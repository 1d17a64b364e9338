//! What both benches share: the echo inner service, the requests and the round trip.

#![allow(dead_code)]

use std::convert::Infallible;

use bytes::Bytes;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use http::{Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::{Service, ServiceExt};
use tower_elicitation::{ElicitationLayer, Keyring};

pub const KEY: [u8; 32] = [7u8; 32];
pub const FORM_KEY: &str = "profile";

pub fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", KEY).expect("valid key"))
}

/// A minimal MCP server: reads and parses the request, answers from the method and params.
/// `sse` answers as an event stream with a progress notification before the response.
pub async fn echo<B>(request: Request<B>, sse: bool) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let bytes = request
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let message: Value = serde_json::from_slice(&bytes).expect("JSON-RPC");
    let result = match message["method"].as_str() {
        Some("tools/list") => tools_list(),
        _ if message["params"]["inputResponses"][FORM_KEY].is_object() => json!({
            "resultType": "complete",
            "content": [{"type": "text", "text": "Profile saved"}],
        }),
        _ => json!({
            "resultType": "input_required",
            "inputRequests": {FORM_KEY: {"method": "elicitation/create", "params": {
                "message": "Your profile?", "requestedSchema": profile_schema()}}},
            "requestState": "inner-state-1",
        }),
    };
    let response = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
    let (content_type, body) = if sse {
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1}});
        let stream =
            format!("event: message\ndata: {progress}\n\nevent: message\ndata: {response}\n\n");
        ("text/event-stream", Bytes::from(stream))
    } else {
        (
            "application/json",
            Bytes::from(serde_json::to_vec(&response).expect("JSON")),
        )
    };
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(body))
        .expect("response"))
}

/// The current-thread runtime every request is driven on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A ~300-byte `tools/list` request body.
pub fn list_request() -> Bytes {
    Bytes::from(
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": meta()}}))
        .expect("JSON"),
    )
}

pub fn tools_list() -> Value {
    json!({"resultType": "complete", "tools": [
        {"name": "save_profile", "description": "Save the user's profile", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "deploy", "description": "Deploy", "inputSchema": {"type": "object", "properties": {"environment": {"type": "string"}}}},
    ]})
}

pub fn profile_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 50},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "subscribe": {"type": "boolean"},
    }, "required": ["name", "email"]})
}

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    })
}

pub fn call(name: &str, arguments: Value, extra: Value) -> Bytes {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": meta()});
    params
        .as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params});
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}

pub fn answer(valid: bool) -> Value {
    let email = if valid {
        "ada@example.com"
    } else {
        "not an address"
    };
    json!({FORM_KEY: {"action": "accept", "content": {
        "name": "Ada Lovelace", "age": 36, "email": email, "subscribe": true}}})
}

/// A POST as an HTTP client sends it: `Content-Length` included, as every client does for a
/// buffered body (hyper, reqwest, httpx).
pub fn post(body: &Bytes, method: &str, name: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request.body(Full::new(body.clone())).expect("request")
}

pub async fn send<S, B>(service: &S, request: Request<Full<Bytes>>) -> Bytes
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let response = service.clone().oneshot(request).await.expect("response");
    response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
}

/// The `requestState` the layer seals for the first round of `body`.
pub async fn token<S, B>(service: &S, body: &Bytes) -> String
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let reply = send(service, post(body, "tools/call", Some("deploy"))).await;
    let text = String::from_utf8_lossy(&reply);
    let json = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(&text);
    let message: Value = serde_json::from_str(json).expect("JSON-RPC");
    message["result"]["requestState"]
        .as_str()
        .expect("a sealed requestState")
        .to_owned()
}

/// The `requestState` another replica seals for the first round of `body`: the same keys as
/// [`layer`], but a TTL one second shorter, so that it differs from any token a [`layer`] seals
/// and keeps. A layer opens it in full (MAC, base64, claims).
pub async fn token_from_another_replica(body: &Bytes) -> String {
    let replica = tower::ServiceBuilder::new()
        .layer(layer().ttl(std::time::Duration::from_secs(599)))
        .service_fn(|r| echo(r, false));
    token(&replica, body).await
}

/// About 64 KiB of tool arguments.
pub fn large_arguments() -> Value {
    let items: Vec<Value> = (0..600)
        .map(|i| json!({"id": i, "name": format!("item-{i}"), "tags": ["alpha", "beta", "gamma"], "weight": i as f64 * 0.5, "active": i % 2 == 0}))
        .collect();
    json!({"items": items})
}

/// The retry of a `deploy` call with `arguments`: for the bare inner service (its own state),
/// for the layer (the sealed token), and for the layer with one invalid field.
pub struct Retries {
    pub bare: Bytes,
    pub layer: Bytes,
    pub reask: Bytes,
}

pub fn retries(arguments: Value, sealed: &str) -> Retries {
    let with = |state: &str, valid: bool| {
        call(
            "deploy",
            arguments.clone(),
            json!({"requestState": state, "inputResponses": answer(valid)}),
        )
    };
    Retries {
        bare: with("inner-state-1", true),
        layer: with(sealed, true),
        reask: with(sealed, false),
    }
}

/// The retry of a `deploy` call to the example's rmcp server that approves, under `key` (the
/// example's `APPROVAL_KEY`): carrying the layer's `sealed` token, or none (`None`) for the bare
/// server, which keeps no state of its own.
pub fn approved(key: &str, arguments: Value, sealed: Option<&str>) -> Bytes {
    let approve = json!({key: {"action": "accept", "content": {"approve": true}}});
    let extra = match sealed {
        Some(state) => json!({"requestState": state, "inputResponses": approve}),
        None => json!({"inputResponses": approve}),
    };
    call("deploy", arguments, extra)
}

/// `count` copies of the JSON-RPC request `body`, each with its own `_meta.progressToken` (as a
/// client that asks for progress sends a fresh one with every call); all else byte for byte the
/// same request.
pub fn with_progress_tokens(body: &Bytes, count: usize) -> Vec<Bytes> {
    let message: Value = serde_json::from_slice(body).expect("JSON-RPC");
    (0..count)
        .map(|n| {
            let mut message = message.clone();
            message["params"]["_meta"]["progressToken"] = json!(format!("progress-{n}"));
            Bytes::from(serde_json::to_vec(&message).expect("JSON"))
        })
        .collect()
}

/// How many distinct progress tokens a bench cycles through: more than the layer keeps `_meta`
/// texts for (256), so that a memo keyed by the whole `_meta` text never hits.
pub const PROGRESS_TOKENS: usize = 1024;

/// The CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`), shown as criterion shows
/// wall-clock time: what `BENCH_CLOCK=cpu` measures, which leaves out the time the
/// thread waits for a core that other processes hold.
pub struct ThreadCpuTime {
    wall: WallTime,
}

impl Default for ThreadCpuTime {
    fn default() -> Self {
        Self { wall: WallTime }
    }
}

fn thread_cpu_time() -> std::time::Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec`; the clock id is a constant Linux knows.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = std::time::Duration;
    type Value = std::time::Duration;

    fn start(&self) -> Self::Intermediate {
        thread_cpu_time()
    }
    fn end(&self, started: Self::Intermediate) -> Self::Value {
        thread_cpu_time().saturating_sub(started)
    }
    fn add(&self, a: &Self::Value, b: &Self::Value) -> Self::Value {
        *a + *b
    }
    fn zero(&self) -> Self::Value {
        std::time::Duration::ZERO
    }
    fn to_f64(&self, value: &Self::Value) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}
