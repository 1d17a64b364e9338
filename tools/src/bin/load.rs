//! `load`: N complete three-round `deploy` flows from C concurrent clients against the `deploy`
//! example server (rmcp behind `ElicitationLayer`), over real HTTP on loopback.
//!
//! ```text
//! cargo run --release -p tower-elicitation-tools --bin load -- --flows 20000 --concurrency 64
//! ```
//!
//! Each flow is a first call (answered `input_required`, sealed), a retry with an invalid answer
//! (`approve: "yes"`: the layer asks again with a hint, without calling the handler), and a retry
//! with a valid answer (the handler deploys). After a warm-up of its own, it prints one line:
//! flows per second, p50 and p99 latency per request, errors, and resident memory (current and
//! peak) after the warm-up and after the run.
//!
//! Options: `--flows N` (default 2000), `--concurrency C` (64), `--warmup W` (N/10, at most
//! 2000), `--max-secs S` (600: no new flow starts after that; unstarted flows count as errors),
//! `--sse` (event-stream responses instead of JSON), `--max-rss-growth F` (exit 1 when the peak
//! RSS after the run exceeds the RSS after the warm-up by more than the fraction F, e.g. 0.2),
//! `--url URL` (drive a server that is already running, e.g. `cargo run --release --example
//! deploy` at `http://127.0.0.1:3000/mcp`, instead of serving one in this process; RSS is then
//! this client's, and deployments are counted from the answers only), `--duration S` (measure
//! for S seconds, however many flows that is, instead of `--flows` flows; the warm-up is still
//! `--warmup` flows), `--reask-hint TEXT` (what the re-ask's message must contain; default the
//! question followed by a blank line and the layer's line naming the wrong field,
//! `"?\n\nPlease correct: Approve."`, the problem itself being on the field's description). A
//! server with no hint of its own re-asks its question as it was: `--reask-hint "Deploy to "`).
//! `--replicas 2` serves two replicas in this process, on two ports, sharing the keys (and, with
//! `--single-use redis`, one Redis), and sends each request of a flow to the other replica than
//! the one before. `--single-use memory|redis` makes tokens single-use, their ids consumed in
//! one in-process store (one replica only) or in Redis at `--redis URL` (default `MCP_REDIS_URL`,
//! else `redis://127.0.0.1:6379`; keys under a prefix of this run's own). `--replay` (needs
//! `--single-use`) replays each flow's last token, to the other replica, once the flow is done:
//! every replay must be refused with `-32602`, or the flow counts as failed. `--legacy
//! --replicas 2` gives both replicas' bridges their sessions and waiting calls in Redis at
//! `--redis URL` (`RedisStore::sessions`, `RedisStore::pending_answers`; keys under the run's
//! prefix): each worker opens its session on one replica and confirms it on the other, each flow's
//! call goes to the other replica than the flow before, and both of its answers are POSTed to the
//! replica that does not hold the call's stream.
//! `--chaos` (with `--replicas 2`, and `--single-use redis` or `--legacy`): the replicas share a
//! Redis of the run's own (`redis-server`, or `--redis-server PATH`, on a free loopback port),
//! which is stopped, frozen and restarted empty while the flows run for as long as that takes
//! (`--flows` is not used; see the `chaos` module). Each worker is a caller of its own. Errors
//! while Redis is away are expected and counted, not failures; the run fails on a deployment the
//! clients did not see verified (a replay accepted, an invalid answer taken, or the servers
//! counting more deployments than the clients saw), a flow still running after 60 s, tasks still
//! alive after the run, or a fault the replicas do not recover from on their own within 30 s. It
//! prints one line, with the recovery time after each fault.
//! It exits 1 on any error. A server that takes `approve: "yes"` fails every flow, as one that
//! does not deploy on `approve: true` does. The in-process server listens on 127.0.0.1 only, with
//! `TCP_NODELAY` on its sockets as every example server sets it.
//!
//! A client must take either kind of answer: even in `--sse` mode, the layer's own answers (its
//! re-ask with a hint) are plain JSON.
//!
//! `--legacy`: the same three-round flow as a 2025-era client, through the legacy bridge. Each
//! worker opens one session (`initialize`, `notifications/initialized`); each flow is one
//! `tools/call` whose event stream carries the bridge's `elicitation/create` requests: the
//! worker POSTs `approve: "yes"` (202), gets the re-ask with the hint on the same stream, POSTs
//! `approve: true`, and reads the result at the end of the stream. Latency is per round (the
//! call or an answer POSTed, until the next request or the result arrives on the stream).

