//! Single-use tokens end to end: a retry is forwarded only once its token's id was consumed;
//! a replay is refused on the same replica and on another; of concurrent retries with one token
//! exactly one is forwarded; an unreachable store fails closed (`-32603`, HTTP 503) and the layer
//! recovers by itself; URL flows in Redis are completed on one replica for a retry on another.
//!
//! The Redis cases run against the real Redis at `MCP_REDIS_URL` (default
//! `redis://127.0.0.1:6379`), each under a key prefix of its own; outages are made with a TCP
//! proxy this file controls, never by stopping the shared server.
//! Without a Redis they return at once and the run says so; `MCP_REQUIRE_REDIS=1` makes that a
//! failure (`support::redis`).

use crate::support;
use crate::support::redis as redis_support;
use crate::support::server;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::StatusCode;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::{Consumed, MemoryTokenStore, StoreError, TokenStore};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget};

use redis_support::{Link, Proxy, prefix, redis_url, upstream};
use support::{Call, FakeMcp, Harness, Reply, Transport, keyring};

// ---------------------------------------------------------------------------------------------
// The fake server and its calls.

fn approval() -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form",
        "message": "Deploy to staging?",
        "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}},
            "required": ["approve"]}}})
}

/// Asks for `approval` until it is given `approve: true`, then deploys.
fn approval_server() -> FakeMcp {
    FakeMcp::answering(Transport::Json, |params| {
        match params["inputResponses"]["approval"]["content"]["approve"].as_bool() {
            Some(true) => json!({"resultType": "complete",
                "content": [{"type": "text", "text": "Deployed"}]}),
            _ => json!({"resultType": "input_required",
                "inputRequests": {"approval": approval()}}),
        }
    })
}

fn deploy() -> Call {
    Call::tool("deploy").args(json!({"env": "staging"}))
}

fn approve(state: &str) -> Call {
    deploy()
        .state(state)
        .answers(json!({"approval": {"action": "accept", "content": {"approve": true}}}))
}

fn wrong(state: &str) -> Call {
    deploy()
        .state(state)
        .answers(json!({"approval": {"action": "accept", "content": {"approve": "yes"}}}))
}

fn deployed(reply: &Reply) -> bool {
    reply.status == StatusCode::OK && reply.json()["result"]["content"][0]["text"] == "Deployed"
}

#[track_caller]
fn assert_frozen(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.bytes);
    let message = reply.json();
    assert_eq!(message["error"]["code"], -32602, "{message}");
    assert_eq!(
        message["error"]["message"],
        "Invalid or expired requestState"
    );
    assert_eq!(message["error"]["data"]["reason"], "invalid_request_state");
}

#[track_caller]
fn assert_unavailable(reply: &Reply) {
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        reply.bytes
    );
    assert_eq!(reply.json()["error"]["code"], -32603);
}

/// The first round's sealed state.
async fn first_state(harness: &Harness) -> String {
    let reply = harness.call(&deploy()).await;
    assert_eq!(reply.json()["result"]["resultType"], "input_required");
    reply.state()
}

fn single_use(store: impl TokenStore) -> ElicitationLayer {
    ElicitationLayer::new(keyring()).single_use(store)
}

// ---------------------------------------------------------------------------------------------
// In process.

async fn a_token_is_forwarded_once_and_its_replay_refused() {
    let harness = Harness::new(single_use(MemoryTokenStore::new()), approval_server());
    let state = first_state(&harness).await;
    assert!(deployed(&harness.call(&approve(&state)).await));
    assert_eq!(harness.fake.calls(), 2);

    assert_frozen(&harness.call(&approve(&state)).await);
    // Whatever the replay carries: it is refused before anything else.
    assert_frozen(&harness.call(&wrong(&state)).await);
    assert_frozen(&harness.call(&deploy().state(&state)).await);
    assert_eq!(
        harness.fake.calls(),
        2,
        "a replay reached the inner service"
    );
}

async fn without_the_option_a_token_can_be_replayed_until_it_expires() {
    // The default stays as it was: stateless, replayable.
    let harness = Harness::new(ElicitationLayer::new(keyring()), approval_server());
    let state = first_state(&harness).await;
    assert!(deployed(&harness.call(&approve(&state)).await));
    assert!(deployed(&harness.call(&approve(&state)).await));
    assert_eq!(harness.fake.calls(), 3);
}

