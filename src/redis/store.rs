//! [`RedisStore`], its builder, spent token ids (`SET … NX PXAT`) and [`RedisUrlFlows`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use crate::BoxError;
use crate::gate::{GateCall, UrlFlow};
use crate::store::{Consumed, StoreError, TokenStore};
use crate::util::time::unix_millis;

/// How long a check of Redis's `maxmemory-policy` is trusted before it is made again (it is made
/// again at once after a command failed, or once Redis is seen to have lost its data).
const POLICY_RECHECK: Duration = Duration::from_secs(60);

/// Spends a token id, in one atomic step with reading the store's epoch: `KEYS[1]` the epoch,
/// `KEYS[2]` the id, `ARGV[1]` until when (Unix ms). No epoch means Redis lost its data (or this
/// is its first use, which [`BEGIN`] made earlier): a new one begins now, by Redis's clock, an
/// odd number of milliseconds ([`BEGIN`]'s are even, so no two epochs share a name).
/// Answers `{fresh (1 or 0), epoch (Unix ms)}`.
const CONSUME: &str = r"
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  epoch = string.format('%.0f', ms - ms % 2 + 1)
  redis.call('SET', KEYS[1], epoch)
end
local fresh = redis.call('SET', KEYS[2], '1', 'NX', 'PXAT', ARGV[1])
if fresh then return {1, tonumber(epoch)} end
return {0, tonumber(epoch)}
";

/// The store's epoch (`KEYS[1]`), begun if there is none yet: dated a second before now, to the
/// millisecond (even), by Redis's clock. Tokens are bound to the epoch they were sealed under,
/// which its date only names (two epochs never begin in the same millisecond); the second before is
/// for a token sealed before tokens named their epoch (dated by its whole second), so that one
/// sealed in this second is not older than it.
const BEGIN: &str = r"
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 1000
  epoch = string.format('%.0f', ms - ms % 2)
  redis.call('SET', KEYS[1], epoch)
end
return tonumber(epoch)
";

/// Single-use token ids and URL flows in Redis, shared by every replica that connects to it.
///
/// As a [`TokenStore`], a spent id is one key, `<prefix>jti:<id>`, set with `SET … NX PXAT` at
/// the token's expiry (plus the tolerated clock skew): one atomic command, so of any number of
/// concurrent retries with one token, on any replicas, exactly one is forwarded. Its epoch is
/// `<prefix>epoch` (see [the module docs](super) for what Redis must be). As the source of
/// [`RedisUrlFlows`], a flow is one key, `<prefix>flow:<handle>`.
///
/// Clones share the connections.
///
/// ```no_run
/// use tower_elicitation::{ElicitationLayer, Keyring};
/// use tower_elicitation::redis::RedisStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let redis = RedisStore::builder("redis://127.0.0.1:6379").build()?;
/// redis.ping().await?;
/// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?).single_use(redis);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// For connections of their own (the bridge's subscriber).
    client: ::redis::Client,
    /// Made on first use, inside the runtime the commands run on: the store itself can be built
    /// anywhere.
    pool: Vec<OnceCell<ConnectionManager>>,
    config: ConnectionManagerConfig,
    next: AtomicUsize,
    prefix: String,
    /// The most one command may take, connecting included.
    deadline: Duration,
    settings: RedisStoreBuilder,
    /// The latest epoch seen (Unix ms), 0 before the first.
    epoch_ms: AtomicU64,
    /// When Redis's `maxmemory-policy` was last found not to evict.
    policy_checked: Mutex<Option<Instant>>,
}

/// Options of a [`RedisStore`]; every one has a default.
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    key_prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    pool_size: usize,
    allow_evicting_policy: bool,
    assume_noeviction: bool,
}

impl RedisStoreBuilder {
    /// Default key prefix: `tower-elicitation:`.
    pub const DEFAULT_KEY_PREFIX: &'static str = "tower-elicitation:";
    /// Default bound on establishing a connection: 1 second.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default bound on one command's response: 500 milliseconds.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
    /// Default number of multiplexed connections, used in turn: 2.
    pub const DEFAULT_POOL_SIZE: usize = 2;

