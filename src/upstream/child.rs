//! The child process: spawned, framed (one JSON-RPC message a line), restarted with back-off when
//! it exits, killed when the adapter goes. Its messages are routed here: responses to the call
//! waiting on their id, server-to-client requests to the call that holds the floor.

use std::collections::HashMap;
use std::process::Stdio as Pipe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Semaphore, mpsc, watch};

use super::config::Era;
use super::config::{FIRST_BACKOFF, MAX_BACKOFF, STABLE_RUN, Settings};
use super::parked::{Event, ParkedCalls};
use super::session::{Negotiated, client_capabilities, speaks_mrtr};
use crate::bridge::convert;
use crate::bridge::convert::LEGACY_VERSIONS;
use crate::wire::jsonrpc::INTERNAL_ERROR;
use crate::wire::mcp::MRTR_VERSION;

/// `METHOD_NOT_FOUND`: what a server-to-client request no call can take is answered.
const METHOD_NOT_FOUND: i64 = -32601;
/// How many messages wait for the child's stdin, and for one call, before back-pressure.
const QUEUE: usize = 256;

/// Where the adapter stands with the child.
#[derive(Clone, Debug)]
pub(crate) enum State {
    Starting,
    Ready(Arc<Link>),
    Down(String),
    Stopped,
}

/// A running, handshaken child: where to write, and what it is.
#[derive(Debug)]
pub(crate) struct Link {
    writer: mpsc::Sender<Bytes>,
    pub(crate) negotiated: Negotiated,
}

impl Link {
    /// Writes one message (a line).
    pub(crate) async fn send(&self, message: &Value) -> bool {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.writer.send(Bytes::from(line)).await.is_ok()
    }

    /// Writes one message if the queue has room (from a `Drop`, or a timer); else it is lost.
    pub(crate) fn send_now(&self, message: &Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let _ = self.writer.try_send(Bytes::from(line));
    }
}

/// Everything the service's clones and the child's tasks share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) settings: Settings,
    next_id: AtomicU64,
    waiters: Mutex<HashMap<u64, mpsc::Sender<Event>>>,
    /// The upstream id of the call that takes server-to-client requests now.
    floor_holder: Mutex<Option<u64>>,
    /// One call at a time may be asked questions by a 2025-era upstream: its requests name no
    /// call, so only the one running call can be their author.
    pub(crate) floor: Arc<Semaphore>,
    pub(crate) in_flight: Arc<Semaphore>,
    pub(crate) state: watch::Sender<State>,
    pub(crate) parked: ParkedCalls,
}

impl Core {
    pub(crate) fn new(settings: Settings) -> Arc<Self> {
        let max_in_flight = settings.max_in_flight.max(1);
        let max_parked = settings.max_parked;
        Arc::new(Self {
            settings,
            next_id: AtomicU64::new(1),
            waiters: Mutex::default(),
            floor_holder: Mutex::default(),
            floor: Arc::new(Semaphore::new(1)),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            state: watch::Sender::new(State::Starting),
            parked: ParkedCalls::new(max_parked),
        })
    }

    /// A fresh JSON-RPC id for a request to the child, and the channel its events come on.
    pub(crate) fn register(&self) -> (u64, mpsc::Receiver<Event>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(QUEUE);
        lock(&self.waiters).insert(id, tx);
        (id, rx)
    }

