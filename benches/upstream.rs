//! The upstream adapter's added cost: the same MCP server reached directly, through
//! [`Upstream`], and through `ElicitationLayer` + `Upstream`, in one process run.
//!
//! ```text
//! cargo build --release -p tower-elicitation-tools --bin upstream-rmcp
//! cargo bench --bench upstream                 # all three parts, Markdown tables on stdout
//! cargo bench --bench upstream -- stdio flows  # only some parts: stdio, http, flows
//! scripts/upstream_bench.sh                    # both builds, the run, machine and commit
//! ```
//!
//! Three parts, each comparing paths to the same server:
//!
//! - **stdio** (per request): `tools/call echo` to `upstream-rmcp` (rmcp 3.11, a 2025-era stdio
//!   server, the `tools` binary). *direct*: the bench is the 2025 client itself, one child in
//!   one `initialize` session, newline-delimited JSON-RPC on its stdin and stdout, responses
//!   routed to their callers by id by one reader task (the least a client that can have
//!   several requests out does). *upstream*: a 2026-07-28 POST through `Upstream` (its own
//!   child of the same binary), `oneshot` on a clone, the body collected and parsed.
//!   *layer + upstream*: the same `Upstream` behind `ElicitationLayer`.
//! - **http** (per request): the `deploy` example's bare rmcp 2026-07-28 service (`mcp_service`,
//!   JSON answers, stateless) served on a loopback port by a thread of its own. *direct*: a
//!   reqwest POST of the 2026 request; *upstream*: `Upstream` over `upstream::Http` (found to
//!   be 2026-07-28: each request is passed through); *layer + upstream*. A request the layer
//!   passes through (`tools/list`) and a plain tool call (`list_branches`, no question).
//! - **flows**: `book` on `upstream-rmcp` (it asks for `seats` with `elicitation/create`), from
//!   N concurrent tasks, a fixed number of flows per run. *direct*: the bench as a 2025 client
//!   (`tools/call`; its reader answers the server's `elicitation/create` with `{"seats": 2}`;
//!   the result). *upstream* and *layer + upstream*: the 2026 flow (`tools/call`, answered
//!   `input_required`; the retry with `inputResponses` and `requestState`; the result).
//!   *layer + upstream, N sessions*: the same through a pool of `UPSTREAM_BENCH_SESSIONS`
//!   children (`UpstreamBuilder::sessions`, default 8), the bench's fair share the whole.
//!   *direct, over HTTP*: the same server over Streamable HTTP (`upstream-rmcp --http`, a child
//!   of its own, rmcp's session mode), the bench a 2025 client in one session: each call a POST
//!   whose event stream carries the server's `elicitation/create`, answered with a POST, then
//!   the result. *layer + upstream, over HTTP*: the 2026 flow through `Upstream` over
//!   `upstream::Http` to that server (no floor: each question comes on its call's stream).
//!
//! A hand-rolled timing loop, not criterion: the parts need every request's latency (for p50
//! and p99, which criterion's per-batch estimates do not give), the paths alternated in rounds
//! within one run (so that the load other processes put on the shared machine hits each path
//! alike; criterion measures one benchmark after another), and concurrent flows counted per
//! second. In each round of the per-request parts every path takes `UPSTREAM_BENCH_BATCH`
//! requests one after another, which path goes first turning round by round; each request is
//! timed on its own (wall clock: the server is another process or thread, so its time is part
//! of the latency). Beside it, the CPU time of the bench's thread per request
//! (`CLOCK_THREAD_CPUTIME_ID`): everything on the bench side (the client, and the adapter and
//! the layer where they are on the path) runs on that one thread (a current-thread Tokio
//! runtime), the server elsewhere, so its difference between paths is what the adapter costs in
//! CPU, whatever the machine's load does to the wall clock.
//!
//! `upstream-rmcp` is found as `tests/services/upstream_rmcp.rs` finds it: `MCP_UPSTREAM_RMCP`, else
//! next to this bench's binary (`target/release/`); without it the bench says how to build it
//! and exits with status 2. Settings (environment): `UPSTREAM_BENCH_ROUNDS` (per-request
//! rounds, default 300), `UPSTREAM_BENCH_BATCH` (requests per path per round, default 20),
//! `UPSTREAM_BENCH_FLOWS` (flows per run, default 200), `UPSTREAM_BENCH_CONCURRENCY`
//! (comma-separated task counts, default `1,16`), `UPSTREAM_BENCH_FLOW_ROUNDS` (runs per path
//! and task count, alternating paths, default 3), `UPSTREAM_BENCH_SESSIONS` (the pool's
//! sessions, default 8). The figures and how they were taken are in
//! BENCHMARKS.md ("The upstream adapter").

