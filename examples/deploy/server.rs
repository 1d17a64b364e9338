//! The `deploy` MCP server: an rmcp 3.11 tool server, served statelessly over
//! Streamable HTTP (MCP 2026-07-28) and wrapped in [`ElicitationLayer`].
//!
//! The tool handler is written with rmcp's own multi round-trip (MRTR) types
//! and contains no validation and no signing code:
//!
//! - without a `deployment-approval` answer it returns an
//!   [`InputRequiredResult`] asking for one with an `elicitation/create` form;
//! - with an answer it deploys only on `accept` + `approve: true`; anything
//!   else (decline, cancel, `approve: false`, or a shape it does not expect)
//!   ends in a tool error result, `Deployment was not approved.`.
//!
//! [`ElicitationLayer`] does the rest: it seals the `requestState`, checks the
//! answer against the form that was asked, asks again when the answer is
//! missing or invalid, and rejects a tampered `requestState`, so the handler
//! only ever sees answers that match its form.
//!
//! This file is shared: the `deploy` example binary and the integration tests
//! include it as a module (`#[path = "../examples/deploy/server.rs"] mod server;`).
//!
//! ```ignore
//! let state = DeployState::default();
//! let app = router_with(ElicitationLayer::new(keyring), state.clone(), true);
//! axum::serve(listener, app).await?;
//! assert_eq!(state.deploys(), 0);
//! ```

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use rmcp::{
    ServerHandler,
    handler::server::{tool::InputResponses, wrapper::Parameters},
    model::{
        BooleanSchema, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, Implementation,
        InputRequest, InputRequests, InputRequiredResult, PrimitiveSchemaDefinition,
        ProtocolVersion, ServerCapabilities, ServerConfig, StringSchema,
    },
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use tower_elicitation::ElicitationLayer;

/// The `inputRequests` key the `deploy` tool asks under.
pub const APPROVAL_KEY: &str = "deployment-approval";

/// The text of the tool error result when the deployment is not approved.
pub const NOT_APPROVED: &str = "Deployment was not approved.";

/// Where the MCP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";

/// Shared state of the `deploy` server: how many deployments were performed.
///
/// Clones share the same counter, so a test can keep one clone and hand
/// another to [`router_with`].
#[derive(Clone, Debug, Default)]
pub struct DeployState {
    deploys: Arc<AtomicUsize>,
}

impl DeployState {
    /// A fresh state with no deployments.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of deployments the handler actually performed.
    pub fn deploys(&self) -> usize {
        self.deploys.load(Ordering::SeqCst)
    }

    fn record_deploy(&self) {
        self.deploys.fetch_add(1, Ordering::SeqCst);
    }
}

/// The deployment target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    /// The staging environment.
    Staging,
    /// The production environment.
    Production,
}

impl fmt::Display for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Environment::Staging => "staging",
            Environment::Production => "production",
        })
    }
}

/// Arguments of the `deploy` tool.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct DeployArgs {
    /// Where to deploy.
    pub environment: Environment,
}

/// The rmcp server handler with the single `deploy` tool.
#[derive(Clone, Debug)]
pub struct DeployServer {
    state: DeployState,
}

impl DeployServer {
    /// A handler that records its deployments in `state`.
    pub fn new(state: DeployState) -> Self {
        Self { state }
    }
}

#[tool_router]
impl DeployServer {
    /// Deploy to an environment, after the user approved it.
    #[tool(
        description = "Deploy the current build to an environment. Asks the user for approval first."
    )]
    async fn deploy(
        &self,
        Parameters(DeployArgs { environment }): Parameters<DeployArgs>,
        InputResponses(responses): InputResponses,
    ) -> CallToolResponse {
        let Some(answer) = responses.as_ref().and_then(|r| r.get(APPROVAL_KEY)) else {
            return ask_for_approval(environment).into();
        };
        if !is_approved(answer) {
            return CallToolResult::error(vec![ContentBlock::text(NOT_APPROVED)]).into();
        }
        self.state.record_deploy();
        tracing::info!(%environment, "deployed");
        CallToolResult::structured(json!({ "environment": environment, "deployed": true })).into()
    }
}

#[tool_handler]
impl ServerHandler for DeployServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "deploy-example",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("Call `deploy` with an environment; you will be asked to approve.")
    }

    // Multi round-trip requests exist only in 2026-07-28, so this server
    // serves only that version (no `initialize`, no sessions).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
    }
}

/// The `input_required` result asking the user to approve a deployment.
fn ask_for_approval(environment: Environment) -> InputRequiredResult {
    let properties = BTreeMap::from([
        (
            "approve".to_owned(),
            PrimitiveSchemaDefinition::Boolean(BooleanSchema::new().title("Approve")),
        ),
        (
            "note".to_owned(),
            PrimitiveSchemaDefinition::String(StringSchema::new().max_length(200).title("Note")),
        ),
    ]);
    let form = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("Deploy to {environment}?"),
        requested_schema: ElicitationSchema::new(properties).with_required(vec!["approve".into()]),
    };
    let requests = InputRequests::from([(
        APPROVAL_KEY.to_owned(),
        InputRequest::Elicitation(ElicitRequest::new(form)),
    )]);
    // No `requestState` of its own: the layer adds the sealed one.
    InputRequiredResult::from_input_requests(requests)
}

/// Whether an `ElicitResult` (as opaque JSON) approves the deployment.
///
/// The layer guarantees an accepted answer matches the form; anything
/// unexpected still counts as "not approved", never as a panic.
fn is_approved(answer: &Value) -> bool {
    let Ok(result) = serde_json::from_value::<ElicitResult>(answer.clone()) else {
        return false;
    };
    result.action == ElicitationAction::Accept
        && result
            .content
            .as_ref()
            .and_then(|content| content.get("approve"))
            .and_then(Value::as_bool)
            == Some(true)
}

/// The bare rmcp `StreamableHttpService` for the `deploy` tool, without the layer.
///
/// `json_response` selects `application/json` replies (`true`) or
/// `text/event-stream` replies (`false`, rmcp's default).
pub fn mcp_service(
    state: DeployState,
    json_response: bool,
) -> StreamableHttpService<DeployServer, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        // 2026-07-28 requests are always stateless; this also keeps older
        // clients from opening sessions.
        .with_legacy_session_mode(false)
        // Every request must carry `MCP-Protocol-Version` and `_meta`
        // (`-32020` / `-32602` otherwise), as 2026-07-28 requires.
        .with_stateless_protocol_metadata_required(true)
        .with_json_response(json_response)
        // Host (DNS-rebinding) allow-list: entries without a port match any
        // port, so `127.0.0.1:<random port>` and `localhost` are accepted.
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1"]);
    StreamableHttpService::new(
        move || Ok(DeployServer::new(state.clone())),
        LocalSessionManager::default().into(),
        config,
    )
}

/// The axum router serving the `deploy` tool at [`MCP_PATH`] behind `layer`,
/// with SSE responses and its own (unobservable) [`DeployState`].
pub fn router(layer: ElicitationLayer) -> axum::Router {
    router_with(layer, DeployState::new(), false)
}

/// The axum router serving the `deploy` tool at [`MCP_PATH`] behind `layer`.
///
/// Deployments are counted in `state`; `json_response` is passed to
/// [`mcp_service`].
pub fn router_with(
    layer: ElicitationLayer,
    state: DeployState,
    json_response: bool,
) -> axum::Router {
    let mcp = ServiceBuilder::new()
        .layer(layer)
        .service(mcp_service(state, json_response));
    axum::Router::new().nest_service(MCP_PATH, mcp)
}
