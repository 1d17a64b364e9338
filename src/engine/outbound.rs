//! The response side: seal what the inner service asks, refuse what the client cannot answer.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::answers::{self, Checked};
use super::decision::Round;
use super::policy::Config;
use super::reply::{cannot_vouch, log_outcome, new_claims, reask, refuse, require, seal};
use crate::form::validate::NewEntries;
use crate::token::claims::Questions;
use crate::wire::json::{BorrowedStr, Members, Object, ObjectOr};
use crate::wire::jsonrpc::{Call, INVALID_PARAMS, Reply, ReplyKind};
use crate::wire::mcp::InputKind;

/// What becomes of the inner service's response message.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// Send it as it is, byte for byte.
    Unchanged,
    /// Send this instead.
    Replace(Reply),
}

/// What becomes of one event of the inner service's event stream answering a call.
#[derive(Debug)]
pub(crate) enum Event {
    /// Send it on as it came.
    Pass,
    /// Send this message in its place (its `data` rewritten).
    Replace(Reply),
    /// Drop it: a second response, or an unterminated one that would reach a client unsealed.
    Drop,
}

/// One complete event of the stream answering `round`, whose `data` is `data` (`None`: it has
/// none). The response to the call goes through [`respond`]; any further response to it is
/// dropped (JSON-RPC allows one, and a second would reach the client unsealed); every other event
/// passes. `responded` says whether the response went by already, and is set here. `now` dates
/// a seal: a stream may run long before it asks.
pub(crate) fn event(
    data: Option<&[u8]>,
    round: &Round,
    config: &Config,
    now: impl FnOnce() -> u64,
    responded: &mut bool,
) -> Event {
    let Some(data) = data else {
        return Event::Pass;
    };
    if *responded {
        if relation(data, round) != Relation::Other {
            drop_repeated(round);
            return Event::Drop;
        }
        return Event::Pass;
    }
    match respond(data, round, config, now()) {
        None => Event::Pass,
        Some(outcome) => {
            *responded = true;
            match outcome {
                Outbound::Unchanged => Event::Pass,
                Outbound::Replace(reply) => Event::Replace(reply),
            }
        }
    }
}

/// Whether to drop what is left when the stream ends inside an event (`data`: its data, if any).
/// Clients discard an unterminated event; it passes, unless it is an `input_required` the layer
/// has not sealed, or a response after the response.
pub(crate) fn drops_unterminated(data: Option<&[u8]>, round: &Round, responded: bool) -> bool {
    let drop = data.is_some_and(|data| match relation(data, round) {
        Relation::Other => false,
        Relation::Response { input_required } => input_required || responded,
    });
    if drop {
        drop_repeated(round);
    }
    drop
}

fn drop_repeated(round: &Round) {
    tracing::warn!(
        target: "tower_elicitation",
        method = round.method.as_str(),
        target = %round.target,
        "dropped a second or unterminated response event from the inner service"
    );
}

/// After a probe: answer the client, or call the inner service again with verified answers.
#[derive(Debug)]
pub(crate) enum ProbeVerdict {
    Respond(Outbound),
    Forward { body: Vec<u8>, round: Box<Round> },
}

/// How a message relates to the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// A notification, a request, or a response to something else.
    Other,
    /// The response to the call; `true` when it is an `input_required` result.
    Response { input_required: bool },
}

/// A response message, read in one borrowed pass: its members, and those of its result and of
/// the result's `inputRequests`, as raw text.
struct Message<'a>(Object<'a>);

impl<'a> Message<'a> {
    fn read(message: &'a [u8]) -> Option<Self> {
        const PATH: &[&str] = &["result", "inputRequests"];
        // Checked as UTF-8 once, the text is read without checking each string and raw member
        // again; what is not UTF-8 is read as bytes, as before, to fail the same way.
        let read = match std::str::from_utf8(message) {
            Ok(text) => Object::read(text, PATH),
            Err(_) => Object::read_slice(message, PATH),
        };
        match read {
            Ok(ObjectOr::Object(object)) => Some(Self(object)),
            _ => None,
        }
    }

