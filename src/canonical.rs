//! Canonical JSON: object keys sorted, no whitespace.
//!
//! Used wherever two parties must agree on the bytes of a JSON value: the arguments digest bound
//! into a sealed token and the cache key of a compiled form validator.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::jsonrpc::RawObject;

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

/// SHA-256 of the canonical form of JSON `text`, read without building a tree and with every
/// number kept exactly as written: `1e400` and integers beyond 64 bits are bound as they are, not
/// as the nearest `f64`. Refuses a repeated object key at any depth, and anything not JSON.
pub(crate) fn digest_raw(raw: &RawValue) -> Result<[u8; 32], serde_json::Error> {
    let mut out = Vec::with_capacity(raw.get().len());
    write_raw(raw, &mut out, 0)?;
    Ok(Sha256::digest(out).into())
}

/// The canonical form of JSON `raw` (keys sorted, no whitespace, one spelling per string,
/// numbers as written), read without building a tree.
pub(crate) fn canonical_raw(raw: &RawValue) -> Result<Box<RawValue>, serde_json::Error> {
    let mut out = Vec::with_capacity(raw.get().len());
    write_raw(raw, &mut out, 0)?;
    // The writer only emits JSON it read, re-spelled: this never fails on its output.
    let text = String::from_utf8(out).map_err(serde::de::Error::custom)?;
    RawValue::from_string(text)
}

/// As deep as serde_json itself nests before it refuses.
const MAX_DEPTH: usize = 128;

fn write_raw(raw: &RawValue, out: &mut Vec<u8>, depth: usize) -> Result<(), serde_json::Error> {
    if depth >= MAX_DEPTH {
        return Err(serde::de::Error::custom("recursion limit exceeded"));
    }
    let text = raw.get().trim_matches(|c: char| c.is_ascii_whitespace());
    match text.as_bytes().first() {
        Some(b'{') => {
            let RawObject(mut entries) = serde_json::from_str::<RawObject<'_>>(text)?;
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(&key, out);
                out.push(b':');
                write_raw(item, out, depth + 1)?;
            }
            out.push(b'}');
        }
        Some(b'[') => {
            let items = serde_json::from_str::<Vec<&RawValue>>(text)?;
            out.push(b'[');
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_raw(item, out, depth + 1)?;
            }
            out.push(b']');
        }
        Some(b'"') => {
            // One spelling for every string: `"\u0041"` and `"A"` are the same argument.
            let string = serde_json::from_str::<Cow<'_, str>>(text)?;
            write_str(&string, out);
        }
        // Numbers, `true`, `false`, `null`: exactly as written (RawValue already checked them).
        _ => out.extend_from_slice(text.as_bytes()),
    }
    Ok(())
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

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn raw_digests_ignore_order_space_and_string_escapes_but_keep_numbers_exact() {
        let a = digest_raw(&raw(r#"{"x": 1, "y": {"p": "A", "q": [1, 2]}}"#)).unwrap();
        let b = digest_raw(&raw(r#"{"y":{"q":[1,2],"p":"A"},"x":1}"#)).unwrap();
        assert_eq!(a, b);
        let big = digest_raw(&raw(r#"{"n": 18446744073709551616}"#)).unwrap();
        let bigger = digest_raw(&raw(r#"{"n": 18446744073709551617}"#)).unwrap();
        assert_ne!(big, bigger);
        assert!(digest_raw(&raw(r#"{"n": 1e400}"#)).is_ok());
        assert!(digest_raw(&raw(r#"{"a": {"k": 1, "k": 2}}"#)).is_err());
        assert!(digest_raw(&raw(r#"[{"k": 1, "k": 2}]"#)).is_err());
    }

    #[test]
    fn raw_and_value_digests_agree_on_ordinary_json() {
        let text = r#"{"b": [true, null, "s", {"z": 1, "a": -2}], "a": "é\\n"}"#;
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(digest_raw(&raw(text)).unwrap(), digest(&value));
    }

    #[test]
    fn equal_values_in_any_key_order_have_one_digest() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":{"p":2,"q":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "y": {"q":3,"p":2}, "x": 1 }"#).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"x": 2})));
    }
}
