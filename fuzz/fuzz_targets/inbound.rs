//! The inbound path: an arbitrary POST (body and headers) through the whole layer, in front of
//! a fake MCP server whose `deploy` tool asks for approval (with its own state `inner-1`) and
//! whose `delete_branch` tool sits behind the layer's `confirm-delete` form gate.
//!
//! Input: byte 0 is a control byte (bit 0: the inner service answers with an event stream;
//! bit 1: the body arrives in chunks of `byte 1 % 64 + 1` bytes); then, up to the first blank
//! line, header lines `name: value`; then the body. Without a blank line it is all body. The
//! seeds hold real calls and retries with tokens (signed with the key below) that stay valid
//! until 2100.
//!
//! Checked, besides no panic and no hang:
//! - whatever the inner service gets for an MRTR method carries no `requestState` but its own
//!   (`inner-1`), and `inputResponses` only with that state (or the gate's delivery), holding
//!   only answers that match the questions: `approval` as the form allows, `confirm-delete`
//!   naming the branch being deleted;
//! - every body the inner service gets has a `Content-Length` that matches and no
//!   `Transfer-Encoding`;
//! - when the layer answers itself, it answers one JSON-RPC message as `application/json` with
//!   a matching `Content-Length`;
//! - every `input_required` the client gets carries a sealed `requestState`;
//! - the layer's one-pass JSON reader reads the body as serde_json does, wherever it reads it.

#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use tower_elicitation::__fuzz::{Chunks, Exchange, Received, exchange, json_reads_agree};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};

const MRTR: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

fn layer() -> &'static ElicitationLayer {
    static LAYER: OnceLock<ElicitationLayer> = OnceLock::new();
    LAYER.get_or_init(|| {
        let confirm = Gate::form(
            "confirm-delete",
            json!({"type": "object", "properties": {"confirm": {"type": "string"}},
                   "required": ["confirm"]}),
        )
        .expect("a valid gate")
        .require(|content, call| content.get("confirm") == call.argument("name"));
        ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).expect("a valid key"))
            .max_body_bytes(256 * 1024)
            .gate(GateTarget::tool("delete_branch"), confirm)
            .expect("one gate")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let sse = control & 1 == 1;
    let chunk = if control & 2 == 2 {
        rest.first().map(|b| usize::from(b % 64) + 1)
    } else {
        None
    };
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (&b""[..], rest),
    };
    if let Ok(text) = std::str::from_utf8(body) {
        assert!(json_reads_agree(text), "the fast reader and serde_json disagree");
    }
    let mut request = Request::post("/mcp")
        .header(CONTENT_TYPE, "application/json")
        .body(match chunk {
            Some(size) => Chunks::new(body.chunks(size).map(Bytes::copy_from_slice)),
            None => Chunks::new([Bytes::copy_from_slice(body)]),
        })
        .expect("a valid request");
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            request.headers_mut().append(name, value);
        }
    }

    let Exchange {
        parts,
        body,
        received,
    } = exchange(layer(), request, move |received| respond(received, sse));

    for inner in &received {
        check_forwarded(inner);
    }
    if received.is_empty() {
        assert_eq!(parts.headers[CONTENT_TYPE], "application/json");
        assert_eq!(
            parts.headers[CONTENT_LENGTH],
            body.len().to_string().as_str()
        );
        let reply: Value = serde_json::from_slice(&body).expect("the layer answers JSON");
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert!(
            reply.get("result").is_some() != reply.get("error").is_some(),
            "{reply}"
        );
    }
    for message in messages(&body) {
        if message["result"]["resultType"] == "input_required" {
            let state = message["result"]["requestState"].as_str().unwrap_or("");
            assert!(state.starts_with("v1.k1."), "unsealed state: {message}");
        }
    }
});

