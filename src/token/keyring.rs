//! Keys that sign and verify sealed tokens.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// The environment variable [`Keyring::from_env`] reads.
pub const KEYS_ENV: &str = "MCP_REQUEST_STATE_KEYS";

/// The shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 32;

const MAX_KID_LEN: usize = 16;

/// The HMAC keys that seal and open `requestState` tokens.
///
/// One key, the *active* key, signs every new token; every key in the ring verifies. Each key has
/// a short key id (`kid`) that travels in the token, so verification never has to try keys in
/// turn.
///
/// # Rotation
///
/// Rotate without failing a single in-flight round:
///
/// 1. Add the new key as verify-only on every replica: `old:…,new:…` (the first key signs).
/// 2. Once every replica has it, make it the signer: `new:…,old:…`.
/// 3. One token lifetime later (the TTL, 600 s by default, plus the 60 s clock skew), drop the
///    old key: `new:…`.
///
/// Tokens signed with a key that is no longer listed are refused like any tampered token.
///
/// # Example
///
/// ```
/// use tower_elicitation::Keyring;
///
/// let keyring = Keyring::new("k2026", [7u8; 32])?
///     .with_verify_key("k2025", [9u8; 32])?;
/// assert_eq!(keyring.active_kid(), "k2026");
///
/// // The same ring, as `MCP_REQUEST_STATE_KEYS` spells it.
/// let spec = "k2026:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc,k2025:CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk";
/// assert_eq!(Keyring::parse(spec)?.kids().collect::<Vec<_>>(), ["k2026", "k2025"]);
/// # Ok::<(), tower_elicitation::KeyringError>(())
/// ```
#[derive(Clone)]
pub struct Keyring {
    keys: Arc<[Key]>,
}

struct Key {
    kid: String,
    mac: HmacSha256,
}

impl Keyring {
    /// Creates a keyring with one key, which signs and verifies.
    ///
    /// The key id is 1 to 16 characters of `A-Z a-z 0-9 _ -`; the key at least 32 bytes.
    ///
    /// # Errors
    ///
    /// [`KeyringError::InvalidKid`] for a malformed key id; [`KeyringError::KeyTooShort`] for a key
    /// shorter than [`MIN_KEY_LEN`] bytes.
    pub fn new(kid: &str, key: impl AsRef<[u8]>) -> Result<Self, KeyringError> {
        Ok(Self {
            keys: Arc::from(vec![Key::new(kid, key.as_ref())?]),
        })
    }

    /// Adds a key that verifies tokens but never signs new ones (a retired or upcoming key).
    ///
    /// # Errors
    ///
    /// The errors of [`Keyring::new`]; [`KeyringError::DuplicateKid`] when the keyring already has
    /// a key with that id.
    pub fn with_verify_key(self, kid: &str, key: impl AsRef<[u8]>) -> Result<Self, KeyringError> {
        let added = Key::new(kid, key.as_ref())?;
        if self.keys.iter().any(|k| k.kid == added.kid) {
            return Err(KeyringError::DuplicateKid(added.kid));
        }
        let mut keys: Vec<Key> = self.keys.iter().cloned().collect();
        keys.push(added);
        Ok(Self {
            keys: Arc::from(keys),
        })
    }

    /// Parses `kid:base64url-key[,kid:base64url-key…]`; the first key signs, all verify.
    ///
    /// Keys are base64url (padding optional; the standard alphabet is accepted too). Spaces around
    /// entries are ignored.
    ///
    /// # Errors
    ///
    /// [`KeyringError::Empty`] when no key is given; [`KeyringError::Malformed`] for an entry that
    /// is not `kid:key` or a key that is not base64; the errors of [`Keyring::new`] and
    /// [`Keyring::with_verify_key`] for each key.
    pub fn parse(spec: &str) -> Result<Self, KeyringError> {
        let mut entries = spec.split(',').map(str::trim).filter(|e| !e.is_empty());
        let first = entries.next().ok_or(KeyringError::Empty)?;
        let (kid, key) = parse_entry(first)?;
        let mut ring = Self::new(kid, key)?;
        for entry in entries {
            let (kid, key) = parse_entry(entry)?;
            ring = ring.with_verify_key(kid, key)?;
        }
        Ok(ring)
    }

