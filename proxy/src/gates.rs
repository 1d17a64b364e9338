//! The file's `[[gate]]`s made the layer's own [`Gate`]s. Each name, glob and resource pattern
//! becomes one target the layer matches on every call, against the call's own name or URI: a
//! tool the server adds later, or accepts without listing it, is gated as soon as it matches.
//! What the upstream lists at start only checks the file: a placeholder naming an argument a
//! listed tool does not take is an error at the gate's line; a pattern that matches nothing
//! listed is a warning (`--check` prints it).
//!
//! Every gate shows the call's values made safe ([`shown`]), refuses before asking a tool call
//! whose arguments its `inputSchema` refuses, and binds its approval to the gate's own text and
//! to the tool's definition as last listed ([`Catalog`]). A tool gate also gates the prompts of
//! the same names, unless `cover_prompts = false`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use tower_elicitation::{Gate, GateCall, GateTarget};

use crate::approvals::ApprovalFlow;
use crate::catalog::{Catalog, Change};
use crate::config::{Config, ConfigError, GateSpec, OnToolChange, Source};
use crate::flows::{Backends, Check, ConfiguredFlow};
use crate::policy::{self, Action, Condition, Policy, Rule};
use crate::shown;
use crate::targets::{self, Kind};
use crate::template;

/// The key of the question a changed tool asks (`on_tool_change = "ask"`), which the file's
/// gates may not use.
pub const TOOL_CHANGE_KEY: &str = "tool-change";

/// What the upstream offers: each tool's (and prompt's) argument names.
#[derive(Debug, Default, Clone)]
pub struct Offered {
    pub tools: BTreeMap<String, Vec<String>>,
    pub prompts: BTreeMap<String, Vec<String>>,
    /// The resources' URIs (each "takes" `uri`, the placeholder a resource gate's message has).
    pub resources: BTreeMap<String, Vec<String>>,
    /// A sample of each tool's arguments, typed as its `inputSchema` says: what a condition is
    /// tried on when the file is read.
    pub samples: BTreeMap<String, Value>,
}

impl Offered {
    /// What is listed of `kind`: each name (a resource's URI) with the arguments it takes.
    pub fn names(&self, kind: Kind) -> &BTreeMap<String, Vec<String>> {
        match kind {
            Kind::Tool => &self.tools,
            Kind::Prompt => &self.prompts,
            Kind::Resource => &self.resources,
        }
    }
}

/// One gate on one target, as built and as the client will see it.
pub struct Built {
    pub target: GateTarget,
    pub gate: Gate,
    pub kind: Kind,
    /// The tool's or prompt's own name, or the pattern.
    pub target_name: String,
    /// What the upstream lists now that the target matches.
    pub listed: Vec<String>,
    /// Which gate of the file: `gate 1 (line 9)`.
    pub label: String,
    pub message: String,
    /// The form's `requestedSchema`, as the client gets it.
    pub schema: String,
    /// A prompt gated because a tool of its name is: left out, not refused, when another gate
    /// of the same key gates that prompt already.
    pub covered_prompt: bool,
}

/// Every gate of the file, the order they decide in, and what `--check` warns of.
pub struct Gates {
    pub built: Vec<Built>,
    pub policy: Arc<Policy>,
    pub warnings: Vec<String>,
}

/// How a `require` entry judges its field.
#[derive(Debug, Clone)]
enum Requirement {
    Equals(Value),
    SameAs(String),
}

/// Every gate of `config` on every target it names, each deciding the calls the file's order
/// gives it ([`policy`]).
pub fn build(
    source: &Source,
    config: &Config,
    offered: &Offered,
    backends: &Backends,
    catalog: &Arc<Catalog>,
) -> Result<Gates, ConfigError> {
    let mut rules = Vec::new();
    let mut each = Vec::new();
    let mut warnings = Vec::new();
    let mut mistakes = Vec::new();
    for (number, spanned) in config.gates.iter().enumerate() {
        let line = source.line_of(spanned.span().start);
        let spec = spanned.get_ref();
        let label = format!("gate {} (line {})", number + 1, line);
        let (mut built, found, mut rule) = match one(spec, offered, backends, catalog) {
            Ok(one) => one,
            Err(message) => {
                // Every gate's mistake, not only the first.
                mistakes.push(source.error(Some(line), format!("gate {}: {message}", number + 1)));
                continue;
            }
        };
        for gate in &mut built {
            gate.label = label.clone();
        }
        rule.label = label.clone();
        warnings.extend(found.into_iter().map(|w| format!("{label}: {w}")));
        each.push(built);
        rules.push(rule);
    }
    ConfigError::gather(mistakes)?;
    warnings.extend(shadowed(&rules, offered));
    let policy = Arc::new(Policy { rules });
    let mut built = Vec::new();
    for (index, gates) in each.into_iter().enumerate() {
        let rule = &policy.rules[index];
        let denial: Arc<str> = match &config.gates[index].get_ref().refusal {
            Some(text) if rule.action == Action::Deny => text.as_str().into(),
            _ => format!(
                "Not run: {} of the proxy's file refuses this call.",
                rule.label
            )
            .into(),
        };
        let by_approver = config.gates[index].get_ref().approvers.as_deref() == Some("url");
        built.extend(gates.into_iter().map(|mut gate| {
            let condition = policy::gate_condition(&policy, index, Arc::clone(&denial));
            gate.gate = if by_approver {
                let approvals = Arc::clone(&backends.approvals);
                let label = rule.label.clone();
                gate.gate.when(move |call| {
                    let asks = condition(call)?;
                    match approvals.denied_by(call) {
                        Some(by) if asks => Err(policy::denied_by_approver(call, &label, &by)),
                        _ => Ok(asks),
                    }
                })
            } else {
                gate.gate.when(condition)
            };
            gate
        }));
    }
    Ok(Gates {
        built,
        policy,
        warnings,
    })
}

