//! The engine's policy: every option that decides what the layer answers, and the caches it
//! keeps. No HTTP types here; what only the HTTP adapter needs (the principal extractor, the
//! body limit) is in [`Shared`](crate::elicitation::shared::Shared).

use std::fmt;
use std::sync::Arc;

use crate::form::validate::ValidatorCache;
use crate::gate::{Gate, Target};
use crate::token::Keyring;
use crate::token::sealed::Sealed;
use crate::util::memo::{Bounded, Weight};
use crate::wire::jsonrpc::Meta;
use crate::wire::mcp::Method;

/// How many distinct `params._meta` texts are kept read (clients send one each, and the same one
/// with every request).
pub(crate) const META_CAPACITY: usize = 256;
/// About how much memory the kept `_meta` readings may take in all: 1 MiB (each counted as its
/// text, what was read from it, and at least 4 KiB).
pub(crate) const META_BYTES: usize = 1024 * 1024;
/// A longer `_meta` is read every time rather than kept.
pub(crate) const MAX_KEPT_META_LEN: usize = 4096;

/// What the layer does with `inputResponses` that arrive without any `requestState`.
///
/// Such answers cannot be matched to a question the layer saw, so they are never forwarded as
/// they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswersWithoutState {
    /// Call the inner service without them, validate them against the questions it asks, and if
    /// they answer every question, call it again with the validated answers; otherwise ask.
    #[default]
    Probe,
    /// Drop them and forward the call as if they were not there.
    Strip,
    /// Answer `-32602` `inputResponses without requestState`.
    Reject,
}

/// What the layer does with a `tasks/get` or `tasks/cancel` of a task it has no record of: one
/// it did not see created (or created before it was deployed), whose record its
/// [`TaskStore`](crate::store::TaskStore) forgot, or that another replica's store keeps.
///
/// A `tasks/update` of such a task is always refused: its answers could not be checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnrecordedTasks {
    /// Forward the request: the inner service decides (it may know the task, and whose it is).
    #[default]
    Forward,
    /// Answer `-32602` `Unknown task`, as for another caller's task; never forwarded. For a
    /// gatekeeper in front of a server that does not check who asks for a task.
    Refuse,
}

/// The engine's configuration: the policy (every option), and the caches behind `Arc`s, shared
/// by every clone of the layer and its services. A clone shares the caches;
/// [`renew_caches`](Self::renew_caches) gives it its own.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) keyring: Keyring,
    pub(crate) audience: Option<String>,
    pub(crate) ttl_secs: u64,
    pub(crate) skew_secs: u64,
    pub(crate) max_state_bytes: usize,
    pub(crate) max_rounds: u32,
    pub(crate) without_state: AnswersWithoutState,
    pub(crate) validators: Arc<ValidatorCache>,
    /// Tokens this layer sealed, so their retries skip the MAC and claims passes.
    pub(crate) sealed: Arc<Sealed>,
    /// What each distinct `params._meta` text says.
    pub(crate) metas: Arc<Bounded<Meta, META_CAPACITY, META_BYTES>>,
    /// Each gate with its target, in the order declared.
    pub(crate) gates: Vec<(Target, Gate)>,
    /// Every sealed token gets a random id, and a retry must have its id consumed (by the
    /// adapter, through its store) before anything is done with it; a token without one is
    /// refused.
    pub(crate) single_use: bool,
    /// Whether a `tasks/get` or `tasks/cancel` of a task with no record is forwarded.
    pub(crate) unrecorded_tasks: UnrecordedTasks,
}

/// Default lifetime of a sealed token: 600 seconds.
pub(crate) const DEFAULT_TTL_SECS: u64 = 600;
/// Default bound on an incoming `requestState`: 64 KiB.
pub(crate) const DEFAULT_MAX_STATE_BYTES: usize = 64 * 1024;
/// Default cap on `input_required` rounds for one call: 32.
pub(crate) const DEFAULT_MAX_ROUNDS: u32 = 32;

impl Config {
    /// Every option at its default, signing with `keyring`'s active key.
    pub(crate) fn new(keyring: Keyring) -> Self {
        Self {
            keyring,
            audience: None,
            ttl_secs: DEFAULT_TTL_SECS,
            skew_secs: 60,
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            max_rounds: DEFAULT_MAX_ROUNDS,
            without_state: AnswersWithoutState::default(),
            validators: Arc::default(),
            sealed: Arc::default(),
            metas: Arc::default(),
            gates: Vec::new(),
            single_use: false,
            unrecorded_tasks: UnrecordedTasks::default(),
        }
    }

    /// The gates on a call, with their index, in the order declared.
    pub(crate) fn gates_for<'a>(
        &'a self,
        method: Method,
        target: &str,
    ) -> impl Iterator<Item = (usize, &'a Gate)> {
        // The spellings of a resource URI, worked out when a resource gate first needs them.
        let mut uri = None;
        self.gates
            .iter()
            .enumerate()
            .filter(move |(_, (t, _))| t.matches(method, target, &mut uri))
            .map(|(index, (_, gate))| (index, gate))
    }

    /// Whether any gate applies to this call.
    pub(crate) fn has_gates(&self, method: Method, target: &str) -> bool {
        self.gates_for(method, target).next().is_some()
    }

    /// Gives this configuration caches of its own, empty: for a layer whose options changed
    /// (the caches are an optimisation, never shared state; and a token cache is only sound for
    /// the keyring that sealed what it holds).
    pub(crate) fn renew_caches(&mut self) {
        self.validators = Arc::default();
        self.sealed = Arc::default();
        self.metas = Arc::default();
    }
}

impl Weight for Meta {
    /// Its text, and the protocol version read from it.
    fn weight(&self, text: &str) -> usize {
        text.len() + self.version.as_ref().map_or(0, String::len)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElicitationLayer")
            .field("keyring", &self.keyring)
            .field("audience", &self.audience)
            .field("ttl_secs", &self.ttl_secs)
            .field("skew_secs", &self.skew_secs)
            .field("max_state_bytes", &self.max_state_bytes)
            .field("max_rounds", &self.max_rounds)
            .field("without_state", &self.without_state)
            .field("gates", &self.gates)
            .field("single_use", &self.single_use)
            .finish_non_exhaustive()
    }
}
