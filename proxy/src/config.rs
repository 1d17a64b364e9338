//! The config file: TOML read strictly (an unknown key is an error), each mistake reported with
//! the file, the line and what is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;
use tower_elicitation::upstream::ServerQuestions;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[upstream]` (one server, its names as they are) or `[[upstream]]` (several, each
    /// named, their names prefixed: [`crate::fanout`]).
    #[serde(rename = "upstream")]
    pub upstreams: Upstreams,
    #[serde(default)]
    pub listen: Listen,
    #[serde(default)]
    pub state: State,
    #[serde(default)]
    pub identity: Identity,
    #[serde(default)]
    pub log: Log,
    #[serde(default)]
    pub approvals: Approvals,
    #[serde(default)]
    pub limits: Limits,
    /// `[telemetry]` (feature `otel`, [`crate::telemetry`]).
    pub telemetry: Option<Spanned<Telemetry>>,
    #[serde(default, rename = "gate")]
    pub gates: Vec<Spanned<GateSpec>>,
}

/// The file's upstream servers: one `[upstream]` table, or an array of `[[upstream]]` tables.
#[derive(Debug)]
pub struct Upstreams {
    /// Each table, in the file's order; never empty once checked.
    pub list: Vec<Spanned<Upstream>>,
    /// Written as `[[upstream]]`: several servers behind one proxy, each named and prefixed.
    pub several: bool,
}

impl<'de> Deserialize<'de> for Upstreams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Upstreams;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an [upstream] table or [[upstream]] tables")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Upstreams, A::Error> {
                let one = Upstream::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Upstreams {
                    list: vec![Spanned::new(0..0, one)],
                    several: false,
                })
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> Result<Upstreams, A::Error> {
                let list = Vec::<Spanned<Upstream>>::deserialize(
                    serde::de::value::SeqAccessDeserializer::new(seq),
                )?;
                Ok(Upstreams {
                    list,
                    several: true,
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Upstreams {
    /// The first (with one `[upstream]`, the only) upstream: the one whose keys apply to every
    /// upstream (`on_tool_change`, `hide_when_unanswerable`).
    pub fn first(&self) -> &Upstream {
        self.list[0].get_ref()
    }

    /// Each upstream's name: `name`, else `upstream` for a lone `[upstream]`.
    pub fn names(&self) -> Vec<String> {
        self.list
            .iter()
            .map(|upstream| upstream.get_ref().name().to_owned())
            .collect()
    }
}

/// `[upstream]`, or one of several `[[upstream]]`: a command run as a stdio child, or a URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The upstream's name: in `/healthz`, `/metrics`, a gate's `upstream`, and (by default)
    /// its prefix. Required in `[[upstream]]`.
    pub name: Option<Spanned<String>>,
    /// `[[upstream]]` only: what its tools' and prompts' names begin with for the client
    /// (default its `name`), before `prefix_separator`.
    pub prefix: Option<Spanned<String>>,
    /// `[[upstream]]` only: between the prefix and the upstream's own name (default `_`).
    pub prefix_separator: Option<Spanned<String>>,
    pub command: Option<Vec<String>>,
    pub url: Option<String>,
    /// Headers sent to a URL upstream; a value `env:NAME` is read from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Environment variables for a command upstream (a value `env:NAME` or `file:PATH` is read
    /// as a secret is).
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// Variables of the proxy's own environment a command upstream gets besides the base ones
    /// (`Stdio::BASE_ENV`: `PATH`, `HOME`, the locale, …); nothing else of the proxy's reaches it.
    #[serde(default)]
    pub env_passthrough: Vec<Spanned<String>>,
    pub cwd: Option<PathBuf>,
    /// `detect` (default), `2025` or `2026`.
    pub era: Option<String>,
    /// What a tool whose definition changed since it was first listed gets: `ask` (default),
    /// `hide` or `allow`.
    pub on_tool_change: Option<String>,
    /// Whether a 2025-era server's own questions (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`) reach the caller: `relay` (default) or `off` (none declared to it, calls
    /// run concurrently).
    pub server_questions: Option<Spanned<String>>,
    /// How many children of a `command` upstream serve the calls (default 1): for a stateless
    /// server only (`server-filesystem`, an API wrapper), never one that holds state in its
    /// process (`server-memory`'s graph, an open browser page or shell), since a caller's calls
    /// land in any of them. Each child runs one call that may be asked at a time (with
    /// `server_questions = "relay"`); a child that exits is restarted alone. Not with a `url`.
    pub sessions: Option<Spanned<i64>>,
    /// The most of the in-flight and parked bounds one caller may hold (default 0.25, a
    /// quarter; 1 where every call is one caller's: `[identity] principal = "none"`, or a host
    /// on stdio), so that one caller cannot starve the others; more than 0, at most 1. Every
    /// anonymous caller counts as one caller. With `pass_to_upstream` each caller has an
    /// adapter of its own, and the share is all of it.
    pub fair_share: Option<Spanned<f64>>,
    /// Which of the upstream's tools, prompts and resources clients see and may call: a tool
    /// bare, a prompt as `prompt:NAME`, a resource as `resource:URI`, each a name, glob or URI
    /// pattern as a gate's. Of each kind some entry names, only those an entry matches; of a
    /// kind none names, all. Absent: everything ([`crate::exposure`]).
    pub expose: Option<Spanned<Vec<Spanned<String>>>>,
    /// What no client sees or may call, whatever `expose` says; entries as `expose`'s.
    #[serde(default)]
    pub hide: Vec<Spanned<String>>,
    /// Take out of a client's lists the tools, prompts and resources a gate asks about on every
    /// call, when the client cannot answer that gate (it declared no `elicitation`, or not the
    /// URL mode a URL gate asks in). Their calls are gated as ever (default `false`).
    #[serde(default)]
    pub hide_when_unanswerable: bool,
    /// Seconds the server may take to answer one request (default 300); then it is cancelled
    /// and the caller gets an error.
    pub request_timeout_secs: Option<Spanned<i64>>,
    /// Calls parked at once while their callers answer the server's own questions (default
    /// 256); one more is cancelled at the server with an error.
    pub max_parked: Option<Spanned<i64>>,
    /// Seconds a parked call waits for its caller's retry with the answers (default 600); then
    /// the server gets `notifications/cancelled`.
    pub parked_timeout_secs: Option<Spanned<i64>>,
    /// The longest wait, in seconds, before a server that exited (or failed its handshake) is
    /// started again (default 10); the waits double from 100 ms up to it.
    pub restart_backoff_secs: Option<Spanned<i64>>,
}

/// `[upstream] on_tool_change`: what a tool whose definition (description, `inputSchema`,
/// annotations) changed since it was first listed gets, until a reload accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnToolChange {
    /// Every call of it asks first, with a question showing what changed.
    #[default]
    Ask,
    /// It is taken out of `tools/list`, and its calls are refused.
    Hide,
    /// It runs as before (the change is logged and counted).
    Allow,
}

impl Upstream {
    /// The name a lone `[upstream]` without `name` goes by, in `/healthz` and `/metrics`.
    pub const DEFAULT_NAME: &str = "default";

    /// The upstream's name: `name`, else [`Self::DEFAULT_NAME`].
    pub fn name(&self) -> &str {
        self.name
            .as_ref()
            .map_or(Self::DEFAULT_NAME, |name| name.get_ref().as_str())
    }

    /// What the client sees before this upstream's tool and prompt names, one of several:
    /// `prefix` (default `name`) and `prefix_separator` (default `_`).
    pub fn exposed_prefix(&self) -> String {
        let prefix = self
            .prefix
            .as_ref()
            .map_or_else(|| self.name(), |prefix| prefix.get_ref().as_str());
        let separator = self
            .prefix_separator
            .as_ref()
            .map_or("_", |separator| separator.get_ref().as_str());
        format!("{prefix}{separator}")
    }

