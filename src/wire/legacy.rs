//! 2025 ↔ 2026-07-28 shapes: versions, capabilities, `_meta`, results and errors, and what a
//! 2025-era client is sent as a server-to-client request. Pure JSON: no HTTP, no I/O.

use serde_json::{Map, Value, json};

use crate::wire::mcp::meta::{
    CLIENT_CAPABILITIES as META_CAPABILITIES, CLIENT_INFO as META_INFO,
    LOG_LEVEL as META_LOG_LEVEL, PREFIX as META_PREFIX, PROTOCOL_VERSION as META_VERSION,
    SERVER_INFO as META_SERVER_INFO,
};
use crate::wire::mcp::{Declared, InputKind, MRTR_VERSION};

/// The versions the bridge answers `initialize` with, newest first.
pub(crate) const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The version without `mode`, `oneOf` enums, URL elicitation or sampling tools.
pub(crate) const V_2025_06_18: &str = "2025-06-18";

/// Whether a client at `version` predates 2025-11-25 (it speaks 2025-06-18 or 2025-03-26): no
/// form `mode`, `oneOf` enums, URL elicitation or sampling tools, and no SSE priming events
/// (SEP-1699), whose empty `data` such a client reads as a broken message.
pub(crate) fn before_2025_11_25(version: &str) -> bool {
    version == V_2025_06_18 || version == LEGACY_VERSIONS[2]
}

/// The levels `logging/setLevel` accepts.
pub(crate) const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The version answered to an `initialize` asking for `requested`: the same when the bridge
/// speaks it, else the newest 2025 one (never 2026-07-28, which has no `initialize`).
pub(crate) fn negotiate(requested: Option<&str>) -> &'static str {
    LEGACY_VERSIONS
        .into_iter()
        .find(|v| Some(*v) == requested)
        .unwrap_or(LEGACY_VERSIONS[0])
}

/// Whether the body names a 2026 revision in `params._meta` (the request is modern).
pub(crate) fn claims_modern(message: &Map<String, Value>) -> bool {
    message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_VERSION))
        .is_some()
}

/// A session's 2025 capabilities as 2026 `clientCapabilities`: elicitation and sampling as they
/// are, roots as `{}`, experimental and extensions kept, tasks dropped.
pub(crate) fn modern_capabilities(legacy: &Value) -> Value {
    let mut out = Map::new();
    if let Some(legacy) = legacy.as_object() {
        for key in ["elicitation", "sampling", "experimental", "extensions"] {
            if let Some(value) = legacy.get(key).filter(|v| v.is_object()) {
                out.insert(key.to_owned(), value.clone());
            }
        }
        if legacy.get("roots").is_some_and(Value::is_object) {
            out.insert("roots".to_owned(), json!({}));
        }
    }
    Value::Object(out)
}

/// What the bridge knows of the client a request comes from.
pub(crate) struct Client<'a> {
    pub(crate) capabilities: &'a Value,
    pub(crate) info: &'a Value,
    pub(crate) log_level: Option<&'a str>,
}

