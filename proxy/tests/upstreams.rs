//! Issue #40 item 1: several `[[upstream]]` behind one proxy, over real processes: the pinned
//! server-filesystem (node) and `examples/proxy/notes_server.py` (the standard library only,
//! MCP 2025-06-18 on stdio). One `tools/list` with the names prefixed, a gate on each
//! upstream (its own names) asked and honoured, a resource read from the upstream that listed
//! it; then one upstream's child killed (and unable to start again) while the other serves,
//! `/healthz` naming the one down, and back (a listen told so, `/healthz` ok). List changes of
//! one upstream reaching a 2026 listen and a 2025-era host's GET stream; pages followed; a
//! collision refused; a reload. And the file's mistakes with several upstreams, each at its
//! line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// The notes server the example and these tests run.
fn notes_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/proxy/notes_server.py")
}

/// A directory of the test's own (removed when dropped).
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-upstreams-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const APPROVE: &str =
    "form.approve = { type = \"boolean\", title = \"Approve\" }\nrequire = { approve = true }\n";

fn accept() -> Value {
    json!({"action": "accept", "content": {"approve": true}})
}

fn text_of(reply: &Value) -> String {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {listed:#}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The JSON-RPC answer in `text`: a JSON body, or the event of an event stream that has an id.
fn message_in(text: &str) -> Value {
    text.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find(|event| event.get("id").is_some())
        .unwrap_or_else(|| serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}")))
}

/// `GET path` of the proxy at `port`: the status and the body.
async fn get(port: u16, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The pid of the one process under `root` running `script` itself (not the proxy's
/// `--supervise` process in front of it).
fn server_pid(root: u32, script: &Path) -> u32 {
    let script = script.to_str().unwrap();
    let found: Vec<u32> = descendants_of(root)
        .into_iter()
        .filter(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let line = String::from_utf8_lossy(&line);
            line.contains(script) && !line.contains("--supervise")
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one process of {script} under {root}: {found:?}"
    );
    found[0]
}

async fn two_upstreams_one_list_a_gate_on_each_and_one_down_leaves_the_other_serving() {
    let port = free_port();
    let dir = Dir::new("two");
    // A copy of the notes server of the test's own: removed, its child cannot start again.
    let notes = dir.0.join("notes_server.py");
    std::fs::copy(notes_server(), &notes).unwrap();
    let data = dir.0.join("data");
    let config = dir.0.join("team.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[upstream]]
name = "fs"
command = ["node", "{fs}", "{data}"]
server_questions = "off"

[[upstream]]
name = "notes"
command = ["python3", "{notes}"]
restart_backoff_secs = 1

[listen]
http = "127.0.0.1:{port}"

[[gate]]
upstream = "fs"
tools = ["write_file"]
message = "Write to {{path}}?"
{APPROVE}
[[gate]]
upstream = "notes"
tools = ["add_note"]
message = "Add the note {{text}}?"
{APPROVE}"#,
            fs = filesystem().display(),
            data = data.display(),
            notes = notes.display(),
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&config, port).await;

    // One list, every name prefixed with its upstream's name.
    let names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
    for wanted in [
        "fs_write_file",
        "fs_read_text_file",
        "notes_add_note",
        "notes_list_notes",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{wanted}: {names:?}");
    }
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("fs_") || n.starts_with("notes_")),
        "{names:?}"
    );

    // One server to the client: the capabilities merged, no resource subscriptions offered
    // (their updates are not relayed from several upstreams).
    let discovered = request(&proxy.url, "server/discover", "", json!({})).await;
    let capabilities = &discovered["result"]["capabilities"];
    assert!(capabilities["tools"].is_object(), "{discovered:#}");
    assert!(capabilities["resources"].is_object(), "{discovered:#}");
    assert!(
        capabilities["resources"].get("subscribe").is_none(),
        "{discovered:#}"
    );
    assert_eq!(
        discovered["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "elicitation-proxy"
    );

    // A 2025-era host (through the bridge) sees the same list.
    let legacy = LegacySession::open(&proxy.url, "legacy-host").await;
    let listed = legacy
        .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await
        .text()
        .await
        .unwrap();
    let listed = message_in(&listed);
    let legacy_names = tool_names(&listed);
    assert_eq!(
        legacy_names.len(),
        names.len(),
        "{legacy_names:?} {names:?}"
    );
    assert!(
        legacy_names.iter().any(|n| n == "notes_add_note"),
        "{legacy_names:?}"
    );

    // The gate on fs's own `write_file` asks before fs_write_file, and the approval writes.
    let file = data.join("a.txt");
    let arguments = json!({"path": file.to_str().unwrap(), "content": "from fs"});
    let asked = proxy
        .call("fs_write_file", arguments.clone(), json!({}))
        .await;
    let state = state_of(&asked);
    let message = asked["result"]["inputRequests"]["approval"]["params"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("a.txt"), "{message}");
    assert!(!file.exists(), "written before the approval");
    let written = proxy
        .call("fs_write_file", arguments, answer(&state, accept()))
        .await;
    assert_ne!(written["result"]["isError"], true, "{written:#}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "from fs");

    // The gate on notes's own `add_note` asks before notes_add_note: declined, nothing added;
    // approved, added.
    let asked = proxy
        .call("notes_add_note", json!({"text": "declined"}), json!({}))
        .await;
    let declined = proxy
        .call(
            "notes_add_note",
            json!({"text": "declined"}),
            answer(&state_of(&asked), json!({"action": "decline"})),
        )
        .await;
    assert_eq!(declined["result"]["isError"], true, "{declined:#}");
    let asked = proxy
        .call("notes_add_note", json!({"text": "kept"}), json!({}))
        .await;
    let message = asked["result"]["inputRequests"]["approval"]["params"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not asked: {asked:#}"));
    assert!(message.contains("kept"), "{message}");
    let added = proxy
        .call(
            "notes_add_note",
            json!({"text": "kept"}),
            answer(&state_of(&asked), accept()),
        )
        .await;
    assert!(text_of(&added).starts_with("noted"), "{added:#}");
    // Not gated: runs at once, in the notes server.
    let listed = proxy.call("notes_list_notes", json!({}), json!({})).await;
    assert_eq!(text_of(&listed), "kept", "{listed:#}");
    // The resource notes listed is read from notes.
    let read = request(
        &proxy.url,
        "resources/read",
        "notes://all",
        json!({"uri": "notes://all"}),
    )
    .await;
    assert_eq!(read["result"]["contents"][0]["text"], "kept", "{read:#}");
    // A name no upstream lists is unknown.
    let unknown = proxy.call("write_file", json!({}), json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown:#}");

    let (status, body) = get(port, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    // notes's child killed, and unable to start again: fs serves on.
    std::fs::remove_file(&notes).unwrap();
    let pid = server_pid(proxy.child.id(), &notes);
    send_signal(pid, 9);
    let mut health = (0, String::new());
    for _ in 0..600 {
        health = get(port, "/healthz").await;
        if health.0 == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health, (503, "degraded: notes down\n".to_owned()));
    let (status, verbose) = get(port, "/healthz?verbose").await;
    assert_eq!(status, 503);
    let verbose: Value = serde_json::from_str(&verbose).unwrap();
    assert_eq!(verbose["status"], "degraded", "{verbose:#}");
    assert_eq!(verbose["down"], json!(["notes"]), "{verbose:#}");
    assert_eq!(verbose["upstreams"]["notes"]["up"], false, "{verbose:#}");
    assert_eq!(verbose["upstreams"]["fs"]["up"], true, "{verbose:#}");
    let (_, metrics) = get(port, "/metrics").await;
    assert!(
        metrics.contains("elicitation_proxy_upstream_up{upstream=\"notes\"} 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("elicitation_proxy_upstream_up{upstream=\"fs\"} 1\n"),
        "{metrics}"
    );
    // Each upstream's requests are counted apart: both have answered some by now.
    for upstream in ["fs", "notes"] {
        let answered = metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix(&format!(
                    "elicitation_proxy_upstream_requests_total{{upstream=\"{upstream}\",outcome=\"answered\"}} "
                ))
            })
            .and_then(|count| count.parse::<u64>().ok());
        assert!(answered.is_some_and(|n| n > 0), "{upstream}: {metrics}");
    }
    // Its calls are refused, naming it; its tools are out of the list; fs's are in and run.
    let refused = proxy.call("notes_list_notes", json!({}), json!({})).await;
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("\"notes\" is down"), "{refused:#}");
    let names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
    assert!(!names.iter().any(|n| n.starts_with("notes_")), "{names:?}");
    assert!(names.iter().any(|n| n == "fs_read_text_file"), "{names:?}");
    let read = proxy
        .call(
            "fs_read_text_file",
            json!({"path": file.to_str().unwrap()}),
            json!({}),
        )
        .await;
    assert_eq!(text_of(&read), "from fs", "{read:#}");

    // A listen while notes is down holds fs's alone; notes back (its file again, its adapter
    // starting it after its back-off), the listen ends saying so, and /healthz is ok again.
    let mut listen = open_listen(&proxy.url).await;
    let mut seen = String::new();
    read_until(
        &mut listen,
        &mut seen,
        "notifications/subscriptions/acknowledged",
    )
    .await;
    std::fs::copy(notes_server(), &notes).unwrap();
    let back = read_until(&mut listen, &mut seen, "is back: listen again").await;
    assert!(
        back["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"notes\"")),
        "{back:#}"
    );
    let (status, body) = get(port, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let listed = proxy.call("notes_list_notes", json!({}), json!({})).await;
    assert_eq!(text_of(&listed), "", "a new child: {listed:#}");
}

/// One of two upstreams whose command cannot be run: `--check` fails naming it; served, the
/// other serves, `/healthz` says which is down, and its calls are refused naming it.
async fn an_upstream_that_cannot_start_leaves_the_other_serving() {
    let port = free_port();
    let dir = Dir::new("gone");
    let config = dir.0.join("team.toml");
    let gone = dir.0.join("no-such-server");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"notes\"\ncommand = [\"python3\", \"{}\"]\n\n[[upstream]]\nname = \"gone\"\ncommand = [\"{}\"]\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n",
            notes_server().display(),
            gone.display()
        ),
    )
    .unwrap();
    let out = Command::new(PROXY)
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .arg("--ephemeral-keys")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("upstream \"gone\": cannot start"),
        "{stderr}"
    );
    let child = Command::new(PROXY)
        .arg("--config")
        .arg(&config)
        .arg("--ephemeral-keys")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let proxy = Proxy {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    let mut health = None;
    for _ in 0..600 {
        if let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await {
            health = Some((response.status().as_u16(), response.text().await.unwrap()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health, Some((503, "degraded: gone down\n".to_owned())));
    let mut names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
    names.sort();
    assert_eq!(names, ["notes_add_note", "notes_list_notes"]);
    let added = proxy
        .call("notes_add_note", json!({"text": "served"}), json!({}))
        .await;
    assert!(text_of(&added).starts_with("noted"), "{added:#}");
    let refused = proxy.call("gone_anything", json!({}), json!({})).await;
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("\"gone\" is down"), "{refused:#}");
}

/// server-everything (prompts, completions, resources and templates) beside the notes server:
/// prompts prefixed and gated on their upstream's own names, `prompts/get` and
/// `completion/complete` routed by the prompt's name, `resources/read` by the upstream that
/// listed the URI or whose template names it.
async fn prompts_completions_and_resources_reach_their_own_upstream() {
    let everything = filesystem()
        .ancestors()
        .nth(3)
        .unwrap()
        .join("server-everything/dist/index.js");
    let port = free_port();
    let dir = Dir::new("everything");
    let config = dir.0.join("team.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[upstream]]
name = "ev"
command = ["node", "{everything}", "stdio"]

[[upstream]]
name = "notes"
command = ["python3", "{notes}"]

[listen]
http = "127.0.0.1:{port}"

[[gate]]
upstream = "ev"
prompts = ["args-*"]
message = "Ask about {{city}}?"
{APPROVE}"#,
            everything = everything.display(),
            notes = notes_server().display(),
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&config, port).await;
    let prompts = request(&proxy.url, "prompts/list", "", json!({})).await;
    let names: Vec<&str> = prompts["result"]["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{prompts:#}"))
        .iter()
        .filter_map(|prompt| prompt["name"].as_str())
        .collect();
    assert!(names.contains(&"ev_args-prompt"), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("ev_")), "{names:?}");

    // The gate on ev's own `args-*` asks before ev_args-prompt; approved, ev answers.
    let arguments =
        json!({"name": "ev_args-prompt", "arguments": {"city": "Paris", "state": "IDF"}});
    let asked = request(
        &proxy.url,
        "prompts/get",
        "ev_args-prompt",
        arguments.clone(),
    )
    .await;
    let state = state_of(&asked);
    let mut retry = arguments.clone();
    retry
        .as_object_mut()
        .unwrap()
        .extend(answer(&state, accept()).as_object().cloned().unwrap());
    let got = request(&proxy.url, "prompts/get", "ev_args-prompt", retry).await;
    let text = got["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{got:#}"));
    assert!(text.contains("Paris"), "{got:#}");

    // A completion of ev's prompt goes to ev.
    let completed = request(
        &proxy.url,
        "completion/complete",
        "",
        json!({"ref": {"type": "ref/prompt", "name": "ev_completable-prompt"},
            "argument": {"name": "department", "value": "E"}}),
    )
    .await;
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["Engineering"]),
        "{completed:#}"
    );

    // Resources: one ev listed, one only ev's template names, and notes's own.
    let listed = request(
        &proxy.url,
        "resources/read",
        "",
        json!({"uri": "demo://resource/static/document/architecture.md"}),
    )
    .await;
    assert!(listed["result"]["contents"][0].is_object(), "{listed:#}");
    let templated = request(
        &proxy.url,
        "resources/read",
        "",
        json!({"uri": "demo://resource/dynamic/text/1"}),
    )
    .await;
    assert!(
        templated["result"]["contents"][0].is_object(),
        "{templated:#}"
    );
    let notes = request(
        &proxy.url,
        "resources/read",
        "",
        json!({"uri": "notes://all"}),
    )
    .await;
    assert_eq!(
        notes["result"]["contents"][0]["uri"], "notes://all",
        "{notes:#}"
    );
    let unknown = request(
        &proxy.url,
        "resources/read",
        "",
        json!({"uri": "nobody://x"}),
    )
    .await;
    let why = unknown["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("no upstream listed nobody://x"), "{unknown:#}");
}

/// `--check` of a file with several upstreams: each mistake at its line.
fn mistakes_with_several_upstreams_name_their_line() {
    let dir = Dir::new("check");
    let config = dir.0.join("team.toml");
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
    let two = "[[upstream]]\nname = \"a\"\ncommand = [\"true\"]\n\n[[upstream]]\nname = \"b\"\ncommand = [\"true\"]\n";
    // A gate naming no upstream of the file.
    let stderr = check(&format!(
        "{two}\n[[gate]]\nupstream = \"x\"\ntools = [\"t\"]\n{APPROVE}"
    ));
    assert!(stderr.contains("team.toml:9:"), "{stderr}");
    assert!(
        stderr.contains("upstream \"x\" names no upstream of the file (a, b)"),
        "{stderr}"
    );
    // A table without a name; two of the same name.
    let stderr = check(
        "[[upstream]]\ncommand = [\"true\"]\n\n[[upstream]]\nname = \"b\"\ncommand = [\"true\"]\n",
    );
    assert!(stderr.contains("team.toml:1:"), "{stderr}");
    assert!(stderr.contains("needs a `name`"), "{stderr}");
    let stderr = check(
        "[[upstream]]\nname = \"a\"\ncommand = [\"true\"]\n\n[[upstream]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    assert!(stderr.contains("team.toml:6:"), "{stderr}");
    assert!(stderr.contains("is taken"), "{stderr}");
    // What is not per upstream yet, refused at its line rather than ignored.
    // Each caller's credentials go only to the upstreams named, each a URL one.
    let stderr = check(&format!("{two}\n[identity]\npass_to_upstream = true\n"));
    assert!(stderr.contains("team.toml:10:"), "{stderr}");
    assert!(
        stderr.contains("name the upstreams each caller's credentials go to"),
        "{stderr}"
    );
    let stderr = check(&format!(
        "{two}\n[identity]\npass_to_upstream = [\"a\", \"x\"]\n"
    ));
    assert!(stderr.contains("\"a\" is a command"), "{stderr}");
    assert!(stderr.contains("\"x\" names no [[upstream]]"), "{stderr}");
    let stderr = check(&format!("{two}expose = [\"resource:file:///x\"]\n"));
    assert!(stderr.contains("team.toml:8:"), "{stderr}");
    assert!(stderr.contains("not per upstream yet"), "{stderr}");
    let stderr = check(&format!("{two}on_tool_change = \"hide\"\n"));
    assert!(stderr.contains("team.toml:5:"), "{stderr}");
    assert!(stderr.contains("first [[upstream]] only"), "{stderr}");
    // A lone [upstream] is not prefixed.
    let stderr = check("[upstream]\ncommand = [\"true\"]\nprefix = \"x\"\n");
    assert!(stderr.contains("team.toml:3:"), "{stderr}");
    assert!(stderr.contains("not prefixed"), "{stderr}");
}

/// Two of the notes server behind one proxy: the URI both list is a collision `--check`
/// refuses naming both, until one hides it; one that does not start fails `--check` naming it.
/// Served, one's pages (a tool a page) are followed into one list, and the other's `hide`
/// takes its own names out (a call of one is unknown), leaving the first's.
async fn two_of_one_server_collide_until_one_hides_and_pages_are_followed() {
    let port = free_port();
    let dir = Dir::new("same");
    let config = dir.0.join("team.toml");
    let notes = notes_server();
    let notes = notes.display();
    let check = |text: &str| {
        std::fs::write(&config, text).unwrap();
        Command::new(PROXY)
            .arg("--config")
            .arg(&config)
            .arg("--check")
            .arg("--ephemeral-keys")
            .output()
            .unwrap()
    };
    let first = format!(
        "[[upstream]]\nname = \"notes\"\ncommand = [\"python3\", \"{notes}\", \"--page-size\", \"1\"]\n"
    );
    let listen = format!("\n[listen]\nhttp = \"127.0.0.1:{port}\"\n");
    let out = check(&format!(
        "{first}\n[[upstream]]\nname = \"memo\"\ncommand = [\"python3\", \"{notes}\"]\n{listen}"
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("resource \"notes://all\" is listed by two upstreams, \"notes://all\" of upstream \"notes\" and \"notes://all\" of upstream \"memo\""),
        "{stderr}"
    );
    let missing = dir.0.join("missing.py");
    let out = check(&format!(
        "{first}\n[[upstream]]\nname = \"memo\"\ncommand = [\"python3\", \"{}\"]\n{listen}",
        missing.display()
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("upstream \"memo\": "), "{stderr}");

    let served = format!(
        "{first}\n[[upstream]]\nname = \"memo\"\ncommand = [\"python3\", \"{notes}\"]\nhide = [\"resource:notes://all\", \"list_notes\"]\n{listen}"
    );
    let out = check(&served);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = dir.0.join("proxy.log");
    let proxy = Proxy::start_with(&config, port, std::fs::File::create(&log).unwrap()).await;
    let mut names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
    names.sort();
    assert_eq!(
        names,
        ["memo_add_note", "notes_add_note", "notes_list_notes"],
        "{names:?}"
    );
    let hidden = proxy.call("memo_list_notes", json!({}), json!({})).await;
    assert_eq!(hidden["error"]["code"], -32602, "{hidden:#}");
    let added = proxy
        .call("memo_add_note", json!({"text": "in memo"}), json!({}))
        .await;
    assert!(text_of(&added).starts_with("noted"), "{added:#}");
    // notes://all is notes's alone: memo's note is not in it.
    let read = request(
        &proxy.url,
        "resources/read",
        "notes://all",
        json!({"uri": "notes://all"}),
    )
    .await;
    assert_eq!(read["result"]["contents"][0]["text"], "", "{read:#}");
    let (status, body) = get(port, "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    // A reload changes an upstream's `hide`: memo_list_notes is back.
    std::fs::write(&config, served.replace(", \"list_notes\"", "")).unwrap();
    let mut names = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
        if names.iter().any(|n| n == "memo_list_notes") {
            break;
        }
    }
    assert!(names.iter().any(|n| n == "memo_list_notes"), "{names:?}");
    // A reload may not change a prefix: refused, saying so; the names stay.
    std::fs::write(
        &config,
        served.replace("name = \"memo\"\n", "name = \"memo\"\nprefix = \"m\"\n"),
    )
    .unwrap();
    let mut said = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        said = std::fs::read_to_string(&log).unwrap();
        if said.contains("reload refused") {
            break;
        }
    }
    assert!(said.contains("restart the proxy to change them"), "{said}");
    let names = tool_names(&request(&proxy.url, "tools/list", "", json!({})).await);
    assert!(names.iter().any(|n| n == "memo_add_note"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("m_")), "{names:?}");
}

/// Reads `response` (an event stream) until what it has read holds `wanted`; the event that
/// holds it. Fails when the stream ends first, or after a minute (a guard against a hang, not a
/// measure).
async fn read_until(response: &mut reqwest::Response, seen: &mut String, wanted: &str) -> Value {
    let read = async {
        while !seen.contains(wanted) {
            let chunk = response.chunk().await.unwrap();
            let chunk = chunk.unwrap_or_else(|| panic!("the stream ended before {wanted}: {seen}"));
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    if tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .is_err()
    {
        panic!("no {wanted} in a minute: {seen}");
    }
    seen.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .find(|data| data.contains(wanted))
        .map(|data| serde_json::from_str(data).unwrap())
        .unwrap()
}

/// A 2026-07-28 `subscriptions/listen` (id 7) at `url` for every list's changes, its event
/// stream unread.
async fn open_listen(url: &str) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true, "promptsListChanged": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}}}});
    let listen = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let kind = listen.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    listen
}

