//! The legacy bridge end to end, over real TCP: a hand-written 2025-era client (reqwest) against
//! `LegacyBridgeLayer → ElicitationLayer → a hand-written 2026-07-28 MRTR server` on 127.0.0.1:0.

use crate::support::legacy_stream;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use legacy_stream::{Events, WAIT, result_text};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::store::{
    AnswerKey, MemoryPendingAnswers, MemorySessionStore, PendingAnswers, SessionRecord,
    SessionStore, StoreError,
};
use tower_elicitation::{ElicitationLayer, Keyring, RequestBody};

// ---- the inner 2026-07-28 server ----

/// What the inner server saw.
#[derive(Clone, Default)]
struct Seen {
    /// `tools/call` requests that reached it.
    calls: Arc<AtomicUsize>,
    /// Whether the `url_slow` flow has completed (out of band, as a browser would).
    flow_done: Arc<std::sync::atomic::AtomicBool>,
    /// `tools/list` requests that reached it.
    lists: Arc<AtomicUsize>,
    /// Whether `regional` declares its header argument only from the second `tools/list` on (a
    /// server whose tools changed).
    regional_late: Arc<std::sync::atomic::AtomicBool>,
}

fn approval_form() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Approve?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}}})
}

/// A tool with an argument declared as a header.
fn regional() -> Value {
    json!({"name": "regional", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}})
}

fn input_required(key: &str, request: Value) -> Value {
    json!({"resultType": "input_required", "inputRequests": {key: request}})
}

fn text(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}]})
}

/// The inner's answer to one 2026 request.
fn answer(seen: &Seen, headers: &http::HeaderMap, message: &Value) -> Value {
    let params = &message["params"];
    let meta = &params["_meta"];
    let answers = &params["inputResponses"];
    match message["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}, "logging": {}},
            "instructions": "Test tools.", "ttlMs": 0, "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "inner-2026", "version": "9.9"}}}),
        "prompts/get" => match answers["context"]["action"].as_str() {
            None => input_required("context", approval_form()),
            Some(_) => json!({"resultType": "complete", "messages": []}),
        },
        "tools/list" => {
            let first = seen.lists.fetch_add(1, Ordering::SeqCst) == 0;
            let mut regional = regional();
            if first && seen.regional_late.load(Ordering::SeqCst) {
                regional["inputSchema"]["properties"]["region"] = json!({"type": "string"});
            }
            json!({"resultType": "complete", "ttlMs": 1000, "cacheScope": "public",
                "tools": [{"name": "ask", "inputSchema": {"type": "object"}}, regional]})
        }
        "tools/call" => {
            seen.calls.fetch_add(1, Ordering::SeqCst);
            match params["name"].as_str().unwrap_or_default() {
                "ask" => match answers["approval"]["action"].as_str() {
                    None => input_required("approval", approval_form()),
                    Some("accept") if answers["approval"]["content"]["approve"] == true => {
                        text("approved")
                    }
                    Some(_) => text("not approved"),
                },
                "loop" => input_required("approval", approval_form()),
                "url_slow" => match answers["flow"]["action"].as_str() {
                    Some("accept") if seen.flow_done.load(Ordering::SeqCst) => text("flow done"),
                    _ => input_required(
                        "flow",
                        json!({"method": "elicitation/create",
                        "params": {"mode": "url", "message": "Sign in", "url": "https://example.com/slow"}}),
                    ),
                },
                "two" => match answers["roots"]["roots"].as_array() {
                    None => json!({"resultType": "input_required", "inputRequests": {
                        "approval": approval_form(), "roots": {"method": "roots/list"}}}),
                    Some(_) => text("two answered"),
                },
                "url" => match answers["flow"]["action"].as_str() {
                    None => input_required(
                        "flow",
                        json!({"method": "elicitation/create",
                        "params": {"mode": "url", "message": "Sign in", "url": "https://example.com/flow"}}),
                    ),
                    Some(_) => text("flow done"),
                },
                "pick" => match answers["pick"]["action"].as_str() {
                    None => input_required(
                        "pick",
                        json!({"method": "elicitation/create",
                        "params": {"mode": "form", "message": "Pick", "requestedSchema": {
                            "type": "object", "properties": {"color": {"type": "string",
                                "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]}},
                            "required": ["color"]}}}),
                    ),
                    Some(_) => text("picked"),
                },
                // As a 2026 server checks an `x-mcp-header` argument (SEP-2243).
                "regional" => {
                    let region = params["arguments"]["region"].as_str();
                    let header = headers
                        .get("mcp-param-region")
                        .and_then(|v| v.to_str().ok());
                    // A value that is not header-safe comes Base64-wrapped.
                    let decoded = header.map(|header| {
                        use base64::Engine as _;
                        match header
                            .strip_prefix("=?base64?")
                            .and_then(|rest| rest.strip_suffix("?="))
                        {
                            Some(encoded) => base64::engine::general_purpose::STANDARD
                                .decode(encoded)
                                .ok()
                                .and_then(|bytes| String::from_utf8(bytes).ok())
                                .unwrap_or_default(),
                            None => header.to_owned(),
                        }
                    });
                    match (region, decoded) {
                        (Some(region), Some(decoded)) if region == decoded => {
                            text(&format!("region {}", header.unwrap_or_default()))
                        }
                        _ => json!({"error": {"code": -32020,
                            "message": "missing required Mcp-Param-Region header"}}),
                    }
                }
                "whoami" => {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    let seen = json!({
                        "authorization": header("authorization"),
                        "session": header("mcp-session-id"),
                        "version": header("mcp-protocol-version"),
                        "method": header("mcp-method"),
                        "name": header("mcp-name"),
                        "meta": meta,
                    });
                    text(&seen.to_string())
                }
                _ => json!({"error": {"code": -32602, "message": "unknown tool"}}),
            }
        }
        _ => json!({"error": {"code": -32601, "message": "Method not found"}}),
    }
}

type InnerRequest = Request<RequestBody<tower_elicitation::bridge::RequestBody>>;

async fn inner_service(
    seen: Seen,
    request: InnerRequest,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let bytes = body.collect().await.expect("a body").to_bytes();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if message["method"] == "subscriptions/listen" {
        return Ok(listen(&parts.headers, &message));
    }
    let outcome = answer(&seen, &parts.headers, &message);
    let body = match outcome.get("error") {
        Some(error) => json!({"jsonrpc": "2.0", "id": message["id"], "error": error}),
        None => json!({"jsonrpc": "2.0", "id": message["id"], "result": outcome}),
    };
    let status = if body.get("error").is_some() {
        404
    } else {
        200
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap())
}

/// `subscriptions/listen`, as a 2026 server answers it: an event stream with the acknowledgment,
/// then one `notifications/resources/updated` per resource asked for (with the subscription's id
/// in `_meta`) and a tool list change. It ends there, without a final result (as a listen cut
/// off does). A request without its 2026 headers and `_meta` is refused as rmcp refuses it.
fn listen(headers: &http::HeaderMap, message: &Value) -> Response<Full<Bytes>> {
    let id = &message["id"];
    let params = &message["params"];
    let versioned = params["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28";
    if headers
        .get("mcp-method")
        .is_none_or(|m| m != "subscriptions/listen")
        || !versioned
    {
        let error = json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32020, "message": "missing required Mcp-Method header"}});
        return Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(error.to_string())))
            .unwrap();
    }
    let filter = &params["notifications"];
    let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
    let mut messages = vec![json!({"jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": filter, "_meta": meta}})];
    for uri in filter["resourceSubscriptions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        messages.push(
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": uri, "_meta": meta}}),
        );
    }
    if filter["toolsListChanged"] == true {
        messages.push(
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": meta}}),
        );
    }
    let body: String = messages
        .iter()
        .map(|message| format!("event: message\ndata: {message}\n\n"))
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// Counts what waits in the bridge's pending answers, so a test can see a wait end.
#[derive(Clone, Default)]
struct Observed(Arc<MemoryPendingAnswers>);

