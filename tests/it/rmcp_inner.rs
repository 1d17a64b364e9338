//! `ElicitationLayer` in front of a real rmcp `StreamableHttpService` (the
//! `deploy` example server), driven in-process with `tower::ServiceExt::oneshot`
//! on the axum router: no sockets. Every case runs with rmcp answering
//! `application/json` (`json::*`) and `text/event-stream` (`sse::*`).

use crate::support::rmcp as rmcp_support;
use crate::support::server;

use axum::http::StatusCode;
use rmcp_support::{Caller, Mcp, Mode, Reply, accept, in_both_modes, tool_params};
use serde_json::{Value, json};
use server::{APPROVAL_KEY, DeployState, NOT_APPROVED};

/// The `deploy` example's MCP endpoint and its state (the deploy counter).
struct Harness {
    mcp: Mcp,
    state: DeployState,
}

/// The outcome of a first `deploy` call: the `input_required` result and its state.
struct Round {
    result: Value,
    state: Option<String>,
}

impl Harness {
    fn new(mode: Mode) -> Self {
        let (mcp, state) = rmcp_support::deploy(mode);
        Self { mcp, state }
    }

    /// POSTs one stateless 2026-07-28 JSON-RPC request with all required headers
    /// and `_meta`, declaring `capabilities` as the client capabilities.
    async fn rpc(&self, method: &str, params: Value, capabilities: Value) -> Reply {
        let caller = Caller::new().capabilities(capabilities);
        self.mcp.send(&caller, method, params).await
    }

    /// `tools/call deploy {"environment": "staging"}` plus `extra` params
    /// (`inputResponses`, `requestState`).
    async fn call_deploy(&self, extra: Value, capabilities: Value) -> Reply {
        let params = tool_params("deploy", json!({ "environment": "staging" }), extra);
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
    /// The text of the first content block of a complete tool result.
    fn result_text(&self) -> &str {
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

/// The `elicitation/create` params asked under `deployment-approval`.
fn approval_request(result: &Value) -> &Value {
    assert_eq!(result["resultType"], "input_required", "{result:#}");
    let request = &result["inputRequests"][APPROVAL_KEY];
    assert_eq!(request["method"], "elicitation/create", "{result:#}");
    &request["params"]
}

/// Asserts `reply` re-asks for approval (fresh sealed state, hint naming `field`).
fn assert_reasked(reply: &Reply, field: &str) {
    let result = reply.result();
    let message = approval_request(result)["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {result:#}"));
    assert!(message.starts_with("Deploy to 'staging'?"), "{message:?}");
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
    assert_eq!(params["message"], "Deploy to 'staging'?");
    assert_eq!(
        params["requestedSchema"],
        json!({
            "type": "object",
            "properties": {
                "approve": { "type": "boolean", "title": "Approve",
                    "description": "Tick to deploy the current build." },
                "note": { "type": "string", "maxLength": 200, "title": "Note",
                    "description": "Optional: why, for the deployment log (at most 200 characters)." }
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
    let text: Value = serde_json::from_str(reply.result_text()).expect("JSON text content");
    assert_eq!(text, expected);
    assert_eq!(h.state.deploys(), 1);
}

async fn non_boolean_approve_is_reasked(mode: Mode) {
    let h = Harness::new(mode);
    let reply = h.answer(accept(json!({ "approve": "yes" }))).await;
    assert_reasked(&reply, "Approve");
    assert_eq!(h.state.deploys(), 0);
}

async fn too_long_note_is_reasked(mode: Mode) {
    let h = Harness::new(mode);
    let note = "n".repeat(300);
    let reply = h
        .answer(accept(json!({ "approve": true, "note": note })))
        .await;
    assert_reasked(&reply, "Note");
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
        assert_eq!(reply.result_text(), NOT_APPROVED, "{answer}");
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
