//! `[upstream] expose`, `hide` and `hide_when_unanswerable`: which of the upstream's tools,
//! prompts and resources a client sees and may call.
//!
//! An entry names a tool bare (`read_*`), a prompt as `prompt:NAME`, a resource as
//! `resource:URI`; each is a name, glob or URI pattern matched as a gate's is ([`targets`]).
//! Something is exposed when no `expose` entry names its kind or one matches it, and no `hide`
//! entry matches it: `hide` wins. So `expose = ["read_*"]` leaves every prompt and resource
//! as it was, and `hide = ["resource:file:///srv/secret/**"]` hides those resources alone.
//!
//! The proxy applies it in one service between the legacy bridge and the gates ([`Exposed`]).
//! Every request reaches it in the 2026-07-28 shape, a 2025-era host's too (the bridge puts
//! the session's capabilities in each request's `_meta`), so one reading serves both eras:
//!
//! - a list (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, a
//!   template matched by its `uriTemplate` as if it were a URI) leaves with what is hidden
//!   taken out, through the catalog's editor of listings ([`catalog::edit_messages`]);
//! - a call of something hidden (`tools/call`, `prompts/get`, `resources/read`,
//!   `resources/subscribe` and `unsubscribe`, and a `completion/complete` whose `ref` names a
//!   hidden prompt or resource template) is answered as a name the server does not know:
//!   `-32602`, `Unknown tool: NAME`, `Unknown prompt: NAME`, or `Resource not found` with the
//!   URI in `data` (the 2026-07-28 code, SEP-2164). It is refused before the gates, so that no
//!   question reveals the name, and it never reaches the upstream. A request the proxy cannot
//!   read well enough to tell what it names is refused too (`-32600`): hiding fails closed;
//! - a `subscriptions/listen` goes on without the hidden resources among those whose updates it
//!   asks for (a 2025-era host's `resources/subscribe` becomes one at the bridge).
//!
//! With `hide_when_unanswerable = true`, a client that cannot answer a gate (it declared no
//! `elicitation`, or only the form mode where the gate asks at a URL: a `url` gate,
//! `approvers = "url"`) does not see in its lists what that gate asks about on *every* call
//! ([`Policy::always_asks`]): it would only be refused. A gate with a `when` may not ask, so
//! what it names stays listed; and the calls are not refused here: a call still goes through
//! the gates, which refuse it for the missing capability (`-32021`) as before.
//!
//! `--check` prints how many of each kind are exposed, and warns of a gate that names only
//! hidden things: it never applies.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt as _, Either, Full, Limited};
use serde::Deserialize;
use serde_json::{Value, json};
use tower::{Service, ServiceExt as _};
use tower_elicitation::bridge::RequestBody;
use tower_elicitation::{BoxError, GateTarget};

use crate::catalog;
use crate::config::{Upstream, Upstreams};
use crate::gates::Offered;
use crate::policy::Policy;
use crate::targets::{self, Kind};
use toml::Spanned;

/// One kind's entries.
#[derive(Default)]
struct Entries {
    /// `None`: no `expose` entry names the kind, and every one of it is exposed.
    expose: Option<Vec<GateTarget>>,
    hide: Vec<GateTarget>,
}

impl Entries {
    fn shows(&self, method: &str, name: &str) -> bool {
        self.expose
            .as_ref()
            .is_none_or(|expose| expose.iter().any(|t| t.applies_to(method, name)))
            && !self.hide.iter().any(|t| t.applies_to(method, name))
    }

    fn restricts(&self) -> bool {
        self.expose.is_some() || !self.hide.is_empty()
    }
}

/// What the file exposes, with the rules `hide_when_unanswerable` reads.
#[derive(Default)]
pub struct Exposure {
    /// Per [`Kind::index`].
    kinds: [Entries; 3],
    /// With `hide_when_unanswerable`: the file's rules.
    unanswerable: Option<Arc<Policy>>,
}

