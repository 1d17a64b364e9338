//! What a sealed token binds: the claims and how they are checked against a request.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::keyring::{HmacSha256, Keyring};

/// The claims format version.
pub(crate) const VERSION: u8 = 1;

const PRINCIPAL_LABEL: &[u8] = b"tower-elicitation/principal/v1\0";

/// The claims a token carries. Short field names keep tokens small; the client can read them
/// (tokens are signed, not encrypted), so nothing secret goes in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Claims {
    /// Format version.
    #[serde(rename = "v")]
    pub(crate) version: u8,
    /// Issued at, Unix seconds.
    #[serde(rename = "iat")]
    pub(crate) issued_at: u64,
    /// Expires at, Unix seconds.
    #[serde(rename = "exp")]
    pub(crate) expires_at: u64,
    /// The JSON-RPC method of the request the token answers.
    #[serde(rename = "m")]
    pub(crate) method: String,
    /// Its target: tool or prompt name, or resource URI.
    #[serde(rename = "t")]
    pub(crate) target: String,
    /// Digest of the canonical arguments ([`args_digest`]).
    #[serde(rename = "a")]
    pub(crate) arguments: String,
    /// Digest of the arguments' exact text ([`exact_digest`]): a retry that sends the same bytes
    /// is bound without canonicalising them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "x")]
    pub(crate) exact_arguments: Option<String>,
    /// Keyed tag of the caller's principal ([`principal_tag`]), absent for anonymous callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "p")]
    pub(crate) principal: Option<String>,
    /// The audience the layer was configured with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "aud")]
    pub(crate) audience: Option<String>,
    /// The round this token closes: 1 for the first `input_required`.
    #[serde(rename = "r")]
    pub(crate) round: u32,
    /// The inner service's own `requestState`, handed back to it on the retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "s")]
    pub(crate) inner_state: Option<String>,
    /// The input requests that were asked, by key, each the very text the client was shown
    /// (minified, its members in the order its author wrote them), kept unparsed.
    #[serde(default, skip_serializing_if = "Questions::is_empty")]
    #[serde(rename = "q")]
    pub(crate) questions: Questions,
    /// Answers to `questions` already accepted in an earlier round that the layer re-asked itself.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[serde(rename = "k")]
    pub(crate) accepted: Map<String, Value>,
    /// Gate answers already accepted, carried forward to every later round.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[serde(rename = "g")]
    pub(crate) gate_answers: Map<String, Value>,
    /// The flow handle each URL gate asked in this round was asked with, by gate key: checked
    /// again with the same handle even if the signing key rotated meanwhile.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[serde(rename = "h")]
    pub(crate) flow_handles: BTreeMap<String, String>,
    /// The token's own random id, when the layer makes tokens single-use
    /// ([`ElicitationLayer::single_use`](crate::ElicitationLayer::single_use)): a retry is
    /// forwarded only once a store has consumed it. Inside the MAC'd claims, so it cannot be
    /// swapped; absent from tokens sealed without the option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "j")]
    pub(crate) token_id: Option<String>,
    /// The call's own random nonce, drawn when a gated call is first asked and carried by every
    /// token of that call: its gates' flow handles ([`flow_handle`]) are derived with it, so that
    /// a later identical call gets handles of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "n")]
    pub(crate) nonce: Option<String>,
    /// With single-use tokens: the single-use store's epoch (Unix milliseconds, as the store
    /// names it) this token was sealed under. A retry is accepted only while the store is still
    /// in that epoch: no clocks are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(rename = "e")]
    pub(crate) epoch: Option<u64>,
    /// What each gate bound its approval to ([`Gate::bound_to`](crate::Gate::bound_to)), by
    /// gate key, as [`binding_digest`]s: a retry whose gate now says otherwise is asked again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[serde(rename = "b")]
    pub(crate) bindings: BTreeMap<String, String>,
}

/// Asked input requests by key, each as the text the client is shown, in the order they were
/// asked (the inner service's, then the gates').
pub(crate) type Questions = indexmap::IndexMap<String, Box<RawValue>>;

