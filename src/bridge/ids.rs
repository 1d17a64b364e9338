//! The ids the bridge makes: session ids, request ids on a call's stream, `elicitationId`s. All
//! from the operating system's CSPRNG.

/// 128 bits, as 32 lowercase hex digits: a session id (visible ASCII, as the spec asks).
pub(crate) fn new_session_id() -> String {
    random_hex(16)
}

/// `len` random bytes as hex.
pub(crate) fn random_hex(len: usize) -> String {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    hex(&bytes)
}

/// A random (version 4) UUID.
pub(crate) fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random generator failed");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
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
