//! The upstream's tools: each one's definition as last listed (what a call's approval is bound
//! to, and the `inputSchema` a gated call's arguments must match) and as first listed (in Redis
//! when `[state] redis` is set, so that every replica and restart remembers the same).
//!
//! Every `tools/list` answer that passes through the proxy is read ([`Catalog::observe`]), and so is the
//! proxy's own listing at start and at each reload. A tool whose definition (description,
//! `inputSchema`, annotations) differs from the one first listed is *changed*: a rug pull, or
//! an upgrade nobody reviewed. `[upstream] on_tool_change` says what it gets (see
//! [`gates::changed`](crate::gates::changed)) until a reload accepts what is listed then as
//! the new first definitions. Each change is logged and counted in `/metrics`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value, json};
use sha2::Digest as _;

use crate::metrics::Metrics;
use crate::shown;

/// Tools remembered at most (as listed and as first listed); past it, new names are not kept,
/// so their calls are treated as unlisted.
pub const MAX_TOOLS: usize = 4096;
/// A `tools/list` answer read at most this large; a larger one passes unread.
pub const MAX_LISTING_BYTES: usize = 16 * 1024 * 1024;

/// One tool as last listed.
#[derive(Clone)]
struct Tool {
    definition: Value,
    digest: String,
    /// Its `inputSchema` compiled, or why it cannot be.
    validator: Result<Arc<jsonschema::Validator>, String>,
}

#[derive(Default)]
struct Known {
    current: BTreeMap<String, Tool>,
    first: BTreeMap<String, Value>,
    /// The tools whose definition changed since first listed: the first definition.
    changed: BTreeMap<String, Value>,
}

/// What the proxy knows of the upstream's tools.
pub struct Catalog {
    known: RwLock<Known>,
    redis: Option<(redis::aio::ConnectionManager, String)>,
    metrics: Metrics,
}

/// A change found in a listing.
pub struct Change {
    pub tool: String,
    pub before: Value,
    pub after: Value,
}

impl Catalog {
    /// An empty catalog; with `redis`, first definitions are kept under `key` there.
    pub fn new(redis: Option<(redis::aio::ConnectionManager, String)>, metrics: Metrics) -> Self {
        Self {
            known: RwLock::default(),
            redis,
            metrics,
        }
    }

