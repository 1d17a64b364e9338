//! Randomness: every random byte the crate uses comes from the operating system's CSPRNG,
//! through here.

/// `N` random bytes.
///
/// # Panics
///
/// If the operating system's random generator fails. Keys, token ids and session ids made
/// without it could be predicted: stopping is far better than going on. This is the crate's one
/// place for that panic.
pub(crate) fn bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    bytes
}
