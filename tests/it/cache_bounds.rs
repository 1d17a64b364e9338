//! Memory bounds, through the whole layer: however many distinct and large questions an inner
//! service asks, the layer's caches of questions, validators and `_meta` readings stay within
//! their bytes, and a response the layer refuses leaves nothing in them.
//!
//! Weights are the layer's own accounting (each entry's key text and an estimate of what its
//! value keeps alive), read through `__fuzz::cache_weight`; nothing here is timed.

use bytes::Bytes;
use http::{Request, Response, header};
use serde_json::{Value, json};
use tower_elicitation::__fuzz::{Chunks, Received, cache_weight, exchange};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};

type Respond = dyn Fn(&Received) -> Response<Chunks> + Send + Sync;

fn keyring() -> Keyring {
    Keyring::new("k1", [7u8; 32]).unwrap()
}

fn post(body: &Value) -> Request<Chunks> {
    Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Chunks::new([Bytes::from(body.to_string())]))
        .unwrap()
}

fn json_response(message: &Value) -> Response<Chunks> {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Chunks::new([message.to_string()]))
        .unwrap()
}

/// A `tools/call` of `echo` whose arguments carry `text`, from a client that declares forms.
fn call(id: usize, text: &str, extra: Value) -> Value {
    let mut call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": text},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}}});
    if let Value::Object(extra) = extra {
        call["params"].as_object_mut().unwrap().extend(extra);
    }
    call
}

/// A form asking `key`, whose schema echoes `text` (in its `description` and a property's
/// `title`); `broken` makes the schema one that does not compile.
fn form(text: &str, broken: bool) -> Value {
    let kind = if broken { json!(5) } else { json!("boolean") };
    json!({"method": "elicitation/create", "params": {
        "message": "Confirm?",
        "requestedSchema": {"type": "object", "description": text, "properties": {
            "ok": {"type": kind, "title": text}}}}})
}

/// An inner service that answers every call with `input_required`, asking `key` a form that
/// echoes the call's arguments.
fn echoing(
    key: &'static str,
    broken: bool,
) -> impl Fn(&Received) -> Response<Chunks> + Send + Sync {
    move |received| {
        let call: Value = serde_json::from_slice(&received.body).unwrap();
        let text = call["params"]["arguments"]["text"]
            .as_str()
            .unwrap_or_default();
        let result = json!({"resultType": "input_required",
            "inputRequests": {key: form(text, broken)}});
        json_response(&json!({"jsonrpc": "2.0", "id": call["id"], "result": result}))
    }
}

/// About `size` bytes of text, distinct for each `i`.
fn distinct(i: usize, size: usize) -> String {
    format!("{i:08}:{}", "x".repeat(size))
}

