//! What a newcomer meets first, over the built binary (issue #42): `--help` and `--version`, a
//! mistake in the file shown where it is, and an upstream that cannot start reported by its
//! cause: `--check` exits 1 naming it (the server's last stderr lines, its exit status), a plain
//! run says it once at WARN.

use crate::support::*;

use std::path::PathBuf;
use std::process::{Command, Output};

/// A directory of the test's own, holding `proxy.toml` with `text`.
fn config(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("newcomer-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(PROXY)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn help_explains_every_flag_and_points_at_the_config_docs() {
    let help = run(&["--help"]);
    assert!(help.status.success(), "{}", text(&help));
    let printed = text(&help);
    for flag in [
        "--config <FILE>",
        "--check",
        "--ephemeral-keys",
        "--stdio",
        "--version",
    ] {
        assert!(printed.contains(flag), "{flag} missing: {printed}");
    }
    assert!(
        printed.contains("examples/proxy/filesystem.toml"),
        "{printed}"
    );
    assert!(
        printed.contains("Check the file against the upstream"),
        "{printed}"
    );
}

fn version_prints_the_version_and_commit_and_an_unknown_flag_exits_2() {
    let version = run(&["--version"]);
    assert!(version.status.success(), "{}", text(&version));
    // The crate's version and the commit it was built from (`build.rs`): in a git checkout its
    // HEAD; in a tree without git, `unknown`.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!(
            "elicitation-proxy {} (commit {head})",
            env!("CARGO_PKG_VERSION")
        )
    );
    let unknown = run(&["--config", "x.toml", "--bogus"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(text(&unknown).contains("--bogus"), "{}", text(&unknown));
}

fn a_toml_syntax_error_shows_the_line_with_a_caret() {
    let path = config(
        "syntax",
        "[upstream]\ncommand = [\"true\"]\n\n[[gate]]\ntools = [\"x\"\nmessage = \"m\"\n",
    );
    let output = run(&["--config", path.to_str().unwrap(), "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let printed = text(&output);
    let lines: Vec<&str> = printed.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.contains("proxy.toml:"))
        .unwrap_or_else(|| panic!("{printed}"));
    // The offending line, then a caret under it.
    let shown = lines.get(at + 1).copied().unwrap_or_default();
    let caret = lines.get(at + 2).copied().unwrap_or_default();
    assert!(
        shown.contains("message = \"m\"") || shown.contains("tools = [\"x\""),
        "{printed}"
    );
    assert_eq!(caret.trim(), "^", "{printed}");
}

fn a_form_type_mistake_names_the_files_key_and_the_allowed_types() {
    let entry = filesystem();
    let gates = "[[gate]]\ntools = [\"write_file\"]\nmessage = \"Write {path}?\"\n\
                 form.approve = { type = \"bool\" }\nrequire = { approve = true }\n";
    let setup = Setup::new("newcomer-form", &entry, free_port(), gates);
    let output = run(&["--config", setup.config.to_str().unwrap(), "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let printed = text(&output);
    assert!(printed.contains("`form.approve.type`"), "{printed}");
    assert!(
        !printed.contains("approval"),
        "the internal gate key: {printed}"
    );
    assert!(printed.contains("\"boolean\""), "{printed}");
}

fn check_exits_1_naming_a_command_that_cannot_start() {
    let path = config(
        "npxx",
        "[upstream]\ncommand = [\"npxx-not-a-command\", \"-y\", \"x\"]\n[state]\nephemeral_keys = true\n",
    );
    let output = run(&["--config", path.to_str().unwrap(), "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let printed = text(&output);
    assert!(
        printed.contains("cannot start \"npxx-not-a-command\": No such file or directory"),
        "{printed}"
    );
    assert_eq!(
        printed.matches("cannot start").count(),
        1,
        "once: {printed}"
    );
    assert!(!printed.contains("unix_wait_status"), "{printed}");
    // Served, not checked: the same cause, at once (not after the start timeout), and only it.
    let output = run(&["--config", path.to_str().unwrap(), "--ephemeral-keys"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let printed = text(&output);
    assert!(
        printed.contains(
            "elicitation-proxy: cannot start \"npxx-not-a-command\": No such file or directory"
        ),
        "{printed}"
    );
    assert!(!printed.contains("did not list its tools"), "{printed}");
}

fn check_names_the_servers_last_stderr_lines() {
    let server = "echo starting >&2; echo 'Error accessing directory /nope: ENOENT' >&2; exit 3";
    let path = config(
        "stderr",
        &format!(
            "[upstream]\ncommand = [\"sh\", \"-c\", {server:?}]\n[state]\nephemeral_keys = true\n"
        ),
    );
    let output = run(&["--config", path.to_str().unwrap(), "--check"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let printed = text(&output);
    let last = printed
        .lines()
        .find(|line| line.starts_with("elicitation-proxy:"))
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(
        last.contains("Error accessing directory /nope: ENOENT"),
        "{printed}"
    );
    assert!(last.contains("starting"), "{printed}");
    assert!(last.contains("exit status 3"), "{printed}");
}

async fn a_plain_run_warns_of_a_failed_start_once() {
    let server = "echo 'the data directory is missing' >&2; exit 1";
    let port = free_port();
    let path = config(
        "plain",
        &format!(
            "[upstream]\ncommand = [\"sh\", \"-c\", {server:?}]\n[listen]\nhttp = \"127.0.0.1:{port}\"\n[state]\nephemeral_keys = true\n"
        ),
    );
    let mut child = tokio::process::Command::new(PROXY)
        .args(["--config", path.to_str().unwrap()])
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let mut printed = Vec::new();
    // Read until the run gives up (its minute of asking), or 200 lines; the start is retried
    // several times meanwhile (back-off from 100 ms).
    while let Ok(Some(line)) = lines.next_line().await {
        printed.push(line);
        if printed.len() > 200 {
            break;
        }
    }
    let _ = child.kill().await;
    let all = printed.join("\n");
    let warned = printed
        .iter()
        .filter(|line| line.contains("WARN") && line.contains("the data directory is missing"))
        .count();
    assert_eq!(warned, 1, "{all}");
    assert!(all.contains("next_attempt_in"), "{all}");
    assert!(all.contains("starting upstream: sh -c"), "{all}");
}

crate::trials! {
    [] sync help_explains_every_flag_and_points_at_the_config_docs,
    [] sync version_prints_the_version_and_commit_and_an_unknown_flag_exits_2,
    [] sync a_toml_syntax_error_shows_the_line_with_a_caret,
    [Upstreams] sync a_form_type_mistake_names_the_files_key_and_the_allowed_types,
    [] sync check_exits_1_naming_a_command_that_cannot_start,
    [] sync check_names_the_servers_last_stderr_lines,
    [] current_thread a_plain_run_warns_of_a_failed_start_once,
}