#[path = "load/chaos.rs"]
mod chaos;

// The `deploy` example's server, shared with the integration tests; this binary uses part of it.
#[allow(dead_code)]
#[path = "../../../examples/deploy/server.rs"]
mod server;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use server::{APPROVAL_KEY, DeployState};
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::MemoryTokenStore;
use tower_elicitation::{ElicitationLayer, Keyring};

struct Options {
    flows: usize,
    concurrency: usize,
    warmup: usize,
    max_secs: u64,
    sse: bool,
    max_rss_growth: Option<f64>,
    url: Option<String>,
    duration: Option<Duration>,
    reask_hint: String,
    legacy: bool,
    replicas: usize,
    single_use: SingleUse,
    redis: String,
    replay: bool,
    chaos: bool,
    redis_server: String,
}

/// Where single-use token ids are consumed, if tokens are single-use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SingleUse {
    Off,
    Memory,
    Redis,
}

impl SingleUse {
    fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Memory => "memory",
            Self::Redis => "redis",
        }
    }
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            flows: 2000,
            concurrency: 64,
            warmup: usize::MAX,
            max_secs: 600,
            sse: false,
            max_rss_growth: None,
            url: None,
            duration: None,
            reask_hint: "?\n\nPlease correct: Approve.".to_owned(),
            legacy: false,
            replicas: 1,
            single_use: SingleUse::Off,
            redis: std::env::var("MCP_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned()),
            replay: false,
            chaos: false,
            redis_server: "redis-server".to_owned(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--flows" => options.flows = number(&value()?)?,
                "--concurrency" => options.concurrency = number::<usize>(&value()?)?.max(1),
                "--warmup" => options.warmup = number(&value()?)?,
                "--max-secs" => options.max_secs = number(&value()?)?,
                "--max-rss-growth" => options.max_rss_growth = Some(number(&value()?)?),
                "--sse" => options.sse = true,
                "--legacy" => options.legacy = true,
                "--url" => options.url = Some(value()?),
                "--duration" => {
                    options.duration = Some(Duration::from_secs_f64(number(&value()?)?));
                }
                "--reask-hint" => options.reask_hint = value()?,
                "--replicas" => options.replicas = number::<usize>(&value()?)?.clamp(1, 2),
                "--single-use" => {
                    options.single_use = match value()?.as_str() {
                        "memory" => SingleUse::Memory,
                        "redis" => SingleUse::Redis,
                        "off" => SingleUse::Off,
                        other => return Err(format!("--single-use memory|redis|off, not {other}")),
                    }
                }
                "--redis" => options.redis = value()?,
                "--replay" => options.replay = true,
                "--chaos" => options.chaos = true,
                "--redis-server" => options.redis_server = value()?,
                other => return Err(format!("unknown option {other}")),
            }
        }
        if options.replay && options.single_use == SingleUse::Off {
            return Err("--replay needs --single-use: without it a replay is accepted".into());
        }
        if options.replicas > 1 && options.single_use == SingleUse::Memory {
            return Err("an in-process store serves one replica: use --single-use redis".into());
        }
        if options.legacy && options.replay {
            return Err(
                "--replay replays 2026-07-28 tokens: a 2025-era client never sees one".into(),
            );
        }
        if options.replicas > 1 && options.url.is_some() {
            return Err("--replicas serves its replicas in this process: not with --url".into());
        }
        if options.chaos
            && (options.replicas < 2
                || options.url.is_some()
                || (!options.legacy && options.single_use != SingleUse::Redis))
        {
            return Err("--chaos needs --replicas 2, with --single-use redis or --legacy".into());
        }
        if options.warmup == usize::MAX {
            options.warmup = (options.flows / 10).min(2000);
        }
        Ok(options)
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

/// `VmRSS` and `VmHWM` (peak RSS) of this process, in KiB (0 where /proc is not there).
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One client: the HTTP client and where the replicas are.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    /// Request `id` goes to `urls[id % urls.len()]`: with two replicas, each request of a flow
    /// goes to the other one than the request before.
    urls: Arc<[String]>,
    /// Speak 2025-11-25 through the legacy bridge (`--legacy`).
    legacy: bool,
    replay: bool,
    replays_refused: Arc<AtomicUsize>,
    /// Deployments the clients saw, each on a verified answer.
    deploys_seen: Arc<AtomicUsize>,
    /// Deployments on an answer that was not verified: a replay, or `approve: "yes"`.
    violations: Arc<AtomicUsize>,
    /// The caller's `Authorization` header, if it has one of its own (`--chaos`: each worker).
    authorization: Option<Arc<str>>,
    /// Where each flow's last token (and its environment) goes once it was spent, to be replayed
    /// at the end of the run (`--chaos`).
    spent: Option<Arc<std::sync::Mutex<Vec<Spent>>>>,
}

