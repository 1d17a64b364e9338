//! Declared gates end to end, against real rmcp servers driven in-process with
//! `tower::ServiceExt::oneshot` (no sockets):
//!
//! - the `deploy` example (`delete_branch` behind the `confirm-delete` form gate,
//!   `connect_github` behind the `github-authorization` URL gate);
//! - a small rmcp server defined here (typed answers, argument injection, a gate
//!   followed by the handler's own question, prompt and resource gates);
//! - the `stack` example (tracing + bearer auth + the layer).
//!
//! Every case that talks to a server runs with rmcp answering `application/json`
//! (`json::*`) and `text/event-stream` (`sse::*`). The `#[ignore = "BUG: …"]` tests
//! describe behaviour the layer gets wrong today.

use crate::support::rmcp as rmcp_support;
use crate::support::server;
use crate::support::stack;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use rmcp_support::{
    Caller, Mcp, Mode, PROTOCOL_VERSION, Reply, accept, in_both_modes, keyring, merge, tool_params,
};
use serde_json::{Map, Value, json};
use server::{
    CONFIRM_DELETE_KEY, DEFAULT_BASE_URL, DeployState, FLOWS_PATH, GITHUB_KEY, MCP_PATH,
    NOT_DELETED, NOT_THE_BRANCH,
};
use tower::ServiceBuilder;
use tower_elicitation::{
    BoxError, ElicitationLayer, Gate, GateCall, GateError, GateTarget, Keyring, UrlFlow,
};

const LEGACY_VERSION: &str = "2025-11-25";

// ---------------------------------------------------------------------------
// HTTP + JSON-RPC helpers (the shared plumbing is in `rmcp_support`)
// ---------------------------------------------------------------------------

/// An `input_required` result: what it asks, and its sealed state.
#[derive(Debug)]
struct Asked {
    requests: Map<String, Value>,
    state: String,
}

impl Mcp {
    /// `tools/call name arguments` (plus `extra` params) from a default caller.
    async fn call_tool(&self, name: &str, arguments: Value, extra: Value) -> Reply {
        self.send(
            &Caller::new(),
            "tools/call",
            tool_params(name, arguments, extra),
        )
        .await
    }

