//! `ElicitationLayer` in front of a real rmcp `StreamableHttpService` (the
//! `deploy` example server), driven in-process with `tower::ServiceExt::oneshot`
//! on the axum router: no sockets. Every case runs with rmcp answering
//! `application/json` (`json::*`) and `text/event-stream` (`sse::*`).

// Shared with the `deploy` example; this file uses only part of it.
#[allow(dead_code)]
#[path = "../examples/deploy/server.rs"]
mod server;

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    http::{Request, Response, StatusCode, header},
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use server::{APPROVAL_KEY, DeployState, NOT_APPROVED};
use tower::ServiceExt;
use tower_elicitation::{ElicitationLayer, Keyring};

const PROTOCOL_VERSION: &str = "2026-07-28";
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Mode {
    Json,
    Sse,
}

/// One server (router + deploy counter) and a JSON-RPC id counter.
struct Harness {
    router: Router,
    state: DeployState,
    next_id: AtomicU64,
}

/// An HTTP status and the JSON-RPC response message that came with it.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    content_type: String,
    message: Value,
}

/// The outcome of a first `deploy` call: the `input_required` result and its state.
struct Round {
    result: Value,
    state: Option<String>,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        let keyring = Keyring::new("test", [7u8; 32]).expect("valid test key");
        let state = DeployState::new();
        let router = server::router_with(
            ElicitationLayer::new(keyring),
            state.clone(),
            matches!(mode, Mode::Json),
        )
        .expect("the example's gates are valid");
        Self {
            router,
            state,
            next_id: AtomicU64::new(1),
        }
    }

    /// POSTs one stateless 2026-07-28 JSON-RPC request with all required headers
    /// and `_meta`, declaring `capabilities` as the client capabilities.
    async fn rpc(&self, method: &str, mut params: Value, capabilities: Value) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientInfo": { "name": "rmcp-inner-test", "version": "0.0.0" },
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let mut request = Request::post(server::MCP_PATH)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .header("Mcp-Method", method);
        if let Some(name) = params.get("name").and_then(Value::as_str) {
            request = request.header("Mcp-Name", name);
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let request = request
            .body(Body::from(body.to_string()))
            .expect("valid request");
        let exchange = async {
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .expect("infallible");
            let status = response.status();
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let message = read_message(response, id).await;
            Reply {
                status,
                content_type,
                message,
            }
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .expect("no response within the timeout")
    }

    /// `tools/call deploy {"environment": "staging"}` plus `extra` params
    /// (`inputResponses`, `requestState`).
    async fn call_deploy(&self, extra: Value, capabilities: Value) -> Reply {
        let mut params = json!({ "name": "deploy", "arguments": { "environment": "staging" } });
        if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
            params.extend(extra);
        }
        self.rpc("tools/call", params, capabilities).await
    }

    /// The first round: must be `input_required`.
    async fn first_round(&self) -> Round {
        let reply = self.call_deploy(json!({}), elicitation()).await;
        let result = reply.result().clone();
        assert_eq!(result["resultType"], "input_required", "{result:#}");
        let state = result["requestState"].as_str().map(str::to_owned);
        Round { result, state }
    }

    /// A retry answering `deployment-approval` with `answer` and echoing `state`.
    async fn retry(&self, state: Option<&str>, answer: Value) -> Reply {
        let mut extra = json!({ "inputResponses": { APPROVAL_KEY: answer } });
        if let Some(state) = state {
            extra["requestState"] = json!(state);
        }
        self.call_deploy(extra, elicitation()).await
    }

    /// A first round, then a retry with `answer` and the echoed state.
    async fn answer(&self, answer: Value) -> Reply {
        let round = self.first_round().await;
        self.retry(round.state.as_deref(), answer).await
    }
}