/// A token a flow spent, with the caller that spent it and the environment it was for.
struct Spent {
    state: String,
    authorization: Option<Arc<str>>,
    environment: &'static str,
}

impl Client {
    /// A client of `urls` as `options` say (its own connection pool, nothing counted yet).
    fn new(options: &Options, urls: &[String]) -> Self {
        Self {
            http: reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(options.concurrency * 2)
                .build()
                .expect("an HTTP client"),
            urls: urls.to_vec().into(),
            legacy: options.legacy,
            replay: options.replay,
            replays_refused: Arc::default(),
            deploys_seen: Arc::default(),
            violations: Arc::default(),
            authorization: None,
            spent: None,
        }
    }

    /// A 2025-era POST in `session` (none for `initialize`), to replica `replica` (modulo the
    /// number of replicas).
    fn legacy_post(
        &self,
        replica: usize,
        session: Option<&str>,
        body: &Value,
    ) -> reqwest::RequestBuilder {
        let request = self
            .authorized(self.http.post(&self.urls[replica % self.urls.len()]))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        match session {
            Some(session) => request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25"),
            None => request,
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.authorization {
            Some(authorization) => request.header("authorization", &**authorization),
            None => request,
        }
    }

    /// Ends a 2025-11-25 session (DELETE), as a client does before it opens another; an answer
    /// other than 200 is not an error (the session may be gone already).
    async fn close(&self, session: &str) {
        let request = self
            .authorized(self.http.delete(&*self.urls[0]))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
        let _ = request.send().await;
    }

    /// Opens a 2025-11-25 session: `initialize` on the first replica, then
    /// `notifications/initialized` on the other (with two).
    async fn initialize(&self) -> Result<String, String> {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "load-legacy", "version": "0"}}});
        let response = self
            .legacy_post(0, None, &body)
            .send()
            .await
            .map_err(|e| format!("initialize failed: {e}"))?;
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| format!("initialize: no session id (HTTP {})", response.status()))?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.accepted(1, &session, &initialized).await?;
        Ok(session)
    }

    /// POSTs a notification or an answer to replica `replica`; it must be accepted (202).
    async fn accepted(&self, replica: usize, session: &str, body: &Value) -> Result<(), String> {
        let response = self
            .legacy_post(replica, Some(session), body)
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        if response.status() != reqwest::StatusCode::ACCEPTED {
            return Err(format!("expected 202, got HTTP {}", response.status()));
        }
        Ok(())
    }

    /// POSTs one stateless 2026-07-28 `tools/call deploy`; returns the JSON-RPC response
    /// message and the request's latency.
    async fn call(
        &self,
        id: u64,
        environment: &str,
        extra: Value,
    ) -> Result<(Value, Duration), String> {
        let mut params = json!({"name": "deploy", "arguments": {"environment": environment},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
            params.extend(extra);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let started = Instant::now();
        let response = self
            .authorized(self.http.post(&self.urls[(id as usize) % self.urls.len()]))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "deploy")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let event_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("body failed: {e}"))?;
        let latency = started.elapsed();
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        // Whatever the mode asked for, the answer's own type says how to read it.
        let message = if event_stream {
            response_event(&bytes, id)
        } else {
            serde_json::from_slice(&bytes).ok()
        };
        let message = message
            .ok_or_else(|| format!("no response message in {}", String::from_utf8_lossy(&bytes)))?;
        Ok((message, latency))
    }
}

/// The data of the event that answers `id`.
fn response_event(bytes: &[u8], id: u64) -> Option<Value> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split("\n\n").find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        let message: Value = serde_json::from_str(&data.join("\n")).ok()?;
        (message["id"] == id).then_some(message)
    })
}

