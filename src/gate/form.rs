//! What a form gate takes as its schema ([`IntoFormSchema`]), and a schemars schema made into
//! an MCP form's shape.

use serde_json::Value;
use serde_json::value::RawValue;

/// What [`Gate::form`](super::Gate::form) takes as a schema: JSON text (`&str`, `String`), kept in the order it
/// was written, or a [`Value`], kept in the order the value holds.
///
/// Sealed: only this crate implements it.
pub trait IntoFormSchema: sealed::Sealed {
    #[doc(hidden)]
    fn into_form_schema(self) -> Result<Box<RawValue>, String>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
    impl Sealed for serde_json::Value {}
    impl Sealed for &serde_json::Value {}
}

/// JSON text minified, its members in the order written; refused when it is not one JSON value
/// or repeats a key at any depth.
fn form_schema_text(text: &str) -> Result<Box<RawValue>, String> {
    let raw: Box<RawValue> =
        serde_json::from_str(text).map_err(|error| crate::wire::json::strip_position(&error))?;
    // The canonical pass is the one that finds a repeated key.
    crate::wire::canonical::canonical_raw(&raw).map_err(|error| error.to_string())?;
    crate::wire::canonical::minified_raw(&raw).map_err(|error| error.to_string())
}

impl IntoFormSchema for &str {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(self)
    }
}

impl IntoFormSchema for String {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(&self)
    }
}

impl IntoFormSchema for &String {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        form_schema_text(self)
    }
}

impl IntoFormSchema for Value {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        (&self).into_form_schema()
    }
}

impl IntoFormSchema for &Value {
    fn into_form_schema(self) -> Result<Box<RawValue>, String> {
        serde_json::value::to_raw_value(self).map_err(|error| error.to_string())
    }
}

/// Turns a schemars root schema into the shape of an MCP form: nullable `Option` fields become
/// plain optional ones, integer formats go, and a `null` default disappears.
#[cfg(feature = "schemars")]
pub(super) fn flatten_schemars(mut schema: Value) -> Value {
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for property in properties.values_mut() {
            let Some(object) = property.as_object_mut() else {
                continue;
            };
            // `Option<T>`: `"type": ["T", "null"]` …
            if let Some(Value::Array(types)) = object.get("type") {
                let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                if let [only] = non_null[..] {
                    let only = only.clone();
                    object.insert("type".into(), only);
                }
            }
            // … or `"anyOf": [{…}, {"type": "null"}]`.
            if let Some(Value::Array(variants)) = object.get("anyOf") {
                let non_null: Vec<&Value> = variants
                    .iter()
                    .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                    .collect();
                if let ([Value::Object(only)], true) =
                    (&non_null[..], non_null.len() < variants.len())
                {
                    let only = only.clone();
                    // `retain`, not `remove`: it keeps the other members in order whether or
                    // not serde_json preserves it (`remove` is `swap_remove` when it does).
                    object.retain(|key, _| key != "anyOf");
                    for (k, v) in only {
                        object.entry(k).or_insert(v);
                    }
                }
            }
            if object.get("default") == Some(&Value::Null) {
                object.retain(|key, _| key != "default");
            }
            let numeric = matches!(
                object.get("type").and_then(Value::as_str),
                Some("integer" | "number")
            );
            if numeric {
                object.retain(|key, _| key != "format");
            }
        }
    }
    schema
}