impl Reply {
    fn result(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{:#}", self.message);
        self.message
            .get("result")
            .unwrap_or_else(|| panic!("expected a result, got {:#}", self.message))
    }

    fn error(&self) -> &Value {
        self.message
            .get("error")
            .unwrap_or_else(|| panic!("expected a JSON-RPC error, got {:#}", self.message))
    }

    /// The text of the first content block of a complete tool result.
    fn tool_text(&self) -> &str {
        let result = self.result();
        assert_ne!(result["resultType"], "input_required", "{result:#}");
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text content in {result:#}"))
    }
}

fn elicitation() -> Value {
    json!({ "elicitation": {} })
}

fn accept(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

/// The `elicitation/create` params asked under `deployment-approval`.
fn approval_request(result: &Value) -> &Value {
    assert_eq!(result["resultType"], "input_required", "{result:#}");
    let request = &result["inputRequests"][APPROVAL_KEY];
    assert_eq!(request["method"], "elicitation/create", "{result:#}");
    &request["params"]
}

/// Reads the JSON-RPC response for `id` from a JSON body or an SSE stream.
async fn read_message(response: Response<Body>, id: u64) -> Value {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("body frame");
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data).expect("UTF-8 body"));
        }
        // An SSE response stream may stay open after the response event.
        if is_sse && let Some(message) = sse_response(&text, id, false) {
            return message;
        }
    }
    if is_sse {
        sse_response(&text, id, true)
            .unwrap_or_else(|| panic!("no response for id {id} in SSE stream:\n{text}"))
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not a JSON body: {text:?}"))
    }
}

/// The JSON-RPC response with `id` among the SSE events in `text`; the last
/// event is used only once the stream has `ended`.
fn sse_response(text: &str, id: u64, ended: bool) -> Option<Value> {
    let text = text.replace("\r\n", "\n");
    let mut events: Vec<&str> = text.split("\n\n").collect();
    if !ended {
        events.pop();
    }
    events.into_iter().find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| data.strip_prefix(' ').unwrap_or(data))
            .collect();
        let message: Value = serde_json::from_str(&data.join("\n")).ok()?;
        let is_response = message.get("result").is_some() || message.get("error").is_some();
        (is_response && message["id"] == json!(id)).then_some(message)
    })
}

