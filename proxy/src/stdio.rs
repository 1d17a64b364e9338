//! stdio downstream: the host spawns the proxy and speaks MCP over stdin and stdout, in its own
//! era, as desktop hosts (Claude Desktop, VS Code's `mcp.json`) run their servers.
//!
//! Nothing of MCP is re-implemented here: each line from stdin becomes one HTTP request to the
//! same app the HTTP listener serves (bridge → layer → adapter), in process. The session the
//! bridge opens at `initialize` (its `Mcp-Session-Id`) is kept for the whole process and sent
//! with every later message; what comes back (a JSON answer, or an event stream's events: the
//! gates' `elicitation/create` for a 2025-era host, notifications, the response) is written to
//! stdout one JSON message a line, and the host's answers to those requests are POSTed back as
//! the bridge expects them. A 2026-07-28 host's requests (their `_meta` names the version) get
//! the 2026 headers and pass the bridge untouched: it gets `input_required` results.
//!
//! What is forwarded is the bytes the host wrote, never a re-encoding of them: the line is parsed
//! only to see what it is (its method, its id, its `_meta`'s version), and the stack below reads
//! the same bytes an HTTP client would have sent, so a message with a duplicate key is refused
//! here as it is over HTTP (a re-encoded one would have lost all but one of the duplicates, and
//! passed). What comes back is written as it came too, its line breaks (JSON whitespace, never
//! inside a string) taken out.
//!
//! The event streams are read with `sse-stream` (the parser rmcp uses). Logs go to stderr
//! only; stdout carries nothing but MCP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tower::ServiceExt;

use crate::error::Error;

/// How long the calls in flight may take to finish once stdin has closed.
const EOF_GRACE: Duration = Duration::from_secs(5);
/// Messages waiting to be written to stdout.
const OUT_QUEUE: usize = 256;
/// The largest line read from stdin (the bridge's own body limit is 4 MiB).
const MAX_LINE: usize = 4 << 20;

/// Serves MCP on stdin/stdout through `app` until stdin closes or SIGTERM.
///
/// # Errors
///
/// When stdin or stdout cannot be used.
pub async fn run(app: axum::Router) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};

    // Bounded: a host that stops reading stdout holds up the calls writing to it, never the
    // proxy's memory.
    let (out, mut lines) = mpsc::channel::<String>(OUT_QUEUE);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                tracing::warn!("stdout closed: the host is gone");
                break;
            }
        }
    });
    let session: Arc<Mutex<Option<String>>> = Arc::default();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut calls = tokio::task::JoinSet::new();
    let mut terminate = signal(SignalKind::terminate())?;
    tracing::info!("serving MCP on stdio");
    let mut line = String::new();
    loop {
        line.clear();
        let mut limited = (&mut stdin).take(MAX_LINE as u64 + 1);
        let read = tokio::select! {
            read = limited.read_line(&mut line) => read,
            _ = terminate.recv() => break,
        };
        match read {
            Ok(0) => break,
            Ok(_) if line.len() > MAX_LINE && !line.ends_with('\n') => {
                tracing::warn!(
                    "a line from stdin over {MAX_LINE} bytes: the host is misbehaving, stopping"
                );
                break;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "cannot read stdin");
                break;
            }
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(error) => {
                let _ = out
                    .send(
                        json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32700, "message": format!("Parse error: {error}")}})
                        .to_string(),
                    )
                    .await;
                continue;
            }
        };
        // An `initialize` runs alone: the session it opens must be known before the next
        // message (the host sends `notifications/initialized` only after its answer).
        let initialize = message["method"] == "initialize";
        let task = forward(
            app.clone(),
            Arc::clone(&session),
            message,
            bytes::Bytes::copy_from_slice(text.as_bytes()),
            out.clone(),
        );
        if initialize {
            task.await;
        } else {
            calls.spawn(task);
        }
        while calls.try_join_next().is_some() {}
    }
    if tokio::time::timeout(EOF_GRACE, async {
        while calls.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("calls still running {EOF_GRACE:?} after stdin closed: stopping them");
    }
    calls.shutdown().await;
    drop(out);
    let _ = writer.await;
    Ok(())
}

/// Sends one message from the host (`raw`, as it read; `message`, what it says) through `app`;
/// writes what comes back to `out`.
async fn forward(
    app: axum::Router,
    session: Arc<Mutex<Option<String>>>,
    message: Value,
    raw: bytes::Bytes,
    out: mpsc::Sender<String>,
) {
    let id = message.get("id").cloned();
    let is_request = message.get("method").is_some() && id.is_some();
    let fail = |why: String| {
        let (out, id) = (out.clone(), id.clone());
        async move {
            if is_request {
                let error = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32603, "message": why}});
                let _ = out.send(error.to_string()).await;
            } else {
                tracing::warn!(%why, "a message from the host was not taken");
            }
        }
    };
    let request = match request(&message, raw, &session) {
        Ok(request) => request,
        Err(why) => return fail(why.to_string()).await,
    };
    let response = match app.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    if let Some(id) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        *session.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.to_owned());
    }
    let status = response.status();
    let is_stream = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let body = response.into_body();
    if is_stream {
        let mut events = sse_stream::SseStream::new(body);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
                        let _ = out.send(one_line(data.as_bytes())).await;
                    }
                }
                Err(error) => {
                    return fail(format!("the answer's event stream broke: {error}")).await;
                }
            }
        }
        return;
    }
    let bytes = match http_body_util::BodyExt::collect(body).await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return fail(format!("the answer could not be read: {error}")).await,
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(answer) if answer.get("jsonrpc").is_some() => {
            let _ = out.send(one_line(&bytes)).await;
        }
        _ if bytes.is_empty() && status.is_success() => {}
        _ => {
            fail(format!(
                "HTTP {status} from the proxy's stack: {}",
                String::from_utf8_lossy(&bytes).trim()
            ))
            .await
        }
    }
}

/// `json` (one JSON text) on one line, as it came but for its line breaks: in JSON a raw CR or
/// LF is only ever whitespace between tokens.
fn one_line(json: &[u8]) -> String {
    String::from_utf8_lossy(json)
        .chars()
        .filter(|c| *c != '\n' && *c != '\r')
        .collect()
}

/// The HTTP request the bridge would get for `message` (its bytes `raw`) from a host on this
/// machine.
fn request(
    message: &Value,
    raw: bytes::Bytes,
    session: &Mutex<Option<String>>,
) -> Result<http::Request<Body>, http::Error> {
    let mut builder = http::Request::post("/mcp")
        .header(http::header::HOST, "localhost")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream");
    let params = &message["params"];
    if let Some(version) = params["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str() {
        // A 2026-07-28 host: no session; the headers the protocol puts on every request.
        builder = builder.header("mcp-protocol-version", version);
        if let Some(method) = message["method"].as_str() {
            builder = builder.header("mcp-method", method);
        }
        if let Some(name) = params["name"].as_str().or(params["uri"].as_str())
            && http::HeaderValue::from_str(name).is_ok()
        {
            builder = builder.header("mcp-name", name);
        }
    } else if let Some(id) = session.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        builder = builder.header("mcp-session-id", id);
    }
    builder.body(Body::from(raw))
}