/// Each of several upstreams' `hide` `resource:` entries, in the file's order: what the
/// fan-out leaves out of that upstream's resource lists and never routes to it.
///
/// # Errors
///
/// An entry that is not a pattern (the file's check says so first, at its line).
pub fn hidden_resources(upstreams: &Upstreams) -> Result<Vec<Vec<GateTarget>>, String> {
    upstreams
        .list
        .iter()
        .map(|table| {
            table
                .get_ref()
                .hide
                .iter()
                .filter_map(|entry| match targets::split(entry.get_ref()) {
                    (Kind::Resource, pattern) => Some(targets::target(Kind::Resource, pattern)),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// The exposure in force: the file's as last read without a mistake, replaced at each reload.
pub type Current = Arc<RwLock<Arc<Exposure>>>;

/// What a client can answer: the elicitation modes its `clientCapabilities` declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Answers {
    form: bool,
    url: bool,
}

impl Answers {
    /// What `elicitation` (the capability's value, if declared) lets a client answer, as the
    /// layer reads it: `{}` is the form mode alone; a mode object lists its modes.
    fn of(elicitation: Option<&Value>) -> Self {
        match elicitation.and_then(Value::as_object) {
            None => Self::default(),
            Some(modes) => Self {
                form: !modes.contains_key("url") || modes.contains_key("form"),
                url: modes.contains_key("url"),
            },
        }
    }

    fn all(self) -> bool {
        self.form && self.url
    }
}

impl Exposure {
    /// `upstream`'s `expose`, `hide` and `hide_when_unanswerable`, with the file's rules.
    ///
    /// # Errors
    ///
    /// An entry that is not a pattern (the file's check says so first, at its line).
    pub fn new(upstream: &Upstream, policy: &Arc<Policy>) -> Result<Self, String> {
        let mut kinds: [Entries; 3] = Default::default();
        let exposed = upstream.expose.as_ref().map(|e| e.get_ref().as_slice());
        for entry in exposed.unwrap_or_default() {
            let (kind, pattern) = targets::split(entry.get_ref());
            let target = targets::target(kind, pattern)?;
            kinds[kind.index()]
                .expose
                .get_or_insert_with(Vec::new)
                .push(target);
        }
        for entry in &upstream.hide {
            let (kind, pattern) = targets::split(entry.get_ref());
            kinds[kind.index()]
                .hide
                .push(targets::target(kind, pattern)?);
        }
        Ok(Self {
            kinds,
            unanswerable: upstream.hide_when_unanswerable.then(|| Arc::clone(policy)),
        })
    }

    /// The file's exposure: a lone `[upstream]`'s as [`new`](Self::new) reads it; with several
    /// `[[upstream]]`, each one's `expose` and `hide` on its own names, prefixed as the client
    /// sees them. Where one upstream's `expose` names a kind, another's that names none of it
    /// exposes all of its own (`notes_*`). URIs are not prefixed, so a `resource:` entry of an
    /// upstream's `hide` is that upstream's alone, and the fan-out applies it
    /// ([`hidden_resources`]); the file's check refuses one in `expose`.
    /// `hide_when_unanswerable` is the first table's.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn of(upstreams: &Upstreams, policy: &Arc<Policy>) -> Result<Self, String> {
        if !upstreams.several {
            return Self::new(upstreams.first(), policy);
        }
        let spanned = |text: String| Spanned::new(0..0, text);
        let prefixed = |prefix: &str, entry: &str| match targets::split(entry) {
            (Kind::Tool, pattern) => format!("{prefix}{pattern}"),
            (Kind::Prompt, pattern) => format!("prompt:{prefix}{pattern}"),
            _ => entry.to_owned(),
        };
        let mut combined = upstreams.first().clone();
        let mut expose = Vec::new();
        for kind in [Kind::Tool, Kind::Prompt] {
            let names_kind = |upstream: &Upstream| {
                upstream.expose.as_ref().is_some_and(|entries| {
                    entries
                        .get_ref()
                        .iter()
                        .any(|entry| targets::split(entry.get_ref()).0 == kind)
                })
            };
            let lists = |table: &Spanned<Upstream>| names_kind(table.get_ref());
            if !upstreams.list.iter().any(lists) {
                continue;
            }
            for table in &upstreams.list {
                let upstream = table.get_ref();
                let prefix = upstream.exposed_prefix();
                if names_kind(upstream) {
                    let entries = upstream.expose.as_ref().map(Spanned::get_ref);
                    for entry in entries.into_iter().flatten() {
                        if targets::split(entry.get_ref()).0 == kind {
                            expose.push(spanned(prefixed(&prefix, entry.get_ref())));
                        }
                    }
                } else if kind == Kind::Tool {
                    expose.push(spanned(format!("{prefix}*")));
                } else {
                    expose.push(spanned(format!("prompt:{prefix}*")));
                }
            }
        }
        combined.expose = (!expose.is_empty()).then(|| Spanned::new(0..0, expose));
        combined.hide = upstreams
            .list
            .iter()
            .flat_map(|table| {
                let upstream = table.get_ref();
                let prefix = upstream.exposed_prefix();
                upstream
                    .hide
                    .iter()
                    .filter(|entry| targets::split(entry.get_ref()).0 != Kind::Resource)
                    .map(move |entry| spanned(prefixed(&prefix, entry.get_ref())))
            })
            .collect();
        Self::new(&combined, policy)
    }

    /// Whether a client sees, and may call, the `kind` `name` (a resource's URI).
    fn shows(&self, kind: Kind, name: &str) -> bool {
        self.kinds[kind.index()].shows(kind.method(), name)
    }

    /// Whether this exposure changes anything a client sees or may call.
    fn is_active(&self) -> bool {
        self.unanswerable.is_some() || self.kinds.iter().any(Entries::restricts)
    }

    /// Whether a gate asks about every call of the `kind` `name` in a way a client that can
    /// answer `answers` cannot answer.
    fn unanswerable(&self, kind: Kind, name: &str, answers: Answers) -> bool {
        let Some(policy) = &self.unanswerable else {
            return false;
        };
        if answers.all() {
            return false;
        }
        policy
            .always_asks(kind.method(), name)
            .into_iter()
            .any(|index| {
                if policy.rules[index].asks_by_url {
                    !answers.url
                } else {
                    !answers.form
                }
            })
    }

    /// Whether a list's item of `kind` named `name` stays in a list sent to a client that can
    /// answer `answers`.
    fn lists(&self, kind: Kind, name: &str, answers: Answers) -> bool {
        self.shows(kind, name) && !self.unanswerable(kind, name, answers)
    }

    /// What `--check` prints of the exposure, against what the upstream lists now: a line per
    /// kind the file restricts (`exposed: 5 of 14 tools: list_directory, …`), and with
    /// `hide_when_unanswerable` what a client without elicitation does not see.
    pub fn summary(&self, offered: &Offered) -> Vec<String> {
        let mut lines = Vec::new();
        for kind in Kind::ALL {
            if !self.kinds[kind.index()].restricts() {
                continue;
            }
            let listed = listed(offered, kind);
            let shown: Vec<&str> = listed
                .iter()
                .copied()
                .filter(|name| self.shows(kind, name))
                .collect();
            lines.push(format!(
                "exposed: {} of {} {}{}",
                shown.len(),
                listed.len(),
                kind.plural(),
                names(&shown, ": ")
            ));
        }
        if self.unanswerable.is_some() {
            let mut hidden = Vec::new();
            for kind in Kind::ALL {
                hidden.extend(listed(offered, kind).into_iter().filter(|name| {
                    self.shows(kind, name) && self.unanswerable(kind, name, Answers::default())
                }));
            }
            lines.push(match hidden.as_slice() {
                [] => "hidden from a client without elicitation: nothing (no gate asks on every call of anything listed)".to_owned(),
                _ => format!(
                    "hidden from a client without elicitation (a gate asks on every call){}",
                    names(&hidden, ": ")
                ),
            });
        }
        lines
    }

    /// What `--check` warns of: each target of a gate that names only hidden things, which the
    /// gate never applies to (no call of them reaches it). A name or URI is hidden or not; a
    /// pattern is when everything the upstream lists now that it matches is.
    pub fn warnings(&self, policy: &Policy, offered: &Offered) -> Vec<String> {
        let mut warnings = Vec::new();
        for rule in &policy.rules {
            for (method, target, pattern) in &rule.targets {
                let kind = Kind::of_method(method);
                if !self.kinds[kind.index()].restricts() {
                    continue;
                }
                let what = kind.name();
                if !pattern.contains(['*', '?']) {
                    if !self.shows(kind, pattern) {
                        warnings.push(format!(
                            "{}: {what} {pattern:?} is hidden ([upstream] expose, hide): this gate never applies to it",
                            rule.label
                        ));
                    }
                    continue;
                }
                let matched: Vec<&str> = listed(offered, kind)
                    .into_iter()
                    .filter(|name| target.applies_to(method, name))
                    .collect();
                if !matched.is_empty() && matched.iter().all(|name| !self.shows(kind, name)) {
                    warnings.push(format!(
                        "{}: {what} {pattern:?}: all it matches of what the upstream lists now is hidden ({}; [upstream] expose, hide): this gate never applies to them",
                        rule.label,
                        matched.join(", ")
                    ));
                }
            }
        }
        warnings
    }

    /// What a request is answered with here, if anything: a refusal of a hidden name, or
    /// `None` (it goes on; a list is edited on its way back, [`Exposure::edit_list`]).
    fn refusal(&self, request: &Peek<'_>) -> Option<Value> {
        let method = request.method.as_deref()?;
        let params = request.params.as_ref();
        let name = params.and_then(|p| p.name.as_deref());
        let uri = params.and_then(|p| p.uri.as_deref());
        let (kind, name) = match method {
            "tools/call" => (Kind::Tool, name?),
            "prompts/get" => (Kind::Prompt, name?),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                (Kind::Resource, uri?)
            }
            "completion/complete" => {
                let reference = params.and_then(|p| p.reference.as_ref())?;
                match reference.kind.as_deref() {
                    Some("ref/prompt") => (Kind::Prompt, reference.name.as_deref()?),
                    Some("ref/resource") => (Kind::Resource, reference.uri.as_deref()?),
                    _ => return None,
                }
            }
            _ => return None,
        };
        if self.shows(kind, name) {
            return None;
        }
        tracing::info!(
            target: crate::decisions::REFUSAL_TARGET,
            outcome = "refused",
            why = "hidden",
            method,
            target = name,
            "refused as unknown: [upstream] expose or hide hides it"
        );
        Some(unknown(&request.id, kind, name))
    }

    /// Takes out of the list result in `message` (a response to `method`) what a client that
    /// can answer `answers` does not see; whether the message changed. With
    /// `hide_when_unanswerable` the list is this client's own: its `cacheScope` (2026-07-28)
    /// becomes `private`, so that no cache shared by clients keeps it for another.
    fn edit_list(&self, method: &str, message: &mut Value, answers: Answers) -> bool {
        let Some((kind, field, key)) = list_of(method) else {
            return false;
        };
        let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
            return false;
        };
        let mut changed = false;
        if self.unanswerable.is_some()
            && let Some(scope) = result.get_mut("cacheScope")
            && scope != "private"
        {
            *scope = json!("private");
            changed = true;
        }
        let Some(items) = result.get_mut(field).and_then(Value::as_array_mut) else {
            return changed;
        };
        let before = items.len();
        items.retain(|item| {
            item.get(key)
                .and_then(Value::as_str)
                .is_none_or(|name| self.lists(kind, name, answers))
        });
        changed || items.len() != before
    }
}

/// The kind a list method lists, its result's field, and the member naming each item.
fn list_of(method: &str) -> Option<(Kind, &'static str, &'static str)> {
    match method {
        "tools/list" => Some((Kind::Tool, "tools", "name")),
        "prompts/list" => Some((Kind::Prompt, "prompts", "name")),
        "resources/list" => Some((Kind::Resource, "resources", "uri")),
        "resources/templates/list" => Some((Kind::Resource, "resourceTemplates", "uriTemplate")),
        _ => None,
    }
}

/// What the upstream lists now of `kind`.
fn listed(offered: &Offered, kind: Kind) -> Vec<&str> {
    offered.names(kind).keys().map(String::as_str).collect()
}

/// `names` after `lead`, the first 20 of them; nothing when there are none.
fn names(names: &[&str], lead: &str) -> String {
    const SHOWN: usize = 20;
    if names.is_empty() {
        return String::new();
    }
    let mut text = format!("{lead}{}", names[..names.len().min(SHOWN)].join(", "));
    if names.len() > SHOWN {
        text.push_str(&format!(", … ({} more)", names.len() - SHOWN));
    }
    text
}

/// The answer to a call of the unknown `kind` `name`, as a server that does not have it gives.
fn unknown(id: &Value, kind: Kind, name: &str) -> Value {
    let error = match kind {
        Kind::Tool => json!({"code": -32602, "message": format!("Unknown tool: {name}")}),
        Kind::Prompt => json!({"code": -32602, "message": format!("Unknown prompt: {name}")}),
        Kind::Resource => {
            json!({"code": -32602, "message": "Resource not found", "data": {"uri": name}})
        }
    };
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// What of a request the exposure reads first: its id and method. Every other member is
/// skipped unread.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default)]
    id: Value,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
}

/// What of a request of a method the exposure judges it reads: its id and method again, what
/// its params name, and the client's capabilities. Every other member is skipped unread.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    id: Value,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
}