/// What `--check` ends with: how many gates the file has, and how many of what the upstream
/// lists now they apply to (`3 gates on 5 tools and 1 prompt`).
pub fn summary(gates: usize, built: &[Built]) -> String {
    let mut counts = Vec::new();
    for kind in Kind::ALL {
        let names: std::collections::BTreeSet<&str> = built
            .iter()
            .filter(|b| b.kind == kind)
            .flat_map(|b| b.listed.iter().map(String::as_str))
            .collect();
        match names.len() {
            0 => {}
            1 => counts.push(format!("1 {kind}")),
            n => counts.push(format!("{n} {}", kind.plural())),
        }
    }
    let gates = match gates {
        1 => "1 gate".to_owned(),
        n => format!("{n} gates"),
    };
    let on = match counts.as_slice() {
        [] => "on nothing the upstream lists now".to_owned(),
        [one] => format!("on {one}"),
        [rest @ .., last] => format!("on {} and {last}", rest.join(", ")),
    };
    format!("{gates} {on}")
}

/// The rules that never take part in a listed call's decision: an earlier rule without a
/// condition matches every such call first, and decides it (`deny`, `allow`) or asks under the
/// same key. (An earlier `ask` does not hide a later `deny` or `allow` this way: those end the
/// reading, as a warning would not say.)
fn shadowed(rules: &[Rule], offered: &Offered) -> Vec<String> {
    let mut warnings = Vec::new();
    for (at, rule) in rules.iter().enumerate() {
        for (method, target, pattern) in &rule.targets {
            let listed: Vec<&String> = offered
                .names(Kind::of_method(method))
                .keys()
                .filter(|name| target.applies_to(method, name))
                .collect();
            let first = listed.iter().find_map(|name| {
                rules[..at]
                    .iter()
                    .find(|earlier| {
                        earlier.when.is_none()
                            && (earlier.action != Action::Ask
                                || (rule.action == Action::Ask && earlier.key == rule.key))
                            && earlier
                                .targets
                                .iter()
                                .any(|(m, t, _)| m == method && t.applies_to(method, name))
                    })
                    .filter(|earlier| {
                        listed.iter().all(|name| {
                            earlier
                                .targets
                                .iter()
                                .any(|(m, t, _)| m == method && t.applies_to(method, name))
                        })
                    })
            });
            if let Some(earlier) = first {
                warnings.push(format!(
                    "{}: {pattern:?} never decides a call: {} (no `when`) matches each call of it first",
                    rule.label, earlier.label
                ));
            }
        }
    }
    warnings
}

/// The gates the tools changed since first listed get under `mode`.
pub fn changed(catalog: &Arc<Catalog>, mode: OnToolChange) -> Vec<Built> {
    if mode == OnToolChange::Allow {
        return Vec::new();
    }
    let schema = r#"{"type": "object", "properties": {"approve": {"type": "boolean", "title": "Run it anyway"}}, "required": ["approve"]}"#;
    let mut built = Vec::new();
    for change in catalog.changed() {
        let Ok(gate) = Gate::form(TOOL_CHANGE_KEY, schema) else {
            continue;
        };
        let summary = change_summary(&change);
        let message = summary.clone();
        let bound = Arc::clone(catalog);
        let mut gate = gate
            .message(move |call| format!("{message}\n\n{}", shown::arguments(call.arguments())))
            .require(|answer, _| answer.get("approve") == Some(&Value::Bool(true)))
            .refusal(format!(
                "Not run: the server changed the tool {} since it was approved.",
                shown::quoted(&change.tool, 128)
            ))
            .bound_to(move |call| bound.digest_of(call.target()));
        if mode == OnToolChange::Hide {
            let tool = change.tool.clone();
            gate = gate.check_call(move |_| {
                Err(format!(
                    "The server changed the tool {} since it was first listed: it is hidden until the operator reloads the proxy's config.",
                    shown::quoted(&tool, 128)
                ))
            });
        }
        built.push(Built {
            target: GateTarget::tool(change.tool.clone()),
            gate,
            kind: Kind::Tool,
            target_name: change.tool.clone(),
            listed: vec![change.tool.clone()],
            label: "on_tool_change".to_owned(),
            message: summary,
            schema: schema.to_owned(),
            covered_prompt: false,
        });
    }
    built
}

