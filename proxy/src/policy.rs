//! Which `[[gate]]`s decide a call: the file's gates are rules, read in file order, each that
//! matches the call (its targets, and its condition, `when`) acting by its `action`:
//!
//! - `ask` (the default): its question is asked, together with those of the other `ask` rules
//!   that match (a sign-in and an approval on one tool), except where an earlier one asks under
//!   the same key: the first rule per question decides what is asked;
//! - `deny`: the call is refused, nobody asked;
//! - `allow`: the call runs, nobody asked.
//!
//! A `deny` or `allow` decides the call when no rule asked before it, and ends the reading when
//! one did (the earlier question stands). So the first rule that matches decides what kind of
//! decision it is, as in a firewall's list. A call no rule matches is not gated.
//!
//! A condition is a CEL expression (the `cel` crate) over four variables:
//!
//! - `args`: the call's arguments (a resource's: `{"uri": …}`);
//! - `tool`: the tool's or prompt's name, or the resource's URI;
//! - `caller`: `{"principal": …, "claims": {…}}`, the verified caller (`null` and `{}` when the
//!   caller is not verified);
//! - `upstream`: the upstream's name (one upstream today: `"default"`).
//!
//! It is compiled when the file is read: a syntax error, a variable that is none of these, a
//! field of `args` no tool of the rule takes, and (tried on a sample call of each listed tool,
//! its arguments typed as its `inputSchema` says) a type error or a value that is not `true` or
//! `false` is the file's mistake, at the line of the `when`. At run time a condition that cannot
//! say (a missing key, a type error, a value that is not a bool) fails closed: the call is
//! refused, and the operator told which rule and why. Write `has(args.path) && …` where a value
//! may be missing.
//!
//! A tool rule also covers the prompts of the same names (`cover_prompts`); such a covered
//! prompt decides after every rule that names prompts itself, whatever its place in the file.

use std::fmt;
use std::sync::Arc;

use cel::common::ast::Expr;
use cel::objects::Value as Cel;
use cel::{Context, ExecutionError, IdedExpr, Program};
use serde_json::{Map, Value, json};
use tower_elicitation::{GateCall, GateTarget};

/// The variables a condition may read.
const VARIABLES: [&str; 4] = ["args", "tool", "caller", "upstream"];
/// The fields of `caller`.
const CALLER_FIELDS: [&str; 2] = ["principal", "claims"];
/// The upstream's name, until a file can name several.
pub const UPSTREAM_NAME: &str = "default";

/// What a rule does with the calls it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Ask,
    Deny,
    Allow,
}

impl Action {
    /// What `action = "…"` says (absent: `ask`).
    ///
    /// # Errors
    ///
    /// Any other word.
    pub fn parse(text: Option<&str>) -> Result<Self, String> {
        match text {
            None | Some("ask") => Ok(Self::Ask),
            Some("deny") => Ok(Self::Deny),
            Some("allow") => Ok(Self::Allow),
            Some(other) => Err(format!("action {other:?}: \"ask\", \"deny\" or \"allow\"")),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ask => "ask",
            Self::Deny => "deny",
            Self::Allow => "allow",
        })
    }
}

/// A compiled `when`.
pub struct Condition {
    text: String,
    program: Program,
}

impl fmt::Debug for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Condition").field(&self.text).finish()
    }
}

impl Condition {
    /// `text` compiled, its variables and their fields checked against `arguments`, the
    /// argument names of each tool the rule names now (`None`: the rule names no tool whose
    /// arguments are known, so `args`' fields are not checked).
    ///
    /// # Errors
    ///
    /// The parser's message, or the variable or field that no call can have.
    pub fn compile(
        text: &str,
        arguments: Option<&[(String, Vec<String>)]>,
    ) -> Result<Self, String> {
        let program = Program::compile(text).map_err(|errors| {
            format!(
                "when {text:?} is not a CEL expression: {}",
                errors.to_string().trim()
            )
        })?;
        let mut bound = Vec::new();
        check_names(program.expression(), &mut bound, arguments)
            .map_err(|why| format!("when {text:?}: {why}"))?;
        Ok(Self {
            text: text.to_owned(),
            program,
        })
    }

