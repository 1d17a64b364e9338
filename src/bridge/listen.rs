//! The session's GET stream: list changes and resource updates, relayed from the inner service's
//! `subscriptions/listen`.
//!
//! 2025-11-25 delivers `notifications/{tools,prompts,resources}/list_changed` and
//! `notifications/resources/updated` on a standalone GET stream, after `resources/subscribe`
//! named the resources. 2026-07-28 has no subscribe request and no GET stream: the client holds a
//! `subscriptions/listen` request open, with the categories and resource URIs it wants, and the
//! server sends the notifications on that request's stream. So the bridge keeps a session's
//! subscriptions in its record (`resources/subscribe` and `resources/unsubscribe` are answered
//! `{}` here), and while the client holds a GET stream open it holds one `subscriptions/listen`
//! open on the inner service with every list-change category and those URIs (the inner narrows
//! the filter to what it offers). When the subscriptions change the listen is opened again with
//! the new filter; when the inner ends it, the GET stream ends, and the client reconnects after
//! `retry`. An inner service that offers no listen leaves the stream open and quiet.
//!
//! A subscription change reaches a GET stream held by this process at once; one held by another
//! replica sees it on its next keep-alive, when it re-reads the session.

use std::sync::Arc;

use http::Response;
use http::request::Parts;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::body::RequestBody;
use super::body::ResponseBody;
use super::config::{KEEP_ALIVE, Settings};
use super::events::{EventSender, StreamKind};
use super::inner::{self, InnerBody, Message, Reader};
use crate::store::SessionRecord;
use crate::wire::legacy::{self, Client};
use crate::wire::mcp::meta::PREFIX as META_PREFIX;

/// The method of the 2026-07-28 request a GET stream is relayed from.
const LISTEN: &str = "subscriptions/listen";
/// The notification that acknowledges a listen: the bridge's business, not the client's.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// Answers a GET of a live session, whose client speaks protocol `version`, with its event
/// stream, relayed in a task of its own.
pub(crate) fn open<S, ResBody>(
    inner: S,
    settings: Arc<Settings>,
    parts: Parts,
    session: String,
    version: &str,
) -> Response<ResponseBody<ResBody>>
where
    S: tower_service::Service<
            http::Request<RequestBody>,
            Response = Response<ResBody>,
            Future: Send + 'static,
            Error: Send + 'static,
        > + Send
        + 'static,
    ResBody: InnerBody + Send + 'static,
{
    let (events, response) = EventSender::open(StreamKind::Get, version);
    let changes = settings.listeners.watch(&session);
    tokio::spawn(async move {
        relay(inner, &settings, &parts, &session, &events, changes).await;
        settings.listeners.release(&session);
    });
    response
}

/// How one listen on the inner service ended.
enum Ended {
    /// The inner ended it gracefully: the stream ends too.
    Completed,
    /// The inner refused it, failed, or its stream broke.
    Failed,
}

async fn relay<S, ResBody>(
    mut inner: S,
    settings: &Settings,
    parts: &Parts,
    session: &str,
    events: &EventSender,
    mut changes: watch::Receiver<u64>,
) where
    S: tower_service::Service<http::Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let mut keep_alive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    loop {
        let Ok(Some(record)) = settings.sessions.get(session).await else {
            // The session ended (or cannot be read): so does its stream.
            return;
        };
        changes.borrow_and_update();
        let subscribed = record.subscriptions.clone();
        let id = settings.inner_id();
        let request = inner::request(parts, &id, LISTEN, None, &listen_params(&record));
        let listening = listen(&mut inner, request, events);
        tokio::pin!(listening);
        let mut ended = None;
        loop {
            tokio::select! {
                () = events.closed() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    break;
                }
                _ = keep_alive.tick() => {
                    events.keep_alive().await;
                    // Another replica may have changed or ended the session.
                    match settings.sessions.get(session).await {
                        Ok(Some(now)) if now.subscriptions == subscribed => {}
                        Ok(Some(_)) => break,
                        _ => return,
                    }
                }
                outcome = &mut listening, if ended.is_none() => {
                    match outcome {
                        Ended::Completed => return,
                        // Nothing to relay until the subscriptions change.
                        Ended::Failed => ended = Some(()),
                    }
                }
            }
        }
    }
}

/// The params of the `subscriptions/listen` request for the session: every list-change category,
/// and the resources it subscribed to.
fn listen_params(record: &SessionRecord) -> Map<String, Value> {
    let client = Client {
        capabilities: &record.client_capabilities,
        info: &record.client_info,
        log_level: record.log_level.as_deref(),
    };
    let mut params = legacy::modern_params(None, &client);
    let mut filter = json!({"toolsListChanged": true, "promptsListChanged": true,
        "resourcesListChanged": true});
    if !record.subscriptions.is_empty() {
        filter["resourceSubscriptions"] = json!(record.subscriptions);
    }
    params.insert("notifications".to_owned(), filter);
    params
}

/// One listen: its notifications relayed until it ends.
async fn listen<S, ResBody>(
    inner: &mut S,
    request: http::Request<RequestBody>,
    events: &EventSender,
) -> Ended
where
    S: tower_service::Service<http::Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let Ok(response) = inner::call(inner, request).await else {
        return Ended::Failed;
    };
    let mut reader = Reader::new(response);
    loop {
        match reader.next().await {
            Ok(Message::Notification(notification)) => {
                if notification.get("method").and_then(Value::as_str) != Some(ACKNOWLEDGED) {
                    events.send(&legacy_notification(notification)).await;
                }
            }
            Ok(Message::Response(response)) => {
                if response.get("error").is_some() {
                    tracing::debug!(?response, "the inner service refused subscriptions/listen");
                    return Ended::Failed;
                }
                return Ended::Completed;
            }
            Err(text) => {
                tracing::debug!(%text, "the inner service's subscriptions/listen broke");
                return Ended::Failed;
            }
        }
    }
}

/// A 2026 notification as a 2025 client takes it: without the 2026 keys of its `_meta` (the
/// subscription's id), and without a `_meta` left empty.
fn legacy_notification(mut notification: Value) -> Value {
    if let Some(params) = notification
        .get_mut("params")
        .and_then(Value::as_object_mut)
    {
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            meta.retain(|key, _| !key.starts_with(META_PREFIX));
        }
        if params
            .get("_meta")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            params.remove("_meta");
        }
    }
    notification
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_id_is_dropped_from_a_relayed_notification() {
        let relayed = legacy_notification(json!({"jsonrpc": "2.0",
            "method": "notifications/resources/updated", "params": {"uri": "file:///a",
            "_meta": {"io.modelcontextprotocol/subscriptionId": 3}}}));
        assert_eq!(
            relayed,
            json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                "params": {"uri": "file:///a"}})
        );
        let kept = legacy_notification(json!({"method": "m", "params": {"_meta": {"x": 1}}}));
        assert_eq!(kept["params"]["_meta"], json!({"x": 1}));
    }
}
