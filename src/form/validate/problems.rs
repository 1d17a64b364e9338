//! Why an answer was not accepted ([`Rejection`], one [`FieldProblem`] per field), said in
//! the words of [`Problem`]: what each `jsonschema` error means for the person, and the
//! choices a hint lists.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, ValidationError};
use serde_json::{Map, Value};

use crate::texts::{self, FieldKind, Problem};

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
    pub(super) fn new(field: Option<String>, name: Option<&str>, problem: &Problem<'_>) -> Self {
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

    pub(super) fn of_answer(problem: &Problem<'_>) -> Self {
        Self {
            problems: vec![FieldProblem::new(None, None, problem)],
            valid: Map::new(),
        }
    }
}

/// What is wrong with one field's value (`in_item`: with one item of a multi-select), in the
/// words of [`Problem`]: `choices` are the field's own, `listed` the values of an `enum` it broke.
pub(super) fn field_problem<'e>(
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
pub(super) const MAX_LISTED_CHOICES: usize = 20;

/// A schema value as a hint names it: a string bare, anything else as JSON.
pub(super) fn value_name(value: &Value) -> &str {
    value.as_str().unwrap_or("another value")
}

/// The closed list of values a property allows, as a hint names them: the titles of `oneOf` /
/// `anyOf` consts (or `enumNames`) where the form shows titles, else the `enum` values or consts.
pub(super) fn choice_list(property: &Value) -> Option<String> {
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
