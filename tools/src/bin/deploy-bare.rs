//! `deploy-bare`: the `deploy` example's bare rmcp 3.11 service (`server::mcp_service`: 2026-07-28,
//! stateless, no `ElicitationLayer`, no gates) served over Streamable HTTP at `/mcp`, for the
//! scripts that put it behind `front --url` as a 2026-era HTTP upstream
//! (`tests/interop_upstream`).
//!
//! ```text
//! deploy-bare [--listen ADDR] [--json]
//! ```
//!
//! - `--listen`: the address (default `$DEPLOY_BARE_LISTEN`, else `127.0.0.1:0`: a free port).
//!   The first line on stdout is `listening on http://ADDR/mcp`.
//! - `--json`: `application/json` replies (else rmcp's default, `text/event-stream`).
//!
//! Its `deploy` tool asks its own question (`deployment-approval`, an `input_required` result)
//! and deploys once `approve` is `true`. Environment: `RUST_LOG` (logs on stderr).

#[path = "../listening.rs"]
mod listening;
#[path = "../../../examples/deploy/server.rs"]
#[allow(dead_code)]
mod server;

use std::process::ExitCode;

const USAGE: &str = "usage: deploy-bare [--listen ADDR] [--json]";

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut listen =
        std::env::var("DEPLOY_BARE_LISTEN").unwrap_or_else(|_| "127.0.0.1:0".to_owned());
    let mut json_response = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => match args.next() {
                Some(value) => listen = value,
                None => {
                    eprintln!("deploy-bare: --listen needs a value\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--json" => json_response = true,
            other => {
                eprintln!("deploy-bare: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match run(&listen, json_response).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("deploy-bare: {why}");
            ExitCode::FAILURE
        }
    }
}

async fn run(listen: &str, json_response: bool) -> Result<(), Box<dyn std::error::Error>> {
    let bare = server::mcp_service(server::DeployState::new(), json_response);
    let app = axum::Router::new().nest_service(server::MCP_PATH, bare);
    listening::serve(listen, server::MCP_PATH, app).await?;
    Ok(())
}