fn input_required(message: &Value) -> Result<String, String> {
    let result = &message["result"];
    if result["resultType"] != "input_required"
        || result["inputRequests"].get(APPROVAL_KEY).is_none()
    {
        return Err(format!("expected input_required, got {message}"));
    }
    result["requestState"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no requestState in {message}"))
}

/// One complete flow: ask, invalid answer and re-ask, valid answer and deploy.
async fn flow(
    client: &Client,
    n: usize,
    hint: &str,
    latencies: &mut Vec<u32>,
) -> Result<(), String> {
    let environment = if n.is_multiple_of(2) {
        "staging"
    } else {
        "production"
    };
    // Room for the three rounds and a replay, each id of a flow on the other replica than the
    // one before.
    let id = (n as u64) * 4;
    let mut record = |latency: Duration| {
        latencies.push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
    };
    let (first, latency) = client.call(id + 1, environment, json!({})).await?;
    record(latency);
    let state = input_required(&first)?;

    let wrong = json!({APPROVAL_KEY: {"action": "accept", "content": {"approve": "yes"}}});
    let (reask, latency) = client
        .call(
            id + 2,
            environment,
            json!({"requestState": state, "inputResponses": wrong}),
        )
        .await?;
    record(latency);
    if reask["result"]["structuredContent"]["deployed"] == true {
        client.violations.fetch_add(1, Ordering::Relaxed);
        return Err(format!(
            "the server took `approve: \"yes\"` and deployed: {reask}"
        ));
    }
    let state = input_required(&reask)?;
    let message = reask["result"]["inputRequests"][APPROVAL_KEY]["params"]["message"]
        .as_str()
        .unwrap_or_default();
    if !message.contains(hint) {
        return Err(format!("the re-ask's message has no {hint:?}: {message}"));
    }

    let right = json!({APPROVAL_KEY: {"action": "accept", "content": {"approve": true}}});
    let (done, latency) = client
        .call(
            id + 3,
            environment,
            json!({"requestState": state, "inputResponses": right}),
        )
        .await?;
    record(latency);
    if done["result"]["structuredContent"]["deployed"] != true {
        return Err(format!("expected a deployment, got {done}"));
    }
    client.deploys_seen.fetch_add(1, Ordering::Relaxed);
    if let Some(Ok(mut spent)) = client.spent.as_ref().map(|spent| spent.lock()) {
        spent.push(Spent {
            state: state.clone(),
            authorization: client.authorization.clone(),
            environment,
        });
    }
    if client.replay {
        // The same token and answer again, on the other replica: refused, never deployed.
        let (replayed, _) = client
            .call(
                id + 4,
                environment,
                json!({"requestState": state, "inputResponses": right}),
            )
            .await?;
        if replayed["result"]["structuredContent"]["deployed"] == true {
            client.violations.fetch_add(1, Ordering::Relaxed);
        }
        if replayed["error"]["code"] != -32602
            || replayed["error"]["message"] != "Invalid or expired requestState"
        {
            return Err(format!("a replayed token was not refused: {replayed}"));
        }
        client.replays_refused.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A call's event stream, message by message.
struct Stream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Stream {
    async fn next(&mut self) -> Result<Value, String> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let event = String::from_utf8_lossy(&event);
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                // A comment, or the bridge's priming event (an id, `retry`, empty data).
                if data.iter().all(|line| line.is_empty()) {
                    continue;
                }
                return serde_json::from_str(&data.join("\n"))
                    .map_err(|e| format!("an event that is not JSON: {e}"));
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) => return Err("the stream ended early".to_owned()),
                Err(e) => return Err(format!("the stream failed: {e}")),
            }
        }
    }
}

