//! Small helpers the wings and the floors share: bounded caches, reading a body, the caller's
//! identity, the inner-service accessors and the public bodies' macro, randomness and the ids
//! made from it, the clock, and [`BoxFuture`].

#[macro_use]
pub(crate) mod macros;
pub(crate) mod body;
pub(crate) mod ids;
pub(crate) mod memo;
pub(crate) mod principal;
pub(crate) mod random;
pub(crate) mod time;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what a user's `async fn` trait method becomes behind `dyn`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
