//! What the engine knows of a call, what it decides to do with it, and [`Effects`]: the one
//! trait through which it reaches the world while it decides (the probe, the single-use store,
//! the gates' URL flows, the clock).

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::BoxError;
use crate::gate::{Answers, ErasedFlow, GateCall};
use crate::store::Consumed;
use crate::util::principal::VerifiedCaller;
use crate::wire::jsonrpc::{Reply, ReplyKind};
use crate::wire::mcp::{Declared, Method};

/// What the adapter learned outside the JSON body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    /// The caller's identity, as bytes (never logged, only tagged).
    pub(crate) principal: Option<&'a [u8]>,
    /// The caller an authenticating layer verified, from this round's request.
    pub(crate) caller: Option<&'a VerifiedCaller>,
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
    /// The caller an authenticating layer verified, from this round's request (never from a
    /// token).
    pub(crate) caller: Option<VerifiedCaller>,
    /// The kinds of input request the call's own `clientCapabilities` declare.
    pub(crate) declared: Declared,
    /// The call speaks 2026-07-28 or later.
    pub(crate) mrtr: bool,
    /// How many `input_required` rounds came before this call (0 for a fresh call).
    pub(crate) number: u32,
    /// Gate answers accepted so far.
    pub(crate) gates: Map<String, Value>,
    /// The call's nonce (claim `n`): drawn when a gated call is first asked, then carried by
    /// every token of the call; its gates' flow handles are derived with it.
    pub(crate) nonce: Option<String>,
    /// With single-use tokens, the store's epoch (claim `e`, Unix ms) every token sealed for
    /// this round is bound to: the one read from the store on a call's first round, or the one
    /// its verified token carries (which the consumption confirms before anything leaves).
    pub(crate) epoch: Option<u64>,
    /// What each gate on the call binds its approval to, now (claim `b`).
    pub(crate) bindings: std::collections::BTreeMap<String, String>,
}

/// The frozen answer to every requestState failure.
pub(crate) fn invalid_state(id: Option<&RawValue>) -> Reply {
    Reply::error(
        ReplyKind::Answer,
        id,
        crate::wire::jsonrpc::INVALID_PARAMS,
        "Invalid or expired requestState",
        Some(serde_json::json!({"reason": "invalid_request_state"})),
    )
}

/// What the adapter does with an MRTR call, once [`decide`](super::decide) has made the decision.
/// Every effect the decision needed (URL flows, the probe, the consumption of a single-use
/// token's id) has happened through [`Effects`] by then.
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
        /// The decision's event (`forward`, `gates_accepted`), left once a single-use token is
        /// spent: a replay refused by that check never reads as accepted.
        outcome: Option<&'static str>,
    },
    /// Give the client the inner service's answer to the probe, as it came.
    Pass(R),
}

/// The engine's one way to reach the world outside it while it decides: one call of the inner
/// service (the probe), the consumption of a single-use token's id, a gate's URL flow (its URL,
/// its completion), and the clock. The adapter implements it; when and in which order each is
/// asked is the engine's.
pub(crate) trait Effects {
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
    async fn consume(&mut self, token: &SingleUseId) -> Result<Consumed, String>;
    /// When the single-use store's present memory began, in Unix milliseconds (asked after a
    /// fresh `consume`): a token sealed before it may have been spent and forgotten.
    async fn epoch(&mut self) -> Result<u64, String> {
        Ok(0)
    }
    /// The single-use store's epoch as it is now, in Unix milliseconds, asked of the store on a
    /// call's first round: the tokens sealed for the call are bound to it. When the store cannot
    /// say, the last epoch it said (0 if none): a token bound to an epoch that has ended is
    /// refused on its retry, so this fails closed.
    async fn current_epoch(&mut self) -> u64 {
        0
    }
    /// The URL of `flow` for `call`, creating the flow if it does not exist yet.
    async fn flow_url(
        &mut self,
        flow: &dyn ErasedFlow,
        call: &GateCall<'_>,
    ) -> Result<String, BoxError>;
    /// Whether `flow` for `call` has completed.
    async fn flow_complete(&mut self, flow: &dyn ErasedFlow, call: &GateCall<'_>) -> bool;
    /// Now, in Unix seconds: what is sealed after a flow answered is dated by it.
    fn now(&self) -> u64;
}

/// What a step of the decision gives: the decision, or why it stopped before it was made.
pub(super) type Decision<E> =
    Result<Decided<<E as Effects>::Response>, Stop<<E as Effects>::Error>>;

/// Why a decision stopped before it was made.
#[derive(Debug)]
pub(super) enum Stop<E> {
    /// The layer answers the client itself. Once a single-use token was verified, its id is
    /// consumed before this leaves.
    Reply(Reply),
    /// The layer answers the client before anything could be decided: a URL flow could not give
    /// its URL, or the token expired while the flows answered. No token id is consumed.
    Undecided(Reply),
    /// The inner service's own error, from the probe: it ends the call.
    Inner(E),
}

impl<E> From<Reply> for Stop<E> {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
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

/// The id of a verified single-use token, to consume before anything is done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SingleUseId {
    /// The token's id (claim `j`).
    pub(crate) id: String,
    /// Until when, in Unix seconds, the token could be accepted (its expiry plus the tolerated
    /// clock skew): the store must remember the id until then.
    pub(crate) until: u64,
    /// When the token was sealed (claim `iat`), in Unix seconds: one sealed before the store's
    /// epoch is refused (a token without `epoch`).
    pub(crate) issued_at: u64,
    /// The store's epoch it was sealed under (claim `e`), in Unix milliseconds: it is accepted
    /// only while the store is in that epoch.
    pub(crate) epoch: Option<u64>,
}

/// The answer when the store that consumes single-use ids cannot be reached: `-32603`, HTTP 503.
/// Why goes to `tracing`, from the adapter.
pub(crate) fn unavailable(id: Option<&RawValue>) -> Reply {
    Reply::error(
        ReplyKind::Unavailable,
        id,
        crate::wire::jsonrpc::INTERNAL_ERROR,
        "Service unavailable",
        Some(serde_json::json!({"reason": "unavailable"})),
    )
}
