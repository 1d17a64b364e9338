//! Issue #39 item 2 over a real socket against the built binary, in front of server-filesystem:
//! the file's rules decide in order (`when` conditions in CEL, `action = "ask" | "deny" |
//! "allow"`), a condition that cannot say refuses the call (closed), and `--check --explain`
//! says which rule decides a call.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

/// Writes under `*.tmp` run unasked, writes naming `prod` are refused, every other write asks.
const RULES: &str = r#"
[[gate]]
tools = ["write_file"]
when = "args.path.endsWith('.tmp')"
action = "allow"

[[gate]]
tools = ["write_file"]
when = "args.path.contains('prod')"
action = "deny"
refusal = "Production files are not written from here."

[[gate]]
tools = ["write_file"]
message = "Write to {path}?"
form.approve = { type = "boolean" }
require = { approve = true }
"#;

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("te-conditions-{name}-{}", std::process::id()));
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

async fn rules_ask_skip_and_deny_in_file_order() {
    let dir = Dir::new("order");
    let port = free_port();
    let config = filesystem_config(&dir.0, &filesystem(), port, RULES);
    let log = dir.0.join("stderr.log");
    let proxy = Proxy::start_with(&config, port, std::fs::File::create(&log).unwrap()).await;
    let data = dir.0.join("data");
    let write = |name: &str| json!({"path": data.join(name), "content": "x"});

    let allowed = proxy.call("write_file", write("a.tmp"), json!({})).await;
    assert_eq!(allowed["result"]["resultType"], "complete", "{allowed:#}");
    assert_ne!(allowed["result"]["isError"], true, "{allowed:#}");
    assert!(data.join("a.tmp").exists(), "allowed without asking");

    let denied = proxy.call("write_file", write("prod.txt"), json!({})).await;
    assert_eq!(denied["result"]["isError"], true, "{denied:#}");
    let denied_text = text_of(&denied).to_owned();
    assert!(
        denied_text.starts_with("Production files are not written from here. (decision d-"),
        "{denied_text}"
    );
    assert!(
        denied["result"].get("inputRequests").is_none(),
        "nobody asked"
    );
    assert!(!data.join("prod.txt").exists());

    let asked = proxy.call("write_file", write("b.txt"), json!({})).await;
    let state = state_of(&asked);
    let params = &asked["result"]["inputRequests"]["approval"]["params"];
    assert!(
        params["message"].as_str().unwrap().starts_with("Write to "),
        "{asked:#}"
    );
    // The decision's id, for the host to show: the one the log records for both rounds.
    let decision = params["_meta"]["elicitation-proxy/decision"]
        .as_str()
        .unwrap_or_else(|| panic!("no decision id: {asked:#}"))
        .to_owned();
    assert!(!data.join("b.txt").exists(), "not before the answer");
    let approval = json!({"action": "accept", "content": {"approve": true}});
    let done = proxy
        .call("write_file", write("b.txt"), answer(&state, approval))
        .await;
    assert_ne!(done["result"]["isError"], true, "{done:#}");
    assert!(data.join("b.txt").exists());

    // The decision log names the rule that decided each call, and why it refused.
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("decision").is_some())
        .collect();
    let decisions: Vec<(String, String, String)> = lines
        .iter()
        .map(|line| {
            let field = |name: &str| line[name].as_str().unwrap_or("").to_owned();
            (field("decision"), field("gate"), field("why"))
        })
        .collect();
    let ids: Vec<&str> = lines
        .iter()
        .map(|l| l["decision_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        ids[2..],
        [decision.as_str(), decision.as_str()],
        "{lines:#?}"
    );
    assert!(
        denied_text.ends_with(&format!("(decision {})", ids[1])),
        "{lines:#?}"
    );
    assert!(ids[0].starts_with("d-") && ids[0] != ids[1] && ids[1] != ids[2]);
    let expected = [
        ("allowed", "gate 1 (line 7)", ""),
        ("gate_refused", "gate 2 (line 12)", "denied"),
        ("ask", "gate 3 (line 18)", ""),
        ("gates_accepted", "gate 3 (line 18)", ""),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(decisions, expected);
}

async fn a_condition_that_cannot_say_refuses_the_call() {
    let dir = Dir::new("closed");
    let port = free_port();
    let config = filesystem_config(&dir.0, &filesystem(), port, RULES);
    let proxy = Proxy::start(&config, port).await;
    // `endsWith` on a number: the first rule cannot say, so no later rule is read and the call
    // is refused, before the inputSchema's own check and before anyone is asked.
    let refused = proxy
        .call("write_file", json!({"path": 7, "content": "x"}), json!({}))
        .await;
    assert_eq!(refused["result"]["isError"], true, "{refused:#}");
    let text = text_of(&refused);
    assert!(
        text.starts_with("Not run: the proxy could not tell whether gate 1 (line ")
            && text.contains("applies to this call"),
        "{text}"
    );
    assert!(refused["result"].get("inputRequests").is_none());
    assert_eq!(std::fs::read_dir(dir.0.join("data")).unwrap().count(), 0);
}

/// `elicitation-proxy --check` with `more` arguments on `config`: exit status and stdout.
fn check(config: &Path, more: &[&str]) -> (i32, String, String) {
    let output = Command::new(PROXY)
        .arg("--config")
        .arg(config)
        .arg("--check")
        .args(more)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn check_prints_the_order_and_explain_says_which_rule_decides() {
    let dir = Dir::new("explain");
    let config = filesystem_config(&dir.0, &filesystem(), free_port(), RULES);
    let (status, out, err) = check(&config, &[]);
    assert_eq!(status, 0, "{out}{err}");
    let order: Vec<&str> = out.lines().filter(|l| l.contains(". gate ")).collect();
    assert_eq!(order.len(), 3, "{out}");
    assert!(
        order[0].contains("gate 1 (line 7): allow tool write_file when args.path.endsWith('.tmp')"),
        "{out}"
    );
    assert!(
        order[1].contains("gate 2 (line 12): deny tool write_file"),
        "{out}"
    );
    assert!(
        order[2].contains("gate 3 (line 18): ask tool write_file"),
        "{out}"
    );

    let prod = r#"{"path": "/srv/prod/a.txt"}"#;
    let (status, out, err) = check(&config, &["--explain", "write_file", prod]);
    assert_eq!(status, 0, "{out}{err}");
    assert!(
        out.contains("gate 1 (line 7) (when args.path.endsWith('.tmp')): does not hold, next"),
        "{out}"
    );
    assert!(
        out.contains("gate 2 (line 12) (when args.path.contains('prod')): holds: it decides: deny"),
        "{out}"
    );
    assert!(
        !out.contains("gate 3 (line 18) ("),
        "a later rule is not read: {out}"
    );

    let (_, out, _) = check(&config, &["--explain", "read_file", prod]);
    assert!(
        out.contains("no rule decides it: it runs, nobody asked"),
        "{out}"
    );
    let (_, out, _) = check(&config, &["--explain", "write_file"]);
    assert!(out.contains("cannot say (No such key: path)"), "{out}");
}

async fn a_condition_no_call_can_satisfy_is_the_files_mistake_at_its_line() {
    let dir = Dir::new("mistake");
    let rules =
        "\n[[gate]]\ntools = [\"write_file\"]\nwhen = \"args.size > 10\"\naction = \"deny\"\n";
    let config = filesystem_config(&dir.0, &filesystem(), free_port(), rules);
    let (status, out, err) = check(&config, &[]);
    assert_eq!(status, 1, "{out}{err}");
    assert!(
        err.contains(":7: gate 1: when \"args.size > 10\": `args.size` names an argument tool write_file does not take"),
        "{err}"
    );
}

/// `exp - iat` of the claims `state` seals (`v1.kid.<base64url claims>.mac`).
fn lifetime_of(state: &str) -> u64 {
    let body = state.split('.').nth(2).expect("v1.kid.body.mac");
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (mut bits, mut count, mut bytes) = (0u32, 0, Vec::new());
    for c in body.bytes() {
        let value = alphabet.iter().position(|&a| a == c).expect("base64url") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
        }
    }
    let claims: Value = serde_json::from_slice(&bytes).expect("claims JSON");
    claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap()
}

async fn approval_ttl_secs_bounds_how_long_an_approval_is_good() {
    let dir = Dir::new("ttl");
    let port = free_port();
    let gates = "\n[[gate]]\ntools = [\"write_file\"]\napproval_ttl_secs = 45\nform.approve = { type = \"boolean\" }\n\n[[gate]]\ntools = [\"create_directory\"]\nform.approve = { type = \"boolean\" }\n";
    let config = filesystem_config(&dir.0, &filesystem(), port, gates);
    let proxy = Proxy::start(&config, port).await;
    let data = dir.0.join("data");
    let write = proxy
        .call(
            "write_file",
            json!({"path": data.join("a"), "content": "x"}),
            json!({}),
        )
        .await;
    assert_eq!(lifetime_of(&state_of(&write)), 45);
    let mkdir = proxy
        .call(
            "create_directory",
            json!({"path": data.join("d")}),
            json!({}),
        )
        .await;
    assert_eq!(lifetime_of(&state_of(&mkdir)), 600, "the default");
}

crate::trials! {
    [Upstreams] current_thread rules_ask_skip_and_deny_in_file_order,
    [Upstreams] current_thread a_condition_that_cannot_say_refuses_the_call,
    [Upstreams] current_thread check_prints_the_order_and_explain_says_which_rule_decides,
    [Upstreams] current_thread a_condition_no_call_can_satisfy_is_the_files_mistake_at_its_line,
    [Upstreams] current_thread approval_ttl_secs_bounds_how_long_an_approval_is_good,
}
