//! The upstream adapter in front of real MCP servers run as stdio children, behind
//! `ElicitationLayer`, served by axum on a loopback socket and driven with an HTTP client:
//!
//! - `@modelcontextprotocol/server-filesystem` (TypeScript SDK 1.x, 2025-era): list, read, write;
//! - `@modelcontextprotocol/server-everything` (TypeScript SDK 1.x): its elicitation tool through
//!   the reverse bridge (accepted, asked again when the answer does not match its schema,
//!   declined, cancelled);
//! - `tests/upstream/elicit_server.py` (Python `mcp` 1.30 FastMCP): `ctx.elicit(...)`, a child
//!   that dies mid-call, replays, another caller's state, expiry and a flood of parked calls.
//!
//! The servers are installed, pinned, by `scripts/upstream-servers.sh` under `.cache/upstream`.
//! Without them the harness reports each test that needs them as ignored, saying so, unless
//! `MCP_REQUIRE_UPSTREAMS=1` (then it fails).
//! Self-contained: nothing from `tests/support`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tower_elicitation::upstream::{Http, Server, Stdio, Upstream, UpstreamBuilder};
use tower_elicitation::{ElicitationLayer, Keyring};

/// Where `scripts/upstream-servers.sh` installs the servers.
fn cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/upstream")
}

/// The server's command: the harness ran this test only after finding every server installed
/// ([`not_installed`]), so a missing one here (removed mid-run) fails the test, saying which.
/// Never `None`: the `Option` keeps the callers' `let … else` plain.
pub(super) fn installed(
    what: &str,
    entry: &Path,
    command: impl FnOnce() -> Stdio,
) -> Option<Stdio> {
    assert!(
        entry.exists(),
        "{what} is not installed ({} is missing): run scripts/upstream-servers.sh",
        entry.display()
    );
    Some(command())
}

/// What of the servers these tests (and `upstream_rmcp`'s) front is not installed: the paths
/// missing, none when all are there. The harness asks once, before any test runs.
pub(crate) fn not_installed() -> Vec<String> {
    let modules = cache().join("node_modules/@modelcontextprotocol");
    [
        modules.join("server-filesystem/dist/index.js"),
        modules.join("server-everything/dist/index.js"),
        cache().join("venv/bin/python"),
        super::upstream_rmcp::binary(),
    ]
    .into_iter()
    .filter(|entry| !entry.exists())
    .map(|entry| entry.display().to_string())
    .collect()
}

pub(super) fn node_server(package: &str, args: &[&str]) -> Option<Stdio> {
    let entry = cache()
        .join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js");
    let command = || Stdio::new("node").arg(&entry).args(args);
    installed(package, &entry, command)
}

pub(super) fn python_server() -> Option<Stdio> {
    let python = cache().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/elicit_server.py");
    let command = || Stdio::new(&python).arg(&script);
    installed("the Python mcp 1.x venv", &python, command)
}

/// The layer the tests put in front: the test key, defaults otherwise.
fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).expect("a valid key"))
}

/// `ElicitationLayer` → `Upstream` → the child, on `http://127.0.0.1:<port>/mcp`.
struct Stack {
    url: String,
    http: reqwest::Client,
    upstream: Upstream,
    next_id: std::sync::atomic::AtomicU64,
    /// The client capabilities each request declares.
    capabilities: Value,
}

impl Stack {
    async fn start(
        server: impl Into<Server>,
        tune: impl FnOnce(UpstreamBuilder) -> UpstreamBuilder,
    ) -> Self {
        let layer = layer();
        let builder = Upstream::builder(server)
            .for_layer(&layer)
            .start_timeout(Duration::from_secs(60));
        let upstream = tune(builder).spawn().expect("the server starts");
        let service = tower::ServiceBuilder::new()
            .layer(layer)
            .service(upstream.clone());
        let app = axum::Router::new().route_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{address}/mcp"),
            http: reqwest::Client::new(),
            upstream,
            next_id: 1.into(),
            capabilities: json!({"elicitation": {"form": {}, "url": {}}}),
        }
    }

    /// One stateless 2026-07-28 request from `caller` (its `Authorization`), declaring the
    /// stack's `capabilities`; the whole JSON-RPC response.
    async fn rpc_as(&self, caller: &str, method: &str, params: Value) -> Value {
        self.rpc_with(&[("authorization", caller)], method, params)
            .await
    }

    /// [`rpc_as`](Self::rpc_as) with `headers` (the caller's `Authorization` among them).
    async fn rpc_with(&self, headers: &[(&str, &str)], method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "upstream-test", "version": "0"},
        });
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request
            .body(body.to_string())
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .expect("the stack answers");
        let text = response.text().await.unwrap();
        // An event stream's response is its event with an id (notifications come before it).
        let reply = text
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|event| event.get("id").is_some());
        let reply = reply.unwrap_or_else(|| {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        });
        assert_eq!(reply["id"], id, "{reply:#}");
        reply
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        self.rpc_as("Bearer alice", method, params).await
    }

    async fn call(&self, tool: &str, arguments: Value, extra: Value) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        self.rpc("tools/call", params).await
    }
}

impl Stack {
    /// The retry of `tool` with `arguments`: `answer` to `key`, and the state echoed.
    async fn retry(
        &self,
        tool: &str,
        arguments: Value,
        key: &str,
        state: &str,
        answer: Value,
    ) -> Value {
        self.call(tool, arguments, self::answer(key, state, answer))
            .await
    }
}

/// The result of a reply, which must not be an error.
fn result(reply: &Value) -> &Value {
    assert!(reply.get("error").is_none(), "{reply:#}");
    &reply["result"]
}

