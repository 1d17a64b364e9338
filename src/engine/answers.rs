//! Checking the client's answers against the questions that were asked.

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::form::validate::{QuestionError, ReadQuestion};
use crate::jsonrpc::{ObjectOr, RawMembers};
use crate::mcp::InputKind;
use crate::state::claims::Questions;

/// The verdict on one round of answers.
#[derive(Debug, Clone)]
pub(super) enum Checked {
    /// Every question has an acceptable answer: forward these (cleaned) answers.
    Complete(Map<String, Value>),
    /// Some answers are missing or invalid.
    Reask {
        /// What to ask now: the original requests as they were shown, with a hint in the message
        /// of invalid ones.
        ask: Questions,
        /// The answers that were acceptable, kept for the next round.
        kept: Map<String, Value>,
    },
}

/// An answer that is not even the right shape for its kind: a protocol error, not a re-ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Malformed(pub(super) String);

/// Checks `responses` (and answers `kept` from earlier rounds, which win) against `questions`.
/// Keys that were not asked are dropped.
pub(super) fn check(
    questions: &Questions,
    kept: &Map<String, Value>,
    mut responses: Map<String, Value>,
    validators: &impl ReadQuestion,
) -> Result<Checked, Malformed> {
    let mut accepted = Map::new();
    let mut ask = Questions::new();
    for (key, question) in questions {
        if let Some(answer) = kept.get(key) {
            accepted.insert(key.clone(), answer.clone());
            continue;
        }
        let Some((key, answer)) = responses.remove_entry(key) else {
            ask.insert(key.clone(), question.clone());
            continue;
        };
        match check_one(&key, question, answer, validators)? {
            Ok(clean) => {
                accepted.insert(key, clean);
            }
            Err(hint) => {
                ask.insert(key, with_hint(question, &hint));
            }
        }
    }
    if ask.is_empty() {
        Ok(Checked::Complete(accepted))
    } else {
        Ok(Checked::Reask {
            ask,
            kept: accepted,
        })
    }
}

/// One answer: `Ok(Ok(clean))`, `Ok(Err(hint))` for content to re-ask, `Err` for a wrong shape.
fn check_one(
    key: &str,
    question: &RawValue,
    answer: Value,
    validators: &impl ReadQuestion,
) -> Result<Result<Value, String>, Malformed> {
    let malformed = |what: &str| Malformed(format!("inputResponses.{key}: {what}"));
    // The question as shown, read through its canonical form: the validator is the same for
    // every spelling of a schema.
    let spelled = match validators.read_spelled(question.get()) {
        Ok(spelled) => spelled,
        Err(QuestionError::UnknownKind | QuestionError::Unreadable) => {
            return Err(malformed("no such question"));
        }
        Err(_) => return Err(malformed("the question's schema cannot be compiled")),
    };
    let asked = &spelled.question;
    let kind = asked.kind;
    let Value::Object(mut answer) = answer else {
        return Err(malformed("must be an object"));
    };
    match kind {
        InputKind::Form | InputKind::Url => {
            let action = answer.get("action").and_then(Value::as_str);
            match action {
                Some(action @ ("decline" | "cancel")) => Ok(Ok(json!({ "action": action }))),
                Some("accept") if kind == InputKind::Url => Ok(Ok(json!({"action": "accept"}))),
                Some("accept") => {
                    let validator = asked
                        .form
                        .as_ref()
                        .ok_or_else(|| malformed("the question's schema cannot be compiled"))?;
                    let (name, content) = answer
                        .remove_entry("content")
                        .unwrap_or_else(|| ("content".to_owned(), Value::Object(Map::new())));
                    Ok(validator.check(content).map(|content| {
                        // The client's own answer, reduced to `action` and the checked content.
                        answer.retain(|key, _| key == "action");
                        answer.insert(name, Value::Object(content));
                        Value::Object(answer)
                    }))
                }
                _ => Err(malformed(
                    "`action` must be \"accept\", \"decline\" or \"cancel\"",
                )),
            }
        }
        InputKind::Sampling { .. } => {
            let role_ok = answer.get("role").is_some_and(Value::is_string);
            let content_ok = answer
                .get("content")
                .is_some_and(|c| c.is_object() || c.is_array());
            if role_ok && content_ok {
                Ok(Ok(Value::Object(answer)))
            } else {
                Err(malformed("a sampling result needs `role` and `content`"))
            }
        }
        InputKind::Roots => {
            if answer.get("roots").is_some_and(Value::is_array) {
                Ok(Ok(Value::Object(answer)))
            } else {
                Err(malformed("a roots result needs a `roots` array"))
            }
        }
    }
}

