//! The legacy bridge across two replicas sharing Redis (`RedisStore::sessions`,
//! `RedisStore::pending_answers`), over real TCP: a hand-written 2025-era client whose requests
//! land on replica A or B, as a load balancer without sticky routing would send them.
//!
//! Against the real Redis at `MCP_REDIS_URL` (default `redis://127.0.0.1:6379`), each test under a
//! key prefix of its own; outages are made with a TCP proxy this file controls.
//! Without a Redis they return at once and the run says so; `MCP_REQUIRE_REDIS=1` makes that a
//! failure (`support::redis`).

use crate::support::legacy_stream;
use crate::support::redis as redis_support;

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
use tower_elicitation::redis::{RedisPendingAnswers, RedisStore};
use tower_elicitation::store::{AnswerKey, PendingAnswers, SessionRecord, SessionStore};
use tower_elicitation::{ElicitationLayer, Keyring, RequestBody};

// ---- Redis ----
use redis_support::{Link, Proxy, prefix, redis_url, upstream};

fn store_at(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder(url)
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("a Redis URL")
}

async fn redis(prefix: &str) -> RedisStore {
    let url = redis_url();
    let store = store_at(&url, prefix);
    if let Err(error) = store.ping().await {
        panic!("these tests need a Redis at {url} (set MCP_REDIS_URL): {error}");
    }
    store
}

// ---- the inner 2026-07-28 server ----

fn approval_form() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Approve?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}}})
}

fn text(text: &str) -> Value {
    json!({"resultType": "complete", "content": [{"type": "text", "text": text}]})
}

fn answer(message: &Value) -> Value {
    let answers = &message["params"]["inputResponses"];
    match message["method"].as_str().unwrap_or_default() {
        "server/discover" => json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "inner-2026", "version": "1"}}}),
        "tools/call" => match answers["approval"]["action"].as_str() {
            None => json!({"resultType": "input_required",
                "inputRequests": {"approval": approval_form()}}),
            Some("accept") if answers["approval"]["content"]["approve"] == true => text("approved"),
            Some(_) => text("not approved"),
        },
        _ => json!({"error": {"code": -32601, "message": "Method not found"}}),
    }
}

type InnerRequest = Request<RequestBody<tower_elicitation::bridge::RequestBody>>;

async fn inner_service(
    calls: Arc<AtomicUsize>,
    request: InnerRequest,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let bytes = request
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if message["method"] == "tools/call" {
        calls.fetch_add(1, Ordering::SeqCst);
    }
    let outcome = answer(&message);
    let body = match outcome.get("error") {
        Some(error) => json!({"jsonrpc": "2.0", "id": message["id"], "error": error}),
        None => json!({"jsonrpc": "2.0", "id": message["id"], "result": outcome}),
    };
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap())
}

// ---- two replicas ----

/// One replica: `LegacyBridgeLayer → ElicitationLayer → inner` on a port of its own, its bridge
/// on Redis stores of its own (its own connections) under the test's prefix.
struct Replica {
    url: String,
    pending: RedisPendingAnswers,
}

async fn replica(sessions: &RedisStore, answers: &RedisStore, calls: Arc<AtomicUsize>) -> Replica {
    let pending = answers.pending_answers();
    let inner =
        tower::service_fn(move |request: InnerRequest| inner_service(Arc::clone(&calls), request));
    let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).unwrap());
    let service = ServiceBuilder::new()
        .layer(
            LegacyBridgeLayer::for_layer(&layer)
                .answer_timeout(Duration::from_secs(30))
                .session_store(sessions.sessions(Duration::from_secs(60)))
                .pending_answers(pending.clone()),
        )
        .layer(layer)
        .service(inner);
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Replica { url, pending }
}

/// Replicas A and B on one Redis prefix, and the count of calls that reached either inner.
struct Pair {
    a: Replica,
    b: Replica,
    calls: Arc<AtomicUsize>,
    client: Client,
}

