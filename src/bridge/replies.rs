//! The bridge's own HTTP responses: JSON-RPC answers and refusals through the one reply builder
//! ([`Reply`]), and bodiless statuses.

use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use serde_json::Value;

use super::body::ResponseBody;
use crate::store::StoreError;
use crate::wire::jsonrpc::{self, Reply, ReplyKind, RpcError, SERVER_ERROR, SESSION_NOT_FOUND};

/// What the bridge answers a client with.
pub(super) type BridgeResponse<B> = Response<ResponseBody<B>>;

pub(super) fn session_not_found<B>() -> BridgeResponse<B> {
    refuse(
        ReplyKind::SessionNotFound,
        SESSION_NOT_FOUND,
        "Session not found",
    )
}

pub(super) fn store_failed<B>(error: &StoreError) -> BridgeResponse<B> {
    tracing::warn!(%error, "the bridge's store failed");
    let message = match error {
        StoreError::Full => "Too many sessions; try again later",
        _ => "The session store is unavailable",
    };
    refuse(ReplyKind::Unavailable, SERVER_ERROR, message)
}

pub(super) fn accepted<B>() -> BridgeResponse<B> {
    status(StatusCode::ACCEPTED)
}

pub(super) fn status<B>(status: StatusCode) -> BridgeResponse<B> {
    let mut response = Response::new(ResponseBody::default());
    *response.status_mut() = status;
    response
}

/// An answer in band to the request `id` (HTTP 200): its result, or its error.
pub(super) fn answer_to<B>(id: &Value, outcome: Result<Value, RpcError>) -> BridgeResponse<B> {
    let message = jsonrpc::response(id, outcome);
    reply(Reply::message(ReplyKind::Answer, &message))
}

/// A refusal of `kind` that names no request (its id `null`): a JSON-RPC error.
pub(super) fn refuse<B>(kind: ReplyKind, code: i64, message: &str) -> BridgeResponse<B> {
    let message = jsonrpc::response(&Value::Null, Err(RpcError::new(code, message)));
    reply(Reply::message(kind, &message))
}

/// `reply` as the bridge's response: its kind's status, its JSON body.
pub(super) fn reply<B>(reply: Reply) -> BridgeResponse<B> {
    let mut response = Response::new(ResponseBody::full(reply.body));
    *response.status_mut() = reply.kind.status();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
