//! `ElicitationLayer` end to end, around a scriptable fake MCP server (`tower::service_fn`):
//! every case checks what the client gets back and what the inner service was given.

use crate::support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{Json, Router, routing::post};
use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tower::ServiceBuilder;
use tower_elicitation::{
    AnswersWithoutState, Elicitation, ElicitationLayer, Gate, GateTarget, Keyring, VerifiedCaller,
};

use support::{
    Body, Call, FakeMcp, Harness, Reply, TIMEOUT, Transport, chunked, encode, error_message,
    event_data, event_fields, full, layer, progress_event, raw_response, result_message, send,
    sse_event, sse_response, take_state,
};

// ---------------------------------------------------------------------------------------------
// Questions, answers and results.

fn form(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required}}})
}

/// The deploy approval: a required boolean and an optional note of at most 200 characters.
fn approval() -> Value {
    form(
        "Deploy to staging?",
        json!({"approve": {"type": "boolean"}, "note": {"type": "string", "maxLength": 200}}),
        &["approve"],
    )
}

fn name_question() -> Value {
    form(
        "Who are you?",
        json!({"name": {"type": "string", "minLength": 1}}),
        &["name"],
    )
}

fn url_question() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in",
        "url": "https://example.com/login"}})
}

fn sampling_question() -> Value {
    json!({"method": "sampling/createMessage", "params": {"maxTokens": 50,
        "messages": [{"role": "user", "content": {"type": "text", "text": "Summarise"}}]}})
}

fn sampling_with_tools() -> Value {
    let mut question = sampling_question();
    question["params"]["tools"] = json!([{"name": "search", "inputSchema": {"type": "object"}}]);
    question
}

fn roots_question() -> Value {
    json!({"method": "roots/list", "params": {}})
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

fn approve() -> Value {
    json!({"approval": accept(json!({"approve": true}))})
}

fn input_required(requests: Value, state: Option<&str>) -> Value {
    let mut result = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(state) = state {
        result["requestState"] = json!(state);
    }
    result
}

fn done() -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": "Deployed"}]})
}

/// A complete result showing what the inner service was given.
fn echo(params: &Value) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": "Deployed"}],
        "structuredContent": {"inputResponses": params["inputResponses"],
            "requestState": params["requestState"]}})
}

/// A server that asks `questions` (with its own `state`) until it is given an answer to each of
/// them, then completes.
fn asking(transport: Transport, questions: Value, state: Option<&'static str>) -> FakeMcp {
    FakeMcp::answering(transport, move |params| {
        let answered = |key: &String| params["inputResponses"].get(key).is_some();
        if questions.as_object().unwrap().keys().all(answered) {
            done()
        } else {
            input_required(questions.clone(), state)
        }
    })
}

/// A server that asks for `approval` with state `inner-1`, and echoes what it gets once approved.
fn approval_server(params: &Value) -> Value {
    match params["inputResponses"]["approval"]["content"]["approve"].as_bool() {
        Some(true) => echo(params),
        _ => input_required(json!({"approval": approval()}), Some("inner-1")),
    }
}

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"env": "staging"}))
}

/// Round 1 of `call`: the sealed `requestState` the client gets.
async fn first_round(h: &Harness, call: &Call) -> String {
    let reply = h.call(call).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let token = reply.state();
    assert!(token.starts_with("v1.k1."), "{token}");
    token
}

/// The frozen answer to every bad `requestState`; the inner service is not called.
async fn assert_refused(h: &Harness, call: &Call) {
    let calls = h.fake.calls();
    let reply = h.call(call).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json(),
        error_message(
            call.request_id(),
            -32602,
            "Invalid or expired requestState",
            Some(json!({"reason": "invalid_request_state"}))
        ),
        "for {}",
        call.body()
    );
    assert_eq!(h.fake.calls(), calls, "the inner service was called");
}

// ---------------------------------------------------------------------------------------------
// 1–3. Sealing, unsealing, rounds.

#[tokio::test]
async fn first_round_input_required_is_sealed() {
    for id in [json!(1), json!("req-1")] {
        let h = Harness::new(
            layer(),
            asking(
                Transport::Json,
                json!({"approval": approval()}),
                Some("inner-1"),
            ),
        );
        let call = deploy().id(id.clone());
        let reply = h.call(&call).await;

        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.content_type(), "application/json");
        let mut message = reply.json();
        let token = take_state(&mut message);
        assert!(token.starts_with("v1.k1."), "{token}");
        assert_ne!(token, "inner-1");
        assert_eq!(
            message,
            result_message(id, input_required(json!({"approval": approval()}), None))
        );
        // A first call goes through byte for byte.
        let received = h.fake.received();
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].bytes, encode(&call.body()));
    }
}

#[tokio::test]
async fn valid_answer_reaches_the_inner_service_cleaned_with_its_own_state() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let token = first_round(&h, &deploy()).await;

    let answers = json!({
        "approval": accept(json!({"approve": true, "note": "ship it", "colour": "red"})),
        "unasked": accept(json!({"anything": 1}))
    });
    let reply = h.call(&deploy().id(2).state(&token).answers(answers)).await;

    let cleaned = json!({"approval": accept(json!({"approve": true, "note": "ship it"}))});
    let expected_params = deploy().id(2).state("inner-1").answers(cleaned).body();
    let received = h.fake.last();
    assert_eq!(received.json(), expected_params);
    assert_eq!(
        received.headers[header::CONTENT_LENGTH],
        received.bytes.len().to_string()
    );
    // The complete result comes back exactly as the inner service wrote it.
    let result = echo(&expected_params["params"]);
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.bytes, encode(&result_message(2, result)));
}

#[tokio::test]
async fn inner_service_without_state_gets_no_request_state() {
    let h = Harness::new(
        layer(),
        asking(Transport::Json, json!({"approval": approval()}), None),
    );
    let token = first_round(&h, &deploy()).await;
    let reply = h
        .call(&deploy().id(2).state(&token).answers(approve()))
        .await;

    assert_eq!(reply.json(), result_message(2, done()));
    assert_eq!(
        h.fake.last().json(),
        deploy().id(2).answers(approve()).body()
    );
}

#[tokio::test]
async fn load_shedding_state_only_round_trips() {
    let fake = FakeMcp::answering(Transport::Json, |params| {
        if params["requestState"] == "later" {
            done()
        } else {
            json!({"resultType": "input_required", "requestState": "later"})
        }
    });
    let h = Harness::new(layer(), fake);
    let mut first = h.call(&deploy()).await.json();
    let token = take_state(&mut first);
    assert_eq!(
        first,
        result_message(1, json!({"resultType": "input_required"}))
    );

    let stray = json!({"stray": accept(json!({}))});
    let reply = h.call(&deploy().id(2).state(&token).answers(stray)).await;
    assert_eq!(reply.json(), result_message(2, done()));
    assert_eq!(h.fake.last().json(), deploy().id(2).state("later").body());
}

#[tokio::test]
async fn multi_round_inner_sees_only_the_answers_to_its_current_questions() {
    let step1 = || form("Step 1?", json!({"a": {"type": "string"}}), &["a"]);
    let step2 = || form("Step 2?", json!({"b": {"type": "integer"}}), &["b"]);
    let fake = FakeMcp::answering(Transport::Json, move |params| {
        let answers = &params["inputResponses"];
        if answers.get("step2").is_some() && params["requestState"] == "s2" {
            done()
        } else if answers.get("step1").is_some() {
            input_required(json!({"step2": step2()}), Some("s2"))
        } else {
            input_required(json!({"step1": step1()}), None)
        }
    });
    let h = Harness::new(layer(), fake);
    let step1_answer = json!({"step1": accept(json!({"a": "x"}))});
    let step2_answer = json!({"step2": accept(json!({"b": 2}))});

    let token1 = first_round(&h, &deploy()).await;

    let mut second = h
        .call(&deploy().id(2).state(&token1).answers(step1_answer.clone()))
        .await
        .json();
    let token2 = take_state(&mut second);
    assert_eq!(
        second,
        result_message(2, input_required(json!({"step2": step2()}), None))
    );
    assert!(token2.starts_with("v1.k1."), "{token2}");
    assert_ne!(token1, token2);
    assert_eq!(
        h.fake.last().json(),
        deploy().id(2).answers(step1_answer).body()
    );

    // The client resends its round-1 answer too: the inner service only sees step 2.
    let both = json!({"step1": accept(json!({"a": "x"})), "step2": accept(json!({"b": 2}))});
    let third = h.call(&deploy().id(3).state(&token2).answers(both)).await;
    assert_eq!(third.json(), result_message(3, done()));
    assert_eq!(
        h.fake.last().json(),
        deploy().id(3).state("s2").answers(step2_answer).body()
    );
    assert_eq!(h.fake.calls(), 3);
}

