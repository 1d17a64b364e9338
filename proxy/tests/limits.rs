//! `[limits]` and the bounds of `[listen]` and `[upstream]` (issue #40 item 3) over a real socket:
//! a caller over `calls_per_minute` is refused (429, `Retry-After`, `-32029`) while another
//! caller is not, a retry with the answers does not count, a body over `max_body_bytes` is
//! refused (413), and a bad value fails `--check` at its line. Nothing here waits for a window
//! to pass: the refill is unit-tested with an injected clock (`src/limits.rs`).

use crate::support::*;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

crate::trials! {
    [Upstreams] current_thread a_caller_over_its_limit_is_refused_and_another_is_not,
    [] sync bad_bounds_fail_check_at_their_line,
}

fn hex_sha256(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A `tools/call` of `tool` with `params` added, as `key`'s caller: the status, `Retry-After`
/// and the JSON-RPC answer.
async fn post(
    proxy: &Proxy,
    key: &str,
    tool: &str,
    arguments: Value,
    extra: Value,
) -> (u16, Option<String>, Value) {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    let response = reqwest::Client::new()
        .post(&proxy.url)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.unwrap();
    let reply = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|e| e.get("id").is_some())
        .unwrap_or_else(|| serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")));
    (status, retry_after, reply)
}

async fn a_caller_over_its_limit_is_refused_and_another_is_not() {
    let port = free_port();
    let setup = Setup::new(
        "limits",
        &filesystem(),
        port,
        r#"
[identity]
api_keys = "file:callers.txt"

[limits]
calls_per_minute = 2
"#,
    );
    let log = setup.dir.join("decisions.jsonl");
    // `[listen] max_body_bytes`, on the table `Setup` writes.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text.replacen("[listen]\n", "[listen]\nmax_body_bytes = 4096\n", 1);
    let text = format!(
        "{text}\n[log]\nto = \"file\"\nfile = \"{}\"\n",
        log.display()
    );
    std::fs::write(&setup.config, text).unwrap();
    std::fs::write(
        setup.dir.join("callers.txt"),
        format!(
            "carol {}\ndave {}\n",
            hex_sha256("carol-key"),
            hex_sha256("dave-key")
        ),
    )
    .unwrap();
    std::fs::write(setup.data("a.txt"), "A").unwrap();
    let proxy = Proxy::start(&setup.config, port).await;
    let read = json!({"path": setup.data("a.txt").display().to_string()});

    // A body over max_body_bytes: 413, and it counts for nothing.
    let big = json!({"path": setup.data("big.txt").display().to_string(),
        "content": "x".repeat(8192)});
    let (status, _, reply) = post(&proxy, "carol-key", "write_file", big, json!({})).await;
    assert_eq!(status, 413, "{reply:#}");
    assert!(!setup.data("big.txt").exists());

    // Carol's two calls pass; the third is refused, saying which limit and when to retry.
    for _ in 0..2 {
        let (status, _, reply) = post(
            &proxy,
            "carol-key",
            "read_text_file",
            read.clone(),
            json!({}),
        )
        .await;
        assert_eq!(status, 200, "{reply:#}");
        assert_eq!(reply["result"]["resultType"], "complete", "{reply:#}");
    }
    let (status, retry_after, refused) = post(
        &proxy,
        "carol-key",
        "read_text_file",
        read.clone(),
        json!({}),
    )
    .await;
    assert_eq!(status, 429, "{refused:#}");
    assert_eq!(retry_after.as_deref(), Some("30"), "{refused:#}");
    assert_eq!(refused["id"], 5);
    assert_eq!(refused["error"]["code"], -32029, "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("[limits] calls_per_minute = 2"),
        "{message}"
    );
    assert!(message.contains("\"carol\""), "{message}");
    assert!(message.contains("retry in 30 s"), "{message}");
    assert_eq!(refused["error"]["data"]["retryAfterSeconds"], 30);
    // The refusal is in the decision log, a line of its own: whose call, of what, and why.
    let refusal = logged(&log, |line| line["why"] == "rate_limited").await;
    assert_eq!(refusal["decision"], "refused", "{refusal}");
    assert_eq!(refusal["method"], "tools/call", "{refusal}");
    assert_eq!(refusal["tool"], "read_text_file", "{refusal}");
    assert_eq!(refusal["principal"], "carol", "{refusal}");
    // And counted, by why.
    let metrics = proxy.metrics().await;
    assert!(
        metrics.contains("elicitation_proxy_refusals_total{why=\"rate_limited\"} 1"),
        "{metrics}"
    );

    // Dave has a count of his own; the retry that answers his gate does not count.
    let write = json!({"path": setup.data("d.txt").display().to_string(), "content": "D"});
    let (status, _, asked) = post(&proxy, "dave-key", "write_file", write.clone(), json!({})).await;
    assert_eq!(status, 200, "{asked:#}");
    let approve = answer(
        &state_of(&asked),
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let (status, _, done) = post(&proxy, "dave-key", "write_file", write, approve).await;
    assert_eq!(status, 200, "{done:#}");
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(setup.data("d.txt")).unwrap(), "D");
    let (status, _, reply) = post(
        &proxy,
        "dave-key",
        "read_text_file",
        read.clone(),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{reply:#}");
    let (status, _, refused) = post(
        &proxy,
        "dave-key",
        "read_text_file",
        read.clone(),
        json!({}),
    )
    .await;
    assert_eq!(status, 429, "{refused:#}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"dave\""),
        "{refused:#}"
    );

    // A reload raises the limit to 3: Carol's two calls stay spent, so one more passes (a fresh
    // count would let three through), then the new limit refuses her.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(
        &setup.config,
        text.replace("calls_per_minute = 2", "calls_per_minute = 3"),
    )
    .unwrap();
    proxy.signal(1);
    let mut reloaded = false;
    for _ in 0..100 {
        let (status, _, _) = post(
            &proxy,
            "carol-key",
            "read_text_file",
            read.clone(),
            json!({}),
        )
        .await;
        if status == 200 {
            reloaded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the reload never applied");
    let (status, _, refused) = post(&proxy, "carol-key", "read_text_file", read, json!({})).await;
    assert_eq!(status, 429, "{refused:#}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("calls_per_minute = 3"),
        "{refused:#}"
    );
}

fn bad_bounds_fail_check_at_their_line() {
    let dir = std::env::temp_dir().join(format!("te-proxy-limits-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gates.toml");
    for (text, expected) in [
        (
            "[upstream]\ncommand = [\"x\"]\n\n[limits]\ncalls_per_minute = 0\n",
            ":5: [limits] calls_per_minute 0: from 1 to 1000000 calls",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[limits.per_tool]\nwrite_file = -3\n",
            ":5: [limits] per_tool -3: from 1 to 1000000 calls",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[limits.per_tool]\n\"fs_*\" = 5\n\"fs_[ab]\" = 1\n",
            ":6: [limits] per_tool: tool pattern \"fs_[ab]\"",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[limits]\ncalls_per_minute = \"many\"\n",
            ":5: invalid type: string \"many\", expected i64",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\nrequest_timeout_secs = 0\n",
            ":3: [upstream] request_timeout_secs 0: from 1 to 86400 seconds",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\nmax_parked = 10000000\n",
            ":3: [upstream] max_parked 10000000: from 1 to 65536 calls",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[listen]\nmax_body_bytes = 12\n",
            ":5: [listen] max_body_bytes 12: from 1024 to 268435456 bytes",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[listen]\nmax_connections = 16\nmax_connections_per_peer = 32\n",
            ":6: [listen] max_connections_per_peer: from 1 to 16 (max_connections)",
        ),
        (
            "[upstream]\ncommand = [\"x\"]\n\n[listen]\nbody_timeout_secs = 99999\n",
            ":5: [listen] body_timeout_secs 99999: from 1 to 3600 seconds",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        check_fails_with(&config, expected);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
