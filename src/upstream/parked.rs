//! Calls parked while the client answers the upstream's questions: named by a random id, bound
//! to the caller, the method and the target, taken out exactly once. One session's (each holds
//! its own); their number is bounded across sessions by a [`Ticket`] each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use super::bounds::Ticket;
use crate::wire::mcp::Method;

/// What reaches a call from the child.
#[derive(Debug)]
pub(crate) enum Event {
    /// The response to the call's own request.
    Response(Map<String, Value>),
    /// A server-to-client request made while the call held the floor.
    Request(Map<String, Value>),
    /// A notification about the call: its progress (by the progress token the adapter gave
    /// it), or a log message sent while it ran. Relayed to the front when it can take it.
    Notification(Map<String, Value>),
    /// The child exited: no response will come.
    Exited,
}

/// One parked call.
#[derive(Debug)]
pub(crate) struct Parked {
    /// The keyed tag of the caller that made the call (`None`: anonymous).
    pub(crate) caller: Option<String>,
    pub(crate) method: Method,
    /// The tool or prompt name, or the resource URI.
    pub(crate) target: Value,
    /// The id the call has in the upstream's session.
    pub(crate) upstream_id: u64,
    /// Where the rest of the call's messages come.
    pub(crate) events: mpsc::Receiver<Event>,
    /// The upstream's requests not answered yet, by the key they were asked under: the
    /// upstream's request id, and the request as asked (`{method, params}`).
    pub(crate) asked: IndexMap<String, (Value, Value)>,
    /// How many requests the call has made (the keys' numbers).
    pub(crate) seq: u64,
    /// Held while the call is parked: dropped when it is taken, which ends its expiry timer
    /// (and its subscription to routed retries) at once rather than after the timeout.
    pub(crate) timer: Option<oneshot::Sender<()>>,
    /// The session's floor, held for the call a moment after it parks (then handed on, or
    /// taken by its retry): shared with the task that hands it on.
    pub(crate) floor: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    /// Counts the call against the parked bound and its caller's share while it is parked.
    pub(crate) ticket: Option<Ticket>,
}

impl Parked {
    /// A call of `caller`'s, `upstream_id` in the session, not parked yet: nothing asked, no
    /// events, no timer, no ticket.
    pub(crate) fn new(
        caller: Option<String>,
        method: Method,
        target: Value,
        upstream_id: u64,
    ) -> Self {
        Self {
            caller,
            method,
            target,
            upstream_id,
            events: mpsc::channel(1).1,
            asked: IndexMap::new(),
            seq: 0,
            timer: None,
            floor: Arc::default(),
            ticket: None,
        }
    }
}

/// The parked calls of one session.
#[derive(Debug, Default)]
pub(crate) struct ParkedCalls {
    calls: Mutex<HashMap<String, Box<Parked>>>,
}

impl ParkedCalls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Box<Parked>>> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `call` under `id` (its ticket taken already: see [`Bounds`](super::bounds::Bounds)).
    pub(crate) fn park(&self, id: String, call: Box<Parked>) {
        self.lock().insert(id, call);
    }

    /// Takes out the call `id` if it was made by `caller` for the same method and target: once.
    pub(crate) fn take(
        &self,
        id: &str,
        is_callers: impl Fn(Option<&str>) -> bool,
        method: Method,
        target: &Value,
    ) -> Option<Box<Parked>> {
        let mut calls = self.lock();
        let call = calls.get(id)?;
        let same =
            is_callers(call.caller.as_deref()) && call.method == method && &call.target == target;
        if same { calls.remove(id) } else { None }
    }

    /// Takes out the call `id` whatever it is (its time ran out).
    pub(crate) fn expire(&self, id: &str) -> Option<Box<Parked>> {
        self.lock().remove(id)
    }

    /// Forgets every parked call (the child that ran them exited).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Whether a parked call's tag is `tag`, as the caller check says.
    fn is(tag: &'static str) -> impl Fn(Option<&str>) -> bool {
        move |parked| parked == Some(tag)
    }

    fn call(caller: u8) -> Box<Parked> {
        Box::new(Parked::new(
            Some(format!("k.{caller}")),
            Method::ToolsCall,
            json!("t"),
            1,
        ))
    }

    #[test]
    fn a_call_is_taken_once_and_only_by_its_caller() {
        let parked = ParkedCalls::default();
        parked.park("a".into(), call(1));
        assert!(
            parked
                .take("a", is("k.2"), Method::ToolsCall, &json!("t"))
                .is_none()
        );
        assert!(
            parked
                .take("a", is("k.1"), Method::PromptsGet, &json!("t"))
                .is_none()
        );
        assert!(
            parked
                .take("a", is("k.1"), Method::ToolsCall, &json!("u"))
                .is_none()
        );
        assert!(
            parked
                .take("a", is("k.1"), Method::ToolsCall, &json!("t"))
                .is_some()
        );
        assert!(
            parked
                .take("a", is("k.1"), Method::ToolsCall, &json!("t"))
                .is_none()
        );
    }

    #[test]
    fn a_cleared_session_holds_no_call() {
        let parked = ParkedCalls::default();
        parked.park("a".into(), call(1));
        assert!(parked.expire("a").is_some());
        parked.park("b".into(), call(1));
        parked.clear();
        assert!(parked.expire("b").is_none());
    }
}
