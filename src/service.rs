//! [`Elicitation`]: the HTTP service. It moves bytes; the engine decides.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{
    ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING,
};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use pin_project_lite::pin_project;
use tower_service::Service;
use tracing::Instrument;

use crate::body::{ReadAll, RequestBody, ResponseBody, Scan, SseBody};
use crate::engine::outbound::answers_call;
use crate::engine::{
    self, FlowFacts, FlowNeed, FlowQuery, Inbound, Intake, Outbound, Round, Settle,
};
use crate::gate::{GateCall, GateKind};
use crate::jsonrpc::{Call, Reply};
use crate::layer::{Config, ElicitationLayer};
use crate::sse;
use crate::state::Keyring;
use crate::state::token::unix_now;

use crate::BoxError;

/// The service [`ElicitationLayer`] wraps around an MCP Streamable HTTP service.
///
/// Its own answers (bad `requestState`, re-asks, refusals, 413) are HTTP responses; `Err` only
/// ever comes from the inner service.
///
/// See the [crate docs](crate) for an example.
#[derive(Clone)]
pub struct Elicitation<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> Elicitation<S> {
    /// Wraps `inner` with every option at its default; see [`ElicitationLayer`] for options.
    pub fn new(inner: S, keyring: Keyring) -> Self {
        tower_layer::Layer::layer(&ElicitationLayer::new(keyring), inner)
    }

    /// The layer, to configure and apply with `ServiceBuilder` or `Router::layer`.
    pub fn layer(keyring: Keyring) -> ElicitationLayer {
        ElicitationLayer::new(keyring)
    }

    pub(crate) fn from_config(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Elicitation<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elicitation")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Elicitation<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was driven to readiness goes into the future; a fresh clone stays.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        // MCP sends JSON-RPC in POSTs, but an inner service may ignore the HTTP method: a body is
        // judged the same in every method. Only a request with no body at all passes untouched.
        let body = request.body();
        if request.method() != http::Method::POST
            && (body.is_end_stream() || body.size_hint().exact() == Some(0))
        {
            let future = inner.call(request.map(RequestBody::untouched));
            return ResponseFuture::new(State::Forwarding { future });
        }
        let (parts, body) = request.into_parts();
        let mut lengths = parts.headers.get_all(CONTENT_LENGTH).iter();
        let content_length = lengths
            .next()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // The length the headers give the body, if they give exactly one and no other framing.
        let framed = content_length
            .filter(|_| lengths.next().is_none() && !parts.headers.contains_key(TRANSFER_ENCODING));
        let head = engine::Head {
            content_encoding: parts
                .headers
                .get(CONTENT_ENCODING)
                .map(HeaderValue::as_bytes),
            content_length,
        };
        if let Some(reply) = engine::refuse_unread(head, self.config.max_body_bytes) {
            return ResponseFuture::new(State::Ready {
                response: Some(reply_response(reply)),
            });
        }
        ResponseFuture::new(State::Reading {
            read: ReadAll::new(Limited::new(body, self.config.max_body_bytes)),
            pending: Some(Pending {
                inner,
                config: self.config.clone(),
                parts,
                framed,
            }),
        })
    }
}

