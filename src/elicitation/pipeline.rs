//! The path of `tools/call`, `prompts/get` and `resources/read` through the HTTP adapter: read the
//! call, let the engine decide, call the inner service, let the engine judge its answer, and frame
//! the layer's own replies as HTTP responses.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_LENGTH, HeaderValue};
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;
use tracing::Instrument;

use super::body::{RequestBody, ResponseBody};
use super::framing::{answer, answer_message, forward, rebuild, replace, reply_response};
use super::shared::Shared;
use super::sse_body::{ResponseRewrite, SseBody};
use crate::BoxError;
use crate::engine::tasks::{self};
use crate::engine::{self, Answer, Decided, Intake, Outbound, Probed, Round, SingleUseId};
use crate::gate::{ErasedFlow, GateCall};
use crate::store::Consumed;
use crate::token::unix_now;
use crate::util::BoxFuture;
use crate::util::body::ReadAll;
use crate::util::principal::VerifiedCaller;
use crate::util::time::unix_millis;
use crate::wire::jsonrpc::{Call, Reply};

/// How a body that may name an MRTR method starts down its path: [`handle`], boxed. Chosen in
/// `Service::call`, where the bounds it needs are known, so the response future needs none.
pub(crate) type Start<S, ResBody, E> =
    fn(
        S,
        Arc<Shared>,
        http::request::Parts,
        Bytes,
        Option<u64>,
    ) -> BoxFuture<'static, Result<Response<ResponseBody<ResBody>>, E>>;

/// A body that may name an MRTR method: the engine's intake decides.
pub(crate) async fn handle<S, ReqBody, ResBody>(
    mut inner: S,
    shared: Arc<Shared>,
    parts: http::request::Parts,
    bytes: Bytes,
    framed: Option<u64>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let call = match engine::intake(&bytes) {
        Intake::Call(call) => call,
        Intake::Respond(reply) => return Ok(reply_response(reply)),
        Intake::Task(call) => {
            let span = call_span(call.method.as_str(), &shared, &parts);
            return super::task_path::call_task(inner, shared, parts, &bytes, framed, call)
                .instrument(span)
                .await;
        }
        Intake::Forward => {
            let response = inner.call(forward(parts, bytes.clone(), framed)).await?;
            return Ok(response.map(ResponseBody::inner));
        }
    };
    let span = call_span(call.method.as_str(), &shared, &parts);
    call_mrtr(inner, shared, parts, &bytes, framed, call)
        .instrument(span)
        .await
}

/// The span a call's decision runs in: its `method`, and the caller as [`record_caller`] says.
fn call_span(method: &str, shared: &Shared, parts: &http::request::Parts) -> tracing::Span {
    let span = tracing::debug_span!(
        target: "tower_elicitation",
        "elicitation",
        method,
        caller = tracing::field::Empty,
    );
    record_caller(&span, shared, parts);
    span
}

/// Records on the call's span who the caller is, as the layer tells callers apart: the keyed tag
/// of its principal (never the principal), `-` for an anonymous caller, whichever era and
/// transport it came by. Made only when something listens to the span.
fn record_caller(span: &tracing::Span, shared: &Shared, parts: &http::request::Parts) {
    if span.is_disabled() {
        return;
    }
    let principal = shared.principal.of(parts);
    let tag = principal
        .as_deref()
        .map(|principal| crate::token::session_tag(&shared.config.keyring, principal));
    span.record("caller", tag.as_deref().unwrap_or("-"));
}

/// The path of `tools/call`, `prompts/get` and `resources/read`.
async fn call_mrtr<S, ReqBody, ResBody>(
    mut inner: S,
    shared: Arc<Shared>,
    parts: http::request::Parts,
    bytes: &Bytes,
    framed: Option<u64>,
    call: Call<'_>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let mut parts = parts;
    // The layer must read the answer to seal or refuse it: ask for it unencoded.
    parts
        .headers
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let principal = shared.principal.of(&parts);
    let config = &shared.config;
    let header_version = parts
        .headers
        .get(crate::wire::mcp::header::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    let cx = engine::Context {
        principal: principal.as_deref(),
        caller: parts.extensions.get::<VerifiedCaller>(),
        header_version,
        now: unix_now(),
    };
    let mut effects = HttpEffects {
        service: &mut inner,
        parts: &parts,
        shared: &shared,
        probed: false,
        body: PhantomData,
    };
    let decision = engine::decide(&call, cx, config, &mut effects).await?;
    let probed = effects.probed;
    match decision {
        Decided::Respond(reply) => Ok(reply_response(reply)),
        Decided::Pass(response) => Ok(response),
        Decided::Forward {
            body,
            round,
            answers,
            ..
        } => {
            if let Some(answers) = answers {
                parts.extensions.insert(answers);
            }
            let request = match body {
                Some(body) => rebuild(parts, Bytes::from(body)),
                None => forward(parts, bytes.clone(), framed),
            };
            if probed {
                // The probe took the service the caller polled ready: this is a fresh clone.
                std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            }
            let response = inner.call(request).await?;
            Ok(respond(response, round, Arc::clone(&shared)).await)
        }
    }
}

/// The engine's effects on the world, as the adapter makes them: the probe, read whole, made with
/// the service the caller polled ready (a fresh clone takes its place); the consumption of a
/// single-use id, through the store; the gates' URL flows; the clock.
struct HttpEffects<'p, S, ReqBody> {
    service: &'p mut S,
    parts: &'p http::request::Parts,
    shared: &'p Shared,
    probed: bool,
    body: PhantomData<fn(ReqBody)>,
}

