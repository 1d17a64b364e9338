//! `elicitation-proxy`: approval gates and validated elicitation in front of any MCP server, from
//! a TOML file, for hosts of both eras over Streamable HTTP, stdio, or both at once.
//!
//! ```text
//! elicitation-proxy --config gates.toml            # serve
//! elicitation-proxy --config gates.toml --check    # check the file against the upstream, print each gate, exit
//! elicitation-proxy --config gates.toml --ephemeral-keys   # no [state] keys: a random key, this process only
//! elicitation-proxy --config gates.toml --stdio    # the host spawned it: MCP on stdin/stdout only
//! ```
//!
//! It is [`LegacyBridgeLayer`](tower_elicitation::bridge::LegacyBridgeLayer) (2025-era hosts)
//! in front of [`ElicitationLayer`] (the gates, validation, sealed state, single-use approvals)
//! in front of [`Upstream`] (the server: a stdio child or a URL; its own questions become
//! `input_required` rounds), or of several behind one fan-out (`[[upstream]]`: their names
//! prefixed, each call routed to its own; `fanout`), served with bounded read times and
//! connections, `[limits]` per caller (`limits`), `/healthz` (which of several is down),
//! `/metrics` (`metrics`), and a graceful shutdown on SIGTERM or Ctrl-C. SIGHUP, or a change to
//! the file (seen within a second), reads the file again and replaces the gates and the limits at
//! once; a file with a mistake keeps the old ones and says why. Approvals are bound to the caller
//! (`[identity] principal`); each decision is one JSON line on stderr (`decisions`), and, built
//! with `--features otel`, a span over OTLP (`telemetry`); a command upstream runs under
//! `--supervise`, so it never outlives the proxy (`supervise`). Everything it does, a Rust
//! program can compose from the library's layers.

mod approvals;
mod callers;
mod catalog;
mod config;
mod decisions;
mod error;
mod exposure;
mod fanout;
mod flows;
mod gates;
mod identity;
mod limits;
mod metrics;
mod policy;
mod routed;
mod serve;
mod shown;
mod stdio;
mod supervise;
mod targets;
mod telemetry;
mod template;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::{MemoryTaskStore, MemoryTokenStore};
use tower_elicitation::upstream::{Era, Http, Server, Stdio, Upstream};
use tower_elicitation::{ElicitationLayer, Keyring, UnrecordedTasks};

use crate::catalog::Catalog;
use crate::config::{Bound, Config, OnToolChange, PrincipalFrom, Serving, Source, secret};
use crate::error::Error;
use crate::gates::Offered;