/// The question again, its message followed by what was wrong: the text as it was shown, but for
/// the message (added at the end of `params` if it had none).
fn with_hint(question: &RawValue, hint: &str) -> Box<RawValue> {
    hinted(question, hint).unwrap_or_else(|| question.to_owned())
}

fn hinted(question: &RawValue, hint: &str) -> Option<Box<RawValue>> {
    let ObjectOr::Object(members) = serde_json::from_str::<RawMembers<'_>>(question.get()).ok()?
    else {
        return None;
    };
    let mut out = Vec::with_capacity(question.get().len() + hint.len() + 48);
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_key(&mut out, key);
        if key != "params" {
            out.extend_from_slice(value.get().as_bytes());
            continue;
        }
        let ObjectOr::Object(params) = serde_json::from_str::<RawMembers<'_>>(value.get()).ok()?
        else {
            out.extend_from_slice(value.get().as_bytes());
            continue;
        };
        let message = params
            .iter()
            .find(|(key, _)| key == "message")
            .and_then(|(_, raw)| serde_json::from_str::<String>(raw.get()).ok())
            .unwrap_or_default();
        let message = format!("{message}\n\nThe previous answer was not accepted: {hint}.");
        let mut hinted = false;
        out.push(b'{');
        for (i, (key, value)) in params.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_key(&mut out, key);
            if key == "message" && !hinted {
                hinted = true;
                serde_json::to_writer(&mut out, &message).ok()?;
            } else {
                out.extend_from_slice(value.get().as_bytes());
            }
        }
        if !hinted {
            if !params.is_empty() {
                out.push(b',');
            }
            write_key(&mut out, "message");
            serde_json::to_writer(&mut out, &message).ok()?;
        }
        out.push(b'}');
    }
    out.push(b'}');
    RawValue::from_string(String::from_utf8(out).ok()?).ok()
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    // A string into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::validate::ValidatorCache;

    fn questions() -> Questions {
        let requests = json!({
            "approval": {"method": "elicitation/create", "params": {"message": "Deploy to staging?",
                "requestedSchema": {"type": "object", "properties": {
                    "approve": {"type": "boolean"}, "note": {"type": "string", "maxLength": 5}},
                    "required": ["approve"]}}},
            "login": {"method": "elicitation/create", "params": {"mode": "url", "message": "Log in", "url": "https://example.com/x"}},
            "llm": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}},
            "roots": {"method": "roots/list", "params": {}}
        });
        crate::state::claims::questions(requests.as_object().unwrap())
    }

    fn answers() -> Map<String, Value> {
        json!({
            "approval": {"action": "accept", "content": {"approve": true, "extra": 1}},
            "login": {"action": "accept", "content": {"ignored": true}},
            "llm": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"},
            "roots": {"roots": [{"uri": "file:///r"}]},
            "unasked": {"action": "accept", "content": {}}
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn run(responses: &Map<String, Value>) -> Result<Checked, Malformed> {
        check(
            &questions(),
            &Map::new(),
            responses.clone(),
            &ValidatorCache::default(),
        )
    }

    #[test]
    fn complete_answers_are_cleaned() {
        let Checked::Complete(done) = run(&answers()).unwrap() else {
            panic!("expected complete")
        };
        assert_eq!(done.len(), 4);
        assert_eq!(
            done["approval"],
            json!({"action": "accept", "content": {"approve": true}})
        );
        assert_eq!(done["login"], json!({"action": "accept"}));
        assert!(!done.contains_key("unasked"));
    }

    #[test]
    fn invalid_and_missing_answers_are_reasked_and_valid_ones_kept() {
        let mut responses = answers();
        responses.insert(
            "approval".into(),
            json!({"action": "accept", "content": {"approve": true, "note": "far too long"}}),
        );
        responses.remove("roots");
        let Checked::Reask { ask, kept } = run(&responses).unwrap() else {
            panic!("expected a re-ask")
        };
        assert_eq!(ask.keys().collect::<Vec<_>>(), ["approval", "roots"]);
        let approval: Value = serde_json::from_str(ask["approval"].get()).unwrap();
        let message = approval["params"]["message"].as_str().unwrap();
        assert!(message.starts_with("Deploy to staging?\n\n"), "{message}");
        assert!(message.contains("note"), "{message}");
        assert!(!message.contains("far too long"), "{message}");
        assert_eq!(ask["roots"].get(), r#"{"method":"roots/list","params":{}}"#);
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["llm", "login"]);

        // Next round: the kept answers count, and cannot be overwritten.
        let mut next = Map::new();
        next.insert("approval".into(), json!({"action": "decline"}));
        next.insert("roots".into(), json!({"roots": []}));
        next.insert("login".into(), json!({"action": "decline"}));
        let Checked::Complete(done) =
            check(&questions(), &kept, next, &ValidatorCache::default()).unwrap()
        else {
            panic!("expected complete")
        };
        assert_eq!(done["login"], json!({"action": "accept"}));
        assert_eq!(done["approval"], json!({"action": "decline"}));
    }

    #[test]
    fn wrong_shapes_are_protocol_errors() {
        for (key, bad) in [
            ("approval", json!(12345)),
            ("approval", json!({"action": "maybe"})),
            ("llm", json!({"content": "x"})),
            ("roots", json!({"roots": "x"})),
        ] {
            let mut responses = answers();
            responses.insert(key.into(), bad);
            let err = run(&responses).unwrap_err();
            assert!(
                err.0.starts_with(&format!("inputResponses.{key}:")),
                "{err:?}"
            );
        }
    }

    #[test]
    fn decline_and_cancel_are_forwarded_without_content() {
        let mut responses = answers();
        responses.insert(
            "approval".into(),
            json!({"action": "cancel", "content": {"approve": "nonsense"}}),
        );
        let Checked::Complete(done) = run(&responses).unwrap() else {
            panic!("expected complete")
        };
        assert_eq!(done["approval"], json!({"action": "cancel"}));
    }

    #[test]
    fn a_hint_changes_only_the_message_of_the_text_shown() {
        let shown = r#"{"method":"elicitation/create","params":{"mode":"form","message":"M\u00e9?","requestedSchema":{"type":"object","properties":{"b":{"type":"number","maximum":1.0e1},"a":{"type":"string"}}},"_meta":{"ui":{"resourceUri":"ui://x"}}}}"#;
        let raw = RawValue::from_string(shown.to_owned()).unwrap();
        assert_eq!(
            with_hint(&raw, "`a` is required").get(),
            r#"{"method":"elicitation/create","params":{"mode":"form","message":"Mé?\n\nThe previous answer was not accepted: `a` is required.","requestedSchema":{"type":"object","properties":{"b":{"type":"number","maximum":1.0e1},"a":{"type":"string"}}},"_meta":{"ui":{"resourceUri":"ui://x"}}}}"#
        );
        for (question, hinted) in [
            (
                r#"{"params":{"url":"u"},"method":"m"}"#,
                r#"{"params":{"url":"u","message":"\n\nThe previous answer was not accepted: h."},"method":"m"}"#,
            ),
            (
                r#"{"params":{},"method":"m"}"#,
                r#"{"params":{"message":"\n\nThe previous answer was not accepted: h."},"method":"m"}"#,
            ),
            (
                r#"{"params":[1],"method":"m"}"#,
                r#"{"params":[1],"method":"m"}"#,
            ),
            ("[1]", "[1]"),
        ] {
            let raw = RawValue::from_string(question.to_owned()).unwrap();
            assert_eq!(with_hint(&raw, "h").get(), hinted, "{question}");
        }
    }
}
