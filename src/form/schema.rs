//! The MCP restricted form-schema subset and a checker for it.
//!
//! MCP form elicitation (`ElicitRequestFormParams.requestedSchema`, protocol 2026-07-28) allows
//! only a flat object of primitive fields. [`check`] accepts exactly the following and rejects
//! everything else.
//!
//! # The root
//!
//! A JSON object with:
//!
//! - `type`: the string `"object"` (required);
//! - `properties`: an object, possibly empty, mapping each field name to a property schema
//!   (required);
//! - `required` (optional): an array of distinct strings, each naming a key of `properties`;
//! - `$schema`, `title`, `description` (optional): strings.
//!
//! No other keyword is allowed at the root: `additionalProperties`, `patternProperties`, `$ref`,
//! `$defs`, `allOf`, `if`, … are all rejected.
//!
//! # Property schemas
//!
//! Every property schema is a JSON object with a string `type`, optional string `title` and
//! `description`, and only the keywords listed for its shape:
//!
//! | shape | `type` | other keywords |
//! | --- | --- | --- |
//! | string | `"string"` | `minLength`, `maxLength`, `format`, `default` |
//! | number | `"number"` or `"integer"` | `minimum`, `maximum`, `default` |
//! | boolean | `"boolean"` | `default` |
//! | enum (untitled, or legacy titled) | `"string"` | `enum` (required), `enumNames`, `default` |
//! | titled enum | `"string"` | `oneOf` (required), `default` |
//! | untitled multi-select | `"array"` | `items: {"type": "string", "enum": [..]}` (required), `minItems`, `maxItems`, `default` |
//! | titled multi-select | `"array"` | `items: {"anyOf": [..]}` (required), `minItems`, `maxItems`, `default` |
//!
//! A string property is an enum when it has `enum`, a titled enum when it has `oneOf`; it cannot
//! have both. A multi-select's `items` may also carry string `title` and `description`.
//!
//! The values of those keywords must be:
//!
//! - `minLength`, `maxLength`, `minItems`, `maxItems`: non-negative integers (a whole number
//!   written as `5.0` counts), the minimum not above the maximum;
//! - `minimum`, `maximum`: numbers, `minimum` not above `maximum`;
//! - `format`: one of `"email"`, `"uri"`, `"date"`, `"date-time"`;
//! - `enum`: a non-empty array of distinct strings;
//! - `oneOf` / `anyOf`: a non-empty array of `{"const": string, "title": string}` objects (no
//!   other keys) with distinct `const`s;
//! - `enumNames`: an array of strings as long as `enum`;
//! - `default`: a value of the property's type: a string check_default_size `minLength`/`maxLength`
//!   (counted in Unicode code points); a number (a whole number for `"integer"`) check_default_size
//!   `minimum`/`maximum`; a boolean; for an enum, one of its values; for a multi-select, an array
//!   of its values with a length check_default_size `minItems`/`maxItems`.
//!
//! `check` does not validate a string `default` against `format`.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Number, Value};

/// Where and why a `requestedSchema` leaves the MCP form subset.
///
/// Why [`Gate::form`](crate::Gate::form) refused a schema. Its [`Display`](fmt::Display) reads
/// `requestedSchema is outside the MCP form subset at /properties/x: <reason>`, the root being
/// shown as `/`.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormSchemaError {
    /// JSON Pointer (RFC 6901) into the schema to the offending value, such as
    /// `/properties/note/maxLength`; empty for the root.
    pub path: String,
    /// Why the value at [`path`](Self::path) is outside the subset, such as
    /// ``"`maxLength` must be a non-negative integer"``.
    pub reason: String,
}

impl FormSchemaError {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FormSchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(
            f,
            "requestedSchema is outside the MCP form subset at {path}: {}",
            self.reason
        )
    }
}

impl std::error::Error for FormSchemaError {}

