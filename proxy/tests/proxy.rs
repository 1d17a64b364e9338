//! The proxy binary run as a person runs it, in front of the pinned `server-filesystem`
//! (`scripts/upstream-servers.sh` installs it under `.cache/upstream`; without it each test
//! says why it skips, unless `MCP_REQUIRE_UPSTREAMS=1`, which fails it), driven over a real
//! socket: `--check` on good and bad files, a gated write asked, approved, replayed and declined,
//! a read not asked, a reload with a bad file, and no child left behind after SIGTERM.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn check_validates_the_file_against_the_upstream_and_says_where_it_is_wrong() {
    let entry = filesystem();
    let good = Setup::new("check-good", &entry, free_port(), "");
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&good.config)
        .arg("--check")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("1. gate 1 (line 7): ask tool write_file\n")
            && printed.contains(r#"asks "Write to {path}?""#),
        "{printed}"
    );

    let typo = "\n[[gate]]\ntools = [\"move_*\"]\nmessage = \"Move {src}?\"\nform.approve = { type = \"boolean\" }\n";
    let bad = Setup::new("check-bad", &entry, free_port(), typo);
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&bad.config)
        .arg("--check")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains(
            "gates.toml:13: gate 2: {src} names an argument tool move_file does not take"
        ),
        "{said}"
    );

    // No keys and no --ephemeral-keys: refused at start.
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&good.config)
        .env_remove("MCP_REQUEST_STATE_KEYS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to start without keys"));
}

