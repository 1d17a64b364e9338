//! `conformance`: the fixture server of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`), an "everything" rmcp server: every tool, prompt,
//! resource, resource template, completion, Tasks extension fixture (SEP-2663) and
//! `x-mcp-header` tool (SEP-2243) that the suite's 2026-07-28 and 2025-11-25 requirement sets
//! drive.
//!
//! ```text
//! cargo run -p tower-elicitation-tools --bin conformance
//! scripts/conformance.sh            # builds this, runs both requirement sets against it
//! ```
//!
//! It serves statelessly (MCP 2026-07-28) at `/mcp`: the multi round-trip fixtures
//! (`test_input_required_result_*`, the prompt `test_input_required_result_prompt`,
//! `test_missing_capability`, `test_streaming_elicitation`, `test_logging_tool`); the content,
//! error and schema tools (`test_simple_text`, `test_image_content`, `test_audio_content`,
//! `test_embedded_resource`, `test_multiple_content_types`, `test_error_handling`,
//! `test_tool_with_progress`, `json_schema_2020_12_tool`, `test_header_param`); the prompts
//! (`test_simple_prompt`, `test_prompt_with_arguments`, `test_prompt_with_embedded_resource`,
//! `test_prompt_with_image`) and their completion; the resources (`test://static-text`,
//! `test://static-binary`, `test://watched-resource`, the template `test://template/{id}/data`);
//! `subscriptions/listen` (SEP-2575) with `test_trigger_tool_change` and
//! `test_trigger_prompt_change` to announce list changes on it; `test_reconnection` for the
//! 2025-era SSE polling scenario; and the Tasks fixtures (`greet`, `slow_compute`,
//! `failing_job`, `protocol_error_job`, `confirm_delete`, `multi_input`, `test_tool_with_task`)
//! on rmcp's [`TaskManager`].
//!
//! The handlers are written the way any rmcp handler would be: they ask with an
//! `InputRequiredResult` (or, in a task, [`TaskContext::request_input`]), read `InputResponses`,
//! and keep their own state as plain text in `requestState`. None of them signs, verifies or
//! validates anything; [`ElicitationLayer`] does, which is what the suite checks (run bare, rmcp
//! fails `input-required-result-tampered-state` and warns on `-validate-input`):
//!
//! - every `input_required` gets a sealed `requestState`, so a fixture with no
//!   state of its own still gets one, and a tampered one is answered `-32602` before any
//!   handler runs;
//! - a handler only ever gets back its own state (never a forged one) and
//!   answers that match the form it asked, so "state present" means "state
//!   valid";
//! - answers sent without any `requestState` are checked against what the
//!   handler asks for, missing ones are asked again, unknown keys dropped;
//! - a task's `tasks/update` answers are checked against the questions its `tasks/get` showed.
//!
//! In front of it all, [`LegacyBridgeLayer`] serves the suite's 2025-era
//! scenarios (`server-initialize`, `ping`, `tools-call-elicitation`, …): it
//! answers the handshake, keeps the sessions, and asks each fixture's
//! questions as server-to-client requests on the call's stream. Not one
//! fixture sends such a request itself (`test_simple_text`,
//! `test_tool_with_progress`, `test_tool_with_logging`, `test_elicitation`,
//! `test_sampling`, `test_elicitation_sep1034_defaults`,
//! `test_elicitation_sep1330_enums` are MRTR handlers too).
//!
//! Environment:
//! - `MCP_ADDR`: listen address (default `127.0.0.1:3001`; port `0` picks a
//!   free one, printed on the first line of stdout).
//! - `MCP_REQUEST_STATE_KEYS`: `kid:base64url-key` pairs, comma-separated, the
//!   first one signs. Without it a random key is used for this process only.
//! - `MCP_STACK`: what serves the fixture: `bridge` (default: [`LegacyBridgeLayer`] in front
//!   of [`ElicitationLayer`]), `layer` ([`ElicitationLayer`] alone) or `bare` (rmcp alone,
//!   which `scripts/conformance.sh` compares the layered run with).
//! - `MCP_JSON_RESPONSE`: `1` for `application/json` replies instead of
//!   rmcp's default event streams.
//! - `RUST_LOG`: log filter (default `info`).

// Sampling and roots are deprecated since 2026-07-28 (SEP-2577) but still part
// of the protocol, and the suite asks for both.
#![allow(deprecated)]

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;