fn reply(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[test]
fn thousands_of_large_sealed_questions_stay_within_the_cache_bytes() {
    // Tokens may carry these questions, so every one of them is sealed and sent.
    let layer = ElicitationLayer::new(keyring()).max_state_bytes(1024 * 1024);
    let calls = 2_000;
    for i in 0..calls {
        // Twice about 32 KiB of echoed arguments (description and title): a 64 KiB schema.
        let call = call(i, &distinct(i, 32 * 1024), json!({}));
        let asked = exchange(&layer, post(&call), echoing("confirm", false));
        let reply = reply(&asked.body);
        assert_eq!(reply["result"]["resultType"], "input_required", "call {i}");
        let weight = cache_weight(&layer);
        assert!(
            weight.questions + weight.metas <= weight.max,
            "after {i} calls: {weight:?}"
        );
    }
    // Some 250 MiB of distinct question text went through (each question kept as its spelling
    // and its canonical text, and compiled): the caches kept at most their bound.
    let weight = cache_weight(&layer);
    assert!(weight.questions > 0, "{weight:?}");
    assert!(weight.max <= 16 * 1024 * 1024, "{weight:?}");
}

#[test]
fn an_input_required_too_large_to_seal_leaves_nothing_in_the_caches() {
    // The default bound on a token (64 KiB) cannot carry a 64 KiB schema.
    let layer = ElicitationLayer::new(keyring());
    for i in 0..200 {
        let first = call(i, &distinct(i, 32 * 1024), json!({}));
        let refused = exchange(&layer, post(&first), echoing("confirm", false));
        let refusal = reply(&refused.body);
        assert_eq!(refusal["error"]["code"], -32603, "{refusal}");
        // Answers without state, which the question refuses: the re-ask is too large to seal.
        let answers = json!({"confirm": {"action": "accept", "content": {"ok": "yes"}}});
        let probe = call(
            i,
            &distinct(i, 32 * 1024),
            json!({"inputResponses": answers}),
        );
        let reasked = exchange(&layer, post(&probe), echoing("confirm", false));
        let refusal = reply(&reasked.body);
        assert_eq!(refusal["error"]["code"], -32603, "{refusal}");
        assert_eq!(reasked.received.len(), 1, "probed once, not forwarded");
        assert_eq!(cache_weight(&layer).questions, 0, "after call {i}");
    }
    // A small question is sealed, and kept.
    let small = exchange(
        &layer,
        post(&call(0, "small", json!({}))),
        echoing("confirm", false),
    );
    assert_eq!(reply(&small.body)["result"]["resultType"], "input_required");
    assert!(cache_weight(&layer).questions > 0);
}

#[test]
fn an_input_required_refused_for_its_schema_or_capabilities_leaves_nothing() {
    let layer = ElicitationLayer::new(keyring());
    for i in 0..100 {
        let text = distinct(i, 1024);
        // A schema that does not compile.
        let broken = exchange(
            &layer,
            post(&call(i, &text, json!({}))),
            echoing("confirm", true),
        );
        assert_eq!(reply(&broken.body)["error"]["code"], -32603);
        // A client that declares no forms.
        let mut bare = call(i, &text, json!({}));
        bare["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let lacking = exchange(&layer, post(&bare), echoing("confirm", false));
        assert_eq!(lacking.parts.status, 400);
        assert_eq!(reply(&lacking.body)["error"]["code"], -32021);
        // Answers without state: the probe's questions are refused for capabilities too.
        let mut probe = bare.clone();
        probe["params"]["inputResponses"] = json!({"confirm": {"action": "accept"}});
        let probed = exchange(&layer, post(&probe), echoing("confirm", false));
        assert_eq!(reply(&probed.body)["error"]["code"], -32021);
        assert_eq!(cache_weight(&layer).questions, 0, "after call {i}");
    }
}

#[test]
fn an_input_required_reusing_a_gate_key_leaves_only_the_gate_question() {
    let gate = || {
        let schema = json!({"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]});
        Gate::form("approval", schema).unwrap()
    };
    let weight_after_gate = |respond: Box<Respond>| {
        let layer = ElicitationLayer::new(keyring())
            .gate(GateTarget::tool("echo"), gate())
            .unwrap();
        let text = distinct(2, 4 * 1024);
        let first = exchange(&layer, post(&call(1, &text, json!({}))), |_| unreachable!());
        let state = reply(&first.body)["result"]["requestState"].clone();
        let answers = json!({"approval": {"action": "accept", "content": {"approve": true}}});
        let retry = call(
            2,
            &text,
            json!({"requestState": state, "inputResponses": answers}),
        );
        let second = exchange(&layer, post(&retry), respond);
        (reply(&second.body), cache_weight(&layer).questions)
    };
    let (done, gate_only) = weight_after_gate(Box::new(|received| {
        let call: Value = serde_json::from_slice(&received.body).unwrap();
        json_response(&json!({"jsonrpc": "2.0", "id": call["id"], "result": {"content": []}}))
    }));
    assert!(done["result"]["content"].is_array(), "{done}");
    assert!(gate_only > 0);
    let (refused, weight) = weight_after_gate(Box::new(echoing("approval", false)));
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(weight, gate_only, "the refused question was not kept");
}
