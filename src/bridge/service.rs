//! [`LegacyBridge`]: tells the eras apart, answers the 2025 handshake and utilities itself, and
//! forwards everything else to the service it wraps as 2026-07-28 requests.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::request::Parts;
use http::{Method as HttpMethod, Request, Response, StatusCode};
use http_body::Body;
use serde_json::{Map, Value, json};
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::config::Settings;
use super::events::{self, EventSender, StreamKind};
use super::future::ResponseFuture;
use super::inner::{self, InnerBody, Message, PROTOCOL_VERSION, Reader, SESSION_ID};
use super::listen;
use super::rounds::{self, BridgedCall};
use crate::BoxError;
use crate::store::AnswerKey;
use crate::store::SessionRecord;
use crate::store::StoreError;
use crate::util::body::{parse_strict, read_limited};
use crate::util::ids::new_session_id;
use crate::wire::jsonrpc::{
    self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, Reply, ReplyKind, RpcError,
    SERVER_ERROR, SESSION_NOT_FOUND,
};
use crate::wire::legacy::{self, Client, LEGACY_VERSIONS, LOG_LEVELS};
use crate::wire::mcp::Method;

/// The service [`LegacyBridgeLayer`](crate::bridge::LegacyBridgeLayer) wraps around a 2026-07-28 MCP
/// service. Its own answers are HTTP responses; `Err` only ever comes from the inner service.
#[derive(Clone)]
pub struct LegacyBridge<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> LegacyBridge<S> {
    /// Wraps `inner` for `layer`, with every option at its default; see
    /// [`LegacyBridgeLayer::for_layer`](crate::bridge::LegacyBridgeLayer::for_layer) for what it takes from
    /// the layer, and for options.
    pub fn new(inner: S, layer: &crate::ElicitationLayer) -> Self {
        Self::from_settings(inner, Arc::new(Settings::new(layer.caller_binding())))
    }

    pub(crate) fn from_settings(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }

    define_inner_service_accessors!();
}

impl<S: std::fmt::Debug> std::fmt::Debug for LegacyBridge<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyBridge")
            .field("inner", &self.inner)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for LegacyBridge<S>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service driven to readiness goes into the future; a fresh clone stays.
        let fresh = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, fresh);
        ResponseFuture::new(handle(inner, Arc::clone(&self.settings), request))
    }
}

/// What the bridge answers a client with.
type BridgeResponse<B> = Response<ResponseBody<B>>;

/// What the bridge asks of the service it wraps (the bounds of its `Service` impl, written once
/// for the functions behind it): a 2026-07-28 service of buffered bodies, its future sendable.
trait Wrapped<ResBody>:
    Service<
        Request<RequestBody>,
        Response = Response<ResBody>,
        Future: Send + 'static,
        Error: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, ResBody> Wrapped<ResBody> for S
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
}

/// One request to the bridge: what is not the bridge's to answer is forwarded as it came.
async fn handle<S, ReqBody, ResBody>(
    inner: S,
    settings: Arc<Settings>,
    request: Request<ReqBody>,
) -> Result<BridgeResponse<ResBody>, S::Error>
where
    S: Wrapped<ResBody>,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: InnerBody + Send + 'static,
{
    let (parts, body) = request.into_parts();
    if let Some(refusal) = settings.hosts.refusal(&parts) {
        return Ok(refuse(ReplyKind::Forbidden, INVALID_REQUEST, refusal));
    }
    let session = header(&parts, &SESSION_ID).map(str::to_owned);
    if parts.method != HttpMethod::POST
        && let Some(session) = session
    {
        return Ok(without_body(inner, settings, parts, session).await);
    }
    let bytes = match read_body(&settings, body).await {
        Ok(bytes) => bytes,
        Err(response) => return Ok(response),
    };
    if parts.method != HttpMethod::POST {
        return forward(inner, parts, bytes).await;
    }
    let message = match parse_strict(&bytes) {
        Ok(Value::Object(message)) => message,
        Ok(Value::Array(_)) if session.is_some() => {
            let refusal = "batch requests are not supported";
            return Ok(refuse(ReplyKind::BadRequest, INVALID_REQUEST, refusal));
        }
        _ if session.is_some() => {
            return Ok(refuse(ReplyKind::BadRequest, PARSE_ERROR, "Parse error"));
        }
        _ => return forward(inner, parts, bytes).await,
    };
    let incoming = Incoming {
        inner,
        settings,
        parts,
        session,
        bytes,
        message,
    };
    incoming.route().await
}

