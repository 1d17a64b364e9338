//! The terminal client's elicitation rendering (`examples/client/form.rs`),
//! driven by scripted answers.

use crate::support::form;

use std::collections::VecDeque;

use form::{Prompter, elicit};
use serde_json::{Value, json};

/// A user typing `lines`; everything shown (prompts, their answers, text) is
/// recorded in `transcript`, one line each.
struct Script {
    lines: VecDeque<String>,
    transcript: String,
    prompts: Vec<String>,
}

impl Prompter for Script {
    fn ask(&mut self, prompt: &str) -> Option<String> {
        self.prompts.push(prompt.to_owned());
        let line = self.lines.pop_front();
        self.transcript.push_str(prompt);
        self.transcript.push_str(line.as_deref().unwrap_or("<EOF>"));
        self.transcript.push('\n');
        line
    }

    fn say(&mut self, text: &str) {
        self.transcript.push_str(text);
        self.transcript.push('\n');
    }
}

struct Run {
    result: Value,
    transcript: String,
    prompts: Vec<String>,
}

/// Answers `params` with `lines`, all of which must be read.
fn script(params: Value, lines: &[&str]) -> Run {
    let mut script = Script {
        lines: lines.iter().map(|line| (*line).to_owned()).collect(),
        transcript: String::new(),
        prompts: Vec::new(),
    };
    let result = elicit(&params, &mut script);
    assert!(
        script.lines.is_empty(),
        "unread answers {:?}; transcript:\n{}",
        script.lines,
        script.transcript
    );
    Run {
        result,
        transcript: script.transcript,
        prompts: script.prompts,
    }
}

fn form(properties: Value, required: &[&str]) -> Value {
    json!({
        "mode": "form",
        "message": "Please fill in",
        "requestedSchema": { "type": "object", "properties": properties, "required": required },
    })
}

/// The `deploy` example's approval form.
fn approval() -> Value {
    json!({
        "mode": "form",
        "message": "Deploy to staging?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "note": { "type": "string", "title": "Note", "maxLength": 200 },
                "approve": { "type": "boolean", "title": "Approve" },
            },
            "required": ["approve"],
        },
    })
}

