//! Checking the client's answers against the questions that were asked.

use std::sync::LazyLock;

use memchr::memmem::Finder;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::form::validate::{FieldProblem, QuestionError, ReadQuestion, Rejection};
use crate::token::claims::Questions;
use crate::wire::edit::{NestedObjects, edit_member, edit_object, member, with_set};
use crate::wire::json::{Object, ObjectOr, boxed_raw_value};
use crate::wire::mcp::InputKind;

/// How many bytes of JSON a re-asked form pre-fills at most, its fields in the order answered: a
/// value that does not fit is not pre-filled. It bounds what a client's answers add to the
/// sealed token and to the question caches.
const MAX_PREFILLED_BYTES: usize = 2048;

/// The verdict on one round of answers.
#[derive(Debug, Clone)]
pub(super) enum Checked {
    /// Every question has an acceptable answer: forward these (cleaned) answers.
    Complete(Map<String, Value>),
    /// Some answers are missing or invalid.
    Reask(Reask),
}

/// What a round asks again, when some answers are missing or invalid ([`Checked::Reask`]).
#[derive(Debug, Clone)]
pub(super) struct Reask {
    /// What to ask now: the original requests as they were shown; in an invalid form, each
    /// problem on its field (its `description`), a line in the message naming those fields,
    /// and each valid field pre-filled as its `default`.
    pub(super) ask: Questions,
    /// Every question as asked now, without the hints: what was asked before, the pre-filled
    /// defaults added. The same schemas, so the next answers are checked as these were.
    pub(super) asked: Questions,
    /// The answers that were acceptable, kept for the next round.
    pub(super) kept: Map<String, Value>,
    /// The kind of each request in `ask` that has one, in its order: what the capability
    /// check of the re-ask needs, without reading each question again (`None`: read them).
    pub(super) kinds: Option<Vec<InputKind>>,
}

/// An answer that is not even the right shape for its kind: a protocol error, not a re-ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WrongShape(pub(super) String);

/// Checks `responses` (and answers `kept` from earlier rounds, which win) against `questions`.
/// Keys that were not asked are dropped.
pub(super) fn check(
    questions: &Questions,
    kept: &Map<String, Value>,
    mut responses: Map<String, Value>,
    validators: &impl ReadQuestion,
) -> Result<Checked, WrongShape> {
    let mut accepted = Map::new();
    let mut ask = Questions::new();
    let mut asked = Questions::new();
    let mut kinds = Vec::new();
    for (key, question) in questions {
        if let Some(answer) = kept.get(key) {
            accepted.insert(key.clone(), answer.clone());
            continue;
        }
        let Some((key, answer)) = responses.remove_entry(key) else {
            kinds.extend(InputKind::of_raw(question).map(|(kind, _)| kind));
            ask.insert(key.clone(), question.clone());
            continue;
        };
        match check_one(&key, question, answer, validators)? {
            Ok(clean) => {
                accepted.insert(key, clean);
            }
            Err(rejection) => {
                let (prefilled, shown) = reasked(question, &rejection).unwrap_or_else(|| {
                    let prefilled = prefilled(question, &rejection.valid);
                    let problems = rejection.in_order(&fields(&prefilled));
                    let shown = with_problems(&prefilled, &problems);
                    (prefilled, shown)
                });
                kinds.extend(rejected_kind(&shown));
                ask.insert(key.clone(), shown);
                asked.insert(key, prefilled);
            }
        }
    }
    if ask.is_empty() {
        Ok(Checked::Complete(accepted))
    } else {
        for (key, question) in questions {
            if !asked.contains_key(key) {
                asked.insert(key.clone(), question.clone());
            }
        }
        Ok(Checked::Reask(Reask {
            ask,
            asked,
            kept: accepted,
            kinds: Some(kinds),
        }))
    }
}

/// The kind [`InputKind::of_raw`] reads in `shown`, a form question whose answer was rejected
/// (only a form's content is), asked again: a form, unless the text could spell a `mode` member
/// (`"mode"`, or a `\u` escape that could spell its key), which `of_raw` takes as written and
/// is left to read it. The re-ask's capability check needs no second read of the question.
fn rejected_kind(shown: &RawValue) -> Option<InputKind> {
    static MODE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"mode\""));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    let text = shown.get().as_bytes();
    if MODE.find(text).is_none() && ESCAPE.find(text).is_none() {
        return Some(InputKind::Form);
    }
    InputKind::of_raw(shown).map(|(kind, _)| kind)
}

