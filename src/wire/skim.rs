//! The fast path of the strict reader ([`Object::read`](super::json::Object::read) and
//! [`raw_value`](super::json::raw_value)):
//! one hand-written pass that finds where each value starts and ends, checking the JSON grammar
//! as serde_json checks a value it skips, without serde's call per token.
//!
//! Why hand-written: serde_json finds a `RawValue` by walking every token of the value through
//! its deserializer, and a `tools/call` retry carries its arguments, however large, in every
//! round. That walk was most of what the layer added to a retry with 64 KiB of arguments
//! (issue #41, ~16 instructions a byte; this pass takes about half), and, over the questions the
//! layer edits, a good part of a re-ask. No JSON crate offers a strict skip that yields
//! serde_json's borrowed `RawValue`, which the rest of the layer reads.
//!
//! How it stays exactly as strict as serde_json: it only ever *accepts*. Whatever it does not
//! recognize (a grammar error, a path member that is neither an object nor `null`, a key whose
//! escapes serde_json refuses (it decodes every escaped key), nesting deeper than
//! [`MAX_DEPTH`], a serde_json that no longer takes the raw-value hand-off below) makes it
//! answer `None`, and the caller reads the text with serde_json, which gives the authoritative
//! result and error. So an input it accepts is one serde_json accepts, read into the very same
//! members (unit tests compare the two over mutated texts, and the `inbound` fuzz target on
//! every body); an input it refuses costs one wasted pass.
//!
//! What it checks, as serde_json's `ignore_value` does: strings end, hold no control character
//! and only the escapes JSON defines (`\u` takes any four hex digits, as serde_json's skip does);
//! numbers follow the grammar (no leading zero, digits after `.` and `e`); `true`, `false` and
//! `null` are spelled out; arrays and objects close in order, keys are strings, commas and colons
//! sit where they must, and nothing follows the end but whitespace. UTF-8 is the caller's
//! (`&str`).
//!
//! The `RawValue` is made through the hand-off serde_json's own deserializer uses (a newtype
//! named `$serde_json::private::RawValue` holding a map with that key and the text as its
//! value): safe code, no second walk. It is not serde_json's public API, which is why an earlier
//! measurement (`6fafbb1`, BENCHMARKS.md) was kept out: that one handed over text no parser had
//! checked. Here every text handed over has just been read by this reader, and the hand-off is
//! only a speed: should a serde_json release drop it, the reader answers `None` and serde_json
//! reads everything again (correct, only slower), and the test
//! `the_raw_value_hand_off_still_works` fails to say so.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, Error as HandOffError};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The deepest nesting skimmed (a bit per level says array or object); deeper values are left to
/// serde_json.
const MAX_DEPTH: u32 = 64;

/// An object as [`Object::read`](super::json::Object::read) reads it: its members in order, each
/// key with its raw value (`None` for the member on the path), and that member's object.
#[derive(Debug)]
pub(super) struct Skimmed<'a> {
    pub(super) members: Vec<(Cow<'a, str>, Option<&'a RawValue>)>,
    pub(super) nested: Nested<'a>,
}

/// The member on the path, as the skimmer reads it (anything else is serde_json's to read).
#[derive(Debug)]
pub(super) enum Nested<'a> {
    Absent,
    Null,
    Object(Box<Skimmed<'a>>),
}

/// Reads `text` as [`Object::read`](super::json::Object::read) does, or `None` where only
/// serde_json can say.
pub(super) fn object<'a>(text: &'a str, path: &[&str]) -> Option<Skimmed<'a>> {
    let mut skim = Skim { text, at: 0 };
    skim.whitespace();
    skim.eat(b'{')?;
    let object = skim.members(path)?;
    skim.whitespace();
    (skim.at == text.len()).then_some(object)
}

struct Skim<'a> {
    text: &'a str,
    /// The next byte to read; always on an ASCII byte or at the end, so a char boundary.
    at: usize,
}

