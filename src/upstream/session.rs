//! What the upstream turned out to be at its handshake, and the 2026 ⇄ 2025 shapes of what goes
//! through a 2025-era session. Pure JSON: no I/O.

use serde_json::{Map, Value, json};

use super::config::ServerQuestions;
use crate::wire::mcp::MRTR_VERSION;
use crate::wire::mcp::meta::{PREFIX as META_PREFIX, SERVER_INFO as META_SERVER_INFO};

/// What the upstream turned out to be.
#[derive(Debug, Clone)]
pub(crate) enum Negotiated {
    /// A 2026-07-28 server, with its `server/discover` result.
    V2026,
    /// A 2025-era server in the adapter's one session: the version agreed and the
    /// `InitializeResult`.
    V2025 { version: String, initialized: Value },
}

/// The capabilities the adapter declares to a 2025-era upstream: everything a 2026 client in
/// front can be asked through `input_required` (each request's own capabilities are checked by
/// `ElicitationLayer` in front, which refuses with `-32021` what a client did not declare);
/// none when the server's questions are off.
pub(crate) fn client_capabilities(questions: ServerQuestions) -> Value {
    match questions {
        ServerQuestions::Relay => {
            json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}})
        }
        ServerQuestions::Off => json!({}),
    }
}

pub(crate) fn speaks_mrtr(discovered: &Value) -> bool {
    discovered
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|versions| {
            versions
                .iter()
                .filter_map(Value::as_str)
                .any(crate::wire::mcp::supports_mrtr)
        })
}

/// A 2026 request's params as a 2025 session takes them: no `inputResponses` or `requestState`,
/// no `_meta` key the protocol reserves (version, capabilities, client info, log level); the
/// rest (`progressToken`, other `_meta` extensions, arguments) as it is.
pub(crate) fn legacy_params(params: Option<Value>) -> Option<Value> {
    let Some(Value::Object(mut params)) = params else {
        return params;
    };
    params.remove("inputResponses");
    params.remove("requestState");
    if let Some(Value::Object(meta)) = params.get_mut("_meta") {
        meta.retain(|key, _| !key.starts_with(META_PREFIX));
        if meta.is_empty() {
            params.remove("_meta");
        }
    }
    Some(Value::Object(params))
}

/// The 2026 methods whose results are cacheable (`ttlMs` and `cacheScope` required).
const CACHEABLE: [&str; 5] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// A 2025 result of `method` as a 2026 one: `resultType: "complete"`, and for a cacheable
/// result the fields a 2025 server cannot give, saying not to cache it (`ttlMs: 0`, `cacheScope:
/// "private"`: the adapter knows nothing of how long it holds, nor whether it is the caller's
/// own). Every other field kept.
pub(crate) fn modern_result(method: &str, result: Value) -> Value {
    match result {
        Value::Object(mut result) => {
            result
                .entry("resultType")
                .or_insert_with(|| json!("complete"));
            if CACHEABLE.contains(&method) {
                uncached(&mut result);
            }
            Value::Object(result)
        }
        other => other,
    }
}

fn uncached(result: &mut Map<String, Value>) {
    result.entry("ttlMs").or_insert_with(|| json!(0));
    result
        .entry("cacheScope")
        .or_insert_with(|| json!("private"));
}

/// The `server/discover` result the adapter answers for a 2025-era upstream, from its
/// `InitializeResult`. `ttlMs` and `cacheScope` are required in a `DiscoverResult` (rmcp's client
/// refuses one without them): not to be kept, and for this caller only.
pub(crate) fn discover_result(initialized: &Value) -> Value {
    let mut result = Map::new();
    result.insert("resultType".to_owned(), json!("complete"));
    uncached(&mut result);
    result.insert("supportedVersions".to_owned(), json!([MRTR_VERSION]));
    result.insert(
        "capabilities".to_owned(),
        initialized
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    if let Some(instructions) = initialized.get("instructions").filter(|i| i.is_string()) {
        result.insert("instructions".to_owned(), instructions.clone());
    }
    if let Some(info) = initialized.get("serverInfo") {
        result.insert("_meta".to_owned(), json!({ META_SERVER_INFO: info }));
    }
    Value::Object(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_lose_what_a_2025_session_does_not_know() {
        let params = json!({"name": "t", "arguments": {"a": 1}, "requestState": "s",
            "inputResponses": {}, "_meta": {"progressToken": 7,
            "io.modelcontextprotocol/clientCapabilities": {}, "com.example/trace": "x"}});
        assert_eq!(
            legacy_params(Some(params)),
            Some(json!({"name": "t", "arguments": {"a": 1},
                "_meta": {"progressToken": 7, "com.example/trace": "x"}}))
        );
        let bare = json!({"name": "t", "_meta": {"io.modelcontextprotocol/protocolVersion": "v"}});
        assert_eq!(legacy_params(Some(bare)), Some(json!({"name": "t"})));
        assert_eq!(legacy_params(None), None);
    }

    #[test]
    fn results_become_complete_and_keep_unknown_fields() {
        let out = modern_result(
            "tools/call",
            json!({"content": [], "x-extra": {"kept": true}}),
        );
        assert_eq!(
            out,
            json!({"resultType": "complete", "content": [], "x-extra": {"kept": true}})
        );
    }

    #[test]
    fn cacheable_results_say_not_to_cache_them_unless_the_server_said() {
        let listed = modern_result("tools/list", json!({"tools": []}));
        assert_eq!(
            listed,
            json!({"resultType": "complete", "tools": [], "ttlMs": 0, "cacheScope": "private"})
        );
        let read = modern_result("resources/read", json!({"contents": [], "ttlMs": 5}));
        assert_eq!(
            (read["ttlMs"].as_u64(), read["cacheScope"].as_str()),
            (Some(5), Some("private"))
        );
        let discovered = discover_result(&json!({"capabilities": {}}));
        assert_eq!(
            (
                discovered["ttlMs"].as_u64(),
                discovered["cacheScope"].as_str()
            ),
            (Some(0), Some("private"))
        );
    }

    #[test]
    fn discovery_from_initialize() {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "s", "version": "1"}, "instructions": "hi"});
        let out = discover_result(&init);
        assert_eq!(out["supportedVersions"], json!([MRTR_VERSION]));
        assert_eq!(out["capabilities"], json!({"tools": {}}));
        assert_eq!(out["_meta"][META_SERVER_INFO]["name"], "s");
        assert_eq!(out["instructions"], "hi");
        // Required fields of a `DiscoverResult`.
        assert_eq!(
            (&out["ttlMs"], &out["cacheScope"]),
            (&json!(0), &json!("private"))
        );
    }

    #[test]
    fn only_a_2026_version_list_means_mrtr() {
        assert!(speaks_mrtr(
            &json!({"supportedVersions": ["2025-11-25", "2026-07-28"]})
        ));
        assert!(!speaks_mrtr(&json!({"supportedVersions": ["2025-11-25"]})));
        assert!(!speaks_mrtr(&json!({})));
    }
}
