//! [`ResponseFuture`]: the future of [`LegacyBridge`](super::LegacyBridge).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use super::body::ResponseBody;
use crate::util::BoxFuture;

/// The response future of [`LegacyBridge`](super::LegacyBridge).
///
/// A 2025-era request may take several steps (a session lookup, discovery, the inner call) before
/// it is answered, so the steps are boxed behind this one type.
pub struct ResponseFuture<B, E> {
    steps: BoxFuture<'static, Result<Response<ResponseBody<B>>, E>>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        steps: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            steps: Box::pin(steps),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.steps.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