impl<'a> Skim<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn whitespace(&mut self) {
        self.at = whitespace(self.bytes(), self.at);
    }

    /// An object's members, `{` read; along `path` as
    /// [`Object::read`](super::json::Object::read) reads them.
    fn members(&mut self, path: &[&str]) -> Option<Skimmed<'a>> {
        let mut members = Vec::with_capacity(8);
        let mut nested = Nested::Absent;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(Skimmed { members, nested });
        }
        let step = path.split_first();
        loop {
            self.whitespace();
            let key = self.key()?;
            self.at = colon(self.bytes(), self.at)?;
            match step {
                Some((name, rest)) if key == *name => {
                    nested = match self.peek()? {
                        b'{' => {
                            self.at += 1;
                            Nested::Object(Box::new(self.members(rest)?))
                        }
                        b'n' => {
                            self.at = literal(self.bytes(), self.at, b"null")?;
                            Nested::Null
                        }
                        // An array or a scalar on the path: rare, and serde_json's to judge.
                        _ => return None,
                    };
                    members.push((key, None));
                }
                _ => {
                    let start = self.at;
                    self.at = value(self.bytes(), start)?;
                    members.push((key, Some(raw(&self.text[start..self.at])?)));
                }
            }
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(Skimmed { members, nested });
                }
                _ => return None,
            }
        }
    }

    /// A key: borrowed when it has no escape, else decoded by serde_json.
    fn key(&mut self) -> Option<Cow<'a, str>> {
        let open = self.at;
        self.eat(b'"')?;
        let (end, escaped) = string(self.bytes(), self.at)?;
        self.at = end;
        let literal = &self.text[open..end];
        if escaped {
            serde_json::from_str::<String>(literal).ok().map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(&literal[1..literal.len() - 1]))
        }
    }
}

// The scanner proper: free functions over the bytes and a position, returning the position after
// what they read, so that the position stays in a register.

