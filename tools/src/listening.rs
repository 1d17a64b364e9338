//! How the tools' HTTP servers are served: bound to an address, the first line on stdout naming
//! the URL (the scripts and tests read it), and the workspace's accept loop until Ctrl-C or
//! SIGTERM (they stop them with either). Included with `#[path]` by `front`, `deploy-bare` and
//! `upstream-rmcp`: the tools crate has binaries only.

use std::io::Write as _;

/// Serves `app` on `listen` with the accept loop's default limits, saying
/// `listening on http://ADDR{path}` first, until Ctrl-C or SIGTERM.
///
/// # Errors
///
/// When `listen` cannot be bound, or stdout cannot be written.
pub async fn serve(listen: &str, path: &str, app: axum::Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let mut stdout = std::io::stdout();
    writeln!(
        stdout,
        "listening on http://{}{path}",
        listener.local_addr()?
    )?;
    stdout.flush()?;
    serve::serve(listener, app, serve::Limits::default(), signalled()).await;
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM (Ctrl-C alone when SIGTERM cannot be listened for).
async fn signalled() {
    let interrupt = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = interrupt => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = interrupt.await;
        }
    }
}
