//! What a person sees, end to end: re-asks that keep what was right and say what was wrong in
//! plain words, URL re-asks that say why, gates that let a typo be corrected, and example tools
//! whose forms render as controls.
//!
//! The `deploy` example (a real rmcp server behind the layer) is driven in-process, as in
//! `rmcp_inner.rs`; the rest runs a fake inner service (`support`). `scripts/ui-check.sh` drives
//! the same flows through the MCP Inspector's web UI.

use crate::support;
use crate::support::rmcp as rmcp_support;
use crate::support::server;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp_support::{Caller, Mode, in_both_modes, tool_params};
use serde_json::{Value, json};
use server::{APPROVAL_KEY, CONFIRM_DELETE_KEY, GITHUB_KEY, NOT_DELETED, NOT_THE_BRANCH};
use support::{Call, FakeMcp, Harness, Transport, keyring, result_message};
use tower_elicitation::{BoxError, ElicitationLayer, Gate, GateCall, GateTarget, UrlFlow};

// ---------------------------------------------------------------------------------------------
// Helpers.

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn answering(state: &str, responses: Value) -> Value {
    json!({"requestState": state, "inputResponses": responses})
}

/// The `elicitation/create` params asked under `key` in an `input_required` result, and its
/// `requestState`.
fn asked<'r>(result: &'r Value, key: &str) -> (&'r Value, String) {
    assert_eq!(result["resultType"], "input_required", "{result:#}");
    let state = result["requestState"].as_str().expect("a requestState");
    (&result["inputRequests"][key]["params"], state.to_owned())
}

