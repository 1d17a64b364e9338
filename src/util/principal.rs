//! How the caller's identity is taken from the request.

use std::fmt;
use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::request::Parts;

use crate::token::{self, Keyring};

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

/// How a caller is told apart, as [`ElicitationLayer`](crate::ElicitationLayer) tells it: where
/// the principal comes from, and the keys its tag is made with (`token::session_tag`). The
/// legacy bridge binds its sessions with it, and the upstream adapter its parked calls, so one
/// identity is configured once and a tag made under an older key still names its caller.
#[derive(Clone, Debug)]
pub(crate) struct CallerBinding {
    pub(crate) keyring: Keyring,
    pub(crate) principal: Principal,
}

impl CallerBinding {
    /// The caller's identity in this request; `None` for an anonymous caller.
    pub(crate) fn principal(&self, parts: &Parts) -> Option<Vec<u8>> {
        self.principal.of(parts)
    }

    /// The keyed tag of `principal`, what a session or a parked call keeps of it; `None` for an
    /// anonymous caller.
    pub(crate) fn tag(&self, principal: Option<&[u8]>) -> Option<String> {
        principal.map(|principal| token::session_tag(&self.keyring, principal))
    }

    /// Whether `tag` (what [`tag`](Self::tag) made) names `principal`, under any key of the
    /// ring; an anonymous caller is one caller. In constant time.
    pub(crate) fn is_tag_of(&self, tag: Option<&str>, principal: Option<&[u8]>) -> bool {
        match (tag, principal) {
            (None, None) => true,
            (Some(tag), Some(principal)) => token::is_session_tag(&self.keyring, tag, principal),
            _ => false,
        }
    }
}
