//! The legacy bridge: 2025-era MCP clients (sessions, `initialize`, server-to-client requests on a
//! POST's event stream) served by a 2026-07-28 multi round-trip service.

mod body;
mod config;
mod convert;
mod ids;
mod inner;
mod layer;
mod pending;
#[cfg(feature = "redis")]
mod redis;
mod rounds;
mod service;
mod session;

pub use body::BridgeBody;
pub use layer::LegacyBridgeLayer;
pub use pending::{LegKey, MemoryPendingAnswers, PendingAnswers, Waiter};
#[cfg(feature = "redis")]
pub use redis::{RedisPendingAnswers, RedisSessionStore};
pub use service::{BridgeFuture, LegacyBridge};
pub use session::{MemorySessionStore, SessionRecord, SessionStore, StoreFuture};