    /// Whether member `name` is there and not `null`.
    fn has(&self, name: &str) -> bool {
        self.0
            .members()
            .iter()
            .any(|(key, raw)| key == name && raw.is_none_or(|raw| raw.get() != "null"))
    }

    /// How the message relates to the call of `round`.
    fn relation(&self, round: &Round) -> Relation {
        let result = match self.0.nested() {
            ObjectOr::NotObject => return Relation::Other,
            ObjectOr::Absent | ObjectOr::Null if !self.has("error") => return Relation::Other,
            ObjectOr::Absent | ObjectOr::Null => None,
            ObjectOr::Object(result) => Some(result),
        };
        if self.has("method") || !same_id(self.0.get("id"), round.id.as_deref()) {
            return Relation::Other;
        }
        let input_required = result.is_some_and(|result| {
            result.members().iter().any(|(key, raw)| {
                key == "resultType"
                    && raw.is_some_and(|raw| {
                        serde_json::from_str::<BorrowedStr<'_>>(raw.get())
                            .is_ok_and(|t| t.0 == "input_required")
                    })
            })
        });
        Relation::Response { input_required }
    }
}

/// Whether `message` is the response to the call of `round`, with a borrowed parse.
pub(crate) fn relation(message: &[u8], round: &Round) -> Relation {
    if cannot_respond(message) {
        return Relation::Other;
    }
    Message::read(message).map_or(Relation::Other, |m| m.relation(round))
}

/// Whether a JSON text cannot be a JSON-RPC response in any spelling a parser reads: it has
/// neither a `"result"` nor an `"error"` string (a response has one of those members), and no
/// `\u` escape that could spell one (no other escape stands for a letter). What [`relation`]
/// reads as [`Relation::Other`] without a parse: the notifications of an event stream.
fn cannot_respond(message: &[u8]) -> bool {
    static RESULT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"result\""));
    static ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));
    RESULT.find(message).is_none() && ERROR.find(message).is_none() && !has_escape(message)
}

/// Whether `message` answers the call of `round` as far as the layer must treat it: the
/// response to it, or a text the layer cannot read that could spell `input_required` (which a
/// lenient client might read as one).
pub(crate) fn answers_call(message: &[u8], round: &Round) -> bool {
    match Message::read(message) {
        Some(read) => read.relation(round) != Relation::Other,
        None => !cannot_ask(message),
    }
}

/// The refusal for a message that could spell `input_required` but that the layer cannot read:
/// it could not be sealed, so it is never passed on.
fn unreadable(round: &Round) -> Outbound {
    Outbound::Replace(cannot_vouch(
        round,
        "an answer that could be input_required is not JSON the layer can read",
    ))
}

/// Whether two JSON-RPC ids are the same id: the same text, or the same value spelled apart.
pub(super) fn same_id(a: Option<&RawValue>, b: Option<&RawValue>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.get() == b.get()
                || serde_json::from_str::<Value>(a.get()).ok()
                    == serde_json::from_str::<Value>(b.get()).ok()
        }
        _ => false,
    }
}

/// Decides what the client receives for the inner service's response `message` to `round`
/// (a message that is not the response to it passes unchanged).
///
/// Only an `input_required` result is ever changed, so a message that cannot spell one passes
/// after a byte scan, unparsed.
pub(crate) fn outbound(message: &[u8], round: &Round, config: &Config, now: u64) -> Outbound {
    if cannot_ask(message) {
        return Outbound::Unchanged;
    }
    respond(message, round, config, now).unwrap_or(Outbound::Unchanged)
}

/// Whether a JSON text cannot carry the string `input_required` in any spelling a parser reads:
/// it does not contain it, and has no `\u` escape that could spell one of its letters (the
/// other escapes stand for characters it does not have).
fn cannot_ask(message: &[u8]) -> bool {
    // Searchers built once: `memmem::find` builds one per call, most of what a short message's
    // scan costs.
    static INPUT_REQUIRED: LazyLock<Finder<'static>> =
        LazyLock::new(|| Finder::new(b"input_required"));
    INPUT_REQUIRED.find(message).is_none() && !has_escape(message)
}