#[allow(dead_code)]
#[path = "../examples/deploy/server.rs"]
mod server;

mod support;

/// mimalloc, as in the other benches.
#[cfg(not(bench_system_allocator))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio as Pipe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_elicitation::upstream::{Http, Stdio, Upstream};

/// The paths to a server, in the order of the tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Direct,
    Upstream,
    Layered,
}

const PATHS: [Path; 3] = [Path::Direct, Path::Upstream, Path::Layered];

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Upstream => "`Upstream`",
            Path::Layered => "`ElicitationLayer` + `Upstream`",
        }
    }
}

/// The three paths in the order round `round` takes them (each goes first in turn).
fn order(round: usize) -> [Path; 3] {
    let mut paths = PATHS;
    paths.rotate_left(round % PATHS.len());
    paths
}

fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value.parse().unwrap_or_else(|e| {
            eprintln!("upstream bench: {name}={value:?}: {e}");
            std::process::exit(2)
        }),
        Err(_) => default,
    }
}

/// `upstream-rmcp`: `MCP_UPSTREAM_RMCP`, else next to this binary (`target/<profile>/deps/…`).
fn upstream_rmcp() -> PathBuf {
    let binary = std::env::var_os("MCP_UPSTREAM_RMCP")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("the bench binary's path");
            let profile = exe
                .parent()
                .and_then(|deps| deps.parent())
                .expect("the bench binary is in target/<profile>/deps");
            profile.join(format!("upstream-rmcp{}", std::env::consts::EXE_SUFFIX))
        });
    if !binary.exists() {
        eprintln!(
            "upstream bench: {} is missing. Build it next to this bench with\n\n    \
             cargo build --release -p tower-elicitation-tools --bin upstream-rmcp\n\n\
             (or run scripts/upstream_bench.sh), or name it with MCP_UPSTREAM_RMCP.",
            binary.display()
        );
        std::process::exit(2);
    }
    binary
}

// --- The direct 2025 client over stdio. ---

/// What the bench says of itself in `initialize`, as a 2025 client that answers forms.
fn initialize_params() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "upstream-bench", "version": "0"},
    })
}

/// The direct clients' result for the server's request `method`: `book`'s question accepted
/// with two seats, anything else answered empty.
fn answer(method: &str) -> Value {
    match method {
        "elicitation/create" => json!({"action": "accept", "content": {"seats": 2}}),
        _ => json!({}),
    }
}

/// A 2025-era client of one child: one `initialize` session, requests written one a line,
/// responses routed to their callers by id by one reader task, and the server's
/// `elicitation/create` answered `{"seats": 2}` at once (a user who always says two).
struct Direct {
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiters: Mutex<HashMap<u64, oneshot::Sender<Value>>>,
    next_id: AtomicU64,
}

impl Direct {
    async fn start(binary: &PathBuf) -> (Arc<Self>, Child) {
        let mut child = Command::new(binary)
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::null())
            .kill_on_drop(true)
            .spawn()
            .expect("upstream-rmcp starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let direct = Arc::new(Self {
            stdin: tokio::sync::Mutex::new(stdin),
            waiters: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        tokio::spawn(Arc::clone(&direct).read(stdout));
        let initialized = direct.request("initialize", initialize_params()).await;
        assert!(initialized.get("result").is_some(), "{initialized}");
        direct
            .write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        (direct, child)
    }

    async fn write(&self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("JSON");
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&line).await.expect("the child reads");
        stdin.flush().await.expect("the child reads");
    }

    /// The whole response to `method` with `params`.
    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiters.lock().unwrap().insert(id, tx);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(&request).await;
        rx.await.expect("the child answers")
    }

    async fn read(self: Arc<Self>, stdout: ChildStdout) {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let method = message.get("method").and_then(Value::as_str);
            match (method, message.get("id")) {
                (Some(method), Some(id)) => {
                    let response = json!({"jsonrpc": "2.0", "id": id, "result": answer(method)});
                    self.write(&response).await;
                }
                (None, Some(id)) => {
                    let waiter = id
                        .as_u64()
                        .and_then(|id| self.waiters.lock().unwrap().remove(&id));
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(message);
                    }
                }
                _ => {}
            }
        }
    }
}

