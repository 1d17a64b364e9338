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
    collections::{BTreeMap, HashMap},
    fmt,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{Html, IntoResponse, Response},
    routing::get,
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
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::redis::{RedisStore, RedisUrlFlows};
use tower_elicitation::store::MemorySessionStore;
use tower_elicitation::{ElicitationLayer, Gate, GateCall, GateError, GateTarget, UrlFlow};

/// The `inputRequests` key the `deploy` tool asks under.
pub const APPROVAL_KEY: &str = "deployment-approval";

/// The text of the tool error result when the deployment is not approved.
pub const NOT_APPROVED: &str = "Deployment was not approved.";

/// Where the MCP endpoint is mounted.
pub const MCP_PATH: &str = "/mcp";

/// Shared state of the `deploy` server: deployments performed, the branches
/// of an in-memory repository, GitHub connections made and the URL flows that
/// stand in for GitHub's OAuth.
///
/// Clones share everything, so a test can keep one clone and hand another to
/// [`router_with`].
#[derive(Clone, Debug)]
pub struct DeployState {
    deploys: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    branches: Arc<Mutex<Vec<String>>>,
    flows: GithubFlows,
}

impl Default for DeployState {
    fn default() -> Self {
        Self {
            deploys: Arc::default(),
            connections: Arc::default(),
            branches: Arc::new(Mutex::new(
                ["main", "dev", "feature-x"].map(String::from).to_vec(),
            )),
            flows: GithubFlows::new(DEFAULT_BASE_URL),
        }
    }
}

impl DeployState {
    /// A fresh state: no deployments, branches `main`, `dev`, `feature-x`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same state with URL flows pointing at `base_url` (this server's
    /// own address, e.g. `http://127.0.0.1:3000`).
    pub fn with_base_url(mut self, base_url: &str) -> Self {
        self.flows = GithubFlows::new(base_url);
        self
    }

    /// The same state with its URL flows in `redis` (keyed by the gate's
    /// handle, with an expiry), pointing at `base_url`: what replicas behind
    /// one load balancer need, since a flow's callback may land on any of them.
    pub fn with_redis_flows(mut self, base_url: &str, redis: &RedisStore) -> Self {
        self.flows = GithubFlows::with_redis(base_url, redis);
        self
    }

    /// The number of deployments the handler actually performed.
    pub fn deploys(&self) -> usize {
        self.deploys.load(Ordering::SeqCst)
    }