/// Every text block of a complete tool result, joined.
fn text(reply: &Value) -> String {
    let result = result(reply);
    assert_eq!(result["resultType"], "complete", "{result:#}");
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// An `input_required` result's one question: its key, the question, and the sealed state.
fn question(reply: &Value) -> (String, Value, String) {
    let result = result(reply);
    assert_eq!(result["resultType"], "input_required", "{result:#}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{result:#}");
    let (key, request) = requests.iter().next().unwrap();
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert!(
        state.starts_with("v1.k1."),
        "the layer seals the adapter's state: {state}"
    );
    (key.clone(), request.clone(), state)
}

/// An accepted form answer with `content`.
fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn answer(key: &str, state: &str, answer: Value) -> Value {
    json!({"requestState": state, "inputResponses": {key: answer}})
}

async fn filesystem_lists_reads_and_writes_through_the_adapter() {
    let dir = std::env::temp_dir().join(format!("upstream-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let Some(server) = node_server("server-filesystem", &[dir.to_str().unwrap()]) else {
        return;
    };
    let stack = Stack::start(server, |b| b).await;

    let discovered = stack.rpc("server/discover", json!({})).await;
    assert_eq!(
        result(&discovered)["supportedVersions"],
        json!(["2026-07-28"])
    );
    assert!(result(&discovered)["capabilities"]["tools"].is_object());

    let tools = stack.rpc("tools/list", json!({})).await;
    let names: Vec<&str> = result(&tools)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in ["read_text_file", "write_file", "list_directory"] {
        assert!(names.contains(&name), "{names:?}");
    }
    assert_eq!(result(&tools)["resultType"], "complete");

    let file = dir.join("hello.txt");
    let path = file.to_str().unwrap();
    let written = stack
        .call(
            "write_file",
            json!({"path": path, "content": "from the adapter\n"}),
            json!({}),
        )
        .await;
    assert!(text(&written).contains("Successfully wrote"), "{written:#}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "from the adapter\n"
    );

    let read = stack
        .call("read_text_file", json!({"path": path}), json!({}))
        .await;
    assert_eq!(text(&read), "from the adapter\n");

    let listed = stack
        .call(
            "list_directory",
            json!({"path": dir.to_str().unwrap()}),
            json!({}),
        )
        .await;
    assert!(text(&listed).contains("[FILE] hello.txt"), "{listed:#}");

    // Outside the allowed directory: the server's own error result, carried as it is.
    let outside = stack
        .call(
            "read_text_file",
            json!({"path": "/etc/hostname"}),
            json!({}),
        )
        .await;
    assert_eq!(result(&outside)["isError"], true, "{outside:#}");

    stack.upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// server-everything's `trigger-elicitation-request` asks for a form whose one required field is
/// `name` (and an `email` with `format: email`).
const ELICIT: &str = "trigger-elicitation-request";

async fn everything() -> Option<Stack> {
    let server = node_server("server-everything", &["stdio"])?;
    Some(Stack::start(server, |b| b).await)
}

async fn everything_elicitation_accepted_through_the_reverse_bridge() {
    let Some(stack) = everything().await else {
        return;
    };
    let first = stack.call(ELICIT, json!({}), json!({})).await;
    let (key, request, state) = question(&first);
    assert_eq!(key, "elicitation-1");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["name"])
    );

    let done = stack
        .retry(
            ELICIT,
            json!({}),
            &key,
            &state,
            accept(json!({"name": "Ada Lovelace", "check": true, "email": "ada@example.org"})),
        )
        .await;
    let text = text(&done);
    assert!(
        text.contains("User provided the requested information"),
        "{text}"
    );
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");
    assert!(text.contains("- Email: ada@example.org"), "{text}");
    stack.upstream.shutdown().await;
}

async fn everything_answers_that_do_not_match_the_schema_are_asked_again() {
    let Some(stack) = everything().await else {
        return;
    };
    let first = stack.call(ELICIT, json!({}), json!({})).await;
    let (key, _, state) = question(&first);

    // Not an email, and `name` missing: the layer asks again; the upstream never sees it.
    let bad = stack
        .retry(
            ELICIT,
            json!({}),
            &key,
            &state,
            accept(json!({"email": "not an email"})),
        )
        .await;
    let (again_key, again, state) = question(&bad);
    assert_eq!(again_key, key);
    let message = again["params"]["message"].as_str().unwrap();
    assert!(message.starts_with("Please provide inputs"), "{message}");
    assert!(
        message.len() > "Please provide inputs for the following fields:".len(),
        "a hint: {message}"
    );

    let done = stack
        .retry(
            ELICIT,
            json!({}),
            &key,
            &state,
            accept(json!({"name": "Grace"})),
        )
        .await;
    assert!(text(&done).contains("- Name: Grace"), "{done:#}");
    stack.upstream.shutdown().await;
}

async fn everything_elicitation_declined_and_cancelled() {
    let Some(stack) = everything().await else {
        return;
    };
    for (action, said) in [("decline", "declined"), ("cancel", "cancelled")] {
        let first = stack.call(ELICIT, json!({}), json!({})).await;
        let (key, _, state) = question(&first);
        let done = stack
            .retry(ELICIT, json!({}), &key, &state, json!({"action": action}))
            .await;
        assert!(text(&done).contains(said), "{action}: {done:#}");
    }
    stack.upstream.shutdown().await;
}

async fn everything_sampling_through_the_reverse_bridge() {
    let Some(mut stack) = everything().await else {
        return;
    };
    // Without the sampling capability the layer refuses the upstream's question: -32021.
    let refused = stack
        .call(
            "trigger-sampling-request",
            json!({"prompt": "hi"}),
            json!({}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32021, "{refused:#}");

    stack.capabilities = json!({"elicitation": {}, "sampling": {}});
    let first = stack
        .call(
            "trigger-sampling-request",
            json!({"prompt": "hi"}),
            json!({}),
        )
        .await;
    let (key, request, state) = question(&first);
    assert_eq!(key, "sampling-1");
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["params"]["maxTokens"], 100);
    let sampled = json!({"role": "assistant", "model": "test-model",
        "content": {"type": "text", "text": "hello from the client"}});
    let done = stack
        .retry(
            "trigger-sampling-request",
            json!({"prompt": "hi"}),
            &key,
            &state,
            sampled,
        )
        .await;
    let text = text(&done);
    assert!(
        text.contains("hello from the client") && text.contains("test-model"),
        "{text}"
    );
    stack.upstream.shutdown().await;
}

async fn python(tune: impl FnOnce(UpstreamBuilder) -> UpstreamBuilder) -> Option<Stack> {
    let server = python_server()?;
    Some(Stack::start(server, tune).await)
}

async fn python_ctx_elicit_is_validated_and_resumed() {
    let Some(stack) = python(|b| b).await else {
        return;
    };
    let args = json!({"restaurant": "Chez Rust"});
    let first = stack.call("book", args.clone(), json!({})).await;
    let (key, request, state) = question(&first);
    assert_eq!(request["params"]["message"], "How many seats at Chez Rust?");

    // 20 is over the schema's maximum (8): asked again by the layer, not sent to ctx.elicit.
    let over = stack
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 20})),
        )
        .await;
    let (_, _, state) = question(&over);
    let done = stack
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 3})),
        )
        .await;
    assert_eq!(text(&done), "booked 3 at Chez Rust");

    // The same retry once more: the call is finished, nothing runs twice.
    let replay = stack
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 3})),
        )
        .await;
    assert_eq!(replay["error"]["code"], -32602, "{replay:#}");
    let message = replay["error"]["message"].as_str().unwrap();
    assert!(message.contains("no longer waiting"), "{message}");
    stack.upstream.shutdown().await;
}

