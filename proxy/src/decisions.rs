//! The decision log: one JSON line per decision of the layer (on stderr, or where `[log] to`
//! says: stdout, a file rotated by size, or both), saying when (`time`, Unix
//! milliseconds), which (`id`, unique to the line), what was called (`method`, `tool`: the tool's
//! or prompt's name, or the resource's URI), which gate of the file judged it, the outcome
//! (`ask`, `gates_accepted`, `gate_refused`, `allowed`, `forward`, `refused`,
//! `rejected_state`, `binding_changed`, `unanswered`, …), the round, the caller, and for a
//! refusal why. Each way a call is not approved is its own outcome, and none is counted as
//! accepted:
//!
//! | outcome | why | what happened |
//! |---|---|---|
//! | `gate_refused` | `declined`, `cancelled` | the person declined, or cancelled the question |
//! | `gate_refused` | `not_allowed` | the answer was accepted, and the gate's `require` turned it down |
//! | `gate_refused` | `denied`, `condition_failed` | a rule's `action = "deny"`, or a condition that failed at run time |
//! | `gate_refused` | `denied_by_approver` | an approver denied it on the approval page (`approvers = "url"`) |
//! | `refused` | `single_use` | an approval sent again (a replay) |
//! | `rejected_state` | `expired` | the approval came after its `approval_ttl_secs` (or the layer's own time to live) |
//! | `rejected_state` | `mismatch`, `bad_mac`, `malformed`, … | a `requestState` made for another call or caller, or forged |
//! | `binding_changed` | `changed` | the tool's definition, or the gate, changed since the question: asked again |
//! | `unanswered` | `timeout` | a 2025-era host did not answer within `[listen] answer_timeout_secs` |
//! | `refused` | `hidden` | a call of a name `[upstream] expose` or `hide` hides, answered as unknown before any gate |
//! | `refused` | `rate_limited` | a call over a `[limits]` count, refused before any gate |
//!
//! An approver's own decision on the approval page (`approvers = "url"`,
//! [`crate::approvals`]) is a line of its own: `decision` `approved` or `denied`, with
//! `approver` (the approver's verified principal), `principal` (the caller's) and the call's
//! `decision_id`; the caller's retry then has its own line. A call refused before the gates (a
//! hidden name, a rate limit) is a line of its own too: `decision` `refused`, `method`, `tool`,
//! `principal` (the verified caller's, when one is), and `why`.
//!
//! `gate` is the rule of
//! the file that decided (with conditions, the one the file's order chose), and `decision_id`
//! the call's decision ([`crate::policy::decision_id`]: the same on each round of one call, in
//! the question's `_meta` and in the refusal, so a person can quote it). A call a rule judged
//! also has `principal` (the verified caller's, `null` when not verified) and `args_digest`
//! (`sha256:` and the hex SHA-256 of the arguments' JSON text as the gate saw them). Never the
//! answers' content, nor the arguments, unless `[log] log_arguments = true` adds `arguments`.
//! A call no gate applied to (`ungated`) has a line only with `[log] log_ungated = true`.
//!
//! ```text
//! {"time":1764700000123,"id":"d-5f1c0a2b-17","decision":"gate_refused","method":"tools/call","tool":"write_file","gate":"gate 1 (line 9)","caller":"k1.Zm9vYmFy…","round":1,"why":"declined"}
//! ```
//!
//! `caller` is the layer's own keyed tag of the caller (what its tokens bind, made with the
//! keyring: never the header, nor a plain hash of it that a guess could be checked against),
//! `-` for an anonymous caller, whichever era and transport the call came by: the library
//! records it on the span of each call it judges (`elicitation`, field `caller`).
//!
//! A decision is logged once nothing can refuse it any more: a replayed approval refused by the
//! single-use check is one `refused` line (`why: single_use`), never `gates_accepted`.
//!
//! Made from the debug events the library already sends for each decision (target
//! `tower_elicitation`, field `outcome`); a `tracing` layer, so the library carries no logging
//! code of the proxy's.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Where the lines go (`[log]`), set once the file is read: stderr until then.
#[derive(Clone, Default)]
pub struct Output(Arc<RwLock<Sink>>);

/// The decision log's destination and what its lines hold.
#[derive(Default)]
struct Sink {
    stdout: bool,
    file: Option<Rotating>,
    /// Whether lines hold the call's arguments (`[log] log_arguments`).
    arguments: bool,
    /// Whether a call no gate judged gets a line (`[log] log_ungated`).
    ungated: bool,
}

/// A file rotated by size: `FILE` is renamed `FILE.1` (and `FILE.1` `FILE.2`, up to `keep`)
/// before a line would take it past `max_bytes`. Hand-written: the crates that rotate
/// (`tracing-appender`, `file-rotate`) rotate by time or bring their own writer thread, and this
/// is the one file the proxy writes.
struct Rotating {
    path: PathBuf,
    file: std::fs::File,
    written: u64,
    max_bytes: u64,
    keep: usize,
}

