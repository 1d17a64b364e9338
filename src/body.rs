//! Bodies: what the inner service receives and what the client receives.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

use crate::engine::outbound::{Relation, relation};
use crate::engine::{self, Outbound, Round};
use crate::jsonrpc::Reply;
use crate::layer::Config;
use crate::sse::{self, Splitter};

pin_project! {
    /// The request body the inner service receives: the buffered (possibly rewritten) bytes of a
    /// POST, or the untouched body of any other request.
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestKindProj]
    enum RequestKind<B> {
        Buffered { #[pin] body: Full<Bytes> },
        Untouched { #[pin] body: B },
    }
}

impl<B> RequestBody<B> {
    pub(crate) fn buffered(bytes: Bytes) -> Self {
        Self {
            kind: RequestKind::Buffered {
                body: Full::new(bytes),
            },
        }
    }

    pub(crate) fn untouched(body: B) -> Self {
        Self {
            kind: RequestKind::Untouched { body },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            RequestKindProj::Buffered { body } => body.poll_frame(cx).map_err(never),
            RequestKindProj::Untouched { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Buffered { body } => body.is_end_stream(),
            RequestKind::Untouched { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Buffered { body } => body.size_hint(),
            RequestKind::Untouched { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            RequestKind::Buffered { .. } => "RequestBody::Buffered",
            RequestKind::Untouched { .. } => "RequestBody::Untouched",
        })
    }
}

pin_project! {
    /// The response body the client receives: the layer's own answer, the inner service's body
    /// untouched, or its event stream with the one response event rewritten.
    pub struct ResponseBody<B> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseKindProj]
    enum ResponseKind<B> {
        Full { #[pin] body: Full<Bytes> },
        Inner { #[pin] body: B },
        Sse { body: Pin<Box<SseBody<B>>> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            kind: ResponseKind::Full {
                body: Full::new(bytes.into()),
            },
        }
    }

    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: ResponseKind::Inner { body },
        }
    }

    pub(crate) fn sse(body: Pin<Box<SseBody<B>>>) -> Self {
        Self {
            kind: ResponseKind::Sse { body },
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            ResponseKindProj::Full { body } => body.poll_frame(cx).map_err(never),
            ResponseKindProj::Inner { body } => body.poll_frame(cx),
            ResponseKindProj::Sse { body } => body.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Full { body } => body.is_end_stream(),
            ResponseKind::Inner { body } => body.is_end_stream(),
            ResponseKind::Sse { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Full { body } => body.size_hint(),
            ResponseKind::Inner { body } => body.size_hint(),
            ResponseKind::Sse { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            ResponseKind::Full { .. } => "ResponseBody::Full",
            ResponseKind::Inner { .. } => "ResponseBody::Inner",
            ResponseKind::Sse { .. } => "ResponseBody::Sse",
        })
    }
}

/// What an [`SseBody`] needs to rewrite the response event.
pub(crate) struct Scan {
    pub(crate) round: Round,
    pub(crate) config: Arc<Config>,
    pub(crate) now: u64,
}

pin_project! {
    /// An inner event stream passed on event by event until the response event, which goes
    /// through [`engine::outbound`]; after it, bytes pass straight through.
    pub(crate) struct SseBody<B> {
        #[pin]
        inner: B,
        splitter: Splitter,
        pending: VecDeque<Frame<Bytes>>,
        scan: Option<Box<Scan>>,
        ended: bool,
        emitted_event: bool,
        first_reply: Option<Reply>,
        first: Option<Frame<Bytes>>,
    }
}

impl<B: Body<Data = Bytes>> SseBody<B> {
    pub(crate) fn new(inner: B, scan: Scan) -> Self {
        Self {
            inner,
            splitter: Splitter::default(),
            pending: VecDeque::new(),
            scan: Some(Box::new(scan)),
            ended: false,
            emitted_event: false,
            first_reply: None,
            first: None,
        }
    }

    /// The layer's own reply, when it is the stream's first event.
    pub(crate) fn take_first_reply(self: Pin<&mut Self>) -> Option<Reply> {
        self.project().first_reply.take()
    }

    /// Puts a frame that was read back at the front, to be sent first.
    pub(crate) fn unread(self: Pin<&mut Self>, first: Frame<Bytes>) {
        *self.project().first = Some(first);
    }
}

impl<B: Body<Data = Bytes>> Body for SseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        loop {
            if let Some(frame) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if this.scan.is_none() && this.splitter.is_empty() => {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(data) => {
                        this.splitter.push(&data);
                        while this.scan.is_some() {
                            let Some(event) = this.splitter.next_event() else {
                                break;
                            };
                            let event = rewrite_event(
                                event,
                                this.scan,
                                *this.emitted_event,
                                this.first_reply,
                            );
                            *this.emitted_event = true;
                            this.pending.push_back(Frame::data(event));
                        }
                        if this.scan.is_none() && !this.splitter.is_empty() {
                            let rest = this.splitter.take_rest();
                            this.pending.push_back(Frame::data(rest));
                        }
                    }
                    Err(other) => {
                        if !this.splitter.is_empty() {
                            this.pending
                                .push_back(Frame::data(this.splitter.take_rest()));
                        }
                        this.pending.push_back(other);
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    // A stream that ends inside an event: pass on what came, unchanged.
                    if !this.splitter.is_empty() {
                        this.pending
                            .push_back(Frame::data(this.splitter.take_rest()));
                    }
                    *this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.pending.is_empty() && self.first.is_none()
    }
}

/// One complete event: the response event goes through the engine, any other is kept.
fn rewrite_event(
    event: Bytes,
    scan: &mut Option<Box<Scan>>,
    emitted_before: bool,
    first_reply: &mut Option<Reply>,
) -> Bytes {
    let Some(state) = scan.as_deref() else {
        return event;
    };
    let Some(data) = sse::data(&event) else {
        return event;
    };
    if let Relation::Other = relation(&data, &state.round) {
        return event;
    }
    let outcome = engine::outbound(&data, &state.round, &state.config, state.now);
    *scan = None;
    match outcome {
        Outbound::Unchanged => event,
        Outbound::Replace(reply) => {
            let event = sse::replace_data(&event, &reply.body);
            if !emitted_before {
                *first_reply = Some(reply);
            }
            event
        }
    }
}

fn never<E>(e: Infallible) -> E {
    match e {}
}
