//! Issue #36, items 1, 7 and 8: nothing of the front's reaches the upstream child (its
//! environment), connections cannot hold the listener's slots, and what the logs and the stdio
//! downstream say is what happened. Each test runs the built binary over real sockets or pipes.

use crate::support::*;

use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A key (`kid:base64url`, 35 bytes) the tests seal with, given through the environment.
const KEYS: &str = "k1:ZWRnZXMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZlhZWg";
/// Its secret part, as a server printing its environment would show it.
const KEY_SECRET: &str = "ZWRnZXMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZlhZWg";

/// The pinned server-everything's entry point (the probe ignores this test when it is missing).
fn everything() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../.cache/upstream/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    )
}

/// A directory of the test's own with `config` written in it as `gates.toml`.
fn setup(name: &str, config: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("te-edges-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let path = dir.join("gates.toml");
    std::fs::write(&path, config).unwrap();
    (dir, path)
}

/// The proxy serving `config` on `port` with `env` added to its environment (no
/// `--ephemeral-keys`: the keys come from the file), its stderr to `stderr`.
async fn start(config: &Path, port: u16, env: &[(&str, &str)], stderr: Stdio) -> Proxy {
    let child = Command::new(PROXY)
        .arg("--config")
        .arg(config)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let proxy = Proxy {
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

// ---- item 1: the upstream child does not read the signing keys ---------------------------

/// server-everything's `get-env` prints its whole environment: through the proxy, the keys'
/// variable is not in it (nor the key), while a variable `env_passthrough` names is.
async fn the_upstream_child_never_sees_the_keys_variable() {
    let entry = everything();
    let port = free_port();
    let (dir, config) = setup(
        "env",
        &format!(
            r#"[upstream]
command = ["node", "{}", "stdio"]
env_passthrough = ["TE_EDGES_VISIBLE"]
env = {{ TE_EDGES_SET = "set-in-file" }}

[state]
keys = "env:TE_EDGES_KEYS"

[listen]
http = "127.0.0.1:{port}"
"#,
            entry.display()
        ),
    );
    let proxy = start(
        &config,
        port,
        &[
            ("TE_EDGES_KEYS", KEYS),
            ("MCP_REQUEST_STATE_KEYS", KEYS),
            ("TE_EDGES_VISIBLE", "passed-through"),
            ("TE_EDGES_OTHER", "not-listed"),
        ],
        Stdio::inherit(),
    )
    .await;
    let reply = request(
        &proxy.url,
        "tools/call",
        "get-env",
        json!({"name": "get-env", "arguments": {}}),
    )
    .await;
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply:#}"));
    let env: Value = serde_json::from_str(text).unwrap();
    assert!(env.get("PATH").is_some(), "{env:#}");
    assert_eq!(env["TE_EDGES_VISIBLE"], "passed-through", "{env:#}");
    assert_eq!(env["TE_EDGES_SET"], "set-in-file", "{env:#}");
    assert!(env.get("TE_EDGES_OTHER").is_none(), "{env:#}");
    assert!(env.get("TE_EDGES_KEYS").is_none(), "{env:#}");
    assert!(env.get("MCP_REQUEST_STATE_KEYS").is_none(), "{env:#}");
    assert!(!text.contains(KEY_SECRET), "the key came back: {text}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--check` of a config listing a secret's variable in `env_passthrough` fails with its line.
/// A build without feature `otel` exports nothing: a `[telemetry]` table is the file's mistake,
/// saying how to build with it (with the feature, `tests/telemetry.rs` runs it).
fn without_feature_otel_a_telemetry_table_is_refused_saying_how_to_build_with_it() {
    if cfg!(feature = "otel") {
        return;
    }
    let (dir, config) = setup(
        "telemetry",
        "[upstream]\ncommand = [\"true\"]\n\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n",
    );
    check_fails_with(
        &config,
        "gates.toml:4: [telemetry]: this build exports no telemetry; build the proxy with `--features otel`",
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn a_secret_variable_in_env_passthrough_is_a_config_error_with_its_line() {
    let (dir, config) = setup(
        "passthrough",
        r#"[upstream]
command = ["true"]
env_passthrough = [
  "HTTPS_PROXY",
  "TE_EDGES_KEYS",
]

[state]
keys = "env:TE_EDGES_KEYS"
redis = "env:TE_EDGES_REDIS"
"#,
    );
    let check = |config: &Path| {
        Command::new(PROXY)
            .arg("--config")
            .arg(config)
            .arg("--check")
            .env("TE_EDGES_KEYS", KEYS)
            .output()
            .unwrap()
    };
    let out = check(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("gates.toml:5:"), "{stderr}");
    assert!(stderr.contains("TE_EDGES_KEYS"), "{stderr}");

    // The keys' default variable, and a variable an `[upstream] env` value reads, likewise.
    std::fs::write(
        &config,
        "[upstream]\ncommand = [\"true\"]\nenv_passthrough = [\"MCP_REQUEST_STATE_KEYS\"]\n",
    )
    .unwrap();
    let out = check(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gates.toml:3:"), "{stderr}");
    std::fs::write(
        &config,
        "[upstream]\ncommand = [\"true\"]\n\n[upstream.env]\nA = \"x\"\nB = \"env:TE_EDGES_REDIS\"\n\n[state]\nredis = \"env:TE_EDGES_REDIS\"\n",
    )
    .unwrap();
    let out = check(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gates.toml:6:"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- item 7: listening ---------------------------------------------------------------------

/// A connection that never sends a byte is closed at the head deadline (10 s by default), so
/// silent connections cannot hold the listener's slots.
async fn a_silent_connection_is_closed_at_the_head_deadline() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("edges-silent", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A bounded wait, well past the deadline: the proxy closes it first.
    silent
        .set_read_timeout(Some(Duration::from_secs(40)))
        .unwrap();
    let mut byte = [0u8; 1];
    let read = silent.read(&mut byte);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the silent connection was still open: {read:?}"
    );
    drop(proxy);
}

/// A connection to the proxy on `port` from the address `source` (any of 127.0.0.0/8 is this
/// machine on Linux).
async fn connect_from(source: &str, port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket
        .connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// One `GET path` with `headers` on a connection from `source`; what came back (empty: closed
/// unanswered).
async fn get_from(source: &str, port: u16, path: &str, headers: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = connect_from(source, port).await;
    let head = format!("GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
    let _ = tcp.write_all(head.as_bytes()).await;
    let mut text = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut text)).await;
    String::from_utf8_lossy(&text).into_owned()
}

/// One address holds at most 128 connections (the default `max_connections_per_peer`): past
/// that its next connection is closed unanswered, while another address is still served.
async fn one_peer_address_cannot_hold_every_slot() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("edges-peers", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    assert!(
        get_from("127.0.0.1", port, "/healthz", &host)
            .await
            .contains("ok")
    );
    let mut held = Vec::new();
    for _ in 0..128 {
        held.push(connect_from("127.0.0.1", port).await);
    }
    let over = get_from("127.0.0.1", port, "/healthz", &host).await;
    assert!(
        !over.contains("200 OK"),
        "a 129th connection of one peer was served: {over}"
    );
    let other = get_from("127.0.0.2", port, "/healthz", &host).await;
    assert!(
        other.contains("200 OK"),
        "another peer was not served: {other}"
    );
    drop(held);
    drop(proxy);
}

/// `/metrics` and `/healthz` answer only to the names `/mcp` answers to (DNS rebinding).
async fn metrics_and_healthz_check_the_host_and_the_origin() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("edges-hosts", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let local = format!("Host: 127.0.0.1:{port}\r\n");
    for path in ["/metrics", "/healthz"] {
        let ok = get_from("127.0.0.1", port, path, &local).await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{path}: {ok}");
        let rebound = get_from("127.0.0.1", port, path, "Host: attacker.example\r\n").await;
        assert!(rebound.starts_with("HTTP/1.1 403"), "{path}: {rebound}");
        let origin = format!("{local}Origin: http://attacker.example\r\n");
        let foreign = get_from("127.0.0.1", port, path, &origin).await;
        assert!(foreign.starts_with("HTTP/1.1 403"), "{path}: {foreign}");
    }
    drop(proxy);
}

// ---- item 8: credentials and logs ----------------------------------------------------------

/// The decision lines a proxy wrote to its stderr, `log`.
fn decisions(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|d| d.get("decision").is_some())
        .collect()
}

/// A replayed approval is one `refused` line, never `gates_accepted`; every line has a time, an
/// id, the tool and a caller: the layer's keyed tag (not a plain hash of the header, and not the
/// same under another key), `-` for anonymous callers of both eras.
async fn the_decision_log_is_keyed_timed_and_never_logs_a_replay_as_accepted() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("edges-log", &entry, port, "");
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[listen]",
        "[state]\nkeys = \"env:TE_EDGES_KEYS\"\n\n[listen]",
    );
    std::fs::write(&setup.config, config).unwrap();
    let log = setup.dir.join("stderr.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let proxy = start(
        &setup.config,
        port,
        &[("TE_EDGES_KEYS", KEYS)],
        stderr.into(),
    )
    .await;
    let alice = Some(("authorization", "Bearer alice"));
    let path = setup.data("a.txt");
    let arguments = json!({"path": path, "content": "x"});
    let asked = proxy
        .call_as(alice, "write_file", arguments.clone(), json!({}))
        .await;
    let approve = answer(
        &state_of(&asked),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let done = proxy
        .call_as(alice, "write_file", arguments.clone(), approve.clone())
        .await;
    assert_ne!(done["result"]["isError"], true, "{done:#}");
    let replay = proxy
        .call_as(alice, "write_file", arguments.clone(), approve)
        .await;
    assert!(replay.get("error").is_some(), "{replay:#}");
    // An anonymous 2026 caller, and an anonymous 2025-era one through the bridge.
    let _ = proxy.call("write_file", arguments.clone(), json!({})).await;
    legacy_call(&proxy.url, "write_file", &arguments).await;

    let lines = decisions(&log);
    let of = |d: &str| lines.iter().filter(|l| l["decision"] == d).count();
    assert_eq!(of("gates_accepted"), 1, "{lines:#?}");
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["decision"] == "refused" && l["why"] == "single_use")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:#?}");
    assert_eq!(refused[0]["tool"], "write_file", "{lines:#?}");
    let mut ids = std::collections::BTreeSet::new();
    for line in &lines {
        assert!(
            line["time"].as_u64().is_some_and(|t| t > 1_700_000_000_000),
            "{line}"
        );
        assert!(
            ids.insert(line["id"].as_str().unwrap().to_owned()),
            "{line}"
        );
        assert!(line["tool"].is_string(), "{line}");
        assert!(line["caller"].is_string(), "{line}");
    }
    let tags: std::collections::BTreeSet<&str> =
        lines.iter().filter_map(|l| l["caller"].as_str()).collect();
    // Alice's tag, and `-` for both anonymous callers: nothing else.
    assert_eq!(tags.len(), 2, "{lines:#?}");
    assert!(tags.contains("-"), "{lines:#?}");
    let alice_tag = tags.iter().find(|t| **t != "-").unwrap();
    let unkeyed = {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(b"Bearer alice");
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("c:{hex}")
    };
    assert_ne!(*alice_tag, unkeyed, "an unkeyed hash of the header");
    assert!(!alice_tag.contains("alice"), "{alice_tag}");
    let anonymous_legacy = lines
        .iter()
        .filter(|l| l["caller"] == "-" && l["decision"] == "ask")
        .count();
    assert!(anonymous_legacy >= 2, "{lines:#?}");
    drop(proxy);
}

/// A 2025-era host's `initialize`, then a `tools/call` of `tool` on its session (its stream read
/// to the first request the bridge sends it, or the answer).
async fn legacy_call(url: &str, tool: &str, arguments: &Value) {
    let mut call = LegacySession::open(url, "edges-legacy")
        .await
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
        .await;
    // The stream carries the gate's elicitation/create (after a priming event).
    let mut seen = String::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(chunk)) = call.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("elicitation/create") {
                return;
            }
        }
    })
    .await;
    assert!(
        read.is_ok() && seen.contains("elicitation/create"),
        "{seen}"
    );
}

/// With `pass_to_upstream`, a call without `Authorization` is refused (HTTP 401) unless
/// `allow_anonymous`; with every kept adapter busy a new caller is refused (HTTP 503), the busy
/// one is not cut. The upstream is another proxy in front of server-everything.
async fn pass_to_upstream_refuses_anonymous_callers_and_never_evicts_a_busy_adapter() {
    let entry = everything();
    let inner_port = free_port();
    let (dir, inner_config) = setup(
        "routed-inner",
        &format!(
            "[upstream]\ncommand = [\"node\", \"{}\", \"stdio\"]\n\n[identity]\nprincipal = \"none\"\n\n[listen]\nhttp = \"127.0.0.1:{inner_port}\"\n",
            entry.display()
        ),
    );
    let _inner = Proxy::start(&inner_config, inner_port).await;
    let front = |port: u16, extra: &str| {
        format!(
            "[upstream]\nurl = \"http://127.0.0.1:{inner_port}/mcp\"\n\n[identity]\npass_to_upstream = true\n{extra}\n[listen]\nhttp = \"127.0.0.1:{port}\"\n"
        )
    };
    // The proxy's own listing (`--check`, the start, a reload) goes on the file's own
    // connection: a gate finds its tool though no caller is there and `allow_anonymous` is off.
    let gated = dir.join("gated.toml");
    let gate = "\n[[gate]]\ntools = [\"echo\"]\naction = \"allow\"\n";
    std::fs::write(&gated, format!("{}{gate}", front(free_port(), ""))).unwrap();
    let printed = check_passes(&gated);
    assert!(printed.contains("1 gate on 1 tool, all valid"), "{printed}");
    let port = free_port();
    let config = dir.join("front.toml");
    std::fs::write(&config, front(port, "max_callers = 1\n")).unwrap();
    let proxy = Proxy::start(&config, port).await;
    let echo = json!({"message": "hi"});
    let anonymous = proxy.call("echo", echo.clone(), json!({})).await;
    assert!(anonymous.get("error").is_some(), "{anonymous:#}");
    let alice = Some(("authorization", "Bearer alice"));
    let fine = proxy.call_as(alice, "echo", echo.clone(), json!({})).await;
    assert!(
        fine["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("hi")),
        "{fine:#}"
    );
    // Alice's long call holds her adapter busy (its progress is streaming): Bob is refused,
    // Alice's call finishes.
    let mut long = reqwest::Client::new()
        .post(&proxy.url)
        .header("authorization", "Bearer alice")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "trigger-long-running-operation")
        .body(
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
                "name": "trigger-long-running-operation",
                "arguments": {"duration": 4, "steps": 4},
                "_meta": {"progressToken": "p1",
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "edges", "version": "0"}}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let mut streamed = String::new();
    while !streamed.contains("notifications/progress") {
        let chunk = tokio::time::timeout(Duration::from_secs(30), long.chunk())
            .await
            .expect("no progress from the long call")
            .unwrap()
            .unwrap_or_else(|| panic!("the long call ended first: {streamed}"));
        streamed.push_str(&String::from_utf8_lossy(&chunk));
    }
    let bob = proxy
        .call_as(
            Some(("authorization", "Bearer bob")),
            "echo",
            echo.clone(),
            json!({}),
        )
        .await;
    assert!(bob.get("error").is_some(), "{bob:#}");
    while let Some(chunk) = long.chunk().await.unwrap() {
        streamed.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(streamed.contains("\"result\""), "{streamed}");
    // Now Alice is idle: Bob's call evicts her adapter and runs.
    let bob = proxy
        .call_as(
            Some(("authorization", "Bearer bob")),
            "echo",
            echo.clone(),
            json!({}),
        )
        .await;
    assert!(bob.get("result").is_some(), "{bob:#}");
    drop(proxy);

    let port = free_port();
    std::fs::write(&config, front(port, "allow_anonymous = true\n")).unwrap();
    let proxy = Proxy::start(&config, port).await;
    let anonymous = proxy.call("echo", echo, json!({})).await;
    assert!(anonymous.get("result").is_some(), "{anonymous:#}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child's stderr: a line of 200 KiB without a break is logged cut (8 KiB), not whole.
async fn the_childs_stderr_lines_are_bounded() {
    let entry = filesystem();
    let port = free_port();
    let (dir, config) = setup(
        "stderr",
        &format!(
            r#"[upstream]
command = ["sh", "-c", "head -c 204800 /dev/zero | tr '\\0' x >&2; echo >&2; exec node {} {}"]

[listen]
http = "127.0.0.1:{port}"
"#,
            entry.display(),
            std::env::temp_dir().display()
        ),
    );
    let log = dir.join("stderr.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(PROXY)
        .arg("--config")
        .arg(&config)
        .arg("--ephemeral-keys")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let proxy = Proxy {
        child,
        url: String::new(),
    };
    let mut text = String::new();
    for _ in 0..300 {
        text = std::fs::read_to_string(&log).unwrap();
        if text.contains("listening on") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(text.contains("listening on"), "{text}");
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 16 * 1024, "a log line of {longest} bytes");
    assert!(text.contains("xxxxxxxx"), "the line was not logged at all");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over stdio the proxy forwards the bytes it read: a message with a duplicate key is refused
/// as it is over HTTP, not re-encoded with one of the duplicates.
async fn the_stdio_downstream_refuses_duplicate_keys_as_http_does() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("edges-stdio", &entry, port, "");
    let path = setup.data("dup.txt");
    // `name` twice: the gated write_file, then an ungated tool.
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":{},"content":"dup"}},"name":"list_allowed_directories","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"edges","version":"0"}}}}}}}}"#,
        serde_json::to_string(&path).unwrap()
    );
    let over_http = {
        let proxy = Proxy::start(&setup.config, port).await;
        let text = reqwest::Client::new()
            .post(&proxy.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "list_allowed_directories")
            .body(line.clone())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    assert!(over_http.get("error").is_some(), "{over_http:#}");

    let mut proxy = Command::new(PROXY)
        .args(["--ephemeral-keys", "--stdio", "--config"])
        .arg(&setup.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = proxy.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(proxy.stdout.take().unwrap());
    writeln!(stdin, "{line}").unwrap();
    let mut text = String::new();
    stdout.read_line(&mut text).unwrap();
    let over_stdio: Value = serde_json::from_str(&text).unwrap();
    let _ = proxy.kill();
    let _ = proxy.wait();
    assert_eq!(over_stdio["id"], 7, "{text}");
    assert!(
        over_stdio.get("error").is_some(),
        "over stdio it ran: {text}"
    );
    assert_eq!(
        over_stdio["error"]["code"], over_http["error"]["code"],
        "{text}"
    );
}

/// `--check` warns when the file says nothing of who the callers over HTTP are, beyond loopback:
/// the calls without `Authorization` are one anonymous caller to the fair share. Not on
/// loopback (one person's hosts), not when `[identity]` says who callers are, not with
/// `fair_share = 1`.
fn anonymous_callers_sharing_one_fair_share_are_warned_of_beyond_loopback() {
    let entry = everything();
    let config = |listen: &str, extra: &str| {
        format!(
            "[upstream]\ncommand = [\"node\", \"{}\", \"stdio\"]\n{extra}\n[listen]\nhttp = \"{listen}\"\n",
            entry.display()
        )
    };
    let warning = "no [identity] says who the callers over HTTP are";
    let (dir, everywhere) = setup("anonymous", &config("0.0.0.0:1", ""));
    let printed = check_passes(&everywhere);
    assert!(
        printed.contains(&format!("warning: {warning}")) && printed.contains("0.25"),
        "{printed}"
    );
    for (name, text) in [
        ("loopback", config("127.0.0.1:1", "")),
        ("localhost", config("localhost:1", "")),
        (
            "nobody",
            config("0.0.0.0:1", "\n[identity]\nprincipal = \"none\"\n"),
        ),
        ("whole", config("0.0.0.0:1", "fair_share = 1\n")),
        (
            "header",
            config("0.0.0.0:1", "\n[identity]\nprincipal = \"authorization\"\n"),
        ),
    ] {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let printed = check_passes(&path);
        assert!(!printed.contains(warning), "{name}: {printed}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

crate::trials! {
    [Upstreams] current_thread the_upstream_child_never_sees_the_keys_variable,
    [] sync a_secret_variable_in_env_passthrough_is_a_config_error_with_its_line,
    [] sync without_feature_otel_a_telemetry_table_is_refused_saying_how_to_build_with_it,
    [Upstreams] current_thread a_silent_connection_is_closed_at_the_head_deadline,
    [Upstreams] current_thread one_peer_address_cannot_hold_every_slot,
    [Upstreams] current_thread metrics_and_healthz_check_the_host_and_the_origin,
    [Upstreams] current_thread the_decision_log_is_keyed_timed_and_never_logs_a_replay_as_accepted,
    [Upstreams] current_thread pass_to_upstream_refuses_anonymous_callers_and_never_evicts_a_busy_adapter,
    [Upstreams] current_thread the_childs_stderr_lines_are_bounded,
    [Upstreams] current_thread the_stdio_downstream_refuses_duplicate_keys_as_http_does,
    [Upstreams] sync anonymous_callers_sharing_one_fair_share_are_warned_of_beyond_loopback,
}
