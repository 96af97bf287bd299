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

use dashmap::{DashMap, SharedValue};

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

    /// Claims many keys for timers (none watched), taking each shard's lock once for all its
    /// keys rather than once per key. A locked instruction waits for earlier stores to reach the
    /// cache, so one lock per key would pay each key's cache miss in turn; under one lock the
    /// misses of a shard's keys overlap. Results are in the order of `claims`.
    pub fn claim_many(&self, claims: &[(Key, EntryId)]) -> Vec<Result<(), Error>> {
        if !self.reserve(claims.len()) {
            // Too close to `max_pending` to know in advance which items fit: one by one, in order.
            return claims.iter().map(|(key, id)| self.claim(key.clone(), *id, false)).collect();
        }
        let mut results = vec![Ok(()); claims.len()];
        let mut inserted = 0;
        for (shard, batch) in self.by_shard(claims.iter().map(|(key, _)| key.as_bytes())) {
            let mut table = self.keys.shards()[shard].write();
            for (i, hash) in batch {
                let (key, id) = &claims[i];
                if table.find(hash, |(k, _)| k == key).is_some() {
                    results[i] = Err(Error::DuplicateKey(key.as_str().to_owned()));
                    continue;
                }
                let value = (key.clone(), SharedValue::new(Slot(id.to_u64())));
                table.insert(hash, value, |(k, _)| self.keys.hash_usize(k) as u64);
                inserted += 1;
            }
        }
        self.pending.fetch_sub(claims.len() - inserted, Relaxed);
        self.scheduled.fetch_add(inserted as u64, Relaxed);
        results
    }

    /// Reserves room for `n` more pending timers under `max_pending`, all or none.
    fn reserve(&self, n: usize) -> bool {
        self.pending
            .fetch_update(Relaxed, Relaxed, |pending| pending.checked_add(n).filter(|&p| p <= self.max_pending))
            .is_ok()
    }

    /// Groups keys (by position) under the shard that holds them, each with its hash; a
    /// counting sort, since shards are few.
    fn by_shard<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<(usize, Vec<(usize, u64)>)> {
        let mut groups: Vec<(usize, Vec<(usize, u64)>)> =
            (0..self.keys.shards().len()).map(|shard| (shard, Vec::new())).collect();
        for (i, key) in keys.enumerate() {
            let hash = self.keys.hash_usize(&key);
            groups[self.keys.determine_shard(hash)].1.push((i, hash as u64));
        }
        groups.retain(|(_, batch)| !batch.is_empty());
        groups
    }

    /// The batch form of [`end`](Self::end), one lock per shard (see
    /// [`claim_many`](Self::claim_many)): ends the timer holding each key, only if it has the
    /// given id when one is given, and reports `outcome` to its watcher. Returns, per key, the
    /// id of the timer this call ended.
    pub fn end_many(&self, timers: &[(&[u8], Option<EntryId>)], outcome: Outcome) -> Vec<Option<EntryId>> {
        let mut ended = vec![None; timers.len()];
        let mut wake = Vec::new();
        for (shard, batch) in self.by_shard(timers.iter().map(|(key, _)| *key)) {
            let mut table = self.keys.shards()[shard].write();
            for (i, hash) in batch {
                let (key, id) = timers[i];
                let owned = |(k, slot): &(Key, SharedValue<Slot>)| {
                    k.as_bytes() == key && id.is_none_or(|id| slot.get().id() == id)
                };
                let Some((_, slot)) = table.remove_entry(hash, owned) else {
                    continue;
                };
                let slot = slot.into_inner();
                if slot.armed() {
                    wake.extend(self.record(slot.id(), outcome.clone()));
                }
                ended[i] = Some(slot.id());
            }
        }
        let count = ended.iter().flatten().count();
        self.pending.fetch_sub(count, Relaxed);
        self.counter(&outcome).fetch_add(count as u64, Relaxed);
        wake.into_iter().for_each(Waker::wake);
        ended
    }

    /// Takes back a claim whose timer never reached the actor, as if it had never been made, and
    /// returns its id to the pool (a cancel may have seen it, so it comes back a generation on).
    pub fn unclaim(&self, key: &str, id: EntryId) {
        if self.keys.remove_if(key.as_bytes(), |_, slot| slot.id() == id).is_some() {
            self.pending.fetch_sub(1, Relaxed);
            self.scheduled.fetch_sub(1, Relaxed);
        } else {
            // A cancel ended it meanwhile and left its outcome for a `Scheduled` that will now
            // never exist.
            self.watchers.lock().expect("watchers lock poisoned").remove(&id);
        }
        self.ids.give_back(id);
    }

    /// Ends the timer holding `key` if `owns` accepts its slot, and reports `outcome` to its
    /// watcher. Returns the timer's id if this call ended it.
    pub fn end(&self, key: &str, owns: impl FnOnce(Slot) -> bool, outcome: Outcome) -> Option<EntryId> {
        let mut wake = None;
        let counter = self.counter(&outcome);
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

    /// The `Stats` counter of timers that ended with `outcome`.
    fn counter(&self, outcome: &Outcome) -> &AtomicU64 {
        match outcome {
            Ok(()) => &self.fired,
            Err(Error::Cancelled) => &self.cancelled,
            Err(_) => &self.stopped,
        }
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
