//! The legacy bridge when a session goes away under a waiting call, and the bound on sessions
//! kept in Redis.
//!
//! A 2025-era client's call waits for its answer; its session is DELETEd, or removed from the
//! store behind the bridge's back (as when Redis lost its data): the call ends with a clear tool
//! error, and frees its `max_pending` place. In process and on the real Redis at `MCP_REDIS_URL`
//! (default `redis://127.0.0.1:6379`), each test under a key prefix of its own. No timing
//! assertion: each wait is bounded generously, and only the outcome is asserted.

use crate::support::legacy_stream;
use crate::support::redis as redis_support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use legacy_stream::{Events, result_text};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::redis::{RedisSessionStore, RedisStore};
use tower_elicitation::store::{MemorySessionStore, SessionRecord, SessionStore, StoreError};
use tower_elicitation::{ElicitationLayer, Keyring, RequestBody};

/// Longer than the bridge's session check, far shorter than its answer timeout.
const ENDS_WITHIN: Duration = Duration::from_secs(30);

fn redis(prefix: &str) -> RedisStore {
    RedisStore::builder(redis_support::redis_url())
        .key_prefix(prefix)
        .build()
        .expect("a Redis URL")
}

/// A session store shared with the test, so that it can remove a session behind the bridge.
struct Shared<T>(Arc<T>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T: SessionStore> SessionStore for Shared<T> {
    async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        self.0.create(id, record).await
    }
    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.0.get(id).await
    }
    async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
        self.0.update(id, record).await
    }
    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        self.0.remove(id).await
    }
}

/// The inner 2026-07-28 server: `ask` asks for an approval until it has one.
async fn inner(
    request: Request<RequestBody<tower_elicitation::bridge::RequestBody>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let result = match message["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private"}),
        _ if message["params"]["inputResponses"]["approval"].is_object() => {
            json!({"resultType": "complete", "content": [{"type": "text", "text": "approved"}]})
        }
        _ => json!({"resultType": "input_required", "inputRequests": {"approval": {
            "method": "elicitation/create", "params": {"mode": "form", "message": "Approve?",
            "requestedSchema": {"type": "object",
                "properties": {"approve": {"type": "boolean"}}}}}}}),
    };
    let body = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap())
}

/// The bridge on `sessions`, one waiting call at most, served on a port of its own; its URL.
async fn serve(sessions: impl SessionStore) -> String {
    let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).unwrap());
    let service = ServiceBuilder::new()
        .layer(
            LegacyBridgeLayer::for_layer(&layer)
                .max_pending(1)
                .session_store(sessions),
        )
        .layer(layer)
        .service(tower::service_fn(inner));
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn post(
    url: &str,
    session: Option<&str>,
    caller: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    if let Some(caller) = caller {
        request = request.header("authorization", format!("Bearer {caller}"));
    }
    request
}

/// `initialize` as `caller` (anonymous when `None`): the session id, or the status and body.
async fn initialize(url: &str, caller: Option<&str>) -> Result<String, (u16, Value)> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "hand-written", "version": "1.0"}}});
    let response = post(url, None, caller, &body).send().await.unwrap();
    match response.headers().get("mcp-session-id") {
        Some(session) => Ok(session.to_str().unwrap().to_owned()),
        None => {
            let status = response.status().as_u16();
            Err((status, response.json().await.unwrap_or(Value::Null)))
        }
    }
}

/// A `tools/call` of `ask` whose approval is asked on its stream: the stream, the request
/// answered already.
async fn waiting_call(url: &str, session: &str) -> Events {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "ask", "arguments": {}}});
    let response = post(url, Some(session), None, &body).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut events = Events {
        response,
        buffer: Vec::new(),
    };
    events.request("elicitation/create").await;
    events
}

/// The message that ends the call's stream, skipping the cancellations before it.
async fn end_of(events: &mut Events) -> Value {
    tokio::time::timeout(ENDS_WITHIN, async {
        loop {
            let message = events.next().await.expect("the call ends with a response");
            if message.get("id").is_some() && message.get("method").is_none() {
                return message;
            }
        }
    })
    .await
    .expect("the call ends long before its answer timeout")
}

/// The session goes away by `end` while a call waits: the call ends with the clear error, and
/// the one waiting place is free again for a call of a new session.
async fn a_call_ends_when_its_session_goes(url: &str, end: impl AsyncFnOnce(&str)) {
    let session = initialize(url, None).await.unwrap();
    let mut events = waiting_call(url, &session).await;
    end(&session).await;
    let message = end_of(&mut events).await;
    assert_eq!(message["id"], 7, "{message}");
    assert_eq!(message["result"]["isError"], true, "{message}");
    assert!(
        result_text(&message).starts_with("The session ended while this call waited"),
        "{message}"
    );
    // Its place is free: a new session's call is asked, not refused as one too many.
    let session = initialize(url, None).await.unwrap();
    let _events = waiting_call(url, &session).await;
}

