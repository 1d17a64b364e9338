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
use crate::store::StoreError;
use crate::store::{AnswerKey, PendingAnswers, SessionRecord, SessionStore};

/// How often the subscriber pings Redis, to find out a connection that died silently.
const PING_EVERY: Duration = Duration::from_secs(2);
/// How long the subscriber waits before connecting again.
const RECONNECT_AFTER: Duration = Duration::from_millis(100);

impl RedisStore {
    /// Returns the bridge's sessions kept in this Redis, each expiring after `idle` without a request
    /// (at least 1 millisecond); for [`LegacyBridgeLayer::session_store`](crate::bridge::LegacyBridgeLayer::session_store).
    ///
    /// They are bounded as in process: at most [`RedisSessionStore::DEFAULT_CAP`] live sessions in
    /// all and [`RedisSessionStore::DEFAULT_PER_CALLER_CAP`] per identified caller (see
    /// [`RedisSessionStore::cap`]).
    pub fn sessions(&self, idle: Duration) -> RedisSessionStore {
        RedisSessionStore {
            store: self.clone(),
            idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX).max(1),
            cap: RedisSessionStore::DEFAULT_CAP,
            per_caller_cap: RedisSessionStore::DEFAULT_PER_CALLER_CAP,
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
/// replica A is served by B, and a DELETE on B ends it on A at once (`DEL`).
///
/// Live sessions are counted in sorted sets scored by their idle expiry, `<prefix>sessions` for
/// all and `<prefix>sessions:<tag>` per identified caller (the keyed tag of
/// [`SessionRecord::principal`]), kept in step with the session keys by one script per command.
/// Past [`cap`](Self::cap) in all, or [`per_caller_cap`](Self::per_caller_cap) for one caller,
/// `create` answers [`StoreError::Full`], as [`MemorySessionStore`](crate::store::MemorySessionStore)
/// does when full: the bridge answers that `initialize` 503, "Too many sessions; try again later".
/// Anonymous sessions (no principal) count toward the total only.
///
/// Made by [`RedisStore::sessions`]. Clones share the connections.
#[derive(Clone)]
pub struct RedisSessionStore {
    store: RedisStore,
    idle_ms: u64,
    cap: usize,
    per_caller_cap: usize,
}

/// The Lua that pushes back the idle expiry of session `ARGV[2]`, whose record is `v`, in the
/// count of all (`KEYS[2]`) and in its caller's (`ARGV[3]` then its tag); `ARGV[1]` is the idle
/// time in milliseconds, and the counts themselves expire with their newest session.
macro_rules! touch_counts {
    () => {
        r"
local t = redis.call('TIME')
local idle = tonumber(ARGV[1])
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + idle
redis.call('ZADD', KEYS[2], 'XX', expiry, ARGV[2])
redis.call('PEXPIRE', KEYS[2], idle)
local caller = cjson.decode(v)['principal']
if type(caller) == 'string' then
  redis.call('ZADD', ARGV[3] .. caller, 'XX', expiry, ARGV[2])
  redis.call('PEXPIRE', ARGV[3] .. caller, idle)
end
"
    };
}

/// `GETEX … PX`, the counts kept in step: the record, or nil.
const SESSION_GET: &str = concat!(
    "local v = redis.call('GET', KEYS[1])\n",
    "if not v then return false end\n",
    "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n",
    touch_counts!(),
    "return v\n",
);

/// `SET … XX PX` with the record `ARGV[4]`, the counts kept in step: 1, or 0 without a session.
const SESSION_UPDATE: &str = concat!(
    "local v = ARGV[4]\n",
    "if not redis.call('SET', KEYS[1], v, 'XX', 'PX', ARGV[1]) then return 0 end\n",
    touch_counts!(),
    "return 1\n",
);

/// `SET … NX PX` of the record `ARGV[4]` unless the live sessions in all (`KEYS[2]`) reach
/// `ARGV[5]`, or its caller's (`ARGV[3]` then `ARGV[7]`, when not empty) reach `ARGV[6]`:
/// `ok`, `full` or `exists`. Expired sessions leave the counts first.
const SESSION_CREATE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idle = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 'full' end
local caller = nil
if ARGV[7] ~= '' then
  caller = ARGV[3] .. ARGV[7]
  redis.call('ZREMRANGEBYSCORE', caller, '-inf', now)
  if redis.call('ZCARD', caller) >= tonumber(ARGV[6]) then return 'full' end
end
if not redis.call('SET', KEYS[1], ARGV[4], 'NX', 'PX', idle) then return 'exists' end
redis.call('ZADD', KEYS[2], now + idle, ARGV[2])
redis.call('PEXPIRE', KEYS[2], idle)
if caller then
  redis.call('ZADD', caller, now + idle, ARGV[2])
  redis.call('PEXPIRE', caller, idle)
end
return 'ok'
";

/// `DEL`, the session left out of the counts: 1, or 0 without a session.
const SESSION_REMOVE: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
local caller = cjson.decode(v)['principal']
if type(caller) == 'string' then redis.call('ZREM', ARGV[3] .. caller, ARGV[2]) end
return 1
";

impl fmt::Debug for RedisSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSessionStore")
            .field("store", &self.store)
            .field("idle", &Duration::from_millis(self.idle_ms))
            .field("cap", &self.cap)
            .field("per_caller_cap", &self.per_caller_cap)
            .finish()
    }
}

