//! `approvers = "url"`: a gate whose question goes to a second person. The caller is asked a
//! URL question, the link to this call's approval page (`/approvals/{handle}`, served by the
//! proxy on its HTTP listener); an approver opens it, signs in with the same `[identity]` the
//! callers use (a JWT from the same issuer, or an API key), sees the pending call (the tool,
//! its arguments, the tool's definition as listed, who called it, the decision id) and
//! approves or denies it. The caller's retry then runs the call, or is refused naming the
//! approver.
//!
//! - **Reviewers are not the callers:** the principal that made the call cannot approve it;
//!   `[approvals] approvers = ["alice", …]` narrows who may (default: any verified principal but
//!   the caller).
//! - **One approval, one call:** the page is keyed by the call's flow handle, which the layer
//!   binds to the method, tool, arguments, gate and caller; an approval is taken once, by the
//!   retry that finds it ([`ApprovalFlow::is_complete`]), and never found again.
//! - **The decision log** has the approver's own line (`approved` or `denied`, with `approver`
//!   and the call's `decision_id`), then the caller's retry (`gates_accepted`, or
//!   `gate_refused` with `why: denied_by_approver`).
//! - **Bounded:** at most [`MAX_PENDING`] calls wait at once (a call past it is answered with an
//!   error, nothing runs); each is forgotten when its approval's time is up (the gate's
//!   `approval_ttl_secs`, else the sealed state's 600 s and its skew).
//! - **Fail closed:** pending calls live in this process. With `[state] redis` (several
//!   replicas, each with its own memory) the file is refused at load, as it is over stdio or
//!   without `[identity] jwt` or `api_keys` (nobody could sign in).
//!
//! The approver's credential travels as `Authorization: Bearer` or as the cookie the page's
//! sign-in form sets (`HttpOnly`, `SameSite=Strict`, scoped to `/approvals`). A decision is a
//! `POST` whose `Origin`, when the browser sends one, must be the page's own.
//!
//! The page is a few lines of HTML written here, escaped by [`escape`]: five characters, not
//! worth a template engine.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde_json::Value;
use tower_elicitation::{BoxError, GateCall, UrlFlow, VerifiedCaller};

use crate::catalog::Catalog;
use crate::identity::Guard;

/// Where the pages are served.
pub const PATH: &str = "/approvals";

/// The most calls waiting for an approver at once.
pub const MAX_PENDING: usize = 1_000;

/// How long a call waits when its gate sets no `approval_ttl_secs`: the sealed state's time to
/// live and its clock skew, past which no retry of it is accepted anyway.
const DEFAULT_WAIT: Duration = Duration::from_secs(660);

/// What the caller's question says below the gate's message.
pub const ASK_CALLER: &str =
    "Another person approves this call: send them this link. Answer once they have approved it.";

/// The cookie the sign-in form sets.
const COOKIE: &str = "elicitation_approver";

/// What an approver decided.
#[derive(Clone, Debug, PartialEq)]
enum Decided {
    Waiting,
    Approved {
        by: String,
    },
    Denied {
        by: String,
    },
    /// Approved, and taken by the caller's retry.
    Spent,
}

/// One call waiting for an approver.
struct Pending {
    method: String,
    tool: String,
    arguments: Value,
    definition: Option<Value>,
    caller: Option<String>,
    decision_id: String,
    asked_at: SystemTime,
    until: Instant,
    decided: Decided,
}

/// The calls waiting for an approver, by flow handle, and who may approve them.
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    /// The origin the links name (`[approvals] url`, else the HTTP listener's).
    base: String,
    /// The principals who may approve; empty: any verified one but the caller.
    approvers: Vec<String>,
    /// Why no gate may have `approvers = "url"` with this file, when none may.
    unavailable: Option<String>,
}

impl Approvals {
    /// Approvals linked from `base` (scheme, host and port, no path), approved by `approvers`
    /// (empty: anyone verified but the caller); `unavailable` says why the file may not use them.
    pub fn new(base: &str, approvers: Vec<String>, unavailable: Option<String>) -> Self {
        Self {
            pending: Mutex::default(),
            base: base.trim_end_matches('/').to_owned(),
            approvers,
            unavailable,
        }
    }