use tokio::sync::broadcast;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::{
        tool::{InputResponses, RequestState},
        wrapper::Parameters,
    },
    model::{
        BooleanSchema, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
        CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, CreateMessageRequest,
        CreateMessageRequestParams, CreateTaskResult, ElicitRequest, ElicitRequestParams,
        ElicitationSchema, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
        GetTaskParams, GetTaskResult, Implementation, InputRequest, InputRequests,
        InputRequiredResult, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListRootsRequest, LoggingLevel, LoggingMessageNotificationParam,
        PaginatedRequestParams, PrimitiveSchemaDefinition, ProgressNotificationParam, Prompt,
        PromptArgument, PromptMessage, ProtocolVersion, ReadResourceRequestParams,
        ReadResourceResponse, ReadResourceResult, Reference, Resource, ResourceContents,
        ResourceTemplate, Role, SamplingMessage, ServerCapabilities, ServerConfig,
        ServerNotification, StringSchema, SubscriptionFilter, UpdateTaskParams,
    },
    service::{RequestContext, SubscriptionContext, SubscriptionSendError},
    task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tower::{Layer, ServiceBuilder};
use tower_elicitation::bridge::LegacyBridgeLayer;
use tower_elicitation::{ElicitationLayer, Keyring};
use tracing_subscriber::EnvFilter;

const DEFAULT_ADDR: &str = "127.0.0.1:3001";
const MCP_PATH: &str = "/mcp";
const PROMPT: &str = "test_input_required_result_prompt";
const SIMPLE_PROMPT: &str = "test_simple_prompt";
const ARGUMENTS_PROMPT: &str = "test_prompt_with_arguments";
const EMBEDDED_PROMPT: &str = "test_prompt_with_embedded_resource";
const IMAGE_PROMPT: &str = "test_prompt_with_image";
const STATIC_TEXT: &str = "test://static-text";
const STATIC_BINARY: &str = "test://static-binary";
const WATCHED: &str = "test://watched-resource";
const TEMPLATE: &str = "test://template/{id}/data";
/// A 1×1 red PNG, base64.
const RED_PIXEL_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// Eight samples of silence, 16-bit mono WAV at 8 kHz, base64.
const SILENT_WAV: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// The fixture server. Every MRTR round starts from the request alone; the state kept, shared
/// by every request (the service is built per request), is rmcp's [`TaskManager`] and the
/// channel that tells `subscriptions/listen` streams what changed.
#[derive(Clone)]
struct Conformance {
    tasks: TaskManager,
    /// What changed, for every open `subscriptions/listen` stream.
    changes: broadcast::Sender<Change>,
}

impl Default for Conformance {
    fn default() -> Self {
        Self {
            tasks: TaskManager::default(),
            changes: broadcast::channel(16).0,
        }
    }
}

/// A change the `test_trigger_*` tools announce to the listening clients.
#[derive(Clone, Copy, Debug)]
enum Change {
    Tools,
    Prompts,
}

impl Conformance {
    /// Runs `operation` as a task and answers its `CreateTaskResult`.
    fn spawn<F, Fut>(&self, operation: F) -> CallToolResponse
    where
        F: FnOnce(TaskContext) -> Fut,
        Fut: std::future::Future<Output = Result<CallToolResult, TaskExit>> + Send + 'static,
    {
        let task = self.tasks.spawn(TaskOptions::default(), |context| {
            Box::pin(operation(context))
        });
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}

#[tool_router]
impl Conformance {
    #[tool(description = "MRTR: asks the user's name with a form (`user_name`), then greets.")]
    async fn test_input_required_result_elicitation(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        match answers.as_ref().and_then(|a| a.get("user_name")) {
            None => ask([("user_name", ask_name("What is your name?"))], None),
            Some(answer) => match text_field(answer, "name") {
                Some(name) => done(format!("Hello, {name}!")),
                None => refused("No name was given."),
            },
        }
    }

    #[tool(description = "MRTR: asks the client's model a question (`capital_question`).")]
    async fn test_input_required_result_sampling(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        match answers.as_ref().and_then(|a| a.get("capital_question")) {
            None => {
                let question = sample("What is the capital of France?", 100);
                ask([("capital_question", question)], None)
            }
            Some(answer) => done(format!("Sampling result: {}", sampled_text(answer))),
        }
    }

    #[tool(description = "MRTR: asks the client for its roots (`client_roots`).")]
    async fn test_input_required_result_list_roots(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        match answers.as_ref().and_then(|a| a.get("client_roots")) {
            None => ask([("client_roots", list_roots())], None),
            Some(answer) => done(format!("Found {} root(s)", root_count(answer))),
        }
    }

