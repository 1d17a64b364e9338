//! The one JSON text editor: objects edited as text, every byte that is not changed kept as it
//! came (a client's arguments, an inner service's question), keys written by serde_json.
//!
//! Hand-written over [`Object`](super::json::Object)'s borrowed members rather than a parse into
//! `Value` and back: the text shown to a person keeps its order and spelling, numbers stay as
//! written, and nothing is parsed twice.

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
    let mut out = Vec::with_capacity(text.len() + 64);
    out.push(b'{');
    let mut first = true;
    let mut present = false;
    for (key, value) in members.raw() {
        comma(&mut out, &mut first);
        write_key(&mut out, key);
        present |= add.is_some_and(|(name, _)| name == key);
        match edit(key, value) {
            Some(new) => out.extend_from_slice(new.as_bytes()),
            None => out.extend_from_slice(value.get().as_bytes()),
        }
    }
    if let Some((name, value)) = add.filter(|_| !present) {
        comma(&mut out, &mut first);
        write_key(&mut out, name);
        out.extend_from_slice(value.as_bytes());
    }
    out.push(b'}');
    // Keys written by serde_json, the rest copied from UTF-8 text: always UTF-8.
    String::from_utf8(out).ok()
}

/// A comma before every member but the first.
pub(crate) fn comma(out: &mut Vec<u8>, first: &mut bool) {
    if !std::mem::take(first) {
        out.push(b',');
    }
}

/// `"key":`, the key escaped as JSON.
pub(crate) fn write_key(out: &mut Vec<u8>, key: &str) {
    write_json(out, key);
    out.push(b':');
}

/// `value` as JSON text.
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Strings, maps of `Value`s: serializing into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}
