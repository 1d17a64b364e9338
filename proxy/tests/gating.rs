//! Issue #36 items 2, 5 and 6 over a real socket against the built binary: gates matched on each
//! call (a tool added at run time, a resource under a `**` pattern), questions that cannot lie
//! (values quoted, escaped and capped; `show = "arguments"`; a call its `inputSchema` refuses is
//! never asked), and approvals bound to the gate and to the tool's definition (a reload, a
//! rug pull; `on_tool_change`; a tool gate covering the prompt of its name). The server whose
//! tools change is `gating/changing_server.py` (FastMCP, the venv's `mcp` 1.30).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// A directory and config of the test's own in front of `changing_server.py`.
struct Changing {
    dir: PathBuf,
    config: PathBuf,
}

impl Changing {
    fn new(name: &str, port: u16, upstream: &str, gates: &str) -> Self {
        let python = host_python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gating/changing_server.py");
        let dir = std::env::temp_dir().join(format!("te-gating-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("gates.toml");
        let text = format!(
            "[upstream]\ncommand = [\"{}\", \"{}\"]\n{upstream}\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n{gates}",
            python.display(),
            script.display()
        );
        std::fs::write(&config, text).unwrap();
        Self { dir, config }
    }
}

impl Drop for Changing {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const APPROVE: &str = "form.approve = { type = \"boolean\" }\nrequire = { approve = true }\n";

fn accept() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn message_of(reply: &Value, key: &str) -> String {
    reply["result"]["inputRequests"][key]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no question {key}: {reply:#}"))
        .to_owned()
}

async fn list_tools(proxy: &Proxy) -> Value {
    request(&proxy.url, "tools/list", "", json!({})).await
}

async fn a_tool_the_server_adds_at_run_time_is_gated_by_its_glob() {
    let port = free_port();
    let gates = format!("[[gate]]\ntools = [\"danger_*\"]\n{APPROVE}");
    let setup = Changing::new("added", port, "", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    let added = proxy.call("add_tool", json!({}), json!({})).await;
    assert_eq!(text_of(&added), "added", "{added:#}");
    // Called without being listed since it was added.
    let asked = proxy
        .call("danger_delete", json!({"path": "/srv"}), json!({}))
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
    let state = state_of(&asked);
    let done = proxy
        .call(
            "danger_delete",
            json!({"path": "/srv"}),
            answer(&state, accept()),
        )
        .await;
    assert_eq!(text_of(&done), "deleted /srv", "{done:#}");
}

async fn a_resource_pattern_gates_every_uri_under_it_listed_or_not() {
    let port = free_port();
    let gates = format!(
        "[[gate]]\nresources = [\"file:///srv/secret/**\"]\nmessage = \"Read {{uri}}?\"\n{APPROVE}"
    );
    let setup = Changing::new("resources", port, "", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    for uri in [
        "file:///srv/secret/sub/id_rsa",
        "file:///srv/./secret/sub/id_rsa",
    ] {
        let asked = request(&proxy.url, "resources/read", uri, json!({"uri": uri})).await;
        assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
        assert_eq!(message_of(&asked, "approval"), format!("Read \"{uri}\"?"));
    }
}

async fn placeholders_are_quoted_escaped_and_capped() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("placeholders", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let dir = setup.data("").display().to_string();
    let lying = format!("{dir}a\u{202E}txt.exe\nApproved by the admin. [ok](https://x)");
    let asked = proxy
        .call(
            "write_file",
            json!({"path": lying, "content": "x"}),
            json!({}),
        )
        .await;
    let message = message_of(&asked, "approval");
    assert_eq!(
        message,
        format!(
            "Write to \"{dir}a\\u{{202E}}txt.exe\\nApproved by the admin. \\[ok\\](https://x)\"?"
        )
    );
    assert!(!message.contains(['\n', '\u{202E}']), "{message}");

    let long = format!("{dir}{}", "a".repeat(20_000));
    let asked = proxy
        .call(
            "write_file",
            json!({"path": long, "content": "x"}),
            json!({}),
        )
        .await;
    let message = message_of(&asked, "approval");
    assert!(message.len() < 400, "{} bytes", message.len());
    let length = long.chars().count();
    assert!(
        message.ends_with(&format!("…\" ({length} characters)?")),
        "{message}"
    );
}

async fn show_arguments_shows_what_a_write_would_write() {
    let entry = filesystem();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("te-gating-show-{}", std::process::id()));
    let gates = format!(
        "[[gate]]\ntools = [\"write_file\"]\nmessage = \"Write to {{path}}?\"\nshow = \"arguments\"\n{APPROVE}"
    );
    let config = filesystem_config(&dir, &entry, port, &gates);
    let proxy = Proxy::start(&config, port).await;
    let path = dir.join("data/a.txt").display().to_string();
    let asked = proxy
        .call(
            "write_file",
            json!({"path": path, "content": "rm -rf ~\n\u{2066}hidden"}),
            json!({}),
        )
        .await;
    let message = message_of(&asked, "approval");
    assert!(
        message.starts_with(&format!("Write to \"{path}\"?\n\nArguments:\n- ")),
        "{message}"
    );
    assert!(
        message.contains("\n- content: \"rm -rf ~\\n\\u{2066}hidden\""),
        "{message}"
    );
    assert!(
        message.contains(&format!("\n- path: \"{path}\"")),
        "{message}"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn a_call_its_input_schema_refuses_is_refused_before_anyone_is_asked() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("schema", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("a.txt");
    let refused = proxy
        .call("write_file", json!({"path": path, "content": 5}), json!({}))
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    let text = text_of(&refused);
    assert!(
        text.contains("do not match the inputSchema of \"write_file\"")
            && text.contains("/content"),
        "{text}"
    );
    assert!(refused["result"].get("inputRequests").is_none());
    // A call the schema accepts is asked.
    let asked = proxy
        .call(
            "write_file",
            json!({"path": path, "content": "5"}),
            json!({}),
        )
        .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
}

async fn a_reload_that_changes_the_gate_asks_again_before_anything_runs() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("rebind", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("a.txt");
    let args = json!({"path": path, "content": "hello"});
    let state = state_of(&proxy.call("write_file", args.clone(), json!({})).await);

    let text = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace("Write to {path}?", "Overwrite {path}?");
    std::fs::write(&setup.config, text).unwrap();
    proxy.signal(1);
    let mut reloaded = false;
    for _ in 0..100 {
        let fresh = proxy.call("write_file", args.clone(), json!({})).await;
        if message_of(&fresh, "approval").starts_with("Overwrite") {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the reload never applied");

    let retry = proxy
        .call("write_file", args.clone(), answer(&state, accept()))
        .await;
    assert_eq!(retry["result"]["resultType"], "input_required", "{retry:#}");
    let message = message_of(&retry, "approval");
    assert!(message.starts_with("Overwrite"), "{message}");
    assert!(
        message.contains("This changed since you were asked"),
        "{message}"
    );
    assert!(!path.exists(), "nothing written on the old approval");
    let done = proxy
        .call("write_file", args, answer(&state_of(&retry), accept()))
        .await;
    assert!(done["result"]["isError"] != true, "{done:#}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello");
}

async fn an_approval_is_not_good_for_a_tool_whose_definition_changed() {
    let port = free_port();
    let log = std::env::temp_dir().join(format!("te-rugpull-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let gates = format!(
        "[log]\nto = \"file\"\nfile = \"{}\"\n\n[[gate]]\ntools = [\"echo\"]\nmessage = \"Echo {{text}}?\"\n{APPROVE}",
        log.display()
    );
    let setup = Changing::new("rugpull", port, "", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    let args = json!({"text": "hi"});
    let state = state_of(&proxy.call("echo", args.clone(), json!({})).await);
    let changed = proxy.call("change_description", json!({}), json!({})).await;
    assert_eq!(text_of(&changed), "changed", "{changed:#}");
    let listed = list_tools(&proxy).await;
    assert!(listed["result"]["tools"].is_array(), "{listed:#}");

    let retry = proxy
        .call("echo", args.clone(), answer(&state, accept()))
        .await;
    assert_eq!(retry["result"]["resultType"], "input_required", "{retry:#}");
    assert!(
        message_of(&retry, "approval").contains("This changed since you were asked"),
        "{retry:#}"
    );
    let change = message_of(&retry, "tool-change");
    assert!(
        change.contains("Description was: \"Echoes its text\"")
            && change.contains("Description is now: \"Echoes its text, and mails your keys away\""),
        "{change}"
    );
    let metrics = proxy.metrics().await;
    assert!(
        metrics.contains("elicitation_proxy_tool_changes_total 1"),
        "{metrics}"
    );
    // The decision log: the old approval voided as its own outcome, never accepted.
    drop(proxy);
    let lines = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let decisions: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        decisions
            .iter()
            .any(|d| d["decision"] == "binding_changed" && d["why"] == "changed"),
        "{lines}"
    );
    assert!(
        !decisions.iter().any(|d| d["decision"] == "gates_accepted"),
        "{lines}"
    );
}

async fn a_changed_tool_asks_until_a_reload_accepts_it() {
    let port = free_port();
    let gates = format!("[[gate]]\ntools = [\"danger_list\"]\n{APPROVE}");
    let setup = Changing::new("ask", port, "", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    assert_eq!(
        text_of(&proxy.call("echo", json!({"text": "a"}), json!({})).await),
        "echo: a"
    );
    proxy.call("change_description", json!({}), json!({})).await;
    list_tools(&proxy).await;
    let asked = proxy.call("echo", json!({"text": "a"}), json!({})).await;
    assert!(
        message_of(&asked, "tool-change").contains("mails your keys away"),
        "{asked:#}"
    );
    let declined = proxy
        .call(
            "echo",
            json!({"text": "a"}),
            json!({"requestState": state_of(&asked), "inputResponses": {"tool-change": {"action": "decline"}}}),
        )
        .await;
    assert_eq!(declined["result"]["isError"], true, "{declined:#}");

    proxy.signal(1);
    let mut accepted = false;
    for _ in 0..100 {
        let call = proxy.call("echo", json!({"text": "a"}), json!({})).await;
        if text_of(&call) == "echo: a" {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(accepted, "the reload never accepted the change");
}

async fn on_tool_change_hide_takes_the_tool_out_until_a_reload() {
    let port = free_port();
    let gates = format!("[[gate]]\ntools = [\"danger_list\"]\n{APPROVE}");
    let setup = Changing::new("hide", port, "on_tool_change = \"hide\"", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    proxy.call("change_description", json!({}), json!({})).await;
    let listed = list_tools(&proxy).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"echo"), "{names:?}");
    let refused = proxy.call("echo", json!({"text": "a"}), json!({})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    assert!(text_of(&refused).contains("hidden"), "{refused:#}");
}

async fn a_tool_gate_covers_the_prompt_of_its_name() {
    let port = free_port();
    let gates = format!("[[gate]]\ntools = [\"echo\"]\n{APPROVE}");
    let setup = Changing::new("prompt", port, "", &gates);
    let proxy = Proxy::start(&setup.config, port).await;
    let asked = request(
        &proxy.url,
        "prompts/get",
        "echo",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
    )
    .await;
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked:#}");
}

crate::trials! {
    [Upstreams] current_thread a_tool_the_server_adds_at_run_time_is_gated_by_its_glob,
    [Upstreams] current_thread a_resource_pattern_gates_every_uri_under_it_listed_or_not,
    [Upstreams] current_thread placeholders_are_quoted_escaped_and_capped,
    [Upstreams] current_thread show_arguments_shows_what_a_write_would_write,
    [Upstreams] current_thread a_call_its_input_schema_refuses_is_refused_before_anyone_is_asked,
    [Upstreams] current_thread a_reload_that_changes_the_gate_asks_again_before_anything_runs,
    [Upstreams] current_thread an_approval_is_not_good_for_a_tool_whose_definition_changed,
    [Upstreams] current_thread a_changed_tool_asks_until_a_reload_accepts_it,
    [Upstreams] current_thread on_tool_change_hide_takes_the_tool_out_until_a_reload,
    [Upstreams] current_thread a_tool_gate_covers_the_prompt_of_its_name,
}
