//! The crate's integration tests, one binary: a module per area, and `support` with what they
//! share (a fake MCP server and its harness, the rmcp plumbing, the Redis the Redis tests use,
//! the legacy client's event-stream reader, and the example sources the tests drive).
//!
//! Run one area with `cargo test --test it <module>::`, e.g. `cargo test --test it gates::`.
//! The tests that need Redis or the real MCP servers are in `tests/services` (`--test services`),
//! which reports those it could not run as ignored, saying why.

mod support;

// `examples/stack/app.rs` names the `deploy` example's server as `crate::server`, as in the
// example binaries.
use support::server;

mod adversarial;
mod bridge;
mod bridge_listen;
mod cache_bounds;
mod client_form;
mod edges;
mod faults;
mod forms;
mod gates;
mod layer;
mod person;
mod properties;
mod resource_uris;
mod rmcp_client;
mod rmcp_inner;
mod serving;
