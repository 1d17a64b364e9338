//! The first look at a request: whether the layer reads it, and what it does with its body.

use crate::wire::jsonrpc::{self, Call, INTERNAL_ERROR, INVALID_REQUEST, Peek, Reply, ReplyKind};
use crate::wire::mcp::TaskMethod;
use serde_json::value::RawValue;

/// What the adapter saw before reading the body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head<'a> {
    /// Its `Content-Encoding`, if any.
    pub(crate) content_encoding: Option<&'a [u8]>,
    /// Its declared `Content-Length`, if any.
    pub(crate) content_length: Option<u64>,
}

/// Refuses a body the layer would not read: encoded (it cannot see inside), or declared larger
/// than the limit (no need to read it to know).
pub(crate) fn refuse_unread(head: Head<'_>, max_body_bytes: usize) -> Option<Reply> {
    if let Some(encoding) = head.content_encoding
        && !encoding.eq_ignore_ascii_case(b"identity")
    {
        return Some(Reply::error(
            ReplyKind::Encoded,
            None,
            INVALID_REQUEST,
            "Content-Encoding is not supported",
            None,
        ));
    }
    match head.content_length {
        Some(len) if len > max_body_bytes as u64 => Some(too_large()),
        _ => None,
    }
}

/// A body over the limit.
pub(crate) fn too_large() -> Reply {
    Reply::error(
        ReplyKind::TooLarge,
        None,
        INVALID_REQUEST,
        "Request body too large",
        None,
    )
}

/// A body the client did not finish sending.
pub(crate) fn unreadable() -> Reply {
    Reply::error(
        ReplyKind::BadRequest,
        None,
        INVALID_REQUEST,
        "Request body could not be read",
        None,
    )
}

/// Why the layer answers an MRTR call `-32603` (502) on the inner service's behalf.
pub(crate) const BODY_FAILED: &str = "its response body failed before the layer read it whole";

/// The inner service's answer to an MRTR call failed, or is a successful answer the layer cannot
/// read (encoded, or of another type): it could carry an `input_required` the layer must seal,
/// so it is never passed on.
pub(crate) fn inner_failed(id: Option<&RawValue>, why: &str) -> Reply {
    tracing::warn!(
        target: "tower_elicitation",
        why,
        "the layer cannot read the inner service's answer to an MRTR call; answering -32603"
    );
    Reply::error(
        ReplyKind::InnerFailed,
        id,
        INTERNAL_ERROR,
        "Internal error",
        None,
    )
}

/// What the inner service's answer to an MRTR call is, as far as the layer must read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Not a success (an error status): passed on as it came.
    PassThrough,
    /// One JSON message.
    Json,
    /// An event stream.
    EventStream,
}

/// Sorts the inner service's answer to an MRTR call by its status (`success`), its
/// `Content-Encoding`s and its `Content-Type`. A successful answer that is encoded or of another
/// type could carry an `input_required` the layer must seal, so it is never passed on: `Err`
/// says why, for [`inner_failed`].
pub(crate) fn answer<'a>(
    success: bool,
    mut encodings: impl Iterator<Item = &'a [u8]>,
    content_type: Option<&str>,
) -> Result<Answer, &'static str> {
    if !success {
        return Ok(Answer::PassThrough);
    }
    if encodings.any(|encoding| !encoding.eq_ignore_ascii_case(b"identity")) {
        return Err("the inner service encoded its answer (Content-Encoding)");
    }
    let content_type =
        content_type.ok_or("the inner service's answer has no readable Content-Type")?;
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(Answer::Json)
    } else if essence.eq_ignore_ascii_case("text/event-stream") {
        Ok(Answer::EventStream)
    } else {
        Err("the inner service answered with a Content-Type the layer cannot read")
    }
}

/// What to do with a body that was read.
#[derive(Debug)]
pub(crate) enum Intake<'a> {
    /// Forward the original bytes.
    Forward,
    /// Answer this instead.
    Respond(Reply),
    /// One of the three MRTR methods, read: on to [`inbound::decide`](super::inbound::decide).
    Call(Call<'a>),
    /// A task method the layer judges, read: on to [`tasks`](super::tasks).
    Task(Call<'a, TaskMethod>),
}

/// Whether a body goes on untouched after a byte scan alone: it names no MRTR method in any way
/// a JSON parser could read (see [`jsonrpc::names_no_mrtr_method`]).
pub(crate) fn passes_unread(body: &[u8]) -> bool {
    jsonrpc::names_no_mrtr_method(body)
}

/// Sorts a body by its borrowed peek. The HTTP method plays no part: an inner service may ignore
/// it and read any body as JSON-RPC, so a body the strict reader cannot read is refused in every
/// method, never forwarded unread.
pub(crate) fn intake(body: &[u8]) -> Intake<'_> {
    match jsonrpc::peek(body) {
        Peek::Call(call) => Intake::Call(call),
        Peek::Task(call) => Intake::Task(call),
        Peek::Refuse(reply) => Intake::Respond(reply),
        Peek::Other => Intake::Forward,
        Peek::Batch => Intake::Respond(Reply::error(
            ReplyKind::BadRequest,
            None,
            INVALID_REQUEST,
            "Invalid Request: a batch may not contain tools/call, prompts/get or resources/read",
            None,
        )),
        Peek::Invalid { code, message } => Intake::Respond(Reply::error(
            ReplyKind::BadRequest,
            None,
            code,
            message,
            None,
        )),
    }
}
