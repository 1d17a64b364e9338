//! What a person is shown of a call's arguments: every value made safe to show.
//!
//! The arguments come from a model, which may have been told what to write by anyone. So a
//! value placed in a question is never its raw text: a string is quoted, with `"` and `\`
//! escaped; control and format characters (newlines, the bidi overrides U+202A–U+202E and
//! U+2066–U+2069, zero-width characters), line and paragraph separators, private-use and
//! unassigned code points are written as escapes (`\n`, `\u{202E}`); the characters that start
//! markdown links, images, code and HTML (`[`, `]`, `` ` ``, `<`, `>`) get a backslash; and each
//! value is capped, ending with `…` and its full length. Anything else is its JSON text, made
//! safe the same way.

use serde_json::Value;
use unicode_general_category::{GeneralCategory, get_general_category};

/// The most characters of one value a placeholder shows.
pub const PLACEHOLDER_CAP: usize = 200;
/// The most characters of one value `show = "arguments"` shows.
pub const ARGUMENT_CAP: usize = 1000;
/// The most arguments `show = "arguments"` lists.
pub const MAX_ARGUMENTS: usize = 50;

/// `value` as a person may be shown it, at most `cap` of its characters.
pub fn value(value: &Value, cap: usize) -> String {
    match value {
        Value::String(text) => quoted(text, cap),
        other => unquoted(&other.to_string(), cap),
    }
}

/// What a message's `{placeholder}` shows for `value` (an argument, or `None` when the call
/// has none): [`value`] for a string or number; `(none)` for a missing or `null` one, so that a
/// message never reads as if something were there; a list as its items (`"a", "b"`, or
/// `(empty list)`) and an object as its members (`name: "x", size: 3`), each made safe, the
/// whole at most about `cap` characters.
pub fn placeholder(value: Option<&Value>, cap: usize) -> String {
    const NONE: &str = "(none)";
    match value {
        None | Some(Value::Null) => NONE.to_owned(),
        Some(Value::Array(items)) if items.is_empty() => "(empty list)".to_owned(),
        Some(Value::Object(members)) if members.is_empty() => "(empty)".to_owned(),
        Some(Value::Array(items)) => {
            joined(items.iter().map(|item| (None, item)), items.len(), cap)
        }
        Some(Value::Object(members)) => joined(
            members
                .iter()
                .map(|(name, member)| (Some(name.as_str()), member)),
            members.len(),
            cap,
        ),
        Some(other) => self::value(other, cap),
    }
}

/// The parts of a list or object, `, `-separated, each made safe, until `cap` is spent: the
/// rest as `… (N more)`.
fn joined<'a>(
    parts: impl Iterator<Item = (Option<&'a str>, &'a Value)>,
    total: usize,
    cap: usize,
) -> String {
    let mut out = String::new();
    for (shown, (name, part)) in parts.enumerate() {
        if shown > 0 && out.chars().count() >= cap {
            out.push_str(&format!(", … ({} more)", total - shown));
            break;
        }
        if shown > 0 {
            out.push_str(", ");
        }
        if let Some(name) = name {
            out.push_str(&key(name));
            out.push_str(": ");
        }
        out.push_str(&value(
            part,
            cap.saturating_sub(out.chars().count()).max(16),
        ));
    }
    out
}

/// `text` quoted and made safe, at most `cap` of its characters.
pub fn quoted(text: &str, cap: usize) -> String {
    let mut out = String::with_capacity(text.len().min(cap) + 16);
    out.push('"');
    let total = escape_into(&mut out, text, cap, true);
    if total > cap {
        out.push_str(&format!("…\" ({total} characters)"));
    } else {
        out.push('"');
    }
    out
}

/// `text` made safe as [`quoted`] makes it, without the quotes.
pub fn unquoted(text: &str, cap: usize) -> String {
    let mut out = String::with_capacity(text.len().min(cap) + 16);
    let total = escape_into(&mut out, text, cap, false);
    if total > cap {
        out.push_str(&format!("… ({total} characters)"));
    }
    out
}

