//! `elicitation-proxy --supervise -- COMMAND…`: what a command upstream runs as, so that the
//! server never outlives the proxy, even one killed with SIGKILL mid-call (which runs no code of
//! the proxy's, and whose closed pipes a server busy with a call does not notice).
//!
//! The supervisor is a small process of the proxy's own binary between the proxy and the
//! server. It starts the server with `PR_SET_PDEATHSIG` = SIGKILL (through `rustix`), set from
//! its single thread (the signal follows the *thread* that forked, so the proxy's own
//! runtime threads, which come and go, cannot be the parent); the server shares the
//! supervisor's stdin, stdout and stderr, so the proxy speaks to it directly. The supervisor
//! watches its own parent: when the proxy is gone (the supervisor is re-parented) it kills the
//! server and ends; when the proxy kills the supervisor (a restart, a shutdown) the server gets
//! SIGKILL from the kernel; when the server ends, the supervisor ends with its status, and the
//! proxy sees its server exit as before.

/// Whether `program` can be run: found (on `path`, the `PATH` the server gets, when it names no
/// directory; else at `program`, under `cwd` when relative), a file, executable. Checked before
/// the server is started, so that a command that cannot run is told once, at once, by its
/// cause, rather than by each restart of it.
///
/// # Errors
///
/// `cannot start "PROGRAM": …`, saying why.
pub fn runnable(
    program: &str,
    cwd: Option<&std::path::Path>,
    path: Option<&std::ffi::OsStr>,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |candidate: &std::path::Path| {
        std::fs::metadata(candidate).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = match cwd {
            Some(cwd) if !program.starts_with('/') => cwd.join(program),
            _ => std::path::PathBuf::from(program),
        };
        return match executable(&candidate) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "{CANNOT_START} {program:?}: it is not an executable file"
            )),
            Err(error) => Err(format!("{CANNOT_START} {program:?}: {error}")),
        };
    }
    let found = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .any(|dir| executable(&dir.join(program)).unwrap_or(false));
    if found {
        Ok(())
    } else {
        Err(format!(
            "{CANNOT_START} {program:?}: No such file or directory (not found on the PATH the server gets)"
        ))
    }
}

/// What the supervisor says when the server's command cannot be run at all (no such file, not
/// executable): the proxy gives up at once on a first start that says it, rather than wait out
/// the start timeout.
pub const CANNOT_START: &str = "cannot start";

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// How often the supervisor looks at its parent and its child.
const EVERY: Duration = Duration::from_millis(100);

/// Runs `command` (program and arguments) supervised; the exit code is the server's.
pub fn run(command: &[String]) -> ExitCode {
    let Some((program, args)) = command.split_first() else {
        eprintln!("elicitation-proxy --supervise: no command given after --");
        return ExitCode::from(2);
    };
    let parent = std::os::unix::process::parent_id();
    let me = std::process::id();
    let mut server = Command::new(program);
    server.args(args);
    // SAFETY: between fork and exec the closure calls only prctl(2) and getppid(2), both
    // async-signal-safe, and allocates nothing (the supervisor is single-threaded besides).
    unsafe {
        server.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The supervisor died before the prctl: no signal would come.
            if rustix::process::getppid().map(|p| p.as_raw_pid() as u32) != Some(me) {
                return Err(std::io::ErrorKind::NotFound.into());
            }
            Ok(())
        });
    }
    let mut child = match server.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("elicitation-proxy --supervise: {CANNOT_START} {program:?}: {error}");
            return ExitCode::from(127);
        }
    };
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let code = status
                    .code()
                    .or_else(|| status.signal().map(|signal| 128 + signal))
                    .unwrap_or(1);
                return ExitCode::from(u8::try_from(code).unwrap_or(1));
            }
            Ok(None) => {}
            Err(error) => {
                eprintln!("elicitation-proxy --supervise: cannot watch the server: {error}");
                let _ = child.kill();
                return ExitCode::FAILURE;
            }
        }
        if std::os::unix::process::parent_id() != parent {
            // The proxy is gone: so is its server.
            let _ = child.kill();
            let _ = child.wait();
            return ExitCode::FAILURE;
        }
        std::thread::sleep(EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_cannot_run_is_told_by_its_cause() {
        let path = std::ffi::OsString::from("/usr/bin:/bin");
        assert_eq!(runnable("sh", None, Some(&path)), Ok(()));
        let missing = runnable("npxx-not-a-command", None, Some(&path)).unwrap_err();
        assert!(
            missing.starts_with("cannot start \"npxx-not-a-command\": No such file or directory"),
            "{missing}"
        );
        let absolute = runnable("/path/no-such-server", None, Some(&path)).unwrap_err();
        assert!(absolute.contains("No such file or directory"), "{absolute}");
        let plain = std::env::temp_dir().join(format!("te-not-executable-{}", std::process::id()));
        std::fs::write(&plain, "not a program").unwrap();
        let not_executable = runnable(plain.to_str().unwrap(), None, Some(&path)).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(
            not_executable.contains("not an executable file"),
            "{not_executable}"
        );
    }
}
