//! The request side: verify, validate, decide, in one pass.

use std::convert::identity;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::answers::{self, Checked};
use super::decision::{
    Context, Decided, Decision, Effects, Probed, Round, SingleUseId, Stop, invalid_state,
    unavailable,
};
use super::gates::GateRound;
use super::outbound::{Outbound, ProbeVerdict, judge_probe};
use super::policy::{AnswersWithoutState, Config, MAX_KEPT_META_LEN};
use super::reply::{log_outcome, log_rejected, reask, refuse, round_event};
use crate::store::Consumed;
use crate::token::claims::{Arguments, Binding, Claims};
use crate::token::{self, Clock};
use crate::wire::jsonrpc::{
    Call, Field, INVALID_PARAMS, Malformed, Meta, MetaMembers, Reply, ReplyKind,
};
use crate::wire::mcp::{Declared, supports_mrtr};

/// Decides what to do with an MRTR call, in one pass, reaching the world only through
/// `effects`: URL flows are asked what the decision needs where it needs it (and what is sealed
/// after they answered is dated then), the inner service is probed when the call carries answers
/// without state, and a verified single-use token's id is consumed once the decision is made,
/// before it leaves.
pub(crate) async fn decide<E: Effects>(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    effects: &mut E,
) -> Result<Decided<E::Response>, E::Error> {
    let mut single_use = None;
    let decided = match decide_once(call, cx, config, effects, &mut single_use).await {
        Ok(decided) => decided,
        Err(Stop::Reply(reply)) => Decided::Respond(reply),
        // Nothing was decided (a URL flow failed, or the token expired while they answered):
        // no id is consumed.
        Err(Stop::Undecided(reply)) => return Ok(Decided::Respond(reply)),
        Err(Stop::Inner(error)) => return Err(error),
    };
    // Once a token was verified, nothing is forwarded, and no token sealed from it (a re-ask's)
    // leaves, before its id is consumed: after the flows answered, by the decision made.
    if let Some((token, round)) = single_use
        && let Err(reply) = consume(effects, &token, call.id, &round).await
    {
        return Ok(Decided::Respond(reply));
    }
    // A forward's event, only now that nothing can refuse it any more.
    if let Decided::Forward {
        round,
        outcome: Some(outcome),
        ..
    } = &decided
    {
        log_outcome(round, outcome);
    }
    Ok(decided)
}

