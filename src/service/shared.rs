//! State shared by the handles and the actor: the key map, the id pool, the watchers of
//! `Scheduled` futures, and the counters behind [`Stats`](super::Stats).
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

use super::ids::IdPool;
use super::key::Key;
use crate::wheel::EntryId;
use crate::Error;

/// How a timer ended, as its `Scheduled` future reports it.
pub(crate) type Outcome = Result<(), Error>;

/// The key map's value: the timer's wheel entry id (which also names the timer for its
/// watcher), with [`ARMED`] set while a `Scheduled` watches it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot(u64);

const ARMED: u64 = 1 << 63;

impl Slot {
    pub fn id(self) -> EntryId {
        EntryId::from_u64(self.0 & !ARMED)
    }

    fn armed(self) -> bool {
        self.0 & ARMED != 0
    }
}

pub(crate) enum Watch {
    Waiting(Waker),
    Done(Outcome),
}

pub(crate) struct Shared {
    /// Seeded foldhash: a quarter of SipHash's cost on short keys, still keyed per process.
    pub keys: DashMap<Key, Slot, foldhash::fast::RandomState>,
    pub ids: IdPool,
    watchers: Mutex<HashMap<EntryId, Watch>>,
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
            ids: IdPool::default(),
            watchers: Mutex::new(HashMap::new()),
            pending: AtomicUsize::new(0),
            max_pending,
            scheduled: AtomicU64::new(0),
            fired: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
        }
    }

    /// Claims `key` for a new timer that will live in the wheel under `id`. On failure the
    /// caller still owns `id` (it was never published).
    pub fn claim(&self, key: Key, id: EntryId, watched: bool) -> Result<(), Error> {
        if self.pending.fetch_add(1, Relaxed) >= self.max_pending {
            self.pending.fetch_sub(1, Relaxed);
            return Err(Error::Full(self.max_pending));
        }
        match self.keys.entry(key) {
            dashmap::Entry::Occupied(e) => {
                self.pending.fetch_sub(1, Relaxed);
                Err(Error::DuplicateKey(e.key().as_str().to_owned()))
            }
            dashmap::Entry::Vacant(e) => {
                e.insert(Slot(id.to_u64() | if watched { ARMED } else { 0 }));
                self.scheduled.fetch_add(1, Relaxed);
                Ok(())
            }
        }
    }

    /// Takes back a claim whose timer never reached the actor, as if it had never been made, and
    /// returns its id to the pool (a cancel may have seen it, so it comes back a generation on).
    pub fn unclaim(&self, key: &str, id: EntryId) {
        if self.keys.remove_if(key.as_bytes(), |_, slot| slot.id() == id).is_some() {
            self.pending.fetch_sub(1, Relaxed);
            self.scheduled.fetch_sub(1, Relaxed);
        }
        self.ids.give_back(id);
    }

    /// Ends the timer holding `key` if `owns` accepts its slot, and reports `outcome` to its
    /// watcher. Returns the timer's id if this call ended it.
    pub fn end(&self, key: &str, owns: impl FnOnce(Slot) -> bool, outcome: Outcome) -> Option<EntryId> {
        let mut wake = None;
        let counter = match outcome {
            Ok(()) => &self.fired,
            Err(Error::Cancelled) => &self.cancelled,
            Err(_) => &self.stopped,
        };
        let (_, slot) = self.keys.remove_if(key.as_bytes(), |_, &slot| {
            if !owns(slot) {
                return false;
            }
            // Recorded under the map's lock, so a watcher that no longer finds the key is
            // sure to find the outcome.
            if slot.armed() {
                wake = self.record(slot.id(), outcome);
            }
            true
        })?;
        self.pending.fetch_sub(1, Relaxed);
        counter.fetch_add(1, Relaxed);
        if let Some(waker) = wake {
            waker.wake();
        }
        Some(slot.id())
    }

    /// The id of the pending timer holding `key`.
    pub fn id_of(&self, key: &str) -> Option<EntryId> {
        self.keys.get(key.as_bytes()).map(|slot| slot.id())
    }

    /// Whether a timer with this key is pending.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains_key(key.as_bytes())
    }

    /// Leaves `outcome` for the watcher of `id`; returns its waker if it is already waiting.
    fn record(&self, id: EntryId, outcome: Outcome) -> Option<Waker> {
        let mut watchers = self.watchers.lock().expect("watchers lock poisoned");
        match watchers.insert(id, Watch::Done(outcome)) {
            Some(Watch::Waiting(waker)) => Some(waker),
            _ => None,
        }
    }

    /// Polls the outcome of timer `id` for its `Scheduled` future.
    pub fn poll_outcome(&self, id: EntryId, waker: &Waker) -> Option<Outcome> {
        let mut watchers = self.watchers.lock().expect("watchers lock poisoned");
        match watchers.remove(&id) {
            Some(Watch::Done(outcome)) => Some(outcome),
            Some(Watch::Waiting(old)) if old.will_wake(waker) => {
                watchers.insert(id, Watch::Waiting(old));
                None
            }
            _ => {
                watchers.insert(id, Watch::Waiting(waker.clone()));
                None
            }
        }
    }

    /// Stops watching timer `id`: clears its `ARMED` bit, or forgets its recorded outcome.
    pub fn unwatch(&self, key: &str, id: EntryId, polled: bool) {
        let pending = match self.keys.get_mut(key.as_bytes()) {
            Some(mut slot) if slot.id() == id => {
                slot.0 &= !ARMED;
                true
            }
            _ => false,
        };
        // An unpolled watcher of a pending timer has nothing in `watchers` to clean up.
        if polled || !pending {
            self.watchers.lock().expect("watchers lock poisoned").remove(&id);
        }
    }
}