impl PendingAnswers for Observed {
    type Subscription = <MemoryPendingAnswers as PendingAnswers>::Subscription;

    async fn subscribe(&self, key: AnswerKey) -> Result<Self::Subscription, StoreError> {
        self.0.subscribe(key).await
    }
    async fn deliver(&self, key: AnswerKey, answer: Value) -> Result<bool, StoreError> {
        self.0.deliver(key, answer).await
    }
    async fn unsubscribe(&self, key: &AnswerKey) -> Result<(), StoreError> {
        self.0.unsubscribe(key).await
    }
}

struct Server {
    url: String,
    seen: Seen,
    pending: Observed,
    http: reqwest::Client,
}

/// The layer every bridged server here runs behind the bridge.
fn layer() -> ElicitationLayer {
    ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).unwrap())
}

/// A bridge for [`layer`], every option at its default.
fn bridge() -> LegacyBridgeLayer {
    LegacyBridgeLayer::for_layer(&layer())
}

async fn serve(bridge: LegacyBridgeLayer) -> Server {
    let seen = Seen::default();
    let pending = Observed::default();
    let inner = {
        let seen = seen.clone();
        tower::service_fn(move |request: InnerRequest| inner_service(seen.clone(), request))
    };
    let service = ServiceBuilder::new()
        .layer(bridge.pending_answers(pending.clone()))
        .layer(layer())
        .service(inner);
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        url,
        seen,
        pending,
        http: reqwest::Client::new(),
    }
}

// ---- the hand-written 2025-era client ----

const FULL: &str = r#"{"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}"#;

fn caps() -> Value {
    serde_json::from_str(FULL).unwrap()
}

impl Server {
    fn post(
        &self,
        session: Option<&str>,
        auth: Option<&str>,
        body: &Value,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request
    }

