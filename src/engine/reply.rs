//! The layer's own answers: asks and re-asks (sealed), refusals, and the seal itself.
//!
//! Every decision that ends in an answer of the layer's own goes through here, so that the round
//! cap, the token's size bound and the capability check hold for all of them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answers::Reask;
use super::decision::Round;
use super::policy::Config;
use crate::token;
use crate::token::claims::{Claims, Questions, VERSION};
use crate::wire::jsonrpc::{
    INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, Reply, ReplyKind,
    result_with_state,
};
use crate::wire::mcp::{InputKind, add_requirement};

/// The layer's own `input_required`: ask `ask_now` again, keep `kept`, same inner state. The
/// token records `asked` as the questions (what was asked before, but for pre-filled defaults).
/// `Ok` is the sealed `input_required`; `Err` a refusal (the round cap, or a token too large).
#[allow(
    clippy::too_many_arguments,
    reason = "one call's whole re-ask, read in one place"
)]
pub(super) fn reask(
    round: &Round,
    previous: &Claims,
    again: Reask,
    config: &Config,
    now: u64,
    expires_by: Option<u64>,
) -> Result<Reply, Reply> {
    let Reask {
        ask: ask_now,
        asked,
        kept,
        kinds,
    } = again;
    let mut claims = new_claims(
        round,
        previous.round + 1,
        previous.inner_state.clone(),
        asked,
        kept,
        config,
        now,
    );
    if let Some(by) = expires_by {
        claims.expires_at = claims.expires_at.min(by);
    }
    // The URL flows still asked keep the handles they were asked with.
    claims.flow_handles = previous
        .flow_handles
        .iter()
        .filter(|(key, _)| claims.questions.contains_key(*key))
        .map(|(key, handle)| (key.clone(), handle.clone()))
        .collect();
    match kinds {
        // The kinds the answers' check read already ([`Checked::Reask`]'s).
        Some(kinds) => require(round, kinds)?,
        None => check_capabilities(&ask_now, round)?,
    }
    sealed_ask(round, claims, ask_now, config)
}

/// The layer's own `input_required` asking `requests` (each the text to show), sealed with
/// `claims`.
pub(super) fn ask(round: &Round, claims: Claims, requests: Questions, config: &Config) -> Reply {
    check_capabilities(&requests, round)
        .and_then(|()| sealed_ask(round, claims, requests, config))
        .unwrap_or_else(|refused| refused)
}

/// [`ask`] once the capabilities are checked, telling the sealed `input_required` (`Ok`) from a
/// refusal (`Err`).
fn sealed_ask(
    round: &Round,
    claims: Claims,
    requests: Questions,
    config: &Config,
) -> Result<Reply, Reply> {
    static INPUT_REQUIRED: LazyLock<Box<RawValue>> = LazyLock::new(|| {
        RawValue::from_string("\"input_required\"".to_owned())
            .unwrap_or_else(|_| unreachable!("a JSON string"))
    });
    let (token, _) = seal(round, claims, config)?;
    log_outcome(round, "ask");
    // `{"resultType":"input_required","inputRequests":{..},"requestState":".."}`, written as the
    // outbound path writes a sealed result: the token (~1 KiB of base64url and dots, nothing to
    // escape) copied, not run through serde_json's escaping a byte at a time.
    let result = [
        (Cow::Borrowed("resultType"), Some(&**INPUT_REQUIRED)),
        (Cow::Borrowed("inputRequests"), None),
    ];
    Ok(Reply {
        kind: ReplyKind::Answer,
        body: result_with_state(round.id.as_deref(), &result, &requests, &token),
    })
}

/// A JSON-RPC error answering `round`'s call.
pub(super) fn refuse(round: &Round, code: i64, message: &str, data: Option<Value>) -> Reply {
    log_outcome(round, "refused");
    let kind = ReplyKind::of_code(Some(code));
    Reply::error(kind, round.id.as_deref(), code, message, data)
}

/// `-32021` when the call's own capabilities do not declare a kind of request in `requests`.
fn check_capabilities(requests: &Questions, round: &Round) -> Result<(), Reply> {
    require(
        round,
        requests
            .values()
            .filter_map(|request| Some(InputKind::of_raw(request)?.0)),
    )
}

