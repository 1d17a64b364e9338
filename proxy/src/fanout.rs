//! `[[upstream]]`: several servers behind one proxy, one MCP server to the client.
//!
//! ```toml
//! [[upstream]]
//! name = "fs"          # its tools reach the client as fs_read_file, fs_write_file, …
//! command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"]
//!
//! [[upstream]]
//! name = "notes"
//! prefix = "n"         # n_add_note; the separator is `prefix_separator` (default "_")
//! command = ["python3", "notes_server.py"]
//! ```
//!
//! [`Fanout`] stands where one upstream adapter stands: under the gates, so that the gates,
//! the exposure, the catalog and the limits see the names the client sees (prefixed), and each
//! upstream's adapter sees its own. It is thin: it reads the request's method, and
//!
//! - **lists** (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`)
//!   asks every upstream that is up, following each one's `nextCursor` to its end (at most
//!   [`MAX_PAGES`] pages, [`MAX_ITEMS`] items each), and answers one list with no
//!   `nextCursor`: tool and prompt names prefixed, URIs as they are. Each list remembers which
//!   upstream listed what, and that is how calls are routed. A name two upstreams list (after
//!   prefixing) is a collision: at start-up the proxy refuses to serve, naming both; found
//!   later (an upstream's list changed) the name is left out of the list and its calls are
//!   refused, and the log says why;
//! - **calls** (`tools/call`, `prompts/get`, `completion/complete` by its `ref`) go to the
//!   upstream that listed the name, with the upstream's own name. A name no list holds is
//!   listed again once, then refused as unknown (`-32602`); a name of an upstream that is down
//!   is refused with an error naming it (`-32603`, `Upstream "notes" is down`);
//! - **resources** keep their URIs: no scheme of the proxy's own is put on them, since a URI is
//!   what a client shows, caches and hands back, and a rewritten one would leak into the
//!   resources' contents and links. `resources/read` goes to the upstream whose
//!   `resources/list` listed the URI (a map per list, at most [`MAX_ITEMS`] per upstream),
//!   else to the one whose `resources/templates/list` has a template naming it (RFC 6570's
//!   `{var}`, `{+var}`, `{?query}`), else, when exactly one upstream lists resources or
//!   templates at all, to it; else it fails closed: `-32602` saying no upstream listed that
//!   URI, or that the templates of several match it (the proxy does not choose);
//! - **list changes** are relayed: a client's `subscriptions/listen` (a 2025-era host's GET
//!   stream, through the bridge) is held open on every upstream that is up, acknowledged once
//!   with what any of them agreed to, and each upstream's `notifications/*/list_changed` reaches
//!   the client under its subscription; the client then lists again, and gets every upstream's
//!   list. A 2025-era upstream's listen is its adapter's and outlives the child's restarts; one
//!   that ends (a 2026-era server's, going down) ends the client's too, with an error naming
//!   it, so that the client listens again on those up then; so does an upstream's coming back
//!   that was down when the client listened (looked at each second). **Resource updates are not
//!   relayed**: a subscription would have to be routed by URI to the upstream that listed it
//!   and stay there across restarts, so the proxy does not offer them (`subscribe` leaves the
//!   capabilities, `resourceSubscriptions` leaves a listen's filter) and refuses
//!   `resources/subscribe` and `resources/unsubscribe`: a client reads the resource again;
//! - **`server/discover`** answers the upstreams' capabilities merged (`listChanged` where any
//!   upstream announces its changes), their instructions each under its upstream's name, and
//!   the proxy as the server. `ping` is answered here, `logging/setLevel` goes to every
//!   upstream, a notification from the client is taken (202) and goes to none. Tasks are not
//!   offered: a task's later requests name no upstream, so an upstream is not told that the
//!   client takes tasks (the Tasks extension leaves its capabilities and each call's `_meta`),
//!   and `tasks/*` and a call with `task` are refused;
//! - an upstream that fails to start or dies leaves the others serving: what it listed is left
//!   out of the lists until it is back, and [`Fanout::health`] says which is down (`/healthz`,
//!   `elicitation_proxy_upstream_up`).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Mutex, RwLock};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt as _, Either, Full, Limited, StreamBody};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt as _;
use tower_elicitation::upstream::{ResponseBody, Upstream};
use tower_elicitation::{BoxError, GateTarget};

use crate::callers::{self, Held, PROXYS_OWN, PerCaller, ProxysOwn};
use crate::metrics::Health;

/// Pages of one upstream's list followed at most, for one list.
pub const MAX_PAGES: usize = 100;
/// Items of one upstream's list kept at most (and so URIs remembered per upstream).
pub const MAX_ITEMS: usize = 10_000;
/// The notification acknowledging a listen, with what it agreed to.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// Where a listen's notifications carry their subscription's id.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// How long a listen waits for every upstream's acknowledgement before it acknowledges the
/// client's with those it has.
const ACKNOWLEDGE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a listen looks whether an upstream down when it began is back.
const LOOK_BACK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Events queued on a listen's way to the client (a slow client holds up the upstreams' reads,
/// never the proxy's memory).
const LISTEN_QUEUE: usize = 64;
/// Where a 2026-07-28 request's `_meta` says what the client can do.
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The Tasks extension's id, under `extensions` (SEP-2663).
const TASKS: &str = "io.modelcontextprotocol/tasks";
/// The largest answer of an upstream's list page read.
const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// One upstream of several.
pub struct Member {
    /// `[[upstream]] name`.
    pub name: String,
    /// What its tools' and prompts' names begin with for the client (separator included).
    pub prefix: String,
    pub upstream: Upstream,
    /// `[[upstream]] sessions`: how many of its sessions there are.
    pub sessions: usize,
    /// Its `hide`'s `resource:` entries: URIs (and templates) of its own left out of the
    /// lists and never routed to it; replaced at each reload ([`Fanout::hide_resources`]).
    pub hidden: RwLock<Vec<GateTarget>>,
    /// With `[identity] pass_to_upstream` naming it: its adapters of each caller's own
    /// credentials, which its calls and lists go through ([`crate::callers`]). Its listen goes
    /// through `upstream` (the file's own headers): list changes are the server's, not a
    /// caller's.
    pub callers: Option<PerCaller>,
}

