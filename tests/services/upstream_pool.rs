//! A pool of stdio sessions (`UpstreamBuilder::sessions`) and each caller's fair share of the
//! bounds (`UpstreamBuilder::fair_share`), issue #38 items 3 and 4, over real children of
//! `tests/upstream/slow_server.py` (the standard library only): each child says how many calls
//! it had in flight at once and its process id, so a test sees which session ran a call and
//! what overlapped from the servers' side, never from a clock.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::upstream::{ServerQuestions, Stdio, Upstream, UpstreamBuilder};

fn slow_server() -> Stdio {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstream/slow_server.py");
    Stdio::new("python3").arg(script)
}

fn builder(sessions: usize, questions: ServerQuestions) -> UpstreamBuilder {
    Upstream::builder(slow_server())
        .sessions(sessions)
        .server_questions(questions)
        .start_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(60))
}

/// Spawns `builder` and waits until each of its `sessions` is up, so that calls spread over all
/// of them (a call takes the least loaded *live* session).
async fn started(builder: UpstreamBuilder, sessions: usize) -> Upstream {
    let upstream = builder.spawn().expect("the server starts");
    live(&upstream, sessions).await;
    upstream
}

/// Waits until `sessions` of `upstream`'s sessions are up (bounded).
async fn live(upstream: &Upstream, sessions: usize) {
    for _ in 0..600 {
        if upstream.live_sessions() == sessions {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} of {sessions} sessions up after 30 s",
        upstream.live_sessions()
    );
}

