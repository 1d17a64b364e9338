//! Declared gates on a call: ask them, judge the answers, deliver the accepted ones. What a
//! gate's URL flow says is asked through [`Effects`] at the point the decision needs it.

use std::convert::identity;
use std::slice;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answers::{self, Checked, Reask};
use super::decision::{Decided, Decision, Effects, Round, Stop, invalid_state};
use super::policy::Config;
use super::reply::{ask, log_gate_refused, log_rejected, new_claims, reask, refuse, require};
use crate::gate::{Answers, ErasedFlow, Gate, GateCall, GateKind};
use crate::token::claims::{Claims, Questions, flow_handle};
use crate::token::format::Reject;
use crate::util::principal::shown;
use crate::wire::jsonrpc::{Call, INVALID_PARAMS, INVALID_REQUEST, Reply, ReplyKind, with_members};
use crate::wire::mcp::{InputKind, Method};

/// The gates that apply to one call.
pub(super) struct GateRound<'c> {
    gates: Vec<(&'c Gate, String)>,
    round: Round,
    /// The arguments as gates see them (messages, predicates).
    arguments: Value,
    /// The arguments' text as the client sent it, into which answers are injected.
    raw_arguments: Option<Box<RawValue>>,
    /// Until when (Unix seconds, skew included) the verified token holds; `None` without one.
    valid_until: Option<u64>,
    /// Gates asked again because what they bind changed since the token was sealed.
    changed: Vec<String>,
}

/// What accepted gate answers add to the forwarded call.
pub(super) struct Delivery {
    pub(super) responses: Map<String, Value>,
    /// The arguments' new JSON text, when an answer is injected into them.
    pub(super) arguments: Option<String>,
    pub(super) extension: Answers,
}

/// A gate's question as far as it is known before its URL flow is asked.
enum Question<'g> {
    /// Written whole (a form).
    Written(&'g str, Box<RawValue>),
    /// A URL gate's question, which needs its flow's URL.
    AwaitingUrl {
        gate: &'g Gate,
        flow: &'g dyn ErasedFlow,
        handle: &'g str,
        message: String,
    },
}

/// What a retry's answer to one pending gate calls for, before URL flows are asked.
enum Verdict<'g> {
    /// Accepted as it is.
    Accepted,
    /// A form to ask again: the question shown (with its hint), and the one to seal.
    AskAgain {
        key: &'g str,
        shown: Box<RawValue>,
        asked: Box<RawValue>,
    },
    /// A URL gate the client consented to: accepted once its flow completed.
    AwaitingCompletion {
        gate: &'g Gate,
        flow: &'g dyn ErasedFlow,
        handle: &'g str,
    },
}

impl<'c> GateRound<'c> {
    /// The gates on `round`'s call, with what each binds its approval to now; `None` when no
    /// gate applies. Two gates of one key on one call (which declaring them refuses, but a
    /// call's URI could still be spelt so that both match) fail closed: `-32603`.
    pub(super) fn new(
        config: &'c Config,
        round: &Round,
        arguments: Option<&Value>,
        raw_arguments: Option<&RawValue>,
    ) -> Result<Option<Self>, Reply> {
        let arguments = arguments.cloned().unwrap_or(Value::Null);
        let mut gates = Vec::new();
        for (_, gate) in config.gates_for(round.method, &round.target) {
            let handle = handle_of(config, round, gate);
            let call = call_of(round, &arguments, &handle);
            match gate.applies(&call) {
                Ok(true) => gates.push((gate, handle)),
                Ok(false) => {}
                Err(text) => {
                    log_gate_refused(round, "condition_refused");
                    return Err(refusal(round, &text, Some(&gate.key)));
                }
            }
        }
        if gates.is_empty() {
            return Ok(None);
        }
        for (at, (gate, _)) in gates.iter().enumerate() {
            if gates[..at].iter().any(|(other, _)| other.key == gate.key) {
                tracing::warn!(
                    target: "tower_elicitation",
                    gate = %gate.key,
                    "two gates of one key apply to this call: refused (-32603)"
                );
                return Err(Reply::internal(round.id.as_deref()));
            }
        }
        let mut gated = Self {
            gates,
            round: round.clone(),
            arguments,
            raw_arguments: raw_arguments.map(ToOwned::to_owned),
            valid_until: None,
            changed: Vec::new(),
        };
        let bindings = gated
            .gates
            .iter()
            .filter_map(|(gate, handle)| {
                let binding = gate.binding_for(&gated.call(handle))?;
                Some((gate.key.clone(), binding))
            })
            .collect();
        gated.round.bindings = bindings;
        Ok(Some(gated))
    }