async fn the_layers_own_reask_spends_the_old_token_and_mints_a_new_one() {
    let harness = Harness::new(single_use(MemoryTokenStore::new()), approval_server());
    let first = first_state(&harness).await;
    let reask = harness.call(&wrong(&first)).await;
    assert_eq!(reask.json()["result"]["resultType"], "input_required");
    let second = reask.state();
    assert_ne!(second, first);
    assert_eq!(harness.fake.calls(), 1, "the re-ask is the layer's own");

    // The old token was spent by the re-ask, even with a valid answer now.
    assert_frozen(&harness.call(&approve(&first)).await);
    assert_eq!(harness.fake.calls(), 1);
    assert!(deployed(&harness.call(&approve(&second)).await));
    assert_frozen(&harness.call(&approve(&second)).await);
    assert_eq!(harness.fake.calls(), 2);
}

async fn tokens_without_an_id_are_refused_only_when_the_option_is_on() {
    // Sealed by a layer without the option (same keys): no id.
    let plain = Harness::new(ElicitationLayer::new(keyring()), approval_server());
    let old = first_state(&plain).await;
    let strict = Harness::new(single_use(MemoryTokenStore::new()), approval_server());
    assert_frozen(&strict.call(&approve(&old)).await);
    assert_eq!(strict.fake.calls(), 0);
    // The layer without the option still takes it.
    assert!(deployed(&plain.call(&approve(&old)).await));

    // A token with an id is an ordinary token to a layer without the option.
    let new = first_state(&strict).await;
    assert!(deployed(&plain.call(&approve(&new)).await));
}

async fn the_id_is_inside_the_mac_so_it_cannot_be_swapped() {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    let harness = Harness::new(single_use(MemoryTokenStore::new()), approval_server());
    let state = first_state(&harness).await;
    let parts: Vec<&str> = state.split('.').collect();
    let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap())
        .expect("claims are JSON");
    let id = claims["j"]
        .as_str()
        .expect("a single-use token has an id")
        .to_owned();
    assert_eq!(id.len(), 22);
    assert!(deployed(&harness.call(&approve(&state)).await));

    // The same token with another id (so a fresh one to the store) does not verify.
    claims["j"] = json!("AAAAAAAAAAAAAAAAAAAAAA");
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    let swapped = format!("{}.{}.{body}.{}", parts[0], parts[1], parts[3]);
    assert_frozen(&harness.call(&approve(&swapped)).await);
    assert_eq!(harness.fake.calls(), 2);

    // Every token gets an id of its own.
    let other = first_state(&harness).await;
    let other: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(other.split('.').nth(2).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_ne!(other["j"].as_str(), Some(id.as_str()));
}