// ---------------------------------------------------------------------------------------------
// 4–6. Answers: several kinds, invalid, missing, declined.

#[tokio::test]
async fn every_kind_of_answer_in_one_round_is_forwarded_as_given() {
    let questions = json!({
        "approval": approval(),
        "who": name_question(),
        "login": url_question(),
        "llm": sampling_question(),
        "roots": roots_question(),
    });
    let h = Harness::new(layer(), asking(Transport::Json, questions, Some("st")));
    let token = first_round(&h, &deploy()).await;

    let answers = json!({
        "approval": accept(json!({"approve": false, "note": "not today"})),
        "who": accept(json!({"name": "octocat"})),
        "login": {"action": "accept"},
        "llm": {"role": "assistant", "content": {"type": "text", "text": "A summary"},
            "model": "m-1", "stopReason": "endTurn"},
        "roots": {"roots": [{"uri": "file:///repo", "name": "repo"}]},
    });
    let reply = h
        .call(&deploy().id(2).state(&token).answers(answers.clone()))
        .await;

    assert_eq!(reply.json(), result_message(2, done()));
    assert_eq!(
        h.fake.last().json(),
        deploy().id(2).state("st").answers(answers).body()
    );
}

#[tokio::test]
async fn invalid_content_is_asked_again_for_that_key_only() {
    let long_note = "n".repeat(300);
    let cases = [
        (
            json!({"approve": "yes"}),
            "approve",
            "Answer yes or no.",
            json!({"approve": true}),
        ),
        (
            json!({"approve": true, "note": long_note}),
            "note",
            "Use at most 200 characters (you entered 300).",
            json!({"approve": true, "note": "short"}),
        ),
    ];
    for (invalid, field, hint, valid) in cases {
        let questions = json!({"approval": approval(), "who": name_question()});
        let h = Harness::new(layer(), asking(Transport::Json, questions, Some("inner-1")));
        let token = first_round(&h, &deploy()).await;
        let who = accept(json!({"name": "octocat"}));

        let answers = json!({"approval": accept(invalid.clone()), "who": who});
        let mut reask = h
            .call(&deploy().id(2).state(&token).answers(answers))
            .await
            .json();
        let token2 = take_state(&mut reask);
        let mut asked_again = approval();
        // The problem on the field, the field named in the message.
        asked_again["params"]["message"] =
            json!(format!("Deploy to staging?\n\nPlease correct: {field}."));
        asked_again["params"]["requestedSchema"]["properties"][field]["description"] = json!(hint);
        // What was valid comes back pre-filled.
        if invalid["approve"] == true {
            asked_again["params"]["requestedSchema"]["properties"]["approve"]["default"] =
                json!(true);
        }
        assert_eq!(
            reask,
            result_message(2, input_required(json!({"approval": asked_again}), None))
        );
        assert!(token2.starts_with("v1.k1."), "{token2}");
        assert_eq!(h.fake.calls(), 1, "the inner service was called: {hint}");

        // Wrong again: the same single hint, not one more.
        let answers = json!({"approval": accept(invalid)});
        let mut again = h
            .call(&deploy().id(3).state(&token2).answers(answers))
            .await
            .json();
        take_state(&mut again);
        assert_eq!(again["result"], reask["result"]);
        assert_eq!(h.fake.calls(), 1);

        // The layer's token works, and the answer kept from the last round rides in it.
        let answers = json!({"approval": accept(valid.clone())});
        let reply = h
            .call(&deploy().id(3).state(&token2).answers(answers))
            .await;
        assert_eq!(reply.json(), result_message(3, done()));
        let both = json!({"approval": accept(valid), "who": who});
        assert_eq!(
            h.fake.last().json(),
            deploy().id(3).state("inner-1").answers(both).body()
        );
    }
}

#[tokio::test]
async fn a_missing_answer_is_asked_again_and_the_given_one_kept() {
    let questions = json!({"approval": approval(), "who": name_question()});
    let h = Harness::new(layer(), asking(Transport::Json, questions, Some("inner-1")));
    let token = first_round(&h, &deploy()).await;

    let mut reask = h
        .call(&deploy().id(2).state(&token).answers(approve()))
        .await
        .json();
    let token2 = take_state(&mut reask);
    assert_eq!(
        reask,
        result_message(2, input_required(json!({"who": name_question()}), None))
    );
    assert_eq!(h.fake.calls(), 1);

    let who = json!({"who": accept(json!({"name": "octocat"}))});
    let reply = h.call(&deploy().id(3).state(&token2).answers(who)).await;
    assert_eq!(reply.json(), result_message(3, done()));
    let both = json!({"approval": accept(json!({"approve": true})),
        "who": accept(json!({"name": "octocat"}))});
    assert_eq!(
        h.fake.last().json(),
        deploy().id(3).state("inner-1").answers(both).body()
    );
}