    /// Sets the prefix of every key the store writes, so that several applications (or tests) share
    /// one Redis without meeting. Default: [`DEFAULT_KEY_PREFIX`](Self::DEFAULT_KEY_PREFIX).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets how long establishing a connection may take.
    /// Default: [`DEFAULT_CONNECT_TIMEOUT`](Self::DEFAULT_CONNECT_TIMEOUT).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how long one command's response may take; past it the call is answered 503.
    /// Default: [`DEFAULT_RESPONSE_TIMEOUT`](Self::DEFAULT_RESPONSE_TIMEOUT).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets how many multiplexed connections the store opens and uses in turn (at least 1). Each
    /// carries any number of concurrent commands. Default:
    /// [`DEFAULT_POOL_SIZE`](Self::DEFAULT_POOL_SIZE).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Lets single-use tokens run on a Redis whose `maxmemory-policy` evicts keys (anything but
    /// `noeviction`), accepting the risk that a spent token id is evicted and its token then
    /// accepted again.
    ///
    /// Without it, [`TokenStore::consume`] refuses (the retry is answered 503, the cause logged)
    /// while the policy evicts: `allkeys-*` may evict any key, and `volatile-*` the spent ids
    /// themselves, which carry their token's expiry. With it, the store's epoch still catches a
    /// lost epoch key (the tokens sealed before it are refused), but not a spent id evicted while
    /// the epoch key stays, which under an LRU or LFU policy is the likely case: the epoch key
    /// is read by every retry.
    pub fn allow_evicting_policy(mut self) -> Self {
        self.allow_evicting_policy = true;
        self
    }

    /// Trusts that Redis does not evict keys, without asking it: for a Redis where `CONFIG` is
    /// disabled or renamed (some managed services), which you know runs with
    /// `maxmemory-policy noeviction`.
    ///
    /// Without it, single-use tokens on a Redis that does not answer `CONFIG GET
    /// maxmemory-policy` are refused (the retry is answered 503, the cause logged), as on an
    /// evicting one.
    pub fn assume_noeviction(mut self) -> Self {
        self.assume_noeviction = true;
        self
    }

    /// Builds the store. Connections are opened lazily, on the first command, so it builds
    /// outside a Tokio runtime and while Redis is down (calls are answered 503 until it is up).
    ///
    /// ```
    /// use tower_elicitation::redis::RedisStore;
    ///
    /// // No runtime, no Redis: nothing is connected yet.
    /// let redis = RedisStore::builder("redis://127.0.0.1:1").build()?;
    /// assert!(RedisStore::builder("http://example.com").build().is_err());
    /// # let _ = redis;
    /// # Ok::<(), tower_elicitation::store::StoreError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the URL is not a Redis URL.
    pub fn build(self) -> Result<RedisStore, StoreError> {
        let client = ::redis::Client::open(self.url.as_str()).map_err(StoreError::unavailable)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let pool = (0..self.pool_size).map(|_| OnceCell::new()).collect();
        Ok(RedisStore {
            inner: Arc::new(Inner {
                client,
                pool,
                config,
                next: AtomicUsize::new(0),
                prefix: self.key_prefix.clone(),
                // A connection attempt, one retry, and the response.
                deadline: 2 * self.connect_timeout
                    + self.response_timeout
                    + Duration::from_millis(200),
                settings: self,
                epoch_ms: AtomicU64::new(0),
                policy_checked: Mutex::new(None),
            }),
        })
    }
}

impl fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: only its scheme and host are shown.
        let host = self
            .url
            .rsplit_once('@')
            .map_or(self.url.as_str(), |(_, host)| host);
        f.debug_struct("RedisStoreBuilder")
            .field("host", &host)
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("pool_size", &self.pool_size)
            .field("allow_evicting_policy", &self.allow_evicting_policy)
            .field("assume_noeviction", &self.assume_noeviction)
            .finish()
    }
}

