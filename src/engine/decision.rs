//! What the engine knows of a call, and what it decides to do with it.

use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gate::Answers;
use crate::store::Consumed;
use crate::wire::jsonrpc::{Kind, Reply};
use crate::wire::mcp::{Declared, Method};

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
        Kind::Answer,
        id,
        crate::wire::jsonrpc::INVALID_PARAMS,
        "Invalid or expired requestState",
        Some(serde_json::json!({"reason": "invalid_request_state"})),
    )
}

/// What the adapter does with an MRTR call, once [`decide`](super::decide) has settled it.
// Made once per call and taken apart at once: boxing the round would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Decided<R> {
    /// Answer the client directly.
    Respond(Reply),
    /// Call the inner service with `body` (`None`: the original bytes) and, when there are gate
    /// answers, the [`Answers`] extension; then run [`outbound`](fn@super::outbound) on its
    /// response.
    Forward {
        body: Option<Vec<u8>>,
        round: Round,
        answers: Option<Answers>,
    },
    /// Give the client the inner service's answer to the probe, as it came.
    Pass(R),
}

/// What the engine asks of the world outside it while it decides: one call of the inner service
/// (the probe), and the consumption of a single-use token's id. The adapter gives the steps; the
/// loops around them are the engine's.
pub(crate) trait Steps {
    /// The inner service's response, as the adapter keeps it to pass it on.
    type Response;
    /// The inner service's own error, which ends the call.
    type Error;
    /// Calls the inner service once with `body` and reads its whole answer.
    async fn probe(
        &mut self,
        body: Vec<u8>,
        round: &Round,
    ) -> Result<Probed<Self::Response>, Self::Error>;
    /// Consumes the id of a verified single-use token, atomically: whether it was fresh, or why
    /// the store cannot say.
    async fn consume(&mut self, spend: &Spend) -> Result<Consumed, String>;
}

/// The inner service's answer to a probe.
pub(crate) enum Probed<R> {
    /// Read whole: the response message to the call when the answer is a successful JSON or
    /// event-stream one (`None` otherwise), and the response itself.
    Read {
        message: Option<Vec<u8>>,
        response: R,
    },
    /// The layer's own reply: the answer could not be read.
    Failed(Reply),
}

/// What to do with an MRTR call, one step at a time.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// Answer the client directly; the inner service is not called.
    Respond(Reply),
    /// Call the inner service with `body` (`None`: the original bytes) and, when there are gate
    /// answers, the [`Answers`] extension; then run [`outbound`](fn@super::outbound) on its response.
    Forward {
        body: Option<Vec<u8>>,
        round: Round,
        answers: Option<Answers>,
    },
    /// Call the inner service with `body` (the call without the client's answers), then
    /// [`settle_probe`](super::settle_probe) with `answers`.
    Probe {
        body: Vec<u8>,
        round: Round,
        answers: Map<String, Value>,
    },
    /// Ask these URL flows (asynchronously), then decide again with what they said.
    CheckFlows(Vec<FlowQuery>),
    /// A single-use token was verified: consume its id first (asynchronously, through the
    /// layer's store), then do `then` only if the id was fresh. A replayed id answers
    /// [`invalid_state`]; a store that cannot say answers [`unavailable`]. Nothing is forwarded,
    /// and no token sealed from this one (a re-ask's) leaves, before the id is consumed.
    Spend { spend: Spend, then: Box<Inbound> },
}

/// The id of a verified single-use token, to consume before anything is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spend {
    /// The token's id (claim `j`).
    pub(crate) id: String,
    /// Until when, in Unix seconds, the token could be accepted (its expiry plus the tolerated
    /// clock skew): the store must remember the id until then.
    pub(crate) until: u64,
}

/// The answer when the store that consumes single-use ids cannot be reached: `-32603`, HTTP 503.
/// Why goes to `tracing`, from the adapter.
pub(crate) fn unavailable(id: Option<&RawValue>) -> Reply {
    Reply::error(
        Kind::Unavailable,
        id,
        crate::wire::jsonrpc::INTERNAL_ERROR,
        "Service unavailable",
        Some(serde_json::json!({"reason": "unavailable"})),
    )
}

/// What URL flows said, by gate key: gathered by the adapter between two calls of
/// [`inbound`](fn@super::inbound).
#[derive(Debug, Default)]
pub(crate) struct FlowFacts {
    pub(crate) urls: HashMap<String, String>,
    pub(crate) complete: HashMap<String, bool>,
}

/// A question for a URL flow, which the adapter answers asynchronously.
#[derive(Debug, Clone)]
pub(crate) struct FlowQuery {
    /// Index of the gate in the configuration.
    pub(crate) gate: usize,
    pub(crate) need: FlowNeed,
    pub(crate) method: Method,
    pub(crate) target: String,
    pub(crate) arguments: Value,
    pub(crate) handle: String,
    pub(crate) principal: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlowNeed {
    /// The flow's URL, to ask the gate.
    Url,
    /// Whether the flow completed, after the client accepted.
    Completion,
}
