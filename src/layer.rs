//! [`ElicitationLayer`]: every option, in one shared configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use crate::form::validate::ValidatorCache;
use crate::gate::{Gate, GateError, GateTarget, Target};
use crate::jsonrpc::Meta;
use crate::mcp::Method;
use crate::memo::{Bounded, Weight};
use crate::principal::Principal;
use crate::service::Elicitation;
use crate::state::Keyring;
use crate::state::sealed::Sealed;

/// How many distinct `params._meta` texts are kept read (clients send one each, and the same one
/// with every request).
const META_CAPACITY: usize = 256;
/// About how much memory the kept `_meta` readings may take in all: 1 MiB (each counted as its
/// text, what was read from it, and at least 4 KiB).
const META_BYTES: usize = 1024 * 1024;
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
#[derive(Clone)]
pub struct ElicitationLayer {
    config: Arc<Config>,
}

/// The layer's configuration; shared by every clone of the layer and its services.
pub(crate) struct Config {
    pub(crate) keyring: Keyring,
    pub(crate) audience: Option<String>,
    pub(crate) ttl_secs: u64,
    pub(crate) skew_secs: u64,
    pub(crate) max_state_bytes: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_rounds: u32,
    pub(crate) without_state: AnswersWithoutState,
    pub(crate) principal: Principal,
    pub(crate) validators: ValidatorCache,
    /// Tokens this layer sealed, so their retries skip the MAC and claims passes.
    pub(crate) sealed: Sealed,
    /// What each distinct `params._meta` text says.
    pub(crate) metas: Bounded<Meta, META_CAPACITY, META_BYTES>,
    /// Each gate with its target, in the order declared.
    pub(crate) gates: Vec<(Target, Gate)>,
}

impl ElicitationLayer {
    /// Default lifetime of a sealed token: 600 seconds.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
    /// Default bound on an incoming `requestState`: 64 KiB.
    pub const DEFAULT_MAX_STATE_BYTES: usize = 64 * 1024;
    /// Default bound on a request body: 4 MiB.
    pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
    /// Default cap on `input_required` rounds for one call: 32.
    pub const DEFAULT_MAX_ROUNDS: u32 = 32;

    /// A layer that signs with `keyring`'s active key, with every other option at its default.
    pub fn new(keyring: Keyring) -> Self {
        Self {
            config: Arc::new(Config {
                keyring,
                audience: None,
                ttl_secs: Self::DEFAULT_TTL.as_secs(),
                skew_secs: 60,
                max_state_bytes: Self::DEFAULT_MAX_STATE_BYTES,
                max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
                max_rounds: Self::DEFAULT_MAX_ROUNDS,
                without_state: AnswersWithoutState::default(),
                principal: Principal::default(),
                validators: ValidatorCache::default(),
                sealed: Sealed::default(),
                metas: Bounded::default(),
                gates: Vec::new(),
            }),
        }
    }

    /// Binds every token to `audience`: tokens minted by a layer with another audience (another
    /// server sharing the keys) are refused. Default: none.
    pub fn audience(self, audience: impl Into<String>) -> Self {
        self.with(|c| c.audience = Some(audience.into()))
    }

