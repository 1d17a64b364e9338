//! The decisions, on JSON values only: no HTTP types here.
//!
//! [`decide`] looks at an MRTR call and decides, in one pass, to answer it directly ([`Decided`]:
//! `Respond`), forward it rewritten (`Forward`), or pass on the inner service's answer to a probe
//! (`Pass`). [`outbound`](fn@outbound) looks at the inner service's response to a forwarded call
//! and seals, re-asks or refuses. The HTTP adapter only moves bytes between the two.
//!
//! While it decides, the engine reaches the world one way: the [`Effects`] trait, which the
//! adapter implements. Through it the engine probes the inner service, consumes a verified
//! single-use token's id, asks a gate's URL flow for its URL or its completion, and reads the
//! clock, each at the point the decision needs it. Nothing leaves before the token's id is
//! consumed, and the id is consumed only once the flows the decision needs have answered.
//!
//! Each child imports only its siblings, never this module: what they share is in `decision`
//! (what is known and decided), `reply` (the layer's own answers) and `answers` (judging them).

mod answers;
mod decision;
mod gates;
mod inbound;
mod intake;
mod outbound;
pub(crate) mod policy;
mod reply;
pub(crate) mod tasks;

pub(crate) use decision::{Context, Decided, Effects, Probed, Round, SingleUseId};
pub(crate) use inbound::decide;
pub(crate) use intake::{
    Answer, BODY_FAILED, Head, Intake, answer, inner_failed, intake, passes_unread, refuse_unread,
    too_large, unreadable,
};
pub(crate) use outbound::{Event, Outbound, answers_call, drops_unterminated, event, outbound};