impl Member {
    /// The adapter for a request bearing `headers`: the caller's own where its credentials go
    /// to this upstream, else the file's.
    fn route(&self, headers: &HeaderMap) -> callers::Route {
        match &self.callers {
            Some(callers) => callers.route_as(
                &self.upstream,
                headers.get(AUTHORIZATION),
                headers.contains_key(PROXYS_OWN),
            ),
            None => callers::Route::To(self.upstream.clone(), None),
        }
    }

    /// Whether a session of it is up (handshaken, not restarting).
    fn up(&self) -> bool {
        self.upstream.live_sessions() > 0
    }

    /// Whether its `hide` hides the URI (or URI template) `uri`.
    fn hides(&self, uri: &str) -> bool {
        self.hidden
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|target| target.applies_to("resources/read", uri))
    }
}

/// A list the fan-out merges: its method, the result's field, the key naming an item, and
/// whether that key is prefixed.
struct List {
    method: &'static str,
    field: &'static str,
    key: &'static str,
    prefixed: bool,
}

/// What an item of each of [`LISTS`] is, as an error names it.
const LIST_ITEMS: [&str; 4] = ["tool", "prompt", "resource", "resource template"];

const LISTS: [List; 4] = [
    List {
        method: "tools/list",
        field: "tools",
        key: "name",
        prefixed: true,
    },
    List {
        method: "prompts/list",
        field: "prompts",
        key: "name",
        prefixed: true,
    },
    List {
        method: "resources/list",
        field: "resources",
        key: "uri",
        prefixed: false,
    },
    List {
        method: "resources/templates/list",
        field: "resourceTemplates",
        key: "uriTemplate",
        prefixed: false,
    },
];

/// Which upstream listed each name, per list (indexes of [`LISTS`]): the name the client
/// sees → the upstream and its own name.
#[derive(Default)]
struct Routes {
    lists: [HashMap<String, (usize, String)>; 4],
    /// Names two upstreams list, per list: what the collision is, for the log and start-up.
    collisions: [BTreeMap<String, String>; 4],
}

/// Several upstreams as one service. See the [module](self).
pub struct Fanout {
    members: Vec<Member>,
    routes: Mutex<Routes>,
    max_body_bytes: usize,
}

/// A response of the fan-out: an upstream's, or one of its own.
pub type FanoutResponse = Response<Either<Held, OwnBody>>;

/// The body of an answer of the fan-out's own: one message, or (a listen) the events as they
/// come. The events come on a channel: the listen's task learns that its client left when the
/// receiver, inside this body, is dropped (`mpsc::Sender::closed`).
pub type OwnBody = Either<Full<Bytes>, StreamBody<Events>>;

/// The frames of a listen's events.
pub type Events = BoxStream<'static, Result<Frame<Bytes>, Infallible>>;

/// `bytes`, whole.
pub fn whole(bytes: Bytes) -> OwnBody {
    Either::Left(Full::new(bytes))
}

/// What `events` receives, an event a frame, as it comes.
fn event_body(mut events: mpsc::Receiver<Bytes>) -> OwnBody {
    let frames = futures_util::stream::poll_fn(move |cx| {
        events
            .poll_recv(cx)
            .map(|event| event.map(|e| Ok(Frame::data(e))))
    });
    Either::Right(StreamBody::new(Box::pin(frames)))
}

/// Where a call goes, or the answer refusing it.
type Route = Result<(usize, String), Value>;

impl Fanout {
    /// The fan-out over `members` (at least one), reading request bodies up to
    /// `max_body_bytes`.
    pub fn new(members: Vec<Member>, max_body_bytes: usize) -> Self {
        assert!(!members.is_empty(), "a fan-out over no upstream");
        Self {
            members,
            routes: Mutex::default(),
            max_body_bytes,
        }
    }

    /// The upstreams.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Takes `hidden` (per upstream, in order) as each one's hidden resources from now on.
    pub fn hide_resources(&self, hidden: Vec<Vec<GateTarget>>) {
        for (member, hidden) in self.members.iter().zip(hidden) {
            *member.hidden.write().unwrap_or_else(|e| e.into_inner()) = hidden;
        }
    }

    /// Each upstream's state.
    pub fn health(&self) -> Vec<Health> {
        self.members
            .iter()
            .map(|member| Health {
                name: member.name.clone(),
                up: member.up(),
                live_sessions: member.upstream.live_sessions(),
                sessions: member.sessions,
            })
            .collect()
    }

    /// The names two upstreams listed in the last lists, each with what it is.
    pub fn collisions(&self) -> Vec<String> {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes
            .collisions
            .iter()
            .flat_map(|found| found.values().cloned())
            .collect()
    }

