//! The legacy bridge's stores on Redis: [`RedisSessionStore`] and [`RedisPendingAnswers`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_core::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::store::RedisStore;
use crate::bridge::{AnswerKey, PendingAnswers, SessionRecord, SessionStore};
use crate::store::StoreError;

/// How often the subscriber pings Redis, to find out a connection that died silently.
const PING_EVERY: Duration = Duration::from_secs(2);
/// How long the subscriber waits before connecting again.
const RECONNECT_AFTER: Duration = Duration::from_millis(100);

impl RedisStore {
    /// Returns the bridge's sessions kept in this Redis, each expiring after `idle` without a request
    /// (at least 1 millisecond); for [`LegacyBridgeLayer::session_store`](crate::bridge::LegacyBridgeLayer::session_store).
    pub fn sessions(&self, idle: Duration) -> RedisSessionStore {
        RedisSessionStore {
            store: self.clone(),
            idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX).max(1),
        }
    }

    /// Returns the bridge's waiting calls, reached from every replica through this Redis's pub/sub; for
    /// [`LegacyBridgeLayer::pending_answers`](crate::bridge::LegacyBridgeLayer::pending_answers). Give
    /// each replica its own (one subscriber connection each), built from stores sharing a key
    /// prefix.
    pub fn pending_answers(&self) -> RedisPendingAnswers {
        let (subscribed, _) = watch::channel(false);
        RedisPendingAnswers {
            shared: Arc::new(Registry {
                store: self.clone(),
                channel: self.key("answers", ""),
                waiting: Mutex::default(),
                subscribed,
                subscriber: Mutex::default(),
            }),
        }
    }
}

/// The bridge's sessions in Redis: one key per session, `<prefix>session:<id>`, holding its
/// [`SessionRecord`] as JSON, with an idle expiry pushed back by every request (`GETEX … PX`).
///
/// Every replica sharing the Redis (and the key prefix) sees the same sessions: one opened on
/// replica A is served by B, and a DELETE on B ends it on A at once (`DEL`). There is no cap on
/// the number of sessions (unlike [`MemorySessionStore`](crate::bridge::MemorySessionStore)): they are
/// bounded by the idle expiry and by Redis's own `maxmemory`.
///
/// Made by [`RedisStore::sessions`]. Clones share the connections.
#[derive(Clone)]
pub struct RedisSessionStore {
    store: RedisStore,
    idle_ms: u64,
}

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("store", &self.store)
            .field("idle", &Duration::from_millis(self.idle_ms))
            .finish()
    }
}

impl RedisSessionStore {
    fn read(text: Option<String>) -> Result<Option<SessionRecord>, StoreError> {
        text.map(|text| serde_json::from_str(&text).map_err(StoreError::new))
            .transpose()
    }

    async fn set(&self, id: &str, record: &SessionRecord, mode: &str) -> Result<bool, StoreError> {
        let text = serde_json::to_string(record).map_err(StoreError::new)?;
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.store.key("session:", id))
            .arg(text)
            .arg(mode)
            .arg("PX")
            .arg(self.idle_ms);
        let set: Option<String> = self.store.query(cmd).await?;
        Ok(set.is_some())
    }
}

impl SessionStore for RedisSessionStore {
    async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        if self.set(id, &record, "NX").await? {
            Ok(())
        } else {
            // 128 random bits: never, unless something else writes under the prefix.
            Err(StoreError::new("a session with this id exists already"))
        }
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let mut cmd = ::redis::cmd("GETEX");
        cmd.arg(self.store.key("session:", id))
            .arg("PX")
            .arg(self.idle_ms);
        Self::read(self.store.query(cmd).await?)
    }

    async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
        self.set(id, &record, "XX").await
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(self.store.key("session:", id));
        let removed: u64 = self.store.query(cmd).await?;
        Ok(removed > 0)
    }
}