pin_project! {
    /// The future of [`Elicitation`]'s response.
    ///
    /// A request that names no MRTR method is read and handed to the inner service without a
    /// heap allocation of the layer's own; the three MRTR methods take a boxed path.
    ///
    /// # Panics
    ///
    /// When polled again after it completed, as futures may.
    pub struct ResponseFuture<S, ReqBody, ResBody>
    where
        S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
        ReqBody: Body,
        ReqBody::Error: Into<BoxError>,
    {
        #[pin]
        state: State<S, ReqBody, ResBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody, ResBody>
    where
        S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
        ReqBody: Body,
        ReqBody::Error: Into<BoxError>,
    {
        /// Reading the request body.
        Reading {
            #[pin]
            read: ReadAll<Limited<ReqBody>>,
            pending: Option<Pending<S>>,
        },
        /// The inner service has the request as it came.
        Forwarding {
            #[pin]
            future: S::Future,
        },
        /// Everything else: one of the three MRTR methods, or a body that needs a closer look.
        Boxed {
            future: BoxFuture<Result<Response<ResponseBody<ResBody>>, S::Error>>,
        },
        /// The layer's own answer.
        Ready {
            response: Option<Response<ResponseBody<ResBody>>>,
        },
    }
}

/// What the request is waiting with while its body is read.
struct Pending<S> {
    inner: S,
    config: Arc<Config>,
    parts: http::request::Parts,
    /// The body length the headers declare, when they declare exactly one and no other framing.
    framed: Option<u64>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    fn new(state: State<S, ReqBody, ResBody>) -> Self {
        Self { state }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Send,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Reading { read, pending } => {
                    let read = ready!(read.poll(cx));
                    let Some(Pending {
                        mut inner,
                        config,
                        parts,
                        framed,
                    }) = pending.take()
                    else {
                        panic!("ResponseFuture polled after completion");
                    };
                    match read {
                        Err(e) if e.is::<LengthLimitError>() => State::Ready {
                            response: Some(reply_response(engine::too_large())),
                        },
                        Err(_) => State::Ready {
                            response: Some(reply_response(engine::unreadable())),
                        },
                        Ok(bytes) => {
                            if engine::passes_unread(&bytes) {
                                State::Forwarding {
                                    future: inner.call(forward(parts, bytes, framed)),
                                }
                            } else {
                                State::Boxed {
                                    future: Box::pin(handle(inner, config, parts, bytes, framed)),
                                }
                            }
                        }
                    }
                }
                StateProj::Forwarding { future } => {
                    return future
                        .poll(cx)
                        .map(|result| result.map(|response| response.map(ResponseBody::inner)));
                }
                StateProj::Boxed { future } => return future.as_mut().poll(cx),
                StateProj::Ready { response } => match response.take() {
                    Some(response) => return Poll::Ready(Ok(response)),
                    None => panic!("ResponseFuture polled after completion"),
                },
            };
            state.set(next);
        }
    }
}

impl<S, ReqBody, ResBody> std::fmt::Debug for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

/// A body that may name an MRTR method: the engine's intake decides.
async fn handle<S, ReqBody, ResBody>(
    mut inner: S,
    config: Arc<Config>,
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
        Intake::Forward => {
            let response = inner.call(forward(parts, bytes.clone(), framed)).await?;
            return Ok(response.map(ResponseBody::inner));
        }
    };
    let span = tracing::debug_span!(
        target: "tower_elicitation",
        "elicitation",
        method = call.method.as_str()
    );
    call_mrtr(inner, config, parts, &bytes, framed, call)
        .instrument(span)
        .await
}

