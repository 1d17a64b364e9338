//! The Tasks extension through the proxy: a task request the layer has no record of (a task no
//! caller created through this proxy, or another caller's) is refused as `Unknown task`, never
//! forwarded to the upstream, which would not check who asks (issue #36, item 9).

use serde_json::{Value, json};

use crate::support::*;

/// A 2026-07-28 task request of `method` for `task_id`, declaring the Tasks extension.
async fn task_request(url: &str, method: &str, task_id: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {
        "taskId": task_id,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "proxy-test", "version": "0"}}}});
    let text = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let event = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|e| e.get("id").is_some());
    event.unwrap_or_else(|| serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")))
}

async fn a_task_request_without_a_record_is_refused_as_unknown_and_never_forwarded() {
    let entry = filesystem();
    let port = free_port();
    let setup = Setup::new("tasks-unknown", &entry, port, "");
    let proxy = Proxy::start(&setup.config, port).await;
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let reply = task_request(&proxy.url, method, "someone-elses-task").await;
        assert_eq!(reply["error"]["code"], -32602, "{method}: {reply:#}");
        assert_eq!(
            reply["error"]["message"], "Unknown task",
            "{method}: {reply:#}"
        );
        assert_eq!(
            reply["error"]["data"]["reason"], "unknown_task",
            "{method}: {reply:#}"
        );
    }
    // The proxy still serves: an ungated call goes through.
    let listed = request(&proxy.url, "tools/list", "", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed:#}");
}

crate::trials! {
    [Upstreams] current_thread a_task_request_without_a_record_is_refused_as_unknown_and_never_forwarded,
}
