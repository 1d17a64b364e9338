//! What every test of the proxy binary shares: the pinned servers and Redis (which the probe in
//! `main.rs` checks before any test runs), a directory and config of the test's own,
//! the proxy run as a person runs it, and the requests a client sends it.
//!
//! Each test module takes it with `use crate::support::*;`; not every one uses every helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

pub const PROXY: &str = env!("CARGO_BIN_EXE_elicitation-proxy");

/// The pinned server-filesystem's entry point (the probe ignores a test that needs it when it
/// is missing, so a test that asks for it finds it).
pub fn filesystem() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../.cache/upstream/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
    )
}

/// The pinned servers' entry points and the Python client's venv that are not installed:
/// what `harness::Probe` checks before any test runs (empty when all are there).
pub fn not_installed() -> Vec<String> {
    let upstream = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/upstream");
    let everything =
        upstream.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    [filesystem(), everything, host_python()]
        .into_iter()
        .filter(|path| !path.exists())
        .map(|path| path.display().to_string())
        .collect()
}

/// A directory of the test's own, and a config in it gating `write_file` on the filesystem
/// server that serves it; `gates` are more `[[gate]]`s.
pub struct Setup {
    pub dir: PathBuf,
    pub config: PathBuf,
}

impl Setup {
    pub fn new(name: &str, entry: &Path, port: u16, gates: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-proxy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("gates.toml");
        let text = format!(
            r#"[upstream]
command = ["node", "{}", "{}"]

[listen]
http = "127.0.0.1:{port}"

[[gate]]
tools = ["write_file"]
message = "Write to {{path}}?"
form.approve = {{ type = "boolean", title = "Approve" }}
require = {{ approve = true }}
{gates}"#,
            entry.display(),
            dir.join("data").display()
        );
        std::fs::write(&config, text).unwrap();
        Self { dir, config }
    }