// --- The front: a 2026-07-28 POST through a service in process. ---

/// The bench as a 2025 client of `upstream-rmcp --http` (its own child): one `initialize`
/// session (`Mcp-Session-Id`), each call a POST whose event stream it reads as it comes,
/// answering the server's `elicitation/create` on that stream with a POST of its own, until the
/// call's response: the least a Streamable HTTP client of that era does.
struct DirectHttp {
    client: reqwest::Client,
    url: String,
    session: String,
    next_id: AtomicU64,
}

impl DirectHttp {
    async fn start(binary: &PathBuf) -> (Arc<Self>, Child) {
        let mut child = Command::new(binary)
            .args(["--http", "127.0.0.1:0"])
            .stdin(Pipe::null())
            .stdout(Pipe::piped())
            .stderr(Pipe::null())
            .kill_on_drop(true)
            .spawn()
            .expect("upstream-rmcp --http starts");
        let stdout = child.stdout.take().expect("stdout");
        let line = BufReader::new(stdout)
            .lines()
            .next_line()
            .await
            .expect("upstream-rmcp --http writes its address")
            .expect("a line");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("upstream-rmcp --http said {line:?}"))
            .to_owned();
        let client = reqwest::Client::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params()});
        let response = Self::post(&client, &url, None, &initialize).await;
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_owned();
        let direct = Self {
            client,
            url,
            session,
            next_id: AtomicU64::new(1),
        };
        let initialized = direct.read_until(response, 0).await;
        assert!(initialized.get("result").is_some(), "{initialized}");
        let notified = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        direct.send(&notified).await;
        (Arc::new(direct), child)
    }

    async fn post(
        client: &reqwest::Client,
        url: &str,
        session: Option<&str>,
        message: &Value,
    ) -> reqwest::Response {
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(serde_json::to_vec(message).expect("JSON"));
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let response = request.send().await.expect("the server answers");
        assert!(response.status().is_success(), "{}", response.status());
        response
    }

    /// POSTs a notification or a response (answered 202, nothing to read).
    async fn send(&self, message: &Value) {
        Self::post(&self.client, &self.url, Some(&self.session), message).await;
    }

    /// The whole response to `method` with `params`.
    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = Self::post(&self.client, &self.url, Some(&self.session), &request).await;
        self.read_until(response, id).await
    }

    /// Reads `response` (JSON, or an event stream) until the response with `id`, answering the
    /// server's requests on the way.
    async fn read_until(&self, mut response: reqwest::Response, id: u64) -> Value {
        let json = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        if json {
            let body = response.bytes().await.expect("a body");
            return serde_json::from_slice(&body).expect("JSON");
        }
        let mut buffer: Vec<u8> = Vec::new();
        loop {
            while let Some(end) = memchr::memmem::find(&buffer, b"\n\n") {
                let event: Vec<u8> = buffer.drain(..end + 2).collect();
                let Some(data) = event
                    .split(|&b| b == b'\n')
                    .find_map(|line| line.strip_prefix(b"data: "))
                    .filter(|data| !data.is_empty())
                else {
                    continue;
                };
                let message: Value = serde_json::from_slice(data).expect("JSON data");
                match (message.get("method"), message.get("id")) {
                    (Some(method), Some(asked)) => {
                        let method = method.as_str().unwrap_or_default();
                        let response =
                            json!({"jsonrpc": "2.0", "id": asked, "result": answer(method)});
                        self.send(&response).await;
                    }
                    (None, Some(answered)) if answered.as_u64() == Some(id) => return message,
                    _ => {}
                }
            }
            let chunk = response
                .chunk()
                .await
                .expect("the stream")
                .unwrap_or_else(|| panic!("the stream ended without a response to {id}"));
            buffer.extend_from_slice(&chunk);
        }
    }
}

/// `body` POSTed to `service` (`oneshot` on a clone), the answer collected and parsed.
async fn via<S, B>(service: &S, body: &Bytes, method: &str, name: Option<&str>) -> Value
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let mut request = support::post(body, method, name);
    let headers = request.headers_mut();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer bench"));
    // One JSON answer, as the direct client reads it (an event stream when it is accepted).
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    let response = service.clone().oneshot(request).await.expect("response");
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&bytes));
    })
}

