//! Smuggling and bypass attempts against `ElicitationLayer`: every way a client might get an
//! unverified `requestState` or answer past the layer, or make it read a request differently
//! from the service behind it. Each case checks what the client gets and what the inner service
//! was given (usually: nothing).

use crate::support;
use crate::support::server;

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;
use tower_elicitation::{ElicitationLayer, Keyring};

use support::{
    Call, FakeMcp, Harness, Reply, Transport, chunked, encode, error_message, layer, post,
    raw_response, result_message,
};

// ---------------------------------------------------------------------------------------------
// The server under attack: asks for approval (its own state `inner-1`), deploys once approved,
// and tells what it was given.

fn approval() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Deploy?",
        "requestedSchema": {"type": "object", "properties": {
            "approve": {"type": "boolean"}, "note": {"type": "string", "maxLength": 200}},
            "required": ["approve"]}}})
}

fn approval_server(params: &Value) -> Value {
    match params["inputResponses"]["approval"]["content"]["approve"].as_bool() {
        Some(true) => {
            json!({"resultType": "complete", "content": [{"type": "text", "text": "Deployed"}],
            "structuredContent": {"inputResponses": params["inputResponses"],
                "requestState": params["requestState"]}})
        }
        _ => json!({"resultType": "input_required", "requestState": "inner-1",
            "inputRequests": {"approval": approval()}}),
    }
}

/// The server behind the layer; a body it cannot parse gets a plain 400.
fn harness() -> Harness {
    Harness::new(
        layer(),
        FakeMcp::new(
            |request| match serde_json::from_slice::<Value>(&request.bytes) {
                Ok(call) => Transport::Json.respond(&result_message(
                    call["id"].clone(),
                    approval_server(&call["params"]),
                )),
                Err(_) => raw_response(StatusCode::BAD_REQUEST, "text/plain", "not JSON"),
            },
        ),
    )
}

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"env": "staging"}))
}

fn approve() -> Value {
    json!({"approval": {"action": "accept", "content": {"approve": true}}})
}

/// A first round; returns the sealed state.
async fn first_round(h: &Harness, call: &Call) -> String {
    let reply = h.call(call).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.bytes);
    reply.state()
}

/// Checks an answer of the layer's own: `status`, JSON-RPC error `code`.
fn refused(reply: &Reply, status: StatusCode, code: i64) {
    assert_eq!(reply.status, status, "{:?}", reply.bytes);
    assert_eq!(reply.content_type(), "application/json");
    assert_eq!(reply.json()["error"]["code"], code, "{}", reply.json());
}

fn invalid_state(reply: &Reply) {
    refused(reply, StatusCode::OK, -32602);
    assert_eq!(
        reply.json()["error"]["message"],
        "Invalid or expired requestState"
    );
}

