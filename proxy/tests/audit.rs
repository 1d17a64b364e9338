//! Issue #39 item 4 over a real socket against the built binary: the decision log written to a
//! file rotated by size (`[log]`), its lines' fields (the call's decision id, the arguments'
//! digest, the arguments only with `log_arguments`, a line for an ungated call only with
//! `log_ungated`), and `[log]`'s mistakes reported with their line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-audit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WRITE_GATE: &str = r#"
[[gate]]
tools = ["write_file"]
form.approve = { type = "boolean" }
require = { approve = true }
"#;

/// The JSON lines of `path`, when it exists.
fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

async fn the_decision_log_goes_to_a_file_rotated_by_size() {
    let dir = Dir::new("file");
    let port = free_port();
    let log = dir.0.join("decisions.jsonl");
    let gates = format!(
        "\n[log]\nto = \"file\"\nfile = \"{}\"\nmax_bytes = 2000\nkeep = 2\nlog_ungated = true\nlog_arguments = true\n{WRITE_GATE}",
        log.display()
    );
    let config = filesystem_config(&dir.0, &filesystem(), port, &gates);
    let stderr = dir.0.join("stderr.log");
    let proxy = Proxy::start_with(&config, port, std::fs::File::create(&stderr).unwrap()).await;
    let data = dir.0.join("data");
    std::fs::write(data.join("a.txt"), "a").unwrap();
    for _ in 0..12 {
        let read = proxy
            .call(
                "read_text_file",
                json!({"path": data.join("a.txt")}),
                json!({}),
            )
            .await;
        assert_ne!(read["result"]["isError"], true, "{read:#}");
    }
    let asked = proxy
        .call(
            "write_file",
            json!({"path": data.join("b.txt"), "content": "secret"}),
            json!({}),
        )
        .await;
    let decision = asked["result"]["inputRequests"]["approval"]["params"]["_meta"]
        ["elicitation-proxy/decision"]
        .as_str()
        .unwrap_or_else(|| panic!("{asked:#}"))
        .to_owned();
    drop(proxy);

    let rotated: Vec<PathBuf> = (1..=3)
        .map(|n| PathBuf::from(format!("{}.{n}", log.display())))
        .collect();
    assert!(rotated[0].exists(), "rotated once at least");
    assert!(!rotated[2].exists(), "keep = 2: no third file");
    let mut lines = Vec::new();
    for path in rotated.iter().rev().chain([&log]) {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        assert!(size <= 2000, "{} holds {size} bytes", path.display());
        lines.extend(lines_of(path));
    }
    // The newest lines: the ungated reads, then the write's question.
    let ask = lines.last().expect("lines");
    assert_eq!(ask["decision"], "ask", "{ask:#}");
    assert_eq!(ask["decision_id"], decision.as_str());
    assert!(
        ask["args_digest"].as_str().unwrap().starts_with("sha256:"),
        "{ask:#}"
    );
    assert_eq!(
        ask["arguments"]["content"], "secret",
        "log_arguments: {ask:#}"
    );
    let ungated = &lines[lines.len() - 2];
    assert_eq!(ungated["decision"], "ungated", "{ungated:#}");
    assert_eq!(ungated["tool"], "read_text_file");
    assert!(
        ungated.get("arguments").is_none(),
        "no gate saw it: {ungated:#}"
    );
    // Nothing of the decision log on stderr.
    let logged = std::fs::read_to_string(&stderr).unwrap();
    assert!(!logged.contains("\"decision\":"), "{logged}");
}

async fn without_log_arguments_a_line_holds_only_their_digest() {
    let dir = Dir::new("digest");
    let port = free_port();
    let log = dir.0.join("decisions.jsonl");
    let gates = format!(
        "\n[log]\nto = \"file\"\nfile = \"{}\"\n{WRITE_GATE}",
        log.display()
    );
    let config = filesystem_config(&dir.0, &filesystem(), port, &gates);
    let proxy = Proxy::start(&config, port).await;
    let data = dir.0.join("data");
    let read = proxy
        .call(
            "read_text_file",
            json!({"path": data.join("none.txt")}),
            json!({}),
        )
        .await;
    assert!(read.get("result").is_some(), "{read:#}");
    let write = json!({"path": data.join("b.txt"), "content": "secret"});
    let asked = proxy.call("write_file", write.clone(), json!({})).await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
    drop(proxy);
    let lines = lines_of(&log);
    assert_eq!(lines.len(), 1, "the ungated read has no line: {lines:#?}");
    assert_eq!(lines[0]["decision"], "ask");
    assert!(lines[0].get("arguments").is_none(), "{:#}", lines[0]);
    assert!(!lines[0].to_string().contains("secret"));
    let digest = lines[0]["args_digest"].as_str().unwrap();
    assert_eq!(digest.len(), "sha256:".len() + 64, "{digest}");
}