    /// What `on_tool_change` says.
    ///
    /// # Errors
    ///
    /// A value other than `ask`, `hide` or `allow`.
    pub fn on_tool_change(&self) -> Result<OnToolChange, String> {
        match self.on_tool_change.as_deref() {
            None | Some("ask") => Ok(OnToolChange::Ask),
            Some("hide") => Ok(OnToolChange::Hide),
            Some("allow") => Ok(OnToolChange::Allow),
            Some(other) => Err(format!(
                "[upstream] on_tool_change {other:?}: \"ask\", \"hide\" or \"allow\""
            )),
        }
    }
}

impl Upstream {
    /// What `server_questions` says.
    ///
    /// # Errors
    ///
    /// A value other than `relay` or `off` (the caller gives it its line).
    pub fn server_questions(&self) -> Result<ServerQuestions, String> {
        match self.server_questions.as_ref().map(|v| v.get_ref().as_str()) {
            None | Some("relay") => Ok(ServerQuestions::Relay),
            Some("off") => Ok(ServerQuestions::Off),
            Some(other) => Err(format!(
                "[upstream] server_questions {other:?}: \"relay\" (the server's questions reach the caller, one call at a time) or \"off\" (none, calls run at once)"
            )),
        }
    }
}

/// `[log]`: where the decision log goes, and what its lines hold ([`crate::decisions`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// `stderr` (the default), `stdout`, `file` (`file`, rotated by size) or `both` (the file
    /// and stdout).
    pub to: Option<Spanned<String>>,
    /// The file's path, for `file` and `both`.
    pub file: Option<PathBuf>,
    /// The size at which the file is rotated (`FILE.1`, `FILE.2`, …), default 10 MiB.
    pub max_bytes: Option<Spanned<u64>>,
    /// How many rotated files are kept, default 5.
    pub keep: Option<usize>,
    /// Each line also holds the call's arguments (default: only their digest).
    #[serde(default)]
    pub log_arguments: bool,
    /// A line for each call no gate judged too (default: only the calls a gate judged).
    #[serde(default)]
    pub log_ungated: bool,
}

/// Where `[log] to` sends the decision log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    Stderr,
    Stdout,
    File,
    Both,
}

impl Log {
    /// The default size a decision log file is rotated at.
    pub const MAX_BYTES: u64 = 10 * 1024 * 1024;
    /// The default count of rotated files kept.
    pub const KEEP: usize = 5;

    /// What `to` says, checked against `file` and against stdout being MCP's (`stdio`).
    ///
    /// # Errors
    ///
    /// An unknown value, a file missing or not wanted, stdout with stdio, a zero size.
    pub fn to(&self, stdio: bool) -> Result<LogTo, String> {
        let to = match self.to.as_ref().map(|to| to.get_ref().as_str()) {
            None | Some("stderr") => LogTo::Stderr,
            Some("stdout") => LogTo::Stdout,
            Some("file") => LogTo::File,
            Some("both") => LogTo::Both,
            Some(other) => {
                return Err(format!(
                    "[log] to {other:?}: \"stderr\", \"stdout\", \"file\" or \"both\" (the file and stdout)"
                ));
            }
        };
        match (to, &self.file) {
            (LogTo::File | LogTo::Both, None) => {
                return Err("[log] to = \"file\" or \"both\" needs `file`".to_owned());
            }
            (LogTo::Stderr | LogTo::Stdout, Some(_)) => {
                return Err("[log] file is written only with to = \"file\" or \"both\"".to_owned());
            }
            _ => {}
        }
        if stdio && matches!(to, LogTo::Stdout | LogTo::Both) {
            return Err(
                "[log] to: stdout carries MCP when the proxy serves over stdio; log to \"stderr\" or \"file\""
                    .to_owned(),
            );
        }
        if self
            .max_bytes
            .as_ref()
            .is_some_and(|max| *max.get_ref() == 0)
        {
            return Err("[log] max_bytes must be above 0".to_owned());
        }
        Ok(to)
    }
}

impl Upstream {
    /// What `sessions` says (1 when not given).
    ///
    /// # Errors
    ///
    /// Less than 1, more than 64, or given with a `url` (the caller gives it its line).
    pub fn sessions(&self) -> Result<usize, String> {
        let Some(sessions) = &self.sessions else {
            return Ok(1);
        };
        if self.url.is_some() {
            return Err("[upstream] sessions: only for a command upstream; an HTTP server takes calls at once in one session".to_owned());
        }
        match usize::try_from(*sessions.get_ref()) {
            Ok(n @ 1..=64) => Ok(n),
            _ => Err(format!(
                "[upstream] sessions {}: from 1 to 64 children of the command (more than 1 only for a stateless server)",
                sessions.get_ref()
            )),
        }
    }

    /// What `fair_share` says (0.25 when not given).
    ///
    /// # Errors
    ///
    /// Not above 0, or above 1 (the caller gives it its line).
    pub fn fair_share(&self) -> Result<f64, String> {
        let Some(share) = &self.fair_share else {
            return Ok(0.25);
        };
        let share = *share.get_ref();
        if share > 0.0 && share <= 1.0 {
            Ok(share)
        } else {
            Err(format!(
                "[upstream] fair_share {share}: more than 0 and at most 1 (0.25: a caller may hold a quarter of the requests in flight and of the parked calls)"
            ))
        }
    }
}

/// `[listen]`: where hosts reach the proxy.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    /// The address HTTP is served on (default `127.0.0.1:3000`); see [`Listen::http`].
    pub http: Option<String>,
    /// Host names the proxy answers to besides loopback's (DNS-rebinding protection).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Serve the host that spawned the proxy on stdin/stdout (as `--stdio`): instead of HTTP,
    /// or beside it when the file names `http` too ([`Listen::serves`]).
    #[serde(default)]
    pub stdio: bool,
    /// Seconds a connection may take from its accept to a complete request head (default 10).
    #[serde(default = "default_head_timeout")]
    pub head_timeout_secs: Spanned<u64>,
    /// Connections one peer address may hold at once (default 128, of the 1,024 served).
    #[serde(default = "default_per_peer")]
    pub max_connections_per_peer: Spanned<usize>,
    /// Seconds the proxy holds a 2025-era host's call while its person answers a question
    /// (default 600); past it, the question is withdrawn and the call ends with an error.
    pub answer_timeout_secs: Option<Spanned<u64>>,
    /// Seconds a request's body may take to arrive after its head (default 30).
    pub body_timeout_secs: Option<Spanned<i64>>,
    /// Connections served at once (default 1,024); the next ones wait in the listen backlog.
    pub max_connections: Option<Spanned<i64>>,
    /// The largest request body, in bytes (default 4 MiB); a larger one is answered 413.
    pub max_body_bytes: Option<Spanned<i64>>,
    /// Seconds the requests in flight may take to finish after SIGTERM (default 30).
    pub shutdown_grace_secs: Option<Spanned<i64>>,
    /// The most question rounds the proxy runs for one call of a 2025-era host (default 8).
    pub max_rounds: Option<Spanned<i64>>,
}

impl Default for Listen {
    fn default() -> Self {
        Self {
            http: None,
            allowed_hosts: Vec::new(),
            stdio: false,
            head_timeout_secs: default_head_timeout(),
            max_connections_per_peer: default_per_peer(),
            answer_timeout_secs: None,
            body_timeout_secs: None,
            max_connections: None,
            max_body_bytes: None,
            shutdown_grace_secs: None,
            max_rounds: None,
        }
    }
}

fn default_head_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 10)
}

fn default_per_peer() -> Spanned<usize> {
    Spanned::new(0..0, 128)
}