/// The text of a tool result's first block (which must be there).
fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result: {reply:#}"))
}

// --- Timing. ---

fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec`; the clock id is a constant Linux knows.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Latencies of one path, and the bench thread's CPU time over them.
#[derive(Default)]
struct Samples {
    wall: Vec<Duration>,
    cpu: Duration,
}

impl Samples {
    fn sorted(&self) -> Vec<Duration> {
        let mut wall = self.wall.clone();
        wall.sort_unstable();
        wall
    }

    fn p50(&self) -> Duration {
        percentile(&self.sorted(), 50)
    }

    fn cpu_per(&self, count: usize) -> Duration {
        self.cpu / count.max(1) as u32
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}", a.as_secs_f64() / b.as_secs_f64().max(1e-12))
}

/// Times `rounds` × `batch` requests per path, alternated; `one(path)` makes one request and
/// checks its answer (the check is not timed: the returned instant is when the answer was in).
async fn per_request<F, Fut>(rounds: usize, batch: usize, one: F) -> [Samples; 3]
where
    F: Fn(Path) -> Fut,
    Fut: Future<Output = Instant>,
{
    // Warm-up: connections, caches, the child's first requests.
    for path in PATHS {
        for _ in 0..batch.max(50) {
            one(path).await;
        }
    }
    let mut samples: [Samples; 3] = Default::default();
    for round in 0..rounds {
        for path in order(round) {
            let slot = &mut samples[path as usize];
            let cpu = thread_cpu_time();
            for _ in 0..batch {
                let started = Instant::now();
                let answered = one(path).await;
                slot.wall.push(answered - started);
            }
            slot.cpu += thread_cpu_time() - cpu;
        }
    }
    samples
}

fn per_request_table(title: &str, samples: &[Samples; 3]) {
    let direct = &samples[Path::Direct as usize];
    let count = direct.wall.len();
    println!("\n{title} ({count} requests per path)\n");
    println!(
        "| path | p50 / request | p99 / request | p50 ÷ direct | bench-thread CPU / request | CPU ÷ direct |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    for path in PATHS {
        let s = &samples[path as usize];
        let sorted = s.sorted();
        let cpu = s.cpu_per(s.wall.len());
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            path.label(),
            us(percentile(&sorted, 50)),
            us(percentile(&sorted, 99)),
            ratio(percentile(&sorted, 50), direct.p50()),
            us(cpu),
            ratio(cpu, direct.cpu_per(count)),
        );
    }
}

// --- Part 1: stdio, per request. ---

async fn stdio(binary: &PathBuf, rounds: usize, batch: usize) {
    let (direct, _child) = Direct::start(binary).await;
    let layer = support::layer();
    let upstream = Upstream::builder(Stdio::new(binary))
        .for_layer(&layer)
        .spawn()
        .expect("the upstream starts");
    let layered = ServiceBuilder::new().layer(layer).service(upstream.clone());

    let front = support::call("echo", json!({"text": "hello"}), json!({}));
    let one = |path| {
        let (direct, upstream, layered, front) = (&direct, &upstream, &layered, &front);
        async move {
            let (reply, answered) = match path {
                Path::Direct => {
                    let params = json!({"name": "echo", "arguments": {"text": "hello"}});
                    let reply = direct.request("tools/call", params).await;
                    (reply, Instant::now())
                }
                Path::Upstream => {
                    let reply = via(upstream, front, "tools/call", Some("echo")).await;
                    (reply, Instant::now())
                }
                Path::Layered => {
                    let reply = via(layered, front, "tools/call", Some("echo")).await;
                    (reply, Instant::now())
                }
            };
            assert_eq!(text(&reply), "hello", "{path:?}");
            answered
        }
    };
    let samples = per_request(rounds, batch, one).await;
    per_request_table(
        "stdio, `tools/call echo` to upstream-rmcp (rmcp 3.11, 2025-era)",
        &samples,
    );
    upstream.shutdown().await;
}

// --- Part 2: Streamable HTTP, per request. ---

/// The deploy example's bare rmcp service (JSON answers) on a loopback port, served by a
/// current-thread runtime on a thread of its own (the server is another process in use): its
/// URL.
fn serve_deploy() -> String {
    let (url, told) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        support::runtime().block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let bare = server::mcp_service(server::DeployState::new(), true);
            let app = axum::Router::new().nest_service(server::MCP_PATH, bare);
            url.send(format!("http://{address}{}", server::MCP_PATH))
                .unwrap();
            axum::serve(server::no_delay(listener), app).await.unwrap();
        });
    });
    told.recv().expect("the server's URL")
}

async fn http(rounds: usize, batch: usize) {
    let url = serve_deploy();
    let client = reqwest::Client::new();
    let layer = support::layer();
    let upstream = Upstream::builder(Http::new(url.clone()))
        .for_layer(&layer)
        .spawn()
        .expect("the upstream starts");
    let layered = ServiceBuilder::new().layer(layer).service(upstream.clone());

    let list = support::list_request();
    let branches = support::call("list_branches", json!({}), json!({}));
    for (title, body, method, name) in [
        (
            "Streamable HTTP, `tools/list` to the deploy example's rmcp 3.11 (2026-07-28)",
            &list,
            "tools/list",
            None,
        ),
        (
            "Streamable HTTP, `tools/call list_branches` to the deploy example's rmcp 3.11 (2026-07-28)",
            &branches,
            "tools/call",
            Some("list_branches"),
        ),
    ] {
        let one = |path| {
            let (client, url, upstream, layered) = (&client, &url, &upstream, &layered);
            async move {
                let (reply, answered) = match path {
                    Path::Direct => {
                        let mut request = client
                            .post(url)
                            .header("content-type", "application/json")
                            .header("accept", "application/json, text/event-stream")
                            .header("mcp-protocol-version", "2026-07-28")
                            .header("mcp-method", method)
                            .body(body.clone());
                        if let Some(name) = name {
                            request = request.header("mcp-name", name);
                        }
                        let response = request.send().await.expect("the server answers");
                        let bytes = response.bytes().await.expect("body");
                        let reply: Value = serde_json::from_slice(&bytes)
                            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)));
                        (reply, Instant::now())
                    }
                    Path::Upstream => {
                        let reply = via(upstream, body, method, name).await;
                        (reply, Instant::now())
                    }
                    Path::Layered => {
                        let reply = via(layered, body, method, name).await;
                        (reply, Instant::now())
                    }
                };
                let result = &reply["result"];
                let ok = match method {
                    "tools/list" => result["tools"].is_array(),
                    _ => result["structuredContent"]["branches"].is_array(),
                };
                assert!(ok, "{path:?}: {reply:#}");
                answered
            }
        };
        let samples = per_request(rounds, batch, one).await;
        per_request_table(title, &samples);
    }
    upstream.shutdown().await;
}

// --- Part 3: whole elicitation flows. ---

/// One run of `flows` flows from `tasks` tasks along `path`.
#[derive(Default)]
struct FlowRun {
    elapsed: Duration,
    cpu: Duration,
    flows: Vec<Duration>,
    /// The 2026 paths' first round (answered `input_required`) and retry, each on its own.
    first: Vec<Duration>,
    retry: Vec<Duration>,
}

/// One `book` flow through a 2026 front: the first round's and the retry's latencies.
async fn front_flow<S, B>(service: &S) -> (Duration, Duration)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let arguments = json!({"restaurant": "Bench"});
    let started = Instant::now();
    let call = support::call("book", arguments.clone(), json!({}));
    let first = via(service, &call, "tools/call", Some("book")).await;
    let asked = Instant::now();
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first:#}");
    let key = result["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next())
        .expect("one question")
        .clone();
    let state = result["requestState"].as_str().expect("a requestState");
    let answer = json!({key: {"action": "accept", "content": {"seats": 2}}});
    let retry = support::call(
        "book",
        arguments,
        json!({"requestState": state, "inputResponses": answer}),
    );
    let done = via(service, &retry, "tools/call", Some("book")).await;
    let finished = Instant::now();
    assert_eq!(text(&done), "booked 2 at Bench", "{done:#}");
    (asked - started, finished - asked)
}

/// The paths of the flows part: the three of the others, and the layer in front of a pool of
/// `UPSTREAM_BENCH_SESSIONS` sessions (children) of the same server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum FlowPath {
    Direct,
    Upstream,
    Layered,
    Pooled,
    /// The same server over Streamable HTTP (`upstream-rmcp --http`), reached directly.
    DirectHttp,
    /// The layer in front of `Upstream` over `upstream::Http` to that server.
    LayeredHttp,
}

const FLOW_PATHS: [FlowPath; 6] = [
    FlowPath::Direct,
    FlowPath::Upstream,
    FlowPath::Layered,
    FlowPath::Pooled,
    FlowPath::DirectHttp,
    FlowPath::LayeredHttp,
];

impl FlowPath {
    fn label(self, sessions: usize) -> String {
        match self {
            FlowPath::Direct => Path::Direct.label().to_owned(),
            FlowPath::Upstream => Path::Upstream.label().to_owned(),
            FlowPath::Layered => Path::Layered.label().to_owned(),
            FlowPath::Pooled => format!("`ElicitationLayer` + `Upstream`, {sessions} sessions"),
            FlowPath::DirectHttp => "direct, over HTTP".to_owned(),
            FlowPath::LayeredHttp => "`ElicitationLayer` + `Upstream`, over HTTP".to_owned(),
        }
    }
}

/// The flow paths in the order round `round` takes them (each goes first in turn).
fn flow_order(round: usize) -> [FlowPath; 6] {
    let mut paths = FLOW_PATHS;
    paths.rotate_left(round % FLOW_PATHS.len());
    paths
}

/// The services a flow run goes through.
struct FlowFronts<S> {
    direct: Arc<Direct>,
    upstream: Upstream,
    layered: S,
    pooled: S,
    direct_http: Arc<DirectHttp>,
    layered_http: S,
}

async fn flows_run<S, B>(
    path: FlowPath,
    fronts: &FlowFronts<S>,
    tasks: usize,
    flows: usize,
) -> FlowRun
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: Body<Data = Bytes> + Send,
    B::Data: Send,
    B::Error: std::fmt::Debug,
{
    let left = Arc::new(AtomicUsize::new(flows));
    let cpu = thread_cpu_time();
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (left, direct, upstream, layered, pooled, direct_http, layered_http) = (
            Arc::clone(&left),
            Arc::clone(&fronts.direct),
            fronts.upstream.clone(),
            fronts.layered.clone(),
            fronts.pooled.clone(),
            Arc::clone(&fronts.direct_http),
            fronts.layered_http.clone(),
        );
        running.spawn(async move {
            let mut run = FlowRun::default();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let flow = Instant::now();
                let rounds = match path {
                    FlowPath::Direct | FlowPath::DirectHttp => {
                        let params = json!({"name": "book", "arguments": {"restaurant": "Bench"}});
                        let reply = if path == FlowPath::Direct {
                            direct.request("tools/call", params).await
                        } else {
                            direct_http.request("tools/call", params).await
                        };
                        assert_eq!(text(&reply), "booked 2 at Bench", "{reply:#}");
                        None
                    }
                    FlowPath::Upstream => Some(front_flow(&upstream).await),
                    FlowPath::Layered => Some(front_flow(&layered).await),
                    FlowPath::Pooled => Some(front_flow(&pooled).await),
                    FlowPath::LayeredHttp => Some(front_flow(&layered_http).await),
                };
                if let Some((first, retry)) = rounds {
                    run.first.push(first);
                    run.retry.push(retry);
                }
                run.flows.push(flow.elapsed());
            }
            run
        });
    }
    let mut total = FlowRun::default();
    while let Some(run) = running.join_next().await {
        let run = run.expect("a flow task");
        total.flows.extend(run.flows);
        total.first.extend(run.first);
        total.retry.extend(run.retry);
    }
    total.elapsed = started.elapsed();
    total.cpu = thread_cpu_time() - cpu;
    assert_eq!(total.flows.len(), flows);
    total
}

async fn flows(
    binary: &PathBuf,
    flows: usize,
    concurrency: &[usize],
    rounds: usize,
    sessions: usize,
) {
    let (direct, _child) = Direct::start(binary).await;
    let layer = support::layer();
    let upstream = Upstream::builder(Stdio::new(binary))
        .for_layer(&layer)
        .spawn()
        .expect("the upstream starts");
    let pool = Upstream::builder(Stdio::new(binary))
        .for_layer(&layer)
        .sessions(sessions)
        // The bench is one caller: its share is the whole of the bounds.
        .fair_share(1.0)
        .spawn()
        .expect("the pool starts");
    let (direct_http, _http_child) = DirectHttp::start(binary).await;
    let over_http = Upstream::builder(Http::new(direct_http.url.clone()))
        .for_layer(&layer)
        .spawn()
        .expect("the HTTP upstream starts");
    let fronts = FlowFronts {
        direct,
        upstream: upstream.clone(),
        layered: ServiceBuilder::new()
            .layer(layer.clone())
            .service(upstream.clone()),
        pooled: ServiceBuilder::new()
            .layer(layer.clone())
            .service(pool.clone()),
        direct_http,
        layered_http: ServiceBuilder::new()
            .layer(layer)
            .service(over_http.clone()),
    };

    // Warm-up.
    for path in FLOW_PATHS {
        flows_run(path, &fronts, 4, 20).await;
    }
    let mut runs: HashMap<(FlowPath, usize), Vec<FlowRun>> = HashMap::new();
    for round in 0..rounds {
        for &tasks in concurrency {
            for path in flow_order(round) {
                let run = flows_run(path, &fronts, tasks, flows).await;
                runs.entry((path, tasks)).or_default().push(run);
            }
        }
    }
    println!(
        "\nflows: `book` on upstream-rmcp (call, `elicitation/create` or `input_required`, \
         answer `{{\"seats\": 2}}`, result); {flows} flows per run, {rounds} runs per row, \
         paths alternated\n"
    );
    println!(
        "| path | tasks | flows/s (median) | runs (low–high) | p50 / flow | p99 / flow | p50 first round | p50 retry | bench-thread CPU / flow |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for &tasks in concurrency {
        for path in FLOW_PATHS {
            let runs = &runs[&(path, tasks)];
            let mut rates: Vec<f64> = runs
                .iter()
                .map(|run| run.flows.len() as f64 / run.elapsed.as_secs_f64())
                .collect();
            rates.sort_by(f64::total_cmp);
            let pooled = |pick: fn(&FlowRun) -> &Vec<Duration>| {
                let mut all: Vec<Duration> = runs.iter().flat_map(|r| pick(r).clone()).collect();
                all.sort_unstable();
                all
            };
            let all = pooled(|r| &r.flows);
            let first = pooled(|r| &r.first);
            let retry = pooled(|r| &r.retry);
            let cpu: Duration = runs.iter().map(|r| r.cpu).sum();
            let dash = |sorted: &[Duration]| {
                if sorted.is_empty() {
                    "—".to_owned()
                } else {
                    us(percentile(sorted, 50))
                }
            };
            println!(
                "| {} | {tasks} | {:.0} | {:.0}–{:.0} | {} | {} | {} | {} | {} |",
                path.label(sessions),
                rates[rates.len() / 2],
                rates[0],
                rates[rates.len() - 1],
                us(percentile(&all, 50)),
                us(percentile(&all, 99)),
                dash(&first),
                dash(&retry),
                us(cpu / all.len().max(1) as u32),
            );
        }
    }
    upstream.shutdown().await;
    pool.shutdown().await;
    over_http.shutdown().await;
}

