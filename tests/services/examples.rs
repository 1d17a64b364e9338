//! The task-shaped examples (`minimal`, `gates`, `single_use_redis`, `bridge`) served on a
//! loopback socket and called over real HTTP, as their module docs tell a user to try them.

use serde_json::{Value, json};
use tower_elicitation::Keyring;

use crate::support::redis as redis_support;
use crate::support::{example_bridge, example_gates, example_minimal, example_single_use_redis};

fn keyring() -> Keyring {
    Keyring::new("k1", [7u8; 32]).expect("a valid test key")
}

/// Serves `app` on 127.0.0.1 (a free port); its `/mcp` URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A stateless 2026-07-28 `tools/call` of `name`, with `extra` params (`requestState`,
/// `inputResponses`), from a client that declares form elicitation; the JSON-RPC response.
async fn call(url: &str, name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}
    }});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .body(body.to_string())
        .send();
    let response = tokio::time::timeout(crate::support::TIMEOUT, response)
        .await
        .expect("in time")
        .expect("a response");
    let text = response.text().await.unwrap();
    // JSON, or an event stream whose last `data:` line is the response.
    serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message.get("id") == Some(&json!(1)))
            .unwrap_or_else(|| panic!("no JSON-RPC response in {text}"))
    })
}

/// The `requestState` of an `input_required` result, checking it asks `key`.
fn asked(response: &Value, key: &str) -> String {
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response:#}");
    assert!(
        result["inputRequests"].get(key).is_some(),
        "asks {key}: {response:#}"
    );
    let state = result["requestState"].as_str().expect("a requestState");
    assert!(state.starts_with("v1.k1."), "sealed by the layer: {state}");
    state.to_owned()
}

fn text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {response:#}"))
}

fn answer(state: &str, key: &str, answer: Value) -> Value {
    json!({"requestState": state, "inputResponses": {key: answer}})
}

async fn minimal_asks_a_name_checks_the_answer_then_greets() {
    let url = serve(example_minimal::app(keyring())).await;
    let state = asked(&call(&url, "greet", json!({}), json!({})).await, "name");
    // An answer that does not fit the form is asked again by the layer.
    let wrong = json!({"action": "accept", "content": {"name": 42}});
    let again = call(&url, "greet", json!({}), answer(&state, "name", wrong)).await;
    let state = asked(&again, "name");
    let right = json!({"action": "accept", "content": {"name": "Ada"}});
    let done = call(&url, "greet", json!({}), answer(&state, "name", right)).await;
    assert_eq!(text(&done), "Hello, Ada!");
}

async fn gates_asks_approval_refuses_a_no_and_deploys_on_a_yes() {
    let url = serve(example_gates::app(keyring()).unwrap()).await;
    let args = json!({"environment": "prod"});
    let first = call(&url, "deploy", args.clone(), json!({})).await;
    let state = asked(&first, "approval");
    let message = &first["result"]["inputRequests"]["approval"]["params"]["message"];
    assert_eq!(message, "Deploy to prod?");

    let no = json!({"action": "accept", "content": {"approve": false}});
    let refused = call(&url, "deploy", args.clone(), answer(&state, "approval", no)).await;
    assert_eq!(text(&refused), "Not deployed.");
    assert_eq!(refused["result"]["isError"], true);

    let yes = json!({"action": "accept", "content": {"approve": true}});
    let done = call(&url, "deploy", args, answer(&state, "approval", yes)).await;
    assert_eq!(text(&done), "Deployed to prod.");
}

async fn single_use_redis_spends_an_approval_on_one_replica_for_all() {
    let prefix = redis_support::prefix();
    let replica = || {
        let redis = tower_elicitation::redis::RedisStore::builder(redis_support::redis_url())
            .key_prefix(prefix.clone())
            .build()
            .unwrap();
        example_single_use_redis::app(keyring(), redis).unwrap()
    };
    let (a, b) = (serve(replica()).await, serve(replica()).await);
    let args = json!({"environment": "prod"});
    let state = asked(
        &call(&a, "deploy", args.clone(), json!({})).await,
        "approval",
    );
    let yes = answer(
        &state,
        "approval",
        json!({"action": "accept", "content": {"approve": true}}),
    );
    let done = call(&b, "deploy", args.clone(), yes.clone()).await;
    assert_eq!(text(&done), "Deployed to prod.");
    let replayed = call(&a, "deploy", args, yes).await;
    assert_eq!(replayed["error"]["code"], -32602, "{replayed:#}");
}

async fn bridge_opens_a_2025_session_in_front_of_the_layer() {
    let url = serve(example_bridge::app(keyring()).unwrap()).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "it", "version": "0"}}});
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("mcp-session-id").is_some());
    let text = response.text().await.unwrap();
    assert!(
        text.contains("\"protocolVersion\":\"2025-11-25\""),
        "{text}"
    );
}

crate::trials! {
    [] current_thread minimal_asks_a_name_checks_the_answer_then_greets,
    [] current_thread gates_asks_approval_refuses_a_no_and_deploys_on_a_yes,
    [Redis] current_thread single_use_redis_spends_an_approval_on_one_replica_for_all,
    [] current_thread bridge_opens_a_2025_session_in_front_of_the_layer,
}