/// `requests` as the client is shown them and a token carries them: each minified, its members
/// in the order the value holds them.
#[cfg(test)]
pub(crate) fn questions(requests: &Map<String, Value>) -> Questions {
    requests
        .iter()
        .filter_map(|(key, request)| {
            Some((key.clone(), serde_json::value::to_raw_value(request).ok()?))
        })
        .collect()
}

/// The claims of a `tools/call` of `deploy` with no arguments, sealed at 1 and expiring at 2,
/// round `round`, asking nothing: a test's base, its own fields set over it.
#[cfg(test)]
pub(crate) fn fixture(round: u32) -> Claims {
    Claims {
        version: VERSION,
        issued_at: 1,
        expires_at: 2,
        method: "tools/call".into(),
        target: "deploy".into(),
        arguments: args_digest_of(&serde_json::json!({})),
        exact_arguments: None,
        principal: None,
        audience: None,
        round,
        inner_state: None,
        questions: Questions::default(),
        accepted: Map::new(),
        gate_answers: Map::new(),
        bindings: BTreeMap::default(),
        flow_handles: Default::default(),
        token_id: None,
        nonce: None,
        epoch: None,
    }
}

/// What a request must match for its token to be accepted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding<'a> {
    pub(crate) method: &'a str,
    pub(crate) target: &'a str,
    pub(crate) args: &'a Arguments<'a>,
    pub(crate) principal: Option<&'a [u8]>,
    pub(crate) audience: Option<&'a str>,
}

/// The digest bound as `a`: base64url of the first 16 bytes of SHA-256 over the canonical JSON of
/// the arguments, numbers exactly as written. No arguments, `null` and `{}` are the same call.
/// Fails on a repeated key at any depth.
pub(crate) fn args_digest(
    arguments: Option<&RawValue>,
) -> Result<String, crate::wire::canonical::Error> {
    let digest = match arguments.filter(|raw| raw.get().trim() != "null") {
        Some(raw) => crate::wire::canonical::digest_raw(raw)?,
        None => crate::wire::canonical::digest_text("{}")?,
    };
    Ok(URL_SAFE_NO_PAD.encode(&digest[..16]))
}

/// The digest bound as `x`: base64url of the first 16 bytes of BLAKE3 over the arguments' text
/// exactly as sent (empty when absent). Equal texts have equal canonical forms, so a match here
/// binds as surely as [`args_digest`], without its pass. BLAKE3 rather than SHA-256 because this
/// digest is taken over every retry's arguments, however large: it hashes several times faster.
pub(crate) fn exact_digest(arguments: Option<&RawValue>) -> String {
    let text = arguments.map_or("", RawValue::get);
    let digest = EXACT.clone().update(text.as_bytes()).finalize();
    URL_SAFE_NO_PAD.encode(&digest.as_bytes()[..16])
}

const EXACT_CONTEXT: &str = "tower-elicitation 2026-11-30 exact arguments v1";

/// The hasher for [`exact_digest`], its key derived from the context once rather than per call.
static EXACT: LazyLock<blake3::Hasher> =
    LazyLock::new(|| blake3::Hasher::new_derive_key(EXACT_CONTEXT));

/// A call's arguments as a token binds them: the digest of their exact text, and the digest of
/// their canonical form, computed only when needed.
#[derive(Debug)]
pub(crate) struct Arguments<'a> {
    raw: Option<&'a RawValue>,
    exact: Option<String>,
    canonical: OnceCell<Result<String, crate::wire::canonical::Error>>,
}

impl<'a> Arguments<'a> {
    /// The arguments of a request, as sent (`None`: absent).
    pub(crate) fn new(raw: Option<&'a RawValue>) -> Self {
        Self {
            raw,
            exact: Some(exact_digest(raw)),
            canonical: OnceCell::new(),
        }
    }

