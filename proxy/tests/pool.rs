//! Issue #38 items 3 and 4 through the proxy: `[upstream] sessions = N` (a pool of children of
//! the command) and `fair_share`, read with their errors, and a pool serving calls at once.
//! The server is the library's `tests/upstream/slow_server.py` (the standard library only):
//! each child says its process id and how many calls of all the children ran together.

use crate::support::*;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// A directory of the test's own with `config` written in it as `gates.toml`.
fn setup(name: &str, config: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("te-pool-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gates.toml");
    std::fs::write(&path, config).unwrap();
    (dir, path)
}

fn slow_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/upstream/slow_server.py")
}

/// `--check` of a pool of no sessions, of sessions that are not a number, of sessions with a
/// `url` upstream, or of a share out of range fails naming the line.
fn sessions_or_a_share_out_of_range_is_a_config_error_with_its_line() {
    let (dir, config) = setup("check", "");
    let check = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(PROXY)
            .arg("--config")
            .arg(&config)
            .arg("--check")
            .arg("--ephemeral-keys")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let command = "[upstream]\ncommand = [\"true\"]\n";
    for (bad, says) in [
        ("sessions = 0", "from 1 to 64"),
        ("sessions = \"eight\"", "expected i64"),
        ("fair_share = 2", "at most 1"),
    ] {
        let stderr = check(&format!("{command}\n{bad}\n"));
        assert!(stderr.contains("gates.toml:4:"), "{bad}: {stderr}");
        assert!(stderr.contains(says), "{bad}: {stderr}");
    }
    let stderr = check("[upstream]\nurl = \"http://127.0.0.1:9/mcp\"\nsessions = 2\n");
    assert!(stderr.contains("gates.toml:3:"), "{stderr}");
    assert!(stderr.contains("only for a command"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Four callers at once through a proxy whose `[upstream] sessions = 4`, the server's questions
/// relayed (one call at a time per child): each call runs in a child of its own, all together.
async fn four_callers_run_at_once_in_four_pooled_sessions_through_the_proxy() {
    let port = free_port();
    let (dir, config) = setup(
        "four",
        &format!(
            "[upstream]\ncommand = [\"python3\", {:?}]\nsessions = 4\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n",
            slow_server().display().to_string()
        ),
    );
    let together = dir.join("together");
    std::fs::create_dir_all(&together).unwrap();
    let proxy = Proxy::start(&config, port).await;
    let arguments = json!({"seconds": 1.5, "together": together.to_str().unwrap()});
    let calls = (0..4).map(|i| {
        let caller = format!("Bearer caller-{i}");
        let (proxy, arguments) = (&proxy, arguments.clone());
        async move {
            proxy
                .call_as(
                    Some(("authorization", caller.as_str())),
                    "sleep",
                    arguments,
                    json!({}),
                )
                .await
        }
    });
    let replies: Vec<Value> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(|reply| {
            let text = reply["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("a tool result: {reply:#}"));
            serde_json::from_str(text).unwrap()
        })
        .collect();
    let pids: HashSet<u64> = replies.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 4, "one call per child: {replies:#?}");
    let most = replies.iter().filter_map(|r| r["together"].as_u64()).max();
    assert_eq!(most, Some(4), "all at once: {replies:#?}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

crate::trials! {
    [] sync sessions_or_a_share_out_of_range_is_a_config_error_with_its_line,
    [] current_thread four_callers_run_at_once_in_four_pooled_sessions_through_the_proxy,
}
