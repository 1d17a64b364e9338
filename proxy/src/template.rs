//! What the file's `{placeholder}`s may name, for the gates' messages and the URL flows' templates
//! alike: a floor both import, so that neither imports the other.

/// Whether `text` (what stands between `{` and `}`) names an argument: ASCII letters, digits,
/// `_` and `-`, at least one.
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
