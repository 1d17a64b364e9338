//! `single_use_redis`: an approval gate whose approval is single-use across replicas. Every
//! replica shares the keys (`MCP_REQUEST_STATE_KEYS`) and one Redis
//! ([`RedisStore`](tower_elicitation::redis::RedisStore)); a retry is forwarded only once its
//! token's id was consumed in Redis, so a replayed approval is refused on every replica (`-32602`),
//! and with Redis unreachable the layer fails closed (HTTP 503).
//!
//! ```text
//! redis-server --port 6379 --save '' &                 # or MCP_REDIS_URL=redis://host:port
//! export MCP_REQUEST_STATE_KEYS="k1:$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
//! MCP_ADDR=127.0.0.1:3000 cargo run --example single_use_redis &
//! MCP_ADDR=127.0.0.1:3001 cargo run --example single_use_redis &
//! ```
//!
//! Try it: call `deploy` on :3000 (as in the `gates` example: you get `input_required` asking
//! `approval`), send the approved retry to :3001 (deployed), then send the same retry to :3000
//! again: refused, the approval was spent.
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
use tower_elicitation::redis::RedisStore;
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

/// One replica: the server behind a layer whose tokens are single-use in `redis`, and whose
/// `deploy` is gated by an approval.
pub fn app(keyring: Keyring, redis: RedisStore) -> Result<axum::Router, GateError> {
    let form = r#"{
        "type": "object",
        "properties": {"approve": {"type": "boolean", "title": "Approve"}},
        "required": ["approve"]
    }"#;
    let approval = Gate::form("approval", form)?
        .message(|call| {
            format!(
                "Deploy to {}?",
                call.argument_str("environment").unwrap_or("?")
            )
        })
        .require(|content, _call| content.get("approve").and_then(|v| v.as_bool()) == Some(true))
        .refusal("Not deployed.");
    let layer = ElicitationLayer::new(keyring)
        .single_use(redis)
        .gate(GateTarget::tool("deploy"), approval)?;
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
    // Every replica must verify the others' tokens: no random key here.
    let keyring = Keyring::from_env().map_err(|error| {
        format!(
            "{error}: set MCP_REQUEST_STATE_KEYS (the same on every replica), see the module doc"
        )
    })?;
    let url =
        std::env::var("MCP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let redis = RedisStore::builder(url.as_str()).build()?;
    if let Err(error) = redis.ping().await {
        eprintln!("Redis at {url} does not answer yet ({error}): calls get HTTP 503 until it does");
    }
    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "listening on http://{}/mcp, single-use tokens in {url}",
        listener.local_addr()?
    );
    // TCP_NODELAY: each event-stream write after the first would otherwise wait ~40 ms. To face
    // clients you do not trust, bound header and body read times and connections as
    // `examples/deploy` does (`serve` in `examples/deploy/server.rs`).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app(keyring, redis)?).await?;
    Ok(())
}
