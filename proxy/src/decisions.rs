//! The decision log: one JSON line on stderr per decision of the layer, saying what was called
//! (`method`, `tool`: the tool's or prompt's name, or the resource's URI), which gate of the
//! file judged it, the outcome (`ask`, `gates_accepted`, `gate_refused`, `forward`, `refused`,
//! `rejected_state`, …), the round, the caller's tag, and for a gate's refusal why (`declined`,
//! `cancelled`, `not_allowed`). Never the answers' content, nor the
//! arguments: only these fixed fields are written.
//!
//! ```text
//! {"decision":"gate_refused","method":"tools/call","tool":"write_file","gate":"gate 1 (line 9)","round":1,"caller":"c:5f1c0a2b9e04","why":"declined"}
//! ```
//!
//! Made from the debug events the library already sends for each decision (target
//! `tower_elicitation`, field `outcome`) and the span [`caller_span`] opens around each request;
//! a `tracing` layer, so the library carries no logging code of the proxy's.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use sha2::Digest as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::config::PrincipalFrom;

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

/// The span each MCP request runs in: `caller` is a tag of the caller's identity (a SHA-256
/// prefix of the principal, never the header itself), `-` for an anonymous caller.
pub fn caller_span(principal: &PrincipalFrom, headers: &http::HeaderMap) -> tracing::Span {
    let tag = match principal {
        PrincipalFrom::Header(name) => headers.get(name).map(|value| {
            let digest = sha2::Sha256::digest(value.as_bytes());
            let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
            format!("c:{hex}")
        }),
        PrincipalFrom::Nobody => None,
    };
    tracing::info_span!("mcp", caller = tag.as_deref().unwrap_or("-"))
}

/// The caller tag a span recorded.
struct Caller(String);

#[derive(Default)]
struct Fields {
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
        if attrs.metadata().name() != "mcp" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let (Some(caller), Some(span)) = (fields.caller, ctx.span(id)) {
            span.extensions_mut().insert(Caller(caller));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if !event.metadata().target().starts_with("tower_elicitation") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Some(outcome) = fields.outcome else {
            return;
        };
        let caller = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .find_map(|span| span.extensions().get::<Caller>().map(|c| c.0.clone()))
        });
        let gate = fields.target.as_deref().and_then(|t| self.labels.of(t));
        let mut line = Map::new();
        line.insert("decision".into(), Value::String(outcome));
        for (key, value) in [
            ("method", fields.method),
            ("tool", fields.target),
            ("gate", gate),
            ("caller", caller),
        ] {
            line.insert(key.into(), value.map_or(Value::Null, Value::String));
        }
        line.insert(
            "round".into(),
            fields.round.map_or(Value::Null, Value::from),
        );
        if let Some(why) = fields.why {
            line.insert("why".into(), Value::String(why));
        }
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{}", Value::Object(line));
    }
}
