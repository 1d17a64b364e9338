//! `/metrics`: counters in Prometheus's text format, from the decisions the library already
//! reports as `tracing` events (target `tower_elicitation`, field `outcome`) and the upstream
//! adapter's restarts: a `tracing` layer that counts, so the library carries no metrics code.
//!
//! | counter | what |
//! |---|---|
//! | `elicitation_proxy_decisions_total{outcome}` | each decision of the layer: `ask` (a question asked, or asked again), `sealed` (the upstream's own questions sealed), `forward`, `ungated` (a call no gate applied to), `gates_accepted`, `gate_refused` (declined, cancelled, or a rule not met), `refused` (an error answer, a replayed approval's too), `rejected_state`, `binding_changed` (asked again: the tool or gate changed), `unanswered` (a 2025-era host's timeout) |
//! | `elicitation_proxy_replays_refused_total` | retries with an approval already spent |
//! | `elicitation_proxy_gates_total{outcome}` | the file's gates: `asked` (a call's first ask), `accepted` (answers the gate's rules allow, counted once the single-use check passed: a replayed approval is counted in `replays_refused`, not here), `declined`, `cancelled`, `refused` (an accepted answer the gate's rules turn down) |
//! | `elicitation_proxy_reasks_total` | questions asked again: an answer missing or invalid, a gate's `retry_hint`, a URL flow not finished |
//! | `elicitation_proxy_tool_changes_total` | tools whose definition (description, `inputSchema`, annotations) changed since first listed, each counted once until a reload accepts it |
//! | `elicitation_proxy_refusals_total{why}` | calls refused before the gates, as the decision log's `refused` lines say: `hidden` (`expose`/`hide`), `rate_limited` (`[limits]`) |
//! | `elicitation_proxy_upstream_requests_total{upstream,outcome}` | requests sent to each upstream (the lone one is `default`, or its `name`): `answered` (a 2xx, whatever the JSON-RPC answer says), `failed` (any other status, or none) |
//! | `elicitation_proxy_upstream_restarts_total` | the upstream server started again (it exited or hung) |
//! | `elicitation_proxy_parked_calls` (gauge) | upstream calls held while the client answers the server's own questions |
//! | `elicitation_proxy_upstream_up{upstream}` (gauge) | 1 while a session of the upstream is up (handshaken, not restarting), else 0: each of several `[[upstream]]`, or the lone one (`name`, else `default`) |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// An upstream's state, for `/healthz` and `/metrics`.
#[derive(Debug, Clone)]
pub struct Health {
    pub name: String,
    pub up: bool,
    pub live_sessions: usize,
    pub sessions: usize,
}

/// The counters, shared by the layer that counts and the endpoint that shows them.
#[derive(Clone, Default)]
pub struct Metrics {
    counts: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    decisions: BTreeMap<String, u64>,
    gates: BTreeMap<&'static str, u64>,
    reasks: u64,
    replays: u64,
    restarts: u64,
    tool_changes: u64,
    refusals: BTreeMap<&'static str, u64>,
    /// By upstream (the file's names: a fixed set), requests answered and failed.
    upstream_requests: BTreeMap<String, [u64; 2]>,
}

/// The target of the events [`upstream_answered`] writes, which the counters read.
pub const UPSTREAM_TARGET: &str = "elicitation_proxy::upstream";

/// Records that upstream `name` answered a request with `status` (`None`: it could not be
/// reached), for `elicitation_proxy_upstream_requests_total`.
pub fn upstream_answered(name: &str, status: Option<http::StatusCode>) {
    let answered = status.is_some_and(|status| status.is_success());
    tracing::debug!(target: UPSTREAM_TARGET, upstream = name, answered, "upstream answered");
}

/// The reasons a call is refused before the gates (`decisions::REFUSAL_TARGET`'s `why`): the
/// label's values, fixed so that the series stay few whatever an event says.
const REFUSALS: [&str; 2] = ["hidden", "rate_limited"];

impl Metrics {
    /// Counts a tool whose definition changed since it was first listed.
    pub fn tool_changed(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tool_changes += 1;
    }

