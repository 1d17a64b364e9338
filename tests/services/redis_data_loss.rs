//! Single-use tokens when Redis forgets: a Redis this file owns (its own `redis-server` on a free
//! port, `--save '' --appendonly no`) is restarted empty mid-run, and run under an evicting
//! `maxmemory-policy`. A spent approval is never accepted again: 0 replays.
//!
//! Without `redis-server` on `PATH` the harness reports every test here as ignored, saying why;
//! with `MCP_REQUIRE_REDIS=1` set, it fails instead.
//!
//! Self-contained on purpose: a gated tool on a plain `service_fn`, nothing from `tests/support`.

use std::convert::Infallible;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::redis::RedisStore;
use tower_elicitation::{Elicitation, ElicitationLayer, Gate, GateTarget, Keyring, RequestBody};

// ---------------------------------------------------------------------------------------------
// A Redis of the test's own.

/// A `redis-server` this test started, killed when dropped.
struct OwnRedis {
    port: u16,
    args: Vec<String>,
    child: Child,
}

impl OwnRedis {
    /// Starts one on a free port with `extra` arguments. The harness ran this test only after
    /// finding `redis-server` on `PATH`; never `None` (it keeps the callers' `let … else` plain).
    fn start(_test: &str, extra: &[&str]) -> Option<Self> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let child = spawn(&args);
        let redis = Self { port, args, child };
        redis.wait_up();
        Some(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it and starts it again on the same port: empty, as a Redis without persistence is.
    fn restart_empty(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.args);
        self.wait_up();
    }

    fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn wait_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && self.cli(&["PING"]) == "PONG"
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }
}

fn spawn(args: &[String]) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// A gated deploy.

type Inner = tower::util::BoxCloneSyncService<
    Request<RequestBody<Full<Bytes>>>,
    Response<Full<Bytes>>,
    Infallible,
>;

/// A server that deploys whenever it is called (it knows nothing of approvals), and how many
/// times it did.
fn deployer() -> (Inner, Arc<AtomicUsize>) {
    let deployed = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&deployed);
    let service = tower::service_fn(move |request: Request<RequestBody<Full<Bytes>>>| {
        let count = Arc::clone(&count);
        async move {
            let body: Bytes = BodyExt::collect(request.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            count.fetch_add(1, Ordering::SeqCst);
            let reply = json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"content": [{"type": "text", "text": "Deployed"}]}});
            Ok::<_, Infallible>(
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(reply.to_string())))
                    .unwrap(),
            )
        }
    });
    (Inner::new(service), deployed)
}

fn store(url: &str, prefix: &str) -> tower_elicitation::redis::RedisStoreBuilder {
    RedisStore::builder(url)
        .key_prefix(prefix)
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
}

/// One replica: the gate `approval` before `deploy`, single-use tokens in `store`.
fn replica(store: RedisStore) -> (Elicitation<Inner>, Arc<AtomicUsize>) {
    let schema = json!({"type": "object", "properties": {"approve": {"type": "boolean"}},
        "required": ["approve"]});
    let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).unwrap())
        .single_use(store)
        .gate(
            GateTarget::tool("deploy"),
            Gate::form("approval", schema).unwrap(),
        )
        .unwrap();
    let (inner, deployed) = deployer();
    (ServiceBuilder::new().layer(layer).service(inner), deployed)
}

fn call(extra: Value) -> Request<Full<Bytes>> {
    let mut params = json!({"name": "deploy", "arguments": {"env": "prod"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}});
    if let Value::Object(extra) = extra {
        params.as_object_mut().unwrap().extend(extra);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn send<S, B>(service: &S, request: Request<Full<Bytes>>) -> (u16, Value)
where
    S: Clone + Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let response = tokio::time::timeout(Duration::from_secs(10), service.clone().oneshot(request))
        .await
        .expect("an answer in time")
        .unwrap_or_else(|never| match never {});
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The first round: the gate asks; its sealed state.
async fn asked<S, B>(service: &S) -> String
where
    S: Clone + Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let (_, reply) = send(service, call(json!({}))).await;
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply}");
    reply["result"]["requestState"].as_str().unwrap().to_owned()
}