    /// Reads the first definitions Redis remembers.
    ///
    /// # Errors
    ///
    /// When Redis cannot be read: the proxy does not start without what it remembers.
    pub async fn load(&self) -> Result<(), crate::error::Error> {
        let Some((redis, key)) = &self.redis else {
            return Ok(());
        };
        let mut redis = redis.clone();
        let stored: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut redis)
            .await?;
        let mut known = self.write();
        for (name, text) in stored.into_iter().take(MAX_TOOLS) {
            if let Ok(definition) = serde_json::from_str(&text) {
                known.first.insert(name, definition);
            }
        }
        Ok(())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.known.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads one `tools/list` result; the changes it shows that were not known before.
    pub fn observe(&self, result: &Value) -> Vec<Change> {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut remember = Vec::new();
        {
            let mut known = self.write();
            for tool in tools {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let definition = definition(tool);
                let digest = digest(&definition);
                let full = known.current.len() >= MAX_TOOLS && !known.current.contains_key(name);
                if full {
                    tracing::warn!(tool = %name, "more than {MAX_TOOLS} tools: this one is not remembered");
                    continue;
                }
                if known.current.get(name).is_none_or(|t| t.digest != digest) {
                    let validator = compile(&definition["inputSchema"]);
                    known.current.insert(
                        name.to_owned(),
                        Tool {
                            definition: definition.clone(),
                            digest,
                            validator,
                        },
                    );
                }
                match known.first.get(name) {
                    None => {
                        if known.first.len() < MAX_TOOLS {
                            known.first.insert(name.to_owned(), definition.clone());
                            remember.push((name.to_owned(), definition));
                        }
                    }
                    Some(first) if *first != definition && !known.changed.contains_key(name) => {
                        let first = first.clone();
                        known.changed.insert(name.to_owned(), first.clone());
                        found.push(Change {
                            tool: name.to_owned(),
                            before: first,
                            after: definition,
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        for change in &found {
            tracing::warn!(
                tool = %change.tool,
                "the upstream changed a tool's definition since it was first listed"
            );
            self.metrics.tool_changed();
        }
        self.store(remember, false);
        found
    }

    /// Writes first definitions to Redis (in the background: the memory is what decides); with
    /// `replace`, over what it holds.
    fn store(&self, definitions: Vec<(String, Value)>, replace: bool) {
        let Some((redis, key)) = &self.redis else {
            return;
        };
        if definitions.is_empty() && !replace {
            return;
        }
        let (mut redis, key) = (redis.clone(), key.clone());
        tokio::spawn(async move {
            let mut pipe = redis::pipe();
            if replace {
                pipe.cmd("DEL").arg(&key).ignore();
            }
            for (name, definition) in &definitions {
                let command = if replace { "HSET" } else { "HSETNX" };
                pipe.cmd(command)
                    .arg(&key)
                    .arg(name)
                    .arg(definition.to_string())
                    .ignore();
            }
            let done: Result<(), redis::RedisError> = pipe.query_async(&mut redis).await;
            if let Err(error) = done {
                tracing::warn!(%error, "cannot remember the tools' first definitions in Redis");
            }
        });
    }

    /// Takes the definitions listed now as the first ones (a reload accepts them).
    pub fn accept(&self) {
        let definitions: Vec<(String, Value)> = {
            let mut known = self.write();
            let current: Vec<(String, Value)> = known
                .current
                .iter()
                .map(|(name, tool)| (name.clone(), tool.definition.clone()))
                .collect();
            known.first = current.iter().cloned().collect();
            known.changed.clear();
            current
        };
        self.store(definitions, true);
    }

    /// `tool`'s definition as last listed (description, `inputSchema`, annotations).
    pub fn definition_of(&self, tool: &str) -> Option<Value> {
        self.read().current.get(tool).map(|t| t.definition.clone())
    }

    /// What a call of `tool` is bound to: its definition as last listed.
    pub fn digest_of(&self, tool: &str) -> String {
        self.read()
            .current
            .get(tool)
            .map_or_else(|| "unlisted".to_owned(), |t| t.digest.clone())
    }

    /// Whether `arguments` match `tool`'s `inputSchema` as last listed; a tool not listed has
    /// none to match.
    ///
    /// # Errors
    ///
    /// The schema's first error, made safe to show, or that the schema cannot be compiled.
    pub fn check_arguments(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        let validator = match self.read().current.get(tool) {
            None => return Ok(()),
            Some(t) => t.validator.clone(),
        };
        let empty = Value::Object(Map::new());
        let arguments = if arguments.is_null() {
            &empty
        } else {
            arguments
        };
        let validator = validator.map_err(|why| {
            format!("Refused before asking: the inputSchema of {tool} cannot be used ({why}).")
        })?;
        match validator.validate(arguments) {
            Ok(()) => Ok(()),
            Err(error) => {
                let path = error.instance_path().to_string();
                let text = format!(
                    "{}{}",
                    if path.is_empty() {
                        String::new()
                    } else {
                        format!("{path}: ")
                    },
                    error
                );
                Err(format!(
                    "Refused before asking: the arguments do not match the inputSchema of {}: {}",
                    shown::quoted(tool, 128),
                    shown::unquoted(&text, 500)
                ))
            }
        }
    }

    /// The tools changed since first listed: their first definition, and the last listed.
    pub fn changed(&self) -> Vec<Change> {
        let known = self.read();
        known
            .changed
            .iter()
            .map(|(tool, before)| Change {
                tool: tool.clone(),
                before: before.clone(),
                after: known
                    .current
                    .get(tool)
                    .map_or(Value::Null, |t| t.definition.clone()),
            })
            .collect()
    }

    /// Whether `tool` changed since first listed.
    pub fn is_changed(&self, tool: &str) -> bool {
        self.read().changed.contains_key(tool)
    }
}

/// What a tool's approval is bound to: its description, `inputSchema` and annotations.
fn definition(tool: &Value) -> Value {
    json!({
        "description": tool.get("description").cloned().unwrap_or(Value::Null),
        "inputSchema": tool.get("inputSchema").cloned().unwrap_or(Value::Null),
        "annotations": tool.get("annotations").cloned().unwrap_or(Value::Null),
    })
}

/// A digest of `value`'s canonical text (keys sorted), hex.
pub fn digest(value: &Value) -> String {
    let mut text = String::new();
    canonical(value, &mut text);
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// `value` as JSON text with every object's keys sorted, whatever order it keeps them in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (at, key) in keys.into_iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&members[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn compile(schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    if schema.is_null() {
        return Err("it has none".to_owned());
    }
    jsonschema::validator_for(schema)
        .map(Arc::new)
        .map_err(|error| shown::unquoted(&error.to_string(), 300))
}

/// Reads a response to `tools/list` (JSON, or an event stream), tells `catalog` what it lists,
/// and with `hide` takes out the tools `catalog` says changed; the body to send on, and the
/// changes found.
pub fn read_listing(
    catalog: &Catalog,
    body: &[u8],
    event_stream: bool,
    hide: bool,
) -> (Option<Vec<u8>>, Vec<Change>) {
    let mut changes = Vec::new();
    let rewritten = edit_messages(body, event_stream, |message| {
        let Some(result) = message.get_mut("result") else {
            return false;
        };
        changes.extend(catalog.observe(result));
        if !hide {
            return false;
        }
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return false;
        };
        let before = tools.len();
        tools.retain(|tool| {
            !tool
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|name| catalog.is_changed(name))
        });
        tools.len() != before
    });
    (rewritten, changes)
}

/// Passes each JSON-RPC message of a response body (JSON, or each event of an event stream) to
/// `edit`, which says whether it changed it: the one editor of the listings the proxy reads
/// (the catalog's, and [`exposure`](crate::exposure)'s). The body to send on when a message
/// changed (an event stream's other events and fields as they were), else `None`: a body that
/// is not JSON, or whose messages `edit` left alone, goes on as it came.
pub fn edit_messages(
    body: &[u8],
    event_stream: bool,
    mut edit: impl FnMut(&mut Value) -> bool,
) -> Option<Vec<u8>> {
    if !event_stream {
        let mut message = serde_json::from_slice::<Value>(body).ok()?;
        let changed = edit(&mut message);
        return changed.then(|| message.to_string().into_bytes());
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut any = false;
    for event in text.split_inclusive("\n\n") {
        let lines: Vec<&str> = event.lines().map(|l| l.trim_end_matches('\r')).collect();
        let data: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        let mut parsed = (!data.is_empty())
            .then(|| serde_json::from_str::<Value>(&data.join("\n")).ok())
            .flatten();
        let rewritten = parsed.as_mut().is_some_and(&mut edit);
        match parsed {
            Some(message) if rewritten => {
                any = true;
                for line in lines.iter().filter(|l| !l.starts_with("data:")) {
                    if !line.is_empty() {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
                out.push_str("data: ");
                out.push_str(&message.to_string());
                out.push_str("\n\n");
            }
            _ => out.push_str(event),
        }
    }
    any.then(|| out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(description: &str) -> Value {
        json!({"tools": [{"name": "echo", "description": description,
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]})
    }

    #[test]
    fn a_changed_definition_is_found_once_until_accepted() {
        let catalog = Catalog::new(None, Metrics::default());
        assert!(catalog.observe(&listing("Echoes")).is_empty());
        let before = catalog.digest_of("echo");
        let changes = catalog.observe(&listing("Echoes, and mails your keys away"));
        assert_eq!(changes.len(), 1);
        assert_ne!(catalog.digest_of("echo"), before);
        assert!(catalog.is_changed("echo"));
        assert!(catalog.observe(&listing("Echoes, and more")).is_empty());
        catalog.accept();
        assert!(!catalog.is_changed("echo"));
        assert_eq!(catalog.digest_of("unknown"), "unlisted");
    }

    #[test]
    fn arguments_are_checked_against_the_listed_schema() {
        let catalog = Catalog::new(None, Metrics::default());
        catalog.observe(&listing("Echoes"));
        assert!(
            catalog
                .check_arguments("echo", &json!({"text": "hi"}))
                .is_ok()
        );
        let error = catalog
            .check_arguments("echo", &json!({"text": 5}))
            .unwrap_err();
        assert!(error.contains("/text"), "{error}");
        assert!(catalog.check_arguments("echo", &Value::Null).is_err());
        assert!(catalog.check_arguments("other", &json!({"x": 1})).is_ok());
    }

    #[test]
    fn a_hidden_tool_leaves_json_and_event_stream_listings() {
        let catalog = Catalog::new(None, Metrics::default());
        catalog.observe(&listing("a"));
        let message = json!({"jsonrpc": "2.0", "id": 1, "result": listing("b")});
        let (body, changes) = read_listing(&catalog, message.to_string().as_bytes(), false, true);
        assert_eq!(changes.len(), 1);
        let body: Value = serde_json::from_slice(&body.unwrap()).unwrap();
        assert_eq!(body["result"]["tools"], json!([]));
        let stream = format!("event: message\ndata: {message}\n\n");
        let (body, _) = read_listing(&catalog, stream.as_bytes(), true, true);
        let body = String::from_utf8(body.unwrap()).unwrap();
        assert!(body.starts_with("event: message\ndata: {"), "{body}");
        assert!(body.contains("\"tools\":[]"), "{body}");
    }
}