    /// What each gate binds its approval to, now.
    pub(super) fn bindings(&self) -> &std::collections::BTreeMap<String, String> {
        &self.round.bindings
    }

    /// Each gate's own check of the call ([`Gate::check_call`]), in order: the first refusal
    /// ends the call before anyone is asked.
    pub(super) fn check_call(&self) -> Result<(), Reply> {
        for (gate, handle) in &self.gates {
            if let Err(text) = gate.check(&self.call(handle)) {
                log_gate_refused(&self.round, "check_failed");
                return Err(self.refusal(&text, Some(&gate.key)));
            }
        }
        Ok(())
    }

    /// The gates whose binding differs from the one `claims` sealed: their earlier answers no
    /// longer count, and they are asked again, saying so.
    pub(super) fn forget_changed(&mut self, claims: &Claims) -> bool {
        let changed: Vec<String> = self
            .gates
            .iter()
            .map(|(gate, _)| &gate.key)
            .filter(|key| self.round.bindings.get(*key) != claims.bindings.get(*key))
            .cloned()
            .collect();
        for key in &changed {
            self.round.gates.remove(key);
        }
        self.changed = changed;
        !self.changed.is_empty()
    }

    /// The same gates, on the round a verified token describes (their handles derived with
    /// the call's nonce it carries); the token holds until `valid_until` (Unix seconds, skew
    /// included). Their conditions are judged again, with the handles the call's own now: a
    /// condition may record what it decided by the handle (a decision's id), and one that
    /// refuses now refuses the call.
    pub(super) fn with_round(
        self,
        config: &Config,
        round: &Round,
        valid_until: u64,
    ) -> Result<Self, Reply> {
        let mut gates = Vec::with_capacity(self.gates.len());
        for (gate, _) in self.gates {
            let handle = handle_of(config, round, gate);
            if gate.is_conditional() {
                match gate.applies(&call_of(round, &self.arguments, &handle)) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(text) => {
                        log_gate_refused(round, "condition_refused");
                        return Err(refusal(round, &text, Some(&gate.key)));
                    }
                }
            }
            gates.push((gate, handle));
        }
        Ok(Self {
            gates,
            round: round.clone(),
            valid_until: Some(valid_until),
            ..self
        })
    }

    /// Whether every gate has an accepted answer (carried in the token).
    pub(super) fn all_accepted(&self) -> bool {
        self.pending().next().is_none()
    }

    fn pending(&self) -> impl Iterator<Item = &(&'c Gate, String)> {
        self.gates
            .iter()
            .filter(|(gate, _)| !self.round.gates.contains_key(&gate.key))
    }

    fn call<'s>(&'s self, handle: &'s str) -> GateCall<'s> {
        call_of(&self.round, &self.arguments, handle)
    }

    /// A gated call from a client that cannot answer: fail closed.
    pub(super) fn refuse_legacy(&self) -> Reply {
        let text = crate::texts::gate_needs_newer_client(&self.round.target);
        self.refusal(&text, None)
    }

    /// Asks every gate not yet accepted, in one round: their URL flows give their URLs first,
    /// in the gates' order, and what is sealed is dated after they answered.
    pub(super) async fn ask<E: Effects>(
        &self,
        config: &Config,
        now: u64,
        effects: &mut E,
    ) -> Decision<E> {
        // Before any flow is created: a client that cannot answer gets -32021 right away.
        require(
            &self.round,
            self.pending().map(|(gate, _)| match gate.kind {
                GateKind::Form { .. } => InputKind::Form,
                GateKind::Url { .. } => InputKind::Url,
            }),
        )?;
        let questions = self.questions()?;
        let (requests, now) = self.with_urls(questions, now, effects).await?;
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
            .filter(|(gate, _)| matches!(gate.kind, GateKind::Url { .. }))
            .map(|(gate, handle)| (gate.key.clone(), handle.clone()))
            .collect();
        if let Some(by) = self.expires_by(now) {
            claims.expires_at = claims.expires_at.min(by);
        }
        Ok(Decided::Respond(ask(round, claims, requests, config)))
    }

    /// When a question of the gates still pending must be answered by ([`Gate::approval_ttl`]),
    /// asked at `now`; `None` when none bounds it below the layer's own time to live.
    fn expires_by(&self, now: u64) -> Option<u64> {
        self.pending()
            .filter_map(|(gate, _)| gate.approval_ttl)
            .min()
            .map(|ttl| now.saturating_add(ttl))
    }

    /// The question of every pending gate, in order, a URL gate's without its URL yet.
    fn questions(&self) -> Result<Vec<Question<'_>>, Reply> {
        let mut questions = Vec::new();
        for (gate, handle) in self.pending() {
            let mut message = gate.message_for(&self.call(handle));
            if self.changed.contains(&gate.key) {
                message.push_str("\n\n");
                message.push_str(crate::texts::GATE_CHANGED);
            }
            questions.push(match &gate.kind {
                GateKind::Form { schema } => Question::Written(
                    &gate.key,
                    self.request(Params {
                        mode: "form",
                        message: &message,
                        requested_schema: Some(schema),
                        url: None,
                        meta: gate.meta_for(&self.call(handle)),
                    })?,
                ),
                GateKind::Url { flow } => Question::AwaitingUrl {
                    gate,
                    flow: flow.as_ref(),
                    handle,
                    message,
                },
            });
        }
        Ok(questions)
    }

    /// `questions` written whole: each URL flow asked for its URL, in order. With `now`, or the
    /// time after the flows answered when any was asked.
    async fn with_urls<E: Effects>(
        &self,
        questions: Vec<Question<'_>>,
        now: u64,
        effects: &mut E,
    ) -> Result<(Questions, u64), Stop<E::Error>> {
        let mut urls = Vec::new();
        for question in &questions {
            if let Question::AwaitingUrl {
                gate, flow, handle, ..
            } = question
            {
                urls.push(self.flow_url(gate, *flow, handle, effects).await?);
            }
        }
        let now = if urls.is_empty() {
            now
        } else {
            self.after_flows(effects)?
        };
        let mut urls = urls.into_iter();
        let mut requests = Questions::new();
        for question in questions {
            match question {
                Question::Written(key, request) => {
                    requests.insert(key.to_owned(), request);
                }
                Question::AwaitingUrl {
                    gate,
                    handle,
                    message,
                    ..
                } => {
                    let url = urls.next().unwrap_or_default();
                    let request = self.request(Params {
                        mode: "url",
                        message: &message,
                        requested_schema: None,
                        url: Some(&url),
                        meta: gate.meta_for(&self.call(handle)),
                    })?;
                    requests.insert(gate.key.clone(), request);
                }
            }
        }
        Ok((requests, now))
    }

    /// A URL flow's URL; when it cannot give one, the call ends with an internal error.
    async fn flow_url<E: Effects>(
        &self,
        gate: &Gate,
        flow: &dyn ErasedFlow,
        handle: &str,
        effects: &mut E,
    ) -> Result<String, Stop<E::Error>> {
        effects
            .flow_url(flow, &self.call(handle))
            .await
            .map_err(|error| {
                tracing::warn!(
                    target: "tower_elicitation",
                    gate = %gate.key,
                    %error,
                    "a URL flow could not give its URL"
                );
                Stop::Undecided(Reply::internal(self.round.id.as_deref()))
            })
    }

    /// Now, once URL flows answered. A verified token that expired while they answered is
    /// refused, as it would be had the call arrived now.
    fn after_flows<E: Effects>(&self, effects: &E) -> Result<u64, Stop<E::Error>> {
        let now = effects.now();
        if self.valid_until.is_some_and(|until| now >= until) {
            log_rejected(
                &self.round,
                Reject::Expired.code(),
                &Reject::Expired.to_string(),
            );
            return Err(Stop::Undecided(invalid_state(self.round.id.as_deref())));
        }
        Ok(now)
    }

    /// The retry of a gate round: judge the answers; forward when every gate accepts.
    pub(super) async fn judge_retry<E: Effects>(
        &self,
        claims: &Claims,
        responses: &Map<String, Value>,
        call: &Call<'_>,
        config: &Config,
        now: u64,
        effects: &mut E,
    ) -> Decision<E> {
        if !self
            .pending()
            .all(|(gate, _)| claims.questions.contains_key(&gate.key))
        {
            // The gates changed since this token was made: ask the ones not asked.
            return self.ask(config, now, effects).await;
        }
        let round = &self.round;
        let answers = match answers::check(
            &claims.questions,
            &claims.accepted,
            responses.clone(),
            &config.validators,
        ) {
            Err(answers::WrongShape(why)) => {
                return Err(refuse(round, INVALID_PARAMS, &why, None).into());
            }
            Ok(Checked::Reask(again)) => {
                let by = self.expires_by(now);
                let reply = reask(round, claims, again, config, now, by);
                return Err(reply.unwrap_or_else(identity).into());
            }
            Ok(Checked::Complete(answers)) => answers,
        };
        let verdicts = self.verdicts(claims, &answers, config)?;
        let (again, mut asked, completed, now) = self
            .with_completions(verdicts, claims, now, effects)
            .await?;
        if !again.is_empty() {
            // A flow that completed is spent by its check: its gate is accepted for the rest of
            // the call (claim `g`), never checked again.
            let mut round = round.clone();
            for key in &completed {
                round.gates.insert(key.clone(), answers[key].clone());
                asked.shift_remove(key);
            }
            let kept = answers
                .into_iter()
                .filter(|(key, _)| !again.contains_key(key) && !completed.contains(key))
                .collect();
            let by = self.expires_by(now);
            let again = Reask {
                ask: again,
                asked,
                kept,
                kinds: None,
            };
            let reply = reask(&round, claims, again, config, now, by);
            return Err(reply.unwrap_or_else(identity).into());
        }
        Ok(self.forward_accepted(claims, &answers, call))
    }

    /// What each pending gate's answer calls for, in order; a refusal when one is declined, or
    /// is a form its gate refuses with no retry left.
    fn verdicts<'s>(
        &'s self,
        claims: &'s Claims,
        answers: &Map<String, Value>,
        config: &Config,
    ) -> Result<Vec<Verdict<'s>>, Reply> {
        let mut verdicts = Vec::new();
        for (gate, handle) in self.pending() {
            // The handle the flow was asked with, even if the signing key rotated since.
            let handle = claims.flow_handles.get(&gate.key).unwrap_or(handle);
            let answer = &answers[&gate.key];
            let action = answer.get("action").and_then(Value::as_str);
            if action != Some("accept") {
                let why = if action == Some("decline") {
                    "declined"
                } else {
                    "cancelled"
                };
                return Err(self.refuse_gate(gate, handle, why));
            }
            verdicts.push(match &gate.kind {
                GateKind::Form { schema } => {
                    self.form_verdict(gate, schema, answer, handle, claims, config)?
                }
                GateKind::Url { flow } => Verdict::AwaitingCompletion {
                    gate,
                    flow: flow.as_ref(),
                    handle,
                },
            });
        }
        Ok(verdicts)
    }

    /// An accepted form: kept when its gate allows it; with a retry hint, asked again while
    /// rounds remain (the gate's own question, nothing an earlier round pre-filled); else refused.
    fn form_verdict<'g>(
        &self,
        gate: &'g Gate,
        schema: &RawValue,
        answer: &Value,
        handle: &str,
        claims: &Claims,
        config: &Config,
    ) -> Result<Verdict<'g>, Reply> {
        let empty = Map::new();
        let content = answer
            .get("content")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if gate.allows(content, &self.call(handle)) {
            return Ok(Verdict::Accepted);
        }
        match &gate.retry_hint {
            Some(hint) if claims.round < config.max_rounds => {
                let message = gate.message_for(&self.call(handle));
                let question = self.request(Params {
                    mode: "form",
                    message: &message,
                    requested_schema: Some(schema),
                    url: None,
                    meta: gate.meta_for(&self.call(handle)),
                })?;
                Ok(Verdict::AskAgain {
                    key: &gate.key,
                    shown: answers::with_retry_hint(&question, hint),
                    asked: question,
                })
            }
            _ => Err(self.refuse_gate(gate, handle, "not_allowed")),
        }
    }

    /// The gates to ask again, each with a line saying why, the questions to seal, and the keys
    /// of the URL gates whose flows completed: each URL flow the client consented to is asked
    /// whether it completed, in order. With `now`, or the time after the flows answered when any
    /// was asked.
    async fn with_completions<E: Effects>(
        &self,
        verdicts: Vec<Verdict<'_>>,
        claims: &Claims,
        now: u64,
        effects: &mut E,
    ) -> Result<(Questions, Questions, Vec<String>, u64), Stop<E::Error>> {
        let mut completed = Vec::new();
        for verdict in &verdicts {
            if let Verdict::AwaitingCompletion { flow, handle, .. } = verdict {
                completed.push(effects.flow_complete(*flow, &self.call(handle)).await);
            }
        }
        let now = if completed.is_empty() {
            now
        } else {
            self.after_flows(effects)?
        };
        let mut completed = completed.into_iter();
        let mut again = Questions::new();
        let mut asked = claims.questions.clone();
        let mut done = Vec::new();
        for verdict in verdicts {
            match verdict {
                Verdict::Accepted => {}
                Verdict::AskAgain {
                    key,
                    shown,
                    asked: question,
                } => {
                    again.insert(key.to_owned(), shown);
                    asked.insert(key.to_owned(), question);
                }
                Verdict::AwaitingCompletion { gate, .. } => {
                    if completed.next() == Some(true) {
                        done.push(gate.key.clone());
                    } else {
                        // Consent is not completion: ask again, with the same URL.
                        let asked = &claims.questions[&gate.key];
                        let line = slice::from_ref(&gate.incomplete_hint);
                        again.insert(gate.key.clone(), answers::with_hint(asked, line));
                    }
                }
            }
        }
        Ok((again, asked, done, now))
    }

    /// Every gate accepted: the call forwarded with their answers delivered.
    fn forward_accepted<R>(
        &self,
        claims: &Claims,
        answers: &Map<String, Value>,
        call: &Call<'_>,
    ) -> Decided<R> {
        let mut accepted = self.round.gates.clone();
        for (gate, _) in self.pending() {
            accepted.insert(gate.key.clone(), answers[&gate.key].clone());
        }
        let round = Round {
            gates: accepted,
            number: claims.round,
            ..self.round.clone()
        };
        let delivery = self.delivery_of(&round.gates);
        let body = call.rewrite(
            None,
            Some(&delivery.responses),
            delivery.arguments.as_deref(),
        );
        Decided::Forward {
            body: Some(body),
            round,
            answers: Some(delivery.extension),
            outcome: Some("gates_accepted"),
        }
    }

    /// The gate answers carried in the token, as the inner service receives them.
    pub(super) fn delivery(&self) -> Delivery {
        self.delivery_of(&self.round.gates)
    }

    fn delivery_of(&self, accepted: &Map<String, Value>) -> Delivery {
        let mut injected: Vec<(&str, Value)> = Vec::new();
        for (gate, _) in &self.gates {
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

    /// The gate's refusal; `why` is `declined`, `cancelled` or `not_allowed` (an accepted answer
    /// its rules turn down), for the decision's event.
    fn refuse_gate(&self, gate: &Gate, handle: &str, why: &'static str) -> Reply {
        log_gate_refused(&self.round, why);
        self.refusal(&gate.refusal_text(&self.call(handle)), Some(&gate.key))
    }

    /// A tool error result for `tools/call`; a JSON-RPC error for prompts and resources.
    fn refusal(&self, text: &str, gate: Option<&str>) -> Reply {
        refusal(&self.round, text, gate)
    }
}

/// The call as `round`'s gates see it.
fn call_of<'s>(round: &'s Round, arguments: &'s Value, handle: &'s str) -> GateCall<'s> {
    GateCall {
        method: round.method.as_str(),
        target: &round.target,
        arguments,
        handle,
        principal: round.principal.as_deref().map(shown),
        caller: round.caller.as_ref(),
    }
}

/// `round`'s call refused with `text`: a `tools/call` error result, else `-32602` naming the
/// gate (or `-32600` when no gate is named: the client cannot answer).
fn refusal(round: &Round, text: &str, gate: Option<&str>) -> Reply {
    let id = round.id.as_deref();
    match round.method {
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
            Reply::error(ReplyKind::Answer, id, code, text, Some(data))
        }
    }
}

/// The flow handle of `gate` on `round`'s call: keyed with the active key, bound to the caller,
/// the method, the target, the arguments, the gate and the call's nonce.
fn handle_of(config: &Config, round: &Round, gate: &Gate) -> String {
    let (_, key) = config.keyring.active();
    flow_handle(
        key,
        round.principal.as_deref(),
        [
            round.method.as_str(),
            &round.target,
            &round.args,
            &gate.key,
            round.nonce.as_deref().unwrap_or_default(),
        ],
    )
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
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Map<String, Value>>,
}
