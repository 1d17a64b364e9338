//! The bounds every session of one adapter shares, and each caller's fair share of them: how
//! many of a caller's requests are in flight (or waiting for a turn) and how many of its calls
//! are parked, counted by the caller's keyed tag (every anonymous caller is one caller).
//!
//! Hand-written: a counter per caller under one mutex, held for a few instructions per request
//! (no crate counts tickets by key and refuses at a share; a semaphore per caller would need a
//! map of them all the same). The map holds only callers that hold something (an entry goes
//! with its last ticket), so it is bounded by the in-flight and parked bounds themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::texts;

/// The mutex's guard, a poisoned one taken as it is (the counts stay true: each change is one
/// statement).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which bound a [`Ticket`] counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    InFlight,
    Parked,
}

/// What one caller holds now.
#[derive(Debug, Default)]
struct Counts {
    in_flight: usize,
    parked: usize,
}

#[derive(Debug, Default)]
struct Held {
    /// Parked calls, every caller's.
    parked: usize,
    by_caller: HashMap<Option<String>, Counts>,
}

/// Why a ticket was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The bound itself is reached (parked calls only: requests in flight wait their turn).
    Full,
    /// The caller holds its share: the refusal's text names the bound.
    Share(String),
}

/// The in-flight and parked bounds' per-caller shares (the in-flight bound itself is the
/// semaphore the requests wait on), and the parked bound.
#[derive(Debug)]
pub(crate) struct Bounds {
    max_in_flight: usize,
    max_parked: usize,
    share: f64,
    held: Mutex<Held>,
}

/// The most of `bound` one caller may hold with `share`: at least one.
fn limit(bound: usize, share: f64) -> usize {
    // Exact for the shares people write (a quarter of 16 is 4); a share of 1 is the bound.
    let most = (bound as f64 * share + 1e-9).floor() as usize;
    most.clamp(1, bound.max(1))
}

impl Bounds {
    pub(crate) fn new(max_in_flight: usize, max_parked: usize, share: f64) -> Arc<Self> {
        Arc::new(Self {
            max_in_flight: max_in_flight.max(1),
            max_parked,
            share,
            held: Mutex::default(),
        })
    }

    /// Counts one more request of `caller` in flight (or waiting for its turn), unless it holds
    /// its share of the in-flight bound already.
    pub(crate) fn enter(self: &Arc<Self>, caller: Option<String>) -> Result<Ticket, Refused> {
        self.take(caller, Bound::InFlight)
    }

    /// Counts one more parked call of `caller`, unless the parked bound is reached or the caller
    /// holds its share of it.
    pub(crate) fn park(self: &Arc<Self>, caller: Option<String>) -> Result<Ticket, Refused> {
        self.take(caller, Bound::Parked)
    }

    fn take(self: &Arc<Self>, caller: Option<String>, kind: Bound) -> Result<Ticket, Refused> {
        let mut held = lock(&self.held);
        if kind == Bound::Parked && held.parked >= self.max_parked {
            return Err(Refused::Full);
        }
        let (bound, what) = match kind {
            Bound::InFlight => (self.max_in_flight, "requests in flight"),
            Bound::Parked => (self.max_parked, "parked calls"),
        };
        let most = limit(bound, self.share);
        let counts = held.by_caller.entry(caller.clone()).or_default();
        let count = match kind {
            Bound::InFlight => &mut counts.in_flight,
            Bound::Parked => &mut counts.parked,
        };
        if *count >= most {
            let text = texts::upstream_fair_share(*count, bound, what, self.share);
            if counts.in_flight == 0 && counts.parked == 0 {
                held.by_caller.remove(&caller);
            }
            return Err(Refused::Share(text));
        }
        *count += 1;
        if kind == Bound::Parked {
            held.parked += 1;
        }
        Ok(Ticket {
            bounds: Arc::clone(self),
            caller,
            kind,
        })
    }

    /// How many calls are parked now, every session's.
    pub(crate) fn parked(&self) -> usize {
        lock(&self.held).parked
    }
}

/// One request in flight or one parked call, counted until it is dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    bounds: Arc<Bounds>,
    caller: Option<String>,
    kind: Bound,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut held = lock(&self.bounds.held);
        if self.kind == Bound::Parked {
            held.parked = held.parked.saturating_sub(1);
        }
        if let Some(counts) = held.by_caller.get_mut(&self.caller) {
            match self.kind {
                Bound::InFlight => counts.in_flight = counts.in_flight.saturating_sub(1),
                Bound::Parked => counts.parked = counts.parked.saturating_sub(1),
            }
            if counts.in_flight == 0 && counts.parked == 0 {
                held.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(name: &str) -> Option<String> {
        Some(name.to_owned())
    }

    #[test]
    fn a_caller_gets_its_share_and_the_others_still_get_in() {
        let bounds = Bounds::new(16, 16, 0.25);
        let alice: Vec<Ticket> = (0..4).map(|_| bounds.park(tag("a")).unwrap()).collect();
        let Err(Refused::Share(text)) = bounds.park(tag("a")) else {
            panic!("a fifth parked call of the same caller is refused");
        };
        assert!(text.contains("4 of 16 parked calls"), "{text}");
        assert!(text.contains("a quarter"), "{text}");
        // Its requests in flight are a bound of their own; another caller gets in.
        let _running = bounds.enter(tag("a")).unwrap();
        let _bob = bounds.park(tag("b")).unwrap();
        // Anonymous callers are one caller.
        let anonymous: Vec<Ticket> = (0..4).map(|_| bounds.enter(None).unwrap()).collect();
        assert!(matches!(bounds.enter(None), Err(Refused::Share(_))));
        drop(anonymous);
        assert!(bounds.enter(None).is_ok());
        // A ticket given back makes room again.
        drop(alice);
        let again = bounds.park(tag("a")).expect("room again");
        assert_eq!(bounds.parked(), 2, "Bob's and Alice's new one");
        drop(again);
        assert_eq!(bounds.parked(), 1);
    }

    #[test]
    fn the_parked_bound_holds_for_everyone_and_the_map_forgets_idle_callers() {
        let bounds = Bounds::new(4, 2, 1.0);
        let first = bounds.park(tag("a")).unwrap();
        let _second = bounds.park(tag("b")).unwrap();
        assert_eq!(bounds.park(tag("c")).unwrap_err(), Refused::Full);
        drop(first);
        assert!(bounds.park(tag("c")).is_ok());
        let refused = Bounds::new(1, 1, 0.5);
        let one = refused.enter(tag("x")).unwrap();
        assert!(refused.enter(tag("x")).is_err());
        assert!(refused.enter(tag("y")).is_ok());
        drop(one);
        assert_eq!(lock(&refused.held).by_caller.len(), 0);
        assert_eq!(limit(16, 0.25), 4);
        assert_eq!(limit(3, 0.25), 1);
        assert_eq!(limit(64, 1.0), 64);
        assert_eq!(limit(10, 1.0 / 3.0), 3);
    }
}
