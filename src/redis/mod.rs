//! Everything Redis (feature `redis`): single-use token ids, what the layer remembers per task,
//! URL flows, the legacy bridge's sessions, and the message box where calls wait for an answer
//! (the bridge's, and the upstream adapter's routed retries), shared by every replica.
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
//!   [`RedisStore::pending_answers`]);
//! - [`RedisTaskStore`], what the layer remembers per task of the Tasks extension, for
//!   [`ElicitationLayer::task_store`](crate::ElicitationLayer::task_store)
//!   ([`RedisStore::tasks`]).
//!
//! # What Redis must be
//!
//! Single-use tokens hold only while Redis remembers the spent ids:
//!
//! - **No eviction:** `maxmemory-policy noeviction`. `allkeys-*` policies may evict any key,
//!   `volatile-*` ones the spent ids themselves (they carry their token's expiry). As a
//!   [`TokenStore`](crate::store::TokenStore), the store reads `CONFIG GET maxmemory-policy` at
//!   first use, again after a failed command (a reconnection), after Redis lost its data, and at
//!   most a minute after the last check, and refuses single-use retries (503, the cause logged)
//!   on any other policy, or on a Redis that does not answer `CONFIG`, unless its builder says
//!   [`allow_evicting_policy`](RedisStoreBuilder::allow_evicting_policy) or
//!   [`assume_noeviction`](RedisStoreBuilder::assume_noeviction).
//! - **Persistence** (AOF, or RDB snapshots), so that a restart does not forget. When Redis
//!   forgets anyway, the store's epoch notices: `<prefix>epoch`, without expiry, holds when the
//!   store's memory began (Unix milliseconds, by Redis's clock, written once). Each spend reads
//!   it in the same script; when it is gone, a new epoch begins, and every single-use token
//!   sealed before it is refused with the frozen `-32602` (the person starts the flow again).
//!   A token is **bound to the epoch it was sealed under** (claim `e`), not dated against it:
//!   on a call's first round the layer reads `<prefix>epoch` (one round trip, beginning an epoch
//!   if there is none), every token of that call names it, and a retry is accepted only while
//!   the spend's own script still reads that epoch. No clocks are compared, so neither a token
//!   sealed in the millisecond after a new epoch began nor the replicas' clock skew matters:
//!   none sealed after the epoch began is refused, none sealed before accepted. (Why not dates
//!   in milliseconds: a replica's clock `d` behind Redis's would refuse what it sealed in the
//!   `d` after the epoch began, one `d` ahead accept what it sealed in the `d` before; a skew
//!   margin only trades one for the other.) Epochs are named by when they began, to the
//!   millisecond, an odd number when a spend began it and an even one when a first round did,
//!   so no two share a name. A token sealed before tokens named their epoch (an older
//!   version) is still dated by its whole second against the epoch.
//! - One Redis, not a cluster: the scripts touch several keys of one prefix.
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
//!     .task_store(redis.tasks())
//!     .gate(GateTarget::tool("connect_github"), Gate::url("github", flows.clone())?)?;
//! // In the callback handler: `flows.complete(&handle).await?`.
//!
//! // A session opened on one replica is served by any; an answer POSTed to any replica reaches
//! // the one holding the call's stream.
//! let bridge = LegacyBridgeLayer::for_layer(&layer)
//!     .session_store(redis.sessions(Duration::from_secs(3600)))
//!     .pending_answers(redis.pending_answers());
//! # let _ = (layer, bridge);
//! # Ok(())
//! # }
//! ```
#![doc = include_str!("../../docs/redis.md")]

mod bridge;
mod store;
mod tasks;

pub use bridge::{RedisPendingAnswers, RedisSessionStore};
pub use store::{RedisStore, RedisStoreBuilder, RedisUrlFlows};
pub use tasks::RedisTaskStore;
