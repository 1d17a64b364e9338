//! The file's `[[gate]]`s made the layer's own [`Gate`]s, checked against what the upstream
//! offers: a name or glob that matches nothing, or a placeholder naming an argument a matched
//! tool does not take, is an error at the gate's line.

use std::collections::BTreeMap;
use std::sync::Arc;

use globset::Glob;
use serde_json::{Map, Value};
use tower_elicitation::{Gate, GateTarget};

use crate::config::{Config, ConfigError, GateSpec, Source};
use crate::flows::{Backends, Check, ConfiguredFlow};

/// What the upstream offers: each tool's (and prompt's) argument names.
#[derive(Debug, Default, Clone)]
pub struct Offered {
    pub tools: BTreeMap<String, Vec<String>>,
    pub prompts: BTreeMap<String, Vec<String>>,
    /// The resources' URIs (each "takes" `uri`, the placeholder a resource gate's message has).
    pub resources: BTreeMap<String, Vec<String>>,
}

/// One gate on one target, as built and as the client will see it.
pub struct Built {
    pub target: GateTarget,
    pub gate: Gate,
    /// `tool write_file` or `prompt p`.
    pub name: String,
    /// The tool's or prompt's own name.
    pub target_name: String,
    /// Which gate of the file: `gate 1 (line 9)`.
    pub label: String,
    pub message: String,
    /// The form's `requestedSchema`, as the client gets it.
    pub schema: String,
}

/// How a `require` rule judges its field.
#[derive(Debug, Clone)]
enum Rule {
    Equals(Value),
    SameAs(String),
}

/// Every gate of `config` on every target it names.
pub fn build(
    source: &Source,
    config: &Config,
    offered: &Offered,
    backends: &Backends,
) -> Result<Vec<Built>, ConfigError> {
    let mut built = Vec::new();
    for (number, spanned) in config.gates.iter().enumerate() {
        let line = source.line_of(spanned.span().start);
        let spec = spanned.get_ref();
        let fail =
            |message: String| source.error(Some(line), format!("gate {}: {message}", number + 1));
        let mut gates = one(spec, offered, backends).map_err(fail)?;
        for gate in &mut gates {
            gate.label = format!("gate {} (line {})", number + 1, line);
        }
        built.extend(gates);
    }
    Ok(built)
}