impl RedisSessionStore {
    /// Default bound on the live sessions in all: 10,000, as
    /// [`MemorySessionStore::DEFAULT_CAP`](crate::store::MemorySessionStore::DEFAULT_CAP).
    pub const DEFAULT_CAP: usize = crate::store::MemorySessionStore::DEFAULT_CAP;
    /// Default bound on the live sessions of one identified caller: 100.
    pub const DEFAULT_PER_CALLER_CAP: usize = 100;

    /// Bounds the live sessions in all (at least 1); past it `create` answers
    /// [`StoreError::Full`]. Default: [`DEFAULT_CAP`](Self::DEFAULT_CAP).
    pub fn cap(mut self, cap: usize) -> Self {
        self.cap = cap.max(1);
        self
    }

    /// Bounds the live sessions of one identified caller (at least 1), so that one caller cannot
    /// take them all; past it `create` answers [`StoreError::Full`]. Default:
    /// [`DEFAULT_PER_CALLER_CAP`](Self::DEFAULT_PER_CALLER_CAP).
    pub fn per_caller_cap(mut self, cap: usize) -> Self {
        self.per_caller_cap = cap.max(1);
        self
    }

    /// Runs one of the session scripts on session `id`.
    async fn eval<T: ::redis::FromRedisValue>(
        &self,
        script: &str,
        id: &str,
        more: &[&str],
    ) -> Result<T, StoreError> {
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(script)
            .arg(2)
            .arg(self.store.key("session:", id))
            .arg(self.store.key("sessions", ""))
            .arg(self.idle_ms)
            .arg(id)
            .arg(self.store.key("sessions:", ""))
            .arg(more);
        self.store.query(cmd).await
    }
}

impl SessionStore for RedisSessionStore {
    async fn create(&self, id: &str, record: SessionRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(&record).map_err(StoreError::new)?;
        let (cap, per_caller) = (self.cap.to_string(), self.per_caller_cap.to_string());
        let caller = record.principal.as_deref().unwrap_or_default();
        let more = [text.as_str(), &cap, &per_caller, caller];
        let answer: String = self.eval(SESSION_CREATE, id, &more).await?;
        match answer.as_str() {
            "ok" => Ok(()),
            "full" => Err(StoreError::Full),
            // 128 random bits: never, unless something else writes under the prefix.
            _ => Err(StoreError::new("a session with this id exists already")),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let text: Option<String> = self.eval(SESSION_GET, id, &[]).await?;
        text.map(|text| serde_json::from_str(&text).map_err(StoreError::new))
            .transpose()
    }

    async fn update(&self, id: &str, record: SessionRecord) -> Result<bool, StoreError> {
        let text = serde_json::to_string(&record).map_err(StoreError::new)?;
        let updated: u8 = self.eval(SESSION_UPDATE, id, &[&text]).await?;
        Ok(updated == 1)
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let removed: u8 = self.eval(SESSION_REMOVE, id, &[]).await?;
        Ok(removed == 1)
    }
}

/// The bridge's waiting calls, across replicas: each replica keeps its own waiters in process
/// (as [`MemoryPendingAnswers`](crate::store::MemoryPendingAnswers) does) and listens on one Redis
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
