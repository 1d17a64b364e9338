//! The proxy binary's tests, one `harness = false` binary on libtest-mimic (as the library's
//! `tests/services`, whose `harness.rs` it shares): the pinned servers (`.cache/upstream`, from
//! `scripts/upstream-servers.sh`) and a Redis at `MCP_REDIS_URL` (else `127.0.0.1:6379`) are
//! probed once, in `main`, before any test runs. A test whose service is missing is an ignored
//! trial whose kind names what it needs (`[needs the real servers]`, `[needs Redis]`), counted in
//! cargo's summary, never a pass that checked nothing; with `MCP_REQUIRE_UPSTREAMS=1` /
//! `MCP_REQUIRE_REDIS=1` (as CI sets) it fails instead, and `--include-ignored` fails it saying
//! why. Each area is a module listing its tests in [`trials!`]; names are `module::test`, and
//! libtest-mimic takes at most one filter (`cargo test -p elicitation-proxy --test proxy --
//! gating::`).

#[allow(
    dead_code,
    reason = "shared with tests/services: this binary needs neither redis-server nor 4 workers"
)]
#[path = "../../tests/services/harness.rs"]
mod harness;

/// Lists a module's tests as `fn trials`, one `[needs…] runner name` entry each:
/// `[Upstreams, Redis] current_thread two_replicas_on_redis_share_approvals_once`. `needs` are
/// [`harness::Need`]s; `runner` is [`harness::current_thread`] (as `#[tokio::test]`) or
/// [`harness::sync`] (as `#[test]`).
macro_rules! trials {
    ($([$($need:ident),*] $run:ident $name:ident),* $(,)?) => {
        /// This module's tests, each ignored (saying what it needs) when a service it needs is
        /// missing.
        pub(crate) fn trials(probe: &crate::harness::Probe) -> Vec<libtest_mimic::Trial> {
            vec![$(
                crate::harness::$run(
                    probe,
                    &[$(crate::harness::Need::$need),*],
                    module_path!(),
                    stringify!($name),
                    $name,
                ),
            )*]
        }
    };
}
pub(crate) use trials;

mod support;

/// What `harness::Probe` asks of the real servers: which of them are not installed.
mod upstream {
    pub(crate) use crate::support::not_installed;
}

mod approvals;
mod audit;
mod conditions;
mod edges;
mod exposure;
mod flows;
mod gating;
mod identity;
mod limits;
mod newcomer;
mod pool;
mod proxy;
mod tasks;
mod upstreams;

fn main() -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let probe = harness::Probe::run();
    let mut trials = Vec::new();
    trials.extend(approvals::trials(&probe));
    trials.extend(audit::trials(&probe));
    trials.extend(conditions::trials(&probe));
    trials.extend(edges::trials(&probe));
    trials.extend(exposure::trials(&probe));
    trials.extend(flows::trials(&probe));
    trials.extend(gating::trials(&probe));
    trials.extend(identity::trials(&probe));
    trials.extend(limits::trials(&probe));
    trials.extend(newcomer::trials(&probe));
    trials.extend(pool::trials(&probe));
    trials.extend(proxy::trials(&probe));
    trials.extend(tasks::trials(&probe));
    trials.extend(upstreams::trials(&probe));
    if !args.list {
        probe.announce();
    }
    libtest_mimic::run(&args, trials).exit_code()
}
