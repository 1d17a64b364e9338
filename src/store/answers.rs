//! Calls waiting for a client's answer: the [`PendingAnswers`] trait and [`MemoryPendingAnswers`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use super::outcome::{StoreError, StoreFuture};
use crate::util::BoxFuture;

/// Names what one answer is addressed to: the session, and the id the bridge gave the request it
/// sent on the call's stream. A response is delivered only to the request of its own session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AnswerKey {
    /// The session id (`Mcp-Session-Id`).
    pub session: String,
    /// The JSON-RPC id of the bridge's request, as the JSON text of the id.
    #[serde(rename = "leg")]
    pub request: String,
}

impl AnswerKey {
    /// Creates the key that names the answer to request `request` (the JSON text of its id) in session `session`.
    pub fn new(session: impl Into<String>, request: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            request: request.into(),
        }
    }
}

/// Where a call waiting for the client's answer is found when the answer arrives (in a POST of
/// its own). The call waits on the replica holding its event stream; a publish/subscribe
/// implementation can deliver an answer that arrived on another replica to it, by key.
///
/// Implementors write each method as an `async fn`; each should return within a bounded time.
///
/// ```
/// use std::collections::HashMap;
/// use std::future::Future;
/// use std::pin::Pin;
/// use std::sync::Mutex;
/// use serde_json::Value;
/// use tokio::sync::oneshot;
/// use tower_elicitation::store::{AnswerKey, PendingAnswers};
/// use tower_elicitation::store::StoreError;
///
/// #[derive(Default)]
/// struct Waiting(Mutex<HashMap<AnswerKey, oneshot::Sender<Value>>>);
///
/// impl PendingAnswers for Waiting {
///     type Subscription = Pin<Box<dyn Future<Output = Option<Value>> + Send>>;
///
///     async fn subscribe(&self, key: AnswerKey) -> Result<Self::Subscription, StoreError> {
///         let (send, receive) = oneshot::channel();
///         self.0.lock().unwrap().insert(key, send);
///         Ok(Box::pin(async move { receive.await.ok() }))
///     }
///     async fn deliver(&self, key: AnswerKey, answer: Value) -> Result<bool, StoreError> {
///         let sender = self.0.lock().unwrap().remove(&key);
///         Ok(sender.is_some_and(|sender| sender.send(answer).is_ok()))
///     }
///     async fn unsubscribe(&self, key: &AnswerKey) -> Result<(), StoreError> {
///         self.0.lock().unwrap().remove(key);
///         Ok(())
///     }
/// }
/// ```
pub trait PendingAnswers: Send + Sync + 'static {
    /// Resolves with the answer delivered to one key (the client's whole JSON-RPC response), or
    /// `None` when the store gave up on it (unsubscribed, or its connection ended).
    type Subscription: Future<Output = Option<Value>> + Send + 'static;

    /// Starts waiting for the answer to `key`. The bridge awaits this before it sends the request
    /// the answer is for, so the subscription must be in place when it resolves.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the subscription cannot be made: the call fails closed.
    fn subscribe(
        &self,
        key: AnswerKey,
    ) -> impl Future<Output = Result<Self::Subscription, StoreError>> + Send;

    /// Hands `answer` (the client's whole JSON-RPC response) to whoever waits on `key`; `false`
    /// when nobody does (a late answer, an id the bridge never issued, another session's id).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached: the client's POST is answered 503.
    fn deliver(
        &self,
        key: AnswerKey,
        answer: Value,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stops waiting on `key`: answered, timed out, or the call ended.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store cannot be reached; the bridge logs it and goes on.
    fn unsubscribe(&self, key: &AnswerKey) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A shared message box is the one it points to: one [`PendingAnswers`] behind several bridges
/// and adapters.
impl<T: PendingAnswers + ?Sized> PendingAnswers for Arc<T> {
    type Subscription = T::Subscription;

    fn subscribe(
        &self,
        key: AnswerKey,
    ) -> impl Future<Output = Result<Self::Subscription, StoreError>> + Send {
        T::subscribe(self, key)
    }

    fn deliver(
        &self,
        key: AnswerKey,
        answer: Value,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        T::deliver(self, key, answer)
    }

    fn unsubscribe(&self, key: &AnswerKey) -> impl Future<Output = Result<(), StoreError>> + Send {
        T::unsubscribe(self, key)
    }
}

/// [`PendingAnswers`] in a form that can be stored behind `dyn`: a subscription resolves with the
/// answer, or `None`.
pub(crate) trait ErasedPendingAnswers: Send + Sync {
    fn subscribe(&self, key: AnswerKey) -> StoreFuture<'_, BoxFuture<'static, Option<Value>>>;
    fn deliver(&self, key: AnswerKey, answer: Value) -> StoreFuture<'_, bool>;
    fn unsubscribe<'a>(&'a self, key: &'a AnswerKey) -> StoreFuture<'a, ()>;
}

impl<T: PendingAnswers> ErasedPendingAnswers for T {
    fn subscribe(&self, key: AnswerKey) -> StoreFuture<'_, BoxFuture<'static, Option<Value>>> {
        Box::pin(async move {
            let subscription = PendingAnswers::subscribe(self, key).await?;
            Ok(Box::pin(subscription) as BoxFuture<'static, _>)
        })
    }

    fn deliver(&self, key: AnswerKey, answer: Value) -> StoreFuture<'_, bool> {
        Box::pin(PendingAnswers::deliver(self, key, answer))
    }

    fn unsubscribe<'a>(&'a self, key: &'a AnswerKey) -> StoreFuture<'a, ()> {
        Box::pin(PendingAnswers::unsubscribe(self, key))
    }
}

/// The in-process [`PendingAnswers`]: one channel per key. An answer must reach the replica
/// holding the call's stream (sticky routing by `Mcp-Session-Id`).
#[derive(Default)]
pub struct MemoryPendingAnswers {
    waiting: Mutex<HashMap<AnswerKey, oneshot::Sender<Value>>>,
}

impl MemoryPendingAnswers {
    /// Creates an empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the number of calls waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Returns whether no call is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AnswerKey, oneshot::Sender<Value>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl fmt::Debug for MemoryPendingAnswers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPendingAnswers")
            .field("waiting", &self.len())
            .finish()
    }
}