/// What changed in a tool, for the person asked.
fn change_summary(change: &Change) -> String {
    let mut text = format!(
        "The server changed the tool {} since it was first listed, and the operator has not accepted the change.",
        shown::quoted(&change.tool, 128)
    );
    let description = |definition: &Value| match &definition["description"] {
        Value::Null => "none".to_owned(),
        other => shown::value(other, 500),
    };
    if change.before["description"] != change.after["description"] {
        text.push_str(&format!(
            "\nDescription was: {}\nDescription is now: {}",
            description(&change.before),
            description(&change.after)
        ));
    }
    for (member, name) in [
        ("inputSchema", "Input schema"),
        ("annotations", "Annotations"),
    ] {
        if change.before[member] != change.after[member] {
            text.push_str(&format!(
                "\n{name} was: {}\n{name} is now: {}",
                shown::value(&change.before[member], 500),
                shown::value(&change.after[member], 500)
            ));
        }
    }
    text.push_str("\nRun this call anyway?");
    text
}

/// One target of a gate: what it names, and what the upstream lists now that it matches.
struct Target {
    kind: Kind,
    target: GateTarget,
    /// The file's name, glob or URI pattern.
    pattern: String,
    /// What the upstream lists now that the target matches.
    listed: Vec<String>,
    /// A prompt gated because a tool of its name is (`cover_prompts`).
    covered: bool,
}

/// What one gate asks, the same on each of its targets.
struct Question {
    key: String,
    /// The URL flow, for a URL gate.
    flow: Option<ConfiguredFlow>,
    /// `approvers = "url"`: another person answers, on the approval page.
    by_approver: bool,
    show_arguments: bool,
    message: Option<String>,
    /// The form's `requestedSchema`, or what stands for it (`--check` prints it).
    schema: String,
    rules: Arc<BTreeMap<String, Requirement>>,
    /// The gate as written, digested: a reload that changes it asks again.
    digest: String,
}

/// One `[[gate]]`: its gate on each target it names, what `--check` warns of, and its rule.
fn one(
    spec: &GateSpec,
    offered: &Offered,
    backends: &Backends,
    catalog: &Arc<Catalog>,
) -> Result<(Vec<Built>, Vec<String>, Rule), String> {
    let action = checked_action(spec)?;
    let show_arguments = shows_arguments(spec)?;
    let by_approver = asked_by_approver(spec, backends)?;
    let flow = flow(spec, backends)?;
    if action == Action::Ask && spec.form.is_empty() && flow.is_none() && !by_approver {
        return Err("has no `form` fields and no `url`: it would ask nothing".to_owned());
    }
    let (targets, warnings) = targets_of(spec, offered)?;
    let rules = rules(spec)?;
    check_arguments(&needed(spec, flow.as_ref(), &rules), &targets, offered)?;
    let required = required_fields(spec, &rules)?;
    let schema = match &flow {
        Some(flow) => format!("a URL: {}", flow.url),
        None if by_approver => "an approver's decision, on the approval page".to_owned(),
        // A rule that asks nobody still has a gate: it refuses (`deny`), or fails closed when
        // a condition cannot say, with no question.
        None if action != Action::Ask => r#"{"type": "object", "properties": {}}"#.to_owned(),
        None => schema(&spec.form, &required)?,
    };
    let rule = rule_of(spec, action, &targets, offered)?;
    let question = Question {
        key: spec.key.clone().unwrap_or_else(|| "approval".to_owned()),
        flow,
        by_approver,
        show_arguments,
        message: spec.message.clone(),
        schema,
        rules: Arc::new(rules),
        digest: crate::catalog::digest(&serde_json::to_value(spec).map_err(|e| e.to_string())?),
    };
    let built = targets
        .into_iter()
        .map(|target| question.built(target, spec, backends, catalog))
        .collect::<Result<_, _>>()?;
    Ok((built, warnings, rule))
}

/// The gate's action, once the fields that go with it are checked: it names something, its
/// approval's lifetime is in range, an action that asks nobody has no question, and its key is
/// not the proxy's own.
fn checked_action(spec: &GateSpec) -> Result<Action, String> {
    if spec.tools.is_empty() && spec.prompts.is_empty() && spec.resources.is_empty() {
        return Err("names no `tools`, `prompts` or `resources`".to_owned());
    }
    let action = Action::parse(spec.action.as_deref())?;
    if spec
        .approval_ttl_secs
        .is_some_and(|ttl| !(1..=86_400).contains(&ttl))
    {
        return Err("approval_ttl_secs: from 1 to 86400 seconds".to_owned());
    }
    if action != Action::Ask {
        unasked(spec, action)?;
    }
    if spec.key.as_deref() == Some(TOOL_CHANGE_KEY) {
        return Err(format!(
            "key {TOOL_CHANGE_KEY:?} is the proxy's own (on_tool_change)"
        ));
    }
    Ok(action)
}

/// Refuses the fields of a question on a gate whose `action` asks nobody.
fn unasked(spec: &GateSpec, action: Action) -> Result<(), String> {
    let asks = [
        ("form", !spec.form.is_empty()),
        ("url", spec.url.is_some()),
        ("require", !spec.require.is_empty()),
        ("message", spec.message.is_some()),
        ("retry_hint", spec.retry_hint.is_some()),
        ("inject_as", spec.inject_as.is_some()),
        ("show", spec.show.is_some()),
        ("approval_ttl_secs", spec.approval_ttl_secs.is_some()),
        ("approvers", spec.approvers.is_some()),
    ];
    if let Some((field, _)) = asks.iter().find(|(_, given)| *given) {
        return Err(format!(
            "action = \"{action}\" asks nobody: `{field}` has no use here"
        ));
    }
    if action == Action::Allow && spec.refusal.is_some() {
        return Err("action = \"allow\" refuses nothing: `refusal` has no use here".to_owned());
    }
    Ok(())
}

