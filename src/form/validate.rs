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

use crate::texts::{self, FieldKind, Problem};
use crate::util::memo::Weight;
use crate::wire::mcp::InputKind;

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
/// gathered in a [`NewEntries`], kept by [`keep`](Self::keep) once the layer sends the response, so a
/// response the layer refuses (a token over its size bound, a schema that does not compile, a
/// capability the client lacks) leaves nothing behind.
#[derive(Default)]
pub(crate) struct ValidatorCache {
    entries: Bounded<FormValidator>,
    /// Asked questions by their canonical text: what kind each is, and its form's validator.
    questions: Bounded<Question>,
    /// Asked questions by the text an inner service spelled them in.
    spellings: Bounded<ShownQuestion>,
}

type Bounded<V> = crate::util::memo::Bounded<V, CACHE_CAPACITY, CACHE_BYTES>;

/// What reading one response's questions made that the caches did not hold, by key: kept by
/// [`ValidatorCache::keep`], or dropped with the response.
#[derive(Debug, Default)]
pub(crate) struct NewEntries {
    entries: NewValues<FormValidator>,
    questions: NewValues<Question>,
    spellings: NewValues<ShownQuestion>,
}

/// Values made by key, in the order they were made.
type NewValues<V> = Vec<(Box<str>, Arc<V>)>;

/// Where answers find the question they answer, by its canonical text.
pub(crate) trait ReadQuestion {
    /// The question whose text (as shown, or canonical) is `text`, read as
    /// [`ValidatorCache::spelled`] reads it.
    fn read_shown(&self, text: &str) -> Result<Arc<ShownQuestion>, QuestionError>;
}

impl<T: ReadQuestion> ReadQuestion for Arc<T> {
    fn read_shown(&self, text: &str) -> Result<Arc<ShownQuestion>, QuestionError> {
        T::read_shown(self, text)
    }
}

/// The caches as one response's reading sees them: what they hold, and what it made.
pub(crate) struct Reading<'a> {
    cache: &'a ValidatorCache,
    made: &'a NewEntries,
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
pub(crate) struct ShownQuestion {
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
        let key = crate::wire::canonical::canonical_value(schema).map_err(|e| e.to_string())?;
        let mut made = NewEntries::default();
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
        made: &mut NewEntries,
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
        let mut made = NewEntries::default();
        let question = self.read_question(text, &mut made)?;
        self.keep(made);
        Ok(question)
    }

    /// [`question`](Self::question), adding what it reads to `made` rather than keeping it.
    fn read_question(
        &self,
        text: &str,
        made: &mut NewEntries,
    ) -> Result<Arc<Question>, QuestionError> {
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
                        .form_validator(schema.get(), made)
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
        made: &mut NewEntries,
    ) -> Result<Arc<ShownQuestion>, QuestionError> {
        read(&self.spellings, made, text, |made| {
            let raw =
                serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::Unreadable)?;
            let canonical = crate::wire::canonical::canonical_raw(raw)
                .map_err(|_| QuestionError::Unreadable)?;
            let shown =
                crate::wire::canonical::minified_raw(raw).map_err(|_| QuestionError::Unreadable)?;
            let question = self.read_question(canonical.get(), made)?;
            Ok(ShownQuestion { shown, question })
        })
    }

    /// Keeps what reading a response's questions made, now that the layer sends it.
    pub(crate) fn keep(&self, made: NewEntries) {
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
    pub(crate) fn with<'a>(&'a self, made: &'a NewEntries) -> Reading<'a> {
        Reading { cache: self, made }
    }

    /// The most the three caches weigh together, in bytes.
    #[cfg(any(test, feature = "__fuzz"))]
    pub(crate) const MAX_WEIGHT: usize = 3 * CACHE_BYTES;

    /// What the three caches weigh together, in bytes: at most [`MAX_WEIGHT`](Self::MAX_WEIGHT).
    pub(crate) fn weight(&self) -> usize {
        self.entries.weight() + self.questions.weight() + self.spellings.weight()
    }

    /// The validator of a question's `requestedSchema` (its canonical text): one per schema
    /// whatever its fields' `default`s, which validate nothing. A re-ask pre-fills answers as
    /// defaults, so they differ from round to round and caller to caller; the compiled schema
    /// does not.
    fn form_validator(
        &self,
        text: &str,
        made: &mut NewEntries,
    ) -> Result<Arc<FormValidator>, String> {
        match without_defaults(text) {
            None => self.get_canonical_text(text, made),
            Some(key) => self.get_canonical(&key, made, || {
                serde_json::from_str(text).map_err(|_| "the schema is not JSON".to_owned())
            }),
        }
    }

    fn get_canonical(
        &self,
        key: &str,
        made: &mut NewEntries,
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
    fn read_shown(&self, text: &str) -> Result<Arc<ShownQuestion>, QuestionError> {
        let mut made = NewEntries::default();
        let spelled = self.spelled(text, &mut made)?;
        self.keep(made);
        Ok(spelled)
    }
}

impl ReadQuestion for Reading<'_> {
    /// The question kept in the cache or made by this reading; any other is read, not kept.
    fn read_shown(&self, text: &str) -> Result<Arc<ShownQuestion>, QuestionError> {
        if let Some(found) = find(&self.cache.spellings, &self.made.spellings, text) {
            return Ok(found);
        }
        // Another spelling of a question this reading made (the text shown, say): found through
        // its canonical form, compiled at most once.
        let raw = serde_json::from_str::<&RawValue>(text).map_err(|_| QuestionError::Unreadable)?;
        let canonical =
            crate::wire::canonical::canonical_raw(raw).map_err(|_| QuestionError::Unreadable)?;
        let shown =
            crate::wire::canonical::minified_raw(raw).map_err(|_| QuestionError::Unreadable)?;
        let question = match find(&self.cache.questions, &self.made.questions, canonical.get()) {
            Some(question) => question,
            None => self
                .cache
                .read_question(canonical.get(), &mut NewEntries::default())?,
        };
        Ok(Arc::new(ShownQuestion { shown, question }))
    }
}

