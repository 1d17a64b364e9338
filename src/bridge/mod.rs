//! Serves 2025-era MCP hosts from a 2026-07-28 multi round-trip service: the legacy bridge.
//!
#![doc = include_str!("../../docs/bridge.md")]

mod body;
mod config;
mod events;
mod future;
mod hosts;
mod inner;
mod layer;
mod listen;
mod listeners;
mod params;
mod rounds;
mod service;

pub use body::{RequestBody, ResponseBody};
pub use future::ResponseFuture;
pub use layer::LegacyBridgeLayer;
pub use service::LegacyBridge;