/// Every argument of `arguments`, one a line, below a heading: what `show = "arguments"` adds.
pub fn arguments(arguments: &Value) -> String {
    let mut out = String::from("Arguments:");
    match arguments.as_object() {
        Some(members) if !members.is_empty() => {
            for (name, argument) in members.iter().take(MAX_ARGUMENTS) {
                out.push_str("\n- ");
                out.push_str(&key(name));
                out.push_str(": ");
                out.push_str(&value(argument, ARGUMENT_CAP));
            }
            if members.len() > MAX_ARGUMENTS {
                out.push_str(&format!("\n- … and {} more", members.len() - MAX_ARGUMENTS));
            }
        }
        _ if arguments.is_null() => out.push_str(" none"),
        Some(_) => out.push_str(" none"),
        None => {
            out.push(' ');
            out.push_str(&value(arguments, ARGUMENT_CAP));
        }
    }
    out
}

/// An argument's name: as it is when it is a plain name, else quoted.
fn key(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        name.to_owned()
    } else {
        quoted(name, 64)
    }
}

/// Writes `text`'s first `cap` characters to `out`, escaped; the number of characters in `text`.
fn escape_into(out: &mut String, text: &str, cap: usize, quotes: bool) -> usize {
    let mut count = 0;
    for c in text.chars() {
        count += 1;
        if count > cap {
            continue;
        }
        match c {
            '"' if quotes => out.push_str("\\\""),
            '\\' if quotes => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '[' | ']' | '`' | '<' | '>' => {
                out.push('\\');
                out.push(c);
            }
            c if hidden(c) => out.push_str(&format!("\\u{{{:04X}}}", c as u32)),
            c => out.push(c),
        }
    }
    count
}

/// Whether `c` is one a person cannot see, or that changes how what follows is shown.
fn hidden(c: char) -> bool {
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
            | GeneralCategory::Unassigned
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_placeholder_never_reads_as_if_something_were_there() {
        assert_eq!(placeholder(None, 200), "(none)");
        assert_eq!(placeholder(Some(&json!(null)), 200), "(none)");
        assert_eq!(placeholder(Some(&json!([])), 200), "(empty list)");
        assert_eq!(placeholder(Some(&json!(42)), 200), "42");
        assert_eq!(placeholder(Some(&json!("a")), 200), "\"a\"");
        assert_eq!(placeholder(Some(&json!(["a", 2])), 200), "\"a\", 2");
        assert_eq!(
            placeholder(Some(&json!({"name": "x", "size": 3})), 200),
            "name: \"x\", size: 3"
        );
        let many: Vec<String> = (0..100).map(|i| format!("item-{i}")).collect();
        let shown = placeholder(Some(&json!(many)), 40);
        assert!(shown.ends_with(" more)"), "{shown}");
        assert!(shown.chars().count() < 80, "{shown}");
    }

    #[test]
    fn strings_are_quoted_and_what_hides_is_escaped() {
        assert_eq!(quoted("/srv/a.txt", 200), r#""/srv/a.txt""#);
        assert_eq!(
            quoted("a\"b\\c\nd\u{202E}e\u{2066}f\u{200B}", 200),
            r#""a\"b\\c\nd\u{202E}e\u{2066}f\u{200B}""#
        );
        assert_eq!(
            quoted("[click](https://x) `y` <b>", 200),
            r#""\[click\](https://x) \`y\` \<b\>""#
        );
        assert_eq!(value(&json!(3), 200), "3");
        assert_eq!(value(&json!({"a": "\u{202E}"}), 200), r#"{"a":"\u{202E}"}"#);
    }

    #[test]
    fn long_values_are_capped_with_their_length() {
        let long = "x".repeat(20_000);
        let shown = quoted(&long, 200);
        assert!(shown.ends_with("…\" (20000 characters)"), "{shown}");
        assert!(shown.len() < 300);
        let shown = value(&json!([long]), 10);
        assert!(shown.ends_with("… (20004 characters)"), "{shown}");
    }

    #[test]
    fn every_argument_is_listed_safely() {
        let shown = arguments(&json!({"path": "/a", "content": "hi\nthere", "bad\nkey": 1}));
        assert!(shown.starts_with("Arguments:\n- "), "{shown}");
        let mut lines: Vec<&str> = shown.lines().skip(1).collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            [
                "- \"bad\\nkey\": 1",
                "- content: \"hi\\nthere\"",
                "- path: \"/a\""
            ]
        );
        assert_eq!(arguments(&Value::Null), "Arguments: none");
    }
}