    /// The number of GitHub connections the handler actually made.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The branches of the in-memory repository.
    pub fn branches(&self) -> Vec<String> {
        self.branches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The URL flows behind the `github-authorization` gate.
    pub fn flows(&self) -> &GithubFlows {
        &self.flows
    }

    fn record_deploy(&self) {
        self.deploys.fetch_add(1, Ordering::SeqCst);
    }
}

/// Where the example listens by default; flows point here unless told otherwise.
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:3000";

/// URL flows standing in for GitHub's OAuth: the URL points at this server
/// (`/flows/<handle>`), and opening `/flows/<handle>/complete` marks the flow
/// complete, as an OAuth callback would.
///
/// The handle is the one the layer derives from the call
/// ([`GateCall::handle`]): stable across the rounds of one call, unguessable,
/// and different for every caller, tool and arguments.
///
/// By default the flows live in this process, so a flow completed on one
/// replica is unknown to another. With [`DeployState::with_redis_flows`]
/// (the example does it when `MCP_REDIS_URL` is set) they live in Redis,
/// keyed by the handle with an expiry: `/flows/<handle>/complete` on one
/// replica completes the flow for a retry on any other. That is the pattern
/// for a real OAuth callback, which lands on whichever replica the load
/// balancer picks.
#[derive(Clone, Debug)]
pub struct GithubFlows {
    base_url: Arc<str>,
    backend: FlowBackend,
}

#[derive(Clone, Debug)]
enum FlowBackend {
    /// handle → completed?
    Memory(Arc<Mutex<HashMap<String, bool>>>),
    Redis(RedisUrlFlows),
}

impl GithubFlows {
    fn new(base_url: &str) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').into(),
            backend: FlowBackend::Memory(Arc::default()),
        }
    }

    fn with_redis(base_url: &str, redis: &RedisStore) -> Self {
        let base_url: Arc<str> = base_url.trim_end_matches('/').into();
        let prefix = Arc::clone(&base_url);
        Self {
            base_url,
            backend: FlowBackend::Redis(
                redis.url_flows(move |handle| format!("{prefix}{FLOWS_PATH}/{handle}")),
            ),
        }
    }

    fn memory(&self) -> Option<std::sync::MutexGuard<'_, HashMap<String, bool>>> {
        match &self.backend {
            FlowBackend::Memory(flows) => {
                Some(flows.lock().unwrap_or_else(PoisonError::into_inner))
            }
            FlowBackend::Redis(_) => None,
        }
    }

    /// Marks the flow complete, as the OAuth callback would; `false` when
    /// there is no such flow (or, with Redis, when Redis cannot be reached).
    pub async fn complete(&self, handle: &str) -> bool {
        if let Some(mut flows) = self.memory() {
            return match flows.get_mut(handle) {
                Some(done) => {
                    *done = true;
                    true
                }
                None => false,
            };
        }
        match &self.backend {
            FlowBackend::Redis(flows) => flows.complete(handle).await.unwrap_or_else(|error| {
                tracing::warn!(%error, "cannot complete the flow");
                false
            }),
            FlowBackend::Memory(_) => false,
        }
    }

    async fn exists(&self, handle: &str) -> bool {
        if let Some(flows) = self.memory() {
            return flows.contains_key(handle);
        }
        match &self.backend {
            FlowBackend::Redis(flows) => flows.exists(handle).await.unwrap_or(false),
            FlowBackend::Memory(_) => false,
        }
    }
}

impl UrlFlow for GithubFlows {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, tower_elicitation::BoxError> {
        if let Some(mut flows) = self.memory() {
            flows.entry(call.handle().to_owned()).or_insert(false);
            return Ok(format!("{}{FLOWS_PATH}/{}", self.base_url, call.handle()));
        }
        match &self.backend {
            FlowBackend::Redis(flows) => flows.url(call).await,
            FlowBackend::Memory(_) => Err("no flow backend".into()),
        }
    }

    async fn is_complete(&self, call: &GateCall<'_>) -> bool {
        if let Some(flows) = self.memory() {
            return flows.get(call.handle()).copied().unwrap_or(false);
        }
        match &self.backend {
            FlowBackend::Redis(flows) => flows.is_complete(call).await,
            FlowBackend::Memory(_) => false,
        }
    }
}

/// Where the URL flows are served.
pub const FLOWS_PATH: &str = "/flows";

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
    #[schemars(schema_with = "environment_schema")]
    pub environment: Environment,
}

/// `environment` in `deploy`'s `inputSchema`: a plain `enum` of strings, inline, which hosts
/// render as a select. (schemars writes a Rust enum as a `$ref` to a `oneOf` of `const`s, which
/// hosts render as a raw JSON editor.)
fn environment_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "title": "Environment",
        "description": "Where to deploy.",
        "enum": ["staging", "production"],
    })
}

/// Arguments of `delete_branch`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct BranchArgs {
    /// The branch to delete.
    pub name: String,
}

/// Arguments of `connect_github`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct GithubArgs {
    /// The GitHub account to connect.
    pub account: String,
}