async fn tokens_sealed_in_an_event_stream_are_single_use_too() {
    let fake = FakeMcp::answering(Transport::Sse, |params| {
        match params["inputResponses"]["approval"]["content"]["approve"].as_bool() {
            Some(true) => json!({"resultType": "complete",
                "content": [{"type": "text", "text": "Deployed"}]}),
            _ => json!({"resultType": "input_required",
                "inputRequests": {"approval": approval()}}),
        }
    });
    let harness = Harness::new(single_use(MemoryTokenStore::new()), fake);
    let first = harness.call(&deploy()).await;
    assert_eq!(first.content_type(), "text/event-stream");
    let message = first
        .events()
        .iter()
        .map(|event| support::event_data(event))
        .find(|message| message.get("result").is_some())
        .expect("a response event");
    let state = message["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = harness.call(&approve(&state)).await;
    assert!(
        done.events()
            .iter()
            .any(|event| support::event_data(event)["result"]["content"][0]["text"] == "Deployed")
    );
    assert_frozen(&harness.call(&approve(&state)).await);
    assert_eq!(harness.fake.calls(), 2);
}

// Several threads, so that the retries really run at once.
async fn concurrent_retries_with_one_token_forward_exactly_one() {
    let harness = Arc::new(Harness::new(
        single_use(MemoryTokenStore::new()),
        approval_server(),
    ));
    let state = first_state(&harness).await;
    let retries: Vec<_> = (0..16)
        .map(|_| {
            let (harness, call) = (Arc::clone(&harness), approve(&state));
            tokio::spawn(async move { harness.call(&call).await })
        })
        .collect();
    let mut forwarded = 0;
    for retry in retries {
        let reply = retry.await.unwrap();
        if deployed(&reply) {
            forwarded += 1;
        } else {
            assert_frozen(&reply);
        }
    }
    assert_eq!(forwarded, 1);
    assert_eq!(harness.fake.calls(), 2);
}

async fn a_gate_is_passed_once_per_token() {
    let gate = Gate::form(
        "confirm",
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    )
    .unwrap();
    let layer = single_use(MemoryTokenStore::new())
        .gate(GateTarget::tool("drop"), gate)
        .unwrap();
    let fake = FakeMcp::answering(
        Transport::Json,
        |_| json!({"resultType": "complete", "content": [{"type": "text", "text": "Dropped"}]}),
    );
    let harness = Harness::new(layer, fake);
    let drop = || Call::tool("drop").args(json!({"table": "users"}));
    let asked = harness.call(&drop()).await;
    let state = asked.state();
    let answer = drop()
        .state(&state)
        .answers(json!({"confirm": {"action": "accept", "content": {"ok": true}}}));
    let passed = harness.call(&answer).await;
    assert_eq!(passed.json()["result"]["content"][0]["text"], "Dropped");
    assert_frozen(&harness.call(&answer).await);
    assert_eq!(harness.fake.calls(), 1);
}

/// A store that cannot be reached.
struct Unreachable;

impl TokenStore for Unreachable {
    async fn consume(&self, _: &str, _: SystemTime) -> Result<Consumed, StoreError> {
        Err(StoreError::unavailable("connection refused"))
    }
}

async fn a_store_that_cannot_say_fails_closed() {
    let harness = Harness::new(single_use(Unreachable), approval_server());
    let state = first_state(&harness).await;
    let reply = harness.call(&approve(&state)).await;
    assert_unavailable(&reply);
    assert_eq!(reply.content_type(), "application/json");
    // The layer's re-ask mints a token only once the old one is spent: refused too.
    assert_unavailable(&harness.call(&wrong(&state)).await);
    assert_eq!(harness.fake.calls(), 1, "nothing was forwarded");
}

async fn a_full_in_process_store_fails_closed_rather_than_forget() {
    let harness = Harness::new(
        single_use(MemoryTokenStore::with_capacity(1)),
        approval_server(),
    );
    let one = first_state(&harness).await;
    let two = first_state(&harness).await;
    assert!(deployed(&harness.call(&approve(&one)).await));
    assert_unavailable(&harness.call(&approve(&two)).await);
    // The id it holds is still refused.
    assert_frozen(&harness.call(&approve(&one)).await);
    assert_eq!(harness.fake.calls(), 3);
}

// ---------------------------------------------------------------------------------------------
// Redis.

/// A store on `url` under `prefix`, with short timeouts; panics, saying why, when Redis does not
/// answer.
async fn redis_at(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder(url)
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .expect("a Redis URL")
}

async fn redis(prefix: &str) -> RedisStore {
    let url = redis_url();
    let store = redis_at(&url, prefix).await;
    if let Err(error) = store.ping().await {
        panic!("these tests need a Redis at {url} (set MCP_REDIS_URL): {error}");
    }
    store
}

/// Two replicas: two layers sharing the keyring and Redis (each with a store of its own).
async fn replicas() -> (Harness, Harness) {
    let prefix = prefix();
    let a = Harness::new(single_use(redis(&prefix).await), approval_server());
    let b = Harness::new(single_use(redis(&prefix).await), approval_server());
    (a, b)
}

async fn redis_a_replayed_token_is_refused_on_the_same_replica_and_on_another() {
    let (a, b) = replicas().await;
    let state = first_state(&a).await;
    assert!(deployed(&a.call(&approve(&state)).await));
    assert_frozen(&a.call(&approve(&state)).await);
    assert_frozen(&b.call(&approve(&state)).await);

    // Sealed on B, used on A, replayed on B.
    let state = first_state(&b).await;
    assert!(deployed(&a.call(&approve(&state)).await));
    assert_frozen(&b.call(&approve(&state)).await);
    assert_frozen(&a.call(&approve(&state)).await);

    // A re-ask on B spends the token for A too.
    let state = first_state(&a).await;
    let next = b.call(&wrong(&state)).await.state();
    assert_frozen(&a.call(&approve(&state)).await);
    assert!(deployed(&a.call(&approve(&next)).await));
    // A: two first rounds sealed there, three forwarded; B: one first round.
    assert_eq!((a.fake.calls(), b.fake.calls()), (5, 1));
}

// Several threads, so that the retries really run at once.
async fn redis_concurrent_retries_on_two_replicas_forward_exactly_one() {
    let (a, b) = replicas().await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    for _ in 0..5 {
        let state = first_state(&a).await;
        let before = a.fake.calls() + b.fake.calls();
        let retries: Vec<_> = (0..8)
            .map(|n| {
                let replica = Arc::clone(if n % 2 == 0 { &a } else { &b });
                let call = approve(&state);
                tokio::spawn(async move { replica.call(&call).await })
            })
            .collect();
        let mut forwarded = 0;
        for retry in retries {
            let reply = retry.await.unwrap();
            if deployed(&reply) {
                forwarded += 1;
            } else {
                assert_frozen(&reply);
            }
        }
        assert_eq!(forwarded, 1);
        assert_eq!(a.fake.calls() + b.fake.calls(), before + 1);
    }
}

async fn redis_store_keys_expire_with_their_token() {
    let prefix = prefix();
    let store = redis(&prefix).await;
    let until = SystemTime::now() + Duration::from_secs(120);
    assert_eq!(store.consume("abc", until).await.unwrap(), Consumed::Fresh);
    assert_eq!(
        store.consume("abc", until).await.unwrap(),
        Consumed::Replayed
    );
    assert_eq!(store.consume("abd", until).await.unwrap(), Consumed::Fresh);
    // The key carries the token's own expiry (to the millisecond).
    let key = format!("{prefix}jti:abc");
    let output = std::process::Command::new("redis-cli")
        .args(["-u", &redis_url(), "PEXPIRETIME", &key])
        .output();
    if let Ok(output) = output
        && output.status.success()
    {
        let at: u128 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap();
        let want = until
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert_eq!(at / 1000, want / 1000, "{key}");
    }
}

/// Retries `call` until it is forwarded (Redis back); every answer before that is a 503.
async fn until_recovered(harness: &Harness, call: &Call) -> usize {
    for attempt in 0..100 {
        let reply = harness.call(call).await;
        if deployed(&reply) {
            return attempt;
        }
        assert_unavailable(&reply);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the layer did not recover once Redis was back");
}

async fn redis_down_fails_closed_then_recovers_with_no_restart() {
    let prefix = prefix();
    redis(&prefix).await;
    let proxy = Proxy::start(upstream()).await;
    let store = redis_at(&proxy.url(), &prefix).await;
    store.ping().await.expect("Redis through the proxy");
    let harness = Harness::new(single_use(store.clone()), approval_server());
    let state = first_state(&harness).await;
    assert!(deployed(&harness.call(&approve(&state)).await));

    // Redis goes away mid-run: no retry is forwarded, and none spends its token.
    let pending = first_state(&harness).await;
    proxy.set(Link::Down);
    for _ in 0..3 {
        assert_unavailable(&harness.call(&approve(&pending)).await);
        assert_unavailable(&harness.call(&wrong(&pending)).await);
    }
    assert_eq!(
        harness.fake.calls(),
        3,
        "a call was forwarded while Redis was down"
    );
    // A first round needs no store: it is still asked.
    assert_eq!(
        harness.call(&deploy()).await.json()["result"]["resultType"],
        "input_required"
    );

    // Back: the same layer, the same store, no restart. The pending token was never spent.
    proxy.set(Link::Up);
    until_recovered(&harness, &approve(&pending)).await;
    assert_frozen(&harness.call(&approve(&pending)).await);
    assert_frozen(&harness.call(&approve(&state)).await);
}

async fn redis_stalled_answers_503_promptly_then_recovers() {
    let prefix = prefix();
    redis(&prefix).await;
    let proxy = Proxy::start(upstream()).await;
    let store = redis_at(&proxy.url(), &prefix).await;
    store.ping().await.expect("Redis through the proxy");
    let harness = Harness::new(single_use(store), approval_server());
    let state = first_state(&harness).await;

    // Redis hangs: the command times out (within the harness's own bound) and nothing is
    // forwarded.
    proxy.set(Link::Stalled);
    assert_unavailable(&harness.call(&approve(&state)).await);
    assert_eq!(harness.fake.calls(), 1);

    // A token whose consumption timed out may or may not have been spent once Redis wakes up;
    // a fresh call goes through.
    proxy.set(Link::Up);
    let fresh = first_state(&harness).await;
    until_recovered(&harness, &approve(&fresh)).await;
    assert_frozen(&harness.call(&approve(&fresh)).await);
}

// ---------------------------------------------------------------------------------------------
// URL flows in Redis, through the deploy example's routers.

/// One replica of the deploy example: its router, with URL flows in Redis under `prefix`.
async fn deploy_replica(prefix: &str, single: bool) -> axum::Router {
    let redis = redis(prefix).await;
    let state = server::DeployState::new().with_redis_flows("http://127.0.0.1:3000", &redis);
    let mut layer = ElicitationLayer::new(keyring());
    if single {
        layer = layer.single_use(redis.clone());
    }
    server::router_with(layer, state, true).unwrap()
}

async fn post(router: &axum::Router, id: u64, extra: Value) -> Value {
    let mut params = json!({"name": "connect_github", "arguments": {"account": "octocat"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let request = http::Request::post(server::MCP_PATH)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "connect_github")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    Reply::read(response).await.json()
}

async fn get(router: &axum::Router, path: &str) -> StatusCode {
    let request = http::Request::get(path)
        .header("host", "localhost")
        .body(axum::body::Body::empty())
        .unwrap();
    router.clone().oneshot(request).await.unwrap().status()
}

async fn redis_a_url_flow_completed_on_b_is_complete_for_a_retry_on_a() {
    for single in [false, true] {
        let prefix = prefix();
        let a = deploy_replica(&prefix, single).await;
        let b = deploy_replica(&prefix, single).await;

        let asked = post(&a, 1, json!({})).await;
        let result = &asked["result"];
        assert_eq!(result["resultType"], "input_required", "{asked}");
        let url = result["inputRequests"][server::GITHUB_KEY]["params"]["url"]
            .as_str()
            .unwrap()
            .to_owned();
        let path = url
            .strip_prefix("http://127.0.0.1:3000")
            .unwrap()
            .to_owned();
        let state = result["requestState"].as_str().unwrap().to_owned();
        let accept = |state: &str| {
            json!({"requestState": state,
                "inputResponses": {server::GITHUB_KEY: {"action": "accept"}}})
        };

        // Not complete yet: asked again (on B, from A's flow).
        let again = post(&b, 2, accept(&state)).await;
        assert_eq!(again["result"]["resultType"], "input_required", "{again}");
        let state = again["result"]["requestState"].as_str().unwrap().to_owned();

        // The page and the callback on B know A's flow; the retry lands on A.
        assert_eq!(get(&b, &path).await, StatusCode::OK);
        assert_eq!(get(&b, &format!("{path}/complete")).await, StatusCode::OK);
        let done = post(&a, 3, accept(&state)).await;
        assert_eq!(
            done["result"]["content"][0]["text"], "Connected octocat",
            "{done}"
        );
        if single {
            let replay = post(&b, 4, accept(&state)).await;
            assert_eq!(replay["error"]["code"], -32602, "{replay}");
        }

        // A flow no one started is unknown to both.
        assert_eq!(
            get(&a, "/flows/nosuchflow/complete").await,
            StatusCode::NOT_FOUND
        );
    }
}

/// The example's in-process flows stay per replica: what Redis is for.
async fn in_process_flows_are_not_shared_between_replicas() {
    let a = server::router_with(
        ElicitationLayer::new(keyring()),
        server::DeployState::new(),
        true,
    )
    .unwrap();
    let b = server::router_with(
        ElicitationLayer::new(keyring()),
        server::DeployState::new(),
        true,
    )
    .unwrap();
    let asked = post(&a, 1, json!({})).await;
    let url = asked["result"]["inputRequests"][server::GITHUB_KEY]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = url.strip_prefix("http://127.0.0.1:3000").unwrap();
    assert_eq!(
        get(&b, &format!("{path}/complete")).await,
        StatusCode::NOT_FOUND
    );
}

crate::trials! {
    [] current_thread a_token_is_forwarded_once_and_its_replay_refused,
    [] current_thread without_the_option_a_token_can_be_replayed_until_it_expires,
    [] current_thread the_layers_own_reask_spends_the_old_token_and_mints_a_new_one,
    [] current_thread tokens_without_an_id_are_refused_only_when_the_option_is_on,
    [] current_thread the_id_is_inside_the_mac_so_it_cannot_be_swapped,
    [] current_thread tokens_sealed_in_an_event_stream_are_single_use_too,
    [] multi_thread concurrent_retries_with_one_token_forward_exactly_one,
    [] current_thread a_gate_is_passed_once_per_token,
    [] current_thread a_store_that_cannot_say_fails_closed,
    [] current_thread a_full_in_process_store_fails_closed_rather_than_forget,
    [Redis] current_thread redis_a_replayed_token_is_refused_on_the_same_replica_and_on_another,
    [Redis] multi_thread redis_concurrent_retries_on_two_replicas_forward_exactly_one,
    [Redis] current_thread redis_store_keys_expire_with_their_token,
    [Redis] current_thread redis_down_fails_closed_then_recovers_with_no_restart,
    [Redis] current_thread redis_stalled_answers_503_promptly_then_recovers,
    [Redis] current_thread redis_a_url_flow_completed_on_b_is_complete_for_a_retry_on_a,
    [] current_thread in_process_flows_are_not_shared_between_replicas,
}
