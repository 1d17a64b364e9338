//! `[telemetry]` (feature `otel`; `cargo test -p elicitation-proxy --features otel --test
//! telemetry`): the proxy binary, built with the feature, in front of the FastMCP fixture over
//! Streamable HTTP (`tests/upstream/elicit_server.py --http`), exporting to an OTLP/HTTP
//! receiver of the test's own on loopback (`POST /v1/traces`, the protobuf read by hand: the
//! few fields checked). A `libtest-mimic` binary as `tests/main.rs`, with its probe: without the
//! pinned servers the test is reported ignored, saying so.

#[allow(
    dead_code,
    reason = "shared with tests/services: this binary needs neither redis-server nor 4 workers"
)]
#[path = "../../tests/services/harness.rs"]
mod harness;

mod support;

/// What `harness::Probe` asks of the real servers: which of them are not installed.
mod upstream {
    pub(crate) use crate::support::not_installed;
}

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use support::{Proxy, answer, call_at, free_port, host_python, state_of};

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let probe = harness::Probe::run();
    let trials = vec![harness::current_thread(
        &probe,
        &[harness::Need::Upstreams],
        module_path!(),
        "a_call_is_a_span_of_the_callers_trace_with_its_decision_and_its_upstream_leg",
        a_call_is_a_span_of_the_callers_trace_with_its_decision_and_its_upstream_leg,
    )];
    if !args.list {
        probe.announce();
    }
    libtest_mimic::run(&args, trials).exit_code()
}

/// The caller's trace, and its two spans (one per request of the call: asked, then answered).
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const ASKED_PARENT: &str = "00f067aa0ba902b7";
const ANSWERED_PARENT: &str = "b7ad6b7169203331";
/// A 2025-era host's span, in the same trace.
const LEGACY_PARENT: &str = "53995c3f42cd8ad8";