/// The fake server: `deploy` asks for approval until approved; everything else completes.
fn respond(received: &Received, sse: bool) -> Response<Chunks> {
    let Ok(call) = serde_json::from_slice::<Value>(&received.body) else {
        return plain(StatusCode::BAD_REQUEST, "not JSON");
    };
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    if id.is_null() {
        return plain(StatusCode::ACCEPTED, "");
    }
    let params = &call["params"];
    let result = if call["method"] == "tools/call" && params["name"] == "deploy" {
        match params["inputResponses"]["approval"]["content"]["approve"].as_bool() {
            Some(true) => json!({"resultType": "complete", "content": []}),
            _ => json!({"resultType": "input_required", "requestState": "inner-1",
                "inputRequests": {"approval": approval()}}),
        }
    } else {
        json!({"resultType": "complete", "content": []})
    };
    let message = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    if sse {
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        let stream =
            format!("event: message\ndata: {progress}\n\nevent: message\ndata: {message}\n\n");
        Response::builder()
            .header(CONTENT_TYPE, "text/event-stream")
            .body(Chunks::new([stream]))
            .expect("a valid response")
    } else {
        Response::builder()
            .header(CONTENT_TYPE, "application/json")
            .body(Chunks::new([message]))
            .expect("a valid response")
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Chunks> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain")
        .body(Chunks::new([text]))
        .expect("a valid response")
}

fn approval() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy?",
        "requestedSchema": {"type": "object", "properties": {
            "approve": {"type": "boolean"}, "note": {"type": "string", "maxLength": 200}},
            "required": ["approve"]}}})
}

fn check_forwarded(inner: &Received) {
    assert_eq!(
        inner
            .parts
            .headers
            .get(CONTENT_LENGTH)
            .map(HeaderValue::as_bytes),
        Some(inner.body.len().to_string().as_bytes()),
        "the inner service got a Content-Length that does not match"
    );
    assert!(inner.parts.headers.get(TRANSFER_ENCODING).is_none());
    let Ok(Value::Object(call)) = serde_json::from_slice::<Value>(&inner.body) else {
        return;
    };
    if !call
        .get("method")
        .and_then(Value::as_str)
        .is_some_and(|m| MRTR.contains(&m))
    {
        return;
    }
    let Some(Value::Object(params)) = call.get("params") else {
        return;
    };
    let state = params.get("requestState");
    assert!(
        state.is_none() || state == Some(&json!("inner-1")),
        "an unverified requestState reached the inner service: {params:?}"
    );
    let Some(responses) = params.get("inputResponses") else {
        return;
    };
    let Value::Object(responses) = responses else {
        panic!("inputResponses that are not an object reached the inner service: {params:?}");
    };
    for (key, answer) in responses {
        match key.as_str() {
            "approval" => {
                assert_eq!(state, Some(&json!("inner-1")), "answers without state");
                assert_eq!(params.get("name"), Some(&json!("deploy")));
                check_approval(answer);
            }
            "confirm-delete" => {
                assert_eq!(params.get("name"), Some(&json!("delete_branch")));
                assert_eq!(answer["action"], "accept", "{answer}");
                let content = answer["content"].as_object().expect("content");
                assert_eq!(content.len(), 1, "{answer}");
                assert_eq!(
                    Some(&content["confirm"]),
                    params.get("arguments").and_then(|a| a.get("name")),
                    "a gate answer for another branch"
                );
            }
            _ => panic!("an answer to a question never asked reached the inner service: {key}"),
        }
    }
}

fn check_approval(answer: &Value) {
    let answer = answer.as_object().expect("an answer object");
    match answer.get("action").and_then(Value::as_str) {
        Some("decline" | "cancel") => assert_eq!(answer.len(), 1, "{answer:?}"),
        Some("accept") => {
            assert_eq!(answer.len(), 2, "{answer:?}");
            let content: &Map<String, Value> = answer["content"].as_object().expect("content");
            assert!(content["approve"].is_boolean(), "{answer:?}");
            for (field, value) in content {
                match field.as_str() {
                    "approve" => {}
                    "note" => {
                        let note = value.as_str().expect("a string note");
                        assert!(note.chars().count() <= 200, "a note over 200 characters");
                    }
                    _ => panic!("an unasked field reached the inner service: {field}"),
                }
            }
        }
        _ => panic!("an answer without a valid action reached the inner service: {answer:?}"),
    }
}

/// The JSON-RPC messages of a JSON body or an event stream.
fn messages(body: &[u8]) -> Vec<Value> {
    if let Ok(message) = serde_json::from_slice::<Value>(body) {
        return vec![message];
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}
