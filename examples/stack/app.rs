//! The `stack` app: tracing, compression, then bearer authentication, then [`ElicitationLayer`],
//! in front of the `deploy` example's rmcp service.
//!
//! Shared: the `stack` example binary and the integration tests include this file as a module,
//! next to `examples/deploy/server.rs` included as the module `server` at the crate root.

use std::{collections::HashMap, future::Ready, sync::Arc};

use axum::{
    Router,
    body::Body,
    extract::{Path, State},
    http::{Request, Response, StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tower::ServiceBuilder;
use tower_elicitation::{ElicitationLayer, GateError};
use tower_http::{
    auth::AsyncAuthorizeRequest, auth::AsyncRequireAuthorizationLayer,
    compression::CompressionLayer, trace::TraceLayer,
};

use crate::server::{self, DeployState, FLOWS_PATH, GithubFlows, MCP_PATH};

/// The authenticated caller, inserted as a request extension by [`BearerAuth`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User(pub String);

/// Validates `Authorization: Bearer <token>` against an in-memory table of tokens and inserts
/// the [`User`] it belongs to; answers `401` otherwise.
///
/// The table stands in for a real token check (JWT verification, introspection): `authorize`
/// returns a future, so an asynchronous check fits the same place.
#[derive(Clone, Debug)]
pub struct BearerAuth {
    users: Arc<HashMap<String, String>>,
}

impl BearerAuth {
    /// Accepts each `(token, user)` pair.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let users = tokens
            .into_iter()
            .map(|(token, user)| (token.to_owned(), user.to_owned()))
            .collect();
        Self {
            users: Arc::new(users),
        }
    }

    fn user<B>(&self, request: &Request<B>) -> Option<User> {
        let value = request
            .headers()
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.users.get(token.trim()).cloned().map(User)
    }
}

impl<B> AsyncAuthorizeRequest<B> for BearerAuth {
    type RequestBody = B;
    type ResponseBody = Body;
    type Future = Ready<Result<Request<B>, Response<Body>>>;

    fn authorize(&mut self, mut request: Request<B>) -> Self::Future {
        std::future::ready(match self.user(&request) {
            Some(user) => {
                request.extensions_mut().insert(user);
                Ok(request)
            }
            None => Err((
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a valid bearer token is required",
            )
                .into_response()),
        })
    }
}

/// The app: `POST /mcp` through tracing, compression, `auth` and `layer` (with the `deploy` example's gates,
/// tokens bound to the authenticated [`User`]) to the rmcp service; `GET /flows/<handle>/complete`
/// completes a URL flow, as an OAuth callback would (no bearer: a browser opens it).
pub fn app(
    layer: ElicitationLayer,
    auth: BearerAuth,
    state: DeployState,
    json_response: bool,
) -> Result<Router, GateError> {
    // Bind tokens to who the caller is, not to the bytes of their `Authorization` header.
    let layer = layer.principal_from(|parts| {
        parts
            .extensions
            .get::<User>()
            .map(|user| user.0.clone().into_bytes())
    });
    let elicitation = server::with_gates(layer, &state)?;

    let mcp = ServiceBuilder::new()
        .layer(TraceLayer::new_for_http())
        // Compression goes outside the elicitation layer, which must read what it seals.
        .layer(CompressionLayer::new())
        .layer(AsyncRequireAuthorizationLayer::new(auth))
        // The auth layer's `401` and the inner responses must share one body type.
        .map_response(IntoResponse::into_response)
        .layer(elicitation)
        .service(server::mcp_service(state.clone(), json_response));

    Ok(Router::new()
        // `route_service`, not `nest_service`: the trace span keeps the full path.
        .route_service(MCP_PATH, mcp)
        .route(
            &format!("{FLOWS_PATH}/{{handle}}/complete"),
            get(complete_flow),
        )
        .with_state(state.flows().clone()))
}

/// The OAuth callback stand-in: marks the flow complete.
async fn complete_flow(
    State(flows): State<GithubFlows>,
    Path(handle): Path<String>,
) -> Result<&'static str, (StatusCode, &'static str)> {
    if flows.complete(&handle).await {
        Ok("GitHub access authorized. You can return to your MCP client.")
    } else {
        Err((StatusCode::NOT_FOUND, "No such flow"))
    }
}
