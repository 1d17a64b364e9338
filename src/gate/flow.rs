//! URL gates' out-of-band flows: [`UrlFlow`], and its `dyn`-safe form ([`ErasedFlow`]).

use std::future::Future;
use std::sync::Arc;

use super::call::GateCall;
use crate::BoxError;
use crate::util::BoxFuture;

/// An out-of-band flow behind a URL gate, checked on the server.
///
/// The layer asks for the URL when it asks the gate, and checks completion when the client
/// answers `accept`, which means only that the user consented to open it. Until
/// [`is_complete`](Self::is_complete) says so, the layer asks again with the same URL, its
/// message followed by a line saying the flow is not finished ([`Gate::incomplete_hint`](super::Gate::incomplete_hint)).
///
/// ```
/// use std::collections::HashSet;
/// use std::sync::{Arc, Mutex};
/// use tower_elicitation::{GateCall, UrlFlow};
///
/// #[derive(Clone, Default)]
/// struct Flows {
///     completed: Arc<Mutex<HashSet<String>>>,
/// }
///
/// impl UrlFlow for Flows {
///     async fn url(&self, call: &GateCall<'_>) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
///         Ok(format!("https://auth.example.com/flows/{}", call.handle()))
///     }
///
///     async fn is_complete(&self, call: &GateCall<'_>) -> bool {
///         // Your OAuth callback inserts the handle when the flow succeeds.
///         self.completed.lock().unwrap().contains(call.handle())
///     }
/// }
/// ```
///
#[doc = include_str!("../../docs/url-flows.md")]
pub trait UrlFlow: Send + Sync + 'static {
    /// Returns the URL for this call's flow, creating the flow if it does not exist yet. It must not
    /// carry secrets or pre-authenticated links: the client sees it, and so may others.
    ///
    /// # Errors
    ///
    /// Any error when the URL cannot be made: the layer then answers the call `-32603`, forwards
    /// nothing, and logs the error.
    fn url(&self, call: &GateCall<'_>) -> impl Future<Output = Result<String, BoxError>> + Send;

    /// Returns whether this call's flow has completed. Answer `true` once per handle (take the
    /// completion as you read it): the layer asks again only while the answer is `false`.
    fn is_complete(&self, call: &GateCall<'_>) -> impl Future<Output = bool> + Send;
}

/// A shared flow is the flow it points to: one [`UrlFlow`] behind several gates.
impl<T: UrlFlow + ?Sized> UrlFlow for Arc<T> {
    fn url(&self, call: &GateCall<'_>) -> impl Future<Output = Result<String, BoxError>> + Send {
        T::url(self, call)
    }

    fn is_complete(&self, call: &GateCall<'_>) -> impl Future<Output = bool> + Send {
        T::is_complete(self, call)
    }
}

/// [`UrlFlow`] in a form that can be stored behind `dyn`.
pub(crate) trait ErasedFlow: Send + Sync {
    fn url<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, Result<String, BoxError>>;
    fn is_complete<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, bool>;
}

impl<T: UrlFlow> ErasedFlow for T {
    fn url<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, Result<String, BoxError>> {
        Box::pin(UrlFlow::url(self, call))
    }

    fn is_complete<'a>(&'a self, call: &'a GateCall<'a>) -> BoxFuture<'a, bool> {
        Box::pin(UrlFlow::is_complete(self, call))
    }
}
