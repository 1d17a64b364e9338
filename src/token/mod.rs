//! Sealed `requestState` tokens: keys, format and claims.

pub(crate) mod claims;
pub(crate) mod format;
pub(crate) mod keyring;
pub(crate) mod sealed;

pub(crate) use claims::{is_session_tag, session_tag};
pub(crate) use format::{Clock, open, seal, unix_now};
pub use keyring::{KEYS_ENV, Keyring, KeyringError, MIN_KEY_LEN};