/// mimalloc, as the benches use: the proxy allocates JSON values for every message it passes, and
/// under `perf` glibc's `malloc`/`free` took about a tenth of its CPU on a plain proxied call.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the command line asks for (`clap`'s derive: `--help` explains every flag, `--version`).
#[derive(clap::Parser)]
#[command(
    name = "elicitation-proxy",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("ELICITATION_PROXY_COMMIT"), ")"),
    about = "Approval gates and validated elicitation in front of any MCP server, from a TOML file",
    long_about = "Approval gates and validated elicitation in front of any MCP server, from a TOML \
file: each gated tool, prompt or resource asks its question (a form or a URL) before the call \
reaches the server, for hosts of both eras (2026-07-28 and 2025), over Streamable HTTP or stdio.",
    after_help = "The config file: [upstream] (a command or a url; or several [[upstream]], each \
named, their tools prefixed: examples/proxy/team.toml), [listen], [state], [identity], [log], \
[approvals], [limits], [telemetry] (built with --features otel) and [[gate]]. An annotated example: examples/proxy/filesystem.toml; every \
key: the module docs of proxy/src/config.rs (in the repository). Logs: RUST_LOG (e.g. \
RUST_LOG=debug); each decision is one JSON line on stderr."
)]
struct Options {
    /// The TOML file to serve: the upstream server and the gates in front of it.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Check the file against the upstream (started, its tools listed), print each gate and
    /// exit: 0 when all is valid, 1 with the cause when not (the upstream's start included).
    #[arg(long)]
    check: bool,
    /// Without `[state] keys`, seal with a random key for this process only (approvals and
    /// retries do not survive a restart, nor reach another replica); as `[state]
    /// ephemeral_keys = true`.
    #[arg(long)]
    ephemeral_keys: bool,
    /// Speak MCP on stdin and stdout only (a desktop host spawned the proxy), listening on no
    /// address whatever `[listen]` says. `[listen] stdio = true` serves stdio too: alone, or
    /// beside HTTP when the file names `[listen] http` as well.
    #[arg(long)]
    stdio: bool,
    /// With `--check`: say which rule decides a call of TOOL with these arguments (a JSON
    /// object; `{}` when left out), and why: each rule that matches it, in order, and what its
    /// `when` says. `prompt:NAME` and `resource:URI` explain a prompt or a resource.
    #[arg(long, value_name = "TOOL", num_args = 1..=2, requires = "check")]
    explain: Option<Vec<String>>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--supervise") {
        let command = match args.get(1).map(String::as_str) {
            Some("--") => &args[2..],
            _ => &args[1..],
        };
        return supervise::run(command);
    }
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(serve_main()),
        Err(error) => {
            eprintln!("elicitation-proxy: cannot start the runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve_main() -> ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::Targets};
    // `--help` and `--version` print and exit 0; a mistake prints the usage and exits 2.
    let options = match <Options as clap::Parser>::try_parse() {
        Ok(options) => options,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    // `[telemetry]`, read before the subscriber it is a layer of.
    let telemetry = match telemetry::Telemetry::start(&options.config, options.check) {
        Ok(telemetry) => telemetry,
        Err(why) => {
            eprintln!("elicitation-proxy: {why}");
            return ExitCode::FAILURE;
        }
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_elicitation::upstream=warn".into()),
        );
    // The counters see the layer's decisions (debug events) whatever the log level.
    let metrics = metrics::Metrics::default();
    let counted = metrics.clone().with_filter(
        Targets::new()
            .with_target("tower_elicitation", tracing::Level::DEBUG)
            .with_target(decisions::REFUSAL_TARGET, tracing::Level::INFO)
            .with_target(metrics::UPSTREAM_TARGET, tracing::Level::DEBUG),
    );
    // One JSON line per decision, whatever the log level.
    let labels = decisions::Labels::default();
    let output = decisions::Output::default();
    let decided = decisions::Decisions {
        labels: labels.clone(),
        output: output.clone(),
    }
    .with_filter(
        Targets::new()
            .with_target("tower_elicitation", tracing::Level::DEBUG)
            .with_target("elicitation_proxy", tracing::Level::INFO)
            .with_target(decisions::RULE_TARGET, tracing::Level::DEBUG),
    );
    tracing_subscriber::registry()
        .with(logs)
        .with(counted)
        .with(decided)
        .with(telemetry.layer())
        .init();
    let ran = run(options, metrics, labels, output).await;
    telemetry.shutdown().await;
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("elicitation-proxy: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    options: Options,
    metrics: metrics::Metrics,
    labels: decisions::Labels,
    output: decisions::Output,
) -> Result<(), Error> {
    let (source, config) = read(&options, &output)?;
    let stores = Stores::open(&options, &config).await?;
    let settings = Settings::of(&options, &config)?;
    let upstreams = Upstreams::start(&options, &config, &settings, &stores).await?;
    let backends = flows::Backends {
        redis: stores.flows.clone(),
        http: flows::http_client()?,
        approvals: Arc::new(approvals_of(&source, &config, settings.serving)?),
    };
    let catalog = catalog_of(&config, &backends, &metrics).await?;
    let offered = upstreams
        .ready(&options, &source, &config, &catalog)
        .await?;
    let mut built = assemble(&source, &config, &offered, &backends, &catalog)?;
    let exposure = exposure::Exposure::of(&config.upstreams, &built.policy)?;
    built
        .warnings
        .extend(exposure.warnings(&built.policy, &offered));
    built
        .warnings
        .extend(anonymous_share(&config, settings.serving)?);
    if options.check {
        let checked = check(&options, &source, &config, &built, &exposure, &offered);
        upstreams.lister.shutdown().await;
        return checked;
    }
    for line in exposure.summary(&offered) {
        tracing::info!("{line}");
    }
    for warning in &built.warnings {
        tracing::warn!("{warning}");
    }
    let spent = LayerStores::new(stores.redis.clone());
    labels.set(labels_of(&built.built));
    let first = layer(
        &stores.keyring,
        &settings.principal,
        &spent,
        settings.max_body_bytes,
        built.built,
    )?;
    let routed = upstreams.routed(&config)?;
    let stack = serve::Stack::new(&config, first, exposure, routed, stores.redis.as_ref())?;
    let policy = Arc::new(Policy {
        path: options.config.clone(),
        shape: shape(&config.upstreams),
        source: RwLock::new(source),
        offered: RwLock::new(offered),
        backends,
        catalog,
        keyring: stores.keyring,
        principal: settings.principal.clone(),
        spent,
        labels,
        stack: stack.clone(),
        mode: RwLock::new(config.upstreams.first().on_tool_change()?),
        max_body_bytes: settings.max_body_bytes,
        body_timeout: settings.body_timeout,
        rate_limits: RwLock::new(settings.rate_limits.map(Arc::new)),
        upstreams: upstreams.lister.clone(),
        building: tokio::sync::Mutex::new(()),
    });
    reload_on_signals(&policy)?;
    let served = serve_app(&config, settings.serving, &policy, &stack, metrics).await;
    upstreams.lister.shutdown().await;
    served
}

/// Reloads `policy`'s file on SIGHUP and when it changes, each reload in the task that saw why.
fn reload_on_signals(policy: &Arc<Policy>) -> Result<(), Error> {
    let reload = {
        let policy = Arc::clone(policy);
        move || {
            let policy = Arc::clone(&policy);
            async move { policy.reload().await }
        }
    };
    serve::reload_on_hangup(reload.clone())?;
    serve::reload_on_change(policy.path.clone(), reload);
    Ok(())
}

/// The file, read and checked, its log output set (unless `--check`).
fn read(options: &Options, output: &decisions::Output) -> Result<(Source, Config), Error> {
    let source = Source::read(&options.config)?;
    let config = source.parse()?;
    source.check(&config)?;
    config::ConfigError::gather(telemetry::check(&source, &config))?;
    let serving = config.listen.serves(options.stdio);
    let log_line = config
        .log
        .to
        .as_ref()
        .map(|to| source.line_of(to.span().start));
    let log_to = config
        .log
        .to(serving.stdio())
        .map_err(|why| source.error(log_line, why))?;
    if !options.check {
        output.set(&config.log, log_to)?;
    }
    Ok((source, config))
}

/// The keys that seal, and the Redis every replica shares when the file names one.
struct Stores {
    keyring: Keyring,
    /// `[state] redis`: the layer's single-use tokens and tasks, the bridge's sessions and
    /// answers, the adapter's routed retries.
    redis: Option<RedisStore>,
    /// The same Redis (its URL read once), for the URL gates' checks and the tools' definitions.
    flows: Option<redis::aio::ConnectionManager>,
}

impl Stores {
    /// `[state]`'s keys (none needed by `--check`, which seals nothing) and Redis, reached.
    async fn open(options: &Options, config: &Config) -> Result<Self, Error> {
        let keyring = if options.check {
            Keyring::ephemeral()
        } else {
            keyring(
                config,
                options.ephemeral_keys || config.state.ephemeral_keys,
            )?
        };
        let Some(url) = &config.state.redis else {
            return Ok(Self {
                keyring,
                redis: None,
                flows: None,
            });
        };
        let url = secret(url)?;
        let store = RedisStore::builder(url.as_str()).build()?;
        store.ping().await?;
        let flows = redis::Client::open(url)?
            .get_connection_manager_with_config(own_connection())
            .await?;
        Ok(Self {
            keyring,
            redis: Some(store),
            flows: Some(flows),
        })
    }
}

/// The bounds of the proxy's own connection to `[state] redis`: the library's store's defaults
/// (the proxy builds its store with them), written out, so that a stalled Redis fails a URL
/// gate's check or the catalog's write as promptly as the layer's spend, and a change of either
/// default shows here.
///
/// Why a second connection at all: the store keeps its connections private, since its public API
/// names no `redis` type (`scripts/external_types.py`), and the proxy's commands (the completion
/// taken once, a Lua script; the tools' definitions, a hash) are its own. Both are opened here,
/// from the one URL read once.
fn own_connection() -> redis::aio::ConnectionManagerConfig {
    use tower_elicitation::redis::RedisStoreBuilder as Store;
    redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Store::DEFAULT_CONNECT_TIMEOUT))
        .set_response_timeout(Some(Store::DEFAULT_RESPONSE_TIMEOUT))
        .set_number_of_retries(1)
}

/// What the file says that every step reads: how the proxy is served, whose the calls are, and
/// the bounds.
struct Settings {
    serving: Serving,
    principal: PrincipalFrom,
    /// `[listen] max_body_bytes`.
    max_body_bytes: usize,
    /// `[listen] body_timeout_secs`.
    body_timeout: Duration,
    /// `[limits]`, when the file sets any.
    rate_limits: Option<limits::RateLimits>,
}

impl Settings {
    fn of(options: &Options, config: &Config) -> Result<Self, Error> {
        let principal = config.identity.principal()?;
        Ok(Self {
            serving: config.listen.serves(options.stdio),
            max_body_bytes: Bound::MAX_BODY_BYTES.count(config.listen.max_body_bytes.as_ref())?,
            body_timeout: Bound::BODY_TIMEOUT.secs(config.listen.body_timeout_secs.as_ref())?,
            rate_limits: limits::RateLimits::new(&config.limits, principal.clone())?,
            principal,
        })
    }
}

/// The upstreams the file names, started: each one's adapter, and the one service that lists
/// and routes to them (the fan-out of several).
struct Upstreams {
    /// The first (the only one of a lone `[upstream]`).
    first: Upstream,
    lister: routed::Routed,
    /// What each adapter is built with (a caller's own too).
    spawner: Spawner,
}

impl Upstreams {
    /// Starts an adapter for each `[upstream]`; with several, waits for each to start (one that
    /// does not is down, unless `--check`).
    async fn start(
        options: &Options,
        config: &Config,
        settings: &Settings,
        stores: &Stores,
    ) -> Result<Self, Error> {
        let spawner = Spawner {
            base: identified(
                ElicitationLayer::new(stores.keyring.clone()),
                &settings.principal,
            )
            .max_body_bytes(settings.max_body_bytes),
            max_body_bytes: settings.max_body_bytes,
            redis: stores.redis.clone(),
        };
        let mut spawned = Vec::new();
        for table in &config.upstreams.list {
            let settings_of = table.get_ref();
            if config.upstreams.several {
                tracing::info!(
                    "starting upstream {:?}: {}",
                    settings_of.name(),
                    starting(settings_of)
                );
            } else {
                tracing::info!("starting upstream: {}", starting(settings_of));
            }
            let share = fair_share(config, settings_of, settings.serving)?;
            // One of several whose command cannot be run is down, not the proxy (`--check` says).
            let refuse_unrunnable = options.check || !config.upstreams.several;
            let upstream = spawner.spawn(settings_of, share, None, refuse_unrunnable);
            spawned.push(match upstream {
                Err(why) if config.upstreams.several => {
                    return Err(format!("upstream {:?}: {why}", settings_of.name()).into());
                }
                upstream => upstream?,
            });
        }
        let first = spawned[0].clone();
        let lister = if config.upstreams.several {
            let mut members = Vec::new();
            for (table, upstream) in config.upstreams.list.iter().zip(spawned) {
                let settings = table.get_ref();
                members.push(fanout::Member {
                    name: settings.name().to_owned(),
                    prefix: settings.exposed_prefix(),
                    upstream,
                    sessions: settings.sessions()?,
                    hidden: RwLock::default(),
                    callers: per_caller(config, settings, &spawner),
                });
            }
            started(&members, options.check).await?;
            let fanout = fanout::Fanout::new(members, settings.max_body_bytes);
            fanout.hide_resources(exposure::hidden_resources(&config.upstreams)?);
            routed::Routed::fanout(fanout)
        } else {
            let first_table = config.upstreams.first();
            routed::Routed::single(first.clone()).named(first_table.name(), first_table.sessions()?)
        };
        Ok(Self {
            first,
            lister,
            spawner,
        })
    }

    /// What the upstreams offer once started (the catalog learns their tools), with every
    /// session of each up or given up on; several that list one name for the client are refused.
    async fn ready(
        &self,
        options: &Options,
        source: &Source,
        config: &Config,
        catalog: &Catalog,
    ) -> Result<Offered, Error> {
        let offered = offered(&self.lister, catalog, options.check).await?;
        if let Some(fanout) = self.lister.several() {
            let collisions = fanout.collisions();
            if !collisions.is_empty() {
                self.lister.shutdown().await;
                return Err(format!(
                    "{}: several upstreams list the same name for the client: {}",
                    source.path.display(),
                    collisions.join("; ")
                )
                .into());
            }
        }
        let mut sessions = 0;
        match self.lister.several() {
            Some(fanout) => {
                for member in fanout.members() {
                    // One that did not start is restarted in the background; nobody waits for it.
                    if member.upstream.live_sessions() > 0 {
                        sessions += all_sessions_live(&member.upstream, member.sessions).await;
                    }
                }
            }
            None => {
                sessions =
                    all_sessions_live(&self.first, config.upstreams.first().sessions()?).await;
            }
        }
        tracing::info!(
            sessions,
            tools = offered.tools.len(),
            prompts = offered.prompts.len(),
            resources = offered.resources.len(),
            "upstream ready"
        );
        Ok(offered)
    }

    /// What the layer calls: the upstreams, or with `[identity] pass_to_upstream` an adapter of
    /// its own per caller, sending the caller's credential.
    fn routed(&self, config: &Config) -> Result<routed::Routed, Error> {
        let first = config.upstreams.first();
        if config.upstreams.several || !config.identity.passes_to(first.name(), false) {
            return Ok(self.lister.clone());
        }
        if first.url.is_none() {
            return Err("[identity] pass_to_upstream needs an [upstream] url".into());
        }
        let per_caller = per_caller(config, first, &self.spawner);
        Ok(routed::Routed::single(self.first.clone())
            .with_callers(per_caller)
            .named(first.name(), first.sessions()?))
    }
}

/// With `[identity] pass_to_upstream` naming the upstream of `settings`: its adapters of each
/// caller's own credentials.
fn per_caller(
    config: &Config,
    settings: &config::Upstream,
    spawner: &Spawner,
) -> Option<callers::PerCaller> {
    if !config
        .identity
        .passes_to(settings.name(), config.upstreams.several)
    {
        return None;
    }
    let (upstream, spawner) = (settings.clone(), spawner.clone());
    Some(callers::PerCaller::new(
        config.identity.allow_anonymous,
        config.identity.max_callers.unwrap_or(callers::MAX_CALLERS),
        Box::new(move |authorization| {
            // One caller's own adapter: a share of it would only throttle that caller.
            spawner.spawn(&upstream, 1.0, Some(authorization), true)
        }),
    ))
}

/// The tools' definitions as first listed: remembered in Redis (per set of upstreams) when the
/// file names one, so that a restart still sees what changed.
async fn catalog_of(
    config: &Config,
    backends: &flows::Backends,
    metrics: &metrics::Metrics,
) -> Result<Arc<Catalog>, Error> {
    let remembered = backends.redis.clone().map(|redis| {
        let upstream: String = config
            .upstreams
            .list
            .iter()
            .map(|table| format!("{:?} {:?}", table.get_ref().command, table.get_ref().url))
            .collect();
        let key = catalog::digest(&Value::String(upstream));
        (redis, format!("elicitation-proxy:tool-definitions:{key}"))
    });
    let catalog = Arc::new(Catalog::new(remembered, metrics.clone()));
    catalog.load().await?;
    Ok(catalog)
}

/// `--check`: the rules in order, what is exposed, the warnings, and either `--explain`'s
/// answer or the summary.
fn check(
    options: &Options,
    source: &Source,
    config: &Config,
    built: &gates::Gates,
    exposure: &exposure::Exposure,
    offered: &Offered,
) -> Result<(), Error> {
    print_rules(built);
    for line in exposure.summary(offered) {
        println!("{line}");
    }
    for warning in &built.warnings {
        println!("warning: {warning}");
    }
    if let Some(explain) = &options.explain {
        return explain_call(&built.policy, explain);
    }
    println!(
        "{}: {}, all valid",
        source.path.display(),
        gates::summary(config.gates.len(), &built.built)
    );
    Ok(())
}

/// Serves the app on stdio, HTTP or both, as the file and the command line say, until the
/// host leaves or a signal ends it. Callers over HTTP are verified; the host on stdio is the
/// one that spawned the proxy.
async fn serve_app(
    config: &Config,
    serving: Serving,
    policy: &Arc<Policy>,
    stack: &serve::Stack,
    metrics: metrics::Metrics,
) -> Result<(), Error> {
    let guard = if serving.http() {
        guard_of(config, policy).await?
    } else {
        None
    };
    // The approval pages, verifying approvers as `/mcp` verifies callers.
    let pages = match &guard {
        Some(guard) => approvals::routes(Arc::clone(&policy.backends.approvals), Arc::clone(guard)),
        None => axum::Router::new(),
    };
    let app = serve::app(stack, metrics, pages);
    let app = {
        let policy = Arc::clone(policy);
        app.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let policy = Arc::clone(&policy);
                async move { observe(&policy, request, next).await }
            },
        ))
    };
    let app = telemetry::traced(app);
    let on_stdio = || {
        let caller = identity::stdio_caller(
            config
                .identity
                .stdio_principal
                .as_ref()
                .map(|name| name.get_ref().as_str()),
        );
        identity::as_stdio(app.clone(), caller)
    };
    let on_http = || match &guard {
        Some(guard) => identity::protect(app.clone(), Arc::clone(guard)),
        None => app.clone(),
    };
    match serving {
        Serving::Stdio => stdio::run(on_stdio()).await,
        Serving::Http => {
            let listener = serve::bind(config, true).await?;
            serve::run(config, listener, on_http(), std::future::pending()).await
        }
        Serving::Both => {
            // Bound first: an address in use ends the proxy before the host's first message.
            let listener = serve::bind(config, false).await?;
            let (host_gone, gone) = tokio::sync::oneshot::channel::<()>();
            let host = async {
                let served = stdio::run(on_stdio()).await;
                // The host that spawned the proxy is gone: HTTP ends too, gracefully.
                let _ = host_gone.send(());
                served
            };
            let http = serve::run(config, listener, on_http(), async {
                let _ = gone.await;
                tracing::info!("stdin closed: the HTTP listener stops too");
            });
            let (host, http) = tokio::join!(host, http);
            host.and(http)
        }
    }
}

