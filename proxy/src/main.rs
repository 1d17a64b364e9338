//! `elicitation-proxy`: approval gates and validated elicitation in front of any MCP server, from
//! a TOML file, for hosts of both eras over Streamable HTTP.
//!
//! ```text
//! elicitation-proxy --config gates.toml            # serve
//! elicitation-proxy --config gates.toml --check    # check the file against the upstream, print each gate, exit
//! elicitation-proxy --config gates.toml --ephemeral-keys   # no [state] keys: a random key, this process only
//! ```
//!
//! It is [`LegacyBridgeLayer`] (2025-era hosts) in front of [`ElicitationLayer`] (the gates,
//! validation, sealed state, single-use approvals) in front of [`Upstream`] (the server: a stdio
//! child or a URL; its own questions become `input_required` rounds), served with bounded read
//! times and connections, `/healthz`, and a graceful shutdown on SIGTERM or Ctrl-C. SIGHUP reads
//! the file again and replaces the gates at once; a file with a mistake keeps the old gates and
//! says why. Everything it does, a Rust program can compose from the library's layers.

mod config;
mod gates;
mod metrics;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::redis::RedisStore;
use tower_elicitation::store::MemoryTokenStore;
use tower_elicitation::upstream::{Era, Http, Server, Stdio, Upstream};
use tower_elicitation::{ElicitationLayer, Keyring};

use crate::config::{Config, Source, secret};
use crate::gates::Offered;

/// mimalloc, as the benches use: the proxy allocates JSON values for every message it passes, and
/// under `perf` glibc's `malloc`/`free` took about a tenth of its CPU on a plain proxied call.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What the command line asks for.
struct Options {
    config: PathBuf,
    check: bool,
    ephemeral_keys: bool,
}

const USAGE: &str = "usage: elicitation-proxy --config FILE [--check] [--ephemeral-keys]";

