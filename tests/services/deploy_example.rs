//! The built `deploy` example as a newcomer runs it (issue #42 item 5): on a busy port it names
//! the address and `MCP_ADDR` and exits 1; its output piped (not a terminal) has no ANSI colour
//! codes. The example is built first with the `cargo` that runs the tests.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The bound on the example's start.
const START: Duration = Duration::from_secs(120);

/// `cargo build --example deploy` (a no-op when it is fresh); the binary's path.
fn deploy() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", "deploy"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example deploy: {status}");
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary is in target/<profile>/deps");
    profile.join(format!("examples/deploy{}", std::env::consts::EXE_SUFFIX))
}

/// The example's command on `addr`, without the environment that would change what it does.
fn command(addr: &str) -> Command {
    let mut command = Command::new(deploy());
    command
        .env("MCP_ADDR", addr)
        .env_remove("MCP_REDIS_URL")
        .env_remove("MCP_REQUEST_STATE_KEYS")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

fn a_busy_port_is_named_with_mcp_addr_and_exits_1() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = busy.local_addr().unwrap().to_string();
    let Output { status, stderr, .. } = command(&addr).output().expect("deploy runs");
    let stderr = String::from_utf8_lossy(&stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(stderr.contains("MCP_ADDR"), "{stderr}");
    assert!(
        !stderr.contains("Os {"),
        "no Debug of the io::Error: {stderr}"
    );
}

fn piped_output_has_no_ansi_codes_and_says_how_the_retry_is_sent() {
    let mut child = command("127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("deploy starts");
    let stdout = child.stdout.take().unwrap();
    let (lines, read) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut printed = Vec::new();
    let outcome = loop {
        match read.recv_timeout(START) {
            Ok(line) => {
                let last = line.contains("its answer is input_required");
                printed.push(line);
                if last {
                    break Ok(());
                }
            }
            Err(error) => break Err(error),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let printed = printed.join("\n");
    outcome.unwrap_or_else(|error| panic!("deploy printed its retry line ({error}): {printed}"));
    assert!(
        printed.contains("MCP endpoint"),
        "its log line too: {printed}"
    );
    assert!(printed.contains("curl -sS"), "{printed}");
    assert!(printed.contains("requestState"), "{printed}");
    assert!(
        !printed.contains("\x1b["),
        "no ANSI codes when piped: {printed:?}"
    );
}

crate::trials! {
    [] sync a_busy_port_is_named_with_mcp_addr_and_exits_1,
    [] sync piped_output_has_no_ansi_codes_and_says_how_the_retry_is_sent,
}