/// Checks that `schema` is inside the MCP form-schema subset described in the
/// [module documentation](self) (see `accepts_the_deploy_form` and `rejects_nested_objects_and_arrays_of_objects` below for examples).
///
/// Returns the first departure found; the checks run in a fixed order (root `type`, root
/// keywords, each property in the map's order, then `required`), so the same schema always gives
/// the same error.
///
/// # Errors
///
/// A [`FormSchemaError`] naming the JSON Pointer of the offending value and the reason.
pub(crate) fn check(schema: &Value) -> Result<(), FormSchemaError> {
    let root = schema
        .as_object()
        .ok_or_else(|| FormSchemaError::new("", "requestedSchema must be a JSON object"))?;

    match root.get("type") {
        None => {
            return Err(FormSchemaError::new(
                "",
                "`type` is required and must be \"object\"",
            ));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => return Err(FormSchemaError::new("/type", "`type` must be \"object\"")),
    }

    for (key, value) in root {
        match key.as_str() {
            "type" | "properties" | "required" => {}
            "$schema" | "title" | "description" => {
                if !value.is_string() {
                    return Err(FormSchemaError::new(
                        pointer("", key),
                        format!("`{key}` must be a string"),
                    ));
                }
            }
            _ => {
                return Err(FormSchemaError::new(
                    pointer("", key),
                    format!("`{key}` is not allowed in a form schema"),
                ));
            }
        }
    }

    let properties = match root.get("properties") {
        None => return Err(FormSchemaError::new("", "`properties` is required")),
        Some(Value::Object(properties)) => properties,
        Some(_) => {
            return Err(FormSchemaError::new(
                "/properties",
                "`properties` must be an object",
            ));
        }
    };
    for (name, property) in properties {
        check_property(&pointer("/properties", name), property)?;
    }

    if let Some(required) = root.get("required") {
        let names = required.as_array().ok_or_else(|| {
            FormSchemaError::new("/required", "`required` must be an array of strings")
        })?;
        let mut seen = HashSet::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let at = || format!("/required/{i}");
            let name = name
                .as_str()
                .ok_or_else(|| FormSchemaError::new(at(), "`required` must hold strings"))?;
            if !properties.contains_key(name) {
                return Err(FormSchemaError::new(
                    at(),
                    format!("`required` names `{name}`, which is not a property"),
                ));
            }
            if !seen.insert(name) {
                return Err(FormSchemaError::new(
                    at(),
                    format!("`required` names `{name}` twice"),
                ));
            }
        }
    }
    Ok(())
}

/// The shapes a property schema can take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    String,
    Number,
    Integer,
    Boolean,
    Enum,
    TitledEnum,
    MultiSelect,
}

impl Shape {
    /// The keywords allowed on a property of this shape.
    fn allows(self, keyword: &str) -> bool {
        matches!(keyword, "type" | "title" | "description" | "default")
            || match self {
                Shape::String => matches!(keyword, "minLength" | "maxLength" | "format"),
                Shape::Number | Shape::Integer => matches!(keyword, "minimum" | "maximum"),
                Shape::Boolean => false,
                Shape::Enum => matches!(keyword, "enum" | "enumNames"),
                Shape::TitledEnum => keyword == "oneOf",
                Shape::MultiSelect => matches!(keyword, "items" | "minItems" | "maxItems"),
            }
    }

    /// "a string property", "an enum property", … for error reasons.
    fn describe(self) -> &'static str {
        match self {
            Shape::String => "a string property",
            Shape::Number => "a number property",
            Shape::Integer => "an integer property",
            Shape::Boolean => "a boolean property",
            Shape::Enum => "an enum property",
            Shape::TitledEnum => "a titled enum (`oneOf`) property",
            Shape::MultiSelect => "a multi-select property",
        }
    }
}

fn check_property(at: &str, property: &Value) -> Result<(), FormSchemaError> {
    let object = property
        .as_object()
        .ok_or_else(|| FormSchemaError::new(at, "a property must be a schema object"))?;

    let shape = match object.get("type") {
        None => return Err(FormSchemaError::new(at, "`type` is required")),
        Some(Value::String(t)) => match t.as_str() {
            "string" if object.contains_key("oneOf") => Shape::TitledEnum,
            "string" if object.contains_key("enum") => Shape::Enum,
            "string" => Shape::String,
            "number" => Shape::Number,
            "integer" => Shape::Integer,
            "boolean" => Shape::Boolean,
            "array" => Shape::MultiSelect,
            "object" => {
                return Err(FormSchemaError::new(
                    format!("{at}/type"),
                    "nested objects are not allowed in a form",
                ));
            }
            _ => return Err(bad_property_type(at)),
        },
        Some(_) => return Err(bad_property_type(at)),
    };

    for (keyword, value) in object {
        if !shape.allows(keyword) {
            return Err(FormSchemaError::new(
                pointer(at, keyword),
                format!("`{keyword}` is not allowed on {}", shape.describe()),
            ));
        }
        if matches!(keyword.as_str(), "title" | "description") && !value.is_string() {
            return Err(FormSchemaError::new(
                pointer(at, keyword),
                format!("`{keyword}` must be a string"),
            ));
        }
    }

    match shape {
        Shape::String => check_string(at, object),
        Shape::Number | Shape::Integer => check_number(at, object, shape == Shape::Integer),
        Shape::Boolean => match object.get("default") {
            Some(default) if !default.is_boolean() => Err(FormSchemaError::new(
                format!("{at}/default"),
                "`default` must be a boolean",
            )),
            _ => Ok(()),
        },
        Shape::Enum => check_enum(at, object),
        Shape::TitledEnum => check_titled_enum(at, object),
        Shape::MultiSelect => check_multi_select(at, object),
    }
}