/// The bridge's waiting calls, across replicas: each replica keeps its own waiters in process
/// (as [`MemoryPendingAnswers`](crate::bridge::MemoryPendingAnswers) does) and listens on one Redis
/// pub/sub channel, `<prefix>answers`. An answer that arrives on the replica holding the call's
/// stream is handed over at once; one that arrives on another replica is published on the
/// channel, and the replica waiting for it takes it (the others find no such leg and drop it).
/// Cancellations (`notifications/cancelled`) travel the same way.
///
/// Pub/sub rather than streams: an answer is of use only to a call waiting for it now, which is
/// subscribed; nothing needs to be kept or replayed, and a call that misses its answer (Redis
/// down at that moment) ends on the bridge's answer timeout, as if the client had not answered.
///
/// [`deliver`](PendingAnswers::deliver) says `true` when the answer was handed to a call waiting
/// in this process, or published to at least one other replica's subscriber (which takes it only
/// if a call there waits for that leg of that session); `false` when nobody could have taken it.
/// The bridge answers the client's POST 202 either way.
///
/// The subscriber is one connection of its own, opened on first use and opened again by itself
/// after Redis drops it (a ping every 2 seconds finds out a connection that died silently). While
/// it is not subscribed, [`subscribe`](PendingAnswers::subscribe) fails (the call is refused, fail
/// closed) after the store's deadline.
///
/// Made by [`RedisStore::pending_answers`]; give each replica its own. Clones share everything.
#[derive(Clone)]
pub struct RedisPendingAnswers {
    shared: Arc<Registry>,
}

struct Registry {
    store: RedisStore,
    channel: String,
    waiting: Mutex<HashMap<AnswerKey, oneshot::Sender<Value>>>,
    subscribed: watch::Sender<bool>,
    /// The subscriber task, once started.
    subscriber: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let subscriber = self
            .subscriber
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = subscriber.take() {
            task.abort();
        }
    }
}

/// What travels on the channel: an answer and whom it is for.
#[derive(Serialize, Deserialize)]
struct Published {
    session: String,
    leg: String,
    answer: Value,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AnswerKey, oneshot::Sender<Value>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `answer` to the call waiting here on `key`, if any.
    fn take(&self, key: &AnswerKey, answer: Value) -> Result<(), Value> {
        match self.lock().remove(key) {
            Some(sender) => sender.send(answer),
            None => Err(answer),
        }
    }
}

impl RedisPendingAnswers {
    /// Returns the number of legs waiting in this process.
    pub fn len(&self) -> usize {
        self.shared.lock().len()
    }

    /// Returns whether no leg is waiting in this process.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Returns whether the subscriber is connected and subscribed now.
    pub fn is_subscribed(&self) -> bool {
        *self.shared.subscribed.borrow()
    }

    /// Starts the subscriber, within the runtime of the call, unless it runs already (it ends
    /// only with its runtime, or with the last clone).
    fn start(&self) -> Result<(), StoreError> {
        let mut subscriber = self
            .shared
            .subscriber
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if subscriber.as_ref().is_none_or(JoinHandle::is_finished) {
            let runtime = tokio::runtime::Handle::try_current()
                .map_err(|_| StoreError::new("RedisPendingAnswers needs a Tokio runtime"))?;
            // A subscriber that ended with its runtime said nothing: not subscribed.
            self.shared.subscribed.send_replace(false);
            *subscriber = Some(runtime.spawn(subscribe(Arc::downgrade(&self.shared))));
        }
        Ok(())
    }

    /// Waits, within the store's deadline, for the subscriber to be subscribed.
    async fn ready(&self) -> Result<(), StoreError> {
        self.start()?;
        let mut subscribed = self.shared.subscribed.subscribe();
        let deadline = self.shared.store.deadline();
        match tokio::time::timeout(deadline, subscribed.wait_for(|on| *on)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(StoreError::new(format!(
                "not subscribed to Redis within {deadline:?}"
            ))),
        }
    }
}

impl fmt::Debug for RedisPendingAnswers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPendingAnswers")
            .field("store", &self.shared.store)
            .field("waiting", &self.len())
            .field("subscribed", &self.is_subscribed())
            .finish()
    }
}