/// `show = "arguments"`: the question lists the call's arguments.
fn shows_arguments(spec: &GateSpec) -> Result<bool, String> {
    match spec.show.as_deref() {
        None => Ok(false),
        Some("arguments") => Ok(true),
        Some(other) => Err(format!("show {other:?}: only \"arguments\"")),
    }
}

/// `approvers = "url"`: another person answers on the approval page, which must be served, and
/// is the whole question.
fn asked_by_approver(spec: &GateSpec, backends: &Backends) -> Result<bool, String> {
    match spec.approvers.as_deref() {
        None | Some("caller") => return Ok(false),
        Some("url") => {}
        Some(other) => {
            return Err(format!(
                "approvers {other:?}: \"caller\" (the caller's own client asks) or \"url\" (another person, on the approval page)"
            ));
        }
    }
    if let Some(why) = backends.approvals.unavailable() {
        return Err(format!("approvers = \"url\" {why}"));
    }
    if spec.url.is_some()
        || spec.complete_when.is_some()
        || !spec.form.is_empty()
        || !spec.require.is_empty()
    {
        return Err("approvers = \"url\": the approval page is the question; no `form`, `require`, `url` or `complete_when`".to_owned());
    }
    Ok(true)
}

/// Every target `spec` names, in the file's order (a tool's prompt of the same name just before
/// it), and the warnings of what they match.
fn targets_of(spec: &GateSpec, offered: &Offered) -> Result<(Vec<Target>, Vec<String>), String> {
    let mut warnings = Vec::new();
    let mut targets = Vec::new();
    let cover_prompts = spec.cover_prompts != Some(false);
    for kind in Kind::ALL {
        for pattern in patterns(spec, kind) {
            let target = matched(kind, pattern, offered)?;
            if target.listed.is_empty() {
                warnings.push(matches_nothing(kind, pattern, offered));
            }
            if kind == Kind::Tool {
                let mut prompt = matched(Kind::Prompt, pattern, offered)?;
                if cover_prompts {
                    prompt.covered = true;
                    targets.push(prompt);
                } else {
                    warnings.extend(prompt.listed.iter().map(|name| format!(
                        "prompt {name:?} has the name of a gated tool but is not gated (cover_prompts = false)"
                    )));
                }
            }
            targets.push(target);
        }
    }
    Ok((targets, warnings))
}

/// The names or patterns of `kind` that `spec` gates (`tools`, `prompts`, `resources`).
fn patterns(spec: &GateSpec, kind: Kind) -> &[String] {
    match kind {
        Kind::Tool => &spec.tools,
        Kind::Prompt => &spec.prompts,
        Kind::Resource => &spec.resources,
    }
}

/// `pattern` as a target of `kind`, with what the upstream lists now that it matches.
fn matched(kind: Kind, pattern: &str, offered: &Offered) -> Result<Target, String> {
    let target = targets::target(kind, pattern)?;
    let listed = offered
        .names(kind)
        .keys()
        .filter(|name| target.applies_to(kind.method(), name))
        .cloned()
        .collect();
    Ok(Target {
        kind,
        target,
        pattern: pattern.to_owned(),
        listed,
        covered: false,
    })
}

/// The warning for a pattern that matches nothing listed now.
fn matches_nothing(kind: Kind, pattern: &str, offered: &Offered) -> String {
    let known: Vec<&str> = offered.names(kind).keys().map(String::as_str).collect();
    format!(
        "{kind} {pattern:?} matches nothing the upstream lists now ({}); it is matched on each call",
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        }
    )
}

/// The arguments the gate reads: its message's and URLs' placeholders (but `{handle}`, the
/// flow's own) and the arguments its `require` compares answers with.
fn needed(
    spec: &GateSpec,
    flow: Option<&ConfiguredFlow>,
    rules: &BTreeMap<String, Requirement>,
) -> Vec<String> {
    let message = spec
        .message
        .as_deref()
        .into_iter()
        .flat_map(template::names);
    let urls = flow
        .into_iter()
        .flat_map(|flow| template::names(&flow.url).chain(template::names(flow.check.template())))
        .filter(|name| *name != "handle");
    let compared = rules.values().filter_map(|rule| match rule {
        Requirement::SameAs(argument) => Some(argument.as_str()),
        Requirement::Equals(_) => None,
    });
    message
        .chain(urls)
        .chain(compared)
        .map(str::to_owned)
        .collect()
}

/// Refuses an argument in `needed` that a listed target does not take.
fn check_arguments(needed: &[String], targets: &[Target], offered: &Offered) -> Result<(), String> {
    for target in targets.iter().filter(|target| !target.covered) {
        for (name, arguments) in takes(target, offered) {
            if let Some(argument) = needed.iter().find(|argument| !arguments.contains(argument)) {
                return Err(format!(
                    "{{{argument}}} names an argument {} {name} does not take (it takes {})",
                    target.kind,
                    if arguments.is_empty() {
                        "none".to_owned()
                    } else {
                        arguments.join(", ")
                    }
                ));
            }
        }
    }
    Ok(())
}

