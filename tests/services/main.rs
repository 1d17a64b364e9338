//! The integration tests that need a service this repository does not start itself: a Redis at
//! `MCP_REDIS_URL` (else `127.0.0.1:6379`), `redis-server` on `PATH` (`redis_data_loss` runs its
//! own), or the real MCP servers `scripts/upstream-servers.sh` installs under `.cache/upstream`
//! (`upstream`, `upstream_rmcp`). The tests of those modules that need nothing run here too, and
//! `deploy_example`, which runs the built `deploy` example.
//!
//! Why a binary of its own, on `libtest-mimic` (`harness = false`): libtest cannot mark a test
//! ignored at run time, so a test that found no Redis could only return early and count as
//! *passed*. Here each service is probed once, in `main`, before any test runs; a test whose
//! service is missing becomes an ignored trial whose kind names what it needs (`[needs Redis]`),
//! and cargo's own summary counts it (`… passed; 0 failed; 41 ignored`). With
//! `MCP_REQUIRE_REDIS=1` / `MCP_REQUIRE_UPSTREAMS=1` (as CI sets) it is a failing trial instead.
//! `--include-ignored` runs an ignored trial as a failure saying why: never a pass that checked
//! nothing. The rest of the tests stay in `tests/it` on libtest, which links the crate once more
//! (one binary more to build) but keeps `#[test]`, `proptest!` and the tests' attributes there.
//!
//! Each test is a plain `fn` or `async fn`, listed once in its module's [`trials!`] with what it
//! needs and how it runs: an async one on a tokio runtime of its own (`current_thread`, or
//! `multi_thread` with 4 workers), as `#[tokio::test]` did. A test left out of the list is dead
//! code, which clippy's `-D warnings` refuses. Names are `module::test`, so filters work as with
//! libtest: `cargo test --test services -- upstream::`, `-- --exact single_use::name` (one filter:
//! libtest-mimic takes no second one; `-- upstream` runs both `upstream::` and `upstream_rmcp::`).

mod harness;

/// Lists a module's tests as `fn trials`, one `[needs…] runner name` entry each (a `#[cfg]` may
/// stand before an entry): `[Redis] current_thread redis_a_replay_is_refused`. `needs` are
/// [`harness::Need`]s; `runner` is [`harness::current_thread`], [`harness::multi_thread`] or
/// [`harness::sync`].
macro_rules! trials {
    ($($(#[$attr:meta])* [$($need:ident),*] $run:ident $name:ident),* $(,)?) => {
        /// This module's tests, each ignored (saying what it needs) when a service it needs is
        /// missing.
        #[allow(clippy::vec_init_then_push, reason = "an entry may stand under a #[cfg]")]
        pub(crate) fn trials(probe: &crate::harness::Probe) -> Vec<libtest_mimic::Trial> {
            let mut trials = Vec::new();
            $(
                $(#[$attr])*
                trials.push(crate::harness::$run(
                    probe,
                    &[$(crate::harness::Need::$need),*],
                    module_path!(),
                    stringify!($name),
                    $name,
                ));
            )*
            trials
        }
    };
}
pub(crate) use trials;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "shared with tests/it: this binary uses the Redis, rmcp and example parts"
)]
#[path = "../it/support/mod.rs"]
mod support;

// `examples/stack/app.rs` names the `deploy` example's server as `crate::server`.
use support::server;

mod bridge_redis;
mod bridge_session_loss;
mod deploy_example;
mod examples;
mod redis_data_loss;
mod single_use;
mod tasks;
mod upstream;
mod upstream_concurrency;
mod upstream_pool;
mod upstream_rmcp;

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let probe = harness::Probe::run();
    let mut trials = Vec::new();
    trials.extend(bridge_redis::trials(&probe));
    trials.extend(bridge_session_loss::trials(&probe));
    trials.extend(deploy_example::trials(&probe));
    trials.extend(examples::trials(&probe));
    trials.extend(redis_data_loss::trials(&probe));
    trials.extend(single_use::trials(&probe));
    trials.extend(tasks::trials(&probe));
    trials.extend(upstream::trials(&probe));
    trials.extend(upstream_concurrency::trials(&probe));
    trials.extend(upstream_pool::trials(&probe));
    trials.extend(upstream_rmcp::trials(&probe));
    if !args.list {
        probe.announce();
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if !args.list && probe.has(harness::Need::Redis) {
        support::redis::delete_this_process_keys();
    }
    conclusion.exit_code()
}