/// The request body, read within its size limit; the error response when it cannot be read.
async fn read_body<ReqBody, B>(
    settings: &Settings,
    body: ReqBody,
) -> Result<Bytes, BridgeResponse<B>>
where
    ReqBody: Body<Data = Bytes>,
    ReqBody::Error: Into<BoxError>,
{
    read_limited(body, settings.max_body_bytes)
        .await
        .map_err(|failed| reply(failed.reply()))
}

/// A POSTed JSON-RPC message on its way through the bridge, with the service it goes to, the
/// bridge's settings, the request's head and the session it names.
struct Incoming<S> {
    inner: S,
    settings: Arc<Settings>,
    parts: Parts,
    session: Option<String>,
    bytes: Bytes,
    message: Map<String, Value>,
}

impl<S> Incoming<S> {
    /// Routes the message: an answer on a call's stream, 2026, `initialize`, or 2025 to serve.
    async fn route<ResBody>(self) -> Result<BridgeResponse<ResBody>, S::Error>
    where
        S: Wrapped<ResBody>,
        ResBody: InnerBody + Send + 'static,
    {
        let method = self.message.get("method").and_then(Value::as_str);
        if method.is_none() && self.message.contains_key("id") {
            // A response to a request the bridge sent on a call's stream.
            return match &self.session {
                Some(session) => {
                    Ok(answer(&self.settings, &self.parts, session, self.message).await)
                }
                None => self.forward().await,
            };
        }
        if legacy::claims_modern(&self.message) {
            return self.forward().await;
        }
        if method == Some("initialize") {
            return initialize(self.inner, &self.settings, &self.parts, &self.message).await;
        }
        let version = header(&self.parts, &PROTOCOL_VERSION);
        let record = match &self.session {
            Some(session) => {
                match legacy_session(&self.settings, &self.parts, session, version).await {
                    Ok(record) => record,
                    Err(response) => return Ok(response),
                }
            }
            // A 2026 request that lacks its `_meta`: the inner service says what is wrong with it.
            None if version.is_some_and(|v| !LEGACY_VERSIONS.contains(&v)) => {
                return self.forward().await;
            }
            // A 2025 request without a session: served with no client capabilities.
            None => sessionless(version),
        };
        self.serve(record).await
    }

    /// Serves a 2025 request of a live session (or of none): the utilities are answered here, the
    /// three MRTR methods go through the rounds, everything else is forwarded once.
    async fn serve<ResBody>(
        self,
        record: SessionRecord,
    ) -> Result<BridgeResponse<ResBody>, S::Error>
    where
        S: Wrapped<ResBody>,
        ResBody: InnerBody + Send + 'static,
    {
        let Incoming {
            inner,
            settings,
            parts,
            session,
            message,
            ..
        } = self;
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(id) = message.get("id").cloned() else {
            return Ok(notification(&settings, session.as_deref(), method, &message).await);
        };
        let params = message.get("params");
        match method {
            "ping" => return Ok(answer_to(&id, Ok(json!({})))),
            "logging/setLevel" => {
                let session = session.as_deref();
                return Ok(set_log_level(&settings, session, record, &id, params).await);
            }
            "resources/subscribe" | "resources/unsubscribe" if session.is_some() => {
                let session = session.as_deref().unwrap_or_default();
                return Ok(subscription(&settings, session, record, method, &id, params).await);
            }
            _ => {}
        }
        let client = Client {
            capabilities: &record.client_capabilities,
            info: &record.client_info,
            log_level: record.log_level.as_deref(),
        };
        let modern = legacy::modern_params(params, &client);
        if let Some(mrtr) = Method::parse(method) {
            let call = BridgedCall {
                settings,
                parts,
                session,
                record,
                id,
                method: mrtr,
                params: modern,
            };
            return Ok(rounds::start(inner, call));
        }
        forward_once(inner, &settings, &parts, method, &id, modern).await
    }

    /// Forwards the message as it came: it is not the bridge's to answer.
    async fn forward<ResBody>(self) -> Result<BridgeResponse<ResBody>, S::Error>
    where
        S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    {
        forward(self.inner, self.parts, self.bytes).await
    }
}

/// The record of the caller's live session, for a 2025 request; the error response otherwise.
async fn legacy_session<B>(
    settings: &Settings,
    parts: &Parts,
    session: &str,
    version: Option<&str>,
) -> Result<SessionRecord, BridgeResponse<B>> {
    let record = match lookup(settings, parts, session).await {
        Ok(Some(record)) => record,
        Ok(None) => return Err(session_not_found()),
        Err(error) => return Err(store_failed(&error)),
    };
    if let Some(version) = version.filter(|v| !LEGACY_VERSIONS.contains(v)) {
        let message = format!("Bad Request: Unsupported protocol version: {version}");
        return Err(refuse(ReplyKind::BadRequest, SERVER_ERROR, &message));
    }
    Ok(record)
}