/// What a reload may not change while the proxy serves: whether the file names several
/// upstreams, and their names and prefixes.
fn shape(upstreams: &config::Upstreams) -> Vec<(String, String)> {
    let mut shape: Vec<(String, String)> = upstreams
        .list
        .iter()
        .map(|table| {
            let upstream = table.get_ref();
            (upstream.name().to_owned(), upstream.exposed_prefix())
        })
        .collect();
    shape.push((upstreams.several.to_string(), String::new()));
    shape
}

/// Waits for each of several upstreams to start (as [`offered`] waits for one). With `once`
/// (`--check`) one that fails is the answer, naming it; serving, it is logged and the others
/// serve without it (its adapter keeps restarting it).
async fn started(members: &[fanout::Member], once: bool) -> Result<(), Error> {
    let waits = members.iter().map(|member| async move {
        let alone = routed::Routed::single(member.upstream.clone());
        let outcome = patiently(once, || async {
            rpc(&alone, "server/discover", json!({})).await.map(drop)
        })
        .await;
        (member, outcome)
    });
    for (member, outcome) in futures_util::future::join_all(waits).await {
        if let Err(why) = outcome {
            if once {
                return Err(format!("upstream {:?}: {why}", member.name).into());
            }
            tracing::error!(upstream = %member.name, %why, "an upstream did not start: the others serve without it, and it is started again in the background");
        }
    }
    Ok(())
}

