//! Canonical JSON: object keys sorted, no whitespace.
//!
//! Used wherever two parties must agree on the bytes of a JSON value: the arguments digest bound
//! into a sealed token and the cache key of a compiled form validator.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Writes `value` as canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace,
/// strings and numbers as `serde_json` writes them.
pub(crate) fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write(value, &mut out);
    out
}

/// SHA-256 of the canonical JSON of `value`.
pub(crate) fn digest(value: &Value) -> [u8; 32] {
    Sha256::digest(canonical_json(value)).into()
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(key, out);
                out.push(b':');
                write(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Writing a scalar into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

fn write_str(key: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_at_every_level_and_drops_whitespace() {
        let v = json!({"b": 1, "a": {"y": [true, null], "x": "s"}});
        assert_eq!(
            canonical_json(&v),
            br#"{"a":{"x":"s","y":[true,null]},"b":1}"#
        );
    }

    #[test]
    fn equal_values_in_any_key_order_have_one_digest() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":{"p":2,"q":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "y": {"q":3,"p":2}, "x": 1 }"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"x": 2})));
    }
}