    pub fn data(&self, name: &str) -> PathBuf {
        self.dir.join("data").join(name)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A config in front of server-filesystem serving `dir/data`, with `gates`.
pub fn filesystem_config(dir: &Path, entry: &Path, port: u16, gates: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let config = dir.join("gates.toml");
    let text = format!(
        "[upstream]\ncommand = [\"node\", \"{}\", \"{}\"]\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n{gates}",
        entry.display(),
        dir.join("data").display()
    );
    std::fs::write(&config, text).unwrap();
    config
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The proxy serving `config`, killed when dropped.
pub struct Proxy {
    pub child: Child,
    pub url: String,
}

impl Proxy {
    /// What `/metrics` shows now.
    pub async fn metrics(&self) -> String {
        reqwest::get(self.url.replace("/mcp", "/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn start(config: &Path, port: u16) -> Self {
        Self::start_with(config, port, Stdio::inherit()).await
    }

    /// [`start`](Self::start), its stderr (logs) going to `stderr`.
    pub async fn start_with(config: &Path, port: u16, stderr: impl Into<Stdio>) -> Self {
        let child = Command::new(PROXY)
            .arg("--config")
            .arg(config)
            .arg("--ephemeral-keys")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let proxy = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let health = format!("http://127.0.0.1:{port}/healthz");
        for _ in 0..600 {
            if reqwest::get(&health)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return proxy;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the proxy did not come up");
    }

    pub fn signal(&self, signal: i32) {
        send_signal(self.child.id(), signal);
    }

    /// A `tools/call` of `tool` (2026-07-28, declaring form elicitation), `extra` params added.
    pub async fn call(&self, tool: &str, arguments: Value, extra: Value) -> Value {
        self.call_as(None, tool, arguments, extra).await
    }

    /// [`call`](Self::call) with `caller` as `(header, value)`.
    pub async fn call_as(
        &self,
        caller: Option<(&str, &str)>,
        tool: &str,
        arguments: Value,
        extra: Value,
    ) -> Value {
        call_at(&self.url, caller, tool, arguments, extra).await
    }
}

/// A `tools/call` of `tool` at `url` (2026-07-28, declaring form elicitation), `extra` params
/// added, with `caller` as `(header, value)`.
pub async fn call_at(
    url: &str,
    caller: Option<(&str, &str)>,
    tool: &str,
    arguments: Value,
    extra: Value,
) -> Value {
    {
        let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}}});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        let mut request = reqwest::Client::new().post(url);
        if let Some((name, value)) = caller {
            request = request.header(name, value);
        }
        let text = request
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|e| e.get("id").is_some());
        data.unwrap_or_else(|| {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `signal` with kill(1).
pub fn send_signal(pid: u32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

pub fn state_of(reply: &Value) -> String {
    assert_eq!(reply["result"]["resultType"], "input_required", "{reply:#}");
    reply["result"]["requestState"].as_str().unwrap().to_owned()
}

pub fn answer(state: &str, answer: Value) -> Value {
    json!({"requestState": state, "inputResponses": {"approval": answer}})
}

/// The Python `mcp` 1.30 client's interpreter (`scripts/upstream-servers.sh` makes the venv).
pub fn host_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/upstream/venv/bin/python")
}

/// The pids of `parent`'s children.
pub fn children_of(parent: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .arg("-P")
        .arg(parent.to_string())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

/// The pids of `parent`'s descendants, children first.
pub fn descendants_of(parent: u32) -> Vec<u32> {
    let mut all = children_of(parent);
    let mut next = 0;
    while next < all.len() {
        let more = children_of(all[next]);
        all.extend(more);
        next += 1;
    }
    all
}

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.contains(") Z ") && !stat.contains(") X "))
}

/// Waits until a process under `root` (the server) is opening `fifo`: one of its threads waits
/// in the kernel for a writer (`wait_for_partner`), or has it open. The call is in flight there.
pub async fn opened(root: u32, fifo: &Path) {
    for _ in 0..600 {
        let mut pids = descendants_of(root);
        pids.push(root);
        for pid in pids {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
            for task in tasks.into_iter().flatten().flatten() {
                let wchan = std::fs::read_to_string(task.path().join("wchan")).unwrap_or_default();
                if wchan.contains("wait_for_partner") {
                    return;
                }
            }
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
            for fd in fds.into_iter().flatten().flatten() {
                if std::fs::read_link(fd.path()).is_ok_and(|target| target == fifo) {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server never opened {}", fifo.display());
}

/// A named pipe in the served directory: reading it blocks until someone writes, a call that
/// stays in flight at the server.
pub fn fifo(setup: &Setup) -> PathBuf {
    let path = setup.data("fifo");
    let status = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(status.success());
    path
}

/// The Redis at `MCP_REDIS_URL` (default 127.0.0.1:6379): the probe ignores a test that needs
/// it when none answers there.
pub fn redis_url() -> String {
    redis::redis_url()
}

/// The Redis the probe looks for, as `harness::Probe` asks for it.
pub mod redis {
    /// `MCP_REDIS_URL`, else `redis://127.0.0.1:6379`.
    pub fn redis_url() -> String {
        std::env::var("MCP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
    }

    /// Whether something accepts a connection at [`redis_url`]'s host and port.
    pub fn available() -> bool {
        let url = redis_url();
        let host = url
            .trim_start_matches("redis://")
            .rsplit('@')
            .next()
            .unwrap_or_default()
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        std::net::TcpStream::connect(&host).is_ok()
    }
}

/// Sends one command to Redis at `url` (RESP), as the system that finishes a flow would.
pub fn redis_command(url: &str, args: &[&str]) -> String {
    use std::io::{Read, Write};
    let host = url
        .trim_start_matches("redis://")
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut tcp = std::net::TcpStream::connect(host).unwrap();
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    tcp.write_all(command.as_bytes()).unwrap();
    let mut reply = [0u8; 256];
    let read = tcp.read(&mut reply).unwrap();
    String::from_utf8_lossy(&reply[..read]).into_owned()
}

/// The `_meta` of a 2026 client that declares URL-mode elicitation.
pub fn url_client_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}})
}

/// The retry params accepting the URL gate `signin` asked with `state`.
pub fn accept_signin(state: &str, meta: &Value) -> Value {
    json!({"requestState": state, "inputResponses": {"signin": {"action": "accept"}},
        "_meta": meta})
}

/// A 2026-07-28 request of `method` with `params` to `url`; the JSON-RPC answer.
pub async fn request(url: &str, method: &str, name: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let text = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A 2025-era host's session over HTTP (`2025-11-25`, declaring form elicitation unless told
/// otherwise): `initialize`
/// and `notifications/initialized` sent, its `Mcp-Session-Id` kept for what it posts next.
pub struct LegacySession {
    client: reqwest::Client,
    url: String,
    id: String,
}

impl LegacySession {
    /// Opens a session at `url` as the client `name`.
    pub async fn open(url: &str, name: &str) -> Self {
        Self::open_declaring(url, name, json!({"elicitation": {"form": {}}})).await
    }

    /// [`open`](Self::open), the client declaring `capabilities`.
    pub async fn open_declaring(url: &str, name: &str, capabilities: Value) -> Self {
        let client = reqwest::Client::new();
        let init = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": {"name": name, "version": "0"}}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        let id = init
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .expect("a session id");
        let _ = init.text().await;
        let session = Self {
            client,
            url: url.to_owned(),
            id,
        };
        let _ = session
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .text()
            .await;
        session
    }

    /// Opens the session's GET stream (list changes, resource updates); its body unread.
    pub async fn stream(&self) -> reqwest::Response {
        self.client
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .unwrap()
    }

    /// POSTs `message` in the session; the response, its body unread.
    pub async fn post(&self, message: Value) -> reqwest::Response {
        self.client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .body(message.to_string())
            .send()
            .await
            .unwrap()
    }
}

/// Runs `--check` on `config`; what it printed and how it exited.
fn check(config: &Path) -> std::process::Output {
    Command::new(PROXY)
        .arg("--config")
        .arg(config)
        .arg("--check")
        .output()
        .unwrap()
}

/// Runs `--check` on `config`, which must pass; what it printed on stdout.
pub fn check_passes(config: &Path) -> String {
    let out = check(config);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    printed
}

/// Runs `--check` on `config`, which must fail (exit 1) saying `expected` on stderr; its stderr.
pub fn check_fails_with(config: &Path, expected: &str) -> String {
    let out = check(config);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(expected), "{expected}: {err}");
    err
}

/// The first line of the decision log at `path` that `wanted` picks, waiting for it (10 s at
/// most: the log is written as the call is answered).
pub async fn logged(path: &std::path::Path, wanted: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..100 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| wanted(line))
        {
            return line;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no such line in {}: {}",
        path.display(),
        std::fs::read_to_string(path).unwrap_or_default()
    );
}