async fn a_gated_write_is_asked_written_once_on_approval_and_refused_on_decline() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("flow", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("a.txt");
    let args = json!({"path": path, "content": "hello"});

    let asked = proxy.call("write_file", args.clone(), json!({})).await;
    let message = &asked["result"]["inputRequests"]["approval"]["params"]["message"];
    assert_eq!(message, &json!(format!("Write to \"{}\"?", path.display())));
    assert!(!path.exists(), "nothing written before the answer");
    let state = state_of(&asked);
    let done = proxy
        .call(
            "write_file",
            args.clone(),
            answer(
                &state,
                json!({"action": "accept", "content": {"approve": true}}),
            ),
        )
        .await;
    assert!(done["result"]["isError"] != true, "{done:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");

    // The same approval again: spent.
    std::fs::remove_file(&path).unwrap();
    let replay = proxy
        .call(
            "write_file",
            args.clone(),
            answer(
                &state,
                json!({"action": "accept", "content": {"approve": true}}),
            ),
        )
        .await;
    assert_eq!(replay["error"]["code"], -32602, "{replay:#}");
    assert!(!path.exists());

    // Declined: refused, not written.
    let state = state_of(&proxy.call("write_file", args.clone(), json!({})).await);
    let declined = proxy
        .call(
            "write_file",
            args,
            answer(&state, json!({"action": "decline"})),
        )
        .await;
    assert_eq!(declined["result"]["isError"], true, "{declined:#}");
    assert!(!path.exists());

    // The counters saw it: a replay refused, a gate refused.
    let metrics = proxy.metrics().await;
    assert!(
        metrics.contains("elicitation_proxy_replays_refused_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("elicitation_proxy_decisions_total{outcome=\"gate_refused\"} 1"),
        "{metrics}"
    );
    for line in [
        "elicitation_proxy_gates_total{outcome=\"asked\"} 2",
        // The approval; its replay is refused by the single-use check (counted in
        // replays_refused), never counted as accepted.
        "elicitation_proxy_gates_total{outcome=\"accepted\"} 1",
        "elicitation_proxy_gates_total{outcome=\"declined\"} 1",
        "elicitation_proxy_gates_total{outcome=\"refused\"} 0",
        "elicitation_proxy_reasks_total 0",
        "elicitation_proxy_parked_calls 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // An answer of the wrong type is asked again, and counted so.
    let state = state_of(
        &proxy
            .call(
                "write_file",
                json!({"path": path, "content": "x"}),
                json!({}),
            )
            .await,
    );
    let wrong = proxy
        .call(
            "write_file",
            json!({"path": path, "content": "x"}),
            answer(
                &state,
                json!({"action": "accept", "content": {"approve": "yes"}}),
            ),
        )
        .await;
    state_of(&wrong);
    let metrics = proxy.metrics().await;
    assert!(
        metrics.contains("elicitation_proxy_reasks_total 1"),
        "{metrics}"
    );

    // A read is not asked at all.
    std::fs::write(setup.data("b.txt"), "read me").unwrap();
    let read = proxy
        .call(
            "read_text_file",
            json!({"path": setup.data("b.txt")}),
            json!({}),
        )
        .await;
    assert_eq!(read["result"]["resultType"], "complete", "{read:#}");
}

async fn a_reload_replaces_the_gates_and_a_bad_file_keeps_them_and_sigterm_leaves_no_child() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("reload", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let read = || {
        proxy.call(
            "read_text_file",
            json!({"path": setup.data("x")}),
            json!({}),
        )
    };
    assert_eq!(read().await["result"]["resultType"], "complete");

    let more = "\n[[gate]]\ntools = [\"read_text_file\"]\nform.approve = { type = \"boolean\" }\nrequire = { approve = true }\n";
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, format!("{text}{more}")).unwrap();
    proxy.signal(1);
    let mut asked = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if read().await["result"]["resultType"] == "input_required" {
            asked = true;
            break;
        }
    }
    assert!(asked, "the reload put the new gate in place");

    std::fs::write(&setup.config, format!("{text}{more}broken = [\n")).unwrap();
    proxy.signal(1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        read().await["result"]["resultType"],
        "input_required",
        "the old gates stay"
    );

    // SIGTERM: the proxy ends, and the server it started with it.
    let children = descendants_of(proxy.child.id());
    assert!(
        !children.is_empty(),
        "the proxy runs the server as its child"
    );
    proxy.signal(15);
    let mut proxy = proxy;
    let status = tokio::task::spawn_blocking(move || proxy.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    // The server under the supervisor gets its SIGKILL from the kernel as the supervisor ends.
    let mut left = children;
    for _ in 0..50 {
        left.retain(|pid| alive(*pid));
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "the server {left:?} outlived the proxy");
}

fn a_desktop_host_on_stdio_is_asked_refused_on_decline_and_written_on_approval() {
    let entry = filesystem();
    let python = host_python();
    let setup = Setup::new("stdio", &entry, free_port(), "");
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stdio/host.py");
    let out = Command::new(python)
        .arg(host)
        .arg(PROXY)
        .arg(&setup.config)
        .arg(setup.dir.join("data"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}\n{said}");
    assert!(printed.contains("host.py: all checks passed"), "{printed}");
}

fn a_2026_host_on_stdio_gets_input_required_and_its_retry_is_written() {
    use std::io::{BufRead, BufReader, Write};
    let entry = filesystem();
    let setup = Setup::new("stdio-2026", &entry, free_port(), "");
    let mut proxy = Command::new(PROXY)
        .args(["--ephemeral-keys", "--stdio", "--config"])
        .arg(&setup.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = proxy.stdin.take().unwrap();
    let mut stdout = BufReader::new(proxy.stdout.take().unwrap());
    // A line that is not JSON: a parse error, and the proxy goes on.
    writeln!(stdin, "not json {{").unwrap();
    let mut text = String::new();
    stdout.read_line(&mut text).unwrap();
    let parse_error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parse_error["error"]["code"], -32700, "{text}");
    let path = setup.data("new.txt");
    let mut call = |id: u64, extra: Value| -> Value {
        let mut params = json!({"name": "write_file", "arguments": {"path": path, "content": "2026"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "stdio-2026", "version": "0"}}});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        writeln!(stdin, "{line}").unwrap();
        loop {
            let mut text = String::new();
            assert!(stdout.read_line(&mut text).unwrap() > 0, "stdout closed");
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    };
    let asked = call(1, json!({}));
    let state = state_of(&asked);
    assert!(!path.exists());
    let done = call(
        2,
        answer(
            &state,
            json!({"action": "accept", "content": {"approve": true}}),
        ),
    );
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "2026");
    drop(stdin);
    let status = proxy.wait().unwrap();
    assert!(status.success(), "stdin closed: the proxy ends ({status})");
}

async fn one_process_serves_a_host_on_stdio_and_clients_over_http_until_stdin_closes() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let entry = filesystem();
    let port = free_port();
    // `[listen] http` named and `stdio = true`: both at once (the flag `--stdio` is stdio alone).
    let setup = Setup::new("both", &entry, port, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text.replace("[listen]\n", "[listen]\nstdio = true\n");
    std::fs::write(&setup.config, text).unwrap();
    let mut proxy = tokio::process::Command::new(PROXY)
        .args(["--ephemeral-keys", "--config"])
        .arg(&setup.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = proxy.stdin.take().unwrap();
    let mut stdout = BufReader::new(proxy.stdout.take().unwrap()).lines();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let health = format!("http://127.0.0.1:{port}/healthz");
    let mut up = false;
    for _ in 0..600 {
        if reqwest::get(&health)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the HTTP listener came up beside stdio");

    // The HTTP client's write is asked, and its approval writes it.
    let over_http = setup.data("http.txt");
    let write = |path: &Path, content: &str| json!({"path": path, "content": content});
    let asked = call_at(
        &url,
        None,
        "write_file",
        write(&over_http, "http"),
        json!({}),
    )
    .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
    let approve = |state: &str| {
        answer(
            state,
            json!({"action": "accept", "content": {"approve": true}}),
        )
    };
    let done = call_at(
        &url,
        None,
        "write_file",
        write(&over_http, "http"),
        approve(&state_of(&asked)),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(&over_http).unwrap(), "http");

    // The host on stdio is asked too; stdout carries MCP and nothing else (no "listening on").
    let over_stdio = setup.data("stdio.txt");
    let mut host = (&mut stdin, &mut stdout);
    let asked_on_stdio = write_on_stdio(&mut host, 1, write(&over_stdio, "stdio"), json!({})).await;
    assert_eq!(
        asked_on_stdio["result"]["resultType"], "input_required",
        "{asked_on_stdio:#}"
    );
    // The HTTP client's approval is not the stdio host's: its state is refused there.
    let state = state_of(&asked_on_stdio);
    let crossed = call_at(
        &url,
        None,
        "write_file",
        write(&over_stdio, "stdio"),
        approve(&state),
    )
    .await;
    assert_ne!(crossed["result"]["resultType"], "complete", "{crossed:#}");
    assert!(!over_stdio.exists(), "another caller's state wrote nothing");
    let done_on_stdio =
        write_on_stdio(&mut host, 2, write(&over_stdio, "stdio"), approve(&state)).await;
    assert_eq!(
        done_on_stdio["result"]["resultType"], "complete",
        "{done_on_stdio:#}"
    );
    assert_eq!(std::fs::read_to_string(&over_stdio).unwrap(), "stdio");

    // The host closes stdin: the proxy ends, and its HTTP listener with it.
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), proxy.wait())
        .await
        .expect("the proxy ends once stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        reqwest::get(&health).await.is_err(),
        "the listener is closed"
    );
}

/// A 2026-07-28 host's `tools/call` of `write_file` written to the proxy's stdin, and the
/// response with its id read from stdout (every line of which must be MCP).
async fn write_on_stdio(
    host: &mut (
        &mut tokio::process::ChildStdin,
        &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    ),
    id: u64,
    arguments: Value,
    extra: Value,
) -> Value {
    use tokio::io::AsyncWriteExt;
    let mut params = json!({"name": "write_file", "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "both", "version": "0"}}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    host.0
        .write_all(format!("{line}\n").as_bytes())
        .await
        .unwrap();
    loop {
        let text = host.1.next_line().await.unwrap().expect("stdout open");
        let message: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("stdout carries MCP only: {e}: {text}"));
        if message["id"] == id {
            return message;
        }
    }
}

async fn an_approval_is_bound_to_its_caller() {
    let entry = filesystem();
    let port = free_port();
    let identity = "\n[identity]\nprincipal = \"header:x-user\"\n";
    let setup = Setup::new("identity", &entry, port, identity);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("bound.txt");
    let args = json!({"path": path, "content": "alice's"});
    let (alice, bob) = (Some(("x-user", "alice")), Some(("x-user", "bob")));
    let approve = |state: &str| {
        answer(
            state,
            json!({"action": "accept", "content": {"approve": true}}),
        )
    };

    let state = state_of(
        &proxy
            .call_as(alice, "write_file", args.clone(), json!({}))
            .await,
    );
    for other in [bob, None] {
        let stolen = proxy
            .call_as(other, "write_file", args.clone(), approve(&state))
            .await;
        assert!(
            stolen.get("error").is_some() || stolen["result"]["isError"] == true,
            "{other:?} used alice's approval: {stolen:#}"
        );
        assert!(!path.exists(), "written on another caller's approval");
    }
    let done = proxy
        .call_as(alice, "write_file", args, approve(&state))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "alice's");
}

async fn each_decision_is_one_log_line_without_the_answers_or_the_credentials() {
    let entry = filesystem();
    let port = free_port();
    let gate = "\n[[gate]]\ntools = [\"create_directory\"]\nmessage = \"Create {path}?\"\nform.approve = { type = \"boolean\" }\nform.reason = { type = \"string\" }\nrequire = { approve = true }\n";
    let setup = Setup::new("decisions", &entry, port, gate);
    let log = setup.dir.join("stderr.log");
    let proxy = Proxy::start_with(&setup.config, port, std::fs::File::create(&log).unwrap()).await;
    let caller = Some(("authorization", "Bearer TOKEN-SECRET-7"));
    let path = setup.data("made");
    let args = json!({"path": path});
    let state = state_of(
        &proxy
            .call_as(caller, "create_directory", args.clone(), json!({}))
            .await,
    );
    let reply =
        json!({"action": "accept", "content": {"approve": true, "reason": "SECRET-REASON-42"}});
    let done = proxy
        .call_as(caller, "create_directory", args, answer(&state, reply))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
    let read = proxy
        .call_as(None, "list_allowed_directories", json!({}), json!({}))
        .await;
    assert_eq!(read["result"]["resultType"], "complete", "{read:#}");

    let text = std::fs::read_to_string(&log).unwrap();
    let decisions: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("decision").is_some())
        .collect();
    let of = |tool: &str, decision: &str| {
        decisions
            .iter()
            .filter(|d| d["tool"] == tool && d["decision"] == decision)
            .count()
    };
    assert_eq!(of("create_directory", "ask"), 1, "{text}");
    assert_eq!(of("create_directory", "gates_accepted"), 1, "{text}");
    assert_eq!(of("list_allowed_directories", "ask"), 0, "{text}");
    let asked = decisions
        .iter()
        .find(|d| d["tool"] == "create_directory")
        .unwrap();
    assert_eq!(asked["gate"], "gate 2 (line 13)", "{asked}");
    assert_eq!(asked["method"], "tools/call", "{asked}");
    let tag = asked["caller"].as_str().unwrap_or_default();
    // The layer's keyed tag (`kid.tag`), never the header nor a plain hash of it.
    assert!(tag.contains('.') && tag.len() > 16, "{asked}");
    assert!(
        decisions
            .iter()
            .all(|d| d["tool"] != "create_directory" || d["caller"] == tag)
    );
    assert!(
        !text.contains("SECRET-REASON-42"),
        "an answer in the logs: {text}"
    );
    assert!(
        !text.contains("TOKEN-SECRET-7"),
        "a credential in the logs: {text}"
    );
}

