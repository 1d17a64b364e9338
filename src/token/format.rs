//! The token format: `v1.<kid>.<base64url(claims json)>.<base64url(HMAC-SHA256)>`.
//!
//! The MAC covers a domain-separation label followed by `v1.<kid>.<body>`, so a token made for
//! another purpose or format by the same key never verifies here.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;

use super::claims::{Binding, Claims, VERSION, principal_tag};
use super::keyring::{HmacSha256, Keyring};
use super::sealed::{Sealed, split_tag};

const PREFIX: &str = "v1";
const MAC_LABEL: &[u8] = b"tower-elicitation/request-state/v1\0";
const TAG_LEN: usize = 32;

pub(crate) use crate::util::time::unix_now;

/// Time rules for opening a token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// Now, in Unix seconds.
    pub(crate) now: u64,
    /// Tolerated clock difference between replicas, in seconds.
    pub(crate) skew: u64,
}

/// Why a token was refused. Logged, never sent: the client always sees one frozen error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reject {
    TooLarge { len: usize, max: usize },
    Malformed(&'static str),
    UnknownKid,
    BadMac,
    BadClaims,
    Version(u8),
    NotYetValid,
    Expired,
    Mismatch(&'static str),
}

impl Reject {
    /// A short code for the decision log's `why`: `too_large`, `malformed`, `unknown_kid`,
    /// `bad_mac`, `bad_claims`, `version`, `not_yet_valid`, `expired` (its time to live, an
    /// approval's included, passed) or `mismatch` (bound to another call or caller).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Malformed(_) => "malformed",
            Self::UnknownKid => "unknown_kid",
            Self::BadMac => "bad_mac",
            Self::BadClaims => "bad_claims",
            Self::Version(_) => "version",
            Self::NotYetValid => "not_yet_valid",
            Self::Expired => "expired",
            Self::Mismatch(_) => "mismatch",
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len, max } => write!(f, "token is {len} bytes, over the {max} limit"),
            Self::Malformed(why) => write!(f, "malformed token: {why}"),
            Self::UnknownKid => f.write_str("token signed with a key id not in the keyring"),
            Self::BadMac => f.write_str("MAC verification failed"),
            Self::BadClaims => f.write_str("claims are not valid JSON of the expected shape"),
            Self::Version(v) => write!(f, "unsupported claims version {v}"),
            Self::NotYetValid => f.write_str("token issued in the future"),
            Self::Expired => f.write_str("token expired"),
            Self::Mismatch(what) => write!(f, "token bound to a different {what}"),
        }
    }
}

/// Seals `claims` with the keyring's active key, filling in the principal tag.
pub(crate) fn seal(keyring: &Keyring, claims: &mut Claims, principal: Option<&[u8]>) -> String {
    let (kid, key) = keyring.active();
    claims.principal = principal.map(|p| principal_tag(key, p));
    // Room for the fixed claims and the questions, so the buffer is not grown as it is written.
    let questions: usize = claims
        .questions
        .iter()
        .map(|(k, q)| k.len() + q.get().len() + 8)
        .sum();
    let mut json =
        Vec::with_capacity(256 + questions + claims.inner_state.as_ref().map_or(0, String::len));
    // Claims are plain strings, numbers and JSON values: serializing them cannot fail.
    if serde_json::to_writer(&mut json, claims).is_err() {
        json.clear();
    }
    let mut token = String::with_capacity(PREFIX.len() + kid.len() + json.len() * 4 / 3 + 48);
    token.push_str(PREFIX);
    token.push('.');
    token.push_str(kid);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(&json, &mut token);
    let tag = mac(key, &token).finalize().into_bytes();
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(tag, &mut token);
    token
}

/// Opens `token`: size, format, key, MAC, claims, time, then every binding.
///
/// A token `sealed` holds (this layer sealed it, and it is the very same text) skips the MAC,
/// base64 and claims passes, which would give back the claims it holds; time and bindings are
/// checked all the same.
pub(crate) fn open(
    keyring: &Keyring,
    sealed: Option<&Sealed>,
    token: &str,
    max_len: usize,
    clock: Clock,
    binding: &Binding<'_>,
) -> Result<Arc<Claims>, Reject> {
    if token.len() > max_len {
        return Err(Reject::TooLarge {
            len: token.len(),
            max: max_len,
        });
    }
    let (signed, tag) = split_tag(token).ok_or(Reject::Malformed("no MAC"))?;
    let mut parts = signed.splitn(3, '.');
    let (Some(prefix), Some(kid), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Reject::Malformed("expected four dot-separated parts"));
    };
    if prefix != PREFIX {
        return Err(Reject::Malformed("unknown prefix"));
    }
    // The claims' base64 is most of the token: memchr's vector search, not `str::contains`.
    if memchr::memchr(b'.', body.as_bytes()).is_some() {
        return Err(Reject::Malformed("too many parts"));
    }
    let key = keyring.get(kid).ok_or(Reject::UnknownKid)?;
    let claims = match sealed.and_then(|sealed| sealed.get(token)) {
        Some(claims) => claims,
        None => Arc::new(authenticate(key, signed, body, tag, max_len)?),
    };
    check(&claims, key, clock, binding)?;
    Ok(claims)
}

