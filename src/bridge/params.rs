//! `Mcp-Param-*`: the `tools/call` arguments a tool declares as headers (`x-mcp-header` in its
//! input schema, SEP-2243), mirrored into the headers a 2026-07-28 server requires of them.
//!
//! A 2025 client sends no such headers, so the bridge adds them from the tools' schemas: learnt
//! from every `tools/list` answer it relays, and asked of the inner service (`tools/list`, every
//! page) when a call names a tool it has not seen. When the inner service still answers `-32020`
//! (its tools changed), the bridge asks again once and retries the round.
//!
//! Hand-written: rmcp's helpers for this are crate-private; the walk is a few lines.

use std::collections::HashMap;
use std::sync::Mutex;

use http::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::wire::mcp::header;

/// One annotated argument: the property names from the root to it, and the header's name.
type Annotation = (Vec<String>, String);

/// The annotated arguments of every tool the bridge has seen listed.
#[derive(Debug, Default)]
pub(crate) struct ToolHeaders(Mutex<HashMap<String, Vec<Annotation>>>);

impl ToolHeaders {
    /// Learns the tools of one `tools/list` result (a page).
    pub(crate) fn learn(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut found = Vec::new();
            annotations(tool.get("inputSchema"), &mut Vec::new(), &mut found);
            known.insert(name.to_owned(), found);
        }
    }

    /// Whether `tool` was seen listed.
    pub(crate) fn knows(&self, tool: &str) -> bool {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        known.contains_key(tool)
    }

    /// The `Mcp-Param-*` headers of a call of `tool` with `arguments`: one per annotated argument
    /// present with a primitive value (a value that is not header-safe is sent Base64-wrapped).
    pub(crate) fn headers(&self, tool: &str, arguments: &Value) -> Vec<(HeaderName, HeaderValue)> {
        let known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(annotated) = known.get(tool) else {
            return Vec::new();
        };
        annotated
            .iter()
            .filter_map(|(path, name)| {
                let value = path
                    .iter()
                    .try_fold(arguments, |value, key| value.get(key))?;
                let text = match value {
                    Value::String(text) => text.clone(),
                    Value::Bool(_) | Value::Number(_) => value.to_string(),
                    _ => return None,
                };
                let name = HeaderName::try_from(format!("{}{name}", header::PARAM_PREFIX)).ok()?;
                Some((name, header::text(&text)))
            })
            .collect()
    }
}

/// Every `x-mcp-header` annotation (a non-empty string) along `properties` chains from `schema`.
fn annotations(schema: Option<&Value>, path: &mut Vec<String>, out: &mut Vec<Annotation>) {
    let Some(Value::Object(properties)) = schema.and_then(|s| s.get("properties")) else {
        return;
    };
    for (name, property) in properties {
        path.push(name.clone());
        if let Some(Value::String(header)) = property.get("x-mcp-header")
            && !header.is_empty()
        {
            out.push((path.clone(), header.clone()));
        }
        annotations(Some(property), path, out);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotated_arguments_become_headers() {
        let headers = ToolHeaders::default();
        headers.learn(
            &json!({"tools": [{"name": "deploy", "inputSchema": {"type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"},
                "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
                "target": {"type": "object", "properties": {
                    "tenant": {"type": "string", "x-mcp-header": "Tenant"}}},
                "plain": {"type": "string"}}}}]}),
        );
        assert!(headers.knows("deploy"));
        assert!(!headers.knows("other"));
        let mut got: Vec<(String, String)> = headers
            .headers(
                "deploy",
                &json!({"region": "eu-west-1", "dry": true, "plain": "x",
                    "target": {"tenant": "café"}}),
            )
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("mcp-param-dry-run".to_owned(), "true".to_owned()),
                ("mcp-param-region".to_owned(), "eu-west-1".to_owned()),
                (
                    "mcp-param-tenant".to_owned(),
                    "=?base64?Y2Fmw6k=?=".to_owned()
                ),
            ]
        );
        assert!(headers.headers("deploy", &json!({})).is_empty());
    }
}
