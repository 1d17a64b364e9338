//! The Streamable HTTP transport (feature `upstream-http`): each message the adapter sends is
//! POSTed to the server's URL; the answer (JSON, or an event stream that may carry the server's
//! own requests before the response) is routed by the [core](super::core). A 2025-era server's
//! session id is kept, and a new session is started when the server no longer knows it. Its
//! standalone stream (`GET`) is read too, from before the session is ready: what comes there
//! belongs to no call (see `listen`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

use super::config::{FIRST_BACKOFF, Http};
use super::core::{Core, Link, QUEUE, State, TARGET, failure, handshake, lock, stopped};
use super::session::Negotiated;
use crate::texts;
use crate::wire::mcp::{MRTR_VERSION, header};
use crate::wire::sse;

const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static(header::METHOD);
const MCP_NAME: HeaderName = HeaderName::from_static(header::NAME);
const ACCEPTS: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
/// How much of an error answer's body is read (to find a JSON-RPC error in it).
const ERROR_BODY_BYTES: usize = 64 * 1024;
/// How often a silent event stream checks that its call still waits for it.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long the `DELETE` that ends the session at shutdown may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(5);

/// The server's endpoint, the client that reaches it, and the session held there.
struct Connection {
    core: Arc<Core>,
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    timeout: Duration,
    session: Mutex<Session>,
    /// Woken when the server says it does not know the session.
    lost: Notify,
    /// The requests the server refused for the lost session: sent again in the new one.
    retrying: Mutex<HashSet<u64>>,
    writer: mpsc::Sender<Value>,
}

/// What the requests of the current session carry.
#[derive(Debug, Default, Clone)]
struct Session {
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
}

/// Checks the URL and builds the client (so that a bad one is an error at once), then runs the
/// connection in a task: handshake, a new session when one is lost, the `DELETE` at shutdown.
pub(crate) fn start(
    core: &Arc<Core>,
    server: Http,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    if let Some(why) = server.invalid_header {
        return Err(invalid(why));
    }
    let url = reqwest::Url::parse(&server.url)
        .map_err(|error| invalid(format!("the URL {:?} is not valid: {error}", server.url)))?;
    let tls = cfg!(feature = "upstream-https");
    match url.scheme() {
        "http" => {}
        "https" if tls => {}
        "https" => {
            return Err(invalid(format!(
                "the URL {:?} is https://, and this build speaks HTTP without TLS (feature \
                 `upstream-https` adds it)",
                server.url
            )));
        }
        _ => {
            return Err(invalid(format!(
                "the URL {:?} is neither http:// nor https://",
                server.url
            )));
        }
    }
    // A redirect is not followed: a POSTed JSON-RPC message has one endpoint (and the user's
    // headers, often a credential, go to it only).
    #[allow(unused_mut)]
    let mut client = reqwest::Client::builder()
        .connect_timeout(server.connect_timeout)
        .redirect(reqwest::redirect::Policy::none());
    #[cfg(feature = "upstream-https")]
    for pem in &server.roots {
        let root = reqwest::Certificate::from_pem(pem).map_err(|error| {
            invalid(format!(
                "a root certificate given is not valid PEM: {error}"
            ))
        })?;
        client = client.add_root_certificate(root);
    }
    let client = client.build().map_err(std::io::Error::other)?;
    let (writer, queue) = mpsc::channel(QUEUE);
    let connection = Arc::new(Connection {
        core: Arc::clone(core),
        client,
        url,
        headers: server.headers,
        timeout: server.timeout,
        session: Mutex::default(),
        lost: Notify::new(),
        retrying: Mutex::default(),
        writer,
    });
    tokio::spawn(send_all(Arc::clone(&connection), queue, shutdown.clone()));
    tokio::spawn(supervise(connection, shutdown));
    Ok(())
}

/// POSTs each message the adapter sends, each in a task of its own (an answer may stay open
/// while its call waits for a person).
async fn send_all(
    connection: Arc<Connection>,
    mut queue: mpsc::Receiver<Value>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let message = tokio::select! {
            message = queue.recv() => message,
            () = stopped(&mut shutdown) => None,
        };
        let Some(message) = message else { break };
        tokio::spawn(post(Arc::clone(&connection), message));
    }
}