/// The claims of `v1.<kid>.<body>` if `tag` is their MAC under `key`.
fn authenticate(
    key: &HmacSha256,
    signed: &str,
    body: &str,
    tag: &str,
    max_len: usize,
) -> Result<Claims, Reject> {
    let tag = decode(tag, TAG_LEN + 1)?;
    mac(key, signed)
        .verify_slice(&tag)
        .map_err(|_| Reject::BadMac)?;
    // Authentic from here on.
    let json = decode(body, max_len)?;
    serde_json::from_slice(&json).map_err(|_| Reject::BadClaims)
}

/// Whether authentic `claims` apply to this request, now.
fn check(
    claims: &Claims,
    key: &HmacSha256,
    clock: Clock,
    binding: &Binding<'_>,
) -> Result<(), Reject> {
    if claims.version != VERSION {
        return Err(Reject::Version(claims.version));
    }
    if claims.issued_at > clock.now.saturating_add(clock.skew) {
        return Err(Reject::NotYetValid);
    }
    if clock.now >= claims.expires_at.saturating_add(clock.skew) {
        return Err(Reject::Expired);
    }
    if claims.method != binding.method {
        return Err(Reject::Mismatch("method"));
    }
    if claims.target != binding.target {
        return Err(Reject::Mismatch("target"));
    }
    if !binding
        .args
        .bound_by(&claims.arguments, claims.exact_arguments.as_deref())
    {
        return Err(Reject::Mismatch("arguments"));
    }
    if claims.audience.as_deref() != binding.audience {
        return Err(Reject::Mismatch("audience"));
    }
    let expected = binding.principal.map(|p| principal_tag(key, p));
    if claims.principal != expected {
        return Err(Reject::Mismatch("principal"));
    }
    Ok(())
}

fn mac(key: &HmacSha256, signed: &str) -> HmacSha256 {
    key.clone()
        .chain_update(MAC_LABEL)
        .chain_update(signed.as_bytes())
}