async fn python_another_callers_state_never_resumes_the_call() {
    let Some(stack) = python(|b| b).await else {
        return;
    };
    let args = json!({"restaurant": "Bistro"});
    let first = stack.call("book", args.clone(), json!({})).await;
    let (key, _, state) = question(&first);
    let mut params = json!({"name": "book", "arguments": args.clone()});
    params.as_object_mut().unwrap().extend(
        answer(&key, &state, accept(json!({"seats": 2})))
            .as_object()
            .cloned()
            .unwrap(),
    );
    let mallory = stack.rpc_as("Bearer mallory", "tools/call", params).await;
    assert_eq!(mallory["error"]["code"], -32602, "{mallory:#}");
    // The rightful caller still can.
    let done = stack
        .retry("book", args, &key, &state, accept(json!({"seats": 2})))
        .await;
    assert_eq!(text(&done), "booked 2 at Bistro");
    stack.upstream.shutdown().await;
}

async fn python_a_child_that_dies_mid_call_is_an_error_and_the_next_call_works() {
    let Some(stack) = python(|b| b).await else {
        return;
    };
    let crashed = stack.call("crash", json!({}), json!({})).await;
    let message = crashed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exited"), "{crashed:#}");
    let echoed = stack
        .call("echo", json!({"text": "still here"}), json!({}))
        .await;
    assert_eq!(text(&echoed), "still here");

    // A call parked before a crash is gone with the child: a clear error on its retry.
    let args = json!({"restaurant": "Gone"});
    let (key, _, state) = question(&stack.call("book", args.clone(), json!({})).await);
    let _ = stack.call("crash", json!({}), json!({})).await;
    let retry = stack
        .retry("book", args, &key, &state, accept(json!({"seats": 1})))
        .await;
    assert_eq!(retry["error"]["code"], -32602, "{retry:#}");
    stack.upstream.shutdown().await;
}

async fn python_parked_calls_expire_and_are_bounded() {
    // One caller fills the whole bound here (its fair share is all of it): the bound itself.
    let bounded = |b: UpstreamBuilder| {
        b.parked_timeout(Duration::from_millis(500))
            .max_parked(2)
            .fair_share(1.0)
    };
    let Some(stack) = python(bounded).await else {
        return;
    };
    let args = |n: u32| json!({"restaurant": format!("R{n}")});
    let (key, _, state) = question(&stack.call("book", args(0), json!({})).await);
    tokio::time::sleep(Duration::from_millis(900)).await;
    let late = stack
        .retry("book", args(0), &key, &state, accept(json!({"seats": 1})))
        .await;
    assert_eq!(late["error"]["code"], -32602, "{late:#}");

    // Two park; the third is refused (and cancelled at the upstream), with a clear error.
    question(&stack.call("book", args(1), json!({})).await);
    question(&stack.call("book", args(2), json!({})).await);
    let third = stack.call("book", args(3), json!({})).await;
    let message = third["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Too many calls"), "{third:#}");
    // Other calls still run.
    assert_eq!(
        text(&stack.call("echo", json!({"text": "ok"}), json!({})).await),
        "ok"
    );
    stack.upstream.shutdown().await;
}

async fn a_2026_upstream_is_passed_through_whole() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/mrtr_server.py");
    let stack = Stack::start(Stdio::new("python3").arg(script), |b| b).await;
    let discovered = stack.rpc("server/discover", json!({})).await;
    assert_eq!(
        result(&discovered)["x-extra"],
        json!({"kept": true}),
        "{discovered:#}"
    );

    let first = stack.call("ask", json!({}), json!({})).await;
    let (key, request, state) = question(&first);
    assert_eq!(
        (key.as_str(), &request["params"]["message"]),
        ("q", &json!("Go ahead?"))
    );
    // Not a boolean: asked again by the layer.
    let bad = stack
        .retry("ask", json!({}), &key, &state, accept(json!({"ok": "yes"})))
        .await;
    let (_, _, state) = question(&bad);
    let done = stack
        .retry("ask", json!({}), &key, &state, accept(json!({"ok": true})))
        .await;
    // The upstream got its own state back, unsealed by the layer; its unknown field survives.
    assert_eq!(text(&done), "ok=True state=mine");
    assert_eq!(result(&done)["x-extra"], json!({"kept": true}));
    stack.upstream.shutdown().await;
}