    /// Arguments known only by their canonical digest.
    #[cfg(feature = "__fuzz")]
    pub(crate) fn from_digest(canonical: String) -> Self {
        Self {
            raw: None,
            exact: None,
            canonical: OnceCell::from(Ok(canonical)),
        }
    }

    /// The digest of their exact text.
    pub(crate) fn exact(&self) -> Option<&str> {
        self.exact.as_deref()
    }

    /// The digest of their canonical form ([`args_digest`]), computed on first use; `Err` for
    /// text that is not JSON or repeats a key.
    pub(crate) fn canonical(&self) -> Result<&str, &crate::wire::canonical::Error> {
        self.canonical
            .get_or_init(|| args_digest(self.raw))
            .as_deref()
    }

    /// The canonical digest if it was computed already.
    pub(crate) fn canonical_if_known(&self) -> Option<&str> {
        self.canonical.get()?.as_deref().ok()
    }

    /// Whether a token sealed with canonical digest `a` and exact digest `x` was sealed for these
    /// arguments: the same text, or else the same canonical form.
    pub(crate) fn bound_by(&self, a: &str, x: Option<&str>) -> bool {
        (x.is_some() && self.exact() == x) || self.canonical().is_ok_and(|c| c == a)
    }
}

/// [`args_digest`] of a parsed value.
#[cfg(test)]
pub(crate) fn args_digest_of(arguments: &Value) -> String {
    let raw = RawValue::from_string(arguments.to_string()).expect("JSON");
    args_digest(Some(&raw)).expect("no duplicate keys")
}

/// A keyed tag of the principal: the raw identity never appears in a token, and a tag from one
/// deployment's key says nothing in another's.
pub(crate) fn principal_tag(key: &HmacSha256, principal: &[u8]) -> String {
    let tag = key
        .clone()
        .chain_update(PRINCIPAL_LABEL)
        .chain_update(principal)
        .finalize()
        .into_bytes();
    URL_SAFE_NO_PAD.encode(&tag[..16])
}

/// The keyed tag a legacy-bridge session is bound to: `<kid>.<tag>`, the tag a token sealed with
/// the active key would carry, and which key made it (so that a session outlives a rotation for as
/// long as its key still verifies).
pub(crate) fn session_tag(keyring: &Keyring, principal: &[u8]) -> String {
    let (kid, key) = keyring.active();
    format!("{kid}.{}", principal_tag(key, principal))
}

/// Whether `tag` ([`session_tag`]) was made for `principal` with a key of `keyring`; compared in
/// constant time.
pub(crate) fn is_session_tag(keyring: &Keyring, tag: &str, principal: &[u8]) -> bool {
    let Some((kid, tag)) = tag.split_once('.') else {
        return false;
    };
    keyring.get(kid).is_some_and(|key| {
        constant_time_eq::constant_time_eq(principal_tag(key, principal).as_bytes(), tag.as_bytes())
    })
}

/// A fresh random token id: 16 bytes from the OS, base64url (22 characters).
pub(crate) fn token_id() -> String {
    URL_SAFE_NO_PAD.encode(crate::util::random::bytes::<16>())
}

const BINDING_CONTEXT: &str = "tower-elicitation 2026-12-02 gate binding v1";

/// The digest bound as `b` for one gate: base64url of the first 16 bytes of BLAKE3 (derive-key
/// mode) over what the gate's binding says, so a token stays small whatever it says.
pub(crate) fn binding_digest(text: &str) -> String {
    let digest = blake3::derive_key(BINDING_CONTEXT, text.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..16])
}

const FLOW_LABEL: &[u8] = b"tower-elicitation/flow/v1\0";

/// A fresh call nonce (claim `n`): 16 bytes from the OS, base64url (22 characters).
pub(crate) fn call_nonce() -> String {
    token_id()
}