    async fn send(&self, session: Option<&str>, auth: Option<&str>, body: &Value) -> (u16, Value) {
        let response = tokio::time::timeout(WAIT, self.post(session, auth, body).send())
            .await
            .expect("in time")
            .expect("a response");
        let status = response.status().as_u16();
        let stream = response
            .headers()
            .get("content-type")
            .is_some_and(|kind| kind == "text/event-stream");
        let bytes = response.bytes().await.unwrap();
        if stream {
            // A 2025 server may answer any request with an event stream: its last message.
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            let last = text
                .split("\n\n")
                .filter_map(|event| {
                    let data: Vec<&str> = event
                        .lines()
                        .filter_map(|line| line.strip_prefix("data: "))
                        .collect();
                    serde_json::from_str(&data.join("\n")).ok()
                })
                .last();
            return (status, last.unwrap_or(Value::Null));
        }
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Opens a session; its id.
    async fn initialize(&self, version: &str, capabilities: Value, auth: Option<&str>) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "hand-written", "version": "1.0"}}});
        let response = self.post(None, auth, &body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(self.send(Some(&session), auth, &initialized).await.0, 202);
        session
    }

    /// Starts a `tools/call`; its event stream.
    async fn call(&self, session: &str, auth: Option<&str>, id: u64, tool: &str) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}});
        self.stream(session, auth, &body).await
    }

    /// POSTs a request that is answered with an event stream.
    async fn stream(&self, session: &str, auth: Option<&str>, body: &Value) -> Events {
        let response = self.post(Some(session), auth, body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events {
            response,
            buffer: Vec::new(),
        }
    }

    /// POSTs the client's answer to the bridge's request `leg`.
    async fn reply(&self, session: &str, auth: Option<&str>, leg: &Value, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": leg, "result": result});
        assert_eq!(self.send(Some(session), auth, &body).await.0, 202);
    }

    /// Waits until no call waits for an answer.
    async fn until_nothing_waits(&self) {
        tokio::time::timeout(WAIT, async {
            while !self.pending.0.is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the wait ends");
    }
}

// ---- handshake and sessions ----

#[tokio::test]
async fn initialize_is_answered_from_the_inner_discovery() {
    let server = serve(bridge()).await;
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2026-07-28", "2025-11-25"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
        let response = server.post(None, None, &body).send().await.unwrap();
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(session.len(), 32);
        assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));
        let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(
            body["result"],
            json!({"protocolVersion": answered, "capabilities": {"tools": {"listChanged": true}, "logging": {}},
                "serverInfo": {"name": "inner-2026", "version": "9.9"},
                "instructions": "Test tools."})
        );
    }
}

#[tokio::test]
async fn subscriptions_and_list_changes_reach_the_get_stream_through_the_inners_listen() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let get = server
        .http
        .get(&server.url)
        .header("mcp-session-id", &session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    assert_eq!(get.headers()["content-type"], "text/event-stream");
    let mut stream = Events {
        response: get,
        buffer: Vec::new(),
    };
    // No subscription yet: the list changes alone, the acknowledgment kept back.
    let first = stream.next().await.unwrap();
    assert_eq!(
        first,
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})
    );

    let subscribe = |method: &str, uri: &str| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"uri": uri}});
    let (status, answer) = server
        .send(
            Some(&session),
            None,
            &subscribe("resources/subscribe", "file:///notes.txt"),
        )
        .await;
    assert_eq!((status, &answer["result"]), (200, &json!({})), "{answer}");
    // The listen is opened again with the resource: its update reaches the client, in 2025 shape.
    assert_eq!(
        stream.next().await.unwrap(),
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
            "params": {"uri": "file:///notes.txt"}})
    );
    assert_eq!(stream.next().await.unwrap(), first);

    let (status, answer) = server
        .send(
            Some(&session),
            None,
            &subscribe("resources/unsubscribe", "file:///notes.txt"),
        )
        .await;
    assert_eq!((status, &answer["result"]), (200, &json!({})), "{answer}");
    assert_eq!(stream.next().await.unwrap(), first);
    // A subscription without a URI is refused, and changes nothing.
    let bad = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {}});
    assert_eq!(
        server.send(Some(&session), None, &bad).await.1["error"]["code"],
        -32602
    );

    // A dropped GET stream is taken up again (fresh: nothing is replayed); a POST's stream cannot
    // be resumed, which the spec's 405 says.
    for (last_event_id, status) in [("g00000000000000ab.3", 200), ("p00000000000000ab.1", 405)] {
        let get = server
            .http
            .get(&server.url)
            .header("mcp-session-id", &session)
            .header("accept", "text/event-stream")
            .header("last-event-id", last_event_id)
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), status, "{last_event_id}");
    }

    // Ending the session ends its stream.
    let delete = server
        .http
        .delete(&server.url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 204);
    assert_eq!(stream.next().await, None);
}

#[tokio::test]
async fn x_mcp_header_arguments_reach_the_inner_service_as_mcp_param_headers() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    // No `tools/list` before: the bridge asks the inner service for the tool's schema itself.
    for (id, region) in [(1, "eu-west-1"), (2, "café")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "regional", "arguments": {"region": region}}});
        let mut events = server.stream(&session, None, &body).await;
        let result = events.next().await.unwrap();
        let expected = match region {
            // Not header-safe: sent Base64-wrapped, as SEP-2243 asks.
            "café" => "region =?base64?Y2Fmw6k=?=".to_owned(),
            plain => format!("region {plain}"),
        };
        assert_eq!(result_text(&result), expected, "{result}");
    }
}

