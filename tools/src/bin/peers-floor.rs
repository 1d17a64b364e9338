//! The floor of `scripts/peers.sh`: the `deploy` flow's three answers as canned bytes, over
//! hyper's HTTP/1.1 with no MCP at all. Every other server's row is read against it: what is
//! left once HTTP, the socket and the load generator's own checks are paid for.
//!
//! It reads each request's body whole, takes the JSON-RPC id with a byte scan, and answers
//! from the answers' bytes alone: `"approve":true` deploys, `"approve":"yes"` is asked again
//! with the load generator's re-ask hint (`Deploy to `), anything else is the first round. The
//! `requestState` it hands out is a constant: nothing is sealed, nothing checked. JSON answers,
//! or event streams of one event without `MCP_JSON_RESPONSE=1` (as the other servers' modes).
//!
//! ```text
//! MCP_ADDR=127.0.0.1:3000 [MCP_JSON_RESPONSE=1] cargo run --release -p tower-elicitation-tools --bin peers-floor
//! ```

use std::convert::Infallible;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;

const ASK: &str = r#"{"resultType":"input_required","inputRequests":{"deployment-approval":{"method":"elicitation/create","params":{"mode":"form","message":"Deploy to staging?","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve"},"note":{"type":"string","maxLength":200}},"required":["approve"]}}}},"requestState":"floor"}"#;
const DEPLOYED: &str =
    r#"{"content":[{"type":"text","text":"deployed"}],"structuredContent":{"deployed":true}}"#;

/// The request's JSON-RPC id as it was written (a number in the load generator's requests).
fn id_of(body: &[u8]) -> &[u8] {
    let Some(at) = body.windows(5).position(|w| w == b"\"id\":") else {
        return b"null";
    };
    let rest = &body[at + 5..];
    let rest = &rest[rest.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let len = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'-')
        .count();
    if len == 0 { b"null" } else { &rest[..len] }
}

fn contains(body: &[u8], needle: &[u8]) -> bool {
    body.windows(needle.len()).any(|w| w == needle)
}

fn answer(body: &[u8], json: bool) -> Response<Full<Bytes>> {
    let result = if contains(body, b"\"approve\":true") {
        DEPLOYED
    } else {
        ASK
    };
    let mut message = Vec::with_capacity(result.len() + 64);
    message.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    message.extend_from_slice(id_of(body));
    message.extend_from_slice(b",\"result\":");
    message.extend_from_slice(result.as_bytes());
    message.push(b'}');
    let (content_type, bytes) = if json {
        ("application/json", message)
    } else {
        let mut event = Vec::with_capacity(message.len() + 16);
        event.extend_from_slice(b"event: message\ndata: ");
        event.extend_from_slice(&message);
        event.extend_from_slice(b"\n\n");
        ("text/event-stream", event)
    };
    Response::builder()
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = std::env::var("MCP_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let json = std::env::var("MCP_JSON_RESPONSE").is_ok_and(|v| v == "1");
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request: Request<Incoming>| async move {
                    let body = match request.into_body().collect().await {
                        Ok(body) => body.to_bytes(),
                        Err(_) => Bytes::new(),
                    };
                    Ok::<_, Infallible>(answer(&body, json))
                });
            let _ = Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_each_round_with_the_request_id() {
        let first = br#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{}}"#;
        let asked = answer(first, true);
        assert_eq!(asked.headers()["content-type"], "application/json");
        assert_eq!(id_of(first), b"41");
        let wrong =
            br#"{"id": 42,"params":{"inputResponses":{"a":{"content":{"approve":"yes"}}}}}"#;
        assert_eq!(id_of(wrong), b"42");
        assert!(!contains(wrong, b"\"approve\":true"));
        assert!(contains(br#"{"approve":true}"#, b"\"approve\":true"));
        assert_eq!(id_of(b"{}"), b"null");
    }
}
