//! `stack`: [`ElicitationLayer`] composed with tower-http's `TraceLayer`, `CompressionLayer` (outside
//! it) and a bearer authentication layer, in front of the `deploy` example's rmcp service.
//!
//! ```text
//! cargo run --example stack
//! RUST_LOG=tower_http=debug,tower_elicitation=debug cargo run --example stack
//! ```
//!
//! Callers authenticate with `Authorization: Bearer alice-token` or `Bearer bob-token`
//! (anything else gets `401`). The elicitation layer binds every `requestState` to the
//! authenticated user, so a token minted for bob is refused when alice replays it.
//!
//! Environment:
//! - `MCP_ADDR`: listen address (default `127.0.0.1:3002`).
//! - `MCP_REQUEST_STATE_KEYS`: `kid:base64url-key` pairs, comma-separated, the first one signs.
//!   Without it a random key is used for this process only.
//! - `RUST_LOG`: log filter (default `info,tower_http=debug`).

// Shared with the integration tests; each includer uses a different subset.
#[allow(dead_code)]
#[path = "../deploy/server.rs"]
mod server;

mod app;

use tower_elicitation::{ElicitationLayer, Keyring};
use tracing_subscriber::EnvFilter;

const DEFAULT_ADDR: &str = "127.0.0.1:3002";

/// The demo's users: bearer token → user name.
const TOKENS: [(&str, &str); 2] = [("alice-token", "alice"), ("bob-token", "bob")];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,tower_http=debug".into()),
        )
        // Colours only for a terminal: piped into a file or another program, plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();

    let keyring = Keyring::from_env_or_ephemeral()?;

    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let local = listener.local_addr()?;
    let state = server::DeployState::new().with_base_url(&format!("http://{local}"));
    let app = app::app(
        ElicitationLayer::new(keyring).audience("stack-example"),
        app::BearerAuth::new(TOKENS),
        state,
        false,
    )?;

    println!("listening on http://{local}{}", server::MCP_PATH);
    println!(
        "bearer tokens: {}",
        TOKENS.map(|(token, _)| token).join(", ")
    );

    // Bounded header and body read times and connections (`serve::Limits`, the workspace's accept loop), as a server
    // facing clients it does not trust needs.
    let shutdown = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    serve::serve(listener, app, serve::Limits::default(), shutdown).await;
    Ok(())
}