/// The params of a 2025 request as those of a stateless 2026 one: `_meta` gains the version,
/// the client's capabilities and info, and its log level. The rest (`progressToken` too) stays.
pub(crate) fn modern_params(params: Option<&Value>, client: &Client<'_>) -> Map<String, Value> {
    let mut params = params
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut meta = params
        .remove("_meta")
        .and_then(|m| match m {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    meta.retain(|k, _| !k.starts_with(META_PREFIX));
    meta.insert(META_VERSION.to_owned(), json!(MRTR_VERSION));
    meta.insert(
        META_CAPABILITIES.to_owned(),
        modern_capabilities(client.capabilities),
    );
    meta.insert(META_INFO.to_owned(), client.info.clone());
    if let Some(level) = client.log_level {
        meta.insert(META_LOG_LEVEL.to_owned(), json!(level));
    }
    params.insert("_meta".to_owned(), Value::Object(meta));
    params
}

/// The Tasks extension's name among a server's `capabilities.extensions` (SEP-2663).
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `InitializeResult` for `version`, from the inner's `server/discover` result: its
/// capabilities without the tasks extension (`tasks`, `extensions["io.modelcontextprotocol/tasks"]`),
/// which a 2025 client cannot use (list changes and
/// resource subscriptions stay: the bridge relays them on the session's GET stream), its
/// `serverInfo` (or the bridge's own) and `instructions`.
pub(crate) fn initialize_result(version: &str, discovered: &Value, fallback: &Value) -> Value {
    let mut capabilities = Map::new();
    if let Some(declared) = discovered.get("capabilities").and_then(Value::as_object) {
        for (key, value) in declared {
            if key == "tasks" {
                continue;
            }
            let mut value = value.clone();
            // The tasks extension, declared under `extensions` too: a 2025 client cannot use it.
            if key == "extensions"
                && let Some(extensions) = value.as_object_mut()
            {
                extensions.remove(TASKS_EXTENSION);
                if extensions.is_empty() {
                    continue;
                }
            }
            capabilities.insert(key.clone(), value);
        }
    }
    let server_info = discovered
        .pointer(&format!("/_meta/{}", META_SERVER_INFO.replace('/', "~1")))
        .or_else(|| discovered.get("serverInfo"))
        .filter(|info| info.get("name").is_some_and(Value::is_string))
        .filter(|info| info.get("version").is_some_and(Value::is_string))
        .unwrap_or(fallback);
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = discovered.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    result
}

/// How long a discovery result may be kept: `Some` only for a public one with a positive TTL.
pub(crate) fn discovery_ttl(discovered: &Value) -> Option<std::time::Duration> {
    let public = discovered.get("cacheScope").and_then(Value::as_str) == Some("public");
    let ttl = discovered.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
    (public && ttl > 0).then(|| std::time::Duration::from_millis(ttl))
}

/// A complete 2026 result in its 2025 shape: no `resultType`, `ttlMs` or `cacheScope`; a
/// `structuredContent` that is not an object becomes a text block.
pub(crate) fn legacy_result(mut result: Map<String, Value>) -> Map<String, Value> {
    result.remove("resultType");
    result.remove("ttlMs");
    result.remove("cacheScope");
    if result
        .get("structuredContent")
        .is_some_and(|s| !s.is_object())
        && let Some(structured) = result.remove("structuredContent")
    {
        let text = json!({"type": "text", "text": structured.to_string()});
        match result.get_mut("content").and_then(Value::as_array_mut) {
            Some(content) => content.push(text),
            None => {
                result.insert("content".to_owned(), json!([text]));
            }
        }
    }
    if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
            if tool.get("outputSchema").is_some_and(|s| !s.is_object()) {
                tool.remove("outputSchema");
            }
        }
    }
    result
}

/// An inner JSON-RPC error as a 2025 client gets it: `-32021` (the client lacks a capability),
/// `-32020` and `-32022` (the bridge's own request was wrong) become `-32603`; the rest as it is.
pub(crate) fn legacy_error(mut error: Map<String, Value>) -> Map<String, Value> {
    let code = error.get("code").and_then(Value::as_i64);
    if matches!(code, Some(-32022..=-32020)) {
        error.insert(
            "code".to_owned(),
            json!(crate::wire::jsonrpc::INTERNAL_ERROR),
        );
    }
    error
}

/// The kinds of input request a 2025 client's `capabilities` declare, read once for a call.
pub(crate) fn declared(capabilities: &Value) -> Declared {
    Declared::of(&modern_capabilities(capabilities))
}

/// What a client that `declared` lacks for an input request of `kind` ([`InputKind::of`]), as a
/// capability path (`elicitation.url`); `None` when it declared it.
pub(crate) fn missing_capability(
    kind: Option<InputKind>,
    declared: Declared,
) -> Option<&'static str> {
    match kind {
        Some(kind) if declared.has(kind) => None,
        Some(InputKind::Form) => Some("elicitation.form"),
        Some(InputKind::Url) => Some("elicitation.url"),
        Some(InputKind::Sampling { tools: false }) => Some("sampling"),
        Some(InputKind::Sampling { tools: true }) => Some("sampling.tools"),
        Some(InputKind::Roots) => Some("roots"),
        None => Some("a kind of input request the bridge does not know"),
    }
}