    /// Why `approvers = "url"` cannot be used with this file, if it cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `call` on the page (once: a re-ask finds it there) and answers its link.
    fn open(
        &self,
        call: &GateCall<'_>,
        definition: Option<Value>,
        wait: Duration,
    ) -> Result<String, BoxError> {
        let now = Instant::now();
        let mut pending = self.lock();
        if !pending.contains_key(call.handle()) {
            if pending.len() >= MAX_PENDING {
                pending.retain(|_, p| p.until > now);
            }
            if pending.len() >= MAX_PENDING {
                return Err(format!(
                    "{MAX_PENDING} calls already wait for an approver; this one is not run"
                )
                .into());
            }
            pending.insert(
                call.handle().to_owned(),
                Pending {
                    method: call.method().to_owned(),
                    tool: call.target().to_owned(),
                    arguments: call.arguments().clone(),
                    definition,
                    caller: call.caller().map(|c| c.principal().to_owned()),
                    decision_id: crate::policy::decision_id(call),
                    asked_at: SystemTime::now(),
                    until: now + wait,
                    decided: Decided::Waiting,
                },
            );
        }
        Ok(format!("{}{PATH}/{}", self.base, call.handle()))
    }

    /// Takes `call`'s approval: `true` once, when an approver approved it.
    fn take(&self, call: &GateCall<'_>) -> bool {
        let mut pending = self.lock();
        match pending.get_mut(call.handle()) {
            Some(p)
                if p.until > Instant::now() && matches!(p.decided, Decided::Approved { .. }) =>
            {
                p.decided = Decided::Spent;
                true
            }
            _ => false,
        }
    }

    /// Who denied `call`, if an approver did.
    pub fn denied_by(&self, call: &GateCall<'_>) -> Option<String> {
        match &self.lock().get(call.handle())?.decided {
            Decided::Denied { by } => Some(by.clone()),
            _ => None,
        }
    }

    /// Records `approver`'s decision on the call `handle`.
    fn decide(&self, handle: &str, approver: &str, approve: bool) -> Result<(), Page> {
        let mut pending = self.lock();
        let Some(p) = pending.get_mut(handle).filter(|p| p.until > Instant::now()) else {
            return Err(Page::gone());
        };
        if p.caller.as_deref() == Some(approver) {
            return Err(Page::own_call());
        }
        if !self.may_approve(approver) {
            return Err(Page::not_an_approver(approver));
        }
        if p.decided != Decided::Waiting {
            return Err(Page::message(
                StatusCode::CONFLICT,
                "Already decided",
                "This call was decided already.",
            ));
        }
        p.decided = if approve {
            Decided::Approved {
                by: approver.to_owned(),
            }
        } else {
            Decided::Denied {
                by: approver.to_owned(),
            }
        };
        tracing::info!(
            target: crate::decisions::APPROVAL_TARGET,
            outcome = if approve { "approved" } else { "denied" },
            approver,
            decision = %p.decision_id,
            method = %p.method,
            target = %p.tool,
            principal = p.caller.as_deref().unwrap_or(""),
            "an approver decided a call"
        );
        Ok(())
    }

    fn may_approve(&self, approver: &str) -> bool {
        self.approvers.is_empty() || self.approvers.iter().any(|a| a == approver)
    }
}

/// The URL flow of a gate with `approvers = "url"`: its link is the call's approval page, and it
/// is complete once an approver approved the call.
#[derive(Clone)]
pub struct ApprovalFlow {
    pub approvals: Arc<Approvals>,
    pub catalog: Arc<Catalog>,
    /// How long the call waits for its approver (the gate's `approval_ttl_secs`).
    pub wait: Option<Duration>,
}

impl UrlFlow for ApprovalFlow {
    async fn url(&self, call: &GateCall<'_>) -> Result<String, BoxError> {
        let definition = (call.method() == "tools/call")
            .then(|| self.catalog.definition_of(call.target()))
            .flatten();
        self.approvals
            .open(call, definition, self.wait.unwrap_or(DEFAULT_WAIT))
    }

