//! One shard: a key map and a wheel behind one lock, with the watchers and counters of its
//! timers. Claiming a key places its timer in the wheel; cancelling releases the key and leaves
//! the wheel entry to be swept out with others.
//!
//! # Invariants (checked by [`Shard::check`] in debug builds)
//! - Every entry in the wheel is named by exactly one key-map slot (its key's) or waits in
//!   `cancelled`: `keys.len() + cancelled.len() == wheel.len()`.
//! - `counts.pending == keys.len()`: a timer is pending exactly while its key is claimed.
//! - A timer's deadline is a real one, at most [`MAX_DEADLINE`], or a parked one, at least
//!   [`PARKED`] (see `pause.rs`): checked where deadlines are set.

use std::hash::BuildHasher;
use std::task::Waker;

use tokio::time::Instant;

use super::super::clock::MAX_DEADLINE;
use super::super::config::WheelKind;
use super::super::index::KeyIndex;
use super::super::key::{Key, Probe};
use super::super::stats::Stats;
use super::super::timer::{Run, Timer, ARMED, CANCELLED};
use super::watch::{Outcome, Watchers};
use super::wheel::ShardWheel;
use super::{Ticket, PARKED};
use crate::wheel::EntryId;
use crate::Error;

/// How many cancelled timers a shard keeps in its wheel before the cancel that makes it this many
/// sweeps them out (the actor sweeps every shard it advances, too). Few enough that the entries,
/// which each cancel has just read to compare its key, are still in cache when they are swept.
pub(super) const SWEEP_AT: usize = 64;

/// A shard keeps room for this many timers however few it holds: below it, giving room back is
/// not worth a pass over the shard.
const ROOM_KEPT: usize = 4096;

pub(super) struct Shard {
    /// Which wheel entry holds each claimed key (see [`KeyIndex`]).
    pub keys: KeyIndex,
    pub wheel: ShardWheel,
    /// The wheel entries of cancelled timers, whose keys are released already, taken out of the
    /// wheel together (see [`Shard::sweep`]).
    pub cancelled: Vec<EntryId>,
    pub watchers: Watchers,
    /// The serial number of the next timer.
    next_serial: u64,
    /// The room the shard was asked to reserve at the start, which compacting keeps.
    reserved: usize,
    /// Set once the service has stopped: requests are refused from then on.
    pub closed: bool,
    pub counts: Stats,
}

impl Shard {
    /// An empty shard with room for `capacity` timers.
    pub fn new(kind: WheelKind, slots: usize, capacity: usize) -> Result<Self, Error> {
        let mut keys = KeyIndex::new();
        keys.try_reserve(capacity).map_err(|e| Error::invalid(format!("no room for {capacity} timers: {e}")))?;
        Ok(Shard {
            keys,
            wheel: ShardWheel::new(kind, slots, capacity)?,
            cancelled: Vec::new(),
            watchers: Watchers::default(),
            next_serial: 0,
            reserved: capacity,
            closed: false,
            counts: Stats::default(),
        })
    }

    /// The key map slot of the pending timer holding `key` (whose hash is `hash`), if it has
    /// the serial number `serial` (when given).
    pub fn find(&self, hash: u64, key: &[u8], serial: Option<u64>) -> Option<usize> {
        let probe = Probe::new(key);
        self.keys.find(hash, |index| {
            let (_, timer) = self.wheel.at(index);
            timer.key.matches(&probe) && serial.is_none_or(|s| timer.serial() == s)
        })
    }

