//! The adapter's sessions with the server ([`UpstreamBuilder::sessions`]: children of the same
//! command, each with its own floor), and which of them serves each of the front's requests: a
//! retry the session its parked call's state names, any other the least loaded live one.
//!
//! [`UpstreamBuilder::sessions`]: super::UpstreamBuilder::sessions

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::call::{self, Front};
use super::core::{Busy, Core, lock};
use super::routes;
use crate::texts;
use crate::wire::jsonrpc::{self, INVALID_PARAMS, RpcError};

/// Every session of one adapter (at least one), each a [`Core`] of its own.
#[derive(Debug)]
pub(crate) struct Pool {
    sessions: Vec<Arc<Core>>,
    /// Held while a request picks its session, so that calls arriving together spread (each
    /// sees the load the one before it added).
    picking: Mutex<()>,
}

impl Pool {
    /// The pool of `sessions` (not empty).
    pub(crate) fn new(sessions: Vec<Arc<Core>>) -> Self {
        debug_assert!(!sessions.is_empty(), "a pool has a session");
        Self {
            sessions,
            picking: Mutex::new(()),
        }
    }

    /// Every session, in order.
    pub(crate) fn sessions(&self) -> &[Arc<Core>] {
        &self.sessions
    }

    /// The first session: its settings are every session's.
    pub(crate) fn first(&self) -> &Arc<Core> {
        &self.sessions[0]
    }

    /// Answers one JSON-RPC message from the front in the session that is to serve it; `None`
    /// for a notification.
    pub(crate) async fn dispatch(
        &self,
        front: Front,
        message: Map<String, Value>,
    ) -> Option<Value> {
        if let Some(core) = self.named(&message)
            && !core.is_ready()
        {
            // Restarting, or down: the calls parked in it went with its child. Refused at once
            // as an expired call is, rather than after waiting for the start.
            let id = message.get("id")?;
            let error = RpcError::new(INVALID_PARAMS, texts::UPSTREAM_CALL_GONE);
            return Some(jsonrpc::response(id, Err(error)));
        }
        let (core, _busy) = self.pick(&message);
        call::handle(core, front, message).await
    }

    /// The session a retry's `requestState` names, when it names one of this replica's.
    fn named(&self, message: &Map<String, Value>) -> Option<&Arc<Core>> {
        message
            .get("params")
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str)
            .filter(|state| routes::replica_of(state) == Some(self.first().replica.as_str()))
            .and_then(routes::session_of)
            .and_then(|session| self.sessions.get(session))
    }

    /// The session for `message`, counted busy with it: the one a retry's `requestState` names
    /// when it names one of this replica's sessions (a session that restarted since holds no
    /// call, and the retry is refused there as for an expired call); else the least loaded of the
    /// live ones (of all, when none is up: the request then waits for a start, or learns why
    /// there is none).
    fn pick(&self, message: &Map<String, Value>) -> (Arc<Core>, Busy) {
        if let Some(core) = self.named(message) {
            return (Arc::clone(core), core.busy());
        }
        let _picking = lock(&self.picking);
        let core = self
            .sessions
            .iter()
            .min_by_key(|core| (!core.is_ready(), core.load()))
            .unwrap_or_else(|| self.first());
        (Arc::clone(core), core.busy())
    }
}
