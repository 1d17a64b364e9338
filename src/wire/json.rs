//! The one strict JSON reader: every request and response the layer reads goes through it.
//!
//! An [`Object`] is read in one borrowed pass, its members kept in order as the raw text they
//! came in (so that a rewrite keeps every byte it does not change), except along a path of member
//! names, which are read as objects the same way: `params` of a request, `result` and its
//! `inputRequests` of a response. [`StrictValue`] reads a value as a tree where the layer needs one
//! (answers, arguments as gates see them, `_meta` entries). A key given twice is found by one
//! detector, [`duplicate`], which the canonical writer uses too.
//!
//! Text is read first by [`skim`](super::skim), a hand-written pass that takes what it can
//! check as serde_json would; serde_json reads the rest, and gives every error. [`raw_value`] and
//! [`boxed_raw_value`] make the `RawValue`s of texts the layer wrote the same way.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use super::skim::{Nested, Skimmed};

/// A JSON value read where an object is expected, or what stands in its place.
#[derive(Debug)]
pub(crate) enum ObjectOr<O> {
    /// The member is not there.
    Absent,
    Null,
    Object(O),
    /// An array or a scalar.
    NotObject,
}

/// A member's value: its raw text, or `None` for the member on the path, which is
/// [`Object::nested`].
pub(crate) type Members<'a> = Vec<(Cow<'a, str>, Option<&'a RawValue>)>;

/// A JSON object as it came: its members in order, as raw text, and the member on the path it
/// was read along, read as an object.
#[derive(Debug)]
pub(crate) struct Object<'a> {
    members: Members<'a>,
    nested: ObjectOr<Box<Object<'a>>>,
}

impl<'a> Object<'a> {
    /// Reads `text` as an object, and in it the member named `path[0]` as an object, in that one
    /// `path[1]`, and so on, all in one pass. Repeated keys are kept (see [`Self::repeated`]); of
    /// a repeated member on the path, the last is read.
    ///
    /// # Errors
    ///
    /// serde_json's, when `text` is not one JSON value.
    pub(crate) fn read(text: &'a str, path: &[&str]) -> Result<ObjectOr<Self>, serde_json::Error> {
        // The skimmer reads what it recognizes in one pass; serde_json reads (and names the
        // error of) everything else.
        if let Some(object) = super::skim::object(text, path) {
            return Ok(ObjectOr::Object(Self::skimmed(object)));
        }
        end(serde_json::Deserializer::from_str(text), path)
    }

    /// The object the skimmer read, moved over.
    fn skimmed(object: Skimmed<'a>) -> Self {
        Self {
            members: object.members,
            nested: match object.nested {
                Nested::Absent => ObjectOr::Absent,
                Nested::Null => ObjectOr::Null,
                Nested::Object(next) => ObjectOr::Object(Box::new(Self::skimmed(*next))),
            },
        }
    }

    /// [`Self::read`] over bytes (which must be UTF-8, as JSON is).
    pub(crate) fn read_slice(
        bytes: &'a [u8],
        path: &[&str],
    ) -> Result<ObjectOr<Self>, serde_json::Error> {
        end(serde_json::Deserializer::from_slice(bytes), path)
    }

    /// The members in order; the one on the path has `None` for its value.
    pub(crate) fn members(&self) -> &Members<'a> {
        &self.members
    }

    /// The members not on the path, in order, with their text.
    pub(crate) fn raw(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.members
            .iter()
            .filter_map(|(key, raw)| Some((key.as_ref(), (*raw)?)))
    }

    /// The members in order, taken.
    pub(crate) fn into_members(self) -> Members<'a> {
        self.members
    }

    /// The raw value of the member `name` (the last, if it is repeated: as JSON parsers read it);
    /// `None` for the member on the path.
    pub(crate) fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .and_then(|(_, raw)| *raw)
    }

    /// The member on the path, read as an object.
    pub(crate) fn nested(&self) -> &ObjectOr<Box<Object<'a>>> {
        &self.nested
    }

    /// The member on the path, taken.
    pub(crate) fn into_nested(self) -> ObjectOr<Box<Object<'a>>> {
        self.nested
    }

    /// A key this object gives twice (its own members only; see [`Self::nested`] for the next).
    pub(crate) fn repeated(&self) -> Option<&str> {
        duplicate(self.members.iter().map(|(key, _)| key.as_ref()))
    }
}

