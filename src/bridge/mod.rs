//! Serves 2025-era MCP hosts from a 2026-07-28 multi round-trip service: the legacy bridge.
//!
#![doc = include_str!("../../docs/bridge.md")]

mod body;
mod config;
pub(crate) mod convert;
mod events;
mod future;
mod hosts;
pub(crate) mod ids;
mod inner;
mod layer;
mod listen;
mod listeners;
mod params;
pub(crate) mod pending;
mod rounds;
mod service;
mod session;

pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::LegacyBridgeLayer;
pub use pending::{AnswerKey, MemoryPendingAnswers, PendingAnswers};
pub use service::LegacyBridge;
pub use session::{MemorySessionStore, SessionRecord, SessionStore};