/// One complete flow as a 2025-era client in `session`: the questions come on the call's stream.
/// With two replicas, the call goes to replica `n % 2` and the answers to the other.
async fn legacy_flow(
    client: &Client,
    session: &str,
    n: usize,
    hint: &str,
    latencies: &mut Vec<u32>,
) -> Result<(), String> {
    let environment = if n.is_multiple_of(2) {
        "staging"
    } else {
        "production"
    };
    let id = n as u64 + 1;
    let (stream_on, answers_on) = (n, n + 1);
    let mut record = |since: Instant| {
        latencies.push(u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX));
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "deploy", "arguments": {"environment": environment}}});
    let started = Instant::now();
    let response = client
        .legacy_post(stream_on, Some(session), &body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut stream = Stream {
        response,
        buffer: Vec::new(),
    };
    let ask = stream.next().await?;
    record(started);
    if ask["method"] != "elicitation/create" {
        return Err(format!("expected elicitation/create, got {ask}"));
    }
    let wrong = json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"action": "accept", "content": {"approve": "yes"}}});
    let started = Instant::now();
    client.accepted(answers_on, session, &wrong).await?;
    let reask = stream.next().await?;
    record(started);
    if reask["result"]["structuredContent"]["deployed"] == true {
        client.violations.fetch_add(1, Ordering::Relaxed);
    }
    if reask["method"] != "elicitation/create" {
        return Err(format!("expected the re-ask, got {reask}"));
    }
    let message = reask["params"]["message"].as_str().unwrap_or_default();
    if !message.contains(hint) {
        return Err(format!("the re-ask's message has no {hint:?}: {message}"));
    }
    let right = json!({"jsonrpc": "2.0", "id": reask["id"],
        "result": {"action": "accept", "content": {"approve": true}}});
    let started = Instant::now();
    client.accepted(answers_on, session, &right).await?;
    let done = stream.next().await?;
    record(started);
    if done["id"] != id || done["result"]["structuredContent"]["deployed"] != true {
        return Err(format!("expected a deployment, got {done}"));
    }
    client.deploys_seen.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

struct Outcome {
    completed: usize,
    errors: usize,
    latencies: Vec<u32>,
    elapsed: Duration,
}

/// `flows` flows from `concurrency` clients; none starts after `deadline`. With `open_ended`,
/// flows run until `deadline` and those that did not start are not failures.
async fn run(
    client: &Client,
    flows: usize,
    concurrency: usize,
    deadline: Instant,
    hint: &Arc<str>,
    open_ended: bool,
) -> Outcome {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, next, hint) = (client.clone(), next.clone(), hint.clone());
            tokio::spawn(async move {
                let (mut completed, mut errors, mut latencies) = (0, 0, Vec::new());
                // A 2025-era worker opens its session once.
                let session = if client.legacy {
                    match client.initialize().await {
                        Ok(session) => Some(session),
                        Err(error) => {
                            eprintln!("load: {error}");
                            return (completed, 1, latencies);
                        }
                    }
                } else {
                    None
                };
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= flows || Instant::now() >= deadline {
                        break;
                    }
                    let outcome = match &session {
                        Some(session) => {
                            legacy_flow(&client, session, n, &hint, &mut latencies).await
                        }
                        None => flow(&client, n, &hint, &mut latencies).await,
                    };
                    match outcome {
                        Ok(()) => completed += 1,
                        Err(error) => {
                            if errors == 0 {
                                eprintln!("load: flow {n} failed: {error}");
                            }
                            errors += 1;
                        }
                    }
                }
                (completed, errors, latencies)
            })
        })
        .collect();
    let mut outcome = Outcome {
        completed: 0,
        errors: 0,
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for worker in workers {
        match worker.await {
            Ok((completed, errors, latencies)) => {
                outcome.completed += completed;
                outcome.errors += errors;
                outcome.latencies.extend(latencies);
            }
            Err(_) => outcome.errors += 1,
        }
    }
    outcome.elapsed = started.elapsed();
    // Flows that never started before the deadline are failures too.
    if !open_ended {
        outcome.errors += flows.saturating_sub(outcome.completed + outcome.errors);
    }
    outcome
}

/// Serves the `deploy` example in this process on `options.replicas` loopback ports, as
/// `examples/deploy` does (`TCP_NODELAY` on), sharing the keys and the token store; returns
/// their MCP URLs and states.
async fn serve(options: &Options) -> Result<(Vec<String>, Vec<DeployState>), String> {
    let keyring = Keyring::new("load", [42u8; 32]).expect("a valid key");
    let memory = MemoryTokenStore::new();
    // This run's own keys: they expire with their tokens, and meet no one else's.
    let prefix = format!(
        "tower-elicitation-load:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let (mut urls, mut states) = (Vec::new(), Vec::new());
    for _ in 0..options.replicas {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let mut layer = ElicitationLayer::new(keyring.clone());
        let mut state = DeployState::new().with_base_url(&format!("http://{addr}"));
        let mut bridge = LegacyBridgeLayer::for_layer(&layer);
        // Several replicas of the legacy bridge share its sessions and answers in Redis.
        let bridged = options.legacy && options.replicas > 1;
        let redis = if options.single_use == SingleUse::Redis || bridged {
            // A store (and connections) of each replica's own, as separate processes have.
            let redis = RedisStore::builder(options.redis.as_str())
                .key_prefix(prefix.as_str())
                .build()
                .map_err(|e| e.to_string())?;
            redis
                .ping()
                .await
                .map_err(|e| format!("no Redis at {}: {e}", options.redis))?;
            Some(redis)
        } else {
            None
        };
        match (options.single_use, &redis) {
            (SingleUse::Memory, _) => layer = layer.single_use(memory.clone()),
            (SingleUse::Redis, Some(redis)) => {
                state = state.with_redis_flows(&format!("http://{addr}"), redis);
                layer = layer.single_use(redis.clone());
            }
            _ => {}
        }
        if let (true, Some(redis)) = (bridged, &redis) {
            bridge = server::redis_bridge(&layer, redis);
        }
        let app = server::router_bridged(bridge, layer, state.clone(), !options.sse)
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move { axum::serve(server::no_delay(listener), app).await });
        urls.push(format!("http://{addr}{}", server::MCP_PATH));
        states.push(state);
    }
    Ok((urls, states))
}

fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1]) / 1000.0
}

/// A flow still running this long after it began is stranded (`--chaos`).
const STRANDED: Duration = Duration::from_secs(60);

/// What the `--chaos` workers counted.
#[derive(Default)]
struct Tally {
    completed: usize,
    errors: usize,
    stranded: usize,
}

/// `--chaos` flows from `concurrency` clients, each with a caller of its own, until `stop`. A
/// worker that meets an error waits 50 ms, and a 2025-era one closes its session and opens
/// another, as a client that lost its session does.
async fn chaos_workers(
    client: &Client,
    concurrency: usize,
    hint: &Arc<str>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    successes: &Arc<chaos::Successes>,
) -> Tally {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let mut client = client.clone();
            client.authorization = Some(format!("Bearer load-chaos-{worker}").into());
            let (next, hint, stop, successes) =
                (next.clone(), hint.clone(), stop.clone(), successes.clone());
            tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut session: Option<String> = None;
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if client.legacy && session.is_none() {
                        match client.initialize().await {
                            Ok(opened) => session = Some(opened),
                            Err(_) => {
                                tally.errors += 1;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        }
                    }
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let began = Instant::now();
                    latencies.clear();
                    let one = async {
                        match &session {
                            Some(session) => {
                                legacy_flow(&client, session, n, &hint, &mut latencies).await
                            }
                            None => flow(&client, n, &hint, &mut latencies).await,
                        }
                    };
                    match tokio::time::timeout(STRANDED, one).await {
                        Ok(Ok(())) => {
                            tally.completed += 1;
                            if let Ok(mut successes) = successes.lock() {
                                successes.push((began, Instant::now()));
                            }
                        }
                        Ok(Err(_)) => {
                            tally.errors += 1;
                            if let Some(lost) = session.take() {
                                client.close(&lost).await;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(_) => {
                            eprintln!("load: flow {n} was still running after {STRANDED:?}");
                            tally.stranded += 1;
                            session = None;
                        }
                    }
                }
                if let Some(session) = session {
                    client.close(&session).await;
                }
                tally
            })
        })
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        match worker.await {
            Ok(one) => {
                tally.completed += one.completed;
                tally.errors += one.errors;
                tally.stranded += one.stranded;
            }
            Err(_) => tally.stranded += 1,
        }
    }
    tally
}