async fn delete(url: &str, session: &str) {
    let response = reqwest::Client::new()
        .delete(url)
        .header("mcp-session-id", session)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
}

async fn in_process_a_delete_ends_the_waiting_call() {
    let url = serve(MemorySessionStore::default()).await;
    a_call_ends_when_its_session_goes(&url, async |session| delete(&url, session).await).await;
}

async fn in_process_a_session_lost_from_the_store_ends_the_waiting_call() {
    let store = Shared(Arc::new(MemorySessionStore::default()));
    let url = serve(store.clone()).await;
    a_call_ends_when_its_session_goes(&url, async |session| {
        assert!(store.0.remove(session).await.unwrap());
    })
    .await;
}

async fn redis_a_delete_ends_the_waiting_call() {
    let redis = redis(&redis_support::prefix());
    let url = serve(redis.sessions(Duration::from_secs(60))).await;
    a_call_ends_when_its_session_goes(&url, async |session| delete(&url, session).await).await;
}

async fn redis_a_session_lost_with_redis_data_ends_the_waiting_call() {
    let prefix = redis_support::prefix();
    let url = serve(redis(&prefix).sessions(Duration::from_secs(60))).await;
    a_call_ends_when_its_session_goes(&url, async |session| {
        // What Redis forgot: the session's key, removed by another client.
        let key = format!("{prefix}session:{session}");
        let output = std::process::Command::new("redis-cli")
            .args(["-u", &redis_support::redis_url(), "DEL", &key])
            .output()
            .expect("redis-cli runs");
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "1");
    })
    .await;
}

// ---- the bound on sessions in Redis ----

fn redis_sessions_are_bounded_by_default_as_in_process() {
    assert_eq!(
        RedisSessionStore::DEFAULT_CAPACITY,
        MemorySessionStore::DEFAULT_CAPACITY
    );
    let sessions = redis("unused:").sessions(Duration::from_secs(60));
    let shown = format!("{sessions:?}");
    assert!(shown.contains("cap: 10000"), "{shown}");
    assert!(shown.contains("per_caller_cap: 100"), "{shown}");
}

#[track_caller]
fn assert_full(refused: Result<String, (u16, Value)>) {
    let (status, body) = refused.expect_err("refused");
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["error"]["message"],
        "Too many sessions; try again later"
    );
}

async fn redis_sessions_are_bounded_in_all_and_per_caller() {
    let prefix = redis_support::prefix();
    let sessions = redis(&prefix)
        .sessions(Duration::from_secs(60))
        .cap(4)
        .per_caller_cap(2);
    let url = serve(sessions).await;

    // One caller: two sessions, then refused; another caller is not.
    let alice = initialize(&url, Some("alice")).await.unwrap();
    initialize(&url, Some("alice")).await.unwrap();
    assert_full(initialize(&url, Some("alice")).await);
    initialize(&url, Some("bob")).await.unwrap();

    // Anonymous callers fill the rest of the total, then everyone is refused.
    initialize(&url, None).await.unwrap();
    assert_full(initialize(&url, None).await);
    assert_full(initialize(&url, Some("carol")).await);

    // An ended session makes room again, for its caller too.
    let response = reqwest::Client::new()
        .delete(&url)
        .header("mcp-session-id", &alice)
        .header("authorization", "Bearer alice")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    initialize(&url, Some("alice")).await.unwrap();
    assert_full(initialize(&url, Some("alice")).await);
}

async fn redis_idle_sessions_leave_the_count() {
    let prefix = redis_support::prefix();
    let sessions = redis(&prefix).sessions(Duration::from_millis(300)).cap(1);
    let url = serve(sessions).await;
    initialize(&url, None).await.unwrap();
    assert_full(initialize(&url, None).await);
    // Once the idle session expired, there is room (waited for, not timed).
    let admitted = tokio::time::timeout(ENDS_WITHIN, async {
        loop {
            if initialize(&url, None).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(admitted.is_ok(), "an expired session still counts");
}

crate::trials! {
    [] current_thread in_process_a_delete_ends_the_waiting_call,
    [] current_thread in_process_a_session_lost_from_the_store_ends_the_waiting_call,
    [Redis] current_thread redis_a_delete_ends_the_waiting_call,
    [Redis] current_thread redis_a_session_lost_with_redis_data_ends_the_waiting_call,
    [] sync redis_sessions_are_bounded_by_default_as_in_process,
    [Redis] current_thread redis_sessions_are_bounded_in_all_and_per_caller,
    [Redis] current_thread redis_idle_sessions_leave_the_count,
}
