//! Tokens this layer sealed, kept with their claims so that their retry skips the MAC, base64 and
//! JSON passes.
//!
//! Opening a token is a pure function of its bytes and the keyring: a token equal, byte for byte,
//! to one this layer sealed with its own keyring opens to the claims it was sealed with. Only
//! that step is skipped; the time and every binding are still checked on each retry
//! ([`token::open`](super::token::open)). A token sealed elsewhere (another replica, a restart)
//! is not found here and is opened in full.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use super::claims::Claims;

/// How many sealed tokens are kept. Past it the cache is cleared whole: a retry that misses is
/// opened in full, so this bounds memory (a few KiB per token) without touching correctness.
const CAPACITY: usize = 1024;

/// Recently sealed tokens, by their MAC (the last dot-separated part), with their claims.
#[derive(Default)]
pub(crate) struct Sealed(RwLock<HashMap<Box<str>, Entry, ahash::RandomState>>);

struct Entry {
    token: Box<str>,
    claims: Arc<Claims>,
}

impl Sealed {
    /// Remembers that `token` was sealed from `claims`.
    pub(crate) fn insert(&self, token: &str, claims: Arc<Claims>) {
        let Some((_, tag)) = token.rsplit_once('.') else {
            return;
        };
        let mut entries = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        let entry = Entry {
            token: token.into(),
            claims,
        };
        entries.insert(tag.into(), entry);
    }

    /// The claims `token` was sealed from, if this is a token this cache holds, byte for byte.
    pub(crate) fn get(&self, token: &str) -> Option<Arc<Claims>> {
        let (_, tag) = token.rsplit_once('.')?;
        let entries = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let entry = entries.get(tag)?;
        // Constant time, so a near miss does not tell how much of a kept token it matched.
        constant_time_eq::constant_time_eq(entry.token.as_bytes(), token.as_bytes())
            .then(|| Arc::clone(&entry.claims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::claims::{VERSION, args_digest_of};
    use serde_json::{Map, json};

    fn claims(r: u32) -> Arc<Claims> {
        Arc::new(Claims {
            v: VERSION,
            iat: 1,
            exp: 2,
            m: "tools/call".into(),
            t: "deploy".into(),
            a: args_digest_of(&json!({})),
            x: None,
            p: None,
            aud: None,
            r,
            s: None,
            q: Default::default(),
            k: Map::new(),
            g: Map::new(),
            h: Default::default(),
        })
    }

    #[test]
    fn only_the_very_token_is_found() {
        let sealed = Sealed::default();
        sealed.insert("v1.k1.body.tag", claims(1));
        assert_eq!(sealed.get("v1.k1.body.tag").map(|c| c.r), Some(1));
        // Same MAC part, another token: not found.
        assert!(sealed.get("v1.k1.bodY.tag").is_none());
        assert!(sealed.get("v1.k1.body.tag.").is_none());
        assert!(sealed.get("v1.k1.body.taG").is_none());
        assert!(sealed.get("tag").is_none());
        assert!(sealed.get("").is_none());
    }

    #[test]
    fn it_is_bounded() {
        let sealed = Sealed::default();
        for i in 0..CAPACITY + 10 {
            sealed.insert(&format!("v1.k1.body{i}.tag{i}"), claims(1));
        }
        let len = sealed.0.read().unwrap().len();
        assert!(len <= CAPACITY, "{len} kept");
        let last = CAPACITY + 9;
        assert!(sealed.get(&format!("v1.k1.body{last}.tag{last}")).is_some());
    }
}
