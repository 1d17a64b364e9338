//! URL gates' completion checks and single-use approvals after Redis lost its epoch, over real
//! sockets against the built binary (issue #36 items 3, 4 and 10).

use std::sync::{Arc, Mutex};

use crate::support::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A completion endpoint of the test's own: every request's path is kept, and `answer` says
/// what each path gets (a whole HTTP/1.1 head, `connection: close`).
async fn endpoint(answer: fn(&str) -> String) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let paths = Arc::new(Mutex::new(Vec::<String>::new()));
    let kept = Arc::clone(&paths);
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut head = vec![0u8; 4096];
            let read = tcp.read(&mut head).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..read]).into_owned();
            let path = head
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            kept.lock().unwrap().push(path.clone());
            let _ = tcp.write_all(answer(&path).as_bytes()).await;
        }
    });
    (port, paths)
}

fn head(status: &str, extra: &str) -> String {
    format!("HTTP/1.1 {status}\r\n{extra}content-length: 0\r\nconnection: close\r\n\r\n")
}

/// The URL gate's handle in the URL the person is sent to (`…?flow=<handle>`).
fn handle_in(asked: &Value) -> String {
    let url = asked["result"]["inputRequests"]["signin"]["params"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{asked:#}"));
    url.split("flow=")
        .nth(1)
        .and_then(|rest| rest.split('&').next())
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned()
}

/// A `[[gate]]` on `create_directory`: the URL gate `signin`, complete when `complete_when`.
fn url_gate(complete_when: &str) -> String {
    format!(
        "\n[[gate]]\ntools = [\"create_directory\"]\nkey = \"signin\"\nurl = \"https://auth.example.com/start?flow={{handle}}\"\ncomplete_when = {complete_when}\n"
    )
}

/// Whether `reply` is the "not finished yet" re-ask of `signin`.
fn not_finished(reply: &Value) -> bool {
    reply["result"]["resultType"] == "input_required"
        && reply["result"]["inputRequests"]["signin"]["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Not finished yet"))
}

// ---------------------------------------------------------------------------------------------
// Item 3: the HTTP check follows no redirect and reaches only its own origin.

async fn a_redirect_to_a_2xx_does_not_complete_a_url_gate() {
    let entry = filesystem();
    // The flow's endpoint says "see elsewhere"; elsewhere says 200.
    let (checks, paths) = endpoint(|path| {
        if path.starts_with("/flows/") {
            head("302 Found", "location: /ok\r\n")
        } else {
            head("200 OK", "")
        }
    })
    .await;
    let port = free_port();
    let gate = url_gate(&format!(
        "{{ http = \"http://127.0.0.1:{checks}/flows/{{handle}}\" }}"
    ));
    let setup = Setup::new("flows-redirect", &entry, port, &gate);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("redirected");
    let args = json!({"path": path});
    let meta = url_client_meta();
    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let again = proxy
        .call(
            "create_directory",
            args,
            accept_signin(&state_of(&asked), &meta),
        )
        .await;
    assert!(not_finished(&again), "a 3xx is not yet: {again:#}");
    assert!(!path.exists());
    let paths = paths.lock().unwrap().clone();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p.starts_with("/flows/")),
        "the redirect is never followed: {paths:?}"
    );
}

