//! Name globs and resource URI patterns, matched against each call's own name or URI.
//!
//! Two dialects, one small syntax, so that what a pattern gates is what it looks like:
//!
//! - **Names** (tools, prompts): `*` matches any run of characters (none too), `?` any one
//!   character; every other character is itself.
//! - **Resource URIs**: `**` matches any run of characters, `/` included; `*` any run within
//!   one path segment (no `/`), except a `*` that ends the pattern, which matches the rest of
//!   the URI (a prefix, as `prefix*` always meant); `?` any one character but `/`.
//!
//! `[`, `]`, `{`, `}` and `\` are refused in both, and so are three `*` in a row: a pattern this
//! matcher cannot read as written is an error when it is declared, never a gate that matches
//! less than it seems to. Matching is an NFA walk, linear in the name's length times the
//! pattern's.

use std::collections::HashSet;
use std::fmt;

/// One step of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `?`: one character (not `/` in a URI pattern).
    One,
    /// `*`: a run of characters (none of them `/` in a URI pattern).
    Star,
    /// `**`, or a URI pattern's final `*`: any run of characters.
    Any,
}

/// A compiled pattern.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    text: String,
    tokens: Vec<Token>,
    /// `*` and `?` stop at `/` (a URI pattern).
    segments: bool,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PatternError(pub(crate) String);

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Beyond this many product states, two patterns are taken to overlap (a duplicate key is then
/// refused when declared, never a gate skipped).
const MAX_OVERLAP_STATES: usize = 1 << 20;

impl Pattern {
    /// A glob on tool or prompt names.
    pub(crate) fn name(text: &str) -> Result<Self, PatternError> {
        Self::parse(text, false)
    }

    /// A pattern on resource URIs.
    pub(crate) fn uri(text: &str) -> Result<Self, PatternError> {
        Self::parse(text, true)
    }

    /// A URI prefix as a pattern: the prefix, then anything.
    pub(crate) fn prefix(text: &str) -> Self {
        let mut tokens: Vec<Token> = text.chars().map(Token::Literal).collect();
        tokens.push(Token::Any);
        Self {
            text: format!("{text}**"),
            tokens,
            segments: true,
        }
    }

    /// A spelling of a URI pattern (normalized, decoded) as a pattern: what decoding turned into
    /// `[`, `{` or `\` is itself, never an error.
    pub(crate) fn uri_spelling(text: &str) -> Self {
        // Not strict: nothing is refused.
        Self::parse_with(text, true, false).unwrap_or_else(|_| Self::prefix(text))
    }

    fn parse(text: &str, segments: bool) -> Result<Self, PatternError> {
        Self::parse_with(text, segments, true)
    }

    fn parse_with(text: &str, segments: bool, strict: bool) -> Result<Self, PatternError> {
        if strict && text.is_empty() {
            return Err(PatternError("\"\" is empty".to_owned()));
        }
        if let Some(c) = text
            .chars()
            .find(|c| strict && matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(PatternError(format!(
                "{text:?}: `{c}` is not pattern syntax here (only `*`, `?`{}): name each target instead",
                if segments { " and `**`" } else { "" }
            )));
        }
        if strict && text.contains("***") {
            return Err(PatternError(format!(
                "{text:?}: three `*` in a row (write `*` or `**`)"
            )));
        }
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::with_capacity(chars.len());
        let mut at = 0;
        while at < chars.len() {
            match chars[at] {
                '*' if chars.get(at + 1) == Some(&'*') => {
                    tokens.push(if segments { Token::Any } else { Token::Star });
                    at += 2;
                }
                '*' if segments && at + 1 == chars.len() => {
                    tokens.push(Token::Any);
                    at += 1;
                }
                '*' => {
                    tokens.push(Token::Star);
                    at += 1;
                }
                '?' => {
                    tokens.push(Token::One);
                    at += 1;
                }
                c => {
                    tokens.push(Token::Literal(c));
                    at += 1;
                }
            }
        }
        Ok(Self {
            text: text.to_owned(),
            tokens,
            segments,
        })
    }

    /// The pattern as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has no wildcard: it matches its own text only.
    pub(crate) fn is_literal(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    /// Whether `token` consumes `c`.
    fn takes(&self, token: Token, c: char) -> bool {
        match token {
            Token::Literal(l) => l == c,
            Token::One | Token::Star => !(self.segments && c == '/'),
            Token::Any => true,
        }
    }

    /// The states reachable from `states` without consuming anything (past stars).
    fn close(&self, states: &mut Vec<usize>, seen: &mut [bool]) {
        let mut at = 0;
        while at < states.len() {
            let state = states[at];
            if let Some(Token::Star | Token::Any) = self.tokens.get(state)
                && !seen[state + 1]
            {
                seen[state + 1] = true;
                states.push(state + 1);
            }
            at += 1;
        }
    }

    /// Whether `text` matches the whole pattern.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let n = self.tokens.len();
        let mut seen = vec![false; n + 1];
        let mut states = vec![0];
        seen[0] = true;
        self.close(&mut states, &mut seen);
        for c in text.chars() {
            let mut next = Vec::with_capacity(states.len() + 1);
            let mut next_seen = vec![false; n + 1];
            for &state in &states {
                let Some(&token) = self.tokens.get(state) else {
                    continue;
                };
                if !self.takes(token, c) {
                    continue;
                }
                let to = match token {
                    Token::Star | Token::Any => state,
                    _ => state + 1,
                };
                if !next_seen[to] {
                    next_seen[to] = true;
                    next.push(to);
                }
            }
            if next.is_empty() {
                return false;
            }
            self.close(&mut next, &mut next_seen);
            states = next;
            seen = next_seen;
        }
        seen[n]
    }

    /// Whether some text matches both patterns (a walk of their product); `true` when the
    /// product is too large to walk.
    pub(crate) fn overlaps(&self, other: &Self) -> bool {
        let (n, m) = (self.tokens.len(), other.tokens.len());
        if (n + 1).saturating_mul(m + 1) > MAX_OVERLAP_STATES {
            return true;
        }
        let mut seen = HashSet::new();
        let mut stack = vec![(0usize, 0usize)];
        seen.insert((0, 0));
        while let Some((i, j)) = stack.pop() {
            if i == n && j == m {
                return true;
            }
            let (a, b) = (self.tokens.get(i).copied(), other.tokens.get(j).copied());
            let mut next = Vec::new();
            if let Some(Token::Star | Token::Any) = a {
                next.push((i + 1, j));
            }
            if let Some(Token::Star | Token::Any) = b {
                next.push((i, j + 1));
            }
            if let (Some(a), Some(b)) = (a, b)
                && self.shares_a_char(a, other, b)
            {
                let i2 = if matches!(a, Token::Star | Token::Any) {
                    i
                } else {
                    i + 1
                };
                let j2 = if matches!(b, Token::Star | Token::Any) {
                    j
                } else {
                    j + 1
                };
                next.push((i2, j2));
            }
            for state in next {
                if seen.insert(state) {
                    stack.push(state);
                }
            }
        }
        false
    }

    /// Whether some one character is consumed both by `a` (of `self`) and `b` (of `other`).
    fn shares_a_char(&self, a: Token, other: &Self, b: Token) -> bool {
        match (a, b) {
            (Token::Literal(c), _) => other.takes(b, c),
            (_, Token::Literal(c)) => self.takes(a, c),
            // Both take every character, or every one but `/`: `a` is in both.
            _ => true,
        }
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_globs_match_any_run_and_any_one_character() {
        let glob = Pattern::name("delete_*").unwrap();
        assert!(glob.matches("delete_branch"));
        assert!(glob.matches("delete_"));
        assert!(glob.matches("delete_a/b"));
        assert!(!glob.matches("undelete_x"));
        let one = Pattern::name("v?").unwrap();
        assert!(one.matches("v1") && !one.matches("v") && !one.matches("v12"));
        assert!(Pattern::name("a**b").unwrap().matches("a/x/b"));
        assert!(Pattern::name("deploy").unwrap().is_literal());
    }

    #[test]
    fn uri_patterns_mean_what_they_look_like() {
        let deep = Pattern::uri("file:///srv/secret/**").unwrap();
        assert!(deep.matches("file:///srv/secret/sub/id_rsa"));
        assert!(deep.matches("file:///srv/secret/"));
        assert!(!deep.matches("file:///srv/secretX/a"));
        let one = Pattern::uri("file:///srv/*/key").unwrap();
        assert!(one.matches("file:///srv/a/key"));
        assert!(!one.matches("file:///srv/a/b/key"));
        let prefix = Pattern::uri("file:///srv/secret/*").unwrap();
        assert!(prefix.matches("file:///srv/secret/sub/id_rsa"));
        let inner = Pattern::uri("demo://d?cs/*.md").unwrap();
        assert!(inner.matches("demo://docs/a.md"));
        assert!(!inner.matches("demo://docs/a/b.md"));
        assert!(!Pattern::uri("a?b").unwrap().matches("a/b"));
    }

    #[test]
    fn what_the_matcher_cannot_honour_is_refused() {
        for bad in ["file:///[ab]", "x{a,b}", "a\\*", "***", ""] {
            assert!(Pattern::uri(bad).is_err(), "{bad}");
            assert!(Pattern::name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overlaps_are_decided_exactly() {
        let name = |t| Pattern::name(t).unwrap();
        assert!(name("delete_*").overlaps(&name("*_branch")));
        assert!(name("delete_*").overlaps(&name("delete_tag")));
        assert!(!name("delete_*").overlaps(&name("create_*")));
        assert!(!name("a?").overlaps(&name("b*")));
        assert!(name("*").overlaps(&name("x")));
        let uri = |t| Pattern::uri(t).unwrap();
        assert!(!uri("file:///a/*/k").overlaps(&uri("file:///a/b/c/k")));
        assert!(uri("file:///a/**").overlaps(&uri("file:///a/b/c/k")));
        assert!(Pattern::prefix("file:///a/").overlaps(&uri("file:///*/x")));
        assert!(!Pattern::prefix("file:///b/").overlaps(&uri("file:///a/**")));
    }
}