/// The `default` of each field of a form question, by key.
fn defaults(params: &Value) -> Value {
    let fields = params["requestedSchema"]["properties"]
        .as_object()
        .expect("a form");
    fields
        .iter()
        .filter_map(|(name, field)| Some((name.clone(), field.get("default")?.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The `description` of a form question's field `key`.
fn description<'p>(params: &'p Value, key: &str) -> &'p str {
    params["requestedSchema"]["properties"][key]["description"]
        .as_str()
        .unwrap_or_default()
}

fn tool_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The `deploy` example.

struct Deploy {
    mcp: rmcp_support::Mcp,
    state: server::DeployState,
}

impl Deploy {
    fn new(mode: Mode) -> Self {
        let (mcp, state) = rmcp_support::deploy(mode);
        Self { mcp, state }
    }

    async fn call(&self, tool: &str, arguments: Value, extra: Value) -> Value {
        let reply = self
            .mcp
            .send(
                &Caller::new(),
                "tools/call",
                tool_params(tool, arguments, extra),
            )
            .await;
        reply.result().clone()
    }

    async fn deploy(&self, extra: Value) -> Value {
        self.call("deploy", json!({"environment": "staging"}), extra)
            .await
    }
}

/// A 300-character note comes back as a re-ask that says what was wrong on the field itself, and
/// names the field in the message, with `approve` pre-filled and the note not; the next answer is checked as
/// the first was, and the handler only ever sees the valid one.
async fn a_reask_keeps_what_was_right_and_says_what_was_wrong(mode: Mode) {
    let deploy = Deploy::new(mode);
    let first = deploy.deploy(json!({})).await;
    let (question, state) = asked(&first, APPROVAL_KEY);
    assert_eq!(question["message"], "Deploy to 'staging'?");
    assert_eq!(defaults(question), json!({}));

    let long = json!({APPROVAL_KEY: accept(json!({"approve": true, "note": "n".repeat(300)}))});
    let reask = deploy.deploy(answering(&state, long)).await;
    let (again, state) = asked(&reask, APPROVAL_KEY);
    // The problem is on the field, before its own description; the message names the field.
    assert_eq!(
        again["message"],
        "Deploy to 'staging'?\n\nPlease correct: Note."
    );
    assert_eq!(
        description(again, "note"),
        "Use at most 200 characters (you entered 300). Optional: why, for the deployment log (at most 200 characters)."
    );
    assert_eq!(
        description(again, "approve"),
        description(question, "approve")
    );
    assert_eq!(defaults(again), json!({"approve": true}));
    // But for the defaults, the note's description and the message, the form as it was asked.
    let mut unfilled = again.clone();
    unfilled["requestedSchema"]["properties"]["approve"]
        .as_object_mut()
        .unwrap()
        .remove("default");
    unfilled["requestedSchema"]["properties"]["note"]["description"] =
        question["requestedSchema"]["properties"]["note"]["description"].clone();
    unfilled["message"] = question["message"].clone();
    assert_eq!(&unfilled, question);

    // Validation is unchanged: a wrong type is still refused, and every wrong field is named.
    let wrong = json!({APPROVAL_KEY: accept(json!({"approve": "yes", "note": 5}))});
    let reask = deploy.deploy(answering(&state, wrong)).await;
    let (again, state) = asked(&reask, APPROVAL_KEY);
    assert_eq!(
        again["message"],
        "Deploy to 'staging'?\n\nPlease correct: Approve, Note."
    );
    assert_eq!(
        description(again, "approve"),
        "Answer yes or no. Tick to deploy the current build."
    );
    assert_eq!(
        description(again, "note"),
        "Enter text. Optional: why, for the deployment log (at most 200 characters)."
    );
    assert_eq!(deploy.state.deploys(), 0);

    let right = json!({APPROVAL_KEY: accept(json!({"approve": true, "note": "ship it"}))});
    let done = deploy.deploy(answering(&state, right)).await;
    assert_eq!(
        done["structuredContent"],
        json!({"environment": "staging", "deployed": true})
    );
    assert_eq!(deploy.state.deploys(), 1);
}

/// A typed name that is not the branch's asks again with the gate's retry hint on the form's one
/// field, nothing pre-filled; the right name then deletes it; a decline after a typo still refuses.
async fn a_typo_in_the_branch_name_can_be_corrected(mode: Mode) {
    let deploy = Deploy::new(mode);
    let delete = |extra| deploy.call("delete_branch", json!({"name": "dev"}), extra);
    let first = delete(json!({})).await;
    let (question, state) = asked(&first, CONFIRM_DELETE_KEY);
    assert_eq!(
        question["message"],
        "Delete the branch 'dev'? Type its name to confirm."
    );

    let typo = json!({CONFIRM_DELETE_KEY: accept(json!({"confirm": "main"}))});
    let reask = delete(answering(&state, typo.clone())).await;
    let (again, retry) = asked(&reask, CONFIRM_DELETE_KEY);
    assert_eq!(
        again["message"],
        "Delete the branch 'dev'? Type its name to confirm.\n\nPlease correct: Branch name."
    );
    assert_eq!(
        description(again, "confirm"),
        format!(
            "{NOT_THE_BRANCH} Type the name of the branch to delete, exactly as it is written."
        )
    );
    assert_eq!(
        defaults(again),
        json!({}),
        "a refused answer is not pre-filled"
    );
    // But for that description, the gate's own form.
    let mut undescribed = again["requestedSchema"].clone();
    undescribed["properties"]["confirm"]["description"] =
        question["requestedSchema"]["properties"]["confirm"]["description"].clone();
    assert_eq!(undescribed, question["requestedSchema"]);
    assert_eq!(deploy.state.branches(), ["main", "dev", "feature-x"]);

    // Declining now still refuses.
    let declined = delete(answering(
        &retry,
        json!({CONFIRM_DELETE_KEY: {"action": "decline"}}),
    ));
    assert_eq!(tool_text(&declined.await), NOT_DELETED);

    let right = json!({CONFIRM_DELETE_KEY: accept(json!({"confirm": "dev"}))});
    let done = delete(answering(&retry, right)).await;
    assert_eq!(tool_text(&done), "Deleted branch dev");
    assert_eq!(deploy.state.branches(), ["main", "feature-x"]);
}

/// Accepting `connect_github` before the flow is done asks again with the same URL and a line
/// saying so.
async fn an_unfinished_url_flow_says_why_it_is_asked_again(mode: Mode) {
    let deploy = Deploy::new(mode);
    let connect = |extra| deploy.call("connect_github", json!({"account": "octocat"}), extra);
    let first = connect(json!({})).await;
    let (question, state) = asked(&first, GITHUB_KEY);
    assert_eq!(
        question["message"],
        "Authorize GitHub access for 'octocat'."
    );

    let early = json!({GITHUB_KEY: {"action": "accept"}});
    let reask = connect(answering(&state, early)).await;
    let (again, _) = asked(&reask, GITHUB_KEY);
    assert_eq!(
        again["message"],
        "Authorize GitHub access for 'octocat'.\n\nNot finished yet: complete it in the browser, then continue."
    );
    assert_eq!(again["url"], question["url"]);
    assert_eq!(again["mode"], "url");
    assert_eq!(deploy.state.connections(), 0);
}

/// Every example tool's `inputSchema` is plain enough to render as controls: no `$ref`, no
/// `oneOf`/`anyOf`; `deploy`'s `environment` is an inline `enum` of strings.
async fn the_example_tools_render_as_controls(mode: Mode) {
    let deploy = Deploy::new(mode);
    let reply = deploy
        .mcp
        .send(&Caller::new(), "tools/list", json!({}))
        .await;
    let tools = reply.result()["tools"].as_array().expect("tools").clone();
    let names: HashSet<_> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        HashSet::from(["deploy", "list_branches", "delete_branch", "connect_github"])
    );
    for tool in &tools {
        let schema = tool["inputSchema"].to_string();
        for keyword in ["$ref", "$defs", "oneOf", "anyOf", "allOf"] {
            assert!(!schema.contains(keyword), "{}: {schema}", tool["name"]);
        }
    }
    let deploy_tool = tools.iter().find(|t| t["name"] == "deploy").unwrap();
    let environment = &deploy_tool["inputSchema"]["properties"]["environment"];
    assert_eq!(environment["type"], "string");
    assert_eq!(environment["enum"], json!(["staging", "production"]));
    assert_eq!(
        deploy_tool["inputSchema"]["required"],
        json!(["environment"])
    );

    // The approval form says what each field is for.
    let first = deploy.deploy(json!({})).await;
    let (question, _) = asked(&first, APPROVAL_KEY);
    for field in ["approve", "note"] {
        let description = &question["requestedSchema"]["properties"][field]["description"];
        assert!(
            description.as_str().is_some_and(|d| !d.is_empty()),
            "{field}"
        );
    }
}

in_both_modes!(
    a_reask_keeps_what_was_right_and_says_what_was_wrong,
    a_typo_in_the_branch_name_can_be_corrected,
    an_unfinished_url_flow_says_why_it_is_asked_again,
    the_example_tools_render_as_controls,
);

// ---------------------------------------------------------------------------------------------
// Gates, with a fake inner service.

fn done() -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": "Done"}]})
}