/// What each name `target` matches takes: a listed tool's or prompt's arguments; a resource
/// pattern's one `uri`.
fn takes<'a>(target: &'a Target, offered: &Offered) -> Vec<(&'a String, Vec<String>)> {
    if target.kind == Kind::Resource {
        return vec![(&target.pattern, vec!["uri".to_owned()])];
    }
    let names = offered.names(target.kind);
    target
        .listed
        .iter()
        .map(|name| (name, names.get(name).cloned().unwrap_or_default()))
        .collect()
}

/// The form's required fields (`required`, else those `require` judges), each one of the
/// form's.
fn required_fields(
    spec: &GateSpec,
    rules: &BTreeMap<String, Requirement>,
) -> Result<Vec<String>, String> {
    let required = match &spec.required {
        Some(required) => required.clone(),
        None => rules.keys().cloned().collect(),
    };
    for field in rules.keys().chain(&required) {
        if !spec.form.contains_key(field) {
            return Err(format!("`{field}` is not one of the form's fields"));
        }
    }
    Ok(required)
}

impl Question {
    /// The gate on `target`, as built and as `--check` shows it.
    fn built(
        &self,
        target: Target,
        spec: &GateSpec,
        backends: &Backends,
        catalog: &Arc<Catalog>,
    ) -> Result<Built, String> {
        let gate = self.asking(spec, backends, catalog)?;
        let gate = gate.message(self.message_on(target.kind));
        let gate = self.judging(gate, spec);
        let gate = self.bound(gate, target.kind, catalog);
        Ok(Built {
            target: target.target,
            gate,
            kind: target.kind,
            listed: target.listed,
            label: String::new(),
            message: self
                .message
                .clone()
                .unwrap_or_else(|| format!("Allow {}?", target.pattern)),
            target_name: target.pattern,
            schema: self.schema.clone(),
            covered_prompt: target.covered,
        })
    }

    /// The gate's question: the URL flow, the approval page, or the form.
    fn asking(
        &self,
        spec: &GateSpec,
        backends: &Backends,
        catalog: &Arc<Catalog>,
    ) -> Result<Gate, String> {
        match &self.flow {
            Some(flow) => Gate::url(self.key.clone(), flow.clone()),
            None if self.by_approver => Gate::url(
                self.key.clone(),
                ApprovalFlow {
                    approvals: Arc::clone(&backends.approvals),
                    catalog: Arc::clone(catalog),
                    wait: spec.approval_ttl_secs.map(std::time::Duration::from_secs),
                },
            ),
            None => Gate::form(self.key.clone(), self.schema.clone()),
        }
        .map_err(in_the_files_words)
    }