async fn a_completion_check_with_a_placeholder_in_its_origin_is_refused_at_load() {
    let entry = filesystem();
    for http in [
        "http://{path}.checks.example.com/flows/{handle}",
        "http://127.0.0.1:{path}/flows/{handle}",
        "http://user:{path}@127.0.0.1:9/flows/{handle}",
    ] {
        let port = free_port();
        let gate = url_gate(&format!("{{ http = \"{http}\" }}"));
        let setup = Setup::new("flows-origin", &entry, port, &gate);
        let text = std::fs::read_to_string(&setup.config).unwrap();
        let line = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("[[gate]]"))
            .nth(1)
            .map(|(n, _)| n + 1)
            .unwrap();
        let output = tokio::process::Command::new(PROXY)
            .arg("--config")
            .arg(&setup.config)
            .arg("--ephemeral-keys")
            .arg("--check")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{http}: accepted\n{stderr}");
        assert!(
            stderr.contains(&format!("gates.toml:{line}: gate 2: complete_when.http"))
                && stderr.contains("placeholder in the scheme, host or port"),
            "{http}: {stderr}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Item 4: each call has its own handle, and a completion is spent once.

async fn one_completion_approves_only_its_own_call_and_is_spent() {
    let entry = filesystem();
    let redis = redis_url();
    let port = free_port();
    let prefix = format!("te-proxy-flows:{}", std::process::id());
    let gate = format!(
        "\n[state]\nredis = \"{redis}\"\n{}",
        url_gate(&format!("{{ redis_key = \"{prefix}:flows:{{handle}}\" }}"))
    );
    let setup = Setup::new("flows-once", &entry, port, &gate);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("once");
    let args = json!({"path": path});
    let meta = url_client_meta();
    let key = |handle: &str| format!("{prefix}:flows:{handle}");

    // The first call: its flow completes, the call goes through, the completion is spent.
    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let first = handle_in(&asked);
    assert!(redis_command(&redis, &["SET", &key(&first), "1", "EX", "600"]).starts_with("+OK"));
    let done = proxy
        .call(
            "create_directory",
            args.clone(),
            accept_signin(&state_of(&asked), &meta),
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
    assert_eq!(
        redis_command(&redis, &["EXISTS", &key(&first)]),
        ":0\r\n",
        "the check that found it complete took the key"
    );

    // The same call again, by the same caller: a handle of its own, asked afresh. The first
    // flow's completion (its callback run again, say) approves nothing.
    std::fs::remove_dir(&path).unwrap();
    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let second = handle_in(&asked);
    assert_ne!(second, first, "a later identical call shares no handle");
    assert!(redis_command(&redis, &["SET", &key(&first), "1", "EX", "600"]).starts_with("+OK"));
    let again = proxy
        .call(
            "create_directory",
            args.clone(),
            accept_signin(&state_of(&asked), &meta),
        )
        .await;
    let _ = redis_command(&redis, &["DEL", &key(&first)]);
    assert!(not_finished(&again), "{again:#}");
    assert!(!path.exists());

    // Its own flow completes: the call goes through.
    assert!(redis_command(&redis, &["SET", &key(&second), "1", "EX", "600"]).starts_with("+OK"));
    let done = proxy
        .call(
            "create_directory",
            args,
            accept_signin(&state_of(&again), &meta),
        )
        .await;
    let _ = redis_command(&redis, &["DEL", &key(&second)]);
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
}

async fn an_http_completion_is_checked_once_per_call_even_when_another_gate_asks_again() {
    let entry = filesystem();
    // The endpoint says every flow finished, every time it is asked.
    let (checks, paths) = endpoint(|_| head("200 OK", "")).await;
    let port = free_port();
    // The URL gate, and a form gate on the same tool that asks again after a "no".
    let gate = format!(
        "{}\n[[gate]]\ntools = [\"create_directory\"]\nkey = \"approval\"\nmessage = \"Create {{path}}?\"\nform.approve = {{ type = \"boolean\" }}\nrequire = {{ approve = true }}\nretry_hint = \"Say yes to go on.\"\n",
        url_gate(&format!(
            "{{ http = \"http://127.0.0.1:{checks}/flows/{{handle}}\" }}"
        ))
    );
    let setup = Setup::new("flows-http-once", &entry, port, &gate);
    let proxy = Proxy::start(&setup.config, port).await;
    let path = setup.data("checked-once");
    let args = json!({"path": path});
    let meta = url_client_meta();
    let answers = |state: &str, approve: bool| {
        json!({"requestState": state, "_meta": meta, "inputResponses": {
            "signin": {"action": "accept"},
            "approval": {"action": "accept", "content": {"approve": approve}}}})
    };
    let asked = proxy
        .call("create_directory", args.clone(), json!({"_meta": meta}))
        .await;
    let handle = handle_in(&asked);
    // The flow completed, the form said no: only the form is asked again.
    let again = proxy
        .call(
            "create_directory",
            args.clone(),
            answers(&state_of(&asked), false),
        )
        .await;
    let requests = again["result"]["inputRequests"].as_object().unwrap();
    assert!(
        requests.contains_key("approval") && !requests.contains_key("signin"),
        "{again:#}"
    );
    let done = proxy
        .call("create_directory", args, answers(&state_of(&again), true))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(path.is_dir());
    // Spent by the check that found it: never checked (nor accepted) again within the call.
    let paths = paths.lock().unwrap().clone();
    assert_eq!(paths, [format!("/flows/{handle}")]);
}

// ---------------------------------------------------------------------------------------------
// Item 10: a store epoch renewed.

/// One RESP command on a connection to `db` of the Redis at `url`; the reply's first line.
fn in_db(url: &str, db: u8, args: &[&str]) -> String {
    use std::io::{BufRead, BufReader, Write};
    let host = url
        .trim_start_matches("redis://")
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let tcp = std::net::TcpStream::connect(host).unwrap();
    let mut command = String::new();
    let db = db.to_string();
    for command_args in [&["SELECT", db.as_str()][..], args] {
        command.push_str(&format!("*{}\r\n", command_args.len()));
        for arg in command_args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
    }
    (&tcp).write_all(command.as_bytes()).unwrap();
    let mut reader = BufReader::new(&tcp);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n", "SELECT {db}");
    line.clear();
    reader.read_line(&mut line).unwrap();
    line
}

async fn an_approval_sealed_right_after_redis_lost_its_epoch_is_accepted() {
    let entry = filesystem();
    // The server `MCP_REDIS_URL` names, without a database it may name: this test uses its own.
    let named = redis_url();
    let redis = match named.trim_start_matches("redis://").split_once('/') {
        Some((server, _)) => format!("redis://{server}"),
        None => named,
    };
    // A database of the test's own: its epoch key is deleted, which no other test may see.
    const DB: u8 = 11;
    let port = free_port();
    let setup = Setup::new(
        "flows-epoch",
        &entry,
        port,
        &format!("\n[state]\nredis = \"{redis}/{DB}\"\n"),
    );
    let proxy = Proxy::start(&setup.config, port).await;
    let write = |name: &str| json!({"path": setup.data(name), "content": "x"});
    let approve = json!({"action": "accept", "content": {"approve": true}});

    // A first round and its approval: the store's epoch is in use.
    let asked = proxy.call("write_file", write("warm"), json!({})).await;
    let done = proxy
        .call(
            "write_file",
            write("warm"),
            answer(&state_of(&asked), approve.clone()),
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");

    let before = proxy.call("write_file", write("before"), json!({})).await;
    // Redis loses its data (restarted empty, evicted): the epoch key is gone.
    assert_eq!(
        in_db(&redis, DB, &["DEL", "tower-elicitation:epoch"]),
        ":1\r\n"
    );
    // A flow started right after: its approval goes through, at once.
    let after = proxy.call("write_file", write("after"), json!({})).await;
    let done = proxy
        .call(
            "write_file",
            write("after"),
            answer(&state_of(&after), approve.clone()),
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done:#}");
    assert!(setup.data("after").exists());
    // One sealed before the loss may have been spent and forgotten: refused.
    let refused = proxy
        .call(
            "write_file",
            write("before"),
            answer(&state_of(&before), approve),
        )
        .await;
    assert_eq!(
        refused["error"]["data"]["reason"], "invalid_request_state",
        "{refused:#}"
    );
    assert!(!setup.data("before").exists());
    let _ = in_db(&redis, DB, &["FLUSHDB"]);
}

crate::trials! {
    [Upstreams] current_thread a_redirect_to_a_2xx_does_not_complete_a_url_gate,
    [Upstreams] current_thread a_completion_check_with_a_placeholder_in_its_origin_is_refused_at_load,
    [Upstreams, Redis] current_thread one_completion_approves_only_its_own_call_and_is_spent,
    [Upstreams] current_thread an_http_completion_is_checked_once_per_call_even_when_another_gate_asks_again,
    [Upstreams, Redis] current_thread an_approval_sealed_right_after_redis_lost_its_epoch_is_accepted,
}