fn confirm_gate() -> Gate {
    Gate::form(
        "confirm",
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "title": "Name"}},
            "required": ["name"]
        }),
    )
    .expect("a form")
    .message(|call| {
        format!(
            "Type '{}' to go on.",
            call.argument_str("name").unwrap_or("")
        )
    })
    .require(|content, call| content.get("name") == call.argument("name"))
    .refusal("Not done.")
}

fn gated(gate: Gate, layer: ElicitationLayer) -> Harness {
    let layer = layer
        .gate(GateTarget::tool("drop"), gate)
        .expect("one gate");
    Harness::new(layer, FakeMcp::answering(Transport::Json, |_| done()))
}

fn drop_call() -> Call {
    Call::tool("drop").args(json!({"name": "users"}))
}

/// Answers the gate's question in `reply` with `name`, as call `id`.
async fn type_name(h: &Harness, reply: &support::Reply, id: u32, name: &str) -> support::Reply {
    let answers = json!({"confirm": accept(json!({"name": name}))});
    h.call(&drop_call().id(id).state(&reply.state()).answers(answers))
        .await
}

fn message_of(reply: &support::Reply, key: &str) -> String {
    reply.json()["result"]["inputRequests"][key]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no question {key} in {:?}", reply.json()))
        .to_owned()
}

fn tool_error(reply: &support::Reply) -> String {
    let result = &reply.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    tool_text(result).to_owned()
}

/// Without `retry_hint`, a failed predicate ends the call, as before.
#[tokio::test]
async fn without_a_retry_hint_a_failed_predicate_refuses() {
    let h = gated(confirm_gate(), support::layer());
    let asked = h.call(&drop_call()).await;
    let reply = type_name(&h, &asked, 2, "user").await;
    assert_eq!(tool_error(&reply), "Not done.");
    assert_eq!(h.fake.calls(), 0);
}