/// A request's `params`, as far as the exposure reads them.
#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uri: Option<Cow<'a, str>>,
    #[serde(rename = "ref", borrow, default)]
    reference: Option<Reference<'a>>,
    #[serde(rename = "_meta", default)]
    meta: Option<Meta>,
}

/// A `completion/complete`'s `ref`.
#[derive(Deserialize)]
struct Reference<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uri: Option<Cow<'a, str>>,
}

/// `params._meta`: the client's capabilities (a 2025-era host's too, which the bridge puts
/// there from its session).
#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default)]
    capabilities: Option<Capabilities>,
}

#[derive(Deserialize)]
struct Capabilities {
    #[serde(default)]
    elicitation: Option<Value>,
}

impl Peek<'_> {
    /// What the request's own `clientCapabilities` let its client answer.
    fn answers(&self) -> Answers {
        let elicitation = self
            .params
            .as_ref()
            .and_then(|p| p.meta.as_ref())
            .and_then(|m| m.capabilities.as_ref())
            .and_then(|c| c.elicitation.as_ref());
        Answers::of(elicitation)
    }
}

/// Whether the exposure reads a request of `method` further than its head.
fn judged(method: &str) -> bool {
    list_of(method).is_some()
        || matches!(
            method,
            "tools/call"
                | "prompts/get"
                | "resources/read"
                | "resources/subscribe"
                | "resources/unsubscribe"
                | "completion/complete"
                | LISTEN
        )
}