/// The rmcp server handler: `deploy` (asks for approval itself) and
/// `list_branches`, `delete_branch`, `connect_github` (which know nothing of
/// elicitation: the layer's gates ask for them).
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

    /// List the branches of the repository.
    #[tool(description = "List the branches of the repository.")]
    async fn list_branches(&self) -> CallToolResult {
        CallToolResult::structured(json!({ "branches": self.state.branches() }))
    }

    /// Delete a branch. No elicitation code here: the `confirm-delete` gate
    /// asks before the call can reach this handler.
    #[tool(description = "Delete a branch of the repository.")]
    async fn delete_branch(
        &self,
        Parameters(BranchArgs { name }): Parameters<BranchArgs>,
    ) -> CallToolResult {
        let mut branches = self
            .state
            .branches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match branches.iter().position(|b| *b == name) {
            Some(index) => {
                branches.remove(index);
                tracing::info!(%name, "deleted branch");
                CallToolResult::success(vec![ContentBlock::text(format!("Deleted branch {name}"))])
            }
            None => CallToolResult::error(vec![ContentBlock::text(format!("No branch {name}"))]),
        }
    }

    /// Connect a GitHub account. No elicitation code here: the
    /// `github-authorization` URL gate lets the call through only once the
    /// flow has completed on the server.
    #[tool(description = "Connect a GitHub account.")]
    async fn connect_github(
        &self,
        Parameters(GithubArgs { account }): Parameters<GithubArgs>,
    ) -> CallToolResult {
        self.state.connections.fetch_add(1, Ordering::SeqCst);
        CallToolResult::success(vec![ContentBlock::text(format!("Connected {account}"))])
    }
}

/// The key of the gate on `delete_branch`.
pub const CONFIRM_DELETE_KEY: &str = "confirm-delete";
/// The refusal text of the gate on `delete_branch`.
pub const NOT_DELETED: &str = "Branch was not deleted.";
/// What the gate on `delete_branch` adds when the name typed is not the branch's: it asks again.
pub const NOT_THE_BRANCH: &str = "That is not the branch name.";
/// The key of the gate on `connect_github`.
pub const GITHUB_KEY: &str = "github-authorization";

/// The message of the gate on `delete_branch`: `Delete the branch 'dev'? Type its name to confirm.`
pub fn delete_message(branch: &str) -> String {
    format!("Delete the branch '{branch}'? Type its name to confirm.")
}

/// The message of the gate on `connect_github`: `Authorize GitHub access for 'octocat'.`
pub fn github_message(account: &str) -> String {
    format!("Authorize GitHub access for '{account}'.")
}

/// Retrofits approval onto `delete_branch` and `connect_github`, whose
/// handlers contain no elicitation code at all.
pub fn with_gates(
    layer: ElicitationLayer,
    state: &DeployState,
) -> Result<ElicitationLayer, GateError> {
    let confirm_delete = Gate::form(
        CONFIRM_DELETE_KEY,
        json!({
            "type": "object",
            "properties": {
                "confirm": {"type": "string", "title": "Branch name", "description": "Type the name of the branch to delete, exactly as it is written."}
            },
            "required": ["confirm"]
        }),
    )?
    .message(|call| delete_message(call.argument_str("name").unwrap_or_default()))
    .require(|content, call| content.get("confirm") == call.argument("name"))
    .retry_hint(NOT_THE_BRANCH)
    .refusal(NOT_DELETED);

    let github = Gate::url(GITHUB_KEY, state.flows().clone())?
        .message(|call| github_message(call.argument_str("account").unwrap_or_default()));

    layer
        .gate(GateTarget::tool("delete_branch"), confirm_delete)?
        .gate(GateTarget::tool("connect_github"), github)
}

/// The tools, built once: `#[tool_handler]`'s default builds the router (every tool's schema)
/// again on each request, and a stateless `StreamableHttpService` makes a handler per request.
static TOOLS: std::sync::LazyLock<rmcp::handler::server::router::tool::ToolRouter<DeployServer>> =
    std::sync::LazyLock::new(DeployServer::tool_router);

#[tool_handler(router = TOOLS)]
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

/// The message of the approval form: `Deploy to 'staging'?`.
pub fn approval_message(environment: Environment) -> String {
    format!("Deploy to '{environment}'?")
}