impl Rotating {
    fn open(path: &Path, max_bytes: u64, keep: usize) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            file,
            written,
            max_bytes,
            keep,
        })
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        let size = line.len() as u64;
        if self.written > 0 && self.written.saturating_add(size) > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.written = self.written.saturating_add(size);
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let numbered = |n: usize| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.keep == 0 {
            self.file.set_len(0)?;
        } else {
            for n in (1..self.keep).rev() {
                let from = numbered(n);
                if from.exists() {
                    std::fs::rename(&from, numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        *self = Self::open(&self.path, self.max_bytes, self.keep)?;
        Ok(())
    }
}

impl Output {
    /// Sends the lines where `log` says, from now on.
    ///
    /// # Errors
    ///
    /// The file cannot be opened for appending.
    pub fn set(&self, log: &crate::config::Log, to: crate::config::LogTo) -> Result<(), String> {
        use crate::config::{Log, LogTo};
        let file = match (&log.file, to) {
            (Some(path), LogTo::File | LogTo::Both) => {
                let max = log
                    .max_bytes
                    .as_ref()
                    .map_or(Log::MAX_BYTES, |m| *m.get_ref());
                let keep = log.keep.unwrap_or(Log::KEEP);
                let file = Rotating::open(path, max, keep)
                    .map_err(|error| format!("[log] file {}: {error}", path.display()))?;
                Some(file)
            }
            _ => None,
        };
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Sink {
            stdout: matches!(to, LogTo::Stdout | LogTo::Both),
            file,
            arguments: log.log_arguments,
            ungated: log.log_ungated,
        };
        Ok(())
    }

    fn arguments(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).arguments
    }

    fn ungated(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).ungated
    }

    /// Writes one line where it goes; a line the file cannot take goes to stderr, saying so, so
    /// that none is lost.
    fn write(&self, line: &str) {
        let mut sink = self.0.write().unwrap_or_else(|e| e.into_inner());
        let text = format!("{line}\n");
        if sink.stdout {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush());
        }
        let failed = match &mut sink.file {
            Some(file) => file.write(text.as_bytes()).err(),
            None => None,
        };
        if sink.stdout && sink.file.is_none() {
            return;
        }
        if sink.file.is_none() || failed.is_some() {
            let mut stderr = std::io::stderr().lock();
            if let Some(error) = failed {
                let _ = writeln!(
                    stderr,
                    "the decision log's file cannot be written ({error}); its line goes here:"
                );
            }
            let _ = stderr.write_all(text.as_bytes());
        }
    }
}

/// Which gate judges each target (`write_file` → `gate 1 (line 9)`), replaced on reload.
#[derive(Clone, Default)]
pub struct Labels(Arc<RwLock<BTreeMap<String, String>>>);

impl Labels {
    /// Replaces the labels with `labels`.
    pub fn set(&self, labels: BTreeMap<String, String>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = labels;
    }

    fn of(&self, target: &str) -> Option<String> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(target)
            .cloned()
    }
}

/// The `tracing` layer that writes the decision lines.
pub struct Decisions {
    pub labels: Labels,
    pub output: Output,
}

/// The span the library opens around each call it judges, with its `caller` field.
const CALL_SPAN: &str = "elicitation";

/// A new decision id: this process's random prefix and a count, unique to each line.
fn decision_id() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: LazyLock<u32> = LazyLock::new(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish() as u32
    });
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "d-{:08x}-{}",
        *PREFIX,
        COUNT.fetch_add(1, Ordering::Relaxed) + 1
    )
}

/// The caller tag a span recorded.
struct Caller(String);

/// The file's rule that decided the span's call ([`crate::policy`] says so in an event of target
/// [`RULE_TARGET`]), and why it refused, when it did.
#[derive(Clone)]
struct Decider {
    rule: String,
    why: Option<String>,
    decision: Option<String>,
    principal: Option<String>,
    digest: Option<String>,
    arguments: Option<String>,
}

/// The target of the event in which a rule of the file says it decided a call.
pub const RULE_TARGET: &str = "elicitation_proxy::rule";

/// The target of an approver's decision on the approval page ([`crate::approvals`]), which the
/// log writes as a line of its own.
pub const APPROVAL_TARGET: &str = "elicitation_proxy::approval";

/// The target of a call the proxy refuses before any gate sees it (a hidden name,
/// [`crate::exposure`]; a rate limit, [`crate::limits`]), which the log writes as a line of its
/// own: `decision` `refused`, with `why`.
pub const REFUSAL_TARGET: &str = "elicitation_proxy::refusal";

#[derive(Default)]
struct Fields {
    rule: Option<String>,
    decision: Option<String>,
    principal: Option<String>,
    digest: Option<String>,
    arguments: Option<String>,
    outcome: Option<String>,
    method: Option<String>,
    target: Option<String>,
    round: Option<u64>,
    caller: Option<String>,
    why: Option<String>,
    approver: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "round" {
            self.round = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: String) {
        match field.name() {
            "rule" => self.rule = Some(value),
            "decision" => self.decision = Some(value),
            "principal" => self.principal = Some(value),
            "args_digest" => self.digest = Some(value),
            "arguments" => self.arguments = Some(value),
            "outcome" => self.outcome = Some(value),
            "method" => self.method = Some(value),
            "target" => self.target = Some(value),
            "caller" => self.caller = Some(value),
            "why" => self.why = Some(value),
            "approver" => self.approver = Some(value),
            _ => {}
        }
    }
}

