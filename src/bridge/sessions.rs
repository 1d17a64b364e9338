//! The bridge's sessions: the caller's own record looked up, a request without a session served
//! with none, and the requests without a body (GET's stream, DELETE).

use std::sync::Arc;

use http::header::{ALLOW, HeaderValue};
use http::request::Parts;
use http::{Method as HttpMethod, StatusCode};
use serde_json::json;

use super::config::Settings;
use super::events::StreamKind;
use super::inner::{InnerBody, Wrapped, header};
use super::listen;
use super::replies::{BridgeResponse, refuse, session_not_found, status, store_failed};
use crate::store::{SessionRecord, StoreError};
use crate::wire::jsonrpc::{ReplyKind, SERVER_ERROR};
use crate::wire::legacy::LEGACY_VERSIONS;
use crate::wire::sse;

/// The record of the caller's live session, for a 2025 request; the error response otherwise.
pub(super) async fn legacy_session<B>(
    settings: &Settings,
    parts: &Parts,
    session: &str,
    version: Option<&str>,
) -> Result<SessionRecord, BridgeResponse<B>> {
    let record = callers_session(settings, parts, session).await?;
    if let Some(version) = version.filter(|v| !LEGACY_VERSIONS.contains(v)) {
        let message = format!("Bad Request: Unsupported protocol version: {version}");
        return Err(refuse(ReplyKind::BadRequest, SERVER_ERROR, &message));
    }
    Ok(record)
}

/// GET, DELETE (or any method without a JSON-RPC body) naming a session: a GET that takes an
/// event stream gets the session's stream (list changes, resource updates); the `Last-Event-ID`
/// of a GET stream opens a fresh one, as nothing is replayed; that of a POST's stream gets 405,
/// as it cannot be resumed.
pub(super) async fn without_body<S, ResBody>(
    inner: S,
    settings: Arc<Settings>,
    parts: Parts,
    session: String,
) -> BridgeResponse<ResBody>
where
    S: Wrapped<ResBody>,
    ResBody: InnerBody + Send + 'static,
{
    let record = match callers_session(&settings, &parts, &session).await {
        Ok(record) => record,
        Err(response) => return response,
    };
    if parts.method == HttpMethod::DELETE {
        let removed = settings.sessions.remove(&session).await;
        // Its GET streams in this process end now.
        settings.listeners.changed(&session);
        return match removed {
            Ok(_) => status(StatusCode::NO_CONTENT),
            Err(error) => store_failed(&error),
        };
    }
    // Only a GET stream can be taken up again (as a fresh one): a POST's cannot be resumed.
    let resumes_a_post = header(&parts, &LAST_EVENT_ID)
        .is_some_and(|id| StreamKind::of_event_id(id) != Some(StreamKind::Get));
    if parts.method == HttpMethod::GET && sse::accepts(&parts.headers) && !resumes_a_post {
        let version = &record.protocol_version;
        return listen::open(inner, settings, parts, session, version);
    }
    let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    response
}

/// The record of the caller's own live session `session`; the error response when there is none
/// (404) or the store cannot say (503).
pub(super) async fn callers_session<B>(
    settings: &Settings,
    parts: &Parts,
    session: &str,
) -> Result<SessionRecord, BridgeResponse<B>> {
    match lookup(settings, parts, session).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(session_not_found()),
        Err(error) => Err(store_failed(&error)),
    }
}

/// Keeps `record` as the session's; the error response when the session is gone (404) or the
/// store cannot say (503).
pub(super) async fn keep<B>(
    settings: &Settings,
    session: &str,
    record: SessionRecord,
) -> Result<(), BridgeResponse<B>> {
    match settings.sessions.update(session, record).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(session_not_found()),
        Err(error) => Err(store_failed(&error)),
    }
}

/// The live session `id`, if it is the caller's.
async fn lookup(
    settings: &Settings,
    parts: &Parts,
    id: &str,
) -> Result<Option<SessionRecord>, StoreError> {
    let Some(record) = settings.sessions.get(id).await? else {
        return Ok(None);
    };
    let caller = settings.callers.principal(parts);
    let same = settings
        .callers
        .is_tag_of(record.principal.as_deref(), caller.as_deref());
    Ok(same.then_some(record))
}

/// What a request without a session is served with: no capabilities, so nothing can be asked.
pub(super) fn sessionless(version: Option<&str>) -> SessionRecord {
    SessionRecord {
        protocol_version: version.unwrap_or(LEGACY_VERSIONS[2]).to_owned(),
        client_capabilities: json!({}),
        client_info: json!({"name": "unknown", "version": "0"}),
        log_level: None,
        principal: None,
        subscriptions: Vec::new(),
    }
}

/// `Last-Event-ID`: the stream a client takes up again.
const LAST_EVENT_ID: http::header::HeaderName =
    http::header::HeaderName::from_static(crate::wire::mcp::header::LAST_EVENT_ID);
