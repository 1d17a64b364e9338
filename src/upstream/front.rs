//! The adapter's HTTP side: a POSTed JSON-RPC message read and parsed, and its answer given as
//! one JSON message or as an event stream of the call's notifications and then the answer.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use http::{Method as HttpMethod, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::call::{Caller, Front};
use super::core::QUEUE;
use super::pool::Pool;
use super::trace::TraceContext;
use crate::BoxError;
use crate::util::BoxFuture;
use crate::util::body::{parse_strict, read_limited};
use crate::wire::jsonrpc::{self, INVALID_REQUEST, PARSE_ERROR, Reply, ReplyKind, RpcError};
use crate::wire::sse::{self, message_event as event};

opaque_body! {
    /// The body of the adapter's responses: one JSON-RPC message, or (for a client that takes
    /// event streams) an event stream of the call's progress and log notifications and then
    /// the answer. It cannot fail.
    #[derive(Debug, Default)]
    pub struct ResponseBody(inner: Frames) -> Error = Infallible
}

/// What a response body holds: one message in memory, or events as the call sends them.
/// Hand-written (30 lines): `http-body-util`'s `StreamBody` would need a `Stream` of the
/// receiver, which takes a futures crate the library does not otherwise depend on.
#[derive(Debug)]
enum Frames {
    Whole(Full<Bytes>),
    Events(mpsc::Receiver<Bytes>),
}

impl Default for Frames {
    fn default() -> Self {
        Self::Whole(Full::default())
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Whole(body) => Pin::new(body).poll_frame(cx),
            Self::Events(events) => events
                .poll_recv(cx)
                .map(|event| event.map(|e| Ok(Frame::data(e)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Whole(body) => body.is_end_stream(),
            Self::Events(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Whole(body) => body.size_hint(),
            Self::Events(_) => SizeHint::default(),
        }
    }
}

/// Answers one HTTP request to the adapter: a JSON-RPC message in, its answer out as one JSON
/// message or, for a front that takes event streams, as the call's events.
pub(super) async fn serve<B>(pool: Arc<Pool>, request: Request<B>) -> Response<ResponseBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let incoming = match Incoming::read(&pool, request).await {
        Ok(incoming) => incoming,
        Err(refusal) => return refusal,
    };
    if !incoming.streams {
        let (front, message) = incoming.into_call(None);
        return answer(pool.dispatch(front, message).await);
    }
    // An event stream, as rmcp's and the TypeScript SDK's servers answer by default.
    let (notes, noted) = mpsc::channel(QUEUE);
    let (front, message) = incoming.into_call(Some(notes));
    let handled = Box::pin(async move { pool.dispatch(front, message).await });
    as_events(handled, noted).await
}

/// A POSTed message, read and parsed, with what the front's request says of its caller.
struct Incoming {
    caller: Option<Vec<u8>>,
    trace: Option<TraceContext>,
    message: Map<String, Value>,
    /// Whether the front takes an event stream.
    streams: bool,
}

impl Incoming {
    /// Reads `request` within the body limit; the refusal to answer when it is not one JSON-RPC
    /// message POSTed.
    async fn read<B>(pool: &Pool, request: Request<B>) -> Result<Self, Response<ResponseBody>>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if request.method() != HttpMethod::POST {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return Err(response);
        }
        let (parts, body) = request.into_parts();
        let settings = &pool.first().settings;
        let bytes = read_limited(body, settings.max_body_bytes)
            .await
            .map_err(|failed| reply(failed.reply()))?;
        let refuse = |code: i64, message: &str| {
            let body = jsonrpc::response(&Value::Null, Err(RpcError::new(code, message)));
            reply(Reply::message(ReplyKind::BadRequest, &body))
        };
        let message = match parse_strict(&bytes) {
            Ok(Value::Object(message)) => message,
            Ok(Value::Array(_)) => {
                let text = "Invalid Request: batches are not supported";
                return Err(refuse(INVALID_REQUEST, text));
            }
            _ => return Err(refuse(PARSE_ERROR, "Parse error")),
        };
        let streams = sse::accepts(&parts.headers);
        Ok(Self {
            caller: settings.callers.principal(&parts),
            trace: TraceContext::of(&parts.headers),
            message,
            streams,
        })
    }

    /// The call to dispatch, its notifications sent to `notes` when the front streams.
    fn into_call(self, notes: Option<mpsc::Sender<Value>>) -> (Front, Map<String, Value>) {
        let front = Front {
            caller: Caller::Principal(self.caller),
            notes,
            trace: self.trace,
        };
        (front, self.message)
    }
}

/// The call's notifications as they come and its answer as the last event; all in one piece
/// when they come together (and as one JSON answer when there were none and it is a refusal
/// only an HTTP status can say).
async fn as_events(
    mut handled: BoxFuture<'static, Option<Value>>,
    mut noted: mpsc::Receiver<Value>,
) -> Response<ResponseBody> {
    let first = tokio::select! {
        biased;
        response = &mut handled => {
            let Some(response) = response else {
                return answer(None);
            };
            let mut stream = Vec::new();
            while let Ok(note) = noted.try_recv() {
                stream.extend_from_slice(&event(None, &note));
            }
            if stream.is_empty() && !ReplyKind::of_response(&response).in_band() {
                // A capability refusal is HTTP 400, which only a JSON answer can say.
                return answer(Some(response));
            }
            stream.extend_from_slice(&event(None, &response));
            return event_stream(Frames::Whole(Full::new(stream.into())));
        }
        Some(note) = noted.recv() => note,
    };
    let (events, body) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let mut next = Some(first);
        loop {
            // A send fails when the front went away: dropping the call cancels it upstream.
            if let Some(note) = next.take()
                && events.send(event(None, &note)).await.is_err()
            {
                return;
            }
            tokio::select! {
                biased;
                () = events.closed() => return,
                Some(note) = noted.recv() => next = Some(note),
                response = &mut handled => {
                    while let Ok(note) = noted.try_recv() {
                        let _ = events.send(event(None, &note)).await;
                    }
                    if let Some(response) = response {
                        let _ = events.send(event(None, &response)).await;
                    }
                    return;
                }
            }
        }
    });
    event_stream(Frames::Events(body))
}

fn event_stream(frames: Frames) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody { inner: frames });
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The answer to a request as one JSON message (`None`: a notification, 202); a refusal for a
/// capability the client did not declare is HTTP 400, as `ElicitationLayer` answers it.
fn answer(response: Option<Value>) -> Response<ResponseBody> {
    match response {
        Some(response) => reply(Reply::by_code(&response)),
        None => empty(StatusCode::ACCEPTED),
    }
}

/// `reply` as a response: its kind's status, its JSON body.
fn reply(reply: Reply) -> Response<ResponseBody> {
    let mut response = empty(reply.kind.status());
    *response.body_mut() = ResponseBody {
        inner: Frames::Whole(Full::new(reply.body.into())),
    };
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A response of `status` alone, without a body.
fn empty(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::default());
    *response.status_mut() = status;
    response
}