/// The path of `tools/call`, `prompts/get` and `resources/read`.
async fn call_mrtr<S, ReqBody, ResBody>(
    mut inner: S,
    config: Arc<Config>,
    parts: http::request::Parts,
    bytes: &Bytes,
    framed: Option<u64>,
    call: Call<'_>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    let id = call.id;
    let mut parts = parts;
    // The layer must read the answer to seal or refuse it: ask for it unencoded.
    parts
        .headers
        .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let principal = config.principal.of(&parts);
    let header_version = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    let mut cx = engine::Context {
        principal: principal.as_deref(),
        header_version,
        now: unix_now(),
    };
    let mut flows = FlowFacts::default();
    let mut decision = engine::inbound(&call, cx, &config, &flows);
    // A URL gate's flow is asked asynchronously, then the engine decides again. Each gate needs
    // at most its URL or its completion, so this settles in a few passes.
    for _ in 0..3 {
        let Inbound::CheckFlows(queries) = &decision else {
            break;
        };
        for query in queries {
            if let Err(reply) = check_flow(&config, query, &mut flows, call.id).await {
                return Ok(reply_response(reply));
            }
        }
        // A flow may take its time to answer: what the engine seals now is dated now.
        cx.now = unix_now();
        decision = engine::inbound(&call, cx, &config, &flows);
    }
    match decision {
        Inbound::Respond(reply) => Ok(reply_response(reply)),
        Inbound::CheckFlows(_) => {
            tracing::warn!(target: "tower_elicitation", "URL flow checks did not settle");
            let reply = Reply::internal(id);
            Ok(reply_response(reply))
        }
        Inbound::Forward {
            body,
            round,
            answers,
        } => {
            if let Some(answers) = answers {
                parts.extensions.insert(answers);
            }
            let request = match body {
                Some(body) => rebuild(parts, Bytes::from(body)),
                None => forward(parts, bytes.clone(), framed),
            };
            let response = inner.call(request).await?;
            Ok(respond(response, round, config).await)
        }
        Inbound::Probe {
            body,
            round,
            answers,
        } => {
            let mut spare = inner.clone();
            let response = inner
                .call(rebuild(parts.clone(), Bytes::from(body)))
                .await?;
            let probe = match read_probe(response, &round).await {
                Ok(probe) => probe,
                Err(reply) => return Ok(reply_response(reply)),
            };
            let Some(message) = probe.message else {
                return Ok(Response::from_parts(
                    probe.parts,
                    ResponseBody::full(probe.body),
                ));
            };
            match engine::settle_probe(&message, round, &call, &answers, &config, unix_now()) {
                Settle::Respond(Outbound::Unchanged) => Ok(Response::from_parts(
                    probe.parts,
                    ResponseBody::full(probe.body),
                )),
                Settle::Respond(Outbound::Replace(reply)) => Ok(reply_response(reply)),
                Settle::Forward { body, round } => {
                    std::future::poll_fn(|cx| spare.poll_ready(cx)).await?;
                    let response = spare.call(rebuild(parts, Bytes::from(body))).await?;
                    Ok(respond(response, round, config).await)
                }
            }
        }
    }
}

/// Asks a gate's URL flow what the engine needs to know.
async fn check_flow(
    config: &Config,
    query: &FlowQuery,
    flows: &mut FlowFacts,
    id: Option<&serde_json::value::RawValue>,
) -> Result<(), Reply> {
    let Some((_, gate)) = config.gates.get(query.gate) else {
        return Err(Reply::internal(id));
    };
    let GateKind::Url { flow } = &gate.kind else {
        return Err(Reply::internal(id));
    };
    let call = GateCall {
        method: query.method.as_str(),
        target: &query.target,
        arguments: &query.arguments,
        handle: &query.handle,
        principal: query.principal.as_deref(),
    };
    match query.need {
        FlowNeed::Url => match flow.url(&call).await {
            Ok(url) => {
                flows.urls.insert(gate.key.clone(), url);
            }
            Err(error) => {
                tracing::warn!(
                    target: "tower_elicitation",
                    gate = %gate.key,
                    %error,
                    "a URL flow could not give its URL"
                );
                return Err(Reply::internal(id));
            }
        },
        FlowNeed::Completion => {
            let complete = flow.is_complete(&call).await;
            flows.complete.insert(gate.key.clone(), complete);
        }
    }
    Ok(())
}

/// The request for the inner service with the original `body`: under its original headers when
/// they describe it (`framed`: one `Content-Length`, equal to its length, and no
/// `Transfer-Encoding`), else as [`rebuild`] makes them.
fn forward<B>(
    parts: http::request::Parts,
    body: Bytes,
    framed: Option<u64>,
) -> Request<RequestBody<B>> {
    if framed == Some(body.len() as u64) {
        Request::from_parts(parts, RequestBody::buffered(body))
    } else {
        rebuild(parts, body)
    }
}

