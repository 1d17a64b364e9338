//! Resource URIs in the spellings a gate compares: as sent, normalized, and decoded.
//!
//! An inner service may read many spellings of a URI as one resource: `FILE:///secrets/x`,
//! `file:///./secrets/x`, `file:///%73ecrets/x` and `file://localhost/secrets/x` name the same file,
//! and a service that percent-decodes the whole path reads `file:///secrets%2Fx` as that file too.
//! So a resource gate works out the spellings below of its own URI (once, when it is declared) and
//! of the URI of each `resources/read` it is asked about, and applies when any spelling of the
//! call matches any spelling of the gate. Matching more only asks more often; matching less would
//! let a call past the gate.
//!
//! - **As sent**, byte for byte: every call a gate matched by its text alone is still gated.
//! - **Normalized**: RFC 3986 §6.2.2 (RFC 3987 §5.3.2 for IRIs) syntax-based normalization, by
//!   `fluent-uri`: scheme and host lowercased, percent-encoded unreserved characters decoded and
//!   the hex digits of other escapes uppercased, dot segments removed, an empty or default port
//!   dropped. For `file:`, no authority, an empty one and `localhost` are written alike
//!   (`file:///path`, RFC 8089). Text that is not a URI has no normalized spelling.
//! - **Decoded**: how a service that takes the URI apart loosely reads it, from the normalized
//!   spelling and from the text as sent (leading and trailing spaces and controls trimmed, tabs
//!   and newlines removed, scheme and host lowercased): every escape in the path decoded, `\` read
//!   as `/`, runs of `/` read as one and dot segments removed. A `file:` URI (or text without a
//!   scheme, which a service may take for a file path) is reduced to its path: whatever host,
//!   query or fragment it names, a service may ignore them.
//!
//! Not normalized: the case of the path (a case-insensitive file system reads `/Secrets/x` as
//! `/secrets/x`), Unicode normalization forms, links and mounts, and whatever else an inner service
//! makes of a URI beyond these rules.

use std::borrow::Cow;

use fluent_uri::Iri;
use percent_encoding::percent_decode_str;

/// The spellings of one resource URI that gates compare.
#[derive(Clone)]
pub(crate) struct Spellings<'a> {
    raw: Cow<'a, str>,
    /// `None` when the text is not a URI, or is its own normal form.
    normalized: Option<String>,
    /// Decoded from the normalized spelling, or from the text when it is not a URI.
    decoded: String,
    /// Decoded from the text as sent, when that differs: RFC 3986 removes `..` against an empty
    /// segment, where a file system skips the empty segment first.
    decoded_raw: Option<String>,
}

impl<'a> Spellings<'a> {
    /// Works out the spellings of `raw`.
    pub(crate) fn new(raw: impl Into<Cow<'a, str>>) -> Self {
        let raw = raw.into();
        let normalized = normalize(&raw);
        let decoded = decode(normalized.as_deref().unwrap_or(&raw));
        let decoded_raw = normalized
            .is_some()
            .then(|| decode(&raw))
            .filter(|decoded_raw| *decoded_raw != decoded);
        Self {
            normalized: normalized.filter(|normalized| *normalized != *raw),
            raw,
            decoded,
            decoded_raw,
        }
    }

    /// The text as sent.
    pub(crate) fn raw(&self) -> &str {
        &self.raw
    }

    pub(crate) fn each(&self) -> impl Iterator<Item = &str> {
        [
            Some(&*self.raw),
            self.normalized.as_deref(),
            Some(&*self.decoded),
            self.decoded_raw.as_deref(),
        ]
        .into_iter()
        .flatten()
    }

    /// Whether some spelling of this URI is some spelling of `other`.
    pub(crate) fn is(&self, other: &Spellings<'_>) -> bool {
        self.each()
            .any(|mine| other.each().any(|theirs| mine == theirs))
    }

    /// Whether some spelling of this URI starts with some spelling of `prefix`.
    pub(crate) fn starts_with(&self, prefix: &Spellings<'_>) -> bool {
        self.each()
            .any(|mine| prefix.each().any(|theirs| mine.starts_with(theirs)))
    }
}

/// The RFC 3986 §6.2.2 normal form of `text`, with RFC 8089's local `file:` authority written
/// empty; `None` when `text` is not an IRI.
fn normalize(text: &str) -> Option<String> {
    let iri = Iri::parse(text).ok()?.normalize();
    let local_file = iri.scheme().as_str() == "file"
        && iri
            .authority()
            .is_none_or(|authority| matches!(authority.as_str(), "" | "localhost"))
        && iri.path().as_str().starts_with('/');
    if !local_file {
        return Some(iri.into_string());
    }
    let after_scheme = iri.as_str().strip_prefix("file:")?;
    let rest = match iri.authority() {
        Some(authority) => after_scheme
            .strip_prefix("//")
            .and_then(|rest| rest.strip_prefix(authority.as_str()))?,
        None => after_scheme,
    };
    Some(format!("file://{rest}"))
}

