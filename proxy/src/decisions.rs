//! The decision log: one JSON line on stderr per decision of the layer, saying when (`time`, Unix
//! milliseconds), which (`id`, unique to the line), what was called (`method`, `tool`: the tool's
//! or prompt's name, or the resource's URI), which gate of the file judged it, the outcome
//! (`ask`, `gates_accepted`, `gate_refused`, `allowed`, `forward`, `refused`,
//! `rejected_state`, …), the round, the caller, and for a refusal why (`declined`, `cancelled`,
//! `not_allowed`, `single_use`, `denied` by a rule, `condition_failed`). `gate` is the rule of
//! the file that decided (with conditions, the one the file's order chose), and `decision_id`
//! the call's decision ([`crate::policy::decision_id`]: the same on each round of one call, in
//! the question's `_meta` and in the refusal, so a person can quote it). Never the answers'
//! content, nor the arguments: only these fixed fields.
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
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

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
struct Decider {
    rule: String,
    why: Option<String>,
    decision: Option<String>,
}

/// The target of the event in which a rule of the file says it decided a call.
pub const RULE_TARGET: &str = "elicitation_proxy::rule";

#[derive(Default)]
struct Fields {
    rule: Option<String>,
    decision: Option<String>,
    outcome: Option<String>,
    method: Option<String>,
    target: Option<String>,
    round: Option<u64>,
    caller: Option<String>,
    why: Option<String>,
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
            "outcome" => self.outcome = Some(value),
            "method" => self.method = Some(value),
            "target" => self.target = Some(value),
            "caller" => self.caller = Some(value),
            "why" => self.why = Some(value),
            _ => {}
        }
    }
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
        if target == RULE_TARGET {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let call = ctx
                .event_scope(event)
                .and_then(|mut scope| scope.find(|span| span.metadata().name() == CALL_SPAN));
            if let (Some(span), Some(rule)) = (call, fields.rule.clone()) {
                let why = fields.why.clone();
                let decision = fields.decision.clone();
                span.extensions_mut().replace(Decider {
                    rule,
                    why,
                    decision,
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
            scope.find_map(|span| {
                span.extensions()
                    .get::<Decider>()
                    .map(|d| (d.rule.clone(), d.why.clone(), d.decision.clone()))
            })
        });
        // The innermost call's: a call the bridge makes for a 2025-era host runs in a task of
        // its own, and its span is the layer's, of the request the layer saw.
        let caller = ctx
            .event_scope(event)
            .and_then(|mut scope| {
                scope.find_map(|span| span.extensions().get::<Caller>().map(|c| c.0.clone()))
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let (gate, why, decision) = match decider {
            Some((rule, why, decision)) => {
                let refused = outcome == "gate_refused";
                let why = if refused {
                    why.or(fields.why)
                } else {
                    fields.why
                };
                (Some(rule), why, decision)
            }
            None => (
                fields.target.as_deref().and_then(|t| self.labels.of(t)),
                fields.why,
                None,
            ),
        };
        let mut line = Map::new();
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        line.insert("time".into(), Value::from(time));
        line.insert("id".into(), Value::String(decision_id()));
        line.insert("decision".into(), Value::String(outcome));
        for (key, value) in [
            ("method", fields.method),
            ("tool", fields.target),
            ("gate", gate),
            ("decision_id", decision),
            ("caller", Some(caller)),
        ] {
            line.insert(key.into(), value.map_or(Value::Null, Value::String));
        }
        line.insert(
            "round".into(),
            fields.round.map_or(Value::Null, Value::from),
        );
        if let Some(why) = why {
            line.insert("why".into(), Value::String(why));
        }
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{}", Value::Object(line));
    }
}