    /// A GET through the same router: its status and body.
    async fn get(&self, path: &str) -> (StatusCode, String) {
        let request = Request::get(path)
            .header(header::HOST, "localhost")
            .body(Body::empty())
            .expect("valid request");
        let response = self.serve(request).await;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// The params of a retry: the echoed `requestState` and the `inputResponses`.
fn answering(state: &str, responses: Value) -> Value {
    json!({ "requestState": state, "inputResponses": responses })
}

fn decline() -> Value {
    json!({ "action": "decline" })
}

fn cancel() -> Value {
    json!({ "action": "cancel" })
}

impl Reply {
    /// The `input_required` result: what it asks and its (non-empty) sealed state.
    fn asked(&self) -> Asked {
        let result = self.result();
        assert_eq!(result["resultType"], "input_required", "{result:#}");
        let requests = result["inputRequests"]
            .as_object()
            .unwrap_or_else(|| panic!("no inputRequests in {result:#}"))
            .clone();
        let state = result["requestState"]
            .as_str()
            .filter(|state| !state.is_empty())
            .unwrap_or_else(|| panic!("no sealed requestState in {result:#}"))
            .to_owned();
        Asked { requests, state }
    }

    /// The text of a complete, successful tool result.
    fn tool_text(&self) -> &str {
        let result = self.result();
        assert_eq!(result["resultType"], "complete", "{result:#}");
        assert_ne!(result["isError"], json!(true), "{result:#}");
        first_text(result)
    }

    /// The text of a complete tool error result.
    fn tool_error(&self) -> &str {
        let result = self.result();
        assert_eq!(result["resultType"], "complete", "{result:#}");
        assert_eq!(result["isError"], json!(true), "{result:#}");
        first_text(result)
    }

    /// Asserts a `-32021` (HTTP 400) naming exactly `required`.
    fn assert_missing_capability(&self, required: Value) {
        assert_eq!(self.status, StatusCode::BAD_REQUEST, "{:#}", self.message);
        let error = self.error();
        assert_eq!(error["code"], -32021, "{error:#}");
        assert_eq!(error["data"]["requiredCapabilities"], required, "{error:#}");
    }

    /// Asserts the JSON-RPC refusal of a gated prompt or resource.
    fn assert_refused(&self, gate: &str, text: &str) {
        assert_eq!(self.status, StatusCode::OK, "{:#}", self.message);
        let error = self.error();
        assert_eq!(error["code"], -32602, "{error:#}");
        assert_eq!(error["message"], text, "{error:#}");
        assert_eq!(
            error["data"],
            json!({ "reason": "refused", "gate": gate }),
            "{error:#}"
        );
    }

    fn assert_invalid_state(&self) {
        let error = self.error();
        assert_eq!(error["code"], -32602, "{error:#}");
        assert_eq!(error["message"], "Invalid or expired requestState");
        assert_eq!(error["data"]["reason"], "invalid_request_state");
    }
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result:#}"))
}

impl Asked {
    /// The `elicitation/create` params asked under `key`, asserting it is the only question.
    fn only(&self, key: &str) -> &Value {
        assert_eq!(
            self.requests.keys().collect::<Vec<_>>(),
            [key],
            "{:#}",
            Value::Object(self.requests.clone())
        );
        let request = &self.requests[key];
        assert_eq!(request["method"], "elicitation/create", "{request:#}");
        &request["params"]
    }
}

// ---------------------------------------------------------------------------
// The deploy example: `delete_branch` (form gate) and `connect_github` (URL gate)
// ---------------------------------------------------------------------------

/// The deploy example's router (with its gates) and its state.
struct Deploy {
    mcp: Mcp,
    state: DeployState,
}

impl Deploy {
    fn new(mode: Mode) -> Self {
        let (mcp, state) = rmcp_support::deploy(mode);
        Self { mcp, state }
    }

    /// The branches, as the `list_branches` tool reports them.
    async fn listed_branches(&self) -> Vec<String> {
        let reply = self
            .mcp
            .call_tool("list_branches", json!({}), json!({}))
            .await;
        let result = reply.result();
        assert_ne!(result["isError"], json!(true), "{result:#}");
        serde_json::from_value(result["structuredContent"]["branches"].clone())
            .unwrap_or_else(|_| panic!("no branches in {result:#}"))
    }

    /// `delete_branch {name}` from `caller`, plus `extra` params.
    async fn delete(&self, caller: &Caller, name: &str, extra: Value) -> Reply {
        let params = tool_params("delete_branch", json!({ "name": name }), extra);
        self.mcp.send(caller, "tools/call", params).await
    }

    /// `connect_github {account: "octocat"}` from `caller`, plus `extra` params.
    async fn connect(&self, caller: &Caller, extra: Value) -> Reply {
        let params = tool_params("connect_github", json!({ "account": "octocat" }), extra);
        self.mcp.send(caller, "tools/call", params).await
    }
}

const ALL_BRANCHES: [&str; 3] = ["main", "dev", "feature-x"];

/// The first round of `delete_branch {name: "dev"}`: the layer asks `confirm-delete`.
async fn ask_to_delete_dev(deploy: &Deploy) -> Asked {
    let asked = deploy
        .delete(&Caller::new(), "dev", json!({}))
        .await
        .asked();
    let params = asked.only(CONFIRM_DELETE_KEY);
    assert_eq!(params["mode"], "form");
    assert_eq!(
        params["message"],
        "Delete the branch 'dev'? Type its name to confirm."
    );
    assert_eq!(
        params["requestedSchema"]["required"],
        json!(["confirm"]),
        "{params:#}"
    );
    assert_eq!(
        params["requestedSchema"]["properties"]["confirm"]["type"],
        "string"
    );
    asked
}

async fn delete_branch_refusals_keep_the_branch(mode: Mode) {
    let deploy = Deploy::new(mode);
    for answer in [decline(), cancel()] {
        let asked = ask_to_delete_dev(&deploy).await;
        let reply = deploy
            .delete(
                &Caller::new(),
                "dev",
                answering(&asked.state, json!({ CONFIRM_DELETE_KEY: answer })),
            )
            .await;
        assert_eq!(reply.tool_error(), NOT_DELETED, "{answer}");
        assert_eq!(deploy.listed_branches().await, ALL_BRANCHES, "{answer}");
    }
    // Another name is not refused: the gate asks again (its retry hint).
    let asked = ask_to_delete_dev(&deploy).await;
    let wrong = json!({ CONFIRM_DELETE_KEY: accept(json!({ "confirm": "main" })) });
    let again = deploy
        .delete(&Caller::new(), "dev", answering(&asked.state, wrong))
        .await
        .asked();
    // On the form's one field, where a form shows a problem.
    let params = again.only(CONFIRM_DELETE_KEY);
    assert!(
        params["requestedSchema"]["properties"]["confirm"]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with(&format!("{NOT_THE_BRANCH} "))),
        "{params}"
    );
    assert_eq!(deploy.state.branches(), ALL_BRANCHES);
}

async fn delete_branch_confirmed_deletes_it(mode: Mode) {
    let deploy = Deploy::new(mode);
    let asked = ask_to_delete_dev(&deploy).await;
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);
    let reply = deploy
        .delete(
            &Caller::new(),
            "dev",
            answering(
                &asked.state,
                json!({ CONFIRM_DELETE_KEY: accept(json!({ "confirm": "dev" })) }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Deleted branch dev");
    assert_eq!(deploy.listed_branches().await, ["main", "feature-x"]);
}

async fn delete_branch_missing_or_invalid_answer_is_reasked(mode: Mode) {
    let deploy = Deploy::new(mode);
    let asked = ask_to_delete_dev(&deploy).await;

    // No answer at all: asked again, as it was.
    let missing = deploy
        .delete(&Caller::new(), "dev", answering(&asked.state, json!({})))
        .await
        .asked();
    let params = missing.only(CONFIRM_DELETE_KEY);
    assert_eq!(
        params["message"],
        "Delete the branch 'dev'? Type its name to confirm."
    );
    assert_ne!(missing.state, asked.state, "a re-ask is sealed anew");

    // Content that does not match the form: asked again, the problem on the field and the
    // field named by its title in the message.
    let invalid = deploy
        .delete(
            &Caller::new(),
            "dev",
            answering(
                &missing.state,
                json!({ CONFIRM_DELETE_KEY: accept(json!({ "confirm": 5 })) }),
            ),
        )
        .await
        .asked();
    let params = invalid.only(CONFIRM_DELETE_KEY);
    let message = params["message"].as_str().expect("a message");
    assert!(
        message.starts_with("Delete the branch 'dev'? Type its name to confirm."),
        "{message:?}"
    );
    assert!(
        message.ends_with("\n\nPlease correct: Branch name."),
        "the message should name `confirm` by its title: {message:?}"
    );
    assert_eq!(
        params["requestedSchema"]["properties"]["confirm"]["description"],
        "Enter text. Type the name of the branch to delete, exactly as it is written."
    );
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);

    // The re-ask's state carries on: a right answer now deletes the branch.
    let reply = deploy
        .delete(
            &Caller::new(),
            "dev",
            answering(
                &invalid.state,
                json!({ CONFIRM_DELETE_KEY: accept(json!({ "confirm": "dev" })) }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Deleted branch dev");
    assert_eq!(deploy.listed_branches().await, ["main", "feature-x"]);
}

async fn answers_without_state_do_not_pass_a_gate(mode: Mode) {
    let deploy = Deploy::new(mode);
    let answer = json!({ CONFIRM_DELETE_KEY: accept(json!({ "confirm": "dev" })) });
    let asked = deploy
        .delete(&Caller::new(), "dev", json!({ "inputResponses": answer }))
        .await
        .asked();
    asked.only(CONFIRM_DELETE_KEY);
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);

    // A token for one branch does not delete another.
    let reply = deploy
        .delete(&Caller::new(), "main", answering(&asked.state, answer))
        .await;
    reply.assert_invalid_state();
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);
}

/// The first round of `connect_github`: the layer asks `github-authorization` with a URL;
/// returns the round and the flow's handle.
async fn ask_to_connect(deploy: &Deploy, caller: &Caller) -> (Asked, String) {
    let asked = deploy.connect(caller, json!({})).await.asked();
    let params = asked.only(GITHUB_KEY);
    assert_eq!(params["mode"], "url", "{params:#}");
    assert_eq!(params["message"], "Authorize GitHub access for 'octocat'.");
    let url = params["url"].as_str().expect("a URL");
    let handle = url
        .strip_prefix(&format!("{DEFAULT_BASE_URL}{FLOWS_PATH}/"))
        .unwrap_or_else(|| panic!("not a flow URL: {url}"))
        .to_owned();
    assert!(
        handle.len() >= 16 && !handle.contains('/'),
        "an unguessable handle: {url}"
    );
    (asked, handle)
}

fn url_of(asked: &Asked, key: &str) -> String {
    asked.only(key)["url"].as_str().expect("a URL").to_owned()
}

async fn connect_github_waits_for_the_flow(mode: Mode) {
    let deploy = Deploy::new(mode);
    let caller = Caller::new().bearer("alice");
    let (asked, handle) = ask_to_connect(&deploy, &caller).await;
    let url = url_of(&asked, GITHUB_KEY);

    // Accept means the user agreed to open the URL, not that the flow is done.
    let again = deploy
        .connect(
            &caller,
            answering(&asked.state, json!({ GITHUB_KEY: { "action": "accept" } })),
        )
        .await
        .asked();
    assert_eq!(
        url_of(&again, GITHUB_KEY),
        url,
        "asked again with the same URL"
    );
    assert_eq!(
        deploy.state.connections(),
        0,
        "the handler must not run yet"
    );

    // The user opens the URL and the OAuth callback completes the flow.
    let (status, _) = deploy.mcp.get(&format!("{FLOWS_PATH}/{handle}")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = deploy
        .mcp
        .get(&format!("{FLOWS_PATH}/{handle}/complete"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let reply = deploy
        .connect(
            &caller,
            answering(&again.state, json!({ GITHUB_KEY: { "action": "accept" } })),
        )
        .await;
    assert_eq!(reply.tool_text(), "Connected octocat");
    assert_eq!(deploy.state.connections(), 1);
}

async fn connect_github_decline_is_refused(mode: Mode) {
    let deploy = Deploy::new(mode);
    let caller = Caller::new();
    let (asked, handle) = ask_to_connect(&deploy, &caller).await;
    // Even a completed flow does not override the user's decline.
    assert!(deploy.state.flows().complete(&handle).await);
    let reply = deploy
        .connect(
            &caller,
            answering(&asked.state, json!({ GITHUB_KEY: decline() })),
        )
        .await;
    assert_eq!(reply.tool_error(), "The request was not approved.");
    assert_eq!(deploy.state.connections(), 0);
}

async fn connect_github_flows_are_per_caller(mode: Mode) {
    let deploy = Deploy::new(mode);
    let alice = Caller::new().bearer("alice");
    let bob = Caller::new().bearer("bob");
    let (_, alice_handle) = ask_to_connect(&deploy, &alice).await;
    let (bob_asked, bob_handle) = ask_to_connect(&deploy, &bob).await;
    assert_ne!(alice_handle, bob_handle);
    let (_, alice_again) = ask_to_connect(&deploy, &alice).await;
    assert_ne!(
        alice_handle, alice_again,
        "the same call asked afresh by the same caller is a flow of its own"
    );

    // Alice completing her flow lets nobody else through.
    let (status, _) = deploy
        .mcp
        .get(&format!("{FLOWS_PATH}/{alice_handle}/complete"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let reply = deploy
        .connect(
            &bob,
            answering(
                &bob_asked.state,
                json!({ GITHUB_KEY: { "action": "accept" } }),
            ),
        )
        .await
        .asked();
    assert!(url_of(&reply, GITHUB_KEY).ends_with(&bob_handle));
    assert_eq!(deploy.state.connections(), 0);

    let (status, _) = deploy
        .mcp
        .get(&format!("{FLOWS_PATH}/not-a-flow/complete"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn url_flow_survives_key_rotation(mode: Mode) {
    // Two replicas in the middle of a rotation: `[k1]` → `[k2, k1]` (k2 signs, k1 verifies).
    let state = DeployState::new();
    let old = keyring();
    let new = Keyring::new("k2", [9u8; 32])
        .and_then(|k| k.with_verify_key("test", [7u8; 32]))
        .expect("valid keys");
    let replica = |keys| {
        let router = server::router_with(
            ElicitationLayer::new(keys),
            state.clone(),
            mode.json_response(),
        )
        .expect("valid gates");
        Deploy {
            mcp: Mcp::new(router),
            state: state.clone(),
        }
    };
    let (before, after) = (replica(old), replica(new));
    let caller = Caller::new().bearer("alice");

    // Asked (and the flow completed) before the rotation ...
    let (asked, handle) = ask_to_connect(&before, &caller).await;
    assert!(state.flows().complete(&handle).await);
    // ... and the accept lands on a replica that signs with the new key. The token verifies,
    // but the completion check looks for a handle derived from the new key.
    let reply = after
        .connect(
            &caller,
            answering(&asked.state, json!({ GITHUB_KEY: { "action": "accept" } })),
        )
        .await;
    assert_eq!(reply.tool_text(), "Connected octocat");
}

#[tokio::test]
async fn url_flow_survives_key_rotation_json() {
    url_flow_survives_key_rotation(Mode::Json).await;
}

async fn gates_need_their_elicitation_capability(mode: Mode) {
    let deploy = Deploy::new(mode);
    for capabilities in [json!({}), json!({ "elicitation": { "url": {} } })] {
        let caller = Caller::new().capabilities(capabilities);
        deploy
            .delete(&caller, "dev", json!({}))
            .await
            .assert_missing_capability(json!({ "elicitation": { "form": {} } }));
    }
    for capabilities in [
        json!({}),
        json!({ "elicitation": {} }),
        json!({ "elicitation": { "form": {} } }),
    ] {
        let caller = Caller::new().capabilities(capabilities);
        deploy
            .connect(&caller, json!({}))
            .await
            .assert_missing_capability(json!({ "elicitation": { "url": {} } }));
    }
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);
    assert_eq!(deploy.state.connections(), 0);
}

async fn legacy_clients_are_refused(mode: Mode) {
    let deploy = Deploy::new(mode);
    let legacy = Caller::new().version(LEGACY_VERSION);
    // A legacy client cannot be asked, and cannot smuggle answers in either.
    let smuggled = json!({
        "inputResponses": { CONFIRM_DELETE_KEY: accept(json!({ "confirm": "dev" })) }
    });
    let reply = deploy.delete(&legacy, "dev", smuggled).await;
    let text = reply.tool_error();
    assert!(
        text.contains("delete_branch") && text.contains(PROTOCOL_VERSION),
        "{text:?}"
    );
    let reply = deploy.connect(&legacy, json!({})).await;
    assert!(reply.tool_error().contains("connect_github"));
    assert_eq!(deploy.listed_branches().await, ALL_BRANCHES);
    assert_eq!(deploy.state.connections(), 0);
}

// ---------------------------------------------------------------------------
// A small rmcp server of our own: typed answers, injection, a gate then the
// handler's own question, prompts and resources
// ---------------------------------------------------------------------------

mod studio {
    use std::sync::{Arc, Mutex, PoisonError};

    use rmcp::{
        ErrorData, RoleServer, ServerHandler,
        handler::server::{
            tool::{Extension, InputResponses, RequestState},
            wrapper::Parameters,
        },
        model::{
            BooleanSchema, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
            ElicitRequestParams, ElicitationSchema, GetPromptRequestParams, GetPromptResponse,
            GetPromptResult, Implementation, InputRequest, InputRequests, InputRequiredResult,
            ListPromptsResult, ListResourcesResult, PaginatedRequestParams,
            PrimitiveSchemaDefinition, Prompt, PromptMessage, ProtocolVersion,
            ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
            ResourceContents, Role, ServerCapabilities, ServerConfig,
        },
        service::RequestContext,
        tool, tool_handler, tool_router,
        transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
        },
    };
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::Value;
    use tower_elicitation::Answers;

    /// The form of the approval gates, derived with `schemars`.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct Approval {
        /// Approve
        pub approve: bool,
        /// Note for the record
        pub note: Option<String>,
    }

    /// Arguments of `release`: the approval arrives as an ordinary argument.
    #[derive(Clone, Debug, Deserialize, JsonSchema)]
    pub struct ReleaseArgs {
        /// The version to release.
        pub version: String,
        /// Filled in by the layer from the `release-approval` gate; kept out of the tool's
        /// `inputSchema`, so clients are not invited to supply it.
        #[schemars(skip)]
        pub approval: Approval,
    }

    /// Arguments of `migrate`: `db_login` is `true` once the URL gate let the call through.
    #[derive(Clone, Debug, Deserialize, JsonSchema)]
    pub struct MigrateArgs {
        /// The table to migrate.
        pub table: String,
        #[schemars(skip)]
        pub db_login: bool,
    }

    pub const PUBLISH_KEY: &str = "publish-approval";
    pub const MIGRATE_KEY: &str = "migrate-approval";
    pub const DB_LOGIN_KEY: &str = "db-login";
    pub const RELEASE_KEY: &str = "release-approval";
    pub const SHIP_KEY: &str = "ship-approval";
    pub const CHECKLIST_KEY: &str = "checklist";
    pub const SHIP_STATE: &str = "checklist-asked";
    pub const PROMPT: &str = "incident-summary";
    pub const PROMPT_KEY: &str = "share-logs";
    pub const VAULT: &str = "vault://";
    pub const VAULT_KEY: &str = "vault-access";

    /// What a handler saw on one call.
    #[derive(Clone, Debug, Default)]
    pub struct Seen {
        pub handler: &'static str,
        /// `params.inputResponses` as rmcp handed them over.
        pub responses: Option<Value>,
        /// The `Answers` request extension.
        pub answers: Option<Answers>,
        /// The inner's own `requestState`, given back.
        pub state: Option<String>,
        /// Typed values the handler extracted.
        pub approval: Option<Approval>,
    }

    /// Every call a handler saw, shared by every clone.
    #[derive(Clone, Debug, Default)]
    pub struct Journal(Arc<Mutex<Vec<Seen>>>);

    impl Journal {
        pub fn of(&self, handler: &str) -> Vec<Seen> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|seen| seen.handler == handler)
                .cloned()
                .collect()
        }

        fn push(&self, seen: Seen) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(seen);
        }
    }

    #[derive(Clone, Debug)]
    pub struct Studio {
        journal: Journal,
    }

    fn answers_of(parts: &http::request::Parts) -> Option<Answers> {
        parts.extensions.get::<Answers>().cloned()
    }

    fn answers_in(context: &RequestContext<RoleServer>) -> Option<Answers> {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(answers_of)
    }

    fn responses_value(responses: Option<rmcp::model::InputResponses>) -> Option<Value> {
        responses.map(|r| serde_json::to_value(r).expect("JSON"))
    }

    #[tool_router]
    impl Studio {
        /// Reads the gate answer as a typed request extension.
        #[tool(description = "Publish the article.")]
        async fn publish(
            &self,
            Extension(parts): Extension<http::request::Parts>,
            InputResponses(responses): InputResponses,
        ) -> CallToolResult {
            let answers = answers_of(&parts);
            let approval = answers
                .as_ref()
                .and_then(|answers| answers.get::<Approval>(PUBLISH_KEY));
            self.journal.push(Seen {
                handler: "publish",
                responses: responses_value(responses),
                answers,
                approval: approval.clone(),
                ..Seen::default()
            });
            match approval {
                Some(approval) => CallToolResult::success(vec![ContentBlock::text(format!(
                    "Published ({})",
                    approval.note.unwrap_or_default()
                ))]),
                None => CallToolResult::error(vec![ContentBlock::text("no approval")]),
            }
        }

        /// Takes the gate answer as an ordinary argument (`inject_as("approval")`).
        #[tool(description = "Release a version.")]
        async fn release(
            &self,
            Parameters(ReleaseArgs { version, approval }): Parameters<ReleaseArgs>,
        ) -> CallToolResult {
            self.journal.push(Seen {
                handler: "release",
                approval: Some(approval.clone()),
                ..Seen::default()
            });
            CallToolResult::success(vec![ContentBlock::text(format!(
                "Released {version} ({})",
                approval.note.unwrap_or_default()
            ))])
        }

        /// Behind two gates: a form and a URL flow.
        #[tool(description = "Migrate a table.")]
        async fn migrate(
            &self,
            Extension(parts): Extension<http::request::Parts>,
            Parameters(MigrateArgs { table, db_login }): Parameters<MigrateArgs>,
        ) -> CallToolResult {
            self.journal.push(Seen {
                handler: "migrate",
                answers: answers_of(&parts),
                ..Seen::default()
            });
            CallToolResult::success(vec![ContentBlock::text(format!(
                "Migrated {table} (db_login: {db_login})"
            ))])
        }

        /// Behind a gate, and asks a question of its own.
        #[tool(description = "Ship the build.")]
        async fn ship(
            &self,
            Extension(parts): Extension<http::request::Parts>,
            InputResponses(responses): InputResponses,
            RequestState(state): RequestState,
        ) -> CallToolResponse {
            let answered = responses
                .as_ref()
                .and_then(|r| r.get(CHECKLIST_KEY))
                .and_then(|answer| answer["content"]["testsPassed"].as_bool());
            self.journal.push(Seen {
                handler: "ship",
                responses: responses_value(responses),
                answers: answers_of(&parts),
                state,
                ..Seen::default()
            });
            match answered {
                None => ask_checklist().into(),
                Some(passed) => CallToolResult::success(vec![ContentBlock::text(format!(
                    "Shipped (tests passed: {passed})"
                ))])
                .into(),
            }
        }
    }

    fn ask_checklist() -> InputRequiredResult {
        let properties = [(
            "testsPassed".to_owned(),
            PrimitiveSchemaDefinition::Boolean(BooleanSchema::new().title("Tests passed")),
        )]
        .into();
        let form = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "Did the tests pass?".to_owned(),
            requested_schema: ElicitationSchema::new(properties)
                .with_required(vec!["testsPassed".into()]),
        };
        let requests = InputRequests::from([(
            CHECKLIST_KEY.to_owned(),
            InputRequest::Elicitation(ElicitRequest::new(form)),
        )]);
        InputRequiredResult::new(Some(requests), Some(SHIP_STATE.to_owned()))
    }

    #[tool_handler]
    impl ServerHandler for Studio {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(
                ServerCapabilities::builder()
                    .enable_tools()
                    .enable_prompts()
                    .enable_resources()
                    .build(),
            )
            .with_server_info(Implementation::new("studio", "0.0.0"))
        }

        fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
            std::borrow::Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
        }

        async fn list_prompts(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListPromptsResult, ErrorData> {
            Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
                PROMPT,
                Some("Summarize an incident from its logs"),
                None,
            )]))
        }

