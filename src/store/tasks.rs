//! What the layer remembers per task of the Tasks extension ([`TaskStore`]): whose task it is,
//! the questions it asked, which were answered. In process ([`MemoryTaskStore`]) by default.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use super::outcome::{Consumed, StoreError, StoreFuture};
use crate::util::time::unix_secs;

/// Where the layer keeps what it knows of each task (Tasks extension, SEP-2663) between
/// requests: a record per task id, opaque to the store, and the keys of the task's questions
/// already answered.
///
/// A `tasks/update` is judged against the record of its task; with no record (a task the layer
/// did not see created, a record forgotten or kept on another replica's store) the update is
/// refused, never forwarded unchecked. Replicas that serve the same clients without sticky
/// routing need a shared store: `redis::RedisTaskStore` (feature `redis`) is one.
///
/// `spend` must be atomic: of any number of concurrent calls with the same task id and key,
/// across every replica that shares the store, exactly one sees [`Consumed::Fresh`]. Each call
/// should return within a bounded time: the request waits for it.
///
/// ```
/// use std::collections::{HashMap, HashSet};
/// use std::sync::Mutex;
/// use std::time::SystemTime;
/// use tower_elicitation::store::{Consumed, StoreError, TaskStore};
///
/// #[derive(Default)]
/// struct Tasks {
///     records: Mutex<HashMap<String, String>>,
///     spent: Mutex<HashSet<(String, String)>>,
/// }
///
/// impl TaskStore for Tasks {
///     // A real store also forgets entries after `_until`, and is bounded.
///     async fn remember(&self, task: &str, record: &str, _until: SystemTime) -> Result<(), StoreError> {
///         self.records.lock().unwrap().insert(task.to_owned(), record.to_owned());
///         Ok(())
///     }
///     async fn recall(&self, task: &str) -> Result<Option<String>, StoreError> {
///         Ok(self.records.lock().unwrap().get(task).cloned())
///     }
///     async fn spend(&self, task: &str, key: &str, _until: SystemTime) -> Result<Consumed, StoreError> {
///         let fresh = self.spent.lock().unwrap().insert((task.to_owned(), key.to_owned()));
///         Ok(if fresh { Consumed::Fresh } else { Consumed::Replayed })
///     }
/// }
/// ```
pub trait TaskStore: Send + Sync + 'static {
    /// Keeps `record` (the layer's own text, kept as it is) for the task `task_id` until `until`,
    /// in place of what was kept for it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when it cannot be kept: the task's answers are then refused until it is.
    fn remember(
        &self,
        task_id: &str,
        record: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The record kept for `task_id`, if any (and not expired).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot say: the request is answered `-32603` (HTTP 503).
    fn recall(
        &self,
        task_id: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Marks the question `key` of task `task_id` answered, remembering it until `until`, and
    /// says whether it was answered already.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot say: the update is answered `-32603` (HTTP 503).
    fn spend(
        &self,
        task_id: &str,
        key: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send;
}

/// A shared store is the store it points to: one [`TaskStore`] behind several layers.
impl<T: TaskStore + ?Sized> TaskStore for Arc<T> {
    fn remember(
        &self,
        task_id: &str,
        record: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        T::remember(self, task_id, record, until)
    }

    fn recall(
        &self,
        task_id: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        T::recall(self, task_id)
    }

    fn spend(
        &self,
        task_id: &str,
        key: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send {
        T::spend(self, task_id, key, until)
    }
}

/// [`TaskStore`] in a form that can be stored behind `dyn`.
pub(crate) trait ErasedTaskStore: Send + Sync {
    fn remember<'a>(
        &'a self,
        task_id: &'a str,
        record: &'a str,
        until: SystemTime,
    ) -> StoreFuture<'a, ()>;
    fn recall<'a>(&'a self, task_id: &'a str) -> StoreFuture<'a, Option<String>>;
    fn spend<'a>(
        &'a self,
        task_id: &'a str,
        key: &'a str,
        until: SystemTime,
    ) -> StoreFuture<'a, Consumed>;
}

impl<T: TaskStore> ErasedTaskStore for T {
    fn remember<'a>(
        &'a self,
        task_id: &'a str,
        record: &'a str,
        until: SystemTime,
    ) -> StoreFuture<'a, ()> {
        Box::pin(TaskStore::remember(self, task_id, record, until))
    }

    fn recall<'a>(&'a self, task_id: &'a str) -> StoreFuture<'a, Option<String>> {
        Box::pin(TaskStore::recall(self, task_id))
    }

    fn spend<'a>(
        &'a self,
        task_id: &'a str,
        key: &'a str,
        until: SystemTime,
    ) -> StoreFuture<'a, Consumed> {
        Box::pin(TaskStore::spend(self, task_id, key, until))
    }
}

/// The in-process [`TaskStore`], the layer's default, for one replica (or sticky routing):
/// records and answered keys in maps bounded in entries, each forgotten once expired.
///
/// Over the bound it fails closed: a task it cannot remember has its answers refused, and a key
/// it cannot mark answered is not forwarded. Clones share their entries.
#[derive(Clone)]
pub struct MemoryTaskStore {
    inner: Arc<Mutex<Entries>>,
}