/// One 2026-07-28 `tools/call` of `tool` by `who` (its `Authorization`), declaring form
/// elicitation, with `extra` params (a retry's); the whole JSON-RPC response.
async fn call(upstream: &Upstream, who: &str, tool: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "pool-test", "version": "0"},
    }});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("authorization", format!("Bearer {who}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = upstream.clone().oneshot(request).await.unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)))
}

/// The JSON a tool answered as its text.
fn said(reply: &Value) -> Value {
    assert_eq!(reply["result"]["resultType"], "complete", "{reply:#}");
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool result: {reply:#}"));
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

/// The message of a JSON-RPC error answer.
fn error_message(reply: &Value) -> &str {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("an error: {reply:#}"))
}

/// A fresh directory for the servers' marks and pid files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("te-pool-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The process id the server wrote to `file` once the call reached it (waited for, bounded).
async fn pid_in(file: &Path) -> u32 {
    for _ in 0..600 {
        if let Ok(text) = std::fs::read_to_string(file) {
            return text.trim().parse().expect("a pid");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the call never reached the server ({})", file.display());
}

/// The one question of an `input_required` answer: its key, its message, and the call's state.
fn question(reply: &Value) -> (String, String, Value) {
    let result = &reply["result"];
    assert_eq!(result["resultType"], "input_required", "{reply:#}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{reply:#}");
    let (key, request) = requests.iter().next().unwrap();
    let message = request["params"]["message"].as_str().unwrap().to_owned();
    (key.clone(), message, result["requestState"].clone())
}

/// A retry's params answering `key` with `{ok, by}`.
fn answer(key: &str, state: &Value, by: &str) -> Value {
    json!({"requestState": state, "inputResponses": {
        key: {"action": "accept", "content": {"ok": true, "by": by}}}})
}

async fn eight_callers_run_at_once_in_eight_pooled_sessions_with_the_questions_relayed() {
    let upstream = started(builder(8, ServerQuestions::Relay), 8).await;
    let together = scratch("together");
    let dir = together.to_str().unwrap().to_owned();
    let calls = (0..8).map(|i| {
        let who = format!("caller-{i}");
        let arguments = json!({"seconds": 1.5, "together": dir});
        let upstream = &upstream;
        async move { call(upstream, &who, "sleep", arguments, json!({})).await }
    });
    let replies: Vec<Value> = futures_util::future::join_all(calls)
        .await
        .iter()
        .map(said)
        .collect();
    // Each session ran one call (its floor: the questions are relayed), in a child of its own …
    let pids: HashSet<u64> = replies.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 8, "one call per child: {replies:#?}");
    for reply in &replies {
        assert_eq!(reply["max_in_flight"], 1, "{replies:#?}");
    }
    // … and all eight ran at the same time, as the children's shared marks say.
    let most = replies
        .iter()
        .map(|r| r["together"].as_u64().unwrap())
        .max();
    assert_eq!(most, Some(8), "{replies:#?}");
    upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(together);
}

async fn two_pooled_sessions_each_asking_at_once_get_each_answer_to_its_own_call() {
    let upstream = started(builder(2, ServerQuestions::Relay), 2).await;
    let (ada, bob) = tokio::join!(
        call(&upstream, "ada", "ask", json!({"tag": "Ada"}), json!({})),
        call(&upstream, "bob", "ask", json!({"tag": "Bob"}), json!({})),
    );
    let (ada_key, ada_asked, ada_state) = question(&ada);
    let (bob_key, bob_asked, bob_state) = question(&bob);
    assert_eq!(ada_asked, "OK 1? (Ada)", "Ada's question to Ada's call");
    assert_eq!(bob_asked, "OK 1? (Bob)", "Bob's question to Bob's call");
    // Parked in two sessions at once: each state names its own.
    let session = |state: &Value| {
        state
            .as_str()
            .unwrap()
            .split('.')
            .nth(1)
            .unwrap()
            .to_owned()
    };
    assert_ne!(session(&ada_state), session(&bob_state));
    // Another caller's retry of a pooled call is refused, and leaves the call parked.
    let mallory = call(
        &upstream,
        "mallory",
        "ask",
        json!({"tag": "Ada"}),
        answer(&ada_key, &ada_state, "Mallory"),
    )
    .await;
    assert_eq!(mallory["error"]["code"], -32602, "{mallory:#}");
    // Each answer says whose it is; each call gets its own (the children number their
    // questions alike, so an answer sent to the other child would reach the other call). One
    // after the other, both sessions idle: each retry goes where its state says, not to the
    // least loaded.
    let bob = call(
        &upstream,
        "bob",
        "ask",
        json!({"tag": "Bob"}),
        answer(&bob_key, &bob_state, "Bob"),
    )
    .await;
    let ada = call(
        &upstream,
        "ada",
        "ask",
        json!({"tag": "Ada"}),
        answer(&ada_key, &ada_state, "Ada"),
    )
    .await;
    let (ada, bob) = (said(&ada), said(&bob));
    assert_eq!(
        (&ada["tag"], &ada["said"]),
        (&json!("Ada"), &json!(["accept by Ada"]))
    );
    assert_eq!(
        (&bob["tag"], &bob["said"]),
        (&json!("Bob"), &json!(["accept by Bob"]))
    );
    assert_ne!(ada["pid"], bob["pid"], "two children");
    upstream.shutdown().await;
}

async fn a_pooled_session_killed_mid_call_fails_its_calls_and_another_sessions_call_finishes() {
    let upstream = started(builder(2, ServerQuestions::Relay), 2).await;
    let files = scratch("killed");
    // Session 0's child: both sessions idle, the first is taken (and a call that asks nothing
    // leaves its floor at once).
    let first = call(&upstream, "ada", "sleep", json!({"seconds": 0}), json!({})).await;
    let session_0 = said(&first)["pid"].as_u64().unwrap();
    // Parked in session 0 (both idle again).
    let parked = call(&upstream, "ada", "ask", json!({"tag": "Ada"}), json!({})).await;
    let (key, _, state) = question(&parked);
    assert_eq!(state.as_str().unwrap().split('.').nth(1), Some("0"));
    // Two calls at once go to the two sessions (each the least loaded when it came): the one in
    // session 0 is killed with its child, the other finishes.
    let sleeping = |who: &'static str, name: &str| {
        let upstream = upstream.clone();
        let file = files.join(name);
        let arguments = json!({"seconds": 3, "pidfile": file.to_str().unwrap()});
        (
            tokio::spawn(async move { call(&upstream, who, "sleep", arguments, json!({})).await }),
            file,
        )
    };
    let (one, one_file) = sleeping("ada", "one");
    let (two, two_file) = sleeping("bob", "two");
    let pids = (pid_in(&one_file).await, pid_in(&two_file).await);
    assert_ne!(pids.0, pids.1, "two sessions");
    let (doomed, doomed_pid, survivor, survivor_pid) = if u64::from(pids.0) == session_0 {
        (one, pids.0, two, pids.1)
    } else {
        assert_eq!(
            u64::from(pids.1),
            session_0,
            "one call in session 0: {pids:?}"
        );
        (two, pids.1, one, pids.0)
    };

    let killed = std::process::Command::new("kill")
        .args(["-KILL", &doomed_pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let doomed = doomed.await.unwrap();
    assert!(
        error_message(&doomed).contains("exited"),
        "the killed session's call fails: {doomed:#}"
    );
    let survivor = said(&survivor.await.unwrap());
    assert_eq!(
        survivor["pid"], survivor_pid,
        "the other session's call finishes"
    );
    // The call parked in the killed session is gone with it: its retry is refused, clearly.
    let retry = call(
        &upstream,
        "ada",
        "ask",
        json!({"tag": "Ada"}),
        answer(&key, &state, "Ada"),
    )
    .await;
    assert_eq!(retry["error"]["code"], -32602, "{retry:#}");
    assert!(
        error_message(&retry).contains("no longer waiting"),
        "{retry:#}"
    );
    // The session restarted alone: a new child beside the one that kept serving.
    live(&upstream, 2).await;
    let arguments = json!({"seconds": 0.5});
    let (one, two) = tokio::join!(
        call(&upstream, "ada", "sleep", arguments.clone(), json!({})),
        call(&upstream, "bob", "sleep", arguments, json!({})),
    );
    let pids: HashSet<u64> = [said(&one), said(&two)]
        .iter()
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    assert!(
        pids.contains(&u64::from(survivor_pid)),
        "kept serving: {pids:?}"
    );
    assert!(
        !pids.contains(&u64::from(doomed_pid)) && pids.len() == 2,
        "restarted: {pids:?}"
    );
    upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(files);
}

async fn a_caller_holding_its_share_in_flight_is_refused_naming_the_bound_while_another_gets_in() {
    let upstream = builder(1, ServerQuestions::Off)
        .max_in_flight(4)
        .fair_share(0.5)
        .spawn()
        .expect("the server starts");
    let files = scratch("share");
    let mut running = Vec::new();
    for i in 0..2 {
        let file = files.join(format!("alice-{i}"));
        let upstream = upstream.clone();
        let arguments = json!({"seconds": 2, "pidfile": file.to_str().unwrap()});
        running.push(tokio::spawn(async move {
            call(&upstream, "alice", "sleep", arguments, json!({})).await
        }));
        pid_in(&file).await;
    }
    // Alice holds her share (a half of 4): one more of hers is refused, naming the bound.
    let refused = call(
        &upstream,
        "alice",
        "sleep",
        json!({"seconds": 0}),
        json!({}),
    )
    .await;
    let message = error_message(&refused);
    assert!(
        message.contains("2 of 4 requests in flight") && message.contains("a half"),
        "{refused:#}"
    );
    // Bob still gets in.
    let bob = call(&upstream, "bob", "sleep", json!({"seconds": 0}), json!({})).await;
    assert!(said(&bob)["pid"].is_u64(), "{bob:#}");
    for call in running {
        said(&call.await.unwrap());
    }
    // Her calls done, Alice gets in again.
    let alice = call(
        &upstream,
        "alice",
        "sleep",
        json!({"seconds": 0}),
        json!({}),
    )
    .await;
    said(&alice);
    upstream.shutdown().await;
    let _ = std::fs::remove_dir_all(files);
}

async fn a_caller_holding_its_share_of_parked_calls_is_refused_naming_the_bound_while_another_parks()
 {
    let upstream = builder(1, ServerQuestions::Relay)
        .max_parked(4)
        .spawn()
        .expect("the server starts");
    // The default share, a quarter: one of 4 parked calls.
    let first = call(&upstream, "alice", "ask", json!({"tag": "A1"}), json!({})).await;
    let (key, _, state) = question(&first);
    let refused = call(&upstream, "alice", "ask", json!({"tag": "A2"}), json!({})).await;
    let message = error_message(&refused);
    assert!(
        message.contains("1 of 4 parked calls") && message.contains("a quarter"),
        "{refused:#}"
    );
    let bob = call(&upstream, "bob", "ask", json!({"tag": "B"}), json!({})).await;
    let (_, asked, _) = question(&bob);
    assert_eq!(asked, "OK 1? (B)");
    assert_eq!(upstream.parked_calls(), 2);
    // Her parked call is not harmed: answered, it finishes.
    let done = call(
        &upstream,
        "alice",
        "ask",
        json!({"tag": "A1"}),
        answer(&key, &state, "alice"),
    )
    .await;
    assert_eq!(said(&done)["said"], json!(["accept by alice"]));
    upstream.shutdown().await;
}

async fn a_pool_of_no_sessions_or_a_share_out_of_range_is_an_error_at_spawn() {
    for builder in [
        builder(0, ServerQuestions::Relay),
        builder(1, ServerQuestions::Relay).fair_share(0.0),
        builder(1, ServerQuestions::Relay).fair_share(1.5),
        builder(1, ServerQuestions::Relay).fair_share(f64::NAN),
    ] {
        let error = builder.spawn().expect_err("refused");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    }
    #[cfg(feature = "upstream-http")]
    {
        let http = tower_elicitation::upstream::Http::new("http://127.0.0.1:9/mcp");
        let error = Upstream::builder(http).sessions(2).spawn().unwrap_err();
        assert!(error.to_string().contains("sessions"), "{error}");
    }
}

crate::trials! {
    [] multi_thread eight_callers_run_at_once_in_eight_pooled_sessions_with_the_questions_relayed,
    [] multi_thread two_pooled_sessions_each_asking_at_once_get_each_answer_to_its_own_call,
    [] multi_thread a_pooled_session_killed_mid_call_fails_its_calls_and_another_sessions_call_finishes,
    [] multi_thread a_caller_holding_its_share_in_flight_is_refused_naming_the_bound_while_another_gets_in,
    [] multi_thread a_caller_holding_its_share_of_parked_calls_is_refused_naming_the_bound_while_another_parks,
    [] multi_thread a_pool_of_no_sessions_or_a_share_out_of_range_is_an_error_at_spawn,
}
