//! Requests that are not an MRTR method, forwarded once to the inner service and its answer
//! given back in its 2025 shape.

use std::sync::Arc;

use http::request::Parts;
use serde_json::{Map, Value};

use super::config::Settings;
use super::events::{EventSender, StreamKind};
use super::inner::{self, InnerBody, Message, Reader, Wrapped};
use super::replies::{BridgeResponse, answer_to};
use crate::wire::jsonrpc::{self, INTERNAL_ERROR, RpcError};
use crate::wire::legacy;
use crate::wire::sse;

/// Forwards a request that is not an MRTR method once; the inner's answer in its 2025 shape, as
/// an event stream when the client takes one (with the inner's log messages and progress before
/// it), as JSON otherwise. `version` is the client's protocol version.
pub(super) async fn forward_once<S, ResBody>(
    mut inner: S,
    settings: &Settings,
    parts: &Parts,
    version: &str,
    method: &str,
    id: &Value,
    modern: Map<String, Value>,
) -> Result<BridgeResponse<ResBody>, S::Error>
where
    S: Wrapped<ResBody>,
    ResBody: InnerBody + Send + 'static,
{
    let inner_id = settings.inner_id();
    // The 2026 headers of what it names (`Mcp-Name` for `resources/subscribe`, …), as the inner
    // service requires them.
    let name = crate::wire::mcp::name_param(method)
        .and_then(|field| modern.get(field))
        .and_then(Value::as_str);
    let request = inner::request(parts, &inner_id, method, name, &modern);
    // The tools' `x-mcp-header` arguments are learnt from every list relayed.
    let is_tools_list = method == "tools/list";
    if !sse::accepts(&parts.headers) {
        let response = inner::call(&mut inner, request).await?;
        let mut reader = Reader::new(response);
        let outcome = loop {
            match reader.next().await {
                Ok(Message::Notification(_)) => continue,
                Ok(Message::Response(response)) => break legacy_outcome(response),
                Err(text) => break Err(RpcError::new(INTERNAL_ERROR, &text)),
            }
        };
        if let (true, Ok(result)) = (is_tools_list, &outcome) {
            settings.tool_headers.learn(result);
        }
        return Ok(answer_to(id, outcome));
    }
    let (events, stream) = EventSender::open(StreamKind::Post, version);
    let id = id.clone();
    let tool_headers = Arc::clone(&settings.tool_headers);
    tokio::spawn(async move {
        let call = async {
            let Ok(response) = inner::call(&mut inner, request).await else {
                let error = RpcError::new(INTERNAL_ERROR, "The inner service failed");
                return Err(error);
            };
            let mut reader = Reader::new(response);
            loop {
                match reader.next().await {
                    Ok(Message::Notification(notification)) => {
                        let method = notification.get("method").and_then(Value::as_str);
                        if matches!(
                            method,
                            Some("notifications/message" | "notifications/progress")
                        ) {
                            events.send(&notification).await;
                        }
                    }
                    Ok(Message::Response(response)) => break legacy_outcome(response),
                    Err(text) => break Err(RpcError::new(INTERNAL_ERROR, &text)),
                }
            }
        };
        let outcome = tokio::select! {
            () = events.closed() => return,
            outcome = call => outcome,
        };
        if let (true, Ok(result)) = (is_tools_list, &outcome) {
            tool_headers.learn(result);
        }
        events.send(&jsonrpc::response(&id, outcome)).await;
    });
    Ok(stream)
}

/// The inner's answer to a request that is not an MRTR method, in its 2025 shape.
fn legacy_outcome(response: Value) -> Result<Value, RpcError> {
    if let Some(Value::Object(error)) = response.get("error") {
        let error = legacy::legacy_error(error.clone());
        return Err(RpcError::relayed(Value::Object(error)));
    }
    let Some(Value::Object(result)) = response.get("result") else {
        return Err(RpcError::new(
            INTERNAL_ERROR,
            "The inner service's result is not an object",
        ));
    };
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(Value::Object(legacy::legacy_result(result.clone()))),
        Some(other) => Err(RpcError::new(
            INTERNAL_ERROR,
            &format!(
                "The inner service answered a result of type '{other}', which a 2025 client cannot take"
            ),
        )),
    }
}
