//! [`ElicitationLayer`]: the builder of every option, and `impl Layer`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::service::Elicitation;
use super::shared::{DEFAULT_MAX_BODY_BYTES, Shared};
use crate::engine::policy::{
    AnswersWithoutState, Config, DEFAULT_MAX_ROUNDS, DEFAULT_MAX_STATE_BYTES, DEFAULT_TTL_SECS,
    UnrecordedTasks,
};
use crate::gate::{Gate, GateError, GateTarget, Target};
use crate::store::{TaskStore, TokenStore};
use crate::token::Keyring;
use crate::util::principal::{CallerBinding, Principal};

/// Tower layer that gives an MCP Streamable HTTP service the server side of multi round-trip
/// elicitation: it seals `requestState`, verifies it on the retry, validates the answers and asks
/// again when they are missing or wrong.
///
/// Clones of a layer, and the services it makes, share its caches, each bounded in entries and in
/// bytes: compiled form validators, the questions they belong to and the spellings inner services
/// asked them in (three caches of up to 1,024 entries and about 4 MiB each, a validator counted as
/// its schema's text and a share per subschema), what each distinct `_meta` text says (up to 256
/// texts of at most 4 KiB, 1 MiB in all), and the tokens it sealed most recently (up to 1,024,
/// about 4 MiB), kept so that their retries are opened without the MAC and claims passes. A
/// question is kept only once a response asking it was sealed (or its probe answered), so a
/// response the layer refuses leaves nothing behind. Expiry and bindings are checked on every retry
/// all the same; a token sealed by another replica is opened in full. A builder method called on a
/// layer that has clones gives a new layer, with caches of its own.
///
/// See the [crate docs](crate) for an example.
///
#[doc = include_str!("../../docs/configuration.md")]
#[doc = include_str!("../../docs/client-answers.md")]
#[derive(Clone)]
pub struct ElicitationLayer {
    shared: Arc<Shared>,
}

impl ElicitationLayer {
    /// Default lifetime of a sealed token: 600 seconds.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(DEFAULT_TTL_SECS);
    /// Default bound on an incoming `requestState`: 64 KiB.
    pub const DEFAULT_MAX_STATE_BYTES: usize = DEFAULT_MAX_STATE_BYTES;
    /// Default bound on a request body: 4 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = DEFAULT_MAX_BODY_BYTES;
    /// Default cap on `input_required` rounds for one call: 32.
    pub const DEFAULT_MAX_ROUNDS: u32 = DEFAULT_MAX_ROUNDS;

    /// Creates a layer that signs with `keyring`'s active key, with every other option at its default.
    pub fn new(keyring: Keyring) -> Self {
        Self {
            shared: Arc::new(Shared::new(keyring)),
        }
    }

    /// Binds every token to `audience`: tokens minted by a layer with another audience (another
    /// server sharing the keys) are refused. Default: none.
    pub fn audience(self, audience: impl Into<String>) -> Self {
        self.with(|c| c.audience = Some(audience.into()))
    }