async fn a_call_is_a_span_of_the_callers_trace_with_its_decision_and_its_upstream_leg() {
    let upstream = Fixture::start().await;
    let (receiver, exported) = receiver().await;
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("te-proxy-telemetry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gates.toml");
    std::fs::write(
        &config,
        format!(
            r#"[upstream]
url = "http://127.0.0.1:{}/mcp"

[listen]
http = "127.0.0.1:{port}"

[telemetry]
otlp_endpoint = "http://{receiver}"
service_name = "proxy-under-test"

[[gate]]
tools = ["header"]
message = "Read a header?"
form.approve = {{ type = "boolean", title = "Approve" }}
require = {{ approve = true }}
"#,
            upstream.port
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&config, port).await;

    // The call, asked then answered, each request with the caller's span as its parent.
    let arguments = json!({"name": "traceparent"});
    let traceparent = |parent: &str| format!("00-{TRACE}-{parent}-01");
    let asked_by = traceparent(ASKED_PARENT);
    let asked = call_at(
        &proxy.url,
        Some(("traceparent", &asked_by)),
        "header",
        arguments.clone(),
        json!({}),
    )
    .await;
    let state = state_of(&asked);
    let answered_by = traceparent(ANSWERED_PARENT);
    let done = call_at(
        &proxy.url,
        Some(("traceparent", &answered_by)),
        "header",
        arguments,
        answer(
            &state,
            json!({"action": "accept", "content": {"approve": true}}),
        ),
    )
    .await;
    // The upstream got the leg's context: the caller's trace, a span of the proxy's.
    let seen = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{done:#}"))
        .to_owned();
    let parts: Vec<&str> = seen.split('-').collect();
    assert_eq!(parts.len(), 4, "the upstream saw {seen:?}");
    assert_eq!(parts[1], TRACE, "the upstream saw {seen:?}");
    assert_ne!(
        parts[2], ANSWERED_PARENT,
        "the caller's own span went upstream"
    );
    let leg_id = parts[2].to_owned();

    // A 2025-era host's call (through the bridge, whose rounds run in a task of their own).
    let echoed = legacy_call(&proxy.url, &traceparent(LEGACY_PARENT)).await;
    assert!(echoed.contains("over the bridge"), "{echoed}");

    // A graceful shutdown sends what is queued.
    proxy.signal(15);
    let spans = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let spans = decode(&exported.lock().unwrap());
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            let legs = names.iter().filter(|name| **name == "upstream").count();
            if spans.iter().any(|s| s.parent == LEGACY_PARENT) && legs >= 2 {
                break spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the receiver got only {names:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let services: Vec<&str> = spans.iter().map(|s| s.service.as_str()).collect();
    assert!(
        services.iter().all(|s| *s == "proxy-under-test"),
        "{services:?}"
    );
    let child_of = |parent: &str| {
        spans
            .iter()
            .find(|span| span.parent == parent)
            .unwrap_or_else(|| panic!("no span whose parent is {parent}: {spans:#?}"))
    };
    let first = child_of(ASKED_PARENT);
    assert_eq!(first.name, "tools/call header", "{first:#?}");
    assert_eq!(first.kind, 2, "a server span: {first:#?}");
    assert_eq!(first.attribute("mcp.method"), Some("tools/call"));
    assert_eq!(first.attribute("mcp.tool"), Some("header"));
    assert_eq!(first.attribute("mcp.decision"), Some("ask"), "{first:#?}");
    assert!(
        first
            .attribute("mcp.gate")
            .is_some_and(|g| g.starts_with("gate 1")),
        "{first:#?}"
    );
    let decision = first.attribute("mcp.decision_id").unwrap_or_default();
    assert!(decision.starts_with("d-"), "{first:#?}");
    // Asked, it never reached the upstream: no leg.
    assert!(
        spans.iter().all(|span| span.parent != first.id),
        "{spans:#?}"
    );
    let second = child_of(ANSWERED_PARENT);
    assert_eq!(second.name, "tools/call header");
    assert_eq!(
        second.attribute("mcp.decision"),
        Some("gates_accepted"),
        "{second:#?}"
    );
    // The same call's decision, on both rounds (as the log's `decision_id`).
    assert_eq!(second.attribute("mcp.decision_id"), Some(decision));
    let leg = child_of(&second.id);
    assert_eq!(leg.name, "upstream", "{leg:#?}");
    assert_eq!(leg.kind, 3, "a client span: {leg:#?}");
    assert_eq!(leg.id, leg_id, "the upstream's parent is the leg");
    for span in [first, second, leg] {
        assert_eq!(span.trace, TRACE, "{span:#?}");
    }

    // The 2025-era host's call: its request's span, its decision and its leg, in its trace.
    let legacy = child_of(LEGACY_PARENT);
    assert_eq!(legacy.name, "tools/call echo", "{legacy:#?}");
    assert_eq!(
        legacy.attribute("mcp.decision"),
        Some("ungated"),
        "{legacy:#?}"
    );
    let legacy_leg = child_of(&legacy.id);
    assert_eq!(legacy_leg.name, "upstream", "{legacy_leg:#?}");
    for span in [legacy, legacy_leg] {
        assert_eq!(span.trace, TRACE, "{span:#?}");
    }

    let _ = std::fs::remove_dir_all(&dir);
    drop(upstream);
}

/// A 2025-era host's `tools/call` of `echo` at `url`, in a session of its own, the call's POST
/// with `traceparent`; the event stream's text.
async fn legacy_call(url: &str, traceparent: &str) -> String {
    let client = reqwest::Client::new();
    let post = |message: Value, session: Option<&str>| {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "legacy-host", "version": "0"}}}),
        None,
    )
    .send()
    .await
    .unwrap();
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = init.text().await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = post(initialized, Some(&session)).send().await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "over the bridge"}}});
    post(call, Some(&session))
        .header("traceparent", traceparent)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The FastMCP fixture over Streamable HTTP on a port of its own, killed when dropped.
struct Fixture {
    child: tokio::process::Child,
    port: u16,
}

impl Fixture {
    async fn start() -> Self {
        let port = free_port();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/upstream/elicit_server.py");
        let child = tokio::process::Command::new(host_python())
            .arg(script)
            .arg("--http")
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the fixture starts");
        let listening = async {
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), listening)
            .await
            .expect("the fixture listens");
        Self { child, port }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// An OTLP/HTTP receiver on loopback: its address, and every body POSTed to `/v1/traces`.
async fn receiver() -> (std::net::SocketAddr, Arc<Mutex<Vec<bytes::Bytes>>>) {
    let exported = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&exported);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                kept.lock().unwrap().push(body);
                // An empty `ExportTraceServiceResponse`: every span taken.
                ([("content-type", "application/x-protobuf")], Vec::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, exported)
}

