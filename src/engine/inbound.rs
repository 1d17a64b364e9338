//! The request side: verify, validate, decide.

use std::convert::identity;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::answers::{self, Checked};
use super::decision::{
    Context, Decided, FlowFacts, Inbound, Probed, Round, Spend, Steps, invalid_state, unavailable,
};
use super::gates::{GateRound, check_flow};
use super::outbound::{Outbound, Settle, settle_probe};
use super::policy::{AnswersWithoutState, Config, MAX_KEPT_META_LEN};
use super::reply::{log_outcome, reask, refuse};
use crate::store::Consumed;
use crate::token::claims::{Arguments, Binding};
use crate::token::{self, Clock};
use crate::wire::jsonrpc::{
    Call, Field, INVALID_PARAMS, Kind, Malformed, Meta, MetaMembers, Reply,
};
use crate::wire::mcp::{Declared, supports_mrtr};

/// Decides what to do with an MRTR call: asks URL flows (asynchronously) what the decision needs,
/// and probes the inner service through `inner` when the call carries answers without state.
/// `now` dates what is sealed after a flow or the probe answered.
pub(crate) async fn decide<S: Steps>(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    now: impl Fn() -> u64,
    steps: &mut S,
) -> Result<Decided<S::Response>, S::Error> {
    let mut decision = settle_flows(call, cx, config, &now).await;
    if let Inbound::Spend { spend, then } = decision {
        if let Err(reply) = spend_token(steps, &spend, call.id).await {
            return Ok(Decided::Respond(reply));
        }
        decision = *then;
    }
    Ok(match decision {
        Inbound::Respond(reply) => Decided::Respond(reply),
        Inbound::CheckFlows(_) | Inbound::Spend { .. } => {
            tracing::warn!(target: "tower_elicitation", "URL flow checks did not settle");
            Decided::Respond(Reply::internal(call.id))
        }
        Inbound::Forward {
            body,
            round,
            answers,
        } => Decided::Forward {
            body,
            round,
            answers,
        },
        Inbound::Probe {
            body,
            round,
            answers,
        } => match steps.probe(body, &round).await? {
            Probed::Failed(reply) => Decided::Respond(reply),
            Probed::Read {
                message: None,
                response,
            } => Decided::Pass(response),
            Probed::Read {
                message: Some(message),
                response,
            } => match settle_probe(&message, round, call, &answers, config, now()) {
                Settle::Respond(Outbound::Unchanged) => Decided::Pass(response),
                Settle::Respond(Outbound::Replace(reply)) => Decided::Respond(reply),
                Settle::Forward { body, round } => Decided::Forward {
                    body: Some(body),
                    round,
                    answers: None,
                },
            },
        },
    })
}

/// Consumes a verified single-use token's id: `Ok` when it was fresh; the frozen `-32602` when it
/// was spent already; `-32603` (HTTP 503) when the store cannot say.
async fn spend_token<S: Steps>(
    steps: &mut S,
    spend: &Spend,
    id: Option<&RawValue>,
) -> Result<(), Reply> {
    match steps.consume(spend).await {
        Ok(Consumed::Fresh) => Ok(()),
        Ok(_) => {
            tracing::info!(
                target: "tower_elicitation",
                outcome = "rejected_state",
                reason = "single-use token already used",
                "requestState refused"
            );
            Err(invalid_state(id))
        }
        Err(error) => {
            tracing::warn!(
                target: "tower_elicitation",
                %error,
                "cannot consume a single-use token: answering -32603 (HTTP 503), nothing forwarded"
            );
            Err(unavailable(id))
        }
    }
}

/// [`inbound`], asking URL flows between passes until it no longer needs them (or gives up).
async fn settle_flows(
    call: &Call<'_>,
    mut cx: Context<'_>,
    config: &Config,
    now: &impl Fn() -> u64,
) -> Inbound {
    let mut flows = FlowFacts::default();
    let mut decision = inbound(call, cx, config, &flows);
    // Each gate needs at most its URL or its completion, so this settles in a few passes.
    for _ in 0..3 {
        let Inbound::CheckFlows(queries) = &decision else {
            return decision;
        };
        for query in queries {
            if let Err(reply) = check_flow(config, query, &mut flows, call.id).await {
                return Inbound::Respond(reply);
            }
        }
        cx.now = now();
        decision = inbound(call, cx, config, &flows);
    }
    decision
}