/// The `input_required` result asking the user to approve a deployment.
fn ask_for_approval(environment: Environment) -> InputRequiredResult {
    let properties = BTreeMap::from([
        (
            "approve".to_owned(),
            PrimitiveSchemaDefinition::Boolean(
                BooleanSchema::new()
                    .title("Approve")
                    .description("Tick to deploy the current build."),
            ),
        ),
        (
            "note".to_owned(),
            PrimitiveSchemaDefinition::String(
                StringSchema::new()
                    .max_length(200)
                    .title("Note")
                    .description("Optional: why, for the deployment log (at most 200 characters)."),
            ),
        ),
    ]);
    let form = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: approval_message(environment),
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

/// `listener` with `TCP_NODELAY` set on every accepted socket. An event-stream response goes
/// out in several writes; with Nagle's algorithm on (as `axum::serve` leaves it), each write
/// after the first waits for the client's delayed ACK: about 40 ms on every request.
pub fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "cannot set TCP_NODELAY");
        }
    })
}

/// The axum router serving the MCP endpoint at [`MCP_PATH`] behind `layer`
/// (with the example's gates), with SSE responses and a fresh [`DeployState`].
pub fn router(layer: ElicitationLayer, base_url: &str) -> Result<axum::Router, GateError> {
    router_with(layer, DeployState::new().with_base_url(base_url), false)
}

/// The axum router serving the MCP endpoint at [`MCP_PATH`] behind `layer`
/// plus the example's gates, and the URL flow pages at [`FLOWS_PATH`].
///
/// In front of it all, the [`LegacyBridgeLayer`] serves 2025-era clients
/// (sessions, `initialize`, questions asked on the call's stream); 2026-07-28
/// requests pass it untouched.
///
/// Everything is recorded in `state`; `json_response` is passed to
/// [`mcp_service`].
pub fn router_with(
    layer: ElicitationLayer,
    state: DeployState,
    json_response: bool,
) -> Result<axum::Router, GateError> {
    router_bridged(
        LegacyBridgeLayer::for_layer(&layer),
        layer,
        state,
        json_response,
    )
}

/// The bridge of one replica of several: its sessions and waiting calls in
/// `redis`, so that a 2025-era client needs no sticky routing (a session
/// opened on one replica is served and ended on any; an answer POSTed to any
/// replica reaches the call waiting on another).
pub fn redis_bridge(layer: &ElicitationLayer, redis: &RedisStore) -> LegacyBridgeLayer {
    LegacyBridgeLayer::for_layer(layer)
        .session_store(redis.sessions(MemorySessionStore::DEFAULT_IDLE))
        .pending_answers(redis.pending_answers())
}

/// [`router_with`], with `bridge` (e.g. [`redis_bridge`]) in front instead
/// of an in-process one.
pub fn router_bridged(
    bridge: LegacyBridgeLayer,
    layer: ElicitationLayer,
    state: DeployState,
    json_response: bool,
) -> Result<axum::Router, GateError> {
    let mcp = ServiceBuilder::new()
        .layer(bridge)
        .layer(with_gates(layer, &state)?)
        .service(mcp_service(state.clone(), json_response));
    let flows = state.flows().clone();
    Ok(axum::Router::new()
        .nest_service(MCP_PATH, mcp)
        .route(&format!("{FLOWS_PATH}/{{handle}}"), get(flow_page))
        .route(
            &format!("{FLOWS_PATH}/{{handle}}/complete"),
            get(complete_flow),
        )
        .with_state(flows))
}

/// The page a URL elicitation opens: where a real server would redirect to
/// GitHub's OAuth consent screen.
async fn flow_page(State(flows): State<GithubFlows>, Path(handle): Path<String>) -> Response {
    if !flows.exists(&handle).await {
        return (StatusCode::NOT_FOUND, "No such flow").into_response();
    }
    Html(format!(
        "<h1>Authorize GitHub access</h1><p>This stands in for GitHub's consent screen.</p>\
         <p><a href=\"{FLOWS_PATH}/{handle}/complete\">Authorize</a></p>"
    ))
    .into_response()
}

/// The OAuth callback stand-in: marks the flow complete.
async fn complete_flow(State(flows): State<GithubFlows>, Path(handle): Path<String>) -> Response {
    if flows.complete(&handle).await {
        Html("<h1>GitHub access authorized</h1><p>You can return to your MCP client.</p>")
            .into_response()
    } else {
        (StatusCode::NOT_FOUND, "No such flow").into_response()
    }
}