#[tokio::test]
async fn a_header_argument_the_bridge_did_not_know_of_is_learnt_again_on_32020() {
    let server = serve(bridge()).await;
    server.seen.regional_late.store(true, Ordering::SeqCst);
    let session = server.initialize("2025-11-25", caps(), None).await;
    // The client lists the tools first: the bridge learns `regional` without a header argument.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(server.send(Some(&session), None, &list).await.0, 200);
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "regional", "arguments": {"region": "eu-west-1"}}});
    let mut events = server.stream(&session, None, &body).await;
    let result = events.next().await.unwrap();
    // Refused once (-32020), the tools asked for again, the round retried with the header.
    assert_eq!(result_text(&result), "region eu-west-1", "{result}");
    assert_eq!(server.seen.lists.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_under_another_name_or_from_another_site_is_refused() {
    let server = serve(bridge()).await;
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    let port = server
        .url
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .unwrap();
    let local = format!("127.0.0.1:{port}");
    for (host, origin) in [
        ("evil.example.com", Some("http://evil.example.com")),
        (local.as_str(), Some("http://evil.example.com")),
        ("evil.example.com", None),
    ] {
        let mut request = server.post(None, None, &body).header("host", host);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 403, "{host} {origin:?}");
        assert!(response.headers().get("mcp-session-id").is_none());
    }
    // The loopback names are served, with a local page's origin too.
    let response = server
        .post(None, None, &body)
        .header("host", format!("localhost:{port}"))
        .header("origin", "http://localhost:6274")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // A deployment under its own name says so.
    let server = serve(bridge().allowed_hosts(["mcp.example.com"])).await;
    let named = |host: &'static str| server.post(None, None, &body).header("host", host).send();
    assert_eq!(named("mcp.example.com").await.unwrap().status(), 200);
    assert_eq!(named("localhost").await.unwrap().status(), 403);
    let server = serve(bridge().allow_any_host()).await;
    let any = server
        .post(None, None, &body)
        .header("host", "evil.example.com");
    assert_eq!(any.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn utilities_are_answered_at_the_bridge_and_delete_ends_the_session() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
    assert_eq!(
        server.send(Some(&session), None, &ping).await,
        (200, json!({"jsonrpc": "2.0", "id": "p", "result": {}}))
    );
    let level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}});
    assert_eq!(
        server.send(Some(&session), None, &level).await.1["result"],
        json!({})
    );
    let bad = json!({"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "loud"}});
    assert_eq!(
        server.send(Some(&session), None, &bad).await.1["error"]["code"],
        -32602
    );
    // The level is kept for the session and reaches the inner service, with the 2026 headers.
    let mut events = server.call(&session, None, 4, "whoami").await;
    let seen: Value = serde_json::from_str(result_text(&events.next().await.unwrap())).unwrap();
    assert_eq!(seen["meta"]["io.modelcontextprotocol/logLevel"], "debug");
    assert_eq!(
        seen["meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        seen["meta"]["io.modelcontextprotocol/clientCapabilities"],
        caps()
    );
    assert_eq!(
        seen["meta"]["io.modelcontextprotocol/clientInfo"]["name"],
        "hand-written"
    );
    assert_eq!(seen["version"], "2026-07-28");
    assert_eq!(seen["method"], "tools/call");
    assert_eq!(seen["name"], "whoami");
    assert_eq!(seen["session"], Value::Null);
    drop(events);

    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let (status, body) = server.send(Some(&session), None, &list).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["result"],
        json!({"tools": [{"name": "ask", "inputSchema": {"type": "object"}}, regional()]})
    );
    // An inner 404 (unknown method) reaches a 2025 client as a JSON-RPC error in a 200.
    let unknown = json!({"jsonrpc": "2.0", "id": 6, "method": "completion/complete"});
    let (status, body) = server.send(Some(&session), None, &unknown).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (200, json!(-32601))
    );

    let get = server
        .http
        .get(&server.url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let delete = server
        .http
        .delete(&server.url)
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert!(delete.status().is_success());
    assert_eq!(server.send(Some(&session), None, &ping).await.0, 404);
    let unknown_session = "0123456789abcdef0123456789abcdef";
    assert_eq!(server.send(Some(unknown_session), None, &ping).await.0, 404);
}

#[tokio::test]
async fn a_session_belongs_to_the_caller_that_opened_it() {
    let server = serve(bridge()).await;
    let session = server
        .initialize("2025-11-25", caps(), Some("Bearer alice"))
        .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(
        server
            .send(Some(&session), Some("Bearer alice"), &ping)
            .await
            .0,
        200
    );
    assert_eq!(
        server
            .send(Some(&session), Some("Bearer mallory"), &ping)
            .await
            .0,
        404
    );
    assert_eq!(server.send(Some(&session), None, &ping).await.0, 404);
    let delete = server
        .http
        .delete(&server.url)
        .header("mcp-session-id", &session)
        .header("authorization", "Bearer mallory")
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 404);
    assert_eq!(
        server
            .send(Some(&session), Some("Bearer alice"), &ping)
            .await
            .0,
        200
    );
    // The caller's credentials reach the inner service on every round.
    let mut events = server
        .call(&session, Some("Bearer alice"), 2, "whoami")
        .await;
    let seen: Value = serde_json::from_str(result_text(&events.next().await.unwrap())).unwrap();
    assert_eq!(seen["authorization"], "Bearer alice");
}

// ---- the MRTR loop ----

/// Keeps what the bridge stores of each session, so a test can read it as a store's reader could.
#[derive(Clone, Default)]
struct Kept(
    Arc<std::sync::Mutex<Vec<SessionRecord>>>,
    Arc<MemorySessionStore>,
);

impl SessionStore for Kept {
    async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        self.0.lock().unwrap().push(record.clone());
        self.1.create(id, record).await
    }
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.1.get(id).await
    }
    async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
        self.1.update(id, record).await
    }
    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        self.1.remove(id).await
    }
}