/// What the proxy serves its hosts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// HTTP only, on `[listen] http`.
    Http,
    /// stdin and stdout only: the host that spawned the proxy.
    Stdio,
    /// Both at once: the host that spawned the proxy, and HTTP clients beside it.
    Both,
}

impl Serving {
    /// Whether stdin and stdout carry MCP (so stdout carries nothing else).
    pub fn stdio(self) -> bool {
        matches!(self, Self::Stdio | Self::Both)
    }

    /// Whether HTTP is served.
    pub fn http(self) -> bool {
        matches!(self, Self::Http | Self::Both)
    }
}

impl Listen {
    /// The address HTTP is served on when the file names none.
    pub const DEFAULT_HTTP: &str = "127.0.0.1:3000";

    /// The address HTTP is served on: `http`, else [`Self::DEFAULT_HTTP`].
    pub fn http(&self) -> &str {
        self.http.as_deref().unwrap_or(Self::DEFAULT_HTTP)
    }

    /// Whether HTTP is served on a loopback address only (`127.0.0.1`, `::1`, `localhost`): no
    /// other machine reaches it.
    pub fn on_loopback(&self) -> bool {
        let address = self.http();
        address.starts_with("localhost:")
            || address
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|address| address.ip().is_loopback())
    }

    /// What the proxy serves: `--stdio` (`flag`) is stdio alone, whatever the file says (the
    /// host that spawned it with that flag wants no listener); `stdio = true` is stdio alone
    /// too, unless the file names `http` as well, which serves both.
    pub fn serves(&self, flag: bool) -> Serving {
        match (flag, self.stdio, self.http.is_some()) {
            (true, _, _) | (false, true, false) => Serving::Stdio,
            (false, true, true) => Serving::Both,
            (false, false, _) => Serving::Http,
        }
    }
}

/// `[limits]`: how many calls a caller may make a minute ([`crate::limits`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Calls (`tools/call`, `prompts/get`, `resources/read`) one caller may make a minute, all
    /// targets together (default: no limit).
    pub calls_per_minute: Option<Spanned<i64>>,
    /// Calls of the tools each entry names (a name, or a glob: `"fs_*"`, all the tools it
    /// matches counted together) one caller may make a minute, besides `calls_per_minute`
    /// (default: none).
    #[serde(default)]
    pub per_tool: BTreeMap<String, Spanned<i64>>,
    /// Callers whose counts are kept at once (default 10,000); past it, a new caller's call is
    /// refused until a count runs out.
    pub max_callers: Option<Spanned<i64>>,
}

/// `[telemetry]`: where the spans go ([`crate::telemetry`], feature `otel`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`): spans are POSTed to its
    /// `/v1/traces`.
    pub otlp_endpoint: Spanned<String>,
    /// The `service.name` of the spans (default `elicitation-proxy`).
    pub service_name: Option<Spanned<String>>,
}

/// A whole-number key of the file: where it is, its default, the values it takes and their
/// unit.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub key: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub unit: &'static str,
}

impl Bound {
    pub const BODY_TIMEOUT: Self = Self::new("[listen] body_timeout_secs", 30, 1, 3600, "seconds");
    pub const MAX_CONNECTIONS: Self =
        Self::new("[listen] max_connections", 1024, 1, 65_536, "connections");
    pub const MAX_BODY_BYTES: Self = Self::new(
        "[listen] max_body_bytes",
        4 * 1024 * 1024,
        1024,
        256 * 1024 * 1024,
        "bytes",
    );
    pub const SHUTDOWN_GRACE: Self =
        Self::new("[listen] shutdown_grace_secs", 30, 0, 3600, "seconds");
    pub const MAX_ROUNDS: Self = Self::new("[listen] max_rounds", 8, 1, 100, "rounds");
    pub const REQUEST_TIMEOUT: Self =
        Self::new("[upstream] request_timeout_secs", 300, 1, 86_400, "seconds");
    pub const MAX_PARKED: Self = Self::new("[upstream] max_parked", 256, 1, 65_536, "calls");
    pub const PARKED_TIMEOUT: Self =
        Self::new("[upstream] parked_timeout_secs", 600, 1, 86_400, "seconds");
    pub const RESTART_BACKOFF: Self =
        Self::new("[upstream] restart_backoff_secs", 10, 1, 3600, "seconds");
    pub const CALLS_PER_MINUTE: Self =
        Self::new("[limits] calls_per_minute", 0, 1, 1_000_000, "calls");
    pub const PER_TOOL: Self = Self::new("[limits] per_tool", 0, 1, 1_000_000, "calls");
    pub const MAX_CALLERS: Self =
        Self::new("[limits] max_callers", 10_000, 1, 1_000_000, "callers");

    const fn new(key: &'static str, default: u64, min: u64, max: u64, unit: &'static str) -> Self {
        Self {
            key,
            default,
            min,
            max,
            unit,
        }
    }

    /// The value `given` says, the default when it is absent.
    ///
    /// # Errors
    ///
    /// A value out of range (the caller gives it its line).
    pub fn of(&self, given: Option<&Spanned<i64>>) -> Result<u64, String> {
        let Some(given) = given else {
            return Ok(self.default);
        };
        u64::try_from(*given.get_ref())
            .ok()
            .filter(|value| (self.min..=self.max).contains(value))
            .ok_or_else(|| {
                format!(
                    "{} {}: from {} to {} {}",
                    self.key,
                    given.get_ref(),
                    self.min,
                    self.max,
                    self.unit
                )
            })
    }

    /// [`of`](Self::of) as a duration in seconds.
    ///
    /// # Errors
    ///
    /// As [`of`](Self::of).
    pub fn secs(&self, given: Option<&Spanned<i64>>) -> Result<std::time::Duration, String> {
        self.of(given).map(std::time::Duration::from_secs)
    }

    /// [`of`](Self::of) as a count.
    ///
    /// # Errors
    ///
    /// As [`of`](Self::of).
    pub fn count(&self, given: Option<&Spanned<i64>>) -> Result<usize, String> {
        // Every bound's maximum fits a `usize` of 32 bits.
        self.of(given)
            .map(|value| usize::try_from(value).unwrap_or(usize::MAX))
    }
}

/// `[approvals]`: the approval pages of the gates with `approvers = "url"`
/// ([`crate::approvals`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approvals {
    /// The origin the pages are linked from (`https://gate.example.com`): default the HTTP
    /// listener's own, `http://` and `[listen] http`.
    pub url: Option<Spanned<String>>,
    /// The principals who may approve; default any verified one but the caller.
    #[serde(default)]
    pub approvers: Vec<String>,
}

/// `[state]`: the keys that seal `requestState`, and Redis for several replicas.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// `env:NAME` or `file:PATH` (`kid:base64url-key` pairs, comma-separated; the first signs).
    pub keys: Option<String>,
    /// A random key for this process when `keys` gives none (a demo's choice, as
    /// `--ephemeral-keys`).
    #[serde(default)]
    pub ephemeral_keys: bool,
    pub redis: Option<String>,
}

/// `[identity]`: who the caller is, which approvals are bound to.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// `authorization` (the caller's `Authorization` header), `header:NAME` (another header an
    /// authenticating proxy in front sets), or `none` (approvals bound to no caller). Unset: the
    /// verified caller (`jwt`, `api_keys`, over stdio `stdio_principal`), else `Authorization`.
    pub principal: Option<String>,
    /// Bearer tokens checked as an OAuth 2.1 resource server does (`identity::JwtSpec`).
    pub jwt: Option<Spanned<crate::identity::JwtSpec>>,
    /// `file:PATH`: named callers by the SHA-256 of their key (`identity::ApiKeys`).
    pub api_keys: Option<Spanned<String>>,
    /// Over stdio, the caller of every request (default: the OS user).
    pub stdio_principal: Option<Spanned<String>>,
    /// Send each caller's `Authorization` to a URL upstream (in place of `[upstream] headers`'
    /// own), on an upstream connection of the caller's own: `true` for a lone `[upstream]`, the
    /// names of the `[[upstream]]`s it goes to with several.
    pub pass_to_upstream: Option<Spanned<PassTo>>,
    /// With `pass_to_upstream`: let a call without `Authorization` through, on the upstream
    /// connection of the file's own `[upstream] headers` (default: refused, HTTP 401).
    #[serde(default)]
    pub allow_anonymous: bool,
    /// With `pass_to_upstream`: how many callers' upstream connections are kept (default 256).
    pub max_callers: Option<usize>,
}

