//! What the adapter fronts and how: a stdio server's command or a Streamable HTTP server's URL,
//! its era, and the bounds.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use crate::Keyring;
use crate::store::ErasedPendingAnswers;
use crate::util::principal::{CallerBinding, Principal};

/// A server run as a child process speaking newline-delimited JSON-RPC on its stdin and stdout
/// (MCP's stdio transport). Its stderr lines go to `tracing` (target `tower_elicitation::upstream`),
/// each cut at 8 KiB.
///
/// The child does **not** inherit the adapter's environment: it starts from an empty one with
/// only the variables named in [`Stdio::BASE_ENV`] (what `npx`, `uvx`, `node` and `python` need to
/// start) copied from the adapter's, then those named with [`pass_env`](Stdio::pass_env), then
/// those set with [`env`](Stdio::env). So a secret of the front (the keys that seal
/// `requestState`, a Redis password) never reaches a server that can print its environment.
/// [`inherit_env`](Stdio::inherit_env) opts back into the whole environment.
///
/// ```
/// use tower_elicitation::upstream::Stdio;
///
/// let server = Stdio::new("npx")
///     .args(["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"])
///     .env("NODE_ENV", "production")
///     .pass_env("HTTPS_PROXY")
///     .current_dir("/srv");
/// # let _ = server;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stdio {
    pub(crate) command: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) pass: Vec<OsString>,
    pub(crate) inherit: bool,
    pub(crate) cwd: Option<PathBuf>,
}

impl Stdio {
    /// Creates a server run as the program `command` (looked up on `PATH` as
    /// `std::process::Command` does), with no arguments.
    pub fn new(command: impl Into<OsString>) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            pass: Vec::new(),
            inherit: false,
            cwd: None,
        }
    }

    /// The variables a child gets from the adapter's environment without being named (when
    /// set): the search path, the user and home, the locale (and every `LC_*`), the terminal,
    /// the time zone, the temporary and XDG directories, and where the machine's trusted TLS
    /// certificates are (paths, never secrets: without them `npx` and `uvx` cannot fetch a server
    /// behind a TLS-inspecting proxy). Nothing else of the adapter's reaches it unless
    /// [`pass_env`](Self::pass_env) names it: not the network proxy variables (`HTTPS_PROXY` and
    /// the like), whose URLs may carry credentials.
    pub const BASE_ENV: &'static [&'static str] = &[
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_*",
        "TERM",
        "TZ",
        "TMPDIR",
        "TMP",
        "TEMP",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
    ];

    /// Adds one argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    #[must_use]
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the child (over [`BASE_ENV`](Self::BASE_ENV) and
    /// [`pass_env`](Self::pass_env)'s).
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Passes the adapter's own value of the variable `name` to the child (nothing when it is
    /// not set), besides [`BASE_ENV`](Self::BASE_ENV).
    #[must_use]
    pub fn pass_env(mut self, name: impl Into<OsString>) -> Self {
        self.pass.push(name.into());
        self
    }

    /// Lets the child inherit the adapter's whole environment, as `std::process::Command` does
    /// by default, instead of [`BASE_ENV`](Self::BASE_ENV) and [`pass_env`](Self::pass_env)'s.
    /// Every secret in the adapter's environment then reaches the server, and through any tool
    /// of its that prints its environment, the model.
    #[must_use]
    pub fn inherit_env(mut self) -> Self {
        self.inherit = true;
        self
    }

    /// Whether the child gets the adapter's variable `name`.
    pub(crate) fn passes(&self, name: &std::ffi::OsStr) -> bool {
        self.inherit
            || self.pass.iter().any(|pass| pass == name)
            || Self::BASE_ENV
                .iter()
                .any(|base| match base.strip_suffix('*') {
                    Some(prefix) => name.to_str().is_some_and(|name| name.starts_with(prefix)),
                    None => name == *base,
                })
    }

    /// Sets the child's working directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
}

/// The server an [`Upstream`](super::Upstream) fronts: a [`Stdio`] child, or (feature
/// `upstream-http`) an [`Http`] endpoint. [`Upstream::builder`](super::Upstream::builder) takes
/// either.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Server {
    /// A child process speaking on its stdin and stdout.
    Stdio(Stdio),
    /// A Streamable HTTP endpoint.
    #[cfg(feature = "upstream-http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "upstream-http")))]
    Http(Http),
}