    #[tool(description = "MRTR: asks for a confirmation (`confirm`) and keeps a requestState.")]
    async fn test_input_required_result_request_state(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> CallToolResponse {
        confirm_with_state("request_state: awaiting confirm", answers, state)
    }

    #[tool(description = "MRTR: asks for a name, a sampled greeting and the roots at once.")]
    async fn test_input_required_result_multiple_inputs(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> CallToolResponse {
        const STATE: &str = "multiple_inputs: awaiting 3 answers";
        let answers = answers.unwrap_or_default();
        let (Some(name), Some(greeting), Some(roots), Some(STATE)) = (
            answers.get("user_name"),
            answers.get("greeting"),
            answers.get("client_roots"),
            state.as_deref(),
        ) else {
            let questions = [
                ("user_name", ask_name("What is your name?")),
                ("greeting", sample("Generate a greeting", 50)),
                ("client_roots", list_roots()),
            ];
            return ask(questions, Some(STATE.to_owned()));
        };
        done(format!(
            "Name: {}; greeting: {}; {} root(s)",
            text_field(name, "name").unwrap_or("(declined)"),
            sampled_text(greeting),
            root_count(roots),
        ))
    }

    #[tool(description = "MRTR: two rounds, name (`step1`) then favourite colour (`step2`).")]
    async fn test_input_required_result_multi_round(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> CallToolResponse {
        let answers = answers.unwrap_or_default();
        let state: Option<MultiRound> = state.and_then(|s| serde_json::from_str(&s).ok());
        match state {
            Some(MultiRound { round: 1, .. }) if answers.contains_key("step1") => {
                let Some(name) = text_field(&answers["step1"], "name") else {
                    return refused("No name was given.");
                };
                let next = MultiRound {
                    round: 2,
                    name: Some(name.to_owned()),
                };
                let question = ask_form("Step 2: What is your favorite color?", "color");
                ask([("step2", question)], Some(next.to_json()))
            }
            Some(MultiRound {
                round: 2,
                name: Some(name),
            }) if answers.contains_key("step2") => match text_field(&answers["step2"], "color") {
                Some(color) => done(format!("Multi-round complete for {name} who likes {color}")),
                None => refused("No colour was given."),
            },
            // Anything else starts over.
            _ => {
                let first = MultiRound {
                    round: 1,
                    name: None,
                };
                let question = ask_name("Step 1: What is your name?");
                ask([("step1", question)], Some(first.to_json()))
            }
        }
    }

    #[tool(description = "MRTR: like request_state; the suite then tampers with the state.")]
    async fn test_input_required_result_tampered_state(
        &self,
        InputResponses(answers): InputResponses,
        RequestState(state): RequestState,
    ) -> CallToolResponse {
        confirm_with_state("tampered_state: awaiting confirm", answers, state)
    }

    #[tool(description = "MRTR: asks only what the request's _meta clientCapabilities allow.")]
    async fn test_input_required_result_capabilities(
        &self,
        InputResponses(answers): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        if answers.is_some_and(|a| !a.is_empty()) {
            return done("Capabilities respected");
        }
        let declared = context.client_capabilities().unwrap_or_default();
        let mut questions = Vec::new();
        if declared.elicitation.is_some() {
            questions.push(("elicit_input", ask_form("Please provide a value", "value")));
        }
        if declared.sampling.is_some() {
            questions.push(("sample_input", sample("Say something", 50)));
        }
        if questions.is_empty() {
            return done("No supported capabilities declared");
        }
        ask(questions, Some("capabilities: asked".to_owned()))
    }

    #[tool(description = "Needs the sampling capability: -32021 (HTTP 400) without it.")]
    async fn test_missing_capability(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let declared = context.client_capabilities().unwrap_or_default();
        if declared.sampling.is_none() {
            let required = ClientCapabilities::builder().enable_sampling().build();
            return Err(McpError::missing_required_client_capability(required));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("Success")]))
    }

    // `server-stateless` also calls the next two diagnostic tools; without them
    // two of its checks fail as "Not testable".

    #[tool(description = "Asks through MRTR, never with a request on the response stream.")]
    async fn test_streaming_elicitation(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        match answers.as_ref().and_then(|a| a.get("confirm")) {
            None => ask([("confirm", ask_confirm())], None),
            Some(_) => done("Streaming complete"),
        }
    }

    #[tool(description = "Sends no log message: the request sets no _meta logLevel.")]
    async fn test_logging_tool(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text("Logged nothing")])
    }

    // The 2025-era scenarios (`tools-call-*`, `elicitation-sep*`) call the tools below through
    // the legacy bridge. They are MRTR handlers like the rest: the bridge turns each question
    // into a request on the 2025 client's stream, and its answer into the retry.

