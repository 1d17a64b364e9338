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

/// `examples/deploy`'s router served by `server::serve` within `limits`, on a free port.
async fn start(limits: server::Limits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = server::router(ElicitationLayer::new(keyring()), &format!("http://{addr}")).unwrap();
    tokio::spawn(server::serve(listener, app, limits, std::future::pending()));
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
    let addr = start(server::Limits {
        header_read_timeout: SHORT,
        ..server::Limits::default()
    })
    .await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n")
        .await
        .unwrap();
    until_closed(&mut tcp).await;
}

#[tokio::test]
async fn a_request_whose_body_stops_coming_is_answered_with_an_error() {
    let addr = start(server::Limits {
        body_read_timeout: SHORT,
        ..server::Limits::default()
    })
    .await;
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
    let addr = start(server::Limits {
        max_connections: 1,
        ..server::Limits::default()
    })
    .await;
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
