//! Which sessions have a GET stream open in this process ([`Listeners`]), so that a change to a
//! session's subscriptions reopens its stream's listen on the inner service. Apart from
//! `listen`, which relays the streams, so that the bridge's settings can hold it.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// One change counter per session with a GET stream open in this process: bumped when its
/// subscriptions change, so that its listen is opened again with the new filter.
#[derive(Debug, Default)]
pub(crate) struct Listeners(Mutex<HashMap<String, watch::Sender<u64>>>);

impl Listeners {
    pub(super) fn watch(&self, session: &str) -> watch::Receiver<u64> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(session.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Tells the session's GET streams in this process that its subscriptions changed, or that
    /// it ended.
    pub(crate) fn changed(&self, session: &str) {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = map.get(session) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Forgets the session's counter once no stream holds it.
    pub(super) fn release(&self, session: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(session).is_some_and(|s| s.receiver_count() == 0) {
            map.remove(session);
        }
    }
}