fn one(spec: &GateSpec, offered: &Offered, backends: &Backends) -> Result<Vec<Built>, String> {
    if spec.tools.is_empty() && spec.prompts.is_empty() && spec.resources.is_empty() {
        return Err("names no `tools`, `prompts` or `resources`".to_owned());
    }
    let flow = flow(spec, backends)?;
    if spec.form.is_empty() && flow.is_none() {
        return Err("has no `form` fields and no `url`: it would ask nothing".to_owned());
    }
    let mut targets = Vec::new();
    for (kind, patterns, names) in [
        ("tool", &spec.tools, &offered.tools),
        ("prompt", &spec.prompts, &offered.prompts),
        ("resource", &spec.resources, &offered.resources),
    ] {
        for pattern in patterns {
            // `prefix*`: every URI under it, listed or not (however the call spells it).
            if let Some(prefix) = pattern.strip_suffix('*')
                && kind == "resource"
                && !prefix.contains(['*', '?', '[', '{'])
            {
                targets.push(("resource prefix", prefix.to_owned(), vec!["uri".to_owned()]));
                continue;
            }
            let matcher = Glob::new(pattern)
                .map_err(|error| format!("{kind} pattern {pattern:?}: {error}"))?
                .compile_matcher();
            let matched: Vec<_> = names
                .iter()
                .filter(|(name, _)| matcher.is_match(name))
                .collect();
            if matched.is_empty() {
                let known: Vec<&str> = names.keys().map(String::as_str).collect();
                return Err(format!(
                    "{kind} {pattern:?} matches nothing the upstream offers ({})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ));
            }
            for (name, arguments) in matched {
                targets.push((kind, name.clone(), arguments.clone()));
            }
        }
    }
    let message = spec.message.clone();
    let mut placeholders = message.as_deref().map(placeholders).unwrap_or_default();
    if let Some(flow) = &flow {
        let check = match &flow.check {
            Check::RedisKey(template) | Check::Http(template) => template,
        };
        placeholders.extend(
            self::placeholders(&flow.url)
                .into_iter()
                .chain(self::placeholders(check))
                .filter(|name| name != "handle"),
        );
    }
    let rules = rules(spec)?;
    for (kind, name, arguments) in &targets {
        let needed = placeholders
            .iter()
            .chain(rules.values().filter_map(|rule| match rule {
                Rule::SameAs(argument) => Some(argument),
                Rule::Equals(_) => None,
            }));
        for argument in needed {
            if !arguments.contains(argument) {
                return Err(format!(
                    "{{{argument}}} names an argument {kind} {name} does not take (it takes {})",
                    if arguments.is_empty() {
                        "none".to_owned()
                    } else {
                        arguments.join(", ")
                    }
                ));
            }
        }
    }
    let required = match &spec.required {
        Some(required) => required.clone(),
        None => rules.keys().cloned().collect(),
    };
    for field in rules.keys().chain(&required) {
        if !spec.form.contains_key(field) {
            return Err(format!("`{field}` is not one of the form's fields"));
        }
    }
    let schema = match &flow {
        Some(flow) => format!("a URL: {}", flow.url),
        None => schema(&spec.form, &required)?,
    };
    let key = spec.key.clone().unwrap_or_else(|| "approval".to_owned());
    let rules = Arc::new(rules);
    let mut built = Vec::new();
    for (kind, name, _) in targets {
        let mut gate = match &flow {
            Some(flow) => Gate::url(key.clone(), flow.clone()),
            None => Gate::form(key.clone(), schema.clone()),
        }
        .map_err(in_the_files_words)?;
        if let Some(message) = message.clone() {
            let resource = kind.starts_with("resource");
            gate = gate.message(move |call| {
                if resource {
                    interpolate(&message, &serde_json::json!({ "uri": call.target() }))
                } else {
                    interpolate(&message, call.arguments())
                }
            });
        }
        if !rules.is_empty() {
            let rules = Arc::clone(&rules);
            gate = gate.require(move |answer, call| allows(&rules, answer, call.arguments()));
        }
        if let Some(hint) = &spec.retry_hint {
            gate = gate.retry_hint(hint.clone());
        }
        if let Some(refusal) = &spec.refusal {
            gate = gate.refusal(refusal.clone());
        }
        if let Some(argument) = &spec.inject_as {
            gate = gate.inject_as(argument.clone());
        }
        let target = match kind {
            "tool" => GateTarget::tool(name.clone()),
            "resource" => GateTarget::resource(name.clone()),
            "resource prefix" => GateTarget::resource_prefix(name.clone()),
            _ => GateTarget::prompt(name.clone()),
        };
        built.push(Built {
            target,
            gate,
            name: format!("{kind} {name}"),
            target_name: name.clone(),
            label: String::new(),
            message: message.clone().unwrap_or_else(|| format!("Allow {name}?")),
            schema: schema.clone(),
        });
    }
    Ok(built)
}

/// The file's URL flow for `spec`, when it is a URL gate.
fn flow(spec: &GateSpec, backends: &Backends) -> Result<Option<ConfiguredFlow>, String> {
    let Some(url) = &spec.url else {
        if spec.complete_when.is_some() {
            return Err("`complete_when` without a `url`".to_owned());
        }
        return Ok(None);
    };
    if !spec.form.is_empty() || !spec.require.is_empty() {
        return Err("a URL gate asks no form: `url` with `form` or `require`".to_owned());
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!("url {url:?} is not an http(s) URL"));
    }
    let check = match spec.complete_when.as_ref().map(|c| (&c.redis_key, &c.http)) {
        Some((Some(key), None)) => {
            if backends.redis.is_none() {
                return Err("complete_when.redis_key needs [state] redis".to_owned());
            }
            Check::RedisKey(key.clone())
        }
        Some((None, Some(http))) => Check::Http(http.clone()),
        _ => {
            return Err(
                "a URL gate needs `complete_when = { redis_key = \"…\" }` or `{ http = \"…\" }`"
                    .to_owned(),
            );
        }
    };
    Ok(Some(ConfiguredFlow {
        url: url.as_str().into(),
        check,
        backends: backends.clone(),
    }))
}

/// The `{argument}` names in a message.
fn placeholders(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) if is_name(&after[..end]) => {
                names.push(after[..end].to_owned());
                rest = &after[end + 1..];
            }
            _ => rest = after,
        }
    }
    names
}

pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The message with each `{argument}` replaced by the call's argument: a string as it is,
/// anything else as JSON; a missing one as nothing.
fn interpolate(template: &str, arguments: &Value) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) if is_name(&after[..end]) => {
                match arguments.get(&after[..end]) {
                    Some(Value::String(text)) => out.push_str(text),
                    Some(other) => out.push_str(&other.to_string()),
                    None => {}
                }
                rest = &after[end + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn rules(spec: &GateSpec) -> Result<BTreeMap<String, Rule>, String> {
    let mut rules = BTreeMap::new();
    for (field, value) in &spec.require {
        let rule = match value {
            toml::Value::String(text) if text.starts_with('{') && text.ends_with('}') => {
                let argument = &text[1..text.len() - 1];
                if !is_name(argument) {
                    return Err(format!("require.{field}: {text:?} is not an {{argument}}"));
                }
                Rule::SameAs(argument.to_owned())
            }
            other => Rule::Equals(
                serde_json::to_value(other).map_err(|error| format!("require.{field}: {error}"))?,
            ),
        };
        rules.insert(field.clone(), rule);
    }
    Ok(rules)
}

fn allows(rules: &BTreeMap<String, Rule>, answer: &Map<String, Value>, arguments: &Value) -> bool {
    rules.iter().all(|(field, rule)| {
        let given = answer.get(field);
        match rule {
            Rule::Equals(value) => given == Some(value),
            Rule::SameAs(argument) => given.is_some() && given == arguments.get(argument),
        }
    })
}

/// The form's schema as JSON text, its fields in the file's order.
fn schema(form: &toml::Table, required: &[String]) -> Result<String, String> {
    let mut properties = Vec::new();
    for (field, value) in form {
        let value =
            serde_json::to_string(value).map_err(|error| format!("form.{field}: {error}"))?;
        let name = serde_json::to_string(field).map_err(|error| error.to_string())?;
        properties.push(format!("{name}: {value}"));
    }
    let required = serde_json::to_string(required).map_err(|error| error.to_string())?;
    Ok(format!(
        r#"{{"type": "object", "properties": {{{}}}, "required": {required}}}"#,
        properties.join(", ")
    ))
}

/// A gate's error in the file's own words: a form schema's mistake named by its `form.FIELD`
/// key (not the schema's JSON Pointer, nor the internal gate key), with the reason, which lists
/// what is allowed.
fn in_the_files_words(error: tower_elicitation::GateError) -> String {
    match &error {
        tower_elicitation::GateError::Schema { error, .. } => {
            let mut parts = error.path.trim_start_matches('/').split('/');
            let words = match (parts.next(), parts.next()) {
                (Some("properties"), Some(field)) => {
                    let rest: Vec<&str> = parts.collect();
                    let key = std::iter::once(format!("form.{field}"))
                        .chain(rest.iter().map(|part| (*part).to_owned()))
                        .collect::<Vec<_>>()
                        .join(".");
                    format!("`{key}`")
                }
                _ => "the form".to_owned(),
            };
            format!("{words}: {}", error.reason)
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn offered() -> Offered {
        let mut offered = Offered::default();
        offered
            .tools
            .insert("write_file".into(), vec!["path".into(), "content".into()]);
        offered
            .tools
            .insert("delete_branch".into(), vec!["name".into()]);
        offered
            .tools
            .insert("delete_tag".into(), vec!["name".into()]);
        offered
            .tools
            .insert("read_file".into(), vec!["path".into()]);
        offered
            .resources
            .insert("demo://docs/a.md".into(), vec!["uri".into()]);
        offered
    }

    fn built(text: &str) -> Result<Vec<Built>, ConfigError> {
        let source = Source {
            path: PathBuf::from("g.toml"),
            text: format!("[upstream]\ncommand = [\"x\"]\n{text}"),
        };
        let config = source.parse()?;
        let backends = Backends {
            redis: None,
            http: reqwest::Client::new(),
        };
        build(&source, &config, &offered(), &backends)
    }

    #[test]
    fn globs_expand_to_the_tools_they_match_and_forms_keep_their_order() {
        let gates = built(
            r#"
[[gate]]
tools = ["delete_*"]
message = "Type the branch name ({name}) to delete it"
form.confirm = { type = "string", title = "Branch name" }
form.why = { type = "string" }
require = { confirm = "{name}" }
retry_hint = "That is not the branch name."
"#,
        )
        .unwrap();
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["tool delete_branch", "tool delete_tag"]);
        assert_eq!(
            gates[0].schema,
            r#"{"type": "object", "properties": {"confirm": {"type":"string","title":"Branch name"}, "why": {"type":"string"}}, "required": ["confirm"]}"#
        );
    }

    #[test]
    fn a_gate_matching_nothing_or_a_placeholder_no_tool_takes_is_an_error_at_its_line() {
        let error =
            built("\n[[gate]]\ntools = [\"move_*\"]\nform.approve = { type = \"boolean\" }\n")
                .err()
                .unwrap()
                .to_string();
        assert!(
            error.starts_with("g.toml:4: gate 1: tool \"move_*\" matches nothing"),
            "{error}"
        );

        let error = built("[[gate]]\ntools = [\"write_file\"]\nmessage = \"Write {pth}?\"\nform.approve = { type = \"boolean\" }\n")
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains(
                "{pth} names an argument tool write_file does not take (it takes path, content)"
            ),
            "{error}"
        );

        let error = built("[[gate]]\ntools = [\"write_file\"]\nform.approve = { type = \"boolean\" }\nrequire = { aprove = true }\n")
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("`aprove` is not one of the form's fields"),
            "{error}"
        );
    }

    #[test]
    fn a_url_gate_needs_a_completion_check_it_can_reach_and_no_form() {
        let err = |text: &str| built(text).err().unwrap().to_string();
        let url = "[[gate]]\ntools = [\"write_file\"]\nurl = \"https://a.example/{handle}\"\n";
        assert!(err(url).contains("needs `complete_when"), "{}", err(url));
        let redis = format!("{url}complete_when = {{ redis_key = \"f:{{handle}}\" }}\n");
        assert!(
            err(&redis).contains("needs [state] redis"),
            "{}",
            err(&redis)
        );
        let form = format!(
            "{url}complete_when = {{ http = \"http://c/{{handle}}\" }}\nform.a = {{ type = \"boolean\" }}\n"
        );
        assert!(err(&form).contains("asks no form"), "{}", err(&form));
        let typo = "[[gate]]\ntools = [\"write_file\"]\nurl = \"https://a.example/{pth}\"\ncomplete_when = { http = \"http://c/{handle}\" }\n";
        assert!(
            err(typo).contains("{pth} names an argument tool write_file does not take"),
            "{}",
            err(typo)
        );
        let good = built("[[gate]]\ntools = [\"write_file\"]\nurl = \"https://a.example/{handle}?p={path}\"\ncomplete_when = { http = \"http://c/{handle}\" }\n").unwrap();
        assert_eq!(good[0].schema, "a URL: https://a.example/{handle}?p={path}");
    }

    #[test]
    fn resource_patterns_are_listed_uris_or_prefixes() {
        let gates = built("[[gate]]\nresources = [\"demo://d?cs/*.md\", \"file:///srv/secret/*\"]\nmessage = \"Read {uri}?\"\nform.approve = { type = \"boolean\" }\n").unwrap();
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "resource demo://docs/a.md",
                "resource prefix file:///srv/secret/"
            ]
        );
        let error = built("[[gate]]\nresources = [\"demo://docs/a.md\"]\nmessage = \"{path}\"\nform.approve = { type = \"boolean\" }\n")
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains(
                "{path} names an argument resource demo://docs/a.md does not take (it takes uri)"
            ),
            "{error}"
        );
    }

    #[test]
    fn messages_interpolate_and_rules_judge() {
        let call = serde_json::json!({"path": "/srv/a.txt", "n": 3});
        assert_eq!(
            interpolate("Write {n} to {path}? {x} {not a name}", &call),
            "Write 3 to /srv/a.txt?  {not a name}"
        );
        let mut rules = BTreeMap::new();
        rules.insert("approve".to_owned(), Rule::Equals(Value::Bool(true)));
        rules.insert("confirm".to_owned(), Rule::SameAs("path".to_owned()));
        let answer = |approve: bool, confirm: &str| {
            serde_json::json!({"approve": approve, "confirm": confirm})
                .as_object()
                .cloned()
                .unwrap()
        };
        assert!(allows(&rules, &answer(true, "/srv/a.txt"), &call));
        assert!(!allows(&rules, &answer(false, "/srv/a.txt"), &call));
        assert!(!allows(&rules, &answer(true, "/srv/b.txt"), &call));
    }
}