fn decode(text: &str, max_len: usize) -> Result<Vec<u8>, Reject> {
    if base64::decoded_len_estimate(text.len()) > max_len {
        return Err(Reject::Malformed("part too long"));
    }
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| Reject::Malformed("not base64url"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rejection_has_a_code_of_its_own() {
        let all = [
            Reject::TooLarge { len: 2, max: 1 },
            Reject::Malformed("x"),
            Reject::UnknownKid,
            Reject::BadMac,
            Reject::BadClaims,
            Reject::Version(9),
            Reject::NotYetValid,
            Reject::Expired,
            Reject::Mismatch("target"),
        ];
        let codes: std::collections::BTreeSet<&str> = all.iter().map(Reject::code).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(Reject::Expired.code(), "expired");
        assert_eq!(Reject::Mismatch("principal").code(), "mismatch");
    }
    use crate::token::claims::{Arguments, args_digest_of};
    use serde_json::{Map, json};

    const NOW: u64 = 1_800_000_000;
    const MAX: usize = 64 * 1024;

    fn ring() -> Keyring {
        Keyring::new("k1", [7u8; 32]).unwrap()
    }

    fn clock(now: u64) -> Clock {
        Clock { now, skew: 60 }
    }

    fn claims() -> Claims {
        let mut q = Map::new();
        q.insert(
            "approval".into(),
            json!({"method": "elicitation/create", "params": {"message": "Deploy?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}),
        );
        Claims {
            issued_at: NOW,
            expires_at: NOW + 600,
            arguments: args_digest_of(&json!({"environment": "staging"})),
            audience: Some("api".into()),
            inner_state: Some("inner-state".into()),
            questions: crate::token::claims::questions(&q),
            ..crate::token::claims::fixture(1)
        }
    }

    struct Request {
        method: &'static str,
        target: &'static str,
        args: Arguments<'static>,
        principal: Option<&'static [u8]>,
        audience: Option<&'static str>,
    }

    impl Request {
        fn matching() -> Self {
            Self {
                method: "tools/call",
                target: "deploy",
                args: Arguments::from_digest(args_digest_of(&json!({"environment": "staging"}))),
                principal: Some(b"Bearer alice"),
                audience: Some("api"),
            }
        }

        fn binding(&self) -> Binding<'_> {
            Binding {
                method: self.method,
                target: self.target,
                args: &self.args,
                principal: self.principal,
                audience: self.audience,
            }
        }
    }

    fn sealed() -> (String, Claims) {
        let mut c = claims();
        let token = seal(&ring(), &mut c, Some(b"Bearer alice"));
        (token, c)
    }

    /// Opens `token` twice, in full and through a cache that holds the token [`sealed`] gives, as a
    /// layer keeps it, and checks that both ways agree. `ring` must hold `ring()`'s key: a layer's
    /// cache only ever holds tokens its own keyring sealed.
    fn open_both(
        ring: &Keyring,
        token: &str,
        max: usize,
        now: u64,
        req: &Request,
    ) -> Result<Arc<Claims>, Reject> {
        let in_full = open(ring, None, token, max, clock(now), &req.binding());
        let cache = Sealed::default();
        let (mine, claims) = sealed();
        cache.insert(&mine, Arc::new(claims));
        let cached = open(ring, Some(&cache), token, max, clock(now), &req.binding());
        let json = |opened: &Result<Arc<Claims>, Reject>| {
            opened
                .as_ref()
                .map(|claims| serde_json::to_value(&**claims).unwrap())
                .map_err(Clone::clone)
        };
        assert_eq!(json(&in_full), json(&cached), "{token}");
        cached
    }

    fn open_with(ring: &Keyring, token: &str, now: u64, req: &Request) -> Result<(), Reject> {
        open_both(ring, token, MAX, now, req).map(drop)
    }

    fn open_claims(ring: &Keyring, token: &str, now: u64, req: &Request) -> Arc<Claims> {
        open_both(ring, token, MAX, now, req).unwrap()
    }

    #[test]
    fn round_trip() {
        let (token, c) = sealed();
        assert!(token.starts_with("v1.k1."));
        assert_eq!(token.split('.').count(), 4);
        let opened = open_claims(&ring(), &token, NOW + 1, &Request::matching());
        assert_eq!(
            serde_json::to_value(&opened).unwrap(),
            serde_json::to_value(&c).unwrap()
        );
        assert_eq!(opened.inner_state.as_deref(), Some("inner-state"));
        assert!(opened.principal.is_some());
    }

    #[test]
    fn a_token_this_layer_sealed_is_opened_from_its_cache() {
        let (token, claims) = sealed();
        let claims = Arc::new(claims);
        let cache = Sealed::default();
        cache.insert(&token, Arc::clone(&claims));
        let req = Request::matching();
        let opened = open(
            &ring(),
            Some(&cache),
            &token,
            MAX,
            clock(NOW),
            &req.binding(),
        )
        .unwrap();
        assert!(Arc::ptr_eq(&opened, &claims));
        // Still checked on the way: the same token, expired, is refused.
        let late = clock(NOW + 600 + 60);
        assert_eq!(
            open(&ring(), Some(&cache), &token, MAX, late, &req.binding()).map(drop),
            Err(Reject::Expired)
        );
    }

    #[test]
    fn the_principal_never_appears_in_clear() {
        let (token, _) = sealed();
        let body = token.split('.').nth(2).unwrap();
        let json = String::from_utf8(URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap();
        assert!(!json.contains("alice"));
    }

    #[test]
    fn every_single_byte_change_is_rejected() {
        let (token, _) = sealed();
        let req = Request::matching();
        let bytes = token.as_bytes();
        for i in 0..bytes.len() {
            for replacement in [b'A', b'z', b'0', b'-', b'_', b'.', b'='] {
                if bytes[i] == replacement {
                    continue;
                }
                let mut changed = bytes.to_vec();
                changed[i] = replacement;
                let changed = String::from_utf8(changed).unwrap();
                assert!(
                    open_with(&ring(), &changed, NOW, &req).is_err(),
                    "byte {i} -> {:?} accepted",
                    replacement as char
                );
            }
        }
        let mut extended = token.clone();
        extended.push('A');
        assert!(open_with(&ring(), &extended, NOW, &req).is_err());
        assert!(open_with(&ring(), &token[..token.len() - 1], NOW, &req).is_err());
        assert!(open_with(&ring(), &format!("{token}-TAMPERED"), NOW, &req).is_err());
    }

    #[test]
    fn unknown_kid_is_rejected_and_a_listed_retired_key_still_verifies() {
        let (token, _) = sealed();
        let other = Keyring::new("k2", [7u8; 32]).unwrap();
        assert_eq!(
            open_with(&other, &token, NOW, &Request::matching()),
            Err(Reject::UnknownKid)
        );
        let rotated = Keyring::new("k2", [8u8; 32])
            .unwrap()
            .with_verify_key("k1", [7u8; 32])
            .unwrap();
        assert!(open_with(&rotated, &token, NOW, &Request::matching()).is_ok());
        // Same kid, different key material: the MAC fails. (Not through a cache: a layer with
        // this keyring never sealed the token.)
        let replaced = Keyring::new("k1", [9u8; 32]).unwrap();
        let req = Request::matching();
        assert_eq!(
            open(&replaced, None, &token, MAX, clock(NOW), &req.binding()).map(drop),
            Err(Reject::BadMac)
        );
    }

    #[test]
    fn a_kid_swapped_onto_another_keys_token_fails() {
        let both = Keyring::new("k1", [7u8; 32])
            .unwrap()
            .with_verify_key("k2", [8u8; 32])
            .unwrap();
        let (token, _) = sealed();
        let swapped = token.replacen("v1.k1.", "v1.k2.", 1);
        assert_eq!(
            open_with(&both, &swapped, NOW, &Request::matching()),
            Err(Reject::BadMac)
        );
    }

    #[test]
    fn time_is_checked_with_skew() {
        let (token, _) = sealed();
        let req = Request::matching();
        assert!(open_with(&ring(), &token, NOW + 600 + 59, &req).is_ok());
        assert_eq!(
            open_with(&ring(), &token, NOW + 600 + 60, &req),
            Err(Reject::Expired)
        );
        assert!(open_with(&ring(), &token, NOW - 60, &req).is_ok());
        assert_eq!(
            open_with(&ring(), &token, NOW - 61, &req),
            Err(Reject::NotYetValid)
        );
    }

    #[test]
    fn every_binding_is_checked() {
        let (token, _) = sealed();
        type Change = fn(&mut Request);
        let cases: [(Change, &str); 6] = [
            (|r| r.method = "prompts/get", "method"),
            (|r| r.target = "destroy", "target"),
            (
                |r| {
                    r.args = Arguments::from_digest(args_digest_of(
                        &json!({"environment": "production"}),
                    ))
                },
                "arguments",
            ),
            (|r| r.principal = Some(b"Bearer mallory"), "principal"),
            (|r| r.principal = None, "principal"),
            (|r| r.audience = Some("other"), "audience"),
        ];
        for (change, what) in cases {
            let mut req = Request::matching();
            change(&mut req);
            assert_eq!(
                open_with(&ring(), &token, NOW, &req),
                Err(Reject::Mismatch(what))
            );
        }
        // A token minted for nobody is refused for somebody.
        let mut anonymous = claims();
        let token = seal(&ring(), &mut anonymous, None);
        assert_eq!(
            open_with(&ring(), &token, NOW, &Request::matching()),
            Err(Reject::Mismatch("principal"))
        );
    }

    #[test]
    fn oversize_tokens_are_rejected_before_decoding() {
        let (token, _) = sealed();
        assert_eq!(
            open_both(&ring(), &token, token.len() - 1, NOW, &Request::matching()).map(drop),
            Err(Reject::TooLarge {
                len: token.len(),
                max: token.len() - 1
            })
        );
    }

    #[test]
    fn a_valid_mac_over_foreign_claims_is_still_refused() {
        // Signed by our key with our label, but not claims JSON: never trusted.
        let key = ring();
        let (kid, mac_key) = key.active();
        let body = URL_SAFE_NO_PAD.encode(br#"{"v":1,"extra":true}"#);
        let signed = format!("v1.{kid}.{body}");
        let tag = URL_SAFE_NO_PAD.encode(mac(mac_key, &signed).finalize().into_bytes());
        assert_eq!(
            open_with(&key, &format!("{signed}.{tag}"), NOW, &Request::matching()),
            Err(Reject::BadClaims)
        );
    }
}