/// The request for the inner service, with `body` and a matching `Content-Length`.
fn rebuild<B>(mut parts: http::request::Parts, body: Bytes) -> Request<RequestBody<B>> {
    // The body is now a buffer of known length: a `Transfer-Encoding` beside the new
    // `Content-Length` would let a proxying inner service frame it two ways.
    parts.headers.remove(TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    Request::from_parts(parts, RequestBody::buffered(body))
}

/// What a successful answer to an MRTR call is, as far as the layer can read it.
enum Payload {
    Json,
    EventStream,
}

/// The payload of a successful answer to an MRTR call, or why the layer cannot read it: it must
/// see every `input_required`, so an encoded answer or one of another type is never passed on.
fn payload(headers: &http::HeaderMap) -> Result<Payload, &'static str> {
    if headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .any(|encoding| !encoding.as_bytes().eq_ignore_ascii_case(b"identity"))
    {
        return Err("the inner service encoded its answer (Content-Encoding)");
    }
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .ok_or("the inner service's answer has no readable Content-Type")?;
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(Payload::Json)
    } else if essence.eq_ignore_ascii_case("text/event-stream") {
        Ok(Payload::EventStream)
    } else {
        Err("the inner service answered with a Content-Type the layer cannot read")
    }
}

/// The inner service's response to an MRTR call, through [`engine::outbound`](fn@engine::outbound).
async fn respond<B: Body<Data = Bytes>>(
    response: Response<B>,
    round: Round,
    config: Arc<Config>,
) -> Response<ResponseBody<B>> {
    if !response.status().is_success() {
        return response.map(ResponseBody::inner);
    }
    match payload(response.headers()) {
        Err(why) => reply_response(engine::inner_unreadable(round.id.as_deref(), why)),
        Ok(Payload::Json) => {
            let (parts, body) = response.into_parts();
            let Ok(bytes) = ReadAll::new(body).await else {
                return reply_response(engine::inner_body_failed(round.id.as_deref()));
            };
            // Dated when it is sealed: the inner service may have taken its time.
            match engine::outbound(&bytes, &round, &config, unix_now()) {
                Outbound::Unchanged => Response::from_parts(parts, ResponseBody::full(bytes)),
                Outbound::Replace(reply) => replace(parts, reply),
            }
        }
        Ok(Payload::EventStream) => {
            let (mut parts, body) = response.into_parts();
            let id = round.id.clone();
            let mut sse = Box::pin(SseBody::new(body, Scan { round, config }));
            // Wait for the first event only: when it is the layer's own answer (a refusal with
            // its own status), the client gets that status; otherwise the stream goes on as it is.
            match sse.frame().await {
                Some(Ok(first)) => {
                    if let Some(reply) = sse.as_mut().take_first_reply()
                        && reply.status != 200
                    {
                        return replace(parts, reply);
                    }
                    sse.as_mut().unread(first);
                }
                Some(Err(_)) => return reply_response(engine::inner_body_failed(id.as_deref())),
                None => {}
            }
            parts.headers.remove(CONTENT_LENGTH);
            Response::from_parts(parts, ResponseBody::sse(sse))
        }
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
    let kind = if response.status().is_success() {
        Some(payload(response.headers()).map_err(|why| engine::inner_unreadable(id, why))?)
    } else {
        None
    };
    let (parts, body) = response.into_parts();
    let body = ReadAll::new(body)
        .await
        .map_err(|_| engine::inner_body_failed(id))?;
    let message = match kind {
        Some(Payload::Json) => Some(body.to_vec()),
        Some(Payload::EventStream) => sse::events(&body)
            .iter()
            .filter_map(|event| sse::data(event).map(std::borrow::Cow::into_owned))
            .find(|data| answers_call(data, round)),
        None => None,
    };
    Ok(Probe {
        parts,
        body,
        message,
    })
}

/// A response made of the layer's own reply, keeping the inner response's other headers.
fn replace<B>(mut parts: http::response::Parts, reply: Reply) -> Response<ResponseBody<B>> {
    parts.status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(reply.body.len()));
    Response::from_parts(parts, ResponseBody::full(reply.body))
}

fn reply_response<B>(reply: Reply) -> Response<ResponseBody<B>> {
    let (parts, ()) = Response::new(()).into_parts();
    replace(parts, reply)
}
