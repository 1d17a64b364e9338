//! Fronts any MCP server, 2025-era or 2026-07-28, run as a stdio child or (feature
//! `upstream-http`) reached over Streamable HTTP, as a 2026-07-28 multi round-trip service: the
//! upstream adapter (feature `upstream`).
//!
#![doc = include_str!("../../docs/upstream.md")]

mod bounds;
mod call;
mod child;
mod config;
mod core;
mod front;
mod listen;
mod parked;
mod pool;
mod routes;
mod service;
mod session;
#[cfg(feature = "upstream-http")]
mod streamable;
mod trace;

#[cfg(feature = "upstream-http")]
pub use config::Http;
pub use config::{Era, Server, ServerQuestions, Stdio};
pub use front::ResponseBody;
pub use service::{ResponseFuture, Upstream, UpstreamBuilder};
