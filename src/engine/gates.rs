//! Declared gates on a call: ask them, judge the answers, deliver the accepted ones.

use std::convert::identity;
use std::slice;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answers::{self, Checked};
use super::decision::{FlowFacts, FlowNeed, FlowQuery, Inbound, Round};
use super::policy::Config;
use super::reply::{ask, log_outcome, new_claims, reask, refuse, require};
use crate::gate::{Answers, Gate, GateCall, GateKind};
use crate::token::claims::{Claims, Questions, flow_handle};
use crate::wire::jsonrpc::{Call, INVALID_PARAMS, INVALID_REQUEST, Kind, Reply, with_members};
use crate::wire::mcp::{InputKind, Method};

/// The gates that apply to one call.
pub(super) struct GateRound<'c> {
    gates: Vec<(usize, &'c Gate, String)>,
    round: Round,
    /// The arguments as gates see them (messages, predicates).
    arguments: Value,
    /// The arguments' text as the client sent it, into which answers are injected.
    raw_arguments: Option<Box<RawValue>>,
    flows: &'c FlowFacts,
}

/// What accepted gate answers add to the forwarded call.
pub(super) struct Delivery {
    pub(super) responses: Map<String, Value>,
    /// The arguments' new JSON text, when an answer is injected into them.
    pub(super) arguments: Option<String>,
    pub(super) extension: Answers,
}

impl<'c> GateRound<'c> {
    /// The gates on `round`'s call; `None` when no gate applies.
    pub(super) fn new(
        config: &'c Config,
        round: &Round,
        arguments: Option<&Value>,
        raw_arguments: Option<&RawValue>,
        flows: &'c FlowFacts,
    ) -> Option<Self> {
        let (_, key) = config.keyring.active();
        let gates: Vec<_> = config
            .gates_for(round.method, &round.target)
            .map(|(index, gate)| {
                let handle = flow_handle(
                    key,
                    round.principal.as_deref(),
                    [round.method.as_str(), &round.target, &round.args, &gate.key],
                );
                (index, gate, handle)
            })
            .collect();
        if gates.is_empty() {
            return None;
        }
        Some(Self {
            gates,
            round: round.clone(),
            arguments: arguments.cloned().unwrap_or(Value::Null),
            raw_arguments: raw_arguments.map(ToOwned::to_owned),
            flows,
        })
    }

    /// The same gates, on the round a verified token describes.
    pub(super) fn with_round(self, round: &Round) -> Self {
        Self {
            round: round.clone(),
            ..self
        }
    }

    /// Whether every gate has an accepted answer (carried in the token).
    pub(super) fn all_accepted(&self) -> bool {
        self.pending().next().is_none()
    }

    fn pending(&self) -> impl Iterator<Item = &(usize, &'c Gate, String)> {
        self.gates
            .iter()
            .filter(|(_, gate, _)| !self.round.gates.contains_key(&gate.key))
    }

    fn call<'s>(&'s self, handle: &'s str) -> GateCall<'s> {
        GateCall {
            method: self.round.method.as_str(),
            target: &self.round.target,
            arguments: &self.arguments,
            handle,
            principal: self.round.principal.as_deref(),
        }
    }

    fn query(&self, index: usize, handle: &str, need: FlowNeed) -> FlowQuery {
        FlowQuery {
            gate: index,
            need,
            method: self.round.method,
            target: self.round.target.clone(),
            arguments: self.arguments.clone(),
            handle: handle.to_owned(),
            principal: self.round.principal.clone(),
        }
    }

    /// A gated call from a client that cannot answer: fail closed.
    pub(super) fn refuse_legacy(&self) -> Reply {
        let text = crate::texts::gate_needs_newer_client(&self.round.target);
        self.refusal(&text, None)
    }