async fn log_mistakes_are_the_files_with_their_line() {
    let dir = Dir::new("mistakes");
    for (log, expected) in [
        (
            "to = \"file\"",
            ":8: [log] to = \"file\" or \"both\" needs `file`",
        ),
        ("to = \"syslog\"", ":8: [log] to \"syslog\""),
    ] {
        let config = filesystem_config(
            &dir.0,
            &filesystem(),
            free_port(),
            &format!("\n[log]\n{log}\n"),
        );
        check_fails_with(&config, expected);
    }
    // stdout carries MCP over stdio: the log may not go there.
    let config = filesystem_config(
        &dir.0,
        &filesystem(),
        free_port(),
        "\n[log]\nto = \"both\"\nfile = \"x.jsonl\"\n",
    );
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .arg("--stdio")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(":8: [log] to: stdout carries MCP"), "{err}");
}

/// A 2025-era host over HTTP that calls `tool` and never answers the proxy's question: the
/// call's stream, to its end.
async fn call_unanswered_2025(url: &str, tool: &str, arguments: Value) -> String {
    LegacySession::open(url, "audit-2025")
        .await
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
        .await
        .text()
        .await
        .unwrap()
}

/// Issue #39 item 3: a decline, a cancel, a replay, a state reused for other arguments, a
/// condition's refusal, a 2025-era host's timeout: each its own line, none `gates_accepted`.
async fn each_way_a_call_is_not_approved_is_its_own_outcome() {
    let dir = Dir::new("outcomes");
    let port = free_port();
    let log = dir.0.join("decisions.jsonl");
    let gates = format!(
        "\n[log]\nto = \"file\"\nfile = \"{}\"\n{WRITE_GATE}\n[[gate]]\ntools = [\"create_directory\"]\nwhen = \"args.path.endsWith('/forbidden')\"\naction = \"deny\"\n",
        log.display()
    );
    let config = filesystem_config(&dir.0, &filesystem(), port, &gates);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replacen("[listen]\n", "[listen]\nanswer_timeout_secs = 1\n", 1),
    )
    .unwrap();
    let proxy = Proxy::start(&config, port).await;
    let data = dir.0.join("data");
    let write = |name: &str| json!({"path": data.join(name), "content": "x"});
    let approve = json!({"action": "accept", "content": {"approve": true}});

    for (name, answered) in [
        ("declined.txt", json!({"action": "decline"})),
        ("cancelled.txt", json!({"action": "cancel"})),
    ] {
        let asked = proxy.call("write_file", write(name), json!({})).await;
        let refused = proxy
            .call(
                "write_file",
                write(name),
                answer(&state_of(&asked), answered),
            )
            .await;
        assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    }
    // Approved once, then the same approval sent again; then reused for other arguments.
    let asked = proxy.call("write_file", write("once.txt"), json!({})).await;
    let state = state_of(&asked);
    let done = proxy
        .call(
            "write_file",
            write("once.txt"),
            answer(&state, approve.clone()),
        )
        .await;
    assert_ne!(done["result"]["isError"], true, "{done:#}");
    let replayed = proxy
        .call(
            "write_file",
            write("once.txt"),
            answer(&state, approve.clone()),
        )
        .await;
    assert!(replayed.get("error").is_some(), "{replayed:#}");
    let asked = proxy.call("write_file", write("mine.txt"), json!({})).await;
    let moved = proxy
        .call(
            "write_file",
            write("other.txt"),
            answer(&state_of(&asked), approve),
        )
        .await;
    assert!(moved.get("error").is_some(), "{moved:#}");
    let denied = proxy
        .call(
            "create_directory",
            json!({"path": data.join("forbidden")}),
            json!({}),
        )
        .await;
    assert_eq!(denied["result"]["isError"], true, "{denied:#}");
    let stream = call_unanswered_2025(&proxy.url, "write_file", write("late.txt")).await;
    assert!(stream.contains("elicitation/create"), "{stream}");
    assert!(stream.contains("within 1 second"), "{stream}");
    drop(proxy);
    for name in ["declined.txt", "cancelled.txt", "other.txt", "late.txt"] {
        assert!(!data.join(name).exists(), "{name} was written");
    }

    let lines = lines_of(&log);
    let outcomes: Vec<(String, String)> = lines
        .iter()
        .filter(|line| line["decision"] != "ask")
        .map(|line| {
            let field = |name: &str| line[name].as_str().unwrap_or("-").to_owned();
            (field("decision"), field("why"))
        })
        .collect();
    let expected = [
        ("gate_refused", "declined"),
        ("gate_refused", "cancelled"),
        ("gates_accepted", "-"),
        ("refused", "single_use"),
        ("rejected_state", "mismatch"),
        ("gate_refused", "denied"),
        ("unanswered", "timeout"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(d, w)| ((*d).to_owned(), (*w).to_owned()))
        .collect();
    assert_eq!(outcomes, expected, "{lines:#?}");
    let late = lines.last().unwrap();
    assert_eq!(late["tool"], "write_file", "{late:#}");
    assert_eq!(late["gate"], "gate 1 (line 12)", "{late:#}");
}

crate::trials! {
    [Upstreams] current_thread the_decision_log_goes_to_a_file_rotated_by_size,
    [Upstreams] current_thread without_log_arguments_a_line_holds_only_their_digest,
    [Upstreams] current_thread log_mistakes_are_the_files_with_their_line,
    [Upstreams] current_thread each_way_a_call_is_not_approved_is_its_own_outcome,
}
