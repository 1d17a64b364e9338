//! The decisions, on JSON values only: no HTTP types here.
//!
//! [`inbound`](fn@inbound) looks at an MRTR call and decides to answer it directly, forward it
//! (rewritten) or probe the inner service first. [`outbound`](fn@outbound) looks at the inner
//! service's response to such a call and seals, re-asks or refuses. The HTTP adapter only moves
//! bytes between the two.
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

pub(crate) use decision::{Context, Decided, Probed, Round, Spend, Steps};
pub(crate) use inbound::decide;
pub(crate) use intake::{
    Answer, BODY_FAILED, Head, Intake, answer, inner_failed, intake, passes_unread, refuse_unread,
    too_large, unreadable,
};
pub(crate) use outbound::{Event, Outbound, answers_call, drops_unterminated, event, outbound};