/// The 2026-07-28 request a client holds open for notifications; its
/// `notifications.resourceSubscriptions` names the resources whose updates it wants.
const LISTEN: &str = "subscriptions/listen";

/// What the exposure does with one request.
enum Verdict {
    /// It goes on untouched.
    Pass,
    /// It is answered here (HTTP 200, or 400 for one that could not be read).
    Answer(StatusCode, Value),
    /// It goes on, and its answer, a list of `method`'s, is edited for a client that can
    /// answer these.
    List(String, Answers),
    /// It goes on as this body instead.
    Rewrite(Bytes),
}

impl Exposure {
    /// What to do with a request whose body is `body`.
    fn judge(&self, body: &[u8]) -> Verdict {
        if !self.is_active() {
            return Verdict::Pass;
        }
        // One message, an object: a batch (which the bridge refuses) is never read as one.
        let object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let head = match serde_json::from_slice::<Head<'_>>(body)
            .ok()
            .filter(|_| object)
        {
            Some(head) => head,
            None => return unreadable(Value::Null),
        };
        let Some(method) = head.method.as_deref().filter(|m| judged(m)) else {
            return Verdict::Pass;
        };
        let peek = match serde_json::from_slice::<Peek<'_>>(body) {
            Ok(peek) => peek,
            Err(_) => return unreadable(head.id),
        };
        if list_of(method).is_some() {
            return Verdict::List(method.to_owned(), peek.answers());
        }
        if method == LISTEN {
            return self.unsubscribed(body);
        }
        match self.refusal(&peek) {
            Some(answer) => Verdict::Answer(StatusCode::OK, answer),
            None => Verdict::Pass,
        }
    }
}

