//! The event streams the bridge serves a 2025-era client: a call's stream, a plain request's
//! answer, the session's GET stream. Each event carries an id. A stream to a 2025-11-25 client
//! opens with a priming event (an id, a `retry` and empty `data`), as 2025-11-25 servers SHOULD
//! (SEP-1699); one to an older client does not, as the TypeScript SDK's server does: those
//! versions have no priming, and their clients read an empty `data` as a broken message (Python
//! `mcp` 1.10, speaking 2025-06-18, logs "Error parsing SSE message" for each).
//!
//! An id is `<kind><stream>.<n>`: `g` for a session's GET stream or `p` for a POST's, the stream's
//! 64 random bits in hex, then the event's number in it, so a `Last-Event-ID` names the kind of
//! stream, the stream and how far the client read. The bridge does not replay a stream, which the
//! spec allows. A GET stream carries only notifications, so a GET with the `Last-Event-ID` of one
//! opens a fresh GET stream (the client keeps its notifications after a dropped connection). A
//! POST's stream cannot be resumed (its call ended when it closed, so nothing is left to send): a
//! GET with the `Last-Event-ID` of one is answered 405, as the spec has a server that offers no
//! stream for it answer.
//!
//! Hand-written: the few lines of SSE framing here are smaller than a dependency, and the events
//! go out through the same channel body as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use super::body::ResponseBody;
use crate::util::ids::random_hex_64;
use crate::wire::legacy::before_2025_11_25;
use crate::wire::sse::message_event;

/// The reconnection delay the bridge asks for in its priming events.
pub(crate) const RETRY: Duration = Duration::from_secs(3);

/// The sending half of one event stream toward the client.
#[derive(Debug)]
pub(crate) struct EventSender {
    events: mpsc::Sender<Bytes>,
    stream: String,
    next: AtomicU64,
}

/// Which stream an event id belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// A session's GET stream: notifications only.
    Get,
    /// The answer to a POST.
    Post,
}

impl StreamKind {
    fn prefix(self) -> char {
        match self {
            Self::Get => 'g',
            Self::Post => 'p',
        }
    }

    /// The kind of stream a `Last-Event-ID` names, if it is one of the bridge's ids.
    pub(crate) fn of_event_id(id: &str) -> Option<Self> {
        match id.as_bytes().first() {
            Some(b'g') => Some(Self::Get),
            Some(b'p') => Some(Self::Post),
            _ => None,
        }
    }
}

impl EventSender {
    /// A new stream of `kind` to a client at protocol `version`, and the response that carries
    /// it; its priming event already queued unless the client predates them
    /// ([`before_2025_11_25`]).
    pub(crate) fn open<B>(kind: StreamKind, version: &str) -> (Self, Response<ResponseBody<B>>) {
        let (events, stream) = mpsc::channel(16);
        let sender = Self {
            events,
            stream: format!("{}{}", kind.prefix(), random_hex_64()),
            next: AtomicU64::new(0),
        };
        if !before_2025_11_25(version) {
            let priming = format!(
                "id: {}\nretry: {}\ndata: \n\n",
                sender.next_id(),
                RETRY.as_millis()
            );
            // The channel is new and empty: the first event always fits.
            let _ = sender.events.try_send(Bytes::from(priming));
        }
        (sender, event_stream_response(ResponseBody::stream(stream)))
    }

    fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}.{n}", self.stream)
    }

    /// Sends one JSON-RPC message as an event with the next id; a client gone is not an error.
    pub(crate) async fn send(&self, message: &Value) {
        let event = message_event(Some(&self.next_id()), message);
        let _ = self.events.send(event).await;
    }

    /// Sends a comment, which keeps idle connections open.
    pub(crate) async fn keep_alive(&self) {
        let _ = self.events.send(Bytes::from_static(b":\n\n")).await;
    }

    /// Resolves when the client has dropped the stream.
    pub(crate) async fn closed(&self) {
        self.events.closed().await;
    }
}

/// The head of an event-stream response around `body`.
pub(crate) fn event_stream_response<B>(body: ResponseBody<B>) -> Response<ResponseBody<B>> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// The whole text of a stream of `kind` to a client at `version` that carried one message.
    async fn one_message_stream(kind: StreamKind, version: &str) -> String {
        let (sender, response) = EventSender::open::<http_body_util::Empty<Bytes>>(kind, version);
        sender.send(&serde_json::json!({"jsonrpc": "2.0"})).await;
        drop(sender);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_stream_opens_with_a_priming_event_and_numbers_its_events() {
        let text = one_message_stream(StreamKind::Post, "2025-11-25").await;
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 2, "{text}");
        let (priming, message) = (events[0], events[1]);
        let stream = priming
            .strip_prefix("id: ")
            .and_then(|rest| rest.split('.').next())
            .unwrap();
        assert_eq!(stream.len(), 17);
        assert_eq!(StreamKind::of_event_id(stream), Some(StreamKind::Post));
        assert!(priming.ends_with(&format!("retry: {}\ndata: ", RETRY.as_millis())));
        assert!(message.starts_with(&format!("id: {stream}.1\nevent: message\ndata: {{")));
    }

    #[tokio::test]
    async fn a_stream_to_an_older_client_has_no_priming_event() {
        for version in ["2025-06-18", "2025-03-26"] {
            let text = one_message_stream(StreamKind::Get, version).await;
            let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
            assert_eq!(events.len(), 1, "{version}: {text}");
            assert!(events[0].starts_with("id: g"), "{text}");
            assert!(events[0].contains(".0\nevent: message\ndata: {"), "{text}");
            assert!(!text.contains("retry:"), "{text}");
        }
    }
}
