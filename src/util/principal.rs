//! How the caller's identity is taken from the request: a [`VerifiedCaller`] an authenticating
//! layer put in its extensions, the `Authorization` header, or `principal_from`.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use http::header::AUTHORIZATION;
use http::request::Parts;

use crate::token::{self, Keyring};

/// Labels the principal bytes of a [`VerifiedCaller`], so that a verified principal never equals
/// an `Authorization` header's value (a header value cannot hold a NUL byte): a request that
/// reached the layer unauthenticated with `Authorization: alice` is not the verified `alice`.
const VERIFIED_LABEL: &[u8] = b"\0verified-caller\0";

/// Creates a caller an authenticating layer has verified: the principal it is known by, and the
/// claims it was verified with.
///
/// An authenticating layer in front of [`ElicitationLayer`](crate::ElicitationLayer) inserts one
/// into the request's [`http::Extensions`]; the layer then binds every approval, sealed
/// `requestState`, task, legacy session and parked upstream call of that request to its
/// principal, never to the raw `Authorization` header, and gates see it through
/// [`GateCall::caller`](crate::GateCall::caller). Each round takes it from that round's request,
/// not from the sealed token: a retry by another verified caller is another caller.
///
/// Which principal wins, from strongest: an explicit
/// [`principal_from`](crate::ElicitationLayer::principal_from) (it may read this extension
/// itself), then a `VerifiedCaller` extension, then the `Authorization` header.
///
/// `Debug` shows the principal and the claims' names, never their values: claims carry e-mail
/// addresses, group lists and other details a log line should not hold wholesale.
///
/// # Example: an authenticating layer in front
///
/// A request whose bearer token checks out gets its `VerifiedCaller`; any other is answered 401
/// before the layer sees it. A real one validates a JWT or looks an API key up; this one knows
/// two fixed keys.
///
/// ```
/// use axum::body::Body;
/// use bytes::Bytes;
/// use http::{Request, Response, StatusCode};
/// use http_body_util::Full;
/// use serde_json::{Map, json};
/// use tower::{ServiceBuilder, ServiceExt};
/// use tower_elicitation::{ElicitationLayer, Keyring, RequestBody, VerifiedCaller};
/// use tower_http::validate_request::{ValidateRequest, ValidateRequestHeaderLayer};
///
/// #[derive(Clone)]
/// struct ApiKeys;
///
/// impl<B> ValidateRequest<B> for ApiKeys {
///     type ResponseBody = Body;
///     fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response<Body>> {
///         let key = request.headers().get("authorization").and_then(|v| v.to_str().ok());
///         let (name, roles) = match key {
///             Some("Bearer key-of-alice") => ("alice", json!(["admin"])),
///             Some("Bearer key-of-bob") => ("bob", json!([])),
///             _ => {
///                 let mut refused = Response::new(Body::empty());
///                 *refused.status_mut() = StatusCode::UNAUTHORIZED;
///                 return Err(refused);
///             }
///         };
///         let mut claims = Map::new();
///         claims.insert("roles".into(), roles);
///         request.extensions_mut().insert(VerifiedCaller::new(name, claims));
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let inner = tower::service_fn(|request: Request<RequestBody<Full<Bytes>>>| async move {
///     let caller = request.extensions().get::<VerifiedCaller>().map(|c| c.principal().to_owned());
///     Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(caller.unwrap_or_default()))))
/// });
/// let service = ServiceBuilder::new()
///     .layer(ValidateRequestHeaderLayer::custom(ApiKeys))
///     .map_response(|response: Response<_>| response.map(Body::new))
///     .layer(ElicitationLayer::new(Keyring::new("k1", [7u8; 32])?))
///     .service(inner);
///
/// let get = |key: &str| Request::get("/mcp").header("authorization", key).body(Full::<Bytes>::default()).unwrap();
/// assert_eq!(service.clone().oneshot(get("Bearer nobody")).await?.status(), StatusCode::UNAUTHORIZED);
/// assert_eq!(service.clone().oneshot(get("Bearer key-of-alice")).await?.status(), StatusCode::OK);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct VerifiedCaller {
    inner: Arc<Verified>,
}

struct Verified {
    principal: String,
    claims: Map<String, Value>,
}

impl VerifiedCaller {
    /// Creates the verified caller `principal` (what approvals bind to: a JWT's `sub`, an API
    /// key's name, an OS user), with the `claims` it was verified with (empty when there are
    /// none).
    pub fn new(principal: impl Into<String>, claims: Map<String, Value>) -> Self {
        Self {
            inner: Arc::new(Verified {
                principal: principal.into(),
                claims,
            }),
        }
    }

    /// Returns the principal the caller is known by.
    pub fn principal(&self) -> &str {
        &self.inner.principal
    }

    /// Returns the claims the caller was verified with.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.inner.claims
    }

    /// The bytes the layer binds to: the principal, labelled so that no header value equals it.
    pub(crate) fn binding(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(VERIFIED_LABEL.len() + self.inner.principal.len());
        bytes.extend_from_slice(VERIFIED_LABEL);
        bytes.extend_from_slice(self.inner.principal.as_bytes());
        bytes
    }
}

impl fmt::Debug for VerifiedCaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedCaller")
            .field("principal", &self.inner.principal)
            .field("claims", &self.inner.claims.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The principal as a person reads it: a [`VerifiedCaller`]'s name without the label the layer
/// binds it with, any other principal as it is.
pub(crate) fn shown(principal: &[u8]) -> &[u8] {
    principal.strip_prefix(VERIFIED_LABEL).unwrap_or(principal)
}

type PrincipalFn = dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync;

/// Where the principal comes from: a closure when one is set; else a [`VerifiedCaller`]
/// extension; else the `Authorization` header.
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
            None => match parts.extensions.get::<VerifiedCaller>() {
                Some(caller) => Some(caller.binding()),
                None => parts
                    .headers
                    .get(AUTHORIZATION)
                    .map(|value| value.as_bytes().to_vec()),
            },
        }
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.custom.is_some() {
            "Principal(custom)"
        } else {
            "Principal(VerifiedCaller, else Authorization header)"
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