    #[tool(description = "Answers a fixed text.")]
    async fn test_simple_text(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(
            "This is a simple text response for testing.",
        )])
    }

    #[tool(description = "Sends three progress notifications (0, 50, 100 of 100), then answers.")]
    async fn test_tool_with_progress(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        if let Some(token) = context.meta.get_progress_token() {
            for progress in [0.0, 50.0, 100.0] {
                let update =
                    ProgressNotificationParam::new(token.clone(), progress).with_total(100.0);
                let _ = context.peer.notify_progress(update).await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        CallToolResult::success(vec![ContentBlock::text("Progress complete")])
    }

    #[tool(
        description = "Sends three info log messages when the request's _meta logLevel admits them."
    )]
    async fn test_tool_with_logging(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let admitted = matches!(
            context.meta.log_level(),
            Some(LoggingLevel::Debug | LoggingLevel::Info)
        );
        if admitted {
            for text in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ] {
                let message =
                    LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::from(text));
                let _ = context.peer.notify_logging_message(message).await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        CallToolResult::success(vec![ContentBlock::text("Logging complete")])
    }

    #[tool(description = "Asks for a username and an email (`user_info`), then echoes the answer.")]
    async fn test_elicitation(
        &self,
        Parameters(MessageArgs { message }): Parameters<MessageArgs>,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        let schema = serde_json::json!({"type": "object", "properties": {
            "username": {"type": "string", "description": "Your username"},
            "email": {"type": "string", "description": "Your email address"}},
            "required": ["username", "email"]});
        echo_answer("user_info", &message, schema, answers)
    }

    #[tool(description = "Asks the client's model (`sampling`), then answers with its text.")]
    async fn test_sampling(
        &self,
        Parameters(PromptArgs { prompt }): Parameters<PromptArgs>,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        match answers.as_ref().and_then(|a| a.get("sampling")) {
            None => ask([("sampling", sample(&prompt, 100))], None),
            Some(answer) => done(format!("LLM response: {}", sampled_text(answer))),
        }
    }

    #[tool(description = "SEP-1034: a form whose every field has a default.")]
    async fn test_elicitation_sep1034_defaults(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        let schema = serde_json::json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "Name", "default": "John Doe"},
            "age": {"type": "integer", "description": "Age", "default": 30},
            "score": {"type": "number", "description": "Score", "default": 95.5},
            "status": {"type": "string", "description": "Status",
                "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "description": "Verified", "default": true}},
            "required": []});
        echo_answer("defaults", "Please review the defaults", schema, answers)
    }

    #[tool(description = "SEP-1330: a form with every kind of enum.")]
    async fn test_elicitation_sep1330_enums(
        &self,
        InputResponses(answers): InputResponses,
    ) -> CallToolResponse {
        let schema = serde_json::json!({"type": "object", "properties": {
            "untitledSingle": {"type": "string", "description": "Untitled single",
                "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "description": "Titled single", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"}]},
            "legacyEnum": {"type": "string", "description": "Legacy",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "description": "Untitled multi",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "description": "Titled multi",
                "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}]}}},
            "required": []});
        echo_answer("enums", "Please pick your options", schema, answers)
    }

    // ---- the everything catalogue: content, errors, schemas, headers (both revisions) ----

    #[tool(description = "Answers one image: a 1×1 red PNG.")]
    async fn test_image_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::image(RED_PIXEL_PNG, "image/png")])
    }

    #[tool(description = "Answers one audio clip: eight samples of silence as WAV.")]
    async fn test_audio_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::audio(SILENT_WAV, "audio/wav")])
    }

    #[tool(description = "Answers one embedded text resource (`test://embedded-resource`).")]
    async fn test_embedded_resource(&self) -> CallToolResult {
        let resource = ResourceContents::text(
            "This is an embedded resource content.",
            "test://embedded-resource",
        )
        .with_mime_type("text/plain");
        CallToolResult::success(vec![ContentBlock::resource(resource)])
    }

    #[tool(description = "Answers a text, an image and an embedded JSON resource.")]
    async fn test_multiple_content_types(&self) -> CallToolResult {
        let resource = ResourceContents::text(
            r#"{"test":"data","value":123}"#,
            "test://mixed-content-resource",
        )
        .with_mime_type("application/json");
        CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(RED_PIXEL_PNG, "image/png"),
            ContentBlock::resource(resource),
        ])
    }

    #[tool(description = "Always fails: a tool execution error (`isError: true`).")]
    async fn test_error_handling(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )])
    }

    #[tool(
        description = "Tool with JSON Schema 2020-12 features",
        input_schema = json_schema_2020_12()
    )]
    async fn json_schema_2020_12_tool(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text("Schema accepted")])
    }

    #[tool(
        description = "Echoes `region`, which a 2026-07-28 client also sends as the `Mcp-Param-Region` header (SEP-2243)."
    )]
    async fn test_header_param(
        &self,
        Parameters(HeaderArgs { region }): Parameters<HeaderArgs>,
    ) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(format!("Region: {region}"))])
    }

    // ---- subscriptions (SEP-2575) and event streams ----

    #[tool(description = "Announces a tools/list change to every subscriptions/listen stream.")]
    async fn test_trigger_tool_change(&self) -> CallToolResult {
        let listeners = self.changes.send(Change::Tools).unwrap_or(0);
        text_result(format!("Tool list change sent to {listeners} listener(s)"))
    }

    #[tool(description = "Announces a prompts/list change to every subscriptions/listen stream.")]
    async fn test_trigger_prompt_change(&self) -> CallToolResult {
        let listeners = self.changes.send(Change::Prompts).unwrap_or(0);
        text_result(format!(
            "Prompt list change sent to {listeners} listener(s)"
        ))
    }

    #[tool(
        description = "Answers after a short pause: the 2025-era SSE polling scenario closes and resumes its stream meanwhile."
    )]
    async fn test_reconnection(&self) -> CallToolResult {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        text_result("Reconnection test complete")
    }

    // ---- the Tasks extension (SEP-2663) fixtures, on rmcp's TaskManager ----

    #[tool(description = "Sync only: answers `Hello, {name}!`.")]
    async fn greet(&self, Parameters(GreetArgs { name }): Parameters<GreetArgs>) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(format!("Hello, {name}!"))])
    }

    #[tool(
        description = "Task-supporting: sleeps `seconds` then answers; settles `cancelled` on tasks/cancel. Runs inline for a client without the tasks extension."
    )]
    async fn slow_compute(
        &self,
        Parameters(ComputeArgs { seconds, label }): Parameters<ComputeArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let seconds = seconds.unwrap_or(0.0).clamp(0.0, 3600.0);
        let pause = std::time::Duration::try_from_secs_f64(seconds).unwrap_or_default();
        let label = label.unwrap_or_else(|| "compute".to_owned());
        let text = format!("Computed {label} after {seconds} s");
        if !declares_tasks(&context) {
            tokio::time::sleep(pause).await;
            return done(text);
        }
        self.spawn(move |task| async move {
            tokio::select! {
                () = task.cancelled() => Err(TaskExit::Cancelled),
                () = tokio::time::sleep(pause) => Ok(text_result(text)),
            }
        })
    }

    #[tool(
        description = "Task support required: after about a second, a tool execution error (`isError: true`)."
    )]
    async fn failing_job(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !declares_tasks(&context) {
            return Err(tasks_required());
        }
        Ok(self.spawn(|_| async {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Ok(CallToolResult::error(vec![ContentBlock::text(
                "The job failed, as it always does.",
            )]))
        }))
    }

    #[tool(
        description = "Task support required: fails with a protocol error (the task settles `failed`)."
    )]
    async fn protocol_error_job(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !declares_tasks(&context) {
            return Err(tasks_required());
        }
        Ok(self.spawn(|_| async {
            let error = McpError::internal_error("protocol_error_job always fails", None);
            Err(TaskExit::Error(error))
        }))
    }

    #[tool(
        description = "Task support required: asks to confirm deleting `filename` (an elicitation in the task), then answers."
    )]
    async fn confirm_delete(
        &self,
        Parameters(DeleteArgs { filename }): Parameters<DeleteArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !declares_tasks(&context) {
            return Err(tasks_required());
        }
        Ok(self.spawn(move |task| async move {
            let question = ask_boolean(&format!("Delete {filename}?"), "confirm");
            let answer = task.request_input("confirm", question).await?;
            let confirmed =
                accepted(&answer).and_then(|c| c.get("confirm")) == Some(&Value::Bool(true));
            let verdict = if confirmed { "Deleted" } else { "Kept" };
            Ok(text_result(format!("{verdict} {filename}")))
        }))
    }

    #[tool(
        description = "Task support required: asks two questions at once (`first_name`, `last_name`), then answers."
    )]
    async fn multi_input(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !declares_tasks(&context) {
            return Err(tasks_required());
        }
        Ok(self.spawn(|task| async move {
            let (first, last) = tokio::join!(
                task.request_input("first_name", ask_form("Your first name?", "name")),
                task.request_input("last_name", ask_form("Your last name?", "name")),
            );
            let (first, last) = (first?, last?);
            let name = |answer: &Value| text_field(answer, "name").unwrap_or("?").to_owned();
            Ok(text_result(format!(
                "Hello, {} {}!",
                name(&first),
                name(&last)
            )))
        }))
    }

    #[tool(
        description = "Task support required: asks `user_name` by MRTR first, then creates a task that greets."
    )]
    async fn test_tool_with_task(
        &self,
        InputResponses(answers): InputResponses,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !declares_tasks(&context) {
            return Err(tasks_required());
        }
        let Some(answer) = answers.as_ref().and_then(|a| a.get("user_name")) else {
            return Ok(ask([("user_name", ask_name("What is your name?"))], None));
        };
        let name = text_field(answer, "name")
            .unwrap_or("(declined)")
            .to_owned();
        Ok(self.spawn(move |_| async move { Ok(text_result(format!("Hello, {name}!"))) }))
    }
}