/// What a reading makes and keeps aside, for one cache.
trait Part: Weight + Sized {
    /// The values of this cache's kind in `made`.
    fn fresh(made: &mut NewEntries) -> &mut NewValues<Self>;
}

impl Part for FormValidator {
    fn fresh(made: &mut NewEntries) -> &mut NewValues<Self> {
        &mut made.entries
    }
}

impl Part for Question {
    fn fresh(made: &mut NewEntries) -> &mut NewValues<Self> {
        &mut made.questions
    }
}

impl Part for ShownQuestion {
    fn fresh(made: &mut NewEntries) -> &mut NewValues<Self> {
        &mut made.spellings
    }
}

/// The value for `key` kept in `cache`, or made earlier in this reading, or made now by `make`
/// and added to `made` (a failure is not).
fn read<V: Part, E>(
    cache: &Bounded<V>,
    made: &mut NewEntries,
    key: &str,
    make: impl FnOnce(&mut NewEntries) -> Result<V, E>,
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

impl Weight for ShownQuestion {
    /// Its spelling, the text shown, and the question it is (weighed as its shown text, which is
    /// as long as its canonical text).
    fn weight(&self, text: &str) -> usize {
        text.len()
            .saturating_add(self.shown.get().len())
            .saturating_add(self.question.weight(self.shown.get()))
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
    removed.then(|| crate::wire::canonical::canonical_value(&schema).ok())?
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
    /// About how much memory all of this keeps, in bytes ([`footprint`]).
    footprint: usize,
}

/// Why accepted form content was not accepted: what was wrong, field by field, and what was right.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// One per problem, fields in key order.
    pub(crate) problems: Vec<FieldProblem>,
    /// The answered fields that are valid, as they would be forwarded: what a re-ask pre-fills.
    pub(crate) valid: Map<String, Value>,
}

/// One problem of an answer: the field it is about and what to do, said for the user
/// ([`crate::texts::sentence`]) in the message ([`line`](Self::line)) or on the field
/// ([`alone`](Self::alone)).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldProblem {
    /// The key of the field it is about; `None`: the answer as a whole.
    pub(crate) field: Option<String>,
    /// How the form names the field: its title, else its key; `None` with no field.
    pub(crate) name: Option<String>,
    /// What to do ([`crate::texts::what_to_do`]): `use at most 200 characters (you entered 300)`.
    what: String,
}

impl FieldProblem {
    fn new(field: Option<String>, name: Option<&str>, problem: &Problem<'_>) -> Self {
        Self {
            what: texts::what_to_do(problem),
            name: name.map(str::to_owned),
            field,
        }
    }

    /// The sentence that names the field: `Note: use at most 200 characters (you entered 300).`
    pub(crate) fn line(&self) -> String {
        texts::sentence(self.name.as_deref(), &self.what)
    }

    /// The sentence as the field itself says it: `Use at most 200 characters (you entered 300).`
    pub(crate) fn alone(&self) -> String {
        texts::sentence(None, &self.what)
    }
}

impl Rejection {
    /// The problems, fields in the order of `fields` (the form as shown), any others after them,
    /// a problem of the answer as a whole first.
    pub(crate) fn in_order(&self, fields: &[String]) -> Vec<&FieldProblem> {
        let place = |field: &Option<String>| match field {
            None => 0,
            Some(key) => 1 + fields.iter().position(|f| f == key).unwrap_or(fields.len()),
        };
        let mut problems: Vec<_> = self.problems.iter().collect();
        // Stable: fields the form does not list keep their key order.
        problems.sort_by_key(|problem| place(&problem.field));
        problems
    }

    /// The problems' sentences, in the order of [`Rejection::in_order`].
    #[cfg(test)]
    pub(crate) fn lines(&self, fields: &[String]) -> Vec<String> {
        self.in_order(fields)
            .into_iter()
            .map(FieldProblem::line)
            .collect()
    }