/// With it, the gate asks again, as many times as the round cap allows, the hint on its form's
/// one field; then it refuses.
#[tokio::test]
async fn a_retry_hint_asks_again_within_the_round_cap() {
    let gate = confirm_gate().retry_hint("That is not the name.");
    let h = gated(gate, ElicitationLayer::new(keyring()).max_rounds(3));
    let mut reply = h.call(&drop_call()).await;
    assert_eq!(message_of(&reply, "confirm"), "Type 'users' to go on.");
    for id in 2..=3 {
        reply = type_name(&h, &reply, id, "user").await;
        assert_eq!(
            message_of(&reply, "confirm"),
            "Type 'users' to go on.\n\nPlease correct: Name.",
            "round {id}"
        );
        let params = &reply.json()["result"]["inputRequests"]["confirm"]["params"];
        assert_eq!(
            description(params, "name"),
            "That is not the name.",
            "round {id}"
        );
    }
    // Rounds 1 to 3 were asked: the next wrong answer is refused, with the gate's refusal.
    let refused = type_name(&h, &reply, 4, "user").await;
    assert_eq!(tool_error(&refused), "Not done.");
    assert_eq!(h.fake.calls(), 0);

    // The right name within the cap goes through.
    let asked = h.call(&drop_call().id(5)).await;
    let again = type_name(&h, &asked, 6, "user").await;
    let reply = type_name(&h, &again, 7, "users").await;
    assert_eq!(reply.json(), result_message(7, done()));
    assert_eq!(
        h.fake.last().json()["params"]["inputResponses"],
        json!({"confirm": accept(json!({"name": "users"}))})
    );
}

/// Decline and cancel refuse at once, retry hint or not.
#[tokio::test]
async fn a_retry_hint_does_not_retry_a_decline_or_a_cancel() {
    let gate = confirm_gate().retry_hint("That is not the name.");
    let h = gated(gate, support::layer());
    for action in ["decline", "cancel"] {
        let asked = h.call(&drop_call()).await;
        let again = type_name(&h, &asked, 2, "user").await;
        let answers = json!({"confirm": {"action": action}});
        let reply = h
            .call(&drop_call().id(3).state(&again.state()).answers(answers))
            .await;
        assert_eq!(tool_error(&reply), "Not done.", "{action}");
    }
    assert_eq!(h.fake.calls(), 0);
}

/// An invalid answer to a gate's form is asked again with what was right pre-filled; an answer
/// the predicate refused is asked again with nothing pre-filled.
#[tokio::test]
async fn a_gate_form_is_prefilled_but_a_refused_answer_is_not() {
    let gate = Gate::form(
        "confirm",
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name"},
                "reason": {"type": "string", "title": "Reason", "minLength": 3}
            },
            "required": ["name", "reason"]
        }),
    )
    .expect("a form")
    .require(|content, call| content.get("name") == call.argument("name"))
    .retry_hint("That is not the name.");
    let h = gated(gate, support::layer());
    let asked = h.call(&drop_call()).await;
    let answers = json!({"confirm": accept(json!({"name": "users", "reason": "no"}))});
    let invalid = h
        .call(&drop_call().id(2).state(&asked.state()).answers(answers))
        .await;
    let question = &invalid.json()["result"]["inputRequests"]["confirm"]["params"];
    assert_eq!(
        question["message"],
        "Allow drop?\n\nPlease correct: Reason."
    );
    assert_eq!(
        description(question, "reason"),
        "Use at least 3 characters (you entered 2)."
    );
    assert_eq!(defaults(question), json!({"name": "users"}));

    let answers = json!({"confirm": accept(json!({"name": "user", "reason": "cleanup"}))});
    let refused = h
        .call(&drop_call().id(3).state(&invalid.state()).answers(answers))
        .await;
    let question = &refused.json()["result"]["inputRequests"]["confirm"]["params"];
    assert_eq!(question["message"], "Allow drop?\n\nThat is not the name.");
    // The gate's own question: nothing of this answer, nor of an earlier one, pre-filled.
    assert_eq!(defaults(question), json!({}));
    assert_eq!(h.fake.calls(), 0);
}

