//! Shared plumbing for the tests that drive a real rmcp server in-process through its axum
//! router with `tower::ServiceExt::oneshot` (no sockets): stateless 2026-07-28 JSON-RPC
//! requests with the headers and `_meta` rmcp requires, replies read from `application/json`
//! or `text/event-stream`, and `in_both_modes!` to run every case in both.
//!
//! The rmcp server is the `deploy` example's (`support::server`).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    http::{Request, Response, StatusCode, header},
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tower_elicitation::{ElicitationLayer, Keyring};

use super::server::{self, DeployState, MCP_PATH};

pub const PROTOCOL_VERSION: &str = "2026-07-28";
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How rmcp answers: `application/json` or `text/event-stream`.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Json,
    Sse,
}

impl Mode {
    pub fn json_response(self) -> bool {
        matches!(self, Mode::Json)
    }
}

/// Generates `json::<case>` and `sse::<case>` tests for each case fn.
macro_rules! in_both_modes {
    ($($case:ident),* $(,)?) => {
        mod json {
            $(#[tokio::test]
            async fn $case() {
                super::$case($crate::support::rmcp::Mode::Json).await;
            })*
        }
        mod sse {
            $(#[tokio::test]
            async fn $case() {
                super::$case($crate::support::rmcp::Mode::Sse).await;
            })*
        }
    };
}
pub(crate) use in_both_modes;

pub fn keyring() -> Keyring {
    Keyring::new("test", [7u8; 32]).expect("valid test key")
}

/// The `deploy` example's router (with its gates, behind a layer keyed by [`keyring`]) and
/// its state.
pub fn deploy(mode: Mode) -> (Mcp, DeployState) {
    let state = DeployState::new();
    let router = server::router_with(
        ElicitationLayer::new(keyring()),
        state.clone(),
        mode.json_response(),
    )
    .expect("the example's gates are valid");
    (Mcp::new(router), state)
}

/// Who calls, and what their requests declare.
#[derive(Clone, Debug)]
pub struct Caller {
    pub capabilities: Value,
    pub version: &'static str,
    pub authorization: Option<String>,
}

impl Caller {
    /// A 2026-07-28 client declaring form and URL elicitation, without `Authorization`.
    pub fn new() -> Self {
        Self {
            capabilities: json!({ "elicitation": { "form": {}, "url": {} } }),
            version: PROTOCOL_VERSION,
            authorization: None,
        }
    }

    pub fn capabilities(self, capabilities: Value) -> Self {
        Self {
            capabilities,
            ..self
        }
    }

    pub fn version(self, version: &'static str) -> Self {
        Self { version, ..self }
    }

    pub fn bearer(self, token: &str) -> Self {
        Self {
            authorization: Some(format!("Bearer {token}")),
            ..self
        }
    }
}

/// An MCP endpoint behind a router, and a JSON-RPC id counter.
pub struct Mcp {
    router: Router,
    next_id: AtomicU64,
}

/// An HTTP status and the JSON-RPC response message that came with it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub message: Value,
}

impl Mcp {
    pub fn new(router: Router) -> Self {
        Self {
            router,
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends `request` through the router.
    pub async fn serve(&self, request: Request<Body>) -> Response<Body> {
        self.router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible")
    }

    /// POSTs one stateless JSON-RPC request with the headers and `_meta` rmcp requires.
    pub async fn send(&self, caller: &Caller, method: &str, mut params: Value) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": caller.version,
            "io.modelcontextprotocol/clientInfo": { "name": "rmcp-test", "version": "0.0.0" },
            "io.modelcontextprotocol/clientCapabilities": caller.capabilities,
        });
        let mut request = Request::post(MCP_PATH)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("MCP-Protocol-Version", caller.version)
            .header("Mcp-Method", method);
        if let Some(name) = ["name", "uri"]
            .iter()
            .find_map(|field| params.get(*field).and_then(Value::as_str))
        {
            request = request.header("Mcp-Name", name);
        }
        if let Some(authorization) = &caller.authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let request = request
            .body(Body::from(body.to_string()))
            .expect("valid request");
        let exchange = async {
            let response = self.serve(request).await;
            let status = response.status();
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let message = read_message(response, id).await;
            Reply {
                status,
                content_type,
                message,
            }
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .expect("no response within the timeout")
    }
}

impl Reply {
    pub fn result(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{:#}", self.message);
        self.message
            .get("result")
            .unwrap_or_else(|| panic!("expected a result, got {:#}", self.message))
    }

    pub fn error(&self) -> &Value {
        self.message
            .get("error")
            .unwrap_or_else(|| panic!("expected a JSON-RPC error, got {:#}", self.message))
    }
}

/// `tools/call` params: `name`, `arguments`, plus the `extra` params.
pub fn tool_params(name: &str, arguments: Value, extra: Value) -> Value {
    let mut params = json!({ "name": name, "arguments": arguments });
    merge(&mut params, extra);
    params
}

pub fn merge(params: &mut Value, extra: Value) {
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
}

pub fn accept(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

/// Reads the JSON-RPC response for `id` from a JSON body or an SSE stream.
async fn read_message(response: Response<Body>, id: u64) -> Value {
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body frame").into_data() {
            text.push_str(std::str::from_utf8(&data).expect("UTF-8 body"));
        }
        // An SSE response stream may stay open after the response event.
        if is_sse && let Some(message) = sse_response(&text, id, false) {
            return message;
        }
    }
    if is_sse {
        sse_response(&text, id, true)
            .unwrap_or_else(|| panic!("no response for id {id} in SSE stream:\n{text}"))
    } else {
        // Not every answer is JSON-RPC (a `401`, say): keep it as a string.
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// The response with `id` among the complete SSE events of `text` (the last one only once the
/// stream has `ended`).
fn sse_response(text: &str, id: u64, ended: bool) -> Option<Value> {
    let text = text.replace("\r\n", "\n");
    let mut events: Vec<&str> = text.split("\n\n").collect();
    if !ended {
        events.pop();
    }
    events.into_iter().find_map(|event| {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| data.strip_prefix(' ').unwrap_or(data))
            .collect();
        let message: Value = serde_json::from_str(&data.join("\n")).ok()?;
        let is_response = message.get("result").is_some() || message.get("error").is_some();
        (is_response && message["id"] == json!(id)).then_some(message)
    })
}
