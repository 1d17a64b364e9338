//! `upstream-rmcp`: an rmcp 3.11 server over stdio in its 2025-era `initialize` (session) mode,
//! for the tests that front it with the upstream adapter (`tests/services/upstream_rmcp.rs`) and for
//! `.ci/run`.
//!
//! It supports only the versions that have an `initialize` handshake (2025-03-26 to 2025-11-25):
//! its `server/discover` answer names no 2026-07-28, so `Era::Detect` opens a session. Its tools:
//!
//! - `book` (`restaurant`): asks the client, with a server-to-client `elicitation/create` in the
//!   session (`Peer::send_request`, which rmcp's `Peer::create_elicitation` wraps: that one
//!   needs rmcp's `elicitation` feature, which would build rmcp a second time), for `seats`, an integer from 1 to 8, then
//!   answers `booked N at RESTAURANT`; `declined` or `cancelled` when the user did so. rmcp does
//!   not check the answer against the schema; it says `out of range: N` when it was not in it.
//! - `echo` (`text`): answers `text`; no question.
//!
//! ```text
//! cargo build -p tower-elicitation-tools --bin upstream-rmcp
//! upstream-rmcp                 # over stdio
//! upstream-rmcp --http [ADDR]   # over Streamable HTTP at /mcp (default 127.0.0.1:0, a free port)
//! ```
//!
//! `--http` serves the same server over Streamable HTTP in rmcp's session mode (a session per
//! `initialize`, `Mcp-Session-Id`), its `elicitation/create` on the stream of the call that asks;
//! the first line on stdout is `listening on http://ADDR/mcp`. For `benches/upstream.rs`'s flows
//! over HTTP.

#[path = "../listening.rs"]
mod listening;

use std::borrow::Cow;
use std::collections::BTreeMap;

use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler, ServiceExt,
    handler::server::wrapper::Parameters,
    model::{
        CallToolResult, ClientResult, ContentBlock, ElicitRequest, ElicitRequestParams,
        ElicitationAction, ElicitationSchema, Implementation, IntegerSchema,
        PrimitiveSchemaDefinition, ProtocolVersion, ServerCapabilities, ServerConfig,
        ServerRequest,
    },
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// The question `book` asks.
const SEATS_MESSAGE: &str = "How many seats?";
/// `seats`' bounds, in the schema `book` asks with.
const MIN_SEATS: i64 = 1;
const MAX_SEATS: i64 = 8;

#[derive(Debug, Deserialize, JsonSchema)]
struct BookArgs {
    /// The restaurant to book at.
    restaurant: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// What to echo.
    text: String,
}

#[derive(Clone, Debug)]
struct Upstream;

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.into())])
}

#[tool_router]
impl Upstream {
    /// Books a table after asking how many seats.
    #[tool(description = "Book a table; asks the user how many seats.")]
    async fn book(
        &self,
        Parameters(BookArgs { restaurant }): Parameters<BookArgs>,
        peer: Peer<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let seats = PrimitiveSchemaDefinition::Integer(
            IntegerSchema::new()
                .title("Seats")
                .description("How many people (1 to 8).")
                .range(MIN_SEATS, MAX_SEATS),
        );
        let schema = ElicitationSchema::new(BTreeMap::from([("seats".to_owned(), seats)]))
            .with_required(vec!["seats".into()]);
        let form = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: SEATS_MESSAGE.to_owned(),
            requested_schema: schema,
        };
        let asked = peer
            .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(form)))
            .await;
        let answer = match asked {
            Ok(ClientResult::ElicitResult(answer)) => answer,
            Ok(other) => {
                let why = format!("elicitation: unexpected answer {other:?}");
                return Err(ErrorData::internal_error(why, None));
            }
            Err(error) => {
                let why = format!("elicitation: {error}");
                return Err(ErrorData::internal_error(why, None));
            }
        };
        Ok(match answer.action {
            ElicitationAction::Accept => {
                let seats = answer
                    .content
                    .as_ref()
                    .and_then(|content| content.get("seats"))
                    .cloned()
                    .unwrap_or(Value::Null);
                match seats.as_i64() {
                    Some(n) if (MIN_SEATS..=MAX_SEATS).contains(&n) => {
                        text(format!("booked {n} at {restaurant}"))
                    }
                    _ => text(format!("out of range: {seats}")),
                }
            }
            ElicitationAction::Decline => text("declined"),
            ElicitationAction::Cancel => text("cancelled"),
            other => text(format!("unknown action: {other:?}")),
        })
    }

    /// Echoes `text`.
    #[tool(description = "Echo the text given.")]
    async fn echo(&self, Parameters(EchoArgs { text: said }): Parameters<EchoArgs>) -> String {
        said
    }
}

#[tool_handler]
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("upstream-rmcp", "0.0.0"))
    }

    /// Only the versions with an `initialize` handshake: a 2025-era server.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_11_25,
        ])
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // stdout carries the protocol (or the listening line): logs go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        None => {
            let service = Upstream
                .serve((tokio::io::stdin(), tokio::io::stdout()))
                .await?;
            service.waiting().await?;
            Ok(())
        }
        Some("--http") => http(args.next().as_deref().unwrap_or("127.0.0.1:0")).await,
        Some(other) => Err(format!("unknown argument {other:?}: [--http [ADDR]]").into()),
    }
}

/// Serves the server over Streamable HTTP at `/mcp` on `listen`, in rmcp's session mode, until
/// SIGTERM or Ctrl-C.
async fn http(listen: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(true);
    let service = StreamableHttpService::new(
        || Ok(Upstream),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    listening::serve(listen, "/mcp", app).await?;
    Ok(())
}
