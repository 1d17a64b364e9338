//! Incremental Server-Sent Events parsing, for finding and rewriting one event in a stream.
//!
//! Events end at an empty line; lines end with `\r\n`, `\n` or `\r`. Only what is needed to find
//! an event's `data` is parsed: every other byte of every event is kept as it came.

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};

/// Splits a byte stream into complete events, remembering how far it has looked so that a large
/// event arriving in many small chunks is scanned once.
///
/// While it looks for the event's end it notes where the event's `data` line is, so that an
/// event with one `data` line and `\n` line endings (what servers write) is read and rewritten
/// without being scanned again ([`Event::data`], [`Event::with_data`]); any other event is read
/// line by line ([`data`], [`replace_data`]), with the same result.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    buf: BytesMut,
    /// Bytes of `buf` already scanned.
    scanned: usize,
    /// Where the current line starts.
    line_start: usize,
    /// The current event's `data` lines, as far as scanned.
    data: DataLines,
}

/// Where an event's `data` is, as the splitter saw its lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum DataLines {
    /// No `data` line (so far).
    #[default]
    None,
    /// One `data` line ending in `\n`: it starts at `line`, its value at `value`, and its `\n`
    /// is at `end`.
    One {
        line: usize,
        value: usize,
        end: usize,
    },
    /// Several `data` lines, or a line ending in `\r`: read line by line.
    Other,
}

/// One complete event, terminator included, and what the splitter learned of its lines.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    bytes: Bytes,
    lines: DataLines,
}