/// How a service that takes `text` apart loosely, decoding the whole path, reads it.
fn decode(text: &str) -> String {
    let text = text.trim_matches(|c: char| c <= ' ');
    let text: Cow<'_, str> = if text.contains(['\t', '\n', '\r']) {
        text.replace(['\t', '\n', '\r'], "").into()
    } else {
        text.into()
    };
    let (scheme, rest) = match text.split_once(':') {
        Some((scheme, rest)) if is_scheme(scheme) => (Some(scheme.to_ascii_lowercase()), rest),
        _ => (None, &*text),
    };
    let (hier, tail) = rest.split_at(rest.find(['?', '#']).unwrap_or(rest.len()));
    let mut out = String::with_capacity(text.len() + 8);
    match scheme.as_deref() {
        Some("file") | None => {
            // A file is named by its path: decoded first, so that an escaped `/` can end what
            // looked like a host, then without the host.
            let whole = decode_path(hier);
            let path = match whole.strip_prefix("//") {
                Some(after) => after.find('/').map_or("", |slash| &after[slash..]),
                None => &whole,
            };
            out.push_str("file://");
            push_resolved(&mut out, path, true);
        }
        Some(scheme) => {
            out.push_str(scheme);
            out.push(':');
            let path = match hier.strip_prefix("//") {
                Some(after) => {
                    let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
                    out.push_str("//");
                    out.push_str(&authority.to_ascii_lowercase());
                    path
                }
                None => hier,
            };
            push_resolved(&mut out, &decode_path(path), path.starts_with('/'));
            out.push_str(tail);
        }
    }
    out
}

