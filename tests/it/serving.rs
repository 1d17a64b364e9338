//! The example servers' accept loop (`examples/deploy/server.rs`, `serve`), over real sockets: a
//! request's head and body are bounded in time, connections in number. `axum::serve`, which the
//! examples used before, holds a half-sent request open for ever.
//!
//! No timing assertion: the limits are short, each wait for their outcome is long, and only the
//! outcome is asserted (the connection closed; the request answered with an error; the next
//! connection served once one closes).

use crate::support::{keyring, server};

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower_elicitation::ElicitationLayer;

/// Far longer than any limit set here.
const WAIT: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(200);

/// `examples/deploy`'s router served by `serve::serve` within `limits`, on a free port.
async fn start(limits: serve::Limits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = server::router(ElicitationLayer::new(keyring()), &format!("http://{addr}")).unwrap();
    tokio::spawn(serve::serve(listener, app, limits, std::future::pending()));
    addr
}

/// What the server sends until it closes the connection (a reset counts as closed).
async fn until_closed(tcp: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(WAIT, tcp.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the server still holds the connection");
    String::from_utf8_lossy(&received).into_owned()
}

/// Reads until `needle` has arrived; everything read.
async fn until(tcp: &mut TcpStream, needle: &str) -> String {
    let mut received = Vec::new();
    let mut chunk = [0; 4096];
    while !String::from_utf8_lossy(&received).contains(needle) {
        let read = tokio::time::timeout(WAIT, tcp.read(&mut chunk)).await;
        let n = read.expect("an answer").expect("the connection stays up");
        assert_ne!(
            n,
            0,
            "closed before {needle:?}: {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// A request for a URL flow page that does not exist: 404, the connection kept alive.
const NO_SUCH_FLOW: &[u8] = b"GET /flows/none HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

#[tokio::test]
async fn a_connection_that_sends_half_a_head_is_closed() {
    let addr = start(serve::Limits::default().header_read_timeout(SHORT)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n")
        .await
        .unwrap();
    until_closed(&mut tcp).await;
}

#[tokio::test]
async fn a_request_whose_body_stops_coming_is_answered_with_an_error() {
    let addr = start(serve::Limits::default().body_read_timeout(SHORT)).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n";
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(br#"{"jsonrpc":"#).await.unwrap();
    let answer = until(&mut tcp, "\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let addr = start(serve::Limits::default().max_connections(1)).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(NO_SUCH_FLOW).await.unwrap();
    let answer = until(&mut first, "No such flow").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    // The first connection is kept alive: the second is in the listen backlog, not served.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second.write_all(NO_SUCH_FLOW).await.unwrap();
    let mut byte = [0; 1];
    let early = tokio::time::timeout(SHORT, second.read(&mut byte)).await;
    assert!(early.is_err(), "served past the limit: {early:?}");

    drop(first);
    let answer = until(&mut second, "No such flow").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

#[tokio::test]
async fn a_peer_over_its_connection_cap_is_closed_and_served_again_once_under_it() {
    let addr = start(serve::Limits::default().max_connections_per_peer(1)).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(NO_SUCH_FLOW).await.unwrap();
    let answer = until(&mut first, "No such flow").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");

    // The same peer's second connection, while the first is kept alive: closed at its accept.
    let mut second = TcpStream::connect(addr).await.unwrap();
    let _ = second.write_all(NO_SUCH_FLOW).await;
    let answer = until_closed(&mut second).await;
    assert!(answer.is_empty(), "served over the peer's cap: {answer}");

    drop(first);
    // Its slot is freed when its connection task ends; a new connection is served then.
    let answer = loop {
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(NO_SUCH_FLOW).await;
        let answer = until_closed_or(&mut third, "No such flow").await;
        if !answer.is_empty() {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

/// What `tcp` sends until `needle` has been read or it is closed.
async fn until_closed_or(tcp: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0; 4096];
    loop {
        let read = tokio::time::timeout(WAIT, tcp.read(&mut buffer)).await;
        match read.expect("an answer or a close") {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(read) => seen.extend_from_slice(&buffer[..read]),
        }
        if String::from_utf8_lossy(&seen).contains(needle) {
            return String::from_utf8_lossy(&seen).into_owned();
        }
    }
}