/// A client's `subscriptions/listen` is held on every upstream: acknowledged once with what any
/// agreed to, and a list change of one of them reaches it, under the client's subscription.
async fn a_list_change_of_any_upstream_reaches_one_listen() {
    let port = free_port();
    let dir = Dir::new("listen");
    let config = dir.0.join("team.toml");
    let notes = notes_server();
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"memo\"\ncommand = [\"python3\", \"{notes}\"]\nhide = [\"resource:notes://all\"]\n\n[[upstream]]\nname = \"notes\"\ncommand = [\"python3\", \"{notes}\", \"--announce-changes\"]\n\n[listen]\nhttp = \"127.0.0.1:{port}\"\n",
            notes = notes.display()
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&config, port).await;
    let discovered = request(&proxy.url, "server/discover", "", json!({})).await;
    assert_eq!(
        discovered["result"]["capabilities"]["tools"]["listChanged"], true,
        "one upstream announces its changes: {discovered:#}"
    );
    let mut listen = open_listen(&proxy.url).await;
    let mut seen = String::new();
    let acknowledged = read_until(
        &mut listen,
        &mut seen,
        "notifications/subscriptions/acknowledged",
    )
    .await;
    assert_eq!(
        acknowledged["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{acknowledged:#}"
    );
    assert_eq!(
        acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
        "{acknowledged:#}"
    );
    let added = proxy
        .call("notes_add_note", json!({"text": "changes"}), json!({}))
        .await;
    assert!(text_of(&added).starts_with("noted"), "{added:#}");
    let changed = read_until(&mut listen, &mut seen, "notifications/tools/list_changed").await;
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
        "{changed:#}"
    );
    // A 2025-era host hears it on its session's GET stream (the bridge listens for it). The
    // stream answers before the listens behind it are held, so a note is added again until a
    // change is heard (each one announces one).
    let legacy = LegacySession::open(&proxy.url, "legacy-host").await;
    let mut stream = legacy.stream().await;
    let mut heard = String::new();
    for _ in 0..60 {
        let added = proxy
            .call("notes_add_note", json!({"text": "again"}), json!({}))
            .await;
        assert!(text_of(&added).starts_with("noted"), "{added:#}");
        let wanted = "notifications/tools/list_changed";
        let read = async {
            while !heard.contains(wanted) {
                match stream.chunk().await {
                    Ok(Some(chunk)) => heard.push_str(&String::from_utf8_lossy(&chunk)),
                    _ => panic!("the GET stream ended: {heard}"),
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(1), read)
            .await
            .is_ok()
        {
            return;
        }
    }
    panic!("the 2025-era host heard no list change: {heard}");
}

crate::trials!(
    [Upstreams] current_thread two_upstreams_one_list_a_gate_on_each_and_one_down_leaves_the_other_serving,
    [] sync mistakes_with_several_upstreams_name_their_line,
    [] current_thread two_of_one_server_collide_until_one_hides_and_pages_are_followed,
    [] current_thread a_list_change_of_any_upstream_reaches_one_listen,
    [] current_thread an_upstream_that_cannot_start_leaves_the_other_serving,
    [Upstreams] current_thread prompts_completions_and_resources_reach_their_own_upstream,
);