    /// Reads [`KEYS_ENV`] (`MCP_REQUEST_STATE_KEYS`) with [`Keyring::parse`].
    ///
    /// ```
    /// use tower_elicitation::{KEYS_ENV, Keyring, KeyringError};
    ///
    /// # // SAFETY: the doctest is single-threaded.
    /// # unsafe { std::env::remove_var(KEYS_ENV) };
    /// assert_eq!(Keyring::from_env().unwrap_err(), KeyringError::Unset);
    /// ```
    ///
    /// # Errors
    ///
    /// [`KeyringError::Unset`] when the variable is unset or blank; the errors of
    /// [`Keyring::parse`] when it is set but malformed, so a typo never silently falls back to a
    /// random key.
    pub fn from_env() -> Result<Self, KeyringError> {
        match std::env::var(KEYS_ENV) {
            Ok(spec) if !spec.trim().is_empty() => Self::parse(&spec),
            Ok(_) | Err(std::env::VarError::NotPresent) => Err(KeyringError::Unset),
            Err(std::env::VarError::NotUnicode(_)) => Err(KeyringError::Malformed(
                "the variable is not valid Unicode".into(),
            )),
        }
    }

    /// Reads the keys with [`Keyring::from_env`], or, when the variable is unset, [`Keyring::ephemeral`] with a
    /// loud warning (through `tracing`) that retries will fail after a restart and across
    /// replicas. For examples and local development; production sets the variable.
    ///
    /// ```
    /// # // SAFETY: the doctest is single-threaded.
    /// # unsafe { std::env::remove_var(tower_elicitation::KEYS_ENV) };
    /// let keyring = tower_elicitation::Keyring::from_env_or_ephemeral()?;
    /// assert_eq!(keyring.active_kid(), "ephemeral");
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The errors of [`Keyring::parse`] when the variable is set but malformed.
    ///
    /// # Panics
    ///
    /// When the variable is unset and the operating system's random number generator fails, as
    /// [`Keyring::ephemeral`] does.
    pub fn from_env_or_ephemeral() -> Result<Self, KeyringError> {
        match Self::from_env() {
            Err(KeyringError::Unset) => {}
            found => return found,
        }
        tracing::warn!(
            target: "tower_elicitation",
            "{KEYS_ENV} is not set: signing requestState with a random key for this process only. \
             Retries will FAIL after a restart and across replicas. Set \
             {KEYS_ENV}=<kid>:<base64url key of at least 32 bytes> (e.g. \
             k1:$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')), the same value on \
             every replica."
        );
        Ok(Self::ephemeral())
    }

    /// Creates a keyring with one fresh random 32-byte key, key id `ephemeral`.
    ///
    /// For demos and tests only: tokens it signs fail to verify after a restart and on any other
    /// replica, so clients mid-flow see `Invalid or expired requestState`.
    ///
    /// # Panics
    ///
    /// If the operating system's random number generator fails: a predictable key would be far
    /// worse than stopping.
    pub fn ephemeral() -> Self {
        let key: [u8; MIN_KEY_LEN] = crate::util::random::bytes();
        Self::new("ephemeral", key).expect("a 32-byte key and a valid kid are always accepted")
    }

    /// Returns the key id of the signing key.
    pub fn active_kid(&self) -> &str {
        &self.keys[0].kid
    }

    /// Returns every key id, the signing key first.
    pub fn kids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.kid.as_str())
    }

    /// The signing key: its id and a pre-keyed MAC to clone per use.
    pub(crate) fn active(&self) -> (&str, &HmacSha256) {
        let key = &self.keys[0];
        (&key.kid, &key.mac)
    }

    /// The pre-keyed MAC for `kid`, if the ring has it.
    pub(crate) fn get(&self, kid: &str) -> Option<&HmacSha256> {
        self.keys.iter().find(|k| k.kid == kid).map(|k| &k.mac)
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Key material never reaches a log.
        f.debug_struct("Keyring")
            .field("kids", &self.kids().collect::<Vec<_>>())
            .finish()
    }
}

impl Key {
    fn new(kid: &str, key: &[u8]) -> Result<Self, KeyringError> {
        if kid.is_empty()
            || kid.len() > MAX_KID_LEN
            || !kid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(KeyringError::InvalidKid(kid.to_owned()));
        }
        if key.len() < MIN_KEY_LEN {
            return Err(KeyringError::KeyTooShort {
                kid: kid.to_owned(),
                len: key.len(),
            });
        }
        let mac = HmacSha256::new_from_slice(key).map_err(|_| KeyringError::KeyTooShort {
            kid: kid.to_owned(),
            len: key.len(),
        })?;
        Ok(Self {
            kid: kid.to_owned(),
            mac,
        })
    }
}

impl Clone for Key {
    fn clone(&self) -> Self {
        Self {
            kid: self.kid.clone(),
            mac: self.mac.clone(),
        }
    }
}