        async fn get_prompt(
            &self,
            request: GetPromptRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<GetPromptResponse, ErrorData> {
            if request.name != PROMPT {
                return Err(ErrorData::invalid_params("no such prompt", None));
            }
            let answers = answers_in(&context);
            let reviewer = answers
                .as_ref()
                .and_then(|answers| answers.raw(PROMPT_KEY))
                .and_then(|answer| answer["content"]["reviewer"].as_str())
                .unwrap_or("nobody")
                .to_owned();
            self.journal.push(Seen {
                handler: "get_prompt",
                answers,
                ..Seen::default()
            });
            Ok(GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                format!("Summarize the incident; logs shared by {reviewer}."),
            )])
            .into())
        }

        async fn list_resources(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListResourcesResult, ErrorData> {
            Ok(ListResourcesResult::with_all_items(vec![
                Resource::new("vault://db-password", "db-password"),
                Resource::new("public://readme", "readme"),
            ]))
        }

        async fn read_resource(
            &self,
            request: ReadResourceRequestParams,
            context: RequestContext<RoleServer>,
        ) -> Result<ReadResourceResponse, ErrorData> {
            let text = match request.uri.as_str() {
                "vault://db-password" => "hunter2",
                "public://readme" => "Hello",
                _ => return Err(ErrorData::resource_not_found("no such resource", None)),
            };
            self.journal.push(Seen {
                handler: "read_resource",
                answers: answers_in(&context),
                ..Seen::default()
            });
            Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
        }
    }

    pub fn service(
        journal: Journal,
        json_response: bool,
    ) -> StreamableHttpService<Studio, LocalSessionManager> {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_stateless_protocol_metadata_required(true)
            .with_json_response(json_response)
            .with_allowed_hosts(["localhost"]);
        StreamableHttpService::new(
            move || {
                Ok(Studio {
                    journal: journal.clone(),
                })
            },
            LocalSessionManager::default().into(),
            config,
        )
    }
}