impl Decisions {
    /// A line of its own: an approver's decision on the approval page, naming the approver, or
    /// a call refused before the gates, saying why.
    fn own_line(&self, fields: Fields) {
        let mut line = Map::new();
        line.insert("time".into(), Value::from(now_ms()));
        line.insert("id".into(), Value::String(decision_id()));
        for (key, value) in [
            ("decision", fields.outcome),
            ("method", fields.method),
            ("tool", fields.target),
            ("decision_id", fields.decision),
            ("principal", fields.principal.filter(|p| !p.is_empty())),
        ] {
            line.insert(key.into(), value.map_or(Value::Null, Value::String));
        }
        for (key, value) in [("approver", fields.approver), ("why", fields.why)] {
            if let Some(value) = value {
                line.insert(key.into(), Value::String(value));
            }
        }
        self.output.write(&Value::Object(line).to_string());
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl<S> Layer<S> for Decisions
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != CALL_SPAN {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let (Some(caller), Some(span)) = (fields.caller, ctx.span(id)) {
            span.extensions_mut().insert(Caller(caller));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if span.metadata().name() != CALL_SPAN {
            return;
        }
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(caller) = fields.caller {
            span.extensions_mut().insert(Caller(caller));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if target == APPROVAL_TARGET || target == REFUSAL_TARGET {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.own_line(fields);
            return;
        }
        if target == RULE_TARGET {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let call = ctx
                .event_scope(event)
                .and_then(|mut scope| scope.find(|span| span.metadata().name() == CALL_SPAN));
            if let (Some(span), Some(rule)) = (call, fields.rule.clone()) {
                span.extensions_mut().replace(Decider {
                    rule,
                    why: fields.why.clone(),
                    decision: fields.decision.clone(),
                    principal: fields.principal.clone(),
                    digest: fields.digest.clone(),
                    arguments: fields.arguments.clone(),
                });
            }
            // A rule that lets a call through says so itself: the layer sees no gate.
            if fields.outcome.is_none() {
                return;
            }
        } else if !target.starts_with("tower_elicitation") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(outcome) = fields.outcome else {
            return;
        };
        // The rule that decided, as the file's conditions chose it; else the one gate the
        // target has.
        let decider = ctx.event_scope(event).and_then(|mut scope| {
            scope.find_map(|span| span.extensions().get::<Decider>().cloned())
        });
        if outcome == "ungated" && (decider.is_some() || !self.output.ungated()) {
            // A rule's `allow` wrote its own line; else, only with `[log] log_ungated`.
            return;
        }
        // The innermost call's: a call the bridge makes for a 2025-era host runs in a task of
        // its own, and its span is the layer's, of the request the layer saw.
        let caller = ctx
            .event_scope(event)
            .and_then(|mut scope| {
                scope.find_map(|span| span.extensions().get::<Caller>().map(|c| c.0.clone()))
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let (gate, why) = match &decider {
            Some(decider) => {
                let why = if outcome == "gate_refused" {
                    decider.why.clone().or(fields.why)
                } else {
                    fields.why
                };
                (Some(decider.rule.clone()), why)
            }
            None if outcome == "ungated" => (None, None),
            None => (
                fields.target.as_deref().and_then(|t| self.labels.of(t)),
                fields.why,
            ),
        };
        let of_decider = |field: fn(&Decider) -> &Option<String>| {
            decider.as_ref().and_then(|d| field(d).clone())
        };
        let decision = of_decider(|d| &d.decision);
        let principal = of_decider(|d| &d.principal);
        let digest = of_decider(|d| &d.digest);
        let arguments = of_decider(|d| &d.arguments).filter(|_| self.output.arguments());
        let mut line = Map::new();
        line.insert("time".into(), Value::from(now_ms()));
        line.insert("id".into(), Value::String(decision_id()));
        line.insert("decision".into(), Value::String(outcome));
        for (key, value) in [
            ("method", fields.method),
            ("tool", fields.target),
            ("gate", gate),
            ("decision_id", decision),
            ("caller", Some(caller)),
            ("principal", principal),
            ("args_digest", digest),
        ] {
            line.insert(key.into(), value.map_or(Value::Null, Value::String));
        }
        if let Some(arguments) = arguments {
            let value = serde_json::from_str(&arguments).unwrap_or(Value::String(arguments));
            line.insert("arguments".into(), value);
        }
        line.insert(
            "round".into(),
            fields.round.map_or(Value::Null, Value::from),
        );
        if let Some(why) = why {
            line.insert("why".into(), Value::String(why));
        }
        self.output.write(&Value::Object(line).to_string());
    }
}