#[tokio::test]
async fn decline_and_cancel_are_forwarded_for_the_inner_service_to_decide() {
    for action in ["decline", "cancel"] {
        let fake =
            FakeMcp::answering(
                Transport::Json,
                |params| match params["inputResponses"]["approval"]["action"].as_str() {
                    Some("accept") => done(),
                    Some(_) => json!({"resultType": "complete", "isError": true,
                    "content": [{"type": "text", "text": "Not deployed"}]}),
                    None => input_required(json!({"approval": approval()}), Some("inner-1")),
                },
            );
        let h = Harness::new(layer(), fake);
        let token = first_round(&h, &deploy()).await;

        let answer = json!({"approval": {"action": action, "content": {"approve": "nonsense"}}});
        let reply = h.call(&deploy().id(2).state(&token).answers(answer)).await;
        assert_eq!(
            reply.json()["result"]["content"][0]["text"],
            "Not deployed",
            "{action}"
        );
        let forwarded = json!({"approval": {"action": action}});
        assert_eq!(
            h.fake.last().json(),
            deploy().id(2).state("inner-1").answers(forwarded).body()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Bad, foreign and misbound tokens.

fn flip_middle(token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let middle = chars.len() / 2;
    chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[tokio::test]
async fn tampered_and_foreign_tokens_are_refused_alike() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let h = Harness::new(layer(), fake.clone());
    let token = first_round(&h, &deploy()).await;
    let other_key = Keyring::new("k1", [8u8; 32]).unwrap();
    let foreign = first_round(
        &Harness::new(ElicitationLayer::new(other_key), fake.clone()),
        &deploy(),
    )
    .await;
    let other_kid = Keyring::new("k2", [7u8; 32]).unwrap();
    let renamed = Harness::new(ElicitationLayer::new(other_kid), fake.clone());
    let renamed = renamed.call(&deploy()).await.state();

    let retry = |token: &str| deploy().id(2).state(token).answers(approve());
    for bad in [
        format!("{token}x"),
        flip_middle(&token),
        token[..token.len() - 1].to_owned(),
        token.replacen("v1.", "v2.", 1),
        foreign,
        renamed,
        String::new(),
        "inner-1".to_owned(),
    ] {
        assert_refused(&h, &retry(&bad)).await;
    }
    // Bound to the call: another tool, other arguments, another method.
    assert_refused(
        &h,
        &Call::tool("destroy")
            .args(json!({"env": "staging"}))
            .id(2)
            .state(&token),
    )
    .await;
    assert_refused(
        &h,
        &deploy()
            .args(json!({"env": "production"}))
            .id(2)
            .state(&token),
    )
    .await;
    assert_refused(&h, &Call::tool("deploy").id(2).state(&token)).await; // no arguments
    let prompt = Call::prompt("deploy").args(json!({"env": "staging"}));
    assert_refused(&h, &prompt.id(2).state(&token)).await;

    // The untouched token still works.
    assert_eq!(fake.calls(), 3);
    let reply = h.call(&retry(&token)).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

/// The approved retry of `deploy` as text, with its arguments spelled exactly as `arguments`.
fn approved_deploy_text(id: u32, arguments: &str, token: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"deploy",
        "arguments":{arguments},"requestState":"{token}",
        "inputResponses":{{"approval":{{"action":"accept","content":{{"approve":true}}}}}},
        "_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{}}}}}}}}}}"#
    )
}

#[tokio::test]
async fn arguments_are_bound_by_value_not_by_bytes() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let call = deploy().args(json!({"env": "staging", "replicas": 3}));
    let token = first_round(&h, &call).await;

    let body = approved_deploy_text(2, r#"{ "replicas" : 3, "env":"staging" }"#, &token);
    let reply = h.send(support::post(body)).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

#[tokio::test]
async fn a_reask_after_a_retry_bound_by_its_exact_text_binds_the_same_arguments() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let call = deploy().args(json!({"env": "staging", "replicas": 3}));
    let token = first_round(&h, &call).await;
    // The same bytes, an invalid answer: the layer asks again with a token of its own.
    let invalid = json!({"approval": {"action": "accept", "content": {"approve": "yes"}}});
    let mut reply = h
        .call(&call.clone().id(2).state(&token).answers(invalid))
        .await
        .json();
    assert_eq!(reply["result"]["resultType"], "input_required");
    let again = take_state(&mut reply);
    // That token binds the arguments' meaning, whatever their spelling.
    let body = approved_deploy_text(3, r#"{ "replicas" : 3, "env":"stag\u0069ng" }"#, &again);
    let reply = h.send(support::post(body)).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
    // And no other arguments.
    let other = deploy().args(json!({"env": "production", "replicas": 3}));
    assert_refused(&h, &other.id(4).state(&again).answers(approve())).await;
}

#[tokio::test]
async fn resources_and_prompts_are_bound_to_their_uri_and_name() {
    let fake = asking(Transport::Json, json!({"approval": approval()}), None);
    let h = Harness::new(layer(), fake);

    let read = Call::resource("file:///a.txt");
    let token = first_round(&h, &read).await;
    assert_refused(&h, &Call::resource("file:///b.txt").id(2).state(&token)).await;
    let reply = h.call(&read.id(3).state(&token).answers(approve())).await;
    assert_eq!(reply.json(), result_message(3, done()));

    let prompt = Call::prompt("greet");
    let token = first_round(&h, &prompt).await;
    assert_refused(&h, &Call::prompt("farewell").id(2).state(&token)).await;
    let reply = h.call(&prompt.id(3).state(&token).answers(approve())).await;
    assert_eq!(reply.json(), result_message(3, done()));
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let layer = layer()
        .ttl(Duration::from_secs(1))
        .clock_skew(Duration::ZERO);
    let h = Harness::new(layer, FakeMcp::answering(Transport::Json, approval_server));
    let token = first_round(&h, &deploy()).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_refused(&h, &deploy().id(2).state(&token).answers(approve())).await;
}

#[tokio::test]
async fn a_retired_key_still_verifies() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let old = Harness::new(layer(), fake.clone());
    let call = deploy().header("authorization", "Bearer a");
    let token = first_round(&old, &call).await;

    let rotated = Keyring::new("k2", [9u8; 32])
        .unwrap()
        .with_verify_key("k1", [7u8; 32])
        .unwrap();
    let new = Harness::new(ElicitationLayer::new(rotated), fake);
    let reply = new.call(&call.id(2).state(&token).answers(approve())).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
    // Tokens it mints itself are signed with the new key.
    assert!(new.call(&deploy()).await.state().starts_with("v1.k2."));
}

/// The layer keeps the tokens it sealed, to open their retries without the MAC and claims passes.
/// Every retry must be answered as another replica with the same keys, which must open the token
/// in full, answers it.
#[tokio::test]
async fn the_replica_that_sealed_a_token_answers_its_retry_as_any_other_would() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let sealer = Harness::new(layer(), fake.clone());
    let other = Harness::new(layer(), fake.clone());
    let call = deploy().header("authorization", "Bearer a");
    let token = first_round(&sealer, &call).await;

    let retry = |call: Call| call.id(2).state(&token);
    let retries = [
        retry(call.clone()).answers(approve()),
        retry(call.clone()).answers(json!({"approval": accept(json!({"approve": "yes"}))})),
        retry(call.clone()).answers(json!({})),
        retry(call.clone().args(json!({"env": "production"}))).answers(approve()),
        retry(call.clone().header("authorization", "Bearer b")).answers(approve()),
        retry(Call::tool("destroy").args(json!({"env": "staging"}))).answers(approve()),
        retry(call.clone().version("2025-11-25")).answers(approve()),
    ];
    for retry in retries {
        let mut replies = Vec::new();
        for replica in [&sealer, &other] {
            let calls = fake.calls();
            let mut reply = replica.call(&retry).await.json();
            if reply["result"].get("requestState").is_some() {
                // A re-ask: sealed anew, by whichever replica answered.
                take_state(&mut reply);
            }
            let given = (fake.calls() > calls).then(|| fake.last().json());
            replies.push((reply, given));
        }
        assert_eq!(replies[0], replies[1], "for {}", retry.body());
    }
}

#[tokio::test]
async fn tokens_over_the_state_bound_are_refused_both_ways() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let h = Harness::new(layer(), fake.clone());
    let token = first_round(&h, &deploy()).await;

    // Presented: refused before anything else, like any bad token.
    let small = Harness::new(layer().max_state_bytes(token.len() - 1), fake.clone());
    assert_refused(&small, &deploy().id(2).state(&token).answers(approve())).await;
    let exact = Harness::new(layer().max_state_bytes(token.len()), fake);
    let reply = exact
        .call(&deploy().id(2).state(&token).answers(approve()))
        .await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");

    // Produced: the layer will not hand out a token its own bound would refuse.
    let calls = h.fake.calls();
    let reply = small.call(&deploy().id(3)).await;
    assert_eq!(
        reply.json(),
        error_message(3, -32603, "Internal error", None)
    );
    assert_eq!(h.fake.calls(), calls + 1);
}

#[tokio::test]
async fn a_non_string_target_is_refused() {
    // Bound as text, `["deploy"]` and `["destroy"]` could not be told apart: the layer refuses a
    // name (or URI) that is not a string, as any MCP server would, before the inner service.
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    for (id, name) in [(1, json!(["deploy"])), (2, json!(7)), (3, json!({"n": 1}))] {
        let call = Call::new("tools/call", json!({"name": name, "arguments": {}})).id(id);
        let reply = h.call(&call).await;
        assert_eq!(
            reply.json(),
            error_message(id, -32602, "Invalid params: `name` must be a string", None)
        );
    }
    assert_eq!(h.fake.calls(), 0);
}

#[tokio::test]
async fn positional_params_are_refused() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["deploy",{"inputResponses":{}}]}"#;
    let reply = h.send(support::post(body.to_owned())).await;
    assert_eq!(
        reply.json(),
        error_message(1, -32602, "Invalid params: params must be an object", None)
    );
    assert_eq!(h.fake.calls(), 0);
}

#[tokio::test]
async fn the_token_is_bound_to_the_authorization_header_by_default() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let token = first_round(&h, &deploy().header("authorization", "Bearer a")).await;
    let anonymous = first_round(&h, &deploy()).await;

    let retry = |token: &str| deploy().id(2).state(token).answers(approve());
    assert_refused(&h, &retry(&token).header("authorization", "Bearer b")).await;
    assert_refused(&h, &retry(&token)).await;
    assert_refused(&h, &retry(&anonymous).header("authorization", "Bearer a")).await;

    let reply = h
        .call(&retry(&token).header("authorization", "Bearer a"))
        .await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
    let reply = h.call(&retry(&anonymous)).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

#[derive(Clone)]
struct User(String);

fn user_principal(parts: &http::request::Parts) -> Option<Vec<u8>> {
    parts
        .extensions
        .get::<User>()
        .map(|user| user.0.clone().into_bytes())
}

fn as_user(call: &Call, user: Option<&str>) -> Request<Body> {
    let mut request = call.request();
    if let Some(user) = user {
        request.extensions_mut().insert(User(user.to_owned()));
    }
    request
}

#[tokio::test]
async fn the_token_is_bound_to_a_custom_principal() {
    let layer = layer().principal_from(user_principal);
    let h = Harness::new(layer, FakeMcp::answering(Transport::Json, approval_server));
    let first = h
        .send(as_user(
            &deploy().header("authorization", "Bearer a"),
            Some("alice"),
        ))
        .await;
    let token = first.state();

    let retry = deploy().id(2).state(&token).answers(approve());
    for user in [Some("bob"), None] {
        let reply = h.send(as_user(&retry, user)).await;
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid or expired requestState"
        );
    }
    assert_eq!(h.fake.calls(), 1);
    // The Authorization header no longer matters.
    let retry = retry.header("authorization", "Bearer b");
    let reply = h.send(as_user(&retry, Some("alice"))).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

