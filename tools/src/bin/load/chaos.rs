//! `--chaos`: a Redis of the run's own, stopped, frozen and restarted empty while two replicas
//! serve the load.
//!
//! The Redis is a `redis-server` child on a free loopback port, with its data in a temporary
//! directory. It appends every write to disk before it answers (`appendfsync always`), so a Redis
//! that was stopped comes back with its data, as a persistent deployment does, and `noeviction`
//! is its policy, as the `redis` module docs require. Its three faults, in order, each after
//! [`STEADY`] of healthy load:
//!
//! 1. **stopped**: killed, down for [`OUTAGE`], started again on its data;
//! 2. **frozen**: `SIGSTOP` for [`OUTAGE`] (connections open, nothing answered), then `SIGCONT`;
//! 3. **restarted empty**: killed and started at once on an empty directory, as a Redis without
//!    persistence comes back: every spent token id, URL flow and session is gone.
//!
//! After each fault the run waits for a flow that *began* after Redis was back to complete (every
//! flow touches both replicas, so both have recovered), and reports how long that took: the
//! recovery time. A fault not recovered from within [`RECOVERY_LIMIT`] fails the run.
//!
//! Starting and signalling a process is blocking work, so the timeline runs on a thread of its
//! own ([`drive`]); the flows run on the runtime and report each success into [`Successes`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Healthy load before each fault, and after the last one.
pub(crate) const STEADY: Duration = Duration::from_secs(3);
/// How long Redis stays stopped, and frozen.
pub(crate) const OUTAGE: Duration = Duration::from_secs(3);
/// How long a replica may take to serve a whole flow again once Redis is back.
pub(crate) const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

/// The flows that completed: when each began and when it ended.
pub(crate) type Successes = Mutex<Vec<(Instant, Instant)>>;

/// A fault, and how long the replicas took to complete a flow once Redis was back.
pub(crate) struct Recovery {
    pub(crate) fault: &'static str,
    pub(crate) took: Duration,
}

/// A `redis-server` child of this run's own. Killed, and its directory removed, on drop.
pub(crate) struct OwnRedis {
    binary: String,
    port: u16,
    base: PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts `binary` (e.g. `redis-server`) on a free loopback port and waits until it answers.
    pub(crate) fn start(binary: &str) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let base = std::env::temp_dir().join(format!("load-chaos-{}-{port}", std::process::id()));
        let mut redis = Self {
            binary: binary.to_owned(),
            port,
            base,
            child: None,
        };
        redis.spawn(true)?;
        Ok(redis)
    }

    /// The URL the replicas connect to.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn data(&self) -> PathBuf {
        self.base.join("data")
    }

    /// Starts the server, on an empty directory when `empty`, and waits until it answers PING.
    fn spawn(&mut self, empty: bool) -> Result<(), String> {
        let data = self.data();
        if empty {
            let _ = std::fs::remove_dir_all(&data);
        }
        std::fs::create_dir_all(&data)
            .map_err(|e| format!("cannot create {}: {e}", data.display()))?;
        let log = self.base.join("redis.log");
        let child = Command::new(&self.binary)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&data)
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .args(["--maxmemory-policy", "noeviction", "--logfile"])
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {}: {e} (install Redis, or give --redis-server PATH)",
                    self.binary
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if answers_ping(self.port) {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!(
                    "redis-server exited ({status}); see {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "redis-server did not answer PING within 10 s; see {}",
            log.display()
        ))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: &str) -> Result<(), String> {
        let pid = self
            .child
            .as_ref()
            .ok_or("redis-server is not running")?
            .id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .map_err(|e| format!("cannot run kill: {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("kill -{signal} {pid} failed: {status}"))
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // A frozen server would not die of SIGKILL's reaping until continued.
        let _ = self.signal("CONT");
        self.kill();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Whether a Redis on `port` answers `PING` with `PONG` (not, say, `-LOADING`).
fn answers_ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut tcp) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_millis(200)));
    let mut answer = [0u8; 7];
    tcp.write_all(b"PING\r\n").is_ok()
        && tcp.read_exact(&mut answer).is_ok()
        && &answer == b"+PONG\r\n"
}

/// Runs the timeline against `redis` while the flows run, and returns each fault's recovery.
///
/// # Errors
///
/// A fault that could not be made (the server would not start again, a signal failed), or one
/// the replicas did not recover from within [`RECOVERY_LIMIT`].
pub(crate) fn drive(redis: &mut OwnRedis, successes: &Successes) -> Result<Vec<Recovery>, String> {
    let mut recoveries = Vec::new();
    for fault in ["stopped", "frozen", "restarted empty"] {
        std::thread::sleep(STEADY);
        match fault {
            "stopped" => {
                redis.kill();
                std::thread::sleep(OUTAGE);
                redis.spawn(false)?;
            }
            "frozen" => {
                redis.signal("STOP")?;
                std::thread::sleep(OUTAGE);
                redis.signal("CONT")?;
            }
            _ => {
                redis.kill();
                redis.spawn(true)?;
            }
        }
        let back = Instant::now();
        let took = loop {
            let first = successes
                .lock()
                .map_err(|_| "a flow panicked")?
                .iter()
                .filter(|(began, _)| *began >= back)
                .map(|(_, ended)| *ended)
                .min();
            if let Some(ended) = first {
                break ended.duration_since(back);
            }
            if back.elapsed() > RECOVERY_LIMIT {
                return Err(format!(
                    "no flow begun after Redis was {fault} completed within {} s: a replica did \
                     not recover on its own",
                    RECOVERY_LIMIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        recoveries.push(Recovery { fault, took });
    }
    std::thread::sleep(STEADY);
    Ok(recoveries)
}