fn approve(state: &str) -> Request<Full<Bytes>> {
    call(json!({"requestState": state,
        "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}}}))
}

fn deployed(reply: &Value) -> bool {
    reply["result"]["content"][0]["text"] == "Deployed"
}

#[track_caller]
fn assert_refused(status: u16, reply: &Value) {
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(
        reply["error"]["data"]["reason"], "invalid_request_state",
        "{reply}"
    );
}

/// Sends `request` until Redis answers again (503 meanwhile); the answer then.
async fn once_back<S, B>(service: &S, request: impl Fn() -> Request<Full<Bytes>>) -> (u16, Value)
where
    S: Clone + Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    for _ in 0..200 {
        let (status, reply) = send(service, request()).await;
        if status != 503 {
            return (status, reply);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the store did not recover once Redis was back");
}

// ---------------------------------------------------------------------------------------------

/// A Redis that evicts the least recently used keys once past a tiny `maxmemory`.
const EVICTING: &[&str] = &["--maxmemory-policy", "allkeys-lru", "--maxmemory", "2mb"];

async fn a_token_spent_before_redis_restarted_empty_is_refused_after() {
    let Some(mut redis) = OwnRedis::start("restart_empty", &[]) else {
        return;
    };
    let prefix = "te-loss:";
    // Two replicas, one Redis.
    let (a, deployed_a) = replica(store(&redis.url(), prefix).build().unwrap());
    let (b, deployed_b) = replica(store(&redis.url(), prefix).build().unwrap());

    let spent = asked(&a).await;
    let pending = asked(&b).await;
    assert!(deployed(&send(&a, approve(&spent)).await.1));
    let (status, reply) = send(&b, approve(&spent)).await;
    assert_refused(status, &reply);

    redis.restart_empty();
    assert_eq!(redis.cli(&["DBSIZE"]), "0", "the new Redis is empty");

    // The replay after the restart, on either replica: refused, by the store's new epoch.
    let (status, reply) = once_back(&b, || approve(&spent)).await;
    assert_refused(status, &reply);
    let (status, reply) = once_back(&a, || approve(&spent)).await;
    assert_refused(status, &reply);
    // A token sealed before the loss and never spent is refused too: the person starts again.
    let (status, reply) = send(&b, approve(&pending)).await;
    assert_refused(status, &reply);
    assert_eq!(
        deployed_a.load(Ordering::SeqCst) + deployed_b.load(Ordering::SeqCst),
        1,
        "0 replays accepted"
    );

    // Starting again works, once, on either replica, at once: a token is bound to the epoch it
    // was sealed under, not dated against it.
    let fresh = asked(&a).await;
    assert!(deployed(&send(&b, approve(&fresh)).await.1));
    let (status, reply) = send(&a, approve(&fresh)).await;
    assert_refused(status, &reply);
    assert_eq!(
        deployed_a.load(Ordering::SeqCst) + deployed_b.load(Ordering::SeqCst),
        2
    );
}

async fn a_token_sealed_right_after_a_new_epoch_began_is_accepted_on_every_replica() {
    let Some(mut redis) = OwnRedis::start("new_epoch", &[]) else {
        return;
    };
    let prefix = "te-epoch:";
    let (a, deployed_a) = replica(store(&redis.url(), prefix).build().unwrap());
    let (b, deployed_b) = replica(store(&redis.url(), prefix).build().unwrap());
    // Both replicas know the first epoch.
    let state = asked(&a).await;
    assert!(deployed(&send(&b, approve(&state)).await.1));
    let state = asked(&b).await;
    assert!(deployed(&send(&a, approve(&state)).await.1));
    let before_a = asked(&a).await;
    let before_b = asked(&b).await;

    // The epoch key is gone (evicted, flushed): the next first round begins a new epoch.
    assert_eq!(redis.cli(&["DEL", &format!("{prefix}epoch")]), "1");
    // Sealed right after, on one replica, approved on the other (whose last known epoch is the
    // old one): accepted, in the very second the epoch began.
    let after_a = asked(&a).await;
    let after_b = asked(&b).await;
    assert!(deployed(&send(&b, approve(&after_a)).await.1));
    assert!(deployed(&send(&a, approve(&after_b)).await.1));
    // Sealed before: refused on either replica (they may have been spent and forgotten).
    let (status, reply) = send(&b, approve(&before_a)).await;
    assert_refused(status, &reply);
    let (status, reply) = send(&a, approve(&before_b)).await;
    assert_refused(status, &reply);

    // Redis restarted empty: the same, with the whole memory gone.
    let before = asked(&b).await;
    redis.restart_empty();
    // Each replica reconnected (a retry answered 503 until then): sealed before, refused.
    let (status, reply) = once_back(&a, || approve(&before)).await;
    assert_refused(status, &reply);
    let (status, reply) = once_back(&b, || approve(&before)).await;
    assert_refused(status, &reply);
    let after = asked(&a).await;
    assert!(deployed(&send(&b, approve(&after)).await.1));
    assert_eq!(
        deployed_a.load(Ordering::SeqCst) + deployed_b.load(Ordering::SeqCst),
        5
    );
}

async fn single_use_refuses_to_run_on_an_evicting_redis() {
    let Some(redis) = OwnRedis::start("evicting", EVICTING) else {
        return;
    };
    let (service, deployed_count) = replica(store(&redis.url(), "te-evict:").build().unwrap());
    let state = asked(&service).await;
    // The store will not spend a token on a Redis that may forget it: 503, nothing forwarded.
    for _ in 0..3 {
        let (status, reply) = send(&service, approve(&state)).await;
        assert_eq!(status, 503, "{reply}");
        assert_eq!(reply["error"]["code"], -32603, "{reply}");
    }
    assert_eq!(deployed_count.load(Ordering::SeqCst), 0);

    // volatile-* policies evict the spent ids (they carry an expiry): refused as well.
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    let (service, _) = replica(store(&redis.url(), "te-evict2:").build().unwrap());
    let state = asked(&service).await;
    assert_eq!(send(&service, approve(&state)).await.0, 503);

    // Set to noeviction, the same kind of store runs.
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let (service, deployed_count) = replica(store(&redis.url(), "te-evict3:").build().unwrap());
    let state = asked(&service).await;
    assert!(deployed(&send(&service, approve(&state)).await.1));
    assert_eq!(send(&service, approve(&state)).await.0, 200);
    assert_eq!(deployed_count.load(Ordering::SeqCst), 1);
}

async fn with_the_override_a_lost_epoch_key_still_refuses_older_tokens() {
    let Some(redis) = OwnRedis::start("evicting_override", EVICTING) else {
        return;
    };
    let prefix = "te-override:";
    let (service, deployed_count) = replica(
        store(&redis.url(), prefix)
            .allow_evicting_policy()
            .build()
            .unwrap(),
    );
    let spent = asked(&service).await;
    assert!(deployed(&send(&service, approve(&spent)).await.1));
    let (status, reply) = send(&service, approve(&spent)).await;
    assert_refused(status, &reply);

    // Evicted: the spent id and the epoch key (what eviction, or FLUSHALL, does at worst).
    redis.cli(&["FLUSHALL"]);
    let (status, reply) = send(&service, approve(&spent)).await;
    assert_refused(status, &reply);
    assert_eq!(
        deployed_count.load(Ordering::SeqCst),
        1,
        "0 replays accepted"
    );

    // Only the spent id evicted, the epoch key kept (the likely case under LRU: every retry
    // reads it): the override's risk, which it names. This is what the epoch cannot see.
    let again = asked(&service).await;
    assert!(deployed(&send(&service, approve(&again)).await.1));
    let keys = redis.cli(&["--scan", "--pattern", &format!("{prefix}jti:*")]);
    for key in keys.lines() {
        redis.cli(&["DEL", key]);
    }
    assert!(deployed(&send(&service, approve(&again)).await.1));
}

async fn a_redis_that_does_not_answer_config_is_refused_unless_assumed_noeviction() {
    let Some(redis) = OwnRedis::start("no_config", &["--rename-command", "CONFIG", ""]) else {
        return;
    };
    let (service, deployed_count) = replica(store(&redis.url(), "te-noconfig:").build().unwrap());
    let state = asked(&service).await;
    assert_eq!(send(&service, approve(&state)).await.0, 503);
    assert_eq!(deployed_count.load(Ordering::SeqCst), 0);

    let (service, deployed_count) = replica(
        store(&redis.url(), "te-noconfig2:")
            .assume_noeviction()
            .build()
            .unwrap(),
    );
    let state = asked(&service).await;
    assert!(deployed(&send(&service, approve(&state)).await.1));
    assert_eq!(deployed_count.load(Ordering::SeqCst), 1);
}

crate::trials! {
    [RedisServer] current_thread a_token_spent_before_redis_restarted_empty_is_refused_after,
    [RedisServer] current_thread a_token_sealed_right_after_a_new_epoch_began_is_accepted_on_every_replica,
    [RedisServer] current_thread single_use_refuses_to_run_on_an_evicting_redis,
    [RedisServer] current_thread with_the_override_a_lost_epoch_key_still_refuses_older_tokens,
    [RedisServer] current_thread a_redis_that_does_not_answer_config_is_refused_unless_assumed_noeviction,
}