/// A gate's accepted answer is carried untouched while the inner service's own question is asked
/// again and pre-filled.
#[tokio::test]
async fn gate_answers_are_untouched_by_a_prefilled_reask() {
    let layer = support::layer()
        .gate(GateTarget::tool("drop"), confirm_gate())
        .expect("one gate");
    let fake = FakeMcp::answering(Transport::Json, |params| {
        if params["inputResponses"].get("details").is_some() {
            done()
        } else {
            json!({"resultType": "input_required", "inputRequests": {"details": {
                "method": "elicitation/create", "params": {"mode": "form", "message": "Details?",
                "requestedSchema": {"type": "object", "properties": {
                    "when": {"type": "string", "format": "date", "title": "When"},
                    "count": {"type": "integer", "title": "How many", "maximum": 9}},
                    "required": ["when", "count"]}}}}})
        }
    });
    let h = Harness::new(layer, fake);
    let asked = h.call(&drop_call()).await;
    let gate_answer = accept(json!({"name": "users"}));
    let inner_asks = h
        .call(
            &drop_call()
                .id(2)
                .state(&asked.state())
                .answers(json!({"confirm": gate_answer})),
        )
        .await;
    let answers = json!({"details": accept(json!({"when": "tomorrow", "count": 3.0}))});
    let reask = h
        .call(
            &drop_call()
                .id(3)
                .state(&inner_asks.state())
                .answers(answers),
        )
        .await;
    let question = &reask.json()["result"]["inputRequests"]["details"]["params"];
    assert_eq!(question["message"], "Details?\n\nPlease correct: When.");
    assert_eq!(
        description(question, "when"),
        "Enter a date as year-month-day, such as 2026-07-28."
    );
    assert_eq!(defaults(question), json!({"count": 3}));
    assert!(
        reask.json()["result"]["inputRequests"]
            .get("confirm")
            .is_none(),
        "the gate is not asked again"
    );

    let answers = json!({"details": accept(json!({"when": "2026-07-28", "count": 3}))});
    let reply = h
        .call(&drop_call().id(4).state(&reask.state()).answers(answers))
        .await;
    assert_eq!(reply.json(), result_message(4, done()));
    assert_eq!(
        h.fake.last().json()["params"]["inputResponses"],
        json!({"confirm": gate_answer,
            "details": accept(json!({"when": "2026-07-28", "count": 3}))})
    );
}

/// A flow that is never complete.
#[derive(Clone, Default)]
struct Pending {
    asked: Arc<Mutex<usize>>,
}

impl UrlFlow for Pending {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, BoxError> {
        *self.asked.lock().unwrap() += 1;
        Ok(format!("https://login.example.com/{}", call.handle()))
    }

    async fn is_complete(&self, _: &GateCall<'_>) -> bool {
        false
    }
}

/// A URL gate's "not finished" line can be configured.
#[tokio::test]
async fn a_url_gate_says_its_own_line_when_the_flow_is_not_finished() {
    for (gate, line) in [
        (
            Gate::url("login", Pending::default()).unwrap(),
            "Not finished yet: complete it in the browser, then continue.",
        ),
        (
            Gate::url("login", Pending::default())
                .unwrap()
                .incomplete_hint("Finish signing in first."),
            "Finish signing in first.",
        ),
    ] {
        let h = gated(gate.message(|_| "Sign in.".to_owned()), support::layer());
        let asked = h.call(&drop_call()).await;
        let url = asked.json()["result"]["inputRequests"]["login"]["params"]["url"].clone();
        let mut reply = asked;
        // Asked again, each time with the one line (not one more per round).
        for id in 2..=3 {
            reply = h
                .call(
                    &drop_call()
                        .id(id)
                        .state(&reply.state())
                        .answers(json!({"login": {"action": "accept"}})),
                )
                .await;
            assert_eq!(message_of(&reply, "login"), format!("Sign in.\n\n{line}"));
            assert_eq!(
                reply.json()["result"]["inputRequests"]["login"]["params"]["url"],
                url
            );
        }
        assert_eq!(h.fake.calls(), 0);
    }
}
