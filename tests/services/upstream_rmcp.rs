//! rmcp 3.11 on both sides of the upstream adapter, over real sockets and pipes:
//!
//! - **a 2025-era rmcp upstream**: `upstream-rmcp` (the `tools` binary: rmcp over stdio in its
//!   `initialize` session mode, asking with a server-to-client `elicitation/create` for an
//!   integer from 1 to 8) through `Upstream` behind `ElicitationLayer`: accepted, asked again
//!   when the answer is outside the schema, declined;
//! - **a 2026 rmcp upstream over HTTP**: the `deploy` example's bare `mcp_service` on a loopback
//!   port, fronted by `Upstream` over `upstream::Http` (`Era::Detect` finds 2026-07-28) behind
//!   the example's gates: the whole deploy flow, and a gate's question;
//! - **rmcp's client through adapter, layer and bridge**: the front served on a loopback port,
//!   the upstream `upstream-rmcp` (and, when installed, `server-everything` over stdio and over
//!   its Streamable HTTP mode, `server-filesystem` with a gate on `write_file`, and the FastMCP
//!   fixture `tests/upstream/elicit_server.py`), driven by rmcp's client in its 2026-07-28 mode
//!   (it answers the `input_required` rounds) and in its 2025 mode (`initialize`: its handler
//!   answers the `elicitation/create` the bridge sends).
//!
//! `upstream-rmcp` is built by `scripts/upstream-servers.sh` (`cargo build -p
//! tower-elicitation-tools --bin upstream-rmcp`) next to this test binary (`target/<profile>/`),
//! or named by `MCP_UPSTREAM_RMCP`. Without it each test that needs it prints why it skips,
//! unless `MCP_REQUIRE_UPSTREAMS=1` (then it fails), as in `upstream`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ProtocolVersion,
    },
    service::{RequestContext, RoleClient},
    transport::StreamableHttpClientTransport,
};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::upstream::{Era, Http, Server, Stdio, Upstream};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};

use crate::support::server::{self, DeployState};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Where a 2026-07-28 `server/discover` result names the server.
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Where `upstream-rmcp` is: `MCP_UPSTREAM_RMCP`, else next to this test binary
/// (`target/<profile>/deps/services-…` → `target/<profile>/upstream-rmcp`).
pub(crate) fn binary() -> PathBuf {
    std::env::var_os("MCP_UPSTREAM_RMCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("the test binary's path");
            let profile = exe
                .parent()
                .and_then(|deps| deps.parent())
                .expect("the test binary is in target/<profile>/deps");
            profile.join(format!("upstream-rmcp{}", std::env::consts::EXE_SUFFIX))
        })
}

/// `upstream-rmcp`'s command (the harness found it built).
fn upstream_rmcp() -> Option<Stdio> {
    let binary = binary();
    super::upstream::installed("the upstream-rmcp binary", &binary, || Stdio::new(&binary))
}

/// The layer in front: the test key, defaults otherwise.
fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).expect("a valid key"))
}

/// `app` served on `127.0.0.1:<random>`; its `/mcp` URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}{}", server::MCP_PATH)
}

/// `layer` → `Upstream` (of `server`) served on a loopback port, without the bridge.
async fn front(server: impl Into<Server>, layer: ElicitationLayer) -> (Client, Upstream) {
    let upstream = Upstream::builder(server)
        .era(Era::Detect)
        .for_layer(&layer)
        .start_timeout(TIMEOUT)
        .spawn()
        .expect("the upstream starts");
    let mcp = ServiceBuilder::new().layer(layer).service(upstream.clone());
    let url = serve(axum::Router::new().nest_service(server::MCP_PATH, mcp)).await;
    (Client::new(url), upstream)
}

/// A stateless 2026-07-28 JSON-RPC client over HTTP, declaring form and URL elicitation.
struct Client {
    url: String,
    http: reqwest::Client,
    next_id: AtomicU64,
}

