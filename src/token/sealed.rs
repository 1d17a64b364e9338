//! Tokens this layer sealed, kept with their claims so that their retry skips the MAC, base64 and
//! JSON passes.
//!
//! Opening a token is a pure function of its bytes and the keyring: a token equal, byte for byte,
//! to one this layer sealed with its own keyring opens to the claims it was sealed with. Only
//! that step is skipped; the time and every binding are still checked on each retry
//! ([`token::open`](super::format::open)). A token sealed elsewhere (another replica, a restart)
//! is not found here and is opened in full.

use std::sync::Arc;

use super::claims::Claims;
use crate::util::memo::{Bounded, Weight};

/// How many sealed tokens are kept at most.
const MAX_TOKENS: usize = 1024;
/// About how much memory the kept tokens and their claims may take, counting each token twice
/// (its text, and claims of about the same size).
const MAX_BYTES: usize = 4 * 1024 * 1024;
/// Longer tokens are not kept: they are rare, and would crowd out the rest.
const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Recently sealed tokens, by their MAC (the last dot-separated part), with their claims: a
/// [`Bounded`] cache, as every cache of the layer is. A retry that misses is opened in full, so
/// the bounds cap memory without touching correctness.
#[derive(Default)]
pub(crate) struct Sealed(Bounded<SealedToken, MAX_TOKENS, MAX_BYTES>);

/// One sealed token and the claims it was sealed from.
struct SealedToken {
    token: Box<str>,
    claims: Arc<Claims>,
}

impl Weight for SealedToken {
    /// The token's text, and claims of about the same size.
    fn weight(&self, _tag: &str) -> usize {
        2 * self.token.len()
    }
}

impl Sealed {
    /// Remembers that `token` was sealed from `claims`.
    pub(crate) fn insert(&self, token: &str, claims: Arc<Claims>) {
        let Some((_, tag)) = split_tag(token) else {
            return;
        };
        if token.len() > MAX_TOKEN_LEN {
            return;
        }
        let sealed = SealedToken {
            token: token.into(),
            claims,
        };
        self.0.insert(tag.into(), Arc::new(sealed));
    }

    /// The claims `token` was sealed from, if this is a token this cache holds, byte for byte.
    pub(crate) fn get(&self, token: &str) -> Option<Arc<Claims>> {
        let (_, tag) = split_tag(token)?;
        let sealed = self.0.get(tag)?;
        // Constant time, so a near miss does not tell how much of a kept token it matched.
        constant_time_eq::constant_time_eq(sealed.token.as_bytes(), token.as_bytes())
            .then(|| Arc::clone(&sealed.claims))
    }
}

/// `token` split at its last dot: what the MAC covers, and the MAC (`str::rsplit_once('.')`,
/// with memchr's vector search from the end rather than std's byte loop). Here rather than in
/// `format`, which reads the cache: the cache keys tokens by their MAC.
pub(crate) fn split_tag(token: &str) -> Option<(&str, &str)> {
    let dot = memchr::memrchr(b'.', token.as_bytes())?;
    Some((&token[..dot], &token[dot + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(r: u32) -> Arc<Claims> {
        Arc::new(crate::token::claims::fixture(r))
    }

    #[test]
    fn only_the_very_token_is_found() {
        let sealed = Sealed::default();
        sealed.insert("v1.k1.body.tag", claims(1));
        assert_eq!(sealed.get("v1.k1.body.tag").map(|c| c.round), Some(1));
        // Same MAC part, another token: not found.
        assert!(sealed.get("v1.k1.bodY.tag").is_none());
        assert!(sealed.get("v1.k1.body.tag.").is_none());
        assert!(sealed.get("v1.k1.body.taG").is_none());
        assert!(sealed.get("tag").is_none());
        assert!(sealed.get("").is_none());
    }

    #[test]
    fn it_is_bounded_in_tokens_and_in_bytes() {
        let sealed = Sealed::default();
        let kept = |sealed: &Sealed| (sealed.0.len(), sealed.0.weight());
        for i in 0..MAX_TOKENS + 10 {
            sealed.insert(&format!("v1.k1.body{i}.tag{i}"), claims(1));
        }
        assert!(kept(&sealed).0 <= MAX_TOKENS, "{:?}", kept(&sealed));
        let last = MAX_TOKENS + 9;
        assert!(sealed.get(&format!("v1.k1.body{last}.tag{last}")).is_some());

        let sealed = Sealed::default();
        let body = "b".repeat(MAX_TOKEN_LEN - 20);
        for i in 0..MAX_BYTES / MAX_TOKEN_LEN {
            sealed.insert(&format!("v1.k1.{body}.tag{i}"), claims(1));
            let (tokens, bytes) = kept(&sealed);
            assert!(bytes <= MAX_BYTES, "{tokens} tokens, {bytes} bytes");
        }
        // The same token again is kept once.
        let last = MAX_BYTES / MAX_TOKEN_LEN - 1;
        let token = format!("v1.k1.{body}.tag{last}");
        sealed.insert(&token, claims(1));
        let (_, before) = kept(&sealed);
        sealed.insert(&token, claims(2));
        assert_eq!(kept(&sealed).1, before);
    }

    #[test]
    fn long_tokens_are_not_kept() {
        let sealed = Sealed::default();
        let token = format!("v1.k1.{}.tag", "b".repeat(MAX_TOKEN_LEN));
        sealed.insert(&token, claims(1));
        assert!(sealed.get(&token).is_none());
    }
}