fn main() {
    // `cargo bench` passes `--bench`: flags are not parts.
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let wants = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let rounds = setting("UPSTREAM_BENCH_ROUNDS", 300);
    let batch = setting("UPSTREAM_BENCH_BATCH", 20);
    let flow_count = setting("UPSTREAM_BENCH_FLOWS", 200);
    let flow_rounds = setting("UPSTREAM_BENCH_FLOW_ROUNDS", 3);
    let sessions = setting("UPSTREAM_BENCH_SESSIONS", 8);
    let concurrency: Vec<usize> = std::env::var("UPSTREAM_BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "1,16".to_owned())
        .split(',')
        .map(|n| {
            n.trim().parse().unwrap_or_else(|e| {
                eprintln!("upstream bench: UPSTREAM_BENCH_CONCURRENCY: {n:?}: {e}");
                std::process::exit(2)
            })
        })
        .collect();
    let binary = (wants("stdio") || wants("flows")).then(upstream_rmcp);
    let rt = support::runtime();
    rt.block_on(async {
        if let (true, Some(binary)) = (wants("stdio"), &binary) {
            stdio(binary, rounds, batch).await;
        }
        if wants("http") {
            http(rounds, batch).await;
        }
        if let (true, Some(binary)) = (wants("flows"), &binary) {
            flows(binary, flow_count, &concurrency, flow_rounds, sessions).await;
        }
    });
}