/// A notification, accepted; `notifications/cancelled` ends the call it names.
async fn notification<B>(
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
async fn set_log_level<B>(
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
        match settings.sessions.update(session, record).await {
            Ok(true) => {}
            Ok(false) => return session_not_found(),
            Err(error) => return store_failed(&error),
        }
    }
    answer_to(id, Ok(json!({})))
}

/// Forwards a request that is not an MRTR method once; the inner's answer in its 2025 shape, as
/// an event stream when the client takes one (with the inner's log messages and progress before
/// it), as JSON otherwise.
async fn forward_once<S, ResBody>(
    mut inner: S,
    settings: &Settings,
    parts: &Parts,
    method: &str,
    id: &Value,
    modern: Map<String, Value>,
) -> Result<BridgeResponse<ResBody>, S::Error>
where
    S: Wrapped<ResBody>,
    ResBody: InnerBody + Send + 'static,
{
    let inner_id = settings.inner_id();
    let body = json!({"jsonrpc": "2.0", "id": inner_id, "method": method, "params": modern});
    // The 2026 headers of what it names (`Mcp-Name` for `resources/subscribe`, …), as the inner
    // service requires them.
    let name = crate::wire::mcp::name_param(method)
        .and_then(|field| body["params"][field].as_str())
        .map(str::to_owned);
    let request = inner::request(
        parts,
        method,
        name.as_deref(),
        body.to_string().into_bytes(),
    );
    // The tools' `x-mcp-header` arguments are learnt from every list relayed.
    let is_tools_list = method == "tools/list";
    if !events::accepts_event_stream(parts) {
        let response = inner::call(&mut inner, request).await?;
        let mut reader = Reader::new(response);
        let outcome = loop {
            match reader.next().await {
                Ok(Message::Notification(_)) => continue,
                Ok(Message::Response(response)) => break legacy_outcome(response),
                Err(text) => break Err(RpcError::new(INTERNAL_ERROR, &text)),
            }
        };
        if let (true, Ok(result)) = (is_tools_list, &outcome) {
            settings.tool_headers.learn(result);
        }
        return Ok(answer_to(id, outcome));
    }
    let (events, stream) = EventSender::open(StreamKind::Post);
    let id = id.clone();
    let tool_headers = Arc::clone(&settings.tool_headers);
    tokio::spawn(async move {
        let call = async {
            let Ok(response) = inner::call(&mut inner, request).await else {
                let error = RpcError::new(INTERNAL_ERROR, "The inner service failed");
                return Err(error);
            };
            let mut reader = Reader::new(response);
            loop {
                match reader.next().await {
                    Ok(Message::Notification(notification)) => {
                        let method = notification.get("method").and_then(Value::as_str);
                        if matches!(
                            method,
                            Some("notifications/message" | "notifications/progress")
                        ) {
                            events.send(&notification).await;
                        }
                    }
                    Ok(Message::Response(response)) => break legacy_outcome(response),
                    Err(text) => break Err(RpcError::new(INTERNAL_ERROR, &text)),
                }
            }
        };
        let outcome = tokio::select! {
            () = events.closed() => return,
            outcome = call => outcome,
        };
        if let (true, Ok(result)) = (is_tools_list, &outcome) {
            tool_headers.learn(result);
        }
        events.send(&jsonrpc::response(&id, outcome)).await;
    });
    Ok(stream)
}

/// The inner's answer to a request that is not an MRTR method, in its 2025 shape.
pub(crate) fn legacy_outcome(response: Value) -> Result<Value, RpcError> {
    if let Some(Value::Object(error)) = response.get("error") {
        let error = legacy::legacy_error(error.clone());
        return Err(RpcError::relayed(Value::Object(error)));
    }
    let Some(Value::Object(result)) = response.get("result") else {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            "The inner service's result is not an object",
        ));
    };
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(Value::Object(legacy::legacy_result(result.clone()))),
        Some(other) => Err(RpcError::new(
            INTERNAL_ERROR,
            &format!(
                "The inner service answered a result of type '{other}', which a 2025 client cannot take"
            ),
        )),
    }
}