    /// Forgets the call `id` (answered, given up, or expired).
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.waiters).remove(&id);
        let mut holder = lock(&self.floor_holder);
        if *holder == Some(id) {
            *holder = None;
        }
    }

    /// Makes `id` the call the child's requests go to (`None`: no call).
    pub(crate) fn hold_floor(&self, id: Option<u64>) {
        *lock(&self.floor_holder) = id;
    }

    /// The running link, waiting for a start in progress (bounded by the start timeout).
    pub(crate) async fn link(&self) -> Result<Arc<Link>, String> {
        let mut state = self.state.subscribe();
        let wait = state.wait_for(|s| !matches!(s, State::Starting));
        match tokio::time::timeout(self.settings.start_timeout, wait).await {
            Err(_) => Err("it is still starting".to_owned()),
            Ok(Err(_)) => Err("it was shut down".to_owned()),
            Ok(Ok(state)) => match &*state {
                State::Ready(link) => Ok(Arc::clone(link)),
                State::Down(why) => Err(why.clone()),
                State::Stopped => Err("it was shut down".to_owned()),
                State::Starting => Err("it is still starting".to_owned()),
            },
        }
    }

    /// Routes one line from the child.
    async fn route(&self, link: &mpsc::Sender<Bytes>, line: &[u8]) {
        let message: Map<String, Value> = match serde_json::from_slice(line) {
            Ok(Value::Object(message)) => message,
            _ => {
                tracing::warn!(target: TARGET, "the server wrote a line that is not a JSON-RPC message");
                return;
            }
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method.as_deref(), message.get("id")) {
            (Some(method), Some(id)) => {
                let id = id.clone();
                if method == "ping" {
                    write(link, &convert::response(&id, Ok(json!({})))).await;
                    return;
                }
                let holder = *lock(&self.floor_holder);
                let waiter = holder.and_then(|h| lock(&self.waiters).get(&h).cloned());
                let delivered = match waiter {
                    Some(waiter) => waiter.try_send(Event::Request(message)).is_ok(),
                    None => false,
                };
                if !delivered {
                    tracing::debug!(target: TARGET, method, "a server-to-client request outside any call: refused");
                    let error = convert::error(
                        METHOD_NOT_FOUND,
                        "no call is running that could carry this request to the client",
                    );
                    write(link, &convert::response(&id, Err(error))).await;
                }
            }
            (Some(method), None) => match method {
                "notifications/message" => {
                    let params = message.get("params").cloned().unwrap_or(Value::Null);
                    tracing::info!(target: TARGET, %params, "the server logged");
                }
                _ => tracing::debug!(target: TARGET, method, "a notification from the server"),
            },
            (None, Some(id)) => {
                let waiter = id.as_u64().and_then(|id| lock(&self.waiters).remove(&id));
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.try_send(Event::Response(message));
                    }
                    None => tracing::debug!(target: TARGET, %id, "a response no call waits for"),
                }
            }
            (None, None) => {
                tracing::warn!(target: TARGET, "the server wrote a message without method or id");
            }
        }
    }

    /// Every call in flight learns that the child exited; parked calls are gone with it.
    fn child_exited(&self) {
        // New requests wait for the restart rather than write to a closed pipe.
        self.state.send_if_modified(|state| {
            let ready = matches!(state, State::Ready(_));
            if ready {
                *state = State::Starting;
            }
            ready
        });
        let waiters = std::mem::take(&mut *lock(&self.waiters));
        for waiter in waiters.into_values() {
            let _ = waiter.try_send(Event::Exited);
        }
        self.hold_floor(None);
        self.parked.clear();
    }

    /// A request of the adapter's own (the handshake), answered or not within the start timeout.
    pub(crate) async fn ask(
        &self,
        link: &mpsc::Sender<Bytes>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        let (id, mut events) = self.register();
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        write(link, &request).await;
        let outcome = tokio::time::timeout(self.settings.start_timeout, events.recv()).await;
        self.forget(id);
        match outcome {
            Ok(Some(Event::Response(mut response))) => match response.remove("result") {
                Some(result) => Ok(result),
                None => Err(response.remove("error").unwrap_or(Value::Null)),
            },
            Ok(_) => Err(json!("the server exited")),
            Err(_) => Err(json!("no answer in time")),
        }
    }

    /// Tells the child about a notification of the adapter's own.
    pub(crate) async fn notify(link: &Link, method: &str, params: Value) {
        link.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }
}

/// The target of the adapter's `tracing` events.
pub(crate) const TARGET: &str = "tower_elicitation::upstream";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

async fn write(link: &mpsc::Sender<Bytes>, message: &Value) {
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    let _ = link.send(Bytes::from(line)).await;
}

/// `server/discover`, then `initialize` (unless the era is pinned).
async fn handshake(core: &Core, link: &mpsc::Sender<Bytes>) -> Result<Negotiated, String> {
    let era = core.settings.era;
    if era != Era::Legacy {
        let meta = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MRTR_VERSION}});
        match core.ask(link, "server/discover", meta).await {
            Ok(discovered) if speaks_mrtr(&discovered) => return Ok(Negotiated::Mrtr),
            Ok(_) | Err(_) if era == Era::Mrtr => {
                return Err("it did not answer server/discover as a 2026-07-28 server".to_owned());
            }
            _ => {}
        }
    }
    let (name, version) = &core.settings.client_info;
    let params = json!({
        "protocolVersion": LEGACY_VERSIONS[0],
        "capabilities": client_capabilities(),
        "clientInfo": {"name": name, "version": version},
    });
    let initialized = core
        .ask(link, "initialize", params)
        .await
        .map_err(|error| format!("it refused initialize ({error})"))?;
    let version = initialized
        .get("protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .ok_or_else(|| {
            format!(
                "it answered initialize with a protocol version the adapter does not speak ({})",
                initialized.get("protocolVersion").unwrap_or(&Value::Null)
            )
        })?
        .to_owned();
    Ok(Negotiated::Legacy {
        version,
        initialized,
    })
}

/// Starts the child (so that a command that cannot run is an error at once), then supervises it
/// in a task: handshake, restarts with back-off, and the kill when `shutdown` turns true.
pub(crate) fn start(core: &Arc<Core>, shutdown: watch::Receiver<bool>) -> std::io::Result<()> {
    let child = spawn(&core.settings)?;
    tokio::spawn(supervise(Arc::clone(core), child, shutdown));
    Ok(())
}