impl RedisStore {
    /// Returns the options of a store connecting to `url` (`redis://host:port[/db]`, or `rediss://`
    /// where the `redis` crate was built with TLS), each at its default.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            key_prefix: RedisStoreBuilder::DEFAULT_KEY_PREFIX.to_owned(),
            connect_timeout: RedisStoreBuilder::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: RedisStoreBuilder::DEFAULT_RESPONSE_TIMEOUT,
            pool_size: RedisStoreBuilder::DEFAULT_POOL_SIZE,
            allow_evicting_policy: false,
            assume_noeviction: false,
        }
    }

    /// Returns URL flows kept in this Redis: `url` makes a flow's URL from its handle (it points at a
    /// page of yours that starts the real flow, an OAuth authorization say, whose callback
    /// calls [`RedisUrlFlows::complete`]). A flow lives for 600 seconds, the layer's default
    /// token lifetime; see [`RedisUrlFlows::ttl`].
    pub fn url_flows<F>(&self, url: F) -> RedisUrlFlows
    where
        F: Fn(&str) -> String + Send + Sync + 'static,
    {
        RedisUrlFlows {
            store: self.clone(),
            url: Arc::new(url),
            ttl: Duration::from_secs(crate::engine::policy::DEFAULT_TTL_SECS),
        }
    }

    /// Makes a round trip to Redis (`PING`), bounded like every command: for readiness checks, and
    /// the floor a single-use retry costs.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when Redis cannot be reached, does not answer within the
    /// response timeout, or answers something other than `PONG`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let reply: String = self.query(::redis::cmd("PING")).await?;
        if reply == "PONG" {
            Ok(())
        } else {
            Err(StoreError::unavailable(format!("PING answered {reply:?}")))
        }
    }

    /// The client, for a connection of one's own (a subscriber), and the bounds on connecting
    /// and on one response.
    pub(crate) fn client(&self) -> (&::redis::Client, Duration, Duration) {
        let settings = &self.inner.settings;
        (
            &self.inner.client,
            settings.connect_timeout,
            settings.response_timeout,
        )
    }

    /// The most one command may take, connecting included.
    pub(crate) fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    pub(crate) fn key(&self, kind: &str, name: &str) -> String {
        let prefix = &self.inner.prefix;
        let mut key = String::with_capacity(prefix.len() + kind.len() + name.len());
        key.push_str(prefix);
        key.push_str(kind);
        key.push_str(name);
        key
    }

    /// Runs `cmd` on the next connection of the pool, within the store's deadline.
    pub(crate) async fn query<T: ::redis::FromRedisValue>(
        &self,
        cmd: ::redis::Cmd,
    ) -> Result<T, StoreError> {
        let index = self.inner.next.fetch_add(1, Ordering::Relaxed) % self.inner.pool.len();
        let mut connection = self.inner.pool[index]
            .get_or_try_init(|| async {
                ConnectionManager::new_lazy_with_config(
                    self.inner.client.clone(),
                    self.inner.config.clone(),
                )
            })
            .await
            .map_err(StoreError::unavailable)?
            .clone();
        match tokio::time::timeout(self.inner.deadline, cmd.query_async(&mut connection)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(StoreError::unavailable(error)),
            Err(_) => Err(StoreError::unavailable(format!(
                "no answer from Redis within {:?}",
                self.inner.deadline
            ))),
        }
    }
}

impl RedisStore {
    /// Checks, unless it was checked lately, that Redis does not evict keys: single-use tokens
    /// refuse to run on a Redis that may forget a spent id (unless the builder said otherwise).
    pub(crate) async fn check_policy(&self) -> Result<(), StoreError> {
        let settings = &self.inner.settings;
        if settings.allow_evicting_policy || settings.assume_noeviction {
            return Ok(());
        }
        let checked = *self.policy_checked();
        if checked.is_some_and(|at| at.elapsed() < POLICY_RECHECK) {
            return Ok(());
        }
        let mut cmd = ::redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        let policy = match self.query::<HashMap<String, String>>(cmd).await {
            Ok(mut reply) => reply.remove("maxmemory-policy"),
            Err(error) => {
                return Err(StoreError::unavailable(format!(
                    "cannot read Redis's maxmemory-policy ({error}): single-use tokens run only on \
                     a Redis known not to evict; where CONFIG is disabled and Redis does not \
                     evict, build the store with assume_noeviction()"
                )));
            }
        };
        match policy.as_deref() {
            Some("noeviction") => {
                *self.policy_checked() = Some(Instant::now());
                Ok(())
            }
            Some(policy) => Err(StoreError::unavailable(format!(
                "Redis runs with maxmemory-policy {policy}, which may evict spent token ids: \
                 single-use tokens refuse to run on it; set noeviction, or build the store with \
                 allow_evicting_policy() to accept replays of evicted ids"
            ))),
            None => Err(StoreError::unavailable(
                "Redis did not say its maxmemory-policy: single-use tokens run only on a Redis \
                 known not to evict (see assume_noeviction())",
            )),
        }
    }

    fn policy_checked(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.inner
            .policy_checked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the last check of the policy: the connection may have been made again, to
    /// another Redis, or to one restarted with another configuration.
    fn recheck_policy(&self) {
        *self.policy_checked() = None;
    }

    /// Keeps the latest epoch seen; a newer one than before means Redis lost its data.
    fn learn_epoch(&self, epoch_ms: u64) -> u64 {
        let before = self.inner.epoch_ms.fetch_max(epoch_ms, Ordering::Relaxed);
        if before != 0 && epoch_ms > before {
            tracing::warn!(
                target: "tower_elicitation",
                "Redis lost its data (a new store epoch began): single-use tokens sealed before \
                 it are refused; give Redis persistence and maxmemory-policy noeviction"
            );
            self.recheck_policy();
        }
        before.max(epoch_ms)
    }

    /// Runs one of the store's scripts, its keys and arguments given.
    async fn eval<T: ::redis::FromRedisValue>(
        &self,
        script: &str,
        keys: &[&str],
        args: &[u64],
    ) -> Result<T, StoreError> {
        let mut cmd = ::redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        self.query(cmd).await.inspect_err(|_| self.recheck_policy())
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisStore")
            .field(&self.inner.settings)
            .finish()
    }
}

/// Spent ids, `SET … NX PXAT` in a script that reads the store's epoch in the same step. The
/// epoch is the key `<prefix>epoch`, without expiry, holding when it began (Unix milliseconds,
/// by Redis's clock): begun on first use, and begun again by the first retry after Redis lost
/// it. [`epoch`](TokenStore::epoch) answers the latest epoch a command of this store saw.
impl TokenStore for RedisStore {
    async fn consume(&self, id: &str, until: SystemTime) -> Result<Consumed, StoreError> {
        self.check_policy().await?;
        let until_ms = unix_millis(until).max(1);
        let epoch = self.key("epoch", "");
        let jti = self.key("jti:", id);
        let (fresh, epoch_ms): (u8, u64) = self.eval(CONSUME, &[&epoch, &jti], &[until_ms]).await?;
        self.learn_epoch(epoch_ms);
        Ok(if fresh == 1 {
            Consumed::Fresh
        } else {
            Consumed::Replayed
        })
    }

