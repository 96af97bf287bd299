//! State shared by the handles and the actor: the key map, the watchers of `Scheduled` futures,
//! and the counters behind [`Stats`](super::Stats).
//!
//! # Who ends a timer
//! Every accepted timer has one entry in `keys` from `schedule` until it ends. Whoever removes
//! that entry ends the timer, exactly once: the actor when the timer fires for the last time or
//! the service stops, a handle when it cancels. The actor re-checks the entry before it runs a
//! job, so a timer cancelled a moment before its deadline never runs.
//!
//! # Watching a timer without allocating for it
//! A `Scheduled` future that is never polled costs nothing beyond an `ARMED` bit in the key map
//! entry. When an armed timer ends, its outcome is left in `watchers` for the future to collect;
//! a polled future parks its waker there. Dropping the future clears the bit, so outcomes are
//! only ever recorded for futures that can still read them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::task::Waker;

use dashmap::DashMap;

use super::key::Key;
use crate::Error;

/// How a timer ended, as its `Scheduled` future reports it.
pub(crate) type Outcome = Result<(), Error>;

/// The key map's value: which schedule call owns the key, and where its entry is in the wheel.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The schedule call's sequence number, with [`ARMED`] set while a `Scheduled` watches it.
    seq: u64,
    /// The wheel entry's id ([`EntryId::to_u64`](crate::wheel::EntryId::to_u64)), or [`UNPLACED`]
    /// until the actor has put the timer into the wheel.
    pub wheel_id: u64,
}

const ARMED: u64 = 1 << 63;
pub(crate) const UNPLACED: u64 = u64::MAX;

impl Slot {
    pub fn seq(&self) -> u64 {
        self.seq & !ARMED
    }
}

pub(crate) enum Watch {
    Waiting(Waker),
    Done(Outcome),
}

pub(crate) struct Shared {
    /// Seeded foldhash: a quarter of SipHash's cost on short keys, still keyed per process.
    pub keys: DashMap<Key, Slot, foldhash::fast::RandomState>,
    watchers: Mutex<HashMap<u64, Watch>>,
    next_seq: AtomicU64,
    /// Timers accepted and not yet ended (the entries of `keys`), kept apart so that `len` and
    /// the `max_pending` check cost one atomic rather than a walk over the map's shards.
    pub pending: AtomicUsize,
    pub max_pending: usize,
    pub scheduled: AtomicU64,
    pub fired: AtomicU64,
    pub cancelled: AtomicU64,
    pub stopped: AtomicU64,
}

impl Shared {
    pub fn new(max_pending: usize) -> Self {
        Shared {
            keys: DashMap::default(),
            watchers: Mutex::new(HashMap::new()),
            next_seq: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            max_pending,
            scheduled: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
        }
    }

    /// Claims `key` for a new timer and returns its sequence number.
    pub fn claim(&self, key: Key, armed: bool) -> Result<u64, Error> {
        if self.pending.fetch_add(1, Relaxed) >= self.max_pending {
            self.pending.fetch_sub(1, Relaxed);
            return Err(Error::Full(self.max_pending));
        }
        let seq = self.next_seq.fetch_add(1, Relaxed);
        match self.keys.entry(key) {
            dashmap::Entry::Occupied(e) => {
                self.pending.fetch_sub(1, Relaxed);
                Err(Error::DuplicateKey(e.key().as_str().to_owned()))
            }
            dashmap::Entry::Vacant(e) => {
                e.insert(Slot { seq: if armed { seq | ARMED } else { seq }, wheel_id: UNPLACED });
                self.scheduled.fetch_add(1, Relaxed);
                Ok(seq)
            }
        }
    }

    /// Gives back a claim whose timer never reached the actor, as if it had never been made.
    pub fn unclaim(&self, key: &str, seq: u64) {
        if self.keys.remove_if(key.as_bytes(), |_, slot| slot.seq() == seq).is_some() {
            self.pending.fetch_sub(1, Relaxed);
            self.scheduled.fetch_sub(1, Relaxed);
        }
    }

    /// Ends the timer holding `key` if `owns` accepts its slot, and reports `outcome` to its
    /// watcher. Returns the slot's wheel id if this call ended the timer.
    pub fn end(&self, key: &str, owns: impl FnOnce(&Slot) -> bool, outcome: Outcome) -> Option<u64> {
        let mut wake = None;
        let counter = match outcome {
            Ok(()) => &self.fired,
            Err(Error::Cancelled) => &self.cancelled,
            Err(_) => &self.stopped,
        };
        let (_, slot) = self.keys.remove_if(key.as_bytes(), |_, slot| {
            if !owns(slot) {
                return false;
            }
            // Recorded under the map's lock, so a watcher that no longer finds the key is
            // sure to find the outcome.
            if slot.seq & ARMED != 0 {
                wake = self.record(slot.seq(), outcome);
            }
            true
        })?;
        self.pending.fetch_sub(1, Relaxed);
        counter.fetch_add(1, Relaxed);
        if let Some(waker) = wake {
            waker.wake();
        }
        Some(slot.wheel_id)
    }

    /// Leaves `outcome` for the watcher of `seq`; returns its waker if it is already waiting.
    fn record(&self, seq: u64, outcome: Outcome) -> Option<Waker> {
        let mut watchers = self.watchers.lock().expect("watchers lock poisoned");
        match watchers.insert(seq, Watch::Done(outcome)) {
            Some(Watch::Waiting(waker)) => Some(waker),
            _ => None,
        }
    }

    /// Whether a timer with this key is pending.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains_key(key.as_bytes())
    }

    /// Polls the outcome of timer `seq` for its `Scheduled` future.
    pub fn poll_outcome(&self, seq: u64, waker: &Waker) -> Option<Outcome> {
        let mut watchers = self.watchers.lock().expect("watchers lock poisoned");
        match watchers.remove(&seq) {
            Some(Watch::Done(outcome)) => Some(outcome),
            Some(Watch::Waiting(old)) if old.will_wake(waker) => {
                watchers.insert(seq, Watch::Waiting(old));
                None
            }
            _ => {
                watchers.insert(seq, Watch::Waiting(waker.clone()));
                None
            }
        }
    }

    /// Stops watching timer `seq`: clears its `ARMED` bit, or forgets its recorded outcome.
    pub fn unwatch(&self, key: &str, seq: u64, polled: bool) {
        let pending = match self.keys.get_mut(key.as_bytes()) {
            Some(mut slot) if slot.seq() == seq => {
                slot.seq &= !ARMED;
                true
            }
            _ => false,
        };
        // An unpolled watcher of a pending timer has nothing in `watchers` to clean up.
        if polled || !pending {
            self.watchers.lock().expect("watchers lock poisoned").remove(&seq);
        }
    }
}