    /// The counters in Prometheus's text exposition format, `parked`, the calls the upstreams
    /// hold now, and whether each upstream is up.
    pub fn render(&self, parked: usize, upstreams: &[Health]) -> String {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        family(
            &mut out,
            "decisions_total counter",
            "Decisions of the elicitation layer, by outcome.",
        );
        for (outcome, count) in &counts.decisions {
            sample(&mut out, "decisions_total", ("outcome", outcome), count);
        }
        family(
            &mut out,
            "gates_total counter",
            "The file's gates, by outcome.",
        );
        for outcome in ["asked", "accepted", "declined", "cancelled", "refused"] {
            let count = counts.gates.get(outcome).copied().unwrap_or(0);
            sample(&mut out, "gates_total", ("outcome", outcome), count);
        }
        family(&mut out, "reasks_total counter", "Questions asked again.");
        let _ = writeln!(out, "elicitation_proxy_reasks_total {}", counts.reasks);
        family(
            &mut out,
            "replays_refused_total counter",
            "Retries with an approval already spent.",
        );
        let _ = writeln!(
            out,
            "elicitation_proxy_replays_refused_total {}",
            counts.replays
        );
        family(
            &mut out,
            "tool_changes_total counter",
            "Tools whose definition changed since first listed.",
        );
        let _ = writeln!(
            out,
            "elicitation_proxy_tool_changes_total {}",
            counts.tool_changes
        );
        family(
            &mut out,
            "refusals_total counter",
            "Calls refused before the gates, by why.",
        );
        for why in REFUSALS {
            let count = counts.refusals.get(why).copied().unwrap_or(0);
            sample(&mut out, "refusals_total", ("why", why), count);
        }
        family(
            &mut out,
            "upstream_requests_total counter",
            "Requests sent to each upstream, by outcome.",
        );
        for (upstream, [answered, failed]) in &counts.upstream_requests {
            for (outcome, count) in [("answered", answered), ("failed", failed)] {
                let _ = writeln!(
                    out,
                    "elicitation_proxy_upstream_requests_total{{upstream=\"{upstream}\",outcome=\"{outcome}\"}} {count}"
                );
            }
        }
        family(
            &mut out,
            "upstream_restarts_total counter",
            "Times the upstream server was started again.",
        );
        let _ = writeln!(
            out,
            "elicitation_proxy_upstream_restarts_total {}",
            counts.restarts
        );
        family(
            &mut out,
            "parked_calls gauge",
            "Upstream calls held while the client answers the server's questions.",
        );
        let _ = writeln!(out, "elicitation_proxy_parked_calls {parked}");
        family(
            &mut out,
            "upstream_up gauge",
            "Whether a session of the upstream is up (1) or not (0).",
        );
        for upstream in upstreams {
            let up = u8::from(upstream.up);
            sample(&mut out, "upstream_up", ("upstream", &upstream.name), up);
        }
        out
    }
}

/// A metric's `# HELP` and `# TYPE` lines: `name_and_type` is its name after
/// `elicitation_proxy_` and its type (`gates_total counter`).
fn family(out: &mut String, name_and_type: &str, help: &str) {
    let name = name_and_type.split(' ').next().unwrap_or_default();
    let _ = writeln!(out, "# HELP elicitation_proxy_{name} {help}");
    let _ = writeln!(out, "# TYPE elicitation_proxy_{name_and_type}");
}

/// One sample of the metric `name` (after `elicitation_proxy_`) with one label.
fn sample(
    out: &mut String,
    name: &str,
    (label, value): (&str, &str),
    count: impl std::fmt::Display,
) {
    let _ = writeln!(
        out,
        "elicitation_proxy_{name}{{{label}=\"{value}\"}} {count}"
    );
}

/// What one event says, of the fields counted.
#[derive(Default)]
struct Fields {
    outcome: Option<String>,
    reason: Option<String>,
    why: Option<String>,
    round: Option<u64>,
    message: Option<String>,
    upstream: Option<String>,
    answered: Option<bool>,
}

impl Visit for Fields {
    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "answered" {
            self.answered = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "outcome" => self.outcome = Some(value.to_owned()),
            "reason" => self.reason = Some(value.to_owned()),
            "why" => self.why = Some(value.to_owned()),
            "message" => self.message = Some(value.to_owned()),
            "upstream" => self.upstream = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "round" {
            self.round = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber> Layer<S> for Metrics {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let target = event.metadata().target();
        if target == UPSTREAM_TARGET {
            let mut fields = Fields::default();
            event.record(&mut fields);
            if let (Some(upstream), Some(answered)) = (fields.upstream, fields.answered) {
                let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                counts.upstream_requests.entry(upstream).or_default()[usize::from(!answered)] += 1;
            }
            return;
        }
        if target == crate::decisions::REFUSAL_TARGET {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let why = REFUSALS
                .into_iter()
                .find(|&why| fields.why.as_deref() == Some(why));
            if let Some(why) = why {
                let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                *counts.refusals.entry(why).or_default() += 1;
            }
            return;
        }
        if !target.starts_with("tower_elicitation") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(outcome) = fields.outcome {
            if fields
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("already used"))
            {
                counts.replays += 1;
            }
            let gate = match (outcome.as_str(), fields.why.as_deref()) {
                ("ask", _) if fields.round.unwrap_or(0) > 0 => {
                    counts.reasks += 1;
                    None
                }
                ("ask", _) => Some("asked"),
                ("gates_accepted", _) => Some("accepted"),
                ("gate_refused", Some("declined")) => Some("declined"),
                ("gate_refused", Some("cancelled")) => Some("cancelled"),
                ("gate_refused", _) => Some("refused"),
                _ => None,
            };
            if let Some(gate) = gate {
                *counts.gates.entry(gate).or_default() += 1;
            }
            *counts.decisions.entry(outcome).or_default() += 1;
        } else if fields.message.as_deref() == Some("restarting the server") {
            counts.restarts += 1;
        }
    }
}
