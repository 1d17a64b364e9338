//! The shutdown the tools' HTTP servers wait for: Ctrl-C or SIGTERM (the scripts and tests stop
//! them with either). Included with `#[path]` by `front`, `deploy-bare` and `upstream-rmcp`: the
//! tools crate has binaries only.

/// Waits for Ctrl-C or SIGTERM (Ctrl-C alone when SIGTERM cannot be listened for).
pub async fn signalled() {
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
