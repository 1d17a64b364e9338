//! [`LegacyBridge`]: tells the eras apart and routes each request: the 2025 handshake
//! ([`handshake`](super::handshake)), sessions ([`sessions`](super::sessions)) and utilities
//! ([`utilities`](super::utilities)) are answered by the bridge, the three MRTR methods go through
//! the [`rounds`], the rest is forwarded ([`forward`](super::forward)).

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Method as HttpMethod, Request, Response};
use http_body::Body;
use serde_json::{Map, Value, json};
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::config::Settings;
use super::forward::forward_once;
use super::future::ResponseFuture;
use super::handshake::initialize;
use super::inner::{self, InnerBody, PROTOCOL_VERSION, SESSION_ID, Wrapped, header};
use super::replies::{BridgeResponse, answer_to, refuse, reply};
use super::rounds::{self, BridgedCall};
use super::sessions::{legacy_session, sessionless, without_body};
use super::utilities::{answer, notification, set_log_level, subscription};
use crate::BoxError;
use crate::store::SessionRecord;
use crate::util::body::{parse_strict, read_limited};
use crate::wire::jsonrpc::{INVALID_REQUEST, PARSE_ERROR, ReplyKind};
use crate::wire::legacy::{self, Client, LEGACY_VERSIONS};
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
        let version = &record.protocol_version;
        forward_once(inner, &settings, &parts, version, method, &id, modern).await
    }

    /// Forwards the message as it came: it is not the bridge's to answer.
    async fn forward<ResBody>(self) -> Result<BridgeResponse<ResBody>, S::Error>
    where
        S: Service<Request<RequestBody>, Response = Response<ResBody>>,
    {
        forward(self.inner, self.parts, self.bytes).await
    }
}

/// Forwards the request as it came: it is not the bridge's to answer.
pub(super) async fn forward<S, ResBody>(
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
