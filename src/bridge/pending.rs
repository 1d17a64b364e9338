//! Calls waiting for a client's answer: the [`PendingAnswers`] trait and [`MemoryPendingAnswers`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use super::session::StoreFuture;

/// What one answer is addressed to: the session, and the id the bridge gave the request it sent
/// on the call's stream (a "leg"). A response is delivered only to the leg of its own session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LegKey {
    /// The session id (`Mcp-Session-Id`).
    pub session: String,
    /// The JSON-RPC id of the bridge's request, as the JSON text of the id.
    pub leg: String,
}

impl LegKey {
    /// The key of leg `leg` (the JSON text of its id) in session `session`.
    pub fn new(session: impl Into<String>, leg: impl Into<String>) -> Self {
        Self {
            session: session.into(),
            leg: leg.into(),
        }
    }
}

/// Resolves with the answer delivered to one leg, or `None` when the store gave up on it.
pub struct Waiter(Pin<Box<dyn Future<Output = Option<Value>> + Send>>);

impl Waiter {
    /// A waiter resolving with what `future` resolves with.
    pub fn new(future: impl Future<Output = Option<Value>> + Send + 'static) -> Self {
        Self(Box::pin(future))
    }
}

impl Future for Waiter {
    type Output = Option<Value>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Waiter")
    }
}

/// Where a call waiting for the client's answer is found when the answer arrives (in a POST of
/// its own). The call waits on the replica holding its event stream; a publish/subscribe
/// implementation can deliver an answer that arrived on another replica to it, by key.
pub trait PendingAnswers: Send + Sync + 'static {
    /// Starts waiting for the answer to `key`. The waiter is registered when the future
    /// resolves: the bridge calls this before it sends the request the answer is for.
    fn expect(&self, key: LegKey) -> StoreFuture<'_, Waiter>;
    /// Hands `answer` (the client's whole JSON-RPC response) to whoever waits on `key`; `false`
    /// when nobody does (a late answer, an id the bridge never issued, another session's id).
    fn deliver(&self, key: LegKey, answer: Value) -> StoreFuture<'_, bool>;
    /// Stops waiting on `key`: answered, timed out, or the call ended.
    fn forget<'a>(&'a self, key: &'a LegKey) -> StoreFuture<'a, ()>;
}

/// The in-process [`PendingAnswers`]: one channel per leg. An answer must reach the replica
/// holding the call's stream (sticky routing by `Mcp-Session-Id`).
#[derive(Default)]
pub struct MemoryPendingAnswers {
    waiting: Mutex<HashMap<LegKey, oneshot::Sender<Value>>>,
}

impl MemoryPendingAnswers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of legs waiting.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no leg is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LegKey, oneshot::Sender<Value>>> {
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
    fn expect(&self, key: LegKey) -> StoreFuture<'_, Waiter> {
        let (send, receive) = oneshot::channel();
        self.lock().insert(key, send);
        let waiter = Waiter::new(async move { receive.await.ok() });
        Box::pin(std::future::ready(Ok(waiter)))
    }

    fn deliver(&self, key: LegKey, answer: Value) -> StoreFuture<'_, bool> {
        let sender = self.lock().remove(&key);
        let delivered = sender.is_some_and(|sender| sender.send(answer).is_ok());
        Box::pin(std::future::ready(Ok(delivered)))
    }

    fn forget<'a>(&'a self, key: &'a LegKey) -> StoreFuture<'a, ()> {
        self.lock().remove(key);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_only_its_own_session_and_leg() {
        let pending = MemoryPendingAnswers::new();
        let waiter = pending
            .expect(LegKey::new("s1", "\"leg-1\""))
            .await
            .unwrap();
        let other = LegKey::new("s2", "\"leg-1\"");
        assert!(!pending.deliver(other, serde_json::json!(1)).await.unwrap());
        let mine = LegKey::new("s1", "\"leg-1\"");
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
        let key = LegKey::new("s", "\"l\"");
        let waiter = pending.expect(key.clone()).await.unwrap();
        pending.forget(&key).await.unwrap();
        assert!(!pending.deliver(key, serde_json::json!(1)).await.unwrap());
        assert_eq!(waiter.await, None);
    }
}