/// Whether `text` can be a URI scheme (RFC 3986 §3.1).
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `path` with every escape decoded (invalid UTF-8 as U+FFFD) and `\` read as `/`.
fn decode_path(path: &str) -> Cow<'_, str> {
    let decoded = percent_decode_str(path).decode_utf8_lossy();
    if decoded.contains('\\') {
        decoded.replace('\\', "/").into()
    } else {
        decoded
    }
}

/// Appends `path` without dot segments or empty segments (RFC 3986 §5.2.4, and runs of `/` read
/// as one), starting with `/` when `absolute`, ending with `/` when it did.
fn push_resolved(out: &mut String, path: &str, absolute: bool) {
    let start = out.len();
    let directory = path.ends_with('/')
        || path.ends_with("/.")
        || path.ends_with("/..")
        || matches!(path, "." | "..");
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                let parent = out[start..].rfind('/').map_or(start, |slash| start + slash);
                out.truncate(parent);
            }
            segment => {
                out.push('/');
                out.push_str(segment);
            }
        }
    }
    if directory || (absolute && out.len() == start) {
        out.push('/');
    }
    if !absolute && out[start..].starts_with('/') {
        out.remove(start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gated_by_prefix(uri: &str, prefix: &str) -> bool {
        Spellings::new(uri).starts_with(&Spellings::new(prefix))
    }

    fn gated_by_uri(uri: &str, gate: &str) -> bool {
        Spellings::new(uri).is(&Spellings::new(gate))
    }

    const SECRETS: &str = "file:///secrets/";

    /// Spellings an inner service may resolve to `file:///secrets/x`.
    const SECRET_SPELLINGS: &[&str] = &[
        "file:///secrets/x",
        "FILE:///secrets/x",
        "File:///secrets/x",
        "file:///./secrets/x",
        "file:///a/../secrets/x",
        "file:///secrets/./x",
        "file:///%73ecrets/x",
        "file:///%2573ecrets/x/../../secrets/x",
        "file:///%2E/secrets/x",
        "file:///a/%2E%2E/secrets/x",
        "file://localhost/secrets/x",
        "file://LOCALHOST/secrets/x",
        "file:/secrets/x",
        "file:///secrets%2Fx",
        "file:///secrets%2fx",
        "file:///public%2F..%2Fsecrets/x",
        "file:///public%5C..%5Csecrets/x",
        "file:////secrets/x",
        "file:///public//..//secrets/x",
        "file://localhost%2Fsecrets/x",
        "file://server/secrets/x",
        "file:///secrets/x?download=1",
        "file:///secrets/x#top",
    ];

    #[test]
    fn every_spelling_of_a_gated_file_is_gated_by_its_prefix() {
        for uri in SECRET_SPELLINGS {
            assert!(gated_by_prefix(uri, SECRETS), "{uri}");
        }
    }

    #[test]
    fn every_spelling_of_a_gated_file_is_gated_by_its_uri() {
        for uri in SECRET_SPELLINGS {
            assert!(gated_by_uri(uri, "file:///secrets/x"), "{uri}");
        }
    }

    #[test]
    fn the_gate_s_own_target_is_normalized_too() {
        for prefix in [
            "FILE:///secrets/",
            "file://localhost/secrets/",
            "file:///%73ecrets/",
            "file:///public/../secrets/",
        ] {
            assert!(gated_by_prefix("file:///secrets/x", prefix), "{prefix}");
        }
        assert!(gated_by_uri(
            "file:///secrets/x",
            "file://LOCALHOST/./secrets/%78"
        ));
    }

    #[test]
    fn scheme_host_and_default_port_are_normalized() {
        let prefix = "https://example.com/secrets/";
        for uri in [
            "HTTPS://Example.COM:443/secrets/x",
            "https://example.com:/secrets/x",
            "https://EXAMPLE.com/a/../secrets/x",
            "https://example.com/%73ecrets/x",
            "https://example.com/secrets%2Fx",
        ] {
            assert!(gated_by_prefix(uri, prefix), "{uri}");
        }
        assert!(gated_by_uri(
            "HTTPS://Example.COM:443/secrets/x",
            "https://example.com/secrets/x"
        ));
    }

    #[test]
    fn other_escapes_are_compared_with_uppercase_hex() {
        assert!(gated_by_prefix("file:///my%7efiles/x", "file:///my~files/"));
        assert!(gated_by_uri("file:///a%3fb", "file:///a%3Fb"));
    }

    #[test]
    fn text_that_is_not_a_uri_is_compared_as_sent_and_decoded() {
        for uri in [
            "file:///secrets/x y",
            "FILE:///secrets/x y",
            "file:///secrets\\x",
            "file:///public\\..\\secrets\\x",
            "file:///%zz/../secrets/x",
            " file:///secrets/x",
            "file:///sec\nrets/x",
            "file:///secrets/x\t",
            "/secrets/x",
            "/public/../secrets/x",
        ] {
            assert!(gated_by_prefix(uri, SECRETS), "{uri:?}");
        }
        assert!(gated_by_uri("file:///secrets/x\n", "file:///secrets/x"));
        // A gate's own target that is not a URI still matches its own text.
        assert!(gated_by_prefix("file:///my files/x", "file:///my files/"));
        assert!(gated_by_prefix("file:///my%20files/x", "file:///my files/"));
    }

    #[test]
    fn other_files_are_not_gated() {
        for uri in [
            "file:///secretsX/y",
            "file:///secrets",
            "file:///secrets..",
            "file:///public/x",
            "file:///public/secrets/x",
            "file:///secrets%2F..%2Fpublic/x",
            "https://example.com/secrets/x",
            "mcp://secrets/x",
            "",
        ] {
            assert!(!gated_by_prefix(uri, SECRETS), "{uri}");
        }
        assert!(!gated_by_prefix(
            "https://example.com.evil/secrets/x",
            "https://example.com/secrets/"
        ));
        assert!(!gated_by_prefix(
            "https://example.com:8443/secrets/x",
            "https://example.com/secrets/"
        ));
        // As sent, this one starts with the prefix: it stays gated, as it was before URIs were
        // normalized.
        assert!(gated_by_prefix("file:///secrets/../public/x", SECRETS));
        assert!(!gated_by_uri("file:///secrets/y", "file:///secrets/x"));
        assert!(!gated_by_uri("file:///secrets/x/y", "file:///secrets/x"));
    }

    #[test]
    fn path_case_is_not_normalized() {
        assert!(!gated_by_prefix("file:///Secrets/x", SECRETS));
    }

    #[test]
    fn spellings() {
        let spellings = Spellings::new("FILE://LocalHost/a/./b/../%63/%7bx%7d%2F?q#f");
        assert_eq!(
            spellings.raw(),
            "FILE://LocalHost/a/./b/../%63/%7bx%7d%2F?q#f"
        );
        assert_eq!(
            spellings.normalized.as_deref(),
            Some("file:///a/c/%7Bx%7D%2F?q#f")
        );
        assert_eq!(spellings.decoded, "file:///a/c/{x}/");
        let plain = Spellings::new("https://example.com/x");
        assert_eq!(plain.normalized, None);
        assert_eq!(plain.decoded, "https://example.com/x");
        let broken = Spellings::new(" HTTPS://Example.com/a b/../c?%41");
        assert_eq!(broken.normalized, None);
        assert_eq!(broken.decoded, "https://example.com/c?%41");
    }

    #[test]
    fn resolution() {
        let resolved = |path: &str, absolute: bool| {
            let mut out = String::new();
            push_resolved(&mut out, path, absolute);
            out
        };
        assert_eq!(resolved("/a/b/../c", true), "/a/c");
        assert_eq!(resolved("/a/..", true), "/");
        assert_eq!(resolved("/..", true), "/");
        assert_eq!(resolved("/a/./", true), "/a/");
        assert_eq!(resolved("//a//b/", true), "/a/b/");
        assert_eq!(resolved("", true), "/");
        assert_eq!(resolved("a/b", true), "/a/b");
        assert_eq!(resolved("a/b/", false), "a/b/");
        assert_eq!(resolved("a/..", false), "");
        assert_eq!(resolved("", false), "");
    }
}