use studio::{
    Approval, CHECKLIST_KEY, DB_LOGIN_KEY, Journal, MIGRATE_KEY, PROMPT, PROMPT_KEY, PUBLISH_KEY,
    RELEASE_KEY, SHIP_KEY, SHIP_STATE, VAULT, VAULT_KEY,
};

/// URL flows kept in memory: every flow `url` created, and the completed ones.
#[derive(Clone, Debug, Default)]
struct TestFlows {
    created: Arc<Mutex<Vec<String>>>,
    completed: Arc<Mutex<HashSet<String>>>,
}

impl TestFlows {
    fn created(&self) -> Vec<String> {
        self.created.lock().expect("lock").clone()
    }

    fn complete(&self, handle: &str) {
        self.completed
            .lock()
            .expect("lock")
            .insert(handle.to_owned());
    }
}

impl UrlFlow for TestFlows {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, BoxError> {
        if call.argument_str("table") == Some("unreachable") {
            return Err("the login service is down".into());
        }
        self.created
            .lock()
            .expect("lock")
            .push(call.handle().to_owned());
        Ok(format!("https://login.example.com/flows/{}", call.handle()))
    }

    async fn is_complete(&self, call: &GateCall<'_>) -> bool {
        self.completed.lock().expect("lock").contains(call.handle())
    }
}

