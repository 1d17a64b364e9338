//! Compiled form validators, cached per distinct `requestedSchema`, and answer checking.
//!
//! [`ValidatorCache::get_canonical_text`] compiles a `requestedSchema` once (keyed by its
//! canonical JSON text) into a [`FormValidator`], whose
//! [`check`](FormValidator::check) validates accepted form content and, on failure, builds a short
//! hint for the user that names the field but never repeats the submitted value.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError, Validator};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::mcp::InputKind;
use crate::memo::Weight;

/// How many entries each of the three caches holds at most.
const CACHE_CAPACITY: usize = 1024;
/// About how much memory each of the three caches may keep alive: 4 MiB.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Compiled form validators keyed by their schema's canonical JSON, and the questions they
/// belong to.
///
/// Each of its three caches holds at most [`CACHE_CAPACITY`] (1,024) entries and about
/// [`CACHE_BYTES`] (4 MiB) in all, counting each entry's key text and a fair estimate of what
/// its value keeps alive: a compiled validator as its schema's text and a share per subschema
/// and member ([`footprint`]), a question or a spelling as its texts and its validator. Past
/// either bound older entries make room for new ones, and an entry heavier than a quarter of
/// the bytes (a schema of some thousand subschemas) is not kept. Servers send a handful of
/// distinct forms; when they generate them per request, the bounds keep memory capped at the
/// cost of recompiling.
///
/// Reading a response's questions ([`spelled`](Self::spelled)) keeps nothing: what it makes is
/// gathered in a [`Made`], kept by [`keep`](Self::keep) once the layer sends the response, so a
/// response the layer refuses (a token over its size bound, a schema that does not compile, a
/// capability the client lacks) leaves nothing behind.
#[derive(Default)]
pub(crate) struct ValidatorCache {
    entries: Bounded<FormValidator>,
    /// Asked questions by their canonical text: what kind each is, and its form's validator.
    questions: Bounded<Question>,
    /// Asked questions by the text an inner service spelled them in.
    spellings: Bounded<Spelled>,
}

type Bounded<V> = crate::memo::Bounded<V, CACHE_CAPACITY, CACHE_BYTES>;

/// What reading one response's questions made that the caches did not hold, by key: kept by
/// [`ValidatorCache::keep`], or dropped with the response.
#[derive(Debug, Default)]
pub(crate) struct Made {
    entries: Fresh<FormValidator>,
    questions: Fresh<Question>,
    spellings: Fresh<Spelled>,
}

/// Values made by key, in the order they were made.
type Fresh<V> = Vec<(Box<str>, Arc<V>)>;

/// Where answers find the question they answer, by its canonical text.
pub(crate) trait ReadQuestion {
    /// The question whose text (as shown, or canonical) is `text`, read as
    /// [`ValidatorCache::spelled`] reads it.
    fn read_spelled(&self, text: &str) -> Result<Arc<Spelled>, QuestionError>;
}