    /// What a call of a target of `kind` is asked: the message with its placeholders filled
    /// (a resource's `{uri}` its URI), the arguments when `show = "arguments"`, and what an
    /// approver's gate tells the caller.
    fn message_on(&self, kind: Kind) -> impl Fn(&GateCall<'_>) -> String + Send + Sync + 'static {
        let (template, resource) = (self.message.clone(), kind == Kind::Resource);
        let (show_arguments, by_approver) = (self.show_arguments, self.by_approver);
        move |call| {
            let mut text = match &template {
                Some(template) if resource => {
                    interpolate(template, &serde_json::json!({ "uri": call.target() }))
                }
                Some(template) => interpolate(template, call.arguments()),
                None => format!(
                    "Allow {}?",
                    shown::quoted(call.target(), shown::PLACEHOLDER_CAP)
                ),
            };
            if show_arguments {
                text.push_str("\n\n");
                text.push_str(&shown::arguments(call.arguments()));
            }
            if by_approver {
                text.push_str("\n\n");
                text.push_str(crate::approvals::ASK_CALLER);
            }
            text
        }
    }

    /// `gate` judging its answers as the file says: `require`, `retry_hint`, `refusal` (with the
    /// decision id), `inject_as` and `approval_ttl_secs`.
    fn judging(&self, mut gate: Gate, spec: &GateSpec) -> Gate {
        if !self.rules.is_empty() {
            let rules = Arc::clone(&self.rules);
            gate = gate.require(move |answer, call| allows(&rules, answer, call.arguments()));
        }
        if let Some(hint) = &spec.retry_hint {
            gate = gate.retry_hint(hint.clone());
        }
        let refusal: Arc<str> = spec
            .refusal
            .as_deref()
            .unwrap_or("The request was not approved.")
            .into();
        gate = gate
            .refusal_for(move |call| format!("{refusal} (decision {})", policy::decision_id(call)))
            .meta(|call| {
                let mut meta = Map::new();
                meta.insert(
                    policy::DECISION_META.to_owned(),
                    Value::String(policy::decision_id(call)),
                );
                meta
            });
        if let Some(argument) = &spec.inject_as {
            gate = gate.inject_as(argument.clone());
        }
        if let Some(ttl) = spec.approval_ttl_secs {
            gate = gate.approval_ttl(std::time::Duration::from_secs(ttl));
        }
        gate
    }

    /// `gate` bound to the gate as written and, on a tool, to the tool's definition as last
    /// listed (whose `inputSchema` must also accept the call's arguments).
    fn bound(&self, mut gate: Gate, kind: Kind, catalog: &Arc<Catalog>) -> Gate {
        let tool = kind == Kind::Tool;
        if tool {
            let checked = Arc::clone(catalog);
            gate = gate
                .check_call(move |call| checked.check_arguments(call.target(), call.arguments()));
        }
        let (bound, digest) = (Arc::clone(catalog), self.digest.clone());
        gate.bound_to(move |call| {
            let definition = if tool {
                bound.digest_of(call.target())
            } else {
                String::new()
            };
            format!("{digest}\0{definition}")
        })
    }
}

/// The rule `spec` is in the file's order: its action, what it names, and its condition,
/// compiled and tried on a sample call of each listed target (labelled by the caller).
fn rule_of(
    spec: &GateSpec,
    action: Action,
    targets: &[Target],
    offered: &Offered,
) -> Result<Rule, String> {
    let mut arguments = Vec::new();
    let mut samples = Vec::new();
    let mut named = Vec::new();
    let mut covered = Vec::new();
    for target in targets {
        if target.covered {
            covered.push((target.target.clone(), target.pattern.clone()));
            continue;
        }
        named.push((
            target.kind.method(),
            target.target.clone(),
            target.pattern.clone(),
        ));
        if target.kind == Kind::Resource {
            arguments.push((target.pattern.clone(), vec!["uri".to_owned()]));
            samples.push((target.pattern.clone(), serde_json::json!({"uri": ""})));
            continue;
        }
        for name in &target.listed {
            let taken = offered
                .names(target.kind)
                .get(name)
                .cloned()
                .unwrap_or_default();
            let sample = match target.kind {
                Kind::Tool => offered.samples.get(name).cloned(),
                _ => None,
            };
            let sample = sample.unwrap_or_else(|| {
                // A prompt's arguments are strings.
                Value::Object(taken.iter().map(|a| (a.clone(), Value::from(""))).collect())
            });
            arguments.push((name.clone(), taken));
            samples.push((name.clone(), sample));
        }
    }
    let when = match &spec.when {
        None => None,
        Some(text) => {
            let known = (!arguments.is_empty()).then_some(arguments.as_slice());
            let condition = Condition::compile(text, known)?;
            condition.try_on(&samples)?;
            Some(condition)
        }
    };
    Ok(Rule {
        label: String::new(),
        action,
        key: spec.key.clone().unwrap_or_else(|| "approval".to_owned()),
        targets: named,
        covered,
        when,
        asks_by_url: spec.url.is_some() || spec.approvers.as_deref() == Some("url"),
    })
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
        Some((None, Some(http))) => Check::Http(crate::flows::HttpCheck::new(http)?),
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

/// The message with each `{argument}` replaced by the call's argument made safe to show
/// ([`shown::placeholder`]: a string quoted, what hides escaped, capped; a list or object as
/// short text; a missing one as `(none)`).
fn interpolate(template: &str, arguments: &Value) -> String {
    template::render(template, |name, out| {
        out.push_str(&shown::placeholder(
            arguments.get(name),
            shown::PLACEHOLDER_CAP,
        ));
    })
}

fn rules(spec: &GateSpec) -> Result<BTreeMap<String, Requirement>, String> {
    let mut rules = BTreeMap::new();
    for (field, value) in &spec.require {
        let rule = match value {
            toml::Value::String(text) if text.starts_with('{') && text.ends_with('}') => {
                let Some(argument) = template::sole_name(text) else {
                    return Err(format!("require.{field}: {text:?} is not an {{argument}}"));
                };
                Requirement::SameAs(argument.to_owned())
            }
            other => Requirement::Equals(
                serde_json::to_value(other).map_err(|error| format!("require.{field}: {error}"))?,
            ),
        };
        rules.insert(field.clone(), rule);
    }
    Ok(rules)
}

fn allows(
    rules: &BTreeMap<String, Requirement>,
    answer: &Map<String, Value>,
    arguments: &Value,
) -> bool {
    rules.iter().all(|(field, rule)| {
        let given = answer.get(field);
        match rule {
            Requirement::Equals(value) => given == Some(value),
            Requirement::SameAs(argument) => given.is_some() && given == arguments.get(argument),
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
        offered.samples.insert(
            "write_file".into(),
            serde_json::json!({"path": "", "content": ""}),
        );
        offered
            .resources
            .insert("demo://docs/a.md".into(), vec!["uri".into()]);
        offered
    }

    fn built(text: &str) -> Result<Vec<Built>, ConfigError> {
        Ok(checked(text)?
            .built
            .into_iter()
            .filter(|b| !b.covered_prompt)
            .collect())
    }

    fn checked(text: &str) -> Result<Gates, ConfigError> {
        let source = Source {
            path: PathBuf::from("g.toml"),
            text: format!("[upstream]\ncommand = [\"x\"]\n{text}"),
        };
        let config = source.parse()?;
        let backends = crate::flows::Backends::offline();
        let catalog = Arc::new(Catalog::new(None, crate::metrics::Metrics::default()));
        build(&source, &config, &offered(), &backends, &catalog)
    }

    #[test]
    fn globs_match_each_call_and_forms_keep_their_order() {
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
        let names: Vec<&str> = gates.iter().map(|g| g.target_name.as_str()).collect();
        assert_eq!(names, ["delete_*"]);
        assert_eq!(gates[0].listed, ["delete_branch", "delete_tag"]);
        assert!(
            gates[0]
                .target
                .applies_to("tools/call", "delete_anything_added_later")
        );
        assert_eq!(
            gates[0].schema,
            r#"{"type": "object", "properties": {"confirm": {"type":"string","title":"Branch name"}, "why": {"type":"string"}}, "required": ["confirm"]}"#
        );
    }

    #[test]
    fn a_gate_matching_nothing_is_a_warning_and_a_placeholder_no_tool_takes_an_error() {
        let gates =
            checked("\n[[gate]]\ntools = [\"move_*\"]\nform.approve = { type = \"boolean\" }\n")
                .unwrap();
        assert!(
            gates.warnings[0].starts_with("gate 1 (line 4): tool \"move_*\" matches nothing"),
            "{:?}",
            gates.warnings
        );
        let error =
            built("[[gate]]\ntools = [\"delete_[ab]\"]\nform.approve = { type = \"boolean\" }\n")
                .err()
                .unwrap()
                .to_string();
        assert!(
            error.starts_with("g.toml:3: gate 1: tool pattern"),
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
        let gates = built("[[gate]]\nresources = [\"demo://d?cs/*.md\", \"file:///srv/secret/**\"]\nmessage = \"Read {uri}?\"\nform.approve = { type = \"boolean\" }\n").unwrap();
        let names: Vec<&str> = gates.iter().map(|g| g.target_name.as_str()).collect();
        assert_eq!(names, ["demo://d?cs/*.md", "file:///srv/secret/**"]);
        assert_eq!(gates[0].listed, ["demo://docs/a.md"]);
        assert!(
            gates[1]
                .target
                .applies_to("resources/read", "file:///srv/secret/sub/id_rsa")
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
    fn every_gates_mistake_is_told_not_only_the_first() {
        let error = checked(
            "[[gate]]\ntools = [\"write_file\"]\n\n[[gate]]\ntools = [\"write_file\"]\nform.ok = { type = \"boolean\" }\nrequire = { nope = true }\n\n[[gate]]\napprovers = \"boss\"\ntools = [\"x\"]\n",
        )
        .err()
        .unwrap()
        .to_string();
        let lines: Vec<&str> = error.lines().collect();
        assert_eq!(lines.len(), 3, "{error}");
        assert!(
            lines[0].starts_with("g.toml:3: gate 1: has no `form` fields"),
            "{error}"
        );
        assert!(lines[1].starts_with("g.toml:6: gate 2: `nope`"), "{error}");
        assert!(
            lines[2].starts_with("g.toml:11: gate 3: approvers \"boss\""),
            "{error}"
        );
    }

    #[test]
    fn the_summary_counts_what_the_gates_apply_to() {
        let gates = built(
            "[[gate]]\ntools = [\"delete_*\"]\nform.approve = { type = \"boolean\" }\n\n[[gate]]\ntools = [\"nothing_*\"]\nform.approve = { type = \"boolean\" }\n",
        )
        .unwrap();
        let summary = summary(2, &gates);
        assert_eq!(summary, "2 gates on 2 tools");
        assert_eq!(
            super::summary(1, &[]),
            "1 gate on nothing the upstream lists now"
        );
    }

    #[test]
    fn messages_interpolate_and_rules_judge() {
        let call = serde_json::json!({"path": "/srv/a.txt", "n": 3});
        assert_eq!(
            interpolate("Write {n} to {path}? {x} {not a name}", &call),
            "Write 3 to \"/srv/a.txt\"? (none) {not a name}"
        );
        let mut rules = BTreeMap::new();
        rules.insert("approve".to_owned(), Requirement::Equals(Value::Bool(true)));
        rules.insert("confirm".to_owned(), Requirement::SameAs("path".to_owned()));
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

    /// What the file's rules say of a call of `tool` with `arguments`: the deciding rule's
    /// number and action, `None` when none decides, or the failure.
    fn decided(
        gates: &Gates,
        tool: &str,
        arguments: Value,
    ) -> Result<Option<(usize, Action)>, String> {
        let vars = policy::Vars::new("tools/call", tool, &arguments, None);
        match gates.policy.decide("tools/call", tool, &vars) {
            Ok(policy::Verdict::Ask(asking)) => Ok(Some((asking[0] + 1, Action::Ask))),
            Ok(policy::Verdict::Deny(index)) => Ok(Some((index + 1, Action::Deny))),
            Ok(policy::Verdict::Allow(index)) => Ok(Some((index + 1, Action::Allow))),
            Ok(policy::Verdict::Ungated) => Ok(None),
            Err(undecided) => Err(undecided.to_string()),
        }
    }

    const ORDERED: &str = r#"
[[gate]]
tools = ["write_file"]
when = "args.path.startsWith('/tmp/')"
action = "allow"

[[gate]]
tools = ["write_file", "read_*"]
when = "args.path.startsWith('/srv/prod/')"
action = "deny"
refusal = "Production is read-only."

[[gate]]
tools = ["write_file"]
message = "Write {path}?"
form.approve = { type = "boolean" }
require = { approve = true }
"#;

    #[test]
    fn the_first_rule_that_matches_and_holds_decides() {
        let gates = checked(ORDERED).unwrap();
        assert_eq!(gates.policy.rules.len(), 3);
        let path = |p: &str| serde_json::json!({ "path": p });
        assert_eq!(
            decided(&gates, "write_file", path("/tmp/a")),
            Ok(Some((1, Action::Allow)))
        );
        assert_eq!(
            decided(&gates, "write_file", path("/srv/prod/a")),
            Ok(Some((2, Action::Deny)))
        );
        assert_eq!(
            decided(&gates, "write_file", path("/home/a")),
            Ok(Some((3, Action::Ask)))
        );
        assert_eq!(
            decided(&gates, "read_file", path("/srv/prod/a")),
            Ok(Some((2, Action::Deny)))
        );
        assert_eq!(decided(&gates, "read_file", path("/srv/a")), Ok(None));
        assert_eq!(
            decided(&gates, "delete_branch", serde_json::json!({"name": "x"})),
            Ok(None)
        );
        // A call without a `path`: the first condition cannot say, and the call fails closed.
        let failed = decided(&gates, "write_file", serde_json::json!({})).unwrap_err();
        assert!(
            failed.contains("gate 1 (line 4)") && failed.contains("No such key: path"),
            "{failed}"
        );
        // Only the asking rule's gate has a question; every rule's gate enforces the order.
        assert!(
            gates
                .built
                .iter()
                .any(|b| b.label.starts_with("gate 3") && b.schema.contains("approve"))
        );
    }

    #[test]
    fn conditions_and_actions_are_checked_when_the_file_is_read() {
        let error = |text: &str| {
            checked(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let gate = |extra: &str| format!("[[gate]]\ntools = [\"write_file\"]\n{extra}\n");
        let asks = "form.approve = { type = \"boolean\" }";
        for (extra, expected) in [
            (
                format!("when = \"args.path.startsWith(\"\n{asks}"),
                "not a CEL expression",
            ),
            (
                format!("when = \"user == 'ana'\"\n{asks}"),
                "`user` is not a variable",
            ),
            (
                format!("when = \"args.pth == '/'\"\n{asks}"),
                "`args.pth` names an argument tool write_file does not take",
            ),
            (
                format!("when = \"args.path > 3\"\n{asks}"),
                "tried on a call of write_file",
            ),
            (format!("when = \"args.path\"\n{asks}"), "not true or false"),
            (format!("action = \"maybe\"\n{asks}"), "action \"maybe\""),
            (
                format!("action = \"deny\"\n{asks}"),
                "asks nobody: `form` has no use here",
            ),
            (
                "action = \"allow\"\nrefusal = \"no\"".to_owned(),
                "refuses nothing",
            ),
        ] {
            let message = error(&gate(&extra));
            assert!(message.contains(expected), "{extra}: {message}");
            assert!(
                message.starts_with("g.toml:3: gate 1: "),
                "the gate's line: {message}"
            );
        }
        // Deny and allow rules ask nothing, so they need no form.
        checked(&gate("when = \"args.path == '/'\"\naction = \"deny\"")).unwrap();
    }

    #[test]
    fn a_rule_an_earlier_one_always_decides_first_is_a_warning() {
        let text = "[[gate]]\ntools = [\"write_file\"]\naction = \"deny\"\n\n[[gate]]\ntools = [\"write_file\"]\nform.approve = { type = \"boolean\" }\n";
        let gates = checked(text).unwrap();
        assert!(
            gates
                .warnings
                .iter()
                .any(|w| w.contains("gate 2 (line 7)") && w.contains("never decides")),
            "{:?}",
            gates.warnings
        );
        let ordered = checked(ORDERED).unwrap();
        assert!(
            !ordered.warnings.iter().any(|w| w.contains("never decides")),
            "{:?}",
            ordered.warnings
        );
        // Two questions of their own keys on one tool are asked together: neither hides the other.
        let both = "[[gate]]\ntools = [\"write_file\"]\nkey = \"sign\"\nform.ok = { type = \"boolean\" }\n\n[[gate]]\ntools = [\"write_file\"]\nform.approve = { type = \"boolean\" }\n";
        let both = checked(both).unwrap();
        assert!(both.warnings.is_empty(), "{:?}", both.warnings);
        let vars = policy::Vars::new("tools/call", "write_file", &serde_json::json!({}), None);
        let verdict = both
            .policy
            .decide("tools/call", "write_file", &vars)
            .unwrap();
        assert_eq!(verdict, policy::Verdict::Ask(vec![0, 1]));
        // Of one key, the first asks; the second is hidden.
        let same = "[[gate]]\ntools = [\"write_file\"]\nform.ok = { type = \"boolean\" }\n\n[[gate]]\ntools = [\"write_*\"]\nform.approve = { type = \"boolean\" }\n";
        let same = checked(same).unwrap();
        assert!(
            same.warnings
                .iter()
                .any(|w| w.contains("gate 2") && w.contains("never decides")),
            "{:?}",
            same.warnings
        );
    }
}