async fn python_concurrent_calls_each_get_their_own_questions() {
    let Some(stack) = python(|b| b).await else {
        return;
    };
    let (a, b) = tokio::join!(
        stack.call("book", json!({"restaurant": "A"}), json!({})),
        stack.call("book", json!({"restaurant": "B"}), json!({})),
    );
    let (key_a, asked_a, state_a) = question(&a);
    let (key_b, asked_b, state_b) = question(&b);
    assert_eq!(asked_a["params"]["message"], "How many seats at A?");
    assert_eq!(asked_b["params"]["message"], "How many seats at B?");
    // Answered in the other order, each resumes its own call.
    let seats = |n: u32| accept(json!({"seats": n}));
    let done_b = stack
        .retry(
            "book",
            json!({"restaurant": "B"}),
            &key_b,
            &state_b,
            seats(2),
        )
        .await;
    let done_a = stack
        .retry(
            "book",
            json!({"restaurant": "A"}),
            &key_a,
            &state_a,
            seats(1),
        )
        .await;
    assert_eq!(text(&done_b), "booked 2 at B");
    assert_eq!(text(&done_a), "booked 1 at A");
    stack.upstream.shutdown().await;
}

async fn python_an_upstream_that_never_answers_times_out_and_the_next_call_works() {
    let Some(stack) = python(|b| b.request_timeout(Duration::from_millis(800))).await else {
        return;
    };
    let hung = stack.call("hang", json!({}), json!({})).await;
    let message = hung["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer in time"), "{hung:#}");
    assert_eq!(
        text(
            &stack
                .call("echo", json!({"text": "after"}), json!({}))
                .await
        ),
        "after"
    );
    stack.upstream.shutdown().await;
}

/// One request straight to the adapter (no layer, no socket); its JSON-RPC reply.
async fn oneshot(upstream: &Upstream, body: Value) -> Value {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let response = upstream.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

async fn the_child_is_killed_when_the_last_clone_is_dropped() {
    let Some(server) = python_server() else {
        return;
    };
    let upstream = Upstream::builder(server).spawn().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "pid", "arguments": {}}});
    let reply = oneshot(&upstream, body).await;
    let pid = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    assert!(proc.exists(), "{reply:#}");
    let clone = upstream.clone();
    drop(upstream);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(proc.exists(), "a clone still holds the child");
    drop(clone);
    let gone = async {
        // Gone, or a zombie (killed, not reaped yet).
        while std::fs::read_to_string(proc.join("stat")).is_ok_and(|stat| !stat.contains(") Z ")) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .expect("the child is killed with the adapter");
}

async fn without_the_layer_an_unknown_parked_call_is_a_clear_error() {
    let Some(server) = python_server() else {
        return;
    };
    let upstream = Upstream::builder(server).spawn().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "book", "arguments": {"restaurant": "X"}, "requestState": "not-a-parked-call",
        "inputResponses": {"elicitation-1": {"action": "accept", "content": {"seats": 1}}}}});
    let reply = oneshot(&upstream, body).await;
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["error"]["code"], -32602, "{reply:#}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no longer waiting")
    );
    upstream.shutdown().await;
}

/// One request straight to the adapter with `headers` and `body` as they are: the status and the
/// JSON-RPC reply.
async fn send<B>(
    upstream: &Upstream,
    headers: &[(&str, &str)],
    body: B,
) -> (http::StatusCode, Value)
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let mut request = http::Request::post("/mcp").header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = upstream
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let reply = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, reply)
}

fn full(body: &Value) -> http_body_util::Full<bytes::Bytes> {
    http_body_util::Full::new(bytes::Bytes::from(body.to_string()))
}

async fn parked_calls_are_bound_to_the_layers_principal() {
    let Some(server) = python_server() else {
        return;
    };
    // The layer takes the caller from `x-user`; the adapter, given the layer, does the same.
    let layer = layer().principal_from(|parts| {
        parts
            .headers
            .get("x-user")
            .map(|value| value.as_bytes().to_vec())
    });
    let upstream = Upstream::builder(server)
        .for_layer(&layer)
        .start_timeout(Duration::from_secs(60))
        .spawn()
        .unwrap();
    let book = |extra: Value| {
        let mut params = json!({"name": "book", "arguments": {"restaurant": "Chez X"},
            "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    };
    let alice = [("x-user", "alice"), ("authorization", "Bearer shared")];
    let (_, first) = send(&upstream, &alice, full(&book(json!({})))).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first:#}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    let retry = book(answer("elicitation-1", &state, accept(json!({"seats": 2}))));

    // The same `Authorization`, another principal: not the caller that parked the call.
    let mallory = [("x-user", "mallory"), ("authorization", "Bearer shared")];
    let (_, refused) = send(&upstream, &mallory, full(&retry)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
    let (_, anonymous) = send(
        &upstream,
        &[("authorization", "Bearer shared")],
        full(&retry),
    )
    .await;
    assert_eq!(anonymous["error"]["code"], -32602, "{anonymous:#}");

    // The principal, whatever its `Authorization`: the call resumes.
    let again = [("x-user", "alice"), ("authorization", "Bearer other")];
    let (_, done) = send(&upstream, &again, full(&retry)).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "booked 2 at Chez X",
        "{done:#}"
    );
    upstream.shutdown().await;
}

/// An adapter whose child never finishes its handshake: the body is read and refused before
/// any of it would reach the server.
fn idle_upstream(max_body_bytes: usize) -> Upstream {
    Upstream::builder(Stdio::new("sleep").arg("60"))
        .max_body_bytes(max_body_bytes)
        .spawn()
        .unwrap()
}

async fn a_body_naming_a_key_twice_is_a_parse_error() {
    let upstream = idle_upstream(4096);
    let twice = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "method": "ping"}"#;
    let body = http_body_util::Full::new(bytes::Bytes::from_static(twice.as_bytes()));
    let (status, reply) = send(&upstream, &[], body).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["code"], -32700, "{reply:#}");
    let nested = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "a", "arguments": {"x": 1, "x": 2}}}"#;
    let body = http_body_util::Full::new(bytes::Bytes::from_static(nested.as_bytes()));
    let (status, reply) = send(&upstream, &[], body).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["code"], -32700, "{reply:#}");
    upstream.shutdown().await;
}

