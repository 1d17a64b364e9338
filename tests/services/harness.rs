//! The services probed once before the tests run, and the trials built from the tests: run, or
//! ignored saying what they need, or failed when `MCP_REQUIRE_*` says the service must be there.

use std::future::Future;
use std::process::{Command, Stdio};

use libtest_mimic::{Failed, Trial};

/// A service a test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A Redis at `MCP_REDIS_URL` (else `127.0.0.1:6379`).
    Redis,
    /// `redis-server` on `PATH`, to start a Redis of the test's own.
    RedisServer,
    /// The real servers `scripts/upstream-servers.sh` installs (and its `upstream-rmcp` build).
    Upstreams,
}

impl Need {
    /// The trial's kind, shown before its name: `[needs Redis] single_use::…`.
    fn kind(self) -> &'static str {
        match self {
            Self::Redis => "needs Redis",
            Self::RedisServer => "needs redis-server",
            Self::Upstreams => "needs the real servers",
        }
    }

    /// Whether the environment says this service must be there (`MCP_REQUIRE_REDIS=1`,
    /// `MCP_REQUIRE_UPSTREAMS=1`): then a test that needs it fails without it.
    fn required(self) -> bool {
        let var = match self {
            Self::Redis | Self::RedisServer => "MCP_REQUIRE_REDIS",
            Self::Upstreams => "MCP_REQUIRE_UPSTREAMS",
        };
        std::env::var(var).is_ok_and(|value| value == "1")
    }

    /// How to run the tests that need it.
    fn how_to_run(self) -> &'static str {
        match self {
            Self::Redis => {
                "start a Redis (`redis-server --port 6379 --save ''`) or set \
                 MCP_REDIS_URL=redis://host:port"
            }
            Self::RedisServer => "install Redis (Debian: `apt-get install redis-server`)",
            Self::Upstreams => "run `bash scripts/upstream-servers.sh` (needs Node and Python)",
        }
    }

    fn var(self) -> &'static str {
        match self {
            Self::Redis | Self::RedisServer => "MCP_REQUIRE_REDIS=1",
            Self::Upstreams => "MCP_REQUIRE_UPSTREAMS=1",
        }
    }
}

/// What the probes found missing, each with why: made once, before any test runs.
#[derive(Debug)]
pub struct Probe {
    missing: Vec<(Need, String)>,
}

impl Probe {
    /// Probes each service: Redis answers `PING`, `redis-server --version` runs, the servers'
    /// entry points exist.
    pub fn run() -> Self {
        let mut missing = Vec::new();
        if !crate::support::redis::available() {
            let why = format!("no Redis answers at {}", crate::support::redis::redis_url());
            missing.push((Need::Redis, why));
        }
        let redis_server = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !redis_server {
            missing.push((Need::RedisServer, "no redis-server on PATH".to_owned()));
        }
        let servers = crate::upstream::not_installed();
        if !servers.is_empty() {
            let why = format!("not installed: {}", servers.join(", "));
            missing.push((Need::Upstreams, why));
        }
        Self { missing }
    }

    /// Whether `need` was found.
    pub fn has(&self, need: Need) -> bool {
        self.missing(need).is_none()
    }

    /// Why `need` is missing, if it is.
    fn missing(&self, need: Need) -> Option<&str> {
        self.missing
            .iter()
            .find(|(missing, _)| *missing == need)
            .map(|(_, why)| why.as_str())
    }

    /// Says, one line per missing service, which tests are ignored (or fail) and how to run them.
    pub fn announce(&self) {
        for (need, why) in &self.missing {
            let fate = if need.required() {
                format!("{} set: they FAIL", need.var())
            } else {
                format!("they are ignored ({} fails them instead)", need.var())
            };
            println!(
                "[{}] tests: {why}; {fate}; to run them, {}.",
                need.kind(),
                need.how_to_run()
            );
        }
    }
}

/// The trial of `test`, named `module::name`: run when every service in `needs` is there;
/// else ignored, its kind saying what it needs, unless that service is required (then it fails,
/// saying why). Run with `--include-ignored`, an ignored trial fails, saying why it cannot run.
fn trial(
    probe: &Probe,
    needs: &[Need],
    module_path: &str,
    name: &str,
    run: impl FnOnce() + Send + 'static,
) -> Trial {
    let module = module_path
        .split_once("::")
        .map_or(module_path, |(_, module)| module);
    let full = format!("{module}::{name}");
    let Some((need, why)) = needs
        .iter()
        .find_map(|need| probe.missing(*need).map(|why| (*need, why.to_owned())))
    else {
        return Trial::test(full, move || {
            run();
            Ok(())
        });
    };
    let cannot_run = format!(
        "{why}: this test cannot run; to run it, {}",
        need.how_to_run()
    );
    let trial = Trial::test(full, move || Err(Failed::from(cannot_run))).with_kind(need.kind());
    if need.required() {
        trial
    } else {
        trial.with_ignored_flag(true)
    }
}

/// An `async fn` test on a current-thread tokio runtime of its own, as `#[tokio::test]`.
pub fn current_thread<F>(
    probe: &Probe,
    needs: &[Need],
    module_path: &str,
    name: &str,
    test: fn() -> F,
) -> Trial
where
    F: Future<Output = ()> + 'static,
{
    trial(probe, needs, module_path, name, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(test());
    })
}

/// An `async fn` test on a multi-thread tokio runtime of its own with 4 workers, as
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 4)]`.
pub fn multi_thread<F>(
    probe: &Probe,
    needs: &[Need],
    module_path: &str,
    name: &str,
    test: fn() -> F,
) -> Trial
where
    F: Future<Output = ()> + 'static,
{
    trial(probe, needs, module_path, name, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(test());
    })
}

/// A plain `fn` test.
pub fn sync(probe: &Probe, needs: &[Need], module_path: &str, name: &str, test: fn()) -> Trial {
    trial(probe, needs, module_path, name, test)
}