fn bad_property_type(at: &str) -> FormSchemaError {
    FormSchemaError::new(
        format!("{at}/type"),
        "`type` must be one of \"string\", \"number\", \"integer\", \"boolean\" or \"array\"",
    )
}

fn check_string(at: &str, object: &Map<String, Value>) -> Result<(), FormSchemaError> {
    let (min, max) = length_bounds(at, object, "minLength", "maxLength")?;
    if let Some(format) = object.get("format")
        && !matches!(
            format.as_str(),
            Some("email" | "uri" | "date" | "date-time")
        )
    {
        return Err(FormSchemaError::new(
            format!("{at}/format"),
            "`format` must be one of \"email\", \"uri\", \"date\" or \"date-time\"",
        ));
    }
    if let Some(default) = object.get("default") {
        let at = format!("{at}/default");
        let default = default
            .as_str()
            .ok_or_else(|| FormSchemaError::new(&at, "`default` must be a string"))?;
        let length = default.chars().count() as u64;
        check_default_size(
            &at,
            length,
            (min, max),
            ["is shorter than `minLength`", "is longer than `maxLength`"],
        )?;
    }
    Ok(())
}

/// Whether a `default` of `size` (characters or items) is check_default_size the bounds `(min, max)`; the
/// error says which it breaks, in the words given for each.
fn check_default_size(
    at: &str,
    size: u64,
    (min, max): (Option<u64>, Option<u64>),
    [below, above]: [&str; 2],
) -> Result<(), FormSchemaError> {
    let broken = if min.is_some_and(|min| size < min) {
        below
    } else if max.is_some_and(|max| size > max) {
        above
    } else {
        return Ok(());
    };
    Err(FormSchemaError::new(at, format!("`default` {broken}")))
}

fn check_number(
    at: &str,
    object: &Map<String, Value>,
    integer: bool,
) -> Result<(), FormSchemaError> {
    let bound = |keyword: &str| -> Result<Option<f64>, FormSchemaError> {
        match object.get(keyword) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(FormSchemaError::new(
                pointer(at, keyword),
                format!("`{keyword}` must be a number"),
            )),
        }
    };
    let minimum = bound("minimum")?;
    let maximum = bound("maximum")?;
    if let (Some(minimum), Some(maximum)) = (minimum, maximum)
        && minimum > maximum
    {
        return Err(FormSchemaError::new(
            format!("{at}/minimum"),
            "`minimum` must not be greater than `maximum`",
        ));
    }
    if let Some(default) = object.get("default") {
        let at = format!("{at}/default");
        let Value::Number(n) = default else {
            let reason = if integer {
                "`default` must be an integer"
            } else {
                "`default` must be a number"
            };
            return Err(FormSchemaError::new(at, reason));
        };
        if integer && !is_whole(n) {
            return Err(FormSchemaError::new(
                at,
                "`default` must be a whole number for an integer property",
            ));
        }
        let value = n.as_f64().unwrap_or(f64::NAN);
        if minimum.is_some_and(|minimum| value < minimum) {
            return Err(FormSchemaError::new(at, "`default` is below `minimum`"));
        }
        if maximum.is_some_and(|maximum| value > maximum) {
            return Err(FormSchemaError::new(at, "`default` is above `maximum`"));
        }
    }
    Ok(())
}

fn check_enum(at: &str, object: &Map<String, Value>) -> Result<(), FormSchemaError> {
    let values = string_list(&format!("{at}/enum"), object.get("enum"), "enum")?;
    if let Some(names) = object.get("enumNames") {
        let names_at = format!("{at}/enumNames");
        let names = names.as_array().ok_or_else(|| {
            FormSchemaError::new(&names_at, "`enumNames` must be an array of strings")
        })?;
        if let Some(i) = names.iter().position(|name| !name.is_string()) {
            return Err(FormSchemaError::new(
                format!("{names_at}/{i}"),
                "`enumNames` must hold strings",
            ));
        }
        if names.len() != values.len() {
            return Err(FormSchemaError::new(
                names_at,
                "`enumNames` must have as many entries as `enum`",
            ));
        }
    }
    check_choice_default(at, object, &values)
}

fn check_titled_enum(at: &str, object: &Map<String, Value>) -> Result<(), FormSchemaError> {
    let values = titled_options(&format!("{at}/oneOf"), object.get("oneOf"), "oneOf")?;
    check_choice_default(at, object, &values)
}