/// `[identity] pass_to_upstream`: `true` or `false` (a lone `[upstream]`), or the names of the
/// `[[upstream]]`s that get each caller's `Authorization` (several).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum PassTo {
    All(bool),
    Named(Vec<String>),
}

impl Identity {
    /// Whether callers over HTTP are verified (`jwt` or `api_keys`): a call without valid
    /// credentials is refused.
    pub fn verifies(&self) -> bool {
        self.jwt.is_some() || self.api_keys.is_some()
    }

    /// Whether `pass_to_upstream` sends any caller's credentials anywhere.
    pub fn passes_any(&self) -> bool {
        match self.pass_to_upstream.as_ref().map(Spanned::get_ref) {
            Some(PassTo::All(all)) => *all,
            Some(PassTo::Named(names)) => !names.is_empty(),
            None => false,
        }
    }

    /// Whether each caller's credentials go to the upstream `name`: the lone one's with
    /// `true`, one of several that the list names.
    pub fn passes_to(&self, name: &str, several: bool) -> bool {
        match self.pass_to_upstream.as_ref().map(Spanned::get_ref) {
            Some(PassTo::All(all)) => *all && !several,
            Some(PassTo::Named(names)) => several && names.iter().any(|named| named == name),
            None => false,
        }
    }
}

/// Where the caller's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalFrom {
    /// The library's default: a verified caller, else the `Authorization` header.
    Verified,
    Header(http::HeaderName),
    Nobody,
}

impl Identity {
    /// What `principal` says.
    ///
    /// # Errors
    ///
    /// A value that is none of the three forms, or a header name that is not one.
    pub fn principal(&self) -> Result<PrincipalFrom, String> {
        match self.principal.as_deref() {
            None => Ok(PrincipalFrom::Verified),
            Some("authorization") => Ok(PrincipalFrom::Header(http::header::AUTHORIZATION)),
            Some("none") => Ok(PrincipalFrom::Nobody),
            Some(other) => match other.strip_prefix("header:") {
                Some(name) => http::HeaderName::try_from(name)
                    .map(PrincipalFrom::Header)
                    .map_err(|_| format!("[identity] principal: {name:?} is not a header name")),
                None => Err(format!(
                    "[identity] principal {other:?}: \"authorization\", \"header:NAME\" or \"none\""
                )),
            },
        }
    }
}

/// One `[[gate]]`. Serialized only to digest it: an approval is bound to the gate that asked.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GateSpec {
    /// With `[[upstream]]`: the upstream whose own names `tools` and `prompts` are (prefixed
    /// when the file is read); without it they are the names the client sees.
    pub upstream: Option<String>,
    /// Tool names or globs (`delete_*`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Prompt names or globs.
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resource URIs or globs; `prefix*` gates every URI under the prefix, listed or not.
    #[serde(default)]
    pub resources: Vec<String>,
    /// The key the question goes under (default `approval`).
    pub key: Option<String>,
    /// The message, with `{argument}` placeholders.
    pub message: Option<String>,
    /// The form's fields, in order: each a JSON Schema of the form subset, as a TOML table.
    #[serde(default)]
    pub form: toml::Table,
    /// Fields that must be answered (default: those `require` names).
    pub required: Option<Vec<String>>,
    /// Conditions on the answer: a field equal to a constant, or to `"{argument}"`.
    #[serde(default)]
    pub require: toml::Table,
    pub retry_hint: Option<String>,
    pub refusal: Option<String>,
    pub inject_as: Option<String>,
    /// A URL gate's link, with `{handle}` and `{argument}` placeholders (instead of a form).
    pub url: Option<String>,
    /// Where a URL gate's completion is checked.
    pub complete_when: Option<CompleteWhen>,
    /// `arguments`: every argument of the call shown (each capped) below the message.
    pub show: Option<String>,
    /// Whether the gate's `tools` also gate the prompts of the same names (default `true`).
    pub cover_prompts: Option<bool>,
    /// A CEL condition: the rule decides only the calls it holds for ([`crate::policy`]).
    pub when: Option<String>,
    /// `ask` (the default), `deny` or `allow`: what the rule does with the calls it decides.
    pub action: Option<String>,
    /// Seconds the person has to answer the gate's question: an approval is good for a retry
    /// within them (default: the sealed state's own 600).
    pub approval_ttl_secs: Option<u64>,
    /// Who answers: `caller` (the default: the caller's own client asks its person) or `url`
    /// (another person, on the proxy's approval page: [`crate::approvals`]).
    pub approvers: Option<String>,
}

/// `complete_when`: a Redis key or an HTTP URL, with `{handle}` and `{argument}` placeholders.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteWhen {
    pub redis_key: Option<String>,
    pub http: Option<String>,
}

/// A mistake in the file: where, and what.
#[derive(Debug)]
pub struct ConfigError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub message: String,
    /// The file's other mistakes, found in the same reading.
    pub more: Vec<ConfigError>,
}