#[tokio::test]
async fn a_session_store_keeps_only_a_keyed_tag_of_the_credential() {
    let kept = Kept::default();
    let server = serve(bridge().session_store(kept.clone())).await;
    let session = server
        .initialize("2025-11-25", json!({}), Some("Bearer 1234"))
        .await;
    let record = kept.0.lock().unwrap()[0].clone();
    let tag = record.principal.expect("an authenticated session is bound");
    // The key's id, then the HMAC tag: nothing a reader of the store can test a guessed PIN
    // against without the layer's key (the unkeyed digest kept before would have been).
    assert!(tag.starts_with("k1."), "{tag}");
    assert!(!tag.contains("1234"));
    let unkeyed = blake3::derive_key(
        "tower-elicitation 2026 legacy bridge session principal",
        b"Bearer 1234",
    );
    assert_ne!(tag, blake3::Hash::from(unkeyed).to_hex().to_string());
    // The tag still binds: the same credential is served, another is not.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(
        server
            .send(Some(&session), Some("Bearer 1234"), &ping)
            .await
            .0,
        200
    );
    assert_eq!(
        server
            .send(Some(&session), Some("Bearer 1235"), &ping)
            .await
            .0,
        404
    );
}

#[tokio::test]
async fn the_bridge_takes_the_callers_identity_as_its_layer_does() {
    // The layer reads the identity from `x-user`; the bridge, built from it, binds sessions to
    // that, not to the `Authorization` header it would read by default.
    let layer = layer().principal_from(|parts| {
        parts
            .headers
            .get("x-user")
            .map(|value| value.as_bytes().to_vec())
    });
    let server = serve(LegacyBridgeLayer::for_layer(&layer)).await;
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let opened = server
        .post(None, Some("Bearer shared"), &body)
        .header("x-user", "alice")
        .send()
        .await
        .unwrap();
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let as_user = |user: &'static str| {
        server
            .post(Some(&session), Some("Bearer shared"), &ping)
            .header("x-user", user)
            .send()
    };
    assert_eq!(as_user("alice").await.unwrap().status(), 200);
    assert_eq!(as_user("mallory").await.unwrap().status(), 404);
}

#[tokio::test]
async fn a_question_is_asked_on_the_stream_and_the_answer_retried() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 7, "ask").await;
    let leg = events.request("elicitation/create").await;
    assert_eq!(leg["params"]["message"], "Approve?");
    // An invalid answer is asked again by the elicitation layer, through the bridge.
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": "yes"}}),
        )
        .await;
    let again = events.request("elicitation/create").await;
    assert_ne!(again["id"], leg["id"]);
    assert!(
        again["params"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Approve?")
    );
    server
        .reply(
            &session,
            None,
            &again["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 7);
    assert_eq!(result_text(&done), "approved");
    assert!(done["result"].get("resultType").is_none());
    assert!(events.next().await.is_none(), "the result ends the stream");
    // Round 1, and the valid answer: the invalid one never reached the inner service.
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_cancelled_call_ends_its_wait_and_forwards_nothing_more() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 11, "ask").await;
    let leg = events.request("elicitation/create").await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 11, "reason": "user gave up"}});
    assert_eq!(server.send(Some(&session), None, &cancel).await.0, 202);
    // Its open request is cancelled with it; the call itself is not answered.
    let cancelled = events.next().await.unwrap();
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], leg["id"]);
    assert_eq!(
        events.next().await,
        None,
        "a cancelled request is not answered"
    );
    server.until_nothing_waits().await;
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_goes_away_mid_wait_ends_the_call() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 12, "ask").await;
    let leg = events.request("elicitation/create").await;
    assert!(!server.pending.0.is_empty());
    drop(events);
    server.until_nothing_waits().await;
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    // The inner service is not called again.
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn another_sessions_answer_changes_nothing() {
    let server = serve(bridge()).await;
    let mine = server.initialize("2025-11-25", caps(), None).await;
    let theirs = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&mine, None, 13, "ask").await;
    let leg = events.request("elicitation/create").await;
    // The other session answers "approve" with the leg's id: accepted (202), delivered nowhere.
    server
        .reply(
            &theirs,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    // An id the bridge never issued changes nothing either.
    server
        .reply(
            &mine,
            None,
            &json!("leg-0000"),
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 1);
    server
        .reply(&mine, None, &leg["id"], json!({"action": "decline"}))
        .await;
    let done = events.next().await.unwrap();
    assert_eq!(result_text(&done), "not approved");
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_that_does_not_come_in_time_ends_the_call() {
    let bridge = bridge().answer_timeout(Duration::from_millis(200));
    let server = serve(bridge).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 14, "ask").await;
    let leg = events.request("elicitation/create").await;
    let cancelled = events.next().await.unwrap();
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], leg["id"]);
    let done = events.next().await.unwrap();
    assert_eq!(done["result"]["isError"], true);
    assert!(result_text(&done).contains("did not answer"), "{done}");
    server.until_nothing_waits().await;
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_without_the_capability_gets_a_tool_error_and_no_request() {
    let server = serve(bridge()).await;
    // Form-only elicitation: the URL question is refused before anything is sent.
    let session = server
        .initialize("2025-11-25", json!({"elicitation": {}}), None)
        .await;
    let mut events = server.call(&session, None, 15, "url").await;
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 15);
    assert_eq!(done["result"]["isError"], true);
    assert!(result_text(&done).contains("url"), "{done}");
    // No elicitation at all.
    let bare = server.initialize("2025-11-25", json!({}), None).await;
    let mut events = server.call(&bare, None, 16, "ask").await;
    let done = events.next().await.unwrap();
    assert_eq!(done["result"]["isError"], true);
    assert!(result_text(&done).contains("elicitation"), "{done}");
}