#[tool_handler]
impl ServerHandler for Conformance {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts_list_changed()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "tower-elicitation-conformance",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    // Multi round-trip requests exist only in 2026-07-28.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![ProtocolVersion::V_2026_07_28])
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let argument = |name: &str, description: &str| {
            PromptArgument::new(name)
                .with_description(description)
                .with_required(true)
        };
        let prompts = vec![
            Prompt::new(
                PROMPT,
                Some("MRTR: asks what context the prompt should use (`user_context`)."),
                None,
            ),
            Prompt::new(
                SIMPLE_PROMPT,
                Some("A simple prompt without arguments."),
                None,
            ),
            Prompt::new(
                ARGUMENTS_PROMPT,
                Some("A prompt with two required arguments."),
                Some(vec![
                    argument("arg1", "First test argument"),
                    argument("arg2", "Second test argument"),
                ]),
            ),
            Prompt::new(
                EMBEDDED_PROMPT,
                Some("A prompt that embeds the resource it is given."),
                Some(vec![argument(
                    "resourceUri",
                    "URI of the resource to embed",
                )]),
            ),
            Prompt::new(IMAGE_PROMPT, Some("A prompt with an image."), None),
        ];
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let argument = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    McpError::invalid_params(format!("Missing required argument: {name}"), None)
                })
        };
        let messages = match request.name.as_str() {
            PROMPT => return Ok(context_prompt(&request)),
            SIMPLE_PROMPT => vec![PromptMessage::new_text(
                Role::User,
                "This is a simple prompt for testing.",
            )],
            ARGUMENTS_PROMPT => {
                let (arg1, arg2) = (argument("arg1")?, argument("arg2")?);
                let text = format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'");
                vec![PromptMessage::new_text(Role::User, text)]
            }
            EMBEDDED_PROMPT => {
                let resource = ResourceContents::text(
                    "Embedded resource content for testing.",
                    argument("resourceUri")?,
                )
                .with_mime_type("text/plain");
                vec![
                    PromptMessage::new(Role::User, ContentBlock::resource(resource)),
                    PromptMessage::new_text(
                        Role::User,
                        "Please process the embedded resource above.",
                    ),
                ]
            }
            IMAGE_PROMPT => vec![
                PromptMessage::new(Role::User, ContentBlock::image(RED_PIXEL_PNG, "image/png")),
                PromptMessage::new_text(Role::User, "Please analyze the image above."),
            ],
            other => {
                let message = format!("Unknown prompt: {other}");
                return Err(McpError::invalid_params(message, None));
            }
        };
        Ok(GetPromptResult::new(messages).into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let resources = [
            (
                STATIC_TEXT,
                "static-text",
                "A static text resource.",
                "text/plain",
            ),
            (
                STATIC_BINARY,
                "static-binary",
                "A static binary resource: a 1×1 red PNG.",
                "image/png",
            ),
            (
                WATCHED,
                "watched-resource",
                "A resource clients may subscribe to.",
                "text/plain",
            ),
        ]
        .into_iter()
        .map(|(uri, name, description, mime)| {
            Resource::new(uri, name)
                .with_description(description)
                .with_mime_type(mime)
        })
        .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new(TEMPLATE, "template-data")
            .with_description("Data for one id, as JSON.")
            .with_mime_type("application/json");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.as_str();
        let contents = match uri {
            STATIC_TEXT => {
                ResourceContents::text("This is the content of the static text resource.", uri)
                    .with_mime_type("text/plain")
            }
            STATIC_BINARY => ResourceContents::blob(RED_PIXEL_PNG, uri).with_mime_type("image/png"),
            WATCHED => ResourceContents::text("Watched resource content.", uri)
                .with_mime_type("text/plain"),
            _ => match template_id(uri) {
                Some(id) => {
                    let data = serde_json::json!({
                        "id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                    ResourceContents::text(data.to_string(), uri).with_mime_type("application/json")
                }
                // rmcp answers -32002 to 2025-era peers and -32602 from 2026-07-28 (SEP-2164).
                None => {
                    let data = serde_json::json!({ "uri": uri });
                    return Err(McpError::resource_not_found(
                        "Resource not found",
                        Some(data),
                    ));
                }
            },
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    // Every notification the capabilities advertise, as the client asks.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.changes.subscribe();
        loop {
            let change = tokio::select! {
                () = subscription.cancelled() => return Ok(()),
                change = changes.recv() => change,
            };
            let notification = match change {
                Ok(Change::Tools) => {
                    ServerNotification::ToolListChangedNotification(Default::default())
                }
                Ok(Change::Prompts) => {
                    ServerNotification::PromptListChangedNotification(Default::default())
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            // A change the client did not ask for is not sent (rmcp checks the filter).
            match subscription.sink().send(notification).await {
                Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(_) => return Ok(()),
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let candidates: &[&str] = match (&request.r#ref, request.argument.name.as_str()) {
            (Reference::Prompt(prompt), "arg1") if prompt.name == ARGUMENTS_PROMPT => {
                &["paris", "park", "party"]
            }
            _ => &[],
        };
        let values = candidates
            .iter()
            .filter(|value| value.starts_with(&request.argument.value))
            .map(|value| (*value).to_owned())
            .collect();
        let completion =
            CompletionInfo::new(values).map_err(|e| McpError::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }
}

/// `test_input_required_result_prompt`: asks what context to use (`user_context`), then
/// answers with it.
fn context_prompt(request: &GetPromptRequestParams) -> GetPromptResponse {
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|a| a.get("user_context"));
    let Some(answer) = answer else {
        let question = ask_form("What context should the prompt use?", "context");
        let questions = requests([("user_context", question)]);
        return InputRequiredResult::from_input_requests(questions).into();
    };
    let context = text_field(answer, "context").unwrap_or("(declined)");
    let text = format!("Prompt with context: {context}");
    let message = PromptMessage::new_text(Role::User, text);
    GetPromptResult::new(vec![message]).into()
}

/// The `{id}` of a `test://template/{id}/data` URI.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix("test://template/")?
        .strip_suffix("/data")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The input schema of `json_schema_2020_12_tool`: `$schema`, `$defs` with an `$anchor`,
/// `$ref`, `allOf`/`anyOf`, `if`/`then`/`else` and `additionalProperties`, which the suite
/// checks `tools/list` keeps as they are (SEP-1613, SEP-2106).
fn json_schema_2020_12() -> Arc<JsonObject> {
    let schema = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "addressDef", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}},
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

/// Whether the request declares the tasks extension (SEP-2663), per request (SEP-2575).
fn declares_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|declared| declared.supports_tasks())
}

/// `-32021` naming the tasks extension: the tool runs only as a task.
fn tasks_required() -> McpError {
    let required = ClientCapabilities::builder().enable_tasks().build();
    McpError::missing_required_client_capability(required)
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// Arguments of `greet`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

/// Arguments of `slow_compute`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ComputeArgs {
    /// How long to work, in seconds.
    seconds: Option<f64>,
    /// A label echoed in the answer.
    label: Option<String>,
}

/// Arguments of `confirm_delete`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct DeleteArgs {
    /// The file to (pretend to) delete.
    filename: String,
}

/// Arguments of `test_header_param`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct HeaderArgs {
    /// The region, mirrored in the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

/// Arguments of `test_elicitation`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct MessageArgs {
    /// The message to show.
    message: String,
}

/// Arguments of `test_sampling`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct PromptArgs {
    /// The prompt for the client's model.
    prompt: String,
}