impl ConfigError {
    /// `Ok` when `found` is empty; else the first mistake, the others after it, each on a line
    /// of its own.
    ///
    /// # Errors
    ///
    /// The mistakes found.
    pub fn gather(mut found: Vec<ConfigError>) -> Result<(), ConfigError> {
        if found.is_empty() {
            return Ok(());
        }
        let mut first = found.remove(0);
        first.more.extend(found);
        Err(first)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message)?,
            None => write!(f, "{}: {}", self.path.display(), self.message)?,
        }
        for more in &self.more {
            write!(f, "\n{more}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The file as read, kept to point at lines.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

impl Source {
    /// `[identity]`'s combinations that make no sense, each at its line: a verified caller
    /// (`jwt`, `api_keys`, `stdio_principal`) with an explicit `principal` (which would win over
    /// it), `jwt` or `api_keys` with `pass_to_upstream` (MCP's authorization spec forbids
    /// passing a token through) or `allow_anonymous`; a bad `jwt` table or `api_keys` file.
    ///
    /// # Errors
    ///
    /// The first such mistake, at its line.
    fn check_identity(&self, identity: &Identity) -> Result<(), ConfigError> {
        let at = |span: std::ops::Range<usize>| Some(self.line_of(span.start));
        let verifying = [
            identity.jwt.as_ref().map(|j| ("jwt", j.span())),
            identity.api_keys.as_ref().map(|k| ("api_keys", k.span())),
            identity
                .stdio_principal
                .as_ref()
                .map(|s| ("stdio_principal", s.span())),
        ];
        for (name, span) in verifying.iter().flatten() {
            if let Some(principal) = &identity.principal {
                return Err(self.error(
                    at(span.clone()),
                    format!(
                        "[identity] {name} with principal = {principal:?}: the principal would come from there, not from the verified caller; drop `principal`"
                    ),
                ));
            }
        }
        for (name, span) in verifying[..2].iter().flatten() {
            if identity.passes_any() {
                return Err(self.error(
                    at(span.clone()),
                    format!(
                        "[identity] {name} with pass_to_upstream: the caller's token is the proxy's to check; MCP's authorization spec forbids passing it through to the upstream"
                    ),
                ));
            }
            if identity.allow_anonymous {
                return Err(self.error(
                    at(span.clone()),
                    format!("[identity] {name} with allow_anonymous: every caller is verified; anonymous calls are refused (401)"),
                ));
            }
        }
        if let Some(jwt) = &identity.jwt {
            crate::identity::Jwt::new(jwt.get_ref().clone())
                .map_err(|why| self.error(at(jwt.span()), why))?;
        }
        if let Some(keys) = &identity.api_keys {
            self.api_keys(keys)?;
        }
        if let Some(name) = &identity.stdio_principal
            && name.get_ref().trim().is_empty()
        {
            return Err(self.error(at(name.span()), "[identity] stdio_principal is empty"));
        }
        Ok(())
    }

    /// `[upstream] expose` and `hide`, each mistake at its line: an entry that is not a pattern
    /// (`read_[ab]`), and `expose = []`, which would expose nothing.
    fn check_exposure(&self, upstream: &Upstream, several: bool) -> Vec<ConfigError> {
        let at = |span: std::ops::Range<usize>| Some(self.line_of(span.start));
        let mut found = Vec::new();
        let exposed: &[Spanned<String>] = match &upstream.expose {
            Some(expose) if expose.get_ref().is_empty() => {
                found.push(self.error(
                    at(expose.span()),
                    "[upstream] expose = [] exposes nothing: every tool, prompt and resource would be hidden. Leave `expose` out to expose everything, or name what clients may see (\"read_*\", \"prompt:NAME\", \"resource:URI\")",
                ));
                &[]
            }
            Some(expose) => expose.get_ref(),
            None => &[],
        };
        for (key, entries) in [("expose", exposed), ("hide", upstream.hide.as_slice())] {
            for entry in entries {
                let (kind, pattern) = crate::targets::split(entry.get_ref());
                if several && key == "expose" && kind == crate::targets::Kind::Resource {
                    found.push(self.error(
                        at(entry.span()),
                        format!(
                            "[[upstream]] {:?} expose: \"resource:…\" entries are not per upstream yet (resource URIs are not prefixed, so one upstream's `expose` would hide the others' resources): leave them out, and hide resources with `hide` (which hides a URI whichever upstream lists it)",
                            upstream.name()
                        ),
                    ));
                    continue;
                }
                if let Err(why) = crate::targets::target(kind, pattern) {
                    found.push(self.error(at(entry.span()), format!("[upstream] {key}: {why}")));
                }
            }
        }
        found
    }

    /// `[upstream]` against `[[upstream]]`, each mistake at its line: in `[[upstream]]` every
    /// table named (letters, digits, `-` and `_`), no two alike, nor two prefixes; the keys
    /// that apply to every upstream (`on_tool_change`, `hide_when_unanswerable`) in the first
    /// table only; no `[identity] pass_to_upstream`. A lone `[upstream]` takes no `prefix`. A
    /// gate's `upstream` names one of the file's, and then no `resources`.
    fn check_upstreams(&self, config: &Config) -> Vec<ConfigError> {
        let at = |span: std::ops::Range<usize>| Some(self.line_of(span.start));
        let mut found = Vec::new();
        let upstreams = &config.upstreams;
        if upstreams.list.is_empty() {
            found.push(self.error(None, "[[upstream]]: the file names no upstream"));
            return found;
        }
        let names = upstreams.names();
        if upstreams.several {
            let mut prefixes: Vec<(String, &str)> = Vec::new();
            for (index, table) in upstreams.list.iter().enumerate() {
                let upstream = table.get_ref();
                let Some(name) = &upstream.name else {
                    found.push(self.error(
                        at(table.span()),
                        "[[upstream]] needs a `name` (e.g. name = \"fs\"): it names the upstream in /healthz and to gates, and prefixes its tools",
                    ));
                    continue;
                };
                if !is_name(name.get_ref()) {
                    found.push(self.error(
                        at(name.span()),
                        format!(
                            "[[upstream]] name {:?}: 1 to 64 letters, digits, `-` or `_`",
                            name.get_ref()
                        ),
                    ));
                }
                if names[..index].contains(name.get_ref()) {
                    found.push(self.error(
                        at(name.span()),
                        format!(
                            "[[upstream]] name {:?} is taken by an earlier [[upstream]]",
                            name.get_ref()
                        ),
                    ));
                }
                if let Some(prefix) = &upstream.prefix
                    && !is_name(prefix.get_ref())
                {
                    found.push(self.error(
                        at(prefix.span()),
                        format!(
                            "[[upstream]] prefix {:?}: 1 to 64 letters, digits, `-` or `_`",
                            prefix.get_ref()
                        ),
                    ));
                }
                if let Some(separator) = &upstream.prefix_separator {
                    let text = separator.get_ref();
                    if text.chars().count() > 8
                        || !text
                            .chars()
                            .all(|c| matches!(c, '_' | '-' | '.' | '/' | ':'))
                    {
                        found.push(self.error(
                            at(separator.span()),
                            format!("[[upstream]] prefix_separator {text:?}: at most 8 of `_`, `-`, `.`, `/` and `:`"),
                        ));
                    }
                }
                let prefix = upstream.exposed_prefix();
                if let Some((_, other)) = prefixes.iter().find(|(p, _)| *p == prefix) {
                    found.push(self.error(
                        at(table.span()),
                        format!("[[upstream]] {:?}: its names would be prefixed {prefix:?}, as upstream {other:?}'s are; give one a `prefix` of its own", name.get_ref()),
                    ));
                }
                prefixes.push((prefix, name.get_ref()));
                if index > 0 {
                    let global = [
                        ("on_tool_change", upstream.on_tool_change.is_some()),
                        ("hide_when_unanswerable", upstream.hide_when_unanswerable),
                    ];
                    for (key, given) in global {
                        if given {
                            found.push(self.error(
                                at(table.span()),
                                format!("[[upstream]] {:?}: `{key}` applies to every upstream: give it in the first [[upstream]] only", name.get_ref()),
                            ));
                        }
                    }
                }
            }
            if let Some(pass) = &config.identity.pass_to_upstream {
                let line = at(pass.span());
                match pass.get_ref() {
                    PassTo::All(true) => found.push(self.error(
                        line,
                        "[identity] pass_to_upstream = true with several [[upstream]]: name the upstreams each caller's credentials go to (pass_to_upstream = [\"NAME\"]), so that none reaches a server it is not for",
                    )),
                    PassTo::All(false) => {}
                    PassTo::Named(names) => {
                        for named in names {
                            let upstream = upstreams
                                .list
                                .iter()
                                .map(Spanned::get_ref)
                                .find(|upstream| upstream.name() == named);
                            let why = match upstream {
                                None => format!("names no [[upstream]] (they are {:?})", upstreams.names()),
                                Some(upstream) if upstream.url.is_none() => "is a command: credentials go to a URL upstream only".to_owned(),
                                Some(_) => continue,
                            };
                            found.push(self.error(
                                line,
                                format!("[identity] pass_to_upstream: {named:?} {why}"),
                            ));
                        }
                    }
                }
            }
        } else if let Some(pass) = &config.identity.pass_to_upstream
            && let PassTo::Named(_) = pass.get_ref()
        {
            found.push(self.error(
                at(pass.span()),
                "[identity] pass_to_upstream: a list names several [[upstream]]; with a lone [upstream] it is true or false",
            ));
        }
        if !upstreams.several {
            let upstream = upstreams.first();
            for (key, given) in [
                ("prefix", &upstream.prefix),
                ("prefix_separator", &upstream.prefix_separator),
            ] {
                if let Some(given) = given {
                    found.push(self.error(
                        at(given.span()),
                        format!("[upstream] {key}: a lone [upstream]'s names are not prefixed; `{key}` is for several [[upstream]] tables"),
                    ));
                }
            }
            if let Some(name) = &upstream.name
                && !is_name(name.get_ref())
            {
                found.push(self.error(
                    at(name.span()),
                    format!(
                        "[upstream] name {:?}: 1 to 64 letters, digits, `-` or `_`",
                        name.get_ref()
                    ),
                ));
            }
        }
        for (number, gate) in config.gates.iter().enumerate() {
            let spec = gate.get_ref();
            let line = at(gate.span());
            let reads_upstream = spec.when.as_deref().is_some_and(|when| {
                when.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|word| word == "upstream")
            });
            if upstreams.several && reads_upstream {
                found.push(self.error(
                    line,
                    format!("gate {}: `when` reads `upstream`, which is not yet the call's upstream with several [[upstream]]: give the gate `upstream = \"NAME\"` instead", number + 1),
                ));
            }
            let Some(named) = &spec.upstream else {
                continue;
            };
            if !names.contains(named) {
                found.push(self.error(
                    line,
                    format!(
                        "gate {}: upstream {named:?} names no upstream of the file ({})",
                        number + 1,
                        names.join(", ")
                    ),
                ));
            } else if !spec.resources.is_empty() {
                found.push(self.error(
                    line,
                    format!("gate {}: `resources` with upstream = {named:?}: resource URIs are not prefixed, so a gate cannot keep them to one upstream; put them in a gate without `upstream` (its patterns match every upstream's URIs)", number + 1),
                ));
            }
        }
        found
    }

    /// The callers `api_keys` (`file:PATH`, relative to the config's folder) names.
    ///
    /// # Errors
    ///
    /// Not `file:…`, a file that cannot be read, or a bad line (its file and line).
    pub fn api_keys(
        &self,
        value: &Spanned<String>,
    ) -> Result<crate::identity::ApiKeys, ConfigError> {
        let line = Some(self.line_of(value.span().start));
        let Some(path) = value.get_ref().strip_prefix("file:") else {
            return Err(self.error(line, "[identity] api_keys: \"file:PATH\""));
        };
        let path = match self.path.parent() {
            Some(dir) => dir.join(path),
            None => PathBuf::from(path),
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            self.error(
                line,
                format!("[identity] api_keys: {}: {e}", path.display()),
            )
        })?;
        crate::identity::ApiKeys::parse(&text).map_err(|(at, why)| ConfigError {
            path: path.clone(),
            line: Some(at),
            message: format!("[identity] api_keys: {why}"),
            more: Vec::new(),
        })
    }

    /// Reads `path`.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
            path: path.to_owned(),
            line: None,
            message: format!("cannot read it: {error}"),
            more: Vec::new(),
        })?;
        Ok(Self {
            path: path.to_owned(),
            text,
        })
    }

    /// The config in it; a gate that names its `upstream` has its tool and prompt patterns
    /// prefixed as that upstream's names are for the client (`write_*` of `fs`: `fs_write_*`).
    pub fn parse(&self) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(&self.text).map_err(|error| {
            let line = error.span().map(|span| self.line_of(span.start));
            let mut message = error.message().trim_end().to_owned();
            if let Some(span) = error.span() {
                message.push_str(&self.pointed(span.start));
            }
            self.error(line, message)
        })?;
        config.prefix_gates();
        Ok(config)
    }

    /// The line holding byte `offset`, and a caret under it, each on a line of its own.
    pub fn pointed(&self, offset: usize) -> String {
        let offset = offset.min(self.text.len());
        let Some(start) = self
            .text
            .get(..offset)
            .map(|before| before.rfind('\n').map_or(0, |at| at + 1))
        else {
            return String::new();
        };
        let end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |at| start + at);
        let line = self.text[start..end].trim_end_matches('\r');
        let column = self.text[start..offset]
            .chars()
            .count()
            .min(line.chars().count());
        let shown: String = line.chars().take(200).collect();
        format!("\n    {shown}\n    {}^", " ".repeat(column.min(200)))
    }

    /// The line (1-based) of byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    pub fn error(&self, line: Option<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: self.path.clone(),
            line,
            message: message.into(),
            more: Vec::new(),
        }
    }
}

