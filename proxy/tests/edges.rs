//! Issue #36, items 1, 7 and 8: nothing of the front's reaches the upstream child (its
//! environment), connections cannot hold the listener's slots, and what the logs and the stdio
//! downstream say is what happened. Each test runs the built binary over real sockets or pipes.

mod support;
use support::*;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// A key (`kid:base64url`, 35 bytes) the tests seal with, given through the environment.
const KEYS: &str = "k1:ZWRnZXMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZlhZWg";
/// Its secret part, as a server printing its environment would show it.
const KEY_SECRET: &str = "ZWRnZXMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZlhZWg";

fn everything() -> Option<PathBuf> {
    let entry = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../.cache/upstream/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if entry.exists() {
        return Some(entry);
    }
    let why = format!(
        "{} is missing: run scripts/upstream-servers.sh",
        entry.display()
    );
    assert!(
        std::env::var("MCP_REQUIRE_UPSTREAMS").as_deref() != Ok("1"),
        "MCP_REQUIRE_UPSTREAMS=1: {why}"
    );
    eprintln!("SKIPPED: {why}");
    None
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
#[tokio::test]
async fn the_upstream_child_never_sees_the_keys_variable() {
    let Some(entry) = everything() else { return };
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
#[test]
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