struct Entries {
    /// Task id → (record, until when, in Unix seconds).
    records: HashMap<Box<str>, (Box<str>, u64), ahash::RandomState>,
    /// `(task id, key)` → until when, in Unix seconds.
    spent: HashMap<(Box<str>, Box<str>), u64, ahash::RandomState>,
    capacity: usize,
}

impl MemoryTaskStore {
    /// Default bound on the tasks, and apart on the answered keys, kept: 10,000 each.
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// Creates a store of at most [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) tasks.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// Creates a store of at most `capacity` tasks, and as many answered keys (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Entries {
                records: HashMap::default(),
                spent: HashMap::default(),
                capacity: capacity.max(1),
            })),
        }
    }

    /// Returns how many tasks it remembers now (some may have expired, not yet dropped).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Returns whether it remembers no task.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember_at(
        &self,
        task_id: &str,
        record: &str,
        until: u64,
        now: u64,
    ) -> Result<(), StoreError> {
        let mut entries = self.lock();
        let capacity = entries.capacity;
        if !entries.records.contains_key(task_id) && entries.records.len() >= capacity {
            entries.records.retain(|_, (_, kept)| *kept > now);
            if entries.records.len() >= capacity {
                return Err(StoreError::Full);
            }
        }
        entries
            .records
            .insert(task_id.into(), (record.into(), until));
        Ok(())
    }

    fn recall_at(&self, task_id: &str, now: u64) -> Option<String> {
        let entries = self.lock();
        entries
            .records
            .get(task_id)
            .filter(|(_, until)| *until > now)
            .map(|(record, _)| record.to_string())
    }

    fn spend_at(
        &self,
        task_id: &str,
        key: &str,
        until: u64,
        now: u64,
    ) -> Result<Consumed, StoreError> {
        let mut entries = self.lock();
        let id = (Box::<str>::from(task_id), Box::<str>::from(key));
        if let Some(kept) = entries.spent.get_mut(&id) {
            if *kept > now {
                return Ok(Consumed::Replayed);
            }
            *kept = until;
            return Ok(Consumed::Fresh);
        }
        let capacity = entries.capacity;
        if entries.spent.len() >= capacity {
            entries.spent.retain(|_, kept| *kept > now);
            if entries.spent.len() >= capacity {
                return Err(StoreError::Full);
            }
        }
        entries.spent.insert(id, until);
        Ok(Consumed::Fresh)
    }
}

impl Default for MemoryTaskStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.lock();
        f.debug_struct("MemoryTaskStore")
            .field("tasks", &entries.records.len())
            .field("answered", &entries.spent.len())
            .field("capacity", &entries.capacity)
            .finish()
    }
}

impl TaskStore for MemoryTaskStore {
    async fn remember(&self, id: &str, record: &str, until: SystemTime) -> Result<(), StoreError> {
        self.remember_at(id, record, unix_secs(until), unix_secs(SystemTime::now()))
    }

    async fn recall(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.recall_at(id, unix_secs(SystemTime::now())))
    }

    async fn spend(&self, id: &str, key: &str, until: SystemTime) -> Result<Consumed, StoreError> {
        self.spend_at(id, key, unix_secs(until), unix_secs(SystemTime::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_recalled_until_they_expire_and_replaced() {
        let store = MemoryTaskStore::new();
        store.remember_at("t", "a", 100, 10).unwrap();
        assert_eq!(store.recall_at("t", 50).as_deref(), Some("a"));
        store.remember_at("t", "b", 100, 10).unwrap();
        assert_eq!(store.recall_at("t", 50).as_deref(), Some("b"));
        assert_eq!(store.recall_at("t", 100), None);
        assert_eq!(store.recall_at("u", 10), None);
    }

    #[test]
    fn a_key_is_spent_once_per_task() {
        let store = MemoryTaskStore::new();
        assert_eq!(store.spend_at("t", "k", 100, 10).unwrap(), Consumed::Fresh);
        assert_eq!(
            store.spend_at("t", "k", 100, 11).unwrap(),
            Consumed::Replayed
        );
        assert_eq!(store.spend_at("u", "k", 100, 11).unwrap(), Consumed::Fresh);
    }

    #[test]
    fn over_the_bound_it_fails_closed_until_entries_expire() {
        let store = MemoryTaskStore::with_capacity(1);
        store.remember_at("t", "a", 50, 10).unwrap();
        assert!(store.remember_at("u", "a", 100, 20).is_err());
        store.remember_at("t", "b", 50, 20).unwrap();
        store.remember_at("u", "a", 100, 60).unwrap();
        assert_eq!(store.spend_at("t", "k", 50, 10).unwrap(), Consumed::Fresh);
        assert!(store.spend_at("t", "j", 50, 10).is_err());
        assert_eq!(store.spend_at("t", "j", 100, 60).unwrap(), Consumed::Fresh);
    }
}