    /// Sets how long a sealed token stays valid (rounded down to whole seconds, at least 1).
    /// Default: [`DEFAULT_TTL`](Self::DEFAULT_TTL).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.ttl_secs = ttl.as_secs().max(1))
    }

    /// Sets the clock difference tolerated between replicas when checking a token's times.
    /// Default: 60 seconds.
    pub fn clock_skew(self, skew: Duration) -> Self {
        self.with(|c| c.skew_secs = skew.as_secs())
    }

    /// Sets the largest `requestState` accepted (and produced), in bytes.
    /// Default: [`DEFAULT_MAX_STATE_BYTES`](Self::DEFAULT_MAX_STATE_BYTES).
    pub fn max_state_bytes(self, max: usize) -> Self {
        self.with(|c| c.max_state_bytes = max)
    }

    /// Sets the largest POST body read; larger ones are answered 413.
    /// Default: [`DEFAULT_MAX_BODY_BYTES`](Self::DEFAULT_MAX_BODY_BYTES).
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.with_shared(|s| s.max_body_bytes = max)
    }

    /// Sets the most `input_required` rounds one call may take before the layer ends it with an
    /// error. Default: [`DEFAULT_MAX_ROUNDS`](Self::DEFAULT_MAX_ROUNDS).
    pub fn max_rounds(self, max: u32) -> Self {
        self.with(|c| c.max_rounds = max)
    }

    /// Sets what to do with answers that arrive without `requestState`.
    /// Default: [`AnswersWithoutState::Probe`].
    pub fn answers_without_state(self, policy: AnswersWithoutState) -> Self {
        self.with(|c| c.without_state = policy)
    }

    /// Takes the caller's identity from the request, typically from an extension that an
    /// authentication layer in front of this one inserted. Tokens are bound to a keyed tag of
    /// it; `None` means anonymous.
    ///
    /// Default: the principal of a [`VerifiedCaller`](crate::VerifiedCaller) an authenticating
    /// layer in front inserted into the request's extensions (see its docs for a recipe), else
    /// the `Authorization` header, when present. A closure set here wins over both: it may read
    /// the `VerifiedCaller` itself, and gates still see it through
    /// [`GateCall::caller`](crate::GateCall::caller).
    ///
    /// ```
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    ///
    /// #[derive(Clone)]
    /// struct User(String);
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
    ///     .principal_from(|parts: &http::request::Parts| {
    ///         parts.extensions.get::<User>().map(|user| user.0.clone().into_bytes())
    ///     });
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn principal_from<F>(self, principal: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync + 'static,
    {
        self.with_shared(|s| s.principal = Principal::from_fn(principal))
    }

    /// Makes every token single-use: each one the layer seals gets a random id (inside its
    /// MAC'd claims), and a retry goes on (forwarded to the inner service, through a gate, or
    /// answered with the layer's own re-ask, which mints the next token) only after `store` has
    /// atomically consumed that id. A second use of the same token is answered like any bad
    /// one, `-32602` `Invalid or expired requestState`; so is a token without an id (sealed
    /// before the option was on). When the store cannot say, the layer fails closed: `-32603`
    /// with HTTP 503, the cause logged, nothing forwarded.
    ///
    /// A verified token is spent by its first use, whatever the layer then answers: a client
    /// that lost the response cannot send it again, and starts the call over. One replica can
    /// use a [`MemoryTokenStore`](crate::store::MemoryTokenStore); replicas share a `RedisStore`
    /// (feature `redis`). Default: off (a token can be replayed until it expires).
    ///
    /// ```
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    /// use tower_elicitation::store::MemoryTokenStore;
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
    ///     .single_use(MemoryTokenStore::new());
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn single_use(self, store: impl TokenStore) -> Self {
        self.with_shared(|s| {
            s.tokens = Some(Arc::new(store));
            s.known_epoch = Arc::default();
            s.config.single_use = true;
        })
    }

    /// Keeps what the layer remembers per task of the Tasks extension (whose task it is, the
    /// questions it asked, which were answered) in `store`, in place of the default in-process
    /// [`MemoryTaskStore`](crate::store::MemoryTaskStore). Replicas that serve the same clients
    /// without sticky routing need one store they share (`RedisStore::tasks`, feature `redis`): a
    /// `tasks/update` whose task's record the layer cannot find is refused, never forwarded
    /// unchecked.
    ///
    /// ```
    /// use tower_elicitation::{ElicitationLayer, Keyring};
    /// use tower_elicitation::store::MemoryTaskStore;
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
    ///     .task_store(MemoryTaskStore::with_capacity(1_000));
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn task_store(self, store: impl TaskStore) -> Self {
        self.with_shared(|s| s.tasks = Arc::new(store))
    }

    /// Chooses what becomes of a `tasks/get` or `tasks/cancel` of a task the layer has no record
    /// of (see [`task_store`](Self::task_store)): forwarded, or refused as `Unknown task`. A
    /// `tasks/update` of such a task is refused either way.
    ///
    /// Default: [`UnrecordedTasks::Forward`]. A gatekeeper in front of a server that does not
    /// itself check who asks for a task refuses them, so that no caller reads or cancels a task
    /// it did not create.
    ///
    /// ```
    /// use tower_elicitation::{ElicitationLayer, Keyring, UnrecordedTasks};
    ///
    /// let layer = ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?)
    ///     .unrecorded_tasks(UnrecordedTasks::Refuse);
    /// # Ok::<(), tower_elicitation::KeyringError>(())
    /// ```
    pub fn unrecorded_tasks(self, policy: UnrecordedTasks) -> Self {
        self.with(|c| c.unrecorded_tasks = policy)
    }

    /// Declares a [`Gate`]: before a call matching `target` reaches the inner service, the layer
    /// asks the gate's question and forwards the call only after an acceptable answer. Several
    /// gates on one call are asked together, in the order declared.
    ///
    /// A resource gate's URI is normalized here, once; the URI of a `resources/read` is
    /// normalized with each call, and only when a resource gate is declared (see
    /// [`GateTarget::resource`]).
    ///
    /// # Errors
    ///
    /// [`GateError::DuplicateKey`] when a gate that can apply to
    /// the same calls already uses the key, and neither has a [`Gate::when`] condition.
    /// See [`Gate`] for an example.
    pub fn gate(self, target: GateTarget, gate: Gate) -> Result<Self, GateError> {
        let target = Target::new(target);
        if self.shared.config.gates.iter().any(|(t, g)| {
            g.key == gate.key
                && t.overlaps(&target)
                && !(g.is_conditional() || gate.is_conditional())
        }) {
            return Err(GateError::DuplicateKey(gate.key));
        }
        Ok(self.with(|c| c.gates.push((target, gate))))
    }

    /// What the layer's caches of questions (with their validators) and of `_meta` readings
    /// weigh, in bytes, and the most they may weigh together: for tests, through
    /// `__fuzz::cache_weight`.
    #[cfg(feature = "__fuzz")]
    pub(crate) fn cache_weight(&self) -> (usize, usize, usize) {
        let config = &self.shared.config;
        (
            config.validators.weight(),
            config.metas.weight(),
            crate::form::validate::ValidatorCache::MAX_WEIGHT + crate::engine::policy::META_BYTES,
        )
    }

    /// The keyring and the caller's identity as this layer takes them: what a
    /// [`LegacyBridgeLayer`](crate::bridge::LegacyBridgeLayer) built from it binds sessions with.
    pub(crate) fn caller_binding(&self) -> CallerBinding {
        CallerBinding {
            keyring: self.shared.config.keyring.clone(),
            principal: self.shared.principal.clone(),
        }
    }

    fn with(self, change: impl FnOnce(&mut Config)) -> Self {
        self.with_shared(|shared| change(&mut shared.config))
    }

    fn with_shared(mut self, change: impl FnOnce(&mut Shared)) -> Self {
        match Arc::get_mut(&mut self.shared) {
            Some(shared) => change(shared),
            None => {
                let mut shared = Shared::clone(&self.shared);
                shared.config.renew_caches();
                change(&mut shared);
                self.shared = Arc::new(shared);
            }
        }
        self
    }
}

impl<S> Layer<S> for ElicitationLayer {
    type Service = Elicitation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Elicitation::from_shared(inner, Arc::clone(&self.shared))
    }
}

impl fmt::Debug for ElicitationLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}
