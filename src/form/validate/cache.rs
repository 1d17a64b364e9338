//! The three caches of compiled validators and asked questions, and what one response's reading
//! makes before they keep it.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use serde_json::value::RawValue;

use super::validator::FormValidator;
use crate::util::memo::Weight;
use crate::wire::mcp::InputKind;

/// How many entries each of the three caches holds at most.
pub(super) const CACHE_CAPACITY: usize = 1024;
/// About how much memory each of the three caches may keep alive: 4 MiB.
pub(super) const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Compiled form validators keyed by their schema's canonical JSON, and the questions they
/// belong to.
///
/// Each of its three caches holds at most [`CACHE_CAPACITY`] (1,024) entries and about
/// [`CACHE_BYTES`] (4 MiB) in all, counting each entry's key text and a fair estimate of what
/// its value keeps alive: a compiled validator as its schema's text and a share per subschema
/// and member (the validator's `footprint`), a question or a spelling as its texts and its validator. Past
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
    pub(super) entries: Bounded<FormValidator>,
    /// Asked questions by their canonical text: what kind each is, and its form's validator.
    pub(super) questions: Bounded<Question>,
    /// Asked questions by the text an inner service spelled them in.
    pub(super) spellings: Bounded<ShownQuestion>,
}

type Bounded<V> = crate::util::memo::Bounded<V, CACHE_CAPACITY, CACHE_BYTES>;

/// What reading one response's questions made that the caches did not hold, by key: kept by
/// [`ValidatorCache::keep`], or dropped with the response.
#[derive(Debug, Default)]
pub(crate) struct NewEntries {
    pub(super) entries: NewValues<FormValidator>,
    pub(super) questions: NewValues<Question>,
    pub(super) spellings: NewValues<ShownQuestion>,
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
    /// ([`crate::form::schema::check`]), logs a warning with the path and reason (never any content)
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
    /// ([`crate::form::schema::check`]), logs a warning with the path and reason (never any content)
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

    /// The question whose canonical JSON text is `text`, as the tests' `question` reads it, adding
    /// what it reads to `made` rather than keeping it.
    pub(super) fn read_question(
        &self,
        text: &str,
        made: &mut NewEntries,
    ) -> Result<Arc<Question>, QuestionError> {
        read(&self.questions, made, text, |made| {
            let raw = crate::wire::json::raw_value(text).map_err(|_| QuestionError::UnknownKind)?;
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
    /// As [`read_question`](Self::read_question), and for text that has no canonical form.
    /// Failures are not cached.
    pub(crate) fn spelled(
        &self,
        text: &str,
        made: &mut NewEntries,
    ) -> Result<Arc<ShownQuestion>, QuestionError> {
        read(&self.spellings, made, text, |made| {
            let raw = crate::wire::json::raw_value(text).map_err(|_| QuestionError::Unreadable)?;
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

    /// What the three caches weigh together, in bytes: at most three times [`CACHE_BYTES`].
    pub(crate) fn weight(&self) -> usize {
        self.entries.weight() + self.questions.weight() + self.spellings.weight()
    }

    /// The validator of a question's `requestedSchema` (its canonical text): one per schema
    /// whatever its fields' `default`s, which validate nothing. A re-ask pre-fills answers as
    /// defaults, so they differ from round to round and caller to caller; the compiled schema
    /// does not.
    pub(super) fn form_validator(
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

    pub(super) fn get_canonical(
        &self,
        key: &str,
        made: &mut NewEntries,
        schema: impl FnOnce() -> Result<Value, String>,
    ) -> Result<Arc<FormValidator>, String> {
        read(&self.entries, made, key, |_| {
            let schema = schema()?;
            if let Err(err) = crate::form::schema::check(&schema) {
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
    pub(super) fn len(&self) -> usize {
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
        let raw = crate::wire::json::raw_value(text).map_err(|_| QuestionError::Unreadable)?;
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
