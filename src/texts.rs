//! The words a person reads: re-ask hints and the gates' default texts, in one place.
//!
//! Everything the layer writes for the user of a host (as opposed to the JSON-RPC errors it writes
//! for programs) is made here, in plain text without Markdown, so that a translation has one
//! module to replace. A hint is one short sentence per problem, saying what to do in words that do
//! not assume the reader knows JSON; it never repeats what was entered, at most how long it was.
//! On the field itself (its `description` in a re-ask) the sentence is about that field; in the
//! message it names the field by the `title` the form shows (its key when it has none).

use serde_json::Value;

/// The message of a question asked again: the author's message, a blank line, then `lines`, one a
/// line. With no message of its own, only the lines.
pub(crate) fn after_message(message: &str, lines: &[String]) -> String {
    let lines = lines.join("\n");
    if message.is_empty() {
        lines
    } else {
        format!("{message}\n\n{lines}")
    }
}

/// The `description` of a field answered wrongly when it is asked again: `problem`, the sentence
/// that says what to do ([`sentence`] without a field), then the field's own description, if any.
/// The problem comes first: forms show a description in small print under the field's name, or
/// as the placeholder of an empty input, where the first words are the ones read (and the last
/// ones may be cut off).
pub(crate) fn on_field(description: Option<&str>, problem: &str) -> String {
    match description.map(str::trim) {
        Some(description) if !description.is_empty() => format!("{problem} {description}"),
        _ => problem.to_owned(),
    }
}

/// The line a re-asked form's message gains when the problems are on its fields: `names` are
/// those fields, as the form names them.
pub(crate) fn correct_fields(names: &[&str]) -> String {
    format!("Please correct: {}.", names.join(", "))
}

/// The line a URL gate's question gains when it is asked again because its flow is not complete.
pub(crate) const URL_NOT_FINISHED: &str =
    "Not finished yet: complete it in the browser, then continue.";

/// The line a gate's question gains when it is asked again because what it bound its approval
/// to ([`Gate::bound_to`](crate::Gate::bound_to)) changed since it was asked.
pub(crate) const GATE_CHANGED: &str = "This changed since you were asked (the tool's definition or the approval rule): nothing ran; please look again before you answer.";

/// A gate's message when none is configured.
pub(crate) fn gate_message(target: &str) -> String {
    format!("Allow {target}?")
}

/// A gate's refusal text when none is configured.
pub(crate) const GATE_REFUSAL: &str = "The request was not approved.";

/// The refusal of a gated call from a client that cannot answer a gate.
pub(crate) fn gate_needs_newer_client(target: &str) -> String {
    format!("\"{target}\" needs the user's approval, which requires MCP 2026-07-28 or later.")
}

/// The end of a bridged call whose session ended (a DELETE, an expiry, or the store lost it)
/// while it waited for the person's answer.
pub(crate) const BRIDGE_SESSION_ENDED: &str =
    "The session ended while this call waited for an answer. Connect again and retry the call.";

/// Why the bridge's open requests of that call are cancelled.
pub(crate) const BRIDGE_SESSION_ENDED_CANCEL: &str = "The session ended.";

/// The end of a bridged call whose server kept asking for input, `rounds` times, without finishing.
pub(crate) fn bridge_too_many_rounds(rounds: u32) -> String {
    format!(
        "This request asked for more input {} and still did not finish, so it was stopped. Try it again.",
        count(u64::from(rounds), "time", "times")
    )
}

/// The end of a bridged call whose URL flow (a step in the browser) the person accepted but did
/// not finish within `waited`.
pub(crate) fn bridge_url_not_finished(waited: std::time::Duration) -> String {
    format!(
        "The step in the browser was not finished within {}, so the request was stopped. Start it again, and finish the step in the browser before you continue.",
        duration(waited)
    )
}

/// The end of a bridged call whose question got no answer within `waited`.
pub(crate) fn bridge_no_answer(waited: std::time::Duration) -> String {
    format!(
        "You did not answer within {}, so the request was stopped. Make the request again.",
        duration(waited)
    )
}

/// Why the bridge's open requests are cancelled when their answer did not come in time.
pub(crate) const BRIDGE_NO_ANSWER_CANCEL: &str = "The server stopped waiting for an answer.";

/// Why the bridge's open requests are cancelled when another request of the same call failed.
pub(crate) const BRIDGE_OTHER_FAILED_CANCEL: &str = "Another request of the call failed.";

/// Why the bridge's open requests are cancelled when the client cancelled their call.
pub(crate) const BRIDGE_CALL_CANCELLED: &str = "The request they belong to was cancelled.";

/// The refusal of a bridged call that needs an answer while too many calls wait for one.
pub(crate) const BRIDGE_TOO_MANY_WAITING: &str =
    "Too many calls are waiting for an answer; try again later.";

