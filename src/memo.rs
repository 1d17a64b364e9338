//! Shared values by the text they were read from, kept up to a bound.
//!
//! What the layer reads from a text (a question, a schema, a call's `_meta`) is a pure function
//! of it, and clients and inner services send the same texts again and again: each is read once,
//! then found by one hash of its text.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

/// Values by their text: at most `CAPACITY` of them, then the map is cleared whole.
///
/// A miss only costs the read again, so the bound caps memory without touching correctness.
pub(crate) struct Bounded<V, const CAPACITY: usize>(
    RwLock<HashMap<Box<str>, Arc<V>, ahash::RandomState>>,
);

impl<V, const CAPACITY: usize> Default for Bounded<V, CAPACITY> {
    fn default() -> Self {
        Self(RwLock::default())
    }
}

impl<V, const CAPACITY: usize> Bounded<V, CAPACITY> {
    /// The value for `key`, made by `make` on a miss (a failure is not kept).
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        if let Some(found) = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Ok(Arc::clone(found));
        }
        let made = Arc::new(make()?);
        let mut entries = self.0.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have made the same value meanwhile: keep the first one so every
        // caller shares it.
        if let Some(found) = entries.get(key) {
            return Ok(Arc::clone(found));
        }
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(key.into(), Arc::clone(&made));
        Ok(made)
    }

    /// The value kept for `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<V>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .map(Arc::clone)
    }

    /// Keeps `value` for `key` (clearing the map first when it is full).
    pub(crate) fn insert(&self, key: &str, value: Arc<V>) {
        let mut entries = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CAPACITY && !entries.contains_key(key) {
            entries.clear();
        }
        entries.insert(key.into(), value);
    }

    /// How many values are kept.
    pub(crate) fn len(&self) -> usize {
        self.0.read().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_made_once_per_text_and_a_full_memo_starts_over() {
        let memo = Bounded::<String, 3>::default();
        let made = std::cell::Cell::new(0);
        let get = |key: &str| {
            memo.get_or_try_insert(key, || {
                made.set(made.get() + 1);
                Ok::<_, ()>(key.to_uppercase())
            })
            .unwrap()
        };
        let first = get("a");
        assert!(Arc::ptr_eq(&first, &get("a")));
        get("b");
        get("c");
        assert_eq!(made.get(), 3);
        get("d");
        assert_eq!(made.get(), 4);
        assert_eq!(memo.len(), 1, "the fourth text cleared the memo");
        assert_eq!(*get("a"), "A");
        assert_eq!(made.get(), 5);
        assert_eq!(memo.len(), 2);

        let failed = memo.get_or_try_insert("e", || Err::<String, _>("no"));
        assert_eq!(failed.unwrap_err(), "no");
        assert_eq!(memo.len(), 2, "a failure is not kept");
    }
}
