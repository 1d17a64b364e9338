//! Every store the crate reads and writes, each a trait with a bounded in-process default (and,
//! with the `redis` feature, one in Redis that every replica shares):
//!
//! - single-use tokens: where the ids of spent tokens are kept ([`TokenStore`],
//!   [`MemoryTokenStore`]; `RedisStore`);
//! - what the layer remembers per task of the Tasks extension ([`TaskStore`],
//!   [`MemoryTaskStore`]; `RedisTaskStore`);
//! - the legacy bridge's sessions ([`SessionStore`], [`SessionRecord`], [`MemorySessionStore`];
//!   `RedisSessionStore`);
//! - the message box where a call waits for its answer ([`PendingAnswers`], [`AnswerKey`],
//!   [`MemoryPendingAnswers`]; `RedisPendingAnswers`): the bridge's questions answered on another
//!   request, and the upstream adapter's retries routed to the replica holding the call.
//!
//! The rest of this page is about single-use tokens.
//!
#![doc = include_str!("../../docs/single-use.md")]

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::util::time::{unix_millis, unix_secs};

mod answers;
mod outcome;
mod sessions;
mod tasks;

pub(crate) use answers::ErasedPendingAnswers;
pub use answers::{AnswerKey, MemoryPendingAnswers, PendingAnswers};
pub(crate) use outcome::StoreFuture;
pub use outcome::{Consumed, StoreError};
pub(crate) use sessions::ErasedSessionStore;
pub use sessions::{MemorySessionStore, SessionRecord, SessionStore};
pub(crate) use tasks::ErasedTaskStore;
pub use tasks::{MemoryTaskStore, TaskStore};

/// Where the ids of spent single-use tokens are kept: consumed atomically, remembered until the
/// token could no longer be accepted.
///
/// `consume` must be atomic: of any number of concurrent calls with the same id, across every
/// replica that shares the store, exactly one sees [`Consumed::Fresh`]. It should return within
/// a bounded time (a timeout of its own): the call waits for it.
///
/// ```
/// use std::collections::HashSet;
/// use std::sync::Mutex;
/// use std::time::SystemTime;
/// use tower_elicitation::store::{Consumed, StoreError, TokenStore};
///
/// #[derive(Default)]
/// struct Tokens(Mutex<HashSet<String>>);
///
/// impl TokenStore for Tokens {
///     async fn consume(&self, id: &str, _until: SystemTime) -> Result<Consumed, StoreError> {
///         // A real store also forgets the id after `_until`, and is bounded.
///         let fresh = self.0.lock().map_err(|_| StoreError::unavailable("poisoned"))?.insert(id.to_owned());
///         Ok(if fresh { Consumed::Fresh } else { Consumed::Replayed })
///     }
/// }
/// ```
pub trait TokenStore: Send + Sync + 'static {
    /// Marks `id` spent, remembering it until `until` (the token's expiry plus the tolerated
    /// clock skew), and says whether it was spent already.
    ///
    /// # Errors
    ///
    /// [`StoreError::Full`] when the id cannot be remembered; [`StoreError::Unavailable`] when the
    /// store cannot be reached or answer in time. Either way the retry fails closed (`-32603`, HTTP
    /// 503).
    fn consume(
        &self,
        id: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send;

    /// Returns when the store's present memory of spent ids began (its epoch), which also names
    /// it: each single-use token is bound to the epoch it was sealed under (claim `e`), and is
    /// accepted only while the store is still in that epoch. A token sealed before may have been
    /// spent and then forgotten (a restart without persistence, data lost), so the layer refuses
    /// it like a spent one, and the person starts the flow again.
    ///
    /// The layer asks after each [`Consumed::Fresh`]: the answer must name the epoch in which
    /// that `consume` ran (or a later one); it may come from what the `consume` just before it
    /// learned. Two epochs of one store must never have the same time.
    ///
    /// The default, the Unix epoch, says the store never forgets an id before `until`: right for
    /// a store whose memory is durable. [`MemoryTokenStore`] answers its creation (to the
    /// millisecond); `RedisStore` (feature `redis`) keeps its epoch in Redis and notices when
    /// Redis lost it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot say: the retry is answered `-32603` (HTTP 503).
    fn epoch(&self) -> impl Future<Output = Result<SystemTime, StoreError>> + Send {
        std::future::ready(Ok(UNIX_EPOCH))
    }

    /// Returns the store's epoch as it is now, beginning one if the store has none (its first
    /// use, or after it lost its memory). The layer asks on a call's first round, before it seals
    /// anything for it, and binds every token of the call to the answer; so a token sealed after
    /// an epoch began is never refused for having been sealed before it.
    ///
    /// The default is [`epoch`](Self::epoch): right for a store that knows its epoch without
    /// asking anyone. `RedisStore` asks Redis (one round trip).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot say: the layer then binds the call's tokens to the
    /// last epoch the store named, and a retry is accepted only if the store is still in it.
    fn current_epoch(&self) -> impl Future<Output = Result<SystemTime, StoreError>> + Send {
        self.epoch()
    }
}

