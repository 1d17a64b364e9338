//! Compiled form validators, cached per distinct `requestedSchema`, and answer checking.
//!
//! [`ValidatorCache::get_canonical_text`] compiles a `requestedSchema` once (keyed by its
//! canonical JSON text) into a [`FormValidator`], whose
//! [`check`](FormValidator::check) validates accepted form content and, on failure, builds a short
//! hint for the user that names the field but never repeats the submitted value.
//!
//! The rooms: [`cache`] (the three bounded caches and a response's reading), [`validator`] (the
//! compiled schema and its check) and [`problems`] (what was wrong, in the person's words).

mod cache;
mod problems;
mod validator;

pub(crate) use cache::{NewEntries, QuestionError, ReadQuestion, ValidatorCache};
pub(crate) use problems::{FieldProblem, Rejection};
pub(crate) use validator::FormValidator;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::cache::*;
    use super::validator::*;
    use crate::wire::mcp::InputKind;

    fn deploy() -> Value {
        json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 200}
            },
            "required": ["approve"]
        })
    }

    fn validator(schema: Value) -> Arc<FormValidator> {
        ValidatorCache::default().get(&schema).expect("compiles")
    }

    #[track_caller]
    fn hint(schema: Value, content: Value) -> String {
        validator(schema)
            .check(content.clone())
            .expect_err("expected invalid content")
            .hint()
    }

    fn one(property: Value) -> Value {
        json!({"type": "object", "properties": {"x": property}})
    }

    #[test]
    fn validator_and_cache_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<FormValidator>();
        assert_send_sync::<ValidatorCache>();
    }

    #[test]
    fn every_spelling_of_a_question_is_read_as_its_canonical_form() {
        let cache = ValidatorCache::default();
        let spellings = [
            r#"{"method":"elicitation/create","params":{"message":"Deploy?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}"#,
            r#"{ "params" : {"requestedSchema":{"properties":{"ok":{"type":"boolean"}},"type":"object"},"message":"Deplo\u0079?"}, "method":"elicitation/create"}"#,
        ];
        let mut made = NewEntries::default();
        let [first, second] = spellings.map(|text| cache.spelled(text, &mut made).expect("a form"));
        assert_eq!(
            cache.weight(),
            0,
            "nothing is kept before the response is sent"
        );
        cache.keep(made);
        // One question, kept by the canonical text of both.
        let canonical =
            crate::wire::canonical::canonical_value(&serde_json::from_str(spellings[0]).unwrap())
                .unwrap();
        assert!(Arc::ptr_eq(
            &first.question,
            &cache.question(&canonical).unwrap()
        ));
        assert!(Arc::ptr_eq(&first.question, &second.question));
        assert_eq!(first.question.kind, InputKind::Form);
        // What the client is shown keeps each spelling's order, minified.
        assert_eq!(first.shown.get(), spellings[0]);
        assert_eq!(
            second.shown.get(),
            r#"{"params":{"requestedSchema":{"properties":{"ok":{"type":"boolean"}},"type":"object"},"message":"Deploy?"},"method":"elicitation/create"}"#
        );
        // A repeated key has no canonical form; the failure is not kept.
        let twice = r#"{"method":"elicitation/create","method":"roots/list"}"#;
        for _ in 0..2 {
            let mut made = NewEntries::default();
            assert_eq!(
                cache.spelled(twice, &mut made).unwrap_err(),
                QuestionError::Unreadable
            );
            cache.keep(made);
        }
        assert_eq!(cache.spellings.len(), 2);
        assert_eq!(cache.questions.len(), 1);
        assert_eq!(cache.entries.len(), 1);
    }

    #[test]
    fn valid_deploy_content_passes_unchanged() {
        let content = json!({"approve": true, "note": "ship it"});
        let kept = validator(deploy()).check(content.clone()).unwrap();
        assert_eq!(Value::Object(kept), content);
        let kept = validator(deploy())
            .check(json!({"approve": false}))
            .unwrap();
        assert_eq!(Value::Object(kept), json!({"approve": false}));
    }

    #[test]
    fn unknown_fields_are_dropped() {
        let kept = validator(deploy())
            .check(json!({"approve": true, "extra": {"deep": [1, 2]}, "other": "x"}))
            .unwrap();
        assert_eq!(Value::Object(kept), json!({"approve": true}));
    }

    #[test]
    fn whole_numbers_for_integers_are_forwarded_as_integers() {
        let cache = ValidatorCache::default();
        let v = cache
            .get(&json!({"type": "object", "properties": {
                "age": {"type": "integer"}, "score": {"type": "number"}}}))
            .unwrap();
        let out = v.check(json!({"age": 2.0, "score": 2.0})).unwrap();
        assert!(out["age"].is_i64(), "{out:?}");
        assert!(out["score"].is_f64(), "{out:?}");
        assert!(v.check(json!({"age": 2.5})).is_err());
    }

    #[test]
    fn unknown_fields_are_dropped_before_additional_properties_applies() {
        let mut schema = deploy();
        schema["additionalProperties"] = json!(false);
        let kept = validator(schema)
            .check(json!({"approve": true, "extra": 1}))
            .unwrap();
        assert_eq!(Value::Object(kept), json!({"approve": true}));
    }

    #[test]
    fn wrong_type_names_the_field_and_type() {
        let hint = hint(deploy(), json!({"approve": "yes"}));
        assert_eq!(hint, "approve: answer yes or no.");
    }

    #[test]
    fn too_long_note_does_not_echo_it() {
        let note = "secret-".repeat(43); // 301 characters
        let hint = hint(deploy(), json!({"approve": true, "note": note}));
        assert_eq!(hint, "note: use at most 200 characters (you entered 301).");
        assert!(!hint.contains("secret"));
    }

    #[test]
    fn a_hint_names_each_field_by_its_title() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve"},
                "note": {"type": "string", "title": "Note", "maxLength": 200},
                "count": {"type": "integer", "title": "  "}
            },
            "required": ["approve"]
        });
        let note = "é".repeat(300);
        assert_eq!(
            hint(schema.clone(), json!({"approve": true, "note": note})),
            "Note: use at most 200 characters (you entered 300)."
        );
        // A blank title does not name a field: its key does.
        assert_eq!(
            hint(schema, json!({"count": 1.5})),
            "Approve: this field is required.\ncount: enter a whole number."
        );
    }

    #[test]
    fn a_rejection_keeps_the_valid_fields_and_not_the_invalid_ones() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 3},
                "count": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}
            },
            "required": ["approve"]
        });
        let rejection = validator(schema)
            .check(json!({"note": "long", "count": 2.0, "tags": ["a", "x"], "extra": 1}))
            .unwrap_err();
        // What was right, as it would be forwarded (`2.0` as `2`); what was wrong, and what was
        // never declared, left out.
        assert_eq!(Value::Object(rejection.valid.clone()), json!({"count": 2}));
        assert!(rejection.valid["count"].is_i64());
        let fields: Vec<_> = rejection
            .problems
            .iter()
            .map(|problem| problem.field.as_deref())
            .collect();
        assert_eq!(fields, [Some("approve"), Some("note"), Some("tags")]);
        assert_eq!(
            rejection.lines(&["tags".into(), "note".into(), "approve".into()]),
            [
                "tags: choose only from a, b.",
                "note: use at most 3 characters (you entered 4).",
                "approve: this field is required.",
            ]
        );
    }

    #[test]
    fn defaults_do_not_make_another_validator() {
        let cache = ValidatorCache::default();
        let question = |schema: Value| {
            let text = crate::wire::canonical::canonical_value(&json!({
                "method": "elicitation/create",
                "params": {"message": "m", "requestedSchema": schema}
            }))
            .unwrap();
            cache.question(&text).unwrap().form.clone().unwrap()
        };
        let plain = question(deploy());
        let mut prefilled = deploy();
        prefilled["properties"]["approve"]["default"] = json!(true);
        prefilled["properties"]["note"]["default"] = json!("ok");
        assert!(Arc::ptr_eq(&plain, &question(prefilled)));
        assert_eq!(cache.len(), 1);
        let mut other = deploy();
        other["properties"]["note"]["maxLength"] = json!(5);
        assert!(!Arc::ptr_eq(&plain, &question(other)));
    }

    #[test]
    fn missing_required_field() {
        assert_eq!(
            hint(deploy(), json!({"note": "hi"})),
            "approve: this field is required."
        );
        // Every field that is wrong has its sentence.
        assert_eq!(
            hint(deploy(), json!({"note": 5})),
            "approve: this field is required.\nnote: enter text."
        );
    }

    #[test]
    fn each_wrong_field_has_one_sentence() {
        let schema = json!({
            "type": "object",
            "properties": {
                "b": {"type": "boolean"},
                "a": {"type": "string"}
            }
        });
        assert_eq!(
            hint(schema, json!({"a": 1, "b": 2})),
            "a: enter text.\nb: answer yes or no."
        );
    }

    #[test]
    fn email_format_is_asserted() {
        let schema = one(json!({"type": "string", "format": "email"}));
        assert!(
            validator(schema.clone())
                .check(json!({"x": "a@example.com"}))
                .is_ok()
        );
        let hint = hint(schema, json!({"x": "not-an-email"}));
        assert_eq!(hint, "x: enter an email address, such as name@example.com.");
        assert!(!hint.contains("not-an-email"));
    }

    #[test]
    fn other_formats_are_asserted() {
        for (format, good, bad) in [
            ("uri", "https://example.com/a", "not a uri"),
            ("date", "2026-07-28", "2026-13-01"),
            ("date-time", "2026-07-28T10:00:00Z", "yesterday"),
        ] {
            let schema = one(json!({"type": "string", "format": format}));
            assert!(validator(schema.clone()).check(json!({"x": good})).is_ok());
            let hint = hint(schema, json!({"x": bad}));
            assert!(hint.starts_with("x: enter a"), "{hint}");
            assert!(!hint.contains(bad), "{hint}");
        }
    }

    #[test]
    fn integer_bounds_and_wholeness() {
        let schema = json!({
            "type": "object",
            "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 130}}
        });
        let v = validator(schema.clone());
        assert!(v.check(json!({"age": 18})).is_ok());
        assert!(v.check(json!({"age": 30.0})).is_ok());
        assert_eq!(
            hint(schema.clone(), json!({"age": 17})),
            "age: enter a number of at least 18."
        );
        assert_eq!(
            hint(schema.clone(), json!({"age": 131})),
            "age: enter a number of at most 130."
        );
        assert_eq!(
            hint(schema, json!({"age": 20.5})),
            "age: enter a whole number."
        );
    }

    #[test]
    fn number_accepts_any_number() {
        let v = validator(one(json!({"type": "number", "minimum": 0.5})));
        assert!(v.check(json!({"x": 0.75})).is_ok());
        assert!(v.check(json!({"x": 3})).is_ok());
        assert_eq!(
            v.check(json!({"x": 0.25})).unwrap_err().hint(),
            "x: enter a number of at least 0.5."
        );
        assert_eq!(
            v.check(json!({"x": "3"})).unwrap_err().hint(),
            "x: enter a number."
        );
    }

    #[test]
    fn string_min_length() {
        let schema = one(json!({"type": "string", "minLength": 3}));
        assert_eq!(
            hint(schema.clone(), json!({"x": "ab"})),
            "x: use at least 3 characters (you entered 2)."
        );
        let schema = one(json!({"type": "string", "minLength": 1}));
        assert_eq!(
            hint(schema, json!({"x": ""})),
            "x: this field cannot be empty."
        );
    }

    #[test]
    fn enum_lists_the_choices() {
        let schema = json!({
            "type": "object",
            "properties": {"env": {"type": "string", "enum": ["staging", "production"]}}
        });
        assert!(
            validator(schema.clone())
                .check(json!({"env": "staging"}))
                .is_ok()
        );
        let hint = hint(schema, json!({"env": "dev-secret"}));
        assert_eq!(hint, "env: choose one of staging, production.");
    }

    #[test]
    fn titled_enum_lists_the_consts() {
        let schema = json!({
            "type": "object",
            "properties": {"env": {"type": "string", "oneOf": [
                {"const": "stg", "title": "Staging"},
                {"const": "prd", "title": "Production"}
            ]}}
        });
        assert!(
            validator(schema.clone())
                .check(json!({"env": "prd"}))
                .is_ok()
        );
        assert_eq!(
            hint(schema.clone(), json!({"env": "dev"})),
            "env: choose one of Staging, Production."
        );
        assert_eq!(
            hint(schema, json!({"env": 1})),
            "env: choose one of Staging, Production."
        );
    }

    #[test]
    fn untitled_multi_select() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {
                "type": "array", "minItems": 1, "maxItems": 3,
                "items": {"type": "string", "enum": ["a", "b", "c", "d"]}
            }}
        });
        let v = validator(schema);
        assert!(v.check(json!({"tags": ["a", "c"]})).is_ok());
        assert_eq!(
            v.check(json!({"tags": []})).unwrap_err().hint(),
            "tags: choose at least 1 option."
        );
        assert_eq!(
            v.check(json!({"tags": ["a", "b", "c", "d"]}))
                .unwrap_err()
                .hint(),
            "tags: choose at most 3 options (you chose 4)."
        );
        assert_eq!(
            v.check(json!({"tags": ["a", "zz"]})).unwrap_err().hint(),
            "tags: choose only from a, b, c, d."
        );
        assert_eq!(
            v.check(json!({"tags": "a"})).unwrap_err().hint(),
            "tags: choose from the list."
        );
    }

    #[test]
    fn titled_multi_select() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {
                "type": "array", "maxItems": 2,
                "items": {"anyOf": [
                    {"const": "a", "title": "A"},
                    {"const": "b", "title": "B"},
                    {"const": "c", "title": "C"}
                ]}
            }}
        });
        let v = validator(schema);
        assert!(v.check(json!({"tags": ["a", "b"]})).is_ok());
        assert_eq!(
            v.check(json!({"tags": ["x"]})).unwrap_err().hint(),
            "tags: choose only from A, B, C."
        );
        // The count error sits on `/tags`, before `/tags/0`.
        assert_eq!(
            v.check(json!({"tags": ["x", "y", "z"]}))
                .unwrap_err()
                .hint(),
            "tags: choose at most 2 options (you chose 3)."
        );
    }

    #[test]
    fn field_names_are_read_raw_from_the_path() {
        let schema = json!({
            "type": "object",
            "properties": {
                "007": {"type": "boolean"},
                "a/b~c": {"type": "string", "enum": ["p", "q"]}
            }
        });
        let v = validator(schema);
        assert_eq!(
            v.check(json!({"007": 1})).unwrap_err().hint(),
            "007: answer yes or no."
        );
        assert_eq!(
            v.check(json!({"a/b~c": "r"})).unwrap_err().hint(),
            "a/b~c: choose one of p, q."
        );
    }

    #[test]
    fn long_choice_lists_are_cut_short() {
        let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
        let hint = hint(
            one(json!({"type": "string", "enum": values})),
            json!({"x": "nope"}),
        );
        assert!(hint.starts_with("x: choose one of v0, v1,"), "{hint}");
        assert!(hint.ends_with("v19, …."), "{hint}");
    }

    #[test]
    fn non_object_content() {
        let v = validator(deploy());
        for content in [json!([]), json!("approve"), json!(null), json!(1)] {
            assert_eq!(
                v.check(content.clone()).unwrap_err().hint(),
                "The answer was not a filled-in form; please answer again."
            );
        }
    }

    #[test]
    fn cache_returns_one_validator_per_schema_in_any_key_order() {
        let cache = ValidatorCache::default();
        let a: Value = serde_json::from_str(
            r#"{"type":"object","properties":{"approve":{"type":"boolean"},"note":{"type":"string","maxLength":200}},"required":["approve"]}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            r#"{"required":["approve"],"properties":{"note":{"maxLength":200,"type":"string"},"approve":{"type":"boolean"}},"type":"object"}"#,
        )
        .unwrap();
        let first = cache.get(&a).unwrap();
        let second = cache.get(&b).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(cache.len(), 1);
        let other = cache.get(&one(json!({"type": "boolean"}))).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_full_cache_makes_room_and_stays_within_its_entries() {
        let cache = ValidatorCache::default();
        for i in 0..2 * CACHE_CAPACITY {
            cache
                .get(&one(json!({"type": "string", "maxLength": i})))
                .unwrap();
            assert!(cache.len() <= CACHE_CAPACITY, "{} entries", cache.len());
        }
        assert!(cache.len() > CACHE_CAPACITY / 2, "{} entries", cache.len());
        assert!(cache.entries.weight() <= CACHE_BYTES);
        cache.get(&one(json!({"type": "boolean"}))).unwrap();
        assert!(
            cache
                .entries
                .get(r#"{"properties":{"x":{"type":"boolean"}},"type":"object"}"#)
                .is_some()
        );
    }

    /// A question whose form's schema is about `size` bytes, distinct per `i`.
    fn large_question(i: usize, size: usize) -> String {
        json!({"method": "elicitation/create", "params": {"message": format!("Deploy {i}?"),
            "requestedSchema": {"type": "object", "description": format!("{i}:{}", "x".repeat(size)),
                "properties": {"ok": {"type": "boolean", "title": format!("echo {i}")}}}}})
        .to_string()
    }

    #[test]
    fn thousands_of_large_questions_stay_within_the_bytes() {
        let cache = ValidatorCache::default();
        for i in 0..2_000 {
            let mut made = NewEntries::default();
            let spelled = cache
                .spelled(&large_question(i, 64 * 1024), &mut made)
                .unwrap();
            assert!(spelled.question.form.is_some());
            cache.keep(made);
            assert!(
                cache.weight() <= ValidatorCache::MAX_WEIGHT,
                "{} bytes",
                cache.weight()
            );
        }
        for (name, bounded) in [
            ("entries", cache.entries.weight()),
            ("questions", cache.questions.weight()),
            ("spellings", cache.spellings.weight()),
        ] {
            assert!(bounded <= CACHE_BYTES, "{name}: {bounded} bytes");
        }
        // Each kept entry is counted at least as its key and its value's texts.
        let texts: usize = cache.spellings.len() * 2 * 64 * 1024;
        assert!(texts <= CACHE_BYTES, "{texts} bytes of question text kept");
        // Smaller questions are still kept, and found again.
        let small = large_question(0, 16);
        let mut made = NewEntries::default();
        let first = cache.spelled(&small, &mut made).unwrap();
        cache.keep(made);
        let mut made = NewEntries::default();
        let again = cache.spelled(&small, &mut made).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(made.spellings.is_empty(), "a hit makes nothing");
    }

    #[test]
    fn a_reading_keeps_nothing_until_it_is_kept() {
        let cache = ValidatorCache::default();
        let text = large_question(1, 100);
        let mut made = NewEntries::default();
        let spelled = cache.spelled(&text, &mut made).unwrap();
        assert_eq!(
            (
                made.spellings.len(),
                made.questions.len(),
                made.entries.len()
            ),
            (1, 1, 1)
        );
        // The reading finds what it made, without the caches.
        let reading = cache.with(&made);
        let again = reading.read_shown(&text).unwrap();
        assert!(Arc::ptr_eq(&again, &spelled));
        // And through the text shown, the question it made, not a second compile.
        let shown = reading.read_shown(spelled.shown.get()).unwrap();
        assert!(Arc::ptr_eq(&shown.question, &spelled.question));
        // The same question twice in one response is read once.
        let twice = cache.spelled(&text, &mut made).unwrap();
        assert!(Arc::ptr_eq(&spelled, &twice));
        assert_eq!(made.spellings.len(), 1);
        drop(made);
        assert_eq!(cache.weight(), 0);
        assert_eq!(
            cache.spellings.len() + cache.questions.len() + cache.len(),
            0
        );

        // A question whose schema does not compile leaves nothing, not even its neighbours'.
        let mut made = NewEntries::default();
        cache.spelled(&text, &mut made).unwrap();
        let broken = r#"{"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":5}}}"#;
        assert!(matches!(
            cache.spelled(broken, &mut made),
            Err(QuestionError::Schema(_))
        ));
        assert_eq!(cache.weight(), 0);
    }

    #[test]
    fn uncompilable_schema_is_an_error() {
        let cache = ValidatorCache::default();
        let err = cache.get(&json!({"type": 5})).unwrap_err();
        assert!(err.contains("not a valid JSON Schema"), "{err}");
        assert!(err.contains("/type"), "{err}");
        let err = cache
            .get(&json!({"$schema": "https://example.com/custom", "type": "object", "properties": {}}))
            .unwrap_err();
        assert!(err.contains("cannot be compiled"), "{err}");
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn out_of_subset_schema_warns_and_still_validates() {
        use std::io::Write;
        use std::sync::Mutex;

        #[derive(Clone, Default)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl Write for Capture {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();

        let schema = json!({
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}},
            "required": ["code"]
        });
        let (valid, invalid) = tracing::subscriber::with_default(subscriber, || {
            let cache = ValidatorCache::default();
            let v = cache.get(&schema).unwrap();
            // A cache hit does not warn again.
            cache.get(&schema).unwrap();
            (
                v.check(json!({"code": "123456"})),
                v.check(json!({"code": "12ab"})),
            )
        });
        assert_eq!(Value::Object(valid.unwrap()), json!({"code": "123456"}));
        assert_eq!(
            invalid.unwrap_err().hint(),
            "code: this is not in the expected form."
        );

        let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            logs.matches("outside the MCP form subset").count(),
            1,
            "{logs}"
        );
        assert!(logs.contains("WARN"), "{logs}");
        assert!(logs.contains("tower_elicitation"), "{logs}");
        assert!(logs.contains("/properties/code/pattern"), "{logs}");
        assert!(!logs.contains("12ab"), "{logs}");
    }
}