async fn a_changed_file_is_reloaded_without_a_signal_and_a_bad_one_keeps_the_gates_and_says_why() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("watch", &entry, port, "");
    let log = setup.dir.join("stderr.log");
    let proxy = Proxy::start_with(&setup.config, port, std::fs::File::create(&log).unwrap()).await;
    let read = || {
        proxy.call(
            "read_text_file",
            json!({"path": setup.data("x")}),
            json!({}),
        )
    };
    assert_eq!(read().await["result"]["resultType"], "complete");

    let more = "\n[[gate]]\ntools = [\"read_text_file\"]\nform.approve = { type = \"boolean\" }\nrequire = { approve = true }\n";
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, format!("{text}{more}")).unwrap();
    let mut asked = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if read().await["result"]["resultType"] == "input_required" {
            asked = true;
            break;
        }
    }
    assert!(asked, "the changed file's new gate is in place");

    // A gate with a pattern the matcher cannot honour: refused, the old gates stay. (A name
    // the server does not list is only a warning: it is matched on each call.)
    let bad = "\n[[gate]]\ntools = [\"delete_[ab]\"]\nform.approve = { type = \"boolean\" }\n";
    std::fs::write(&setup.config, format!("{text}{more}{bad}")).unwrap();
    let mut said = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        said = std::fs::read_to_string(&log).unwrap();
        if said.contains("reload refused") {
            break;
        }
    }
    assert!(said.contains("reload refused"), "{said}");
    assert!(
        said.contains(
            "gates.toml:18: gate 3: tool pattern \"delete_[ab]\": `[` is not pattern syntax"
        ),
        "{said}"
    );
    assert_eq!(
        read().await["result"]["resultType"],
        "input_required",
        "the old gates stay"
    );
}

