//! The 2025 requests the bridge answers itself: notifications, `logging/setLevel`, resource
//! subscriptions, and a client's answers to the requests it sent on a call's stream.

use http::request::Parts;
use serde_json::{Map, Value, json};

use super::config::Settings;
use super::replies::{BridgeResponse, accepted, answer_to};
use super::rounds;
use super::sessions::{callers_session, keep};
use crate::store::{AnswerKey, SessionRecord};
use crate::wire::jsonrpc::{INVALID_PARAMS, RpcError};
use crate::wire::legacy::LOG_LEVELS;

/// A notification, accepted; `notifications/cancelled` ends the call it names.
pub(super) async fn notification<B>(
    settings: &Settings,
    session: Option<&str>,
    method: &str,
    message: &Map<String, Value>,
) -> BridgeResponse<B> {
    // `notifications/cancelled` ends the call it names; the rest (including
    // `notifications/initialized`) is accepted and needs nothing more.
    if method == "notifications/cancelled"
        && let Some(session) = session
        && let Some(request) = message.get("params").and_then(|p| p.get("requestId"))
    {
        let key = AnswerKey::new(session, rounds::cancel_leg(request));
        let _ = settings.pending.deliver(key, Value::Null).await;
    }
    accepted()
}

/// `logging/setLevel`: the level kept in the session's record (if there is a session).
pub(super) async fn set_log_level<B>(
    settings: &Settings,
    session: Option<&str>,
    mut record: SessionRecord,
    id: &Value,
    params: Option<&Value>,
) -> BridgeResponse<B> {
    let level = params.and_then(|p| p.get("level")).and_then(Value::as_str);
    let Some(level) = level.filter(|l| LOG_LEVELS.contains(l)) else {
        let error = RpcError::new(INVALID_PARAMS, "Invalid log level");
        return answer_to(id, Err(error));
    };
    if let Some(session) = session {
        record.log_level = Some(level.to_owned());
        if let Err(response) = keep(settings, session, record).await {
            return response;
        }
    }
    answer_to(id, Ok(json!({})))
}

/// `resources/subscribe` and `resources/unsubscribe` of a session: its record keeps the URIs,
/// which its GET stream listens for on the inner service (2026-07-28 has no such requests).
pub(super) async fn subscription<B>(
    settings: &Settings,
    session: &str,
    mut record: SessionRecord,
    method: &str,
    id: &Value,
    params: Option<&Value>,
) -> BridgeResponse<B> {
    let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) else {
        let error = RpcError::new(INVALID_PARAMS, "Invalid params: uri must be a string");
        return answer_to(id, Err(error));
    };
    let subscribed = record.subscriptions.iter().any(|known| known == uri);
    let changed = match method {
        "resources/subscribe" if !subscribed => {
            record.subscriptions.push(uri.to_owned());
            true
        }
        "resources/unsubscribe" if subscribed => {
            record.subscriptions.retain(|known| known != uri);
            true
        }
        _ => false,
    };
    if changed {
        if let Err(response) = keep(settings, session, record).await {
            return response;
        }
        settings.listeners.changed(session);
    }
    answer_to(id, Ok(json!({})))
}

/// A client's response to a request on a call's stream: handed to the call waiting for it, if
/// any, in this session. 202 either way.
pub(super) async fn answer<B>(
    settings: &Settings,
    parts: &Parts,
    session: &str,
    message: Map<String, Value>,
) -> BridgeResponse<B> {
    if let Err(response) = callers_session::<B>(settings, parts, session).await {
        return response;
    }
    let is_leg = message
        .get("id")
        .and_then(Value::as_str)
        .is_some_and(|id| id.starts_with(rounds::LEG_PREFIX));
    if is_leg {
        let leg = serde_json::to_string(&message["id"]).expect("a string serializes");
        let key = AnswerKey::new(session, leg);
        match settings.pending.deliver(key, Value::Object(message)).await {
            Ok(true) => {}
            Ok(false) => tracing::debug!("an answer nobody waits for, dropped"),
            Err(error) => tracing::warn!(%error, "cannot deliver an answer"),
        }
    }
    accepted()
}
