//! Compiled form validators, cached per distinct `requestedSchema`, and answer checking.
//!
//! [`ValidatorCache::get_canonical_text`] compiles a `requestedSchema` once (keyed by its
//! canonical JSON text) into a [`FormValidator`], whose
//! [`check`](FormValidator::check) validates accepted form content and, on failure, builds a short
//! hint for the user that names the field but never repeats the submitted value.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::mcp::InputKind;
use crate::texts::{self, Kind, Problem};

/// How many compiled validators the cache holds before it is cleared.
const CACHE_CAPACITY: usize = 1024;

/// Compiled form validators keyed by their schema's canonical JSON.
///
/// Bounded at [`CACHE_CAPACITY`] (1024) entries: inserting into a full cache first clears it
/// whole. Servers send a handful of distinct forms, so this simple policy only matters when
/// schemas are generated per request, and then it keeps memory bounded at the cost of
/// recompiling.
#[derive(Default)]
pub(crate) struct ValidatorCache {
    entries: Bounded<FormValidator>,
    /// Asked questions by their canonical text: what kind each is, and its form's validator.
    questions: Bounded<Question>,
    /// Asked questions by the text an inner service spelled them in.
    spellings: Bounded<Spelled>,
}

type Bounded<V> = crate::memo::Bounded<V, CACHE_CAPACITY>;

/// What the layer needs to know of an asked question, read once per distinct question.
#[derive(Debug)]
pub(crate) struct Question {
    pub(crate) kind: InputKind,
    /// The compiled `requestedSchema` of a form.
    pub(crate) form: Option<Arc<FormValidator>>,
}

/// A question as an inner service spelled it: the text the client is shown, and what it is (read
/// through its canonical text).
#[derive(Debug)]
pub(crate) struct Spelled {
    /// The inner's text minified, its members in the order the inner wrote them.
    pub(crate) shown: Box<RawValue>,
    pub(crate) question: Arc<Question>,
}

/// Why a question cannot be asked through the layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QuestionError {
    /// Not JSON that has a canonical form (invalid, a repeated key, too deep).
    Unreadable,
    /// Not elicitation, sampling or roots.
    UnknownKind,
    /// A form without a `requestedSchema` object.
    NoSchema,
    /// A form whose schema does not compile.
    Schema(String),
}

impl fmt::Display for QuestionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable => f.write_str("an input request is not JSON the layer can read"),
            Self::UnknownKind => {
                f.write_str("an input request is not elicitation, sampling or roots")
            }
            Self::NoSchema => f.write_str("a form request has no requestedSchema object"),
            Self::Schema(why) => write!(f, "a requestedSchema cannot be compiled: {why}"),
        }
    }
}

