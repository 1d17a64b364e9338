//! The one wall clock: Unix time, as tokens and stores count it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds of `time` (0 before the epoch).
pub(crate) fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Now, in Unix seconds: a token is dated when it is sealed, not when its request arrived.
pub(crate) fn unix_now() -> u64 {
    unix_secs(SystemTime::now())
}

/// Unix milliseconds of `time` (0 before the epoch, `u64::MAX` past what it holds).
pub(crate) fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