    /// Serves one request.
    pub async fn serve<B>(&self, request: Request<B>) -> FanoutResponse
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if request.method() != http::Method::POST {
            let mut response = own(StatusCode::METHOD_NOT_ALLOWED, None);
            response
                .headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
            return response;
        }
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                let error = error_response(&Value::Null, -32600, "Request body too large");
                return own(StatusCode::PAYLOAD_TOO_LARGE, Some(&error));
            }
        };
        let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(&bytes) else {
            let error = error_response(&Value::Null, -32700, "Parse error");
            return own(StatusCode::BAD_REQUEST, Some(&error));
        };
        let Some(id) = message.get("id").cloned() else {
            // A notification (`notifications/cancelled`, …): taken, sent to no upstream.
            return own(StatusCode::ACCEPTED, None);
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        // Whether the proxy made this request itself: said by its extension alone, never by a
        // header a caller could send.
        let mut headers = parts.headers;
        headers.remove(PROXYS_OWN);
        if parts.extensions.get::<ProxysOwn>().is_some() {
            headers.insert(PROXYS_OWN, HeaderValue::from_static("1"));
        }
        if let Some(index) = LISTS.iter().position(|list| list.method == method) {
            let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
            if params.get("cursor").is_some() {
                let error = error_response(
                    &id,
                    -32602,
                    "Invalid cursor: the proxy answers every upstream's list in one page",
                );
                return own(StatusCode::OK, Some(&error));
            }
            let result = self.list(index, &headers, &params).await;
            return own(StatusCode::OK, Some(&result_response(&id, result)));
        }
        match method.as_str() {
            "server/discover" => {
                return own(StatusCode::OK, Some(&self.discover(&id, &headers).await));
            }
            "ping" => return own(StatusCode::OK, Some(&result_response(&id, json!({})))),
            "logging/setLevel" => {
                let message = Value::Object(message);
                let up = self.members.iter().enumerate().filter(|(_, m)| m.up());
                let asks = up.map(|(index, _)| self.ask(index, &headers, &message));
                futures_util::future::join_all(asks).await;
                return own(StatusCode::OK, Some(&result_response(&id, json!({}))));
            }
            _ => {}
        }
        let params = message.get_mut("params").and_then(Value::as_object_mut);
        let routed = match (method.as_str(), params) {
            ("tools/call", Some(params)) if params.contains_key("task") => Err(error_response(
                &id,
                -32602,
                "Tasks are not supported with several upstreams: call the tool without `task`",
            )),
            ("tools/call", Some(params)) => self.route_name(0, &id, params, "name", &headers).await,
            ("prompts/get", Some(params)) => {
                self.route_name(1, &id, params, "name", &headers).await
            }
            ("resources/read", Some(params)) => self.route_uri(&id, params, &headers).await,
            ("completion/complete", Some(params)) => {
                match params.get_mut("ref").and_then(Value::as_object_mut) {
                    Some(reference) if reference.get("type") == Some(&json!("ref/prompt")) => {
                        self.route_name(1, &id, reference, "name", &headers).await
                    }
                    Some(reference) => self.route_template(&id, reference, &headers).await,
                    None => Err(error_response(
                        &id,
                        -32602,
                        "completion/complete needs a `ref`",
                    )),
                }
            }
            ("subscriptions/listen", _) => {
                return self.listen(&id, &headers, message).await;
            }
            ("resources/subscribe" | "resources/unsubscribe", _) => Err(error_response(
                &id,
                -32601,
                &format!(
                    "{method}: resource updates are not relayed with several upstreams; read the resource again"
                ),
            )),
            (method, _) if method.starts_with("tasks/") => Err(error_response(
                &id,
                -32601,
                &format!("{method}: tasks are not supported with several upstreams"),
            )),
            ("tools/call" | "prompts/get" | "resources/read" | "completion/complete", None) => Err(
                error_response(&id, -32602, &format!("{method} needs params")),
            ),
            (method, _) => Err(error_response(
                &id,
                -32601,
                &format!(
                    "Method not found: {method} (with several upstreams the proxy routes tools, prompts, resources and completions)"
                ),
            )),
        };
        match routed {
            Ok(index) => self.forward(index, headers, message).await,
            Err(answer) => own(StatusCode::OK, Some(&answer)),
        }
    }

    /// The upstream that listed `params[key]` in list `list` (0 tools, 1 prompts), the name
    /// put back to its own; the list asked again once when no upstream is known for it.
    async fn route_name(
        &self,
        list: usize,
        id: &Value,
        params: &mut Map<String, Value>,
        key: &str,
        headers: &HeaderMap,
    ) -> Result<usize, Value> {
        let Some(name) = params.get(key).and_then(Value::as_str).map(str::to_owned) else {
            return Err(error_response(id, -32602, &format!("`{key}` is missing")));
        };
        let (index, own_name) = self.lookup(list, id, &name, headers).await?;
        params.insert(key.to_owned(), Value::String(own_name));
        Ok(index)
    }

    /// The upstream whose `resources/list` listed `params.uri`.
    async fn route_uri(
        &self,
        id: &Value,
        params: &Map<String, Value>,
        headers: &HeaderMap,
    ) -> Result<usize, Value> {
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            return Err(error_response(id, -32602, "`uri` is missing"));
        };
        Ok(self.lookup(2, id, uri, headers).await?.0)
    }

    /// The upstream whose `resources/templates/list` listed `reference.uri` (a completion's
    /// `ref/resource`), else whose `resources/list` did.
    async fn route_template(
        &self,
        id: &Value,
        reference: &Map<String, Value>,
        headers: &HeaderMap,
    ) -> Result<usize, Value> {
        let Some(uri) = reference.get("uri").and_then(Value::as_str) else {
            return Err(error_response(id, -32602, "`ref.uri` is missing"));
        };
        match self.lookup(3, id, uri, headers).await {
            Ok((index, _)) => Ok(index),
            Err(_) => Ok(self.lookup(2, id, uri, headers).await?.0),
        }
    }

    /// Which upstream listed `name` in list `list`, and its own name; listed again once when
    /// none is known.
    async fn lookup(&self, list: usize, id: &Value, name: &str, headers: &HeaderMap) -> Route {
        if let Some(found) = self.known(list, name) {
            return self.if_up(id, found);
        }
        self.list(list, headers, &json!({})).await;
        if list == 2 {
            // Which upstreams offer templates, for a URI only a template names.
            self.list(3, headers, &json!({})).await;
        }
        if let Some(found) = self.known(list, name) {
            return self.if_up(id, found);
        }
        let what = LIST_ITEMS[list];
        if let Some(collision) = self.collision(list, name) {
            return Err(error_response(
                id,
                -32602,
                &format!("Unknown {what}: {name} ({collision})"),
            ));
        }
        if LISTS[list].prefixed {
            // A name of an upstream that is down: its error names it.
            let down = self
                .members
                .iter()
                .find(|member| name.starts_with(&member.prefix) && !member.up());
            if let Some(member) = down {
                return Err(down_error(id, &member.name));
            }
            return Err(error_response(
                id,
                -32602,
                &format!("Unknown {what}: {name}"),
            ));
        }
        // A URI no list holds: to the upstream whose listed templates match it, if one does;
        // else to the one upstream that lists resources or templates, if only one does.
        let (matching, offering) = {
            let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            let matching: std::collections::BTreeSet<usize> = routes.lists[3]
                .iter()
                .filter(|(template, _)| template_matches(template, name))
                .map(|(_, (index, _))| *index)
                .collect();
            let offering: std::collections::BTreeSet<usize> = routes.lists[2..]
                .iter()
                .flat_map(|listed| listed.values().map(|(index, _)| *index))
                .collect();
            (matching, offering)
        };
        let chosen = match (matching.len(), offering.len()) {
            (1, _) => matching.first(),
            (0, 1) => offering.first(),
            _ => None,
        };
        if let Some(&only) = chosen
            && !self.members[only].hides(name)
        {
            return self.if_up(id, (only, name.to_owned()));
        }
        let why = if matching.len() > 1 {
            let names: Vec<&str> = matching
                .iter()
                .map(|&index| self.members[index].name.as_str())
                .collect();
            format!(
                "the templates of several upstreams match {name} ({}), and the proxy does not choose",
                names.join(", ")
            )
        } else {
            format!(
                "no upstream listed {name} (with several upstreams the proxy routes a resource to the upstream whose resources/list listed it, or whose template matches it)"
            )
        };
        Err(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602,
            "message": format!("Resource not found: {why}"),
            "data": {"uri": name}}}))
    }

    fn known(&self, list: usize, name: &str) -> Option<(usize, String)> {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.lists[list].get(name).cloned()
    }

    fn collision(&self, list: usize, name: &str) -> Option<String> {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.collisions[list].get(name).cloned()
    }

    fn if_up(&self, id: &Value, (index, name): (usize, String)) -> Route {
        let member = &self.members[index];
        if member.up() {
            Ok((index, name))
        } else {
            Err(down_error(id, &member.name))
        }
    }

    /// Sends `message` (its names put back to the upstream's own) to upstream `index`, with the
    /// client's headers; its answer as it comes.
    async fn forward(
        &self,
        index: usize,
        headers: HeaderMap,
        mut message: Map<String, Value>,
    ) -> FanoutResponse {
        // A task's later requests name no upstream: the upstream is not told the client takes
        // tasks, so it makes none.
        let extensions = message
            .get_mut("params")
            .and_then(|params| params.get_mut("_meta"))
            .and_then(|meta| meta.get_mut(CLIENT_CAPABILITIES))
            .and_then(|capabilities| capabilities.get_mut("extensions"))
            .and_then(Value::as_object_mut);
        if let Some(extensions) = extensions {
            extensions.remove(TASKS);
        }
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let body = Bytes::from(Value::Object(message).to_string());
        let member = &self.members[index];
        let (upstream, busy) = match member.route(&headers) {
            callers::Route::To(upstream, busy) => (upstream, busy),
            callers::Route::Refused(status, why) => {
                return own(status, Some(&error_response(&id, -32603, why)));
            }
            callers::Route::Failed(why) => {
                crate::metrics::upstream_answered(&member.name, None);
                tracing::error!(upstream = %member.name, %why, "cannot reach the upstream with the caller's credentials");
                let why = "The proxy cannot reach the server with your credentials.";
                return own(
                    StatusCode::BAD_GATEWAY,
                    Some(&error_response(&id, -32603, why)),
                );
            }
        };
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = http::Uri::from_static("/mcp");
        *request.headers_mut() = headers;
        request.headers_mut().remove(CONTENT_LENGTH);
        let Ok(response) = upstream.oneshot(request).await;
        crate::metrics::upstream_answered(&member.name, Some(response.status()));
        response.map(|body| Either::Left(Held::new(body, busy)))
    }

    /// Upstream `index`'s answer to `message`, read whole as JSON.
    async fn ask(
        &self,
        index: usize,
        headers: &HeaderMap,
        message: &Value,
    ) -> Result<Value, String> {
        let mut request = Request::new(Full::new(Bytes::from(message.to_string())));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = http::Uri::from_static("/mcp");
        *request.headers_mut() = headers.clone();
        let headers = request.headers_mut();
        headers.remove(CONTENT_LENGTH);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let member = &self.members[index];
        let upstream = match member.route(request.headers()) {
            callers::Route::To(upstream, _) => upstream,
            callers::Route::Refused(_, why) => return Err(why.to_owned()),
            callers::Route::Failed(why) => {
                crate::metrics::upstream_answered(&member.name, None);
                return Err(format!(
                    "cannot reach it with the caller's credentials: {why}"
                ));
            }
        };
        let Ok(response) = upstream.oneshot(request).await;
        crate::metrics::upstream_answered(&member.name, Some(response.status()));
        let bytes = Limited::new(response.into_body(), MAX_PAGE_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let mut reply: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        match reply.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => Err(reply["error"]["message"]
                .as_str()
                .map_or_else(|| reply["error"].to_string(), str::to_owned)),
        }
    }

    /// Every page of upstream `index`'s list `list`: the first page's result (what else it
    /// says) and the items.
    async fn list_one(
        &self,
        index: usize,
        list: &List,
        headers: &HeaderMap,
        params: &Value,
    ) -> Result<(Value, Vec<Value>), String> {
        let mut first = None;
        let mut items = Vec::new();
        let mut params = params.clone();
        for _ in 0..MAX_PAGES {
            let message =
                json!({"jsonrpc": "2.0", "id": 1, "method": list.method, "params": params});
            let mut result = self.ask(index, headers, &message).await?;
            let cursor = result
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(Value::Array(page)) = result.get_mut(list.field).map(Value::take) {
                items.extend(page);
            }
            first.get_or_insert(result);
            if items.len() >= MAX_ITEMS {
                tracing::warn!(upstream = %self.members[index].name, list = list.method, "the list is longer than {MAX_ITEMS}: the rest is left out");
                items.truncate(MAX_ITEMS);
                break;
            }
            match cursor {
                Some(cursor) => params["cursor"] = Value::String(cursor),
                None => break,
            }
        }
        Ok((first.unwrap_or_else(|| json!({})), items))
    }

    /// List `list` of every upstream that is up, merged; what each listed is remembered.
    async fn list(&self, list: usize, headers: &HeaderMap, params: &Value) -> Value {
        let spec = &LISTS[list];
        let asks = self.members.iter().enumerate().map(|(index, member)| async move {
            if !member.up() {
                return None;
            }
            match self.list_one(index, spec, headers, params).await {
                Ok(listed) => Some(listed),
                Err(why) => {
                    tracing::debug!(upstream = %member.name, list = spec.method, %why, "an upstream did not list");
                    None
                }
            }
        });
        let listed = futures_util::future::join_all(asks).await;
        let named: Vec<(&str, &str)> = self
            .members
            .iter()
            .map(|member| (member.name.as_str(), member.prefix.as_str()))
            .collect();
        let merged = merge(
            list,
            &named,
            |index, uri| self.members[index].hides(uri),
            listed,
        );
        let mut remembered = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        for (exposed, text) in &merged.collisions {
            // Said once, when it appears, not at every list.
            if !remembered.collisions[list].contains_key(exposed) {
                tracing::error!("{text}: left out of the list, and its calls refused");
            }
        }
        remembered.lists[list] = merged.routes;
        remembered.collisions[list] = merged.collisions;
        merged.result
    }

    /// `subscriptions/listen`: held open on every upstream that is up, their list changes
    /// relayed on one event stream under the client's subscription, after one acknowledgement of
    /// what any of them agreed to. Resource updates are not asked for (`resourceSubscriptions`
    /// leaves the filter). When one upstream's listen ends, or one down at the start is back,
    /// the client's ends, with an error naming it, so that it listens again on those up then.
    async fn listen(
        &self,
        id: &Value,
        headers: &HeaderMap,
        mut message: Map<String, Value>,
    ) -> FanoutResponse {
        let streams = headers
            .get_all(ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .any(|value| value.contains("text/event-stream"));
        if !streams {
            let error = error_response(
                id,
                -32600,
                "Invalid Request: subscriptions/listen needs an event stream (Accept: text/event-stream)",
            );
            return own(StatusCode::OK, Some(&error));
        }
        let filter = message
            .get_mut("params")
            .and_then(|params| params.get_mut("notifications"))
            .and_then(Value::as_object_mut);
        if let Some(filter) = filter {
            filter.remove("resourceSubscriptions");
        }
        let body = Bytes::from(Value::Object(message).to_string());
        let opens = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, member)| member.up())
            .map(|(index, member)| {
                let body = body.clone();
                async move {
                    let mut request = Request::new(Full::new(body));
                    *request.method_mut() = http::Method::POST;
                    *request.uri_mut() = http::Uri::from_static("/mcp");
                    *request.headers_mut() = headers.clone();
                    request.headers_mut().remove(CONTENT_LENGTH);
                    let Ok(response) = member.upstream.clone().oneshot(request).await;
                    let events = response
                        .headers()
                        .get(CONTENT_TYPE)
                        .and_then(|value| value.to_str().ok())
                        .is_some_and(|value| value.starts_with("text/event-stream"));
                    events.then(|| (index, response.into_body()))
                }
            });
        let opened: Vec<(usize, ResponseBody)> = futures_util::future::join_all(opens)
            .await
            .into_iter()
            .flatten()
            .collect();
        if opened.is_empty() {
            let error = error_response(id, -32603, "No upstream took the listen");
            return own(StatusCode::OK, Some(&error));
        }
        let (events, mut heard) = mpsc::channel(LISTEN_QUEUE);
        let mut listening = Vec::new();
        for (index, body) in opened {
            listening.push(index);
            tokio::spawn(read_events(index, body, events.clone()));
        }
        drop(events);
        let names: Vec<String> = self.members.iter().map(|m| m.name.clone()).collect();
        // Those down now: when one is back, the client is told to listen again, to hear it.
        let absent: Vec<(usize, Upstream)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, member)| !member.up())
            .map(|(index, member)| (index, member.upstream.clone()))
            .collect();
        let (sent, body) = mpsc::channel(LISTEN_QUEUE);
        let id = id.clone();
        tokio::spawn(async move {
            let ended = |index: usize| {
                let error = error_response(
                    &id,
                    -32603,
                    &format!("Upstream {:?} ended its listen: listen again", names[index]),
                );
                message_event(&error)
            };
            // Each upstream's acknowledgement first (one that answers instead refused: it is left
            // out), then one of the client's own.
            let mut agreed = Map::new();
            let mut early = Vec::new();
            let mut waiting = listening.clone();
            let deadline = tokio::time::sleep(ACKNOWLEDGE_WAIT);
            tokio::pin!(deadline);
            while !waiting.is_empty() {
                tokio::select! {
                    heard = heard.recv() => match heard {
                        Some((index, Some(event))) if event.get("method") == Some(&json!(ACKNOWLEDGED)) => {
                            waiting.retain(|&w| w != index);
                            let said = event["params"]["notifications"].as_object().cloned().unwrap_or_default();
                            for (key, value) in said {
                                if value == Value::Bool(true) {
                                    agreed.insert(key, value);
                                }
                            }
                        }
                        Some((_, Some(event))) if event.get("id").is_none() => early.push(event),
                        // Its answer, or its end, before its acknowledgement: it took no listen.
                        Some((index, _)) => waiting.retain(|&w| w != index),
                        None => break,
                    },
                    () = &mut deadline => break,
                }
            }
            let acknowledged = json!({"jsonrpc": "2.0", "method": ACKNOWLEDGED,
                "params": {"notifications": agreed, "_meta": {SUBSCRIPTION_ID: &id}}});
            if sent.send(message_event(&acknowledged)).await.is_err() {
                return;
            }
            for event in early {
                if sent.send(message_event(&event)).await.is_err() {
                    return;
                }
            }
            let mut look = tokio::time::interval(LOOK_BACK_EVERY);
            loop {
                let event = tokio::select! {
                    () = sent.closed() => return,
                    event = heard.recv() => event,
                    _ = look.tick() => {
                        let back = absent.iter().find(|(_, upstream)| upstream.live_sessions() > 0);
                        if let Some((index, _)) = back {
                            let error = error_response(
                                &id,
                                -32603,
                                &format!("Upstream {:?} is back: listen again", names[*index]),
                            );
                            let _ = sent.send(message_event(&error)).await;
                            return;
                        }
                        continue;
                    }
                };
                match event {
                    Some((_, Some(event))) if event.get("id").is_none() => {
                        if sent.send(message_event(&event)).await.is_err() {
                            return;
                        }
                    }
                    Some((index, _)) => {
                        let _ = sent.send(ended(index)).await;
                        return;
                    }
                    None => return,
                }
            }
        });
        let mut response = Response::new(Either::Right(event_body(body)));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        response
    }

    /// `server/discover`: the first upstream up's answer, with every upstream's capabilities
    /// merged (no `listChanged`, no `subscribe`: not relayed) and their instructions each under
    /// its name.
    async fn discover(&self, id: &Value, headers: &HeaderMap) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
        let asks = self.members.iter().enumerate().map(|(index, member)| {
            let message = &message;
            async move {
                if !member.up() {
                    return None;
                }
                self.ask(index, headers, message).await.ok()
            }
        });
        let found = futures_util::future::join_all(asks).await;
        let mut base: Option<Map<String, Value>> = None;
        let mut capabilities = Map::new();
        let mut instructions = Vec::new();
        for (index, result) in found.into_iter().enumerate() {
            let Some(Value::Object(result)) = result else {
                continue;
            };
            if let Some(Value::Object(offered)) = result.get("capabilities") {
                for (key, value) in offered {
                    match (capabilities.get_mut(key), value) {
                        (Some(Value::Object(into)), Value::Object(more)) => {
                            for (k, v) in more {
                                // One upstream that announces its changes is enough.
                                if v == &Value::Bool(true) {
                                    into.insert(k.clone(), v.clone());
                                } else {
                                    into.entry(k.clone()).or_insert_with(|| v.clone());
                                }
                            }
                        }
                        (None, _) => {
                            capabilities.insert(key.clone(), value.clone());
                        }
                        _ => {}
                    }
                }
            }
            if let Some(text) = result.get("instructions").and_then(Value::as_str) {
                instructions.push(format!(
                    "{} ({}…): {text}",
                    self.members[index].name, self.members[index].prefix
                ));
            }
            base.get_or_insert(result);
        }
        let Some(mut result) = base else {
            let down: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
            return error_response(
                id,
                -32603,
                &format!("No upstream is up: {} down", down.join(", ")),
            );
        };
        for list in ["tools", "prompts", "resources"] {
            if let Some(Value::Object(capability)) = capabilities.get_mut(list) {
                capability.remove("subscribe");
            }
        }
        if let Some(Value::Object(extensions)) = capabilities.get_mut("extensions") {
            extensions.remove(TASKS);
        }
        result.insert("capabilities".to_owned(), Value::Object(capabilities));
        if instructions.is_empty() {
            result.remove("instructions");
        } else {
            result.insert(
                "instructions".to_owned(),
                Value::String(instructions.join("\n\n")),
            );
        }
        result.insert(
            "_meta".to_owned(),
            json!({"io.modelcontextprotocol/serverInfo": {
                "name": "elicitation-proxy", "version": env!("CARGO_PKG_VERSION")}}),
        );
        result_response(id, Value::Object(result))
    }
}

