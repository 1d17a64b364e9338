//! Sealed `requestState` tokens: keys, format and claims.

pub(crate) mod claims;
pub(crate) mod keyring;
pub(crate) mod sealed;
pub(crate) mod token;

pub use keyring::{KEYS_ENV, Keyring, KeyringError, MIN_KEY_LEN};