    /// The expression as the file wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the condition holds for the call `vars` describe.
    ///
    /// # Errors
    ///
    /// Why it cannot say: the evaluator's error, or a value that is not a bool.
    pub fn holds(&self, vars: &Vars) -> Result<bool, Failure> {
        let mut context = Context::default();
        for (name, value) in [
            ("args", &vars.args),
            ("tool", &vars.tool),
            ("caller", &vars.caller),
            ("upstream", &vars.upstream),
        ] {
            let value = cel::to_value(value).map_err(|e| Failure::Type(e.to_string()))?;
            context.add_variable_from_value(name, value);
        }
        match self.program.execute(&context) {
            Ok(Cel::Bool(holds)) => Ok(holds),
            Ok(other) => Err(Failure::Type(format!(
                "it is {}, not true or false",
                kind_of(&other)
            ))),
            Err(error) => Err(Failure::of(error)),
        }
    }

    /// Tries the condition on a sample call of each tool in `samples` (its arguments typed by
    /// its `inputSchema`): a type error, or a value that is not a bool, is the file's mistake.
    /// What depends on the call's own values (a missing key, a division by zero) is not.
    ///
    /// # Errors
    ///
    /// The tool it was tried on, and the type error.
    pub fn try_on(&self, samples: &[(String, Value)]) -> Result<(), String> {
        let trials = samples
            .iter()
            .map(|(tool, args)| (Some(tool.as_str()), args.clone()))
            .chain(samples.is_empty().then(|| (None, json!({}))));
        for (tool, args) in trials {
            let vars = Vars {
                args,
                tool: Value::String(tool.unwrap_or("").to_owned()),
                caller: json!({"principal": "", "claims": {}}),
                upstream: Value::String(UPSTREAM_NAME.to_owned()),
            };
            if let Err(Failure::Type(why)) = self.holds(&vars) {
                let on = tool.map_or(String::new(), |tool| {
                    format!(" (tried on a call of {tool})")
                });
                return Err(format!("when {:?}: {why}{on}", self.text));
            }
        }
        Ok(())
    }
}

/// Why a condition could not say.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// What no call could make right: an operator or function on the wrong types, a result
    /// that is not a bool.
    Type(String),
    /// What this call's values made fail: a missing key, an index out of range.
    Value(String),
}

impl Failure {
    fn of(error: ExecutionError) -> Self {
        let text = error.to_string();
        match error {
            ExecutionError::NoSuchKey(_)
            | ExecutionError::IndexOutOfBounds(_)
            | ExecutionError::DivisionByZero(_)
            | ExecutionError::RemainderByZero(_)
            | ExecutionError::Overflow(..)
            | ExecutionError::FunctionError { .. } => Self::Value(text),
            _ => Self::Type(text),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Type(why) | Self::Value(why) => f.write_str(why),
        }
    }
}

/// A CEL value's kind, in words.
fn kind_of(value: &Cel) -> &'static str {
    match value {
        Cel::String(_) => "a string",
        Cel::Int(_) | Cel::UInt(_) | Cel::Float(_) => "a number",
        Cel::List(_) => "a list",
        Cel::Map(_) => "a map",
        Cel::Null => "null",
        _ => "not a bool",
    }
}