impl Client {
    fn new(url: String) -> Self {
        Self {
            url,
            http: reqwest::Client::new(),
            next_id: 1.into(),
        }
    }

    /// The whole JSON-RPC response to `method` with `params`.
    async fn rpc(&self, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "upstream-rmcp-test", "version": "0"},
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("authorization", "Bearer alice")
            .body(body.to_string())
            .timeout(TIMEOUT)
            .send()
            .await
            .expect("the front answers");
        let text = response.text().await.unwrap();
        let text = text
            .lines()
            .find_map(|line| line.strip_prefix("data: "))
            .unwrap_or(&text)
            .to_owned();
        let reply: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(reply["id"], id, "{reply:#}");
        reply
    }

    /// `tools/call` of `tool` with `arguments`, and `extra` params (the answers and state).
    async fn call(&self, tool: &str, arguments: &Value, extra: Value) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Value::Object(extra) = extra {
            params.as_object_mut().unwrap().extend(extra);
        }
        self.rpc("tools/call", params).await
    }

    /// The retry of `tool`: `answer` to `key`, the state echoed.
    async fn answer(
        &self,
        tool: &str,
        arguments: &Value,
        (key, state): (&str, &str),
        answer: Value,
    ) -> Value {
        let extra = json!({"requestState": state, "inputResponses": {key: answer}});
        self.call(tool, arguments, extra).await
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
    assert!(state.starts_with("v1.k1."), "sealed by the layer: {state}");
    (key.clone(), request.clone(), state)
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

// 1. rmcp 3.11 in its 2025 `initialize` mode, as a stdio upstream.

async fn rmcp_2025_upstream_is_fronted_as_2026_and_its_plain_tool_runs() {
    let Some(server) = upstream_rmcp() else {
        return;
    };
    let (client, upstream) = front(server, layer()).await;
    let discovered = client.rpc("server/discover", json!({})).await;
    assert_eq!(
        result(&discovered)["supportedVersions"],
        json!(["2026-07-28"]),
        "answered by the adapter from the session's InitializeResult: {discovered:#}"
    );
    assert_eq!(
        result(&discovered)["_meta"][SERVER_INFO]["name"],
        "upstream-rmcp",
        "{discovered:#}"
    );
    // What rmcp's client requires of a `DiscoverResult` (it cannot start without them).
    assert_eq!(result(&discovered)["ttlMs"], 0, "{discovered:#}");
    assert_eq!(
        result(&discovered)["cacheScope"],
        "private",
        "{discovered:#}"
    );
    let tools = client.rpc("tools/list", json!({})).await;
    let names: Vec<&str> = result(&tools)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.contains(&"book") && names.contains(&"echo"),
        "{names:?}"
    );
    let echoed = client
        .call("echo", &json!({"text": "hello"}), json!({}))
        .await;
    assert_eq!(text(&echoed), "hello");
    upstream.shutdown().await;
}

async fn rmcp_2025_elicitation_accepted_through_the_reverse_bridge() {
    let Some(server) = upstream_rmcp() else {
        return;
    };
    let (client, upstream) = front(server, layer()).await;
    let args = json!({"restaurant": "Chez Rust"});
    let first = client.call("book", &args, json!({})).await;
    let (key, request, state) = question(&first);
    assert_eq!(key, "elicitation-1");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "How many seats?");
    let seats = &request["params"]["requestedSchema"]["properties"]["seats"];
    assert_eq!(
        (&seats["type"], &seats["minimum"], &seats["maximum"]),
        (&json!("integer"), &json!(1), &json!(8)),
        "{request:#}"
    );
    let done = client
        .answer("book", &args, (&key, &state), accept(json!({"seats": 4})))
        .await;
    assert_eq!(text(&done), "booked 4 at Chez Rust");
    upstream.shutdown().await;
}