impl From<Stdio> for Server {
    fn from(stdio: Stdio) -> Self {
        Self::Stdio(stdio)
    }
}

#[cfg(feature = "upstream-http")]
impl From<Http> for Server {
    fn from(http: Http) -> Self {
        Self::Http(http)
    }
}

/// A server reached over MCP's Streamable HTTP transport (feature `upstream-http`): each
/// message is POSTed to `url` (`Accept: application/json, text/event-stream`) and answered with
/// JSON or an event stream; a 2025-era server's `Mcp-Session-Id` is kept and sent back.
///
/// ```
/// use std::time::Duration;
/// use tower_elicitation::upstream::Http;
///
/// let server = Http::new("http://127.0.0.1:3001/mcp")
///     .header("authorization", "Bearer the-upstreams-token")
///     .connect_timeout(Duration::from_secs(5))
///     .timeout(Duration::from_secs(120));
/// # let _ = server;
/// ```
#[cfg(feature = "upstream-http")]
#[cfg_attr(docsrs, doc(cfg(feature = "upstream-http")))]
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Http {
    pub(crate) url: String,
    pub(crate) headers: http::HeaderMap,
    /// The first header given that is not a valid name or value: refused at `spawn`.
    pub(crate) invalid_header: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) timeout: Duration,
    /// Root certificates (PEM) trusted besides the system's, for `https://` URLs.
    #[cfg(feature = "upstream-https")]
    pub(crate) roots: Vec<Vec<u8>>,
}

#[cfg(feature = "upstream-http")]
impl Http {
    /// Creates the server at `url` (`http://host:port/path`; checked when the adapter is
    /// spawned), with no headers of the user's and the default timeouts.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            headers: http::HeaderMap::new(),
            invalid_header: None,
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(300),
            #[cfg(feature = "upstream-https")]
            roots: Vec::new(),
        }
    }

    /// Adds a header sent with every request to the server (its `Authorization`, say); given again,
    /// one more value. The adapter's own headers (`Content-Type`, `Accept`, `Mcp-Session-Id`,
    /// `MCP-Protocol-Version`) are set over these. A name or value that is not valid is an error
    /// at [`spawn`](super::UpstreamBuilder::spawn).
    #[must_use]
    pub fn header<K, V>(mut self, name: K, value: V) -> Self
    where
        K: TryInto<http::HeaderName>,
        V: TryInto<http::HeaderValue>,
    {
        match (name.try_into(), value.try_into()) {
            (Ok(name), Ok(mut value)) => {
                // Kept out of `Debug` output and logs: a header here is often a credential.
                value.set_sensitive(true);
                self.headers.append(name, value);
            }
            _ => {
                self.invalid_header
                    .get_or_insert_with(|| "a header name or value is not valid".to_owned());
            }
        }
        self
    }

    /// Trusts `pem` (one or more PEM certificates) as a root for an `https://` URL, besides the
    /// system's roots (feature `upstream-https`): a private CA, or a server's self-signed
    /// certificate. A certificate that is not valid PEM is an error at
    /// [`spawn`](super::UpstreamBuilder::spawn).
    ///
    /// ```
    /// use tower_elicitation::upstream::Http;
    ///
    /// let pem = std::fs::read("/etc/mcp/upstream-ca.pem").unwrap_or_default();
    /// let server = Http::new("https://mcp.internal:8443/mcp").root_certificate(pem);
    /// # let _ = server;
    /// ```
    #[cfg(feature = "upstream-https")]
    #[cfg_attr(docsrs, doc(cfg(feature = "upstream-https")))]
    #[must_use]
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(pem.into());
        self
    }

    /// Sets how long connecting to the server may take (default 10 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how long the server may take to begin its answer to one POST, its status and headers
    /// (default 300 s). An answer that is an event stream then stays open as long as its call
    /// does (it may wait for a person): bounded by the adapter's request and parked timeouts.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Which protocol era the upstream server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Era {
    /// Find out: `server/discover` first (a 2026-07-28 server answers it), otherwise
    /// `initialize` offering 2025-11-25 (and taking 2025-06-18 or 2025-03-26).
    #[default]
    Detect,
    /// A 2026-07-28 server: requests pass through as they are, stateless.
    V2026,
    /// A 2025-era server (2025-11-25, 2025-06-18 or 2025-03-26): the adapter holds one session
    /// (`initialize` without `server/discover` first).
    V2025,
}

