//! Issue #40 item 2 over a real socket against the built binary: `[upstream] expose` and `hide`
//! take what they hide out of every list and refuse its calls as unknown, before the gates and
//! the server (server-filesystem; for prompts and resources `gating/changing_server.py`), in
//! both eras; `hide_when_unanswerable` takes a gated tool out of the list of a client that
//! cannot answer its gate; and `--check` counts what is exposed, warns of a gate on a hidden
//! tool, and refuses a bad entry at its line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// A directory of the test's own, with a config in front of server-filesystem (serving
/// `data/`) or, with `python`, of `gating/changing_server.py`; `upstream` are more `[upstream]`
/// keys, `gates` more tables.
struct Exposed {
    dir: PathBuf,
    config: PathBuf,
}

impl Exposed {
    fn new(name: &str, port: u16, upstream: &str, gates: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-exposure-{name}-{}", std::process::id()));
        let command = format!(
            "[\"node\", \"{}\", \"{}\"]",
            filesystem().display(),
            dir.join("data").display()
        );
        Self::with_command(dir, &command, port, upstream, gates)
    }

    fn changing(name: &str, port: u16, upstream: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-exposure-{name}-{}", std::process::id()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gating/changing_server.py");
        let command = format!(
            "[\"{}\", \"{}\"]",
            host_python().display(),
            script.display()
        );
        Self::with_command(dir, &command, port, upstream, "")
    }

    fn with_command(dir: PathBuf, command: &str, port: u16, upstream: &str, gates: &str) -> Self {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("gates.toml");
        let text = format!(
            "[upstream]\ncommand = {command}\n{upstream}\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n{gates}"
        );
        std::fs::write(&config, text).unwrap();
        Self { dir, config }
    }

    fn data(&self, name: &str) -> PathBuf {
        self.dir.join("data").join(name)
    }
}

impl Drop for Exposed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const WRITE_GATE: &str = "\n[[gate]]\ntools = [\"write_file\"]\nmessage = \"Write to {path}?\"\nform.approve = { type = \"boolean\" }\nrequire = { approve = true }\n";

/// The `_meta` of a 2026-07-28 request from a client declaring `capabilities`.
fn meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "exposure-test", "version": "0"}})
}

/// A 2026-07-28 request of `method` from a client declaring `capabilities`; the answer.
async fn request_2026(url: &str, method: &str, mut params: Value, capabilities: Value) -> Value {
    params["_meta"] = meta(capabilities);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let text = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    answer_in(&text)
}

/// The JSON-RPC answer in a body: JSON, or an event stream's event carrying an `id`.
fn answer_in(text: &str) -> Value {
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim_start()).ok())
        .find(|message| message.get("id").is_some())
        .unwrap_or_else(|| serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}")))
}

