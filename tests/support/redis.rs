//! The real Redis the Redis tests use (`MCP_REDIS_URL`, else 127.0.0.1:6379): its URL, a key
//! prefix no other test uses, and a TCP proxy to it whose link a test controls (an outage without
//! touching the shared server). Included by `tests/single_use.rs` and `tests/bridge_redis.rs`.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("MCP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix no other test, run or engineer uses.
pub fn prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "te-test:{}:{nanos}:{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// What the proxy does with the traffic between the store and Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Passes it both ways.
    Up,
    /// Holds it: Redis seems to hang (as under `DEBUG SLEEP`).
    Stalled,
    /// Drops every connection and refuses new ones: Redis seems down.
    Down,
}

/// A TCP proxy to Redis whose link this test controls.
pub struct Proxy {
    addr: SocketAddr,
    link: watch::Sender<Link>,
}

impl Proxy {
    pub async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (link, watching) = watch::channel(Link::Up);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watching.borrow() == Link::Down {
                    drop(client);
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, watching.clone()));
                tokio::spawn(pipe(server_read, client_write, watching.clone()));
            }
        });
        Self { addr, link }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = link.wait_for(|link| *link == Link::Down) => return,
        };
        // Held while stalled; dropped with the connection when the link goes down.
        let up = matches!(
            link.wait_for(|link| *link != Link::Stalled)
                .await
                .map(|l| *l),
            Ok(Link::Up)
        );
        if !up || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The host and port of a `redis://host:port[/db]` URL.
pub fn upstream() -> String {
    let url = redis_url();
    let rest = url
        .strip_prefix("redis://")
        .expect("MCP_REDIS_URL is redis://host:port");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split('/').next().unwrap().to_owned()
}