impl Config {
    /// Prefixes the tool and prompt patterns of each gate that names an upstream (one of
    /// several) as that upstream's names are prefixed. A gate naming no upstream of the file is
    /// left as it is: [`Source::check`] refuses it.
    fn prefix_gates(&mut self) {
        if !self.upstreams.several {
            return;
        }
        for gate in &mut self.gates {
            let gate = gate.get_mut();
            let Some(named) = &gate.upstream else {
                continue;
            };
            let Some(upstream) = self
                .upstreams
                .list
                .iter()
                .find(|upstream| upstream.get_ref().name() == named.as_str())
            else {
                continue;
            };
            let prefix = upstream.get_ref().exposed_prefix();
            for pattern in gate.tools.iter_mut().chain(gate.prompts.iter_mut()) {
                *pattern = format!("{prefix}{pattern}");
            }
        }
    }

    /// The environment variables the proxy reads its own secrets from (`env:NAME` in `[state]`,
    /// `[identity]` and `[upstream] headers`), and the keys' default variable.
    fn secret_variables(&self) -> Vec<&str> {
        let mut values: Vec<&str> = vec![];
        values.extend(self.state.keys.as_deref());
        values.extend(self.state.redis.as_deref());
        values.extend(self.identity.principal.as_deref());
        for upstream in &self.upstreams.list {
            values.extend(upstream.get_ref().headers.values().map(String::as_str));
        }
        let mut names: Vec<&str> = values
            .into_iter()
            .filter_map(|value| value.strip_prefix("env:"))
            .collect();
        names.push(tower_elicitation::KEYS_ENV);
        names
    }
}

