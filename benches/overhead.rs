//! The layer's cost against the bare inner service, measured in the same run.
//!
//! `cargo bench --bench overhead`; the ids are stable so results compare across changes
//! (see BENCHMARKS.md). Every request goes through `oneshot` on a clone of the service and its
//! response body is collected, on a current-thread Tokio runtime.

#[allow(dead_code)]
#[path = "../examples/deploy/server.rs"]
mod server;

use std::convert::Infallible;
use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::{ElicitationLayer, Keyring};

const KEY: [u8; 32] = [7u8; 32];
const FORM_KEY: &str = "profile";

fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", KEY).expect("valid key"))
}

/// A minimal MCP server: reads and parses the request, answers from the method and params.
/// `sse` answers as an event stream with a progress notification before the response.
async fn echo<B>(request: Request<B>, sse: bool) -> Result<Response<Full<Bytes>>, Infallible>
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

/// About 64 KiB of tool arguments.
fn large_arguments() -> Value {
    let items: Vec<Value> = (0..600)
        .map(|i| json!({"id": i, "name": format!("item-{i}"), "tags": ["alpha", "beta", "gamma"], "weight": i as f64 * 0.5, "active": i % 2 == 0}))
        .collect();
    json!({"items": items})
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("overhead");

    let bare = tower::service_fn(|r: Request<Full<Bytes>>| echo(r, false));
    let layered = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, false));
    let bare_sse = tower::service_fn(|r: Request<Full<Bytes>>| echo(r, true));
    let layered_sse = ServiceBuilder::new()
        .layer(layer())
        .service_fn(|r| echo(r, true));

    // A ~300-byte `tools/list`: a body read and a borrowed peek, original bytes forwarded.
    let list = Bytes::from(
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": meta()}}))
        .expect("JSON"),
    );
    group.bench_function("echo/bare/tools_list", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(send(&bare, post(&list, "tools/list", None)).await) })
    });
    group.bench_function("echo/layer/tools_list", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(send(&layered, post(&list, "tools/list", None)).await) })
    });

    // The first round: the inner asks, the layer seals.
    let first = call("deploy", json!({"environment": "staging"}), json!({}));
    group.bench_function("echo/bare/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&first, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&first, "tools/call", Some("deploy"))).await)
        })
    });

    // The retry: valid token, a 4-field accepted form; the inner completes.
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
    group.bench_function("echo/bare/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&retry_bare, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&retry, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_reask", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&reask, "tools/call", Some("deploy"))).await)
        })
    });

    // The same retry against a real rmcp server (JSON responses).
    let state = server::DeployState::new();
    let rmcp_bare = server::mcp_service(state.clone(), true);
    let rmcp_layered = ServiceBuilder::new()
        .layer(layer())
        .service(server::mcp_service(state, true));
    let approve = json!({server::APPROVAL_KEY: {"action": "accept", "content": {"approve": true}}});
    let rmcp_first = call("deploy", json!({"environment": "staging"}), json!({}));
    let rmcp_sealed = rt.block_on(token(&rmcp_layered, &rmcp_first));
    let rmcp_retry_bare = call(
        "deploy",
        json!({"environment": "staging"}),
        json!({"inputResponses": approve}),
    );
    let rmcp_retry = call(
        "deploy",
        json!({"environment": "staging"}),
        json!({"requestState": rmcp_sealed, "inputResponses": approve}),
    );
    group.bench_function("rmcp/bare/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                send(
                    &rmcp_bare,
                    post(&rmcp_retry_bare, "tools/call", Some("deploy")),
                )
                .await,
            )
        })
    });
    group.bench_function("rmcp/layer/call_retry", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                send(
                    &rmcp_layered,
                    post(&rmcp_retry, "tools/call", Some("deploy")),
                )
                .await,
            )
        })
    });

    // The retry with ~64 KiB of arguments.
    let large = large_arguments();
    let large_first = call("deploy", large.clone(), json!({}));
    let large_sealed = rt.block_on(token(&layered, &large_first));
    let large_bare = call(
        "deploy",
        large.clone(),
        json!({"requestState": "inner-state-1", "inputResponses": answer(true)}),
    );
    let large_retry = call(
        "deploy",
        large,
        json!({"requestState": large_sealed, "inputResponses": answer(true)}),
    );
    group.bench_function("echo/bare/call_retry_64k", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare, post(&large_bare, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("echo/layer/call_retry_64k", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered, post(&large_retry, "tools/call", Some("deploy"))).await)
        })
    });

    // The first round answered as an event stream, a notification before the result.
    group.bench_function("sse/bare/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&bare_sse, post(&first, "tools/call", Some("deploy"))).await)
        })
    });
    group.bench_function("sse/layer/call_first", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(send(&layered_sse, post(&first, "tools/call", Some("deploy"))).await)
        })
    });

    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