    /// Asks every gate not yet accepted, in one round.
    pub(super) fn ask(&self, config: &Config, now: u64) -> Result<Inbound, Reply> {
        // Before any flow is created: a client that cannot answer gets -32021 right away.
        require(
            &self.round,
            self.pending().map(|(_, gate, _)| match gate.kind {
                GateKind::Form { .. } => InputKind::Form,
                GateKind::Url { .. } => InputKind::Url,
            }),
        )?;
        let mut requests = Questions::new();
        let mut queries = Vec::new();
        for (index, gate, handle) in self.pending() {
            let call = self.call(handle);
            let message = gate.message_for(&call);
            let params = match &gate.kind {
                GateKind::Form { schema } => Params {
                    mode: "form",
                    message: &message,
                    requested_schema: Some(schema),
                    url: None,
                },
                GateKind::Url { .. } => match self.flows.urls.get(&gate.key) {
                    Some(url) => Params {
                        mode: "url",
                        message: &message,
                        requested_schema: None,
                        url: Some(url),
                    },
                    None => {
                        queries.push(self.query(*index, handle, FlowNeed::Url));
                        continue;
                    }
                },
            };
            requests.insert(gate.key.clone(), self.request(params)?);
        }
        if !queries.is_empty() {
            return Ok(Inbound::CheckFlows(queries));
        }
        let round = &self.round;
        let mut claims = new_claims(
            round,
            round.number + 1,
            None,
            requests.clone(),
            Map::new(),
            config,
            now,
        );
        claims.flow_handles = self
            .pending()
            .filter(|(_, gate, _)| matches!(gate.kind, GateKind::Url { .. }))
            .map(|(_, gate, handle)| (gate.key.clone(), handle.clone()))
            .collect();
        Err(ask(round, claims, requests, config))
    }

    /// The retry of a gate round: judge the answers; forward when every gate accepts.
    pub(super) fn settle(
        &self,
        claims: &Claims,
        responses: &Map<String, Value>,
        call: &Call<'_>,
        config: &Config,
        now: u64,
    ) -> Result<Inbound, Reply> {
        if !self
            .pending()
            .all(|(_, gate, _)| claims.questions.contains_key(&gate.key))
        {
            // The gates changed since this token was made: ask the ones not asked.
            return self.ask(config, now);
        }
        let round = &self.round;
        let answers = match answers::check(
            &claims.questions,
            &claims.accepted,
            responses.clone(),
            &config.validators,
        ) {
            Err(answers::Malformed(why)) => {
                return Err(refuse(round, INVALID_PARAMS, &why, None));
            }
            Ok(Checked::Reask { ask, asked, kept }) => {
                return Err(
                    reask(round, claims, asked, ask, kept, config, now).unwrap_or_else(identity)
                );
            }
            Ok(Checked::Complete(answers)) => answers,
        };

        // Gates to ask again, each with a line saying why, and the questions to seal.
        let mut again = Questions::new();
        let mut asked = claims.questions.clone();
        let mut queries = Vec::new();
        for (index, gate, handle) in self.pending() {
            // The handle the flow was asked with, even if the signing key rotated since.
            let handle = claims.flow_handles.get(&gate.key).unwrap_or(handle);
            let answer = &answers[&gate.key];
            let action = answer.get("action").and_then(Value::as_str);
            if action != Some("accept") {
                return Err(self.refuse_gate(gate));
            }
            match &gate.kind {
                GateKind::Form { schema } => {
                    let empty = Map::new();
                    let content = answer
                        .get("content")
                        .and_then(Value::as_object)
                        .unwrap_or(&empty);
                    if !gate.allows(content, &self.call(handle)) {
                        // With a retry hint, ask again while rounds remain: the gate's own
                        // question, nothing an earlier round pre-filled.
                        match &gate.retry_hint {
                            Some(hint) if claims.round < config.max_rounds => {
                                let message = gate.message_for(&self.call(handle));
                                let question = self.request(Params {
                                    mode: "form",
                                    message: &message,
                                    requested_schema: Some(schema),
                                    url: None,
                                })?;
                                let shown = answers::with_hint(&question, slice::from_ref(hint));
                                again.insert(gate.key.clone(), shown);
                                asked.insert(gate.key.clone(), question);
                            }
                            _ => return Err(self.refuse_gate(gate)),
                        }
                    }
                }
                GateKind::Url { .. } => match self.flows.complete.get(&gate.key) {
                    None => queries.push(self.query(*index, handle, FlowNeed::Completion)),
                    Some(false) => {
                        // Consent is not completion: ask again, with the same URL.
                        let asked = &claims.questions[&gate.key];
                        let line = slice::from_ref(&gate.incomplete_hint);
                        again.insert(gate.key.clone(), answers::with_hint(asked, line));
                    }
                    Some(true) => {}
                },
            }
        }
        if !queries.is_empty() {
            return Ok(Inbound::CheckFlows(queries));
        }
        if !again.is_empty() {
            let kept = answers
                .into_iter()
                .filter(|(key, _)| !again.contains_key(key))
                .collect();
            return Err(
                reask(round, claims, asked, again, kept, config, now).unwrap_or_else(identity)
            );
        }

        let mut accepted = round.gates.clone();
        for (_, gate, _) in self.pending() {
            accepted.insert(gate.key.clone(), answers[&gate.key].clone());
        }
        let round = Round {
            gates: accepted,
            number: claims.round,
            ..round.clone()
        };
        log_outcome(&round, "gates_accepted");
        let delivery = self.delivery_of(&round.gates);
        let body = call.rewrite(
            None,
            Some(&delivery.responses),
            delivery.arguments.as_deref(),
        );
        Ok(Inbound::Forward {
            body: Some(body),
            round,
            answers: Some(delivery.extension),
        })
    }

