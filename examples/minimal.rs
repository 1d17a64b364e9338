//! `minimal`: an rmcp server whose one tool asks a question (an MCP 2026-07-28 `input_required`
//! result), behind [`ElicitationLayer`]. The layer seals the tool's `requestState`, checks the
//! answer against the form asked, and asks again itself when it does not fit: the handler only
//! ever sees a valid answer.
//!
//! ```text
//! cargo run --example minimal            # listens on 127.0.0.1:3000 (or MCP_ADDR)
//! ```
//!
//! Try it: the first call is answered `input_required` with a sealed `requestState`; send it back
//! with an answer in `inputResponses` (as the README's round trip shows) and get the greeting.
//!
//! ```text
//! curl -sS localhost:3000/mcp -H 'Content-Type: application/json' \
//!   -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
//!   -H 'Mcp-Method: tools/call' -H 'Mcp-Name: greet' -d '{"jsonrpc":"2.0","id":1,
//!   "method":"tools/call","params":{"name":"greet","arguments":{},"_meta":{
//!   "io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":
//!   {"name":"curl","version":"0"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}'
//! ```

use axum::serve::ListenerExt as _;
use std::collections::BTreeMap;

use rmcp::handler::server::tool::InputResponses;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ElicitRequest};
use rmcp::model::{ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests};
use rmcp::model::{InputRequiredResult, PrimitiveSchemaDefinition};
use rmcp::model::{ServerCapabilities, ServerConfig, StringSchema};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use tower_elicitation::{ElicitationLayer, Keyring};

#[derive(Clone)]
struct Greeter;

#[tool_router]
impl Greeter {
    #[tool(description = "Greets you by name; asks for it first.")]
    async fn greet(&self, InputResponses(answers): InputResponses) -> CallToolResponse {
        // The layer let this answer through only if it is an accepted `{name: string}`.
        let name = answers
            .as_ref()
            .and_then(|a| a.get("name")?.pointer("/content/name").cloned());
        let Some(name) = name.as_ref().and_then(|name| name.as_str()) else {
            let name = PrimitiveSchemaDefinition::String(StringSchema::new().title("Name"));
            let schema = BTreeMap::from([("name".to_owned(), name)]);
            let form = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "What is your name?".to_owned(),
                requested_schema: ElicitationSchema::new(schema).with_required(vec!["name".into()]),
            };
            let ask = InputRequest::Elicitation(ElicitRequest::new(form));
            let asks = InputRequests::from([("name".to_owned(), ask)]);
            return InputRequiredResult::from_input_requests(asks).into();
        };
        CallToolResult::success(vec![ContentBlock::text(format!("Hello, {name}!"))]).into()
    }
}

#[tool_handler]
impl ServerHandler for Greeter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The rmcp service behind the layer, at `/mcp`.
pub fn app(keyring: Keyring) -> axum::Router {
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false);
    let mcp = StreamableHttpService::new(
        || Ok(Greeter),
        LocalSessionManager::default().into(),
        config,
    );
    let layer = ElicitationLayer::new(keyring);
    axum::Router::new().nest_service(
        "/mcp",
        tower::ServiceBuilder::new().layer(layer).service(mcp),
    )
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
    axum::serve(listener, app(Keyring::from_env_or_ephemeral()?)).await?;
    Ok(())
}
