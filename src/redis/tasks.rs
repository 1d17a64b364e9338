//! [`RedisTaskStore`]: what the layer remembers per task of the Tasks extension, in Redis, so
//! that a task created through one replica has its `tasks/update` judged on any.

use std::fmt;
use std::time::SystemTime;

use super::store::RedisStore;
use crate::store::{Consumed, StoreError, TaskStore};
use crate::util::time::unix_millis;

/// The layer's task records and answered keys in Redis, shared by every replica that connects
/// to it ([`ElicitationLayer::task_store`](crate::ElicitationLayer::task_store)).
///
/// A record is one key, `<prefix>task:<task id>`, written with `SET … PXAT` at the record's
/// expiry; an answered question is one key, `<prefix>task-answered:<length of the task
/// id>:<task id>:<key>`, written with `SET … NX PXAT`: one atomic command, so of any number of
/// concurrent updates answering one question, on any replicas, exactly one is forwarded. (The
/// task id's length comes first so that no task id and key can be read as another pair.)
///
/// Like single-use tokens, answered keys hold only while Redis does not evict them: marking one
/// answered is refused (the update answered `-32603`, HTTP 503, the cause logged) on a Redis
/// whose `maxmemory-policy` evicts, unless the store's builder says
/// [`allow_evicting_policy`](super::RedisStoreBuilder::allow_evicting_policy) or
/// [`assume_noeviction`](super::RedisStoreBuilder::assume_noeviction). When Redis loses its
/// data, the records go with the answered keys: every `tasks/update` of a task created before is
/// then refused as unknown, never forwarded unchecked.
///
/// Made by [`RedisStore::tasks`]. Clones share the connections.
///
/// ```no_run
/// use tower_elicitation::{ElicitationLayer, Keyring};
/// use tower_elicitation::redis::RedisStore;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let redis = RedisStore::builder("redis://127.0.0.1:6379").build()?;
/// let layer = ElicitationLayer::new(Keyring::from_env()?)
///     .single_use(redis.clone())
///     .task_store(redis.tasks());
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisTaskStore {
    store: RedisStore,
}

impl RedisStore {
    /// Returns a [`TaskStore`] kept in this Redis, for
    /// [`ElicitationLayer::task_store`](crate::ElicitationLayer::task_store): the Tasks
    /// extension's records held across replicas.
    pub fn tasks(&self) -> RedisTaskStore {
        RedisTaskStore {
            store: self.clone(),
        }
    }
}

impl RedisTaskStore {
    fn answered_key(&self, task_id: &str, key: &str) -> String {
        self.store.key(
            "task-answered:",
            &format!("{}:{task_id}:{key}", task_id.len()),
        )
    }
}

impl TaskStore for RedisTaskStore {
    async fn remember(&self, id: &str, record: &str, until: SystemTime) -> Result<(), StoreError> {
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.store.key("task:", id))
            .arg(record)
            .arg("PXAT")
            .arg(unix_millis(until).max(1));
        let _: Option<String> = self.store.query(cmd).await?;
        Ok(())
    }

    async fn recall(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut cmd = ::redis::cmd("GET");
        cmd.arg(self.store.key("task:", id));
        self.store.query(cmd).await
    }

    async fn spend(&self, id: &str, key: &str, until: SystemTime) -> Result<Consumed, StoreError> {
        self.store.check_policy().await?;
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(self.answered_key(id, key))
            .arg(1)
            .arg("NX")
            .arg("PXAT")
            .arg(unix_millis(until).max(1));
        let set: Option<String> = self.store.query(cmd).await?;
        Ok(if set.is_some() {
            Consumed::Fresh
        } else {
            Consumed::Replayed
        })
    }
}

impl fmt::Debug for RedisTaskStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisTaskStore").field(&self.store).finish()
    }
}