async fn supervise(connection: Arc<Connection>, mut shutdown: watch::Receiver<bool>) {
    let core = Arc::clone(&connection.core);
    let mut backoff = FIRST_BACKOFF;
    loop {
        *lock(&connection.session) = Session::default();
        core.state.send_replace(State::Starting);
        let negotiated = tokio::select! {
            negotiated = handshake(&core, &connection.writer) => negotiated,
            () = stopped(&mut shutdown) => break,
        };
        match negotiated {
            Ok(negotiated) => {
                tracing::info!(target: TARGET, ?negotiated, "the server is ready");
                let version = match &negotiated {
                    Negotiated::V2025 { version, .. } => version.as_str(),
                    Negotiated::V2026 => MRTR_VERSION,
                };
                lock(&connection.session).version = HeaderValue::from_str(version).ok();
                let link = Arc::new(Link::new(connection.writer.clone(), negotiated));
                if let Negotiated::V2025 { version, .. } = &link.negotiated {
                    tracing::info!(target: TARGET, %version, "a 2025-era server: one session held");
                    Core::notify(&link, "notifications/initialized", json!({})).await;
                    // Open before the session is ready, so that nothing the server sends
                    // outside a call's stream is missed once calls run.
                    if let Some(stream) = open_listen(&connection).await {
                        tokio::spawn(listen(Arc::clone(&connection), stream, shutdown.clone()));
                    }
                }
                core.state.send_replace(State::Ready(link));
                backoff = FIRST_BACKOFF;
                tokio::select! {
                    () = connection.lost.notified() => {
                        tracing::warn!(target: TARGET, "the server lost the session: starting a new one");
                        let retrying = lock(&connection.retrying).clone();
                        core.connection_lost_but(|id| retrying.contains(&id));
                    }
                    () = core.unresponsive(&connection.writer) => {
                        tracing::warn!(target: TARGET, "the server does not answer: starting a new session");
                        core.connection_lost();
                    }
                    () = stopped(&mut shutdown) => break,
                }
            }
            Err(why) => {
                tracing::error!(target: TARGET, %why, "the server's handshake failed");
                core.state.send_replace(State::Down(why));
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stopped(&mut shutdown) => break,
                }
                backoff = (backoff * 2).min(core.settings.max_backoff);
            }
        }
    }
    end_session(&connection).await;
    core.connection_lost();
    core.state.send_replace(State::Stopped);
}

/// The session's standalone stream (a `GET` with its id, 2025-era servers only): `None` when
/// the server offers none (`405`), refuses it, or does not answer within the connect timeout.
async fn open_listen(connection: &Connection) -> Option<reqwest::Response> {
    let session = lock(&connection.session).clone();
    let id = session.id?;
    let mut request = connection
        .client
        .get(connection.url.clone())
        .headers(connection.headers.clone())
        .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
        .header(SESSION_ID, id);
    if let Some(version) = session.version {
        request = request.header(PROTOCOL_VERSION, version);
    }
    let response = match tokio::time::timeout(connection.timeout, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::debug!(target: TARGET, %error, "the server's standalone stream could not be opened");
            return None;
        }
        Err(_) => return None,
    };
    let status = response.status();
    let event_stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        tracing::debug!(target: TARGET, "the server offers no standalone stream (GET: 405)");
        return None;
    }
    if !status.is_success() || !event_stream {
        tracing::info!(target: TARGET, %status, "the server refused its standalone stream (GET)");
        return None;
    }
    Some(response)
}

/// Reads the session's standalone stream while the session lasts: what the server sends there
/// belongs to no call, so its requests are refused as a client with no call to carry them
/// would (`-32601`), its progress reaches the call its token names, and its log lines are
/// logged. Opened again (after a second) when the server ends it, while the session is the
/// same one.
async fn listen(
    connection: Arc<Connection>,
    mut stream: reqwest::Response,
    mut shutdown: watch::Receiver<bool>,
) {
    let session = lock(&connection.session).id.clone();
    loop {
        tokio::select! {
            () = read_events(&connection, stream, None, None) => {}
            () = stopped(&mut shutdown) => return,
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stopped(&mut shutdown) => return,
        }
        if lock(&connection.session).id != session {
            return;
        }
        match open_listen(&connection).await {
            Some(again) => stream = again,
            None => return,
        }
    }
}