/// `-32021` when the call's own capabilities do not declare one of `kinds`.
pub(super) fn require(
    round: &Round,
    kinds: impl IntoIterator<Item = InputKind>,
) -> Result<(), Reply> {
    let mut required = Map::new();
    for kind in kinds {
        if !round.declared.has(kind) {
            add_requirement(&mut required, kind);
        }
    }
    if required.is_empty() {
        return Ok(());
    }
    Err(refuse(
        round,
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        Some(json!({ "requiredCapabilities": required })),
    ))
}

pub(super) fn new_claims(
    round: &Round,
    number: u32,
    state: Option<String>,
    questions: Questions,
    kept: Map<String, Value>,
    config: &Config,
    now: u64,
) -> Claims {
    Claims {
        version: VERSION,
        issued_at: now,
        expires_at: now.saturating_add(config.ttl_secs),
        method: round.method.as_str().to_owned(),
        target: round.target.clone(),
        arguments: round.args.clone(),
        exact_arguments: round.exact.clone(),
        principal: None,
        audience: config.audience.clone(),
        round: number,
        inner_state: state,
        questions,
        accepted: kept,
        gate_answers: round.gates.clone(),
        flow_handles: BTreeMap::new(),
        token_id: None,
        nonce: round.nonce.clone(),
        epoch: round.epoch.filter(|_| config.single_use),
        bindings: round.bindings.clone(),
    }
}

/// Seals `claims`, refusing past the round cap, on a form schema that cannot be compiled, or
/// when the token would be larger than a retry may carry. The layer keeps what it sealed, so the
/// retry opens without the MAC and claims passes.
pub(super) fn seal(
    round: &Round,
    mut claims: Claims,
    config: &Config,
) -> Result<(String, Arc<Claims>), Reply> {
    if claims.round > config.max_rounds {
        return Err(refuse(
            round,
            INVALID_PARAMS,
            &format!("Too many input rounds (the limit is {})", config.max_rounds),
            Some(json!({"reason": "too_many_rounds"})),
        ));
    }
    if config.single_use {
        claims.token_id = Some(crate::token::claims::token_id());
    }
    let token = token::seal(&config.keyring, &mut claims, round.principal.as_deref());
    if token.len() > config.max_state_bytes {
        let why = format!(
            "the sealed requestState would be {} bytes, over the {} bound",
            token.len(),
            config.max_state_bytes
        );
        return Err(cannot_vouch(round, &why));
    }
    let claims = Arc::new(claims);
    config.sealed.insert(&token, Arc::clone(&claims));
    Ok((token, claims))
}

/// The layer's `-32603` for an `input_required` it cannot vouch for; why goes to `tracing`.
pub(super) fn cannot_vouch(round: &Round, why: &str) -> Reply {
    tracing::warn!(
        target: "tower_elicitation",
        method = round.method.as_str(),
        target = %round.target,
        why,
        "the layer cannot seal what the inner service asked; answering -32603"
    );
    refuse(round, INTERNAL_ERROR, "Internal error", None)
}

/// A `tracing` event at `level` (`debug`, `info`, …) about `round`: target `tower_elicitation`
/// and the call's `method`, `target` and `round` (the fields the proxy's decision log and
/// metrics read), then the fields and message given.
macro_rules! round_event {
    ($level:ident, $round:expr, $($fields:tt)+) => {
        tracing::$level!(
            target: "tower_elicitation",
            method = $round.method.as_str(),
            target = %$round.target,
            round = $round.number,
            $($fields)+
        )
    };
}
pub(super) use round_event;

/// The debug event every decision leaves.
pub(super) fn log_outcome(round: &Round, outcome: &'static str) {
    round_event!(debug, round, outcome);
}

/// The event of a gate's refusal (outcome `gate_refused`), with why: `declined`, `cancelled` or
/// `not_allowed`.
pub(super) fn log_gate_refused(round: &Round, why: &'static str) {
    round_event!(debug, round, outcome = "gate_refused", why);
}

/// The event of a `requestState` refused: `why` a short code (the decision log's), `reason`
/// the sentence.
pub(super) fn log_rejected(round: &Round, why: &'static str, reason: &str) {
    tracing::info!(
        target: "tower_elicitation",
        method = round.method.as_str(),
        target = %round.target,
        outcome = "rejected_state",
        why,
        reason,
        "requestState refused"
    );
}