impl Exposure {
    /// A `subscriptions/listen` without the hidden resources among those whose updates it asks
    /// for (a 2025-era host's `resources/subscribe` becomes one at the bridge): an update would
    /// tell that they exist.
    fn unsubscribed(&self, body: &[u8]) -> Verdict {
        let Ok(mut request) = serde_json::from_slice::<Value>(body) else {
            return unreadable(Value::Null);
        };
        let Some(uris) = request
            .pointer_mut("/params/notifications/resourceSubscriptions")
            .and_then(Value::as_array_mut)
        else {
            return Verdict::Pass;
        };
        let before = uris.len();
        uris.retain(|uri| {
            uri.as_str()
                .is_none_or(|uri| self.shows(Kind::Resource, uri))
        });
        if uris.len() == before {
            return Verdict::Pass;
        }
        Verdict::Rewrite(Bytes::from(request.to_string()))
    }
}

/// The refusal of a request the exposure cannot read well enough to tell what it names.
fn unreadable(id: Value) -> Verdict {
    Verdict::Answer(
        StatusCode::BAD_REQUEST,
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600,
            "message": "Invalid Request: the proxy could not read what it names"}}),
    )
}

/// `inner` (the gates, then the upstream) behind the exposure in force: between the legacy
/// bridge and the layer, where every request is a 2026-07-28 one.
#[derive(Clone)]
pub struct Exposed<S> {
    inner: S,
    current: Current,
}

impl<S> Exposed<S> {
    pub fn new(inner: S, current: Current) -> Self {
        Self { inner, current }
    }
}

