//! The ids the bridge makes: session ids, request ids on a call's stream, `elicitationId`s. All
//! from the operating system's CSPRNG.

use uuid::{Builder, Uuid};

use crate::util::random;

/// 128 random bits, as 32 lowercase hex digits: a session id (visible ASCII, as the spec asks).
pub(crate) fn new_session_id() -> String {
    Uuid::from_bytes(random::bytes()).simple().to_string()
}

/// 64 random bits, as 16 lowercase hex digits: the tail of a request id on a call's stream.
pub(crate) fn random_hex_64() -> String {
    format!("{:016x}", u64::from_ne_bytes(random::bytes()))
}

/// A random (version 4) UUID, hyphenated: an `elicitationId`.
pub(crate) fn uuid_v4() -> String {
    Builder::from_random_bytes(random::bytes())
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_32_hex_digits_and_differ() {
        let id = new_session_id();
        assert_eq!(id.len(), 32);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_hexdigit() && (0x21..=0x7e).contains(&b))
        );
        assert_ne!(new_session_id(), id);
    }

    #[test]
    fn uuids_have_the_v4_shape() {
        let id = uuid_v4();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid_v4(), id);
    }
}