async fn a_body_over_the_bound_is_413_and_a_broken_one_400() {
    let upstream = idle_upstream(64);
    let large =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(200)}});
    let (status, reply) = send(&upstream, &[], full(&large)).await;
    assert_eq!(status, http::StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply["error"]["code"], -32600, "{reply:#}");

    let frames: Vec<Result<http_body::Frame<bytes::Bytes>, std::io::Error>> = vec![
        Ok(http_body::Frame::data(bytes::Bytes::from_static(
            b"{\"jsonrpc\"",
        ))),
        Err(std::io::Error::other("the connection broke")),
    ];
    let broken = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let (status, reply) = send(&upstream, &[], broken).await;
    assert_eq!(status, http::StatusCode::BAD_REQUEST);
    assert_eq!(reply["error"]["code"], -32700, "{reply:#}");
    upstream.shutdown().await;
}

/// A server listening on a loopback port of its own, killed when dropped.
pub(crate) struct Listening {
    child: tokio::process::Child,
    port: u16,
}

impl Listening {
    /// Starts `command` (given the port) and waits until the port takes connections.
    pub(crate) async fn start(
        command: impl Fn(u16) -> tokio::process::Command,
        port: Option<u16>,
    ) -> Self {
        let port = port.unwrap_or_else(|| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        });
        let child = command(port)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the server starts");
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
            .expect("the server listens");
        Self { child, port }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub(super) async fn stop(mut self) -> u16 {
        let _ = self.child.kill().await;
        self.port
    }
}

/// server-everything in its Streamable HTTP mode (`PORT` in its environment), when installed.
pub(super) async fn everything_over_http() -> Option<Listening> {
    let entry = cache().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    installed("server-everything", &entry, || Stdio::new("node"))?;
    let command = |port: u16| {
        let mut command = tokio::process::Command::new("node");
        command
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        command
    };
    Some(Listening::start(command, None).await)
}

/// `tests/upstream/elicit_server.py --http <port>`, when the venv is installed.
async fn python_over_http(port: Option<u16>) -> Option<Listening> {
    let python = cache().join("venv/bin/python");
    installed("the Python mcp 1.x venv", &python, || Stdio::new(&python))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/elicit_server.py");
    let command = |port: u16| {
        let mut command = tokio::process::Command::new(&python);
        command.arg(&script).arg("--http").arg(port.to_string());
        command
    };
    Some(Listening::start(command, port).await)
}

async fn everything_over_http_a_plain_tool_and_its_elicitation_through_the_reverse_bridge() {
    let Some(server) = everything_over_http().await else {
        return;
    };
    let stack = Stack::start(Http::new(server.url()), |b| b).await;
    let discovered = stack.rpc("server/discover", json!({})).await;
    assert_eq!(
        result(&discovered)["supportedVersions"],
        json!(["2026-07-28"])
    );
    let echoed = stack
        .call("echo", json!({"message": "over HTTP"}), json!({}))
        .await;
    assert_eq!(text(&echoed), "Echo: over HTTP");

    // The elicitation comes on the POST's event stream; the answer is POSTed back.
    let first = stack.call(ELICIT, json!({}), json!({})).await;
    let (key, request, state) = question(&first);
    assert_eq!(key, "elicitation-1");
    assert_eq!(request["method"], "elicitation/create");
    let done = stack
        .retry(
            ELICIT,
            json!({}),
            &key,
            &state,
            accept(json!({"name": "Ada Lovelace", "email": "ada@example.org"})),
        )
        .await;
    assert!(text(&done).contains("- Name: Ada Lovelace"), "{done:#}");
    stack.upstream.shutdown().await;
    server.stop().await;
}