impl PendingAnswers for RedisPendingAnswers {
    type Subscription = Pin<Box<dyn Future<Output = Option<Value>> + Send>>;

    async fn subscribe(&self, key: AnswerKey) -> Result<Self::Subscription, StoreError> {
        // An answer published before the subscription would be lost: fail now instead.
        self.ready().await?;
        let (send, receive) = oneshot::channel();
        self.shared.lock().insert(key, send);
        Ok(Box::pin(async move { receive.await.ok() }))
    }

    async fn deliver(&self, key: AnswerKey, answer: Value) -> Result<bool, StoreError> {
        let answer = match self.shared.take(&key, answer) {
            Ok(()) => return Ok(true),
            Err(answer) => answer,
        };
        self.start()?;
        let message = Published {
            session: key.session,
            leg: key.request,
            answer,
        };
        let text = serde_json::to_string(&message).map_err(StoreError::new)?;
        let mut cmd = ::redis::cmd("PUBLISH");
        cmd.arg(&self.shared.channel).arg(text);
        let receivers: u64 = self.shared.store.query(cmd).await?;
        // This replica's own subscriber is one of them, and has no such request.
        Ok(receivers > u64::from(self.is_subscribed()))
    }

    async fn unsubscribe(&self, key: &AnswerKey) -> Result<(), StoreError> {
        self.shared.lock().remove(key);
        Ok(())
    }
}

/// The subscriber: connects, subscribes, hands each published answer to the call waiting here
/// for it; connects again whenever the connection ends or stops answering pings. Ends when the
/// last [`RedisPendingAnswers`] sharing it is dropped.
async fn subscribe(shared: Weak<Registry>) {
    loop {
        let Some((client, channel, connect, response)) = shared.upgrade().map(|shared| {
            let (client, connect, response) = shared.store.client();
            (client.clone(), shared.channel.clone(), connect, response)
        }) else {
            return;
        };
        let connected = tokio::time::timeout(connect + response, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, ::redis::RedisError>(pubsub)
        })
        .await;
        match connected {
            Ok(Ok(pubsub)) => {
                let (mut sink, mut stream) = pubsub.split();
                if let Some(shared) = shared.upgrade() {
                    shared.subscribed.send_replace(true);
                }
                let mut ping = tokio::time::interval(PING_EVERY);
                ping.tick().await;
                loop {
                    tokio::select! {
                        message = next(&mut stream) => {
                            let Some(message) = message else { break };
                            let Some(shared) = shared.upgrade() else { return };
                            hand_over(&shared, message.get_payload_bytes());
                        }
                        _ = ping.tick() => {
                            if shared.strong_count() == 0 {
                                return;
                            }
                            let pong = tokio::time::timeout(response, sink.ping::<::redis::Value>());
                            if !matches!(pong.await, Ok(Ok(_))) {
                                break;
                            }
                        }
                    }
                }
                if let Some(shared) = shared.upgrade() {
                    shared.subscribed.send_replace(false);
                }
                tracing::warn!(target: "tower_elicitation", "the bridge's Redis subscriber was disconnected; connecting again");
            }
            Ok(Err(error)) => {
                tracing::warn!(target: "tower_elicitation", %error, "the bridge cannot subscribe to Redis");
            }
            Err(_) => {
                tracing::warn!(target: "tower_elicitation", "the bridge cannot subscribe to Redis in time");
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}

/// The next message of `stream`, `None` once it has ended.
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

/// Hands a published answer to the call waiting here for it; anything else changes nothing.
fn hand_over(shared: &Registry, payload: &[u8]) {
    let Ok(message) = serde_json::from_slice::<Published>(payload) else {
        tracing::debug!(target: "tower_elicitation", "an unreadable message on the answers channel, dropped");
        return;
    };
    let key = AnswerKey::new(message.session, message.leg);
    // A leg not waiting here is another replica's, or late: dropped.
    let _ = shared.take(&key, message.answer);
}
