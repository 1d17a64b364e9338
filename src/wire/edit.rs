//! The one JSON text editor: objects edited as text, every byte that is not changed kept as it
//! came (a client's arguments, an inner service's question), keys written by serde_json.
//!
//! Hand-written over [`Object`]'s borrowed members rather than a parse into
//! `Value` and back: the text shown to a person keeps its order and spelling, numbers stay as
//! written, and nothing is parsed twice.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::json::{Object, ObjectOr};

/// The JSON text of `arguments` (an object, as the client sent it) with each member of `set`
/// put in: a member the client sent under the same key is taken out, and every other byte stays
/// as it came. Arguments that are absent or not an object become an object of `set` alone.
pub(crate) fn with_members(arguments: Option<&RawValue>, set: &[(&str, Value)]) -> String {
    let text = arguments.map_or("", RawValue::get);
    let Ok(ObjectOr::Object(members)) = Object::read(text, &[]) else {
        return fresh_object(set);
    };
    let members = members.into_members();
    let Some(spans) = members
        .iter()
        .map(|(_, raw)| member_span(text, (*raw)?))
        .collect::<Option<Vec<_>>>()
    else {
        return fresh_object(set);
    };
    let Some(close) = text.rfind('}') else {
        return fresh_object(set);
    };
    let replaced = |index: usize| set.iter().any(|(name, _)| *name == members[index].0);
    // Each run of replaced members goes with the commas that join it to the rest.
    let mut cut = Vec::new();
    let mut index = 0;
    while index < members.len() {
        if !replaced(index) {
            index += 1;
            continue;
        }
        let first = index;
        while index < members.len() && replaced(index) {
            index += 1;
        }
        cut.push(match (first, spans.get(index)) {
            (_, Some(&(next, _))) => (spans[first].0, next),
            (0, None) => (spans[0].0, spans[index - 1].1),
            (_, None) => (spans[first - 1].1, spans[index - 1].1),
        });
    }
    let kept = (0..members.len()).any(|index| !replaced(index));
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for (start, end) in cut {
        out.push_str(&text[at..start]);
        at = end;
    }
    out.push_str(&text[at..close]);
    let mut added = Vec::new();
    write_members(&mut added, set, !kept);
    // serde_json writes UTF-8.
    out.push_str(&String::from_utf8_lossy(&added));
    out.push_str(&text[close..]);
    out
}

/// `{…}` of `set`, written afresh.
fn fresh_object(set: &[(&str, Value)]) -> String {
    let mut out = vec![b'{'];
    write_members(&mut out, set, true);
    out.push(b'}');
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes each member of `set`, joined by commas; `first`: no comma before the first.
fn write_members(out: &mut Vec<u8>, set: &[(&str, Value)], mut first: bool) {
    for (name, value) in set {
        comma(out, &mut first);
        write_key(out, name);
        write_json(out, value);
    }
}

/// Where the member whose value is `raw` (borrowed from `text`) begins (its key's opening quote)
/// and ends (its value's last byte, exclusive).
fn member_span(text: &str, raw: &RawValue) -> Option<(usize, usize)> {
    let value = (raw.get().as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = value + raw.get().len();
    if end > text.len() {
        return None;
    }
    let bytes = text.as_bytes();
    let colon = text[..value].trim_end().len().checked_sub(1)?;
    if bytes[colon] != b':' {
        return None;
    }
    let key_end = text[..colon].trim_end().len().checked_sub(1)?;
    if bytes[key_end] != b'"' {
        return None;
    }
    // The key's opening quote: the nearest quote before it that no backslash escapes.
    let mut at = key_end;
    loop {
        at = memchr::memrchr(b'"', &bytes[..at])?;
        let backslashes = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some((at, end));
        }
    }
}

/// The object `text` with its member `name` replaced by what `edit` makes of it.
pub(crate) fn edit_member(
    text: &str,
    name: &str,
    edit: impl Fn(&RawValue) -> Option<String>,
) -> Option<String> {
    edit_object(text, None, |key, value| {
        (key == name).then(|| edit(value)).flatten()
    })
}

/// The value of member `key` of the object `text`.
pub(crate) fn member<'t>(text: &'t str, key: &str) -> Option<&'t RawValue> {
    let ObjectOr::Object(members) = Object::read(text, &[]).ok()? else {
        return None;
    };
    members.get(key)
}