fn check_choice_default(
    at: &str,
    object: &Map<String, Value>,
    values: &[&str],
) -> Result<(), FormSchemaError> {
    match object.get("default") {
        None => Ok(()),
        Some(Value::String(default)) if values.contains(&default.as_str()) => Ok(()),
        Some(Value::String(_)) => Err(FormSchemaError::new(
            format!("{at}/default"),
            "`default` must be one of the allowed values",
        )),
        Some(_) => Err(FormSchemaError::new(
            format!("{at}/default"),
            "`default` must be a string",
        )),
    }
}

/// A multi-select: an array of strings listed in `items` (`enum`, or titled in `anyOf`), with
/// optional bounds on how many are chosen and a default choice.
fn check_multi_select(at: &str, object: &Map<String, Value>) -> Result<(), FormSchemaError> {
    let items_at = format!("{at}/items");
    let items = multi_select_items(at, &items_at, object)?;
    let values = multi_select_values(&items_at, items)?;
    let bounds = length_bounds(at, object, "minItems", "maxItems")?;
    if let Some(default) = object.get("default") {
        check_multi_select_default(&format!("{at}/default"), default, &values, bounds)?;
    }
    Ok(())
}

/// A multi-select's `items`: a schema object, not of objects nor of arrays.
fn multi_select_items<'o>(
    at: &str,
    items_at: &str,
    object: &'o Map<String, Value>,
) -> Result<&'o Map<String, Value>, FormSchemaError> {
    let items = match object.get("items") {
        None => {
            return Err(FormSchemaError::new(
                at,
                "a multi-select needs `items` listing its strings in `enum` or `anyOf`",
            ));
        }
        Some(Value::Object(items)) => items,
        Some(_) => {
            return Err(FormSchemaError::new(
                items_at,
                "`items` must be a schema object",
            ));
        }
    };
    match items.get("type").and_then(Value::as_str) {
        Some("object") => Err(FormSchemaError::new(
            format!("{items_at}/type"),
            "arrays of objects are not allowed in a form",
        )),
        Some("array") => Err(FormSchemaError::new(
            format!("{items_at}/type"),
            "nested arrays are not allowed in a form",
        )),
        _ => Ok(items),
    }
}

/// The strings a multi-select's `items` allow, from `enum` (with `type` `"string"`) or from
/// titled `anyOf` options; no other keyword but `title` and `description`.
fn multi_select_values<'i>(
    items_at: &str,
    items: &'i Map<String, Value>,
) -> Result<Vec<&'i str>, FormSchemaError> {
    let titled = items.contains_key("anyOf");
    if !titled && !items.contains_key("enum") {
        return Err(FormSchemaError::new(
            items_at,
            "`items` must list the allowed strings in `enum` or `anyOf`",
        ));
    }
    for (keyword, value) in items {
        let allowed = match keyword.as_str() {
            "title" | "description" => {
                if !value.is_string() {
                    return Err(FormSchemaError::new(
                        pointer(items_at, keyword),
                        format!("`{keyword}` must be a string"),
                    ));
                }
                true
            }
            "anyOf" => true,
            "type" | "enum" => !titled,
            _ => false,
        };
        if !allowed {
            let reason = if titled {
                format!("`{keyword}` is not allowed in `items` with `anyOf`")
            } else {
                format!("`{keyword}` is not allowed in `items` with `enum`")
            };
            return Err(FormSchemaError::new(pointer(items_at, keyword), reason));
        }
    }
    if titled {
        return titled_options(&format!("{items_at}/anyOf"), items.get("anyOf"), "anyOf");
    }
    if items.get("type").and_then(Value::as_str) != Some("string") {
        return Err(FormSchemaError::new(
            format!("{items_at}/type"),
            "`items` with `enum` must have `type` \"string\"",
        ));
    }
    string_list(&format!("{items_at}/enum"), items.get("enum"), "enum")
}

/// A multi-select's `default`, at `at`: an array of allowed strings, as many as the bounds allow.
fn check_multi_select_default(
    at: &str,
    default: &Value,
    values: &[&str],
    bounds: (Option<u64>, Option<u64>),
) -> Result<(), FormSchemaError> {
    let default = default
        .as_array()
        .ok_or_else(|| FormSchemaError::new(at, "`default` must be an array of strings"))?;
    for (i, item) in default.iter().enumerate() {
        match item.as_str() {
            Some(item) if values.contains(&item) => {}
            Some(_) => {
                return Err(FormSchemaError::new(
                    format!("{at}/{i}"),
                    "`default` must hold only allowed values",
                ));
            }
            None => {
                return Err(FormSchemaError::new(
                    format!("{at}/{i}"),
                    "`default` must be an array of strings",
                ));
            }
        }
    }
    check_default_size(
        at,
        default.len() as u64,
        bounds,
        [
            "has fewer items than `minItems`",
            "has more items than `maxItems`",
        ],
    )
}

