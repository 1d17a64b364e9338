//! Heap allocations per request: the layer against the bare inner service.
//!
//! `cargo bench --bench allocations` (a few seconds). The scenarios are `overhead.rs`'s echo
//! ones (`tools_list`, `call_first`, `call_retry`, and the layer's `call_reask`), each request
//! driven the same way: built, sent through `oneshot` on a clone of the service and its response
//! body collected, with one `block_on` per request on a current-thread Tokio runtime. After a
//! warm-up, a counting global allocator gives the mean number of allocations and of bytes
//! allocated per request (`realloc` counts as one allocation of its new size; frees are not
//! counted). Everything in the request's path is counted, the harness included; `layer − bare`
//! is the layer's own share.
//!
//! `cargo bench --bench allocations -- 10000` sets the number of measured requests (default
//! 1000; 20 when run as a test, without `--bench`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::{ElicitationLayer, Keyring};

/// `System`, counting every allocation and the bytes asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn record(size: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; counting has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: `ptr` was allocated by this allocator, i.e. by `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counters() -> (u64, u64) {
    (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

const KEY: [u8; 32] = [7u8; 32];
const FORM_KEY: &str = "profile";
const WARM_UP: usize = 100;

fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", KEY).expect("valid key"))
}

/// `overhead.rs`'s minimal MCP server (JSON responses only): reads and parses the request,
/// answers from the method and params.
async fn echo<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
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
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&response).expect("JSON"),
        )))
        .expect("response"))
}

fn tools_list() -> Value {
    json!({"resultType": "complete", "tools": [
        {"name": "save_profile", "description": "Save the user's profile", "inputSchema": {"type": "object", "properties": {}}},
        {"name": "deploy", "description": "Deploy", "inputSchema": {"type": "object", "properties": {"environment": {"type": "string"}}}},
    ]})
}

fn profile_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 50},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "subscribe": {"type": "boolean"},
    }, "required": ["name", "email"]})
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    })
}

fn call(name: &str, arguments: Value, extra: Value) -> Bytes {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": meta()});
    params
        .as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params});
    Bytes::from(serde_json::to_vec(&body).expect("JSON"))
}

fn answer(valid: bool) -> Value {
    let email = if valid {
        "ada@example.com"
    } else {
        "not an address"
    };
    json!({FORM_KEY: {"action": "accept", "content": {
        "name": "Ada Lovelace", "age": 36, "email": email, "subscribe": true}}})
}

fn post(body: &Bytes, method: &str, name: Option<&str>) -> Request<Full<Bytes>> {
    let mut request = Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request.body(Full::new(body.clone())).expect("request")
}

async fn send<S, B>(service: &S, request: Request<Full<Bytes>>) -> Bytes
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
async fn token<S, B>(service: &S, body: &Bytes) -> String
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let reply = send(service, post(body, "tools/call", Some("deploy"))).await;
    let message: Value = serde_json::from_slice(&reply).expect("JSON-RPC");
    message["result"]["requestState"]
        .as_str()
        .expect("a sealed requestState")
        .to_owned()
}

/// Mean allocations and bytes per request over `requests` requests, after a warm-up.
fn measure<S, B>(
    rt: &tokio::runtime::Runtime,
    service: &S,
    body: &Bytes,
    method: &str,
    name: Option<&str>,
    requests: usize,
) -> (f64, f64)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    for _ in 0..WARM_UP {
        black_box(rt.block_on(send(service, post(body, method, name))));
    }
    let (allocs, bytes) = counters();
    for _ in 0..requests {
        black_box(rt.block_on(send(service, post(body, method, name))));
    }
    let (allocs_after, bytes_after) = counters();
    let n = requests as f64;
    (
        (allocs_after - allocs) as f64 / n,
        (bytes_after - bytes) as f64 / n,
    )
}

/// `12`, or `12.3` when the mean is not a whole number.
fn count(value: f64, signed: bool) -> String {
    let whole = (value - value.round()).abs() < 0.05;
    match (whole, signed) {
        (true, false) => format!("{value:.0}"),
        (true, true) => format!("{value:+.0}"),
        (false, false) => format!("{value:.1}"),
        (false, true) => format!("{value:+.1}"),
    }
}

fn line(scenario: &str, variant: &str, (allocs, bytes): (f64, f64), signed: bool) {
    println!(
        "{scenario:<12} {variant:<14} {:>7} allocs, {:>8} bytes / request",
        count(allocs, signed),
        count(bytes, signed),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: a quick smoke run.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let requests = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(if benching { 1000 } else { 20 });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let bare = tower::service_fn(|r: Request<Full<Bytes>>| echo(r));
    let layered = ServiceBuilder::new().layer(layer()).service_fn(echo);

    let list = Bytes::from(
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": meta()}}))
        .expect("JSON"),
    );
    let first = call("deploy", json!({"environment": "staging"}), json!({}));
    let sealed = rt.block_on(token(&layered, &first));
    let retry_bare = call(
        "deploy",
        json!({"environment": "staging"}),
        json!({"requestState": "inner-state-1", "inputResponses": answer(true)}),
    );
    let retry = call(
        "deploy",
        json!({"environment": "staging"}),
        json!({"requestState": sealed, "inputResponses": answer(true)}),
    );
    let reask = call(
        "deploy",
        json!({"environment": "staging"}),
        json!({"requestState": sealed, "inputResponses": answer(false)}),
    );

    println!(
        "Heap allocations per request (mean of {requests} after {WARM_UP} warm-up; \
         current-thread runtime, block_on per request)"
    );
    let scenarios: [(&str, &Bytes, &Bytes, &str, Option<&str>); 3] = [
        ("tools_list", &list, &list, "tools/list", None),
        ("call_first", &first, &first, "tools/call", Some("deploy")),
        (
            "call_retry",
            &retry_bare,
            &retry,
            "tools/call",
            Some("deploy"),
        ),
    ];
    for (scenario, bare_body, layer_body, method, name) in scenarios {
        let b = measure(&rt, &bare, bare_body, method, name, requests);
        let l = measure(&rt, &layered, layer_body, method, name, requests);
        println!();
        line(scenario, "bare:", b, false);
        line("", "layer:", l, false);
        line("", "layer − bare:", (l.0 - b.0, l.1 - b.1), true);
    }
    let r = measure(
        &rt,
        &layered,
        &reask,
        "tools/call",
        Some("deploy"),
        requests,
    );
    println!();
    line("call_reask", "layer:", r, false);
}
