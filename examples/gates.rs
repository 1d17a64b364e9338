//! `gates`: an approval gate retrofitted onto a server that knows nothing of elicitation. The
//! rmcp server below has a plain `deploy` tool; [`ElicitationLayer`] asks the user to approve
//! each call (a form), checks the answer, refuses a decline, and forwards the call only once it
//! is approved.
//!
//! ```text
//! cargo run --example gates              # listens on 127.0.0.1:3000 (or MCP_ADDR)
//! ```
//!
//! Try it: the first call is answered `input_required`, asking `approval`; call again with its
//! `requestState` and `"inputResponses": {"approval": {"action": "accept", "content":
//! {"approve": true}}}` to deploy (`"approve": false` is refused with "Not deployed.").
//!
//! ```text
//! curl -sS localhost:3000/mcp -H 'Content-Type: application/json' \
//!   -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
//!   -H 'Mcp-Method: tools/call' -H 'Mcp-Name: deploy' -d '{"jsonrpc":"2.0","id":1,
//!   "method":"tools/call","params":{"name":"deploy","arguments":{"environment":"prod"},"_meta":{
//!   "io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":
//!   {"name":"curl","version":"0"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}'
//! ```

use axum::serve::ListenerExt as _;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use tower_elicitation::{ElicitationLayer, Gate, GateError, GateTarget, Keyring};

/// The server: it deploys when called. Nothing here asks anything.
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
        CallToolResult::success(vec![ContentBlock::text(format!(
            "Deployed to {}.",
            args.environment
        ))])
    }
}

#[tool_handler]
impl ServerHandler for Deployer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The gate: before `tools/call deploy` runs, ask `approval`; only `approve: true` passes.
pub fn approval() -> Result<Gate, GateError> {
    let form = r#"{
        "type": "object",
        "properties": {"approve": {"type": "boolean", "title": "Approve"}},
        "required": ["approve"]
    }"#;
    Ok(Gate::form("approval", form)?
        .message(|call| {
            format!(
                "Deploy to {}?",
                call.argument_str("environment").unwrap_or("?")
            )
        })
        .require(|content, _call| content.get("approve").and_then(|v| v.as_bool()) == Some(true))
        .refusal("Not deployed."))
}

/// The server behind the layer and its gate, at `/mcp`.
pub fn app(keyring: Keyring) -> Result<axum::Router, GateError> {
    let layer = ElicitationLayer::new(keyring).gate(GateTarget::tool("deploy"), approval()?)?;
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false);
    let mcp = StreamableHttpService::new(
        || Ok(Deployer),
        LocalSessionManager::default().into(),
        config,
    );
    let mcp = tower::ServiceBuilder::new().layer(layer).service(mcp);
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