fn as_verified(call: &Call, principal: Option<&str>, roles: Value) -> Request<Body> {
    let mut request = call.request();
    if let Some(principal) = principal {
        let mut claims = serde_json::Map::new();
        claims.insert("roles".to_owned(), roles);
        request
            .extensions_mut()
            .insert(VerifiedCaller::new(principal, claims));
    }
    request
}

#[tokio::test]
async fn a_verified_caller_binds_the_token_and_the_header_does_not() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    // Both callers send the same header: only the verified principal tells them apart.
    let shared = deploy().header("authorization", "Bearer shared");
    let first = h.send(as_verified(&shared, Some("alice"), json!([]))).await;
    let token = first.state();

    let retry = shared.id(2).state(&token).answers(approve());
    let refused = |reply: Reply| {
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid or expired requestState"
        );
    };
    refused(h.send(as_verified(&retry, Some("bob"), json!([]))).await);
    // The same header without a verified caller is someone else too.
    refused(h.send(as_verified(&retry, None, json!([]))).await);
    // Nor can an unverified request spell the verified principal in its header.
    let spelt = deploy()
        .id(2)
        .state(&token)
        .answers(approve())
        .header("authorization", "alice");
    refused(h.send(as_verified(&spelt, None, json!([]))).await);
    assert_eq!(h.fake.calls(), 1);

    let other_header = deploy()
        .id(2)
        .state(&token)
        .answers(approve())
        .header("authorization", "Bearer another");
    let reply = h
        .send(as_verified(&other_header, Some("alice"), json!([])))
        .await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

#[tokio::test]
async fn an_explicit_principal_from_wins_over_the_verified_caller() {
    let h = Harness::new(
        layer().principal_from(user_principal),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let with = |call: &Call, user: &str, verified: &str| {
        let mut request = as_verified(call, Some(verified), json!([]));
        request.extensions_mut().insert(User(user.to_owned()));
        request
    };
    let token = h.send(with(&deploy(), "carol", "alice")).await.state();
    let retry = deploy().id(2).state(&token).answers(approve());
    let reply = h.send(with(&retry, "carol", "bob")).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
    let reply = h.send(with(&retry, "dave", "alice")).await;
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
}

#[tokio::test]
async fn a_gate_sees_the_verified_caller_and_its_claims() {
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let record = Arc::clone(&seen);
    let gate = Gate::form(
        "ok",
        r#"{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}"#,
    )
    .expect("a form")
    .check_call(move |call| {
        let caller = call.caller().ok_or("no verified caller")?;
        assert_eq!(call.principal(), Some(caller.principal().as_bytes()));
        let roles = caller.claims()["roles"].clone();
        record
            .lock()
            .unwrap()
            .push((caller.principal().to_owned(), roles.clone()));
        match roles.as_array() {
            Some(roles) if roles.contains(&json!("admin")) => Ok(()),
            _ => Err(format!("{} is no admin", caller.principal())),
        }
    });
    let layer = layer()
        .gate(GateTarget::tool("deploy"), gate)
        .expect("one gate");
    let h = Harness::new(layer, FakeMcp::answering(Transport::Json, echo));
    let call = deploy().header("authorization", "Bearer shared");

    let asked = h
        .send(as_verified(&call, Some("alice"), json!(["admin"])))
        .await;
    assert_eq!(
        asked.json()["result"]["resultType"],
        "input_required",
        "{asked:?}"
    );
    let refused = h
        .send(as_verified(&call, Some("bob"), json!(["dev"])))
        .await;
    assert_eq!(refused.json()["result"]["isError"], true, "{refused:?}");
    assert!(
        refused.json().to_string().contains("bob is no admin"),
        "{refused:?}"
    );
    let anonymous = h.send(as_verified(&call, None, json!([]))).await;
    assert_eq!(anonymous.json()["result"]["isError"], true);
    assert_eq!(h.fake.calls(), 0);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("alice".to_owned(), json!(["admin"])),
            ("bob".to_owned(), json!(["dev"]))
        ]
    );

    // Alice's approval, retried by bob (same header, another verified caller): refused.
    let token = asked.state();
    let retry = call
        .id(2)
        .state(&token)
        .answers(json!({"ok": {"action": "accept", "content": {"ok": true}}}));
    let reply = h
        .send(as_verified(&retry, Some("bob"), json!(["admin"])))
        .await;
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
    assert_eq!(h.fake.calls(), 0);
    let reply = h
        .send(as_verified(&retry, Some("alice"), json!(["admin"])))
        .await;
    assert_eq!(
        reply.json()["result"]["resultType"],
        "complete",
        "{reply:?}"
    );
    assert_eq!(h.fake.calls(), 1);
}

#[tokio::test]
async fn the_token_is_bound_to_the_audience() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let a = Harness::new(layer().audience("a"), fake.clone());
    let b = Harness::new(layer().audience("b"), fake.clone());
    let none = Harness::new(layer(), fake);
    let token = first_round(&a, &deploy()).await;

    let retry = deploy().id(2).state(&token).answers(approve());
    assert_refused(&b, &retry).await;
    assert_refused(&none, &retry).await;
    let reply = a.call(&retry).await;
    assert_eq!(reply.json()["result"]["resultType"], "complete");
}