fn parse_entry(entry: &str) -> Result<(&str, Vec<u8>), KeyringError> {
    let (kid, key) = entry
        .split_once(':')
        .ok_or_else(|| KeyringError::Malformed("each entry must be `kid:base64url-key`".into()))?;
    let key = key.trim().trim_end_matches('=');
    let bytes = URL_SAFE_NO_PAD
        .decode(key)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(key))
        .map_err(|_| {
            KeyringError::Malformed(format!("the key of `{}` is not base64url", kid.trim()))
        })?;
    Ok((kid.trim(), bytes))
}

/// Why a [`Keyring`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyringError {
    /// [`KEYS_ENV`] is unset or blank ([`Keyring::from_env`]).
    Unset,
    /// No key was given.
    Empty,
    /// A key is shorter than [`MIN_KEY_LEN`] bytes.
    KeyTooShort {
        /// The key's id.
        kid: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A key id is empty, longer than 16 characters, or uses characters outside `A-Za-z0-9_-`.
    InvalidKid(String),
    /// Two keys share a key id.
    DuplicateKid(String),
    /// The key list could not be parsed.
    Malformed(String),
}

impl fmt::Display for KeyringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unset => write!(
                f,
                "{KEYS_ENV} is not set (expected `kid:base64url-key[,kid:base64url-key…]`)"
            ),
            Self::Empty => write!(
                f,
                "no requestState key given (expected `kid:base64url-key`)"
            ),
            Self::KeyTooShort { kid, len } => write!(
                f,
                "requestState key `{kid}` is {len} bytes; at least {MIN_KEY_LEN} are required"
            ),
            Self::InvalidKid(kid) => write!(
                f,
                "invalid key id {kid:?}: use 1 to {MAX_KID_LEN} characters of A-Z a-z 0-9 _ -"
            ),
            Self::DuplicateKid(kid) => write!(f, "key id `{kid}` is listed twice"),
            Self::Malformed(why) => write!(f, "malformed {KEYS_ENV}: {why}"),
        }
    }
}

impl std::error::Error for KeyringError {}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::Mac;

    #[test]
    fn short_keys_and_bad_kids_are_refused() {
        assert_eq!(
            Keyring::new("a", [0u8; 31]).unwrap_err(),
            KeyringError::KeyTooShort {
                kid: "a".into(),
                len: 31
            }
        );
        for kid in ["", "has.dot", "has:colon", "seventeen-chars-x", "spa ce"] {
            assert!(matches!(
                Keyring::new(kid, [0u8; 32]),
                Err(KeyringError::InvalidKid(_))
            ));
        }
        let ring = Keyring::new("a", [0u8; 32]).unwrap();
        assert_eq!(
            ring.with_verify_key("a", [1u8; 32]).unwrap_err(),
            KeyringError::DuplicateKid("a".into())
        );
    }

    #[test]
    fn parses_the_environment_format() {
        let key = URL_SAFE_NO_PAD.encode([1u8; 32]);
        let old = base64::engine::general_purpose::STANDARD.encode([2u8; 40]);
        let ring = Keyring::parse(&format!(" new:{key} , old:{old} ,")).unwrap();
        assert_eq!(ring.kids().collect::<Vec<_>>(), ["new", "old"]);
        assert_eq!(ring.active_kid(), "new");
        assert!(ring.get("old").is_some());
        assert!(ring.get("other").is_none());

        assert_eq!(Keyring::parse(" , ").unwrap_err(), KeyringError::Empty);
        assert!(matches!(
            Keyring::parse("nokey"),
            Err(KeyringError::Malformed(_))
        ));
        assert!(matches!(
            Keyring::parse("k:!!!"),
            Err(KeyringError::Malformed(_))
        ));
        assert!(matches!(
            Keyring::parse(&format!("k:{}", URL_SAFE_NO_PAD.encode([1u8; 16]))),
            Err(KeyringError::KeyTooShort { .. })
        ));
    }

    #[test]
    fn debug_never_shows_key_material() {
        let ring = Keyring::new("visible", [0xAB; 32]).unwrap();
        let shown = format!("{ring:?}");
        assert!(shown.contains("visible"));
        assert!(!shown.to_lowercase().contains("ab, "));
    }

    #[test]
    fn ephemeral_keys_differ() {
        let a = Keyring::ephemeral();
        let b = Keyring::ephemeral();
        let tag = |r: &Keyring| {
            r.active()
                .1
                .clone()
                .chain_update(b"x")
                .finalize()
                .into_bytes()
        };
        assert_ne!(tag(&a), tag(&b));
    }
}
