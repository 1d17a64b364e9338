//! The real Redis the Redis tests use (`MCP_REDIS_URL`, else 127.0.0.1:6379): its URL, a key
//! prefix no other test uses, and a TCP proxy to it whose link a test controls (an outage without
//! touching the shared server). Used by `single_use` and `bridge_redis`.
//!
//! Whether a Redis answers is probed once per process ([`available`]): `tests/services`' harness
//! asks before any test runs, and reports each Redis test as ignored without one (failed with
//! `MCP_REQUIRE_REDIS=1`, as CI sets).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("MCP_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// How long the probe waits for Redis to accept a connection and to answer `PING`.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// Whether a Redis answers at [`redis_url`]: probed once per process (a connection and a `PING`,
/// each within 300 ms), the answer kept.
pub fn available() -> bool {
    static ANSWERS: OnceLock<bool> = OnceLock::new();
    *ANSWERS.get_or_init(|| probe(&upstream()))
}

/// Whether something at `host:port` answers a Redis `PING` (`+PONG`, or an error such as
/// `-NOAUTH`: a Redis all the same).
fn probe(host_port: &str) -> bool {
    let Ok(addrs) = host_port.to_socket_addrs() else {
        return false;
    };
    addrs.into_iter().any(|addr| {
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
            return false;
        };
        let mut reply = [0u8; 1];
        stream.set_read_timeout(Some(PROBE_TIMEOUT)).is_ok()
            && stream.set_write_timeout(Some(PROBE_TIMEOUT)).is_ok()
            && stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && matches!(reply[0], b'+' | b'-')
    })
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

/// Deletes every key this process's [`prefix`]es named (`te-test:<pid>:*`), once its tests are
/// done: the stores' epoch keys (`…epoch`) have no TTL by design (their absence means Redis lost
/// its data), so without this each run would leave them behind. Returns how many it deleted;
/// `None` when Redis did not answer (nothing to clean then).
pub fn delete_this_process_keys() -> Option<u64> {
    const SCRIPT: &str = "local n = 0 for _, key in ipairs(redis.call('KEYS', ARGV[1])) do \
        redis.call('DEL', key) n = n + 1 end return n";
    let pattern = format!("te-test:{}:*", std::process::id());
    let command =
        ["EVAL", SCRIPT, "0", &pattern]
            .iter()
            .fold(String::from("*4\r\n"), |mut out, arg| {
                out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
                out
            });
    let addr = upstream().to_socket_addrs().ok()?.next()?;
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut reply = [0u8; 64];
    let n = stream.read(&mut reply).ok()?;
    let reply = std::str::from_utf8(&reply[..n]).ok()?;
    reply.strip_prefix(':')?.trim_end().parse().ok()
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