impl Event {
    /// The event's bytes, as they came.
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The event's `data`: [`data`] of its bytes.
    pub(crate) fn data(&self) -> Option<Cow<'_, [u8]>> {
        match self.lines {
            DataLines::None => None,
            DataLines::One { value, end, .. } => Some(Cow::Borrowed(&self.bytes[value..end])),
            DataLines::Other => data(&self.bytes),
        }
    }

    /// The event with its `data` replaced by `json`: [`replace_data`] of its bytes. With one
    /// `data` line and only `\n` endings, the other lines are already as `replace_data` writes
    /// them: the ones before the data line, then the ones after it but the closing empty line.
    pub(crate) fn with_data(&self, json: &[u8]) -> Bytes {
        let DataLines::One { line, end, .. } = self.lines else {
            return replace_data(&self.bytes, json);
        };
        let (before, after) = (&self.bytes[..line], &self.bytes[end + 1..]);
        // The closing empty line (a `\n`: any `\r` makes the event `Other`).
        let after = after.strip_suffix(b"\n").unwrap_or(after);
        let mut out = Vec::with_capacity(before.len() + after.len() + json.len() + 8);
        out.extend_from_slice(before);
        out.extend_from_slice(after);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(json);
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

impl Splitter {
    /// Adds a chunk of the stream. When nothing waits, the chunk's own buffer is taken as it is
    /// (no copy) if this is its only handle, as a body's frame usually is; the events split from
    /// it then share it.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if !self.buf.is_empty() {
            self.buf.extend_from_slice(&chunk);
            return;
        }
        // Empty: nothing scanned (`scanned` and `line_start` are 0 whenever `buf` is empty).
        match chunk.try_into_mut() {
            Ok(owned) => self.buf = owned,
            Err(shared) => self.buf.extend_from_slice(&shared),
        }
    }

    /// The next complete event, terminator included.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
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
            let start = self.line_start;
            let empty_line = i == start;
            if buf[i] == b'\r' {
                self.data = DataLines::Other;
            } else if !empty_line && buf[start] == b'd' {
                self.data = with_line(self.data, &buf[start..i], start);
            }
            i += terminator;
            self.line_start = i;
            if empty_line {
                let bytes = self.buf.split_to(i).freeze();
                let lines = std::mem::take(&mut self.data);
                self.scanned = 0;
                self.line_start = 0;
                return Some(Event { bytes, lines });
            }
        }
        self.scanned = i;
        None
    }

    /// Everything not yet returned as an event.
    pub(crate) fn take_rest(&mut self) -> Bytes {
        self.scanned = 0;
        self.line_start = 0;
        self.data = DataLines::None;
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

/// What the event's `data` lines are once `line` (without its `\n`, at `start`) is read.
fn with_line(seen: DataLines, line: &[u8], start: usize) -> DataLines {
    let value = if line == b"data" {
        line.len()
    } else if line.starts_with(b"data:") {
        if line.get(5) == Some(&b' ') { 6 } else { 5 }
    } else {
        return seen;
    };
    match seen {
        DataLines::None => DataLines::One {
            line: start,
            value: start + value,
            end: start + line.len(),
        },
        _ => DataLines::Other,
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

/// Writes one JSON-RPC message as an event of a stream (`event: message`), with an `id:` line
/// when the stream numbers its events (the bridge's do, `bridge::events`; the upstream adapter's
/// do not). The message is serialized straight into the event, not through `Display`.
pub(crate) fn message_event(id: Option<&str>, message: &serde_json::Value) -> Bytes {
    const HEAD: &[u8] = b"event: message\ndata: ";
    let mut event = Vec::with_capacity(256);
    if let Some(id) = id {
        event.extend_from_slice(b"id: ");
        event.extend_from_slice(id.as_bytes());
        event.push(b'\n');
    }
    event.extend_from_slice(HEAD);
    // A `Value` always serializes: its keys are strings and its numbers finite, and a `Vec`
    // takes every write.
    let _ = serde_json::to_writer(&mut event, message);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// The events of a complete stream, with anything after the last complete event as a final,
/// unterminated piece.
pub(crate) fn events(stream: &[u8]) -> Vec<Event> {
    let mut splitter = Splitter::default();
    splitter.push(Bytes::copy_from_slice(stream));
    let mut events = Vec::new();
    while let Some(event) = splitter.next_event() {
        events.push(event);
    }
    if !splitter.is_empty() {
        events.push(Event {
            bytes: splitter.take_rest(),
            lines: DataLines::Other,
        });
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
        splitter.push(Bytes::copy_from_slice(chunk));
        while let Some(event) = splitter.next_event() {
            // What the splitter noted reads and rewrites the event as its lines do.
            assert_eq!(event.data(), data(event.bytes()), "{event:?}");
            let json = br#"{"jsonrpc":"2.0"}"#;
            assert_eq!(
                event.with_data(json),
                replace_data(event.bytes(), json),
                "{event:?}"
            );
            events.push(event.bytes().clone());
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
    fn what_the_splitter_notes_reads_as_the_lines_do() {
        // `split_all` checks every event's `data` and rewrite against the line-by-line reading.
        let stream: &[u8] =
            b"data: {}\n\ndata:{}\n\ndata\n\nevent: message\ndata:  x\nid: 7\n: c\n\n\
            id: 1\ndata: a\ndata: b\n\nid: 2\r\ndata: c\n\ndata: d\r\n\r\ndatum: e\n\n: only\n\n\
            data: f\nretry: 5\n\r\n";
        let (events, rest) = split_all(&[stream]);
        assert_eq!(events.len(), 10);
        assert!(rest.is_empty());
        for size in 1..stream.len() {
            let chunks: Vec<&[u8]> = stream.chunks(size).collect();
            assert_eq!(split_all(&chunks).0, events, "chunk size {size}");
        }
        let event = |text: &'static [u8]| {
            let mut splitter = Splitter::default();
            splitter.push(Bytes::from_static(text));
            splitter.next_event().unwrap()
        };
        let one = event(b"event: message\ndata: {\"a\":1}\nid: 7\n\n");
        assert_eq!(one.data().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(
            &one.with_data(b"{}")[..],
            b"event: message\nid: 7\ndata: {}\n\n"
        );
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