/// Whether a JSON text has a `\u` escape.
fn has_escape(message: &[u8]) -> bool {
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    ESCAPE.find(message).is_some()
}

/// [`outbound`](fn@outbound), telling a message that is no response to the call (`None`) from
/// the response.
pub(crate) fn respond(
    message: &[u8],
    round: &Round,
    config: &Config,
    now: u64,
) -> Option<Outbound> {
    // What can neither be the response nor ask is none of the call's business: an event
    // stream's notifications pass without a parse. (A response names its `"result"` early:
    // it goes on to the parse after a few bytes' scan.)
    if cannot_respond(message) && cannot_ask(message) {
        return None;
    }
    let Some(read) = Message::read(message) else {
        return (!cannot_ask(message)).then(|| unreadable(round));
    };
    match read.relation(round) {
        Relation::Other => return None,
        Relation::Response {
            input_required: false,
        } => return Some(Outbound::Unchanged),
        Relation::Response {
            input_required: true,
        } => {}
    }
    if !round.mrtr {
        // Clients before 2026-07-28 cannot answer it, and its state could not be verified.
        return Some(Outbound::Replace(cannot_vouch(
            round,
            "input_required answering a request older than 2026-07-28",
        )));
    }
    let asked = match read_input_required(read, round, config) {
        Ok(asked) => asked,
        Err(reply) => return Some(Outbound::Replace(reply)),
    };
    if let Some(key) = config
        .gates_for(round.method, &round.target)
        .map(|(_, gate)| &gate.key)
        .find(|key| asked.questions.contains_key(*key))
    {
        let why = format!("an input request reuses the key `{key}` of a gate of this call");
        return Some(Outbound::Replace(cannot_vouch(round, &why)));
    }
    if let Err(reply) = require(round, asked.kinds.iter().copied()) {
        return Some(Outbound::Replace(reply));
    }
    let made = asked.made;
    let claims = new_claims(
        round,
        round.number + 1,
        asked.state,
        asked.questions,
        Map::new(),
        config,
        now,
    );
    Some(match seal(round, claims, config) {
        Ok((token, claims)) => {
            config.validators.keep(made);
            log_outcome(round, "sealed");
            // The inner service's result, but for the sealed state; `inputRequests` as sealed.
            let body = crate::wire::jsonrpc::result_with_state(
                round.id.as_deref(),
                &asked.result,
                &claims.questions,
                &token,
            );
            Outbound::Replace(Reply {
                kind: ReplyKind::Answer,
                body,
            })
        }
        Err(reply) => Outbound::Replace(reply),
    })
}