async fn python_over_http_headers_elicitation_and_a_lost_session() {
    let Some(server) = python_over_http(None).await else {
        return;
    };
    let upstream = Http::new(server.url())
        .header("x-upstream-token", "s3cret")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30));
    let stack = Stack::start(upstream, |b| b).await;

    // The user's header reaches the upstream; the front's own `Authorization` does not.
    let header = |name: &str| json!({"name": name});
    let token = stack
        .call("header", header("x-upstream-token"), json!({}))
        .await;
    assert_eq!(text(&token), "s3cret");
    let auth = stack
        .call("header", header("authorization"), json!({}))
        .await;
    assert_eq!(text(&auth), "(absent)");

    let args = json!({"restaurant": "Over HTTP"});
    let (key, _, state) = question(&stack.call("book", args.clone(), json!({})).await);
    let done = stack
        .retry("book", args, &key, &state, accept(json!({"seats": 4})))
        .await;
    assert_eq!(text(&done), "booked 4 at Over HTTP");

    // The server restarts on the same port and knows the session no more (404): the adapter
    // starts a new one.
    let port = server.stop().await;
    let server = python_over_http(Some(port)).await.unwrap();
    let mut errors = Vec::new();
    let echoed = loop {
        let reply = stack
            .call("echo", json!({"text": "again"}), json!({}))
            .await;
        if reply.get("error").is_none() {
            break reply;
        }
        errors.push(reply["error"]["message"].clone());
        assert!(errors.len() < 20, "{errors:#?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(text(&echoed), "again", "after {errors:?}");
    // The request the server refused for the lost session never ran there: it is sent again
    // in the new session, and the caller sees no error at all.
    assert!(errors.is_empty(), "{errors:#?}");
    stack.upstream.shutdown().await;
    server.stop().await;
}

/// Each call's request to the HTTP server carries the `traceparent` (and `tracestate`) of the
/// front's request of that call, and no other: two calls at once, the first answered last.
async fn python_over_http_each_call_carries_its_own_trace_context() {
    let Some(server) = python_over_http(None).await else {
        return;
    };
    let stack = Stack::start(Http::new(server.url()), |b| b).await;
    let first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let second = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let front = &stack;
    let traced = |traceparent: &'static str, state: &'static str, name: &str, wait_ms: u32| {
        let headers = [
            ("authorization", "Bearer alice"),
            ("traceparent", traceparent),
            ("tracestate", state),
        ];
        let params = json!({"name": "header",
            "arguments": {"name": name, "wait_ms": wait_ms}});
        async move { front.rpc_with(&headers, "tools/call", params).await }
    };
    let (slow, quick) = tokio::join!(
        traced(first, "a=1", "traceparent", 1500),
        traced(second, "b=2", "traceparent", 0),
    );
    assert_eq!(text(&slow), first);
    assert_eq!(text(&quick), second);
    let (slow, quick) = tokio::join!(
        traced(first, "a=1", "tracestate", 1500),
        traced(second, "b=2", "tracestate", 0),
    );
    assert_eq!(text(&slow), "a=1");
    assert_eq!(text(&quick), "b=2");
    // A call without one sends none (nothing of an earlier call's lingers), nor does a call
    // whose `traceparent` is not one, with its `tracestate`.
    let bare = stack
        .call("header", json!({"name": "traceparent"}), json!({}))
        .await;
    assert_eq!(text(&bare), "(absent)");
    let bad = [
        ("authorization", "Bearer alice"),
        ("traceparent", "00-not-a-trace-01"),
        ("tracestate", "c=3"),
    ];
    for name in ["traceparent", "tracestate"] {
        let params = json!({"name": "header", "arguments": {"name": name}});
        let reply = stack.rpc_with(&bad, "tools/call", params).await;
        assert_eq!(text(&reply), "(absent)", "{name}");
    }
    stack.upstream.shutdown().await;
    server.stop().await;
}

async fn an_http_server_not_there_yet_is_a_clear_error_then_served_once_it_listens() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let stack = Stack::start(Http::new(url), |b| b.start_timeout(Duration::from_secs(5))).await;
    let early = stack
        .call("echo", json!({"text": "early"}), json!({}))
        .await;
    let message = early["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not available") && message.contains("could not be reached"),
        "{early:#}"
    );
    // The handshake is tried again with back-off: once the server listens, calls are served.
    let Some(server) = python_over_http(Some(port)).await else {
        return;
    };
    let served = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let reply = stack.call("echo", json!({"text": "late"}), json!({})).await;
            if reply.get("error").is_none() {
                break reply;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("served once the server listens");
    assert_eq!(text(&served), "late");
    stack.upstream.shutdown().await;
    server.stop().await;
}

fn an_http_server_needs_an_http_url_and_valid_headers() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let mut servers = vec![
        Http::new("not a url"),
        Http::new("http://127.0.0.1:1/mcp").header("bad header", "x"),
        Http::new("http://127.0.0.1:1/mcp").header("x-ok", "line\nbreak"),
    ];
    // Without `upstream-https` an https:// URL is refused at once; with it, it is valid.
    if cfg!(not(feature = "upstream-https")) {
        servers.push(Http::new("https://example.org/mcp"));
    }
    for server in servers {
        let error = Upstream::builder(server).spawn().unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    }
}

/// `tests/upstream/probe_server.py`: a 2025-era stdio server of the standard library only, that
/// says what it was sent (run with the venv's Python, the one the other Python server needs).
fn probe_server(ignore_ping: bool) -> Option<Stdio> {
    let python = cache().join("venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/probe_server.py");
    let command = || {
        let server = Stdio::new(&python).arg(&script);
        if ignore_ping {
            server.env("PROBE_IGNORE_PING", "1")
        } else {
            server
        }
    };
    installed("the Python venv", &python, command)
}

/// A `tools/call` of `tool` with `meta` as the request's whole `_meta`, accepting `accept`: the
/// status, the content type and the body as text.
async fn post_call(stack: &Stack, tool: &str, meta: Value, accept: &str) -> (u16, String, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": meta}});
    let response = stack
        .http
        .post(&stack.url)
        .header("content-type", "application/json")
        .header("accept", accept)
        .header("mcp-protocol-version", "2026-07-28")
        .header("authorization", "Bearer alice")
        .body(body.to_string())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the stack answers");
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, kind, response.text().await.unwrap())
}

/// The `_meta` of a 2026 request declaring `capabilities`, with `more` entries.
fn meta(capabilities: Value, more: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "upstream-test", "version": "0"},
    });
    meta.as_object_mut()
        .unwrap()
        .extend(more.as_object().cloned().unwrap_or_default());
    meta
}

/// The methods the probe server was sent so far.
async fn seen(stack: &Stack) -> Vec<String> {
    serde_json::from_str(&text(&stack.call("seen", json!({}), json!({})).await)).unwrap()
}

async fn progress_and_log_notifications_reach_the_front_as_an_event_stream() {
    let Some(server) = probe_server(false) else {
        return;
    };
    let stack = Stack::start(server, |b| b).await;
    let token = json!({"progressToken": "front-token"});
    let (status, kind, body) = post_call(
        &stack,
        "progress",
        meta(json!({}), token.clone()),
        "application/json, text/event-stream",
    )
    .await;
    assert_eq!(
        (status, kind.as_str()),
        (200, "text/event-stream"),
        "{body}"
    );
    let events: Vec<Value> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    let methods: Vec<&str> = events
        .iter()
        .map(|e| e["method"].as_str().unwrap_or("(response)"))
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/progress",
            "notifications/progress",
            "notifications/message",
            "(response)"
        ],
        "{body}"
    );
    // The front's own token, not the one the adapter gave the server.
    assert_eq!(
        events[0]["params"]["progressToken"], "front-token",
        "{body}"
    );
    assert_eq!(events[1]["params"]["progress"], 2, "{body}");
    assert_eq!(events[3]["result"]["content"][0]["text"], "done", "{body}");

    // A front that takes JSON only gets the answer alone.
    let (status, kind, body) = post_call(
        &stack,
        "progress",
        meta(json!({}), token),
        "application/json",
    )
    .await;
    assert_eq!((status, kind.as_str()), (200, "application/json"), "{body}");
    assert!(body.contains("done"), "{body}");
    stack.upstream.shutdown().await;
}