    /// How long a sealed token stays valid (rounded down to whole seconds, at least 1).
    /// Default: [`DEFAULT_TTL`](Self::DEFAULT_TTL).
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|c| c.ttl_secs = ttl.as_secs().max(1))
    }

    /// The clock difference tolerated between replicas when checking a token's times.
    /// Default: 60 seconds.
    pub fn clock_skew(self, skew: Duration) -> Self {
        self.with(|c| c.skew_secs = skew.as_secs())
    }

    /// The largest `requestState` accepted (and produced), in bytes.
    /// Default: [`DEFAULT_MAX_STATE_BYTES`](Self::DEFAULT_MAX_STATE_BYTES).
    pub fn max_state_bytes(self, max: usize) -> Self {
        self.with(|c| c.max_state_bytes = max)
    }

    /// The largest POST body read; larger ones are answered 413.
    /// Default: [`DEFAULT_MAX_BODY_BYTES`](Self::DEFAULT_MAX_BODY_BYTES).
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.with(|c| c.max_body_bytes = max)
    }

    /// The most `input_required` rounds one call may take before the layer ends it with an
    /// error. Default: [`DEFAULT_MAX_ROUNDS`](Self::DEFAULT_MAX_ROUNDS).
    pub fn max_rounds(self, max: u32) -> Self {
        self.with(|c| c.max_rounds = max)
    }

    /// What to do with answers that arrive without `requestState`.
    /// Default: [`AnswersWithoutState::Probe`].
    pub fn answers_without_state(self, policy: AnswersWithoutState) -> Self {
        self.with(|c| c.without_state = policy)
    }

    /// Takes the caller's identity from the request, typically from an extension that an
    /// authentication layer in front of this one inserted. Tokens are bound to a keyed tag of
    /// it; `None` means anonymous.
    ///
    /// Default: the `Authorization` header, when present.
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
        self.with(|c| c.principal = Principal::from_fn(principal))
    }

    /// Declares a [`Gate`]: before a call matching `target` reaches the inner service, the layer
    /// asks the gate's question and forwards the call only after an acceptable answer. Several
    /// gates on one call are asked together, in the order declared.
    ///
    /// A resource gate's URI is normalized here, once; the URI of a `resources/read` is
    /// normalized with each call, and only when a resource gate is declared (see
    /// [`GateTarget::resource`]).
    ///
    /// Fails when a gate that can apply to the same calls already uses the key.
    /// See the [gate module](crate::gate) for an example.
    pub fn gate(self, target: GateTarget, gate: Gate) -> Result<Self, GateError> {
        let target = Target::new(target);
        if self
            .config
            .gates
            .iter()
            .any(|(t, g)| g.key == gate.key && t.overlaps(&target))
        {
            return Err(GateError::DuplicateKey(gate.key));
        }
        Ok(self.with(|c| c.gates.push((target, gate))))
    }

    /// What the layer's caches of questions (with their validators) and of `_meta` readings
    /// weigh, in bytes, and the most they may weigh together: for tests, through
    /// [`crate::__fuzz::cache_weight`].
    pub(crate) fn cache_weight(&self) -> (usize, usize, usize) {
        let config = &self.config;
        (
            config.validators.weight(),
            config.metas.weight(),
            ValidatorCache::MAX_WEIGHT + META_BYTES,
        )
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        match Arc::get_mut(&mut self.config) {
            Some(config) => change(config),
            None => {
                let mut config = self.config.cloned();
                change(&mut config);
                self.config = Arc::new(config);
            }
        }
        self
    }
}

impl Config {
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

    /// A copy with fresh caches (they are an optimisation, never shared state; and a token cache
    /// is only sound for the keyring that sealed what it holds).
    fn cloned(&self) -> Self {
        Self {
            keyring: self.keyring.clone(),
            audience: self.audience.clone(),
            ttl_secs: self.ttl_secs,
            skew_secs: self.skew_secs,
            max_state_bytes: self.max_state_bytes,
            max_body_bytes: self.max_body_bytes,
            max_rounds: self.max_rounds,
            without_state: self.without_state,
            principal: self.principal.clone(),
            validators: ValidatorCache::default(),
            sealed: Sealed::default(),
            metas: Bounded::default(),
            gates: self.gates.clone(),
        }
    }
}

impl Weight for Meta {
    /// Its text, and the protocol version read from it.
    fn weight(&self, text: &str) -> usize {
        text.len() + self.version.as_ref().map_or(0, String::len)
    }
}

impl<S> Layer<S> for ElicitationLayer {
    type Service = Elicitation<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Elicitation::from_config(inner, self.config.clone())
    }
}

impl fmt::Debug for ElicitationLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
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
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_rounds", &self.max_rounds)
            .field("without_state", &self.without_state)
            .field("gates", &self.gates)
            .finish_non_exhaustive()
    }
}