/// The caches as one response's reading sees them: what they hold, and what it made.
pub(crate) struct Reading<'a> {
    cache: &'a ValidatorCache,
    made: &'a Made,
}

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
            .field("weight", &self.weight())
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
        let mut made = Made::default();
        let validator = self.get_canonical(&key, &mut made, || Ok(schema.clone()))?;
        self.keep(made);
        Ok(validator)
    }

    /// The compiled validator for the schema whose canonical JSON text is `text`, compiled once
    /// per distinct schema: a cache hit costs one hash of the text and no parse. A validator
    /// compiled here is added to `made`, not kept.
    ///
    /// On first compile, if the schema is outside the MCP form subset
    /// ([`super::schema::check`]), logs a warning with the path and reason (never any content)
    /// and compiles it anyway.
    ///
    /// # Errors
    ///
    /// A message saying why, if the text is not JSON or `jsonschema` cannot compile it. Failures
    /// are not cached.
    pub(crate) fn get_canonical_text(
        &self,
        text: &str,
        made: &mut Made,
    ) -> Result<Arc<FormValidator>, String> {
        self.get_canonical(text, made, || {
            serde_json::from_str(text).map_err(|_| "the schema is not JSON".to_owned())
        })
    }

    /// The kind of the question whose canonical JSON text is `text`, and its form's compiled
    /// schema: read and compiled once per distinct question, then one hash of the text. What
    /// is read here is kept: the questions of a sealed token were kept when it was sealed.
    ///
    /// # Errors
    ///
    /// A question that is not elicitation, sampling or roots, or a form without a schema that
    /// compiles. Failures are not cached.
    #[cfg(test)]
    pub(crate) fn question(&self, text: &str) -> Result<Arc<Question>, QuestionError> {
        let mut made = Made::default();
        let question = self.read_question(text, &mut made)?;
        self.keep(made);
        Ok(question)
    }

    /// [`question`](Self::question), adding what it reads to `made` rather than keeping it.
    fn read_question(&self, text: &str, made: &mut Made) -> Result<Arc<Question>, QuestionError> {
        read(&self.questions, made, text, |made| {
            let raw =
                serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::UnknownKind)?;
            let (kind, schema) = InputKind::of_raw(raw).ok_or(QuestionError::UnknownKind)?;
            let form = match kind {
                InputKind::Form => {
                    let schema = schema
                        .filter(|s| s.get().starts_with('{'))
                        .ok_or(QuestionError::NoSchema)?;
                    let validator = self
                        .get_canonical_text(schema.get(), made)
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
    /// spelling, then one hash of the text. What is read here is added to `made`, for
    /// [`keep`](Self::keep) once the response is sent.
    ///
    /// # Errors
    ///
    /// As [`question`](Self::question), and for text that has no canonical form. Failures are
    /// not cached.
    pub(crate) fn spelled(
        &self,
        text: &str,
        made: &mut Made,
    ) -> Result<Arc<Spelled>, QuestionError> {
        read(&self.spellings, made, text, |made| {
            let raw =
                serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::Unreadable)?;
            let canonical =
                crate::canonical::canonical_raw(raw).map_err(|_| QuestionError::Unreadable)?;
            let shown =
                crate::canonical::minified_raw(raw).map_err(|_| QuestionError::Unreadable)?;
            let question = self.read_question(canonical.get(), made)?;
            Ok(Spelled { shown, question })
        })
    }

    /// Keeps what reading a response's questions made, now that the layer sends it.
    pub(crate) fn keep(&self, made: Made) {
        for (key, validator) in made.entries {
            self.entries.insert(key, validator);
        }
        for (key, question) in made.questions {
            self.questions.insert(key, question);
        }
        for (key, spelled) in made.spellings {
            self.spellings.insert(key, spelled);
        }
    }

    /// The caches as a reading that made `made` sees them.
    pub(crate) fn with<'a>(&'a self, made: &'a Made) -> Reading<'a> {
        Reading { cache: self, made }
    }

    /// The most the three caches weigh together, in bytes.
    pub(crate) const MAX_WEIGHT: usize = 3 * CACHE_BYTES;

    /// What the three caches weigh together, in bytes: at most [`MAX_WEIGHT`](Self::MAX_WEIGHT).
    pub(crate) fn weight(&self) -> usize {
        self.entries.weight() + self.questions.weight() + self.spellings.weight()
    }

    fn get_canonical(
        &self,
        key: &str,
        made: &mut Made,
        schema: impl FnOnce() -> Result<Value, String>,
    ) -> Result<Arc<FormValidator>, String> {
        read(&self.entries, made, key, |_| {
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

impl ReadQuestion for ValidatorCache {
    /// What is read here is kept: the questions of a sealed token were kept when it was sealed.
    fn read_spelled(&self, text: &str) -> Result<Arc<Spelled>, QuestionError> {
        let mut made = Made::default();
        let spelled = self.spelled(text, &mut made)?;
        self.keep(made);
        Ok(spelled)
    }
}

impl ReadQuestion for Reading<'_> {
    /// The question kept in the cache or made by this reading; any other is read, not kept.
    fn read_spelled(&self, text: &str) -> Result<Arc<Spelled>, QuestionError> {
        if let Some(found) = find(&self.cache.spellings, &self.made.spellings, text) {
            return Ok(found);
        }
        // Another spelling of a question this reading made (the text shown, say): found through
        // its canonical form, compiled at most once.
        let raw = serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::Unreadable)?;
        let canonical =
            crate::canonical::canonical_raw(raw).map_err(|_| QuestionError::Unreadable)?;
        let shown = crate::canonical::minified_raw(raw).map_err(|_| QuestionError::Unreadable)?;
        let question = match find(&self.cache.questions, &self.made.questions, canonical.get()) {
            Some(question) => question,
            None => self
                .cache
                .read_question(canonical.get(), &mut Made::default())?,
        };
        Ok(Arc::new(Spelled { shown, question }))
    }
}

/// What a reading makes and keeps aside, for one cache.
trait Part: Weight + Sized {
    /// The values of this cache's kind in `made`.
    fn fresh(made: &mut Made) -> &mut Fresh<Self>;
}

impl Part for FormValidator {
    fn fresh(made: &mut Made) -> &mut Fresh<Self> {
        &mut made.entries
    }
}

impl Part for Question {
    fn fresh(made: &mut Made) -> &mut Fresh<Self> {
        &mut made.questions
    }
}

impl Part for Spelled {
    fn fresh(made: &mut Made) -> &mut Fresh<Self> {
        &mut made.spellings
    }
}

/// The value for `key` kept in `cache`, or made earlier in this reading, or made now by `make`
/// and added to `made` (a failure is not).
fn read<V: Part, E>(
    cache: &Bounded<V>,
    made: &mut Made,
    key: &str,
    make: impl FnOnce(&mut Made) -> Result<V, E>,
) -> Result<Arc<V>, E> {
    if let Some(found) = find(cache, V::fresh(made), key) {
        return Ok(found);
    }
    let value = Arc::new(make(made)?);
    V::fresh(made).push((key.into(), Arc::clone(&value)));
    Ok(value)
}

fn find<V: Weight>(cache: &Bounded<V>, made: &[(Box<str>, Arc<V>)], key: &str) -> Option<Arc<V>> {
    cache.get(key).or_else(|| {
        made.iter()
            .find(|(made, _)| **made == *key)
            .map(|(_, value)| Arc::clone(value))
    })
}

impl Weight for FormValidator {
    fn weight(&self, schema: &str) -> usize {
        schema.len().saturating_add(self.footprint)
    }
}

impl Weight for Question {
    /// Its text, and its form's validator.
    fn weight(&self, text: &str) -> usize {
        let form = self.form.as_ref().map_or(0, |form| form.footprint);
        text.len().saturating_add(form)
    }
}

impl Weight for Spelled {
    /// Its spelling, the text shown, and the question it is (weighed as its shown text, which is
    /// as long as its canonical text).
    fn weight(&self, text: &str) -> usize {
        text.len()
            .saturating_add(self.shown.get().len())
            .saturating_add(self.question.weight(self.shown.get()))
    }
}

/// A compiled `requestedSchema`: checks accepted form content against it.
#[derive(Debug)]
pub(crate) struct FormValidator {
    /// Built with `format` asserted; draft from `$schema`, else 2020-12.
    validator: Validator,
    /// The keys of the schema's `properties`: content keys outside it are dropped.
    properties: HashSet<String>,
    /// For each property with a closed list of values (`enum`, `oneOf`, `items.enum`,
    /// `items.anyOf`), that list joined with ", " for hints.
    choices: HashMap<String, String>,
    /// The properties of `type: "integer"`: a whole number written `2.0` is accepted and
    /// forwarded as `2`, so the inner service can read it as an integer.
    integers: HashSet<String>,
    /// About how much memory all of this keeps, in bytes ([`footprint`]).
    footprint: usize,
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
            integers,
            footprint: footprint(schema),
        })
    }

    /// Checks accepted form `content`.
    ///
    /// Keys that are not declared properties are dropped first (they are never an error, even
    /// under `additionalProperties: false`); what is left is validated and returned.
    ///
    /// # Errors
    ///
    /// A short hint for the user naming the first failing field and what is wrong, such as
    /// ``"`note` must be at most 200 characters"`` or ``"`approve` is required"``. It never
    /// repeats the submitted value. With several failures, a missing required field is reported
    /// first, then the failure at the smallest instance path.
    pub(crate) fn check(&self, content: Value) -> Result<Map<String, Value>, String> {
        let Value::Object(mut content) = content else {
            return Err("content must be an object".to_owned());
        };
        content.retain(|key, _| self.properties.contains(key.as_str()));
        let kept = Value::Object(content);
        if !self.validator.is_valid(&kept) {
            return Err(self.hint(&kept));
        }
        let Value::Object(mut kept) = kept else {
            return Err("content must be an object".to_owned());
        };
        for name in &self.integers {
            if let Some(value) = kept.get_mut(name) {
                whole_as_integer(value);
            }
        }
        Ok(kept)
    }

    /// The hint for the first error of invalid `content`.
    #[cold]
    fn hint(&self, content: &Value) -> String {
        let first = self.validator.iter_errors(content).min_by(|a, b| {
            let rank =
                |e: &ValidationError<'_>| !matches!(e.kind(), ValidationErrorKind::Required { .. });
            rank(a)
                .cmp(&rank(b))
                .then_with(|| a.instance_path().as_str().cmp(b.instance_path().as_str()))
        });
        match first {
            Some(error) => self.describe(&error),
            // `is_valid` and `iter_errors` disagree; should not happen.
            None => "content is not valid".to_owned(),
        }
    }

    fn describe(&self, error: &ValidationError<'_>) -> String {
        // The instance path is `/<field>` or `/<field>/<index>`; read the first segment raw
        // (a field named "007" must not turn into the index 7).
        let path = error.instance_path().as_str();
        let Some(rest) = path.strip_prefix('/') else {
            return root_hint(error.kind());
        };
        let (escaped, in_item) = match rest.split_once('/') {
            Some((first, _)) => (first, true),
            None => (rest, false),
        };
        let field = escaped.replace("~1", "/").replace("~0", "~");
        let subject = if in_item {
            format!("`{field}` items")
        } else {
            format!("`{field}`")
        };
        use ValidationErrorKind as K;
        match error.kind() {
            K::Type { kind } => format!("{subject} must be {}", type_phrase(kind)),
            K::MinLength { limit } => {
                format!("{subject} must be at least {}", plural(*limit, "character"))
            }
            K::MaxLength { limit } => {
                format!("{subject} must be at most {}", plural(*limit, "character"))
            }
            K::Minimum { limit } => format!("{subject} must be at least {limit}"),
            K::Maximum { limit } => format!("{subject} must be at most {limit}"),
            K::ExclusiveMinimum { limit } => format!("{subject} must be greater than {limit}"),
            K::ExclusiveMaximum { limit } => format!("{subject} must be less than {limit}"),
            K::MultipleOf { multiple_of } => {
                format!("{subject} must be a multiple of {multiple_of}")
            }
            K::MinItems { limit } => {
                format!("{subject} must have at least {}", plural(*limit, "item"))
            }
            K::MaxItems { limit } => {
                format!("{subject} must have at most {}", plural(*limit, "item"))
            }
            K::UniqueItems => format!("{subject} must not repeat a value"),
            K::Format { format } => format!("{subject} must be {}", format_phrase(format)),
            K::Pattern { .. } => format!("{subject} does not match the expected pattern"),
            K::Enum { options } => match self.choices.get(&field) {
                Some(choices) => format!("{subject} must be one of: {choices}"),
                None => match options.as_array() {
                    Some(options) => format!("{subject} must be one of: {}", join_values(options)),
                    None => format!("{subject} is not valid"),
                },
            },
            K::OneOfNotValid { .. }
            | K::OneOfMultipleValid { .. }
            | K::AnyOf { .. }
            | K::Constant { .. } => match self.choices.get(&field) {
                Some(choices) => format!("{subject} must be one of: {choices}"),
                None => format!("{subject} is not valid"),
            },
            // A `required` inside a property: outside the form subset.
            K::Required { property } => match property.as_str() {
                Some(inner) => format!("{subject} needs `{inner}`"),
                None => format!("{subject} is not valid"),
            },
            _ => format!("{subject} is not valid"),
        }
    }
}

/// The hint for an error on the content object itself.
fn root_hint(kind: &ValidationErrorKind) -> String {
    match kind {
        ValidationErrorKind::Required { property } => match property.as_str() {
            Some(name) => format!("`{name}` is required"),
            None => "a required field is missing".to_owned(),
        },
        ValidationErrorKind::Type { .. } => "content must be an object".to_owned(),
        _ => "content is not valid".to_owned(),
    }
}

/// "a boolean", "a string or a number", … for a `Type` error.
fn type_phrase(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(ty) => a_type(*ty).to_owned(),
        TypeKind::Multiple(types) => {
            let names: Vec<&str> = types.iter().map(a_type).collect();
            names.join(" or ")
        }
    }
}

