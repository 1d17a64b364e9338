//! Shared values by the text they were read from, kept up to a bound in entries and in bytes.
//!
//! What the layer reads from a text (a question, a schema, a call's `_meta`) is a pure function
//! of it, and clients and inner services send the same texts again and again: each is read once,
//! then found by one hash of its text.

use std::sync::Arc;

use quick_cache::sync::Cache;

/// What a kept value costs: a fair estimate, in bytes, of the memory an entry keeps alive.
pub(crate) trait Weight {
    /// The weight of this value kept under `key`, the key's text included.
    fn weight(&self, key: &str) -> usize;
}

/// What every entry costs besides its [`Weight`]: the key's and the value's allocations, and
/// the cache's own slot.
const ENTRY_OVERHEAD: usize = 128;

/// How many independently locked parts a cache is split into, at most (each holds its share of
/// the bounds, so an entry heavier than about a quarter of `BYTES` is never kept).
const SHARDS: usize = 4;

/// Values by their text: at most `ENTRIES` of them, weighing at most `BYTES` in all.
///
/// An entry weighs its key's text plus its value's [`Weight`], and never less than
/// `BYTES / ENTRIES`, which is what bounds the count. Past either bound, quick_cache evicts
/// (entries seen once before those used again); an entry heavier than a shard's share of `BYTES`
/// is not kept at all. A miss only costs the read again, so the bounds cap memory without
/// touching correctness.
pub(crate) struct Bounded<V, const ENTRIES: usize, const BYTES: usize>(
    Cache<Box<str>, Arc<V>, Weigher, ahash::RandomState>,
);

/// [`Weight`] plus [`ENTRY_OVERHEAD`], at least `floor`.
#[derive(Clone)]
pub(crate) struct Weigher {
    floor: u64,
}

impl<V: Weight> quick_cache::Weighter<Box<str>, Arc<V>> for Weigher {
    fn weight(&self, key: &Box<str>, value: &Arc<V>) -> u64 {
        let weight = value.weight(key).saturating_add(ENTRY_OVERHEAD);
        u64::try_from(weight).unwrap_or(u64::MAX).max(self.floor)
    }
}

impl<V: Weight, const ENTRIES: usize, const BYTES: usize> Default for Bounded<V, ENTRIES, BYTES> {
    fn default() -> Self {
        let options = quick_cache::OptionsBuilder::new()
            .shards(SHARDS)
            .estimated_items_capacity(ENTRIES)
            .weight_capacity(BYTES as u64)
            .build();
        let weigher = Weigher {
            floor: (BYTES / ENTRIES.max(1)) as u64,
        };
        let cache = match options {
            Ok(options) => Cache::with_options(
                options,
                weigher,
                ahash::RandomState::default(),
                Default::default(),
            ),
            // Only a capacity left unset is an error, and both are set: never taken (the same
            // bounds, with quick_cache's default number of shards).
            Err(_) => Cache::with(
                ENTRIES,
                BYTES as u64,
                weigher,
                ahash::RandomState::default(),
                Default::default(),
            ),
        };
        Self(cache)
    }
}

impl<V: Weight, const ENTRIES: usize, const BYTES: usize> Bounded<V, ENTRIES, BYTES> {
    /// The value kept for `key`, if any.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<V>> {
        self.0.get(key)
    }

    /// Keeps `value` for `key` (unless it weighs more than a shard may hold).
    pub(crate) fn insert(&self, key: Box<str>, value: Arc<V>) {
        self.0.insert(key, value);
    }

    /// The value for `key`, made by `make` on a miss and kept (a failure is not kept).
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        if let Some(found) = self.get(key) {
            return Ok(found);
        }
        let made = Arc::new(make()?);
        self.insert(key.into(), Arc::clone(&made));
        Ok(made)
    }

    /// How many values are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// What the kept values weigh in all, in bytes: never more than `BYTES`.
    pub(crate) fn weight(&self) -> usize {
        usize::try_from(self.0.weight()).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Weight for String {
        fn weight(&self, key: &str) -> usize {
            key.len() + self.len()
        }
    }

    #[test]
    fn a_value_is_made_once_per_text_and_a_failure_is_not_kept() {
        let memo = Bounded::<String, 3, { 3 * 1024 }>::default();
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
        assert_eq!(*first, "A");
        get("b");
        get("c");
        assert_eq!(made.get(), 3);
        assert_eq!(memo.len(), 3);
        for key in ["a", "b", "c"] {
            get(key);
        }
        assert_eq!(made.get(), 3, "each text was read once");

        let failed = memo.get_or_try_insert("e", || Err::<String, _>("no"));
        assert_eq!(failed.unwrap_err(), "no");
        assert_eq!(memo.len(), 3, "a failure is not kept");
    }

    #[test]
    fn a_memo_holds_at_most_its_entries_and_its_bytes() {
        const ENTRIES: usize = 64;
        const BYTES: usize = 64 * 1024;
        let memo = Bounded::<String, ENTRIES, BYTES>::default();
        for i in 0..10_000 {
            memo.insert(format!("small {i}").into(), Arc::new(String::new()));
            assert!(memo.len() <= ENTRIES, "{} entries", memo.len());
            assert!(memo.weight() <= BYTES, "{} bytes", memo.weight());
        }
        for i in 0..1_000 {
            let large = format!("{i}").repeat(1000);
            memo.insert(format!("large {i}").into(), Arc::new(large));
            assert!(memo.weight() <= BYTES, "{} bytes", memo.weight());
        }
        assert!(memo.len() > 0);
        // What the memo holds is what it says it weighs.
        let held: usize = memo
            .0
            .iter()
            .map(|(key, value)| value.weight(&key) + ENTRY_OVERHEAD)
            .sum();
        assert!(held <= memo.weight(), "{held} > {}", memo.weight());
        // A value heavier than a shard's share is not kept.
        memo.insert("huge".into(), Arc::new("x".repeat(BYTES)));
        assert!(memo.get("huge").is_none());
        assert!(memo.weight() <= BYTES);
    }
}