impl Source {
    /// Checks what reading alone does not: `[listen]`'s, `[upstream]`'s and `[limits]`' bounds,
    /// `[upstream] server_questions`, `sessions`, `fair_share`, `expose` and `hide`,
    /// and refuses a config that would
    /// hand the upstream child one of the proxy's own secrets: a
    /// variable `[state]`, `[identity]` or an `[upstream]` header reads (`env:NAME`), or the keys'
    /// default variable, named in `[upstream] env_passthrough` or read by an `[upstream] env`
    /// value.
    ///
    /// # Errors
    ///
    /// The line of the first bound out of range, or of the first such entry and which variable.
    pub fn check(&self, config: &Config) -> Result<(), ConfigError> {
        let mut found = Vec::new();
        let listen = &config.listen;
        if !(1..=600).contains(listen.head_timeout_secs.get_ref()) {
            found.push(self.error(
                Some(self.line_of(listen.head_timeout_secs.span().start)),
                "[listen] head_timeout_secs: from 1 to 600 seconds",
            ));
        }
        if let Some(timeout) = &listen.answer_timeout_secs
            && !(1..=86_400).contains(timeout.get_ref())
        {
            found.push(self.error(
                Some(self.line_of(timeout.span().start)),
                "[listen] answer_timeout_secs: from 1 to 86400 seconds",
            ));
        }
        let connections = Bound::MAX_CONNECTIONS
            .count(listen.max_connections.as_ref())
            .unwrap_or(1024);
        if !(1..=connections).contains(listen.max_connections_per_peer.get_ref()) {
            found.push(self.error(
                Some(self.line_of(listen.max_connections_per_peer.span().start)),
                format!(
                    "[listen] max_connections_per_peer: from 1 to {connections} (max_connections)"
                ),
            ));
        }
        let limits = &config.limits;
        let listen_bounds = [
            (Bound::BODY_TIMEOUT, &listen.body_timeout_secs),
            (Bound::MAX_CONNECTIONS, &listen.max_connections),
            (Bound::MAX_BODY_BYTES, &listen.max_body_bytes),
            (Bound::SHUTDOWN_GRACE, &listen.shutdown_grace_secs),
            (Bound::MAX_ROUNDS, &listen.max_rounds),
            (Bound::CALLS_PER_MINUTE, &limits.calls_per_minute),
            (Bound::MAX_CALLERS, &limits.max_callers),
        ];
        let upstream_bounds = config.upstreams.list.iter().flat_map(|upstream| {
            let upstream = upstream.get_ref();
            [
                (Bound::REQUEST_TIMEOUT, &upstream.request_timeout_secs),
                (Bound::MAX_PARKED, &upstream.max_parked),
                (Bound::PARKED_TIMEOUT, &upstream.parked_timeout_secs),
                (Bound::RESTART_BACKOFF, &upstream.restart_backoff_secs),
            ]
        });
        let per_tool = limits.per_tool.values().map(|n| (Bound::PER_TOOL, n));
        let bounded = listen_bounds
            .into_iter()
            .chain(upstream_bounds)
            .filter_map(|(bound, given)| given.as_ref().map(|given| (bound, given)))
            .chain(per_tool);
        for (bound, given) in bounded {
            if let Err(why) = bound.of(Some(given)) {
                found.push(self.error(Some(self.line_of(given.span().start)), why));
            }
        }
        for (name, given) in &limits.per_tool {
            let line = Some(self.line_of(given.span().start));
            if name.trim().is_empty() {
                found.push(self.error(line, "[limits] per_tool: a tool's name is empty"));
            } else if let Err(why) = crate::targets::target(crate::targets::Kind::Tool, name) {
                found.push(self.error(line, format!("[limits] per_tool: {why}")));
            }
        }
        if let Err(error) = self.check_identity(&config.identity) {
            found.push(error);
        }
        found.extend(self.check_upstreams(config));
        let secrets = config.secret_variables();
        for upstream in &config.upstreams.list {
            let upstream = upstream.get_ref();
            if let (Err(why), Some(value)) =
                (upstream.server_questions(), &upstream.server_questions)
            {
                found.push(self.error(Some(self.line_of(value.span().start)), why));
            }
            if let (Err(why), Some(value)) = (upstream.sessions(), &upstream.sessions) {
                found.push(self.error(Some(self.line_of(value.span().start)), why));
            }
            if let (Err(why), Some(value)) = (upstream.fair_share(), &upstream.fair_share) {
                found.push(self.error(Some(self.line_of(value.span().start)), why));
            }
            found.extend(self.check_exposure(upstream, config.upstreams.several));
            for name in &upstream.env_passthrough {
                if secrets.contains(&name.get_ref().as_str()) {
                    found.push(self.error(
                        Some(self.line_of(name.span().start)),
                        format!(
                            "[upstream] env_passthrough: {:?} holds a secret of the proxy's own (the proxy reads it as env:{0}); the upstream server is never given it",
                            name.get_ref()
                        ),
                    ));
                }
            }
            for (key, value) in &upstream.env {
                if let Some(name) = value.get_ref().strip_prefix("env:")
                    && secrets.contains(&name)
                {
                    found.push(self.error(
                        Some(self.line_of(value.span().start)),
                        format!(
                            "[upstream] env {key}: env:{name} holds a secret of the proxy's own; the upstream server is never given it"
                        ),
                    ));
                }
            }
        }
        ConfigError::gather(found)
    }
}

/// Whether `text` may name an upstream or be its prefix: 1 to 64 ASCII letters, digits, `-`
/// or `_`, so that it is a literal in a name pattern.
fn is_name(text: &str) -> bool {
    text.len() <= 64 && crate::template::is_name(text)
}

