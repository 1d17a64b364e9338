//! The `deploy` tool on rmcp 3.11 with no layer: what a Rust user writes by hand instead of using
//! `ElicitationLayer`. Used by `scripts/peers.sh` (the `tools` binary `peers-rmcp-handwritten`).
//!
//! The same tool, form and answers as `examples/deploy`, and the same rmcp service configuration
//! (stateless 2026-07-28, loopback hosts, `TCP_NODELAY`), with the work the layer does for
//! `examples/deploy` written into the handler:
//!
//! - the state is sealed with rmcp's own `RequestStateCodec` (HMAC-SHA256, feature
//!   `request-state`), bound by associated data to the tool and its `environment`, with a TTL of
//!   600 s; a retry whose state does not open is refused with `-32602`;
//! - the answer is read with typed serde (`ElicitResult`, then `Approval`), plus the form's
//!   `maxLength` by hand; one that does not read is asked again, without a hint.
//!
//! It does not bind the caller, check the client's capabilities, or say what was wrong.
//!
//! ```text
//! MCP_ADDR=127.0.0.1:3000 [MCP_JSON_RESPONSE=1] cargo run --release -p tower-elicitation-tools --bin peers-rmcp-handwritten
//! ```

use std::{collections::BTreeMap, time::Duration};

use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{
        tool::{InputResponses, RequestState},
        wrapper::Parameters,
    },
    model::{
        BooleanSchema, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation,
        InputRequest, InputRequests, InputRequiredResult, PrimitiveSchemaDefinition,
        ProtocolVersion, RequestStateCodec, SealOptions, ServerCapabilities, ServerConfig,
        StringSchema,
    },
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

const APPROVAL_KEY: &str = "deployment-approval";
const TTL: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Environment {
    Staging,
    Production,
}

impl Environment {
    fn as_str(self) -> &'static str {
        match self {
            Self::Staging => "staging",
            Self::Production => "production",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct DeployArgs {
    /// Where to deploy.
    environment: Environment,
}

/// The form's content, typed: `approve` must be a JSON boolean.
#[derive(Deserialize)]
struct Approval {
    approve: bool,
    #[serde(default)]
    note: Option<String>,
}

#[derive(Clone)]
struct Deploy {
    codec: std::sync::Arc<RequestStateCodec>,
}

#[tool_router]
impl Deploy {
    #[tool(
        description = "Deploy the current build to an environment. Asks the user for approval first."
    )]
    async fn deploy(
        &self,
        Parameters(DeployArgs { environment }): Parameters<DeployArgs>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        // What the state is bound to: this tool and these arguments.
        let context = format!("tools/call\0deploy\0{}", environment.as_str());
        let answer = responses.as_ref().and_then(|r| r.get(APPROVAL_KEY));
        let (Some(answer), Some(state)) = (answer, state) else {
            return Ok(self.ask(environment, &context).into());
        };
        if self.codec.open_with(&state, context.as_bytes()).is_err() {
            return Err(ErrorData::invalid_params(
                "Invalid or expired requestState",
                Some(json!({"reason": "invalid_request_state"})),
            ));
        }
        let Ok(result) = serde_json::from_value::<ElicitResult>(answer.clone()) else {
            return Ok(self.ask(environment, &context).into());
        };
        if result.action != ElicitationAction::Accept {
            return Ok(not_approved());
        }
        let approval = result
            .content
            .and_then(|content| serde_json::from_value::<Approval>(content).ok())
            .filter(|a| a.note.as_ref().is_none_or(|n| n.chars().count() <= 200));
        match approval {
            None => Ok(self.ask(environment, &context).into()),
            Some(Approval { approve: false, .. }) => Ok(not_approved()),
            Some(Approval { approve: true, .. }) => Ok(CallToolResult::structured(
                json!({"environment": environment.as_str(), "deployed": true}),
            )
            .into()),
        }
    }
}

impl Deploy {
    /// The `input_required` result asking for approval, its state sealed for `context`.
    fn ask(&self, environment: Environment, context: &str) -> InputRequiredResult {
        let properties = BTreeMap::from([
            (
                "approve".to_owned(),
                PrimitiveSchemaDefinition::Boolean(BooleanSchema::new().title("Approve")),
            ),
            (
                "note".to_owned(),
                PrimitiveSchemaDefinition::String(
                    StringSchema::new().max_length(200).title("Note"),
                ),
            ),
        ]);
        let form = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Deploy to {}?", environment.as_str()),
            requested_schema: ElicitationSchema::new(properties)
                .with_required(vec!["approve".into()]),
        };
        let requests = InputRequests::from([(
            APPROVAL_KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(form)),
        )]);
        let options = SealOptions::new()
            .associated_data(context.as_bytes())
            .ttl(TTL);
        let sealed = self.codec.seal_with(b"approval", &options);
        InputRequiredResult::new(Some(requests), Some(sealed))
    }
}

fn not_approved() -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text("Deployment was not approved.")]).into()
}

/// The tool, built once (`#[tool_handler]`'s default builds the router on each request), as
/// `examples/deploy` does.
static TOOLS: std::sync::LazyLock<rmcp::handler::server::router::tool::ToolRouter<Deploy>> =
    std::sync::LazyLock::new(Deploy::tool_router);

#[tool_handler(router = TOOLS)]
impl ServerHandler for Deploy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("deploy-rmcp-handwritten", "1.0.0"))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let json_response = std::env::var("MCP_JSON_RESPONSE").is_ok_and(|v| v == "1");
    let key = std::env::var("PEER_KEY")
        .unwrap_or_else(|_| "peers-sh-request-state-key-32-bytes!".to_owned());
    let deploy = Deploy {
        codec: std::sync::Arc::new(RequestStateCodec::try_new(key.into_bytes())?),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_stateless_protocol_metadata_required(true)
        .with_json_response(json_response)
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1"]);
    let service = StreamableHttpService::new(
        move || Ok(deploy.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}