/// Asks one form (`schema`, under `key`) until it is answered, then echoes the answer.
fn echo_answer(
    key: &str,
    message: &str,
    schema: Value,
    answers: Option<rmcp::model::InputResponses>,
) -> CallToolResponse {
    match answers.as_ref().and_then(|a| a.get(key)) {
        None => {
            let request = serde_json::json!({"method": "elicitation/create",
                "params": {"mode": "form", "message": message, "requestedSchema": schema}});
            let request: InputRequest =
                serde_json::from_value(request).expect("the fixture's form is an input request");
            ask([(key, request)], None)
        }
        Some(answer) => done(format!(
            "User response: action={}, content={}",
            answer.get("action").and_then(Value::as_str).unwrap_or("?"),
            answer.get("content").unwrap_or(&Value::Null),
        )),
    }
}

/// The multi-round fixture's own state, as plain JSON text (the layer seals it).
#[derive(Debug, Serialize, Deserialize)]
struct MultiRound {
    round: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl MultiRound {
    fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a MultiRound always serializes")
    }
}

/// `request_state` and `tampered_state`: ask `confirm` with a plain `state`;
/// complete once both come back. The layer only ever hands back the state
/// this handler issued, so a present state is a valid one.
fn confirm_with_state(
    state: &str,
    answers: Option<rmcp::model::InputResponses>,
    returned: Option<String>,
) -> CallToolResponse {
    let answer = answers.as_ref().and_then(|a| a.get("confirm"));
    match (answer, returned.as_deref()) {
        (Some(answer), Some(returned)) if returned == state => {
            if accepted(answer).and_then(|c| c.get("ok")) == Some(&Value::Bool(true)) {
                done("state-ok: requestState validated")
            } else {
                refused("Not confirmed.")
            }
        }
        _ => ask([("confirm", ask_confirm())], Some(state.to_owned())),
    }
}

