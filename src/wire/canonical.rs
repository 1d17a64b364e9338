//! Canonical JSON: object keys sorted, no whitespace.
//!
//! Used wherever two parties must agree on the bytes of a JSON value: the arguments digest bound
//! into a sealed token and the cache key of a compiled form validator. The same one-pass writer
//! also minifies a text without sorting it ([`minified_raw`]): what a client is shown keeps the
//! order its author wrote.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::json::duplicate;

/// The canonical text of `value`: the JSON serde_json writes of it, through the one writer.
///
/// # Errors
///
/// [`Error::TooDeep`] for a value nested deeper than serde_json reads.
pub(crate) fn canonical_value(value: &Value) -> Result<String, Error> {
    let text = value.to_string();
    let mut out = Vec::with_capacity(text.len());
    write_canonical(&text, &mut out)?;
    // The writer only emits JSON it read, re-spelled.
    String::from_utf8(out).map_err(|_| Error::Syntax)
}

/// SHA-256 of the canonical form of JSON `text`, read in one pass without building a tree and
/// with every number kept exactly as written: `1e400` and integers beyond 64 bits are bound as
/// they are, not as the nearest `f64`. Refuses a repeated object key at any depth, and anything
/// not JSON.
pub(crate) fn digest_raw(raw: &RawValue) -> Result<[u8; 32], Error> {
    digest_text(raw.get())
}

/// [`digest_raw`] of a text.
pub(crate) fn digest_text(text: &str) -> Result<[u8; 32], Error> {
    let mut out = Vec::with_capacity(text.len());
    write_canonical(text, &mut out)?;
    Ok(Sha256::digest(out).into())
}

/// The canonical form of JSON `raw` (keys sorted, no whitespace, one spelling per string,
/// numbers as written), read in one pass without building a tree.
pub(crate) fn canonical_raw(raw: &RawValue) -> Result<Box<RawValue>, Error> {
    let mut out = Vec::with_capacity(raw.get().len());
    write_canonical(raw.get(), &mut out)?;
    // The writer only emits JSON it read, re-spelled: this never fails on its output.
    let text = String::from_utf8(out).map_err(|_| Error::Syntax)?;
    super::json::boxed_raw_value(&text).map_err(|_| Error::Syntax)
}

/// JSON `raw` minified: members in the order written, no whitespace, one spelling per string,
/// numbers as written, read in one pass without building a tree. Unlike [`canonical_raw`] it does
/// not look for repeated keys: take the canonical form first where that matters.
pub(crate) fn minified_raw(raw: &RawValue) -> Result<Box<RawValue>, Error> {
    let mut out = Vec::with_capacity(raw.get().len());
    write_json(raw.get(), &mut out, false)?;
    let text = String::from_utf8(out).map_err(|_| Error::Syntax)?;
    super::json::boxed_raw_value(&text).map_err(|_| Error::Syntax)
}

/// Why a text has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// Not JSON.
    Syntax,
    /// An object repeats this key.
    DuplicateKey(String),
    /// Nested deeper than serde_json itself reads.
    TooDeep,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Syntax => f.write_str("invalid JSON"),
            Self::DuplicateKey(key) => write!(f, "duplicate key {key:?}"),
            Self::TooDeep => f.write_str("recursion limit exceeded"),
        }
    }
}

impl std::error::Error for Error {}

/// As deep as serde_json itself nests containers before it refuses.
const MAX_DEPTH: usize = 127;

/// Writes the canonical form of JSON `text` to `out` in a single pass: values are copied as they
/// are read, and only an object whose keys come out of order has its members moved.
pub(crate) fn write_canonical(text: &str, out: &mut Vec<u8>) -> Result<(), Error> {
    write_json(text, out, true)
}

/// Writes JSON `text` to `out` without whitespace, its objects' members sorted when `sort`.
fn write_json(text: &str, out: &mut Vec<u8>, sort: bool) -> Result<(), Error> {
    let mut writer = Canonicalizer {
        src: text.as_bytes(),
        text,
        pos: 0,
        out,
        sort,
        members: Vec::with_capacity(16),
        scratch: Vec::new(),
    };
    writer.value(0)?;
    writer.skip_space();
    if writer.pos == writer.src.len() {
        Ok(())
    } else {
        Err(Error::Syntax)
    }
}

/// One member of an object being written: its key (as decoded) and where its `"key":value`
/// bytes sit in the output.
struct Member<'a> {
    key: Cow<'a, str>,
    start: usize,
    end: usize,
}

struct Canonicalizer<'a, 'o> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
    out: &'o mut Vec<u8>,
    /// Sort each object's members (canonical form), or keep them in the order written.
    sort: bool,
    /// The members of every object open on the way down, innermost last.
    members: Vec<Member<'a>>,
    /// Where an out-of-order object's members wait while they are written back sorted.
    scratch: Vec<u8>,
}