/// Decides what to do with an MRTR call. `flows` holds what URL flows said, after a
/// [`Inbound::CheckFlows`].
///
/// With single-use tokens, whatever is decided once a token was verified comes wrapped in
/// [`Inbound::Spend`]: the adapter consumes the token's id before it does anything else.
fn inbound(call: &Call<'_>, cx: Context<'_>, config: &Config, flows: &FlowFacts) -> Inbound {
    let mut spend = None;
    let decision = match decide_once(call, cx, config, flows, &mut spend) {
        Ok(decision) => decision,
        Err(reply) => Inbound::Respond(reply),
    };
    match (spend, decision) {
        // Nothing is done before the flows answered: the token is spent by the final decision.
        (_, decision @ Inbound::CheckFlows(_)) => decision,
        (Some(spend), then) => Inbound::Spend {
            spend,
            then: Box::new(then),
        },
        (None, decision) => decision,
    }
}

fn decide_once(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    flows: &FlowFacts,
    spend: &mut Option<Spend>,
) -> Result<Inbound, Reply> {
    let id = call.id;
    let malformed = |m: Malformed| Reply::error(Kind::BadRequest, id, m.code, &m.message, None);

    let target = match call.field(call.method.target_field()).map_err(malformed)? {
        Field::Present(Value::String(target)) => target,
        Field::Absent | Field::Present(Value::Null) => String::new(),
        // Bound as text, a non-string name could not be told from another: refuse it here, as
        // any MCP server would.
        Field::Present(_) => {
            let message = format!(
                "Invalid params: `{}` must be a string",
                call.method.target_field()
            );
            return Err(Reply::error(
                Kind::Answer,
                id,
                INVALID_PARAMS,
                &message,
                None,
            ));
        }
    };
    let raw_arguments = call
        .method
        .arguments_field()
        .and_then(|name| call.raw_field(name));
    let arguments = Arguments::new(raw_arguments);
    let meta = read_meta(call, config).map_err(malformed)?;
    let version = meta
        .as_ref()
        .and_then(|meta| meta.version.as_deref())
        .or(cx.header_version);

    let mrtr = version.is_some_and(supports_mrtr);
    let has_state = call.raw_field("requestState").is_some();
    let state = call.state();
    let sealed_retry = matches!(state, Ok(Some(_)));
    let gated_call = config.has_gates(call.method, &target);
    // A retry's arguments are bound by their exact text when it is the text that was sealed; the
    // canonical form is needed first only where a token cannot vouch for them.
    let args = if mrtr && sealed_retry && !gated_call {
        // Filled in from the opened token below; nothing before that reads it.
        String::new()
    } else {
        canonical_args(&arguments, id)?
    };
    let round = Round {
        method: call.method,
        id: id.map(ToOwned::to_owned),
        target,
        args,
        exact: arguments.exact().map(ToOwned::to_owned),
        principal: cx.principal.map(<[u8]>::to_vec),
        declared: meta.map_or_else(Declared::default, |meta| meta.declared),
        mrtr,
        number: 0,
        gates: Map::new(),
    };
    let gated = if gated_call {
        // Gates see the arguments (messages, predicates, injection): parse them only then.
        let arguments = match call.method.arguments_field() {
            Some(name) => call.gate_view(name).map_err(malformed)?,
            None => Field::Absent,
        };
        GateRound::new(config, &round, arguments.as_ref(), raw_arguments, flows)
    } else {
        None
    };
    let has_responses = call.raw_field("inputResponses").is_some();

    if !round.mrtr {
        if let Some(gated) = &gated {
            return Err(gated.refuse_legacy());
        }
        // Older protocol versions have no multi round-trip requests: whatever rides in these
        // fields is unverified, so it never reaches the inner service.
        let body = (has_state || has_responses).then(|| call.rewrite(None, None, None));
        return Ok(Inbound::Forward {
            body,
            round,
            answers: None,
        });
    }

    let state = match state {
        Ok(state) => state,
        Err(()) => {
            log_rejected(&round, "requestState is not a string");
            return Err(invalid_state(id));
        }
    };
    let responses = read_responses(call, id)?;

    let Some(state) = state else {
        if let Some(gated) = &gated {
            // Answers without state cannot be trusted: a gated call starts by asking the gates.
            return gated.ask(config, cx.now);
        }
        return match responses {
            Some(answers) if !answers.is_empty() => without_state(call, round, answers, config),
            _ => {
                let body = (has_state || has_responses).then(|| call.rewrite(None, None, None));
                Ok(Inbound::Forward {
                    body,
                    round,
                    answers: None,
                })
            }
        };
    };

    let binding = Binding {
        method: call.method.as_str(),
        target: &round.target,
        args: &arguments,
        principal: cx.principal,
        audience: config.audience.as_deref(),
    };
    let clock = Clock {
        now: cx.now,
        skew: config.skew_secs,
    };
    let claims = match token::open(
        &config.keyring,
        Some(&config.sealed),
        &state,
        config.max_state_bytes,
        clock,
        &binding,
    ) {
        Ok(claims) => claims,
        Err(reason) => {
            canonical_args(&arguments, id)?;
            log_rejected(&round, &reason.to_string());
            return Err(invalid_state(id));
        }
    };

    if config.single_use {
        let Some(token_id) = &claims.token_id else {
            log_rejected(&round, "single-use tokens are on and this token has no id");
            return Err(invalid_state(id));
        };
        *spend = Some(Spend {
            id: token_id.clone(),
            until: claims.expires_at.saturating_add(config.skew_secs),
        });
    }

    let round = Round {
        // The token vouches for the arguments: by their canonical form, or by the very text
        // whose canonical form it carries.
        args: match arguments.canonical_if_known() {
            Some(args) => args.to_owned(),
            None => claims.arguments.clone(),
        },
        number: claims.round,
        gates: claims.gate_answers.clone(),
        ..round
    };
    let gated = gated.map(|g| g.with_round(&round));
    if let Some(gated) = &gated
        && !gated.all_accepted()
    {
        return gated.settle(
            &claims,
            &responses.unwrap_or_default(),
            call,
            config,
            cx.now,
        );
    }

    let responses = responses.unwrap_or_default();
    match answers::check(
        &claims.questions,
        &claims.accepted,
        responses,
        &config.validators,
    ) {
        Err(answers::Malformed(why)) => {
            Err(Reply::error(Kind::Answer, id, INVALID_PARAMS, &why, None))
        }
        Ok(Checked::Reask { ask, asked, kept }) => {
            Err(reask(&round, &claims, asked, ask, kept, config, cx.now).unwrap_or_else(identity))
        }
        Ok(Checked::Complete(mut answers)) => {
            log_outcome(&round, "forward");
            let delivered = gated.as_ref().map(GateRound::delivery);
            if let Some(delivery) = &delivered {
                answers.extend(delivery.responses.clone());
            }
            let answers_field = (!answers.is_empty()).then_some(&answers);
            let arguments = delivered.as_ref().and_then(|d| d.arguments.as_deref());
            let body = call.rewrite(claims.inner_state.as_deref(), answers_field, arguments);
            Ok(Inbound::Forward {
                body: Some(body),
                round,
                answers: delivered.map(|d| d.extension),
            })
        }
    }
}