/// Checks that every free variable of `expr` is one of [`VARIABLES`], that `caller`'s fields
/// are its own, that `tool` and `upstream` (strings) are not given fields, and that each field of
/// `args` is an argument of every tool in `arguments`. `bound` holds the names comprehensions
/// bind around `expr` (`args.all(x, …)`'s `x`).
fn check_names(
    expr: &IdedExpr,
    bound: &mut Vec<String>,
    arguments: Option<&[(String, Vec<String>)]>,
) -> Result<(), String> {
    match &expr.expr {
        Expr::Ident(name) => {
            if name.starts_with('@') || bound.iter().any(|b| b == name) {
                return Ok(());
            }
            if !VARIABLES.contains(&name.as_str()) {
                return Err(format!(
                    "`{name}` is not a variable (there are {})",
                    VARIABLES.join(", ")
                ));
            }
            Ok(())
        }
        Expr::Select(select) => {
            if let Expr::Ident(root) = &select.operand.expr
                && !bound.iter().any(|b| b == root)
            {
                let field = select.field.as_str();
                match root.as_str() {
                    "caller" if !CALLER_FIELDS.contains(&field) => {
                        return Err(format!(
                            "`caller.{field}`: a caller has {}",
                            CALLER_FIELDS.join(" and ")
                        ));
                    }
                    "tool" | "upstream" => {
                        return Err(format!("`{root}` is a string: it has no field `{field}`"));
                    }
                    "args" => {
                        for (tool, names) in arguments.into_iter().flatten() {
                            if !names.iter().any(|name| name == field) {
                                return Err(format!(
                                    "`args.{field}` names an argument tool {tool} does not take (it takes {})",
                                    if names.is_empty() {
                                        "none".to_owned()
                                    } else {
                                        names.join(", ")
                                    }
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
            check_names(&select.operand, bound, arguments)
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                check_names(target, bound, arguments)?;
            }
            call.args
                .iter()
                .try_for_each(|arg| check_names(arg, bound, arguments))
        }
        Expr::Comprehension(comprehension) => {
            check_names(&comprehension.iter_range, bound, arguments)?;
            check_names(&comprehension.accu_init, bound, arguments)?;
            let depth = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            let inner = [
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ]
            .into_iter()
            .try_for_each(|part| check_names(part, bound, arguments));
            bound.truncate(depth);
            inner
        }
        Expr::List(list) => list
            .elements
            .iter()
            .try_for_each(|element| check_names(element, bound, arguments)),
        Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
            cel::common::ast::EntryExpr::StructField(field) => {
                check_names(&field.value, bound, arguments)
            }
            cel::common::ast::EntryExpr::MapEntry(entry) => {
                check_names(&entry.key, bound, arguments)?;
                check_names(&entry.value, bound, arguments)
            }
        }),
        Expr::Struct(_) => Err("a message literal (`Type{…}`) names no type here".to_owned()),
        Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

/// A sample of `tool`'s arguments, each typed as its `inputSchema` says (an argument of no one
/// simple type is left out: what it holds is known only at run time).
pub fn sample_arguments(input_schema: &Value) -> Value {
    let mut sample = Map::new();
    for (name, schema) in input_schema["properties"].as_object().into_iter().flatten() {
        let value = match schema["type"].as_str() {
            Some("string") => json!(""),
            Some("integer") => json!(0),
            Some("number") => json!(0.5),
            Some("boolean") => json!(false),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => continue,
        };
        sample.insert(name.clone(), value);
    }
    Value::Object(sample)
}

/// The values a condition reads for one call.
#[derive(Debug, Clone)]
pub struct Vars {
    pub args: Value,
    pub tool: Value,
    pub caller: Value,
    pub upstream: Value,
}

impl Vars {
    /// The variables of `call`, as a gate sees it.
    pub fn of(call: &GateCall<'_>) -> Self {
        let caller = call
            .caller()
            .map(|caller| (caller.principal(), caller.claims()));
        Self::new(call.method(), call.target(), call.arguments(), caller)
    }

    /// The variables of a call of `method` on `target` with `arguments`, by `caller` (its
    /// principal and claims; `None`: not verified).
    pub fn new(
        method: &str,
        target: &str,
        arguments: &Value,
        caller: Option<(&str, &Map<String, Value>)>,
    ) -> Self {
        let args = if method == "resources/read" {
            json!({ "uri": target })
        } else if arguments.is_null() {
            json!({})
        } else {
            arguments.clone()
        };
        let caller = match caller {
            Some((principal, claims)) => json!({"principal": principal, "claims": claims}),
            None => json!({"principal": null, "claims": {}}),
        };
        Self {
            args,
            tool: Value::String(target.to_owned()),
            caller,
            upstream: Value::String(UPSTREAM_NAME.to_owned()),
        }
    }
}

/// One rule: a `[[gate]]` as the chain reads it.
pub struct Rule {
    /// `gate 2 (line 14)`.
    pub label: String,
    pub action: Action,
    /// The key its question goes under (an `ask` rule's).
    pub key: String,
    /// What it names itself: `(method, target, pattern)`.
    pub targets: Vec<(&'static str, GateTarget, String)>,
    /// The prompts it covers, being named as tools.
    pub covered: Vec<(GateTarget, String)>,
    pub when: Option<Condition>,
    /// Its question is answered at a URL (a `url` gate, or `approvers = "url"`): a client
    /// answers it only if it declares URL-mode elicitation.
    pub asks_by_url: bool,
}

impl Rule {
    fn names(&self, method: &str, target: &str) -> bool {
        self.targets
            .iter()
            .any(|(m, t, _)| *m == method && t.applies_to(method, target))
    }

    fn covers(&self, method: &str, target: &str) -> bool {
        self.covered
            .iter()
            .any(|(t, _)| t.applies_to(method, target))
    }
}

/// What the rules say of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// These rules ask, together, in one round (their indices, in file order).
    Ask(Vec<usize>),
    /// Rule `index` refuses it.
    Deny(usize),
    /// Rule `index` lets it through.
    Allow(usize),
    /// No rule matches it.
    Ungated,
}

/// Why a rule's condition could not say, for the person and the operator.
#[derive(Debug, Clone)]
pub struct Undecided {
    pub label: String,
    pub why: Failure,
}

impl fmt::Display for Undecided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Not run: the proxy could not tell whether {} applies to this call ({}).",
            self.label, self.why
        )
    }
}

/// Every rule of the file, in the order they decide.
#[derive(Default)]
pub struct Policy {
    pub rules: Vec<Rule>,
}

/// One step of [`Policy::decide_traced`]: a rule whose targets match the call, what its
/// condition said, and what that did.
pub struct Step<'p> {
    pub rule: &'p Rule,
    pub holds: Result<bool, Failure>,
    pub effect: Effect,
}

/// What one step did to the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Its condition does not hold: the next rule is read.
    Skipped,
    /// It asks (with any earlier `ask` rule), and the next rule is read.
    Asks,
    /// Another rule asks under its key already: it does not.
    KeyTaken,
    /// It decides the call (its `deny` or `allow`; or a failure, closed).
    Decides,
    /// A `deny` or `allow` reached after a rule asked: the asking stands, reading stops.
    Ends,
}

impl Policy {
    /// What the rules say of the call `vars` describe (`method` on `target`). They are read in
    /// file order (the prompts a tool rule covers after every rule naming prompts itself): an
    /// `ask` rule that matches and holds asks, with the others that do, unless one asked under
    /// its key already; a `deny` or `allow` that matches and holds decides the call when no
    /// rule asked yet, and ends the reading when one did.
    ///
    /// # Errors
    ///
    /// The first matching rule whose condition could not say: the call fails closed.
    pub fn decide(&self, method: &str, target: &str, vars: &Vars) -> Result<Verdict, Undecided> {
        self.decide_traced(method, target, vars, |_| {})
    }

    /// [`decide`](Self::decide), telling `step` of each rule read.
    ///
    /// # Errors
    ///
    /// As [`decide`](Self::decide).
    pub fn decide_traced<'p>(
        &'p self,
        method: &str,
        target: &str,
        vars: &Vars,
        mut step: impl FnMut(Step<'p>),
    ) -> Result<Verdict, Undecided> {
        let index_of = |rule: &Rule| {
            self.rules
                .iter()
                .position(|r| std::ptr::eq(r, rule))
                .unwrap_or(usize::MAX)
        };
        let named = self.rules.iter().filter(|r| r.names(method, target));
        let covered = self.rules.iter().filter(|r| r.covers(method, target));
        let mut asking: Vec<usize> = Vec::new();
        for rule in named.chain(covered) {
            let holds = rule.when.as_ref().map_or(Ok(true), |when| when.holds(vars));
            let (effect, verdict) = match (&holds, rule.action) {
                (Err(why), _) => {
                    let undecided = Undecided {
                        label: rule.label.clone(),
                        why: why.clone(),
                    };
                    step(Step {
                        rule,
                        holds,
                        effect: Effect::Decides,
                    });
                    return Err(undecided);
                }
                (Ok(false), _) => (Effect::Skipped, None),
                (Ok(true), Action::Ask) => {
                    let index = index_of(rule);
                    let taken = asking.iter().any(|&i| self.rules[i].key == rule.key);
                    if taken || asking.contains(&index) {
                        (Effect::KeyTaken, None)
                    } else {
                        asking.push(index);
                        (Effect::Asks, None)
                    }
                }
                (Ok(true), _) if !asking.is_empty() => (Effect::Ends, Some(None)),
                (Ok(true), Action::Deny) => {
                    (Effect::Decides, Some(Some(Verdict::Deny(index_of(rule)))))
                }
                (Ok(true), Action::Allow) => {
                    (Effect::Decides, Some(Some(Verdict::Allow(index_of(rule)))))
                }
            };
            step(Step {
                rule,
                holds,
                effect,
            });
            match verdict {
                Some(Some(verdict)) => return Ok(verdict),
                Some(None) => break,
                None => {}
            }
        }
        Ok(if asking.is_empty() {
            Verdict::Ungated
        } else {
            Verdict::Ask(asking)
        })
    }
}

impl Policy {
    /// The rules that ask on every call of `method` on `target` that the rules do not refuse,
    /// whatever its arguments and caller: read in [`decide`](Self::decide)'s order, the `ask`
    /// rules without a `when` from the first such one on, until a rule that may end the reading
    /// (a `deny` or `allow`). Empty when a call may run without being asked: an `allow` (with a
    /// `when` or not) or a `deny` without one before any of them, or none at all. An `ask` rule
    /// with a `when` may or may not ask, so it is never counted, nor a later one of its key
    /// (which it would take when it holds).
    pub fn always_asks(&self, method: &str, target: &str) -> Vec<usize> {
        let named = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.names(method, target));
        let covered = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.covers(method, target));
        let mut asking: Vec<usize> = Vec::new();
        let mut conditional_keys: Vec<&str> = Vec::new();
        for (index, rule) in named.chain(covered) {
            match (rule.when.is_some(), rule.action) {
                (false, Action::Ask) => {
                    let taken = conditional_keys.contains(&rule.key.as_str())
                        || asking.iter().any(|&i| self.rules[i].key == rule.key);
                    if !taken {
                        asking.push(index);
                    }
                }
                (true, Action::Ask) => conditional_keys.push(&rule.key),
                // A `deny` that holds before anything asked refuses the call: not a call run
                // unasked. Once a rule asks, any `deny` or `allow` may end the reading.
                (true, Action::Deny) if asking.is_empty() => {}
                _ if !asking.is_empty() => break,
                _ => return Vec::new(),
            }
        }
        asking
    }
}