    /// The gate answers carried in the token, as the inner service receives them.
    pub(super) fn delivery(&self) -> Delivery {
        self.delivery_of(&self.round.gates)
    }

    fn delivery_of(&self, accepted: &Map<String, Value>) -> Delivery {
        let mut injected: Vec<(&str, Value)> = Vec::new();
        for (_, gate, _) in &self.gates {
            let (Some(name), Some(answer)) = (&gate.inject, accepted.get(&gate.key)) else {
                continue;
            };
            let value = match gate.kind {
                GateKind::Form { .. } => answer.get("content").cloned().unwrap_or(Value::Null),
                GateKind::Url { .. } => Value::Bool(true),
            };
            injected.retain(|(other, _)| other != name);
            injected.push((name, value));
        }
        // Spliced into the client's own text: every other byte of the arguments stays as sent.
        let arguments =
            (!injected.is_empty()).then(|| with_members(self.raw_arguments.as_deref(), &injected));
        Delivery {
            responses: accepted.clone(),
            arguments,
            extension: Answers::new(accepted.clone()),
        }
    }

    /// A gate's elicitation request, its members in this order (and a form's schema members in
    /// the order the gate holds them).
    fn request(&self, params: Params<'_>) -> Result<Box<RawValue>, Reply> {
        serde_json::value::to_raw_value(&Request {
            method: "elicitation/create",
            params,
        })
        .map_err(|_| Reply::internal(self.round.id.as_deref()))
    }

    fn refuse_gate(&self, gate: &Gate) -> Reply {
        log_outcome(&self.round, "gate_refused");
        self.refusal(&gate.refusal, Some(&gate.key))
    }

    /// A tool error result for `tools/call`; a JSON-RPC error for prompts and resources.
    fn refusal(&self, text: &str, gate: Option<&str>) -> Reply {
        let id = self.round.id.as_deref();
        match self.round.method {
            Method::ToolsCall => Reply::result(
                id,
                &json!({
                    "resultType": "complete",
                    "content": [{"type": "text", "text": text}],
                    "isError": true,
                }),
            ),
            _ => {
                let (code, data) = match gate {
                    Some(gate) => (INVALID_PARAMS, json!({"reason": "refused", "gate": gate})),
                    None => (INVALID_REQUEST, json!({"reason": "requires_2026_07_28"})),
                };
                Reply::error(Kind::Answer, id, code, text, Some(data))
            }
        }
    }
}

/// A gate's elicitation request, written in this order.
#[derive(Serialize)]
struct Request<'a> {
    method: &'static str,
    params: Params<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Params<'a> {
    mode: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    requested_schema: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
}

/// Asks a gate's URL flow what the engine needs to know.
pub(super) async fn check_flow(
    config: &Config,
    query: &FlowQuery,
    flows: &mut FlowFacts,
    id: Option<&serde_json::value::RawValue>,
) -> Result<(), Reply> {
    let Some((_, gate)) = config.gates.get(query.gate) else {
        return Err(Reply::internal(id));
    };
    let GateKind::Url { flow } = &gate.kind else {
        return Err(Reply::internal(id));
    };
    let call = GateCall {
        method: query.method.as_str(),
        target: &query.target,
        arguments: &query.arguments,
        handle: &query.handle,
        principal: query.principal.as_deref(),
    };
    match query.need {
        FlowNeed::Url => match flow.url(&call).await {
            Ok(url) => {
                flows.urls.insert(gate.key.clone(), url);
            }
            Err(error) => {
                tracing::warn!(
                    target: "tower_elicitation",
                    gate = %gate.key,
                    %error,
                    "a URL flow could not give its URL"
                );
                return Err(Reply::internal(id));
            }
        },
        FlowNeed::Completion => {
            let complete = flow.is_complete(&call).await;
            flows.complete.insert(gate.key.clone(), complete);
        }
    }
    Ok(())
}