/// What `params._meta` says, read once per distinct text of the two entries the layer reads
/// (protocol version and capabilities): a client sends the same ones with every request, next
/// to members that may change on each (a progress token). `None` when `_meta` is absent.
///
/// A `_meta` text seen before is found by one hash of it. Any other is searched for the two
/// entries, in one borrowed pass that refuses either one given twice, and found by their texts;
/// only when those are new too is the whole text kept, so a client whose `_meta` changes on
/// every call does not fill the memo.
fn read_meta(call: &Call<'_>, config: &Config) -> Result<Option<Arc<Meta>>, Malformed> {
    let Some(raw) = call.raw_field("_meta") else {
        return Ok(None);
    };
    let text = raw.get();
    let keep_text = text.len() <= MAX_KEPT_META_LEN;
    if keep_text && let Some(meta) = config.metas.get(text) {
        return Ok(Some(meta));
    }
    let members = MetaMembers::find(text)?;
    let version = members.version.map_or("", RawValue::get);
    let capabilities = members.capabilities.map_or("", RawValue::get);
    // The two texts joined by a NUL, which JSON text never holds: no key of one kind is a key of
    // the other, nor a whole `_meta` text. Built on the stack when it is short, as it is.
    let len = version.len() + 1 + capabilities.len();
    if len > MAX_KEPT_META_LEN {
        return members.read().map(|meta| Some(Arc::new(meta)));
    }
    let mut stack = [0u8; 512];
    let heap: String;
    let key = if len <= stack.len() {
        stack[..version.len()].copy_from_slice(version.as_bytes());
        stack[version.len() + 1..len].copy_from_slice(capabilities.as_bytes());
        std::str::from_utf8(&stack[..len]).ok()
    } else {
        heap = format!("{version}\0{capabilities}");
        Some(heap.as_str())
    };
    let Some(key) = key else {
        return members.read().map(|meta| Some(Arc::new(meta)));
    };
    if let Some(meta) = config.metas.get(key) {
        return Ok(Some(meta));
    }
    let meta = config.metas.get_or_try_insert(key, || members.read())?;
    if keep_text {
        config.metas.insert(text.into(), Arc::clone(&meta));
    }
    Ok(Some(meta))
}