    /// The hint: the sentences one a line, fields in key order.
    #[cfg(test)]
    pub(crate) fn hint(&self) -> String {
        self.lines(&[]).join("\n")
    }

    fn of_answer(problem: &Problem<'_>) -> Self {
        Self {
            problems: vec![FieldProblem::new(None, None, problem)],
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
        let mut first: BTreeMap<Option<String>, (u8, FieldProblem)> = BTreeMap::new();
        for error in self.validator.iter_errors(&content) {
            let (rank, problem) = self.describe(&error);
            match first.get(&problem.field) {
                Some((best, _)) if *best <= rank => {}
                _ => {
                    first.insert(problem.field.clone(), (rank, problem));
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
            problems: first.into_values().map(|(_, problem)| problem).collect(),
            valid,
        }
    }

    /// An error's rank among its field's errors, and the problem it says.
    fn describe(&self, error: &ValidationError<'_>) -> (u8, FieldProblem) {
        // The instance path is `/<field>` or `/<field>/<index>`; read the first segment raw
        // (a field named "007" must not turn into the index 7).
        let path = error.instance_path().as_str();
        let Some(rest) = path.strip_prefix('/') else {
            return self.describe_whole(error);
        };
        let (escaped, in_item) = match rest.split_once('/') {
            Some((first, _)) => (first, true),
            None => (rest, false),
        };
        let field = escaped.replace("~1", "/").replace("~0", "~");
        let choices = self.choices.get(&field).map(String::as_str);
        // A value outside an `enum` of a field this validator lists no choices for: name the
        // enum's values.
        let listed = match (choices, error.kind()) {
            (None, ValidationErrorKind::Enum { options }) => options
                .as_array()
                .map(|options| texts::choices(options.iter().map(value_name), MAX_LISTED_CHOICES)),
            _ => None,
        };
        let problem = field_problem(error, choices, listed.as_deref(), in_item);
        let rank = match (error.kind(), in_item) {
            (ValidationErrorKind::Type { .. }, false) => 1,
            (_, false) => 2,
            (_, true) => 3,
        };
        let name = self.name(&field).to_owned();
        (rank, FieldProblem::new(Some(field), Some(&name), &problem))
    }

    /// What is wrong with the answer as a whole (not one field): a required field missing, or
    /// not an object at all.
    fn describe_whole(&self, error: &ValidationError<'_>) -> (u8, FieldProblem) {
        let problem = match error.kind() {
            ValidationErrorKind::Required { property } => match property.as_str() {
                Some(field) => FieldProblem::new(
                    Some(field.to_owned()),
                    Some(self.name(field)),
                    &Problem::Missing,
                ),
                None => FieldProblem::new(None, None, &Problem::DoesNotFit),
            },
            ValidationErrorKind::Type { .. } => FieldProblem::new(None, None, &Problem::NotAForm),
            _ => FieldProblem::new(None, None, &Problem::DoesNotFit),
        };
        (0, problem)
    }

    /// How a hint names a field: its title, else its key.
    fn name<'s>(&'s self, field: &'s str) -> &'s str {
        self.titles.get(field).map_or(field, String::as_str)
    }
}

/// The kind of value a `Type` error asked for.
/// What is wrong with one field's value (`in_item`: with one item of a multi-select), in the
/// words of [`Problem`]: `choices` are the field's own, `listed` the values of an `enum` it broke.
fn field_problem<'e>(
    error: &'e ValidationError<'_>,
    choices: Option<&'e str>,
    listed: Option<&'e str>,
    in_item: bool,
) -> Problem<'e> {
    use ValidationErrorKind as K;
    match error.kind() {
        // A value of the wrong kind for a list of choices: say what to choose.
        K::Type { kind } => match (choices, in_item, kind_of(kind)) {
            (Some(choices), true, _) => Problem::NotAnOption(choices),
            (Some(choices), false, kind) if kind != FieldKind::Choices => {
                Problem::NotAChoice(choices)
            }
            (_, _, kind) => Problem::FieldKind(kind),
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
        | K::Constant { .. } => match (choices.or(listed), in_item) {
            (Some(choices), false) => Problem::NotAChoice(choices),
            (Some(choices), true) => Problem::NotAnOption(choices),
            (None, _) => Problem::Invalid,
        },
        _ => Problem::Invalid,
    }
}

fn kind_of(kind: &TypeKind) -> FieldKind {
    match kind {
        TypeKind::Single(JsonType::String) => FieldKind::Text,
        TypeKind::Single(JsonType::Number) => FieldKind::Number,
        TypeKind::Single(JsonType::Integer) => FieldKind::WholeNumber,
        TypeKind::Single(JsonType::Boolean) => FieldKind::YesNo,
        TypeKind::Single(JsonType::Array) => FieldKind::Choices,
        _ => FieldKind::Other,
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

/// Why `jsonschema` refused a schema, without repeating schema values (a `default` may hold
/// user data the server pre-filled).
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
