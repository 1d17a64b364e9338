//! The 2025 handshake: `initialize` opens a session, answered from the inner service's
//! `server/discover` (cached when the service allows it).

use http::header::HeaderValue;
use http::request::Parts;
use http::{Request, Response};
use serde_json::{Map, Value, json};
use tower_service::Service;

use super::body::RequestBody;
use super::config::Settings;
use super::inner::{self, InnerBody, Message, Reader, SESSION_ID};
use super::replies::{BridgeResponse, answer_to, store_failed};
use crate::store::SessionRecord;
use crate::util::ids::new_session_id;
use crate::wire::jsonrpc::{INTERNAL_ERROR, RpcError};
use crate::wire::legacy::{self, Client};

/// `initialize`: a new session, answered from the inner service's `server/discover`.
pub(super) async fn initialize<S, ResBody>(
    mut inner: S,
    settings: &Settings,
    parts: &Parts,
    message: &Map<String, Value>,
) -> Result<BridgeResponse<ResBody>, S::Error>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let params = message.get("params");
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = legacy::negotiate(requested);
    let capabilities = params
        .and_then(|p| p.get("capabilities"))
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let info = params
        .and_then(|p| p.get("clientInfo"))
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"name": "unknown", "version": "0"}));
    let discovered = match discover(&mut inner, settings, parts, &capabilities, &info).await? {
        Ok(discovered) => discovered,
        Err(text) => {
            let error = RpcError::new(INTERNAL_ERROR, &text);
            return Ok(answer_to(&id, Err(error)));
        }
    };
    let result = legacy::initialize_result(version, &discovered, &settings.server_info);
    let record = SessionRecord {
        protocol_version: version.to_owned(),
        client_capabilities: capabilities,
        client_info: info,
        log_level: None,
        principal: principal_tag(settings, parts),
        subscriptions: Vec::new(),
    };
    let session = new_session_id();
    if let Err(error) = settings.sessions.create(&session, record).await {
        return Ok(store_failed(&error));
    }
    let mut response = answer_to(&id, Ok(result));
    response.headers_mut().insert(
        SESSION_ID,
        HeaderValue::from_str(&session).expect("hex is a valid header"),
    );
    Ok(response)
}

/// The inner service's `server/discover` result, from the cache when it allowed keeping it.
pub(super) async fn discover<S, ResBody>(
    inner: &mut S,
    settings: &Settings,
    parts: &Parts,
    capabilities: &Value,
    info: &Value,
) -> Result<Result<Value, String>, S::Error>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    ResBody: InnerBody,
{
    let cached = {
        let cache = settings
            .discovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .as_ref()
            .filter(|(until, _)| *until > std::time::Instant::now())
            .map(|(_, result)| result.clone())
    };
    if let Some(cached) = cached {
        return Ok(Ok(cached));
    }
    let client = Client {
        capabilities,
        info,
        log_level: None,
    };
    let params = legacy::modern_params(None, &client);
    let id = settings.inner_id();
    let request = inner::request(parts, &id, "server/discover", None, &params);
    let response = inner::call(inner, request).await?;
    let mut reader = Reader::new(response);
    let result = loop {
        match reader.next().await {
            Ok(Message::Notification(_)) => continue,
            Ok(Message::Response(response)) => match response.get("result") {
                Some(result) if result.is_object() => break result.clone(),
                _ => {
                    let text = "The inner service's server/discover failed";
                    tracing::warn!(?response, "{text}");
                    return Ok(Err(text.to_owned()));
                }
            },
            Err(text) => return Ok(Err(text)),
        }
    };
    if let Some(ttl) = legacy::discovery_ttl(&result) {
        let until = std::time::Instant::now() + ttl;
        *settings
            .discovered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((until, result.clone()));
    }
    Ok(Ok(result))
}

/// The keyed tag of the caller's identity: what a session is bound to.
pub(super) fn principal_tag(settings: &Settings, parts: &Parts) -> Option<String> {
    let callers = &settings.callers;
    callers.tag(callers.principal(parts).as_deref())
}