/// One answer: `Ok(Ok(clean))`, `Ok(Err(why))` for content to re-ask, `Err` for a wrong shape.
fn check_one(
    key: &str,
    question: &RawValue,
    answer: Value,
    validators: &impl ReadQuestion,
) -> Result<Result<Value, Rejection>, WrongShape> {
    let malformed = |what: &str| WrongShape(format!("inputResponses.{key}: {what}"));
    // The question as shown, read through its canonical form: the validator is the same for
    // every spelling of a schema.
    let spelled = match validators.read_shown(question.get()) {
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

/// A form `question` asked again after `rejection`, from one read of its text: the question
/// with the answer's valid fields as their `default`s ([`prefilled`]), and that question as
/// shown ([`with_problems`]). `None` when the text cannot be read along its fields in one pass
/// (a key given twice, a `params` that is not an object, …): the caller edits it member by
/// member, to the same text.
///
/// A re-ask is the layer's own answer, and editing the question once per change read its whole
/// text each time: most of the re-ask's work.
fn reasked(question: &RawValue, rejection: &Rejection) -> Option<(Box<RawValue>, Box<RawValue>)> {
    const PARAMS: usize = 1;
    const PROPERTIES: usize = 3;
    let form = NestedObjects::read(question.get(), &["params", "requestedSchema", "properties"])?;
    let fields: Vec<String> = form
        .level(PROPERTIES)
        .map(|properties| properties.raw().map(|(key, _)| key.to_owned()).collect())
        .unwrap_or_default();
    let defaults = defaults(&rejection.valid);
    let Placed {
        mut lines,
        names,
        described,
    } = Placed::of(&rejection.in_order(&fields), &fields);
    if !described.is_empty() {
        lines.push(crate::texts::correct_fields(&names));
    }
    let message = form
        .level(PARAMS)
        .and_then(|params| params.get("message"))
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .unwrap_or_default();
    let message = serde_json::to_string(&crate::texts::after_message(&message, &lines)).ok()?;
    let default_of = |field: &str| {
        defaults
            .iter()
            .find(|(name, _)| *name == field)
            .map(|(_, value)| value.as_str())
    };
    let prefilled = if defaults.is_empty() {
        question.to_owned()
    } else {
        let text = form.write(
            &mut |depth, field, property| {
                let value = default_of(field).filter(|_| depth == PROPERTIES)?;
                let ObjectOr::Object(members) = Object::read(property.get(), &[]).ok()? else {
                    return None;
                };
                Some(with_set(
                    &members,
                    property.get().len(),
                    &[("default", value)],
                ))
            },
            &|_| None,
        );
        boxed_raw_value(&text).ok()?
    };
    let shown = form.write(
        &mut |depth, key, value| match depth {
            PARAMS if key == "message" => Some(message.clone()),
            PROPERTIES => {
                let default = default_of(key);
                let problem = described.iter().find(|(field, _)| *field == key);
                if default.is_none() && problem.is_none() {
                    return None;
                }
                let ObjectOr::Object(property) = Object::read(value.get(), &[]).ok()? else {
                    return None;
                };
                let description = problem.and_then(|(_, problem)| {
                    let own = property
                        .get("description")
                        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
                    serde_json::to_string(&crate::texts::on_field(own.as_deref(), problem)).ok()
                });
                let mut set = Vec::with_capacity(2);
                set.extend(default.map(|value| ("default", value)));
                set.extend(description.as_deref().map(|text| ("description", text)));
                Some(with_set(&property, value.get().len(), &set))
            }
            _ => None,
        },
        &|depth| (depth == PARAMS).then(|| ("message", message.clone())),
    );
    Some((prefilled, boxed_raw_value(&shown).ok()?))
}

/// The question again, its message followed by `lines` after a blank line: the text as it was
/// shown, but for the message (added at the end of `params` if it had none).
pub(super) fn with_hint(question: &RawValue, lines: &[String]) -> Box<RawValue> {
    hinted(question, lines)
        .and_then(|text| boxed_raw_value(&text).ok())
        .unwrap_or_else(|| question.to_owned())
}

fn hinted(question: &RawValue, lines: &[String]) -> Option<String> {
    edit_object(question.get(), None, |key, params| {
        if key != "params" {
            return None;
        }
        let message = member(params.get(), "message")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .unwrap_or_default();
        let message = serde_json::to_string(&crate::texts::after_message(&message, lines)).ok()?;
        edit_object(params.get(), Some(("message", &message)), |key, _| {
            (key == "message").then(|| message.clone())
        })
    })
}

/// The form `question` as shown again after `problems`: each problem of a field it shows goes on
/// that field (its `description`), and the message gains one line naming those fields; a problem
/// of the answer as a whole (or of a field it does not show) is a line of the message. The text
/// as it was, but for those members.
fn with_problems(question: &RawValue, problems: &[&FieldProblem]) -> Box<RawValue> {
    let Placed {
        mut lines,
        names,
        described,
    } = Placed::of(problems, &fields(question));
    on_fields_shown(question, &described, &names, &mut lines)
}

/// Where each problem of a rejected answer goes when its form is shown again.
struct Placed<'p> {
    /// Lines of the message: problems of the answer as a whole, or of a field not shown.
    lines: Vec<String>,
    /// The names of the shown fields with a problem, for the line naming them.
    names: Vec<&'p str>,
    /// Each shown field with a problem: its key, and the problem as its description says it.
    described: Vec<(&'p str, String)>,
}

impl<'p> Placed<'p> {
    /// `problems` placed on the form whose fields are `shown`.
    fn of(problems: &[&'p FieldProblem], shown: &[String]) -> Self {
        let (on_fields, others): (Vec<&FieldProblem>, Vec<&FieldProblem>) = problems
            .iter()
            .partition(|problem| problem.field.as_ref().is_some_and(|f| shown.contains(f)));
        Self {
            lines: others.iter().map(|problem| problem.line()).collect(),
            names: on_fields
                .iter()
                .filter_map(|problem| problem.name.as_deref())
                .collect(),
            described: on_fields
                .iter()
                .filter_map(|problem| Some((problem.field.as_deref()?, problem.alone())))
                .collect(),
        }
    }
}

/// `question` with each of `described` (a field's key and its problem) on that field, and the
/// message followed by `lines` and, when a field was described, the line naming `names`.
fn on_fields_shown(
    question: &RawValue,
    described: &[(&str, String)],
    names: &[&str],
    lines: &mut Vec<String>,
) -> Box<RawValue> {
    if !described.is_empty() {
        lines.push(crate::texts::correct_fields(names));
    }
    let described = with_descriptions(question.get(), described)
        .and_then(|text| boxed_raw_value(&text).ok())
        .unwrap_or_else(|| question.to_owned());
    with_hint(&described, lines)
}

/// A gate's form `question` asked again after its check refused the answer: a form of one field
/// shows `hint` on that field, as [`with_problems`] shows a problem; any other after the message.
pub(super) fn with_retry_hint(question: &RawValue, hint: &str) -> Box<RawValue> {
    let shown = fields(question);
    let [field] = shown.as_slice() else {
        return with_hint(question, &[hint.to_owned()]);
    };
    let title = member(question.get(), "params")
        .and_then(|params| member(params.get(), "requestedSchema"))
        .and_then(|schema| member(schema.get(), "properties"))
        .and_then(|properties| member(properties.get(), field))
        .and_then(|property| member(property.get(), "title"))
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .map(|title| title.trim().to_owned())
        .filter(|title| !title.is_empty());
    let name = title.as_deref().unwrap_or(field);
    on_fields_shown(
        question,
        &[(field, hint.to_owned())],
        &[name],
        &mut Vec::new(),
    )
}

fn with_descriptions(question: &str, problems: &[(&str, String)]) -> Option<String> {
    if problems.is_empty() {
        return None;
    }
    edit_member(question, "params", |params| {
        edit_member(params.get(), "requestedSchema", |schema| {
            edit_member(schema.get(), "properties", |properties| {
                edit_object(properties.get(), None, |field, property| {
                    let (_, problem) = problems.iter().find(|(key, _)| *key == field)?;
                    let own = member(property.get(), "description")
                        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
                    let description = crate::texts::on_field(own.as_deref(), problem);
                    let text = serde_json::to_string(&description).ok()?;
                    edit_object(property.get(), Some(("description", &text)), |key, _| {
                        (key == "description").then(|| text.clone())
                    })
                })
            })
        })
    })
}

/// The form `question` with each field of `valid` (the fields of an answer that were valid) as
/// its `default`, as far as [`MAX_PREFILLED_BYTES`] allows: the text as it was, but for those
/// `default`s. Any other question is returned as it is.
fn prefilled(question: &RawValue, valid: &Map<String, Value>) -> Box<RawValue> {
    let defaults = defaults(valid);
    if defaults.is_empty() {
        return question.to_owned();
    }
    with_defaults(question.get(), &defaults)
        .and_then(|text| boxed_raw_value(&text).ok())
        .unwrap_or_else(|| question.to_owned())
}

/// Each field of `valid` and its JSON text, as far as [`MAX_PREFILLED_BYTES`] allows.
fn defaults(valid: &Map<String, Value>) -> Vec<(&str, String)> {
    let mut budget = MAX_PREFILLED_BYTES;
    valid
        .iter()
        .filter_map(|(field, value)| {
            let text = serde_json::to_string(value).ok()?;
            budget = budget.checked_sub(text.len())?;
            Some((field.as_str(), text))
        })
        .collect()
}

fn with_defaults(question: &str, defaults: &[(&str, String)]) -> Option<String> {
    edit_member(question, "params", |params| {
        edit_member(params.get(), "requestedSchema", |schema| {
            edit_member(schema.get(), "properties", |properties| {
                edit_object(properties.get(), None, |field, property| {
                    let (_, value) = defaults.iter().find(|(name, _)| *name == field)?;
                    edit_object(property.get(), Some(("default", value)), |key, _| {
                        (key == "default").then(|| value.clone())
                    })
                })
            })
        })
    })
}

/// The keys of a form question's fields, in the order it shows them.
fn fields(question: &RawValue) -> Vec<String> {
    let properties = member(question.get(), "params")
        .and_then(|params| member(params.get(), "requestedSchema"))
        .and_then(|schema| member(schema.get(), "properties"));
    let Some(properties) = properties else {
        return Vec::new();
    };
    match Object::read(properties.get(), &[]) {
        Ok(ObjectOr::Object(members)) => members.raw().map(|(key, _)| key.into()).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::validate::ValidatorCache;
    use std::sync::Arc;

    /// A rejected form asked again has the kind `InputKind::of_raw` reads in it, read or not.
    #[test]
    fn a_rejected_forms_kind_is_what_its_text_reads() {
        for text in [
            r#"{"method":"elicitation/create","params":{"message":"a\n\nb","requestedSchema":{"type":"object"}}}"#,
            r#"{"method":"elicitation/create","params":{"mode":"form","requestedSchema":{}}}"#,
            r#"{"method":"elicitation/create","params":{"mode":"\u0066orm","requestedSchema":{}}}"#,
            r#"{"method":"elicitation/create","params":{"mod\u0065":"url","requestedSchema":{}}}"#,
            r#"{"method":"elicitation/create","params":{"message":"\u00e9","requestedSchema":{}}}"#,
        ] {
            let shown = RawValue::from_string(text.to_owned()).unwrap();
            assert_eq!(
                rejected_kind(&shown),
                InputKind::of_raw(&shown).map(|(kind, _)| kind),
                "{text}"
            );
        }
    }

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
        crate::token::claims::questions(requests.as_object().unwrap())
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

    fn run(responses: &Map<String, Value>) -> Result<Checked, WrongShape> {
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
        let Checked::Reask(Reask { ask, kept, .. }) = run(&responses).unwrap() else {
            panic!("expected a re-ask")
        };
        assert_eq!(ask.keys().collect::<Vec<_>>(), ["approval", "roots"]);
        let approval: Value = serde_json::from_str(ask["approval"].get()).unwrap();
        let message = approval["params"]["message"].as_str().unwrap();
        assert!(message.starts_with("Deploy to staging?\n\n"), "{message}");
        assert!(message.contains("note"), "{message}");
        assert!(!message.contains("far too long"), "{message}");
        assert_eq!(ask["roots"].get(), r#"{"method":"roots/list","params":{}}"#);
        // Sorted: with `preserve_order` a `Map` keeps insertion order instead.
        let mut kept_keys = kept.keys().collect::<Vec<_>>();
        kept_keys.sort();
        assert_eq!(kept_keys, ["llm", "login"]);

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
        let lines = ["a: this field is required.".to_owned(), "b: x.".to_owned()];
        assert_eq!(
            with_hint(&raw, &lines).get(),
            r#"{"method":"elicitation/create","params":{"mode":"form","message":"Mé?\n\na: this field is required.\nb: x.","requestedSchema":{"type":"object","properties":{"b":{"type":"number","maximum":1.0e1},"a":{"type":"string"}}},"_meta":{"ui":{"resourceUri":"ui://x"}}}}"#
        );
        for (question, hinted) in [
            (
                r#"{"params":{"url":"u"},"method":"m"}"#,
                r#"{"params":{"url":"u","message":"h"},"method":"m"}"#,
            ),
            (
                r#"{"params":{},"method":"m"}"#,
                r#"{"params":{"message":"h"},"method":"m"}"#,
            ),
            (
                r#"{"params":[1],"method":"m"}"#,
                r#"{"params":[1],"method":"m"}"#,
            ),
            ("[1]", "[1]"),
        ] {
            let raw = RawValue::from_string(question.to_owned()).unwrap();
            assert_eq!(
                with_hint(&raw, &["h".to_owned()]).get(),
                hinted,
                "{question}"
            );
        }
    }

    /// A form question as an inner service might spell it (minified, its own member order).
    fn form(properties: &str, required: &str) -> Box<RawValue> {
        let text = format!(
            r#"{{"method":"elicitation/create","params":{{"message":"Deploy to staging?","requestedSchema":{{"type":"object","properties":{properties},"required":{required}}}}}}}"#
        );
        RawValue::from_string(text).unwrap()
    }

    fn one_question(key: &str, question: Box<RawValue>) -> Questions {
        Questions::from([(key.to_owned(), question)])
    }

    fn reask_of(
        questions: &Questions,
        kept: &Map<String, Value>,
        responses: Value,
        cache: &ValidatorCache,
    ) -> (Questions, Questions, Map<String, Value>) {
        let responses = responses.as_object().unwrap().clone();
        match check(questions, kept, responses, cache).unwrap() {
            Checked::Reask(Reask {
                ask, asked, kept, ..
            }) => (ask, asked, kept),
            Checked::Complete(done) => panic!("expected a re-ask, got {done:?}"),
        }
    }

    /// A re-ask edits the question from one read of it ([`reasked`]) to the very text the edits
    /// member by member make, whatever the form holds: a message or none, descriptions and
    /// defaults of the author's, fields valid or not, problems of no field shown.
    #[test]
    fn one_read_of_a_question_edits_it_as_member_by_member_edits_do() {
        let forms = [
            form(APPROVAL, r#"["approve"]"#),
            form(
                r#"{"note":{"description":"Why","maxLength":2,"type":"string","default":"x"},"n":{"type":"integer","minimum":3}}"#,
                r#"["n"]"#,
            ),
            RawValue::from_string(
                r#"{"method":"elicitation/create","params":{"requestedSchema":{"properties":{"a\"b":{"type":"string","maxLength":1}},"type":"object"},"mode":"form"},"x":[1,{"y":2}]}"#
                    .to_owned(),
            )
            .unwrap(),
            RawValue::from_string(
                r#"{"method":"elicitation/create","params":{"message":"M","requestedSchema":{"type":"object","required":["z"]}}}"#
                    .to_owned(),
            )
            .unwrap(),
        ];
        let contents = [
            json!({"approve": "yes", "note": "n".repeat(300), "count": 2.0}),
            json!({"approve": true, "note": "ok", "count": "two"}),
            json!({"note": "toolong", "n": 1}),
            json!({"note": "", "n": 5, "extra": 1}),
            json!({"a\"b": "xy"}),
            json!({}),
        ];
        let cache = ValidatorCache::default();
        let mut compared = 0;
        for question in &forms {
            let validator = cache
                .read_shown(question.get())
                .unwrap()
                .question
                .form
                .clone();
            for content in &contents {
                let Err(rejection) = validator.as_ref().unwrap().check(content.clone()) else {
                    continue;
                };
                let prefilled = prefilled(question, &rejection.valid);
                let problems = rejection.in_order(&fields(&prefilled));
                let shown = with_problems(&prefilled, &problems);
                let (one_prefilled, one_shown) = reasked(question, &rejection).unwrap();
                assert_eq!(one_prefilled.get(), prefilled.get(), "{content}");
                assert_eq!(one_shown.get(), shown.get(), "{content}");
                compared += 1;
            }
        }
        assert!(compared >= 8, "{compared} rejections compared");
        // A question it cannot read in one pass is left to the edits member by member.
        let repeated = RawValue::from_string(
            r#"{"method":"elicitation/create","params":{"message":"a","message":"b"}}"#.to_owned(),
        )
        .unwrap();
        let rejection = Rejection {
            problems: Vec::new(),
            valid: Map::new(),
        };
        assert!(reasked(&repeated, &rejection).is_none());
    }

    const APPROVAL: &str = r#"{"approve":{"type":"boolean","title":"Approve"},"note":{"type":"string","title":"Note","maxLength":200},"count":{"type":"integer"}}"#;

    #[test]
    fn a_reask_prefills_the_valid_fields_and_not_the_invalid_ones() {
        let questions = one_question("approval", form(APPROVAL, r#"["approve"]"#));
        let answer = json!({"approval": {"action": "accept",
            "content": {"approve": true, "note": "n".repeat(300), "count": 2.0}}});
        let (ask, asked, kept) =
            reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        assert!(kept.is_empty());
        // Valid fields carry their value as `default` (a whole number as an integer); the
        // invalid note has none. Every other byte is as it was asked.
        let prefilled = r#"{"approve":{"type":"boolean","title":"Approve","default":true},"note":{"type":"string","title":"Note","maxLength":200},"count":{"type":"integer","default":2}}"#;
        assert_eq!(
            asked["approval"].get(),
            form(prefilled, r#"["approve"]"#).get()
        );
        // What is shown is that, with the problem on the note (which had no description) and
        // the message naming it.
        let shown: Value = serde_json::from_str(ask["approval"].get()).unwrap();
        assert_eq!(
            shown["params"]["message"],
            "Deploy to staging?\n\nPlease correct: Note."
        );
        assert_eq!(
            shown["params"]["requestedSchema"]["properties"]["note"]["description"],
            "Use at most 200 characters (you entered 300)."
        );
        assert_eq!(
            ask["approval"]
                .get()
                .replace(
                    r#","description":"Use at most 200 characters (you entered 300).""#,
                    ""
                )
                .replace("\\n\\nPlease correct: Note.", ""),
            asked["approval"].get()
        );
    }

    #[test]
    fn a_reask_with_no_valid_field_prefills_nothing_and_keeps_the_authors_defaults() {
        let properties = r#"{"approve":{"type":"boolean","default":false},"note":{"type":"string","maxLength":3,"default":"ok"}}"#;
        let questions = one_question("approval", form(properties, r#"["approve"]"#));
        let answer = json!({"approval": {"action": "accept", "content": {"approve": "yes", "note": "long"}}});
        let (ask, asked, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        // Not a byte changed but what is shown: the invalid values are not pre-filled, and the
        // author's own defaults stay.
        assert_eq!(asked["approval"].get(), questions["approval"].get());
        let shown: Value = serde_json::from_str(ask["approval"].get()).unwrap();
        assert_eq!(
            shown["params"]["message"],
            "Deploy to staging?\n\nPlease correct: approve, note."
        );
        let fields = &shown["params"]["requestedSchema"]["properties"];
        assert_eq!(fields["approve"]["description"], "Answer yes or no.");
        assert_eq!(
            fields["note"]["description"],
            "Use at most 3 characters (you entered 4)."
        );
        // A valid answer replaces the author's default.
        let answer =
            json!({"approval": {"action": "accept", "content": {"approve": true, "note": "long"}}});
        let (_, asked, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        let asked: Value = serde_json::from_str(asked["approval"].get()).unwrap();
        let fields = &asked["params"]["requestedSchema"]["properties"];
        assert_eq!(fields["approve"]["default"], true);
        assert_eq!(fields["note"]["default"], "ok");
    }

    #[test]
    fn the_message_names_the_fields_in_the_order_the_form_shows_them() {
        let properties = r#"{"zeta":{"type":"boolean","title":"First shown"},"alpha":{"type":"string","minLength":2}}"#;
        let questions = one_question("q", form(properties, r#"["zeta"]"#));
        let answer = json!({"q": {"action": "accept", "content": {"alpha": "a"}}});
        let (ask, _, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        let shown: Value = serde_json::from_str(ask["q"].get()).unwrap();
        assert_eq!(
            shown["params"]["message"],
            "Deploy to staging?\n\nPlease correct: First shown, alpha."
        );
        let fields = &shown["params"]["requestedSchema"]["properties"];
        assert_eq!(fields["zeta"]["description"], "This field is required.");
        assert_eq!(
            fields["alpha"]["description"],
            "Use at least 2 characters (you entered 1)."
        );
    }

    #[test]
    fn a_problem_goes_before_the_fields_own_description_and_nothing_else_changes() {
        let properties = r#"{"note":{"description":"Why, for the log.","type":"string","maxLength":3},"flag":{"type":"boolean"}}"#;
        let questions = one_question("q", form(properties, r#"["flag"]"#));
        let answer = json!({"q": {"action": "accept", "content": {"note": "long", "flag": "x"}}});
        let (ask, asked, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        // The sealed question carries no problem: the next answer is checked against it.
        assert_eq!(asked["q"].get(), questions["q"].get());
        let shown = r#"{"note":{"description":"Use at most 3 characters (you entered 4). Why, for the log.","type":"string","maxLength":3},"flag":{"type":"boolean","description":"Answer yes or no."}}"#;
        let message = r#""message":"Deploy to staging?""#;
        assert_eq!(
            ask["q"].get(),
            form(shown, r#"["flag"]"#).get().replace(
                message,
                r#""message":"Deploy to staging?\n\nPlease correct: note, flag.""#
            )
        );
    }

    #[test]
    fn a_retry_hint_goes_on_a_forms_one_field_else_after_the_message() {
        let one = form(
            r#"{"confirm":{"type":"string","title":"Branch name","description":"Type it."}}"#,
            r#"["confirm"]"#,
        );
        let shown: Value =
            serde_json::from_str(with_retry_hint(&one, "That is not it.").get()).unwrap();
        assert_eq!(
            shown["params"]["message"],
            "Deploy to staging?\n\nPlease correct: Branch name."
        );
        assert_eq!(
            shown["params"]["requestedSchema"]["properties"]["confirm"]["description"],
            "That is not it. Type it."
        );
        // Untitled: named by its key.
        let untitled = form(r#"{"confirm":{"type":"string"}}"#, "[]");
        let shown: Value = serde_json::from_str(with_retry_hint(&untitled, "No.").get()).unwrap();
        assert_eq!(
            shown["params"]["message"],
            "Deploy to staging?\n\nPlease correct: confirm."
        );
        // Two fields: which one is wrong is the gate's to say, in the message.
        let two = form(APPROVAL, "[]");
        assert_eq!(
            with_retry_hint(&two, "No.").get(),
            with_hint(&two, &["No.".to_owned()]).get()
        );
    }

    #[test]
    fn a_problem_of_no_field_shown_stays_in_the_message() {
        // Not a form at all, and a required field the form does not show: no field to put them on.
        let properties = r#"{"a":{"type":"string"}}"#;
        let questions = one_question("q", form(properties, r#"["hidden"]"#));
        for (content, message) in [
            (
                json!("text"),
                "Deploy to staging?\n\nThe answer was not a filled-in form; please answer again.",
            ),
            (
                json!({"a": 1}),
                "Deploy to staging?\n\nhidden: this field is required.\nPlease correct: a.",
            ),
        ] {
            let answer = json!({"q": {"action": "accept", "content": content}});
            let (ask, _, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
            let shown: Value = serde_json::from_str(ask["q"].get()).unwrap();
            assert_eq!(shown["params"]["message"], message, "{content}");
        }
    }

    #[test]
    fn prefilled_questions_are_validated_as_the_questions_asked() {
        let cache = ValidatorCache::default();
        let questions = one_question("approval", form(APPROVAL, r#"["approve"]"#));
        let answer =
            json!({"approval": {"action": "accept", "content": {"approve": true, "count": "x"}}});
        let (_, asked, _) = reask_of(&questions, &Map::new(), answer, &cache);
        assert_ne!(asked["approval"].get(), questions["approval"].get());
        // One compiled schema for both: defaults validate nothing.
        let form_of = |question: &RawValue| {
            cache
                .read_shown(question.get())
                .unwrap()
                .question
                .form
                .clone()
                .unwrap()
        };
        assert!(Arc::ptr_eq(
            &form_of(&asked["approval"]),
            &form_of(&questions["approval"])
        ));
        for content in [
            json!({"approve": false}),
            json!({"approve": "no"}),
            json!({"note": "x"}),
            json!({"approve": true, "count": 1.5}),
        ] {
            let answers = json!({"approval": {"action": "accept", "content": content}});
            let answers = answers.as_object().unwrap();
            let verdict = |questions: &Questions| match check(
                questions,
                &Map::new(),
                answers.clone(),
                &cache,
            )
            .unwrap()
            {
                Checked::Complete(done) => Ok(done),
                Checked::Reask(Reask { ask, .. }) => {
                    let shown: Value = serde_json::from_str(ask["approval"].get()).unwrap();
                    Err(shown["params"]["message"].clone())
                }
            };
            assert_eq!(verdict(&asked), verdict(&questions), "{content}");
        }
    }

    #[test]
    fn answers_kept_from_earlier_rounds_are_untouched_by_a_prefill() {
        let mut questions = questions();
        questions.insert("approval".into(), form(APPROVAL, r#"["approve"]"#));
        let kept =
            json!({"login": {"action": "accept"}, "roots": {"roots": [{"uri": "file:///r"}]}});
        let kept = kept.as_object().unwrap().clone();
        let answer = json!({
            "approval": {"action": "accept", "content": {"approve": true, "note": 7}},
            "llm": {"role": "assistant", "content": {"type": "text", "text": "hi"}},
            "login": {"action": "decline"},
        });
        let (ask, asked, now_kept) =
            reask_of(&questions, &kept, answer, &ValidatorCache::default());
        assert_eq!(ask.keys().collect::<Vec<_>>(), ["approval"]);
        // The kept answers stay as they were (a resent answer does not replace them), and every
        // other question is recorded as it was asked.
        assert_eq!(now_kept["login"], kept["login"]);
        assert_eq!(now_kept["roots"], kept["roots"]);
        assert_eq!(
            asked.keys().collect::<Vec<_>>(),
            questions.keys().collect::<Vec<_>>()
        );
        for key in ["login", "llm", "roots"] {
            assert_eq!(asked[key].get(), questions[key].get(), "{key}");
        }
    }

    #[test]
    fn a_prefill_is_bounded_in_bytes() {
        let properties =
            r#"{"long":{"type":"string"},"short":{"type":"string"},"flag":{"type":"boolean"}}"#;
        let questions = one_question("q", form(properties, r#"["flag"]"#));
        let long = "x".repeat(MAX_PREFILLED_BYTES);
        let answer = json!({"q": {"action": "accept", "content": {"long": long, "short": "s"}}});
        let (_, asked, _) = reask_of(&questions, &Map::new(), answer, &ValidatorCache::default());
        let asked: Value = serde_json::from_str(asked["q"].get()).unwrap();
        let fields = &asked["params"]["requestedSchema"]["properties"];
        assert_eq!(fields["long"].get("default"), None);
        assert_eq!(fields["short"]["default"], "s");
    }

    #[test]
    fn only_forms_are_prefilled() {
        let valid = json!({"a": 1}).as_object().unwrap().clone();
        for question in [
            r#"{"method":"elicitation/create","params":{"mode":"url","message":"m","url":"https://x"}}"#,
            r#"{"method":"elicitation/create","params":{"message":"m","requestedSchema":[]}}"#,
            r#"{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"b":{}}}}}"#,
            "[1]",
        ] {
            let raw = RawValue::from_string(question.to_owned()).unwrap();
            assert_eq!(prefilled(&raw, &valid).get(), question);
        }
    }
}