// ---- building results ----

fn done(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn refused(text: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// An `input_required` result asking `questions`, with the handler's own plain `state`.
fn ask<'a>(
    questions: impl IntoIterator<Item = (&'a str, InputRequest)>,
    state: Option<String>,
) -> CallToolResponse {
    InputRequiredResult::new(Some(requests(questions)), state).into()
}

fn requests<'a>(questions: impl IntoIterator<Item = (&'a str, InputRequest)>) -> InputRequests {
    questions
        .into_iter()
        .map(|(key, request)| (key.to_owned(), request))
        .collect()
}

/// A form asking for one required string `field`.
fn ask_form(message: &str, field: &str) -> InputRequest {
    let properties = BTreeMap::from([(
        field.to_owned(),
        PrimitiveSchemaDefinition::String(StringSchema::new()),
    )]);
    form(message, properties, field)
}

fn ask_name(message: &str) -> InputRequest {
    ask_form(message, "name")
}

/// "Please confirm", with one required boolean `ok`.
fn ask_confirm() -> InputRequest {
    ask_boolean("Please confirm", "ok")
}

/// A form asking for one required boolean `field`.
fn ask_boolean(message: &str, field: &str) -> InputRequest {
    let properties = BTreeMap::from([(
        field.to_owned(),
        PrimitiveSchemaDefinition::Boolean(BooleanSchema::new()),
    )]);
    form(message, properties, field)
}