#[inline(always)]
fn whitespace(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

/// One value starting at `at`, skipped; iterative, so a deep value costs no stack.
fn value(bytes: &[u8], mut at: usize) -> Option<usize> {
    // Bit `d` of `objects`: whether the container at depth `d + 1` is an object.
    let mut objects: u64 = 0;
    let mut depth: u32 = 0;
    loop {
        // A value starts here.
        match *bytes.get(at)? {
            b'"' => at = string(bytes, at + 1)?.0,
            b'-' | b'0'..=b'9' => at = number(bytes, at)?,
            b't' => at = literal(bytes, at, b"true")?,
            b'f' => at = literal(bytes, at, b"false")?,
            b'n' => at = literal(bytes, at, b"null")?,
            open @ (b'{' | b'[') => {
                at = whitespace(bytes, at + 1);
                let object = open == b'{';
                let close = if object { b'}' } else { b']' };
                if *bytes.get(at)? == close {
                    at += 1;
                } else {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    objects = (objects & !(1 << depth)) | (u64::from(object) << depth);
                    depth += 1;
                    if object {
                        at = entry(bytes, at)?;
                    }
                    continue;
                }
            }
            _ => return None,
        }
        // A value ended: what follows it in its container, closing any that end here.
        loop {
            if depth == 0 {
                return Some(at);
            }
            let object = objects & (1 << (depth - 1)) != 0;
            at = whitespace(bytes, at);
            match *bytes.get(at)? {
                b',' => {
                    at = whitespace(bytes, at + 1);
                    if object {
                        at = entry(bytes, at)?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            at += 1;
            depth -= 1;
        }
    }
}

/// An object member's key and colon at `at`; the position of its value.
#[inline(always)]
fn entry(bytes: &[u8], at: usize) -> Option<usize> {
    if *bytes.get(at)? != b'"' {
        return None;
    }
    colon(bytes, string(bytes, at + 1)?.0)
}

/// The colon after a key that ends before `at`, with the whitespace around it; the position of
/// the member's value.
#[inline(always)]
fn colon(bytes: &[u8], at: usize) -> Option<usize> {
    let at = whitespace(bytes, at);
    if *bytes.get(at)? != b':' {
        return None;
    }
    Some(whitespace(bytes, at + 1))
}

/// The rest of a string whose opening quote is before `at`: the position after its closing
/// quote, and whether it has an escape.
#[inline(always)]
fn string(bytes: &[u8], mut at: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        at = special(bytes, at)?;
        match bytes[at] {
            b'"' => return Some((at + 1, escaped)),
            b'\\' => {
                escaped = true;
                match *bytes.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                    b'u' => {
                        let hex = bytes.get(at + 2..at + 6)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        at += 6;
                    }
                    _ => return None,
                }
            }
            // A control character.
            _ => return None,
        }
    }
}

/// A number at `at`: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
#[inline(always)]
fn number(bytes: &[u8], mut at: usize) -> Option<usize> {
    if bytes[at] == b'-' {
        at += 1;
    }
    match *bytes.get(at)? {
        // No digit after a leading zero (serde_json's "invalid number").
        b'0' => {
            at += 1;
            if bytes.get(at).is_some_and(u8::is_ascii_digit) {
                return None;
            }
        }
        b'1'..=b'9' => at = digits(bytes, at + 1),
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        at = some_digits(bytes, at + 1)?;
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = bytes.get(at) {
            at += 1;
        }
        at = some_digits(bytes, at)?;
    }
    Some(at)
}

#[inline(always)]
fn digits(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

#[inline(always)]
fn some_digits(bytes: &[u8], at: usize) -> Option<usize> {
    let end = digits(bytes, at);
    (end > at).then_some(end)
}

#[inline(always)]
fn literal(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    let end = at + word.len();
    (bytes.get(at..end)? == word).then_some(end)
}

/// The position of the first `"`, `\` or control character of `bytes` from `at`: eight bytes at
/// a time for the first sixteen (most strings end there), then, in a longer string, `memchr2` for
/// the quote or backslash and one pass for the lowest byte before it, both of which `memchr` or
/// the compiler run many bytes at a time.
#[inline(always)]
fn special(bytes: &[u8], mut at: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let is_special = |b: &u8| *b == b'"' || *b == b'\\' || *b < 0x20;
    for _ in 0..2 {
        let Some(chunk) = bytes.get(at..at + 8) else {
            return bytes.get(at..)?.iter().position(is_special).map(|i| at + i);
        };
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        // The classic "has a zero byte" test: exact for the lowest flagged byte, which is the
        // one wanted. Bytes >= 0x80 (UTF-8 beyond ASCII) never flag: `!word` clears their bit.
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let flags = (quote.wrapping_sub(ONES) & !quote
            | backslash.wrapping_sub(ONES) & !backslash
            | word.wrapping_sub(ONES * 0x20) & !word)
            & HIGHS;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = &bytes[at..];
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let before = &rest[..end];
    // No early exit, so that it runs sixteen bytes and more at a time.
    let lowest = before.iter().fold(u8::MAX, |lowest, &b| lowest.min(b));
    let found = if lowest < 0x20 {
        before.iter().position(is_special)?
    } else if end < rest.len() {
        end
    } else {
        return None;
    };
    Some(at + found)
}

/// `text` as serde_json's borrowed `RawValue` when it is one JSON value (with whitespace around
/// it, which the raw value leaves out, as serde_json's does), or `None` where only serde_json can
/// say.
pub(super) fn raw_value(text: &str) -> Option<&RawValue> {
    let bytes = text.as_bytes();
    let start = whitespace(bytes, 0);
    let end = value(bytes, start)?;
    if whitespace(bytes, end) != bytes.len() {
        return None;
    }
    raw(&text[start..end])
}

/// `text` (one JSON value, checked) as serde_json's borrowed `RawValue`, through the hand-off its
/// deserializer uses: no second walk.
fn raw(text: &str) -> Option<&RawValue> {
    <&RawValue>::deserialize(HandOff(text)).ok()
}

/// The name serde_json gives the newtype (and the map key) of its raw-value hand-off.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

struct HandOff<'a>(&'a str);

impl<'de> de::Deserializer<'de> for HandOff<'de> {
    type Error = HandOffError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom(
            "only serde_json's raw value is handed off",
        ))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name != RAW_VALUE_TOKEN {
            return Err(de::Error::custom("not serde_json's raw value"));
        }
        visitor.visit_map(HandOffMap(Some(self.0)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// The one-entry map of the hand-off: the token as key, the text as value.
struct HandOffMap<'a>(Option<&'a str>);

impl<'de> MapAccess<'de> for HandOffMap<'de> {
    type Error = HandOffError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        if self.0.is_none() {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::new(RAW_VALUE_TOKEN))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let text = self
            .0
            .take()
            .ok_or_else(|| de::Error::custom("the raw value was handed off already"))?;
        seed.deserialize(BorrowedStrDeserializer::new(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_value_hand_off_still_works() {
        let raw = raw(r#"{"a": [1, "x"]}"#).expect("serde_json takes the hand-off");
        assert_eq!(raw.get(), r#"{"a": [1, "x"]}"#);
        let boxed = raw_value(" [true] ").map(ToOwned::to_owned);
        assert_eq!(
            boxed.expect("serde_json takes the hand-off").get(),
            "[true]"
        );
    }

    #[test]
    fn special_finds_the_first_quote_backslash_or_control_character() {
        for (text, expected) in [
            ("abcdefghij\"", Some(10)),
            ("abc\\", Some(3)),
            ("abcdefgh\u{1f}", Some(8)),
            ("é€😀 plain text", None),
            ("", None),
            ("\"", Some(0)),
            ("abcdefg\u{7f}\"", Some(8)),
            ("a long string, longer than eight bytes\"", Some(38)),
            ("a long string, longer than eight bytes\\", Some(38)),
            ("a long string with a\tcontrol character\"", Some(20)),
            ("a long string that never ends", None),
            ("long é€😀 text, then the \"", Some(30)),
        ] {
            assert_eq!(special(text.as_bytes(), 0), expected, "{text:?}");
            let shifted = format!("ab{text}");
            assert_eq!(special(shifted.as_bytes(), 2), expected.map(|at| at + 2));
        }
    }
}
