//! Sessions: the [`SessionStore`] trait, the record it keeps, and [`MemorySessionStore`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::outcome::{StoreError, StoreFuture};

/// What the bridge knows of a 2025-era session between its requests: what `initialize` said, the
/// level `logging/setLevel` set, and whose session it is. Serializable, so that a shared store
/// can keep it as text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SessionRecord {
    /// The protocol version negotiated at `initialize` (`2025-11-25`, `2025-06-18` or
    /// `2025-03-26`).
    pub protocol_version: String,
    /// The client's `capabilities`, as `initialize` gave them.
    pub client_capabilities: Value,
    /// The client's `clientInfo`, as `initialize` gave it.
    pub client_info: Value,
    /// The level of the last `logging/setLevel`, if any.
    pub log_level: Option<String>,
    /// A keyed tag of the caller's identity when it opened the session, `<kid>.<tag>`, made with
    /// the layer's keyring as a token's is: never the credential, nor anything a store's reader
    /// can test guesses against without the key. `None` for an anonymous caller.
    pub principal: Option<String>,
    /// The resource URIs the client subscribed to (`resources/subscribe`), relayed on its GET
    /// stream through the inner service's `subscriptions/listen`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subscriptions: Vec<String>,
}

/// Where the bridge keeps its sessions. Small on purpose: a shared (Redis) store implements the
/// same four methods.
///
/// A session id is chosen by the bridge (128 bits from the operating system's CSPRNG, as 32
/// lowercase hex digits) before [`create`](Self::create) is called. Implementors write each
/// method as an `async fn`; each should return within a bounded time (a timeout of its own), as
/// the request waits for it. Every error fails the request closed.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use tower_elicitation::store::{SessionRecord, SessionStore};
/// use tower_elicitation::store::StoreError;
///
/// #[derive(Default)]
/// struct Sessions(Mutex<HashMap<String, SessionRecord>>);
///
/// impl SessionStore for Sessions {
///     async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
///         // A real store also bounds its size and expires idle sessions.
///         self.0.lock().unwrap().insert(id.to_owned(), record);
///         Ok(())
///     }
///     async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
///         Ok(self.0.lock().unwrap().get(id).cloned())
///     }
///     async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
///         Ok(self.0.lock().unwrap().get_mut(id).map(|kept| *kept = record).is_some())
///     }
///     async fn remove(&self, id: &str) -> Result<bool, StoreError> {
///         Ok(self.0.lock().unwrap().remove(id).is_some())
///     }
/// }
/// ```
pub trait SessionStore: Send + Sync + 'static {
    /// Keeps a new session under `id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Full`] when no more sessions may be kept; [`StoreError::Unavailable`] when
    /// the store cannot be reached.
    fn create(
        &self,
        id: &str,
        record: SessionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Returns the session under `id`, its idle expiry pushed back; `None` when it was never
    /// opened, has ended or has expired.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the store cannot be reached or its record cannot be read.
    fn get(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send;

    /// Replaces the record of a live session; `false` when there is none under `id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the store cannot be reached.
    fn update(
        &self,
        id: &str,
        record: SessionRecord,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Ends the session; `false` when there was none under `id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the store cannot be reached.
    fn remove(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A shared store is the store it points to: one [`SessionStore`] behind several bridges.
impl<T: SessionStore + ?Sized> SessionStore for Arc<T> {
    fn create(
        &self,
        id: &str,
        record: SessionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        T::create(self, id, record)
    }

    fn get(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionRecord>, StoreError>> + Send {
        T::get(self, id)
    }

    fn update(
        &self,
        id: &str,
        record: SessionRecord,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        T::update(self, id, record)
    }

    fn remove(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send {
        T::remove(self, id)
    }
}

/// [`SessionStore`] in a form that can be stored behind `dyn`.
pub(crate) trait ErasedSessionStore: Send + Sync {
    fn create<'a>(&'a self, id: &'a str, record: SessionRecord) -> StoreFuture<'a, ()>;
    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>>;
    fn update<'a>(&'a self, id: &'a str, record: SessionRecord) -> StoreFuture<'a, bool>;
    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool>;
}

impl<T: SessionStore> ErasedSessionStore for T {
    fn create<'a>(&'a self, id: &'a str, record: SessionRecord) -> StoreFuture<'a, ()> {
        Box::pin(SessionStore::create(self, id, record))
    }

    fn get<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRecord>> {
        Box::pin(SessionStore::get(self, id))
    }

    fn update<'a>(&'a self, id: &'a str, record: SessionRecord) -> StoreFuture<'a, bool> {
        Box::pin(SessionStore::update(self, id, record))
    }

    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, bool> {
        Box::pin(SessionStore::remove(self, id))
    }
}

/// The in-process [`SessionStore`]: a map with an idle expiry and a cap on its size.
///
/// Sessions live in this process only: with several replicas, route a session's requests to the
/// replica that opened it (sticky routing by `Mcp-Session-Id`).
pub struct MemorySessionStore {
    idle: Duration,
    cap: usize,
    sessions: Mutex<HashMap<String, (SessionRecord, Instant)>>,
}

impl MemorySessionStore {
    /// Default idle expiry: one hour.
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);
    /// Default cap: 10,000 sessions.
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// Creates a store with the default idle expiry and capacity
    /// ([`DEFAULT_IDLE`](Self::DEFAULT_IDLE), [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY)).
    pub fn new() -> Self {
        Self::with_capacity(Self::DEFAULT_CAPACITY)
    }

    /// Creates a store holding at most `capacity` sessions (then `initialize` is refused, 503),
    /// with the default idle expiry.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            idle: Self::DEFAULT_IDLE,
            cap: capacity,
            sessions: Mutex::default(),
        }
    }

    /// Sets how long a session lives without a request (default
    /// [`DEFAULT_IDLE`](Self::DEFAULT_IDLE)).
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// Returns the number of sessions held, expired ones included until they are swept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Returns whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (SessionRecord, Instant)>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for MemorySessionStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemorySessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemorySessionStore")
            .field("idle", &self.idle)
            .field("cap", &self.cap)
            .field("sessions", &self.len())
            .finish()
    }
}

impl SessionStore for MemorySessionStore {
    async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut sessions = self.lock();
        if sessions.len() >= self.cap {
            let idle = self.idle;
            sessions.retain(|_, (_, seen)| now.duration_since(*seen) < idle);
        }
        if sessions.len() >= self.cap {
            return Err(StoreError::Full);
        }
        sessions.insert(id.to_owned(), (record, now));
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let now = Instant::now();
        let mut sessions = self.lock();
        let found = match sessions.get_mut(id) {
            Some((record, seen)) if now.duration_since(*seen) < self.idle => {
                *seen = now;
                Some(record.clone())
            }
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        };
        Ok(found)
    }

    async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
        let now = Instant::now();
        let mut sessions = self.lock();
        let found = match sessions.get_mut(id) {
            Some(entry) if now.duration_since(entry.1) < self.idle => {
                *entry = (record, now);
                true
            }
            _ => false,
        };
        Ok(found)
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().remove(id).is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{MemorySessionStore, SessionRecord, SessionStore};
    use crate::store::StoreError;

    fn record() -> SessionRecord {
        SessionRecord {
            protocol_version: "2025-11-25".into(),
            client_capabilities: serde_json::json!({}),
            client_info: serde_json::json!({"name": "t", "version": "1"}),
            log_level: None,
            principal: None,
            subscriptions: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_full_store_refuses_and_an_ended_session_is_gone() {
        let store = MemorySessionStore::with_capacity(1).idle(Duration::from_secs(60));
        store.create("a", record()).await.unwrap();
        assert!(matches!(
            store.create("b", record()).await,
            Err(StoreError::Full)
        ));
        assert!(store.get("a").await.unwrap().is_some());
        assert!(store.remove("a").await.unwrap());
        assert!(store.get("a").await.unwrap().is_none());
        assert!(!store.update("a", record()).await.unwrap());
        store.create("b", record()).await.unwrap();
    }

    #[tokio::test]
    async fn an_idle_session_expires_and_makes_room() {
        let store = MemorySessionStore::with_capacity(1).idle(Duration::ZERO);
        store.create("a", record()).await.unwrap();
        assert!(store.get("a").await.unwrap().is_none());
        store.create("a", record()).await.unwrap();
        store.create("b", record()).await.unwrap();
    }

    #[test]
    fn a_record_survives_json() {
        let text = serde_json::to_string(&record()).unwrap();
        assert_eq!(
            serde_json::from_str::<SessionRecord>(&text).unwrap(),
            record()
        );
    }
}
