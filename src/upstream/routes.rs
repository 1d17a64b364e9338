//! Which replica holds a parked call, and the messages that carry a retry to it and its answer
//! back through a shared [`PendingAnswers`](crate::store::PendingAnswers) (the bridge's, e.g.
//! Redis's): pure naming and shapes, no I/O.
//!
//! A parked call's `requestState` is `<replica>.<session>.<random id>` (the session: its number
//! in the replica's pool, `UpstreamBuilder::sessions`). A retry that lands on the replica named
//! is served there, in the session named. One that lands on another is delivered under the key
//! `upstream/<state>` / `retry` as `{"message", "caller", "reply"}`, where `caller` is the keyed
//! tag of the caller (never the identity itself) and `reply` a fresh nonce. The holder, which
//! subscribed to that key when it parked the call, first delivers an empty acknowledgement
//! under `ack/<nonce>` (so that a retry nobody holds fails fast), then the whole JSON-RPC
//! response under `reply/<nonce>`.

use serde_json::{Map, Value, json};

use crate::store::AnswerKey;

/// How long a routed retry waits for the holder to acknowledge it before it is taken for gone.
pub(crate) const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A replica's name: short, random, fresh for every adapter.
pub(crate) fn new_replica() -> String {
    let bytes: [u8; 5] = crate::util::random::bytes();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The replica a parked call's state names, when it names one.
pub(crate) fn replica_of(state: &str) -> Option<&str> {
    state.split_once('.').map(|(replica, _)| replica)
}

/// The key a leg of the routing of `state` goes under: `retry`, `ack/<nonce>`, `reply/<nonce>`.
pub(crate) fn key(state: &str, leg: &str) -> AnswerKey {
    AnswerKey::new(format!("upstream/{state}"), leg)
}

/// A retry as it is routed to the holder.
pub(crate) fn retry(message: Map<String, Value>, caller: Option<String>, reply: &str) -> Value {
    json!({"message": message, "caller": caller, "reply": reply})
}

/// The session of its replica's pool a parked call's state names, when it names one.
pub(crate) fn session_of(state: &str) -> Option<usize> {
    let mut parts = state.splitn(3, '.');
    let (_, session, _) = (parts.next()?, parts.next()?, parts.next()?);
    session.parse().ok()
}

/// A routed retry read back: the message, the caller's tag and the reply nonce; `None` when it
/// is not one.
pub(crate) fn read_retry(routed: Value) -> Option<(Map<String, Value>, Option<String>, String)> {
    let Value::Object(mut routed) = routed else {
        return None;
    };
    let Some(Value::Object(message)) = routed.remove("message") else {
        return None;
    };
    let caller = match routed.remove("caller") {
        Some(Value::String(tag)) => Some(tag),
        Some(Value::Null) | None => None,
        Some(_) => return None,
    };
    let reply = routed.remove("reply")?.as_str()?.to_owned();
    Some((message, caller, reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_names_its_replica_and_a_retry_reads_back() {
        let replica = new_replica();
        assert_eq!(replica.len(), 10);
        let state = format!("{replica}.0b5e");
        assert_eq!(replica_of(&state), Some(replica.as_str()));
        assert_eq!(replica_of("no-replica"), None);
        assert_eq!(session_of(&format!("{replica}.3.0b5e")), Some(3));
        assert_eq!(session_of(&state), None);
        assert_eq!(session_of(&format!("{replica}.x.0b5e")), None);

        let message = json!({"id": 1, "method": "tools/call"});
        let routed = retry(
            message.as_object().cloned().unwrap(),
            Some("k.t".into()),
            "n",
        );
        let (back, caller, reply) = read_retry(routed).unwrap();
        assert_eq!(
            (Value::Object(back), caller.as_deref(), reply.as_str()),
            (message, Some("k.t"), "n")
        );
        assert!(read_retry(json!({"message": 1, "reply": "n"})).is_none());
        assert!(read_retry(json!({"message": {}, "caller": 7, "reply": "n"})).is_none());
    }
}
