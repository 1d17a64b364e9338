//! How the caller's identity is taken from the request.

use std::fmt;
use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::request::Parts;

type PrincipalFn = dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync;

/// Where the principal comes from: the `Authorization` header by default, or a closure.
#[derive(Clone, Default)]
pub(crate) struct Principal {
    custom: Option<Arc<PrincipalFn>>,
}

impl Principal {
    pub(crate) fn from_fn<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static,
    {
        Self {
            custom: Some(Arc::new(f)),
        }
    }

    /// The caller's identity as bytes; `None` for an anonymous caller.
    pub(crate) fn of(&self, parts: &Parts) -> Option<Vec<u8>> {
        match &self.custom {
            Some(f) => f(parts),
            None => parts
                .headers
                .get(AUTHORIZATION)
                .map(|value| value.as_bytes().to_vec()),
        }
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.custom.is_some() {
            "Principal(custom)"
        } else {
            "Principal(Authorization header)"
        })
    }
}