/// The object `text` with each member whose new value `edit` gives replaced, and `add` appended
/// when it is not a member; `None` when `text` is not an object. Members are joined with no
/// whitespace and each key written anew; every value not edited stays as it was.
pub(crate) fn edit_object(
    text: &str,
    add: Option<(&str, &str)>,
    mut edit: impl FnMut(&str, &RawValue) -> Option<String>,
) -> Option<String> {
    let ObjectOr::Object(members) = Object::read(text, &[]).ok()? else {
        return None;
    };
    let mut out = String::with_capacity(text.len() + 64);
    out.push('{');
    let mut first = true;
    let mut present = false;
    for (key, value) in members.members() {
        let Some(value) = value else { continue };
        comma(&mut out, &mut first);
        write_read_key(&mut out, key);
        present |= add.is_some_and(|(name, _)| name == key);
        match edit(key, value) {
            Some(new) => out.push_str(&new),
            None => out.push_str(value.get()),
        }
    }
    if let Some((name, value)) = add.filter(|_| !present) {
        comma(&mut out, &mut first);
        write_key(&mut out, name);
        out.push_str(value);
    }
    out.push('}');
    Some(out)
}

/// An object read once along a path of member names (a question's `params`, its
/// `requestedSchema`, its `properties`), to be written back with several members changed at
/// several levels: one read however many edits, where [`edit_object`] reads the text again for
/// each.
#[derive(Debug)]
pub(crate) struct NestedObjects<'a> {
    object: Object<'a>,
}

impl<'a> NestedObjects<'a> {
    /// Reads `text` along `path`; `None` when it is not an object, a key occurs twice in an
    /// object on the path, or a member on the path is there but not an object (its text would
    /// be lost). The levels past one that is absent are absent.
    pub(crate) fn read(text: &'a str, path: &[&str]) -> Option<Self> {
        let ObjectOr::Object(object) = Object::read(text, path).ok()? else {
            return None;
        };
        let mut level = &object;
        loop {
            if level.repeated().is_some() {
                return None;
            }
            match level.nested() {
                ObjectOr::Object(next) => level = next,
                ObjectOr::Absent => return Some(Self { object }),
                ObjectOr::Null | ObjectOr::NotObject => return None,
            }
        }
    }

    /// The object at `depth` along the path (0: the object itself), if it is there.
    pub(crate) fn level(&self, depth: usize) -> Option<&Object<'a>> {
        let mut level = &self.object;
        for _ in 0..depth {
            match level.nested() {
                ObjectOr::Object(next) => level = next,
                _ => return None,
            }
        }
        Some(level)
    }

    /// The object written back as [`edit_object`] writes each level on the path: at `depth`,
    /// each member whose new value `edit(depth, key, value)` gives replaced, and `add(depth)`
    /// appended when it is not a member; every other value as it was.
    pub(crate) fn write(
        &self,
        edit: &mut impl FnMut(usize, &str, &RawValue) -> Option<String>,
        add: &impl Fn(usize) -> Option<(&'static str, String)>,
    ) -> String {
        let mut out = String::with_capacity(1024);
        write_level(&mut out, &self.object, 0, edit, add);
        out
    }
}