async fn the_proxy_killed_mid_call_leaves_no_server_behind() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("sigkill", &entry, port, "");
    let mut proxy = Proxy::start(&setup.config, port).await;
    let servers = children_of(proxy.child.id());
    assert!(
        !servers.is_empty(),
        "the proxy runs the server as its child"
    );
    let fifo = fifo(&setup);
    let url = proxy.url.clone();
    let in_flight = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "read_text_file", "arguments": {"path": fifo}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}}}});
        reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "read_text_file")
            .body(body.to_string())
            .send()
            .await
    });
    opened(proxy.child.id(), &setup.data("fifo")).await;
    assert!(!in_flight.is_finished(), "the read of a fifo is in flight");
    proxy.signal(9);
    let _ = proxy.child.wait();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the call's connection ended with the proxy"
    );
    let mut left: Vec<u32> = servers.clone();
    for _ in 0..100 {
        left.retain(|pid| alive(*pid));
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for pid in &left {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    assert!(
        left.is_empty(),
        "the server {left:?} outlived the proxy killed with SIGKILL"
    );
}

async fn the_server_killed_mid_call_is_a_clear_error_and_the_next_call_works() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("upstream-kill", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    // The server itself (under the supervisor): what crashes.
    let supervisor = children_of(proxy.child.id());
    assert_eq!(supervisor.len(), 1, "{supervisor:?}");
    let server = children_of(supervisor[0]);
    assert_eq!(server.len(), 1, "{server:?}");
    let fifo = fifo(&setup);
    let call = proxy.call("read_text_file", json!({"path": fifo}), json!({}));
    let killer = async {
        opened(server[0], &fifo).await;
        send_signal(server[0], 9);
    };
    let (failed, ()) = tokio::join!(call, killer);
    let said = failed["error"]["message"]
        .as_str()
        .or(failed["result"]["content"][0]["text"].as_str())
        .unwrap_or_default();
    assert!(
        said.contains("server exited"),
        "a clear error for the call in flight: {failed:#}"
    );

    std::fs::write(setup.data("after.txt"), "still here").unwrap();
    let mut next = Value::Null;
    for _ in 0..100 {
        next = proxy
            .call(
                "read_text_file",
                json!({"path": setup.data("after.txt")}),
                json!({}),
            )
            .await;
        if next["result"]["resultType"] == "complete" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(next["result"]["resultType"], "complete", "{next:#}");
    assert!(next.to_string().contains("still here"), "{next:#}");
    let restarted = descendants_of(proxy.child.id());
    assert!(
        restarted.len() == 2 && !restarted.contains(&server[0]),
        "a new server: {restarted:?}"
    );
}

async fn two_replicas_on_redis_share_approvals_once() {
    let entry = filesystem();
    let redis = redis_url();
    let key = format!("{:x<42}A", std::process::id());
    let state = format!("\n[state]\nkeys = \"k1:{key}\"\nredis = \"{redis}\"\n");
    let (port_a, port_b) = (free_port(), free_port());
    let a_setup = Setup::new("replica-a", &entry, port_a, &state);
    let text = std::fs::read_to_string(&a_setup.config)
        .unwrap()
        .replace(&format!(":{port_a}\""), &format!(":{port_b}\""));
    let b_config = a_setup.dir.join("b.toml");
    std::fs::write(&b_config, text).unwrap();
    let a = Proxy::start(&a_setup.config, port_a).await;
    let b = Proxy::start(&b_config, port_b).await;
    let path = a_setup.data("replicated.txt");
    let args = json!({"path": path, "content": "once"});
    let approve = |state: &str| {
        answer(
            state,
            json!({"action": "accept", "content": {"approve": true}}),
        )
    };

    // Asked by A, answered on B: the replicas share keys and the spent approvals.
    let state = state_of(&a.call("write_file", args.clone(), json!({})).await);
    let done = b.call("write_file", args.clone(), approve(&state)).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "once");
    std::fs::remove_file(&path).unwrap();

    // The same approval on A: spent on B, refused here.
    let replay = a.call("write_file", args, approve(&state)).await;
    assert_eq!(replay["error"]["code"], -32602, "{replay:#}");
    assert!(!path.exists(), "an approval used twice across replicas");
}

async fn a_url_gate_lets_the_call_through_once_its_redis_key_says_complete() {
    let entry = filesystem();
    let redis = redis_url();
    let port = free_port();
    let prefix = format!("te-proxy-test:{}", std::process::id());
    let gate = format!(
        "\n[state]\nredis = \"{redis}\"\n\n[[gate]]\ntools = [\"create_directory\"]\nkey = \"signin\"\nmessage = \"Sign in to create {{path}}\"\nurl = \"https://auth.example.com/start?flow={{handle}}&path={{path}}\"\ncomplete_when = {{ redis_key = \"{prefix}:flows:{{handle}}\" }}\n"
    );
    let setup = Setup::new("url-gate", &entry, port, &gate);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("signed");
    let args = json!({"path": path});
    let meta = url_client_meta();
    let accept = |state: &str| accept_signin(state, &meta);

    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let request = &asked["result"]["inputRequests"]["signin"]["params"];
    assert_eq!(request["mode"], "url", "{asked:#}");
    let url = request["url"].as_str().unwrap();
    let handle = url
        .strip_prefix("https://auth.example.com/start?flow=")
        .and_then(|rest| rest.split('&').next())
        .unwrap_or_else(|| panic!("{url}"));
    assert!(
        url.ends_with(&format!(
            "&path={}",
            path.display().to_string().replace('/', "%2F")
        )),
        "{url}"
    );

    // Accepted, but the flow did not finish: asked again, nothing done.
    let again = proxy
        .call("create_directory", args.clone(), accept(&state_of(&asked)))
        .await;
    let state = state_of(&again);
    assert!(!path.exists());

    // The flow finishes (its callback sets the key): the retry goes through.
    let key = format!("{prefix}:flows:{handle}");
    assert!(redis_command(&redis, &["SET", &key, "1", "EX", "600"]).starts_with("+OK"));
    let done = proxy.call("create_directory", args, accept(&state)).await;
    let _ = redis_command(&redis, &["DEL", &key]);
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
}

async fn a_url_gate_checks_completion_over_http() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let entry = filesystem();
    // The flow's service: `GET /flows/{handle}` answers 200 once finished, 404 before.
    let finished = Arc::new(AtomicBool::new(false));
    let asked_paths = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let checks = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let checks_port = checks.local_addr().unwrap().port();
    {
        let (finished, asked_paths) = (Arc::clone(&finished), Arc::clone(&asked_paths));
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = checks.accept().await {
                let mut head = vec![0u8; 4096];
                let read = tcp.read(&mut head).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&head[..read]).into_owned();
                let path = head
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                asked_paths.lock().unwrap().push(path);
                let status = if finished.load(Ordering::SeqCst) {
                    "200 OK"
                } else {
                    "404 Not Found"
                };
                let _ = tcp
                    .write_all(
                        format!(
                            "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
    }
    let port = free_port();
    let gate = format!(
        "\n[[gate]]\ntools = [\"create_directory\"]\nkey = \"signin\"\nurl = \"https://auth.example.com/start?flow={{handle}}\"\ncomplete_when = {{ http = \"http://127.0.0.1:{checks_port}/flows/{{handle}}\" }}\n"
    );
    let setup = Setup::new("url-http", &entry, port, &gate);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("checked");
    let args = json!({"path": path});
    let meta = url_client_meta();
    let accept = |state: &str| accept_signin(state, &meta);
    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let url = asked["result"]["inputRequests"]["signin"]["params"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{asked:#}"))
        .to_owned();
    let handle = url.rsplit('=').next().unwrap().to_owned();
    let again = proxy
        .call("create_directory", args.clone(), accept(&state_of(&asked)))
        .await;
    let state = state_of(&again);
    assert!(!path.exists());
    finished.store(true, Ordering::SeqCst);
    let done = proxy.call("create_directory", args, accept(&state)).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
    let paths = asked_paths.lock().unwrap().clone();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| *p == format!("/flows/{handle}")),
        "{paths:?}"
    );
}

async fn prompts_and_resources_are_gated_and_checked_against_the_upstreams_lists() {
    let filesystem = filesystem();
    let everything = filesystem
        .ancestors()
        .nth(3)
        .unwrap()
        .join("server-everything/dist/index.js");
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("te-proxy-everything-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gates.toml");
    let head = format!(
        "[upstream]\ncommand = [\"node\", \"{}\", \"stdio\"]\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n",
        everything.display()
    );
    let gates = r#"
[[gate]]
prompts = ["args-*"]
message = "Ask about {city}?"
form.approve = { type = "boolean" }
require = { approve = true }

[[gate]]
resources = ["demo://resource/static/document/*.md"]
message = "Read {uri}?"
form.approve = { type = "boolean" }
require = { approve = true }
"#;
    std::fs::write(&config, format!("{head}{gates}")).unwrap();
    let printed = check_passes(&config);
    assert!(
        printed.contains("1. gate 1 (line 7): ask prompt args-*\n     asks \"Ask about {city}?\""),
        "{printed}"
    );
    assert!(
        printed.contains(
            "2. gate 2 (line 13): ask resource demo://resource/static/document/*.md\n     asks"
        ),
        "{printed}"
    );

    // A pattern the matcher cannot honour, or a placeholder a prompt does not take: refused.
    for (bad, says) in [
        (
            "resources = [\"demo://{a,b}/*.md\"]",
            "resource pattern \"demo://{a,b}/*.md\": `{` is not pattern syntax",
        ),
        (
            "prompts = [\"args-prompt\"]\nmessage = \"{town}\"",
            "{town} names an argument prompt args-prompt does not take (it takes city, state)",
        ),
    ] {
        std::fs::write(
            &config,
            format!("{head}\n[[gate]]\n{bad}\nform.approve = {{ type = \"boolean\" }}\n"),
        )
        .unwrap();
        let out = Command::new(PROXY)
            .arg("--config")
            .arg(&config)
            .arg("--check")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains(says), "{said}");
    }

    std::fs::write(&config, format!("{head}{gates}")).unwrap();
    let proxy = Proxy::start(&config, port).await;
    let url = proxy.url.clone();
    let prompt = request(
        &url,
        "prompts/get",
        "args-prompt",
        json!({"name": "args-prompt", "arguments": {"city": "Lyon"}}),
    )
    .await;
    assert_eq!(
        prompt["result"]["inputRequests"]["approval"]["params"]["message"], "Ask about \"Lyon\"?",
        "{prompt:#}"
    );
    let doc = "demo://resource/static/document/architecture.md";
    let read = request(&url, "resources/read", doc, json!({"uri": doc})).await;
    assert_eq!(
        read["result"]["inputRequests"]["approval"]["params"]["message"],
        format!("Read \"{doc}\"?"),
        "{read:#}"
    );
    let state = state_of(&read);
    let approved = request(
        &url,
        "resources/read",
        doc,
        json!({"uri": doc, "requestState": state,
        "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}}}),
    )
    .await;
    assert_eq!(approved["result"]["resultType"], "complete", "{approved:#}");
    assert_eq!(
        approved["result"]["contents"][0]["uri"], doc,
        "{approved:#}"
    );

    // Not gated: another prompt, and a resource outside the pattern.
    let simple = request(
        &url,
        "prompts/get",
        "simple-prompt",
        json!({"name": "simple-prompt"}),
    )
    .await;
    assert_eq!(simple["result"]["resultType"], "complete", "{simple:#}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn each_callers_authorization_reaches_an_http_upstream_when_passed_and_none_otherwise() {
    let python = host_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/upstream/elicit_server.py");
    let server_port = free_port();
    let mut server = Command::new(python)
        .arg(&script)
        .arg("--http")
        .arg(server_port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", server_port)).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dir = std::env::temp_dir().join(format!("te-proxy-pass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seen = |proxy_port: u16, pass: bool| {
        let config = dir.join(format!("{pass}.toml"));
        std::fs::write(
            &config,
            format!(
                "[upstream]\nurl = \"http://127.0.0.1:{server_port}/mcp\"\nheaders = {{ Authorization = \"Bearer the-proxys-own\" }}\n\n[listen]\nhttp = \"127.0.0.1:{proxy_port}\"\n\n[identity]\npass_to_upstream = {pass}\nallow_anonymous = true\n"
            ),
        )
        .unwrap();
        config
    };
    let header = async |proxy: &Proxy, caller: Option<(&str, &str)>| {
        let reply = proxy
            .call_as(
                caller,
                "header",
                json!({"name": "authorization"}),
                json!({}),
            )
            .await;
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply:#}"))
            .to_owned()
    };
    let (alice, bob) = (
        Some(("authorization", "Bearer alice")),
        Some(("authorization", "Bearer bob")),
    );

    let port = free_port();
    let passing = Proxy::start(&seen(port, true), port).await;
    assert_eq!(header(&passing, alice).await, "Bearer alice");
    assert_eq!(header(&passing, bob).await, "Bearer bob");
    assert_eq!(header(&passing, alice).await, "Bearer alice");
    assert_eq!(header(&passing, None).await, "Bearer the-proxys-own");
    drop(passing);

    let port = free_port();
    let not_passing = Proxy::start(&seen(port, false), port).await;
    assert_eq!(header(&not_passing, alice).await, "Bearer the-proxys-own");
    drop(not_passing);

    // Several upstreams (the same server twice): the caller's credentials go to the one the
    // file names, and the other keeps the file's own headers.
    let port = free_port();
    let config = dir.join("several.toml");
    let upstream = |name: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{server_port}/mcp\"\nheaders = {{ Authorization = \"Bearer the-proxys-own\" }}\n\n"
        )
    };
    std::fs::write(
        &config,
        format!(
            "{}{}[listen]\nhttp = \"127.0.0.1:{port}\"\n\n[identity]\npass_to_upstream = [\"mine\"]\n",
            upstream("mine"),
            upstream("theirs"),
        ),
    )
    .unwrap();
    // The proxy's own listing (`--check`, the start, a reload) goes on the file's own
    // connection, so a gate on the named upstream's tools finds them though no caller is there
    // (and `allow_anonymous` is off).
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}\n[[gate]]\nupstream = \"mine\"\ntools = [\"header\"]\naction = \"allow\"\n"
        ),
    )
    .unwrap();
    let printed = check_passes(&config);
    assert!(printed.contains("1 gate on 1 tool, all valid"), "{printed}");
    let several = Proxy::start(&config, port).await;
    let header_of = async |tool: &str, caller: Option<(&str, &str)>| {
        let reply = several
            .call_as(caller, tool, json!({"name": "authorization"}), json!({}))
            .await;
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply:#}"))
            .to_owned()
    };
    assert_eq!(header_of("mine_header", alice).await, "Bearer alice");
    assert_eq!(header_of("mine_header", bob).await, "Bearer bob");
    assert_eq!(
        header_of("theirs_header", alice).await,
        "Bearer the-proxys-own"
    );
    // Not allow_anonymous: a call without credentials to the named upstream is refused; the
    // other still serves it.
    let refused = several
        .call_as(
            None,
            "mine_header",
            json!({"name": "authorization"}),
            json!({}),
        )
        .await;
    assert!(
        refused.to_string().contains("send an Authorization header"),
        "{refused:#}"
    );
    assert_eq!(
        header_of("theirs_header", None).await,
        "Bearer the-proxys-own"
    );
    drop(several);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload while calls are in flight: one held at the server (a read of a fifo) and one held at
/// the client (a gated write asked, not yet answered). The read finishes with its content, the
/// write's approval from before the reload is still taken, and once the reload is in place a new
/// read meets the new gate. No wait here is a sleep that must be long enough: each waits on the
/// kernel (the fifo opened) or polls for the outcome.
async fn a_reload_while_calls_are_in_flight_lets_them_finish_and_then_applies() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("reload-in-flight", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;

    // In flight at the client: asked before the reload.
    let path = setup.data("w.txt");
    let args = json!({"path": path, "content": "approved before"});
    let state = state_of(&proxy.call("write_file", args.clone(), json!({})).await);

    // In flight at the server: a read of a fifo, which waits for a writer.
    let fifo = fifo(&setup);
    let reading = proxy.call("read_text_file", json!({"path": fifo}), json!({}));
    let reload = async {
        opened(proxy.child.id(), &fifo).await;
        let more = "\n[[gate]]\ntools = [\"read_text_file\"]\nform.approve = { type = \"boolean\" }\nrequire = { approve = true }\n";
        let text = std::fs::read_to_string(&setup.config).unwrap();
        std::fs::write(&setup.config, format!("{text}{more}")).unwrap();
        proxy.signal(1);
        // The writer that lets the read finish, after the reload was asked for.
        let fifo = fifo.clone();
        tokio::task::spawn_blocking(move || std::fs::write(fifo, "written late"))
            .await
            .unwrap()
            .unwrap();
    };
    let (read, ()) = tokio::join!(reading, reload);
    assert_eq!(read["result"]["resultType"], "complete", "{read:#}");
    assert!(read.to_string().contains("written late"), "{read:#}");

    let written = proxy
        .call(
            "write_file",
            args,
            answer(
                &state,
                json!({"action": "accept", "content": {"approve": true}}),
            ),
        )
        .await;
    assert!(written["result"]["isError"] != true, "{written:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "approved before");

    std::fs::write(setup.data("x"), "x").unwrap();
    let mut asked = Value::Null;
    for _ in 0..100 {
        asked = proxy
            .call(
                "read_text_file",
                json!({"path": setup.data("x")}),
                json!({}),
            )
            .await;
        if asked["result"]["resultType"] == "input_required" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        asked["result"]["resultType"], "input_required",
        "the reload's gate applies to new calls: {asked:#}"
    );
}

crate::trials! {
    [Upstreams] current_thread check_validates_the_file_against_the_upstream_and_says_where_it_is_wrong,
    [Upstreams] current_thread a_gated_write_is_asked_written_once_on_approval_and_refused_on_decline,
    [Upstreams] current_thread a_reload_replaces_the_gates_and_a_bad_file_keeps_them_and_sigterm_leaves_no_child,
    [Upstreams] sync a_desktop_host_on_stdio_is_asked_refused_on_decline_and_written_on_approval,
    [Upstreams] sync a_2026_host_on_stdio_gets_input_required_and_its_retry_is_written,
    [Upstreams] current_thread one_process_serves_a_host_on_stdio_and_clients_over_http_until_stdin_closes,
    [Upstreams] current_thread an_approval_is_bound_to_its_caller,
    [Upstreams] current_thread each_decision_is_one_log_line_without_the_answers_or_the_credentials,
    [Upstreams] current_thread a_changed_file_is_reloaded_without_a_signal_and_a_bad_one_keeps_the_gates_and_says_why,
    [Upstreams] current_thread the_proxy_killed_mid_call_leaves_no_server_behind,
    [Upstreams] current_thread the_server_killed_mid_call_is_a_clear_error_and_the_next_call_works,
    [Upstreams, Redis] current_thread two_replicas_on_redis_share_approvals_once,
    [Upstreams, Redis] current_thread a_url_gate_lets_the_call_through_once_its_redis_key_says_complete,
    [Upstreams] current_thread a_url_gate_checks_completion_over_http,
    [Upstreams] current_thread prompts_and_resources_are_gated_and_checked_against_the_upstreams_lists,
    [Upstreams] current_thread each_callers_authorization_reaches_an_http_upstream_when_passed_and_none_otherwise,
    [Upstreams] current_thread a_reload_while_calls_are_in_flight_lets_them_finish_and_then_applies,
}