impl<'a> Canonicalizer<'a, '_> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.src.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Result<(), Error> {
        match self.peek().ok_or(Error::Syntax)? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => {
                let string = self.string()?;
                write_string(&string, self.out);
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::TooDeep);
        }
        self.pos += 1;
        self.out.push(b'{');
        let body = self.out.len();
        let base = self.members.len();
        let mut sorted = true;
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                if self.peek() != Some(b'"') {
                    return Err(Error::Syntax);
                }
                if self.members.len() > base {
                    self.out.push(b',');
                }
                let start = self.out.len();
                let key = self.string()?;
                if let Some(previous) = self.members[base..].last()
                    && previous.key.as_bytes() >= key.as_bytes()
                {
                    sorted = false;
                }
                write_string(&key, self.out);
                if self.peek() != Some(b':') {
                    return Err(Error::Syntax);
                }
                self.pos += 1;
                self.out.push(b':');
                self.value(depth)?;
                let end = self.out.len();
                self.members.push(Member { key, start, end });
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(Error::Syntax),
                }
            }
        }
        if !sorted && self.sort {
            self.sort_members(base, body)?;
        }
        self.members.truncate(base);
        self.out.push(b'}');
        Ok(())
    }

    /// Rewrites the members written since `body` in key order, refusing a repeated key.
    fn sort_members(&mut self, base: usize, body: usize) -> Result<(), Error> {
        let members = &mut self.members[base..];
        if let Some(key) = duplicate(members.iter().map(|member| member.key.as_ref())) {
            return Err(Error::DuplicateKey(key.to_owned()));
        }
        members.sort_unstable_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.out[body..]);
        self.out.truncate(body);
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out
                .extend_from_slice(&self.scratch[member.start - body..member.end - body]);
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::TooDeep);
        }
        self.pos += 1;
        self.out.push(b'[');
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                self.value(depth)?;
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        self.out.push(b',');
                    }
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(Error::Syntax),
                }
            }
        }
        self.out.push(b']');
        Ok(())
    }

    /// A string at `pos`, decoded: borrowed when it has no escapes, else decoded by serde_json.
    fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        let start = self.pos;
        let mut at = start + 1;
        // Most strings here are short keys and words: a plain loop beats a SIMD search.
        loop {
            match self.src.get(at) {
                None => return Err(Error::Syntax),
                Some(b'"') => break,
                Some(b'\\') => return self.escaped_string(start, at),
                // Control characters must be escaped in JSON.
                Some(&b) if b < 0x20 => return Err(Error::Syntax),
                Some(_) => at += 1,
            }
        }
        self.pos = at + 1;
        Ok(Cow::Borrowed(&self.text[start + 1..at]))
    }

    /// The rest of a string that has an escape at `at`, decoded by serde_json.
    fn escaped_string(&mut self, start: usize, mut at: usize) -> Result<Cow<'a, str>, Error> {
        loop {
            match memchr::memchr2(b'"', b'\\', &self.src[at..]) {
                None => return Err(Error::Syntax),
                Some(offset) if self.src[at + offset] == b'"' => {
                    at += offset;
                    break;
                }
                Some(offset) => {
                    at += offset + 2;
                    if at > self.src.len() {
                        return Err(Error::Syntax);
                    }
                }
            }
        }
        self.pos = at + 1;
        serde_json::from_str::<String>(&self.text[start..self.pos])
            .map(Cow::Owned)
            .map_err(|_| Error::Syntax)
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Error> {
        if self.src[self.pos..].starts_with(word) {
            self.pos += word.len();
            self.out.extend_from_slice(word);
            Ok(())
        } else {
            Err(Error::Syntax)
        }
    }

    /// A number, checked against RFC 8259's grammar and copied exactly as written.
    fn number(&mut self) -> Result<(), Error> {
        let start = self.pos;
        let digits = |s: &Self, mut at: usize| {
            let from = at;
            while s.src.get(at).is_some_and(u8::is_ascii_digit) {
                at += 1;
            }
            (at > from).then_some(at)
        };
        let mut at = start;
        if self.src.get(at) == Some(&b'-') {
            at += 1;
        }
        at = match self.src.get(at) {
            Some(b'0') => at + 1,
            Some(b'1'..=b'9') => digits(self, at).ok_or(Error::Syntax)?,
            _ => return Err(Error::Syntax),
        };
        if self.src.get(at) == Some(&b'.') {
            at = digits(self, at + 1).ok_or(Error::Syntax)?;
        }
        if let Some(b'e' | b'E') = self.src.get(at) {
            at += 1;
            if let Some(b'+' | b'-') = self.src.get(at) {
                at += 1;
            }
            at = digits(self, at).ok_or(Error::Syntax)?;
        }
        self.out.extend_from_slice(&self.src[start..at]);
        self.pos = at;
        Ok(())
    }
}

