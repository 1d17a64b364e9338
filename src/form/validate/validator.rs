//! [`FormValidator`]: a compiled `requestedSchema`, and the check of accepted form content
//! against it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::{Map, Value};

use super::problems::{
    FieldProblem, MAX_LISTED_CHOICES, Rejection, choice_list, field_problem, value_name,
};
use crate::texts::{self, Problem};
use crate::util::memo::Weight;

/// A compiled `requestedSchema`: checks accepted form content against it.
#[derive(Debug)]
pub(crate) struct FormValidator {
    /// Built with `format` asserted; draft from `$schema`, else 2020-12.
    validator: Validator,
    /// The keys of the schema's `properties`: content keys outside it are dropped. A form has a
    /// handful: a few string compares find one sooner than `HashSet`'s SipHash of each key.
    properties: BTreeSet<String>,
    /// For each property with a closed list of values (`enum`, `oneOf`, `items.enum`,
    /// `items.anyOf`), that list as a hint names it: the titles the form shows, else the values.
    choices: HashMap<String, String>,
    /// Each property's `title`, by which a hint names it.
    titles: HashMap<String, String>,
    /// The properties of `type: "integer"`: a whole number written `2.0` is accepted and
    /// forwarded as `2`, so the inner service can read it as an integer.
    integers: HashSet<String>,
    /// About how much memory all of this keeps, in bytes ([`footprint`]).
    pub(super) footprint: usize,
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

impl Weight for FormValidator {
    fn weight(&self, schema: &str) -> usize {
        schema.len().saturating_add(self.footprint)
    }
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