fn spawn(settings: &Settings) -> std::io::Result<Child> {
    let stdio = &settings.stdio;
    let mut command = Command::new(&stdio.command);
    command
        .args(&stdio.args)
        .envs(stdio.env.iter().map(|(k, v)| (k, v)))
        .stdin(Pipe::piped())
        .stdout(Pipe::piped())
        .stderr(Pipe::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &stdio.cwd {
        command.current_dir(cwd);
    }
    command.spawn()
}

async fn supervise(core: Arc<Core>, first: Child, mut shutdown: watch::Receiver<bool>) {
    let mut next = Some(first);
    let mut backoff = FIRST_BACKOFF;
    loop {
        let child = match next.take() {
            Some(child) => Ok(child),
            None => spawn(&core.settings),
        };
        let started = Instant::now();
        match child {
            Ok(child) => {
                if run(&core, child, &mut shutdown).await == Ended::Shutdown {
                    break;
                }
            }
            Err(error) => {
                tracing::error!(target: TARGET, %error, "the server could not be started");
                core.state
                    .send_replace(State::Down(format!("it could not be started ({error})")));
            }
        }
        if *shutdown.borrow() {
            break;
        }
        if started.elapsed() >= STABLE_RUN {
            backoff = FIRST_BACKOFF;
        }
        tracing::info!(target: TARGET, ?backoff, "restarting the server");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stopped(&mut shutdown) => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    core.child_exited();
    core.state.send_replace(State::Stopped);
}

#[derive(PartialEq, Eq)]
enum Ended {
    Exited,
    Shutdown,
}

/// One child's life: framing tasks, the handshake, then waiting for its exit or the shutdown.
async fn run(core: &Arc<Core>, mut child: Child, shutdown: &mut watch::Receiver<bool>) -> Ended {
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Ended::Exited;
    };
    core.state.send_replace(State::Starting);
    let (writer, queue) = mpsc::channel(QUEUE);
    tokio::spawn(write_lines(stdin, queue));
    tokio::spawn(log_lines(stderr));
    let reader = tokio::spawn(read_lines(Arc::clone(core), writer.clone(), stdout));

    let handshake = handshake(core, &writer);
    let negotiated = tokio::select! {
        negotiated = handshake => Some(negotiated),
        status = child.wait() => {
            tracing::warn!(target: TARGET, ?status, "the server exited before its handshake");
            None
        }
        () = stopped(shutdown) => return stop(core, child, reader).await,
    };
    let ended = match negotiated {
        Some(Ok(negotiated)) => {
            tracing::info!(target: TARGET, ?negotiated, "the server is ready");
            let link = Arc::new(Link { writer, negotiated });
            if let Negotiated::Legacy { version, .. } = &link.negotiated {
                tracing::info!(target: TARGET, %version, "a 2025-era server: one session held");
                Core::notify(&link, "notifications/initialized", json!({})).await;
            }
            core.state.send_replace(State::Ready(link));
            tokio::select! {
                status = child.wait() => {
                    tracing::warn!(target: TARGET, ?status, "the server exited");
                    Ended::Exited
                }
                () = stopped(shutdown) => Ended::Shutdown,
            }
        }
        Some(Err(why)) => {
            tracing::error!(target: TARGET, %why, "the server's handshake failed");
            core.state.send_replace(State::Down(why));
            Ended::Exited
        }
        None => Ended::Exited,
    };
    if ended == Ended::Shutdown {
        return stop(core, child, reader).await;
    }
    if !matches!(&*core.state.borrow(), State::Down(_)) {
        core.state.send_replace(State::Starting);
    }
    stop(core, child, reader).await;
    ended
}

/// Resolves once the adapter is shut down (its last clone dropped, or `shutdown`).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Kills the child (if it still runs), and ends its reader.
async fn stop(core: &Core, mut child: Child, reader: tokio::task::JoinHandle<()>) -> Ended {
    let _ = child.start_kill();
    let _ = child.wait().await;
    reader.abort();
    let _ = reader.await;
    core.child_exited();
    Ended::Shutdown
}

async fn write_lines(mut stdin: ChildStdin, mut queue: mpsc::Receiver<Bytes>) {
    while let Some(line) = queue.recv().await {
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

async fn log_lines(stderr: impl AsyncRead + Unpin) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: TARGET, stderr = %line, "server stderr");
    }
}

async fn read_lines(core: Arc<Core>, writer: mpsc::Sender<Bytes>, stdout: impl AsyncRead + Unpin) {
    let limit = core.settings.max_message_bytes as u64;
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(limit + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() as u64 > limit => {
                tracing::error!(target: TARGET, limit, "the server wrote a message over the bound: skipped");
                // Skip the rest of that line, a bounded piece at a time.
                let mut rest = Vec::new();
                let mut ended = line.ends_with(b"\n");
                while !ended {
                    rest.clear();
                    match (&mut reader)
                        .take(64 * 1024)
                        .read_until(b'\n', &mut rest)
                        .await
                    {
                        Ok(0) | Err(_) => return core.child_exited(),
                        Ok(_) => ended = rest.ends_with(b"\n"),
                    }
                }
            }
            Ok(_) => {
                let text = line.trim_ascii();
                if !text.is_empty() {
                    core.route(&writer, text).await;
                }
            }
        }
    }
    core.child_exited();
}

/// A JSON-RPC error for a call the child could not finish.
pub(crate) fn failure(message: &str) -> Value {
    convert::error(INTERNAL_ERROR, message)
}