/// `text` as a borrowed `RawValue`, checked as serde_json's `from_str::<&RawValue>` checks it
/// (the skimmer's one pass where it can; serde_json's otherwise, which names the error).
///
/// # Errors
///
/// serde_json's, when `text` is not one JSON value.
pub(crate) fn raw_value(text: &str) -> Result<&RawValue, serde_json::Error> {
    match super::skim::raw_value(text) {
        Some(raw) => Ok(raw),
        None => serde_json::from_str(text),
    }
}

/// [`raw_value`], owned, as serde_json's `RawValue::from_string` makes it (the text copied once).
///
/// # Errors
///
/// serde_json's, when `text` is not one JSON value.
pub(crate) fn boxed_raw_value(text: &str) -> Result<Box<RawValue>, serde_json::Error> {
    raw_value(text).map(ToOwned::to_owned)
}

/// The paths the layer reads objects along: a message alone, a request's `params`, a response's
/// `result.inputRequests`. For the tests and the fuzz targets.
#[cfg(any(test, feature = "__fuzz"))]
pub(crate) const READ_PATHS: &[&[&str]] = &[&[], &["params"], &["result", "inputRequests"]];

/// Whether the skimmer ([`super::skim`]) and serde_json read `text` alike along `path`: where
/// the skimmer reads an object, serde_json reads the same members and nested objects; `false`
/// only on a disagreement (the skimmer answering `None` is no disagreement). For the tests and
/// the `inbound` fuzz target.
#[cfg(any(test, feature = "__fuzz"))]
pub(crate) fn skim_agrees(text: &str, path: &[&str]) -> bool {
    match super::skim::object(text, path) {
        None => true,
        Some(skimmed) => match end(serde_json::Deserializer::from_str(text), path) {
            Ok(ObjectOr::Object(read)) => {
                format!("{:?}", Object::skimmed(skimmed)) == format!("{read:?}")
            }
            _ => false,
        },
    }
}

/// Whether the skimmer reads `text` along `path` itself (rather than leaving it to serde_json).
#[cfg(any(test, feature = "__fuzz"))]
pub(crate) fn skims(text: &str, path: &[&str]) -> bool {
    super::skim::object(text, path).is_some()
}

fn end<'a, R: serde_json::de::Read<'a>>(
    mut de: serde_json::Deserializer<R>,
    path: &[&str],
) -> Result<ObjectOr<Object<'a>>, serde_json::Error> {
    let object = PathSeed(path).deserialize(&mut de)?;
    de.end()?;
    Ok(object)
}

/// Reads a value as an [`Object`] along the path it holds.
struct PathSeed<'p>(&'p [&'p str]);

impl<'de> DeserializeSeed<'de> for PathSeed<'_> {
    type Value = ObjectOr<Object<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PathSeed<'_> {
    type Value = ObjectOr<Object<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(8);
        let mut nested = ObjectOr::Absent;
        let step = self.0.split_first();
        while let Some(key) = map.next_key::<BorrowedStr<'de>>()? {
            if let Some((name, rest)) = step
                && key.0 == *name
            {
                nested = match map.next_value_seed(PathSeed(rest))? {
                    ObjectOr::Object(object) => ObjectOr::Object(Box::new(object)),
                    ObjectOr::Absent => ObjectOr::Absent,
                    ObjectOr::Null => ObjectOr::Null,
                    ObjectOr::NotObject => ObjectOr::NotObject,
                };
                members.push((key.0, None));
            } else {
                members.push((key.0, Some(map.next_value()?)));
            }
        }
        Ok(ObjectOr::Object(Object { members, nested }))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(ObjectOr::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(ObjectOr::NotObject)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ObjectOr::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ObjectOr::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ObjectOr::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ObjectOr::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ObjectOr::NotObject)
    }
}