impl fmt::Debug for ValidatorCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValidatorCache")
            .field("len", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl ValidatorCache {
    /// The compiled validator for `schema`, compiled once per distinct schema (keyed by its
    /// canonical JSON, so the order of object keys does not matter).
    ///
    /// On first compile, if `schema` is outside the MCP form subset
    /// ([`super::schema::check`]), logs a warning with the path and reason (never any content)
    /// and compiles it anyway.
    ///
    /// # Errors
    ///
    /// A message saying why, if `jsonschema` cannot compile `schema` (invalid against its
    /// meta-schema, unknown `$schema`, unresolvable `$ref`, …). Failures are not cached.
    #[cfg(test)]
    pub(crate) fn get(&self, schema: &Value) -> Result<Arc<FormValidator>, String> {
        let key = String::from_utf8(crate::canonical::canonical_json(schema))
            .map_err(|_| "the schema is not UTF-8".to_owned())?;
        self.get_canonical(&key, || Ok(schema.clone()))
    }

    /// The compiled validator for the schema whose canonical JSON text is `text`, compiled once
    /// per distinct schema: a cache hit costs one hash of the text and no parse.
    ///
    /// On first compile, if the schema is outside the MCP form subset
    /// ([`super::schema::check`]), logs a warning with the path and reason (never any content)
    /// and compiles it anyway.
    ///
    /// # Errors
    ///
    /// A message saying why, if the text is not JSON or `jsonschema` cannot compile it. Failures
    /// are not cached.
    pub(crate) fn get_canonical_text(&self, text: &str) -> Result<Arc<FormValidator>, String> {
        self.get_canonical(text, || {
            serde_json::from_str(text).map_err(|_| "the schema is not JSON".to_owned())
        })
    }

    /// The kind of the question whose canonical JSON text is `text`, and its form's compiled
    /// schema: read and compiled once per distinct question, then one hash of the text.
    ///
    /// # Errors
    ///
    /// A question that is not elicitation, sampling or roots, or a form without a schema that
    /// compiles. Failures are not cached.
    pub(crate) fn question(&self, text: &str) -> Result<Arc<Question>, QuestionError> {
        self.questions.get_or_try_insert(text, || {
            let raw =
                serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::UnknownKind)?;
            let (kind, schema) = InputKind::of_raw(raw).ok_or(QuestionError::UnknownKind)?;
            let form = match kind {
                InputKind::Form => {
                    let schema = schema
                        .filter(|s| s.get().starts_with('{'))
                        .ok_or(QuestionError::NoSchema)?;
                    let validator = self
                        .form_validator(schema.get())
                        .map_err(QuestionError::Schema)?;
                    Some(validator)
                }
                _ => None,
            };
            Ok(Question { kind, form })
        })
    }

    /// The text the client is shown of a question an inner service asked as `text`, and what it
    /// is (the question of its canonical text): canonicalised and read once per distinct
    /// spelling, then one hash of the text.
    ///
    /// # Errors
    ///
    /// As [`question`](Self::question), and for text that has no canonical form. Failures are
    /// not cached.
    pub(crate) fn spelled(&self, text: &str) -> Result<Arc<Spelled>, QuestionError> {
        self.spellings.get_or_try_insert(text, || {
            let raw =
                serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::Unreadable)?;
            let canonical =
                crate::canonical::canonical_raw(raw).map_err(|_| QuestionError::Unreadable)?;
            let shown =
                crate::canonical::minified_raw(raw).map_err(|_| QuestionError::Unreadable)?;
            let question = self.question(canonical.get())?;
            Ok(Spelled { shown, question })
        })
    }

    /// The validator of a question's `requestedSchema` (its canonical text): one per schema
    /// whatever its fields' `default`s, which validate nothing. A re-ask pre-fills answers as
    /// defaults, so they differ from round to round and caller to caller; the compiled schema
    /// does not.
    fn form_validator(&self, text: &str) -> Result<Arc<FormValidator>, String> {
        match without_defaults(text) {
            None => self.get_canonical_text(text),
            Some(key) => self.get_canonical(&key, || {
                serde_json::from_str(text).map_err(|_| "the schema is not JSON".to_owned())
            }),
        }
    }

    fn get_canonical(
        &self,
        key: &str,
        schema: impl FnOnce() -> Result<Value, String>,
    ) -> Result<Arc<FormValidator>, String> {
        self.entries.get_or_try_insert(key, || {
            let schema = schema()?;
            if let Err(err) = super::schema::check(&schema) {
                tracing::warn!(
                    target: "tower_elicitation",
                    path = %err.path,
                    reason = %err.reason,
                    "requestedSchema is outside the MCP form subset; validating it anyway"
                );
            }
            FormValidator::compile(&schema)
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The canonical text of the schema `text` without its properties' `default`s, when it has any.
fn without_defaults(text: &str) -> Option<String> {
    memchr::memmem::find(text.as_bytes(), b"\"default\"")?;
    let mut schema: Value = serde_json::from_str(text).ok()?;
    let mut removed = false;
    for property in schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)?
        .values_mut()
    {
        if let Some(property) = property.as_object_mut() {
            removed |= property.remove("default").is_some();
        }
    }
    removed.then(|| String::from_utf8(crate::canonical::canonical_json(&schema)).ok())?
}

/// A compiled `requestedSchema`: checks accepted form content against it.
#[derive(Debug)]
pub(crate) struct FormValidator {
    /// Built with `format` asserted; draft from `$schema`, else 2020-12.
    validator: Validator,
    /// The keys of the schema's `properties`: content keys outside it are dropped.
    properties: HashSet<String>,
    /// For each property with a closed list of values (`enum`, `oneOf`, `items.enum`,
    /// `items.anyOf`), that list as a hint names it: the titles the form shows, else the values.
    choices: HashMap<String, String>,
    /// Each property's `title`, by which a hint names it.
    titles: HashMap<String, String>,
    /// The properties of `type: "integer"`: a whole number written `2.0` is accepted and
    /// forwarded as `2`, so the inner service can read it as an integer.
    integers: HashSet<String>,
}

/// Why accepted form content was not accepted: what was wrong, field by field, and what was right.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// One sentence for the user per problem ([`crate::texts::problem`]), each with the key of
    /// the field it is about (`None`: the answer as a whole), fields in key order.
    pub(crate) problems: Vec<(Option<String>, String)>,
    /// The answered fields that are valid, as they would be forwarded: what a re-ask pre-fills.
    pub(crate) valid: Map<String, Value>,
}

impl Rejection {
    /// The problems' sentences, fields in the order of `fields` (the form as shown), any others
    /// after them.
    pub(crate) fn lines(&self, fields: &[String]) -> Vec<String> {
        let place = |field: &Option<String>| match field {
            None => 0,
            Some(key) => 1 + fields.iter().position(|f| f == key).unwrap_or(fields.len()),
        };
        let mut problems: Vec<_> = self.problems.iter().collect();
        // Stable: fields the form does not list keep their key order.
        problems.sort_by_key(|(field, _)| place(field));
        problems.into_iter().map(|(_, line)| line.clone()).collect()
    }

    /// The hint: the sentences one a line, fields in key order.
    #[cfg(test)]
    pub(crate) fn hint(&self) -> String {
        self.lines(&[]).join("\n")
    }

    fn of_answer(problem: &Problem<'_>) -> Self {
        Self {
            problems: vec![(None, texts::problem(None, problem))],
            valid: Map::new(),
        }
    }
}

impl FormValidator {
    /// Compiles `schema`, outside any cache.
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .map_err(|err| compile_error(&err))?;
        let declared = schema.get("properties").and_then(Value::as_object);
        let properties = declared
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let choices = declared
            .map(|p| {
                p.iter()
                    .filter_map(|(name, property)| Some((name.clone(), choice_list(property)?)))
                    .collect()
            })
            .unwrap_or_default();
        let titles = declared
            .map(|p| {
                p.iter()
                    .filter_map(|(name, property)| {
                        let title = property.get("title")?.as_str()?.trim();
                        (!title.is_empty()).then(|| (name.clone(), title.to_owned()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let integers = declared
            .map(|p| {
                p.iter()
                    .filter(|(_, property)| property.get("type") == Some(&Value::from("integer")))
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            validator,
            properties,
            choices,
            titles,
            integers,
        })
    }

    /// Checks accepted form `content`.
    ///
    /// Keys that are not declared properties are dropped first (they are never an error, even
    /// under `additionalProperties: false`); what is left is validated and returned.
    ///
    /// # Errors
    ///
    /// A [`Rejection`]: one sentence for the user per field that is wrong (the first problem of
    /// each; a missing required field before anything else), naming it by its `title`, such as
    /// `Note: use at most 200 characters (you entered 300).` It never repeats the submitted
    /// value. It also holds the fields that were valid.
    pub(crate) fn check(&self, content: Value) -> Result<Map<String, Value>, Rejection> {
        let Value::Object(mut content) = content else {
            return Err(Rejection::of_answer(&Problem::NotAForm));
        };
        content.retain(|key, _| self.properties.contains(key.as_str()));
        let kept = Value::Object(content);
        if !self.validator.is_valid(&kept) {
            return Err(self.rejection(kept));
        }
        let Value::Object(mut kept) = kept else {
            return Err(Rejection::of_answer(&Problem::NotAForm));
        };
        self.integers_as_integers(&mut kept);
        Ok(kept)
    }

    fn integers_as_integers(&self, content: &mut Map<String, Value>) {
        for name in &self.integers {
            if let Some(value) = content.get_mut(name) {
                whole_as_integer(value);
            }
        }
    }

    /// What is wrong with invalid `content`, field by field, and what is right.
    #[cold]
    fn rejection(&self, content: Value) -> Rejection {
        // The first problem of each field, by rank: missing, then of the field's value, then of
        // one of its items (a count before the options counted).
        let mut first: BTreeMap<Option<String>, (u8, String)> = BTreeMap::new();
        for error in self.validator.iter_errors(&content) {
            let (field, rank, sentence) = self.describe(&error);
            match first.get(&field) {
                Some((best, _)) if *best <= rank => {}
                _ => {
                    first.insert(field, (rank, sentence));
                }
            }
        }
        if first.is_empty() {
            // `is_valid` and `iter_errors` disagree; should not happen.
            return Rejection::of_answer(&Problem::DoesNotFit);
        }
        let Value::Object(mut valid) = content else {
            return Rejection::of_answer(&Problem::NotAForm);
        };
        valid.retain(|key, _| !first.contains_key(&Some(key.clone())));
        self.integers_as_integers(&mut valid);
        Rejection {
            problems: first
                .into_iter()
                .map(|(field, (_, sentence))| (field, sentence))
                .collect(),
            valid,
        }
    }

    /// The field an error is about (`None`: the answer as a whole), its rank among the field's
    /// errors, and the sentence that says it.
    fn describe(&self, error: &ValidationError<'_>) -> (Option<String>, u8, String) {
        use ValidationErrorKind as K;
        // The instance path is `/<field>` or `/<field>/<index>`; read the first segment raw
        // (a field named "007" must not turn into the index 7).
        let path = error.instance_path().as_str();
        let Some(rest) = path.strip_prefix('/') else {
            return match error.kind() {
                K::Required { property } => match property.as_str() {
                    Some(field) => (
                        Some(field.to_owned()),
                        0,
                        texts::problem(Some(self.name(field)), &Problem::Missing),
                    ),
                    None => (None, 0, texts::problem(None, &Problem::DoesNotFit)),
                },
                K::Type { .. } => (None, 0, texts::problem(None, &Problem::NotAForm)),
                _ => (None, 0, texts::problem(None, &Problem::DoesNotFit)),
            };
        };
        let (escaped, in_item) = match rest.split_once('/') {
            Some((first, _)) => (first, true),
            None => (rest, false),
        };
        let field = escaped.replace("~1", "/").replace("~0", "~");
        let choices = self.choices.get(&field).map(String::as_str);
        let listed;
        let problem = match error.kind() {
            // A value of the wrong kind for a list of choices: say what to choose.
            K::Type { kind } => match (choices, in_item, kind_of(kind)) {
                (Some(choices), true, _) => Problem::NotAnOption(choices),
                (Some(choices), false, kind) if kind != Kind::Choices => {
                    Problem::NotAChoice(choices)
                }
                (_, _, kind) => Problem::Kind(kind),
            },
            K::MinLength { limit } => Problem::TooShort {
                min: *limit,
                got: text_length(error.instance()),
            },
            K::MaxLength { limit } => Problem::TooLong {
                max: *limit,
                got: text_length(error.instance()),
            },
            K::Minimum { limit } => Problem::TooSmall {
                limit,
                exclusive: false,
            },
            K::Maximum { limit } => Problem::TooLarge {
                limit,
                exclusive: false,
            },
            K::ExclusiveMinimum { limit } => Problem::TooSmall {
                limit,
                exclusive: true,
            },
            K::ExclusiveMaximum { limit } => Problem::TooLarge {
                limit,
                exclusive: true,
            },
            K::MultipleOf { multiple_of } => Problem::NotMultiple(*multiple_of),
            K::MinItems { limit } => Problem::TooFewChosen { min: *limit },
            K::MaxItems { limit } => Problem::TooManyChosen {
                max: *limit,
                got: error.instance().as_array().map_or(0, Vec::len),
            },
            K::UniqueItems => Problem::ChosenTwice,
            K::Format { format } => Problem::Format(format),
            K::Pattern { .. } => Problem::Pattern,
            K::Enum { .. }
            | K::OneOfNotValid { .. }
            | K::OneOfMultipleValid { .. }
            | K::AnyOf { .. }
            | K::Constant { .. } => {
                let choices = match (choices, error.kind()) {
                    (Some(choices), _) => Some(choices),
                    (None, K::Enum { options }) => {
                        listed = options.as_array().map(|options| {
                            texts::choices(options.iter().map(value_name), MAX_LISTED_CHOICES)
                        });
                        listed.as_deref()
                    }
                    (None, _) => None,
                };
                match (choices, in_item) {
                    (Some(choices), false) => Problem::NotAChoice(choices),
                    (Some(choices), true) => Problem::NotAnOption(choices),
                    (None, _) => Problem::Invalid,
                }
            }
            _ => Problem::Invalid,
        };
        let rank = match (error.kind(), in_item) {
            (K::Type { .. }, false) => 1,
            (_, false) => 2,
            (_, true) => 3,
        };
        let sentence = texts::problem(Some(self.name(&field)), &problem);
        (Some(field), rank, sentence)
    }

    /// How a hint names a field: its title, else its key.
    fn name<'s>(&'s self, field: &'s str) -> &'s str {
        self.titles.get(field).map_or(field, String::as_str)
    }
}

/// The kind of value a `Type` error asked for.
fn kind_of(kind: &TypeKind) -> Kind {
    match kind {
        TypeKind::Single(JsonType::String) => Kind::Text,
        TypeKind::Single(JsonType::Number) => Kind::Number,
        TypeKind::Single(JsonType::Integer) => Kind::WholeNumber,
        TypeKind::Single(JsonType::Boolean) => Kind::YesNo,
        TypeKind::Single(JsonType::Array) => Kind::Choices,
        _ => Kind::Other,
    }
}

/// How many characters a text has, as `minLength` and `maxLength` count them.
fn text_length(value: &Value) -> usize {
    value.as_str().map_or(0, |text| text.chars().count())
}

/// How many allowed values a hint lists before it cuts the list short with "…".
const MAX_LISTED_CHOICES: usize = 20;

/// A schema value as a hint names it: a string bare, anything else as JSON.
fn value_name(value: &Value) -> &str {
    value.as_str().unwrap_or("another value")
}

/// The closed list of values a property allows, as a hint names them: the titles of `oneOf` /
/// `anyOf` consts (or `enumNames`) where the form shows titles, else the `enum` values or consts.
fn choice_list(property: &Value) -> Option<String> {
    let consts = |options: &Value| -> Option<String> {
        let options = options.as_array()?;
        let names: Option<Vec<&str>> = options
            .iter()
            .map(|o| {
                o.get("title")
                    .and_then(Value::as_str)
                    .or_else(|| o.get("const").map(value_name))
            })
            .collect();
        Some(texts::choices(names?, MAX_LISTED_CHOICES))
    };
    let values = |values: &Vec<Value>, names: Option<&Value>| -> String {
        let names = names
            .and_then(Value::as_array)
            .filter(|names| names.len() == values.len() && names.iter().all(Value::is_string));
        match names {
            Some(names) => texts::choices(names.iter().map(value_name), MAX_LISTED_CHOICES),
            None => texts::choices(values.iter().map(value_name), MAX_LISTED_CHOICES),
        }
    };
    if let Some(list) = property.get("enum").and_then(Value::as_array) {
        return Some(values(list, property.get("enumNames")));
    }
    if let Some(options) = property.get("oneOf").or_else(|| property.get("anyOf")) {
        return consts(options);
    }
    let items = property.get("items")?;
    if let Some(list) = items.get("enum").and_then(Value::as_array) {
        return Some(values(list, None));
    }
    consts(items.get("anyOf").or_else(|| items.get("oneOf"))?)
}

/// Why `jsonschema` refused a schema, without repeating schema values (a `default` may hold
/// user data the server pre-filled).
/// `2.0` → `2`, for a number the schema already accepted as an integer.
fn whole_as_integer(value: &mut Value) {
    let Some(float) = value.as_f64().filter(|_| value.is_f64()) else {
        return;
    };
    // Within ±2^53 every whole f64 is exact; beyond it the value stays as it came.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if float.fract() == 0.0 && float.abs() <= EXACT {
        *value = Value::from(float as i64);
    }
}

fn compile_error(err: &ValidationError<'_>) -> String {
    match err.kind() {
        ValidationErrorKind::Referencing(reference) => {
            format!("requestedSchema cannot be compiled: {reference}")
        }
        kind => {
            let path = err.instance_path().as_str();
            let path = if path.is_empty() { "/" } else { path };
            format!(
                "requestedSchema is not a valid JSON Schema: the value at {path} fails the meta-schema's `{}` rule",
                kind.keyword()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let [first, second] = spellings.map(|text| cache.spelled(text).expect("a form"));
        // One question, kept by the canonical text of both.
        let canonical = String::from_utf8(crate::canonical::canonical_json(
            &serde_json::from_str(spellings[0]).unwrap(),
        ))
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
            assert_eq!(cache.spelled(twice).unwrap_err(), QuestionError::Unreadable);
        }
        assert_eq!(cache.spellings.len(), 2);
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
            .map(|(field, _)| field.as_deref())
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
            let text = crate::canonical::canonical_json(&json!({
                "method": "elicitation/create",
                "params": {"message": "m", "requestedSchema": schema}
            }));
            cache
                .question(std::str::from_utf8(&text).unwrap())
                .unwrap()
                .form
                .clone()
                .unwrap()
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
    fn cache_is_cleared_when_full() {
        let cache = ValidatorCache::default();
        for i in 0..CACHE_CAPACITY {
            cache
                .get(&one(json!({"type": "string", "maxLength": i})))
                .unwrap();
        }
        assert_eq!(cache.len(), CACHE_CAPACITY);
        cache.get(&one(json!({"type": "boolean"}))).unwrap();
        assert_eq!(cache.len(), 1);
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
