//! Server-Sent Events: incremental parsing (`parse`), and the body that passes an inner event
//! stream on with its response event rewritten (`body`).

mod body;
mod parse;

pub(crate) use body::{Scan, SseBody};
pub(crate) use parse::{Splitter, data, events};