/// Tells the server the session is over (`DELETE` with its id), when there is one.
async fn end_session(connection: &Connection) {
    let Some(id) = lock(&connection.session).id.take() else {
        return;
    };
    let request = connection
        .client
        .delete(connection.url.clone())
        .headers(connection.headers.clone())
        .header(SESSION_ID, id)
        .send();
    let _ = tokio::time::timeout(DELETE_TIMEOUT, request).await;
}

/// The id of a request (a message with a method and an id of the adapter's); `None` for a
/// notification or a response.
fn request_id(message: &Value) -> Option<u64> {
    message.get("method")?;
    message.get("id")?.as_u64()
}

/// The protocol version a 2026-07-28 request names in its `_meta`.
fn meta_version(message: &Value) -> Option<HeaderValue> {
    let version = message
        .get("params")?
        .get("_meta")?
        .get("io.modelcontextprotocol/protocolVersion")?
        .as_str()?;
    HeaderValue::from_str(version).ok()
}

/// `Mcp-Method`, and `Mcp-Name` (the tool or prompt, or the resource's URI), which a 2026-07-28
/// request's POST carries (rmcp 3.11 refuses one without `Mcp-Method`: `-32020`). None for a
/// 2025-era session's messages, or a response.
fn mrtr_headers(message: &Value) -> Vec<(HeaderName, HeaderValue)> {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Vec::new();
    };
    let mrtr = meta_version(message)
        .as_ref()
        .and_then(|version| version.to_str().ok())
        .is_some_and(crate::wire::mcp::supports_mrtr);
    let Some(value) = mrtr.then(|| HeaderValue::from_str(method).ok()).flatten() else {
        return Vec::new();
    };
    let mut headers = vec![(MCP_METHOD, value)];
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return headers,
    };
    if let Some(name) = message["params"].get(field).and_then(Value::as_str) {
        headers.push((MCP_NAME, header::text(name)));
    }
    headers
}

impl Connection {
    /// Ends the request `origin` (if it is one) with `message`.
    fn fail(&self, origin: Option<u64>, message: &str) {
        if let Some(id) = origin {
            self.core.fail(id, failure(message));
        }
    }
}

/// One message POSTed, and its answer routed. A request the server refuses because it lost the
/// session (it never ran) is sent once more, in the new session.
async fn post(connection: Arc<Connection>, message: Value) {
    let origin = request_id(&message);
    let Some(lost) = exchange(&connection, &message, origin, true).await else {
        return;
    };
    let again = new_session(&connection, &lost).await;
    if let Some(id) = origin {
        lock(&connection.retrying).remove(&id);
        if again && connection.core.is_waiting(id) {
            exchange(&connection, &message, origin, false).await;
        } else {
            connection.fail(origin, texts::UPSTREAM_SESSION_LOST);
        }
    }
}

/// Whether a session other than `lost` is ready (waited for no longer than a start may take).
async fn new_session(connection: &Connection, lost: &Session) -> bool {
    let mut state = connection.core.state.subscribe();
    let ready = state.wait_for(|state| match state {
        State::Ready(_) => lock(&connection.session).id != lost.id,
        State::Down(_) | State::Stopped => true,
        State::Starting => false,
    });
    let timeout = connection.core.settings.start_timeout;
    match tokio::time::timeout(timeout, ready).await {
        Ok(Ok(state)) => matches!(*state, State::Ready(_)),
        _ => false,
    }
}