fn a_type(ty: JsonType) -> &'static str {
    match ty {
        JsonType::Null => "null",
        JsonType::Boolean => "a boolean",
        JsonType::Integer => "a whole number",
        JsonType::Number => "a number",
        JsonType::String => "a string",
        JsonType::Array => "a list",
        JsonType::Object => "an object",
    }
}

fn format_phrase(format: &str) -> String {
    match format {
        "email" => "a valid email address".to_owned(),
        "uri" => "a valid URI".to_owned(),
        "date" => "a valid date (YYYY-MM-DD)".to_owned(),
        "date-time" => "a valid date-time (RFC 3339)".to_owned(),
        other => format!("a valid {other}"),
    }
}

fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// How many allowed values a hint lists before it cuts the list short with "…".
const MAX_LISTED_CHOICES: usize = 20;

/// Schema values listed for a hint: strings bare, anything else as JSON, at most
/// [`MAX_LISTED_CHOICES`] of them.
fn join_values<'a>(values: impl IntoIterator<Item = &'a Value>) -> String {
    let mut out = String::new();
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        if i == MAX_LISTED_CHOICES {
            out.push('…');
            break;
        }
        match value {
            Value::String(s) => out.push_str(s),
            other => out.push_str(&other.to_string()),
        }
    }
    out
}