#[tokio::test]
async fn a_request_state_that_is_not_a_string_is_refused() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    for state in [
        json!(12345),
        json!({"s": "inner-1"}),
        json!(["x"]),
        json!(true),
    ] {
        assert_refused(
            &h,
            &deploy().param("requestState", state).answers(approve()),
        )
        .await;
    }
    assert_eq!(h.fake.calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// 8. Malformed inputResponses.

#[tokio::test]
async fn input_responses_must_be_an_object_of_objects() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let token = first_round(&h, &deploy()).await;
    let cases = [
        (json!(null), "inputResponses must be an object"),
        (json!(5), "inputResponses must be an object"),
        (json!("yes"), "inputResponses must be an object"),
        (json!([approve()]), "inputResponses must be an object"),
        (
            json!({"user_name": 12345}),
            "inputResponses.user_name must be an object",
        ),
        (
            json!({"approval": accept(json!({"approve": true})), "user_name": "x"}),
            "inputResponses.user_name must be an object",
        ),
    ];
    for (responses, message) in cases {
        let reply = h
            .call(&deploy().id(2).state(&token).answers(responses))
            .await;
        assert_eq!(reply.json(), error_message(2, -32602, message, None));
    }
    assert_eq!(h.fake.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// 9. Answers without requestState.

#[tokio::test]
async fn probe_answers_that_satisfy_the_inner_question_complete() {
    let with_extras = json!({
        "approval": accept(json!({"approve": true, "colour": "red"})),
        "extra": accept(json!({"x": 1})),
    });
    for answers in [approve(), with_extras] {
        let h = Harness::new(
            layer(),
            asking(
                Transport::Json,
                json!({"approval": approval()}),
                Some("probe-1"),
            ),
        );
        let reply = h.call(&deploy().answers(answers.clone())).await;

        assert_eq!(reply.json(), result_message(1, done()), "{answers}");
        assert_eq!(
            h.fake.bodies(),
            [
                deploy().body(),
                deploy().state("probe-1").answers(approve()).body()
            ],
            "{answers}"
        );
    }
}

#[tokio::test]
async fn probe_answers_to_the_wrong_question_are_asked_again() {
    let h = Harness::new(
        layer(),
        asking(
            Transport::Json,
            json!({"approval": approval()}),
            Some("probe-1"),
        ),
    );
    let wrong = json!({"wrong": accept(json!({"approve": true}))});
    let mut reply = h.call(&deploy().answers(wrong)).await.json();
    let token = take_state(&mut reply);

    assert_eq!(
        reply,
        result_message(1, input_required(json!({"approval": approval()}), None))
    );
    assert_eq!(h.fake.bodies(), [deploy().body()]);

    // The layer's question can be answered like any other.
    let reply = h
        .call(&deploy().id(2).state(&token).answers(approve()))
        .await;
    assert_eq!(reply.json(), result_message(2, done()));
    assert_eq!(
        h.fake.last().json(),
        deploy().id(2).state("probe-1").answers(approve()).body()
    );
}

#[tokio::test]
async fn a_probe_reask_is_the_first_round() {
    let questions = json!({"approval": approval()});
    let h = Harness::new(
        layer().max_rounds(1),
        asking(Transport::Json, questions.clone(), Some("probe-1")),
    );
    // Without answers, the one round max_rounds(1) allows is asked.
    let plain = h.call(&deploy()).await.json();
    assert_eq!(plain["result"]["resultType"], "input_required", "{plain}");

    // With answers to the wrong question, the client is asked the very same thing.
    let wrong = json!({"wrong": accept(json!({"approve": true}))});
    let mut reply = h.call(&deploy().id(2).answers(wrong)).await.json();
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply}");
    take_state(&mut reply);
    assert_eq!(reply, result_message(2, input_required(questions, None)));
}

#[tokio::test]
async fn probe_works_over_event_streams() {
    let h = Harness::new(
        layer(),
        asking(
            Transport::SseAfterProgress,
            json!({"approval": approval()}),
            Some("probe-1"),
        ),
    );
    let reply = h.call(&deploy().answers(approve())).await;

    let mut stream = progress_event().to_vec();
    stream.extend_from_slice(&sse_event(2, &result_message(1, done())));
    assert_eq!(reply.bytes, stream);
    assert_eq!(
        h.fake.bodies(),
        [
            deploy().body(),
            deploy().state("probe-1").answers(approve()).body()
        ]
    );
}

#[tokio::test]
async fn strip_drops_answers_without_state() {
    let layer = layer().answers_without_state(AnswersWithoutState::Strip);
    let h = Harness::new(
        layer,
        asking(Transport::Json, json!({"approval": approval()}), None),
    );
    let reply = h.call(&deploy().answers(approve())).await;
    assert_eq!(reply.json()["result"]["resultType"], "input_required");
    assert!(reply.state().starts_with("v1.k1."));
    assert_eq!(h.fake.bodies(), [deploy().body()]);
}

#[tokio::test]
async fn reject_refuses_answers_without_state() {
    let layer = layer().answers_without_state(AnswersWithoutState::Reject);
    let h = Harness::new(
        layer,
        asking(Transport::Json, json!({"approval": approval()}), None),
    );
    let reply = h.call(&deploy().answers(approve())).await;
    assert_eq!(
        reply.json(),
        error_message(1, -32602, "inputResponses without requestState", None)
    );
    assert_eq!(h.fake.calls(), 0);
}

// ---------------------------------------------------------------------------------------------
// 10. Capabilities.

fn missing_capability(id: u64, required: Value) -> Value {
    error_message(
        id,
        -32021,
        "Missing required client capability",
        Some(json!({"requiredCapabilities": required})),
    )
}

#[tokio::test]
async fn questions_the_client_cannot_answer_become_minus_32021() {
    let cases = [
        (json!({}), approval(), json!({"elicitation": {"form": {}}})),
        (
            json!({"elicitation": {"url": {}}}),
            approval(),
            json!({"elicitation": {"form": {}}}),
        ),
        (
            json!({"elicitation": {}}),
            url_question(),
            json!({"elicitation": {"url": {}}}),
        ),
        (
            json!({"elicitation": {}}),
            sampling_question(),
            json!({"sampling": {}}),
        ),
        (
            json!({"elicitation": {}}),
            roots_question(),
            json!({"roots": {}}),
        ),
        (
            json!({"sampling": {}}),
            sampling_with_tools(),
            json!({"sampling": {"tools": {}}}),
        ),
    ];
    for transport in [Transport::Json, Transport::Sse] {
        for (caps, question, required) in cases.clone() {
            let h = Harness::new(
                layer(),
                asking(transport, json!({"q": question}), Some("inner-1")),
            );
            let reply = h.call(&deploy().caps(caps.clone())).await;
            let context = format!("{transport:?} {caps}");
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{context}");
            assert_eq!(reply.content_type(), "application/json", "{context}");
            assert_eq!(reply.json(), missing_capability(1, required), "{context}");
            assert_eq!(h.fake.calls(), 1, "{context}");
        }
    }
}

#[tokio::test]
async fn every_missing_capability_is_named_at_once() {
    let questions = json!({"a": approval(), "s": sampling_question(), "r": roots_question()});
    let h = Harness::new(layer(), asking(Transport::Json, questions, None));
    let reply = h.call(&deploy().caps(json!({"roots": {}}))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.json(),
        missing_capability(1, json!({"elicitation": {"form": {}}, "sampling": {}}))
    );
}

/// A layer keeps what each `_meta` text says: however texts alternate on one layer, each call is
/// answered by its own `_meta`, and one that cannot be read is refused every time.
#[tokio::test]
async fn each_call_is_answered_by_its_own_meta_on_a_shared_layer() {
    let h = Harness::new(
        layer(),
        asking(Transport::Json, json!({"q": approval()}), Some("inner-1")),
    );
    let form = deploy().caps(json!({"elicitation": {}}));
    let url_only = deploy().caps(json!({"elicitation": {"url": {}}}));
    let older = deploy()
        .caps(json!({"elicitation": {}}))
        .version("2025-11-25");
    let repeated = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy","arguments":{},"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#;
    for round in 0..3 {
        let reply = h.call(&form).await;
        assert_eq!(reply.status, StatusCode::OK, "{round}");
        assert_eq!(reply.json()["result"]["resultType"], "input_required");

        let reply = h.call(&url_only).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{round}");
        let required = json!({"elicitation": {"form": {}}});
        assert_eq!(reply.json(), missing_capability(1, required), "{round}");

        let reply = h.call(&older).await;
        assert_eq!(
            reply.json(),
            error_message(1, -32603, "Internal error", None),
            "{round}"
        );

        let reply = h.send(support::post(repeated)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{round}");
        assert_eq!(reply.json()["error"]["code"], -32600, "{round}");
    }
    assert_eq!(
        h.fake.calls(),
        9,
        "the refused `_meta` never reached the inner service"
    );
}

/// What a layer keeps of `_meta` is keyed by the two entries it reads: a client that sends a new
/// `progressToken` (or client info) with every call is answered by its version and capabilities
/// each time, and either entry given twice, or a key repeated inside one, is still refused.
#[tokio::test]
async fn a_new_progress_token_on_every_call_changes_nothing_the_layer_reads() {
    let h = Harness::new(
        layer(),
        asking(Transport::Json, json!({"q": approval()}), Some("inner-1")),
    );
    let meta = |n: u64, version: &str, capabilities: Value| {
        json!({
            "progressToken": n,
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": n.to_string()},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        })
    };
    let refused = [
        r#""io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}"#,
        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}"#,
        r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"elicitation":{}}"#,
    ];
    let mut forwarded = 0;
    for n in 0..300 {
        let form = deploy().param("_meta", meta(n, "2026-07-28", json!({"elicitation": {}})));
        let reply = h.call(&form).await;
        assert_eq!(reply.status, StatusCode::OK, "{n}");
        assert_eq!(reply.json()["result"]["resultType"], "input_required");

        let url_only = meta(n, "2026-07-28", json!({"elicitation": {"url": {}}}));
        let reply = h.call(&deploy().param("_meta", url_only)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{n}");
        let required = json!({"elicitation": {"form": {}}});
        assert_eq!(reply.json(), missing_capability(1, required), "{n}");

        let older = meta(n, "2025-11-25", json!({"elicitation": {}}));
        let reply = h.call(&deploy().param("_meta", older)).await;
        assert_eq!(
            reply.json(),
            error_message(1, -32603, "Internal error", None),
            "{n}"
        );
        forwarded += 3;

        let repeated = refused[n as usize % refused.len()];
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{}},"_meta":{{"progressToken":{n},{repeated}}}}}}}"#
        );
        let reply = h.send(support::post(body.clone())).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{n}: {body}");
        assert_eq!(reply.json()["error"]["code"], -32600, "{n}");
    }
    assert_eq!(
        h.fake.calls(),
        forwarded,
        "the refused `_meta` never reached the inner service"
    );
}

/// Once an event has gone out the status is sent: the refusal becomes the response event.
#[tokio::test]
async fn a_refusal_after_a_notification_stays_in_the_stream() {
    let h = Harness::new(
        layer(),
        asking(
            Transport::SseAfterProgress,
            json!({"approval": approval()}),
            None,
        ),
    );
    let reply = h.call(&deploy().caps(json!({}))).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "text/event-stream");
    let events = reply.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].as_bytes(), progress_event());
    assert_eq!(
        event_data(&events[1]),
        missing_capability(1, json!({"elicitation": {"form": {}}}))
    );
}