impl<S, ReqBody, ResBody> engine::Effects for HttpEffects<'_, S, ReqBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;

    async fn probe(
        &mut self,
        body: Vec<u8>,
        round: &Round,
    ) -> Result<Probed<Self::Response>, S::Error> {
        let fresh = self.service.clone();
        let mut ready = std::mem::replace(&mut *self.service, fresh);
        if std::mem::replace(&mut self.probed, true) {
            std::future::poll_fn(|cx| ready.poll_ready(cx)).await?;
        }
        let request = rebuild(self.parts.clone(), Bytes::from(body));
        let response = ready.call(request).await?;
        Ok(match read_probe(response, round).await {
            Ok(probe) => Probed::Read {
                message: probe.message,
                response: Response::from_parts(probe.parts, ResponseBody::full(probe.body)),
            },
            Err(reply) => Probed::Failed(reply),
        })
    }

    async fn consume(&mut self, token: &SingleUseId) -> Result<Consumed, String> {
        let Some(store) = &self.shared.tokens else {
            return Err("single-use tokens without a store".to_owned());
        };
        let until = UNIX_EPOCH + Duration::from_secs(token.until);
        store
            .consume(&token.id, until)
            .await
            .map_err(|error| error.to_string())
    }

    async fn epoch(&mut self) -> Result<u64, String> {
        let Some(store) = &self.shared.tokens else {
            return Ok(0);
        };
        let epoch = store.epoch().await.map_err(|error| error.to_string())?;
        Ok(unix_millis(epoch))
    }

    async fn current_epoch(&mut self) -> u64 {
        match &self.shared.tokens {
            Some(store) => self.shared.known_epoch.now(&**store).await,
            None => 0,
        }
    }

    async fn flow_url(
        &mut self,
        flow: &dyn ErasedFlow,
        call: &GateCall<'_>,
    ) -> Result<String, BoxError> {
        flow.url(call).await
    }

    async fn flow_complete(&mut self, flow: &dyn ErasedFlow, call: &GateCall<'_>) -> bool {
        flow.is_complete(call).await
    }

    fn now(&self) -> u64 {
        unix_now()
    }
}

/// The inner service's response to an MRTR call, through [`engine::outbound`](fn@engine::outbound).
async fn respond<B: Body<Data = Bytes>>(
    response: Response<B>,
    round: Round,
    shared: Arc<Shared>,
) -> Response<ResponseBody<B>> {
    match answer(&response) {
        Ok(Answer::PassThrough) => response.map(ResponseBody::inner),
        Err(why) => reply_response(engine::inner_failed(round.id.as_deref(), why)),
        Ok(Answer::Json) => {
            let (parts, body) = response.into_parts();
            let Ok(bytes) = ReadAll::new(body).await else {
                return reply_response(engine::inner_failed(
                    round.id.as_deref(),
                    engine::BODY_FAILED,
                ));
            };
            // Dated when it is sealed: the inner service may have taken its time.
            match engine::outbound(&bytes, &round, &shared.config, unix_now()) {
                Outbound::Unchanged => {
                    remember_created(&bytes, &round, &shared).await;
                    Response::from_parts(parts, ResponseBody::full(bytes))
                }
                Outbound::Replace(reply) => replace(parts, reply),
            }
        }
        Ok(Answer::EventStream) => {
            let (mut parts, body) = response.into_parts();
            let id = round.id.clone();
            let mut sse = Box::pin(SseBody::new(body, ResponseRewrite { round, shared }));
            // Wait for the first event only: when it is the layer's own answer (a refusal with
            // its own status), the client gets that status; otherwise the stream goes on as it is.
            match std::future::poll_fn(|cx| sse.as_mut().poll_frame(cx)).await {
                Some(Ok(first)) => {
                    if let Some(reply) = sse.as_mut().take_first_reply()
                        && !reply.kind.in_band()
                    {
                        return replace(parts, reply);
                    }
                    sse.as_mut().unread(first);
                }
                Some(Err(_)) => {
                    return reply_response(engine::inner_failed(
                        id.as_deref(),
                        engine::BODY_FAILED,
                    ));
                }
                None => {}
            }
            parts.headers.remove(CONTENT_LENGTH);
            Response::from_parts(parts, ResponseBody::sse(sse))
        }
    }
}

/// Remembers the task the inner service's answer `message` to `round` created, if it created
/// one, as its caller's.
async fn remember_created(message: &[u8], round: &Round, shared: &Arc<Shared>) {
    if let Some((task_id, secs)) = tasks::created(message, round.id.as_deref()) {
        super::sse_body::remember_created(Arc::clone(shared), round, task_id, secs).await;
    }
}

struct Probe {
    parts: http::response::Parts,
    body: Bytes,
    /// The response message, when the response is a successful JSON or event-stream answer.
    message: Option<Vec<u8>>,
}

/// Reads a probe's whole response; the layer's reply when its body fails, or when it is a
/// successful answer the layer cannot read.
async fn read_probe<B: Body<Data = Bytes>>(
    response: Response<B>,
    round: &Round,
) -> Result<Probe, Reply> {
    let id = round.id.as_deref();
    let kind = answer(&response).map_err(|why| engine::inner_failed(id, why))?;
    let (parts, body) = response.into_parts();
    let body = ReadAll::new(body)
        .await
        .map_err(|_| engine::inner_failed(id, engine::BODY_FAILED))?;
    let message = answer_message(&body, kind, |data| engine::answers_call(data, round));
    Ok(Probe {
        parts,
        body,
        message,
    })
}