fn write_level(
    out: &mut String,
    object: &Object<'_>,
    depth: usize,
    edit: &mut impl FnMut(usize, &str, &RawValue) -> Option<String>,
    add: &impl Fn(usize) -> Option<(&'static str, String)>,
) {
    let added = add(depth);
    out.push('{');
    let mut first = true;
    let mut present = false;
    for (key, value) in object.members() {
        comma(out, &mut first);
        write_read_key(out, key);
        present |= added.as_ref().is_some_and(|(name, _)| name == key);
        match (value, object.nested()) {
            (Some(value), _) => match edit(depth, key, value) {
                Some(new) => out.push_str(&new),
                None => out.push_str(value.get()),
            },
            (None, ObjectOr::Object(next)) => write_level(out, next, depth + 1, edit, add),
            // `NestedObjects::read` refuses a path member that is not an object.
            (None, _) => out.push_str("null"),
        }
    }
    if let Some((name, value)) = added.filter(|_| !present) {
        comma(out, &mut first);
        write_key(out, name);
        out.push_str(&value);
    }
    out.push('}');
}

/// The object `members` (read from a text of `len` bytes) written with each member of `set`
/// (name, JSON text) put in: in place of every member of that name, else appended, in the order
/// of `set`. The same text as [`edit_object`] setting one member after the other, from one read.
pub(crate) fn with_set(members: &Object<'_>, len: usize, set: &[(&str, &str)]) -> String {
    let extra: usize = set
        .iter()
        .map(|(name, value)| name.len() + value.len() + 4)
        .sum();
    let mut out = String::with_capacity(len + extra + 2);
    out.push('{');
    let mut first = true;
    for (key, value) in members.members() {
        let Some(value) = value else { continue };
        comma(&mut out, &mut first);
        write_read_key(&mut out, key);
        match set.iter().find(|(name, _)| *name == key) {
            Some((_, new)) => out.push_str(new),
            None => out.push_str(value.get()),
        }
    }
    for (name, value) in set {
        if !members.raw().any(|(key, _)| key == *name) {
            comma(&mut out, &mut first);
            write_key(&mut out, name);
            out.push_str(value);
        }
    }
    out.push('}');
    out
}

/// Where the editor writes JSON text: the bytes of a body, or a `String` kept as text (written
/// as text, so that it needs no UTF-8 check at the end).
pub(crate) trait Text {
    /// Makes room for `more` bytes.
    fn reserve(&mut self, more: usize);
    /// Appends `text`.
    fn put(&mut self, text: &str);
}

impl Text for Vec<u8> {
    #[inline]
    fn reserve(&mut self, more: usize) {
        Vec::reserve(self, more);
    }
    #[inline]
    fn put(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }
}

impl Text for String {
    #[inline]
    fn reserve(&mut self, more: usize) {
        String::reserve(self, more);
    }
    #[inline]
    fn put(&mut self, text: &str) {
        self.push_str(text);
    }
}

/// A comma before every member but the first.
pub(crate) fn comma(out: &mut impl Text, first: &mut bool) {
    if !std::mem::take(first) {
        out.put(",");
    }
}

/// `"key":`, the key escaped as JSON.
pub(crate) fn write_key(out: &mut impl Text, key: &str) {
    // A key with nothing to escape is written as serde_json writes it, without its machinery
    // (a call per key was a good part of an edit's work).
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        write_plain_key(out, key);
    } else {
        // A string always serializes.
        out.put(&serde_json::to_string(key).unwrap_or_default());
        out.put(":");
    }
}

/// `"key":` for a key [`Object`] read: one borrowed from the text had no escape, so it holds no
/// quote, backslash or control character (the reader refuses those) and is written as it came.
#[allow(clippy::ptr_arg)] // Borrowed or owned is the point: it says whether it was escaped.
fn write_read_key(out: &mut impl Text, key: &Cow<'_, str>) {
    match key {
        Cow::Borrowed(key) => write_plain_key(out, key),
        Cow::Owned(key) => write_key(out, key),
    }
}

/// `"key":` for a key with nothing to escape, as serde_json writes it.
fn write_plain_key(out: &mut impl Text, key: &str) {
    out.reserve(key.len() + 3);
    out.put("\"");
    out.put(key);
    out.put("\":");
}

/// `value` as JSON text.
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Strings, maps of `Value`s: serializing into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key is written as serde_json writes it, whether or not it has anything to escape.
    #[test]
    fn a_key_is_written_as_serde_json_writes_it() {
        for key in [
            "",
            "message",
            "a b",
            "é✓",
            "q\"uote",
            "back\\slash",
            "tab\t",
            "\u{1}",
            "\u{7f}",
        ] {
            let mut out = Vec::new();
            write_key(&mut out, key);
            let expected = format!("{}:", serde_json::to_string(key).unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), expected, "{key:?}");
            // The same key read from JSON text, escaped or not, is written the same.
            let mut text = String::new();
            write_key(&mut text, key);
            for spelled in [text.clone(), text.replace('a', "\\u0061")] {
                let object = format!("{{{spelled}1}}");
                let Ok(ObjectOr::Object(read)) = Object::read(&object, &[]) else {
                    panic!("{object}")
                };
                let mut written = String::new();
                write_read_key(&mut written, &read.members()[0].0);
                assert_eq!(written, expected, "{object}");
            }
        }
    }

    /// Members set in one write are the members set one edit after the other.
    #[test]
    fn setting_members_at_once_is_setting_them_in_turn() {
        for text in [
            r#"{"a":1,"default":0}"#,
            r#"{"description":"d","a":[1]}"#,
            "{}",
            r#"{"default":1,"description":"x"}"#,
        ] {
            let set = [("default", "7"), ("description", "\"new\"")];
            let ObjectOr::Object(members) = Object::read(text, &[]).unwrap() else {
                panic!("an object")
            };
            let at_once = with_set(&members, text.len(), &set);
            let first = edit_object(text, Some(set[0]), |key, _| {
                (key == "default").then(|| "7".to_owned())
            })
            .unwrap();
            let in_turn = edit_object(&first, Some(set[1]), |key, _| {
                (key == "description").then(|| "\"new\"".to_owned())
            })
            .unwrap();
            assert_eq!(at_once, in_turn, "{text}");
        }
    }
}