async fn pair() -> Pair {
    let prefix = prefix();
    let calls = Arc::new(AtomicUsize::new(0));
    let a = {
        let store = redis(&prefix).await;
        replica(&store, &store, Arc::clone(&calls)).await
    };
    let b = {
        let store = redis(&prefix).await;
        replica(&store, &store, Arc::clone(&calls)).await
    };
    Pair {
        a,
        b,
        calls,
        client: Client(reqwest::Client::new()),
    }
}

// ---- the hand-written 2025-era client ----

struct Client(reqwest::Client);

impl Client {
    fn post(&self, to: &Replica, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .0
            .post(&to.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request
    }

    async fn send(&self, to: &Replica, session: Option<&str>, body: &Value) -> (u16, Value) {
        let response = tokio::time::timeout(WAIT, self.post(to, session, body).send())
            .await
            .expect("in time")
            .expect("a response");
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn initialize(&self, to: &Replica) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "hand-written", "version": "1.0"}}});
        let response = self.post(to, None, &body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        assert_eq!(self.send(to, Some(&session), &initialized).await.0, 202);
        session
    }

    async fn ping(&self, to: &Replica, session: &str) -> u16 {
        let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"});
        self.send(to, Some(session), &ping).await.0
    }

    /// Starts a `tools/call` of `ask`; its event stream.
    async fn call(&self, to: &Replica, session: &str, id: u64) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "ask", "arguments": {}}});
        let response = self.post(to, Some(session), &body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events {
            response,
            buffer: Vec::new(),
        }
    }

    /// POSTs the client's answer to the bridge's request `leg`; 202 whoever waits for it.
    async fn reply(&self, to: &Replica, session: &str, leg: &Value, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": leg, "result": result});
        assert_eq!(self.send(to, Some(session), &body).await.0, 202);
    }

    async fn delete(&self, to: &Replica, session: &str) -> u16 {
        let response = self
            .0
            .delete(&to.url)
            .header("mcp-session-id", session)
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    }
}

/// Waits until no call waits for an answer on `replica`.
async fn until_nothing_waits(replica: &Replica) {
    tokio::time::timeout(WAIT, async {
        while !replica.pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the wait ends");
}

// ---- sessions across replicas ----

async fn a_session_opened_on_a_is_used_on_b_and_ended_on_b_is_refused_on_a() {
    let Pair {
        a,
        b,
        calls,
        client,
    } = pair().await;
    let session = client.initialize(&a).await;
    assert_eq!(client.ping(&b, &session).await, 200);
    // `logging/setLevel` on B updates the session A sees.
    let level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
        "params": {"level": "debug"}});
    assert_eq!(
        client.send(&b, Some(&session), &level).await.1["result"],
        json!({})
    );

    // A call on B, its question answered on A: the result arrives on B's stream.
    let mut events = client.call(&b, &session, 7).await;
    let leg = events.request("elicitation/create").await;
    client
        .reply(
            &a,
            &session,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    let done = events.next().await.unwrap();
    assert_eq!(
        (done["id"].clone(), result_text(&done)),
        (json!(7), "approved")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Ended on B: refused on A, and on B.
    assert_eq!(client.delete(&b, &session).await, 204);
    assert_eq!(client.ping(&a, &session).await, 404);
    assert_eq!(client.ping(&b, &session).await, 404);
    assert_eq!(client.delete(&a, &session).await, 404);
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "ask", "arguments": {}}});
    assert_eq!(client.send(&a, Some(&session), &call).await.0, 404);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

// ---- answers across replicas ----