/// The studio server behind a layer with its gates.
struct StudioHarness {
    mcp: Mcp,
    journal: Journal,
    flows: TestFlows,
}

fn approval_gate(key: &str) -> Gate {
    Gate::form_for::<Approval>(key)
        .expect("Approval is a flat form")
        .message(|call| format!("Approve {}?", call.target()))
        .require_as(|approval: &Approval, _| approval.approve)
        .refusal("Not approved.")
}

fn studio_layer(flows: &TestFlows) -> Result<ElicitationLayer, GateError> {
    let reviewer = json!({
        "type": "object",
        "properties": { "reviewer": { "type": "string", "minLength": 1 } },
        "required": ["reviewer"]
    });
    ElicitationLayer::new(keyring())
        .gate(GateTarget::tool("publish"), approval_gate(PUBLISH_KEY))?
        .gate(
            GateTarget::tool("release"),
            approval_gate(RELEASE_KEY).inject_as("approval"),
        )?
        .gate(
            GateTarget::tool("ship"),
            Gate::form(
                SHIP_KEY,
                json!({
                    "type": "object",
                    "properties": { "approve": { "type": "boolean" } },
                    "required": ["approve"]
                }),
            )?
            .require(|content, _| content.get("approve") == Some(&Value::Bool(true))),
        )?
        .gate(
            GateTarget::tool("migrate"),
            Gate::form(
                MIGRATE_KEY,
                json!({
                    "type": "object",
                    "properties": { "approve": { "type": "boolean" } },
                    "required": ["approve"]
                }),
            )?
            .require(|content, _| content.get("approve") == Some(&Value::Bool(true)))
            .refusal("Migration not approved."),
        )?
        .gate(
            GateTarget::tool("migrate"),
            Gate::url(DB_LOGIN_KEY, flows.clone())?
                .message(|_| "Log in to the database".to_owned())
                .inject_as("db_login"),
        )?
        .gate(
            GateTarget::prompt(PROMPT),
            Gate::form(PROMPT_KEY, reviewer.clone())?.refusal("The logs stay private."),
        )?
        .gate(
            GateTarget::resource_prefix(VAULT),
            Gate::form(VAULT_KEY, reviewer)?.refusal("The vault stays closed."),
        )
}

impl StudioHarness {
    fn new(mode: Mode) -> Self {
        let journal = Journal::default();
        let flows = TestFlows::default();
        let mcp = ServiceBuilder::new()
            .layer(studio_layer(&flows).expect("valid gates"))
            .service(studio::service(journal.clone(), mode.json_response()));
        Self {
            mcp: Mcp::new(Router::new().nest_service(MCP_PATH, mcp)),
            journal,
            flows,
        }
    }

    async fn migrate(&self, caller: &Caller, table: &str, extra: Value) -> Reply {
        let params = tool_params("migrate", json!({ "table": table }), extra);
        self.mcp.send(caller, "tools/call", params).await
    }

    async fn prompt(&self, extra: Value) -> Reply {
        let mut params = json!({ "name": PROMPT, "arguments": { "incident": "42" } });
        merge(&mut params, extra);
        self.mcp.send(&Caller::new(), "prompts/get", params).await
    }

    async fn read(&self, uri: &str, extra: Value) -> Reply {
        let mut params = json!({ "uri": uri });
        merge(&mut params, extra);
        self.mcp
            .send(&Caller::new(), "resources/read", params)
            .await
    }
}

