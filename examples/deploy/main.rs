//! `deploy`: an rmcp MCP server whose `deploy` tool asks the user for approval
//! with a multi round-trip elicitation, behind [`ElicitationLayer`], behind the
//! legacy bridge (`LegacyBridgeLayer`), so 2025-era clients (sessions,
//! `initialize`) are served too: their questions go out on the call's stream.
//!
//! ```text
//! cargo run --example deploy
//! MCP_ADDR=127.0.0.1:8080 MCP_REQUEST_STATE_KEYS=k1:<base64url 32+ bytes> cargo run --example deploy
//! ```
//!
//! Environment:
//! - `MCP_ADDR`: listen address (default `127.0.0.1:3000`). Only loopback
//!   `Host` headers are accepted (`localhost`, `127.0.0.1`, `::1`).
//! - `MCP_REQUEST_STATE_KEYS`: `kid:base64url-key` pairs, comma-separated, the
//!   first one signs. Without it a random key is used for this process only.
//! - `MCP_JSON_RESPONSE=1`: `application/json` responses instead of rmcp's
//!   default event streams.
//! - `MCP_REDIS_URL` (e.g. `redis://127.0.0.1:6379`): run as one replica of
//!   several. Tokens become single-use, their ids consumed in Redis (a replay
//!   on any replica is refused; Redis unreachable: HTTP 503), and the URL flows
//!   live in Redis, so `/flows/<handle>/complete` on one replica completes the
//!   flow for a retry on another. The legacy bridge keeps its sessions and
//!   waiting calls there too (`RedisStore::sessions`, `RedisStore::pending_answers`):
//!   a 2025-era client's requests, and its answers, may land on any replica,
//!   with no sticky routing. Keys start with `MCP_REDIS_PREFIX` (default
//!   `tower-elicitation:`). Give every replica the same `MCP_REQUEST_STATE_KEYS`.
//! - `RUST_LOG`: log filter (default `info`).

// Shared with the integration tests; each includer uses a different subset.
#[allow(dead_code)]
mod server;

use std::io::IsTerminal;
use std::process::ExitCode;

use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::{ElicitationLayer, Keyring};
use tracing_subscriber::EnvFilter;

const DEFAULT_ADDR: &str = "127.0.0.1:3000";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        // Colours only for a terminal: piped into a file or another program, plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let keyring = Keyring::from_env_or_ephemeral()?;

    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await.map_err(|error| {
        format!("cannot listen on {addr}: {error} (set MCP_ADDR to another address, e.g. MCP_ADDR=127.0.0.1:3001)")
    })?;
    let local = listener.local_addr()?;
    let json_response = std::env::var("MCP_JSON_RESPONSE").is_ok_and(|v| v == "1");
    let base_url = format!("http://{local}");
    let mut layer = ElicitationLayer::new(keyring);
    let mut state = server::DeployState::new().with_base_url(&base_url);
    let mut bridge = LegacyBridgeLayer::for_layer(&layer);
    if let Ok(url) = std::env::var("MCP_REDIS_URL") {
        let mut redis = tower_elicitation::redis::RedisStore::builder(url.as_str());
        if let Ok(prefix) = std::env::var("MCP_REDIS_PREFIX") {
            redis = redis.key_prefix(prefix);
        }
        let redis = redis.build()?;
        if let Err(error) = redis.ping().await {
            tracing::warn!(%error, "Redis does not answer yet: calls get HTTP 503 until it does");
        }
        tracing::info!(
            "single-use tokens, URL flows and the bridge's sessions and answers in Redis at {url}"
        );
        layer = layer.single_use(redis.clone());
        state = state.with_redis_flows(&base_url, &redis);
        bridge = server::redis_bridge(&layer, &redis);
    }
    let app = server::router_bridged(bridge, layer, state, json_response)?;

    tracing::info!("MCP endpoint: http://{local}{}", server::MCP_PATH);
    println!("listening on http://{local}{}", server::MCP_PATH);
    println!("try it (stateless MCP 2026-07-28 tools/call):");
    println!("{}", curl_example(&local.to_string()));
    println!(
        "its answer is input_required: send the same call again with the result's requestState and \
         an inputResponses answer in params, or let the terminal client do it: \
         cargo run --example client -- call deploy '{{\"environment\":\"staging\"}}'"
    );

    // Bounded header and body read times and connections (`serve::Limits`, the workspace's accept loop), as a server
    // facing clients it does not trust needs.
    let shutdown = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down");
    };
    serve::serve(listener, app, serve::Limits::default(), shutdown).await;
    Ok(())
}

/// A one-line curl command for the first round of a `deploy` call.
fn curl_example(authority: &str) -> String {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "deploy",
            "arguments": { "environment": "staging" },
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "curl", "version": "0" },
                "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} }
            }
        }
    });
    format!(
        "curl -sS http://{authority}{path} -H 'Content-Type: application/json' \
         -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
         -H 'Mcp-Method: tools/call' -H 'Mcp-Name: deploy' -d '{body}'",
        path = server::MCP_PATH,
    )
}