/// Reads upstream `index`'s listen (an event stream), each message to `events`, then `None`
/// when it ends. Stops when nobody hears it any more: the stream dropped cancels the listen.
async fn read_events(
    index: usize,
    mut body: ResponseBody,
    events: mpsc::Sender<(usize, Option<Value>)>,
) {
    let mut buffer: Vec<u8> = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.extend(data.iter().filter(|&&byte| byte != b'\r'));
        while let Some(end) = buffer.windows(2).position(|pair| pair == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect();
            if data.is_empty() {
                continue;
            }
            if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n"))
                && events.send((index, Some(message))).await.is_err()
            {
                return;
            }
        }
        if buffer.len() > MAX_PAGE_BYTES {
            break;
        }
    }
    let _ = events.send((index, None)).await;
}

/// One message as an event of an event stream.
fn message_event(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// One list merged from every upstream's: the answer, which upstream listed each name, and
/// the names two listed.
struct Merged {
    result: Value,
    routes: HashMap<String, (usize, String)>,
    collisions: BTreeMap<String, String>,
}

/// Merges list `list` (an index of [`LISTS`]) of the upstreams `named` (each one's name and
/// prefix, in order), `listed[i]` upstream `i`'s first page's result and all its items (`None`:
/// it is down, or did not list). Names are prefixed (URIs not; one `hides` of its upstream is
/// left out); a name two upstreams list is a collision, left out. The answer is the first
/// result's, with every item and no `nextCursor`.
fn merge(
    list: usize,
    named: &[(&str, &str)],
    hides: impl Fn(usize, &str) -> bool,
    listed: Vec<Option<(Value, Vec<Value>)>>,
) -> Merged {
    let spec = &LISTS[list];
    let mut shell = None;
    let mut by_name: BTreeMap<String, Vec<(usize, String)>> = BTreeMap::new();
    let mut items: Vec<(String, Value)> = Vec::new();
    for (index, found) in listed.into_iter().enumerate() {
        let Some((first, page)) = found else {
            continue;
        };
        shell.get_or_insert(first);
        for mut item in page {
            let Some(own_name) = item
                .get(spec.key)
                .and_then(Value::as_str)
                .map(str::to_owned)
            else {
                continue;
            };
            if !spec.prefixed && hides(index, &own_name) {
                continue;
            }
            let exposed = if spec.prefixed {
                format!("{}{own_name}", named[index].1)
            } else {
                own_name.clone()
            };
            item[spec.key] = Value::String(exposed.clone());
            by_name
                .entry(exposed.clone())
                .or_default()
                .push((index, own_name));
            items.push((exposed, item));
        }
    }
    let mut routes = HashMap::new();
    let mut collisions = BTreeMap::new();
    for (exposed, listers) in by_name {
        if let [only] = &listers[..] {
            routes.insert(exposed, only.clone());
            continue;
        }
        let what = listers
            .iter()
            .map(|(index, own_name)| format!("{own_name:?} of upstream {:?}", named[*index].0))
            .collect::<Vec<_>>()
            .join(" and ");
        let remedy = if spec.prefixed {
            "give one of them another `prefix`".to_owned()
        } else {
            format!(
                "URIs are not prefixed: hide it in all but one of them (hide = [\"resource:{exposed}\"])"
            )
        };
        let text = format!(
            "{} {exposed:?} is listed by two upstreams, {what} ({remedy})",
            LIST_ITEMS[list]
        );
        collisions.insert(exposed, text);
    }
    items.retain(|(exposed, _)| !collisions.contains_key(exposed));
    let mut result = match shell {
        Some(Value::Object(result)) => result,
        _ => Map::from_iter([("resultType".to_owned(), json!("complete"))]),
    };
    result.remove("nextCursor");
    result.insert(
        spec.field.to_owned(),
        Value::Array(items.into_iter().map(|(_, item)| item).collect()),
    );
    Merged {
        result: Value::Object(result),
        routes,
        collisions,
    }
}

/// Whether `uri` is one `template` (RFC 6570) names: a `{var}` stands for one or more
/// characters that are none of `/`, `?`, `#`; `{+var}` and `{#var}` for any; a `{?…}` or
/// `{&…}` for the query's rest. A template that does not close its braces names nothing.
fn template_matches(template: &str, uri: &str) -> bool {
    /// One piece of a template.
    enum Piece<'a> {
        Literal(&'a str),
        /// A variable: whether it may hold `/`, `?` and `#`.
        Variable {
            reserved: bool,
        },
        /// A query (or its continuation): the rest, if anything.
        Query,
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let Some(end) = rest.find('}') else {
                    return false;
                };
                pieces.push(match rest[1..].chars().next() {
                    Some('+' | '#') => Piece::Variable { reserved: true },
                    Some('?' | '&') => Piece::Query,
                    _ => Piece::Variable { reserved: false },
                });
                rest = &rest[end + 1..];
            }
            Some(at) => {
                pieces.push(Piece::Literal(&rest[..at]));
                rest = &rest[at..];
            }
            None => {
                pieces.push(Piece::Literal(rest));
                rest = "";
            }
        }
    }
    fn matches(pieces: &[Piece<'_>], uri: &str) -> bool {
        let Some((first, more)) = pieces.split_first() else {
            return uri.is_empty();
        };
        match first {
            Piece::Literal(text) => uri
                .strip_prefix(text)
                .is_some_and(|rest| matches(more, rest)),
            Piece::Query => {
                (uri.is_empty() || uri.starts_with(['?', '&'])) && more.is_empty()
                    || uri.is_empty() && matches(more, uri)
            }
            Piece::Variable { reserved } => {
                let end = if *reserved {
                    uri.len()
                } else {
                    uri.find(['/', '?', '#']).unwrap_or(uri.len())
                };
                // One character at least, then as many as the rest allows.
                (1..=end)
                    .filter(|&at| uri.is_char_boundary(at))
                    .any(|at| matches(more, &uri[at..]))
            }
        }
    }
    matches(&pieces, uri)
}