/// A shared store is the store it points to: one [`TokenStore`] behind several layers.
impl<T: TokenStore + ?Sized> TokenStore for Arc<T> {
    fn consume(
        &self,
        id: &str,
        until: SystemTime,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send {
        T::consume(self, id, until)
    }

    fn epoch(&self) -> impl Future<Output = Result<SystemTime, StoreError>> + Send {
        T::epoch(self)
    }

    fn current_epoch(&self) -> impl Future<Output = Result<SystemTime, StoreError>> + Send {
        T::current_epoch(self)
    }
}

/// [`TokenStore`] in a form that can be stored behind `dyn`.
pub(crate) trait ErasedTokenStore: Send + Sync {
    fn consume<'a>(&'a self, id: &'a str, until: SystemTime) -> StoreFuture<'a, Consumed>;
    fn epoch(&self) -> StoreFuture<'_, SystemTime>;
    fn current_epoch(&self) -> StoreFuture<'_, SystemTime>;
}

impl<T: TokenStore> ErasedTokenStore for T {
    fn consume<'a>(&'a self, id: &'a str, until: SystemTime) -> StoreFuture<'a, Consumed> {
        Box::pin(TokenStore::consume(self, id, until))
    }

    fn epoch(&self) -> StoreFuture<'_, SystemTime> {
        Box::pin(TokenStore::epoch(self))
    }

    fn current_epoch(&self) -> StoreFuture<'_, SystemTime> {
        Box::pin(TokenStore::current_epoch(self))
    }
}

/// The single-use store's epoch as the layer last learnt it ([`TokenStore::current_epoch`]),
/// for the first round of a call: each is bound to the store's epoch as it is then.
#[derive(Debug, Default)]
pub(crate) struct KnownEpoch {
    /// The last epoch the store named (Unix milliseconds), 0 before the first.
    epoch_ms: AtomicU64,
    /// When the last attempt failed (Unix milliseconds), or 0.
    failed_at: AtomicU64,
}

impl KnownEpoch {
    /// A failed attempt is not repeated for this long: a store that is down does not slow every
    /// first round by its timeout.
    const RETRY_AFTER_MS: u64 = 1000;

    /// The store's epoch now (Unix milliseconds). When it cannot say, or failed just now, the
    /// last epoch it named (0 if none), the failure logged: a token bound to an epoch that has
    /// ended (or to none) is refused on its retry, so this fails closed.
    pub(crate) async fn now(&self, store: &dyn ErasedTokenStore) -> u64 {
        let now = unix_millis(SystemTime::now());
        let failed_at = self.failed_at.load(Ordering::Relaxed);
        if now.saturating_sub(failed_at) >= Self::RETRY_AFTER_MS {
            match store.current_epoch().await {
                Ok(epoch) => {
                    let epoch_ms = unix_millis(epoch);
                    self.epoch_ms.store(epoch_ms, Ordering::Relaxed);
                    return epoch_ms;
                }
                Err(error) => {
                    tracing::warn!(target: "tower_elicitation", %error, "cannot learn the single-use store's epoch: this round's tokens are bound to the last one it named");
                    self.failed_at.store(now, Ordering::Relaxed);
                }
            }
        }
        self.epoch_ms.load(Ordering::Relaxed)
    }
}

/// The in-process [`TokenStore`], for one replica: spent ids in a map bounded in entries, each
/// forgotten once its token expired.
///
/// Its [epoch](TokenStore::epoch) is its creation, to the millisecond: a token sealed before it
/// (by the process before a restart, say) is refused, since the ids it spent are gone.
///
/// Over the bound it fails closed rather than forget an id that could still be replayed: a
/// retry then gets `-32603` (HTTP 503) until entries expire. Each entry takes about 100 bytes,
/// so the default bound ([`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY), 100,000 ids) is about
/// 10 MiB. Clones share the same ids. Replicas that do not share a process need a shared store
/// (`RedisStore`, feature `redis`).
///
/// See [`TokenStore`] for the contract.
#[derive(Clone)]
pub struct MemoryTokenStore {
    spent: Arc<Mutex<SpentIds>>,
    /// When it was made, in Unix milliseconds: its epoch.
    created: u64,
}

struct SpentIds {
    /// Id → until when it must be remembered, in Unix seconds.
    ids: HashMap<Box<str>, u64, ahash::RandomState>,
    capacity: usize,
    /// No entry must be kept past this before now: the earliest `until` in `ids`, or later.
    earliest: u64,
}

