//! Everything Redis (feature `redis`): single-use token ids, URL flows, and the legacy bridge's
//! sessions and waiting calls, shared by every replica.
//!
//! One [`RedisStore`] holds the connections (the `redis` crate's tokio `ConnectionManager`, which
//! reconnects by itself: when Redis is back, calls go through again with no restart). Every
//! command is bounded by the connection and response timeouts, so an unreachable or stalled Redis
//! answers the call `-32603` (HTTP 503) promptly instead of holding it. From it come:
//!
//! - the store itself, as a [`TokenStore`](crate::store::TokenStore) for
//!   [`ElicitationLayer::single_use`](crate::ElicitationLayer::single_use);
//! - [`RedisUrlFlows`], URL flows completed by a callback on whichever replica it lands
//!   ([`RedisStore::url_flows`]);
//! - [`RedisSessionStore`] and [`RedisPendingAnswers`], so that the
//!   [legacy bridge](crate::bridge) needs no sticky routing ([`RedisStore::sessions`],
//!   [`RedisStore::pending_answers`]).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tower_elicitation::bridge::LegacyBridgeLayer;
//! use tower_elicitation::redis::RedisStore;
//! use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let redis = RedisStore::builder("redis://127.0.0.1:6379")
//!     .key_prefix("myapp:mcp:")
//!     .build()?;
//! // An OAuth-style URL flow, completed by a callback on whichever replica it lands.
//! let flows = redis.url_flows(|handle| format!("https://mcp.example.com/flows/{handle}"));
//! let layer = ElicitationLayer::new(Keyring::from_env()?)
//!     .single_use(redis.clone())
//!     .gate(GateTarget::tool("connect_github"), Gate::url("github", flows.clone())?)?;
//! // In the callback handler: `flows.complete(&handle).await?`.
//!
//! // A session opened on one replica is served by any; an answer POSTed to any replica reaches
//! // the one holding the call's stream.
//! let bridge = LegacyBridgeLayer::new(&layer)
//!     .session_store(redis.sessions(Duration::from_secs(3600)))
//!     .pending_answers(redis.pending_answers());
//! # let _ = (layer, bridge);
//! # Ok(())
//! # }
//! ```
#![doc = include_str!("../../docs/redis.md")]

mod bridge;
mod store;

pub use bridge::{RedisPendingAnswers, RedisSessionStore};
pub use store::{RedisStore, RedisStoreBuilder, RedisUrlFlows};
