//! Server-Sent Events: incremental parsing (`parse`), and the body that passes an inner event
//! stream on with its response event rewritten (`body`).

mod body;
mod parse;

pub(crate) use body::{Scan, SseBody};
#[cfg(feature = "__fuzz")]
pub(crate) use parse::split_all;
pub(crate) use parse::{Splitter, data, events};