#[tokio::test]
async fn a_layer_reask_is_checked_against_the_retry_capabilities() {
    let questions = json!({"approval": approval(), "who": name_question()});
    let h = Harness::new(layer(), asking(Transport::Json, questions, None));
    let token = first_round(&h, &deploy().caps(json!({"elicitation": {}}))).await;

    let retry = deploy().id(2).state(&token).answers(approve());
    let reply = h.call(&retry.caps(json!({"roots": {}}))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.json(),
        missing_capability(2, json!({"elicitation": {"form": {}}}))
    );
    assert_eq!(h.fake.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// 11. Older protocol versions.

#[tokio::test]
async fn an_older_protocol_version_is_stripped_and_never_answered_input_required() {
    let result = input_required(json!({"approval": approval()}), Some("inner-1"));
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, move |_| result.clone()),
    );
    let old = deploy().version("2025-11-25");
    let reply = h
        .call(&old.clone().state("v1.k1.forged.x").answers(approve()))
        .await;

    // The unverifiable fields never reach the inner service ...
    assert_eq!(h.fake.bodies(), [old.body()]);
    // ... and a client that cannot take part in multi round-trip requests is not sent one.
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json(),
        error_message(1, -32603, "Internal error", None)
    );
}

#[tokio::test]
async fn the_version_header_counts_when_meta_names_none() {
    let h = Harness::new(
        layer(),
        asking(
            Transport::Json,
            json!({"approval": approval()}),
            Some("inner-1"),
        ),
    );
    let mut body = deploy().body();
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/protocolVersion");

    let mut request = support::post(encode(&body));
    let version = "2026-07-28".parse().unwrap();
    request
        .headers_mut()
        .insert("mcp-protocol-version", version);
    assert!(h.send(request).await.state().starts_with("v1.k1."));

    // No version anywhere: not a 2026-07-28 call, so no input_required reaches it.
    let reply = h.send(support::post(encode(&body))).await;
    assert_eq!(reply.json()["error"]["code"], -32603, "{reply:?}");
}

/// `input_required` results the layer cannot vouch for become `-32603`: the client never gets an
/// unsealed state or a question it cannot check.
#[tokio::test]
async fn an_input_required_the_layer_cannot_seal_is_an_internal_error() {
    let no_schema = json!({"method": "elicitation/create", "params": {"message": "m"}});
    let bad_schema = form("m", json!({"x": {"type": "strin"}}), &[]);
    let cases = [
        json!({"resultType": "input_required", "inputRequests": "approve?", "requestState": "secret"}),
        input_required(
            json!({"q": {"method": "ping", "params": {}}}),
            Some("secret"),
        ),
        input_required(json!({"q": no_schema}), Some("secret")),
        input_required(json!({"q": bad_schema}), Some("secret")),
        json!({"resultType": "input_required", "inputRequests": {"approval": approval()}, "requestState": 7}),
    ];
    for result in cases {
        let answer = result.clone();
        let h = Harness::new(
            layer(),
            FakeMcp::answering(Transport::Json, move |_| answer.clone()),
        );
        let reply = h.call(&deploy()).await;
        assert_eq!(
            reply.json(),
            error_message(1, -32603, "Internal error", None),
            "{result}"
        );
    }
}

/// A form with no fields, as raw JSON for hand-written inner answers.
const EMPTY_FORM: &str = r#"{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{}}}}"#;

/// The client's reply to `deploy` when the inner service answers it with exactly `body`.
async fn deploy_answered_with(body: String) -> Value {
    let body: &'static str = Box::leak(body.into_boxed_str());
    let h = Harness::new(layer(), fixed("application/json", body));
    h.call(&deploy()).await.json()
}

/// An `input_required` whose keys could be read two ways is never sealed.
#[tokio::test]
async fn an_input_required_with_a_repeated_key_is_an_internal_error() {
    let bodies = [
        // Two states, one the client would see and one the layer would seal.
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"input_required","inputRequests":{{"a":{EMPTY_FORM}}},"requestState":"s","requestState":"t"}}}}"#
        ),
        // Two questions under one key.
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"input_required","inputRequests":{{"a":{EMPTY_FORM},"a":{{"method":"roots/list"}}}}}}}}"#
        ),
        // Two ids.
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"id":1,"result":{{"resultType":"input_required","inputRequests":{{"a":{EMPTY_FORM}}}}}}}"#
        ),
    ];
    for body in bodies {
        let reply = deploy_answered_with(body.clone()).await;
        assert_eq!(
            reply,
            error_message(1, -32603, "Internal error", None),
            "{body}"
        );
    }
}

/// An `input_required` spelled with escapes is read as one: its state is sealed, never passed on
/// as the inner service wrote it.
#[tokio::test]
async fn an_input_required_spelled_with_escapes_is_sealed() {
    let bodies = [
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"input_requ\u0069red","inputRequests":{{"a":{EMPTY_FORM}}},"requestState":"inner"}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"\u0069\u006e\u0070\u0075\u0074_required","inputRequests":{{"a":{EMPTY_FORM}}},"requestState":"inner"}}}}"#
        ),
    ];
    for body in bodies {
        let reply = deploy_answered_with(body.clone()).await;
        let state = reply["result"]["requestState"].as_str().unwrap_or_default();
        assert!(state.starts_with("v1."), "{body} -> {reply}");
    }
}

// ---------------------------------------------------------------------------------------------
// 12–13. Batches and duplicate keys.

/// A fake server that answers every request with the same bytes.
fn fixed(content_type: &'static str, body: &'static str) -> FakeMcp {
    FakeMcp::new(move |_| raw_response(StatusCode::OK, content_type, body))
}

/// A body the layer forwards as it came (a method it does not act on, or a first round with
/// nothing to rewrite) keeps its headers only when they describe it; otherwise it goes on with a
/// `Content-Length` that does, and no `Transfer-Encoding`.
#[tokio::test]
async fn a_forwarded_body_is_described_by_its_headers() {
    let h = Harness::new(
        layer(),
        fixed(
            "application/json",
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ),
    );
    let call = deploy().body().to_string();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    for body in [list, call.as_str()] {
        forwarded_with_described_headers(&h, body).await;
    }
}

/// Sends `body` with described, chunked, lying and doubled framing; checks what the inner service
/// gets.
async fn forwarded_with_described_headers(h: &Harness, body: &str) {
    let length = body.len().to_string();
    let mut described = support::post(body.to_owned());
    described
        .headers_mut()
        .insert(header::CONTENT_LENGTH, length.parse().unwrap());
    let mut chunked = support::post(body.to_owned());
    *chunked.body_mut() = support::chunked([
        Bytes::copy_from_slice(&body.as_bytes()[..10]),
        Bytes::copy_from_slice(&body.as_bytes()[10..]),
    ]);
    chunked
        .headers_mut()
        .insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
    let mut lying = support::post(body.to_owned());
    lying
        .headers_mut()
        .insert(header::CONTENT_LENGTH, "5".parse().unwrap());
    let mut twice = support::post(body.to_owned());
    for value in [length.as_str(), "5"] {
        twice
            .headers_mut()
            .append(header::CONTENT_LENGTH, value.parse().unwrap());
    }
    for request in [described, chunked, lying, twice] {
        let reply = h.send(request).await;
        assert_eq!(reply.status, StatusCode::OK);
        let received = h.fake.last();
        assert_eq!(received.bytes, body.as_bytes());
        let lengths: Vec<_> = received
            .headers
            .get_all(header::CONTENT_LENGTH)
            .iter()
            .collect();
        assert_eq!(lengths, [length.as_str()]);
        assert!(!received.headers.contains_key(header::TRANSFER_ENCODING));
    }
}

#[tokio::test]
async fn a_batch_with_an_mrtr_method_is_refused() {
    let h = Harness::new(layer(), fixed("application/json", "[]"));
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for call in [
        deploy().id(2),
        Call::prompt("greet").id(2),
        Call::resource("file:///a").id(2),
    ] {
        let reply = h
            .send(support::post(encode(&json!([list, call.body()]))))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            reply.json(),
            error_message(
                Value::Null,
                -32600,
                "Invalid Request: a batch may not contain tools/call, prompts/get or resources/read",
                None
            )
        );
    }
    assert_eq!(h.fake.calls(), 0);
}

#[tokio::test]
async fn a_batch_without_mrtr_methods_is_forwarded_untouched() {
    let response = r#"[{"jsonrpc":"2.0","id":1,"result":{"tools":[]}} , {"jsonrpc":"2.0","id":2,"result":{}}]"#;
    let h = Harness::new(layer(), fixed("application/json", response));
    let batch = r#"[ {"jsonrpc":"2.0","id":1,"method":"tools/list"},
        {"jsonrpc":"2.0","id":2,"method":"ping"}, {"jsonrpc":"2.0","method":"notifications/x"} ]"#;
    let reply = h.send(support::post(batch)).await;
    assert_eq!(reply.bytes, response);
    assert_eq!(h.fake.last().bytes, batch);
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;

