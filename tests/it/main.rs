//! The crate's integration tests, one binary: a module per area, and `support` with what they
//! share (a fake MCP server and its harness, the rmcp plumbing, the Redis the Redis tests use,
//! the legacy client's event-stream reader, and the example sources the tests drive).
//!
//! Run one area with `cargo test --test it <module>::`, e.g. `cargo test --test it gates::`.

mod support;

// `examples/stack/app.rs` names the `deploy` example's server as `crate::server`, as in the
// example binaries.
use support::server;

mod adversarial;
mod bridge;
mod bridge_listen;
mod bridge_redis;
mod bridge_session_loss;
mod cache_bounds;
mod client_form;
mod edges;
mod examples;
mod faults;
mod forms;
mod gates;
mod layer;
mod person;
mod properties;
mod redis_data_loss;
mod resource_uris;
mod rmcp_client;
mod rmcp_inner;
mod serving;
mod single_use;
mod tasks;
mod upstream;
mod upstream_concurrency;
mod upstream_rmcp;

/// Whether the Redis tests (`bridge_redis`, and `single_use`'s `redis_*`) ran: they need a Redis
/// at `MCP_REDIS_URL` (default `redis://127.0.0.1:6379`) and return at once without one, which
/// the run says on the terminal (see `support::redis::available`). With `MCP_REQUIRE_REDIS=1`, a
/// missing Redis fails this test as it fails each of them.
#[test]
fn redis_tests_ran_or_were_skipped() {
    let url = support::redis::redis_url();
    if support::redis::available() {
        println!("the Redis tests ran, against {url}");
        return;
    }
    assert!(
        !support::redis::required(),
        "MCP_REQUIRE_REDIS=1 and no Redis answers at {url}: the Redis tests cannot run"
    );
    println!("the Redis tests did NOT run: no Redis answers at {url}");
}