    async fn is_complete(&self, call: &GateCall<'_>) -> bool {
        self.approvals.take(call)
    }
}

/// A page: its status and HTML.
struct Page {
    status: StatusCode,
    html: String,
}

impl Page {
    fn new(status: StatusCode, title: &str, body: &str) -> Self {
        let html = format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>\
             body{{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}}\
             pre{{background:#f4f4f4;padding:.75rem;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}}\
             dt{{font-weight:600;margin-top:.75rem}}dd{{margin:0}}\
             button{{font-size:1rem;padding:.5rem 1.5rem;margin-right:1rem;border-radius:4px;border:1px solid #555;cursor:pointer}}\
             .approve{{background:#1a7f37;color:#fff}}.deny{{background:#cf222e;color:#fff}}\
             .note{{background:#fff8c5;padding:.5rem .75rem}}</style></head><body><h1>{}</h1>\n{body}</body></html>\n",
            escape(title),
            escape(title)
        );
        Self { status, html }
    }

    fn message(status: StatusCode, title: &str, text: &str) -> Self {
        Self::new(status, title, &format!("<p>{}</p>\n", escape(text)))
    }

    fn gone() -> Self {
        Self::message(
            StatusCode::NOT_FOUND,
            "No call waits here",
            "No call waits for approval at this link: it was decided and run, its time ran out, or the link is wrong.",
        )
    }

    fn own_call() -> Self {
        Self::message(
            StatusCode::FORBIDDEN,
            "Not yours to approve",
            "You made this call: another person must approve it.",
        )
    }

    fn not_an_approver(who: &str) -> Self {
        Self::message(
            StatusCode::FORBIDDEN,
            "Not an approver",
            &format!("{who} is not one of the approvers this proxy names ([approvals] approvers)."),
        )
    }

    fn sign_in(handle: &str, problem: Option<&str>) -> Self {
        let problem = problem.map_or_else(String::new, |why| {
            format!("<p class=\"note\">{}</p>\n", escape(why))
        });
        Self::new(
            StatusCode::UNAUTHORIZED,
            "Sign in to review a call",
            &format!(
                "{problem}<p>Paste your access token (a JWT from your team's identity provider, or your API key).</p>\n\
                 <form method=\"post\" action=\"{PATH}/{}/signin\"><p><input name=\"token\" type=\"password\" \
                 autocomplete=\"off\" size=\"60\" aria-label=\"Access token\"></p>\
                 <p><button type=\"submit\">Sign in</button></p></form>\n",
                escape(handle)
            ),
        )
    }
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = (self.status, Html(self.html)).into_response();
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        // No script, no frame, no form sent elsewhere, no referrer to another site (`same-origin`:
        // `no-referrer` would make a browser send `Origin: null` with the page's own form, which
        // the host check refuses): the page shows a
        // pending call and posts back to itself.
        for (name, value) in [
            (
                "content-security-policy",
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "same-origin"),
            ("x-content-type-options", "nosniff"),
        ] {
            response.headers_mut().insert(
                header::HeaderName::from_static(name),
                header::HeaderValue::from_static(value),
            );
        }
        response
    }
}

/// `text` made safe in HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the pages' handlers share.
#[derive(Clone)]
struct Served {
    approvals: Arc<Approvals>,
    guard: Arc<Guard>,
}

/// The approval pages, verifying approvers with `guard`.
pub fn routes(approvals: Arc<Approvals>, guard: Arc<Guard>) -> axum::Router {
    axum::Router::new()
        .route(
            &format!("{PATH}/{{handle}}"),
            axum::routing::get(show).post(decide),
        )
        .route(
            &format!("{PATH}/{{handle}}/signin"),
            axum::routing::post(sign_in),
        )
        .with_state(Served { approvals, guard })
}

/// The approver's credential: `Authorization: Bearer`, else the sign-in cookie.
fn credential(headers: &HeaderMap) -> Option<String> {
    if let Some(token) = crate::identity::bearer(headers) {
        return Some(token.to_owned());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE && !value.is_empty()).then(|| {
                percent_encoding::percent_decode_str(value)
                    .decode_utf8_lossy()
                    .into_owned()
            })
        })
}

/// The signed-in approver, or the sign-in page.
async fn approver(
    served: &Served,
    headers: &HeaderMap,
    handle: &str,
) -> Result<VerifiedCaller, Page> {
    let Some(token) = credential(headers) else {
        return Err(Page::sign_in(handle, None));
    };
    served.guard.verify(Some(&token)).await.map_err(|refused| {
        Page::sign_in(
            handle,
            Some(&format!("That credential is refused: {refused}.")),
        )
    })
}

async fn show(
    State(served): State<Served>,
    Path(handle): Path<String>,
    headers: HeaderMap,
) -> Response {
    let approver = match approver(&served, &headers, &handle).await {
        Ok(approver) => approver,
        Err(page) => return page.into_response(),
    };
    let who = approver.principal();
    let pending = served.approvals.lock();
    let Some(p) = pending.get(&handle).filter(|p| p.until > Instant::now()) else {
        return Page::gone().into_response();
    };
    let mut body = String::new();
    let waited = SystemTime::now()
        .duration_since(p.asked_at)
        .map_or(0, |d| d.as_secs());
    let _ = write!(
        body,
        "<p>Signed in as <strong>{}</strong>.</p>\n<dl>\
         <dt>Call</dt><dd><code>{}</code> of <code>{}</code></dd>\
         <dt>Called by</dt><dd>{}</dd>\
         <dt>Decision</dt><dd><code>{}</code></dd>\
         <dt>Asked</dt><dd>{waited} s ago</dd>\
         <dt>Arguments</dt><dd><pre>{}</pre></dd>",
        escape(who),
        escape(&p.method),
        escape(&p.tool),
        escape(p.caller.as_deref().unwrap_or("(not verified)")),
        escape(&p.decision_id),
        escape(&serde_json::to_string_pretty(&p.arguments).unwrap_or_default()),
    );
    match &p.definition {
        Some(definition) => {
            let description = definition["description"].as_str().unwrap_or("(none)");
            let _ = write!(
                body,
                "<dt>The tool's description</dt><dd><pre>{}</pre></dd>\
                 <dt>The tool's input schema</dt><dd><pre>{}</pre></dd>",
                escape(description),
                escape(
                    &serde_json::to_string_pretty(&definition["inputSchema"]).unwrap_or_default()
                )
            );
        }
        None => body.push_str("<dt>The tool's definition</dt><dd>(not listed by the server)</dd>"),
    }
    body.push_str("</dl>\n");
    match &p.decided {
        Decided::Waiting if p.caller.as_deref() == Some(who) => {
            body.push_str(
                "<p class=\"note\">You made this call: another person must approve it.</p>\n",
            );
        }
        Decided::Waiting if !served.approvals.may_approve(who) => {
            body.push_str(
                "<p class=\"note\">You are not one of the approvers this proxy names.</p>\n",
            );
        }
        Decided::Waiting => {
            let _ = write!(
                body,
                "<form method=\"post\" action=\"{PATH}/{}\">\
                 <button class=\"approve\" name=\"decision\" value=\"approve\">Approve</button>\
                 <button class=\"deny\" name=\"decision\" value=\"deny\">Deny</button></form>",
                escape(&handle)
            );
        }
        Decided::Approved { by } | Decided::Denied { by } => {
            let verb = if matches!(p.decided, Decided::Approved { .. }) {
                "Approved"
            } else {
                "Denied"
            };
            let _ = write!(
                body,
                "<p class=\"note\"><strong>{verb}</strong> by {}. The caller's next retry {}.</p>",
                escape(by),
                if verb == "Approved" {
                    "runs it"
                } else {
                    "is refused"
                }
            );
        }
        Decided::Spent => {
            body.push_str("<p class=\"note\"><strong>Approved</strong>, and run.</p>\n")
        }
    }
    Page::new(StatusCode::OK, "Approve a call?", &body).into_response()
}

/// Whether a `POST` comes from the page itself: its `Origin`, when sent, is the request's host.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin.split_once("://").map(|(_, rest)| rest);
    host.is_some() && origin_host == host
}

/// The refusal of a `POST` that does not come from the page itself.
fn elsewhere(headers: &HeaderMap) -> Option<Response> {
    (!same_origin(headers)).then(|| {
        Page::message(
            StatusCode::FORBIDDEN,
            "Refused",
            "A decision or a sign-in comes from this page only.",
        )
        .into_response()
    })
}

/// A form body's field `name`.
fn field(body: &str, name: &str) -> Option<String> {
    body.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| {
            let value = value.replace('+', " ");
            percent_encoding::percent_decode_str(&value)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

/// A `POST` of the page's own: the call's handle, the request's headers and its form body. One
/// that does not come from the page itself is refused ([`elsewhere`]), after the handle and the
/// body are read, whatever the handler.
struct Posted {
    served: Served,
    handle: String,
    headers: HeaderMap,
    body: String,
}

impl FromRequest<Served> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, served: &Served) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let Path(handle) = Path::<String>::from_request_parts(&mut parts, served)
            .await
            .map_err(IntoResponse::into_response)?;
        let headers = parts.headers.clone();
        let body = String::from_request(Request::from_parts(parts, body), served)
            .await
            .map_err(IntoResponse::into_response)?;
        if let Some(refused) = elsewhere(&headers) {
            return Err(refused);
        }
        Ok(Self {
            served: served.clone(),
            handle,
            headers,
            body,
        })
    }
}

async fn decide(posted: Posted) -> Response {
    let Posted {
        served,
        handle,
        headers,
        body,
    } = posted;
    let approver = match approver(&served, &headers, &handle).await {
        Ok(approver) => approver,
        Err(page) => return page.into_response(),
    };
    let approve = match field(&body, "decision").as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return Page::message(
                StatusCode::BAD_REQUEST,
                "Refused",
                "Choose Approve or Deny.",
            )
            .into_response();
        }
    };
    match served
        .approvals
        .decide(&handle, approver.principal(), approve)
    {
        Ok(()) => Redirect::to(&format!("{PATH}/{handle}")).into_response(),
        Err(page) => page.into_response(),
    }
}

