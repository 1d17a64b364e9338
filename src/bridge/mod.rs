//! Serves 2025-era MCP hosts from a 2026-07-28 multi round-trip service: the legacy bridge.
//!
#![doc = include_str!("../../docs/bridge.md")]

mod body;
mod config;
mod events;
mod forward;
mod future;
mod handshake;
mod hosts;
mod inner;
mod layer;
mod listen;
mod listeners;
mod params;
mod replies;
mod rounds;
mod service;
mod sessions;
mod utilities;

pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::LegacyBridgeLayer;
pub use service::LegacyBridge;