/// Reads an optional pair of non-negative integer bounds and checks `min <= max`.
fn length_bounds(
    at: &str,
    object: &Map<String, Value>,
    min_keyword: &str,
    max_keyword: &str,
) -> Result<(Option<u64>, Option<u64>), FormSchemaError> {
    let bound = |keyword: &str| -> Result<Option<u64>, FormSchemaError> {
        match object.get(keyword) {
            None => Ok(None),
            Some(value) => non_negative_integer(value).map(Some).ok_or_else(|| {
                FormSchemaError::new(
                    pointer(at, keyword),
                    format!("`{keyword}` must be a non-negative integer"),
                )
            }),
        }
    };
    let min = bound(min_keyword)?;
    let max = bound(max_keyword)?;
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(FormSchemaError::new(
            pointer(at, min_keyword),
            format!("`{min_keyword}` must not be greater than `{max_keyword}`"),
        ));
    }
    Ok((min, max))
}

/// A non-empty array of distinct strings (`enum`).
fn string_list<'a>(
    at: &str,
    value: Option<&'a Value>,
    keyword: &str,
) -> Result<Vec<&'a str>, FormSchemaError> {
    distinct(
        at,
        value,
        &format!("`{keyword}` must be a non-empty array of strings"),
        |item_at, item| {
            item.as_str().ok_or_else(|| {
                FormSchemaError::new(item_at, format!("`{keyword}` must hold strings"))
            })
        },
        |item_at| FormSchemaError::new(item_at, format!("`{keyword}` values must be distinct")),
    )
}

/// A non-empty array of `{"const": string, "title": string}` with distinct consts (`oneOf`,
/// `anyOf`); returns the consts.
fn titled_options<'a>(
    at: &str,
    value: Option<&'a Value>,
    keyword: &str,
) -> Result<Vec<&'a str>, FormSchemaError> {
    let option = |option_at: &str, option: &'a Value| {
        let option = option.as_object().ok_or_else(|| {
            FormSchemaError::new(
                option_at,
                format!("a `{keyword}` option must be an object with `const` and `title`"),
            )
        })?;
        if let Some(key) = option
            .keys()
            .find(|k| !matches!(k.as_str(), "const" | "title"))
        {
            return Err(FormSchemaError::new(
                pointer(option_at, key),
                format!("`{key}` is not allowed in a `{keyword}` option"),
            ));
        }
        let value = option.get("const").and_then(Value::as_str).ok_or_else(|| {
            FormSchemaError::new(
                option_at,
                format!("a `{keyword}` option needs a string `const`"),
            )
        })?;
        if !option.get("title").is_some_and(Value::is_string) {
            return Err(FormSchemaError::new(
                option_at,
                format!("a `{keyword}` option needs a string `title`"),
            ));
        }
        Ok(value)
    };
    distinct(
        at,
        value,
        &format!("`{keyword}` must be a non-empty array of {{\"const\", \"title\"}} options"),
        option,
        |option_at| {
            FormSchemaError::new(
                format!("{option_at}/const"),
                format!("`{keyword}` options must have distinct `const` values"),
            )
        },
    )
}

/// A non-empty array whose items each give a string (`read`, told where the item is), no two
/// the same (else `repeated` says so, told where): those strings.
fn distinct<'a>(
    at: &str,
    value: Option<&'a Value>,
    not_list: &str,
    mut read: impl FnMut(&str, &'a Value) -> Result<&'a str, FormSchemaError>,
    repeated: impl Fn(&str) -> FormSchemaError,
) -> Result<Vec<&'a str>, FormSchemaError> {
    let items = value
        .and_then(Value::as_array)
        .filter(|items| !items.is_empty())
        .ok_or_else(|| FormSchemaError::new(at, not_list))?;
    let mut values = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_at = format!("{at}/{i}");
        let value = read(&item_at, item)?;
        if values.contains(&value) {
            return Err(repeated(&item_at));
        }
        values.push(value);
    }
    Ok(values)
}

/// `value` as a non-negative integer; a whole float such as `5.0` counts, as in JSON Schema.
fn non_negative_integer(value: &Value) -> Option<u64> {
    let n = value.as_number()?;
    if let Some(n) = n.as_u64() {
        return Some(n);
    }
    let f = n.as_f64()?;
    // `u64::MAX as f64` rounds up to 2^64, so `<` keeps the cast in range.
    (f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64)
}

