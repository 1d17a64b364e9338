//! What every store answers: [`Consumed`], [`StoreError`], and the boxed future of a `dyn` store.

use std::fmt;

use crate::BoxError;
use crate::util::BoxFuture;

/// What a store said of a token id it was asked to consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Consumed {
    /// The id was not spent: it is now, and the retry may go on.
    Fresh,
    /// The id was spent already: the token is being replayed.
    Replayed,
}

/// Why a store (of spent token ids, of bridge sessions, of pending answers) could not do what was
/// asked. The layers fail closed on it: nothing is forwarded.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store holds as many entries as it may: what needed a new one is refused.
    Full,
    /// The store could not be reached, did not answer in time, or answered something unreadable.
    Unavailable(BoxError),
}

impl StoreError {
    /// Creates a [`StoreError::Unavailable`], with its cause.
    pub fn unavailable(cause: impl Into<BoxError>) -> Self {
        Self::Unavailable(cause.into())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("the store is full"),
            Self::Unavailable(error) => write!(f, "the store is unavailable: {error}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Full => None,
            Self::Unavailable(error) => Some(&**error),
        }
    }
}

/// What the crate's `dyn`-stored stores return: a boxed future of the store's answer.
pub(crate) type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;
