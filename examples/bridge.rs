//! `bridge`: [`LegacyBridgeLayer`] in front of [`ElicitationLayer`], so 2025-era clients (with
//! `initialize`, sessions and server-to-client `elicitation/create` requests) work with a server
//! that speaks only MCP 2026-07-28's multi round-trip requests. The bridge keeps the 2025 session,
//! turns each `input_required` into an `elicitation/create` on the call's event stream, and
//! retries the call with the client's answer; 2026-07-28 requests pass through untouched.
//!
//! ```text
//! cargo run --example bridge             # listens on 127.0.0.1:3000 (or MCP_ADDR)
//! ```
//!
//! Try it with a 2025-era client (the MCP Inspector, or `initialize` by hand, which answers with
//! an `Mcp-Session-Id` for the next requests):
//!
//! ```text
//! curl -sSi localhost:3000/mcp -H 'Content-Type: application/json' \
//!   -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,
//!   "method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":
//!   {"elicitation":{}},"clientInfo":{"name":"curl","version":"0"}}}'
//! ```
//!
//! then `tools/call deploy` with that session id: the stream carries an `elicitation/create`
//! asking for approval; POST its answer (`{"action":"accept","content":{"approve":true}}`, as a
//! JSON-RPC response to that request's id) and the stream ends with the result.

use axum::serve::ListenerExt as _;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::{ElicitationLayer, Gate, GateError, GateTarget, Keyring};

/// The server: it deploys when called. Nothing here asks anything; the gate below does.
#[derive(Clone)]
struct Deployer;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct DeployArgs {
    environment: String,
}

#[tool_router]
impl Deployer {
    #[tool(description = "Deploys the current build to an environment.")]
    async fn deploy(&self, Parameters(args): Parameters<DeployArgs>) -> CallToolResult {
        let text = format!("Deployed to {}.", args.environment);
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}

#[tool_handler]
impl ServerHandler for Deployer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The bridge, then the layer (with an approval gate on `deploy`), then the server, at `/mcp`.
pub fn app(keyring: Keyring) -> Result<axum::Router, GateError> {
    let form = r#"{
        "type": "object",
        "properties": {"approve": {"type": "boolean", "title": "Approve"}},
        "required": ["approve"]
    }"#;
    let approval = Gate::form("approval", form)?
        .require(|content, _call| content.get("approve").and_then(|v| v.as_bool()) == Some(true))
        .refusal("Not deployed.");
    let layer = ElicitationLayer::new(keyring).gate(GateTarget::tool("deploy"), approval)?;
    // The bridge takes the keys and the caller binding from the layer it fronts.
    let bridge = LegacyBridgeLayer::for_layer(&layer);
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false);
    let mcp = StreamableHttpService::new(
        || Ok(Deployer),
        LocalSessionManager::default().into(),
        config,
    );
    let mcp = tower::ServiceBuilder::new()
        .layer(bridge)
        .layer(layer)
        .service(mcp);
    Ok(axum::Router::new().nest_service("/mcp", mcp))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // TCP_NODELAY: each event-stream write after the first would otherwise wait ~40 ms. To face
    // clients you do not trust, bound header and body read times and connections as
    // `examples/deploy` does (`serve` in `examples/deploy/server.rs`).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app(Keyring::from_env_or_ephemeral()?)?).await?;
    Ok(())
}