/// A response of the exposure's own: `message`, as JSON.
fn own<B>(status: StatusCode, message: &Value) -> Response<Either<B, Full<Bytes>>> {
    let body = Bytes::from(message.to_string());
    let mut response = Response::new(Either::Right(Full::new(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

impl<S, B> Service<Request<RequestBody>> for Exposed<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Either<B, Full<Bytes>>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        let exposure = Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()));
        let inner = self.inner.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // The bridge's body is the whole request, in memory: this reads it at once.
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            };
            let verdict = exposure.judge(&bytes);
            let mut parts = parts;
            let (body, list) = match verdict {
                Verdict::Pass => (bytes, None),
                Verdict::Rewrite(rewritten) => {
                    parts.headers.remove(CONTENT_LENGTH);
                    (rewritten, None)
                }
                Verdict::Answer(status, message) => return Ok(own(status, &message)),
                Verdict::List(method, answers) => (bytes, Some((method, answers))),
            };
            let response = inner
                .oneshot(Request::from_parts(parts, Full::new(body)))
                .await?;
            let Some((method, answers)) = list else {
                return Ok(response.map(Either::Left));
            };
            if !response.status().is_success() {
                return Ok(response.map(Either::Left));
            }
            let (mut parts, body) = response.into_parts();
            let event_stream = parts
                .headers
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.starts_with("text/event-stream"));
            let Ok(read) = Limited::new(body, catalog::MAX_LISTING_BYTES)
                .collect()
                .await
            else {
                // What is hidden cannot be taken out of a list that cannot be read.
                let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603,
                    "message": "The list could not be read"}});
                return Ok(own(StatusCode::BAD_GATEWAY, &error));
            };
            let read = read.to_bytes();
            let edited = catalog::edit_messages(&read, event_stream, |message| {
                exposure.edit_list(&method, message, answers)
            });
            let body = match edited {
                Some(edited) => {
                    parts.headers.remove(CONTENT_LENGTH);
                    Bytes::from(edited)
                }
                None => read,
            };
            Ok(Response::from_parts(parts, Either::Right(Full::new(body))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Source;
    use std::path::PathBuf;

    /// The exposure of `[upstream]` keys `keys`, with the rules of `gates` (built against
    /// [`offered`]).
    fn exposure(keys: &str, gates: &str) -> Exposure {
        let source = Source {
            path: PathBuf::from("g.toml"),
            text: format!("[upstream]\ncommand = [\"x\"]\n{keys}\n{gates}"),
        };
        let config = source.parse().unwrap();
        source.check(&config).unwrap();
        let policy = policy_of(&source, &config);
        Exposure::new(config.upstreams.first(), &policy).unwrap()
    }

    fn policy_of(source: &Source, config: &crate::config::Config) -> Arc<Policy> {
        let backends = crate::flows::Backends::offline();
        let catalog = Arc::new(catalog::Catalog::new(
            None,
            crate::metrics::Metrics::default(),
        ));
        crate::gates::build(source, config, &offered(), &backends, &catalog)
            .unwrap()
            .policy
    }

    fn offered() -> Offered {
        let mut offered = Offered::default();
        for tool in [
            "read_file",
            "read_media_file",
            "list_directory",
            "write_file",
            "delete_file",
        ] {
            offered.tools.insert(tool.into(), vec!["path".into()]);
        }
        offered.prompts.insert("echo".into(), vec!["text".into()]);
        for uri in ["file:///srv/a.md", "file:///srv/secret/key"] {
            offered.resources.insert(uri.into(), vec!["uri".into()]);
        }
        offered
    }

    /// Every kind's count of what is listed, for tests.
    fn counts(
        exposure: &Exposure,
        offered: &Offered,
    ) -> std::collections::BTreeMap<&'static str, usize> {
        Kind::ALL
            .iter()
            .map(|&kind| {
                let shown = listed(offered, kind)
                    .into_iter()
                    .filter(|name| exposure.shows(kind, name))
                    .count();
                (kind.plural(), shown)
            })
            .collect()
    }

    const WRITE_GATE: &str =
        "[[gate]]\ntools = [\"write_file\"]\nform.approve = { type = \"boolean\" }\n";

    #[test]
    fn expose_restricts_only_the_kinds_it_names_and_hide_wins() {
        let everything = exposure("", "");
        assert!(!everything.is_active());
        let read = exposure(
            "expose = [\"read_*\", \"list_*\"]\nhide = [\"read_media_file\"]",
            "",
        );
        let offered = offered();
        let shown: Vec<&str> = listed(&offered, Kind::Tool)
            .into_iter()
            .filter(|name| read.shows(Kind::Tool, name))
            .collect();
        assert_eq!(shown, ["list_directory", "read_file"]);
        // No entry names prompts or resources: all of them stay.
        let counts = counts(&read, &offered);
        assert_eq!((counts["prompts"], counts["resources"]), (1, 2));
        // A tool named by no pattern but one the server adds later is judged on each call.
        assert!(read.shows(Kind::Tool, "read_later"));
        assert!(!read.shows(Kind::Tool, "write_later"));
    }

    #[test]
    fn prompts_and_resources_are_named_by_their_prefix() {
        let hidden = exposure(
            "hide = [\"prompt:echo\", \"resource:file:///srv/secret/**\"]",
            "",
        );
        assert!(hidden.shows(Kind::Tool, "echo"));
        assert!(!hidden.shows(Kind::Prompt, "echo"));
        assert!(!hidden.shows(Kind::Resource, "file:///srv/secret/key"));
        // However the call spells it.
        assert!(!hidden.shows(Kind::Resource, "file:///srv/./secret/key"));
        assert!(!hidden.shows(Kind::Resource, "file:///srv/secret/{name}"));
        assert!(hidden.shows(Kind::Resource, "file:///srv/a.md"));
        let only = exposure("expose = [\"resource:file:///srv/a.md\"]", "");
        assert!(only.shows(Kind::Resource, "FILE:///srv/a.md"));
        assert!(!only.shows(Kind::Resource, "file:///srv/b.md"));
        assert!(only.shows(Kind::Tool, "write_file"));
    }

    fn body(method: &str, params: Value) -> Vec<u8> {
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
            .to_string()
            .into_bytes()
    }

    fn refused(verdict: &Verdict) -> Option<&Value> {
        match verdict {
            Verdict::Answer(_, answer) => Some(&answer["error"]),
            _ => None,
        }
    }

    #[test]
    fn a_call_of_a_hidden_name_is_refused_as_unknown_however_it_is_spelled() {
        let hidden = exposure(
            "hide = [\"delete_*\", \"prompt:echo\", \"resource:file:///srv/secret/**\"]",
            "",
        );
        let tool = hidden.judge(&body("tools/call", json!({"name": "delete_file"})));
        assert_eq!(
            refused(&tool),
            Some(&json!({"code": -32602, "message": "Unknown tool: delete_file"}))
        );
        // An escape decodes to the name the upstream would read.
        let escaped = br#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"delete\u005ffile"}}"#;
        assert!(refused(&hidden.judge(escaped)).is_some());
        let prompt = hidden.judge(&body("prompts/get", json!({"name": "echo"})));
        assert_eq!(refused(&prompt).unwrap()["message"], "Unknown prompt: echo");
        for method in [
            "resources/read",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            let read = hidden.judge(&body(method, json!({"uri": "file:///srv/secret/key"})));
            assert_eq!(
                refused(&read),
                Some(&json!({"code": -32602, "message": "Resource not found",
                    "data": {"uri": "file:///srv/secret/key"}})),
                "{method}"
            );
        }
        let completion = hidden.judge(&body(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "echo"}, "argument": {"name": "text", "value": ""}}),
        ));
        assert!(refused(&completion).is_some());
        for visible in [
            body("tools/call", json!({"name": "read_file"})),
            body("prompts/get", json!({"name": "other"})),
            body("ping", json!({})),
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec(),
        ] {
            assert!(matches!(hidden.judge(&visible), Verdict::Pass));
        }
        // What cannot be read is refused: hiding fails closed.
        for unreadable in [
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_file","name":"read_file"}}"#.to_vec(),
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#.to_vec(),
            b"[{}]".to_vec(),
        ] {
            assert_eq!(
                refused(&hidden.judge(&unreadable)).unwrap()["code"],
                -32600
            );
        }
    }

    #[test]
    fn a_listen_asks_for_no_hidden_resources_updates() {
        let hidden = exposure("hide = [\"resource:file:///srv/secret/**\"]", "");
        let listen = body(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions":
                ["file:///srv/a.md", "file:///srv/secret/key"]}}),
        );
        let Verdict::Rewrite(rewritten) = hidden.judge(&listen) else {
            panic!("not rewritten");
        };
        let rewritten: Value = serde_json::from_slice(&rewritten).unwrap();
        assert_eq!(
            rewritten["params"]["notifications"],
            json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///srv/a.md"]})
        );
        let visible = body(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": ["file:///srv/a.md"]}}),
        );
        assert!(matches!(hidden.judge(&visible), Verdict::Pass));
    }

    #[test]
    fn lists_lose_what_is_hidden_and_what_the_client_cannot_answer() {
        let both = exposure(
            "hide = [\"delete_*\", \"resource:file:///srv/secret/**\"]\nhide_when_unanswerable = true",
            WRITE_GATE,
        );
        let mut tools = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [
            {"name": "read_file"}, {"name": "write_file"}, {"name": "delete_file"}]}});
        let form = Answers {
            form: true,
            url: false,
        };
        assert!(both.edit_list("tools/list", &mut tools, form));
        assert_eq!(
            tools["result"]["tools"],
            json!([{"name": "read_file"}, {"name": "write_file"}])
        );
        assert!(both.edit_list("tools/list", &mut tools, Answers::default()));
        assert_eq!(tools["result"]["tools"], json!([{"name": "read_file"}]));
        let mut shared = json!({"result": {"cacheScope": "public", "tools": []}});
        assert!(both.edit_list("tools/list", &mut shared, form));
        assert_eq!(shared["result"]["cacheScope"], "private");
        let mut templates = json!({"result": {"resourceTemplates": [
            {"uriTemplate": "file:///srv/secret/{name}"}, {"uriTemplate": "file:///srv/docs/{name}"}]}});
        assert!(both.edit_list("resources/templates/list", &mut templates, form));
        assert_eq!(
            templates["result"]["resourceTemplates"],
            json!([{"uriTemplate": "file:///srv/docs/{name}"}])
        );
        // The client's capabilities are the request's own.
        let asked = both.judge(&body(
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}}),
        ));
        assert!(matches!(asked, Verdict::List(_, answers) if answers == form));
        let none = both.judge(&body("tools/list", json!({})));
        assert!(matches!(none, Verdict::List(_, answers) if answers == Answers::default()));
    }

    #[test]
    fn only_what_a_gate_asks_on_every_call_is_unanswerable() {
        let answers = |form, url| Answers { form, url };
        let gated = |gates: &str| exposure("hide_when_unanswerable = true", gates);
        let plain = gated(WRITE_GATE);
        assert!(plain.unanswerable(Kind::Tool, "write_file", answers(false, false)));
        assert!(!plain.unanswerable(Kind::Tool, "write_file", answers(true, false)));
        assert!(!plain.unanswerable(Kind::Tool, "read_file", answers(false, false)));
        // Off unless the file says so.
        let off = exposure("", WRITE_GATE);
        assert!(!off.unanswerable(Kind::Tool, "write_file", answers(false, false)));
        // A `when` may not ask: listed.
        let conditional = gated(&format!("{WRITE_GATE}when = \"args.path == '/'\"\n"));
        assert!(!conditional.unanswerable(Kind::Tool, "write_file", answers(false, false)));
        // An `allow` before it may run the call unasked: listed.
        let allowed = gated(&format!(
            "[[gate]]\ntools = [\"write_file\"]\nwhen = \"args.path == '/tmp'\"\naction = \"allow\"\n\n{WRITE_GATE}"
        ));
        assert!(!allowed.unanswerable(Kind::Tool, "write_file", answers(false, false)));
        // A `deny` with a `when` before it refuses some calls and asks on the others.
        let denied = gated(&format!(
            "[[gate]]\ntools = [\"write_file\"]\nwhen = \"args.path == '/'\"\naction = \"deny\"\n\n{WRITE_GATE}"
        ));
        assert!(denied.unanswerable(Kind::Tool, "write_file", answers(false, false)));
        // A URL gate needs the URL mode.
        let url = gated(
            "[[gate]]\ntools = [\"write_file\"]\nurl = \"https://a.example/{handle}\"\ncomplete_when = { http = \"http://c/{handle}\" }\n",
        );
        assert!(url.unanswerable(Kind::Tool, "write_file", answers(true, false)));
        assert!(!url.unanswerable(Kind::Tool, "write_file", answers(false, true)));
        // The prompt a tool gate covers is asked about too.
        assert!(plain.unanswerable(Kind::Prompt, "write_file", answers(false, false)));
    }

    #[test]
    fn the_capability_is_read_as_the_layer_reads_it() {
        let of = |value: Value| Answers::of(Some(&value));
        assert_eq!(Answers::of(None), Answers::default());
        assert_eq!(
            of(json!({})),
            Answers {
                form: true,
                url: false
            }
        );
        assert_eq!(
            of(json!({"url": {}})),
            Answers {
                form: false,
                url: true
            }
        );
        assert!(of(json!({"form": {}, "url": {}})).all());
        assert_eq!(of(json!(true)), Answers::default());
    }

    #[test]
    fn check_counts_what_is_exposed_and_warns_of_a_gate_on_hidden_tools() {
        let gates = format!(
            "{WRITE_GATE}\n[[gate]]\ntools = [\"delete_*\"]\naction = \"deny\"\n\n[[gate]]\ntools = [\"read_*\"]\naction = \"deny\"\n"
        );
        let source = Source {
            path: PathBuf::from("g.toml"),
            text: format!(
                "[upstream]\ncommand = [\"x\"]\nexpose = [\"read_*\", \"list_*\", \"delete_*\"]\nhide = [\"delete_*\"]\nhide_when_unanswerable = true\n{gates}"
            ),
        };
        let config = source.parse().unwrap();
        let policy = policy_of(&source, &config);
        let exposure = Exposure::new(config.upstreams.first(), &policy).unwrap();
        assert_eq!(
            exposure.summary(&offered()),
            [
                "exposed: 3 of 5 tools: list_directory, read_file, read_media_file",
                "hidden from a client without elicitation: nothing (no gate asks on every call of anything listed)",
            ]
        );
        let warnings = exposure.warnings(&policy, &offered());
        assert_eq!(warnings.len(), 2, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("gate 1 (line 6): tool \"write_file\" is hidden"),
            "{warnings:#?}"
        );
        assert!(
            warnings[1].starts_with("gate 2 (line 10): tool \"delete_*\": all it matches"),
            "{warnings:#?}"
        );
    }
}