fn accepted(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

const ANSWER: &str = "Answer? [a]ccept / [d]ecline / [c]ancel [a]: ";

#[test]
fn approval_form_accepted() {
    let run = script(approval(), &["", "yes", "ship it"]);
    assert_eq!(
        run.result,
        accepted(json!({ "approve": true, "note": "ship it" }))
    );
    // The message first, then the accept question, then required before
    // optional (`approve` before `note`, although `note` sorts first).
    assert!(
        run.transcript.starts_with("Deploy to staging?\n"),
        "{}",
        run.transcript
    );
    assert_eq!(
        run.prompts,
        [
            ANSWER,
            "  yes/no: ",
            "  text, at most 200 chars, Enter to skip: "
        ]
    );
    assert!(run.transcript.contains("Approve (approve), required\n"));
    assert!(run.transcript.contains("Note (note), optional\n"));
    assert!(
        run.transcript
            .ends_with("→ accept, content: {\"approve\":true,\"note\":\"ship it\"}\n")
    );
}

#[test]
fn optional_field_is_skipped_on_empty_input() {
    let run = script(approval(), &["a", "n", ""]);
    assert_eq!(run.result, accepted(json!({ "approve": false })));
}

#[test]
fn required_field_is_asked_again_on_empty_input() {
    let run = script(approval(), &["", "", "y", ""]);
    assert_eq!(run.result, accepted(json!({ "approve": true })));
    assert!(run.transcript.contains("! required"), "{}", run.transcript);
}

#[test]
fn booleans_accept_yes_no_words_and_reask_otherwise() {
    let schema = form(json!({ "ok": { "type": "boolean" } }), &["ok"]);
    for (answer, expected) in [
        ("y", true),
        ("YES", true),
        ("true", true),
        ("n", false),
        ("No", false),
        ("false", false),
    ] {
        let run = script(schema.clone(), &["", answer]);
        assert_eq!(run.result, accepted(json!({ "ok": expected })), "{answer}");
    }
    let run = script(schema, &["", "maybe", "y"]);
    assert_eq!(run.result, accepted(json!({ "ok": true })));
    assert!(
        run.transcript.contains("! answer yes or no"),
        "{}",
        run.transcript
    );
}

#[test]
fn string_lengths_are_checked_and_format_is_a_hint() {
    let schema = form(
        json!({
            "email": { "type": "string", "format": "email", "minLength": 3, "maxLength": 10,
                       "description": "Where to write" },
        }),
        &["email"],
    );
    let run = script(schema, &["", "ab", "abcdefghijklmnop", "a@b.io"]);
    assert_eq!(run.result, accepted(json!({ "email": "a@b.io" })));
    assert_eq!(
        run.prompts[1],
        "  text, email, e.g. name@example.com, 3-10 chars: "
    );
    assert_eq!(run.prompts.len(), 4);
    assert!(run.transcript.contains("  Where to write\n"));
    assert!(run.transcript.contains("! at least 3 characters, got 2"));
    assert!(run.transcript.contains("! at most 10 characters, got 16"));
}

#[test]
fn formats_are_shown() {
    let schema = form(
        json!({
            "a": { "type": "string", "format": "uri" },
            "b": { "type": "string", "format": "date" },
            "c": { "type": "string", "format": "date-time" },
        }),
        &[],
    );
    let run = script(schema, &["", "", "", ""]);
    assert_eq!(run.result, accepted(json!({})));
    assert!(
        run.prompts[1].contains("URI, e.g. https://"),
        "{:?}",
        run.prompts
    );
    assert!(
        run.prompts[2].contains("date, YYYY-MM-DD"),
        "{:?}",
        run.prompts
    );
    assert!(
        run.prompts[3].contains("date-time, e.g. 2026-"),
        "{:?}",
        run.prompts
    );
}

#[test]
fn lengths_count_characters_not_bytes() {
    let schema = form(json!({ "s": { "type": "string", "maxLength": 3 } }), &["s"]);
    let run = script(schema, &["", "äöü"]);
    assert_eq!(run.result, accepted(json!({ "s": "äöü" })));
}

#[test]
fn integers_with_bounds_reask_on_parse_errors_and_out_of_range() {
    let schema = form(
        json!({ "n": { "type": "integer", "title": "Replicas", "minimum": 1, "maximum": 5 } }),
        &["n"],
    );
    let run = script(schema, &["", "two", "2.5", "0", "9", "3"]);
    assert_eq!(run.result, accepted(json!({ "n": 3 })));
    assert_eq!(run.prompts[1], "  integer 1..5: ");
    assert!(run.transcript.contains("Replicas (n), required\n"));
    assert!(run.transcript.contains("! \"two\" is not an integer"));
    assert!(run.transcript.contains("! \"2.5\" is not an integer"));
    assert!(run.transcript.contains("! at least 1\n"));
    assert!(run.transcript.contains("! at most 5\n"));
}

#[test]
fn numbers_accept_fractions_and_keep_whole_numbers_whole() {
    let schema = form(
        json!({
            "ratio": { "type": "number", "minimum": 0.5 },
            "size": { "type": "number", "maximum": 10 },
        }),
        &["ratio", "size"],
    );
    let run = script(schema, &["", "abc", "0.25", "0.75", "7"]);
    assert_eq!(run.result, accepted(json!({ "ratio": 0.75, "size": 7 })));
    assert_eq!(run.prompts[1], "  number >= 0.5: ");
    assert_eq!(run.prompts[4], "  number <= 10: ");
    assert_eq!(run.result["content"]["size"].to_string(), "7");
}

#[test]
fn defaults_are_shown_and_used_on_empty_input() {
    let schema = form(
        json!({
            "name": { "type": "string", "default": "web" },
            "count": { "type": "integer", "default": 2 },
            "dry": { "type": "boolean", "default": true },
            "env": { "type": "string", "enum": ["dev", "prod"], "default": "prod" },
            "tags": { "type": "array", "items": { "type": "string", "enum": ["a", "b", "c"] },
                      "default": ["a", "c"] },
        }),
        &["name", "count"],
    );
    let run = script(schema, &["", "", "", "", "", ""]);
    assert_eq!(
        run.result,
        accepted(json!({
            "name": "web", "count": 2, "dry": true, "env": "prod", "tags": ["a", "c"],
        }))
    );
    // Required (count, name), then optional (dry, env, tags), each by name.
    assert_eq!(
        &run.prompts[1..],
        [
            "  integer [2]: ",
            "  text [web]: ",
            "  yes/no [yes]: ",
            "  choose 1-2 [2]: ",
            "  numbers, comma-separated [1,3]: ",
        ]
    );
    assert!(run.transcript.contains("  2) prod (default)\n"));
    assert!(
        run.transcript
            .contains("  1) a (default)\n  2) b\n  3) c (default)\n")
    );
}

#[test]
fn a_typed_answer_overrides_the_default() {
    let schema = form(
        json!({ "name": { "type": "string", "default": "web" } }),
        &[],
    );
    let run = script(schema, &["", "api"]);
    assert_eq!(run.result, accepted(json!({ "name": "api" })));
}

#[test]
fn single_select_by_number_or_value() {
    let schema = form(
        json!({ "env": { "type": "string", "enum": ["staging", "production"] } }),
        &["env"],
    );
    let run = script(schema.clone(), &["", "3", "x", "2"]);
    assert_eq!(run.result, accepted(json!({ "env": "production" })));
    assert!(run.transcript.contains("  1) staging\n  2) production\n"));
    assert_eq!(run.prompts[1], "  choose 1-2: ");
    assert!(
        run.transcript
            .contains("! \"3\": choose a number from 1 to 2")
    );

    let run = script(schema, &["", "staging"]);
    assert_eq!(run.result, accepted(json!({ "env": "staging" })));
}

#[test]
fn legacy_enum_names_label_the_options() {
    let schema = form(
        json!({ "env": { "type": "string", "enum": ["stg", "prd"],
                         "enumNames": ["Staging", "Production"] } }),
        &["env"],
    );
    let run = script(schema, &["", "1"]);
    assert_eq!(run.result, accepted(json!({ "env": "stg" })));
    assert!(
        run.transcript
            .contains("  1) Staging (stg)\n  2) Production (prd)\n")
    );
}

#[test]
fn titled_one_of_single_select() {
    let schema = form(
        json!({ "size": { "type": "string", "title": "Size", "oneOf": [
            { "const": "s", "title": "Small" },
            { "const": "m", "title": "Medium" },
            { "const": "l", "title": "Large" },
        ] } }),
        &["size"],
    );
    let run = script(schema, &["", "3"]);
    assert_eq!(run.result, accepted(json!({ "size": "l" })));
    assert!(
        run.transcript
            .contains("  1) Small (s)\n  2) Medium (m)\n  3) Large (l)\n")
    );
}

#[test]
fn multi_select_with_item_bounds() {
    let schema = form(
        json!({ "regions": { "type": "array", "minItems": 1, "maxItems": 2,
            "items": { "anyOf": [
                { "const": "eu", "title": "Europe" },
                { "const": "us", "title": "Americas" },
                { "const": "ap", "title": "Asia-Pacific" },
            ] } } }),
        &["regions"],
    );
    let run = script(schema, &["", "1,2,3", "4", ",", "3, 1, 3"]);
    assert_eq!(run.result, accepted(json!({ "regions": ["ap", "eu"] })));
    assert_eq!(run.prompts[1], "  numbers, comma-separated, 1-2 items: ");
    assert!(
        run.transcript
            .contains("  1) Europe (eu)\n  2) Americas (us)\n  3) Asia-Pacific (ap)\n")
    );
    assert!(run.transcript.contains("! choose at most 2, got 3"));
    assert!(
        run.transcript
            .contains("! \"4\": choose a number from 1 to 3")
    );
    assert!(run.transcript.contains("! choose at least 1, got 0"));
}

#[test]
fn untitled_multi_select() {
    let schema = form(
        json!({ "tags": { "type": "array", "items": { "type": "string", "enum": ["x", "y"] } } }),
        &[],
    );
    let run = script(schema.clone(), &["", "2"]);
    assert_eq!(run.result, accepted(json!({ "tags": ["y"] })));
    assert_eq!(
        run.prompts[1],
        "  numbers, comma-separated, Enter to skip: "
    );

    let run = script(schema, &["", ""]);
    assert_eq!(run.result, accepted(json!({})));
}

#[test]
fn decline_and_cancel_at_the_first_question() {
    for (answer, action) in [
        ("d", "decline"),
        ("decline", "decline"),
        (":decline", "decline"),
        ("c", "cancel"),
        ("Cancel", "cancel"),
        (":cancel", "cancel"),
    ] {
        let run = script(approval(), &[answer]);
        assert_eq!(run.result, json!({ "action": action }), "{answer}");
        assert!(
            run.transcript.ends_with(&format!("→ {action}\n")),
            "{}",
            run.transcript
        );
    }
}

#[test]
fn unknown_first_answer_is_asked_again() {
    let run = script(approval(), &["x", "a", "y", ""]);
    assert_eq!(run.result, accepted(json!({ "approve": true })));
    assert!(run.transcript.contains("! type a, d or c"));
}

#[test]
fn decline_and_cancel_in_the_middle_of_the_form() {
    let run = script(approval(), &["", ":decline"]);
    assert_eq!(run.result, json!({ "action": "decline" }));
    let run = script(approval(), &["", "y", ":cancel"]);
    assert_eq!(run.result, json!({ "action": "cancel" }));
}

#[test]
fn end_of_input_cancels() {
    let run = script(approval(), &[]);
    assert_eq!(run.result, json!({ "action": "cancel" }));
    assert_eq!(run.prompts, [ANSWER]);

    let run = script(approval(), &["", "y"]);
    assert_eq!(run.result, json!({ "action": "cancel" }));
    assert_eq!(run.prompts.len(), 3);
}

#[test]
fn raw_sends_the_json_verbatim() {
    let run = script(approval(), &[r#":raw {"approve": "yes", "extra": [1]}"#]);
    assert_eq!(
        run.result,
        accepted(json!({ "approve": "yes", "extra": [1] }))
    );

    // Also in the middle of the form, after a malformed attempt; what was
    // already answered is not merged in.
    let run = script(
        approval(),
        &["", "y", ":raw {oops", ":raw", r#":raw {"note": 5}"#],
    );
    assert_eq!(run.result, accepted(json!({ "note": 5 })));
    assert!(
        run.transcript
            .contains("! :raw needs a JSON value after it")
    );
}

#[test]
fn the_commands_are_announced_and_help_repeats_them() {
    let run = script(approval(), &[":help", "d"]);
    assert_eq!(run.result, json!({ "action": "decline" }));
    assert_eq!(
        run.transcript.matches(form::HELP).count(),
        2,
        "{}",
        run.transcript
    );
    assert!(form::HELP.contains(":raw {json}"));
}

#[test]
fn answers_are_trimmed_and_colon_text_is_just_text() {
    let run = script(approval(), &["  a ", " yes ", ":-) ok"]);
    assert_eq!(
        run.result,
        accepted(json!({ "approve": true, "note": ":-) ok" }))
    );
}

#[test]
fn url_mode_accept_decline_cancel() {
    let params = json!({
        "mode": "url",
        "message": "Sign in to the registry",
        "url": "https://example.com/login?session=abc",
    });
    let run = script(params.clone(), &[""]);
    assert_eq!(run.result, json!({ "action": "accept" }));
    assert!(run.transcript.starts_with(
        "Sign in to the registry\nOpen this URL to continue:\n  https://example.com/login?session=abc\n"
    ));
    assert_eq!(
        run.prompts,
        ["Press Enter when you are done (accept), or [d]ecline / [c]ancel: "]
    );

    for (answer, action) in [("d", "decline"), (":decline", "decline"), ("c", "cancel")] {
        let run = script(params.clone(), &[answer]);
        assert_eq!(run.result, json!({ "action": action }), "{answer}");
    }
    let run = script(params.clone(), &["what", ""]);
    assert_eq!(run.result, json!({ "action": "accept" }));
    let run = script(params, &[]);
    assert_eq!(run.result, json!({ "action": "cancel" }));
}

#[test]
fn form_mode_is_the_default_and_unknown_modes_are_declined() {
    let mut legacy = approval();
    legacy.as_object_mut().expect("object").remove("mode");
    let run = script(legacy, &["", "y", ""]);
    assert_eq!(run.result, accepted(json!({ "approve": true })));

    let run = script(json!({ "mode": "telepathy", "message": "?" }), &[]);
    assert_eq!(run.result, json!({ "action": "decline" }));
}

#[test]
fn unknown_property_types_take_json() {
    let schema = form(json!({ "x": { "type": "object" }, "y": {} }), &["x", "y"]);
    let run = script(schema, &["", r#"{"a": 1}"#, "plain"]);
    assert_eq!(
        run.result,
        accepted(json!({ "x": { "a": 1 }, "y": "plain" }))
    );
}

/// What `main.rs` does: the request as rmcp decoded it, re-encoded as JSON,
/// answered, and the answer decoded as rmcp's `ElicitResult`.
fn through_rmcp(wire: Value, lines: &[&str]) -> (rmcp::model::ElicitResult, Run) {
    let decoded: rmcp::model::ElicitRequestParams =
        serde_json::from_value(wire).expect("rmcp decodes the request");
    let params = serde_json::to_value(&decoded).expect("rmcp encodes the request");
    let run = script(params, lines);
    let result = serde_json::from_value(run.result.clone()).expect("an rmcp ElicitResult");
    (result, run)
}

#[test]
fn every_field_kind_through_rmcp_types() {
    let wire = json!({
        "mode": "form",
        "message": "Release settings",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "contact": { "type": "string", "format": "email", "title": "Contact" },
                "replicas": { "type": "integer", "minimum": 1, "maximum": 9, "default": 3 },
                "ratio": { "type": "number", "minimum": 0, "maximum": 1 },
                "canary": { "type": "boolean", "default": false },
                "env": { "type": "string", "oneOf": [
                    { "const": "stg", "title": "Staging" },
                    { "const": "prd", "title": "Production" },
                ] },
                "legacy": { "type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"] },
                "regions": { "type": "array", "minItems": 1,
                             "items": { "type": "string", "enum": ["eu", "us"] } },
            },
            "required": ["contact", "env", "regions"],
        },
    });
    let (result, run) = through_rmcp(
        wire,
        &["", "me@example.com", "2", "2,1", "yes", "2", "0.5", ""],
    );
    assert_eq!(result.action, rmcp::model::ElicitationAction::Accept);
    assert_eq!(
        result.content,
        Some(json!({
            "contact": "me@example.com", "env": "prd", "regions": ["us", "eu"],
            "canary": true, "legacy": "b", "ratio": 0.5, "replicas": 3,
        }))
    );
    assert_eq!(
        &run.prompts[1..],
        [
            "  text, email, e.g. name@example.com: ",
            "  choose 1-2: ",
            "  numbers, comma-separated, at least 1 item: ",
            "  yes/no [no]: ",
            "  choose 1-2, Enter to skip: ",
            "  number 0..1, Enter to skip: ",
            "  integer 1..9 [3]: ",
        ]
    );
    assert!(
        run.transcript.contains("  1) A (a)\n  2) B (b)\n"),
        "{}",
        run.transcript
    );
}

#[test]
fn url_mode_through_rmcp_types() {
    let wire = json!({
        "mode": "url",
        "message": "Authorize the deployment",
        "url": "https://example.com/authorize",
    });
    let (result, run) = through_rmcp(wire.clone(), &[""]);
    assert_eq!(result.action, rmcp::model::ElicitationAction::Accept);
    assert_eq!(result.content, None);
    assert!(run.transcript.contains("  https://example.com/authorize\n"));

    let (result, _) = through_rmcp(wire, &["d"]);
    assert_eq!(result.action, rmcp::model::ElicitationAction::Decline);
}