async fn rmcp_2025_answers_outside_the_schema_are_asked_again() {
    let Some(server) = upstream_rmcp() else {
        return;
    };
    let (client, upstream) = front(server, layer()).await;
    let args = json!({"restaurant": "Chez Rust"});
    let (key, _, mut state) = question(&client.call("book", &args, json!({})).await);
    // Above the maximum, then not an integer, then missing: the layer asks again each time,
    // and the upstream (which would say `out of range`) never sees them.
    for bad in [json!({"seats": 12}), json!({"seats": 2.5}), json!({})] {
        let again = client
            .answer("book", &args, (&key, &state), accept(bad.clone()))
            .await;
        let (again_key, request, next) = question(&again);
        assert_eq!(again_key, key, "{bad}: {again:#}");
        let message = request["params"]["message"].as_str().unwrap();
        assert!(message.starts_with("How many seats?"), "{bad}: {message}");
        assert!(message.len() > "How many seats?".len(), "a hint: {message}");
        state = next;
    }
    let done = client
        .answer("book", &args, (&key, &state), accept(json!({"seats": 8})))
        .await;
    assert_eq!(text(&done), "booked 8 at Chez Rust");
    upstream.shutdown().await;
}

async fn rmcp_2025_elicitation_declined_and_cancelled() {
    let Some(server) = upstream_rmcp() else {
        return;
    };
    let (client, upstream) = front(server, layer()).await;
    let args = json!({"restaurant": "Chez Rust"});
    for (action, said) in [("decline", "declined"), ("cancel", "cancelled")] {
        let (key, _, state) = question(&client.call("book", &args, json!({})).await);
        let done = client
            .answer("book", &args, (&key, &state), json!({"action": action}))
            .await;
        assert_eq!(text(&done), said, "{action}");
    }
    upstream.shutdown().await;
}

// 2. The `deploy` example's rmcp (2026-07-28, stateless) as an upstream over HTTP.

/// `Era::Detect` finds the deploy example to be 2026-07-28 (its `server/discover`, which rmcp
/// answers only with the whole `_meta` a 2026 request carries), and its flows run.
async fn deploy_example_over_http_is_detected_as_2026_and_its_flows_run() {
    deploy_flows().await;
}