/// An input request in the shape a `version` client takes it. For 2025-06-18: no `mode`, titled
/// single-select `oneOf` as `enum` + `enumNames`; what it cannot express (URL mode, multi-select,
/// content arrays, tools in sampling) is refused with the reason.
pub(crate) fn down_level(mut request: Value, version: &str) -> Result<Value, String> {
    if !before_2025_11_25(version) {
        return Ok(request);
    }
    let method = request.get("method").and_then(Value::as_str).unwrap_or("");
    match method {
        "elicitation/create" => {
            let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) else {
                return Ok(request);
            };
            if params.get("mode").and_then(Value::as_str) == Some("url") {
                return Err(format!(
                    "URL-mode elicitation needs protocol 2025-11-25; the client speaks {version}"
                ));
            }
            params.remove("mode");
            if let Some(properties) = params
                .get_mut("requestedSchema")
                .and_then(|s| s.get_mut("properties"))
                .and_then(Value::as_object_mut)
            {
                for (name, property) in properties.iter_mut() {
                    down_level_property(name, property, version)?;
                }
            }
        }
        "sampling/createMessage" => {
            let params = request.get("params");
            let tools = params.and_then(|p| p.get("tools")).is_some()
                || params.and_then(|p| p.get("toolChoice")).is_some();
            let arrays = params
                .and_then(|p| p.get("messages"))
                .and_then(Value::as_array)
                .is_some_and(|m| {
                    m.iter()
                        .any(|m| m.get("content").is_some_and(Value::is_array))
                });
            if tools || arrays {
                return Err(format!(
                    "sampling with tools or content arrays needs protocol 2025-11-25; the client speaks {version}"
                ));
            }
        }
        _ => {}
    }
    Ok(request)
}

fn down_level_property(name: &str, property: &mut Value, version: &str) -> Result<(), String> {
    let Some(schema) = property.as_object_mut() else {
        return Ok(());
    };
    if schema.get("type").and_then(Value::as_str) == Some("array") {
        return Err(format!(
            "the multi-select field '{name}' needs protocol 2025-11-25; the client speaks {version}"
        ));
    }
    if let Some(Value::Array(options)) = schema.remove("oneOf") {
        let mut values = Vec::new();
        let mut names = Vec::new();
        for option in &options {
            let Some(value) = option.get("const") else {
                return Err(format!("the field '{name}' has an option without a value"));
            };
            values.push(value.clone());
            names.push(
                option
                    .get("title")
                    .cloned()
                    .unwrap_or_else(|| value.clone()),
            );
        }
        schema.insert("enum".to_owned(), Value::Array(values));
        schema.insert("enumNames".to_owned(), Value::Array(names));
    }
    Ok(())
}