impl MemoryTokenStore {
    /// Default bound on the ids kept: 100,000.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// Creates a store of at most [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) ids.
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// Creates a store of at most `capacity` ids (at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            spent: Arc::new(Mutex::new(SpentIds {
                ids: HashMap::default(),
                capacity: capacity.max(1),
                earliest: u64::MAX,
            })),
            created: unix_millis(SystemTime::now()),
        }
    }

    /// Returns how many ids it holds now (some may have expired, not yet dropped).
    pub fn len(&self) -> usize {
        self.lock().ids.len()
    }

    /// Returns whether it holds no id.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SpentIds> {
        self.spent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`TokenStore::consume`] at `now` (Unix seconds).
    fn consume_at(&self, id: &str, until: u64, now: u64) -> Result<Consumed, StoreError> {
        let mut spent = self.lock();
        if let Some(kept) = spent.ids.get_mut(id) {
            if *kept > now {
                return Ok(Consumed::Replayed);
            }
            // Expired, not yet dropped: its token can no longer be accepted anyway.
            *kept = until;
            spent.earliest = spent.earliest.min(until);
            return Ok(Consumed::Fresh);
        }
        if spent.ids.len() >= spent.capacity && now >= spent.earliest {
            spent.ids.retain(|_, kept| *kept > now);
            spent.earliest = spent.ids.values().copied().min().unwrap_or(u64::MAX);
        }
        if spent.ids.len() >= spent.capacity {
            return Err(StoreError::unavailable(format!(
                "the in-process store holds {} unexpired ids, its bound",
                spent.capacity
            )));
        }
        spent.ids.insert(id.into(), until);
        spent.earliest = spent.earliest.min(until);
        Ok(Consumed::Fresh)
    }
}

impl Default for MemoryTokenStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spent = self.lock();
        f.debug_struct("MemoryTokenStore")
            .field("len", &spent.ids.len())
            .field("capacity", &spent.capacity)
            .finish()
    }
}

impl TokenStore for MemoryTokenStore {
    async fn consume(&self, id: &str, until: SystemTime) -> Result<Consumed, StoreError> {
        self.consume_at(id, unix_secs(until), unix_secs(SystemTime::now()))
    }

    async fn epoch(&self) -> Result<SystemTime, StoreError> {
        Ok(UNIX_EPOCH + Duration::from_millis(self.created))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_fresh_once_and_replayed_until_it_expires() {
        let store = MemoryTokenStore::new();
        assert_eq!(store.consume_at("a", 100, 10).unwrap(), Consumed::Fresh);
        assert_eq!(store.consume_at("a", 100, 11).unwrap(), Consumed::Replayed);
        assert_eq!(store.consume_at("a", 100, 99).unwrap(), Consumed::Replayed);
        assert_eq!(store.consume_at("b", 100, 11).unwrap(), Consumed::Fresh);
        // Past `until` its token is refused as expired; the id may go.
        assert_eq!(store.consume_at("a", 200, 100).unwrap(), Consumed::Fresh);
        assert_eq!(store.consume_at("a", 200, 150).unwrap(), Consumed::Replayed);
    }

    #[test]
    fn over_the_bound_it_fails_closed_until_ids_expire() {
        let store = MemoryTokenStore::with_capacity(2);
        assert_eq!(store.consume_at("a", 100, 10).unwrap(), Consumed::Fresh);
        assert_eq!(store.consume_at("b", 50, 10).unwrap(), Consumed::Fresh);
        // Full of unexpired ids: it refuses rather than forget one.
        assert!(store.consume_at("c", 100, 20).is_err());
        assert_eq!(store.consume_at("a", 100, 20).unwrap(), Consumed::Replayed);
        assert_eq!(store.len(), 2);
        // Once `b` expired, there is room again; `a` is still remembered.
        assert_eq!(store.consume_at("c", 100, 50).unwrap(), Consumed::Fresh);
        assert_eq!(store.consume_at("a", 100, 50).unwrap(), Consumed::Replayed);
        assert!(store.consume_at("d", 100, 60).is_err());
    }

    #[tokio::test]
    async fn an_arc_of_a_store_is_the_store_it_shares() {
        let store = Arc::new(MemoryTokenStore::new());
        let until = SystemTime::now() + Duration::from_secs(60);
        let shared = Arc::clone(&store);
        assert_eq!(
            TokenStore::consume(&shared, "a", until).await.unwrap(),
            Consumed::Fresh
        );
        assert_eq!(
            TokenStore::consume(&*store, "a", until).await.unwrap(),
            Consumed::Replayed
        );
        assert_eq!(
            TokenStore::epoch(&shared).await.unwrap(),
            TokenStore::epoch(&*store).await.unwrap()
        );
        // And a layer takes it, so several layers can share one store of any kind.
        let layer = crate::ElicitationLayer::new(crate::Keyring::new("k1", [7u8; 32]).unwrap());
        let _ = layer.single_use(shared);
    }

    #[test]
    fn clones_share_their_ids() {
        let store = MemoryTokenStore::new();
        let other = store.clone();
        assert_eq!(store.consume_at("a", 100, 10).unwrap(), Consumed::Fresh);
        assert_eq!(other.consume_at("a", 100, 10).unwrap(), Consumed::Replayed);
    }

    #[tokio::test]
    async fn its_epoch_is_its_creation_to_the_millisecond() {
        let before = unix_millis(SystemTime::now());
        let store = MemoryTokenStore::new();
        let epoch = unix_millis(TokenStore::epoch(&store).await.unwrap());
        assert!(epoch >= before && epoch <= unix_millis(SystemTime::now()));
        assert_eq!(
            unix_millis(TokenStore::current_epoch(&store).await.unwrap()),
            epoch
        );
    }
}
