//! `front`: any MCP server behind the upstream adapter, [`ElicitationLayer`] and (unless
//! `--no-bridge`) [`LegacyBridgeLayer`], served over Streamable HTTP at `/mcp`. The scripts and
//! tests drive real clients of both eras through it against real servers.
//!
//! ```text
//! front [--listen ADDR] [--no-bridge] [--era detect|legacy|mrtr] [--gate TOOL]...
//!       (--url URL [--header 'Name: value']... | -- COMMAND [ARG]...)
//! ```
//!
//! - `--listen`: the address (default `127.0.0.1:0`: a free port). The first line on stdout is
//!   `listening on http://ADDR/mcp`.
//! - `--gate TOOL`: before `tools/call TOOL` runs, the layer asks `approval` (a form of one
//!   boolean, `approve`, which must be `true`).
//! - `--era`: the upstream's era, found out by default.
//! - the upstream: a stdio command after `--`, or a Streamable HTTP URL.
//!
//! Environment: `MCP_REQUEST_STATE_KEYS` (else a random key for this process), `RUST_LOG`.

#[path = "../listening.rs"]
mod listening;
#[path = "../../../examples/deploy/server.rs"]
#[allow(dead_code)]
mod server;

use std::process::ExitCode;

use tower::ServiceBuilder;
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::upstream::{Era, Http, Server, Stdio, Upstream};
use tower_elicitation::{ElicitationLayer, Gate, GateTarget, Keyring};

/// What the command line asks for.
struct Options {
    listen: String,
    bridge: bool,
    era: Era,
    gates: Vec<String>,
    server: Server,
}

const USAGE: &str = "usage: front [--listen ADDR] [--no-bridge] [--era detect|legacy|mrtr] \
                     [--gate TOOL]... (--url URL [--header 'Name: value']... | -- COMMAND [ARG]...)";

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut listen = "127.0.0.1:0".to_owned();
    let mut bridge = true;
    let mut era = Era::Detect;
    let mut gates = Vec::new();
    let mut url = None;
    let mut headers = Vec::new();
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--listen" => listen = value("--listen")?,
            "--no-bridge" => bridge = false,
            "--gate" => gates.push(value("--gate")?),
            "--url" => url = Some(value("--url")?),
            "--header" => headers.push(value("--header")?),
            "--era" => {
                era = match value("--era")?.as_str() {
                    "detect" => Era::Detect,
                    "legacy" => Era::V2025,
                    "mrtr" => Era::V2026,
                    other => return Err(format!("--era: unknown era {other:?}")),
                }
            }
            "--" => {
                command.extend(args.by_ref());
                break;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let server = match (url, command.split_first()) {
        (Some(url), None) => {
            let mut http = Http::new(url);
            for header in headers {
                let (name, value) = header
                    .split_once(':')
                    .ok_or_else(|| format!("--header {header:?}: expected 'Name: value'"))?;
                http = http.header(name.trim(), value.trim());
            }
            Server::from(http)
        }
        (None, Some((program, rest))) => Server::from(Stdio::new(program).args(rest)),
        _ => return Err("give the upstream: --url URL, or -- COMMAND [ARG]...".to_owned()),
    };
    Ok(Options {
        listen,
        bridge,
        era,
        gates,
        server,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(why) => {
            eprintln!("front: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("front: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut layer = ElicitationLayer::new(Keyring::from_env_or_ephemeral()?);
    for tool in &options.gates {
        let approval = Gate::form(
            "approval",
            r#"{"type": "object", "properties": {"approve": {"type": "boolean", "title": "Approve"}}, "required": ["approve"]}"#,
        )?
        .message(|call| format!("Run {}?", call.target()))
        .require(|answer, _call| answer["approve"] == true);
        layer = layer.gate(GateTarget::tool(tool.as_str()), approval)?;
    }
    let upstream = Upstream::builder(options.server)
        .era(options.era)
        .for_layer(&layer)
        .spawn()?;
    let app = axum::Router::new();
    let app = if options.bridge {
        let bridge = LegacyBridgeLayer::for_layer(&layer);
        let mcp = ServiceBuilder::new()
            .layer(bridge)
            .layer(layer)
            .service(upstream.clone());
        app.nest_service(server::MCP_PATH, mcp)
    } else {
        let mcp = ServiceBuilder::new().layer(layer).service(upstream.clone());
        app.nest_service(server::MCP_PATH, mcp)
    };
    listening::serve(&options.listen, server::MCP_PATH, app).await?;
    upstream.shutdown().await;
    Ok(())
}
