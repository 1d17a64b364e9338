//! The decisions, on JSON values only: no HTTP types here.
//!
//! [`inbound`](fn@inbound) looks at an MRTR call and decides to answer it directly, forward it (rewritten)
//! or probe the inner service first. [`outbound`](fn@outbound) looks at the inner service's response to such
//! a call and seals, re-asks or refuses. The HTTP adapter (`service.rs`) only moves bytes between
//! the two.

mod answers;
mod gates;
pub(crate) mod inbound;
mod intake;
pub(crate) mod outbound;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::Reply;
use crate::mcp::{Declared, Method};

pub(crate) use gates::{FlowFacts, FlowNeed, FlowQuery};
pub(crate) use inbound::{Inbound, inbound};
pub(crate) use intake::{
    Head, Intake, inner_body_failed, inner_unreadable, intake, passes_unread, refuse_unread,
    too_large, unreadable,
};
pub(crate) use outbound::{Outbound, Settle, outbound, settle_probe};

/// What the adapter learned outside the JSON body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    /// The caller's identity, as bytes (never logged, only tagged).
    pub(crate) principal: Option<&'a [u8]>,
    /// The `MCP-Protocol-Version` header, used when `_meta` does not name a version.
    pub(crate) header_version: Option<&'a str>,
    /// Now, in Unix seconds.
    pub(crate) now: u64,
}

/// Everything the response side needs to know about the call it answers.
#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub(crate) method: Method,
    pub(crate) id: Option<Box<RawValue>>,
    pub(crate) target: String,
    /// The canonical digest of the arguments (claim `a`).
    pub(crate) args: String,
    /// The digest of the arguments' exact text (claim `x`).
    pub(crate) exact: Option<String>,
    pub(crate) principal: Option<Vec<u8>>,
    /// The kinds of input request the call's own `clientCapabilities` declare.
    pub(crate) declared: Declared,
    /// The call speaks 2026-07-28 or later.
    pub(crate) mrtr: bool,
    /// How many `input_required` rounds came before this call (0 for a fresh call).
    pub(crate) number: u32,
    /// Gate answers accepted so far.
    pub(crate) gates: Map<String, Value>,
}

/// The frozen answer to every requestState failure.
pub(crate) fn invalid_state(id: Option<&RawValue>) -> Reply {
    Reply::error(
        200,
        id,
        crate::jsonrpc::INVALID_PARAMS,
        "Invalid or expired requestState",
        Some(serde_json::json!({"reason": "invalid_request_state"})),
    )
}
