//! The SSE parser and rewriter, through the whole layer: the inner service answers a first-round
//! `tools/call` (id 1) with an arbitrary `text/event-stream`, split at arbitrary chunk boundaries.
//!
//! Input: byte 0 is a control byte (bits 0-3: how many cut lengths follow; bit 7: the client
//! declares no capabilities, so an input request must become `-32021`); then one byte per cut
//! (a chunk of that many bytes plus one); the rest is the stream.
//!
//! Checked: nothing panics or hangs; what the client receives does not depend on where the
//! stream was cut; the splitter loses and adds no byte, and what it notes of an event reads and
//! rewrites it as its lines do; a stream with nothing the layer could
//! seal (no `required` and no `\u` escape anywhere) reaches the client event for event, but
//! for a repeated or unterminated response, which is dropped.

#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use http::{Request, Response, header};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use tower_elicitation::__fuzz::{Chunks, Exchange, exchange, sse_split};
use tower_elicitation::{ElicitationLayer, Keyring};

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let cuts = usize::from(control & 0x0f).min(rest.len());
    let (lengths, stream) = rest.split_at(cuts);
    let mut chunks: Vec<&[u8]> = Vec::new();
    let mut left = stream;
    for &length in lengths {
        let (chunk, after) = left.split_at(usize::from(length).saturating_add(1).min(left.len()));
        chunks.push(chunk);
        left = after;
    }
    chunks.push(left);
    let capabilities = if control & 0x80 == 0 {
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
    } else {
        json!({})
    };

    // The splitter alone: every byte comes out once, in order, however the stream is cut.
    let (events, tail) = sse_split(&chunks);
    let mut joined: Vec<u8> = events.iter().flat_map(|e| e.iter().copied()).collect();
    joined.extend_from_slice(&tail);
    assert_eq!(joined, stream, "the splitter lost or added bytes");
    let (whole_events, whole_tail) = sse_split(&[stream]);
    assert_eq!(
        (events, tail),
        (whole_events, whole_tail),
        "events depend on the cut"
    );

    // The whole layer. A token minted in another second differs, so on a mismatch run both
    // again: two runs on either side of one second boundary cannot both differ.
    let cut = run(&capabilities, &chunks);
    let whole = run(&capabilities, &[stream]);
    if cut != whole {
        let again = run(&capabilities, &chunks);
        assert_eq!(again, whole, "the client's bytes depend on the cut");
    }
    // Nothing to seal: every event passes as it came, except that a repeated response and an
    // unterminated response are dropped (JSON-RPC allows one response; an unterminated event
    // is discarded by clients anyway). Without `\u` escapes a response names `result` or
    // `error` in clear, so every piece left out must.
    if !contains(stream, b"required") && !contains(stream, b"\\u") {
        assert_eq!(cut.0, 200);
        let (events, tail) = sse_split(&[stream]);
        let mut rest = &cut.1[..];
        for piece in events.iter().chain(std::iter::once(&tail)) {
            if let Some(after) = rest.strip_prefix(&piece[..]) {
                rest = after;
            } else {
                assert!(
                    contains(piece, b"result") || contains(piece, b"error"),
                    "an event that is no response was changed or dropped: {:?}",
                    String::from_utf8_lossy(piece)
                );
            }
        }
        assert!(
            rest.is_empty(),
            "bytes the inner service never sent: {rest:?}"
        );
    }
});

fn run(capabilities: &serde_json::Value, chunks: &[&[u8]]) -> (u16, Bytes) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "deploy", "arguments": {"environment": "staging"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": capabilities}}});
    let request = Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Chunks::new([body.to_string()]))
        .expect("a valid request");
    let chunks: Vec<Bytes> = chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect();
    static LAYER: OnceLock<ElicitationLayer> = OnceLock::new();
    let layer = LAYER
        .get_or_init(|| ElicitationLayer::new(Keyring::new("k1", [7u8; 32]).expect("a valid key")));
    let Exchange {
        parts,
        body,
        received,
    } = exchange(layer, request, move |_| {
        Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Chunks::new(chunks.clone()))
            .expect("a valid response")
    });
    assert_eq!(
        received.len(),
        1,
        "a first round calls the inner service once"
    );
    (parts.status.as_u16(), body)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