/// The deploy example's bare rmcp service behind `Upstream` over HTTP and the example's gates:
/// discover, the handler's question (asked again, approved, declined), and a gate's.
async fn deploy_flows() {
    for json_response in [true, false] {
        let state = DeployState::new();
        let bare = server::mcp_service(state.clone(), json_response);
        let app = axum::Router::new().nest_service(server::MCP_PATH, bare);
        let url = serve(app).await;
        let layer = server::with_gates(layer(), &state).expect("the example's gates are valid");
        let (client, upstream) = front(Http::new(url), layer).await;

        // `server/discover` passed through: rmcp's own answer (a legacy upstream would have
        // had it answered by the adapter, from an `initialize` the example refuses).
        let discovered = client.rpc("server/discover", json!({})).await;
        let discovered = result(&discovered);
        assert_eq!(discovered["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(discovered["_meta"][SERVER_INFO]["name"], "deploy-example");

        // The handler's own question, answered wrongly once (asked again), then approved.
        let args = json!({"environment": "staging"});
        let first = client.call("deploy", &args, json!({})).await;
        let (key, request, state_1) = question(&first);
        assert_eq!(key, server::APPROVAL_KEY);
        assert_eq!(request["params"]["message"], "Deploy to 'staging'?");
        let again = client
            .answer(
                "deploy",
                &args,
                (&key, &state_1),
                accept(json!({"approve": "yes"})),
            )
            .await;
        let (_, _, state_2) = question(&again);
        assert_eq!(state.deploys(), 0);
        let done = client
            .answer(
                "deploy",
                &args,
                (&key, &state_2),
                accept(json!({"approve": true})),
            )
            .await;
        assert_eq!(
            result(&done)["structuredContent"],
            json!({"environment": "staging", "deployed": true}),
            "json_response {json_response}: {done:#}"
        );
        assert_eq!(state.deploys(), 1);

        // Declined: the handler's error result.
        let (key, _, declined) = question(&client.call("deploy", &args, json!({})).await);
        let refused = client
            .answer(
                "deploy",
                &args,
                (&key, &declined),
                json!({"action": "decline"}),
            )
            .await;
        assert_eq!(result(&refused)["isError"], true, "{refused:#}");
        assert_eq!(text(&refused), server::NOT_APPROVED);
        assert_eq!(state.deploys(), 1);

        // A gate of the layer's, before a handler that asks nothing.
        let branch = state.branches()[0].clone();
        let args = json!({"name": branch});
        let (key, request, gated) = question(&client.call("delete_branch", &args, json!({})).await);
        assert_eq!(key, server::CONFIRM_DELETE_KEY);
        assert_eq!(
            request["params"]["message"],
            server::delete_message(&branch)
        );
        let done = client
            .answer(
                "delete_branch",
                &args,
                (&key, &gated),
                accept(json!({"confirm": branch})),
            )
            .await;
        assert_eq!(text(&done), format!("Deleted branch {branch}"));
        assert!(!state.branches().contains(&branch));
        upstream.shutdown().await;
    }
}

// 3. rmcp's client, in both its modes, through adapter + layer + bridge on a loopback port.

/// A client whose user answers elicitations from a script, and who remembers each message.
#[derive(Clone, Default)]
struct ScriptedUser {
    answers: Arc<Mutex<VecDeque<ElicitResult>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ScriptedUser {
    fn new(answers: impl IntoIterator<Item = ElicitResult>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers.into_iter().collect())),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl ClientHandler for ScriptedUser {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("rmcp-client-test", "0.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. }
            | ElicitRequestParams::UrlElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        self.seen.lock().unwrap().push(message);
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| ErrorData::internal_error("the script has no more answers", None))
    }
}

/// Adapter (of `server`) + layer + bridge, served on a loopback port: its URL.
async fn bridged_front(server: impl Into<Server>) -> (String, Upstream) {
    bridged_front_with(server, layer()).await
}

/// The same with `layer` (gates of its own) in front.
async fn bridged_front_with(
    server: impl Into<Server>,
    layer: ElicitationLayer,
) -> (String, Upstream) {
    let upstream = Upstream::builder(server)
        .for_layer(&layer)
        .start_timeout(TIMEOUT)
        .spawn()
        .expect("the upstream starts");
    let mcp = ServiceBuilder::new()
        .layer(LegacyBridgeLayer::for_layer(&layer))
        .layer(layer)
        .service(upstream.clone());
    let url = serve(axum::Router::new().nest_service(server::MCP_PATH, mcp)).await;
    (url, upstream)
}

/// rmcp's client lifecycles: 2026-07-28 (stateless, MRTR) and 2025 (`initialize`).
fn lifecycles() -> [(&'static str, ClientLifecycleMode); 2] {
    [
        (
            "2026",
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
        ("2025", ClientLifecycleMode::Initialize),
    ]
}

/// `tool` with `arguments` called by rmcp's client in `lifecycle` at `url`, its user answering
/// `answers`: the result, and the messages the user saw.
async fn rmcp_call(
    url: &str,
    lifecycle: ClientLifecycleMode,
    tool: &'static str,
    arguments: Value,
    answers: impl IntoIterator<Item = ElicitResult>,
) -> (CallToolResult, Vec<String>) {
    let user = ScriptedUser::new(answers);
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let exchange = async {
        let client = user
            .clone()
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("the client starts");
        let Value::Object(arguments) = arguments else {
            panic!("arguments are an object")
        };
        let params = CallToolRequestParams::new(tool).with_arguments(arguments);
        let result = client.call_tool(params).await.expect("the call completes");
        let _ = client.cancel().await;
        result
    };
    let result = tokio::time::timeout(TIMEOUT, exchange)
        .await
        .expect("no answer within the timeout");
    (result, user.seen())
}

/// The names of the tools rmcp's client in `lifecycle` lists at `url`.
async fn rmcp_tool_names(url: &str, lifecycle: ClientLifecycleMode) -> Vec<String> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let exchange = async {
        let client = ScriptedUser::default()
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("the client starts");
        let tools = client
            .list_all_tools()
            .await
            .expect("the listing completes");
        let _ = client.cancel().await;
        tools
            .into_iter()
            .map(|tool| tool.name.into_owned())
            .collect()
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .expect("no answer within the timeout")
}

fn rmcp_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|content| content.as_text())
        .map(|text| text.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn accepted(content: Value) -> ElicitResult {
    ElicitResult::new(ElicitationAction::Accept).with_content(content)
}

async fn rmcp_client_both_modes_through_the_bridge_to_the_rmcp_2025_upstream() {
    let Some(server) = upstream_rmcp() else {
        return;
    };
    let (url, upstream) = bridged_front(server).await;
    for (era, lifecycle) in lifecycles() {
        // Outside the schema, then within it: asked again with a hint, then booked.
        let answers = [accepted(json!({"seats": 9})), accepted(json!({"seats": 3}))];
        let args = json!({"restaurant": era});
        let (result, seen) = rmcp_call(&url, lifecycle, "book", args, answers).await;
        assert_eq!(rmcp_text(&result), format!("booked 3 at {era}"), "{era}");
        assert_eq!(seen.len(), 2, "{era}: {seen:?}");
        assert_eq!(seen[0], "How many seats?", "{era}");
        assert!(
            seen[1].starts_with("How many seats?") && seen[1].len() > seen[0].len(),
            "{era}: the re-ask carries a hint: {seen:?}"
        );
    }
    for (era, lifecycle) in lifecycles() {
        let declined = [ElicitResult::new(ElicitationAction::Decline)];
        let args = json!({"restaurant": era});
        let (result, seen) = rmcp_call(&url, lifecycle, "book", args, declined).await;
        assert_eq!(rmcp_text(&result), "declined", "{era}");
        assert_eq!(seen, ["How many seats?"], "{era}");
    }
    upstream.shutdown().await;
}

async fn rmcp_client_both_modes_through_the_bridge_to_server_everything() {
    let Some(server) = super::upstream::node_server("server-everything", &["stdio"]) else {
        return;
    };
    let (url, upstream) = bridged_front(server).await;
    for (era, lifecycle) in lifecycles() {
        // `name` missing, then given: asked again, then answered.
        let answers = [
            accepted(json!({"email": "not an email"})),
            accepted(json!({"name": "Ada Lovelace"})),
        ];
        let (result, seen) = rmcp_call(
            &url,
            lifecycle,
            "trigger-elicitation-request",
            json!({}),
            answers,
        )
        .await;
        let said = rmcp_text(&result);
        assert!(said.contains("- Name: Ada Lovelace"), "{era}: {said}");
        assert_eq!(seen.len(), 2, "{era}: {seen:?}");
    }
    for (era, lifecycle) in lifecycles() {
        let declined = [ElicitResult::new(ElicitationAction::Decline)];
        let (result, seen) = rmcp_call(
            &url,
            lifecycle,
            "trigger-elicitation-request",
            json!({}),
            declined,
        )
        .await;
        assert!(rmcp_text(&result).contains("declined"), "{era}: {result:?}");
        assert_eq!(seen.len(), 1, "{era}: {seen:?}");
    }
    upstream.shutdown().await;
}

/// The layer with `front --gate TOOL`'s approval in front of `tool`: a form of one boolean,
/// `approve`, which must be `true`.
fn gated_layer(tool: &str) -> ElicitationLayer {
    let approval = Gate::form(
        "approval",
        r#"{"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve"}}, "required": ["approve"]}"#,
    )
    .expect("a valid form")
    .message(|call| format!("Run {}?", call.target()))
    .require(|answer, _call| answer["approve"] == true);
    layer()
        .gate(GateTarget::tool(tool), approval)
        .expect("a valid gate")
}

/// What a gate's refusal says (the layer's `isError` result).
const GATE_REFUSAL: &str = "The request was not approved.";

async fn rmcp_client_both_modes_through_the_bridge_to_server_filesystem_with_a_gate() {
    let dir = std::env::temp_dir().join(format!("upstream-rmcp-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let Some(server) = super::upstream::node_server("server-filesystem", &[dir.to_str().unwrap()])
    else {
        return;
    };
    let (url, upstream) = bridged_front_with(server, gated_layer("write_file")).await;
    std::fs::write(dir.join("read-me.txt"), "read by rmcp\n").unwrap();
    for (era, lifecycle) in lifecycles() {
        let names = rmcp_tool_names(&url, lifecycle.clone()).await;
        for name in ["read_text_file", "write_file", "list_directory"] {
            assert!(names.iter().any(|n| n == name), "{era}: {names:?}");
        }

        let path = dir.join("read-me.txt");
        let args = json!({"path": path.to_str().unwrap()});
        let (read, seen) = rmcp_call(&url, lifecycle.clone(), "read_text_file", args, []).await;
        assert_eq!(rmcp_text(&read), "read by rmcp\n", "{era}: {read:?}");
        assert!(seen.is_empty(), "{era}: {seen:?}");

        // Approved: asked once by the gate, then written.
        let file = dir.join(format!("approved-{era}.txt"));
        let args = json!({"path": file.to_str().unwrap(), "content": "approved\n"});
        let approve = [accepted(json!({"approve": true}))];
        let (written, seen) = rmcp_call(&url, lifecycle.clone(), "write_file", args, approve).await;
        assert!(
            rmcp_text(&written).contains("Successfully wrote"),
            "{era}: {written:?}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "approved\n");
        assert_eq!(seen, ["Run write_file?"], "{era}");

        // Refused three ways: the gate's error result, nothing written.
        let refusals = [
            ("decline", ElicitResult::new(ElicitationAction::Decline)),
            ("cancel", ElicitResult::new(ElicitationAction::Cancel)),
            ("approve-false", accepted(json!({"approve": false}))),
        ];
        for (how, answer) in refusals {
            let file = dir.join(format!("refused-{era}-{how}.txt"));
            let args = json!({"path": file.to_str().unwrap(), "content": "nope\n"});
            let (refused, seen) =
                rmcp_call(&url, lifecycle.clone(), "write_file", args, [answer]).await;
            assert_eq!(refused.is_error, Some(true), "{era} {how}: {refused:?}");
            assert_eq!(rmcp_text(&refused), GATE_REFUSAL, "{era} {how}");
            assert!(!file.exists(), "{era} {how}: written");
            assert_eq!(seen.len(), 1, "{era} {how}: {seen:?}");
        }
    }
    upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn rmcp_client_both_modes_through_the_bridge_to_the_fastmcp_fixture() {
    let Some(server) = super::upstream::python_server() else {
        return;
    };
    let (url, upstream) = bridged_front(server).await;
    for (era, lifecycle) in lifecycles() {
        let restaurant = format!("Chez {era}");
        let question = format!("How many seats at {restaurant}?");
        let args = json!({"restaurant": restaurant});

        let answers = [accepted(json!({"seats": 3}))];
        let (result, seen) =
            rmcp_call(&url, lifecycle.clone(), "book", args.clone(), answers).await;
        assert_eq!(
            rmcp_text(&result),
            format!("booked 3 at {restaurant}"),
            "{era}"
        );
        assert_eq!(seen, std::slice::from_ref(&question), "{era}");

        // 20 > 8 (the fixture's maximum): asked again with a hint, then booked.
        let answers = [
            accepted(json!({"seats": 20})),
            accepted(json!({"seats": 4})),
        ];
        let (result, seen) =
            rmcp_call(&url, lifecycle.clone(), "book", args.clone(), answers).await;
        assert_eq!(
            rmcp_text(&result),
            format!("booked 4 at {restaurant}"),
            "{era}"
        );
        assert_eq!(seen.len(), 2, "{era}: {seen:?}");
        assert_eq!(seen[0], question, "{era}");
        assert!(
            seen[1].starts_with(&format!("{question}\n\n")) && seen[1].len() > question.len() + 2,
            "{era}: the re-ask carries a hint: {seen:?}"
        );

        let declined = [ElicitResult::new(ElicitationAction::Decline)];
        let (result, seen) = rmcp_call(&url, lifecycle, "book", args, declined).await;
        assert_eq!(rmcp_text(&result), "not booked: decline", "{era}");
        assert_eq!(seen, [question], "{era}");
    }
    upstream.shutdown().await;
}

async fn rmcp_client_both_modes_through_the_bridge_to_server_everything_over_http() {
    let Some(server) = super::upstream::everything_over_http().await else {
        return;
    };
    let (url, upstream) = bridged_front(Http::new(server.url())).await;
    for (era, lifecycle) in lifecycles() {
        let names = rmcp_tool_names(&url, lifecycle.clone()).await;
        assert!(
            names.iter().any(|n| n == "trigger-elicitation-request"),
            "{era}: {names:?}"
        );
        let args = json!({"message": era});
        let (echoed, seen) = rmcp_call(&url, lifecycle.clone(), "echo", args, []).await;
        assert_eq!(rmcp_text(&echoed), format!("Echo: {era}"), "{era}");
        assert!(seen.is_empty(), "{era}: {seen:?}");

        // `name` missing, then given: asked again, then answered.
        let answers = [
            accepted(json!({"email": "not an email"})),
            accepted(json!({"name": "Ada Lovelace", "email": "ada@example.org"})),
        ];
        let (result, seen) = rmcp_call(
            &url,
            lifecycle.clone(),
            "trigger-elicitation-request",
            json!({}),
            answers,
        )
        .await;
        let said = rmcp_text(&result);
        assert!(said.contains("- Name: Ada Lovelace"), "{era}: {said}");
        assert!(said.contains("- Email: ada@example.org"), "{era}: {said}");
        assert_eq!(seen.len(), 2, "{era}: {seen:?}");

        let declined = [ElicitResult::new(ElicitationAction::Decline)];
        let (result, seen) = rmcp_call(
            &url,
            lifecycle,
            "trigger-elicitation-request",
            json!({}),
            declined,
        )
        .await;
        assert!(rmcp_text(&result).contains("declined"), "{era}: {result:?}");
        assert_eq!(seen.len(), 1, "{era}: {seen:?}");
    }
    upstream.shutdown().await;
    server.stop().await;
}

crate::trials! {
    [Upstreams] current_thread rmcp_2025_upstream_is_fronted_as_2026_and_its_plain_tool_runs,
    [Upstreams] current_thread rmcp_2025_elicitation_accepted_through_the_reverse_bridge,
    [Upstreams] current_thread rmcp_2025_answers_outside_the_schema_are_asked_again,
    [Upstreams] current_thread rmcp_2025_elicitation_declined_and_cancelled,
    [Upstreams] current_thread deploy_example_over_http_is_detected_as_2026_and_its_flows_run,
    [Upstreams] current_thread rmcp_client_both_modes_through_the_bridge_to_the_rmcp_2025_upstream,
    [Upstreams] current_thread rmcp_client_both_modes_through_the_bridge_to_server_everything,
    [Upstreams] current_thread rmcp_client_both_modes_through_the_bridge_to_server_filesystem_with_a_gate,
    [Upstreams] current_thread rmcp_client_both_modes_through_the_bridge_to_the_fastmcp_fixture,
    [Upstreams] current_thread rmcp_client_both_modes_through_the_bridge_to_server_everything_over_http,
}
