//! Concurrent calls through the upstream adapter into one 2025-era session (issue #38): the
//! session's floor (one `tools/call` at a time, so that the server's questions, which name no
//! call over stdio, are the running call's) is taken only when the server may ask.
//!
//! The server is `tests/upstream/slow_server.py` (the standard library only, run with
//! `python3`): each call runs in a thread of its own, and its `sleep` tool says how many calls
//! it had in flight at once, so a test sees overlap from the server's side, not from a clock.
//! The adapter is driven in process (`oneshot` on a clone), as `benches/upstream.rs` does.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::upstream::{Http, ServerQuestions, Stdio, Upstream};

fn slow_server() -> Stdio {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/slow_server.py");
    Stdio::new("python3").arg(script)
}

fn spawn(questions: ServerQuestions) -> Upstream {
    Upstream::builder(slow_server())
        .server_questions(questions)
        .start_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(60))
        .spawn()
        .expect("the server starts")
}

/// One 2026-07-28 `tools/call` of `tool` through `upstream`, declaring form elicitation; the
/// whole JSON-RPC response (one JSON answer).
async fn call(upstream: &Upstream, tool: &str, arguments: Value) -> Value {
    call_with(upstream, tool, arguments, json!({})).await
}

/// [`call`] with `extra` params (a retry's `requestState` and `inputResponses`).
async fn call_with(upstream: &Upstream, tool: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "concurrency-test", "version": "0"},
    }});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("authorization", "Bearer alice")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = upstream.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)))
}