/// The file as last read without a mistake.
fn source_of(policy: &Policy) -> Source {
    policy
        .source
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// How HTTP callers are verified (`[identity] jwt`, `api_keys`): `None` when they are not.
async fn guard_of(config: &Config, policy: &Policy) -> Result<Option<Arc<identity::Guard>>, Error> {
    let jwt = match &config.identity.jwt {
        Some(spec) => {
            let jwt = identity::Jwt::new(spec.get_ref().clone())?;
            jwt.prime().await;
            Some(jwt)
        }
        None => None,
    };
    let api_keys = match &config.identity.api_keys {
        Some(value) => Some(source_of(policy).api_keys(value)?),
        None => None,
    };
    Ok((jwt.is_some() || api_keys.is_some()).then(|| Arc::new(identity::Guard { jwt, api_keys })))
}

/// The approval pages the file's `approvers = "url"` gates link to, or why it may have none.
fn approvals_of(
    source: &Source,
    config: &Config,
    serving: Serving,
) -> Result<approvals::Approvals, Error> {
    let line = config
        .approvals
        .url
        .as_ref()
        .map(|url| source.line_of(url.span().start));
    let listens_everywhere = ["0.0.0.0:", "[::]:"]
        .iter()
        .any(|any| config.listen.http().starts_with(any));
    let base = match &config.approvals.url {
        Some(url) => {
            let url = url.get_ref();
            let parsed = reqwest::Url::parse(url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .filter(|u| u.path() == "/" && u.query().is_none());
            if parsed.is_none() {
                return Err(source
                    .error(line, format!("[approvals] url {url:?}: an http(s) origin, such as \"https://gate.example.com\", with no path"))
                    .into());
            }
            url.clone()
        }
        None => format!("http://{}", config.listen.http()),
    };
    let unavailable = if !serving.http() {
        Some("serves its page over HTTP: not with stdio alone (name [listen] http too)".to_owned())
    } else if !config.identity.verifies() {
        Some("needs [identity] jwt or api_keys: approvers sign in with them".to_owned())
    } else if config.state.redis.is_some() {
        Some("keeps the calls waiting for approval in this process: not with [state] redis (several replicas) yet".to_owned())
    } else if config.approvals.url.is_none() && listens_everywhere {
        Some("needs [approvals] url: the proxy listens on every address, and cannot tell which one an approver reaches".to_owned())
    } else {
        None
    };
    Ok(approvals::Approvals::new(
        &base,
        config.approvals.approvers.clone(),
        unavailable,
    ))
}

/// The file's gates, and those the tools changed since first listed get.
fn assemble(
    source: &Source,
    config: &Config,
    offered: &Offered,
    backends: &flows::Backends,
    catalog: &Arc<Catalog>,
) -> Result<gates::Gates, Error> {
    let mode = config.upstreams.first().on_tool_change()?;
    let mut built = gates::build(source, config, offered, backends, catalog)?;
    built.built.extend(gates::changed(catalog, mode));
    Ok(built)
}

/// What the gates are built from, kept to build them again when a tool changes.
struct Policy {
    /// The file as last read without a mistake.
    source: RwLock<Source>,
    offered: RwLock<Offered>,
    backends: flows::Backends,
    catalog: Arc<Catalog>,
    keyring: Keyring,
    principal: PrincipalFrom,
    spent: LayerStores,
    labels: decisions::Labels,
    stack: serve::Stack,
    mode: RwLock<OnToolChange>,
    /// `[listen] max_body_bytes`: the largest request body read.
    max_body_bytes: usize,
    /// `[listen] body_timeout_secs`: how long a request's body may take to arrive.
    body_timeout: Duration,
    /// `[limits]`: the calls each caller may make a minute, when the file sets any (a reload
    /// replaces them, carrying the counts over).
    rate_limits: RwLock<Option<Arc<limits::RateLimits>>>,
    /// The upstreams, for the resources each of several hides.
    upstreams: routed::Routed,
    /// The file a reload reads.
    path: PathBuf,
    /// What a reload may not change ([`shape`]).
    shape: Vec<(String, String)>,
    /// Held while the gates are built again (a reload, or a tool that changed): two builds
    /// never interleave.
    building: tokio::sync::Mutex<()>,
}

impl Policy {
    /// Reads the file again (SIGHUP, or a change to it) and, when it has no mistake, puts its
    /// gates in front of every request from now on; how many gates there are. A file with a
    /// mistake changes nothing. One reload at a time.
    async fn reload(&self) -> Result<usize, Error> {
        let _building = self.building.lock().await;
        let source = Source::read(&self.path)?;
        let config = source.parse()?;
        source.check(&config)?;
        config::ConfigError::gather(telemetry::check(&source, &config))?;
        if shape(&config.upstreams) != self.shape {
            return Err(format!(
                "{}: the upstreams' tables, names or prefixes changed: restart the proxy to change them",
                source.path.display()
            )
            .into());
        }
        let mode = config.upstreams.first().on_tool_change()?;
        let rate_limits = limits::RateLimits::new(&config.limits, self.principal.clone())?;
        let offered = offered_now(&self.upstreams, &self.catalog).await?;
        // Checked before anything is accepted: a file with a mistake changes nothing.
        gates::build(&source, &config, &offered, &self.backends, &self.catalog)?;
        // A reload accepts the tools' definitions as listed now.
        self.catalog.accept();
        *self.mode.write().unwrap_or_else(|e| e.into_inner()) = mode;
        *self.source.write().unwrap_or_else(|e| e.into_inner()) = source;
        *self.offered.write().unwrap_or_else(|e| e.into_inner()) = offered;
        let mut serving_limits = self.rate_limits.write().unwrap_or_else(|e| e.into_inner());
        *serving_limits = rate_limits.map(|limits| match serving_limits.as_deref() {
            Some(old) => Arc::new(limits.carrying(old)),
            None => Arc::new(limits),
        });
        drop(serving_limits);
        self.rebuild()
    }

    /// [`rebuild`](Self::rebuild), once no other build runs: for a tool that changed.
    async fn rebuild_now(&self) -> Result<usize, Error> {
        let _building = self.building.lock().await;
        self.rebuild()
    }

    /// Builds the gates (and the exposure) again from the file as last read and the tools as
    /// known now, and puts them in front of every request from now on; how many gates there
    /// are. The caller holds `building`.
    fn rebuild(&self) -> Result<usize, Error> {
        let source = self
            .source
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let config = source.parse()?;
        let offered = self
            .offered
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let built = assemble(&source, &config, &offered, &self.backends, &self.catalog)?;
        let exposure = exposure::Exposure::of(&config.upstreams, &built.policy)?;
        if let Some(fanout) = self.upstreams.several() {
            fanout.hide_resources(exposure::hidden_resources(&config.upstreams)?);
        }
        let count = built.built.len();
        self.labels.set(labels_of(&built.built));
        self.stack.replace(
            layer(
                &self.keyring,
                &self.principal,
                &self.spent,
                self.max_body_bytes,
                built.built,
            )?,
            exposure,
        );
        Ok(count)
    }

    fn hides(&self) -> bool {
        *self.mode.read().unwrap_or_else(|e| e.into_inner()) == OnToolChange::Hide
    }
}

/// Counts each call against `[limits]` (a call over a limit is refused, 429), and reads every
/// `tools/list` answer on its way to the client: the catalog learns what is listed, a tool
/// changed since first listed gets its gate before the answer leaves (and, with
/// `on_tool_change = "hide"`, is taken out of it).
async fn observe(
    policy: &Policy,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.method() != http::Method::POST || !request.uri().path().starts_with("/mcp") {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(
        policy.body_timeout,
        axum::body::to_bytes(body, policy.max_body_bytes),
    )
    .await;
    let Ok(Ok(bytes)) = read else {
        let error = json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32600, "message": format!(
            "Request body too large (more than {} bytes: [listen] max_body_bytes), or too slow",
            policy.max_body_bytes
        )}});
        return (http::StatusCode::PAYLOAD_TOO_LARGE, axum::Json(error)).into_response();
    };
    telemetry::note(&parts, &bytes);
    let rate_limits = policy
        .rate_limits
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(refusal) =
        rate_limits.and_then(|limits| limits.check(&parts, &bytes, std::time::Instant::now()))
    {
        return limits::refused(&bytes, &refusal);
    }
    let listing = bytes.windows(10).any(|w| w == b"tools/list")
        && serde_json::from_slice::<Value>(&bytes)
            .is_ok_and(|message| message["method"] == "tools/list");
    let response = next
        .run(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        ))
        .await;
    if !listing || !response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let event_stream = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let Ok(bytes) = axum::body::to_bytes(body, catalog::MAX_LISTING_BYTES).await else {
        let error = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32603, "message": "The tool list could not be read"}});
        return (http::StatusCode::BAD_GATEWAY, axum::Json(error)).into_response();
    };
    let (rewritten, changes) =
        catalog::read_listing(&policy.catalog, &bytes, event_stream, policy.hides());
    if !changes.is_empty()
        && let Err(error) = policy.rebuild_now().await
    {
        tracing::error!(%error, "a tool changed, and the gates could not be built again");
        let error = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32603, "message": "A tool changed and the proxy could not gate it"}});
        return (http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response();
    }
    let body = match rewritten {
        Some(body) => {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            axum::body::Body::from(body)
        }
        None => axum::body::Body::from(bytes),
    };
    axum::response::Response::from_parts(parts, body)
}