/// What the test reads of an exported span.
#[derive(Debug, Default)]
struct Span {
    service: String,
    trace: String,
    id: String,
    parent: String,
    name: String,
    kind: u64,
    attributes: Vec<(String, Value)>,
}

impl Span {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_str())
    }
}

/// The spans of `ExportTraceServiceRequest` bodies (`opentelemetry/proto/collector/trace/v1`):
/// `resource_spans` (1) → `resource` (1, its `service.name`) and `scope_spans` (2) → `spans`
/// (2) → `trace_id` (1), `span_id` (2), `parent_span_id` (4), `name` (5), `kind` (6),
/// `attributes` (9).
fn decode(bodies: &[bytes::Bytes]) -> Vec<Span> {
    let mut spans = Vec::new();
    for body in bodies {
        for (field, resource_spans) in fields(body) {
            let (1, Wire::Bytes(resource_spans)) = (field, resource_spans) else {
                continue;
            };
            let mut service = String::new();
            for (field, value) in fields(resource_spans) {
                match (field, value) {
                    (1, Wire::Bytes(resource)) => {
                        for (key, value) in attributes(resource, 1) {
                            if key == "service.name" {
                                service = value.as_str().unwrap_or_default().to_owned();
                            }
                        }
                    }
                    (2, Wire::Bytes(scope_spans)) => {
                        for (field, span) in fields(scope_spans) {
                            if let (2, Wire::Bytes(span)) = (field, span) {
                                spans.push(read_span(span, &service));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    spans
}

fn read_span(bytes: &[u8], service: &str) -> Span {
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut span = Span {
        service: service.to_owned(),
        attributes: attributes(bytes, 9),
        ..Span::default()
    };
    for (field, value) in fields(bytes) {
        match (field, value) {
            (1, Wire::Bytes(b)) => span.trace = hex(b),
            (2, Wire::Bytes(b)) => span.id = hex(b),
            (4, Wire::Bytes(b)) => span.parent = hex(b),
            (5, Wire::Bytes(b)) => span.name = String::from_utf8_lossy(b).into_owned(),
            (6, Wire::Varint(kind)) => span.kind = kind,
            _ => {}
        }
    }
    span
}

/// The `KeyValue`s in field `number` of `message`: `key` (1), `value` (2, an `AnyValue`:
/// `string_value` 1, `bool_value` 2, `int_value` 3).
fn attributes(message: &[u8], number: u64) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for (field, value) in fields(message) {
        let (true, Wire::Bytes(pair)) = (field == number, value) else {
            continue;
        };
        let mut key = String::new();
        let mut read = Value::Null;
        for (field, value) in fields(pair) {
            match (field, value) {
                (1, Wire::Bytes(k)) => key = String::from_utf8_lossy(k).into_owned(),
                (2, Wire::Bytes(any)) => {
                    for (field, value) in fields(any) {
                        read = match (field, value) {
                            (1, Wire::Bytes(s)) => json!(String::from_utf8_lossy(s)),
                            (2, Wire::Varint(b)) => json!(b != 0),
                            (3, Wire::Varint(n)) => json!(n),
                            _ => read,
                        };
                    }
                }
                _ => {}
            }
        }
        found.push((key, read));
    }
    found
}

/// One field's value on the protobuf wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of one protobuf message, in order; what cannot be read ends it.
fn fields(mut bytes: &[u8]) -> Vec<(u64, Wire<'_>)> {
    fn varint(bytes: &mut &[u8]) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = bytes.split_first()?;
            *bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    let mut found = Vec::new();
    while let Some(tag) = varint(&mut bytes) {
        let value = match tag & 7 {
            0 => match varint(&mut bytes) {
                Some(v) => Wire::Varint(v),
                None => break,
            },
            1 | 5 => {
                let size = if tag & 7 == 1 { 8 } else { 4 };
                let Some(rest) = bytes.get(size..) else { break };
                bytes = rest;
                Wire::Fixed
            }
            2 => {
                let Some(len) = varint(&mut bytes).and_then(|l| usize::try_from(l).ok()) else {
                    break;
                };
                let Some((value, rest)) = bytes.split_at_checked(len) else {
                    break;
                };
                bytes = rest;
                Wire::Bytes(value)
            }
            _ => break,
        };
        found.push((tag >> 3, value));
    }
    found
}