#[tokio::test]
async fn duplicate_keys_are_refused() {
    let h = Harness::new(
        layer(),
        FakeMcp::answering(Transport::Json, approval_server),
    );
    let token = first_round(&h, &Call::tool("deploy")).await;
    let cases = [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","method":"tools/call","params":{"name":"deploy","arguments":{},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","method":"tools/call","params":{"name":"deploy","arguments":{},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","m\u0065thod":"tools/call","params":{"name":"deploy","arguments":{},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","name":"destroy","arguments":{},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","n\u0061me":"destroy","arguments":{},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},"requestState":"TOKEN","request\u0053tate":"other","_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"staging","env":"production"},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},"requestState":"TOKEN","inputResponses":{"approval":{"action":"decline"},"approval":{"action":"accept","content":{"approve":true}}},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},"requestState":"TOKEN","inputResponses":{"approval":{"action":"accept","content":{"approve":false,"approve":true}}},"_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},"requestState":"TOKEN","requestState":"other","_meta":META}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
    ];
    for case in cases {
        let body = case.replace("META", META).replace("TOKEN", &token);
        let reply = h.send(support::post(body)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{case}");
        let message = reply.json();
        assert_eq!(message["error"]["code"], -32600, "{case}: {message}");
        let text = message["error"]["message"].as_str().unwrap();
        assert!(text.starts_with("Invalid Request"), "{case}: {text}");
    }
    assert_eq!(h.fake.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// 14. Body limit.

fn too_large(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.content_type(), "application/json");
    assert_eq!(
        reply.json(),
        error_message(Value::Null, -32600, "Request body too large", None)
    );
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_with_413() {
    let h = Harness::new(
        layer().max_body_bytes(1024),
        fixed("application/json", "{}"),
    );
    let big = encode(&deploy().args(json!({"padding": "x".repeat(2048)})).body());
    assert!(big.len() > 2048);

    // Whole, without Content-Length.
    too_large(&h.send(support::post(big.clone())).await);

    // Streamed in chunks, without Content-Length.
    let mut streamed = support::post(Bytes::new());
    let chunks: Vec<Bytes> = big.chunks(256).map(Bytes::copy_from_slice).collect();
    *streamed.body_mut() = chunked(chunks);
    too_large(&h.send(streamed).await);

    // Declared too large: refused before the body is read.
    let polled = Arc::new(AtomicBool::new(false));
    let flag = polled.clone();
    let untouchable = futures_util::stream::poll_fn(move |_| {
        flag.store(true, Ordering::SeqCst);
        std::task::Poll::<Option<Result<http_body::Frame<Bytes>, Infallible>>>::Ready(None)
    });
    let mut declared = support::post(Bytes::new());
    declared
        .headers_mut()
        .insert(header::CONTENT_LENGTH, "4096".parse().unwrap());
    *declared.body_mut() = StreamBody::new(untouchable).boxed_unsync();
    too_large(&h.send(declared).await);
    assert!(!polled.load(Ordering::SeqCst), "the body was read");

    // A tools/list is held to the same limit; a small body passes.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x".repeat(2048)}});
    too_large(&h.send(support::post(encode(&list))).await);
    assert_eq!(h.fake.calls(), 0);
    let reply = h.call(&Call::new("tools/list", json!({}))).await;
    assert_eq!(reply.bytes, "{}");
    assert_eq!(h.fake.calls(), 1);
}

// ---------------------------------------------------------------------------------------------
// 15. What the layer does not touch.

#[tokio::test]
async fn a_get_is_judged_by_its_body_like_a_post() {
    let h = Harness::new(layer(), fixed("text/event-stream", ": ping\n\n"));
    let get = |body: &'static str| {
        Request::get("/mcp")
            .header(header::ACCEPT, "text/event-stream")
            .header("x-probe", "1")
            .body(full(body))
            .unwrap()
    };

    // A body that names none of the three methods passes untouched after the byte scan.
    let reply = h.send(get("not json {")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "text/event-stream");
    assert_eq!(reply.bytes, ": ping\n\n");
    let received = h.fake.last();
    assert_eq!(received.method, http::Method::GET);
    assert_eq!(received.headers["x-probe"], "1");
    assert_eq!(received.bytes, "not json {");

    // One that could name one is read strictly, and refused when it cannot be read.
    let reply = h.send(get(r#"not json {"method":"tools/call"}"#)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["error"]["code"], -32700);
    assert_eq!(h.fake.calls(), 1, "the refused body was not forwarded");
}

#[tokio::test]
async fn other_methods_are_forwarded_byte_for_byte() {
    let response = "{ \"jsonrpc\":\"2.0\", \"id\":7,\n \"result\":{\"tools\":[] , \"resultType\":\"complete\"} }\n";
    let h = Harness::new(layer(), fixed("application/json", response));
    let body = " {\n  \"jsonrpc\" : \"2.0\" ,\"id\":\t7,\"method\":\"tools/list\" ,\"params\":{ \"_meta\" : {}, \"x\":1.50 }\n} ";
    let reply = h.send(support::post(body)).await;

    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.bytes, response);
    assert_eq!(h.fake.last().bytes, body);
}

// ---------------------------------------------------------------------------------------------
// 16. Event streams.

/// Checks an event stream that ends with the sealed `input_required` for `approval()`, after the
/// progress event when `progress`; returns the token.
fn sealed_event_stream(reply: &Reply, id: u64, progress: bool) -> String {
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "text/event-stream");
    let events = reply.events();
    assert_eq!(events.len(), 1 + usize::from(progress), "{events:?}");
    if progress {
        assert_eq!(events[0].as_bytes(), progress_event());
    }
    let last = events.last().unwrap();
    assert_eq!(event_fields(last), ["event: message", "id: 2"]);
    let mut message = event_data(last);
    let token = take_state(&mut message);
    assert!(token.starts_with("v1.k1."), "{token}");
    assert_eq!(
        message,
        result_message(id, input_required(json!({"approval": approval()}), None))
    );
    token
}

#[tokio::test]
async fn sse_notifications_pass_and_the_response_event_is_sealed() {
    for transport in [
        Transport::Sse,
        Transport::SseAfterProgress,
        Transport::SseInPieces(1),
        Transport::SseInPieces(7),
    ] {
        let progress = !matches!(transport, Transport::Sse);
        let h = Harness::new(layer(), FakeMcp::answering(transport, approval_server));
        let reply = h.call(&deploy()).await;
        let token = sealed_event_stream(&reply, 1, progress);

        let reply = h
            .call(&deploy().id(2).state(&token).answers(approve()))
            .await;
        let expected = deploy().id(2).state("inner-1").answers(approve()).body();
        assert_eq!(h.fake.last().json(), expected);
        let result = result_message(2, echo(&expected["params"]));
        let mut stream = if progress {
            progress_event().to_vec()
        } else {
            Vec::new()
        };
        stream.extend_from_slice(&sse_event(2, &result));
        assert_eq!(reply.bytes, stream, "{transport:?}");
    }
}

#[tokio::test]
async fn sse_notifications_reach_the_client_before_the_result_exists() {
    let (release, released) = oneshot::channel::<()>();
    let released = Mutex::new(Some(released));
    let fake = FakeMcp::new(move |request| {
        let released = released.lock().unwrap().take().expect("called once");
        let id = request.json()["id"].clone();
        let (events, mut stream) = mpsc::channel::<Bytes>(4);
        tokio::spawn(async move {
            events.send(progress_event()).await.unwrap();
            released.await.expect("the test releases the result");
            let result = input_required(json!({"approval": approval()}), Some("inner-1"));
            events
                .send(sse_event(2, &result_message(id, result)))
                .await
                .unwrap();
        });
        let frames = futures_util::stream::poll_fn(move |cx| {
            stream
                .poll_recv(cx)
                .map(|chunk| chunk.map(|c| Ok::<_, Infallible>(http_body::Frame::data(c))))
        });
        sse_response(StreamBody::new(frames).boxed_unsync())
    });
    let h = Harness::new(layer(), fake);

    let mut body = h.respond(deploy().request()).await.into_body();
    let first = tokio::time::timeout(TIMEOUT, body.frame())
        .await
        .expect("the notification arrives while the inner service is still working")
        .expect("a frame")
        .unwrap_or_else(|never| match never {})
        .into_data()
        .expect("a data frame");
    assert_eq!(first, progress_event());

    release.send(()).unwrap();
    let rest = tokio::time::timeout(TIMEOUT, body.collect())
        .await
        .expect("the stream ends")
        .unwrap_or_else(|never| match never {})
        .to_bytes();
    let mut stream = first.to_vec();
    stream.extend_from_slice(&rest);
    let reply = Reply {
        status: StatusCode::OK,
        headers: [(header::CONTENT_TYPE, "text/event-stream".parse().unwrap())]
            .into_iter()
            .collect(),
        bytes: stream.into(),
    };
    sealed_event_stream(&reply, 1, true);
}

// ---------------------------------------------------------------------------------------------
// 17. Round cap.

#[tokio::test]
async fn rounds_past_the_cap_become_an_error() {
    let h = Harness::new(
        layer().max_rounds(2),
        FakeMcp::answering(Transport::Json, |_| {
            input_required(json!({"approval": approval()}), None)
        }),
    );
    let mut token = first_round(&h, &deploy()).await;
    let second = h
        .call(&deploy().id(2).state(&token).answers(approve()))
        .await;
    token = second.state();
    let third = h
        .call(&deploy().id(3).state(&token).answers(approve()))
        .await;
    assert_eq!(
        third.json(),
        error_message(
            3,
            -32602,
            "Too many input rounds (the limit is 2)",
            Some(json!({"reason": "too_many_rounds"}))
        )
    );
    assert_eq!(h.fake.calls(), 3);
}

// ---------------------------------------------------------------------------------------------
// 18. Composition.

#[test]
fn the_layer_and_service_are_clone_send_sync() {
    fn clone_send_sync<T: Clone + Send + Sync>() {}
    fn send<T: Send>() {}
    clone_send_sync::<ElicitationLayer>();
    clone_send_sync::<Elicitation<support::Inner>>();
    clone_send_sync::<Elicitation<axum::routing::Route>>();
    send::<tower_elicitation::ResponseFuture<support::Inner, Body, Body>>();
}

/// One whole round trip through `service`: asked, answered, complete, the inner service given
/// the cleaned answer and its own state.
async fn assert_round_trip<S, RB>(service: S, call: Call)
where
    S: tower::Service<Request<Body>, Response = http::Response<RB>> + Clone,
    S::Error: std::fmt::Debug,
    RB: http_body::Body,
    RB::Error: std::fmt::Debug,
{
    let first = send(service.clone(), call.request()).await;
    let token = first.state();
    assert!(token.starts_with("v1.k1."), "{token}");
    let answers = json!({"approval": accept(json!({"approve": true, "extra": 1}))});
    let retry = call.id(2).state(&token).answers(answers);
    let done = send(service, retry.request()).await;
    let seen = json!({"inputResponses": approve(), "requestState": "inner-1"});
    assert_eq!(done.json(), result_message(2, echo(&seen)));
}

async fn approval_handler(Json(call): Json<Value>) -> Json<Value> {
    Json(result_message(
        call["id"].clone(),
        approval_server(&call["params"]),
    ))
}

#[tokio::test]
async fn composes_with_service_builder_behind_an_auth_layer() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let service = ServiceBuilder::new()
        .map_request(|mut request: Request<Body>| {
            let user = request
                .headers()
                .get("x-user")
                .map(|v| v.to_str().unwrap().to_owned());
            if let Some(user) = user {
                request.extensions_mut().insert(User(user));
            }
            request
        })
        .layer(layer().principal_from(user_principal))
        .service(fake.boxed());
    assert_round_trip(service.clone(), deploy().header("x-user", "alice")).await;

    let first = send(
        service.clone(),
        deploy().header("x-user", "alice").request(),
    )
    .await;
    let retry = deploy().id(2).state(&first.state()).answers(approve());
    let reply = send(service, retry.header("x-user", "bob").request()).await;
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
}