/// Whether a 2025-era server may ask the client questions through the adapter: its
/// `elicitation/create`, `sampling/createMessage` and `roots/list`
/// ([`UpstreamBuilder::server_questions`](super::UpstreamBuilder::server_questions)).
///
/// Over stdio such a request names no call, so relaying them costs concurrency: the adapter lets
/// one `tools/call`, `prompts/get` or `resources/read` run in the session at a time (its
/// questions are that call's; a stateless server may be run as a pool of
/// [`sessions`](super::UpstreamBuilder::sessions), one such call in each). A server that is
/// never to ask runs them all at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerQuestions {
    /// The reverse bridge (the default): the adapter declares `elicitation` (form and URL),
    /// `sampling` and `roots` in `initialize`, and a call's questions reach the client as
    /// `input_required` rounds. One call at a time runs in a 2025-era stdio session.
    #[default]
    Relay,
    /// None: the adapter declares none of those capabilities in `initialize`, and a
    /// server-to-client request the server sends anyway is refused to it (`-32601`) as a client
    /// without the capability would, and logged. Calls run concurrently (up to
    /// [`max_in_flight`](super::UpstreamBuilder::max_in_flight)). For a server whose tools do
    /// not ask, or whose questions are not to reach the client (the gates in front ask theirs).
    Off,
}

/// The adapter's settings, fixed when it is built.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) server: Server,
    pub(crate) era: Era,
    pub(crate) questions: ServerQuestions,
    pub(crate) max_in_flight: usize,
    pub(crate) max_parked: usize,
    /// How many sessions (children of the same command) serve the calls.
    pub(crate) sessions: usize,
    /// The most of the in-flight and of the parked bound one caller may hold (0 to 1).
    pub(crate) fair_share: f64,
    pub(crate) parked_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) start_timeout: Duration,
    /// The longest wait before a restart ([`MAX_BACKOFF`] by default).
    pub(crate) max_backoff: Duration,
    pub(crate) keep_alive: Option<Duration>,
    pub(crate) max_message_bytes: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) client_info: (String, String),
    pub(crate) callers: CallerBinding,
    /// Where a retry for a call parked on another replica is routed (none: it gets an error).
    pub(crate) routes: Option<Routes>,
}

/// The shared registry retries are routed through ([`UpstreamBuilder::route_retries`](super::UpstreamBuilder::route_retries)).
#[derive(Clone)]
pub(crate) struct Routes(pub(crate) Arc<dyn ErasedPendingAnswers>);

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Routes")
    }
}

impl Settings {
    pub(crate) fn new(server: Server) -> Self {
        Self {
            server,
            era: Era::Detect,
            questions: ServerQuestions::Relay,
            max_in_flight: 64,
            max_parked: 256,
            sessions: 1,
            fair_share: 0.25,
            parked_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(30),
            max_backoff: MAX_BACKOFF,
            keep_alive: Some(Duration::from_secs(30)),
            max_message_bytes: 16 * 1024 * 1024,
            max_body_bytes: crate::util::body::DEFAULT_MAX_BODY_BYTES,
            client_info: (
                "tower-elicitation-upstream".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
            callers: CallerBinding {
                keyring: Keyring::ephemeral(),
                principal: Principal::default(),
            },
            routes: None,
        }
    }
}

/// The first wait before a child that exited (or a server whose handshake failed) is started again; it doubles up to
/// [`MAX_BACKOFF`] (or [`UpstreamBuilder::restart_backoff`](super::UpstreamBuilder::restart_backoff)), and starts over once a child has run for [`STABLE_RUN`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(10);
pub(crate) const STABLE_RUN: Duration = Duration::from_secs(30);
/// Over stdio, where the server's requests name no call, two bounds of one round:
///
/// - how long a call that was asked waits for the answer to its barrier's `ping` (see
///   `call::Barrier`) before it answers `input_required` anyway: a server that answers the
///   ping at once (they do) adds no more than that round trip;
/// - how long a call that parked keeps the session's floor: what the server asks after the
///   ping's answer is still the call's, and joins its next round, rather than reaching whichever
///   call holds the floor next. Its retry takes the floor back if it comes first; other calls
///   wait for it, so it bounds a busy stdio session's rounds per second (about 1/`GATHER`).
pub(crate) const GATHER: Duration = Duration::from_millis(5);