/// After probing the inner service without the client's state-less answers: if its questions
/// are answered by them, forward the call again with the verified answers; otherwise ask.
pub(crate) fn judge_probe(
    message: &[u8],
    round: Round,
    call: &Call<'_>,
    answers: &Map<String, Value>,
    config: &Config,
    now: u64,
) -> ProbeVerdict {
    let Some(read) = Message::read(message) else {
        if cannot_ask(message) {
            return ProbeVerdict::Respond(Outbound::Unchanged);
        }
        return ProbeVerdict::Respond(unreadable(&round));
    };
    if read.relation(&round)
        != (Relation::Response {
            input_required: true,
        })
    {
        return ProbeVerdict::Respond(Outbound::Unchanged);
    }
    let asked = match read_input_required(read, &round, config) {
        Ok(asked) => asked,
        Err(reply) => return ProbeVerdict::Respond(Outbound::Replace(reply)),
    };
    if let Err(reply) = require(&round, asked.kinds.iter().copied()) {
        return ProbeVerdict::Respond(Outbound::Replace(reply));
    }
    // As if the client had been asked these questions and answered them: a re-ask is round 1.
    let claims = new_claims(
        &round,
        0,
        asked.state,
        asked.questions,
        Map::new(),
        config,
        now,
    );
    let made = asked.made;
    let questions = config.validators.with(&made);
    match answers::check(&claims.questions, &Map::new(), answers.clone(), &questions) {
        Err(answers::WrongShape(why)) => ProbeVerdict::Respond(Outbound::Replace(refuse(
            &round,
            INVALID_PARAMS,
            &why,
            None,
        ))),
        Ok(Checked::Reask(again)) => {
            let reply = reask(&round, &claims, again, config, now, None);
            if reply.is_ok() {
                config.validators.keep(made);
            }
            ProbeVerdict::Respond(Outbound::Replace(reply.unwrap_or_else(|refused| refused)))
        }
        Ok(Checked::Complete(answers)) => {
            config.validators.keep(made);
            log_outcome(&round, "probe_answered");
            let answers = (!claims.questions.is_empty()).then_some(&answers);
            ProbeVerdict::Forward {
                body: call.rewrite(claims.inner_state.as_deref(), answers, None),
                round: Box::new(round),
            }
        }
    }
}

/// An `input_required` result as the inner service gave it.
struct Asked<'a> {
    /// The result object's members, unparsed, in order (`None`: `inputRequests`).
    result: Members<'a>,
    /// What it asks, each request as the client is shown it: the inner's text, minified.
    questions: Questions,
    /// The kind of each request, for the capability check.
    kinds: Vec<InputKind>,
    /// The inner service's own state.
    state: Option<String>,
    /// What reading the questions made that the caches did not hold: kept only once the
    /// response is sealed.
    made: NewEntries,
}

/// Reads an `input_required` result without building a tree of it, or refuses when it is not
/// one the layer can vouch for: every form's schema must compile.
fn read_input_required<'a>(
    message: Message<'a>,
    round: &Round,
    config: &Config,
) -> Result<Asked<'a>, Reply> {
    let broken = |why: &str| cannot_vouch(round, why);
    let repeated = message.0.repeated().is_some();
    let ObjectOr::Object(result) = message.0.into_nested() else {
        if repeated {
            return Err(broken("a key occurs twice in the message or its result"));
        }
        return Err(broken("result is not an object"));
    };
    if repeated || result.repeated().is_some() {
        return Err(broken("a key occurs twice in the message or its result"));
    }
    let mut questions = Questions::new();
    let mut kinds = Vec::new();
    let mut made = NewEntries::default();
    match result.nested() {
        ObjectOr::Absent | ObjectOr::Null => {}
        ObjectOr::NotObject => return Err(broken("inputRequests is not an object")),
        ObjectOr::Object(requests) => {
            if requests.repeated().is_some() {
                return Err(broken("inputRequests repeats a key"));
            }
            for (key, request) in requests.raw() {
                let spelled = config
                    .validators
                    .spelled(request.get(), &mut made)
                    .map_err(|why| broken(&why.to_string()))?;
                kinds.push(spelled.question.kind);
                questions.insert(key.to_owned(), spelled.shown.clone());
            }
        }
    }
    let state = match result.get("requestState").filter(|raw| raw.get() != "null") {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<String>(raw.get())
                .map_err(|_| broken("requestState is not a string"))?,
        ),
    };
    Ok(Asked {
        result: result.into_members(),
        questions,
        kinds,
        state,
        made,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a text with no `"result"`, no `"error"` and no `\u` escape is taken for no response
    /// without a parse; every spelling of a response is read.
    #[test]
    fn only_what_cannot_be_a_response_skips_the_parse() {
        let notification = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        assert!(cannot_respond(notification));
        for response in [
            &br#"{"jsonrpc":"2.0","id":1,"result":{}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"r\u0065sult":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"\u0065rror":{}}"#,
            br#"{"id":1 , "result" : null}"#,
        ] {
            assert!(
                !cannot_respond(response),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
    }
}