/// The text of a complete tool result.
fn text(reply: &Value) -> &str {
    assert_eq!(reply["result"]["resultType"], "complete", "{reply:#}");
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result: {reply:#}"))
}

/// `n` concurrent `sleep` calls of `seconds` each; the most calls the server had in flight at
/// once, as the last of them to finish saw it.
async fn sleepers(upstream: &Upstream, n: usize, seconds: f64) -> u64 {
    let calls = (0..n).map(|_| call(upstream, "sleep", json!({"seconds": seconds})));
    let replies = futures_util::future::join_all(calls).await;
    replies
        .iter()
        .map(|reply| {
            let seen: Value = serde_json::from_str(text(reply)).unwrap();
            seen["max_in_flight"].as_u64().unwrap()
        })
        .max()
        .unwrap()
}

async fn with_the_servers_questions_off_calls_run_in_the_session_at_once() {
    let upstream = spawn(ServerQuestions::Off);
    let most = sleepers(&upstream, 8, 1.0).await;
    // Under the floor the server would never see two; it sees them overlap.
    assert!(most > 1, "the server had at most {most} call in flight");
    upstream.shutdown().await;
}

async fn with_the_servers_questions_relayed_the_floor_still_runs_one_call_at_a_time() {
    let upstream = spawn(ServerQuestions::Relay);
    let most = sleepers(&upstream, 4, 0.2).await;
    assert_eq!(most, 1, "the floor lets one call run at a time");
    upstream.shutdown().await;
}

async fn with_the_servers_questions_off_initialize_declares_none_and_a_question_is_refused() {
    let upstream = spawn(ServerQuestions::Off);
    let sent: Value = serde_json::from_str(text(&call(&upstream, "initialize", json!({})).await))
        .expect("the initialize params");
    let capabilities = sent["capabilities"].as_object().expect("capabilities");
    for kind in ["elicitation", "sampling", "roots"] {
        assert!(
            !capabilities.contains_key(kind),
            "{kind} declared: {sent:#}"
        );
    }
    // Asked anyway: refused to the server as a client without the capability would (-32601),
    // and the call goes on to its result; nothing reaches the client.
    let reply = call(&upstream, "ask", json!({})).await;
    assert_eq!(text(&reply), "error -32601");
    upstream.shutdown().await;

    // Relayed (the default): all three declared.
    let upstream = spawn(ServerQuestions::Relay);
    let sent: Value = serde_json::from_str(text(&call(&upstream, "initialize", json!({})).await))
        .expect("the initialize params");
    for kind in ["elicitation", "sampling", "roots"] {
        assert!(sent["capabilities"].get(kind).is_some(), "{kind}: {sent:#}");
    }
    // And the question reaches the client as an input_required round.
    let reply = call(&upstream, "ask", json!({})).await;
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply:#}");
    upstream.shutdown().await;
}

async fn questions_asked_in_one_breath_all_reach_the_client_once_and_the_call_finishes() {
    // The call parks on its first question; the others the server wrote with it join that round
    // when they were read in time, else the next (the floor stays the parked call's a moment).
    let upstream = spawn(ServerQuestions::Relay);
    let mut reply = call(&upstream, "ask", json!({"questions": 3})).await;
    let mut asked = Vec::new();
    for _ in 0..3 {
        if reply["result"]["resultType"] != "input_required" {
            break;
        }
        let requests = reply["result"]["inputRequests"]
            .as_object()
            .unwrap()
            .clone();
        assert!(!requests.is_empty(), "{reply:#}");
        let mut responses = serde_json::Map::new();
        for (key, request) in &requests {
            asked.push(request["params"]["message"].as_str().unwrap().to_owned());
            responses.insert(
                key.clone(),
                json!({"action": "accept", "content": {"ok": true}}),
            );
        }
        let state = reply["result"]["requestState"].clone();
        let retry = json!({"questions": 3});
        reply = call_with(
            &upstream,
            "ask",
            retry,
            json!({
                "requestState": state, "inputResponses": responses,
            }),
        )
        .await;
    }
    assert_eq!(text(&reply), "accept accept accept", "{reply:#}");
    asked.sort();
    assert_eq!(asked, ["OK 1?", "OK 2?", "OK 3?"], "each question once");
    upstream.shutdown().await;
}

async fn questions_written_apart_in_one_breath_share_the_first_round() {
    // A server that asks several things at once writes each request on its own (a
    // `Promise.all`): the reader routes them one by one, and the call waits `QUIET` after each
    // before it parks, so all of them are the first round's (parking the moment the channel was
    // empty split them over two rounds: the conformance suite's multiple-input scenario).
    let upstream = spawn(ServerQuestions::Relay);
    let reply = call(&upstream, "ask", json!({"questions": 3, "apart": true})).await;
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply:#}");
    let requests = reply["result"]["inputRequests"].as_object().unwrap();
    let mut asked: Vec<&str> = requests
        .values()
        .map(|request| request["params"]["message"].as_str().unwrap())
        .collect();
    asked.sort_unstable();
    assert_eq!(asked, ["OK 1?", "OK 2?", "OK 3?"], "{reply:#}");
    upstream.shutdown().await;
}

/// `tests/upstream/meet_server.py` (FastMCP, the venv `scripts/upstream-servers.sh` installs)
/// on a loopback port of its own.
async fn meet_server() -> crate::upstream::Listening {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".cache/upstream/venv/bin/python");
    // The harness ignores this test without the venv (`Need::Upstreams`), and fails it under
    // `MCP_REQUIRE_UPSTREAMS=1`.
    assert!(
        python.exists(),
        "the Python mcp 1.x venv is not installed: run scripts/upstream-servers.sh"
    );
    crate::upstream::Listening::start(
        |port| {
            let mut command = tokio::process::Command::new(&python);
            command
                .arg(root.join("tests/upstream/meet_server.py"))
                .arg(port.to_string());
            command
        },
        None,
    )
    .await
}

async fn over_http_two_calls_ask_at_once_and_each_answer_reaches_its_own_call() {
    let server = meet_server().await;
    let url = server.url();
    let upstream = Upstream::builder(Http::new(url))
        .start_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(60))
        .spawn()
        .expect("the adapter starts");
    // Each call asks once both run in the session: under a floor the first would wait alone
    // (5 s, then ask, and say `alone`).
    let (ada, bob) = tokio::join!(
        call(&upstream, "meet", json!({"name": "Ada"})),
        call(&upstream, "meet", json!({"name": "Bob"})),
    );
    let asked = |reply: &Value, name: &str| {
        let result = &reply["result"];
        assert_eq!(result["resultType"], "input_required", "{reply:#}");
        let requests = result["inputRequests"].as_object().unwrap();
        assert_eq!(requests.len(), 1, "{reply:#}");
        let (key, request) = requests.iter().next().unwrap();
        assert_eq!(
            request["params"]["message"],
            format!("How many seats for {name}?"),
            "each question on its own call's stream: {reply:#}"
        );
        (key.clone(), result["requestState"].clone())
    };
    let (ada_key, ada_state) = asked(&ada, "Ada");
    let (bob_key, bob_state) = asked(&bob, "Bob");
    let answer = |key: &str, state: Value, seats: u64| {
        json!({"requestState": state, "inputResponses": {
            key: {"action": "accept", "content": {"seats": seats}}}})
    };
    let (ada, bob) = tokio::join!(
        call_with(
            &upstream,
            "meet",
            json!({"name": "Ada"}),
            answer(&ada_key, ada_state, 3)
        ),
        call_with(
            &upstream,
            "meet",
            json!({"name": "Bob"}),
            answer(&bob_key, bob_state, 5)
        ),
    );
    assert_eq!(text(&ada), "Ada: 3 seats, met");
    assert_eq!(text(&bob), "Bob: 5 seats, met");
    upstream.shutdown().await;
}