/// One POST and its answer. `Some(session)`: the server had lost that session and the request
/// `origin` is to be sent again (only when `may_retry`); else the request is answered.
async fn exchange(
    connection: &Arc<Connection>,
    message: &Value,
    origin: Option<u64>,
    may_retry: bool,
) -> Option<Session> {
    let session = lock(&connection.session).clone();
    let version = meta_version(message).or(session.version.clone());
    let mut request = connection
        .client
        .post(connection.url.clone())
        .headers(connection.headers.clone())
        .header(CONTENT_TYPE, JSON)
        .header(ACCEPT, ACCEPTS)
        .body(serde_json::to_vec(message).unwrap_or_default());
    if let Some(id) = &session.id {
        request = request.header(SESSION_ID, id.clone());
    }
    if let Some(version) = version {
        request = request.header(PROTOCOL_VERSION, version);
    }
    for (name, value) in mrtr_headers(message) {
        request = request.header(name, value);
    }
    // The front's trace context, on its call's request only (never on the adapter's own).
    if let Some(trace) = origin.and_then(|id| connection.core.trace_of(id)) {
        for (name, value) in trace.headers() {
            request = request.header(name, value);
        }
    }
    let mut response = match tokio::time::timeout(connection.timeout, request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::warn!(target: TARGET, %error, "the server could not be reached");
            let why = format!("The server could not be reached ({error}).");
            connection.fail(origin, &why);
            return None;
        }
        Err(_) => {
            connection.fail(origin, texts::UPSTREAM_TIMEOUT);
            return None;
        }
    };
    let status = response.status();
    // The session is the one `initialize` opened (a server may name one in other answers too,
    // as the Python SDK does in its refusal of a request without a session).
    let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
    if initialize
        && status.is_success()
        && let Some(id) = response.headers().get(SESSION_ID)
    {
        lock(&connection.session).id = Some(id.clone());
    }
    if !status.is_success() {
        let body = read_bounded(&mut response, ERROR_BODY_BYTES).await;
        let retry = origin.is_some() && may_retry;
        let lost = refused(connection, origin, &session, status, &body, retry).await;
        return lost.then_some(session);
    }
    let event_stream = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    let limit = connection.core.settings.max_message_bytes;
    if event_stream {
        let settings = &connection.core.settings;
        let idle = settings.request_timeout + settings.parked_timeout;
        read_events(connection, response, origin, Some(idle)).await;
    } else {
        let body = read_bounded(&mut response, limit + 1).await;
        if body.len() > limit {
            tracing::error!(target: TARGET, limit, "the server answered with a message over the bound: skipped");
        } else if !body.trim_ascii().is_empty() {
            connection
                .core
                .route_bytes(&connection.writer, &body, origin)
                .await;
        }
    }
    if origin.is_some_and(|id| connection.core.is_waiting(id)) {
        connection.fail(origin, texts::UPSTREAM_NO_RESPONSE);
    }
    None
}

/// An answer that is not a success: a lost session (404, or the 400 the TypeScript SDK's
/// example servers answer for a session they do not know), a JSON-RPC error, or an HTTP error.
async fn refused(
    connection: &Connection,
    origin: Option<u64>,
    session: &Session,
    status: StatusCode,
    body: &[u8],
    retry: bool,
) -> bool {
    let says_session = || {
        String::from_utf8_lossy(body)
            .to_ascii_lowercase()
            .contains("session")
    };
    let lost = session.id.is_some()
        && (status == StatusCode::NOT_FOUND
            || (status == StatusCode::BAD_REQUEST && says_session()));
    if lost {
        if let (Some(id), true) = (origin, retry) {
            // Kept waiting through the loss, to be sent again.
            lock(&connection.retrying).insert(id);
        }
        // Only the current session's loss starts a new one (not a late answer to an old one).
        if lock(&connection.session).id == session.id {
            connection.lost.notify_one();
        }
        if !retry {
            connection.fail(origin, texts::UPSTREAM_SESSION_LOST);
        }
        return retry;
    }
    tracing::warn!(target: TARGET, %status, "the server refused a request");
    if let (Some(id), Ok(Value::Object(mut error))) = (origin, serde_json::from_slice(body))
        && error.contains_key("error")
    {
        // The server's own JSON-RPC error (often with `id: null`): the request's answer.
        error.insert("id".to_owned(), json!(id));
        connection.core.route(&connection.writer, error, None).await;
        return false;
    }
    let why = format!("The server answered HTTP {status}.");
    connection.fail(origin, &why);
    false
}