/// The canonical digest of `arguments`; `-32600` when they repeat a key.
fn canonical_args(arguments: &Arguments<'_>, id: Option<&RawValue>) -> Result<String, Reply> {
    arguments.canonical().map(ToOwned::to_owned).map_err(|e| {
        Reply::error(
            Kind::BadRequest,
            id,
            crate::wire::jsonrpc::INVALID_REQUEST,
            &format!("Invalid Request: params.arguments: {e}"),
            None,
        )
    })
}

/// `params.inputResponses`: absent, or an object of objects.
fn read_responses(
    call: &Call<'_>,
    id: Option<&RawValue>,
) -> Result<Option<Map<String, Value>>, Reply> {
    let error = |message: &str| Reply::error(Kind::Answer, id, INVALID_PARAMS, message, None);
    match call.field("inputResponses") {
        Ok(Field::Absent) => Ok(None),
        Ok(Field::Present(Value::Object(responses))) => {
            if let Some((key, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
                return Err(error(&format!("inputResponses.{key} must be an object")));
            }
            Ok(Some(responses))
        }
        Ok(Field::Present(_)) => Err(error("inputResponses must be an object")),
        Err(m) => Err(Reply::error(Kind::BadRequest, id, m.code, &m.message, None)),
    }
}

/// Answers arrived with no `requestState`: there is no record of what was asked.
fn without_state(
    call: &Call<'_>,
    round: Round,
    answers: Map<String, Value>,
    config: &Config,
) -> Result<Inbound, Reply> {
    match config.without_state {
        AnswersWithoutState::Reject => Err(refuse(
            &round,
            INVALID_PARAMS,
            "inputResponses without requestState",
            None,
        )),
        AnswersWithoutState::Strip => Ok(Inbound::Forward {
            body: Some(call.rewrite(None, None, None)),
            round,
            answers: None,
        }),
        AnswersWithoutState::Probe => Ok(Inbound::Probe {
            body: call.rewrite(None, None, None),
            round,
            answers,
        }),
    }
}

fn log_rejected(round: &Round, reason: &str) {
    tracing::info!(
        target: "tower_elicitation",
        method = round.method.as_str(),
        target = %round.target,
        outcome = "rejected_state",
        reason,
        "requestState refused"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Keyring;
    use crate::wire::jsonrpc::{Peek, peek};

    /// An inner service on plain JSON: answers every probe with `answer`, and keeps what it got.
    struct Scripted {
        answer: Option<&'static str>,
        calls: Vec<String>,
    }

    impl Steps for Scripted {
        type Response = &'static str;
        type Error = ();
        async fn probe(&mut self, body: Vec<u8>, _: &Round) -> Result<Probed<&'static str>, ()> {
            self.calls.push(String::from_utf8(body).unwrap());
            Ok(Probed::Read {
                message: self.answer.map(|a| a.as_bytes().to_vec()),
                response: "the probe's own answer",
            })
        }
        async fn consume(&mut self, _: &Spend) -> Result<Consumed, String> {
            Err("single-use tokens are off in these tests".to_owned())
        }
    }

    const ASKS: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"approval":{"method":"elicitation/create","params":{"message":"Deploy?","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]}}}}}}"#;
    const DONE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;

    fn body(answers: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{}}}}}}{answers}}}}}"#
        )
    }

    async fn run(body: &str, answer: Option<&'static str>) -> (Decided<&'static str>, Vec<String>) {
        let config = Config::new(Keyring::new("k1", [7u8; 32]).unwrap());
        let Peek::Call(call) = peek(body.as_bytes()) else {
            panic!("an MRTR call: {body}")
        };
        let cx = Context {
            principal: None,
            header_version: None,
            now: 1_000,
        };
        let mut inner = Scripted {
            answer,
            calls: Vec::new(),
        };
        let decided = decide(&call, cx, &config, || 1_000, &mut inner)
            .await
            .unwrap();
        (decided, inner.calls)
    }

    #[tokio::test]
    async fn answers_without_state_that_answer_the_probe_are_forwarded_checked() {
        let answered = r#","inputResponses":{"approval":{"action":"accept","content":{"approve":true,"extra":1}}}"#;
        let (decided, calls) = run(&body(answered), Some(ASKS)).await;
        assert_eq!(calls.len(), 1);
        assert!(
            !calls[0].contains("inputResponses"),
            "the probe goes without them"
        );
        let Decided::Forward {
            body: Some(forwarded),
            ..
        } = decided
        else {
            panic!("forwarded: {decided:?}")
        };
        let forwarded = String::from_utf8(forwarded).unwrap();
        assert!(
            forwarded.contains(
                r#""inputResponses":{"approval":{"action":"accept","content":{"approve":true}}}"#
            ),
            "{forwarded}"
        );
    }

    #[tokio::test]
    async fn a_probe_that_asks_what_the_answers_do_not_answer_is_asked_again_sealed() {
        let wrong =
            r#","inputResponses":{"approval":{"action":"accept","content":{"approve":"yes"}}}"#;
        let (decided, calls) = run(&body(wrong), Some(ASKS)).await;
        assert_eq!(calls.len(), 1);
        let Decided::Respond(reply) = decided else {
            panic!("answered: {decided:?}")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(reply["result"]["resultType"], "input_required");
        assert!(
            reply["result"]["requestState"]
                .as_str()
                .unwrap()
                .starts_with("v1.k1.")
        );
    }

    #[tokio::test]
    async fn a_probe_answered_without_a_question_is_passed_on_as_it_came() {
        let answered =
            r#","inputResponses":{"approval":{"action":"accept","content":{"approve":true}}}"#;
        let (decided, calls) = run(&body(answered), Some(DONE)).await;
        assert_eq!(calls.len(), 1);
        assert!(
            matches!(decided, Decided::Pass("the probe's own answer")),
            "{decided:?}"
        );
        let (decided, _) = run(&body(answered), None).await;
        assert!(matches!(decided, Decided::Pass(_)), "{decided:?}");
    }

    #[tokio::test]
    async fn a_call_without_answers_is_not_probed() {
        let (decided, calls) = run(&body(""), Some(ASKS)).await;
        assert!(calls.is_empty());
        assert!(
            matches!(decided, Decided::Forward { body: None, .. }),
            "{decided:?}"
        );
    }
}
