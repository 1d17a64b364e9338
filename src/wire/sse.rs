//! Incremental Server-Sent Events parsing, for finding and rewriting one event in a stream.
//!
//! Events end at an empty line; lines end with `\r\n`, `\n` or `\r`. Only what is needed to find
//! an event's `data` is parsed: every other byte of every event is kept as it came.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

/// Splits a byte stream into complete events, remembering how far it has looked so that a large
/// event arriving in many small chunks is scanned once.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned.
    scanned: usize,
    /// Where the current line starts.
    line_start: usize,
}

impl Splitter {
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, terminator included.
    pub(crate) fn next_event(&mut self) -> Option<Bytes> {
        let buf = &self.buf[..];
        let mut i = self.scanned;
        while i < buf.len() {
            // Jump to the next line break.
            let Some(at) = memchr::memchr2(b'\n', b'\r', &buf[i..]) else {
                i = buf.len();
                break;
            };
            i += at;
            let terminator = match buf[i] {
                b'\r' => match buf.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A lone `\r` at the end may be half of `\r\n`: wait for the next byte.
                    None => break,
                },
                _ => 1,
            };
            let empty_line = i == self.line_start;
            i += terminator;
            self.line_start = i;
            if empty_line {
                let event = self.buf.split_to(i).freeze();
                self.scanned = 0;
                self.line_start = 0;
                return Some(event);
            }
        }
        self.scanned = i;
        None
    }

    /// Everything not yet returned as an event.
    pub(crate) fn take_rest(&mut self) -> Bytes {
        self.scanned = 0;
        self.line_start = 0;
        self.buf.split().freeze()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// How many bytes wait to be returned as an event.
    #[cfg_attr(not(feature = "upstream-http"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }
}

/// The event's `data`, its `data:` lines joined by `\n` (borrowed when there is one line);
/// `None` when it has none.
pub(crate) fn data(event: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut data: Option<Cow<'_, [u8]>> = None;
    for line in lines(event) {
        let value = if line == b"data" {
            &b""[..]
        } else if let Some(value) = line.strip_prefix(b"data:") {
            value.strip_prefix(b" ").unwrap_or(value)
        } else {
            continue;
        };
        match &mut data {
            Some(joined) => {
                let joined = joined.to_mut();
                joined.push(b'\n');
                joined.extend_from_slice(value);
            }
            None => data = Some(Cow::Borrowed(value)),
        }
    }
    data
}

/// The event with its `data` replaced by `json` (which has no line breaks); other fields kept.
pub(crate) fn replace_data(event: &[u8], json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + 32);
    for line in lines(event) {
        if line == b"data" || line.starts_with(b"data:") || line.is_empty() {
            continue;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Whether a request's `Accept` headers take an event stream (`text/event-stream`, by media
/// type: any case, any parameters).
pub(crate) fn accepts(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| {
            kind.split(';')
                .next()
                .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// One JSON-RPC message as an event of a stream (`event: message`), as the upstream adapter sends
/// them (the bridge numbers its events: `bridge::events`).
#[cfg_attr(not(feature = "upstream"), allow(dead_code))]
pub(crate) fn message_event(message: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// The events of a complete stream, with anything after the last complete event as a final,
/// unterminated piece.
pub(crate) fn events(stream: &[u8]) -> Vec<Bytes> {
    let mut splitter = Splitter::default();
    splitter.push(stream);
    let mut events = Vec::new();
    while let Some(event) = splitter.next_event() {
        events.push(event);
    }
    if !splitter.is_empty() {
        events.push(splitter.take_rest());
    }
    events
}

fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = event;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr2(b'\n', b'\r', rest);
        let (line, next) = match end {
            None => (rest, &b""[..]),
            Some(i) if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') => {
                (&rest[..i], &rest[i + 2..])
            }
            Some(i) => (&rest[..i], &rest[i + 1..]),
        };
        rest = next;
        Some(line)
    })
}

/// Feeds `chunks` to a [`Splitter`]: the complete events in order, and what is left after the
/// last one.
#[cfg(any(test, feature = "__fuzz"))]
pub(crate) fn split_all(chunks: &[&[u8]]) -> (Vec<Bytes>, Bytes) {
    let mut splitter = Splitter::default();
    let mut events = Vec::new();
    for chunk in chunks {
        splitter.push(chunk);
        while let Some(event) = splitter.next_event() {
            events.push(event);
        }
    }
    (events, splitter.take_rest())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_every_line_ending() {
        let stream = b"data: a\n\nid: 1\r\ndata: b\r\n\r\ndata: c\r\rdata: d";
        let (events, rest) = split_all(&[stream]);
        assert_eq!(
            events,
            [
                &b"data: a\n\n"[..],
                b"id: 1\r\ndata: b\r\n\r\n",
                b"data: c\r\r"
            ]
        );
        assert_eq!(&rest[..], b"data: d");
    }

    #[test]
    fn the_same_events_come_out_of_any_chunking() {
        let stream: &[u8] =
            b"event: message\ndata: {\"a\":1}\n\n: keep-alive\r\n\r\ndata: x\r\ndata: y\r\n\r\n";
        let (whole, _) = split_all(&[stream]);
        for size in 1..stream.len() {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            let (events, rest) = split_all(&chunks);
            assert_eq!(events, whole, "chunk size {size}");
            assert!(rest.is_empty());
        }
        // A `\r` then `\n` in the next chunk is one line ending, not two.
        let (events, _) = split_all(&[b"data: a\r", b"\n\r", b"\n"]);
        assert_eq!(events, [&b"data: a\r\n\r\n"[..]]);
    }

    #[test]
    fn data_lines_are_joined_and_other_fields_kept() {
        assert_eq!(
            &*data(b"id: 7\ndata: {\"a\":\ndata:1}\n\n").unwrap(),
            b"{\"a\":\n1}"
        );
        assert_eq!(data(b": comment\n\n"), None);
        assert_eq!(&*data(b"data\n\n").unwrap(), b"");
        assert_eq!(
            &replace_data(b"event: message\r\nid: 7\r\ndata: old\r\n\r\n", b"{}")[..],
            b"event: message\nid: 7\ndata: {}\n\n"
        );
        assert_eq!(events(b"data: a\n\ndata: b").len(), 2);
    }

    #[test]
    fn accept_lists_are_read_by_media_type() {
        let parts = |accept: &str| {
            http::Request::builder()
                .header("accept", accept)
                .body(())
                .unwrap()
                .into_parts()
                .0
                .headers
        };
        assert!(accepts(&parts("application/json, text/event-stream")));
        assert!(accepts(&parts("Text/Event-Stream;q=0.5")));
        assert!(!accepts(&parts("application/json")));
    }
}