fn form(
    message: &str,
    properties: BTreeMap<String, PrimitiveSchemaDefinition>,
    required: &str,
) -> InputRequest {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message.to_owned(),
        requested_schema: ElicitationSchema::new(properties)
            .with_required(vec![required.to_owned()]),
    };
    InputRequest::Elicitation(ElicitRequest::new(params))
}

fn sample(question: &str, max_tokens: u32) -> InputRequest {
    let params =
        CreateMessageRequestParams::new(vec![SamplingMessage::user_text(question)], max_tokens);
    InputRequest::CreateMessage(CreateMessageRequest::new(params))
}

fn list_roots() -> InputRequest {
    InputRequest::ListRoots(ListRootsRequest::default())
}

// ---- reading answers (opaque JSON in rmcp) ----

/// The content of an accepted elicitation answer.
fn accepted(answer: &Value) -> Option<&Map<String, Value>> {
    (answer.get("action")? == "accept")
        .then(|| answer.get("content")?.as_object())
        .flatten()
}

fn text_field<'a>(answer: &'a Value, field: &str) -> Option<&'a str> {
    accepted(answer)?.get(field)?.as_str()
}

/// The text of a `sampling/createMessage` result.
fn sampled_text(answer: &Value) -> &str {
    answer
        .pointer("/content/text")
        .and_then(Value::as_str)
        .unwrap_or("(no text)")
}

/// The number of roots in a `roots/list` result.
fn root_count(answer: &Value) -> usize {
    answer
        .get("roots")
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

// ---- serving ----

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let keyring = Keyring::from_env_or_ephemeral()?;
    let json_response = std::env::var("MCP_JSON_RESPONSE").is_ok_and(|v| v == "1");
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_stateless_protocol_metadata_required(true)
        .with_json_response(json_response)
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1"]);
    let fixture = Conformance::default();
    let mcp = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    // `bridge` (the default): the legacy bridge outermost serves the 2025-era scenarios
    // (sessions, `initialize`, requests on the call's stream) and passes 2026-07-28 requests
    // to the layer; `layer`: the layer alone; `bare`: rmcp alone, to compare with.
    let layer = ElicitationLayer::new(keyring);
    let stack = std::env::var("MCP_STACK").unwrap_or_else(|_| "bridge".to_owned());
    let app = match stack.as_str() {
        "bare" => axum::Router::new().nest_service(MCP_PATH, mcp),
        "layer" => axum::Router::new().nest_service(MCP_PATH, layer.layer(mcp)),
        "bridge" => {
            let mcp = ServiceBuilder::new()
                .layer(LegacyBridgeLayer::for_layer(&layer))
                .layer(layer)
                .service(mcp);
            axum::Router::new().nest_service(MCP_PATH, mcp)
        }
        other => {
            return Err(format!("MCP_STACK must be bare, layer or bridge, not {other:?}").into());
        }
    };

    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| DEFAULT_ADDR.to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}{MCP_PATH}", listener.local_addr()?);
    // Event-stream responses go out in several writes: without TCP_NODELAY each waits for the
    // client's delayed ACK (about 40 ms a request).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