/// Nothing the inner service was given carries a `requestState` but its own, or answers
/// without it.
fn nothing_unverified_reached(fake: &FakeMcp) {
    for received in fake.received() {
        let Ok(message) = serde_json::from_slice::<Value>(&received.bytes) else {
            continue;
        };
        for message in message.as_array().cloned().unwrap_or(vec![message]) {
            let params = &message["params"];
            let state = &params["requestState"];
            assert!(
                state.is_null() || state == "inner-1",
                "unverified state: {message}"
            );
            if !params["inputResponses"].is_null() {
                assert_eq!(state, "inner-1", "answers without state: {message}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Batches.

/// The token of `deploy`'s first round on `h`, and the text of a valid, approved retry (id 2).
async fn approved_retry(h: &Harness) -> (String, String) {
    let token = first_round(h, &deploy()).await;
    let retry = deploy()
        .id(2)
        .state(&token)
        .answers(approve())
        .body()
        .to_string();
    (token, retry)
}

#[tokio::test]
async fn no_batch_carries_an_mrtr_call_to_the_inner_service() {
    let h = harness();
    let (_, retry) = approved_retry(&h).await;
    let forged = deploy()
        .id(3)
        .state("forged")
        .answers(approve())
        .body()
        .to_string();
    let probe = deploy().id(4).answers(approve()).body().to_string();
    let list = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    let escaped = forged.replace("tools/call", "tools\\u002fcall");
    let slashed = forged.replace("tools/call", "tools\\/call");
    let duplicated = forged.replace(
        r#""method":"tools/call""#,
        r#""method":"tools/list","method":"tools/call""#,
    );
    let resource = r#"{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///a","requestState":"forged"}}"#;
    let prompt = r#"{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"p","inputResponses":{"a":{}}}}"#;
    let unreadable =
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy"},"x":1e400}"#;
    let batches = [
        format!("[{retry}]"),
        format!("[{list},{forged}]"),
        format!("[{forged},{list}]"),
        format!(" \n\t[ {list} , {probe} ]"),
        format!("[{list},{escaped}]"),
        format!("[{list},{slashed}]"),
        format!("[{list},{duplicated}]"),
        format!("[{list},{resource}]"),
        format!("[{list},{prompt}]"),
        format!("[{list},{unreadable}]"),
        format!("[1,\"x\",null,{forged}]"),
    ];
    for batch in &batches {
        let reply = h.send(post(batch.clone())).await;
        refused(&reply, StatusCode::BAD_REQUEST, -32600);
    }
    assert_eq!(h.fake.calls(), 1, "only the first round reached it");

    // A batch with no MRTR method, and a batch nested in a batch (no JSON-RPC server reads
    // one), go to the inner service byte for byte: the layer does not launder them.
    for batch in [
        format!("[{list}]"),
        format!("[[{forged}]]"),
        "[]".to_owned(),
    ] {
        h.send(post(batch.clone())).await;
        assert_eq!(h.fake.last().bytes, batch);
    }
}

// ---------------------------------------------------------------------------------------------
// Duplicated keys, at every level the layer reads.

/// `value` as JSON text, with the object at `path` given `key` a second time (with `dup` as
/// its value), spelled with a `\u` escape when `escaped`.
fn with_duplicate(value: &Value, path: &[&str], key: &str, dup: &Value, escaped: bool) -> String {
    let Value::Object(map) = value else {
        unreachable!("paths lead to objects")
    };
    let mut fields: Vec<String> = map
        .iter()
        .map(|(k, v)| {
            let text = match path.split_first() {
                Some((first, rest)) if first == k => with_duplicate(v, rest, key, dup, escaped),
                _ => v.to_string(),
            };
            format!("{}:{text}", Value::from(k.as_str()))
        })
        .collect();
    if path.is_empty() {
        let spelled = if escaped {
            let mut chars = key.chars();
            let first = chars.next().unwrap();
            format!("\"\\u{:04x}{}\"", first as u32, chars.as_str())
        } else {
            Value::from(key).to_string()
        };
        fields.push(format!("{spelled}:{dup}"));
    }
    format!("{{{}}}", fields.join(","))
}

/// Every object (by path) and key of `body` the layer reads.
fn read_levels(body: &Value) -> Vec<(Vec<String>, String)> {
    let mut levels = Vec::new();
    let paths: [&[&str]; 8] = [
        &[],
        &["params"],
        &["params", "arguments"],
        &["params", "_meta"],
        &[
            "params",
            "_meta",
            "io.modelcontextprotocol/clientCapabilities",
        ],
        &["params", "inputResponses"],
        &["params", "inputResponses", "approval"],
        &["params", "inputResponses", "approval", "content"],
    ];
    for path in paths {
        let object = path.iter().fold(body, |v, k| &v[*k]);
        for key in object.as_object().unwrap().keys() {
            levels.push((path.iter().map(|s| (*s).to_owned()).collect(), key.clone()));
        }
    }
    levels
}

#[tokio::test]
async fn a_duplicated_key_anywhere_the_layer_reads_is_refused() {
    let h = harness();
    let call = deploy().args(json!({"env": "staging", "nested": {"deep": [{"k": 1}]}}));
    let token = first_round(&h, &call).await;
    let retry = call
        .id(2)
        .state(&token)
        .answers(
            json!({"approval": {"action": "accept", "content": {"approve": true, "note": "n"}}}),
        )
        .body();
    let levels = read_levels(&retry);
    assert!(levels.len() > 20, "{levels:?}");
    let mut cases = 0;
    for (path, key) in &levels {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let original = path.iter().fold(&retry, |v, k| &v[*k])[key].clone();
        let others = [
            json!("tools/list"),
            json!(null),
            json!({"approve": true}),
            original,
        ];
        for dup in &others {
            for escaped in [false, true] {
                let body = with_duplicate(&retry, &path, key, dup, escaped);
                let reply = h.send(post(body.clone())).await;
                assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
                assert_eq!(reply.json()["error"]["code"], -32600, "{body}");
                cases += 1;
            }
        }
    }
    // Deeper than the levels above: inside arguments and inside content values.
    for body in [
        retry.to_string().replace(r#"{"k":1}"#, r#"{"k":1,"k":2}"#),
        retry
            .to_string()
            .replace(r#""note":"n""#, r#""note":"n","not\u0065":"m""#),
    ] {
        assert_ne!(body, retry.to_string());
        let reply = h.send(post(body)).await;
        refused(&reply, StatusCode::BAD_REQUEST, -32600);
        cases += 1;
    }
    assert_eq!(
        h.fake.calls(),
        1,
        "{cases} duplicated bodies; none may reach the inner service"
    );
}

// ---------------------------------------------------------------------------------------------
// Mcp-Method / Mcp-Name headers that disagree with the body.

#[tokio::test]
async fn the_layer_reads_the_body_whatever_the_mcp_headers_say() {
    let h = harness();
    // A forged retry dressed up as something harmless.
    let forged = deploy()
        .state("forged")
        .answers(approve())
        .header("mcp-method", "tools/list")
        .header("mcp-name", "list_branches");
    invalid_state(&h.call(&forged).await);
    // Answers without state, dressed up: probed, never forwarded as they are.
    let probe = deploy()
        .answers(approve())
        .header("mcp-method", "ping")
        .header("mcp-name", "");
    let reply = h.call(&probe).await;
    assert_eq!(reply.status, StatusCode::OK);
    // A harmless body dressed up as a call: forwarded as it is, headers and all.
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut request = post(list);
    request
        .headers_mut()
        .insert("mcp-method", "tools/call".parse().unwrap());
    request
        .headers_mut()
        .insert("mcp-name", "deploy".parse().unwrap());
    h.send(request).await;
    let last = h.fake.last();
    assert_eq!(last.bytes, list);
    assert_eq!(last.headers["mcp-method"], "tools/call");
    // A valid token for `deploy` replayed with headers naming another tool: bound to the body's
    // name, which the inner service reads too.
    let token = first_round(&h, &deploy()).await;
    let retry = deploy()
        .id(2)
        .state(&token)
        .answers(approve())
        .header("mcp-name", "delete_branch");
    let reply = h.call(&retry).await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Deployed");
    assert_eq!(h.fake.last().json()["params"]["name"], "deploy");
    nothing_unverified_reached(&h.fake);
}

/// The `deploy` example's router (rmcp inner, JSON responses) and its state.
fn rmcp_router() -> (axum::Router, server::DeployState) {
    let state = server::DeployState::new();
    let keyring = Keyring::new("k1", [7u8; 32]).unwrap();
    let router = server::router_with(ElicitationLayer::new(keyring), state.clone(), true).unwrap();
    (router, state)
}

/// A stateless 2026-07-28 `tools/call deploy {"environment": "staging"}` as rmcp wants it,
/// with `extra` params.
fn rmcp_call(id: u32, extra: Value) -> Value {
    let mut params = json!({"name": "deploy", "arguments": {"environment": "staging"}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "adversarial", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

fn rmcp_answer(approve: Value) -> Value {
    json!({server::APPROVAL_KEY: {"action": "accept", "content": {"approve": approve}}})
}

fn rmcp_request(body: &Value, method: &str, name: Option<&str>) -> Request<axum::body::Body> {
    let mut request = Request::post(server::MCP_PATH)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    request
        .body(axum::body::Body::from(body.to_string()))
        .unwrap()
}

async fn rmcp_send(router: &axum::Router, request: Request<axum::body::Body>) -> Reply {
    Reply::read(router.clone().oneshot(request).await.unwrap()).await
}

#[tokio::test]
async fn rmcp_refuses_headers_that_disagree_and_the_layer_passes_that_on() {
    let (router, state) = rmcp_router();
    let first = rmcp_send(
        &router,
        rmcp_request(&rmcp_call(1, json!({})), "tools/call", Some("deploy")),
    )
    .await;
    let token = first.state();
    let retry = rmcp_call(
        2,
        json!({"requestState": token, "inputResponses": rmcp_answer(json!(true))}),
    );
    for (method, name) in [
        ("tools/list", Some("deploy")),
        ("tools/call", Some("list_branches")),
        ("tools/call", None),
        ("TOOLS/CALL", Some("deploy")),
    ] {
        let reply = rmcp_send(&router, rmcp_request(&retry, method, name)).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{method} {name:?}");
        assert_eq!(reply.json()["error"]["code"], -32020, "{}", reply.json());
    }
    assert_eq!(state.deploys(), 0);
    let reply = rmcp_send(&router, rmcp_request(&retry, "tools/call", Some("deploy"))).await;
    assert_eq!(
        reply.json()["result"]["structuredContent"]["deployed"],
        true
    );
    assert_eq!(state.deploys(), 1);
}

// ---------------------------------------------------------------------------------------------
// Bytes that are not the JSON they seem.

#[tokio::test]
async fn bodies_that_are_not_utf8_json_never_reach_the_inner_service() {
    let h = harness();
    let (token, retry) = approved_retry(&h).await;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"X"}}"#;
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for bad in [
        &b"\xff"[..],
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\x80",
    ] {
        let mut with = |text: &str, marker: &str| {
            let at = text.find(marker).unwrap();
            let mut body = text.as_bytes()[..at].to_vec();
            body.extend_from_slice(bad);
            body.extend_from_slice(&text.as_bytes()[at..]);
            bodies.push(body);
        };
        with(&retry, "staging");
        with(&retry, "v1.k1.");
        with(list, "X");
    }
    // UTF-16 with a byte order mark, and UTF-8 with one.
    let utf16: Vec<u8> = std::iter::once(0xFEFFu16)
        .chain(retry.encode_utf16())
        .flat_map(u16::to_le_bytes)
        .collect();
    bodies.push(utf16);
    bodies.push([&b"\xef\xbb\xbf"[..], retry.as_bytes()].concat());
    for body in bodies {
        let reply = h.send(post(body.clone())).await;
        refused(&reply, StatusCode::BAD_REQUEST, -32700);
    }
    assert_eq!(h.fake.calls(), 1);

    // Lone surrogates, escaped: valid JSON text, no valid string.
    for (field, value) in [
        ("requestState", json!("\\ud800")),
        ("arguments", json!({"env": "\\udfff"})),
    ] {
        let body = deploy().id(3).state(&token).answers(approve()).body();
        let mut text = body.to_string();
        let original = body["params"][field].to_string();
        let raw = value.to_string().replace("\\\\", "\\");
        text = text.replacen(&original, &raw, 1);
        let reply = h.send(post(text)).await;
        assert!(reply.json()["error"].is_object(), "{}", reply.json());
    }
    assert_eq!(h.fake.calls(), 1);
    nothing_unverified_reached(&h.fake);
}

#[tokio::test]
async fn deeply_nested_json_is_refused_without_overflowing_the_stack() {
    let h = harness();
    let token = first_round(&h, &deploy()).await;
    for depth in [129, 10_000, 500_000] {
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let deep_object = format!("{}{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        for (name, nested) in [("array", &deep), ("object", &deep_object)] {
            let mrtr = [
                deploy()
                    .id(2)
                    .body()
                    .to_string()
                    .replace(r#"{"env":"staging"}"#, &format!(r#"{{"env":{nested}}}"#)),
                deploy()
                    .id(3)
                    .state(&token)
                    .answers(approve())
                    .body()
                    .to_string()
                    .replace(r#"{"approve":true}"#, &format!(r#"{{"approve":{nested}}}"#)),
            ];
            for body in mrtr {
                let reply = h.send(post(body)).await;
                assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{name} {depth}");
                assert!(reply.json()["error"].is_object());
            }
            // Other messages: refused, or passed on byte for byte for the inner service to judge.
            for body in [
                format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{nested}}}"#),
                format!("[{nested}]"),
            ] {
                let before = h.fake.calls();
                let reply = h.send(post(body.clone())).await;
                if h.fake.calls() == before {
                    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{name} {depth}");
                } else {
                    assert_eq!(h.fake.last().bytes, body);
                }
            }
        }
    }
    nothing_unverified_reached(&h.fake);
}

/// Numbers beyond `f64` are refused where the layer must read them (answers), and passed on
/// exactly as written where it only binds them (arguments): the inner service judges those.
#[tokio::test]
async fn numbers_json_cannot_represent_are_refused_in_answers_and_kept_in_arguments() {
    let h = harness();
    let token = first_round(&h, &deploy()).await;
    for number in ["1e400", "-1e400", "1e999999999999"] {
        let in_arguments = deploy()
            .id(2)
            .body()
            .to_string()
            .replace(r#""staging""#, number);
        h.send(post(in_arguments.clone())).await;
        assert_eq!(h.fake.last().bytes, in_arguments);

        let calls = h.fake.calls();
        let in_answers = deploy()
            .id(3)
            .state(&token)
            .answers(approve())
            .body()
            .to_string()
            .replace(r#"{"approve":true}"#, &format!(r#"{{"approve":{number}}}"#));
        let reply = h.send(post(in_answers)).await;
        refused(&reply, StatusCode::BAD_REQUEST, -32600);
        assert_eq!(h.fake.calls(), calls);
    }
}

/// A token minted for one set of arguments must not open for arguments that differ, even
/// when they differ only beyond what an `f64` can tell apart: the inner service gets the
/// original bytes, and a server with exact numbers (Python's `int`, `Decimal`, JavaScript's
/// `BigInt` parsers, serde_json's `arbitrary_precision`) reads them as different values.
#[tokio::test]
async fn arguments_that_differ_beyond_f64_precision_are_not_the_same_call() {
    for (minted, replayed) in [
        ("18446744073709551616", "18446744073709551617"),
        ("100000000000000000000000", "100000000000000000000001"),
        ("0.1", "0.10000000000000001"),
        ("9007199254740993.0", "9007199254740992.0"),
        ("-9223372036854775809", "-9223372036854775810"),
    ] {
        let h = harness();
        let call = |id: u32, amount: &str, extra: Option<(&str, Value)>| {
            let mut call = deploy().id(id);
            if let Some((state, answers)) = extra {
                call = call.state(state).answers(answers);
            }
            call.body()
                .to_string()
                .replace(r#"{"env":"staging"}"#, &format!(r#"{{"amount":{amount}}}"#))
        };
        let first = h.send(post(call(1, minted, None))).await;
        let token = first.state();
        let reply = h
            .send(post(call(2, replayed, Some((&token, approve())))))
            .await;
        let forwarded = h.fake.last().bytes;
        assert!(
            reply.json()["error"]["message"] == "Invalid or expired requestState",
            "a token minted for {minted} opened for {replayed}; the inner service got {:?}",
            String::from_utf8_lossy(&forwarded)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sizes.

#[tokio::test]
async fn huge_keys_and_names_are_bounded_and_never_echoed_into_state() {
    let h = harness();
    let key = "k".repeat(1 << 20);
    // A huge unknown argument key: bound by digest, so the token stays small.
    let call = deploy().args(json!({"env": "staging", key.clone(): 1}));
    let token = first_round(&h, &call).await;
    assert!(token.len() < 2048, "{}", token.len());
    // Huge unknown keys in inputResponses and in content: dropped before the inner service.
    let answers = json!({"approval": {"action": "accept", "content": {"approve": true, key.clone(): 1}},
        key.clone(): {"action": "accept"}});
    let reply = h
        .call(&call.clone().id(2).state(&token).answers(answers))
        .await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Deployed");
    let forwarded = h.fake.last();
    assert!(
        forwarded.bytes.len() < (1 << 20) + 4096,
        "only the argument key"
    );
    assert_eq!(
        forwarded.json()["params"]["inputResponses"],
        json!({"approval": {"action": "accept", "content": {"approve": true}}})
    );
    // A tool name too long to bind within the state bound: the layer cannot seal, so it fails
    // closed with an internal error rather than pass an unsealed state on.
    let long = "t".repeat(100_000);
    let reply = h.call(&Call::tool(&long).args(json!({}))).await;
    assert_eq!(
        reply.json(),
        error_message(1, -32603, "Internal error", None)
    );
    nothing_unverified_reached(&h.fake);
}

#[tokio::test]
async fn request_states_of_several_mib_are_refused_before_decoding() {
    let h = harness();
    for size in [65 * 1024, 3 << 20] {
        let state = format!("v1.k1.{}.{}", "A".repeat(size), "B".repeat(43));
        invalid_state(&h.call(&deploy().state(&state).answers(approve())).await);
    }
    let reply = h.call(&deploy().state(&"A".repeat(5 << 20))).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(h.fake.calls(), 0);
}

#[tokio::test]
async fn thousands_of_input_responses_reduce_to_the_asked_ones() {
    let h = harness();
    let token = first_round(&h, &deploy()).await;
    let mut answers = serde_json::Map::new();
    for i in 0..20_000 {
        answers.insert(
            format!("k{i}"),
            json!({"action": "accept", "content": {"approve": true}}),
        );
    }
    answers.insert(
        "approval".into(),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let many = Value::Object(answers);
    let reply = h
        .call(&deploy().id(2).state(&token).answers(many.clone()))
        .await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Deployed");
    assert_eq!(h.fake.last().json()["params"]["inputResponses"], approve());
    // Without state: probed without them, then forwarded with the one that answers.
    let reply = h.call(&deploy().id(3).answers(many)).await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Deployed");
    let bodies = h.fake.bodies();
    let probe = &bodies[bodies.len() - 2];
    assert!(probe["params"].get("inputResponses").is_none());
    assert_eq!(
        bodies.last().unwrap()["params"]["inputResponses"],
        approve()
    );
    nothing_unverified_reached(&h.fake);
}

// ---------------------------------------------------------------------------------------------
// Framing: encodings, chunking, methods.

/// `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy","arguments":{}}}`,
/// gzip-compressed.
const GZIPPED_CALL: [u8; 100] = [
    31, 139, 8, 0, 0, 0, 0, 0, 2, 3, 29, 138, 75, 14, 128, 32, 12, 5, 175, 98, 186, 54, 254, 150,
    222, 166, 129, 198, 79, 90, 74, 0, 23, 134, 112, 119, 169, 187, 55, 111, 166, 194, 157, 53,
    164, 232, 96, 31, 96, 155, 22, 24, 7, 184, 124, 135, 181, 15, 161, 114, 170, 1, 20, 85, 206,
    179, 67, 102, 11, 34, 38, 148, 220, 255, 10, 1, 133, 44, 240, 20, 89, 95, 147, 152, 142, 71,
    40, 148, 223, 183, 214, 62, 181, 180, 211, 131, 98, 0, 0, 0,
];

#[tokio::test]
async fn content_encoded_bodies_are_never_read_or_forwarded() {
    let h = harness();
    for encodings in [
        &["gzip"][..],
        &["GZIP"],
        &["br"],
        &["deflate"],
        &["gzip, identity"],
        &["identity, gzip"],
        &[""],
        &["gzip", "identity"],
    ] {
        let mut request = post(Bytes::from_static(&GZIPPED_CALL));
        for encoding in encodings {
            request
                .headers_mut()
                .append(header::CONTENT_ENCODING, encoding.parse().unwrap());
        }
        let reply = h.send(request).await;
        refused(&reply, StatusCode::UNSUPPORTED_MEDIA_TYPE, -32600);
    }
    // `identity` first and then `gzip`: the layer reads the bytes as they are, which are no
    // JSON, and refuses them.
    let mut request = post(Bytes::from_static(&GZIPPED_CALL));
    for encoding in ["identity", "gzip"] {
        request
            .headers_mut()
            .append(header::CONTENT_ENCODING, encoding.parse().unwrap());
    }
    refused(&h.send(request).await, StatusCode::BAD_REQUEST, -32700);
    assert_eq!(h.fake.calls(), 0);
}

#[tokio::test]
async fn chunked_bodies_without_content_length_are_reframed() {
    let h = harness();
    let token = first_round(&h, &deploy()).await;
    let body = encode(&deploy().id(2).state(&token).answers(approve()).body());
    let mut request = post(Bytes::new());
    *request.body_mut() = chunked(body.chunks(3).map(Bytes::copy_from_slice));
    request
        .headers_mut()
        .insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
    let reply = h.send(request).await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "Deployed");
    let forwarded = h.fake.last();
    // The support fake checks that Content-Length matches the body it read.
    assert!(forwarded.headers.get(header::TRANSFER_ENCODING).is_none());
    assert_eq!(
        forwarded.headers[header::CONTENT_LENGTH],
        forwarded.bytes.len().to_string().as_str()
    );
}

/// A raw HTTP/1.1 exchange with a server on loopback; the response as status and body.
async fn raw_http(addr: std::net::SocketAddr, request: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let mut body = response[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        loop {
            let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(&rest[line + 2..line + 2 + size]);
            rest = &rest[line + 4 + size..];
        }
        body = decoded;
    }
    (status, body)
}

fn chunked_post(addr: std::net::SocketAddr, body: &[u8], name: &str, piece: usize) -> Vec<u8> {
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {name}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.chunks(piece) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    request
}

#[tokio::test]
async fn a_whole_flow_over_a_real_socket_with_chunked_bodies() {
    let (router, state) = rmcp_router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let first = encode(&rmcp_call(1, json!({})));
    let (status, body) = raw_http(addr, &chunked_post(addr, &first, "deploy", 7)).await;
    assert_eq!(status, 200);
    let first: Value = serde_json::from_slice(&body).unwrap();
    let token = first["result"]["requestState"].as_str().unwrap().to_owned();

    let wrong = rmcp_call(
        2,
        json!({"requestState": token, "inputResponses": rmcp_answer(json!("yes"))}),
    );
    let (status, body) = raw_http(addr, &chunked_post(addr, &encode(&wrong), "deploy", 1)).await;
    assert_eq!(status, 200);
    let reask: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reask["result"]["resultType"], "input_required", "{reask}");
    let token = reask["result"]["requestState"].as_str().unwrap().to_owned();

    let right = encode(&rmcp_call(
        3,
        json!({"requestState": token, "inputResponses": rmcp_answer(json!(true))}),
    ));
    let (status, body) = raw_http(addr, &chunked_post(addr, &right, "deploy", 64)).await;
    assert_eq!(status, 200);
    let done: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        done["result"]["structuredContent"]["deployed"], true,
        "{done}"
    );
    assert_eq!(state.deploys(), 1);

    // Both framings at once (the classic smuggling shape): never a second request.
    let mut both = chunked_post(addr, &right, "deploy", 64);
    let at = both.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    both.splice(at..at, b"\r\nContent-Length: 5".iter().copied());
    let (status, _) = raw_http(addr, &both).await;
    assert!(status == 400 || status == 200, "{status}");
    assert!(state.deploys() <= 2);
    server.abort();
}

/// MCP's Streamable HTTP carries JSON-RPC in POSTs, but an inner service that never looks at
/// the HTTP method (a `service_fn` like the crate docs' example) would run it from a `PUT`, a
/// `PATCH` or a lowercase `post` just the same: those bodies get the same inspection.
#[tokio::test]
async fn json_rpc_in_another_http_method_is_not_a_way_around_the_layer() {
    let h = harness();
    for method in ["GET", "PUT", "PATCH", "post", "DELETE"] {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        // A forged state is refused as in a POST.
        let mut request = deploy().state("forged").answers(approve()).request();
        *request.method_mut() = method.clone();
        let reply = h.send(request).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        assert_eq!(
            reply.json()["error"]["message"],
            "Invalid or expired requestState",
            "{method}"
        );
        // Answers without a state are probed and validated as in a POST.
        let mut request = deploy().answers(approve()).request();
        *request.method_mut() = method.clone();
        let reply = h.send(request).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        let result = &reply.json()["result"];
        assert_eq!(result["resultType"], "complete", "{method}: {result}");
        assert_eq!(
            result["structuredContent"]["requestState"], "inner-1",
            "{method}: the inner service got its own state back"
        );
        // A body the strict reader cannot read is refused, never forwarded unread.
        let mut body = deploy().body().to_string().into_bytes();
        body.splice(1..1, br#""id":9,"#.iter().copied());
        let mut request = support::post(body);
        *request.method_mut() = method.clone();
        refused(&h.send(request).await, StatusCode::BAD_REQUEST, -32600);
    }
    nothing_unverified_reached(&h.fake);
}