/// The names (`key`) of the items of the list `field` in `answer`.
fn names(answer: &Value, field: &str, key: &str) -> Vec<String> {
    answer["result"][field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field}: {answer:#}"))
        .iter()
        .filter_map(|item| item[key].as_str().map(str::to_owned))
        .collect()
}

async fn tools_2026(url: &str, capabilities: Value) -> Vec<String> {
    let listed = request_2026(url, "tools/list", json!({}), capabilities).await;
    names(&listed, "tools", "name")
}

/// A 2025-era session's `tools/list`.
async fn tools_2025(session: &LegacySession) -> Vec<String> {
    let listed = session
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await
        .text()
        .await
        .unwrap();
    names(&answer_in(&listed), "tools", "name")
}

/// A 2025-era session's `tools/call` of `tool`; the answer.
async fn call_2025(session: &LegacySession, tool: &str, arguments: Value) -> Value {
    let answered = session
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
        .await
        .text()
        .await
        .unwrap();
    answer_in(&answered)
}

fn unknown_tool(tool: &str) -> Value {
    json!({"code": -32602, "message": format!("Unknown tool: {tool}")})
}

/// The tools server-filesystem (2026.8.31) lists that `read_*` or `list_*` match.
const READ_AND_LIST: [&str; 7] = [
    "list_allowed_directories",
    "list_directory",
    "list_directory_with_sizes",
    "read_file",
    "read_media_file",
    "read_multiple_files",
    "read_text_file",
];

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

async fn only_the_exposed_tools_are_listed_in_both_eras() {
    let port = free_port();
    let setup = Exposed::new("listed", port, "expose = [\"read_*\", \"list_*\"]", "");
    let proxy = Proxy::start(&setup.config, port).await;
    let modern = tools_2026(&proxy.url, json!({"elicitation": {}})).await;
    assert_eq!(sorted(modern), READ_AND_LIST);
    let session = LegacySession::open(&proxy.url, "exposure-2025").await;
    assert_eq!(sorted(tools_2025(&session).await), READ_AND_LIST);
    // What is exposed runs as ever.
    let listed = proxy
        .call("list_allowed_directories", json!({}), json!({}))
        .await;
    assert!(listed["result"]["content"].is_array(), "{listed:#}");
}

async fn hide_beats_expose() {
    let port = free_port();
    let setup = Exposed::new(
        "beats",
        port,
        "expose = [\"read_*\"]\nhide = [\"read_media_file\", \"read_multiple_*\"]",
        "",
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let listed = tools_2026(&proxy.url, json!({})).await;
    assert_eq!(sorted(listed), ["read_file", "read_text_file"]);
    let path = setup.data("a.txt");
    std::fs::write(&path, "a").unwrap();
    let refused = proxy
        .call("read_media_file", json!({"path": path}), json!({}))
        .await;
    assert_eq!(
        refused["error"],
        unknown_tool("read_media_file"),
        "{refused:#}"
    );
    let read = proxy
        .call("read_text_file", json!({"path": path}), json!({}))
        .await;
    assert_eq!(read["result"]["content"][0]["text"], "a", "{read:#}");
}

/// Opens `fifo` for writing without waiting: it fails (`ENXIO`) when no process has it open
/// for reading.
fn has_a_reader(fifo: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(O_NONBLOCK)
        .open(fifo)
        .is_ok()
}

async fn a_hidden_tools_call_is_refused_as_unknown_and_never_reaches_the_server() {
    let port = free_port();
    // `write_file` is gated too: hidden, it is refused as unknown, not asked about.
    let log =
        std::env::temp_dir().join(format!("te-exposure-refused-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let setup = Exposed::new(
        "refused",
        port,
        "hide = [\"write_file\", \"read_text_file\"]",
        &format!(
            "{WRITE_GATE}\n[log]\nto = \"file\"\nfile = \"{}\"\n",
            log.display()
        ),
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let written = setup.data("written.txt");
    let refused = proxy
        .call(
            "write_file",
            json!({"path": written, "content": "x"}),
            json!({}),
        )
        .await;
    assert_eq!(refused["error"], unknown_tool("write_file"), "{refused:#}");
    assert!(refused.get("result").is_none(), "{refused:#}");
    // A read of a named pipe would wait in the server for a writer: it is answered at once,
    // and nothing holds the pipe open.
    let fifo = setup.data("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        proxy.call("read_text_file", json!({"path": fifo}), json!({})),
    )
    .await
    .expect("answered without the server");
    assert_eq!(read["error"], unknown_tool("read_text_file"), "{read:#}");
    assert!(!has_a_reader(&fifo));
    // A 2025-era host's call, through the bridge.
    let session = LegacySession::open(&proxy.url, "exposure-refused").await;
    let legacy = call_2025(
        &session,
        "write_file",
        json!({"path": written, "content": "x"}),
    )
    .await;
    assert_eq!(legacy["error"]["code"], -32602, "{legacy:#}");
    assert_eq!(legacy["error"]["message"], "Unknown tool: write_file");
    assert!(!written.exists(), "the hidden write reached the server");
    // Each refusal is in the decision log, a line of its own, saying why.
    let refusal = logged(&log, |line| line["tool"] == "read_text_file").await;
    assert_eq!(refusal["decision"], "refused", "{refusal}");
    assert_eq!(refusal["why"], "hidden", "{refusal}");
    assert_eq!(refusal["method"], "tools/call", "{refusal}");
    let _ = std::fs::remove_file(&log);
}

async fn hidden_prompts_and_resources_leave_their_lists_and_are_refused() {
    let port = free_port();
    let setup = Exposed::changing(
        "prompts",
        port,
        "hide = [\"prompt:echo\", \"resource:file:///srv/secret/**\"]",
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let prompts = request_2026(&proxy.url, "prompts/list", json!({}), json!({})).await;
    assert!(names(&prompts, "prompts", "name").is_empty(), "{prompts:#}");
    let got = request_2026(
        &proxy.url,
        "prompts/get",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        json!({}),
    )
    .await;
    assert_eq!(
        got["error"],
        json!({"code": -32602, "message": "Unknown prompt: echo"}),
        "{got:#}"
    );
    // A bare entry names tools: the tool `echo` stays.
    assert!(
        tools_2026(&proxy.url, json!({}))
            .await
            .contains(&"echo".to_owned())
    );
    let templates =
        request_2026(&proxy.url, "resources/templates/list", json!({}), json!({})).await;
    assert!(
        names(&templates, "resourceTemplates", "uriTemplate").is_empty(),
        "{templates:#}"
    );
    for uri in ["file:///srv/secret/sub/key", "file:///srv/./secret/sub/key"] {
        let read = request_2026(&proxy.url, "resources/read", json!({"uri": uri}), json!({})).await;
        assert_eq!(
            read["error"],
            json!({"code": -32602, "message": "Resource not found", "data": {"uri": uri}}),
            "{read:#}"
        );
    }
}

async fn hide_when_unanswerable_hides_the_gated_tool_from_a_client_without_elicitation() {
    let port = free_port();
    let setup = Exposed::new(
        "unanswerable",
        port,
        "hide_when_unanswerable = true",
        WRITE_GATE,
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let write = "write_file".to_owned();
    assert!(!tools_2026(&proxy.url, json!({})).await.contains(&write));
    // The URL mode alone cannot answer a form.
    let url_only = json!({"elicitation": {"url": {}}});
    assert!(!tools_2026(&proxy.url, url_only).await.contains(&write));
    assert!(
        tools_2026(&proxy.url, json!({"elicitation": {}}))
            .await
            .contains(&write)
    );
    // A 2025-era host's capabilities are its session's.
    let without = LegacySession::open_declaring(&proxy.url, "exposure-none", json!({})).await;
    let listed = tools_2025(&without).await;
    assert!(!listed.contains(&write) && listed.contains(&"read_file".to_owned()));
    let with = LegacySession::open(&proxy.url, "exposure-form").await;
    assert!(tools_2025(&with).await.contains(&write));
    // The call goes through the gate as before: refused for the missing capability.
    let path = setup.data("unasked.txt");
    let refused = request_2026(
        &proxy.url,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": path, "content": "x"}}),
        json!({}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32021, "{refused:#}");
    assert!(!path.exists());
}

async fn a_reload_hides_at_once_and_a_bad_entry_keeps_the_old_exposure() {
    let port = free_port();
    let setup = Exposed::new("reload", port, "hide = [\"move_file\"]", "");
    let proxy = Proxy::start(&setup.config, port).await;
    let write = "write_file".to_owned();
    assert!(tools_2026(&proxy.url, json!({})).await.contains(&write));
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let hidden = text.replace(
        "hide = [\"move_file\"]",
        "hide = [\"move_file\", \"write_*\"]",
    );
    std::fs::write(&setup.config, &hidden).unwrap();
    proxy.signal(1);
    let mut reloaded = false;
    for _ in 0..100 {
        if !tools_2026(&proxy.url, json!({})).await.contains(&write) {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the reload never applied");
    let path = setup.data("after.txt");
    let refused = proxy
        .call(
            "write_file",
            json!({"path": path, "content": "x"}),
            json!({}),
        )
        .await;
    assert_eq!(refused["error"], unknown_tool("write_file"), "{refused:#}");
    // A file with a bad entry changes nothing.
    std::fs::write(
        &setup.config,
        hidden.replace("\"write_*\"", "\"write_[ab]\""),
    )
    .unwrap();
    proxy.signal(1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!tools_2026(&proxy.url, json!({})).await.contains(&write));
    assert!(!path.exists());
}

async fn check_counts_what_is_exposed_and_warns_of_a_gate_on_a_hidden_tool() {
    let port = free_port();
    let setup = Exposed::new(
        "check",
        port,
        "expose = [\"read_*\", \"list_*\"]",
        WRITE_GATE,
    );
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&setup.config)
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("exposed: 7 of 14 tools: "), "{stdout}");
    assert!(
        stdout.contains(
            "warning: gate 1 (line 8): tool \"write_file\" is hidden ([upstream] expose, hide): this gate never applies to it"
        ),
        "{stdout}"
    );
}

fn a_bad_entry_or_an_empty_expose_fails_check_at_its_line() {
    let port = free_port();
    let empty = Exposed::new("empty", port, "\nexpose = []", "");
    check_fails_with(&empty.config, ":4: [upstream] expose = [] exposes nothing");
    let bad = Exposed::new(
        "pattern",
        port,
        "hide = [\n  \"write_file\",\n  \"resource:file:///srv/[ab]/*\",\n]",
        "",
    );
    check_fails_with(
        &bad.config,
        ":5: [upstream] hide: resource pattern \"file:///srv/[ab]/*\"",
    );
}

crate::trials! {
    [Upstreams] current_thread only_the_exposed_tools_are_listed_in_both_eras,
    [Upstreams] current_thread hide_beats_expose,
    [Upstreams] current_thread a_hidden_tools_call_is_refused_as_unknown_and_never_reaches_the_server,
    [Upstreams] current_thread hidden_prompts_and_resources_leave_their_lists_and_are_refused,
    [Upstreams] current_thread hide_when_unanswerable_hides_the_gated_tool_from_a_client_without_elicitation,
    [Upstreams] current_thread a_reload_hides_at_once_and_a_bad_entry_keeps_the_old_exposure,
    [Upstreams] current_thread check_counts_what_is_exposed_and_warns_of_a_gate_on_a_hidden_tool,
    [] sync a_bad_entry_or_an_empty_expose_fails_check_at_its_line,
}
