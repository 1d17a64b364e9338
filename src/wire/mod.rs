//! The wire: what MCP JSON-RPC looks like on the way in and out, with no policy.
//!
//! [`json`] is the one strict reader (duplicate keys refused, members read along a path without a
//! full tree; [`skim`] its one-pass fast path), [`edit`] the one JSON text editor, [`jsonrpc`] the envelopes read through it,
//! [`canonical`] the canonical form behind the digests, [`sse`] the event-stream splitter, and
//! [`mcp`] every MCP constant the crate reads or writes.

pub(crate) mod canonical;
pub(crate) mod edit;
pub(crate) mod json;
pub(crate) mod jsonrpc;
pub(crate) mod legacy;
pub(crate) mod mcp;
mod skim;
pub(crate) mod sse;