/// A length of time as a person says it: `10 minutes`, `90 seconds`, `1 second`, `200
/// milliseconds`.
fn duration(length: std::time::Duration) -> String {
    let seconds = length.as_secs();
    match seconds {
        0 => count(
            u64::try_from(length.as_millis()).unwrap_or(0),
            "millisecond",
            "milliseconds",
        ),
        s if s % 60 == 0 => count(s / 60, "minute", "minutes"),
        s => count(s, "second", "seconds"),
    }
}

/// The upstream adapter's errors (feature `upstream`): a retry whose call is no longer waiting.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_CALL_GONE: &str = "This call is no longer waiting for an answer: it finished, expired, or the server restarted. Make the request again.";

/// The upstream adapter's error for a retry whose call waits on another replica (or on this
/// server before it restarted), when retries are not routed between replicas.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_OTHER_REPLICA: &str = "This call is waiting on another replica of the server, or on this one before it restarted: retries are not routed between replicas here, so this one must reach the replica that asked. Make the request again.";

/// The upstream adapter's error when a retry could not be routed to the replica holding its call.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_ROUTES_DOWN: &str =
    "This call waits on another replica, which cannot be reached now. Try again.";

/// The upstream adapter's error when the server process exited during the call.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_EXITED: &str =
    "The server exited while handling this request; it is being restarted. Make the request again.";

/// The upstream adapter's error when the HTTP server lost the session during the call.
#[cfg(feature = "upstream-http")]
pub(crate) const UPSTREAM_SESSION_LOST: &str = "The server lost the session while handling this request; a new one is being started. Make the request again.";

/// The upstream adapter's error when the server's answer to a request ended without its response.
#[cfg(feature = "upstream-http")]
pub(crate) const UPSTREAM_NO_RESPONSE: &str =
    "The server's answer ended without a response to this request. Make the request again.";

/// The upstream adapter's error when the server is not running (starting, or failing to start).
#[cfg(feature = "upstream")]
pub(crate) fn upstream_unavailable(why: &str) -> String {
    format!("The server is not available: {why}.")
}

/// The upstream adapter's error when the server did not answer in time.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_TIMEOUT: &str = "The server did not answer in time.";

/// The upstream adapter's error when too many calls wait for an answer already.
#[cfg(feature = "upstream")]
pub(crate) const UPSTREAM_TOO_MANY_PARKED: &str =
    "Too many calls are waiting for an answer; answer or abandon one, then try again.";

/// The upstream adapter's refusal of a caller that holds its fair share of a bound already:
/// `held` of `bound` `what` ("parked calls", "requests in flight"), `share` of the bound each.
#[cfg(feature = "upstream")]
pub(crate) fn upstream_fair_share(held: usize, bound: usize, what: &str, share: f64) -> String {
    let named = match share {
        s if (s - 1.0).abs() < 1e-9 => "all of it".to_owned(),
        s if (s - 0.5).abs() < 1e-9 => "a half".to_owned(),
        s if (s - 0.25).abs() < 1e-9 => "a quarter".to_owned(),
        s if (s - 1.0 / 3.0).abs() < 1e-6 => "a third".to_owned(),
        s => format!("{}%", (s * 100.0 * 10.0).round() / 10.0),
    };
    format!(
        "This caller holds {held} of {bound} {what} ({named} of them is one caller's fair share); let one finish, then try again."
    )
}

/// The upstream adapter's answer to the server's own request of a kind the client did not
/// declare it can answer (the server's other questions of the same round are asked).
#[cfg(feature = "upstream")]
pub(crate) fn upstream_undeclared(method: &str) -> String {
    format!("The client cannot answer {method}: it did not declare the capability.")
}