/// A secret given as `env:NAME` (the variable's value) or `file:PATH` (the file's contents,
/// trimmed); anything else is the value itself.
pub fn secret(value: &str) -> Result<String, String> {
    if let Some(name) = value.strip_prefix("env:") {
        return std::env::var(name)
            .map_err(|_| format!("the environment variable {name} is not set"));
    }
    if let Some(path) = value.strip_prefix("file:") {
        return std::fs::read_to_string(path)
            .map(|text| text.trim().to_owned())
            .map_err(|error| format!("cannot read {path}: {error}"));
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source {
            path: PathBuf::from("gates.toml"),
            text: text.to_owned(),
        }
    }

    /// `text` read and checked, or the mistake as the operator reads it.
    fn checked(text: &str) -> Result<Config, String> {
        let source = source(text);
        let config = source.parse().map_err(|e| e.to_string())?;
        source
            .check(&config)
            .map(|()| config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_good_file_reads_with_its_gates_in_order() {
        let config = source(
            r#"
[upstream]
command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]

[[gate]]
tools = ["write_file"]
message = "Write to {path}?"
form.approve = { type = "boolean", title = "Approve" }
form.reason = { type = "string", maxLength = 200 }
require = { approve = true }
"#,
        )
        .parse()
        .unwrap();
        assert_eq!(config.listen.http(), "127.0.0.1:3000");
        assert_eq!(config.listen.serves(false), Serving::Http);
        assert_eq!(config.listen.serves(true), Serving::Stdio);
        let gate = config.gates[0].get_ref();
        assert_eq!(gate.tools, ["write_file"]);
        let fields: Vec<&String> = gate.form.keys().collect();
        assert_eq!(fields, ["approve", "reason"]);
    }

    #[test]
    fn stdio_with_http_named_serves_both_and_the_flag_serves_stdio_alone() {
        let serves = |listen: &str, flag: bool| {
            let text = format!("[upstream]\ncommand = [\"x\"]\n\n[listen]\n{listen}\n");
            let source = Source {
                path: PathBuf::from("gates.toml"),
                text,
            };
            source.parse().unwrap().listen.serves(flag)
        };
        assert_eq!(serves("stdio = true", false), Serving::Stdio);
        assert_eq!(
            serves("stdio = true\nhttp = \"127.0.0.1:0\"", false),
            Serving::Both
        );
        assert_eq!(
            serves("stdio = true\nhttp = \"127.0.0.1:0\"", true),
            Serving::Stdio
        );
        assert_eq!(serves("http = \"127.0.0.1:0\"", false), Serving::Http);
        assert_eq!(serves("http = \"127.0.0.1:0\"", true), Serving::Stdio);
    }

    #[test]
    fn mistakes_name_the_file_and_the_line() {
        let error = source(
            "[upstream]\ncommand = [\"x\"]\n\n[[gate]]\ntools = [\"a\"]\nmesage = \"typo\"\n",
        )
        .parse()
        .unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("gates.toml:6: "), "{text}");
        assert!(text.contains("mesage"), "{text}");

        let error = source("[upstream\n").parse().unwrap_err();
        assert!(error.to_string().starts_with("gates.toml:1: "), "{error}");
    }

    #[test]
    fn server_questions_are_relayed_or_off_and_a_bad_value_names_its_line() {
        let read = |text: &str| {
            let source = source(text);
            let config = source.parse().unwrap();
            source.check(&config).map(|()| config)
        };
        let questions = |text: &str| read(text).unwrap().upstreams.first().server_questions();
        assert_eq!(
            questions("[upstream]\ncommand = [\"x\"]\n"),
            Ok(ServerQuestions::Relay)
        );
        assert_eq!(
            questions("[upstream]\ncommand = [\"x\"]\nserver_questions = \"relay\"\n"),
            Ok(ServerQuestions::Relay)
        );
        assert_eq!(
            questions("[upstream]\ncommand = [\"x\"]\nserver_questions = \"off\"\n"),
            Ok(ServerQuestions::Off)
        );
        let error = read("[upstream]\ncommand = [\"x\"]\n\nserver_questions = \"validate\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("gates.toml:4: "), "{error}");
        assert!(
            error.contains("\"relay\"") && error.contains("\"off\""),
            "{error}"
        );
    }

    #[test]
    fn sessions_and_the_fair_share_are_in_range_and_a_bad_value_names_its_line() {
        let command = "[upstream]\ncommand = [\"x\"]\n";
        let config = checked(command).unwrap();
        assert_eq!(config.upstreams.first().sessions(), Ok(1));
        assert_eq!(config.upstreams.first().fair_share(), Ok(0.25));
        let config = checked(&format!("{command}sessions = 8\nfair_share = 0.5\n")).unwrap();
        assert_eq!(config.upstreams.first().sessions(), Ok(8));
        assert_eq!(config.upstreams.first().fair_share(), Ok(0.5));
        // An integer share reads as a number too.
        let config = checked(&format!("{command}fair_share = 1\n")).unwrap();
        assert_eq!(config.upstreams.first().fair_share(), Ok(1.0));
        for (bad, says) in [
            ("\nsessions = 0\n", "from 1 to 64"),
            ("\nsessions = -2\n", "from 1 to 64"),
            ("\nsessions = \"4\"\n", "expected i64"),
            ("\nsessions = 2.5\n", "expected i64"),
            ("\nfair_share = 0\n", "more than 0"),
            ("\nfair_share = 1.5\n", "at most 1"),
            ("\nfair_share = \"half\"\n", "expected f64"),
        ] {
            let error = checked(&format!("{command}{bad}")).unwrap_err();
            assert!(error.starts_with("gates.toml:4: "), "{bad}: {error}");
            assert!(error.contains(says), "{bad}: {error}");
        }
        let error =
            checked("[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\nsessions = 2\n").unwrap_err();
        assert!(error.starts_with("gates.toml:3: "), "{error}");
        assert!(error.contains("only for a command"), "{error}");
    }

    #[test]
    fn exposure_entries_are_patterns_and_expose_names_something() {
        let command = "[upstream]\ncommand = [\"x\"]\n";
        let config = checked(&format!(
            "{command}expose = [\"read_*\", \"prompt:echo\", \"resource:file:///srv/**\"]\nhide = [\"read_secret\"]\nhide_when_unanswerable = true\n"
        ))
        .unwrap();
        assert_eq!(config.upstreams.first().hide.len(), 1);
        assert!(config.upstreams.first().hide_when_unanswerable);
        let error = checked(&format!("{command}\nexpose = []\n")).unwrap_err();
        assert!(
            error.starts_with("gates.toml:4: [upstream] expose = []"),
            "{error}"
        );
        assert!(error.contains("Leave `expose` out"), "{error}");
        // Each bad entry at its own line, with the file's other mistakes.
        let error = checked(&format!(
            "{command}expose = [\n  \"read_*\",\n  \"read_[ab]\",\n]\nhide = [\"prompt:\"]\nsessions = 0\n"
        ))
        .unwrap_err();
        let lines: Vec<&str> = error.lines().collect();
        assert_eq!(lines.len(), 3, "{error}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("gates.toml:8: [upstream] sessions")),
            "{error}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l
                    .starts_with("gates.toml:5: [upstream] expose: tool pattern \"read_[ab]\"")),
            "{error}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("gates.toml:7: [upstream] hide: prompt pattern")),
            "{error}"
        );
    }

    #[test]
    fn a_gate_naming_its_upstream_has_its_patterns_prefixed_as_the_client_sees_them() {
        let text = r#"
[[upstream]]
name = "fs"
command = ["x"]

[[upstream]]
name = "notes"
prefix = "n"
prefix_separator = "."
command = ["y"]

[[gate]]
upstream = "notes"
tools = ["add_*"]
prompts = ["summary"]
form.approve = { type = "boolean" }

[[gate]]
tools = ["fs_write_file"]
form.approve = { type = "boolean" }
"#;
        let file = source(text);
        let config = file.parse().unwrap();
        file.check(&config).unwrap();
        assert!(config.upstreams.several);
        assert_eq!(config.upstreams.names(), ["fs", "notes"]);
        assert_eq!(config.upstreams.list[0].get_ref().exposed_prefix(), "fs_");
        assert_eq!(config.upstreams.list[1].get_ref().exposed_prefix(), "n.");
        assert_eq!(config.gates[0].get_ref().tools, ["n.add_*"]);
        assert_eq!(config.gates[0].get_ref().prompts, ["n.summary"]);
        // Without `upstream`: the names the client sees, as written.
        assert_eq!(config.gates[1].get_ref().tools, ["fs_write_file"]);
        // A lone [upstream] is named `default` and prefixes nothing.
        let one = source("[upstream]\ncommand = [\"x\"]\n").parse().unwrap();
        assert!(!one.upstreams.several);
        assert_eq!(one.upstreams.names(), ["default"]);
    }

    #[test]
    fn the_shipped_team_example_reads_with_two_upstreams() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/proxy/team.toml");
        let file = Source::read(&path).unwrap();
        let config = file.parse().unwrap();
        file.check(&config).unwrap();
        assert_eq!(config.upstreams.names(), ["fs", "notes"]);
        assert_eq!(
            config.gates[1].get_ref().tools,
            ["fs_write_file", "fs_edit_file"]
        );
        assert_eq!(config.gates[3].get_ref().tools, ["notes_add_note"]);
        // Callers verified, and rules that read them and the arguments.
        assert!(config.identity.jwt.is_some());
        assert_eq!(
            config.gates[2].get_ref().when.as_deref(),
            Some("caller.principal == 'alice'")
        );
    }

    #[test]
    fn several_upstreams_refuse_what_they_cannot_combine_each_at_its_line() {
        let mistakes = |text: &str| {
            let source = source(text);
            let config = source.parse().map_err(|e| e.to_string()).unwrap();
            source.check(&config).unwrap_err().to_string()
        };
        let two = "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[upstream]]\nname = \"b\"\ncommand = [\"y\"]\n";
        let error = mistakes(&format!("{two}prefix = \"a\"\n"));
        assert!(error.starts_with("gates.toml:5: "), "{error}");
        assert!(error.contains("as upstream \"a\"'s are"), "{error}");
        let error = mistakes(&format!("{two}hide_when_unanswerable = true\n"));
        assert!(error.contains("first [[upstream]] only"), "{error}");
        let error = mistakes(&format!("{two}prefix = \"a b\"\n"));
        assert!(error.starts_with("gates.toml:8: "), "{error}");
        let gate = "\n[[gate]]\nupstream = \"a\"\nresources = [\"file:///x\"]\nform.ok = { type = \"boolean\" }\n";
        let error = mistakes(&format!("{two}{gate}"));
        assert!(error.starts_with("gates.toml:9: "), "{error}");
        assert!(error.contains("resource URIs are not prefixed"), "{error}");
        let when = "\n[[gate]]\ntools = [\"*\"]\nwhen = \"upstream == 'a'\"\naction = \"deny\"\n";
        let error = mistakes(&format!("{two}{when}"));
        assert!(error.contains("`when` reads `upstream`"), "{error}");
    }

    #[test]
    fn the_principal_is_a_header_or_nobody() {
        let identity = |p: &str| Identity {
            principal: Some(p.to_owned()),
            ..Identity::default()
        };
        assert_eq!(Identity::default().principal(), Ok(PrincipalFrom::Verified));
        assert_eq!(
            identity("authorization").principal(),
            Ok(PrincipalFrom::Header(http::header::AUTHORIZATION))
        );
        assert_eq!(
            identity("header:X-User").principal(),
            Ok(PrincipalFrom::Header(http::HeaderName::from_static(
                "x-user"
            )))
        );
        assert_eq!(identity("none").principal(), Ok(PrincipalFrom::Nobody));
        assert!(identity("header:bad name").principal().is_err());
        assert!(identity("cookie").principal().is_err());
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file() {
        assert_eq!(secret("plain").unwrap(), "plain");
        assert!(
            secret("env:TE_PROXY_SURELY_UNSET")
                .unwrap_err()
                .contains("not set")
        );
        assert!(secret("file:/nonexistent/x").is_err());
    }
}