/// A `tools/call` result saying why the bridge could not finish the call.
pub(crate) fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialize_never_answers_2026() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
    }

    #[test]
    fn capabilities_translate() {
        let legacy = json!({"elicitation": {}, "sampling": {"tools": {}},
            "roots": {"listChanged": true}, "tasks": {"list": {}}});
        assert_eq!(
            modern_capabilities(&legacy),
            json!({"elicitation": {}, "sampling": {"tools": {}}, "roots": {}})
        );
    }

    #[test]
    fn only_2025_06_18_and_2025_03_26_predate_2025_11_25() {
        assert!(!before_2025_11_25("2025-11-25") && !before_2025_11_25("2026-07-28"));
        assert!(before_2025_11_25("2025-06-18") && before_2025_11_25("2025-03-26"));
    }

    #[test]
    fn params_gain_the_2026_meta() {
        let client = Client {
            capabilities: &json!({"elicitation": {}}),
            info: &json!({"name": "h", "version": "1"}),
            log_level: Some("debug"),
        };
        let params = json!({"name": "t", "_meta": {"progressToken": 3,
            "io.modelcontextprotocol/protocolVersion": "x"}});
        let out = Value::Object(modern_params(Some(&params), &client));
        assert_eq!(out["_meta"]["progressToken"], 3);
        assert_eq!(out["_meta"][META_VERSION], MRTR_VERSION);
        assert_eq!(out["_meta"][META_LOG_LEVEL], "debug");
        assert_eq!(out["_meta"][META_CAPABILITIES], json!({"elicitation": {}}));
    }

    #[test]
    fn initialize_result_from_discovery() {
        let discovered = json!({"capabilities": {"tools": {"listChanged": true}, "tasks": {},
                "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "instructions": "hi", "_meta": {META_SERVER_INFO: {"name": "s", "version": "2"}}});
        let fallback = json!({"name": "b", "version": "0"});
        assert_eq!(
            initialize_result("2025-11-25", &discovered, &fallback),
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "s", "version": "2"}, "instructions": "hi"})
        );
        assert_eq!(
            initialize_result("2025-11-25", &json!({}), &fallback)["serverInfo"],
            fallback
        );
    }

    #[test]
    fn results_lose_their_2026_fields() {
        let result = json!({"resultType": "complete", "ttlMs": 5, "cacheScope": "public",
            "content": [], "structuredContent": [1]});
        let Value::Object(result) = result else {
            unreachable!()
        };
        let out = Value::Object(legacy_result(result));
        assert_eq!(out, json!({"content": [{"type": "text", "text": "[1]"}]}));
    }

    #[test]
    fn capability_checks_name_what_is_missing() {
        let url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x"}});
        let form = json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {}}});
        let missing = |request: &Value, capabilities: Value| {
            missing_capability(InputKind::of(request), declared(&capabilities))
        };
        assert_eq!(
            missing(&url, json!({"elicitation": {}})),
            Some("elicitation.url")
        );
        assert_eq!(missing(&form, json!({"elicitation": {}})), None);
        assert_eq!(missing(&form, json!({})), Some("elicitation.form"));
        let roots = json!({"method": "roots/list"});
        assert_eq!(
            missing(&roots, json!({"roots": {"listChanged": true}})),
            None
        );
        assert_eq!(
            missing(&json!({"method": "ping"}), json!({"elicitation": {}})),
            Some("a kind of input request the bridge does not know")
        );
    }

    #[test]
    fn forms_down_level_for_2025_06_18() {
        let form = json!({"method": "elicitation/create", "params": {"mode": "form", "message": "m",
            "requestedSchema": {"type": "object", "properties": {
                "pick": {"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]}}}}});
        let out = down_level(form.clone(), V_2025_06_18).unwrap();
        assert!(out["params"].get("mode").is_none());
        assert_eq!(
            out["params"]["requestedSchema"]["properties"]["pick"],
            json!({"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"]})
        );
        assert_eq!(down_level(form.clone(), "2025-11-25").unwrap(), form);
        let multi = json!({"method": "elicitation/create", "params": {"message": "m",
            "requestedSchema": {"type": "object", "properties": {"many": {"type": "array", "items": {"enum": ["a"]}}}}}});
        assert!(
            down_level(multi, V_2025_06_18)
                .unwrap_err()
                .contains("many")
        );
        let url = json!({"method": "elicitation/create", "params": {"mode": "url", "message": "m", "url": "https://x"}});
        assert!(down_level(url, V_2025_06_18).is_err());
    }

    #[test]
    fn errors_map_for_legacy_clients() {
        let Value::Object(e) =
            json!({"code": -32021, "message": "m", "data": {"requiredCapabilities": {}}})
        else {
            unreachable!()
        };
        assert_eq!(legacy_error(e)["code"], -32603);
        let Value::Object(e) = json!({"code": -32601, "message": "m"}) else {
            unreachable!()
        };
        assert_eq!(legacy_error(e)["code"], -32601);
    }
}