/// Replays each of `spent` once, as the caller that spent it, from `concurrency` clients; a
/// deployment counts as a violation. Returns how many were replayed.
async fn replay_all(client: &Client, spent: Vec<Spent>, concurrency: usize) -> usize {
    let count = spent.len();
    let spent = Arc::new(std::sync::Mutex::new(spent));
    let sweepers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (mut client, spent) = (client.clone(), spent.clone());
            tokio::spawn(async move {
                let right =
                    json!({APPROVAL_KEY: {"action": "accept", "content": {"approve": true}}});
                loop {
                    let next = spent.lock().expect("no sweeper panicked").pop();
                    let Some(Spent {
                        state,
                        authorization,
                        environment,
                    }) = next
                    else {
                        break;
                    };
                    client.authorization = authorization;
                    let again = json!({"requestState": state, "inputResponses": right});
                    if let Ok((replayed, _)) = client.call(1, environment, again).await
                        && replayed["result"]["structuredContent"]["deployed"] == true
                    {
                        client.violations.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for sweeper in sweepers {
        let _ = sweeper.await;
    }
    count
}

/// `--chaos`: the two replicas on a Redis of the run's own, which is stopped, frozen and
/// restarted empty while the flows run (see [`chaos`]).
///
/// Fails on an accepted replay or any deployment the clients did not see verified (the servers
/// count their own), a flow stranded for [`STRANDED`], tasks still alive after the run beyond
/// those before it, or a fault the replicas did not recover from on their own.
async fn chaos_main(mut options: Options) -> ExitCode {
    let fail = |error: String| {
        eprintln!("load: FAILED: {error}");
        ExitCode::FAILURE
    };
    let mut redis = match chaos::OwnRedis::start(&options.redis_server) {
        Ok(redis) => redis,
        Err(error) => return fail(error),
    };
    options.redis = redis.url();
    let (urls, states) = match serve(&options).await {
        Ok(served) => served,
        Err(error) => return fail(error),
    };
    let client_for = |urls: &[String]| Client::new(&options, urls);
    let hint: Arc<str> = options.reask_hint.as_str().into();

    // A healthy warm-up, whose client (and its connections) is gone before the count of live
    // tasks is taken.
    let warmup = client_for(&urls);
    let warm = run(
        &warmup,
        options.concurrency * 4,
        options.concurrency,
        Instant::now() + Duration::from_secs(120),
        &hint,
        false,
    )
    .await;
    if warm.errors > 0 {
        return fail(format!(
            "{} errors in the warm-up, before any fault",
            warm.errors
        ));
    }
    let warm_deploys = warmup.deploys_seen.load(Ordering::Relaxed);
    drop(warmup);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();

    let mut client = client_for(&urls);
    if !options.legacy {
        client.spent = Some(Arc::default());
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let successes: Arc<chaos::Successes> = Arc::default();
    let timeline = {
        let (stop, successes) = (stop.clone(), successes.clone());
        tokio::task::spawn_blocking(move || {
            let recoveries = chaos::drive(&mut redis, &successes);
            stop.store(true, Ordering::Relaxed);
            (redis, recoveries)
        })
    };
    let started = Instant::now();
    let tally = chaos_workers(&client, options.concurrency, &hint, &stop, &successes).await;
    let elapsed = started.elapsed();
    let (redis, recoveries) = match timeline.await {
        Ok(done) => done,
        Err(_) => return fail("the chaos timeline panicked".into()),
    };

    // Every token spent in the run, before each fault and after, is replayed now that Redis has
    // forgotten what it knew before the last one: each must be refused.
    let swept = match &client.spent {
        Some(spent) => {
            let spent = std::mem::take(&mut *spent.lock().expect("no worker panicked"));
            replay_all(&client, spent, options.concurrency).await
        }
        None => 0,
    };

    // Every call the run made has ended once its client is gone: the servers' tasks come back
    // to what they were before the faults (connections close, the bridges' waiting calls end).
    let (deploys_seen, violations, replays_refused) = (
        client.deploys_seen.load(Ordering::Relaxed) + warm_deploys,
        client.violations.load(Ordering::Relaxed),
        client.replays_refused.load(Ordering::Relaxed),
    );
    drop(client);
    let settle = Instant::now();
    let mut tasks_left = metrics.num_alive_tasks().saturating_sub(tasks_before);
    while tasks_left > 0 && settle.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tasks_left = metrics.num_alive_tasks().saturating_sub(tasks_before);
    }
    drop(redis);

    let deploys: usize = states.iter().map(DeployState::deploys).sum();
    let recovery_ms = |fault: &str| {
        recoveries.as_ref().ok().and_then(|all| {
            all.iter()
                .find(|r| r.fault == fault)
                .map(|r| r.took.as_millis())
        })
    };
    let shown = |ms: Option<u128>| ms.map_or_else(|| "-".to_owned(), |ms| ms.to_string());
    println!(
        "load: chaos mode={} replicas={} concurrency={} secs={:.1} flows={} errors={} \
         stranded={} deploys={deploys} deploys_seen={deploys_seen} unverified_deploys={} \
         replays_accepted={violations} replays_refused={replays_refused} swept_replays={swept} tasks_left={tasks_left} recovery_ms: stopped={} \
         frozen={} restarted_empty={}",
        if options.legacy { "legacy" } else { "json" },
        urls.len(),
        options.concurrency,
        elapsed.as_secs_f64(),
        tally.completed,
        tally.errors,
        tally.stranded,
        deploys.saturating_sub(deploys_seen),
        shown(recovery_ms("stopped")),
        shown(recovery_ms("frozen")),
        shown(recovery_ms("restarted empty")),
    );
    let mut problems = Vec::new();
    if let Err(error) = &recoveries {
        problems.push(error.clone());
    }
    if violations > 0 {
        problems.push(format!("{violations} replays or invalid answers deployed"));
    }
    if deploys != deploys_seen {
        problems.push(format!(
            "the servers deployed {deploys} times, the clients saw {deploys_seen} deployments"
        ));
    }
    if tally.stranded > 0 {
        problems.push(format!("{} flows stranded", tally.stranded));
    }
    if tasks_left > 0 {
        problems.push(format!("{tasks_left} tasks still alive 15 s after the run"));
    }
    if tally.completed == 0 {
        problems.push("no flow completed".into());
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        fail(problems.join("; "))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("load: {error}");
            return ExitCode::from(2);
        }
    };
    if options.chaos {
        return chaos_main(options).await;
    }
    let (urls, states) = match &options.url {
        Some(url) => (vec![url.clone()], None),
        None => match serve(&options).await {
            Ok((urls, states)) => (urls, Some(states)),
            Err(error) => {
                eprintln!("load: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    let client = Client::new(&options, &urls);
    let deadline = Instant::now() + Duration::from_secs(options.max_secs);
    let hint: Arc<str> = options.reask_hint.as_str().into();

    let warmup = run(
        &client,
        options.warmup,
        options.concurrency,
        deadline,
        &hint,
        false,
    )
    .await;
    let (rss_warm, peak_warm) = rss_kib();
    let mut outcome = match options.duration {
        Some(duration) => {
            let until = deadline.min(Instant::now() + duration);
            run(&client, usize::MAX, options.concurrency, until, &hint, true).await
        }
        None => {
            run(
                &client,
                options.flows,
                options.concurrency,
                deadline,
                &hint,
                false,
            )
            .await
        }
    };
    let (rss_after, peak_after) = rss_kib();

    let errors = warmup.errors + outcome.errors;
    // In process, every completed flow must have deployed exactly once; an external server's
    // deployments are known from its answers only.
    let completed = warmup.completed + outcome.completed;
    let deploys = states.as_ref().map_or(completed, |states| {
        states.iter().map(DeployState::deploys).sum()
    });
    let missing = completed.abs_diff(deploys);
    outcome.latencies.sort_unstable();
    let seconds = outcome.elapsed.as_secs_f64();
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "load: flows={} concurrency={} mode={} requests={} secs={seconds:.2} flows/s={:.0} \
         p50_ms={:.3} p99_ms={:.3} errors={} deploys={deploys} rss_warm_mib={:.1} \
         peak_rss_warm_mib={:.1} rss_after_mib={:.1} peak_rss_after_mib={:.1} peak_growth={:+.1}% \
         server={} replicas={} single_use={} replays_refused={} bridge_stores={}",
        outcome.completed,
        options.concurrency,
        if options.legacy {
            "legacy"
        } else if options.sse {
            "sse"
        } else {
            "json"
        },
        outcome.latencies.len(),
        outcome.completed as f64 / seconds.max(f64::EPSILON),
        percentile_ms(&outcome.latencies, 50.0),
        percentile_ms(&outcome.latencies, 99.0),
        errors + missing,
        mib(rss_warm),
        mib(peak_warm),
        mib(rss_after),
        mib(peak_after),
        (peak_after as f64 / rss_warm.max(1) as f64 - 1.0) * 100.0,
        if states.is_some() {
            "in-process"
        } else {
            &urls[0]
        },
        urls.len(),
        options.single_use.name(),
        client.replays_refused.load(Ordering::Relaxed),
        match (options.legacy, urls.len() > 1 && states.is_some()) {
            (false, _) => "-",
            (true, false) => "memory",
            (true, true) => "redis",
        },
    );
    let mut failed = false;
    if errors + missing > 0 {
        eprintln!("load: FAILED: {errors} errors, {missing} deployments unaccounted for");
        failed = true;
    }
    if let Some(growth) = options.max_rss_growth
        && peak_after as f64 > rss_warm as f64 * (1.0 + growth)
    {
        eprintln!(
            "load: FAILED: peak RSS after the run ({peak_after} KiB) exceeds the RSS after the \
             warm-up ({rss_warm} KiB) by more than {:.0}%",
            growth * 100.0
        );
        failed = true;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
