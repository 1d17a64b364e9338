//! What every clone of the layer and its services share: the engine's [`Config`] and the HTTP
//! adapter's own settings.

use std::fmt;
use std::sync::Arc;

use crate::engine::policy::Config;
use crate::store::{ErasedTaskStore, ErasedTokenStore, KnownEpoch, MemoryTaskStore};
use crate::token::Keyring;
use crate::util::principal::Principal;

pub(crate) use crate::util::body::DEFAULT_MAX_BODY_BYTES;

/// The engine's policy and the adapter's settings, behind one `Arc`.
#[derive(Clone)]
pub(crate) struct Shared {
    /// What the engine decides with.
    pub(crate) config: Config,
    /// Whose call it is, taken from the HTTP request.
    pub(crate) principal: Principal,
    /// The largest request body read.
    pub(crate) max_body_bytes: usize,
    /// Where single-use token ids are consumed, when tokens are single-use.
    pub(crate) tokens: Option<Arc<dyn ErasedTokenStore>>,
    /// The epoch `tokens` last named: each call's first round asks it again.
    pub(crate) known_epoch: Arc<KnownEpoch>,
    /// What is remembered per task of the Tasks extension: whose it is, what it asked.
    pub(crate) tasks: Arc<dyn ErasedTaskStore>,
}

impl Shared {
    /// Every option at its default, signing with `keyring`'s active key.
    pub(crate) fn new(keyring: Keyring) -> Self {
        Self {
            config: Config::new(keyring),
            principal: Principal::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            tokens: None,
            known_epoch: Arc::default(),
            tasks: Arc::new(MemoryTaskStore::new()),
        }
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElicitationLayer")
            .field("config", &self.config)
            .field("principal", &self.principal)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("token_store", &self.tokens.is_some())
            .finish()
    }
}
