//! The error every fallible step of the proxy returns: a boxed error whose `Display` is the
//! sentence the operator reads (the config's line, the upstream's cause, the busy address).
//! A floor of its own, so that the modules `main` calls into can return it without importing
//! `main`.

/// Any error, boxed: what the proxy's fallible steps return, printed once by `main`.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