/// Whether `n` is a whole number (`1.0` is), as JSON Schema's `integer` type counts it.
fn is_whole(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// `base` joined with the JSON Pointer segment for `key` (`~` and `/` escaped).
fn pointer(base: &str, key: &str) -> String {
    let key: Cow<'_, str> = if key.contains(['~', '/']) {
        Cow::Owned(key.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(key)
    };
    format!("{base}/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(properties: Value) -> Value {
        json!({"type": "object", "properties": properties})
    }

    fn prop(property: Value) -> Value {
        form(json!({ "x": property }))
    }

    #[track_caller]
    fn accepted(schema: Value) {
        if let Err(err) = check(&schema) {
            panic!("expected {schema} to be accepted, got: {err}");
        }
    }

    #[track_caller]
    fn rejected(schema: Value, path: &str, reason_contains: &str) -> FormSchemaError {
        let err = check(&schema).expect_err("expected rejection");
        assert_eq!(err.path, path, "wrong path for {schema}: {err}");
        assert!(
            err.reason.contains(reason_contains),
            "reason {:?} does not contain {reason_contains:?}",
            err.reason
        );
        err
    }

    #[test]
    fn accepts_empty_properties_and_root_metadata() {
        accepted(form(json!({})));
        accepted(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "title": "Deploy",
            "description": "Approve the deploy",
            "properties": {},
            "required": []
        }));
    }

    #[test]
    fn accepts_the_deploy_form() {
        accepted(json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 200}
            },
            "required": ["approve"]
        }));
    }

    #[test]
    fn accepts_string_shapes() {
        accepted(prop(json!({"type": "string"})));
        accepted(prop(json!({
            "type": "string", "title": "Email", "description": "Your email",
            "minLength": 3, "maxLength": 100, "format": "email", "default": "a@b.co"
        })));
        for format in ["email", "uri", "date", "date-time"] {
            accepted(prop(json!({"type": "string", "format": format})));
        }
        accepted(prop(
            json!({"type": "string", "minLength": 2.0, "maxLength": 2}),
        ));
        // Length is counted in code points: "éé" is 2 characters, 4 bytes.
        accepted(prop(
            json!({"type": "string", "maxLength": 2, "default": "éé"}),
        ));
    }

    #[test]
    fn accepts_number_and_integer_shapes() {
        accepted(prop(json!({
            "type": "number", "title": "Ratio", "minimum": 0, "maximum": 1.5, "default": 0.5
        })));
        accepted(prop(json!({
            "type": "integer", "minimum": 0.5, "maximum": 99.5, "default": 18
        })));
        accepted(prop(json!({"type": "integer", "default": 1.0})));
        accepted(prop(json!({"type": "integer", "default": -3})));
        accepted(prop(
            json!({"type": "number", "minimum": -1, "maximum": -1}),
        ));
    }

    #[test]
    fn accepts_boolean_shape() {
        accepted(prop(
            json!({"type": "boolean", "title": "OK?", "default": false}),
        ));
    }

    #[test]
    fn accepts_untitled_and_legacy_enums() {
        accepted(prop(json!({
            "type": "string", "enum": ["staging", "production"], "default": "staging"
        })));
        accepted(prop(json!({
            "type": "string", "title": "Env",
            "enum": ["staging", "production"],
            "enumNames": ["Staging", "Production"],
            "default": "production"
        })));
    }

    #[test]
    fn accepts_titled_enum() {
        accepted(prop(json!({
            "type": "string", "description": "Where to",
            "oneOf": [
                {"const": "stg", "title": "Staging"},
                {"const": "prd", "title": "Production"}
            ],
            "default": "prd"
        })));
    }

    #[test]
    fn accepts_untitled_multi_select() {
        accepted(prop(json!({
            "type": "array", "minItems": 1, "maxItems": 2,
            "items": {"type": "string", "enum": ["a", "b", "c"]},
            "default": ["a", "c"]
        })));
    }

    #[test]
    fn accepts_titled_multi_select() {
        accepted(prop(json!({
            "type": "array", "title": "Tags",
            "items": {"anyOf": [
                {"const": "a", "title": "A"},
                {"const": "b", "title": "B"}
            ]},
            "default": []
        })));
    }

    #[test]
    fn rejects_a_non_object_root() {
        let err = rejected(json!([1, 2]), "", "must be a JSON object");
        assert_eq!(
            err.to_string(),
            "requestedSchema is outside the MCP form subset at /: requestedSchema must be a JSON object"
        );
        rejected(json!(true), "", "must be a JSON object");
    }

    #[test]
    fn rejects_a_root_type_other_than_object() {
        rejected(json!({"type": "string"}), "/type", "must be \"object\"");
        rejected(json!({"properties": {}}), "", "`type` is required");
    }

    #[test]
    fn rejects_missing_or_bad_properties() {
        rejected(json!({"type": "object"}), "", "`properties` is required");
        rejected(
            json!({"type": "object", "properties": []}),
            "/properties",
            "must be an object",
        );
    }

    #[test]
    fn rejects_unknown_root_keywords() {
        for keyword in [
            "additionalProperties",
            "$ref",
            "$defs",
            "allOf",
            "patternProperties",
        ] {
            let mut schema = form(json!({}));
            schema[keyword] = json!({});
            let err = rejected(schema, &format!("/{keyword}"), "is not allowed");
            assert_eq!(
                err.reason,
                format!("`{keyword}` is not allowed in a form schema")
            );
        }
        rejected(
            json!({"type": "object", "properties": {}, "title": 3}),
            "/title",
            "`title` must be a string",
        );
    }

    #[test]
    fn rejects_nested_objects_and_arrays_of_objects() {
        rejected(
            prop(json!({"type": "object", "properties": {}})),
            "/properties/x/type",
            "nested objects are not allowed in a form",
        );
        rejected(
            prop(json!({"type": "array", "items": {"type": "object", "properties": {}}})),
            "/properties/x/items/type",
            "arrays of objects are not allowed in a form",
        );
        rejected(
            prop(json!({"type": "array", "items": {"type": "array"}})),
            "/properties/x/items/type",
            "nested arrays",
        );
    }

    #[test]
    fn rejects_arrays_without_enum_items() {
        rejected(
            prop(json!({"type": "array", "items": {"type": "string"}})),
            "/properties/x/items",
            "`enum` or `anyOf`",
        );
        rejected(
            prop(json!({"type": "array"})),
            "/properties/x",
            "needs `items`",
        );
        rejected(
            prop(json!({"type": "array", "items": {"enum": ["a"]}})),
            "/properties/x/items/type",
            "\"string\"",
        );
        rejected(
            prop(json!({"type": "array", "items": {"oneOf": [{"const": "a", "title": "A"}]}})),
            "/properties/x/items",
            "`enum` or `anyOf`",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"type": "string", "anyOf": [{"const": "a", "title": "A"}]}}),
            ),
            "/properties/x/items/type",
            "not allowed in `items` with `anyOf`",
        );
    }

    #[test]
    fn rejects_unknown_property_keywords() {
        let err = rejected(
            prop(json!({"type": "string", "pattern": "^a"})),
            "/properties/x/pattern",
            "`pattern` is not allowed on a string property",
        );
        assert_eq!(
            err.to_string(),
            "requestedSchema is outside the MCP form subset at /properties/x/pattern: \
             `pattern` is not allowed on a string property"
        );
        rejected(
            prop(json!({"type": "boolean", "const": true})),
            "/properties/x/const",
            "not allowed on a boolean property",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a"], "minLength": 1})),
            "/properties/x/minLength",
            "not allowed on an enum property",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a"], "oneOf": [{"const": "a", "title": "A"}]})),
            "/properties/x/enum",
            "not allowed on a titled enum",
        );
        rejected(
            prop(json!({"type": "number", "exclusiveMinimum": 0})),
            "/properties/x/exclusiveMinimum",
            "not allowed on a number property",
        );
        rejected(
            prop(json!({"type": "string", "title": 1})),
            "/properties/x/title",
            "must be a string",
        );
    }

    #[test]
    fn rejects_bad_property_types() {
        rejected(
            prop(json!({"type": "null"})),
            "/properties/x/type",
            "must be one of",
        );
        rejected(
            prop(json!({"type": ["string", "null"]})),
            "/properties/x/type",
            "must be one of",
        );
        rejected(
            prop(json!({"title": "no type"})),
            "/properties/x",
            "`type` is required",
        );
        rejected(prop(json!(true)), "/properties/x", "schema object");
    }

    #[test]
    fn rejects_bad_bounds() {
        rejected(
            prop(json!({"type": "string", "maxLength": -1})),
            "/properties/x/maxLength",
            "`maxLength` must be a non-negative integer",
        );
        rejected(
            prop(json!({"type": "string", "minLength": 1.5})),
            "/properties/x/minLength",
            "non-negative integer",
        );
        rejected(
            prop(json!({"type": "string", "minLength": "3"})),
            "/properties/x/minLength",
            "non-negative integer",
        );
        rejected(
            prop(json!({"type": "string", "minLength": 5, "maxLength": 2})),
            "/properties/x/minLength",
            "must not be greater than `maxLength`",
        );
        rejected(
            prop(json!({"type": "integer", "minimum": 10, "maximum": 1})),
            "/properties/x/minimum",
            "must not be greater than `maximum`",
        );
        rejected(
            prop(json!({"type": "number", "maximum": "10"})),
            "/properties/x/maximum",
            "must be a number",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "minItems": 3, "maxItems": 1}),
            ),
            "/properties/x/minItems",
            "must not be greater than `maxItems`",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "maxItems": 0.5}),
            ),
            "/properties/x/maxItems",
            "non-negative integer",
        );
        rejected(
            prop(json!({"type": "string", "format": "ipv4"})),
            "/properties/x/format",
            "`format` must be one of",
        );
    }

    #[test]
    fn rejects_bad_enums_and_options() {
        rejected(
            prop(json!({"type": "string", "enum": []})),
            "/properties/x/enum",
            "non-empty array of strings",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a", 1]})),
            "/properties/x/enum/1",
            "must hold strings",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a", "a"]})),
            "/properties/x/enum/1",
            "distinct",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a", "b"], "enumNames": ["A"]})),
            "/properties/x/enumNames",
            "as many entries as `enum`",
        );
        rejected(
            prop(json!({"type": "string", "oneOf": []})),
            "/properties/x/oneOf",
            "non-empty array",
        );
        rejected(
            prop(json!({"type": "string", "oneOf": [{"const": "a"}]})),
            "/properties/x/oneOf/0",
            "needs a string `title`",
        );
        rejected(
            prop(json!({"type": "string", "oneOf": [{"const": 1, "title": "One"}]})),
            "/properties/x/oneOf/0",
            "needs a string `const`",
        );
        rejected(
            prop(
                json!({"type": "string", "oneOf": [{"const": "a", "title": "A", "description": "d"}]}),
            ),
            "/properties/x/oneOf/0/description",
            "not allowed in a `oneOf` option",
        );
        rejected(
            prop(
                json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "a", "title": "B"}]}),
            ),
            "/properties/x/oneOf/1/const",
            "distinct",
        );
        rejected(
            prop(json!({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}, "b"]}})),
            "/properties/x/items/anyOf/1",
            "must be an object",
        );
    }

    #[test]
    fn rejects_required_naming_a_non_property() {
        let err = rejected(
            json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a", "foo"]}),
            "/required/1",
            "",
        );
        assert_eq!(
            err.reason,
            "`required` names `foo`, which is not a property"
        );
        rejected(
            json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": "a"}),
            "/required",
            "must be an array",
        );
        rejected(
            json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a", "a"]}),
            "/required/1",
            "twice",
        );
        rejected(
            json!({"type": "object", "properties": {}, "required": [1]}),
            "/required/0",
            "must hold strings",
        );
    }

    #[test]
    fn rejects_defaults_of_the_wrong_type() {
        rejected(
            prop(json!({"type": "boolean", "default": "yes"})),
            "/properties/x/default",
            "must be a boolean",
        );
        rejected(
            prop(json!({"type": "string", "default": 5})),
            "/properties/x/default",
            "must be a string",
        );
        rejected(
            prop(json!({"type": "number", "default": "5"})),
            "/properties/x/default",
            "must be a number",
        );
        rejected(
            prop(json!({"type": "string", "enum": ["a"], "default": true})),
            "/properties/x/default",
            "must be a string",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": "a"}),
            ),
            "/properties/x/default",
            "array of strings",
        );
    }

    #[test]
    fn rejects_an_integer_default_that_is_not_whole() {
        rejected(
            prop(json!({"type": "integer", "default": 1.5})),
            "/properties/x/default",
            "whole number",
        );
    }

    #[test]
    fn rejects_defaults_outside_the_allowed_values() {
        rejected(
            prop(json!({"type": "string", "enum": ["a", "b"], "default": "c"})),
            "/properties/x/default",
            "one of the allowed values",
        );
        rejected(
            prop(
                json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}], "default": "A"}),
            ),
            "/properties/x/default",
            "one of the allowed values",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}, "default": ["a", "z"]}),
            ),
            "/properties/x/default/1",
            "only allowed values",
        );
        rejected(
            prop(
                json!({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1, "default": ["a", "b"]}),
            ),
            "/properties/x/default",
            "more items than `maxItems`",
        );
        rejected(
            prop(json!({"type": "string", "maxLength": 2, "default": "abc"})),
            "/properties/x/default",
            "longer than `maxLength`",
        );
        rejected(
            prop(json!({"type": "string", "minLength": 4, "default": "abc"})),
            "/properties/x/default",
            "shorter than `minLength`",
        );
        rejected(
            prop(json!({"type": "integer", "minimum": 18, "default": 17})),
            "/properties/x/default",
            "below `minimum`",
        );
    }

    #[test]
    fn escapes_property_names_in_paths() {
        rejected(
            form(json!({"a/b~c": {"type": "object"}})),
            "/properties/a~1b~0c/type",
            "nested objects",
        );
    }
}