/// The adapter in front of `meet_server.py`, with a request timeout short enough that a question
/// left unanswered fails the test rather than hangs it.
async fn meet_adapter() -> (crate::upstream::Listening, Upstream) {
    let server = meet_server().await;
    let upstream = Upstream::builder(Http::new(server.url()))
        .start_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(20))
        .spawn()
        .expect("the adapter starts");
    (server, upstream)
}

/// Issue #38 item 1: the standalone GET stream is read, and a question the server sends there
/// (related to no call) is refused at once, as a client with no call to carry it would. Unread,
/// the question would wait there unanswered until the request timeout.
async fn over_http_a_question_on_the_standalone_stream_is_refused_at_once() {
    let (_server, upstream) = meet_adapter().await;
    let reply = call(&upstream, "outside", json!({})).await;
    assert_eq!(text(&reply), "refused -32601", "{reply:#}");
    // The session still serves calls.
    let reply = call(&upstream, "outside", json!({})).await;
    assert_eq!(text(&reply), "refused -32601", "{reply:#}");
    upstream.shutdown().await;
}

/// Issue #40 item 6: a 2025-era server is never sent `subscriptions/listen` (2026 only); the
/// adapter answers it from the session's notifications: acknowledged with the list changes the
/// server declares, then the server's `tools/list_changed` (sent on its standalone stream)
/// reaches the listen, marked with the subscription's id.
async fn over_http_a_listen_hears_a_2025_era_servers_list_changes() {
    let (_server, upstream) = meet_adapter().await;
    let listen = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true, "promptsListChanged": true},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "listen-test", "version": "0"}}}});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(Full::new(Bytes::from(listen.to_string())))
        .unwrap();
    let response = upstream.clone().oneshot(request).await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut seen = String::new();
    let mut next_event = async || -> Value {
        loop {
            if let Some(end) = seen.find("\n\n") {
                let event: String = seen.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
                .await
                .expect("an event within the request timeout")
                .expect("the stream goes on")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                seen.push_str(&String::from_utf8_lossy(&data));
            }
        }
    };
    let acknowledged = next_event().await;
    assert_eq!(
        acknowledged["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        acknowledged["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "only what the server declares: {acknowledged:#}"
    );
    assert_eq!(
        acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub-1"
    );
    assert_eq!(text(&call(&upstream, "add_tool", json!({})).await), "added");
    let changed = next_event().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed:#}"
    );
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "sub-1"
    );
    drop(body);
    upstream.shutdown().await;
}

crate::trials! {
    [] multi_thread with_the_servers_questions_off_calls_run_in_the_session_at_once,
    [] multi_thread with_the_servers_questions_relayed_the_floor_still_runs_one_call_at_a_time,
    [] multi_thread with_the_servers_questions_off_initialize_declares_none_and_a_question_is_refused,
    [] multi_thread questions_asked_in_one_breath_all_reach_the_client_once_and_the_call_finishes,
    [] multi_thread questions_written_apart_in_one_breath_share_the_first_round,
    [Upstreams] multi_thread over_http_two_calls_ask_at_once_and_each_answer_reaches_its_own_call,
    [Upstreams] multi_thread over_http_a_question_on_the_standalone_stream_is_refused_at_once,
    [Upstreams] multi_thread over_http_a_listen_hears_a_2025_era_servers_list_changes,
}