#[tokio::test]
async fn a_url_flow_carries_an_elicitation_id_and_completes() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 17, "url").await;
    let leg = events.request("elicitation/create").await;
    let id = leg["params"]["elicitationId"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 36);
    server
        .reply(&session, None, &leg["id"], json!({"action": "accept"}))
        .await;
    let complete = events.next().await.unwrap();
    assert_eq!(complete["method"], "notifications/elicitation/complete");
    assert_eq!(complete["params"]["elicitationId"], id);
    assert_eq!(result_text(&events.next().await.unwrap()), "flow done");
}

#[tokio::test]
async fn an_error_answer_ends_the_call_and_cancels_the_other_requests() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 23, "two").await;
    let first = events.next().await.unwrap();
    let second = events.next().await.unwrap();
    let (roots, form) = if first["method"] == "roots/list" {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(form["method"], "elicitation/create");
    let error = json!({"jsonrpc": "2.0", "id": roots["id"],
        "error": {"code": -32603, "message": "no roots here"}});
    assert_eq!(server.send(Some(&session), None, &error).await.0, 202);
    let cancelled = events.next().await.unwrap();
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], form["id"]);
    let done = events.next().await.unwrap();
    assert_eq!(done["result"]["isError"], true);
    assert!(result_text(&done).contains("no roots here"), "{done}");
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_url_flow_in_progress_is_asked_of_the_server_not_the_person() {
    let bridge = bridge().url_retry_delay(Duration::from_millis(5));
    let server = serve(bridge).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 24, "url_slow").await;
    let leg = events.request("elicitation/create").await;
    server
        .reply(&session, None, &leg["id"], json!({"action": "accept"}))
        .await;
    // The flow completes out of band, whenever; until then the server asks again and the
    // bridge retries with the consent it has, without asking the client again.
    server.seen.flow_done.store(true, Ordering::SeqCst);
    let complete = events.next().await.unwrap();
    assert_eq!(
        complete["method"], "notifications/elicitation/complete",
        "{complete}"
    );
    assert_eq!(
        complete["params"]["elicitationId"],
        leg["params"]["elicitationId"]
    );
    assert_eq!(result_text(&events.next().await.unwrap()), "flow done");
}

/// Waits until the inner service has seen at least `n` `tools/call` requests.
async fn until_calls(server: &Server, n: usize) {
    tokio::time::timeout(WAIT, async {
        while server.seen.calls.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the inner service is asked again");
}

#[tokio::test]
async fn a_url_flow_accepted_before_it_completes_is_asked_again_with_the_hint() {
    let bridge = bridge()
        .url_retry_delay(Duration::from_millis(5))
        .url_grace(Duration::from_millis(50));
    let server = serve(bridge).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 26, "url_slow").await;
    let leg = events.request("elicitation/create").await;
    assert_eq!(leg["params"]["message"], "Sign in");
    // The person says they finished before they did.
    server
        .reply(&session, None, &leg["id"], json!({"action": "accept"}))
        .await;
    // After the grace the person is asked again: the same flow, with the "not finished" hint.
    let again = events.request("elicitation/create").await;
    assert_ne!(again["id"], leg["id"]);
    assert_eq!(again["params"]["mode"], "url");
    assert_eq!(again["params"]["url"], "https://example.com/slow");
    assert_eq!(
        again["params"]["elicitationId"],
        leg["params"]["elicitationId"]
    );
    assert_eq!(
        again["params"]["message"],
        "Sign in\n\nNot finished yet: complete it in the browser, then continue."
    );
    // Now they finish it, and say so.
    server.seen.flow_done.store(true, Ordering::SeqCst);
    server
        .reply(&session, None, &again["id"], json!({"action": "accept"}))
        .await;
    let complete = events.next().await.unwrap();
    assert_eq!(
        complete["method"], "notifications/elicitation/complete",
        "{complete}"
    );
    assert_eq!(
        complete["params"]["elicitationId"],
        leg["params"]["elicitationId"]
    );
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 26);
    assert_eq!(result_text(&done), "flow done", "{done}");
    assert!(events.next().await.is_none());
}

#[tokio::test]
async fn re_checks_of_an_accepted_url_flow_are_not_rounds() {
    let bridge = bridge()
        .max_rounds(1)
        .url_retry_delay(Duration::from_millis(5));
    let server = serve(bridge).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 27, "url_slow").await;
    let leg = events.request("elicitation/create").await;
    server
        .reply(&session, None, &leg["id"], json!({"action": "accept"}))
        .await;
    // Far more re-checks than `max_rounds`, and the call still waits.
    until_calls(&server, 6).await;
    server.seen.flow_done.store(true, Ordering::SeqCst);
    let complete = events.next().await.unwrap();
    assert_eq!(
        complete["method"], "notifications/elicitation/complete",
        "{complete}"
    );
    assert_eq!(result_text(&events.next().await.unwrap()), "flow done");
}