impl PendingAnswers for MemoryPendingAnswers {
    type Subscription = Pin<Box<dyn Future<Output = Option<Value>> + Send>>;

    async fn subscribe(&self, key: AnswerKey) -> Result<Self::Subscription, StoreError> {
        let (send, receive) = oneshot::channel();
        self.lock().insert(key, send);
        Ok(Box::pin(async move { receive.await.ok() }))
    }

    async fn deliver(&self, key: AnswerKey, answer: Value) -> Result<bool, StoreError> {
        let sender = self.lock().remove(&key);
        Ok(sender.is_some_and(|sender| sender.send(answer).is_ok()))
    }

    async fn unsubscribe(&self, key: &AnswerKey) -> Result<(), StoreError> {
        self.lock().remove(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{AnswerKey, MemoryPendingAnswers, PendingAnswers};

    #[tokio::test]
    async fn an_answer_reaches_only_its_own_session_and_leg() {
        let pending = MemoryPendingAnswers::new();
        let waiter = pending
            .subscribe(AnswerKey::new("s1", "\"leg-1\""))
            .await
            .unwrap();
        let other = AnswerKey::new("s2", "\"leg-1\"");
        assert!(!pending.deliver(other, serde_json::json!(1)).await.unwrap());
        let mine = AnswerKey::new("s1", "\"leg-1\"");
        assert!(
            pending
                .deliver(mine.clone(), serde_json::json!(2))
                .await
                .unwrap()
        );
        assert_eq!(waiter.await, Some(serde_json::json!(2)));
        // Once answered, a second answer finds nobody.
        assert!(!pending.deliver(mine, serde_json::json!(3)).await.unwrap());
        assert!(pending.is_empty());
    }

    #[tokio::test]
    async fn a_forgotten_leg_takes_no_answer() {
        let pending = MemoryPendingAnswers::new();
        let key = AnswerKey::new("s", "\"l\"");
        let waiter = pending.subscribe(key.clone()).await.unwrap();
        pending.unsubscribe(&key).await.unwrap();
        assert!(!pending.deliver(key, serde_json::json!(1)).await.unwrap());
        assert_eq!(waiter.await, None);
    }
}