/// A string as read by [`Canonicalizer::string`]: one without escapes is written as it came (its
/// bytes are exactly what serde_json writes: it escapes only `"`, `\\` and control characters,
/// which cannot appear raw in JSON), a decoded one is re-escaped.
#[allow(clippy::ptr_arg)] // Borrowed or owned is the point: it says whether it was escaped.
fn write_string(string: &Cow<'_, str>, out: &mut Vec<u8>) {
    match string {
        Cow::Borrowed(raw) => {
            out.push(b'"');
            out.extend_from_slice(raw.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(decoded) => write_str(decoded, out),
    }
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
            canonical_value(&v).unwrap(),
            r#"{"a":{"x":"s","y":[true,null]},"b":1}"#
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
        assert_eq!(
            digest_raw(&raw(text)).unwrap(),
            digest_text(&canonical_value(&value).unwrap()).unwrap()
        );
    }

    fn canonical(text: &str) -> Result<String, Error> {
        let mut out = Vec::new();
        write_canonical(text, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn one_pass_sorts_and_respells_where_values_are_exact() {
        for (text, expected) in [
            (
                r#"{"b":{"z":[3,{"y":1,"x":2}],"a":null},"a":"\u0041\n","\u00e9":true,"e":false}"#,
                r#"{"a":"A\n","b":{"a":null,"z":[3,{"x":2,"y":1}]},"e":false,"é":true}"#,
            ),
            (
                r#" [ 1 , -2.5 , "x" , { } , [ ] , {"b":1,"a":2} ] "#,
                r#"[1,-2.5,"x",{},[],{"a":2,"b":1}]"#,
            ),
            (
                r#"{"k\"ey":1,"k":2,"a\\":3}"#,
                r#"{"a\\":3,"k":2,"k\"ey":1}"#,
            ),
            (r#""\ud83d\ude00/\/""#, r#""😀//""#),
            ("0", "0"),
        ] {
            assert_eq!(canonical(text).unwrap(), expected, "{text}");
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonical_value(&value).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn one_pass_refuses_what_is_not_json() {
        for text in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            "-",
            "1e",
            "+1",
            "tru",
            "nul",
            "\"a",
            "\"\t\"",
            "{\"a\" 1}",
            "{1:2}",
            "[1 2]",
            "1 2",
            "\"\\x\"",
            "\"\\ud800\"",
        ] {
            assert_eq!(canonical(text), Err(Error::Syntax), "{text:?}");
        }
        assert_eq!(
            canonical(r#"{"b":1,"a":{"k":1,"j":2,"k":3}}"#),
            Err(Error::DuplicateKey("k".into()))
        );
        assert_eq!(
            canonical(r#"{"a":1,"\u0061":2}"#),
            Err(Error::DuplicateKey("a".into()))
        );
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(canonical(&deep(127)).is_ok());
        assert_eq!(canonical(&deep(128)), Err(Error::TooDeep));
        assert!(serde_json::from_str::<Value>(&deep(127)).is_ok());
        assert!(serde_json::from_str::<Value>(&deep(128)).is_err());
    }

    #[test]
    fn minified_keeps_the_order_written_and_numbers_exact() {
        let text = "{ \"b\" : [1.50, 1e400, {\"z\":null, \"a\": \"\\u0079\\/\"}],\n  \"a\": {} }";
        assert_eq!(
            minified_raw(&raw(text)).unwrap().get(),
            r#"{"b":[1.50,1e400,{"z":null,"a":"y/"}],"a":{}}"#
        );
        // Its canonical form is the text's.
        let minified = minified_raw(&raw(text)).unwrap();
        assert_eq!(canonical(minified.get()), canonical(text));
    }

    #[test]
    fn the_value_writer_sorts_keys_whatever_order_the_map_keeps() {
        let mut map = serde_json::Map::new();
        map.insert("b".into(), json!(1));
        map.insert("a".into(), json!({"y": 2, "x": 1}));
        assert_eq!(
            canonical_value(&Value::Object(map)).unwrap(),
            r#"{"a":{"x":1,"y":2},"b":1}"#
        );
    }

    #[test]
    fn equal_values_in_any_key_order_have_one_canonical_text() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":{"p":2,"q":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{ "y": {"q":3,"p":2}, "x": 1 }"#).unwrap();
        assert_eq!(canonical_value(&a), canonical_value(&b));
        assert_ne!(canonical_value(&a), canonical_value(&json!({"x": 2})));
    }
}
