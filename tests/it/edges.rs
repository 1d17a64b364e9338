//! The layer's edges, tried as an attacker would: no call gets past a gate or out unsealed,
//! whatever the HTTP method, the body's spelling, the response's encoding or how long the inner
//! service takes.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode, header};
use serde_json::{Value, json};
use support::{
    Call, FakeMcp, Harness, Received, Reply, Transport, chunked, full, layer, post, raw_response,
    result_message, sse_event, sse_response,
};
use tower::ServiceBuilder;
use tower_elicitation::{ElicitationLayer, Gate, GateTarget};

// ---------------------------------------------------------------------------------------------
// 1. Any HTTP method, any spelling of the body.

/// What a lenient handler makes of a body: it ignores the HTTP method, replaces invalid UTF-8,
/// skips a BOM and comments, reads the first value and ignores what follows, and keeps the last
/// of a repeated key (as serde_json, axum's `Json` and many hand-written handlers do).
fn lenient(bytes: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(bytes);
    let text = strip_comments(text.trim_start_matches('\u{feff}'));
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .next()?
        .ok()
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// A server that deletes a branch whenever a lenient reading of a body asks it to, and counts
/// the deletions made without the gate's accepted answer.
#[derive(Clone, Default)]
struct LenientServer {
    unapproved: Arc<AtomicUsize>,
    approved: Arc<AtomicUsize>,
}

impl LenientServer {
    fn fake(&self) -> FakeMcp {
        let server = self.clone();
        FakeMcp::new(move |received: &Received| {
            let Some(call) = lenient(&received.bytes) else {
                return raw_response(StatusCode::BAD_REQUEST, "text/plain", "not JSON");
            };
            let params = &call["params"];
            if call["method"] == "tools/call" && params["name"] == "delete_branch" {
                let answer = &params["inputResponses"]["confirm-delete"];
                if answer["action"] == "accept" && answer["content"]["confirm"] == "dev" {
                    server.approved.fetch_add(1, Ordering::SeqCst);
                } else {
                    server.unapproved.fetch_add(1, Ordering::SeqCst);
                }
            }
            let result = json!({"resultType": "complete",
                "content": [{"type": "text", "text": "done"}]});
            Transport::Json.respond(&result_message(call["id"].clone(), result))
        })
    }
}

fn gated() -> ElicitationLayer {
    let confirm = Gate::form(
        "confirm-delete",
        json!({
            "type": "object",
            "properties": {"confirm": {"type": "string", "title": "Branch name"}},
            "required": ["confirm"]
        }),
    )
    .unwrap()
    .require(|content, call| content.get("confirm") == call.argument("name"));
    layer()
        .gate(GateTarget::tool("delete_branch"), confirm)
        .unwrap()
}

fn delete_dev() -> Call {
    Call::tool("delete_branch").args(json!({"name": "dev"}))
}

/// Spellings of `delete_branch {name: "dev"}` that a strict reader cannot read, each of which a
/// lenient handler reads as that call.
fn unreadable_spellings() -> Vec<(&'static str, Vec<u8>)> {
    let base = delete_dev().body().to_string();
    let after_brace = &base[1..];
    let mut invalid_utf8 = b"{\"x\":\"\xff\",".to_vec();
    invalid_utf8.extend_from_slice(after_brace.as_bytes());
    let with_name = |replacement: &str| base.replace(r#""name":"delete_branch""#, replacement);
    let with_args = |replacement: &str| base.replace(r#""arguments":{"name":"dev"}"#, replacement);
    let spellings = vec![
        (
            "a repeated id",
            format!(r#"{{"id":2,{after_brace}"#).into_bytes(),
        ),
        (
            "a repeated method",
            format!(r#"{{"method":"tools/list",{after_brace}"#).into_bytes(),
        ),
        (
            "a repeated params",
            format!(r#"{{"params":{{"name":"list_branches"}},{after_brace}"#).into_bytes(),
        ),
        (
            "a repeated name",
            with_name(r#""name":"list_branches","name":"delete_branch""#).into_bytes(),
        ),
        (
            "a repeated arguments",
            with_args(r#""arguments":{},"arguments":{"name":"dev"}"#).into_bytes(),
        ),
        (
            "a repeated key inside arguments",
            with_args(r#""arguments":{"name":"main","name":"dev"}"#).into_bytes(),
        ),
        ("trailing bytes", format!("{base} trailing").into_bytes()),
        (
            "a second object",
            format!(r#"{base}{{"id":3}}"#).into_bytes(),
        ),
        ("invalid UTF-8", invalid_utf8),
        ("a BOM", format!("\u{feff}{base}").into_bytes()),
        (
            "a block comment",
            format!("{{/* c */{after_brace}").into_bytes(),
        ),
        (
            "a line comment",
            format!("{{// c\n{after_brace}").into_bytes(),
        ),
    ];
    for (what, body) in &spellings {
        let read = lenient(body).unwrap_or_else(|| panic!("{what}: the lenient reader fails"));
        assert_eq!(read["params"]["name"], "delete_branch", "{what}");
        assert_eq!(read["method"], "tools/call", "{what}");
    }
    spellings
}

const METHODS: [Method; 5] = [
    Method::GET,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::POST,
];

fn in_method(
    method: &Method,
    mut request: http::Request<support::Body>,
) -> http::Request<support::Body> {
    *request.method_mut() = method.clone();
    request
}

#[tokio::test]
async fn no_spelling_in_any_http_method_reaches_a_gated_tool() {
    let server = LenientServer::default();
    let h = Harness::new(gated(), server.fake());
    for method in &METHODS {
        for (what, body) in unreadable_spellings() {
            let reply = h.send(in_method(method, post(body))).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{method} {what}");
            let code = reply.json()["error"]["code"].as_i64();
            assert!(
                matches!(code, Some(-32700 | -32600)),
                "{method} {what}: {}",
                reply.json()
            );
        }

        // A readable body split across frames is read whole, and the gate asks.
        let body = delete_dev().body().to_string().into_bytes();
        let frames = body.chunks(7).map(Bytes::copy_from_slice);
        let mut request = post(Bytes::new());
        *request.body_mut() = chunked(frames);
        let reply = h.send(in_method(method, request)).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        let result = &reply.json()["result"];
        assert_eq!(result["resultType"], "input_required", "{method}: {result}");
        assert!(
            result["inputRequests"]["confirm-delete"].is_object(),
            "{result}"
        );

        // A forged answer without a state never passes the gate.
        let forged = delete_dev().answers(json!({"confirm-delete": {"action": "accept",
            "content": {"confirm": "dev"}}}));
        let reply = h.send(in_method(method, forged.request())).await;
        assert_eq!(
            reply.json()["result"]["resultType"],
            "input_required",
            "{method}"
        );
    }
    assert_eq!(server.unapproved.load(Ordering::SeqCst), 0);
    assert_eq!(server.approved.load(Ordering::SeqCst), 0);

    // The server does count: the gate, answered, lets the call through once.
    let state = h.call(&delete_dev()).await.state();
    let answered = delete_dev()
        .state(&state)
        .answers(json!({"confirm-delete": {
        "action": "accept", "content": {"confirm": "dev"}}}));
    let reply = h.call(&answered).await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "done");
    assert_eq!(server.approved.load(Ordering::SeqCst), 1);
    assert_eq!(server.unapproved.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_body_that_names_no_mrtr_method_passes_untouched_in_every_method() {
    let server = LenientServer::default();
    let h = Harness::new(gated(), server.fake());
    for method in &METHODS {
        let body = r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"} trailing"#;
        let reply = h.send(in_method(method, post(body))).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}");
        assert_eq!(h.fake.last().bytes, body, "{method}");
        assert_eq!(h.fake.last().method, method, "{method}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Response encodings.

/// What the inner service asks: a form, with its own state.
fn asks() -> Value {
    json!({"resultType": "input_required", "requestState": "inner-raw-state",
        "inputRequests": {"approval": {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Deploy to staging?",
            "requestedSchema": {"type": "object",
                "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}}}}})
}

fn asking() -> FakeMcp {
    FakeMcp::new(|received: &Received| {
        let call = received.json();
        let result = if call["method"] == "tools/call" {
            asks()
        } else {
            json!({"tools": [{"name": "deploy", "description": "x".repeat(200),
                "inputSchema": {"type": "object"}}]})
        };
        Transport::Json.respond(&result_message(call["id"].clone(), result))
    })
}

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"environment": "staging"}))
}

#[tokio::test]
async fn compression_inside_the_layer_never_sends_an_unsealed_input_required() {
    let fake = asking();
    let service = ServiceBuilder::new()
        .layer(layer())
        .layer(tower_http::compression::CompressionLayer::new())
        .service(fake.service::<support::Body>());
    let gzip = |call: Call| call.header("accept-encoding", "gzip").request();

    let reply = support::send(service.clone(), gzip(deploy())).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(!reply.headers.contains_key(header::CONTENT_ENCODING));
    let state = reply.state();
    assert!(state.starts_with("v1.k1."), "{state}");
    assert_eq!(
        fake.last().headers[header::ACCEPT_ENCODING],
        "identity",
        "the layer asked the inner service for an unencoded answer"
    );

    // The capability check holds too.
    let no_url = deploy().caps(json!({"elicitation": {"url": {}}}));
    let reply = support::send(service.clone(), gzip(no_url)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()["error"]["code"], -32021);

    // Other methods are untouched: compressed as the client asked.
    let list = Call::new("tools/list", json!({})).header("accept-encoding", "gzip");
    let reply = support::send(service, list.request()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers[header::CONTENT_ENCODING], "gzip");
    assert_eq!(fake.last().headers[header::ACCEPT_ENCODING], "gzip");
}

type MakeResponse = dyn Fn() -> http::Response<support::Body> + Send + Sync;

/// A response the layer cannot read: it fails closed, and the raw state never leaves.
fn fails_closed(reply: &Reply, what: &str) {
    let text = String::from_utf8_lossy(&reply.bytes);
    assert!(!text.contains("inner-raw-state"), "{what}: {text}");
    assert!(
        !reply.headers.contains_key(header::CONTENT_ENCODING),
        "{what}"
    );
    assert_eq!(reply.json()["error"]["code"], -32603, "{what}: {text}");
    assert_eq!(reply.json()["id"], 1, "{what}: {text}");
}

#[tokio::test]
async fn an_answer_the_layer_cannot_read_fails_closed() {
    let message = || serde_json::to_vec(&result_message(1, asks())).unwrap();
    let cases: Vec<(&str, Box<MakeResponse>)> = vec![
        (
            "gzip despite identity",
            Box::new(move || {
                let mut response = raw_response(StatusCode::OK, "application/json", message());
                response
                    .headers_mut()
                    .insert(header::CONTENT_ENCODING, "gzip".parse().unwrap());
                response
            }),
        ),
        (
            "an encoded event stream",
            Box::new(move || {
                let event = sse_event(1, &result_message(1, asks()));
                let mut response = sse_response(full(event));
                response
                    .headers_mut()
                    .insert(header::CONTENT_ENCODING, "br".parse().unwrap());
                response
            }),
        ),
        (
            "an unknown type",
            Box::new(move || raw_response(StatusCode::OK, "text/plain", message())),
        ),
        (
            "no type",
            Box::new(move || {
                http::Response::builder()
                    .body(full(message()))
                    .expect("a response")
            }),
        ),
    ];
    for (what, respond) in cases {
        let respond = Arc::new(respond);
        let fake = FakeMcp::new(move |_: &Received| respond());
        let h = Harness::new(layer(), fake);
        // A first call, and a probe (answers without a state).
        fails_closed(&h.call(&deploy()).await, what);
        let probe = deploy().answers(json!({"approval": {"action": "accept",
            "content": {"approve": true}}}));
        fails_closed(&h.call(&probe).await, what);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. A token is dated when it is sealed.

#[tokio::test]
async fn a_token_sealed_after_a_long_stream_is_dated_when_it_is_sealed() {
    const SLOW: Duration = Duration::from_secs(3);
    let ttl = Duration::from_secs(2);
    let slow = |transport: Transport| {
        FakeMcp::new(move |received: &Received| {
            let call = received.json();
            let id = call["id"].clone();
            let answered =
                call["params"]["inputResponses"]["approval"]["content"]["approve"] == json!(true);
            if answered {
                let done = json!({"resultType": "complete",
                    "content": [{"type": "text", "text": "Deployed"}]});
                return Transport::Json.respond(&result_message(id, done));
            }
            let message = result_message(id, asks());
            match transport {
                Transport::Json => {
                    // The handler works for longer than the token lives, then asks.
                    let body = futures_util::stream::once(async move {
                        tokio::time::sleep(SLOW).await;
                        Ok(http_body::Frame::data(support::encode(&message)))
                    });
                    let mut response = raw_response(StatusCode::OK, "application/json", "");
                    *response.body_mut() = http_body_util::BodyExt::boxed_unsync(
                        http_body_util::StreamBody::new(body),
                    );
                    response
                }
                _ => {
                    // Progress first, then the question, long after the request arrived.
                    let events = futures_util::stream::iter([0u8, 1]).then(move |n| {
                        let message = message.clone();
                        async move {
                            if n == 0 {
                                Ok(http_body::Frame::data(support::progress_event()))
                            } else {
                                tokio::time::sleep(SLOW).await;
                                Ok(http_body::Frame::data(sse_event(2, &message)))
                            }
                        }
                    });
                    sse_response(http_body_util::BodyExt::boxed_unsync(
                        http_body_util::StreamBody::new(events),
                    ))
                }
            }
        })
    };
    let run = |transport: Transport| async move {
        let h = Harness::new(layer().ttl(ttl).clock_skew(Duration::ZERO), slow(transport));
        let reply = h.call(&deploy()).await;
        let state = match transport {
            Transport::Json => reply.state(),
            _ => {
                let events = reply.events();
                let last = support::event_data(events.last().expect("an event"));
                last["result"]["requestState"]
                    .as_str()
                    .expect("a sealed state")
                    .to_owned()
            }
        };
        let retry = deploy()
            .state(&state)
            .answers(json!({"approval": {"action": "accept",
            "content": {"approve": true}}}));
        let reply = h.call(&retry).await;
        assert_eq!(
            reply.json()["result"]["content"][0]["text"],
            "Deployed",
            "{transport:?}: {}",
            reply.json()
        );
    };
    use futures_util::StreamExt;
    tokio::join!(run(Transport::Json), run(Transport::Sse));
}

// ---------------------------------------------------------------------------------------------
// 5. Whether a tool is gated never changes which arguments are accepted, nor their bytes.

/// A `tools/call` written by hand, so that its arguments keep numbers no `f64` can hold.
fn hand_written(id: u32, name: &str, arguments: &str, extra: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments},{extra}"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{"form":{{}}}}}}}}}}}}"#
    )
    .into_bytes()
}

/// The text of `params.arguments` in a body the inner service received.
fn arguments_text(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        arguments: &'a serde_json::value::RawValue,
    }
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    let text = std::str::from_utf8(body).expect("UTF-8");
    let message: Message<'_> = serde_json::from_str(text).expect("a call");
    message.params.arguments.get().to_owned()
}

fn approving() -> Gate {
    Gate::form(
        "approval",
        json!({"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}),
    )
    .unwrap()
    .require(|content, _| content.get("approve") == Some(&json!(true)))
}

#[tokio::test]
async fn gated_and_ungated_tools_accept_the_same_arguments_and_get_their_bytes() {
    let fake = FakeMcp::new(|received: &Received| {
        #[derive(serde::Deserialize)]
        struct Id {
            id: Value,
        }
        let id = serde_json::from_slice::<Id>(&received.bytes)
            .expect("an id")
            .id;
        let done = json!({"resultType": "complete", "content": [{"type": "text", "text": "ok"}]});
        Transport::Json.respond(&result_message(id, done))
    });
    let layer = layer()
        .gate(GateTarget::tool("gated"), approving())
        .unwrap()
        .gate(
            GateTarget::tool("injected"),
            approving().inject_as("approval"),
        )
        .unwrap();
    let h = Harness::new(layer, fake);
    // The second has only numbers serde_json can read (lossily).
    for (arguments, injected) in [
        (
            r#"{"count": 18446744073709551617, "x":1e400,"approval" : "client-sent" , "tail":[1.50, -0.0]}"#,
            r#"{"count": 18446744073709551617, "x":1e400,"tail":[1.50, -0.0],"approval":{"approve":true}}"#,
        ),
        (
            r#"{ "approval":"client-sent", "count":18446744073709551617 }"#,
            r#"{ "count":18446744073709551617 ,"approval":{"approve":true}}"#,
        ),
    ] {
        sends_as_sent(&h, arguments, injected).await;
    }
}

async fn sends_as_sent(h: &Harness, arguments: &str, injected: &str) {
    // Ungated: forwarded as sent.
    let reply = h.send(post(hand_written(1, "plain", arguments, ""))).await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "ok");
    assert_eq!(arguments_text(&h.fake.last().bytes), arguments);

    for tool in ["gated", "injected"] {
        // Gated: the same arguments are accepted, and the gate asks.
        let reply = h.send(post(hand_written(1, tool, arguments, ""))).await;
        assert_eq!(reply.status, StatusCode::OK, "{tool}: {:?}", reply.bytes);
        let state = reply.state();
        let answer =
            r#""inputResponses":{"approval":{"action":"accept","content":{"approve":true}}},"#;
        let extra = format!(r#""requestState":"{state}",{answer}"#);
        let reply = h.send(post(hand_written(2, tool, arguments, &extra))).await;
        assert_eq!(reply.json()["result"]["content"][0]["text"], "ok", "{tool}");
        let received = arguments_text(&h.fake.last().bytes);
        if tool == "gated" {
            assert_eq!(received, arguments, "{tool}");
        } else {
            // Byte for byte, but for the injected member.
            assert_eq!(received, injected);
        }
    }
}