/// `initialize`: a new session, answered from the inner service's `server/discover`.
async fn initialize<S, ResBody>(
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
async fn discover<S, ResBody>(
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
    let body = json!({"jsonrpc": "2.0", "id": settings.inner_id(), "method": "server/discover",
        "params": params});
    let request = inner::request(
        parts,
        "server/discover",
        None,
        body.to_string().into_bytes(),
    );
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

/// GET, DELETE (or any method without a JSON-RPC body) naming a session: a GET that takes an
/// event stream gets the session's stream (list changes, resource updates); the `Last-Event-ID`
/// of a GET stream opens a fresh one, as nothing is replayed; that of a POST's stream gets 405,
/// as it cannot be resumed.
async fn without_body<S, ResBody>(
    inner: S,
    settings: Arc<Settings>,
    parts: Parts,
    session: String,
) -> BridgeResponse<ResBody>
where
    S: Wrapped<ResBody>,
    ResBody: InnerBody + Send + 'static,
{
    match lookup(&settings, &parts, &session).await {
        Ok(Some(_)) => {}
        Ok(None) => return session_not_found(),
        Err(error) => return store_failed(&error),
    }
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
    if parts.method == HttpMethod::GET && events::accepts_event_stream(&parts) && !resumes_a_post {
        return listen::open(inner, settings, parts, session);
    }
    let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    response
}

/// `resources/subscribe` and `resources/unsubscribe` of a session: its record keeps the URIs,
/// which its GET stream listens for on the inner service (2026-07-28 has no such requests).
async fn subscription<B>(
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
        match settings.sessions.update(session, record).await {
            Ok(true) => settings.listeners.changed(session),
            Ok(false) => return session_not_found(),
            Err(error) => return store_failed(&error),
        }
    }
    answer_to(id, Ok(json!({})))
}

/// A client's response to a request on a call's stream: handed to the call waiting for it, if
/// any, in this session. 202 either way.
async fn answer<B>(
    settings: &Settings,
    parts: &Parts,
    session: &str,
    message: Map<String, Value>,
) -> BridgeResponse<B> {
    match lookup(settings, parts, session).await {
        Ok(Some(_)) => {}
        Ok(None) => return session_not_found(),
        Err(error) => return store_failed(&error),
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
fn sessionless(version: Option<&str>) -> SessionRecord {
    SessionRecord {
        protocol_version: version.unwrap_or(LEGACY_VERSIONS[2]).to_owned(),
        client_capabilities: json!({}),
        client_info: json!({"name": "unknown", "version": "0"}),
        log_level: None,
        principal: None,
        subscriptions: Vec::new(),
    }
}

/// The keyed tag of the caller's identity: what a session is bound to.
fn principal_tag(settings: &Settings, parts: &Parts) -> Option<String> {
    let callers = &settings.callers;
    callers.tag(callers.principal(parts).as_deref())
}

async fn forward<S, ResBody>(
    mut inner: S,
    parts: Parts,
    bytes: Bytes,
) -> Result<BridgeResponse<ResBody>, S::Error>
where
    S: Service<Request<RequestBody>, Response = Response<ResBody>>,
{
    let request = Request::from_parts(parts, RequestBody::new(bytes));
    let response = inner::call(&mut inner, request).await?;
    Ok(response.map(ResponseBody::inner))
}

/// `Last-Event-ID`: the stream a client takes up again.
const LAST_EVENT_ID: http::header::HeaderName =
    http::header::HeaderName::from_static(crate::wire::mcp::header::LAST_EVENT_ID);

fn header<'a>(parts: &'a Parts, name: &http::header::HeaderName) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

fn session_not_found<B>() -> BridgeResponse<B> {
    refuse(
        ReplyKind::SessionNotFound,
        SESSION_NOT_FOUND,
        "Session not found",
    )
}

fn store_failed<B>(error: &StoreError) -> BridgeResponse<B> {
    tracing::warn!(%error, "the bridge's store failed");
    let message = match error {
        StoreError::Full => "Too many sessions; try again later",
        _ => "The session store is unavailable",
    };
    refuse(ReplyKind::Unavailable, SERVER_ERROR, message)
}

fn accepted<B>() -> BridgeResponse<B> {
    status(StatusCode::ACCEPTED)
}

fn status<B>(status: StatusCode) -> BridgeResponse<B> {
    let mut response = Response::new(ResponseBody::default());
    *response.status_mut() = status;
    response
}

/// An answer in band to the request `id` (HTTP 200): its result, or its error.
fn answer_to<B>(id: &Value, outcome: Result<Value, RpcError>) -> BridgeResponse<B> {
    let message = jsonrpc::response(id, outcome);
    reply(Reply::message(ReplyKind::Answer, &message))
}

/// A refusal of `kind` that names no request (its id `null`): a JSON-RPC error.
fn refuse<B>(kind: ReplyKind, code: i64, message: &str) -> BridgeResponse<B> {
    let message = jsonrpc::response(&Value::Null, Err(RpcError::new(code, message)));
    reply(Reply::message(kind, &message))
}

/// `reply` as the bridge's response: its kind's status, its JSON body.
fn reply<B>(reply: Reply) -> BridgeResponse<B> {
    let mut response = Response::new(ResponseBody::full(reply.body));
    *response.status_mut() = reply.kind.status();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