    async fn epoch(&self) -> Result<SystemTime, StoreError> {
        let mut known = self.inner.epoch_ms.load(Ordering::Relaxed);
        if known == 0 {
            // The start: before the layer seals its first token.
            self.check_policy().await?;
            let epoch_ms: u64 = self.eval(BEGIN, &[&self.key("epoch", "")], &[]).await?;
            known = self.learn_epoch(epoch_ms);
        }
        Ok(UNIX_EPOCH + Duration::from_millis(known))
    }

    /// Reads `<prefix>epoch` (one round trip), beginning a new epoch if Redis has none (its
    /// first use, or it lost its data): a call's tokens are bound to it, so a token sealed after a
    /// new epoch began is never refused for it, on any replica, whatever the replicas' clocks.
    async fn current_epoch(&self) -> Result<SystemTime, StoreError> {
        let epoch_ms: u64 = self.eval(BEGIN, &[&self.key("epoch", "")], &[]).await?;
        self.learn_epoch(epoch_ms);
        Ok(UNIX_EPOCH + Duration::from_millis(epoch_ms))
    }
}

/// URL flows in Redis, keyed by the gate's handle ([`GateCall::handle`]), each with an expiry: a
/// flow started through one replica and completed (by its callback) on another is complete for
/// a retry on any.
///
/// This is the pattern for a real OAuth callback: [`url`](UrlFlow::url) gives the client a link to
/// a page of yours that redirects to the provider with the handle in its `state`; the provider
/// redirects back to your callback, on whichever replica the load balancer picks, which checks
/// the `state`, exchanges the code, stores the credential, and calls
/// [`complete`](Self::complete); the client's retry, on any replica, finds the flow complete.
///
/// Made by [`RedisStore::url_flows`]. Clones share everything.
#[derive(Clone)]
pub struct RedisUrlFlows {
    store: RedisStore,
    url: Arc<dyn Fn(&str) -> String + Send + Sync>,
    ttl: Duration,
}

impl RedisUrlFlows {
    /// Sets how long a flow is kept after it was started (at least 1 millisecond). Default: 600
    /// seconds; keep it at least the layer's token lifetime.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl.max(Duration::from_millis(1));
        self
    }

    /// Marks the flow with `handle` complete, as its callback would; `false` when there is no
    /// such flow (never started, or expired). Its expiry is kept.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when Redis cannot be reached or does not answer within the
    /// response timeout.
    pub async fn complete(&self, handle: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.store.key("flow:", handle))
            .arg(1)
            .arg("XX")
            .arg("KEEPTTL");
        let set: Option<String> = self.store.query(cmd).await?;
        Ok(set.is_some())
    }

    /// Returns whether a flow with `handle` was started and has not expired.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when Redis cannot be reached or does not answer within the
    /// response timeout.
    pub async fn exists(&self, handle: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(self.store.key("flow:", handle));
        let count: u64 = self.store.query(cmd).await?;
        Ok(count > 0)
    }

    /// Returns whether the flow with `handle` completed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when Redis cannot be reached or does not answer within the
    /// response timeout.
    pub async fn completed(&self, handle: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("GET");
        cmd.arg(self.store.key("flow:", handle));
        let state: Option<String> = self.store.query(cmd).await?;
        Ok(state.as_deref() == Some("1"))
    }
}

impl fmt::Debug for RedisUrlFlows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrlFlows")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl UrlFlow for RedisUrlFlows {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, BoxError> {
        let handle = call.handle();
        // Started once; a later round of the same call keeps its state and expiry.
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.store.key("flow:", handle))
            .arg(0)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms);
        let _started: Option<String> = self.store.query(cmd).await?;
        Ok((self.url)(handle))
    }

    async fn is_complete(&self, call: &GateCall<'_>) -> bool {
        match self.completed(call.handle()).await {
            Ok(complete) => complete,
            Err(error) => {
                // Not known complete: the layer asks again, it does not let the call through.
                tracing::warn!(target: "tower_elicitation", %error, "URL flow state unavailable");
                false
            }
        }
    }
}