/// What the library gate of rule `index` says of a call: it asks when the rules have it ask,
/// refuses when its rule decides with `deny` (`denial`) or when a condition cannot say, and
/// stays out otherwise.
pub fn gate_condition(
    policy: &Arc<Policy>,
    index: usize,
    denial: Arc<str>,
) -> impl Fn(&GateCall<'_>) -> Result<bool, String> + Send + Sync + 'static {
    let policy = Arc::clone(policy);
    move |call| {
        let vars = Vars::of(call);
        let decision = decision_id(call);
        let label = |i: usize| policy.rules[i].label.as_str();
        match policy.decide(call.method(), call.target(), &vars) {
            Ok(Verdict::Ask(asking)) if asking.contains(&index) => {
                let labels: Vec<&str> = asking.iter().map(|&i| label(i)).collect();
                decided_by(call, &labels.join(", "), None, &decision);
                Ok(true)
            }
            Ok(Verdict::Deny(decider)) if decider == index => {
                decided_by(call, label(index), Some("denied"), &decision);
                tracing::info!(
                    rule = label(index),
                    tool = %call.target(),
                    "denied by the file's rule, nobody asked"
                );
                Err(format!("{denial} (decision {decision})"))
            }
            Ok(Verdict::Allow(decider)) if decider == index => {
                decided_by(call, label(index), None, &decision);
                tracing::debug!(
                    target: crate::decisions::RULE_TARGET,
                    rule = label(index),
                    decision = %decision,
                    outcome = "allowed",
                    method = call.method(),
                    target = call.target(),
                );
                Ok(false)
            }
            Ok(_) => Ok(false),
            Err(undecided) => {
                decided_by(call, &undecided.label, Some("condition_failed"), &decision);
                tracing::warn!(
                    rule = %undecided.label,
                    tool = %call.target(),
                    why = %undecided.why,
                    "a condition could not say: the call is refused"
                );
                Err(format!("{undecided} (decision {decision})"))
            }
        }
    }
}

/// The refusal of a call an approver denied on the approval page (`approvers = "url"`), told
/// to the decision log as the rule `label`'s, `why: denied_by_approver`.
pub fn denied_by_approver(call: &GateCall<'_>, label: &str, approver: &str) -> String {
    let decision = decision_id(call);
    decided_by(call, label, Some("denied_by_approver"), &decision);
    format!(
        "Not run: {} denied this call on the approval page. (decision {decision})",
        crate::shown::quoted(approver, 128)
    )
}

/// Tells the decision log ([`crate::decisions`]) which rule decided `call`, and what of the
/// call a line holds: its verified principal, its arguments' digest, and its arguments (which
/// the log writes only with `[log] log_arguments`).
fn decided_by(call: &GateCall<'_>, rule: &str, why: Option<&str>, decision: &str) {
    let arguments = call.arguments().to_string();
    let digest = {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(arguments.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    };
    let principal = call.caller().map(|caller| caller.principal());
    tracing::debug!(
        target: crate::decisions::RULE_TARGET,
        rule,
        why,
        decision,
        principal,
        args_digest = %digest,
        arguments = %arguments,
    );
}

/// The `_meta` member of a question that carries its decision's id.
pub const DECISION_META: &str = "elicitation-proxy/decision";

/// The id of the decision on `call`: the same on every round of the call, different for any
/// other, and saying nothing of the call (a digest of the layer's unguessable handle, which is
/// keyed with the signing key). In the decision log, the question's `_meta` and the refusal.
pub fn decision_id(call: &GateCall<'_>) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"elicitation-proxy decision\0")
        .chain_update(call.handle().as_bytes())
        .finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("d-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(args: Value) -> Vars {
        Vars {
            args,
            tool: json!("write_file"),
            caller: json!({"principal": "ana", "claims": {"roles": ["admin"]}}),
            upstream: json!(UPSTREAM_NAME),
        }
    }

    fn holds(text: &str, args: Value) -> Result<bool, Failure> {
        Condition::compile(text, None).unwrap().holds(&vars(args))
    }

    #[test]
    fn conditions_read_the_arguments_and_the_caller() {
        let prod = json!({"path": "/srv/prod/a"});
        assert_eq!(
            holds("args.path.startsWith('/srv/prod/')", prod.clone()),
            Ok(true)
        );
        assert_eq!(holds("args.path.startsWith('/tmp/')", prod), Ok(false));
        assert_eq!(holds("'admin' in caller.claims.roles", json!({})), Ok(true));
        assert_eq!(
            holds("tool == 'write_file' && upstream == 'default'", json!({})),
            Ok(true)
        );
        assert_eq!(holds("args.count > 5", json!({"count": 7})), Ok(true));
        assert_eq!(
            holds(
                "args.items.exists(x, x == 'b')",
                json!({"items": ["a", "b"]})
            ),
            Ok(true)
        );
    }

    #[test]
    fn a_condition_that_cannot_say_is_a_failure_not_false() {
        assert!(matches!(
            holds("args.path.startsWith('/')", json!({})),
            Err(Failure::Value(_))
        ));
        assert!(matches!(
            holds("args.path", json!({"path": "x"})),
            Err(Failure::Type(_))
        ));
        assert!(matches!(
            holds("args.n + 'a' == 'b'", json!({"n": 1})),
            Err(Failure::Type(_))
        ));
        assert_eq!(
            holds("has(args.path) && args.path == '/'", json!({})),
            Ok(false)
        );
    }

    #[test]
    fn compiling_refuses_what_no_call_can_satisfy() {
        let tools = vec![(
            "write_file".to_owned(),
            vec!["path".to_owned(), "content".to_owned()],
        )];
        let error = |text: &str| Condition::compile(text, Some(&tools)).unwrap_err();
        assert!(error("args.path.startsWith(").contains("not a CEL expression"));
        assert!(error("user == 'ana'").contains("`user` is not a variable"));
        assert!(error("args.pth == '/'").contains("`args.pth` names an argument tool write_file"));
        assert!(error("caller.name == 'ana'").contains("`caller.name`"));
        assert!(error("tool.name == 'x'").contains("`tool` is a string"));
        // A comprehension's own names are not variables of the file's.
        Condition::compile(
            "args.content.size() > 0 && [1, 2].all(n, n > 0)",
            Some(&tools),
        )
        .unwrap();
    }

    #[test]
    fn a_type_error_is_found_on_a_sample_call() {
        let schema = json!({"properties": {"path": {"type": "string"}, "count": {"type": "integer"}, "any": {}}});
        let samples = vec![("write_file".to_owned(), sample_arguments(&schema))];
        let tried = |text: &str| Condition::compile(text, None).unwrap().try_on(&samples);
        assert!(tried("args.path.startsWith('/srv/')").is_ok());
        assert!(tried("args.count > 3").is_ok());
        // What only the call's own values decide is left to run time.
        assert!(tried("args.any == 'x'").is_ok());
        assert!(
            tried("args.count.startsWith('1')")
                .unwrap_err()
                .contains("tried on a call of write_file")
        );
        assert!(
            tried("args.path")
                .unwrap_err()
                .contains("a string, not true or false")
        );
    }
}