async fn an_answer_posted_to_b_reaches_the_stream_on_a_and_a_foreign_one_changes_nothing() {
    let Pair {
        a,
        b,
        calls,
        client,
    } = pair().await;
    let mine = client.initialize(&a).await;
    let theirs = client.initialize(&b).await;
    let mut events = client.call(&a, &mine, 13).await;
    let leg = events.request("elicitation/create").await;
    // Another session answers "approve" with the leg's id, on B: 202, delivered nowhere.
    let approve = json!({"action": "accept", "content": {"approve": true}});
    client.reply(&b, &theirs, &leg["id"], approve.clone()).await;
    // An id the bridge never issued changes nothing either, on either replica.
    client
        .reply(&b, &mine, &json!("leg-0000"), approve.clone())
        .await;
    client.reply(&a, &mine, &json!("leg-0000"), approve).await;
    // An invalid answer, on B: the elicitation layer asks again, on A's stream.
    client
        .reply(
            &b,
            &mine,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": "yes"}}),
        )
        .await;
    let again = events.request("elicitation/create").await;
    assert_ne!(again["id"], leg["id"]);
    // A late answer to the first leg, on B, is not taken for the second.
    client
        .reply(
            &b,
            &mine,
            &leg["id"],
            json!({"action": "accept",
        "content": {"approve": true}}),
        )
        .await;
    client
        .reply(&b, &mine, &again["id"], json!({"action": "decline"}))
        .await;
    let done = events.next().await.unwrap();
    assert_eq!(
        (done["id"].clone(), result_text(&done)),
        (json!(13), "not approved")
    );
    assert!(events.next().await.is_none(), "the result ends the stream");
    // Round 1 and the decline: neither the foreign, the unknown nor the late answer got through.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    until_nothing_waits(&a).await;
    assert!(b.pending.is_empty());
}