/// The first key that occurs twice, if any: the one duplicate-key detector.
pub(crate) fn duplicate<'k>(keys: impl Iterator<Item = &'k str> + Clone) -> Option<&'k str> {
    // Objects the layer reads have a handful of members: compare pairs without allocating.
    if keys.clone().nth(16).is_none() {
        let mut rest = keys.clone();
        for key in keys {
            rest.next();
            if rest.clone().any(|other| other == key) {
                return Some(key);
            }
        }
        return None;
    }
    let mut keys: Vec<&str> = keys.collect();
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// serde_json's message without " at line 1 column 42".
pub(crate) fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// A string borrowed from the input where it has no escapes.
pub(crate) struct BorrowedStr<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for BorrowedStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = BorrowedStr<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// A `Value` whose objects never repeat a key, at any depth.
pub(crate) struct StrictValue(pub(crate) Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            members.push((key, value));
        }
        if let Some(key) = duplicate(members.iter().map(|(key, _)| key.as_str())) {
            return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
        }
        Ok(Value::Object(members.into_iter().collect::<Map<_, _>>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_read_along_its_path_with_every_other_member_raw() {
        let text = r#"{"id":1, "result":{"a":[1,2], "inputRequests":{"q":{"x":1}}}, "z":null}"#;
        let Ok(ObjectOr::Object(message)) = Object::read(text, &["result", "inputRequests"]) else {
            panic!("an object")
        };
        let keys: Vec<_> = message.members().iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["id", "result", "z"]);
        assert_eq!(message.get("id").map(RawValue::get), Some("1"));
        assert!(message.get("result").is_none());
        let ObjectOr::Object(result) = message.nested() else {
            panic!("result is an object")
        };
        assert_eq!(result.get("a").map(RawValue::get), Some("[1,2]"));
        let ObjectOr::Object(requests) = result.nested() else {
            panic!("inputRequests is an object")
        };
        assert_eq!(requests.get("q").map(RawValue::get), Some(r#"{"x":1}"#));
        assert!(matches!(requests.nested(), ObjectOr::Absent));

        for (text, expected) in [("null", "Null"), ("[1]", "NotObject"), ("3", "NotObject")] {
            let read = Object::read(text, &[]).unwrap();
            assert!(format!("{read:?}").starts_with(expected), "{text}");
        }
        let Ok(ObjectOr::Object(o)) = Object::read(r#"{"p":7}"#, &["p"]) else {
            panic!()
        };
        assert!(matches!(o.nested(), ObjectOr::NotObject));
        assert!(Object::read(r#"{"a":1} x"#, &[]).is_err());
        assert!(Object::read(r#"{"a":1"#, &[]).is_err());
    }

    /// Texts the layer reads every day, and corners of the grammar.
    const CORPUS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod","n":[1,-2.5e+3,0,0.0,1E9],"ok":true,"no":false,"x":null},"requestState":"abc.def","inputResponses":{"q":{"action":"accept","content":{"a":"b"}}},"_meta":{"k":{}}}}"#,
        " { \"a\" : [ ] , \"b\" : { } , \"c\" :\t[ [ ] , { \"d\" : [ 1 , 2 ] } ] }\r\n",
        r#"{"esc\u00e9ape":"a\"b\\c\/d\be\ff\ng\rh\ti\ud800j","\n":1}"#,
        r#"{"params":null,"id":"x"}"#,
        r#"{"params":{"a":1,"a":2},"params":{"b":3}}"#,
        r#"{"result":{"inputRequests":{"q":{"method":"elicitation/create"}},"resultType":"input_required"}}"#,
        r#"{"u":"é€😀 text longer than eight bytes","deep":[[[[[[[[{"a":[[[[]]]]}]]]]]]]]}"#,
        r#"{"params":[1,2],"id":1}"#,
        r#"{"params":"s","z":-0}"#,
        "{}",
    ];

    /// A small deterministic generator (xorshift), so a failure replays.
    struct Mutator(u64);

    impl Mutator {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// `text` with a few characters replaced, inserted or removed, from JSON's alphabet.
        fn mutate(&mut self, text: &str) -> String {
            const ALPHABET: &[char] = &[
                '{', '}', '[', ']', '"', ':', ',', '\\', 'u', 'a', 'e', 'E', '0', '1', '9', '.',
                '-', '+', ' ', '\n', 't', 'r', 'f', 'n', 'l', 's', '/', '\u{1}', '\u{1f}', 'é',
            ];
            let mut chars: Vec<char> = text.chars().collect();
            for _ in 0..=self.below(3) {
                let at = self.below(chars.len() + 1);
                let c = ALPHABET[self.below(ALPHABET.len())];
                match self.below(3) {
                    0 if at < chars.len() => chars[at] = c,
                    1 if at < chars.len() => {
                        chars.remove(at);
                    }
                    _ => chars.insert(at, c),
                }
            }
            chars.into_iter().collect()
        }
    }

    #[test]
    fn the_skimmer_reads_the_corpus_as_serde_json_does() {
        for text in CORPUS {
            for path in READ_PATHS {
                assert!(skim_agrees(text, path), "{text} along {path:?}");
            }
            // It takes the fast path where it can: every corpus text but the ones whose path
            // member is not an object.
            let skimmed = super::super::skim::object(text, &["params"]).is_some();
            assert_eq!(
                skimmed,
                !text.contains(r#""params":[1"#) && !text.contains(r#""params":"s""#),
                "{text}"
            );
        }
    }

    #[test]
    fn the_skimmer_never_accepts_what_serde_json_reads_otherwise() {
        let mut mutator = Mutator(0x9e37_79b9_7f4a_7c15);
        let (mut skimmed, mut tried) = (0, 0);
        for round in 0..40_000 {
            let text = mutator.mutate(CORPUS[round % CORPUS.len()]);
            for path in READ_PATHS {
                tried += 1;
                if super::super::skim::object(&text, path).is_some() {
                    skimmed += 1;
                }
                assert!(skim_agrees(&text, path), "{text:?} along {path:?}");
            }
        }
        // The mutations leave enough texts valid for the comparison to mean something.
        assert!(skimmed * 10 > tried, "{skimmed} of {tried} skimmed");
    }

    #[test]
    fn what_the_skimmer_leaves_serde_json_reads() {
        // Nesting deeper than the skimmer keeps track of.
        let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(100), "]".repeat(100));
        assert!(super::super::skim::object(&deep, &[]).is_none());
        let Ok(ObjectOr::Object(read)) = Object::read(&deep, &[]) else {
            panic!("serde_json reads it")
        };
        assert_eq!(read.get("a").map(|raw| raw.get().len()), Some(201));
        // An escaped key is decoded; one serde_json refuses is refused.
        let Ok(ObjectOr::Object(read)) = Object::read(r#"{"\u0061b":1}"#, &[]) else {
            panic!("an escaped key")
        };
        assert_eq!(read.get("ab").map(RawValue::get), Some("1"));
        assert!(Object::read(r#"{"\ud800":1}"#, &[]).is_err());
        // A lone surrogate in a value is skipped, as serde_json skips it.
        assert!(skim_agrees(r#"{"a":"\ud800"}"#, &[]));
        assert!(super::super::skim::object(r#"{"a":"\ud800"}"#, &[]).is_some());
        // Texts the layer made: checked, then handed over.
        assert_eq!(raw_value(" [1, {}] ").unwrap().get(), "[1, {}]");
        assert!(raw_value("[1,]").is_err());
        assert_eq!(boxed_raw_value("{}").unwrap().get(), "{}");
        assert!(boxed_raw_value("{} {}").is_err());
    }

    #[test]
    fn repeated_keys_are_kept_and_found_and_the_last_one_counts() {
        let Ok(ObjectOr::Object(o)) = Object::read(r#"{"a":1,"b":2,"a":3}"#, &[]) else {
            panic!()
        };
        assert_eq!(o.repeated(), Some("a"));
        assert_eq!(o.get("a").map(RawValue::get), Some("3"));
        let many: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        assert_eq!(duplicate(many.iter().map(String::as_str)), None);
        let mut twice = many.clone();
        twice.push("k7".into());
        assert_eq!(duplicate(twice.iter().map(String::as_str)), Some("k7"));
    }

    #[test]
    fn strict_values_refuse_a_repeated_key_at_any_depth() {
        let strict = |text: &str| serde_json::from_str::<StrictValue>(text).map(|s| s.0);
        assert_eq!(
            strict(r#"{"a":[{"b":1}],"c":"d"}"#).unwrap(),
            serde_json::json!({"a":[{"b":1}],"c":"d"})
        );
        let refused = strict(r#"{"a":[{"b":1,"b":2}]}"#).unwrap_err();
        assert_eq!(strip_position(&refused), r#"duplicate key "b""#);
        assert!(strict("1e400").is_err());
    }
}
