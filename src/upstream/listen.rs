//! `subscriptions/listen` in front of a 2025-era server, which has no such method: the adapter
//! answers it itself, from the notifications the server sends in its one session (on stdio, on
//! a call's stream, on the standalone `GET` stream). A 2025-era server is never sent a
//! 2026-only method.
//!
//! The listen is acknowledged with the list changes the server declares (`listChanged` in its
//! `tools`, `prompts` and `resources` capabilities) that the front asked for; then each
//! `notifications/{tools,prompts,resources}/list_changed` the server sends reaches it, marked
//! with the subscription's id, until the front goes away. Resource subscriptions are not agreed
//! to (a 2025-era `resources/subscribe` holds for the whole session, every front's at once): the
//! acknowledgement leaves them out, as the 2026 spec lets a server. At most
//! [`MAX_LISTENS`](super::core::MAX_LISTENS) listens per session; a front that takes no event
//! stream gets an error, since a listen's notifications come before its answer.

use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use super::core::{Core, TARGET};
use crate::wire::jsonrpc::{self, INVALID_REQUEST, RpcError};

/// The 2026-07-28 request answered here.
pub(crate) const LISTEN: &str = "subscriptions/listen";

/// Where a listen's notifications carry their subscription's id.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The filter keys of list changes, with the capability that offers each and its notification.
const LISTS: [(&str, &str, &str); 3] = [
    (
        "toolsListChanged",
        "tools",
        "notifications/tools/list_changed",
    ),
    (
        "promptsListChanged",
        "prompts",
        "notifications/prompts/list_changed",
    ),
    (
        "resourcesListChanged",
        "resources",
        "notifications/resources/list_changed",
    ),
];

/// Serves the front's listen `id` (`params` its filter) until the front goes away: what ends
/// it early is its answer (an error).
pub(crate) async fn serve(
    core: &Core,
    initialized: &Value,
    notes: Option<mpsc::Sender<Value>>,
    id: &Value,
    params: Option<Value>,
) -> Value {
    let refuse = |text: &str| jsonrpc::response(id, Err(RpcError::new(INVALID_REQUEST, text)));
    let Some(notes) = notes else {
        return refuse(
            "Invalid Request: subscriptions/listen needs an event stream (Accept: text/event-stream)",
        );
    };
    let Ok(_permit) = core.listens.clone().try_acquire_owned() else {
        return refuse("Invalid Request: this session serves as many listens as it may");
    };
    let wanted = params
        .as_ref()
        .and_then(|p| p.get("notifications"))
        .cloned()
        .unwrap_or(Value::Null);
    let capabilities = &initialized["capabilities"];
    let mut agreed = Map::new();
    let mut methods = Vec::new();
    for (key, capability, method) in LISTS {
        if wanted.get(key) == Some(&Value::Bool(true))
            && capabilities[capability]["listChanged"] == Value::Bool(true)
        {
            agreed.insert(key.to_owned(), Value::Bool(true));
            methods.push(method);
        }
    }
    let mut changes = core.changes.subscribe();
    let acknowledged = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": agreed, "_meta": {SUBSCRIPTION_ID: id}}});
    if notes.send(acknowledged).await.is_err() {
        return refuse("Invalid Request: the listen's stream closed");
    }
    loop {
        let change = tokio::select! {
            () = notes.closed() => return refuse("Invalid Request: the listen's stream closed"),
            change = changes.recv() => change,
        };
        let mut change = match change {
            Ok(change) => change,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(target: TARGET, missed, "a listen read too slowly: it missed changes");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => {
                return refuse("Invalid Request: the session ended");
            }
        };
        let method = change.get("method").and_then(Value::as_str).unwrap_or("");
        if !methods.contains(&method) {
            continue;
        }
        let params = change
            .entry("params")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|params| params.entry("_meta").or_insert_with(|| json!({})));
        if let Some(Value::Object(meta)) = params {
            meta.insert(SUBSCRIPTION_ID.to_owned(), id.clone());
        }
        // Lost when the front reads too slowly, as any notification: a list change says only
        // that something changed, and the next one says it again.
        let _ = notes.try_send(Value::Object(change));
    }
}
