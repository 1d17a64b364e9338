//! The stdio transport: the child process spawned, framed (one JSON-RPC message a line),
//! restarted with back-off when it exits, killed when the adapter goes. Its lines are routed by
//! the [core](super::core).

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio as Pipe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::config::{FIRST_BACKOFF, STABLE_RUN, Stdio};
use super::core::{Core, Link, QUEUE, State, TARGET, handshake, lock, stopped};
use super::session::Negotiated;

/// How many of a server's last stderr lines a failed start reports, and how long each may be.
const KEPT_LINES: usize = 5;
const KEPT_LINE_CHARS: usize = 300;

/// How long a server that exited may take to finish writing its stderr before the report.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// The last lines the current child wrote on stderr (bounded), for the report of a failed start.
type Recent = Arc<Mutex<VecDeque<String>>>;

/// Starts the child (so that a command that cannot run is an error at once), then supervises it
/// in a task: handshake, restarts with back-off, and the kill when `shutdown` turns true.
pub(crate) fn start(
    core: &Arc<Core>,
    stdio: Stdio,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let child = spawn(&stdio)?;
    // Its events name the session (of a pool: `UpstreamBuilder::sessions`).
    let span = tracing::info_span!(target: TARGET, "session", session = core.session);
    tokio::spawn(supervise(Arc::clone(core), stdio, child, shutdown).instrument(span));
    Ok(())
}