/// Consumes a verified single-use token's id: `Ok` when it was fresh and sealed within the
/// store's present memory; the frozen `-32602` when it was spent already, or sealed before the
/// store's epoch (it may have been spent, and forgotten); `-32603` (HTTP 503) when the store
/// cannot say.
///
/// A token refused here is logged as the call's refusal (outcome `refused`, with `round`'s
/// method and target), never as what it would have been.
async fn consume<E: Effects>(
    effects: &mut E,
    token: &SingleUseId,
    id: Option<&RawValue>,
    round: &Round,
) -> Result<(), Reply> {
    let spent = match effects.consume(token).await {
        Ok(Consumed::Fresh) => effects.epoch().await.map(|epoch_ms| {
            let before = match token.epoch {
                // Bound to the epoch it was sealed under: accepted only while the store is
                // still in it, whatever any clock says.
                Some(sealed_under) => sealed_under != epoch_ms,
                // A token sealed before tokens named their epoch: dated by its whole second,
                // so one sealed in the second the epoch began is refused with the older ones.
                None => token.issued_at.saturating_mul(1000) < epoch_ms,
            };
            before.then_some("single-use token sealed before the store's epoch (the store lost its spent ids since)")
        }),
        Ok(_) => Ok(Some("single-use token already used")),
        Err(error) => Err(error),
    };
    match spent {
        Ok(None) => Ok(()),
        Ok(Some(reason)) => {
            round_event!(
                info,
                round,
                outcome = "refused",
                why = "single_use",
                reason,
                "requestState refused: its single-use token was spent"
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

/// The decision on an MRTR call. With single-use tokens, `single_use` is set to the id of the
/// token once it is verified, with its round: [`decide`] consumes it before the decision leaves.
async fn decide_once<E: Effects>(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    effects: &mut E,
    single_use: &mut Option<(SingleUseId, Round)>,
) -> Decision<E> {
    let id = call.id;
    let raw_arguments = call
        .method
        .arguments_field()
        .and_then(|name| call.raw_field(name));
    let arguments = Arguments::new(raw_arguments);
    let state = call.state();
    let sealed_retry = matches!(state, Ok(Some(_)));
    let (mut round, gated_call) = read_round(call, cx, config, &arguments, sealed_retry)?;
    if !sealed_retry {
        if gated_call {
            // A call of its own: its flows get handles no other call shares.
            round.nonce = Some(crate::token::claims::call_nonce());
        }
        if config.single_use && round.mrtr {
            // Whatever is sealed for this call is bound to the store's epoch as it is now.
            round.epoch = Some(effects.current_epoch().await);
        }
    }
    let gated = if gated_call {
        gate_round(call, config, &round, raw_arguments)?
    } else {
        None
    };
    if let Some(gated) = &gated {
        // Nobody is asked about a call bound to fail.
        gated.check_call()?;
        round.bindings = gated.bindings().clone();
    }
    let has_unverified =
        call.raw_field("requestState").is_some() || call.raw_field("inputResponses").is_some();

    if !round.mrtr {
        return Ok(forward_legacy(call, round, gated.as_ref(), has_unverified)?);
    }

    let Ok(state) = state else {
        log_rejected(&round, "malformed", "requestState is not a string");
        return Err(invalid_state(id).into());
    };
    let responses = read_responses(call, id)?;

    let Some(state) = state else {
        if let Some(gated) = &gated {
            // Answers without state cannot be trusted: a gated call starts by asking the gates.
            return gated.ask(config, cx.now, effects).await;
        }
        return match responses {
            Some(answers) if !answers.is_empty() => {
                without_state(call, round, answers, config, effects).await
            }
            _ => Ok(forward_stripped(call, round, has_unverified)),
        };
    };

    let claims = open_state(call, cx, config, &round, &arguments, &state)?;
    let valid_until = claims.expires_at.saturating_add(config.skew_secs);
    *single_use =
        single_use_id(&claims, valid_until, config, &round)?.map(|id| (id, round.clone()));

    let mut round = verified_round(round, &claims, &arguments);
    if config.single_use && round.epoch.is_none() {
        // A token sealed before tokens named their epoch: what is sealed from it names the
        // present one.
        round.epoch = Some(effects.current_epoch().await);
    }
    let mut gated = gated
        .map(|g| g.with_round(config, &round, valid_until))
        .transpose()?;
    if let Some(gated) = &mut gated
        && gated.forget_changed(&claims)
    {
        // What was approved is not what would run: nothing is forwarded on that approval.
        round_event!(
            info,
            round,
            outcome = "binding_changed",
            why = "changed",
            "a gate's binding changed since it was asked: asking again"
        );
        return gated.ask(config, cx.now, effects).await;
    }
    let responses = responses.unwrap_or_default();
    if let Some(gated) = &gated
        && !gated.all_accepted()
    {
        return gated
            .judge_retry(&claims, &responses, call, config, cx.now, effects)
            .await;
    }
    let decided = forward_answered(
        call,
        &claims,
        round,
        gated.as_ref(),
        responses,
        config,
        cx.now,
    )?;
    Ok(decided)
}

/// A call in an older protocol version, which has no multi round-trip requests: refused when
/// gated (fail closed); else forwarded, without what rides in `requestState` and
/// `inputResponses` when it carries either (`strip`): unverified, it never reaches the inner
/// service.
fn forward_legacy<R>(
    call: &Call<'_>,
    round: Round,
    gated: Option<&GateRound<'_>>,
    strip: bool,
) -> Result<Decided<R>, Reply> {
    if let Some(gated) = gated {
        return Err(gated.refuse_legacy());
    }
    Ok(forward_stripped(call, round, strip))
}

/// With single-use tokens on, the id of the verified token (held until `valid_until`); the
/// frozen `-32602` when it has none.
fn single_use_id(
    claims: &Claims,
    valid_until: u64,
    config: &Config,
    round: &Round,
) -> Result<Option<SingleUseId>, Reply> {
    if !config.single_use {
        return Ok(None);
    }
    let Some(token_id) = &claims.token_id else {
        log_rejected(
            round,
            "malformed",
            "single-use tokens are on and this token has no id",
        );
        return Err(invalid_state(round.id.as_deref()));
    };
    Ok(Some(SingleUseId {
        id: token_id.clone(),
        until: valid_until,
        issued_at: claims.issued_at,
        epoch: claims.epoch,
    }))
}

/// The call's round as it arrives (before any token vouches for it), and whether a gate applies
/// to it.
fn read_round(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    arguments: &Arguments<'_>,
    sealed_retry: bool,
) -> Result<(Round, bool), Reply> {
    let id = call.id;
    let target = read_target(call)?;
    let meta = read_meta(call, config).map_err(|m| m.reply(id))?;
    let version = meta
        .as_ref()
        .and_then(|meta| meta.version.as_deref())
        .or(cx.header_version);
    let mrtr = version.is_some_and(supports_mrtr);
    let gated_call = config.has_gates(call.method, &target);
    // A retry's arguments are bound by their exact text when it is the text that was sealed; the
    // canonical form is needed first only where a token cannot vouch for them.
    let args = if mrtr && sealed_retry && !gated_call {
        // Filled in from the opened token (`verified_round`); nothing before that reads it.
        String::new()
    } else {
        canonical_args(arguments, id)?
    };
    let round = Round {
        method: call.method,
        id: id.map(ToOwned::to_owned),
        target,
        args,
        exact: arguments.exact().map(ToOwned::to_owned),
        principal: cx.principal.map(<[u8]>::to_vec),
        caller: cx.caller.cloned(),
        declared: meta.map_or_else(Declared::default, |meta| meta.declared),
        mrtr,
        number: 0,
        gates: Map::new(),
        nonce: None,
        epoch: None,
        bindings: Default::default(),
    };
    Ok((round, gated_call))
}

/// The call's target (the tool's or prompt's name, the resource's URI); empty when absent.
fn read_target(call: &Call<'_>) -> Result<String, Reply> {
    let id = call.id;
    match call.field(call.method.target_field()) {
        Err(m) => Err(m.reply(id)),
        Ok(Field::Present(Value::String(target))) => Ok(target),
        Ok(Field::Absent | Field::Present(Value::Null)) => Ok(String::new()),
        // Bound as text, a non-string name could not be told from another: refuse it here, as
        // any MCP server would.
        Ok(Field::Present(_)) => {
            let message = format!(
                "Invalid params: `{}` must be a string",
                call.method.target_field()
            );
            Err(Reply::error(
                ReplyKind::Answer,
                id,
                INVALID_PARAMS,
                &message,
                None,
            ))
        }
    }
}

/// The gates on a gated call; they see the arguments (messages, predicates, injection), so
/// these are parsed only here.
fn gate_round<'c>(
    call: &Call<'_>,
    config: &'c Config,
    round: &Round,
    raw_arguments: Option<&RawValue>,
) -> Result<Option<GateRound<'c>>, Reply> {
    let arguments = match call.method.arguments_field() {
        Some(name) => call.gate_view(name).map_err(|m| m.reply(call.id))?,
        None => Field::Absent,
    };
    GateRound::new(config, round, arguments.as_ref(), raw_arguments)
}

/// The call forwarded without what the layer could not verify: rewritten without
/// `requestState` and `inputResponses` when `strip` (it carries either), else as it came.
fn forward_stripped<R>(call: &Call<'_>, round: Round, strip: bool) -> Decided<R> {
    Decided::Forward {
        body: strip.then(|| call.rewrite(None, None, None)),
        round,
        answers: None,
        outcome: Some("ungated"),
    }
}

/// The claims of the call's `requestState`, opened and checked against the call, now; the
/// frozen `-32602` when they do not hold.
fn open_state(
    call: &Call<'_>,
    cx: Context<'_>,
    config: &Config,
    round: &Round,
    arguments: &Arguments<'_>,
    state: &str,
) -> Result<Arc<Claims>, Reply> {
    let binding = Binding {
        method: call.method.as_str(),
        target: &round.target,
        args: arguments,
        principal: cx.principal,
        audience: config.audience.as_deref(),
    };
    let clock = Clock {
        now: cx.now,
        skew: config.skew_secs,
    };
    token::open(
        &config.keyring,
        Some(&config.sealed),
        state,
        config.max_state_bytes,
        clock,
        &binding,
    )
    .or_else(|reason| {
        canonical_args(arguments, call.id)?;
        log_rejected(round, reason.code(), &reason.to_string());
        Err(invalid_state(call.id))
    })
}

/// The round a verified token describes.
fn verified_round(round: Round, claims: &Claims, arguments: &Arguments<'_>) -> Round {
    Round {
        // The token vouches for the arguments: by their canonical form, or by the very text
        // whose canonical form it carries.
        args: match arguments.canonical_if_known() {
            Some(args) => args.to_owned(),
            None => claims.arguments.clone(),
        },
        number: claims.round,
        gates: claims.gate_answers.clone(),
        nonce: claims.nonce.clone(),
        epoch: claims.epoch,
        ..round
    }
}

/// A verified retry whose gates all accepted: its answers checked against the questions the
/// token records, then forwarded (with the gates' answers delivered), or asked again.
fn forward_answered<R>(
    call: &Call<'_>,
    claims: &Claims,
    round: Round,
    gated: Option<&GateRound<'_>>,
    responses: Map<String, Value>,
    config: &Config,
    now: u64,
) -> Result<Decided<R>, Reply> {
    match answers::check(
        &claims.questions,
        &claims.accepted,
        responses,
        &config.validators,
    ) {
        Err(answers::WrongShape(why)) => Err(Reply::error(
            ReplyKind::Answer,
            call.id,
            INVALID_PARAMS,
            &why,
            None,
        )),
        Ok(Checked::Reask(again)) => {
            Err(reask(&round, claims, again, config, now, None).unwrap_or_else(identity))
        }
        Ok(Checked::Complete(mut answers)) => {
            let delivered = gated.map(GateRound::delivery);
            if let Some(delivery) = &delivered {
                answers.extend(delivery.responses.clone());
            }
            let answers_field = (!answers.is_empty()).then_some(&answers);
            let arguments = delivered.as_ref().and_then(|d| d.arguments.as_deref());
            let body = call.rewrite(claims.inner_state.as_deref(), answers_field, arguments);
            Ok(Decided::Forward {
                body: Some(body),
                round,
                answers: delivered.map(|d| d.extension),
                outcome: Some("forward"),
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
            ReplyKind::BadRequest,
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
    let error = |message: &str| Reply::error(ReplyKind::Answer, id, INVALID_PARAMS, message, None);
    match call.field("inputResponses") {
        Ok(Field::Absent) => Ok(None),
        Ok(Field::Present(Value::Object(responses))) => {
            if let Some((key, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
                return Err(error(&format!("inputResponses.{key} must be an object")));
            }
            Ok(Some(responses))
        }
        Ok(Field::Present(_)) => Err(error("inputResponses must be an object")),
        Err(m) => Err(m.reply(id)),
    }
}

/// Answers arrived with no `requestState`: there is no record of what was asked. Refused,
/// stripped, or checked against what the inner service asks when it is probed without them.
async fn without_state<E: Effects>(
    call: &Call<'_>,
    round: Round,
    answers: Map<String, Value>,
    config: &Config,
    effects: &mut E,
) -> Decision<E> {
    match config.without_state {
        AnswersWithoutState::Reject => Err(refuse(
            &round,
            INVALID_PARAMS,
            "inputResponses without requestState",
            None,
        )
        .into()),
        AnswersWithoutState::Strip => Ok(forward_stripped(call, round, true)),
        AnswersWithoutState::Probe => probe(call, round, &answers, config, effects).await,
    }
}

/// Calls the inner service with the call without the client's answers: its answer passes on as
/// it came, unless it asks what the answers answer (forwarded again with them, checked) or
/// otherwise (asked, sealed). What is sealed is dated after the inner service answered.
async fn probe<E: Effects>(
    call: &Call<'_>,
    round: Round,
    answers: &Map<String, Value>,
    config: &Config,
    effects: &mut E,
) -> Decision<E> {
    let body = call.rewrite(None, None, None);
    let probed = effects.probe(body, &round).await.map_err(Stop::Inner)?;
    Ok(match probed {
        Probed::Failed(reply) => Decided::Respond(reply),
        Probed::Read {
            message: None,
            response,
        } => Decided::Pass(response),
        Probed::Read {
            message: Some(message),
            response,
        } => match judge_probe(&message, round, call, answers, config, effects.now()) {
            ProbeVerdict::Respond(Outbound::Unchanged) => Decided::Pass(response),
            ProbeVerdict::Respond(Outbound::Replace(reply)) => Decided::Respond(reply),
            ProbeVerdict::Forward { body, round } => Decided::Forward {
                body: Some(body),
                round: *round,
                answers: None,
                outcome: None,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BoxError;
    use crate::gate::{ErasedFlow, GateCall};
    use crate::token::Keyring;
    use crate::wire::jsonrpc::{Peek, peek};

    /// An inner service on plain JSON: answers every probe with `answer`, and keeps what it got.
    struct Scripted {
        answer: Option<&'static str>,
        calls: Vec<String>,
    }

    impl Effects for Scripted {
        type Response = &'static str;
        type Error = ();
        async fn probe(&mut self, body: Vec<u8>, _: &Round) -> Result<Probed<&'static str>, ()> {
            self.calls.push(String::from_utf8(body).unwrap());
            Ok(Probed::Read {
                message: self.answer.map(|a| a.as_bytes().to_vec()),
                response: "the probe's own answer",
            })
        }
        async fn consume(&mut self, _: &SingleUseId) -> Result<Consumed, String> {
            Err("single-use tokens are off in these tests".to_owned())
        }
        async fn flow_url(
            &mut self,
            _: &dyn ErasedFlow,
            _: &GateCall<'_>,
        ) -> Result<String, BoxError> {
            Err("no URL gates in these tests".into())
        }
        async fn flow_complete(&mut self, _: &dyn ErasedFlow, _: &GateCall<'_>) -> bool {
            false
        }
        fn now(&self) -> u64 {
            1_000
        }
    }

    const ASKS: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"approval":{"method":"elicitation/create","params":{"message":"Deploy?","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]}}}}}}"#;
    const DONE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;

    fn body(answers: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{}}}}}}{answers}}}}}"#
        )
    }

    /// `body` read as an MRTR call, and an anonymous caller's context at `now`.
    fn call_at(body: &str, now: u64) -> (Call<'_>, Context<'static>) {
        let Peek::Call(call) = peek(body.as_bytes()) else {
            panic!("an MRTR call: {body}")
        };
        let cx = Context {
            principal: None,
            caller: None,
            header_version: None,
            now,
        };
        (call, cx)
    }

    async fn run(body: &str, answer: Option<&'static str>) -> (Decided<&'static str>, Vec<String>) {
        let config = Config::new(Keyring::new("k1", [7u8; 32]).unwrap());
        let (call, cx) = call_at(body, 1_000);
        let mut inner = Scripted {
            answer,
            calls: Vec::new(),
        };
        let decided = decide(&call, cx, &config, &mut inner).await.unwrap();
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

    /// Records which effects the engine asks for, in order; its URL flow answers as scripted.
    struct Recorded {
        complete: bool,
        now: u64,
        events: Vec<&'static str>,
        /// What the store says its epoch is (Unix ms), on a first round and after a spend.
        epoch: u64,
        /// The handle of every flow asked, in order.
        handles: Vec<String>,
    }

    impl Recorded {
        /// Flows that say `complete`, a clock that says `now`, nothing recorded yet.
        fn new(complete: bool, now: u64) -> Self {
            Self {
                complete,
                now,
                events: Vec::new(),
                epoch: 0,
                handles: Vec::new(),
            }
        }
    }

    impl Effects for Recorded {
        type Response = ();
        type Error = ();
        async fn probe(&mut self, _: Vec<u8>, _: &Round) -> Result<Probed<()>, ()> {
            self.events.push("probe");
            Err(())
        }
        async fn consume(&mut self, _: &SingleUseId) -> Result<Consumed, String> {
            self.events.push("consume");
            Ok(Consumed::Fresh)
        }
        async fn epoch(&mut self) -> Result<u64, String> {
            Ok(self.epoch)
        }
        async fn current_epoch(&mut self) -> u64 {
            self.epoch
        }
        async fn flow_url(
            &mut self,
            _: &dyn ErasedFlow,
            call: &GateCall<'_>,
        ) -> Result<String, BoxError> {
            self.events.push("flow_url");
            self.handles.push(call.handle().to_owned());
            Ok("https://flows.example/1".to_owned())
        }
        async fn flow_complete(&mut self, _: &dyn ErasedFlow, call: &GateCall<'_>) -> bool {
            self.events.push("flow_complete");
            self.handles.push(call.handle().to_owned());
            self.complete
        }
        fn now(&self) -> u64 {
            self.now
        }
    }

    /// A URL flow the engine must never call but through its effects.
    struct Unreached;

    impl crate::UrlFlow for Unreached {
        async fn url(&self, _: &GateCall<'_>) -> Result<String, BoxError> {
            Err("called around the effects".into())
        }
        async fn is_complete(&self, _: &GateCall<'_>) -> bool {
            false
        }
    }

    fn gated_body(extra: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"elicitation":{{"form":{{}},"url":{{}}}}}}}}{extra}}}}}"#
        )
    }

    async fn run_gated(body: &str, now: u64, effects: &mut Recorded) -> Decided<()> {
        let mut config = Config::new(Keyring::new("k1", [7u8; 32]).unwrap());
        config.single_use = true;
        let gate = crate::Gate::url("login", Unreached).unwrap();
        config.gates.push((
            crate::gate::Target::new(crate::GateTarget::tool("deploy")),
            gate,
        ));
        let (call, cx) = call_at(body, now);
        decide(&call, cx, &config, effects).await.unwrap()
    }

    /// The sealed `input_required` of a URL gate's first ask, dated after its flow answered.
    async fn asked_at(now: u64) -> String {
        asked_with(&mut Recorded::new(false, now)).await
    }

    /// [`asked_at`] with `effects`' clock, epoch and record.
    async fn asked_with(effects: &mut Recorded) -> String {
        let decided = run_gated(&gated_body(""), 1_000, effects).await;
        assert_eq!(effects.events, ["flow_url"]);
        let Decided::Respond(reply) = decided else {
            panic!("asked: {decided:?}")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        let login = &reply["result"]["inputRequests"]["login"]["params"];
        assert_eq!(login["url"], "https://flows.example/1");
        reply["result"]["requestState"].as_str().unwrap().to_owned()
    }

    fn accepted(state: &str) -> String {
        gated_body(&format!(
            r#","requestState":"{state}","inputResponses":{{"login":{{"action":"accept"}}}}"#
        ))
    }

    #[tokio::test]
    async fn a_single_use_token_is_consumed_after_its_flow_answered_and_before_it_is_forwarded() {
        let state = asked_at(2_000).await;
        let mut effects = Recorded::new(true, 2_000);
        let decided = run_gated(&accepted(&state), 2_000, &mut effects).await;
        assert_eq!(effects.events, ["flow_complete", "consume"]);
        assert!(
            matches!(
                decided,
                Decided::Forward {
                    answers: Some(_),
                    ..
                }
            ),
            "{decided:?}"
        );
    }

    #[tokio::test]
    async fn an_incomplete_flow_is_asked_again_once_the_token_is_consumed() {
        let state = asked_at(2_000).await;
        let mut effects = Recorded::new(false, 2_000);
        let decided = run_gated(&accepted(&state), 2_000, &mut effects).await;
        assert_eq!(effects.events, ["flow_complete", "consume"]);
        let Decided::Respond(reply) = decided else {
            panic!("asked again: {decided:?}")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(reply["result"]["resultType"], "input_required");
    }

    #[tokio::test]
    async fn what_is_sealed_after_a_flow_answered_is_dated_then() {
        // Sealed at 2 000 by the flow's clock, not at 1 000 when the call arrived: a retry at
        // 1 000 is from before the token was issued (beyond the skew).
        let state = asked_at(2_000).await;
        let mut effects = Recorded::new(true, 1_000);
        let decided = run_gated(&accepted(&state), 1_000, &mut effects).await;
        assert!(effects.events.is_empty(), "{:?}", effects.events);
        let Decided::Respond(reply) = decided else {
            panic!("refused: {decided:?}")
        };
        assert_eq!(
            reply.body,
            invalid_state(Some(&RawValue::from_string("1".into()).unwrap())).body
        );
    }

    #[tokio::test]
    async fn a_token_that_expired_while_its_flow_answered_is_refused_and_not_consumed() {
        let state = asked_at(2_000).await;
        let mut effects = Recorded::new(true, 1_000_000);
        let decided = run_gated(&accepted(&state), 2_000, &mut effects).await;
        assert_eq!(effects.events, ["flow_complete"]);
        let Decided::Respond(reply) = decided else {
            panic!("refused: {decided:?}")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(reply["error"]["data"]["reason"], "invalid_request_state");
    }

    /// The claims a token carries, read without checking it (they are signed, not encrypted).
    fn claims_of(token: &str) -> Value {
        use base64::Engine as _;
        let body = token.split('.').nth(2).unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .unwrap();
        serde_json::from_slice(&json).unwrap()
    }

    /// The reply's error reason, or `None` when the call was forwarded.
    fn refusal(decided: &Decided<()>) -> Option<String> {
        match decided {
            Decided::Forward { .. } => None,
            Decided::Respond(reply) => {
                let reply: Value = serde_json::from_slice(&reply.body).unwrap();
                Some(reply["error"]["data"]["reason"].to_string())
            }
            Decided::Pass(()) => panic!("nothing probed"),
        }
    }

    #[tokio::test]
    async fn a_single_use_token_is_bound_to_the_store_epoch_it_was_sealed_under() {
        // Sealed in second 2 000 under an epoch that began at 2 000.900 s: by the clock it would
        // be older than its epoch (2 000 000 ms < 2 000 900 ms); bound to it, it is accepted.
        let mut first = Recorded::new(false, 2_000);
        first.epoch = 2_000_900;
        let state = asked_with(&mut first).await;
        let claims = claims_of(&state);
        assert_eq!(claims["e"], 2_000_900, "{claims}");
        let mut retry = Recorded::new(true, 2_000);
        retry.epoch = 2_000_900;
        let decided = run_gated(&accepted(&state), 2_000, &mut retry).await;
        assert_eq!(refusal(&decided), None, "{decided:?}");

        // The store began another epoch since (it lost its spent ids): refused, whatever the
        // clocks say, even an epoch dated before the token.
        for epoch in [2_000_901, 1_999_000, 0] {
            let mut retry = Recorded::new(true, 2_000);
            retry.epoch = epoch;
            let decided = run_gated(&accepted(&state), 2_000, &mut retry).await;
            assert_eq!(
                refusal(&decided).as_deref(),
                Some("\"invalid_request_state\""),
                "epoch {epoch}: {decided:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_reask_is_bound_to_the_epoch_of_the_token_it_was_sealed_from() {
        let mut first = Recorded::new(false, 2_000);
        first.epoch = 7;
        let state = asked_with(&mut first).await;
        // Not finished: the re-ask's token names the same epoch (the spend confirmed it).
        let mut retry = Recorded::new(false, 2_000);
        retry.epoch = 7;
        let Decided::Respond(reply) = run_gated(&accepted(&state), 2_000, &mut retry).await else {
            panic!("asked again")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        let again = reply["result"]["requestState"].as_str().unwrap();
        let claims = claims_of(again);
        assert_eq!(claims["e"], 7, "{claims}");
        assert_eq!(claims["n"], claims_of(&state)["n"]);
    }

    #[tokio::test]
    async fn each_call_has_its_own_handle_kept_across_its_rounds() {
        let mut first = Recorded::new(false, 2_000);
        let state = asked_with(&mut first).await;
        let mut second = Recorded::new(false, 2_000);
        asked_with(&mut second).await;
        assert_ne!(
            first.handles, second.handles,
            "identical calls, two handles"
        );
        // The rounds of one call: "not finished", then complete, all with the first handle.
        let mut retry = Recorded::new(false, 2_000);
        let Decided::Respond(reply) = run_gated(&accepted(&state), 2_000, &mut retry).await else {
            panic!("asked again")
        };
        let reply: Value = serde_json::from_slice(&reply.body).unwrap();
        let again = reply["result"]["requestState"].as_str().unwrap();
        let mut done = Recorded::new(true, 2_000);
        let decided = run_gated(&accepted(again), 2_000, &mut done).await;
        assert_eq!(refusal(&decided), None, "{decided:?}");
        assert_eq!(retry.handles, first.handles);
        assert_eq!(done.handles, first.handles);
    }
}