/// Asserts `reply` re-asks for approval (fresh sealed state, hint naming `field`).
fn assert_reasked(reply: &Reply, field: &str) {
    let result = reply.result();
    let message = approval_request(result)["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {result:#}"));
    assert!(message.starts_with("Deploy to staging?"), "{message:?}");
    assert!(
        message.contains(field),
        "hint should name `{field}`: {message:?}"
    );
    assert!(
        result["requestState"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{result:#}"
    );
}

async fn first_call_asks_for_approval(mode: Mode) {
    let h = Harness::new(mode);
    let round = h.first_round().await;
    let params = approval_request(&round.result);
    assert_eq!(params["message"], "Deploy to staging?");
    assert_eq!(
        params["requestedSchema"],
        json!({
            "type": "object",
            "properties": {
                "approve": { "type": "boolean", "title": "Approve" },
                "note": { "type": "string", "maxLength": 200, "title": "Note" }
            },
            "required": ["approve"]
        })
    );
    assert!(
        round.state.as_deref().is_some_and(|s| !s.is_empty()),
        "the layer must add a sealed requestState: {:#}",
        round.result
    );
    assert_eq!(h.state.deploys(), 0);
}

async fn approved_answer_deploys(mode: Mode) {
    let h = Harness::new(mode);
    let reply = h.answer(accept(json!({ "approve": true }))).await;
    let expected = json!({ "environment": "staging", "deployed": true });
    let result = reply.result();
    assert_eq!(result["resultType"], "complete", "{result:#}");
    assert_ne!(result["isError"], json!(true), "{result:#}");
    assert_eq!(result["structuredContent"], expected);
    let text: Value = serde_json::from_str(reply.tool_text()).expect("JSON text content");
    assert_eq!(text, expected);
    assert_eq!(h.state.deploys(), 1);
}

async fn non_boolean_approve_is_reasked(mode: Mode) {
    let h = Harness::new(mode);
    let reply = h.answer(accept(json!({ "approve": "yes" }))).await;
    assert_reasked(&reply, "approve");
    assert_eq!(h.state.deploys(), 0);
}

async fn too_long_note_is_reasked(mode: Mode) {
    let h = Harness::new(mode);
    let note = "n".repeat(300);
    let reply = h
        .answer(accept(json!({ "approve": true, "note": note })))
        .await;
    assert_reasked(&reply, "note");
    assert_eq!(h.state.deploys(), 0);
}

async fn not_approved_answers_are_tool_errors(mode: Mode) {
    let h = Harness::new(mode);
    for answer in [
        json!({ "action": "decline" }),
        json!({ "action": "cancel" }),
        accept(json!({ "approve": false })),
    ] {
        let reply = h.answer(answer.clone()).await;
        assert_eq!(
            reply.result()["isError"],
            json!(true),
            "{answer}: {reply:?}"
        );
        assert_eq!(reply.tool_text(), NOT_APPROVED, "{answer}");
    }
    assert_eq!(h.state.deploys(), 0);
}

async fn tampered_request_state_is_rejected(mode: Mode) {
    let h = Harness::new(mode);
    let tamperings: [fn(&str) -> String; 2] = [|s| format!("{s}x"), flip_middle_char];
    for tamper in tamperings {
        let round = h.first_round().await;
        let state = round
            .state
            .expect("the layer must add a sealed requestState");
        let reply = h
            .retry(Some(&tamper(&state)), accept(json!({ "approve": true })))
            .await;
        let error = reply.error();
        assert_eq!(error["code"], -32602, "{error:#}");
        assert_eq!(error["message"], "Invalid or expired requestState");
        assert_eq!(error["data"]["reason"], "invalid_request_state");
    }
    assert_eq!(h.state.deploys(), 0);
}

fn flip_middle_char(state: &str) -> String {
    let mut chars: Vec<char> = state.chars().collect();
    let middle = chars.len() / 2;
    chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

async fn missing_elicitation_capability_is_refused(mode: Mode) {
    let h = Harness::new(mode);
    let reply = h.call_deploy(json!({}), json!({})).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.message);
    let error = reply.error();
    assert_eq!(error["code"], -32021, "{error:#}");
    assert!(
        error["data"]["requiredCapabilities"]["elicitation"].is_object(),
        "{error:#}"
    );
    assert_eq!(h.state.deploys(), 0);
}

async fn tools_list_passes_through(mode: Mode) {
    let h = Harness::new(mode);
    let reply = h.rpc("tools/list", json!({}), elicitation()).await;
    let expected_type = match mode {
        Mode::Json => "application/json",
        Mode::Sse => "text/event-stream",
    };
    assert!(
        reply.content_type.starts_with(expected_type),
        "{mode:?}: {}",
        reply.content_type
    );
    let result = reply.result();
    assert_ne!(result["resultType"], "input_required", "{result:#}");
    let tools = result["tools"].as_array().expect("tools array");
    assert!(
        tools.iter().any(|tool| tool["name"] == "deploy"),
        "{result:#}"
    );
}

/// Generates `json::<case>` and `sse::<case>` tests for each case fn.
macro_rules! in_both_modes {
    ($($case:ident),* $(,)?) => {
        mod json {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::Mode::Json).await;
            })*
        }
        mod sse {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::Mode::Sse).await;
            })*
        }
    };
}

in_both_modes!(
    first_call_asks_for_approval,
    approved_answer_deploys,
    non_boolean_approve_is_reasked,
    too_long_note_is_reasked,
    not_approved_answers_are_tool_errors,
    tampered_request_state_is_rejected,
    missing_elicitation_capability_is_refused,
    tools_list_passes_through,
);