#[tokio::test]
async fn composes_with_axum_router_layer() {
    let router = Router::new()
        .route("/mcp", post(approval_handler))
        .layer(layer());
    assert_round_trip(router, deploy()).await;
}

#[tokio::test]
async fn composes_with_axum_route_layer() {
    let router = Router::new()
        .route("/mcp", post(approval_handler))
        .route_layer(layer());
    assert_round_trip(router, deploy()).await;
}

#[tokio::test]
async fn composes_with_axum_nest_service() {
    let fake = FakeMcp::answering(Transport::Json, approval_server);
    let mcp = ServiceBuilder::new()
        .layer(layer())
        .service(fake.service::<axum::body::Body>());
    let router = Router::new().nest_service("/mcp", mcp);
    assert_round_trip(router, deploy()).await;
    assert_eq!(fake.calls(), 2);
}

// ---------------------------------------------------------------------------------------------
// 19. Inner errors.

#[tokio::test]
async fn inner_errors_pass_through_unchanged() {
    let rpc_error = encode(&error_message(1, -32602, "Unknown tool: deploy", None));
    let cases = [
        (StatusCode::OK, "application/json", rpc_error),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            Bytes::from_static(b"upstream exploded"),
        ),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "application/json",
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"raw"}}"#),
        ),
        (
            StatusCode::OK,
            "application/json",
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"#),
        ),
    ];
    for (status, content_type, body) in cases {
        let answer = body.clone();
        let h = Harness::new(
            layer(),
            FakeMcp::new(move |_| raw_response(status, content_type, answer.clone())),
        );
        let reply = h.call(&deploy()).await;
        assert_eq!(reply.status, status);
        assert_eq!(reply.content_type(), content_type);
        assert_eq!(reply.bytes, body);
        assert_eq!(h.fake.calls(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Order: what the client is shown, in the order it was written.

/// Where each of `needles` first stands in `haystack` (panics when one is missing).
fn positions(haystack: &[u8], needles: &[&str]) -> Vec<usize> {
    let text = std::str::from_utf8(haystack).unwrap();
    needles
        .iter()
        .map(|needle| {
            text.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {text}"))
        })
        .collect()
}

#[tokio::test]
async fn input_requests_reach_the_client_in_the_order_the_inner_service_wrote_them() {
    // Written as text, so that neither serde_json's map order nor the test's sorts them.
    let fake = FakeMcp::new(|received| {
        let id = received.json()["id"].clone();
        let question = |message: &str| {
            format!(
                r#"{{"method":"elicitation/create","params":{{"message":"{message}","requestedSchema":{{"type":"object","properties":{{"zulu":{{"type":"string"}},"alpha":{{"type":"string"}}}}}}}}}}"#
            )
        };
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{"zeta":{},"mike":{},"alpha":{}}}}}}}"#,
            question("z"),
            question("m"),
            question("a"),
        );
        raw_response(StatusCode::OK, "application/json", body)
    });
    let h = Harness::new(layer(), fake);
    let reply = h.call(&Call::tool("deploy")).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let at = positions(
        &reply.bytes,
        &[
            "\"zeta\":{\"method\"",
            "\"mike\":{\"method\"",
            "\"alpha\":{\"method\"",
        ],
    );
    assert!(at[0] < at[1] && at[1] < at[2], "{:?}", reply.bytes);
    // And each question's own members, as it wrote them.
    let at = positions(&reply.bytes, &["\"zulu\":", "\"alpha\":{\"type\""]);
    assert!(at[0] < at[1], "{:?}", reply.bytes);
}

#[tokio::test]
async fn a_gate_form_given_as_text_is_shown_in_the_order_it_was_written() {
    use tower_elicitation::{Gate, GateTarget};
    let schema = r#"{
        "type": "object",
        "properties": {
            "target": {"type": "string", "title": "Target"},
            "approve": {"type": "boolean", "title": "Approve"}
        },
        "required": ["approve"]
    }"#;
    let layer = layer()
        .gate(
            GateTarget::tool("deploy"),
            Gate::form("zz-approval", schema).unwrap(),
        )
        .unwrap();
    let h = Harness::new(layer, FakeMcp::answering(Transport::Json, |_| done()));
    let reply = h.call(&Call::tool("deploy")).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let at = positions(
        &reply.bytes,
        &["\"target\":", "\"approve\":", "\"required\":"],
    );
    assert!(at[0] < at[1] && at[1] < at[2], "{:?}", reply.bytes);
    // Text that is not one JSON value, or that repeats a key, is refused when the gate is made.
    for bad in ["{", r#"{"type": "object", "type": "object"}"#] {
        let error = Gate::form("g", bad).unwrap_err();
        assert!(
            matches!(error, tower_elicitation::GateError::SchemaText { .. }),
            "{error:?}"
        );
    }
}