#[tokio::test]
async fn a_url_flow_not_finished_within_its_wait_ends_the_call_in_words() {
    let bridge = bridge()
        .max_rounds(1)
        .url_retry_delay(Duration::from_millis(5))
        .url_grace(Duration::from_secs(60))
        .url_wait_timeout(Duration::from_millis(300));
    let server = serve(bridge).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 28, "url_slow").await;
    let leg = events.request("elicitation/create").await;
    server
        .reply(&session, None, &leg["id"], json!({"action": "accept"}))
        .await;
    // No completion: the call's end, in plain words.
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 28, "{done}");
    assert_eq!(done["result"]["isError"], true);
    assert_eq!(
        result_text(&done),
        "The step in the browser was not finished within 300 milliseconds, so the request was stopped. Start it again, and finish the step in the browser before you continue.",
    );
    assert!(events.next().await.is_none());
    server.until_nothing_waits().await;
}

#[tokio::test]
async fn a_declined_or_cancelled_url_flow_is_not_said_to_complete() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    for (id, action) in [(29, "decline"), (30, "cancel")] {
        let mut events = server.call(&session, None, id, "url").await;
        let leg = events.request("elicitation/create").await;
        server
            .reply(&session, None, &leg["id"], json!({"action": action}))
            .await;
        // The inner service decides (this one finishes anyway); no completion is claimed.
        let done = events.next().await.unwrap();
        assert_eq!(done["id"], id, "{action}: {done}");
        assert_eq!(result_text(&done), "flow done");
        assert!(events.next().await.is_none(), "{action}");
    }
}

#[tokio::test]
async fn prompts_that_need_what_the_client_lacks_get_a_json_rpc_error() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", json!({}), None).await;
    let body =
        json!({"jsonrpc": "2.0", "id": 25, "method": "prompts/get", "params": {"name": "p"}});
    let mut events = server.stream(&session, None, &body).await;
    let done = events.next().await.unwrap();
    assert_eq!(done["id"], 25);
    assert_eq!(done["error"]["code"], -32603, "{done}");
    // With the capability, the prompt's question is asked on the stream.
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.stream(&session, None, &body).await;
    let leg = events.request("elicitation/create").await;
    server
        .reply(&session, None, &leg["id"], json!({"action": "decline"}))
        .await;
    assert_eq!(
        events.next().await.unwrap()["result"],
        json!({"messages": []})
    );
}

#[tokio::test]
async fn requests_without_a_session_are_served_with_no_capabilities() {
    let server = serve(bridge().memory_sessions(Duration::from_secs(60), 1)).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (status, body) = server.send(None, None, &list).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["tools"][0]["name"], "ask");
    // The store holds one session: the second `initialize` is refused, the first lives on.
    let session = server.initialize("2025-11-25", caps(), None).await;
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}});
    assert_eq!(server.send(None, None, &body).await.0, 503);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    assert_eq!(server.send(Some(&session), None, &ping).await.0, 200);
}

