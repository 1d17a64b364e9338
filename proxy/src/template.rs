//! The file's `{placeholder}`s, for the gates' messages, `require` entries and the URL flows'
//! templates alike: the one parser all use, a floor they import, so that none imports another.
//! (The upstream's own RFC 6570 resource templates, a grammar of their own, are the fan-out's.)
//!
//! A placeholder is `{name}` where the name is ASCII letters, digits, `_` and `-` ([`is_name`]);
//! any other `{` is text, kept as written (`{ not a name }`, a lone `{`).

/// Whether `text` (what stands between `{` and `}`) names an argument: ASCII letters, digits,
/// `_` and `-`, at least one.
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One piece of a template: text as written, or a placeholder's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Name(&'a str),
}

/// The pieces of `template`, in order.
pub(crate) fn pieces(template: &str) -> impl Iterator<Item = Piece<'_>> {
    let mut rest = template;
    // A text piece ends at the next `{` that opens a placeholder (`searched` counts the bytes of
    // `rest` known to hold none).
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut searched = 0;
        loop {
            let Some(at) = rest[searched..].find('{').map(|at| searched + at) else {
                let text = rest;
                rest = "";
                return Some(Piece::Text(text));
            };
            let after = &rest[at + 1..];
            match after.find('}') {
                Some(end) if is_name(&after[..end]) => {
                    if at > 0 {
                        let text = &rest[..at];
                        rest = &rest[at..];
                        return Some(Piece::Text(text));
                    }
                    rest = &after[end + 1..];
                    return Some(Piece::Name(&after[..end]));
                }
                _ => searched = at + 1,
            }
        }
    })
}

/// The placeholders' names in `template`, in order (a name used twice, twice).
pub(crate) fn names(template: &str) -> impl Iterator<Item = &str> {
    pieces(template).filter_map(|piece| match piece {
        Piece::Name(name) => Some(name),
        Piece::Text(_) => None,
    })
}

/// The name of the one placeholder `text` is, with nothing around it (`{path}`): what a
/// `require` entry compares an answer with.
pub(crate) fn sole_name(text: &str) -> Option<&str> {
    let mut pieces = pieces(text);
    match (pieces.next(), pieces.next()) {
        (Some(Piece::Name(name)), None) => Some(name),
        _ => None,
    }
}

/// `template` with each placeholder replaced by what `value` writes for its name.
pub(crate) fn render(template: &str, mut value: impl FnMut(&str, &mut String)) -> String {
    let mut out = String::with_capacity(template.len());
    for piece in pieces(template) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Name(name) => value(name, &mut out),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_names_in_order_and_other_braces_kept() {
        let found: Vec<_> = pieces("Write {path} { not } {a}{b}{ {x-1}!{").collect();
        assert_eq!(
            found,
            [
                Piece::Text("Write "),
                Piece::Name("path"),
                Piece::Text(" { not } "),
                Piece::Name("a"),
                Piece::Name("b"),
                Piece::Text("{ "),
                Piece::Name("x-1"),
                Piece::Text("!{"),
            ]
        );
        assert_eq!(names("{a} {} {b}").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(pieces("").count(), 0);
    }

    #[test]
    fn a_sole_name_is_one_placeholder_and_nothing_else() {
        assert_eq!(sole_name("{path}"), Some("path"));
        for other in [
            "", "path", "{a}{b}", " {a}", "{a} ", "{ a }", "{a", "{}", "{{a}}",
        ] {
            assert_eq!(sole_name(other), None, "{other:?}");
        }
    }

    #[test]
    fn render_writes_each_name_and_keeps_the_rest() {
        let out = render("Move {from} to {to} {x y}", |name, out| {
            out.push_str(&name.to_uppercase());
        });
        assert_eq!(out, "Move FROM to TO {x y}");
        assert_eq!(render("{{a}}", |_, out| out.push('1')), "{1}");
    }
}
