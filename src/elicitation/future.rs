//! [`ResponseFuture`]: reads the request body, then forwards it or takes the MRTR path.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{LengthLimitError, Limited};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::{RequestBody, ResponseBody};
use super::shared::Shared;
use super::{framing, pipeline};
use crate::BoxError;
use crate::engine;
use crate::util::BoxFuture;
use crate::util::body::ReadAll;

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
            mrtr: pipeline::Start<S, ResBody, S::Error>,
        },
        /// The inner service has the request as it came.
        Forwarding {
            #[pin]
            future: S::Future,
        },
        /// Everything else: one of the three MRTR methods, or a body that needs a closer look.
        Boxed {
            future: BoxFuture<'static, Result<Response<ResponseBody<ResBody>>, S::Error>>,
        },
        /// The layer's own answer.
        Ready {
            response: Option<Response<ResponseBody<ResBody>>>,
        },
    }
}

/// What the request is waiting with while its body is read.
pub(crate) struct Pending<S> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared>,
    pub(crate) parts: http::request::Parts,
    /// The body length the headers declare, when they declare exactly one and no other framing.
    pub(crate) framed: Option<u64>,
}

impl<S, ReqBody, ResBody> ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ReqBody: Body,
    ReqBody::Error: Into<BoxError>,
{
    /// The inner service has the request as it came.
    pub(crate) fn forwarding(future: S::Future) -> Self {
        Self {
            state: State::Forwarding { future },
        }
    }

    /// The layer's own answer, made before the body was read.
    pub(crate) fn ready(response: Response<ResponseBody<ResBody>>) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    /// The body is read first, with `pending` waiting; a body that may name an MRTR method then
    /// goes down `mrtr`.
    pub(crate) fn reading(
        read: ReadAll<Limited<ReqBody>>,
        pending: Pending<S>,
        mrtr: pipeline::Start<S, ResBody, S::Error>,
    ) -> Self {
        Self {
            state: State::Reading {
                read,
                pending: Some(pending),
                mrtr,
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>,
    ReqBody: Body<Data = Bytes>,
    ReqBody::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Reading {
                    read,
                    pending,
                    mrtr,
                } => {
                    let read = ready!(read.poll(cx));
                    let Some(Pending {
                        mut inner,
                        shared,
                        parts,
                        framed,
                    }) = pending.take()
                    else {
                        panic!("ResponseFuture polled after completion");
                    };
                    match read {
                        Err(e) if e.is::<LengthLimitError>() => State::Ready {
                            response: Some(framing::reply_response(engine::too_large())),
                        },
                        Err(_) => State::Ready {
                            response: Some(framing::reply_response(engine::unreadable())),
                        },
                        Ok(bytes) => {
                            if engine::passes_unread(&bytes) {
                                State::Forwarding {
                                    future: inner.call(framing::forward(parts, bytes, framed)),
                                }
                            } else {
                                State::Boxed {
                                    future: mrtr(inner, shared, parts, bytes, framed),
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