/// The error answering a call of upstream `name`'s, which is down.
fn down_error(id: &Value, name: &str) -> Value {
    error_response(
        id,
        -32603,
        &format!(
            "Upstream {name:?} is down: its tools, prompts and resources are not available until it is back"
        ),
    )
}

fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn result_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A response of the fan-out's own: `message` as JSON, or no body.
fn own(status: StatusCode, message: Option<&Value>) -> FanoutResponse {
    let body = message.map_or_else(Bytes::new, |message| Bytes::from(message.to_string()));
    let mut response = Response::new(Either::Right(whole(body)));
    *response.status_mut() = status;
    if message.is_some() {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMED: [(&str, &str); 2] = [("fs", "fs_"), ("notes", "notes_")];

    fn page(field: &str, key: &str, names: &[&str], more: Value) -> Option<(Value, Vec<Value>)> {
        let items = names.iter().map(|name| json!({ key: name })).collect();
        let mut first = json!({"resultType": "complete", "nextCursor": "2"});
        first[field] = json!([]);
        if let (Value::Object(first), Value::Object(more)) = (&mut first, more) {
            first.extend(more);
        }
        Some((first, items))
    }

    fn names(merged: &Merged, field: &str, key: &str) -> Vec<String> {
        merged.result[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item[key].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn a_template_names_the_uris_it_expands_to() {
        let text = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(text, "demo://resource/dynamic/text/1"));
        assert!(!template_matches(text, "demo://resource/dynamic/text/"));
        assert!(!template_matches(text, "demo://resource/dynamic/text/1/2"));
        assert!(!template_matches(text, "demo://resource/dynamic/blob/1"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches(
            "repo://{owner}/{name}/readme",
            "repo://a/b/readme"
        ));
        assert!(!template_matches(
            "repo://{owner}/{name}/readme",
            "repo://a/readme"
        ));
        assert!(template_matches(
            "search://items{?q,page}",
            "search://items?q=x&page=2"
        ));
        assert!(template_matches(
            "search://items{?q,page}",
            "search://items"
        ));
        assert!(!template_matches("broken://{x", "broken://{x"));
    }

    #[test]
    fn names_are_prefixed_in_one_page_and_routed_to_their_own() {
        let listed = vec![
            page(
                "tools",
                "name",
                &["read_file", "write_file"],
                json!({"ttlMs": 0}),
            ),
            page("tools", "name", &["add_note"], json!({})),
        ];
        let merged = merge(0, &NAMED, |_, _| false, listed);
        assert_eq!(
            names(&merged, "tools", "name"),
            ["fs_read_file", "fs_write_file", "notes_add_note"]
        );
        // The first upstream's answer, with no cursor: one page.
        assert_eq!(merged.result["ttlMs"], 0);
        assert!(merged.result.get("nextCursor").is_none());
        assert_eq!(merged.routes["notes_add_note"], (1, "add_note".to_owned()));
        assert_eq!(merged.routes["fs_write_file"], (0, "write_file".to_owned()));
        assert!(merged.collisions.is_empty());
    }

    #[test]
    fn an_upstream_down_is_left_out_and_the_list_is_still_one() {
        let listed = vec![None, page("prompts", "name", &["summary"], json!({}))];
        let merged = merge(1, &NAMED, |_, _| false, listed);
        assert_eq!(names(&merged, "prompts", "name"), ["notes_summary"]);
        let merged = merge(1, &NAMED, |_, _| false, vec![None, None]);
        assert_eq!(
            merged.result,
            json!({"resultType": "complete", "prompts": []})
        );
    }

    #[test]
    fn a_name_two_upstreams_list_is_left_out_naming_both() {
        // `a` + `b_c` and `a_b` + `c`: both `a_b_c` for the client.
        let named = [("a", "a_"), ("a_b", "a_b_")];
        let listed = vec![
            page("tools", "name", &["b_c", "x"], json!({})),
            page("tools", "name", &["c"], json!({})),
        ];
        let merged = merge(0, &named, |_, _| false, listed);
        assert_eq!(names(&merged, "tools", "name"), ["a_x"]);
        assert!(!merged.routes.contains_key("a_b_c"));
        assert_eq!(
            merged.collisions["a_b_c"],
            "tool \"a_b_c\" is listed by two upstreams, \"b_c\" of upstream \"a\" and \"c\" of upstream \"a_b\" (give one of them another `prefix`)"
        );
    }

    #[test]
    fn uris_are_not_prefixed_and_an_upstreams_hide_is_its_own() {
        let listed = || {
            vec![
                page("resources", "uri", &["file:///a", "notes://all"], json!({})),
                page("resources", "uri", &["notes://all"], json!({})),
            ]
        };
        let merged = merge(2, &NAMED, |_, _| false, listed());
        assert_eq!(names(&merged, "resources", "uri"), ["file:///a"]);
        assert!(merged.collisions["notes://all"].contains("hide = [\"resource:notes://all\"]"));
        // fs hides its own notes://all: notes's is the one listed, and routed.
        let merged = merge(
            2,
            &NAMED,
            |index, uri| index == 0 && uri == "notes://all",
            listed(),
        );
        assert_eq!(
            names(&merged, "resources", "uri"),
            ["file:///a", "notes://all"]
        );
        assert_eq!(merged.routes["notes://all"], (1, "notes://all".to_owned()));
    }
}