async fn sign_in(posted: Posted) -> Response {
    let Posted {
        served,
        handle,
        body,
        ..
    } = posted;
    let Some(token) = field(&body, "token")
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
    else {
        return Page::sign_in(&handle, Some("Paste a token.")).into_response();
    };
    if let Err(refused) = served.guard.verify(Some(&token)).await {
        return Page::sign_in(
            &handle,
            Some(&format!("That credential is refused: {refused}.")),
        )
        .into_response();
    }
    let secure = if served.approvals.base.starts_with("https://") {
        "; Secure"
    } else {
        ""
    };
    let mut response = Redirect::to(&format!("{PATH}/{handle}")).into_response();
    let value = percent_encoding::utf8_percent_encode(&token, percent_encoding::NON_ALPHANUMERIC);
    if let Ok(cookie) = header::HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path={PATH}; HttpOnly; SameSite=Strict{secure}"
    )) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_leaves_no_markup() {
        assert_eq!(
            escape(r#"<a href="x" onclick='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn a_form_field_is_decoded() {
        assert_eq!(
            field("decision=approve", "decision").as_deref(),
            Some("approve")
        );
        assert_eq!(
            field("a=1&token=ab%2Bc+d", "token").as_deref(),
            Some("ab+c d")
        );
        assert_eq!(field("a=1", "token"), None);
    }

    #[test]
    fn a_post_from_another_origin_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&headers), "no Origin: a non-browser client");
        headers.insert(header::ORIGIN, "http://127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!same_origin(&headers));
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            format!("a=b; {COOKIE}=tok").parse().unwrap(),
        );
        assert_eq!(credential(&headers).as_deref(), Some("tok"));
    }
}