    /// Claims the key for a timer (already counted against `max_pending`) and puts the timer in
    /// the wheel; returns its serial number and its entry's slab slot. A refused timer comes
    /// back with the error.
    pub fn claim(
        &mut self,
        hash: u64,
        mut timer: Timer,
        deadline: u64,
        watched: bool,
    ) -> Result<(u64, u32), (Error, Timer)> {
        // (The `claim_after_close` mutant accepts timers that nobody will fire.)
        if self.closed && cfg!(not(tw_mutant = "claim_after_close")) {
            return Err((Error::Stopped, timer));
        }
        if self.wheel.len() >= crate::wheel::MAX_ENTRIES {
            return Err((Error::Full(crate::wheel::MAX_ENTRIES), timer));
        }
        check_deadline(deadline);
        self.keys.reserve_one();
        let wheel = &self.wheel;
        let Err(vacant) = self.keys.find_or_vacant(hash, |index| wheel.at(index).1.key == timer.key) else {
            return Err((Error::DuplicateKey(timer.key.as_str().to_owned()), timer));
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        timer.serial = serial | if watched { ARMED } else { 0 };
        let entry = self.wheel.insert(deadline, timer);
        self.keys.fill(vacant, hash, entry.index());
        self.counts.pending += 1;
        self.counts.scheduled += 1;
        self.check();
        Ok((serial, entry.index()))
    }

    /// Moves the pending timer in slab slot `index` to tick `deadline`, due at the instant `at`:
    /// a repeating timer goes on at its period from there. The timer keeps its entry, so the key
    /// map and the tickets that name the entry stay as they are; a later deadline is one write
    /// (see `Wheel::reschedule`). Returns whether the deadline moved earlier: only then can the
    /// actor need waking sooner (a later one is filed again when its old bucket comes).
    pub fn move_to(&mut self, index: u32, deadline: u64, at: Instant) -> bool {
        check_deadline(deadline);
        let (id, timer) = self.wheel.at(index);
        if let Run::Repeat(_) = timer.run {
            if let Run::Repeat(repeat) = &mut self.wheel.at_mut(index).run {
                repeat.due = at;
            }
        }
        let earlier = self.wheel.deadline(id).is_none_or(|old| deadline < old);
        self.wheel.reschedule(id, deadline);
        earlier
    }

    /// The slab slot of the pending timer of `ticket`, which holds `key`: the ticket's own entry
    /// while the timer is still there, which costs no hash, no key compare and no read of `key`
    /// (a handle's key sits apart from its ticket); else (the shard was compacted, or a
    /// repeating timer moved to a new entry for its next run) the timer is looked up by key
    /// (hashed with `hasher`) and serial.
    pub fn find_ticket(&self, ticket: Ticket, key: &Key, hasher: &impl BuildHasher) -> Option<u32> {
        match self.wheel.try_at(ticket.entry) {
            Some((_, timer)) if timer.serial() == ticket.serial => Some(ticket.entry),
            _ => {
                let key = key.as_bytes();
                self.find(hasher.hash_one(key), key, Some(ticket.serial)).map(|pos| self.keys.index_at(pos))
            }
        }
    }

    /// Cancels the timer holding `key` if it has the serial number `serial` (when given):
    /// releases the key, tells its watcher and counts it. Returns, if it ended a timer, the
    /// watcher's waker and the timer's job, both for the caller to use or drop once unlocked:
    /// what a cancelled timer holds (a queue's sender and value, a job's captures) is released
    /// at the cancel, not when its entry is swept. The emptied wheel entry, which keeps only the
    /// service's own copy of the key, waits for the next sweep.
    pub fn cancel(&mut self, hash: u64, key: &[u8], serial: Option<u64>) -> Option<(Option<Waker>, Run)> {
        let pos = self.find(hash, key, serial)?;
        let index = self.keys.index_at(pos);
        Some(self.cancel_at(pos, index))
    }

    /// Cancels the pending timer in key-map slot `pos`, whose entry is in slab slot `index`
    /// (see [`cancel`](Self::cancel)). Only the job is taken out, for one that holds nothing,
    /// and the entry is marked [`CANCELLED`]: swapping the whole timer for an emptied one and
    /// carrying it back to the caller made a keyed cancel measurably slower (BENCHMARKS.md).
    pub fn cancel_at(&mut self, pos: usize, index: u32) -> (Option<Waker>, Run) {
        debug_assert_eq!(self.keys.index_at(pos), index, "key-map slot {pos} names entry {index}");
        let (id, _) = self.wheel.at(index);
        let timer = self.wheel.at_mut(index);
        let serial = std::mem::replace(&mut timer.serial, CANCELLED);
        let run = std::mem::replace(&mut timer.run, Run::released());
        self.keys.remove(pos);
        self.cancelled.push(id);
        self.counts.cancelled += 1;
        let waker = self.finish(serial, &Err(Error::Cancelled));
        self.check();
        (waker, run)
    }

    /// Takes the cancelled timers' entries out of the wheel. Done in batches because the
    /// entries' places in their buckets are scattered through memory: with every id known up
    /// front the processor fetches several at once, where a cancel that took its own entry out
    /// would wait for each in turn. Each entry holds only its key by now (the cancel took its job
    /// and left [`Run::released`], which is forgotten here: dropping it would be a call through
    /// its vtable that does nothing). Keys that own memory go into `keys`, to be dropped once
    /// unlocked; an inline key owns none and is not kept.
    pub fn sweep(&mut self, keys: &mut Vec<Key>) {
        for id in self.cancelled.drain(..) {
            if let Some(Timer { key, run, .. }) = self.wheel.remove(id) {
                run.forget_released();
                if let Key::Shared(_) = key {
                    keys.push(key);
                }
            }
        }
    }

    /// Refuses every request from now on and ends every pending timer as stopped, their wakers
    /// into `wake`; every timer taken out goes into `timers`, and the swept keys that own memory
    /// into `keys`, to be dropped once unlocked. Returns how many were pending.
    pub fn close(&mut self, keys: &mut Vec<Key>, timers: &mut Vec<Timer>, wake: &mut Vec<Waker>) -> usize {
        self.closed = true;
        // Cancelled timers, ended already, then every pending one.
        self.sweep(keys);
        let swept = timers.len();
        self.wheel.advance(u64::MAX, |expired| timers.push(expired.value));
        self.keys.clear();
        let pending = &timers[swept..];
        self.counts.stopped += pending.len() as u64;
        for timer in pending {
            wake.extend(self.finish(timer.serial, &Err(Error::Stopped)));
        }
        self.check();
        pending.len()
    }

    /// The bookkeeping of a timer that has ended, its key released: records `outcome` for its
    /// watcher, if it has one, and returns the waker to call once unlocked.
    /// `serial` is the timer's, with its [`ARMED`] bit.
    pub fn finish(&mut self, serial: u64, outcome: &Outcome) -> Option<Waker> {
        self.counts.pending -= 1;
        if serial & ARMED == 0 {
            return None;
        }
        self.watchers.record(serial & !ARMED, outcome)
    }

    /// Whether the shard holds so few timers for its room that it should give the room back:
    /// fewer than a quarter of the entries its wheel or key map has room for, past [`ROOM_KEPT`]
    /// and past what it was asked to reserve.
    pub fn sparse(&self) -> bool {
        let room = self.wheel.room().max(self.keys.capacity());
        room > ROOM_KEPT.max(self.reserved) && self.wheel.len() < room / 4
    }

    /// Moves every timer into a new wheel and key map sized for them (and for what the shard was
    /// asked to reserve), giving back the room that a burst left in the slab, the buckets and
    /// the key map. Cancelled timers must have been swept. O(timers), under the shard's lock.
    /// Timers keep their serial numbers; tickets that name their old entries find them by key.
    pub fn compact(&mut self, hasher: &impl BuildHasher) -> Result<(), Error> {
        debug_assert!(self.cancelled.is_empty(), "sweep before compacting");
        let room = self.wheel.len().max(self.reserved);
        let wheel = self.wheel.fresh(room)?;
        let mut keys = KeyIndex::new();
        keys.try_reserve(room).map_err(|e| Error::invalid(format!("no room for {room} timers: {e}")))?;
        // What was armed to drain is armed again by the inserts.
        for (deadline, timer) in std::mem::replace(&mut self.wheel, wheel).into_entries() {
            let hash = hasher.hash_one(timer.key.as_bytes());
            keys.insert_new(hash, self.wheel.insert(deadline, timer).index());
        }
        self.keys = keys;
        self.check();
        Ok(())
    }

    /// Checks the invariants of the module docs that hold for the whole shard, in debug builds.
    pub fn check(&self) {
        debug_assert_eq!(
            self.keys.len() + self.cancelled.len(),
            self.wheel.len(),
            "every wheel entry is named by a key or waits in `cancelled`"
        );
        debug_assert_eq!(self.counts.pending, self.keys.len(), "a timer is pending exactly while its key is claimed");
    }
}

/// Checks, in debug builds, that `deadline` is a real deadline or a parked one (see the
/// module docs): a real one past [`MAX_DEADLINE`] would read as parked.
fn check_deadline(deadline: u64) {
    debug_assert!(
        deadline <= MAX_DEADLINE || deadline >= PARKED,
        "deadline tick {deadline} is past the latest real one, {MAX_DEADLINE}, and short of a parked one, {PARKED}"
    );
}