#[tokio::test]
async fn the_round_cap_ends_a_call_that_never_completes() {
    let server = serve(bridge().max_rounds(2)).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut events = server.call(&session, None, 18, "loop").await;
    for _ in 0..2 {
        let leg = events.request("elicitation/create").await;
        server
            .reply(
                &session,
                None,
                &leg["id"],
                json!({"action": "accept", "content": {"approve": true}}),
            )
            .await;
    }
    let done = events.next().await.unwrap();
    assert_eq!(done["result"]["isError"], true);
    assert_eq!(
        result_text(&done),
        "This request asked for more input 2 times and still did not finish, so it was stopped. Try it again.",
        "{done}"
    );
    assert_eq!(server.seen.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn over_the_pending_bound_new_calls_are_refused_and_nothing_is_lost() {
    let server = serve(bridge().max_pending(1)).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let mut first = server.call(&session, None, 19, "ask").await;
    let leg = first.request("elicitation/create").await;
    let mut second = server.call(&session, None, 20, "ask").await;
    let refused = second.next().await.unwrap();
    assert_eq!(refused["id"], 20);
    assert_eq!(refused["result"]["isError"], true);
    assert!(result_text(&refused).contains("Too many"), "{refused}");
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(result_text(&first.next().await.unwrap()), "approved");
    // The permit is back: a new call may wait again.
    let mut third = server.call(&session, None, 21, "ask").await;
    third.request("elicitation/create").await;
}

#[tokio::test]
async fn a_2025_06_18_client_gets_forms_it_can_read() {
    let server = serve(bridge()).await;
    let session = server
        .initialize("2025-06-18", json!({"elicitation": {}}), None)
        .await;
    let mut events = server.call(&session, None, 22, "pick").await;
    let leg = events.request("elicitation/create").await;
    assert!(leg["params"].get("mode").is_none(), "{leg}");
    assert_eq!(
        leg["params"]["requestedSchema"]["properties"]["color"],
        json!({"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]})
    );
    server
        .reply(
            &session,
            None,
            &leg["id"],
            json!({"action": "accept", "content": {"color": "g"}}),
        )
        .await;
    assert_eq!(result_text(&events.next().await.unwrap()), "picked");
}

/// A stream opens with a priming event (an id, a `retry`, empty `data`) only for a client at
/// 2025-11-25: older clients have no priming and read an empty `data` as a broken message.
#[tokio::test]
async fn only_a_2025_11_25_client_gets_priming_events() {
    let server = serve(bridge()).await;
    for (version, primed) in [
        ("2025-11-25", true),
        ("2025-06-18", false),
        ("2025-03-26", false),
    ] {
        let session = server.initialize(version, caps(), None).await;
        // A plain request answered as an event stream, whole.
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let response = server
            .post(Some(&session), None, &list)
            .send()
            .await
            .unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text = response.text().await.unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(
            events.len(),
            if primed { 2 } else { 1 },
            "{version}: {text}"
        );
        assert_eq!(text.contains("retry: "), primed, "{version}: {text}");
        assert_eq!(events[0].ends_with("\ndata: "), primed, "{version}: {text}");
        assert!(events.last().unwrap().contains(r#""tools":"#), "{text}");
        // A call's stream: its first event is the priming event, or at once the question.
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "ask", "arguments": {}}});
        let mut response = server
            .post(Some(&session), None, &call)
            .send()
            .await
            .unwrap();
        let first = first_event(&mut response).await;
        assert_eq!(first.ends_with("\ndata: "), primed, "{version}: {first}");
        assert_eq!(
            first.contains("elicitation/create"),
            !primed,
            "{version}: {first}"
        );
        drop(response);
        server.until_nothing_waits().await;
        // The session's GET stream (the inner's listen says at once that the tools changed).
        let mut get = server
            .http
            .get(&server.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", version)
            .send()
            .await
            .unwrap();
        assert_eq!(get.status(), 200);
        let first = first_event(&mut get).await;
        assert!(first.starts_with("id: g"), "{first}");
        assert_eq!(first.ends_with("\ndata: "), primed, "{version}: {first}");
        assert_eq!(
            first.contains("list_changed"),
            !primed,
            "{version}: {first}"
        );
    }
}

/// The first event of an event stream, read as it comes (the stream stays open).
async fn first_event(response: &mut reqwest::Response) -> String {
    let mut read = String::new();
    while !read.contains("\n\n") {
        let chunk = tokio::time::timeout(WAIT, response.chunk())
            .await
            .expect("in time")
            .unwrap()
            .expect("the stream goes on");
        read.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    read.split("\n\n").next().unwrap_or_default().to_owned()
}

// ---- 2026 traffic ----

#[tokio::test]
async fn modern_requests_pass_byte_for_byte() {
    // An inner service that answers with exactly the bytes and headers it received.
    let echo = tower::service_fn(
        |request: Request<tower_elicitation::bridge::RequestBody>| async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let mut response = Response::new(Full::new(bytes));
            for name in ["mcp-session-id", "mcp-protocol-version", "x-custom"] {
                if let Some(value) = parts.headers.get(name) {
                    response.headers_mut().insert(name, value.clone());
                }
            }
            Ok::<_, Infallible>(response)
        },
    );
    let app = axum::Router::new().nest_service("/mcp", bridge().layer_service(echo));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let body = "{ \"jsonrpc\":\"2.0\",  \"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\
        \"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\
        \"io.modelcontextprotocol/clientCapabilities\":{}}} }";
    for session in [None, Some("not-a-session")] {
        let mut request = reqwest::Client::new()
            .post(&url)
            .header("mcp-protocol-version", "2026-07-28")
            .header("x-custom", "kept")
            .body(body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["mcp-protocol-version"], "2026-07-28");
        assert_eq!(response.headers()["x-custom"], "kept");
        assert_eq!(
            response
                .headers()
                .get("mcp-session-id")
                .map(|v| v.to_str().unwrap().to_owned()),
            session.map(str::to_owned)
        );
        assert_eq!(response.bytes().await.unwrap(), body.as_bytes());
    }
    // A request with a 2026 version header and no `_meta` is the inner service's to refuse.
    let missing = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{}}";
    let response = reqwest::Client::new()
        .post(&url)
        .header("mcp-protocol-version", "2026-07-28")
        .body(missing)
        .send()
        .await
        .unwrap();
    assert_eq!(response.bytes().await.unwrap(), missing.as_bytes());
}

/// `Layer::layer` spelled as a method, for the test above.
trait LayerService {
    fn layer_service<S>(&self, inner: S) -> tower_elicitation::bridge::LegacyBridge<S>;
}

impl LayerService for LegacyBridgeLayer {
    fn layer_service<S>(&self, inner: S) -> tower_elicitation::bridge::LegacyBridge<S> {
        tower::Layer::layer(self, inner)
    }
}

/// The bridge reads a 2025-era body with the crate's one strict reader: a key given twice, at any
/// depth, is refused before anything reaches the inner service.
#[tokio::test]
async fn a_body_that_repeats_a_key_is_refused_and_reaches_nothing() {
    let server = serve(bridge()).await;
    let session = server.initialize("2025-11-25", caps(), None).await;
    let before = server.seen.calls.load(Ordering::SeqCst);
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"deploy"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{"a":1,"a":2}}}"#,
    ] {
        let response = server
            .http
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let reply: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(reply["error"]["code"], -32700, "{body}");
    }
    assert_eq!(
        server.seen.calls.load(Ordering::SeqCst),
        before,
        "nothing reached the inner service"
    );
}