/// Each caller's share of `upstream`'s bounds: its `fair_share`, else a quarter, or all of
/// them where every call is one caller's (`[identity] principal = "none"`, or one host on
/// stdio alone), whom a share would only throttle.
fn fair_share(
    config: &Config,
    upstream: &config::Upstream,
    serving: Serving,
) -> Result<f64, Error> {
    let one_caller =
        serving == Serving::Stdio || config.identity.principal()? == PrincipalFrom::Nobody;
    Ok(match &upstream.fair_share {
        None if one_caller => 1.0,
        _ => upstream.fair_share()?,
    })
}

/// A warning when the file says nothing of who the callers over HTTP are (no `[identity]` `jwt`,
/// `api_keys` or `principal`): the layer's default then tells them apart only by the
/// `Authorization` header each sends, unverified, and every call without one is the same
/// anonymous caller's, so all of those together may hold only `fair_share` of an upstream's
/// requests in flight and parked calls (a quarter by default): a team's hosts that send no
/// credentials would be refused from the 17th call in flight at once, with the default bounds.
/// Only where the proxy listens beyond loopback (on `127.0.0.1`, as the shipped examples do, the
/// callers are one person's hosts), and for an upstream that shares its bounds (with
/// `pass_to_upstream` each caller has an adapter of its own).
fn anonymous_share(config: &Config, serving: Serving) -> Result<Option<String>, Error> {
    let identity = &config.identity;
    let unsaid = serving.http()
        && !config.listen.on_loopback()
        && identity.principal()? == PrincipalFrom::Verified
        && !identity.verifies();
    if !unsaid {
        return Ok(None);
    }
    for table in &config.upstreams.list {
        let upstream = table.get_ref();
        if identity.passes_to(upstream.name(), config.upstreams.several) {
            continue;
        }
        let share = fair_share(config, upstream, serving)?;
        if share < 1.0 {
            return Ok(Some(format!(
                "no [identity] says who the callers over HTTP are (no jwt, api_keys or \
                 principal): they are told apart only by the Authorization header each sends, \
                 unverified, and the calls without one are one anonymous caller's, who may hold \
                 {share} of each upstream's requests in flight and parked calls; verify callers \
                 with [identity], or set [upstream] fair_share = 1"
            )));
        }
    }
    Ok(None)
}