async fn typed_answers_reach_the_handler(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let asked = studio
        .mcp
        .call_tool("publish", json!({}), json!({}))
        .await
        .asked();
    let params = asked.only(PUBLISH_KEY);
    assert_eq!(params["message"], "Approve publish?");
    // The form derived from `Approval` with schemars: `Option` → optional, docs → descriptions.
    let schema = &params["requestedSchema"];
    assert_eq!(schema["required"], json!(["approve"]), "{schema:#}");
    assert_eq!(schema["properties"]["approve"]["type"], "boolean");
    assert_eq!(schema["properties"]["approve"]["description"], "Approve");
    assert_eq!(schema["properties"]["note"]["type"], "string", "{schema:#}");
    assert!(studio.journal.of("publish").is_empty());

    // `require_as` refuses `approve: false`, without calling the handler.
    let reply = studio
        .mcp
        .call_tool(
            "publish",
            json!({}),
            answering(
                &asked.state,
                json!({ PUBLISH_KEY: accept(json!({ "approve": false })) }),
            ),
        )
        .await;
    assert_eq!(reply.tool_error(), "Not approved.");
    assert!(studio.journal.of("publish").is_empty());

    let answer = accept(json!({ "approve": true, "note": "looks good", "extra": 1 }));
    let reply = studio
        .mcp
        .call_tool(
            "publish",
            json!({}),
            answering(
                &asked.state,
                json!({ PUBLISH_KEY: answer, "unasked": accept(json!({})) }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Published (looks good)");
    let seen = studio.journal.of("publish");
    assert_eq!(seen.len(), 1);
    let expected = Approval {
        approve: true,
        note: Some("looks good".into()),
    };
    assert_eq!(seen[0].approval, Some(expected));
    let answers = seen[0].answers.as_ref().expect("the Answers extension");
    let cleaned = accept(json!({ "approve": true, "note": "looks good" }));
    assert_eq!(answers.raw(PUBLISH_KEY), Some(&cleaned));
    assert_eq!(seen[0].responses, Some(json!({ PUBLISH_KEY: cleaned })));
}

async fn injected_argument_replaces_the_clients(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let tools = studio
        .mcp
        .send(&Caller::new(), "tools/list", json!({}))
        .await;
    let release = tools.result()["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == "release"))
        .expect("the release tool")
        .clone();
    assert!(
        release["inputSchema"]["properties"]
            .get("approval")
            .is_none(),
        "{release:#}"
    );

    // The client tries to pre-approve through the argument the gate fills in.
    let forged = json!({ "version": "1.2.0", "approval": { "approve": true, "note": "forged" } });
    let asked = studio
        .mcp
        .call_tool("release", forged.clone(), json!({}))
        .await
        .asked();
    asked.only(RELEASE_KEY);
    assert!(
        studio.journal.of("release").is_empty(),
        "the gate asks first"
    );

    let reply = studio
        .mcp
        .call_tool(
            "release",
            forged,
            answering(
                &asked.state,
                json!({ RELEASE_KEY: accept(json!({ "approve": true })) }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Released 1.2.0 ()");
    let seen = studio.journal.of("release");
    let expected = Approval {
        approve: true,
        note: None,
    };
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].approval, Some(expected), "replaced, not merged");

    // Without any client value, the argument is filled in all the same.
    let args = json!({ "version": "1.3.0" });
    let asked = studio
        .mcp
        .call_tool("release", args.clone(), json!({}))
        .await
        .asked();
    let answer = accept(json!({ "approve": true, "note": "ok" }));
    let reply = studio
        .mcp
        .call_tool(
            "release",
            args,
            answering(&asked.state, json!({ RELEASE_KEY: answer })),
        )
        .await;
    assert_eq!(reply.tool_text(), "Released 1.3.0 (ok)");
}

async fn gate_then_handler_question_takes_three_rounds(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let args = json!({});

    // Round 1: the layer asks its gate; the handler is not called.
    let round1 = studio
        .mcp
        .call_tool("ship", args.clone(), json!({}))
        .await
        .asked();
    round1.only(SHIP_KEY);
    assert!(studio.journal.of("ship").is_empty());

    // Round 2: the gate is accepted; the handler runs and asks its own question.
    let gate_answer = accept(json!({ "approve": true }));
    let round2 = studio
        .mcp
        .call_tool(
            "ship",
            args.clone(),
            answering(&round1.state, json!({ SHIP_KEY: gate_answer })),
        )
        .await
        .asked();
    let params = round2.only(CHECKLIST_KEY);
    assert_eq!(params["message"], "Did the tests pass?");
    let seen = studio.journal.of("ship");
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].responses, Some(json!({ SHIP_KEY: gate_answer })));
    assert!(
        seen[0]
            .answers
            .as_ref()
            .is_some_and(|a| a.contains(SHIP_KEY))
    );
    assert_eq!(seen[0].state, None);

    // Round 3: the client answers only the handler's question (and tries to swap the gate's
    // answer); the gate is not asked again and its sealed answer is delivered again.
    let forged_gate = accept(json!({ "approve": false }));
    let checklist = accept(json!({ "testsPassed": true }));
    let reply = studio
        .mcp
        .call_tool(
            "ship",
            args,
            answering(
                &round2.state,
                json!({ CHECKLIST_KEY: checklist, SHIP_KEY: forged_gate }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Shipped (tests passed: true)");
    let seen = studio.journal.of("ship");
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].responses,
        Some(json!({ SHIP_KEY: gate_answer, CHECKLIST_KEY: checklist })),
        "both the gate's and the handler's own answer"
    );
    let answers = seen[1].answers.as_ref().expect("the Answers extension");
    assert_eq!(answers.raw(SHIP_KEY), Some(&gate_answer));
    assert_eq!(
        seen[1].state.as_deref(),
        Some(SHIP_STATE),
        "its own state back"
    );
}

async fn gates_on_one_call_are_asked_together(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let caller = Caller::new();
    let round1 = studio.migrate(&caller, "users", json!({})).await.asked();
    let keys: Vec<&String> = round1.requests.keys().collect();
    assert_eq!(
        keys.len(),
        2,
        "{:#}",
        Value::Object(round1.requests.clone())
    );
    let form = &round1.requests[MIGRATE_KEY]["params"];
    assert_eq!(form["mode"], "form");
    let url = round1.requests[DB_LOGIN_KEY]["params"]["url"]
        .as_str()
        .expect("a URL")
        .to_owned();
    let handle = url.rsplit('/').next().expect("a handle").to_owned();
    assert_eq!(studio.flows.created(), std::slice::from_ref(&handle));

    // A decline of either gate refuses the call, whatever the other answered.
    let refused = studio
        .migrate(
            &caller,
            "users",
            answering(
                &round1.state,
                json!({ MIGRATE_KEY: decline(), DB_LOGIN_KEY: { "action": "accept" } }),
            ),
        )
        .await;
    assert_eq!(refused.tool_error(), "Migration not approved.");

    // Form accepted, flow not complete: only the URL is asked again; the form answer is kept.
    let round2 = studio
        .migrate(
            &caller,
            "users",
            answering(
                &round1.state,
                json!({
                    MIGRATE_KEY: accept(json!({ "approve": true })),
                    DB_LOGIN_KEY: { "action": "accept" },
                }),
            ),
        )
        .await
        .asked();
    assert_eq!(url_of(&round2, DB_LOGIN_KEY), url);
    assert!(studio.journal.of("migrate").is_empty());

    studio.flows.complete(&handle);
    let reply = studio
        .migrate(
            &caller,
            "users",
            answering(
                &round2.state,
                json!({ DB_LOGIN_KEY: { "action": "accept" } }),
            ),
        )
        .await;
    assert_eq!(reply.tool_text(), "Migrated users (db_login: true)");
    let seen = studio.journal.of("migrate");
    let answers = seen[0].answers.as_ref().expect("the Answers extension");
    assert_eq!(
        answers.raw(MIGRATE_KEY),
        Some(&accept(json!({ "approve": true })))
    );
    assert_eq!(
        answers.raw(DB_LOGIN_KEY),
        Some(&json!({ "action": "accept" }))
    );
    assert_eq!(
        studio.flows.created().len(),
        1,
        "one flow for the whole call"
    );
}

/// Two gates of one key on `migrate`, each with a condition: one asks for `users`, the other
/// refuses `prod_*` tables; any other table runs unasked, and a table that is no string makes the
/// condition fail, closed.
async fn gate_conditions_ask_skip_or_refuse(mode: Mode) {
    let table = |call: &GateCall<'_>| {
        call.argument_str("table")
            .map(str::to_owned)
            .ok_or_else(|| "Not run: `table` must be a string.".to_owned())
    };
    let layer = ElicitationLayer::new(keyring())
        .gate(
            GateTarget::tool("migrate"),
            approval_gate(MIGRATE_KEY).when(move |call| Ok(table(call)? == "users")),
        )
        .expect("a conditional gate")
        .gate(
            GateTarget::tool("migrate"),
            approval_gate(MIGRATE_KEY).when(move |call| match table(call)? {
                name if name.starts_with("prod_") => Err(format!("Not run: {name} is production.")),
                _ => Ok(false),
            }),
        )
        .expect("two gates of one key, both conditional");
    let journal = Journal::default();
    let mcp = ServiceBuilder::new()
        .layer(layer)
        .service(studio::service(journal.clone(), mode.json_response()));
    let mcp = Mcp::new(Router::new().nest_service(MCP_PATH, mcp));
    let migrate = |table: Value, extra: Value| {
        let arguments = json!({ "table": table, "db_login": true });
        let params = tool_params("migrate", arguments, extra);
        let mcp = &mcp;
        async move { mcp.send(&Caller::new(), "tools/call", params).await }
    };

    let asked = migrate(json!("users"), json!({})).await.asked();
    assert_eq!(asked.requests.keys().collect::<Vec<_>>(), [MIGRATE_KEY]);
    assert!(journal.of("migrate").is_empty());
    let done = migrate(
        json!("users"),
        answering(
            &asked.state,
            json!({ MIGRATE_KEY: accept(json!({ "approve": true })) }),
        ),
    )
    .await;
    assert!(
        done.tool_text().starts_with("Migrated users"),
        "{}",
        done.tool_text()
    );

    let skipped = migrate(json!("logs"), json!({})).await;
    assert!(
        skipped.tool_text().starts_with("Migrated logs"),
        "{}",
        skipped.tool_text()
    );

    let denied = migrate(json!("prod_users"), json!({})).await;
    assert_eq!(denied.tool_error(), "Not run: prod_users is production.");
    let undecided = migrate(json!(7), json!({})).await;
    assert_eq!(undecided.tool_error(), "Not run: `table` must be a string.");
    assert_eq!(journal.of("migrate").len(), 2, "only users and logs ran");
}

/// A gate's question carries the `_meta` its closure builds, the same on every round, and its
/// refusal the text built from the call.
async fn gate_meta_and_refusal_are_built_from_the_call(mode: Mode) {
    let layer = ElicitationLayer::new(keyring())
        .gate(
            GateTarget::tool("publish"),
            approval_gate(PUBLISH_KEY)
                .meta(|call| {
                    let mut meta = Map::new();
                    meta.insert("example.com/call".into(), Value::from(call.handle().len()));
                    meta.insert("example.com/tool".into(), Value::from(call.target()));
                    meta
                })
                .refusal_for(|call| format!("{} was not approved.", call.target())),
        )
        .expect("a gate");
    let mcp = ServiceBuilder::new()
        .layer(layer)
        .service(studio::service(Journal::default(), mode.json_response()));
    let mcp = Mcp::new(Router::new().nest_service(MCP_PATH, mcp));
    let publish = |extra: Value| {
        let params = tool_params("publish", json!({}), extra);
        let mcp = &mcp;
        async move { mcp.send(&Caller::new(), "tools/call", params).await }
    };
    let asked = publish(json!({})).await.asked();
    let meta = &asked.requests[PUBLISH_KEY]["params"]["_meta"];
    assert_eq!(meta["example.com/tool"], "publish", "{meta:#}");
    assert!(
        meta["example.com/call"].as_u64().is_some_and(|n| n > 0),
        "{meta:#}"
    );
    let refused = publish(answering(&asked.state, json!({ PUBLISH_KEY: decline() }))).await;
    assert_eq!(refused.tool_error(), "publish was not approved.");
}

async fn url_flow_errors_are_internal_errors(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let reply = studio
        .migrate(&Caller::new(), "unreachable", json!({}))
        .await;
    let error = reply.error();
    assert_eq!(error["code"], -32603, "{error:#}");
    assert!(studio.journal.of("migrate").is_empty());
}

async fn url_capability_is_checked_before_a_flow_is_created(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let form_only = Caller::new().capabilities(json!({ "elicitation": { "form": {} } }));
    studio
        .migrate(&form_only, "users", json!({}))
        .await
        .assert_missing_capability(json!({ "elicitation": { "url": {} } }));
    assert_eq!(
        studio.flows.created(),
        Vec::<String>::new(),
        "no flow for a client that cannot be sent its URL"
    );
}

#[tokio::test]
async fn url_capability_is_checked_before_a_flow_is_created_json() {
    url_capability_is_checked_before_a_flow_is_created(Mode::Json).await;
}

async fn prompt_gate(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let asked = studio.prompt(json!({})).await.asked();
    assert_eq!(asked.only(PROMPT_KEY)["mode"], "form");

    studio
        .prompt(answering(&asked.state, json!({ PROMPT_KEY: decline() })))
        .await
        .assert_refused(PROMPT_KEY, "The logs stay private.");
    assert!(studio.journal.of("get_prompt").is_empty());

    let reply = studio
        .prompt(answering(
            &asked.state,
            json!({ PROMPT_KEY: accept(json!({ "reviewer": "ana" })) }),
        ))
        .await;
    let result = reply.result();
    assert_eq!(
        result["messages"][0]["content"]["text"], "Summarize the incident; logs shared by ana.",
        "{result:#}"
    );
    assert_eq!(studio.journal.of("get_prompt").len(), 1);

    // A client that cannot be asked is refused with a JSON-RPC error too.
    let legacy = Caller::new().version(LEGACY_VERSION);
    let params = json!({ "name": PROMPT, "arguments": { "incident": "42" } });
    let reply = studio.mcp.send(&legacy, "prompts/get", params).await;
    let error = reply.error();
    assert_eq!(error["code"], -32600, "{error:#}");
    assert_eq!(error["data"]["reason"], "requires_2026_07_28", "{error:#}");
    assert_eq!(studio.journal.of("get_prompt").len(), 1);
}

async fn resource_prefix_gate(mode: Mode) {
    let studio = StudioHarness::new(mode);
    let uri = "vault://db-password";
    let asked = studio.read(uri, json!({})).await.asked();
    asked.only(VAULT_KEY);

    for answer in [decline(), cancel()] {
        studio
            .read(uri, answering(&asked.state, json!({ VAULT_KEY: answer })))
            .await
            .assert_refused(VAULT_KEY, "The vault stays closed.");
    }
    assert!(studio.journal.of("read_resource").is_empty());

    // The token is bound to the URI it was minted for.
    studio
        .read(
            "vault://other",
            answering(
                &asked.state,
                json!({ VAULT_KEY: accept(json!({ "reviewer": "ana" })) }),
            ),
        )
        .await
        .assert_invalid_state();

    let reply = studio
        .read(
            uri,
            answering(
                &asked.state,
                json!({ VAULT_KEY: accept(json!({ "reviewer": "ana" })) }),
            ),
        )
        .await;
    let result = reply.result();
    assert_eq!(result["contents"][0]["text"], "hunter2", "{result:#}");
    let seen = studio.journal.of("read_resource");
    assert!(
        seen[0]
            .answers
            .as_ref()
            .is_some_and(|a| a.contains(VAULT_KEY))
    );

    // Outside the prefix: no gate.
    let reply = studio.read("public://readme", json!({})).await;
    assert_eq!(reply.result()["contents"][0]["text"], "Hello");
}

#[test]
fn form_for_rejects_a_nested_type_naming_the_field() {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Ticket {
        id: u32,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Change {
        approve: bool,
        ticket: Ticket,
    }
    let error = Gate::form_for::<Change>("change").expect_err("a nested struct is not a form");
    let GateError::Schema { key, error: why } = &error else {
        panic!("expected a schema error, got {error:?}");
    };
    assert_eq!(key, "change");
    assert!(why.path.contains("ticket"), "{error}");
    assert!(error.to_string().contains("ticket"), "{error}");

    assert!(Gate::form_for::<Approval>("approval").is_ok());
}

// ---------------------------------------------------------------------------
// The stack example: tracing + bearer auth + the layer
// ---------------------------------------------------------------------------

fn stack_app(mode: Mode) -> (Mcp, DeployState) {
    let state = DeployState::new();
    let auth = stack::BearerAuth::new([("alice-token", "alice"), ("bob-token", "bob")]);
    let app = stack::app(
        ElicitationLayer::new(keyring()),
        auth,
        state.clone(),
        mode.json_response(),
    )
    .expect("valid gates");
    (Mcp::new(app), state)
}

async fn stack_binds_tokens_to_the_user(mode: Mode) {
    let (mcp, state) = stack_app(mode);
    let params = |extra| tool_params("deploy", json!({ "environment": "staging" }), extra);
    let bob = Caller::new().bearer("bob-token");
    let alice = Caller::new().bearer("alice-token");
    let approve = json!({ server::APPROVAL_KEY: accept(json!({ "approve": true })) });

    // No bearer, or one not in the table: 401 before anything else.
    for caller in [Caller::new(), Caller::new().bearer("mallory-token")] {
        let reply = mcp.send(&caller, "tools/call", params(json!({}))).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{caller:?}");
        assert_eq!(reply.message, "a valid bearer token is required");
    }

    let asked = mcp
        .send(&bob, "tools/call", params(json!({})))
        .await
        .asked();
    asked.only(server::APPROVAL_KEY);

    // Bob's token, replayed by alice.
    mcp.send(
        &alice,
        "tools/call",
        params(answering(&asked.state, approve.clone())),
    )
    .await
    .assert_invalid_state();
    // Bob's token, replayed without a bearer.
    let reply = mcp
        .send(
            &Caller::new(),
            "tools/call",
            params(answering(&asked.state, approve.clone())),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(state.deploys(), 0);

    let reply = mcp
        .send(&bob, "tools/call", params(answering(&asked.state, approve)))
        .await;
    let result = reply.result();
    assert_eq!(
        result["structuredContent"],
        json!({ "environment": "staging", "deployed": true }),
        "{result:#}"
    );
    assert_eq!(state.deploys(), 1);
}

/// Compression outside the layer: a client that accepts gzip gets its `input_required`
/// compressed, and sealed.
#[tokio::test]
async fn stack_compresses_outside_the_layer() {
    let (mcp, _) = stack_app(Mode::Json);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "deploy", "arguments": {"environment": "staging"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}}});
    let request = || {
        http::Request::post(server::MCP_PATH)
            .header(http::header::HOST, "localhost")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header(http::header::ACCEPT_ENCODING, "gzip")
            .header(http::header::AUTHORIZATION, "Bearer alice-token")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", "deploy")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap()
    };
    let response = mcp.serve(request()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[http::header::CONTENT_ENCODING], "gzip");

    let decompressing = ServiceBuilder::new()
        .layer(tower_http::decompression::DecompressionLayer::new())
        .service(tower::service_fn(|request| {
            let mcp = &mcp;
            async move { Ok::<_, std::convert::Infallible>(mcp.serve(request).await) }
        }));
    let response = tower::ServiceExt::oneshot(decompressing, request())
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let message: Value = serde_json::from_slice(&bytes).unwrap();
    let state = message["result"]["requestState"]
        .as_str()
        .unwrap_or_default();
    assert!(state.starts_with("v1."), "{message:#}");
}

async fn stack_completes_url_flows_without_a_bearer(mode: Mode) {
    let (mcp, state) = stack_app(mode);
    let alice = Caller::new().bearer("alice-token");
    let params = |extra| tool_params("connect_github", json!({ "account": "octocat" }), extra);
    let asked = mcp
        .send(&alice, "tools/call", params(json!({})))
        .await
        .asked();
    let url = url_of(&asked, GITHUB_KEY);
    let handle = url.rsplit('/').next().expect("a handle");

    // The browser opens the callback: no bearer, and none needed.
    let (status, body) = mcp.get(&format!("{FLOWS_PATH}/{handle}/complete")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reply = mcp
        .send(
            &alice,
            "tools/call",
            params(answering(
                &asked.state,
                json!({ GITHUB_KEY: { "action": "accept" } }),
            )),
        )
        .await;
    assert_eq!(reply.tool_text(), "Connected octocat");
    assert_eq!(state.connections(), 1);
}

in_both_modes!(
    delete_branch_refusals_keep_the_branch,
    delete_branch_confirmed_deletes_it,
    delete_branch_missing_or_invalid_answer_is_reasked,
    answers_without_state_do_not_pass_a_gate,
    connect_github_waits_for_the_flow,
    connect_github_decline_is_refused,
    connect_github_flows_are_per_caller,
    gates_need_their_elicitation_capability,
    legacy_clients_are_refused,
    typed_answers_reach_the_handler,
    injected_argument_replaces_the_clients,
    gate_then_handler_question_takes_three_rounds,
    gates_on_one_call_are_asked_together,
    gate_conditions_ask_skip_or_refuse,
    gate_meta_and_refusal_are_built_from_the_call,
    url_flow_errors_are_internal_errors,
    prompt_gate,
    resource_prefix_gate,
    stack_binds_tokens_to_the_user,
    stack_completes_url_flows_without_a_bearer,
);