async fn the_log_level_a_request_carries_is_set_on_the_session_when_it_changes() {
    let Some(server) = probe_server(false) else {
        return;
    };
    let stack = Stack::start(server, |b| b).await;
    let level = |l: &str| meta(json!({}), json!({"io.modelcontextprotocol/logLevel": l}));
    for l in ["debug", "debug", "error"] {
        let (status, _, body) = post_call(&stack, "seen", level(l), "application/json").await;
        assert_eq!(status, 200, "{body}");
    }
    let set: Vec<String> = seen(&stack)
        .await
        .into_iter()
        .filter(|m| m.starts_with("logging/setLevel"))
        .collect();
    assert_eq!(set, ["logging/setLevel debug", "logging/setLevel error"]);
    stack.upstream.shutdown().await;
}

async fn questions_the_client_cannot_answer_are_refused_to_the_server_or_answered_32021() {
    let Some(server) = probe_server(false) else {
        return;
    };
    let mut stack = Stack::start(server, |b| b).await;
    // Form elicitation declared, roots not: the roots request is refused to the server, and
    // only the elicitation is asked.
    stack.capabilities = json!({"elicitation": {}});
    let (key, request, state) = question(&stack.call("ask", json!({}), json!({})).await);
    assert_eq!(request["method"], "elicitation/create", "{request:#}");
    let done = stack
        .retry("ask", json!({}), &key, &state, accept(json!({"ok": true})))
        .await;
    let answers: Value = serde_json::from_str(&text(&done)).unwrap();
    assert_eq!(
        answers,
        json!({"elicitation/create": "accept", "roots/list": "error -32601"})
    );

    // Nothing declared: the call cannot go on; -32021 (HTTP 400), and it is ended at the server
    // at once, not left parked.
    let (status, _, body) = post_call(
        &stack,
        "ask",
        meta(json!({}), json!({})),
        "application/json",
    )
    .await;
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(reply["error"]["code"], -32021, "{body}");
    assert_eq!(
        reply["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"form": {}}})
    );
    assert!(
        seen(&stack)
            .await
            .contains(&"notifications/cancelled".to_owned())
    );
    stack.upstream.shutdown().await;
}

async fn a_child_that_stops_answering_pings_is_restarted() {
    let Some(server) = probe_server(true) else {
        return;
    };
    let stack = Stack::start(server, |b| {
        b.keep_alive(Some(Duration::from_millis(200)))
            .start_timeout(Duration::from_secs(1))
    })
    .await;
    let pid = |reply: &Value| {
        result(reply)["_meta"]["io.modelcontextprotocol/serverInfo"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let first = pid(&stack.rpc("server/discover", json!({})).await);
    assert!(!first.is_empty());
    let mut restarted = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let reply = stack.rpc("server/discover", json!({})).await;
        if reply.get("result").is_some() && pid(&reply) != first {
            restarted = true;
            break;
        }
    }
    assert!(restarted, "the hung child {first} was not restarted");
    stack.upstream.shutdown().await;
}

/// Two replicas, each with its own child and layer (the same keys), the retry sent to the one
/// that did not ask.
async fn replicas(
    tune: impl Fn(UpstreamBuilder) -> UpstreamBuilder + Clone,
) -> Option<(Stack, Stack)> {
    let (Some(a), Some(b)) = (python_server(), python_server()) else {
        return None;
    };
    let first = Stack::start(a, tune.clone()).await;
    let second = Stack::start(b, tune).await;
    Some((first, second))
}

async fn a_retry_on_another_replica_is_routed_to_the_call_through_redis() {
    let redis = tower_elicitation::redis::RedisStore::builder(crate::support::redis::redis_url())
        .key_prefix(crate::support::redis::prefix())
        .build()
        .expect("a Redis URL");
    let pending = redis.pending_answers();
    let Some((asked, other)) = replicas(move |b| b.route_retries(pending.clone())).await else {
        return;
    };
    let args = json!({"restaurant": "Chez Deux"});
    let (key, _, state) = question(&asked.call("book", args.clone(), json!({})).await);

    // Answered wrongly on the other replica: the layer there asks again (it never goes far).
    let again = other
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 20})),
        )
        .await;
    let (key, _, state) = question(&again);
    // Answered well on the other replica: routed to the call, its result brought back.
    let done = other
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 2})),
        )
        .await;
    assert_eq!(text(&done), "booked 2 at Chez Deux");

    // Replayed on either replica: the call is gone, nothing runs twice.
    for stack in [&other, &asked] {
        let replay = stack
            .retry(
                "book",
                args.clone(),
                &key,
                &state,
                accept(json!({"seats": 3})),
            )
            .await;
        assert_eq!(replay["error"]["code"], -32602, "{replay:#}");
    }
    // Another caller's retry, routed, is refused by the holder.
    let (key, _, state) = question(&asked.call("book", args.clone(), json!({})).await);
    let mut params = json!({"name": "book", "arguments": args});
    params.as_object_mut().unwrap().extend(
        answer(&key, &state, accept(json!({"seats": 1})))
            .as_object()
            .cloned()
            .unwrap(),
    );
    let mallory = other.rpc_as("Bearer mallory", "tools/call", params).await;
    assert!(mallory.get("error").is_some(), "{mallory:#}");
    asked.upstream.shutdown().await;
    other.upstream.shutdown().await;
}

