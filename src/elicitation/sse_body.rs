//! [`SseBody`]: an inner event stream passed on event by event, the response event rewritten.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame};
use pin_project_lite::pin_project;

use super::shared::Shared;
use crate::engine::tasks::{self, TaskRecord};
use crate::engine::{self, Event, Round};
use crate::token::unix_now;
use crate::util::BoxFuture;
use crate::wire::jsonrpc::Reply;
use crate::wire::sse::{self as parse, Splitter};

/// What an [`SseBody`] needs to rewrite the response event.
pub(crate) struct ResponseRewrite {
    pub(crate) round: Round,
    pub(crate) shared: Arc<Shared>,
}

pin_project! {
    /// An inner event stream passed on event by event. The response event goes through
    /// [`engine::outbound`](fn@engine::outbound); any further response to the same call is dropped (JSON-RPC allows
    /// one, and a second would reach the client unsealed); every other event passes unchanged.
    pub(crate) struct SseBody<B> {
        #[pin]
        inner: B,
        splitter: Splitter,
        pending: VecDeque<Frame<Bytes>>,
        scan: ResponseRewrite,
        responded: bool,
        ended: bool,
        emitted_event: bool,
        first_reply: Option<Reply>,
        first: Option<Frame<Bytes>>,
        // The record of a task the response event created, being written: the event waits for
        // it, so that the client's first `tasks/get` finds the task its own.
        writing: Option<BoxFuture<'static, ()>>,
    }
}

/// Remembers the task `task_id`, created by the call of `round`, as its caller's for `secs`
/// seconds. A failure is logged: the task's answers are then refused (the layer fails closed).
pub(crate) fn remember_created(
    shared: Arc<Shared>,
    round: &Round,
    task_id: String,
    secs: u64,
) -> BoxFuture<'static, ()> {
    let record = TaskRecord::created_by(round.principal.as_deref(), &shared.config).encode();
    Box::pin(async move {
        let until = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
        if let Err(error) = shared.tasks.remember(&task_id, &record, until).await {
            tracing::warn!(
                target: "tower_elicitation",
                %error,
                "cannot remember a task created; its answers will be refused"
            );
        }
    })
}

impl<B: Body<Data = Bytes>> SseBody<B> {
    pub(crate) fn new(inner: B, scan: ResponseRewrite) -> Self {
        Self {
            inner,
            splitter: Splitter::default(),
            pending: VecDeque::new(),
            scan,
            responded: false,
            ended: false,
            emitted_event: false,
            first_reply: None,
            first: None,
            writing: None,
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
            if let Some(writing) = this.writing.as_mut() {
                ready!(writing.as_mut().poll(cx));
                *this.writing = None;
            }
            if let Some(frame) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            let mut events = Events {
                scan: this.scan,
                responded: this.responded,
                emitted_event: this.emitted_event,
                first_reply: this.first_reply,
                pending: this.pending,
                writing: this.writing,
            };
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        this.splitter.push(data);
                        while let Some(event) = this.splitter.next_event() {
                            events.complete(event);
                        }
                    }
                    Err(trailers) => {
                        events.incomplete(this.splitter.take_rest());
                        events.pending.push_back(trailers);
                    }
                },
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    events.incomplete(this.splitter.take_rest());
                    *this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.pending.is_empty() && self.first.is_none()
    }
}

/// What the stream knows while it sorts events.
struct Events<'a> {
    scan: &'a ResponseRewrite,
    responded: &'a mut bool,
    emitted_event: &'a mut bool,
    first_reply: &'a mut Option<Reply>,
    pending: &'a mut VecDeque<Frame<Bytes>>,
    writing: &'a mut Option<BoxFuture<'static, ()>>,
}

impl Events<'_> {
    /// One complete event: as the engine decides.
    fn complete(&mut self, event: parse::Event) {
        let data = event.data();
        let scan = self.scan;
        let event = match engine::event(
            data.as_deref(),
            &scan.round,
            &scan.shared.config,
            unix_now,
            self.responded,
        ) {
            Event::Drop => return,
            Event::Pass => {
                if let Some((task_id, secs)) = data
                    .as_deref()
                    .and_then(|data| tasks::created(data, scan.round.id.as_deref()))
                {
                    *self.writing = Some(remember_created(
                        Arc::clone(&scan.shared),
                        &scan.round,
                        task_id,
                        secs,
                    ));
                }
                event.bytes().clone()
            }
            Event::Replace(reply) => {
                let rewritten = event.with_data(&reply.body);
                if !*self.emitted_event {
                    *self.first_reply = Some(reply);
                }
                rewritten
            }
        };
        *self.emitted_event = true;
        self.pending.push_back(Frame::data(event));
    }

    /// What is left when the stream ends inside an event.
    fn incomplete(&mut self, rest: Bytes) {
        if rest.is_empty() {
            return;
        }
        let data = parse::data(&rest);
        if engine::drops_unterminated(data.as_deref(), &self.scan.round, *self.responded) {
            return;
        }
        self.pending.push_back(Frame::data(rest));
    }
}