async fn a_call_on_a_cancelled_through_b_ends_and_forwards_nothing_more() {
    let Pair {
        a,
        b,
        calls,
        client,
    } = pair().await;
    let session = client.initialize(&b).await;
    let mut events = client.call(&a, &session, 11).await;
    let leg = events.request("elicitation/create").await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 11, "reason": "user gave up"}});
    assert_eq!(client.send(&b, Some(&session), &cancel).await.0, 202);
    let cancelled = events.next().await.unwrap();
    assert_eq!(cancelled["method"], "notifications/cancelled");
    assert_eq!(cancelled["params"]["requestId"], leg["id"]);
    assert_eq!(
        events.next().await,
        None,
        "a cancelled request is not answered"
    );
    until_nothing_waits(&a).await;
    client
        .reply(
            &b,
            &session,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// ---- the stores themselves ----

fn record(level: Option<&str>) -> SessionRecord {
    let mut record: SessionRecord = serde_json::from_value(json!({
        "protocol_version": "2025-11-25", "client_capabilities": {},
        "client_info": {"name": "t", "version": "1"}, "log_level": null, "principal": null}))
    .unwrap();
    record.log_level = level.map(str::to_owned);
    record
}

async fn redis_sessions_expire_when_idle_and_an_ended_one_cannot_be_updated() {
    let prefix = prefix();
    let store = redis(&prefix).await;
    let sessions = store.sessions(Duration::from_secs(60));
    sessions.create("s1", record(None)).await.unwrap();
    // An id is created once.
    assert!(sessions.create("s1", record(None)).await.is_err());
    assert_eq!(sessions.get("s1").await.unwrap(), Some(record(None)));
    assert!(sessions.update("s1", record(Some("debug"))).await.unwrap());
    // Another replica's store (connections of its own) sees the update.
    let other = redis(&prefix).await.sessions(Duration::from_secs(60));
    assert_eq!(other.get("s1").await.unwrap(), Some(record(Some("debug"))));
    assert!(other.remove("s1").await.unwrap());
    assert_eq!(sessions.get("s1").await.unwrap(), None);
    assert!(!sessions.update("s1", record(None)).await.unwrap());
    assert!(!sessions.remove("s1").await.unwrap());
    assert_eq!(
        sessions.get("s1").await.unwrap(),
        None,
        "update does not bring it back"
    );

    // Idle for longer than its expiry: gone.
    let brief = store.sessions(Duration::from_millis(20));
    brief.create("s2", record(None)).await.unwrap();
    tokio::time::timeout(WAIT, async {
        while brief.get("s2").await.unwrap().is_some() {
            // Each `get` pushes the expiry back: only a pause longer than it lets it expire.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("an idle session expires");
    assert!(!brief.update("s2", record(None)).await.unwrap());
}

async fn redis_pending_answers_deliver_across_replicas_only_to_their_own_leg() {
    let prefix = prefix();
    let a = redis(&prefix).await.pending_answers();
    let b = redis(&prefix).await.pending_answers();
    let elsewhere = redis(&self::prefix()).await.pending_answers();
    let key = AnswerKey::new("s1", "\"leg-1\"");
    let waiter = a.subscribe(key.clone()).await.unwrap();
    // Make sure B's own subscriber is up, so that A is not the only receiver it could count.
    let _other = b
        .subscribe(AnswerKey::new("s9", "\"leg-9\""))
        .await
        .unwrap();
    // Another prefix is another application: nothing it publishes reaches A, and it knows no
    // other replica that could take it.
    assert!(
        !elsewhere
            .deliver(key.clone(), json!("elsewhere"))
            .await
            .unwrap()
    );
    // Another session's answer with the same leg id, through B: published, taken by nobody.
    b.deliver(AnswerKey::new("s2", "\"leg-1\""), json!("theirs"))
        .await
        .unwrap();
    assert!(b.deliver(key.clone(), json!("mine")).await.unwrap());
    assert_eq!(
        tokio::time::timeout(WAIT, waiter).await.unwrap(),
        Some(json!("mine"))
    );
    assert!(a.is_empty());
    // A forgotten leg takes nothing, and its waiter ends without an answer.
    let key = AnswerKey::new("s1", "\"leg-2\"");
    let waiter = a.subscribe(key.clone()).await.unwrap();
    a.unsubscribe(&key).await.unwrap();
    b.deliver(key, json!("late")).await.unwrap();
    assert_eq!(tokio::time::timeout(WAIT, waiter).await.unwrap(), None);
}

// ---- outages ----

async fn when_redis_drops_the_subscriber_the_bridge_fails_closed_then_reconnects_by_itself() {
    let prefix = prefix();
    let proxy = Proxy::start(upstream()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    // A's answers travel through the proxy; its sessions, and all of B, do not.
    let a = replica(
        &redis(&prefix).await,
        &store_at(&proxy.url(), &prefix),
        Arc::clone(&calls),
    )
    .await;
    let b = {
        let store = redis(&prefix).await;
        replica(&store, &store, Arc::clone(&calls)).await
    };
    let client = Client(reqwest::Client::new());
    let session = client.initialize(&a).await;
    let mut events = client.call(&a, &session, 1).await;
    let leg = events.request("elicitation/create").await;
    assert!(a.pending.is_subscribed());

    // Redis drops A's subscriber while the call waits: the answer POSTed to B is lost (the call
    // would end on its answer timeout), and a new call on A is refused rather than left waiting
    // for what could never reach it.
    proxy.set(Link::Down);
    tokio::time::timeout(WAIT, async {
        while a.pending.is_subscribed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the subscriber finds out the connection is gone");
    client
        .reply(
            &b,
            &session,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    let mut refused = client.call(&a, &session, 2).await;
    let done = refused.next().await.unwrap();
    assert_eq!(done["id"], 2);
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the answer lost on B got nowhere"
    );
    drop(events);

    // Redis back: the subscriber is again, with no restart, and answers through B arrive.
    proxy.set(Link::Up);
    tokio::time::timeout(WAIT, async {
        while !a.pending.is_subscribed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the subscriber connects again by itself");
    let mut events = client.call(&a, &session, 3).await;
    let leg = events.request("elicitation/create").await;
    client
        .reply(
            &b,
            &session,
            &leg["id"],
            json!({"action": "accept", "content": {"approve": true}}),
        )
        .await;
    let done = events.next().await.unwrap();
    assert_eq!(
        (done["id"].clone(), result_text(&done)),
        (json!(3), "approved")
    );
}

crate::trials! {
    [Redis] current_thread a_session_opened_on_a_is_used_on_b_and_ended_on_b_is_refused_on_a,
    [Redis] current_thread an_answer_posted_to_b_reaches_the_stream_on_a_and_a_foreign_one_changes_nothing,
    [Redis] current_thread a_call_on_a_cancelled_through_b_ends_and_forwards_nothing_more,
    [Redis] current_thread redis_sessions_expire_when_idle_and_an_ended_one_cannot_be_updated,
    [Redis] current_thread redis_pending_answers_deliver_across_replicas_only_to_their_own_leg,
    [Redis] current_thread when_redis_drops_the_subscriber_the_bridge_fails_closed_then_reconnects_by_itself,
}