fn options() -> Result<Options, String> {
    let mut config = None;
    let mut check = false;
    let mut ephemeral_keys = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--config" => config = Some(PathBuf::from(args.next().ok_or("--config needs a file")?)),
            "--check" => check = true,
            "--ephemeral-keys" => ephemeral_keys = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let config = config.ok_or("--config FILE is required")?;
    Ok(Options {
        config,
        check,
        ephemeral_keys,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::Targets};
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_elicitation::upstream=warn".into()),
        );
    // The counters see the layer's decisions (debug events) whatever the log level.
    let metrics = metrics::Metrics::default();
    let counted = metrics
        .clone()
        .with_filter(Targets::new().with_target("tower_elicitation", tracing::Level::DEBUG));
    tracing_subscriber::registry()
        .with(logs)
        .with(counted)
        .init();
    let options = match options() {
        Ok(options) => options,
        Err(why) if why.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("elicitation-proxy: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options, metrics).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("elicitation-proxy: {why}");
            ExitCode::FAILURE
        }
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn run(options: Options, metrics: metrics::Metrics) -> Result<(), Error> {
    let source = Source::read(&options.config)?;
    let config = source.parse()?;
    // `--check` seals nothing: it needs no keys.
    let keyring = if options.check {
        Keyring::ephemeral()
    } else {
        keyring(
            &config,
            options.ephemeral_keys || config.state.ephemeral_keys,
        )?
    };
    let redis = match &config.state.redis {
        Some(url) => {
            let store = RedisStore::builder(secret(url)?).build()?;
            store.ping().await?;
            Some(store)
        }
        None => None,
    };
    let base = ElicitationLayer::new(keyring.clone());
    let mut builder = Upstream::builder(server(&config)?).caller_from(&base);
    if let Some(redis) = &redis {
        builder = builder.route_retries(redis.pending_answers());
    }
    if let Some(era) = &config.upstream.era {
        builder = builder.era(match era.as_str() {
            "detect" => Era::Detect,
            "2025" => Era::Legacy,
            "2026" => Era::Mrtr,
            other => return Err(format!("[upstream] era {other:?}: detect, 2025 or 2026").into()),
        });
    }
    let upstream = builder.spawn()?;
    let offered = offered(&upstream).await?;
    let built = gates::build(&source, &config, &offered)?;
    if options.check {
        for gate in &built {
            println!("{}: asks {:?}", gate.name, gate.message);
            println!("  {}", gate.schema);
        }
        println!(
            "{}: {} gates on {} targets, all valid",
            source.path.display(),
            config.gates.len(),
            built.len()
        );
        upstream.shutdown().await;
        return Ok(());
    }
    let spent = Spent::new(redis.clone());
    let first = layer(&keyring, &spent, built)?;
    let stack = serve::Stack::new(&config, first, upstream.clone(), redis.as_ref());
    let reload = {
        let stack = stack.clone();
        let upstream = upstream.clone();
        let path = options.config.clone();
        move || -> Result<usize, Error> {
            let source = Source::read(&path)?;
            let config = source.parse()?;
            let offered = futures_block(offered_now(&upstream))?;
            let built = gates::build(&source, &config, &offered)?;
            let count = built.len();
            stack.replace(layer(&keyring, &spent, built)?, upstream.clone());
            Ok(count)
        }
    };
    serve::run(&config, stack, metrics, reload).await?;
    upstream.shutdown().await;
    Ok(())
}

/// The keys that seal `requestState`: `[state] keys`, else (when allowed) a random one.
fn keyring(config: &Config, ephemeral: bool) -> Result<Keyring, Error> {
    let given = config.state.keys.as_deref().map(secret).transpose();
    match given {
        Ok(Some(keys)) => Ok(Keyring::parse(&keys)?),
        Ok(None) | Err(_) if ephemeral => {
            tracing::warn!("no [state] keys: a random key for this process only; retries fail across restarts and replicas");
            Ok(Keyring::ephemeral())
        }
        Err(why) => Err(format!("[state] keys: {why}; refusing to start without keys unless --ephemeral-keys").into()),
        Ok(None) => Err("[state] keys is not set (e.g. keys = \"env:MCP_REQUEST_STATE_KEYS\"); refusing to start without keys unless --ephemeral-keys".into()),
    }
}

/// The upstream the file names.
fn server(config: &Config) -> Result<Server, Error> {
    let upstream = &config.upstream;
    match (&upstream.command, &upstream.url) {
        (Some(command), None) => {
            let (program, args) = command.split_first().ok_or("[upstream] command is empty")?;
            let mut stdio = Stdio::new(program).args(args);
            for (key, value) in &upstream.env {
                stdio = stdio.env(key, secret(value)?);
            }
            if let Some(cwd) = &upstream.cwd {
                stdio = stdio.current_dir(cwd);
            }
            Ok(stdio.into())
        }
        (None, Some(url)) => {
            let mut http = Http::new(url.clone());
            for (name, value) in &upstream.headers {
                http = http.header(name.as_str(), secret(value)?.as_str());
            }
            Ok(http.into())
        }
        _ => Err("[upstream] needs exactly one of command and url".into()),
    }
}

/// The single-use store every layer built shares: spent approvals stay spent across reloads.
#[derive(Clone)]
enum Spent {
    Memory(MemoryTokenStore),
    Redis(RedisStore),
}

impl Spent {
    fn new(redis: Option<RedisStore>) -> Self {
        match redis {
            Some(redis) => Self::Redis(redis),
            None => Self::Memory(MemoryTokenStore::new()),
        }
    }
}

/// The layer with `built`'s gates, single-use approvals in `spent`.
fn layer(
    keyring: &Keyring,
    spent: &Spent,
    built: Vec<gates::Built>,
) -> Result<ElicitationLayer, Error> {
    let mut layer = ElicitationLayer::new(keyring.clone());
    layer = match spent {
        Spent::Memory(store) => layer.single_use(store.clone()),
        Spent::Redis(store) => layer.single_use(store.clone()),
    };
    for gate in built {
        layer = layer.gate(gate.target, gate.gate)?;
    }
    Ok(layer)
}

/// Runs `future` to its end from a synchronous reload (on the runtime's blocking pool).
fn futures_block<F: std::future::Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// What the upstream offers, waiting (up to a minute) for it to start.
async fn offered(upstream: &Upstream) -> Result<Offered, Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match offered_now(upstream).await {
            Ok(offered) => return Ok(offered),
            Err(why) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("the upstream did not list its tools: {why}").into());
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn offered_now(upstream: &Upstream) -> Result<Offered, Error> {
    let mut offered = Offered::default();
    let discovered = rpc(upstream, "server/discover", json!({})).await?;
    let capabilities = &discovered["capabilities"];
    for (method, field, into) in [
        ("tools/list", "tools", &mut offered.tools),
        ("prompts/list", "prompts", &mut offered.prompts),
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
            for item in listed[field].as_array().into_iter().flatten() {
                let Some(name) = item["name"].as_str() else {
                    continue;
                };
                let arguments = match field {
                    "tools" => item["inputSchema"]["properties"]
                        .as_object()
                        .map(|p| p.keys().cloned().collect())
                        .unwrap_or_default(),
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
async fn rpc(upstream: &Upstream, method: &str, mut params: Value) -> Result<Value, Error> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "elicitation-proxy", "version": env!("CARGO_PKG_VERSION")},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = http::Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))?;
    let response = upstream.clone().oneshot(request).await?;
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await?
        .to_bytes();
    let mut reply: Value = serde_json::from_slice(&bytes)?;
    match reply.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(format!("{method}: {}", reply["error"]).into()),
    }
}