/// What was wrong with one answered field (or with a form answer as a whole), as the hint says it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Problem<'a> {
    /// A required field left empty.
    Missing,
    /// A value of another kind than the field takes.
    FieldKind(FieldKind),
    /// Text shorter than `min` characters (it had `got`).
    TooShort { min: u64, got: usize },
    /// Text longer than `max` characters (it had `got`).
    TooLong { max: u64, got: usize },
    /// A number below `limit`; `exclusive` when it must be greater than it.
    TooSmall { limit: &'a Value, exclusive: bool },
    /// A number above `limit`; `exclusive` when it must be less than it.
    TooLarge { limit: &'a Value, exclusive: bool },
    /// A number that is not a multiple of this.
    NotMultiple(f64),
    /// Fewer than `min` options chosen.
    TooFewChosen { min: u64 },
    /// More than `max` options chosen (it had `got`).
    TooManyChosen { max: u64, got: usize },
    /// An option chosen twice.
    ChosenTwice,
    /// Text not written in this `format` (`email`, `uri`, `date`, `date-time`, …).
    Format(&'a str),
    /// Text that does not match the field's `pattern`.
    Pattern,
    /// A value not among these choices (their titles where the form shows titles).
    NotAChoice(&'a str),
    /// Of a multi-select: an option not among these choices.
    NotAnOption(&'a str),
    /// The answer is not a filled-in form at all.
    NotAForm,
    /// The answer as a whole breaks a rule of the form (outside the MCP form subset).
    DoesNotFit,
    /// Anything else.
    Invalid,
}

/// The kinds of value a form field takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldKind {
    Text,
    Number,
    WholeNumber,
    YesNo,
    Choices,
    Other,
}

/// One sentence of a hint: `Note: use at most 200 characters (you entered 300).` `field` is the
/// field's title or key; `None` for a problem of the whole answer. (The layer keeps what to do
/// and says it when it is shown: [`sentence`]; this is the two in one, for the tests.)
#[cfg(test)]
pub(crate) fn problem(field: Option<&str>, problem: &Problem<'_>) -> String {
    sentence(field, &what_to_do(problem))
}

/// The sentence of a problem from what to do (`what_to_do`): after the field's name, or
/// capitalized alone.
pub(crate) fn sentence(field: Option<&str>, what: &str) -> String {
    match field {
        Some(field) => format!("{field}: {what}."),
        None => {
            let mut chars = what.chars();
            let first = chars.next().map(|c| c.to_uppercase().collect::<String>());
            format!("{}{}.", first.unwrap_or_default(), chars.as_str())
        }
    }
}

/// "enter a number …" for a bound the number may reach (`reaching`: "of at least") or not
/// (`passing`: "greater than"), as `exclusive` says.
fn bound(limit: &Value, exclusive: bool, reaching: &str, passing: &str) -> String {
    let words = if exclusive { passing } else { reaching };
    format!("enter a number {words} {}", number(limit))
}

/// What to do about `problem`, in lowercase words without a full stop: "enter a number".
pub(crate) fn what_to_do(problem: &Problem<'_>) -> String {
    use Problem as P;
    match problem {
        P::Missing => "this field is required".to_owned(),
        P::FieldKind(kind) => match kind {
            FieldKind::Text => "enter text".to_owned(),
            FieldKind::Number => "enter a number".to_owned(),
            FieldKind::WholeNumber => "enter a whole number".to_owned(),
            FieldKind::YesNo => "answer yes or no".to_owned(),
            FieldKind::Choices => "choose from the list".to_owned(),
            FieldKind::Other => "this kind of value is not accepted".to_owned(),
        },
        P::TooShort { min: 1, got: 0 } => "this field cannot be empty".to_owned(),
        P::TooShort { min, got } => format!(
            "use at least {} (you entered {got})",
            count(*min, "character", "characters")
        ),
        P::TooLong { max, got } => format!(
            "use at most {} (you entered {got})",
            count(*max, "character", "characters")
        ),
        P::TooSmall { limit, exclusive } => bound(limit, *exclusive, "of at least", "greater than"),
        P::TooLarge { limit, exclusive } => bound(limit, *exclusive, "of at most", "less than"),
        P::NotMultiple(of) => format!("enter a multiple of {}", number(&Value::from(*of))),
        P::TooFewChosen { min } => format!("choose at least {}", count(*min, "option", "options")),
        P::TooManyChosen { max, got } => format!(
            "choose at most {} (you chose {got})",
            count(*max, "option", "options")
        ),
        P::ChosenTwice => "choose each option only once".to_owned(),
        P::Format(format) => match *format {
            "email" => "enter an email address, such as name@example.com".to_owned(),
            "uri" => "enter a web address, such as https://example.com".to_owned(),
            "date" => "enter a date as year-month-day, such as 2026-07-28".to_owned(),
            "date-time" => "enter a date and time, such as 2026-07-28T14:30:00Z".to_owned(),
            other => format!("enter a valid {other}"),
        },
        P::Pattern => "this is not in the expected form".to_owned(),
        P::NotAChoice(choices) => format!("choose one of {choices}"),
        P::NotAnOption(choices) => format!("choose only from {choices}"),
        P::NotAForm => "the answer was not a filled-in form; please answer again".to_owned(),
        P::DoesNotFit => {
            "the answer does not fit the form; please check it and answer again".to_owned()
        }
        P::Invalid => "this value is not accepted".to_owned(),
    }
}

/// Choices as a hint lists them: `Staging, Production`, cut short with `…` after `max`.
pub(crate) fn choices<'a>(names: impl IntoIterator<Item = &'a str>, max: usize) -> String {
    let mut out = String::new();
    for (i, name) in names.into_iter().enumerate() {
        if i == max {
            out.push_str(", …");
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
    }
    out
}

fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// A schema limit as a person writes it: `18`, `0.5`, `200` (not `200.0`).
fn number(limit: &Value) -> String {
    match limit.as_f64() {
        Some(float) if limit.is_f64() && float.fract() == 0.0 && float.abs() < 1e15 => {
            format!("{}", float as i64)
        }
        _ => limit.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_hint_sentence_names_the_field_and_says_what_to_do() {
        let note = problem(Some("Note"), &Problem::TooLong { max: 200, got: 300 });
        assert_eq!(note, "Note: use at most 200 characters (you entered 300).");
        assert_eq!(
            problem(Some("Approve"), &Problem::Missing),
            "Approve: this field is required."
        );
        assert_eq!(
            problem(Some("Approve"), &Problem::FieldKind(FieldKind::YesNo)),
            "Approve: answer yes or no."
        );
        assert_eq!(
            problem(None, &Problem::NotAForm),
            "The answer was not a filled-in form; please answer again."
        );
    }

    #[test]
    fn hint_sentences_are_plain_text() {
        let limit = json!(18);
        let choices = "Staging, Production";
        for sentence in [
            problem(
                Some("Age"),
                &Problem::TooSmall {
                    limit: &limit,
                    exclusive: false,
                },
            ),
            problem(Some("Env"), &Problem::NotAChoice(choices)),
            problem(Some("Email"), &Problem::Format("email")),
            problem(Some("When"), &Problem::Format("date-time")),
            problem(Some("Code"), &Problem::Pattern),
            problem(Some("Tags"), &Problem::TooManyChosen { max: 2, got: 3 }),
        ] {
            assert!(!sentence.contains('`'), "{sentence}");
            assert!(!sentence.contains('*'), "{sentence}");
            assert!(sentence.ends_with('.'), "{sentence}");
            assert_eq!(sentence.lines().count(), 1, "{sentence}");
        }
    }

    #[test]
    fn numbers_are_written_as_a_person_writes_them() {
        let whole = json!(200.0);
        let half = json!(0.5);
        assert_eq!(
            problem(
                Some("N"),
                &Problem::TooLarge {
                    limit: &whole,
                    exclusive: false
                }
            ),
            "N: enter a number of at most 200."
        );
        assert_eq!(
            problem(
                Some("N"),
                &Problem::TooSmall {
                    limit: &half,
                    exclusive: true
                }
            ),
            "N: enter a number greater than 0.5."
        );
        assert_eq!(
            problem(Some("N"), &Problem::TooShort { min: 1, got: 0 }),
            "N: this field cannot be empty."
        );
        assert_eq!(
            problem(Some("N"), &Problem::TooFewChosen { min: 1 }),
            "N: choose at least 1 option."
        );
    }

    #[test]
    fn the_hint_follows_the_message_after_a_blank_line() {
        let lines = ["A: x.".to_owned(), "B: y.".to_owned()];
        assert_eq!(after_message("Deploy?", &lines), "Deploy?\n\nA: x.\nB: y.");
        assert_eq!(after_message("", &lines[..1]), "A: x.");
    }

    #[test]
    fn a_problem_on_a_field_comes_before_its_description() {
        let problem = "Use at most 200 characters (you entered 300).";
        assert_eq!(
            on_field(Some("Why, for the log."), problem),
            format!("{problem} Why, for the log.")
        );
        assert_eq!(on_field(None, problem), problem);
        assert_eq!(on_field(Some("  "), problem), problem);
        assert_eq!(correct_fields(&["Note"]), "Please correct: Note.");
        assert_eq!(
            correct_fields(&["Approve", "Note"]),
            "Please correct: Approve, Note."
        );
    }

    #[test]
    fn the_bridges_endings_say_what_happened_in_plain_words() {
        use std::time::Duration;
        assert_eq!(
            bridge_too_many_rounds(8),
            "This request asked for more input 8 times and still did not finish, so it was stopped. Try it again."
        );
        assert!(bridge_url_not_finished(Duration::from_secs(600)).contains("within 10 minutes"));
        assert!(bridge_no_answer(Duration::from_secs(90)).contains("within 90 seconds"));
        assert!(bridge_no_answer(Duration::from_secs(1)).contains("within 1 second,"));
        assert!(bridge_no_answer(Duration::from_millis(200)).contains("within 200 milliseconds,"));
        for text in [
            bridge_too_many_rounds(1),
            bridge_url_not_finished(Duration::from_secs(5)),
            bridge_no_answer(Duration::from_secs(5)),
        ] {
            assert!(
                !text.contains('`') && !text.contains("input_required"),
                "{text}"
            );
            assert!(text.ends_with('.'), "{text}");
        }
    }

    #[test]
    fn long_choice_lists_are_cut_short() {
        assert_eq!(choices(["a", "b", "c"], 2), "a, b, …");
        assert_eq!(choices(["a", "b"], 2), "a, b");
    }
}