/// An unguessable handle for one call's URL flow behind one gate: the same for every round of the
/// same call (its nonce, claim `n`, is carried from round to round), different for any other
/// call, identical or not, and meaningless without the key. `parts` are the method, target,
/// arguments' digest, gate key and the call's nonce (empty for a token sealed without one).
pub(crate) fn flow_handle(key: &HmacSha256, principal: Option<&[u8]>, parts: [&str; 5]) -> String {
    let mut mac = key.clone().chain_update(FLOW_LABEL);
    // Length-prefixed, so no two different inputs run together into the same bytes.
    let principal = principal.unwrap_or_default();
    mac.update(&(principal.len() as u64).to_be_bytes());
    mac.update(principal);
    for part in parts {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    URL_SAFE_NO_PAD.encode(&mac.finalize().into_bytes()[..18])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_tag_is_keyed_and_names_its_key() {
        let ring = Keyring::new("k1", [7u8; 32]).unwrap();
        let tag = session_tag(&ring, b"Bearer pin-1234");
        assert!(tag.starts_with("k1."), "{tag}");
        assert!(is_session_tag(&ring, &tag, b"Bearer pin-1234"));
        assert!(!is_session_tag(&ring, &tag, b"Bearer pin-1235"));
        // Without the key, the tag is no test of a guess: another key tags the same credential
        // otherwise, and the unkeyed digest the bridge used to keep is not it.
        let other = Keyring::new("k1", [8u8; 32]).unwrap();
        assert_ne!(session_tag(&other, b"Bearer pin-1234"), tag);
        assert!(!is_session_tag(&other, &tag, b"Bearer pin-1234"));
        let unkeyed = blake3::derive_key(
            "tower-elicitation 2026 legacy bridge session principal",
            b"Bearer pin-1234",
        );
        assert!(!tag.contains(&blake3::Hash::from(unkeyed).to_hex().to_string()));
    }

    #[test]
    fn a_session_tag_outlives_a_rotation_while_its_key_verifies() {
        let old = Keyring::new("k1", [7u8; 32]).unwrap();
        let tag = session_tag(&old, b"alice");
        let rotated = Keyring::new("k2", [9u8; 32])
            .unwrap()
            .with_verify_key("k1", [7u8; 32])
            .unwrap();
        assert!(is_session_tag(&rotated, &tag, b"alice"));
        let retired = Keyring::new("k2", [9u8; 32]).unwrap();
        assert!(!is_session_tag(&retired, &tag, b"alice"));
        assert!(!is_session_tag(&rotated, "no-dot", b"alice"));
    }

    /// The digest of a call's arguments is the same whatever order a `Map` keeps its keys in
    /// (serde_json's `preserve_order`): pinned to the value it had before that feature.
    #[test]
    fn the_arguments_digest_is_pinned() {
        let text = r#"{"b":1,"a":{"y":[2,{"d":1,"c":0}],"x":"é"}}"#;
        let raw = RawValue::from_string(text.to_owned()).unwrap();
        assert_eq!(args_digest(Some(&raw)).unwrap(), "iiVjEs2L8Jmx4m9RCT4ycw");
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(args_digest_of(&value), "iiVjEs2L8Jmx4m9RCT4ycw");
    }

    #[test]
    fn the_exact_digest_is_blake3_in_derive_key_mode_over_the_text() {
        for text in ["{}", r#"{"environment":"staging"}"#, "[1, 2 ,3]"] {
            let raw = RawValue::from_string(text.to_owned()).unwrap();
            let fresh = blake3::Hasher::new_derive_key(EXACT_CONTEXT)
                .update(text.as_bytes())
                .finalize();
            assert_eq!(
                exact_digest(Some(&raw)),
                URL_SAFE_NO_PAD.encode(&fresh.as_bytes()[..16])
            );
        }
        // Absent arguments are the empty text, and differ from `{}`.
        let empty = blake3::Hasher::new_derive_key(EXACT_CONTEXT).finalize();
        assert_eq!(
            exact_digest(None),
            URL_SAFE_NO_PAD.encode(&empty.as_bytes()[..16])
        );
        let braces = RawValue::from_string("{}".to_owned()).unwrap();
        assert_ne!(exact_digest(None), exact_digest(Some(&braces)));
    }
}