/// The closed list of values a property allows, from `enum`, `oneOf` consts, `items.enum` or
/// `items.anyOf` consts.
fn choice_list(property: &Value) -> Option<String> {
    let consts = |options: &Value| -> Option<String> {
        let options = options.as_array()?;
        let values: Option<Vec<&Value>> = options.iter().map(|o| o.get("const")).collect();
        Some(join_values(values?))
    };
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        return Some(join_values(values));
    }
    if let Some(options) = property.get("oneOf").or_else(|| property.get("anyOf")) {
        return consts(options);
    }
    let items = property.get("items")?;
    if let Some(values) = items.get("enum").and_then(Value::as_array) {
        return Some(join_values(values));
    }
    consts(items.get("anyOf").or_else(|| items.get("oneOf"))?)
}

/// About how much memory a validator compiled from `schema` keeps, in bytes: its strings, and a
/// share for each object, member and array item. Measured with jsonschema 0.61, a validator
/// keeps from about its text's length (a long `description`) to about 50 times it (a thousand
/// small `oneOf` options); this estimate is above every shape measured, by up to 4 times.
fn footprint(schema: &Value) -> usize {
    const PER_OBJECT: usize = 1024;
    const PER_MEMBER: usize = 256;
    const PER_ITEM: usize = 128;
    match schema {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().fold(0, |sum, item| {
            sum.saturating_add(PER_ITEM).saturating_add(footprint(item))
        }),
        Value::Object(members) => members.iter().fold(PER_OBJECT, |sum, (key, value)| {
            sum.saturating_add(PER_MEMBER + key.len())
                .saturating_add(footprint(value))
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
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
        let mut made = Made::default();
        let [first, second] = spellings.map(|text| cache.spelled(text, &mut made).expect("a form"));
        assert_eq!(
            cache.weight(),
            0,
            "nothing is kept before the response is sent"
        );
        cache.keep(made);
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
            let mut made = Made::default();
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
        assert_eq!(hint, "`approve` must be a boolean");
    }

    #[test]
    fn too_long_note_does_not_echo_it() {
        let note = "secret-".repeat(43); // 301 characters
        let hint = hint(deploy(), json!({"approve": true, "note": note}));
        assert_eq!(hint, "`note` must be at most 200 characters");
        assert!(!hint.contains("secret"));
    }

    #[test]
    fn missing_required_field() {
        assert_eq!(
            hint(deploy(), json!({"note": "hi"})),
            "`approve` is required"
        );
        // The required error wins over a field error.
        assert_eq!(hint(deploy(), json!({"note": 5})), "`approve` is required");
    }

    #[test]
    fn first_error_is_the_smallest_path() {
        let schema = json!({
            "type": "object",
            "properties": {
                "b": {"type": "boolean"},
                "a": {"type": "string"}
            }
        });
        assert_eq!(
            hint(schema, json!({"a": 1, "b": 2})),
            "`a` must be a string"
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
        assert_eq!(hint, "`x` must be a valid email address");
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
            assert!(hint.starts_with("`x` must be a valid"), "{hint}");
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
            "`age` must be at least 18"
        );
        assert_eq!(
            hint(schema.clone(), json!({"age": 131})),
            "`age` must be at most 130"
        );
        assert_eq!(
            hint(schema, json!({"age": 20.5})),
            "`age` must be a whole number"
        );
    }

    #[test]
    fn number_accepts_any_number() {
        let v = validator(one(json!({"type": "number", "minimum": 0.5})));
        assert!(v.check(json!({"x": 0.75})).is_ok());
        assert!(v.check(json!({"x": 3})).is_ok());
        assert_eq!(
            v.check(json!({"x": 0.25})).unwrap_err(),
            "`x` must be at least 0.5"
        );
        assert_eq!(
            v.check(json!({"x": "3"})).unwrap_err(),
            "`x` must be a number"
        );
    }

    #[test]
    fn string_min_length() {
        let schema = one(json!({"type": "string", "minLength": 3}));
        assert_eq!(
            hint(schema.clone(), json!({"x": "ab"})),
            "`x` must be at least 3 characters"
        );
        let schema = one(json!({"type": "string", "minLength": 1}));
        assert_eq!(
            hint(schema, json!({"x": ""})),
            "`x` must be at least 1 character"
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
        assert_eq!(hint, "`env` must be one of: staging, production");
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
            "`env` must be one of: stg, prd"
        );
        assert_eq!(hint(schema, json!({"env": 1})), "`env` must be a string");
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
            v.check(json!({"tags": []})).unwrap_err(),
            "`tags` must have at least 1 item"
        );
        assert_eq!(
            v.check(json!({"tags": ["a", "b", "c", "d"]})).unwrap_err(),
            "`tags` must have at most 3 items"
        );
        assert_eq!(
            v.check(json!({"tags": ["a", "zz"]})).unwrap_err(),
            "`tags` items must be one of: a, b, c, d"
        );
        assert_eq!(
            v.check(json!({"tags": "a"})).unwrap_err(),
            "`tags` must be a list"
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
            v.check(json!({"tags": ["x"]})).unwrap_err(),
            "`tags` items must be one of: a, b, c"
        );
        // The count error sits on `/tags`, before `/tags/0`.
        assert_eq!(
            v.check(json!({"tags": ["x", "y", "z"]})).unwrap_err(),
            "`tags` must have at most 2 items"
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
            v.check(json!({"007": 1})).unwrap_err(),
            "`007` must be a boolean"
        );
        assert_eq!(
            v.check(json!({"a/b~c": "r"})).unwrap_err(),
            "`a/b~c` must be one of: p, q"
        );
    }

    #[test]
    fn long_choice_lists_are_cut_short() {
        let values: Vec<String> = (0..50).map(|i| format!("v{i}")).collect();
        let hint = hint(
            one(json!({"type": "string", "enum": values})),
            json!({"x": "nope"}),
        );
        assert!(hint.starts_with("`x` must be one of: v0, v1,"), "{hint}");
        assert!(hint.ends_with("v19, …"), "{hint}");
    }

    #[test]
    fn non_object_content() {
        let v = validator(deploy());
        for content in [json!([]), json!("approve"), json!(null), json!(1)] {
            assert_eq!(
                v.check(content.clone()).unwrap_err(),
                "content must be an object"
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
            let mut made = Made::default();
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
        let mut made = Made::default();
        let first = cache.spelled(&small, &mut made).unwrap();
        cache.keep(made);
        let mut made = Made::default();
        let again = cache.spelled(&small, &mut made).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(made.spellings.is_empty(), "a hit makes nothing");
    }

    #[test]
    fn a_reading_keeps_nothing_until_it_is_kept() {
        let cache = ValidatorCache::default();
        let text = large_question(1, 100);
        let mut made = Made::default();
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
        let again = reading.read_spelled(&text).unwrap();
        assert!(Arc::ptr_eq(&again, &spelled));
        // And through the text shown, the question it made, not a second compile.
        let shown = reading.read_spelled(spelled.shown.get()).unwrap();
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
        let mut made = Made::default();
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
            invalid.unwrap_err(),
            "`code` does not match the expected pattern"
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