async fn without_routes_a_retry_on_another_replica_says_why() {
    let Some((asked, other)) = replicas(|b| b).await else {
        return;
    };
    let args = json!({"restaurant": "Chez Deux"});
    let (key, _, state) = question(&asked.call("book", args.clone(), json!({})).await);
    let elsewhere = other
        .retry(
            "book",
            args.clone(),
            &key,
            &state,
            accept(json!({"seats": 2})),
        )
        .await;
    assert_eq!(elsewhere["error"]["code"], -32602, "{elsewhere:#}");
    let message = elsewhere["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("another replica"), "{elsewhere:#}");
    // On the replica that asked, the same retry completes.
    let done = asked
        .retry("book", args, &key, &state, accept(json!({"seats": 2})))
        .await;
    assert_eq!(text(&done), "booked 2 at Chez Deux");
    asked.upstream.shutdown().await;
    other.upstream.shutdown().await;
}

/// `tests/upstream/elicit_server.py --https` with a self-signed certificate for 127.0.0.1 made
/// by `openssl` here: the server, and the certificate (PEM) a client must trust.
#[cfg(feature = "upstream-https")]
async fn python_over_https() -> Option<(Listening, Vec<u8>, tempdir::Dir)> {
    let python = cache().join("venv/bin/python");
    installed("the Python mcp 1.x venv", &python, || Stdio::new(&python))?;
    let dir = tempdir::Dir::new();
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(made.success(), "openssl made no certificate");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/elicit_server.py");
    let command = |port: u16| {
        let mut command = tokio::process::Command::new(&python);
        command
            .arg(&script)
            .arg("--https")
            .arg(port.to_string())
            .arg(&cert)
            .arg(&key);
        command
    };
    let pem = std::fs::read(&cert).unwrap();
    Some((Listening::start(command, None).await, pem, dir))
}

/// A directory of its own, removed when dropped.
#[cfg(feature = "upstream-https")]
mod tempdir {
    pub(super) struct Dir(pub(super) std::path::PathBuf);

    impl Dir {
        pub(super) fn new() -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let path = std::env::temp_dir().join(format!("te-tls-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(feature = "upstream-https")]
async fn https_a_server_with_a_trusted_certificate_is_served_and_an_untrusted_one_refused() {
    let Some((server, pem, _dir)) = python_over_https().await else {
        return;
    };
    let url = format!("https://127.0.0.1:{}/mcp", server.port);
    let stack = Stack::start(Http::new(url.clone()).root_certificate(pem), |b| b).await;
    let args = json!({"restaurant": "Chez TLS"});
    let (key, _, state) = question(&stack.call("book", args.clone(), json!({})).await);
    let done = stack
        .retry("book", args, &key, &state, accept(json!({"seats": 2})))
        .await;
    assert_eq!(text(&done), "booked 2 at Chez TLS");
    stack.upstream.shutdown().await;

    // The same server, its certificate not trusted: never served.
    let untrusted = Stack::start(Http::new(url), |b| b.start_timeout(Duration::from_secs(3))).await;
    let reply = untrusted.rpc("tools/list", json!({})).await;
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not available"), "{reply:#}");
    untrusted.upstream.shutdown().await;
    server.stop().await;
}

#[cfg(not(feature = "upstream-https"))]
fn without_upstream_https_an_https_url_is_refused_saying_which_feature_adds_it() {
    let error = Upstream::builder(Http::new("https://127.0.0.1:1/mcp"))
        .spawn()
        .expect_err("no TLS in this build");
    assert!(error.to_string().contains("upstream-https"), "{error}");
}

crate::trials! {
    [Upstreams] current_thread filesystem_lists_reads_and_writes_through_the_adapter,
    [Upstreams] current_thread everything_elicitation_accepted_through_the_reverse_bridge,
    [Upstreams] current_thread everything_answers_that_do_not_match_the_schema_are_asked_again,
    [Upstreams] current_thread everything_elicitation_declined_and_cancelled,
    [Upstreams] current_thread everything_sampling_through_the_reverse_bridge,
    [Upstreams] current_thread python_ctx_elicit_is_validated_and_resumed,
    [Upstreams] current_thread python_another_callers_state_never_resumes_the_call,
    [Upstreams] current_thread python_a_child_that_dies_mid_call_is_an_error_and_the_next_call_works,
    [Upstreams] current_thread python_parked_calls_expire_and_are_bounded,
    [] current_thread a_2026_upstream_is_passed_through_whole,
    [Upstreams] current_thread python_concurrent_calls_each_get_their_own_questions,
    [Upstreams] current_thread python_an_upstream_that_never_answers_times_out_and_the_next_call_works,
    [Upstreams] current_thread the_child_is_killed_when_the_last_clone_is_dropped,
    [Upstreams] current_thread without_the_layer_an_unknown_parked_call_is_a_clear_error,
    [Upstreams] current_thread parked_calls_are_bound_to_the_layers_principal,
    [] current_thread a_body_naming_a_key_twice_is_a_parse_error,
    [] current_thread a_body_over_the_bound_is_413_and_a_broken_one_400,
    [Upstreams] current_thread everything_over_http_a_plain_tool_and_its_elicitation_through_the_reverse_bridge,
    [Upstreams] current_thread python_over_http_headers_elicitation_and_a_lost_session,
    [Upstreams] current_thread python_over_http_each_call_carries_its_own_trace_context,
    [Upstreams] current_thread an_http_server_not_there_yet_is_a_clear_error_then_served_once_it_listens,
    [] sync an_http_server_needs_an_http_url_and_valid_headers,
    [Upstreams] current_thread progress_and_log_notifications_reach_the_front_as_an_event_stream,
    [Upstreams] current_thread the_log_level_a_request_carries_is_set_on_the_session_when_it_changes,
    [Upstreams] current_thread questions_the_client_cannot_answer_are_refused_to_the_server_or_answered_32021,
    [Upstreams] current_thread a_child_that_stops_answering_pings_is_restarted,
    [Upstreams, Redis] current_thread a_retry_on_another_replica_is_routed_to_the_call_through_redis,
    [Upstreams] current_thread without_routes_a_retry_on_another_replica_says_why,
    #[cfg(feature = "upstream-https")]
    [Upstreams] current_thread https_a_server_with_a_trusted_certificate_is_served_and_an_untrusted_one_refused,
    #[cfg(not(feature = "upstream-https"))]
    [] sync without_upstream_https_an_https_url_is_refused_saying_which_feature_adds_it,
}