fn spawn(stdio: &Stdio) -> std::io::Result<Child> {
    let mut command = Command::new(&stdio.command);
    if !stdio.inherit {
        command.env_clear();
        command.envs(std::env::vars_os().filter(|(name, _)| stdio.passes(name)));
    }
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

async fn supervise(
    core: Arc<Core>,
    stdio: Stdio,
    first: Child,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next = Some(first);
    let mut backoff = FIRST_BACKOFF;
    // The failed start last reported at WARN: the same cause again is reported quietly.
    let mut reported: Option<String> = None;
    loop {
        let child = match next.take() {
            Some(child) => Ok(child),
            None => spawn(&stdio),
        };
        let started = Instant::now();
        match child {
            Ok(child) => {
                if run(&core, child, &mut shutdown).await == Ended::Shutdown {
                    break;
                }
            }
            Err(error) => {
                let command = stdio.command.to_string_lossy();
                core.state
                    .send_replace(State::Down(format!("cannot start {command:?}: {error}")));
            }
        }
        if *shutdown.borrow() {
            break;
        }
        if started.elapsed() >= STABLE_RUN {
            backoff = FIRST_BACKOFF;
        }
        let down = match &*core.state.borrow() {
            State::Down(why) => Some(why.clone()),
            _ => None,
        };
        match down {
            Some(why) if reported.as_deref() != Some(why.as_str()) => {
                tracing::warn!(target: TARGET, next_attempt_in = ?backoff, "the server did not start: {why}");
                reported = Some(why);
            }
            Some(why) => {
                tracing::info!(target: TARGET, next_attempt_in = ?backoff, "the server did not start again: {why}");
            }
            None => {
                reported = None;
                tracing::info!(target: TARGET, ?backoff, "restarting the server");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stopped(&mut shutdown) => break,
        }
        backoff = (backoff * 2).min(core.settings.max_backoff);
    }
    core.connection_lost();
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
    let recent = Recent::default();
    let mut logs = tokio::spawn(log_lines(stderr, Arc::clone(&recent)).in_current_span());
    let reader =
        tokio::spawn(read_lines(Arc::clone(core), writer.clone(), stdout).in_current_span());

    let handshake = handshake(core, &writer);
    let negotiated = tokio::select! {
        negotiated = handshake => Some(negotiated),
        status = child.wait() => {
            // Its last words on stderr are the cause: let them arrive (bounded).
            let _ = tokio::time::timeout(STDERR_DRAIN, &mut logs).await;
            let lines: Vec<String> = lock(&recent).iter().cloned().collect();
            core.state.send_replace(State::Down(exited_before_handshake(&status, &lines)));
            None
        }
        () = stopped(shutdown) => return stop(core, child, reader).await,
    };
    let ended = match negotiated {
        Some(Ok(negotiated)) => {
            tracing::info!(target: TARGET, ?negotiated, "the server is ready");
            let link = Arc::new(Link::new(writer, negotiated));
            if let Negotiated::V2025 { version, .. } = &link.negotiated {
                tracing::info!(target: TARGET, %version, "a 2025-era server: one session held");
                Core::notify(&link, "notifications/initialized", json!({})).await;
            }
            core.state.send_replace(State::Ready(Arc::clone(&link)));
            tokio::select! {
                status = child.wait() => {
                    let status = match status {
                        Ok(status) => describe(status),
                        Err(error) => format!("its status unknown: {error}"),
                    };
                    tracing::warn!(target: TARGET, %status, "the server exited");
                    Ended::Exited
                }
                () = core.unresponsive(&link.writer) => {
                    tracing::warn!(target: TARGET, "the server hangs: restarting it");
                    Ended::Exited
                }
                () = stopped(shutdown) => Ended::Shutdown,
            }
        }
        Some(Err(why)) => {
            core.state
                .send_replace(State::Down(format!("its handshake failed: {why}")));
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

/// Kills the child (if it still runs), and ends its reader.
async fn stop(core: &Core, mut child: Child, reader: tokio::task::JoinHandle<()>) -> Ended {
    let _ = child.start_kill();
    let _ = child.wait().await;
    reader.abort();
    let _ = reader.await;
    core.connection_lost();
    Ended::Shutdown
}

async fn write_lines(mut stdin: ChildStdin, mut queue: mpsc::Receiver<Value>) {
    while let Some(message) = queue.recv().await {
        let mut line = serde_json::to_vec(&message).unwrap_or_default();
        line.push(b'\n');
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

/// The longest stderr line logged whole: the rest of a longer one is skipped (and said so), so a
/// server writing without newlines holds at most this much of the adapter's memory.
pub(crate) const MAX_STDERR_LINE: usize = 8 * 1024;

/// Logs each stderr line (bounded), keeping the last few for the report of a failed start.
async fn log_lines(stderr: impl AsyncRead + Unpin, recent: Recent) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        if read_piece(&mut reader, &mut line).await == 0 {
            return;
        }
        let whole = line.ends_with(b"\n");
        let text = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
        if whole {
            tracing::info!(target: TARGET, stderr = %text, "server stderr");
        } else {
            tracing::info!(target: TARGET, stderr = %text, limit = MAX_STDERR_LINE, "server stderr (a longer line, cut)");
        }
        let kept = text.trim();
        if !kept.is_empty() {
            let mut recent = lock(&recent);
            if recent.len() == KEPT_LINES {
                recent.pop_front();
            }
            recent.push_back(kept.chars().take(KEPT_LINE_CHARS).collect());
        }
        if whole {
            continue;
        }
        // Skip the rest of that line, a bounded piece at a time.
        loop {
            if read_piece(&mut reader, &mut line).await == 0 {
                return;
            }
            if line.ends_with(b"\n") {
                break;
            }
        }
    }
}

/// Reads into `line` (cleared first) up to and with the next newline, at most
/// [`MAX_STDERR_LINE`] bytes; how many, 0 at the end of the stream or on an error.
async fn read_piece(reader: &mut (impl AsyncBufRead + Unpin), line: &mut Vec<u8>) -> usize {
    line.clear();
    reader
        .take(MAX_STDERR_LINE as u64)
        .read_until(b'\n', line)
        .await
        .unwrap_or(0)
}

/// Why a server that exited before its handshake did not start: its last stderr line first
/// (the cause, as a rule), the lines before it, then how it ended.
fn exited_before_handshake(status: &std::io::Result<ExitStatus>, lines: &[String]) -> String {
    let ended = match status {
        Ok(status) => describe(*status),
        Err(error) => format!("its status unknown: {error}"),
    };
    match lines.split_last() {
        None => {
            format!("the server exited before its handshake ({ended}), writing nothing on stderr")
        }
        Some((last, [])) => format!("{last} (the server exited before its handshake, {ended})"),
        Some((last, earlier)) => format!(
            "{last} (the server exited before its handshake, {ended}; before that on its stderr: {})",
            earlier.join(" | ")
        ),
    }
}

/// An exit status as a person reads it: `exit status 127`, or `killed by SIGKILL (signal 9)`.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal: Option<i32> = None;
    match signal {
        Some(signal) => match signal_name(signal) {
            Some(name) => format!("killed by {name} (signal {signal})"),
            None => format!("killed by signal {signal}"),
        },
        None => "no exit status".to_owned(),
    }
}

/// The name of a common POSIX signal.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

async fn read_lines(core: Arc<Core>, writer: mpsc::Sender<Value>, stdout: impl AsyncRead + Unpin) {
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
                        Ok(0) | Err(_) => return core.connection_lost(),
                        Ok(_) => ended = rest.ends_with(b"\n"),
                    }
                }
            }
            Ok(_) => {
                let text = line.trim_ascii();
                if !text.is_empty() {
                    core.route_bytes(&writer, text, None).await;
                }
            }
        }
    }
    core.connection_lost();
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn environment_of(stdio: &Stdio) -> String {
        let mut child = spawn(stdio).unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        let _ = child.wait().await;
        out
    }

    /// `CARGO` is in the environment of every test `cargo test` runs, and in no allow-list.
    #[tokio::test]
    async fn the_child_gets_the_base_variables_and_the_named_ones_only() {
        assert!(std::env::var_os("CARGO").is_some(), "run under cargo test");
        let env = environment_of(&Stdio::new("env").env("SET_HERE", "1")).await;
        let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
        assert!(names.contains(&"PATH"), "{env}");
        assert!(names.contains(&"SET_HERE"), "{env}");
        assert!(!names.contains(&"CARGO"), "{env}");

        let passed = environment_of(&Stdio::new("env").pass_env("CARGO")).await;
        assert!(passed.lines().any(|l| l.starts_with("CARGO=")), "{passed}");
        let inherited = environment_of(&Stdio::new("env").inherit_env()).await;
        assert!(
            inherited.lines().any(|l| l.starts_with("CARGO=")),
            "{inherited}"
        );
    }

    #[tokio::test]
    async fn a_stderr_line_without_end_is_read_a_bounded_piece_at_a_time() {
        // 1 MiB without a newline, then a line: the reader ends (no hang, no unbounded buffer).
        let mut data = vec![b'x'; 1 << 20];
        data.extend_from_slice(b"\nlast\n");
        log_lines(&data[..], Recent::default()).await;
    }
}