/// The body, no more than `limit` bytes of it (the rest is not read).
async fn read_bounded(response: &mut reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                body.extend_from_slice(&chunk[..chunk.len().min(limit - body.len())])
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// Routes each event of an event stream as it comes: the server's requests and notifications,
/// then the response. The stream is left when it ends, when it stays silent longer than `idle`
/// (a call's stream: as long as a call may take and wait; the standalone stream: never), when an
/// event is over the bound, or once its call no longer waits (it was answered, cancelled,
/// expired; checked every second while the stream is silent).
async fn read_events(
    connection: &Connection,
    mut response: reqwest::Response,
    origin: Option<u64>,
    idle: Option<Duration>,
) {
    let limit = connection.core.settings.max_message_bytes;
    let mut splitter = sse::Splitter::default();
    let mut heard = tokio::time::Instant::now();
    loop {
        let chunk = match tokio::time::timeout(CHECK_EVERY, response.chunk()).await {
            Ok(Ok(Some(chunk))) => chunk,
            Ok(Ok(None)) => break,
            Ok(Err(error)) => {
                tracing::debug!(target: TARGET, %error, "the server's event stream broke");
                break;
            }
            // Silent: still wanted while its call waits (a person may be answering), and
            // not longer than a call may take and wait.
            Err(_) if origin.is_some_and(|id| !connection.core.is_waiting(id)) => break,
            Err(_) if idle.is_some_and(|idle| heard.elapsed() >= idle) => {
                tracing::debug!(target: TARGET, "the server's event stream stayed silent too long");
                break;
            }
            Err(_) => continue,
        };
        heard = tokio::time::Instant::now();
        splitter.push(chunk);
        while let Some(event) = splitter.next_event() {
            if let Some(data) = event.data()
                && !data.trim_ascii().is_empty()
            {
                connection
                    .core
                    .route_bytes(&connection.writer, &data, origin)
                    .await;
            }
        }
        if splitter.len() > limit {
            tracing::error!(target: TARGET, limit, "the server sent an event over the bound: the stream is left");
            break;
        }
        if origin.is_some_and(|id| !connection.core.is_waiting(id)) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_of_the_adapters_are_told_apart_by_id() {
        assert_eq!(
            request_id(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call"})),
            Some(7)
        );
        // A response to the server's own request, and a notification: no call waits on them.
        assert_eq!(
            request_id(&json!({"jsonrpc": "2.0", "id": 7, "result": {}})),
            None
        );
        assert_eq!(
            request_id(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled"})),
            None
        );
    }

    #[test]
    fn a_2026_request_names_its_method_and_target_in_headers() {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        let headers = |message: Value| {
            mrtr_headers(&message)
                .into_iter()
                .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            headers(json!({"id": 1, "method": "tools/call",
                "params": {"name": "deploy", "_meta": meta}})),
            ["mcp-method: tools/call", "mcp-name: deploy"]
        );
        assert_eq!(
            headers(json!({"id": 2, "method": "resources/read",
                "params": {"uri": "file:///é", "_meta": meta}})),
            [
                "mcp-method: resources/read",
                "mcp-name: =?base64?ZmlsZTovLy/DqQ==?="
            ]
        );
        assert_eq!(
            headers(json!({"id": 3, "method": "server/discover", "params": {"_meta": meta}})),
            ["mcp-method: server/discover"]
        );
        // A 2025-era session's request, and a response: none.
        assert!(
            headers(json!({"id": 4, "method": "tools/call", "params": {"name": "x"}})).is_empty()
        );
        assert!(headers(json!({"id": 5, "result": {}})).is_empty());
    }

    #[test]
    fn the_protocol_version_header_comes_from_the_requests_meta() {
        let request = json!({"method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
        assert_eq!(
            meta_version(&request),
            Some(HeaderValue::from_static("2026-07-28"))
        );
        assert_eq!(meta_version(&json!({"method": "tools/list"})), None);
    }
}
