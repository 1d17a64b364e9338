//! Names the commit this binary was built from, for `--version`
//! (`ELICITATION_PROXY_COMMIT`): the commit `cargo package` recorded in `.cargo_vcs_info.json`
//! when built from the published crate (`cargo install elicitation-proxy`), git's `HEAD` when
//! built from a checkout, `unknown` otherwise. No build dependencies: the one field is read with a
//! string search, since `cargo package` writes that file in a fixed shape.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = from_package()
        .or_else(from_checkout)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=ELICITATION_PROXY_COMMIT={commit}");
}

/// The commit in `.cargo_vcs_info.json` (`"sha1": "…"`), shortened as git's `--short=12` would.
fn from_package() -> Option<String> {
    let text = std::fs::read_to_string(".cargo_vcs_info.json").ok()?;
    let (_, after) = text.split_once("\"sha1\"")?;
    let sha = after.split('"').nth(1)?;
    let short: String = sha.chars().take(12).collect();
    (short.len() == 12 && short.chars().all(|c| c.is_ascii_hexdigit())).then_some(short)
}

/// `git rev-parse --short=12 HEAD`, and the files whose change moves it, so a new commit rebuilds.
fn from_checkout() -> Option<String> {
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .unwrap_or_else(|| git_dir.clone());
    let mut watched = vec![
        Path::new(&git_dir).join("HEAD"),
        Path::new(&common).join("packed-refs"),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(Path::new(&common).join(branch));
    }
    // A path that does not exist would rebuild on every build: name only those that do.
    for path in watched.iter().filter(|path| path.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(head)
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}