/// Waits (30 s at most) until each of a pool's `sessions` is up, so that the first callers
/// spread over all of them; how many are. One still down is restarted in the background.
async fn all_sessions_live(upstream: &Upstream, sessions: usize) -> usize {
    for _ in 0..600 {
        if upstream.live_sessions() >= sessions {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let live = upstream.live_sessions();
    if live < sessions {
        tracing::warn!(
            live,
            sessions,
            "not every session of the upstream started yet"
        );
    }
    live
}

/// The keys that seal `requestState`: `[state] keys`, else (when allowed) a random one.
fn keyring(config: &Config, ephemeral: bool) -> Result<Keyring, Error> {
    let given = config.state.keys.as_deref().map(secret).transpose();
    match given {
        Ok(Some(keys)) => Ok(Keyring::parse(&keys)?),
        Ok(None) if config.state.ephemeral_keys => {
            // Asked for on purpose in the file: said, not warned.
            tracing::info!("[state] ephemeral_keys = true: a random key for this process only; retries fail across restarts and replicas");
            Ok(Keyring::ephemeral())
        }
        Ok(None) | Err(_) if ephemeral => {
            tracing::warn!("no [state] keys: a random key for this process only; retries fail across restarts and replicas");
            Ok(Keyring::ephemeral())
        }
        Err(why) => Err(format!("[state] keys: {why}; refusing to start without keys unless --ephemeral-keys").into()),
        Ok(None) => Err("[state] keys is not set (e.g. keys = \"env:MCP_REQUEST_STATE_KEYS\"); refusing to start without keys unless --ephemeral-keys".into()),
    }
}

/// What every upstream adapter is built with: the layer it serves (the caller's identity, the
/// keyring), the largest body it reads, and the Redis its retries are routed through.
#[derive(Clone)]
struct Spawner {
    base: ElicitationLayer,
    max_body_bytes: usize,
    redis: Option<RedisStore>,
}

impl Spawner {
    /// The upstream adapter for `settings` (its timeouts and bounds the file's), sending
    /// `authorization` (a caller's, in place of the file's) when given. A command that cannot
    /// be run is refused first only with `refuse_unrunnable`; without, its adapter starts it
    /// (and fails, and tries again) as any other that fails to start: one of several upstreams
    /// that serve without it.
    fn spawn(
        &self,
        settings: &config::Upstream,
        fair_share: f64,
        authorization: Option<&http::HeaderValue>,
        refuse_unrunnable: bool,
    ) -> Result<Upstream, Error> {
        let (base, redis, max_body_bytes) = (&self.base, self.redis.as_ref(), self.max_body_bytes);
        let server = server(settings, authorization, refuse_unrunnable)?;
        let mut builder = Upstream::builder(server).for_layer(base);
        if let Some(redis) = redis {
            builder = builder.route_retries(redis.pending_answers());
        }
        builder = builder
            .server_questions(settings.server_questions()?)
            .sessions(settings.sessions()?)
            .fair_share(fair_share)
            .max_body_bytes(max_body_bytes)
            .request_timeout(Bound::REQUEST_TIMEOUT.secs(settings.request_timeout_secs.as_ref())?)
            .max_parked(Bound::MAX_PARKED.count(settings.max_parked.as_ref())?)
            .parked_timeout(Bound::PARKED_TIMEOUT.secs(settings.parked_timeout_secs.as_ref())?)
            .restart_backoff(Bound::RESTART_BACKOFF.secs(settings.restart_backoff_secs.as_ref())?);
        if let Some(era) = &settings.era {
            builder = builder.era(match era.as_str() {
                "detect" => Era::Detect,
                "2025" => Era::V2025,
                "2026" => Era::V2026,
                other => {
                    return Err(format!("[upstream] era {other:?}: detect, 2025 or 2026").into());
                }
            });
        }
        Ok(builder.spawn()?)
    }
}

/// The upstream the file names; `authorization` replaces the file's `Authorization` header. A
/// command that cannot be run is refused first when `refuse_unrunnable`.
fn server(
    upstream: &config::Upstream,
    authorization: Option<&http::HeaderValue>,
    refuse_unrunnable: bool,
) -> Result<Server, Error> {
    match (&upstream.command, &upstream.url) {
        (Some(command), None) => {
            if command.is_empty() {
                return Err("[upstream] command is empty".into());
            }
            let path = upstream
                .env
                .get("PATH")
                .map(|value| secret(value.get_ref()))
                .transpose()?
                .map(std::ffi::OsString::from)
                .or_else(|| std::env::var_os("PATH"));
            if refuse_unrunnable {
                supervise::runnable(&command[0], upstream.cwd.as_deref(), path.as_deref())?;
            }
            // The server runs under `--supervise` (see `supervise`): it never outlives the proxy.
            let mut stdio = Stdio::new(std::env::current_exe()?)
                .args(["--supervise", "--"])
                .args(command);
            for name in &upstream.env_passthrough {
                stdio = stdio.pass_env(name.get_ref());
            }
            for (key, value) in &upstream.env {
                stdio = stdio.env(key, secret(value.get_ref())?);
            }
            if let Some(cwd) = &upstream.cwd {
                stdio = stdio.current_dir(cwd);
            }
            Ok(stdio.into())
        }
        (None, Some(url)) => {
            let mut http = Http::new(url.clone());
            for (name, value) in &upstream.headers {
                if authorization.is_some() && name.eq_ignore_ascii_case("authorization") {
                    continue;
                }
                http = http.header(name.as_str(), secret(value)?.as_str());
            }
            if let Some(authorization) = authorization {
                http = http.header(http::header::AUTHORIZATION, authorization.clone());
            }
            Ok(http.into())
        }
        _ => Err("[upstream] needs exactly one of command and url".into()),
    }
}

/// The stores every layer built shares, so that spent approvals stay spent, and tasks stay known,
/// across reloads: in process (single-use tokens and task records), or in Redis.
#[derive(Clone)]
enum LayerStores {
    Memory(MemoryTokenStore, MemoryTaskStore),
    Redis(RedisStore),
}

impl LayerStores {
    fn new(redis: Option<RedisStore>) -> Self {
        match redis {
            Some(redis) => Self::Redis(redis),
            None => Self::Memory(MemoryTokenStore::new(), MemoryTaskStore::new()),
        }
    }

    /// The layer spending its approvals here, and keeping its tasks' records beside them: in
    /// process, or in Redis where replicas share it. Every layer built from one `LayerStores` shares
    /// one task store, so a reload forgets no task.
    fn keep(&self, layer: ElicitationLayer) -> ElicitationLayer {
        match self {
            Self::Memory(tokens, tasks) => {
                layer.single_use(tokens.clone()).task_store(tasks.clone())
            }
            Self::Redis(store) => layer.single_use(store.clone()).task_store(store.tasks()),
        }
    }
}

/// The layer with `built`'s gates, single-use approvals in `spent`, reading bodies up to
/// `max_body_bytes`.
fn layer(
    keyring: &Keyring,
    principal: &PrincipalFrom,
    spent: &LayerStores,
    max_body_bytes: usize,
    built: Vec<gates::Built>,
) -> Result<ElicitationLayer, Error> {
    let layer = identified(ElicitationLayer::new(keyring.clone()), principal)
        .max_body_bytes(max_body_bytes)
        // The upstream does not check who asks for a task: a task the layer saw no caller create
        // is nobody's to read or cancel.
        .unrecorded_tasks(UnrecordedTasks::Refuse);
    let mut layer = spent.keep(layer);
    for gate in built {
        if gate.covered_prompt {
            // Another gate of the same key gates this prompt already.
            if let Ok(covered) = layer.clone().gate(gate.target, gate.gate) {
                layer = covered;
            }
            continue;
        }
        layer = layer.gate(gate.target, gate.gate)?;
    }
    Ok(layer)
}

/// The file's rules in the order they decide, each with what it names, its condition, and what
/// it asks.
fn print_rules(built: &gates::Gates) {
    println!(
        "Rules, in the order they decide a call (the first that matches it and whose `when` holds):"
    );
    for (number, rule) in built.policy.rules.iter().enumerate() {
        let names: Vec<String> = rule
            .targets
            .iter()
            .map(|(method, _, pattern)| format!("{} {pattern}", targets::Kind::of_method(method)))
            .collect();
        let when = rule
            .when
            .as_ref()
            .map_or(String::new(), |when| format!(" when {}", when.text()));
        println!(
            "{:>3}. {}: {} {}{when}",
            number + 1,
            rule.label,
            rule.action,
            names.join(", ")
        );
        let asked = built
            .built
            .iter()
            .find(|gate| gate.label == rule.label && !gate.covered_prompt);
        if let (policy::Action::Ask, Some(gate)) = (rule.action, asked) {
            println!("     asks {:?}", gate.message);
            println!("     {}", gate.schema);
        }
    }
    let changed: Vec<&str> = built
        .built
        .iter()
        .filter(|gate| gate.label == "on_tool_change")
        .map(|gate| gate.target_name.as_str())
        .collect();
    if !changed.is_empty() {
        println!(
            "  and before any of them, for the tools changed since approved: {}",
            changed.join(", ")
        );
    }
}

/// `--explain TOOL [ARGS]`: which rule decides that call, and why.
fn explain_call(policy: &policy::Policy, explain: &[String]) -> Result<(), Error> {
    let (kind, target) = targets::split(&explain[0]);
    let method = kind.method();
    let arguments: Value = match explain.get(1) {
        Some(text) => serde_json::from_str(text)
            .map_err(|error| format!("--explain: the arguments are not JSON: {error}"))?,
        None => json!({}),
    };
    if !arguments.is_object() {
        return Err("--explain: the arguments must be a JSON object".into());
    }
    let vars = policy::Vars::new(method, target, &arguments, None);
    println!("A call of {kind} {target} with {arguments}, from an unverified caller:");
    let verdict = policy.decide_traced(method, target, &vars, |step| {
        let rule = step.rule;
        let condition = rule.when.as_ref().map_or("no `when`".to_owned(), |when| {
            format!("when {}", when.text())
        });
        let said = match (&step.holds, step.effect) {
            (Err(why), _) => format!("cannot say ({why}): the call is refused (fail closed)"),
            (_, policy::Effect::Skipped) => "does not hold, next".to_owned(),
            (_, policy::Effect::Asks) => format!("holds: asks (key {:?}), next", rule.key),
            (_, policy::Effect::KeyTaken) => {
                format!(
                    "holds, but an earlier rule asks under key {:?}: next",
                    rule.key
                )
            }
            (_, policy::Effect::Decides) => format!("holds: it decides: {}", rule.action),
            (_, policy::Effect::Ends) => {
                format!(
                    "holds ({}), but a rule asked before it: reading ends",
                    rule.action
                )
            }
        };
        println!("  {} ({condition}): {said}", rule.label);
    });
    let label = |index: usize| policy.rules[index].label.as_str();
    match verdict {
        Ok(policy::Verdict::Ask(asking)) => {
            let labels: Vec<&str> = asking.iter().map(|&i| label(i)).collect();
            println!("  so: asked, by {}", labels.join(" and "));
        }
        Ok(policy::Verdict::Deny(index)) => println!("  so: refused by {}", label(index)),
        Ok(policy::Verdict::Allow(index)) => {
            println!("  so: runs, nobody asked ({})", label(index))
        }
        Ok(policy::Verdict::Ungated) => println!("  no rule decides it: it runs, nobody asked"),
        Err(_) => println!("  so: refused"),
    }
    Ok(())
}

/// Which gate judges each target, for the decision log.
fn labels_of(built: &[gates::Built]) -> std::collections::BTreeMap<String, String> {
    built
        .iter()
        .flat_map(|gate| {
            std::iter::once(&gate.target_name)
                .chain(&gate.listed)
                .map(|name| (name.clone(), gate.label.clone()))
        })
        .collect()
}

/// `layer` taking the caller's identity where `[identity] principal` says.
fn identified(layer: ElicitationLayer, principal: &PrincipalFrom) -> ElicitationLayer {
    match principal.clone() {
        // The library's default: a verified caller (`[identity] jwt`, `api_keys`, stdio), else
        // the `Authorization` header.
        PrincipalFrom::Verified => layer,
        PrincipalFrom::Header(name) => layer.principal_from(move |parts: &http::request::Parts| {
            parts
                .headers
                .get(&name)
                .map(|value| value.as_bytes().to_vec())
        }),
        PrincipalFrom::Nobody => layer.principal_from(|_: &http::request::Parts| None),
    }
}

/// The upstream as the start-up line names it: the command (and that a package runner's first
/// start may download it), or the URL.
fn starting(upstream: &config::Upstream) -> String {
    match (&upstream.command, &upstream.url) {
        (Some(command), _) => {
            let runner = command.first().and_then(|program| {
                std::path::Path::new(program)
                    .file_name()
                    .and_then(|name| name.to_str())
            });
            let downloads = matches!(runner, Some("npx" | "uvx" | "pipx" | "bunx" | "pnpx"));
            let line = command.join(" ");
            let line = match line.char_indices().nth(120) {
                Some((end, _)) => format!("{}…", &line[..end]),
                None => line,
            };
            if downloads {
                format!("{line} (a first start may download it)")
            } else {
                line
            }
        }
        // Without credentials or a query: the line is logged.
        (None, Some(url)) => match reqwest::Url::parse(url) {
            Ok(mut url) => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.set_query(None);
                url.to_string()
            }
            Err(_) => "an [upstream] url".to_owned(),
        },
        (None, None) => "(none)".to_owned(),
    }
}

/// What the upstream (or several) offers, waiting for it to start. `once` (`--check`) asks
/// once: the adapter waits up to its start timeout, and a start that failed (its cause, its
/// last stderr lines) is the answer; a plain run asks again for up to a minute while the
/// adapter retries with back-off.
async fn offered(lister: &routed::Routed, catalog: &Catalog, once: bool) -> Result<Offered, Error> {
    patiently(once, || offered_now(lister, catalog)).await
}

/// `attempt`'s answer: once with `once`, else asked again for up to a minute, unless the
/// upstream's command cannot be run at all.
async fn patiently<T, F, A>(once: bool, mut attempt: A) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, Error>>,
    A: FnMut() -> F,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match attempt().await {
            Ok(answer) => return Ok(answer),
            // A command that cannot be run will not run on the next try either.
            Err(why)
                if once
                    || tokio::time::Instant::now() >= deadline
                    || why
                        .to_string()
                        .contains(&format!("--supervise: {} ", supervise::CANNOT_START)) =>
            {
                let why = why.to_string();
                let marker = format!("--supervise: {} ", supervise::CANNOT_START);
                if let Some(at) = why.find(&marker) {
                    // The cause first, once: `cannot start "…": No such file or directory`.
                    let cause = &why[at + "--supervise: ".len()..];
                    let cause = cause.split(" (the server exited").next().unwrap_or(cause);
                    return Err(cause.trim_end_matches('.').to_owned().into());
                }
                return Err(format!("the upstream did not list its tools: {why}").into());
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// What the upstream lists now; the catalog learns its tools.
async fn offered_now(upstream: &routed::Routed, catalog: &Catalog) -> Result<Offered, Error> {
    let mut offered = Offered::default();
    let discovered = rpc(upstream, "server/discover", json!({})).await?;
    let capabilities = &discovered["capabilities"];
    for (method, field, into) in [
        ("tools/list", "tools", &mut offered.tools),
        ("prompts/list", "prompts", &mut offered.prompts),
        ("resources/list", "resources", &mut offered.resources),
    ] {
        if capabilities.get(field).is_none() {
            continue;
        }
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let listed = rpc(upstream, method, params).await?;
            if field == "tools" {
                catalog.observe(&listed);
            }
            for item in listed[field].as_array().into_iter().flatten() {
                let key = if field == "resources" { "uri" } else { "name" };
                let Some(name) = item[key].as_str() else {
                    continue;
                };
                if field == "tools" {
                    let sample = policy::sample_arguments(&item["inputSchema"]);
                    offered.samples.insert(name.to_owned(), sample);
                }
                let arguments = match field {
                    "tools" => item["inputSchema"]["properties"]
                        .as_object()
                        .map(|p| p.keys().cloned().collect())
                        .unwrap_or_default(),
                    "resources" => vec!["uri".to_owned()],
                    _ => item["arguments"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a["name"].as_str().map(str::to_owned))
                        .collect(),
                };
                into.insert(name.to_owned(), arguments);
            }
            cursor = listed["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
    }
    Ok(offered)
}

/// One 2026-07-28 request of the proxy's own to the upstream; its result.
async fn rpc(upstream: &routed::Routed, method: &str, mut params: Value) -> Result<Value, Error> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "elicitation-proxy", "version": env!("CARGO_PKG_VERSION")},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))?;
    // On the file's own adapters, not a caller's (`[identity] pass_to_upstream`).
    request.extensions_mut().insert(callers::ProxysOwn);
    let Ok(response) = upstream.clone().oneshot(request).await;
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await?
        .to_bytes();
    let mut reply: Value = serde_json::from_slice(&bytes)?;
    match reply.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => match reply["error"]["message"].as_str() {
            Some(message) => Err(format!("{method}: {message}").into()),
            None => Err(format!("{method}: {}", reply["error"]).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let source = Source {
            path: PathBuf::from("gates.toml"),
            text: text.to_owned(),
        };
        source.parse().unwrap()
    }

    #[test]
    fn the_share_is_a_quarter_unless_every_call_is_one_callers_or_the_file_says() {
        let command = "[upstream]\ncommand = [\"x\"]\n";
        let share = |config: &Config, serving| {
            fair_share(config, config.upstreams.first(), serving).unwrap()
        };
        assert_eq!(share(&config(command), Serving::Http), 0.25);
        // One host on stdio alone, or no principal: all calls are one caller's.
        assert_eq!(share(&config(command), Serving::Stdio), 1.0);
        // The host on stdio beside HTTP callers is one caller among others.
        assert_eq!(share(&config(command), Serving::Both), 0.25);
        let nobody = format!("{command}\n[identity]\nprincipal = \"none\"\n");
        assert_eq!(share(&config(&nobody), Serving::Http), 1.0);
        let given = format!("{command}fair_share = 0.5\n\n[identity]\nprincipal = \"none\"\n");
        assert_eq!(share(&config(&given), Serving::Stdio), 0.5);
    }

    #[test]
    fn the_anonymous_share_is_not_warned_of_for_an_upstream_passed_to_each_caller() {
        let url = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let everywhere = "\n[listen]\nhttp = \"0.0.0.0:1\"\n";
        let shared = config(&format!("{url}{everywhere}"));
        assert!(anonymous_share(&shared, Serving::Http).unwrap().is_some());
        let passed = config(&format!(
            "{url}\n[identity]\npass_to_upstream = true\n{everywhere}"
        ));
        assert_eq!(anonymous_share(&passed, Serving::Http).unwrap(), None);
    }
}
