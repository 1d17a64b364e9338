//! A real rmcp client (stateless 2026-07-28 lifecycle, its own MRTR retry loop)
//! against the `deploy` example server behind `ElicitationLayer`, over TCP.

use crate::support::server;

use std::{
    collections::VecDeque,
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, ServiceError,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, InputResponses,
        ProtocolVersion,
    },
    service::{RequestContext, RoleClient, RunningService},
    transport::StreamableHttpClientTransport,
};
use serde_json::{Value, json};
use server::{APPROVAL_KEY, DeployState, NOT_APPROVED};
use tokio::task::JoinHandle;
use tower_elicitation::{ElicitationLayer, Keyring};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A client whose user answers elicitations from a script, and who remembers
/// every elicitation message shown.
#[derive(Clone, Default)]
struct ScriptedUser {
    answers: Arc<Mutex<VecDeque<ElicitResult>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl ScriptedUser {
    fn new(answers: impl IntoIterator<Item = ElicitResult>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers.into_iter().collect())),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }
}

impl ClientHandler for ScriptedUser {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("rmcp-client-test", "0.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. }
            | ElicitRequestParams::UrlElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        self.seen.lock().expect("lock").push(message);
        self.answers
            .lock()
            .expect("lock")
            .pop_front()
            .ok_or_else(|| ErrorData::internal_error("the script has no more answers", None))
    }
}

/// The server on 127.0.0.1:<random> and a connected client.
struct Setup {
    state: DeployState,
    user: ScriptedUser,
    client: RunningService<RoleClient, ScriptedUser>,
    server: JoinHandle<()>,
}

impl Setup {
    async fn start(answers: impl IntoIterator<Item = ElicitResult>) -> Self {
        let state = DeployState::new();
        let keyring = Keyring::new("test", [7u8; 32]).expect("valid test key");
        let app = server::router_with(ElicitationLayer::new(keyring), state.clone(), false)
            .expect("the example's gates are valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });

        let user = ScriptedUser::new(answers);
        let transport =
            StreamableHttpClientTransport::from_uri(format!("http://{addr}{}", server::MCP_PATH));
        // Stateless 2026-07-28: `server/discover`, then self-contained requests
        // (no `initialize`, no session).
        let lifecycle = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let client = within(user.clone().serve_with_lifecycle(transport, lifecycle))
            .await
            .expect("client starts");
        Self {
            state,
            user,
            client,
            server,
        }
    }

    /// The auto-retrying `call_tool` (rmcp drives the MRTR rounds).
    async fn deploy(&self) -> Result<CallToolResult, ServiceError> {
        within(self.client.call_tool(deploy_params())).await
    }

    async fn stop(self) {
        let _ = within(self.client.cancel()).await;
        self.server.abort();
    }
}

async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .expect("no answer within the timeout")
}

fn deploy_params() -> CallToolRequestParams {
    let arguments = json!({ "environment": "staging" });
    let Value::Object(arguments) = arguments else {
        unreachable!("an object literal")
    };
    CallToolRequestParams::new("deploy").with_arguments(arguments)
}

fn accept(content: Value) -> ElicitResult {
    ElicitResult::new(ElicitationAction::Accept).with_content(content)
}

fn text(result: &CallToolResult) -> &str {
    result
        .content
        .first()
        .and_then(|content| content.as_text())
        .map(|text| text.text.as_str())
        .unwrap_or_default()
}

#[tokio::test]
async fn accepted_approval_deploys() {
    let setup = Setup::start([accept(json!({ "approve": true }))]).await;
    let result = setup.deploy().await.expect("tool call completes");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(
        result.structured_content,
        Some(json!({ "environment": "staging", "deployed": true }))
    );
    assert_eq!(setup.user.seen(), ["Deploy to 'staging'?"]);
    assert_eq!(setup.state.deploys(), 1);
    setup.stop().await;
}

#[tokio::test]
async fn invalid_answer_is_asked_again_with_a_hint() {
    let setup = Setup::start([
        accept(json!({ "approve": "yes" })),
        accept(json!({ "approve": true })),
    ])
    .await;
    let result = setup.deploy().await.expect("tool call completes");
    assert_eq!(
        result.structured_content,
        Some(json!({ "environment": "staging", "deployed": true })),
        "{result:?}"
    );
    let seen = setup.user.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[1].starts_with("Deploy to 'staging'?"), "{seen:?}");
    assert!(
        seen[1].contains("Approve"),
        "the re-ask carries a hint: {seen:?}"
    );
    assert_eq!(setup.state.deploys(), 1);
    setup.stop().await;
}

#[tokio::test]
async fn declined_approval_is_a_tool_error() {
    let setup = Setup::start([ElicitResult::new(ElicitationAction::Decline)]).await;
    let result = setup.deploy().await.expect("tool call completes");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(text(&result), NOT_APPROVED);
    assert_eq!(setup.user.seen().len(), 1);
    assert_eq!(setup.state.deploys(), 0);
    setup.stop().await;
}

#[tokio::test]
async fn tampered_request_state_fails_the_call() {
    let setup = Setup::start([]).await;
    let first = within(setup.client.call_tool_once(deploy_params()))
        .await
        .expect("first round");
    let CallToolResponse::InputRequired(input_required) = first else {
        panic!("expected input_required, got {first:?}");
    };
    let state = input_required
        .request_state
        .expect("the layer must add a sealed requestState");
    let answers = InputResponses::from([(
        APPROVAL_KEY.to_owned(),
        json!({ "action": "accept", "content": { "approve": true } }),
    )]);
    let retry = deploy_params()
        .with_input_responses(answers)
        .with_request_state(format!("{state}x"));
    match within(setup.client.call_tool_once(retry)).await {
        Err(ServiceError::McpError(error)) => {
            assert_eq!(error.code.0, -32602, "{error:?}");
            assert_eq!(error.message, "Invalid or expired requestState");
        }
        other => panic!("expected a -32602 MCP error, got {other:?}"),
    }
    assert_eq!(setup.state.deploys(), 0);
    setup.stop().await;
}
