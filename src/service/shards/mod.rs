//! The timers, shared by the handles and the actor: split into shards by key, each shard a key
//! map and a wheel of its own behind one lock (see `shard.rs`).
//!
//! # One lock per request, and no hand-over
//! A key's shard is chosen by its hash. Scheduling claims the key and puts the timer in the
//! shard's wheel under that shard's lock; cancelling releases the key under it and leaves the
//! timer's entry to be swept out of the wheel with others. So a request costs one uncontended
//! lock, it is complete when its call returns, and the actor never sees a timer before it is due.
//!
//! # The actor
//! On each wake-up the actor advances every shard's wheel to the clock's tick, one shard at a time
//! under its lock (see `fired.rs`), and calls the due jobs once the lock is released, so no user
//! code ever runs under a shard's lock (timers dropped by a cancel or a stop are dropped outside
//! it too). When to wake it is `wake.rs`'s business.
//!
//! # Who ends a timer
//! Whoever removes a timer's key ends it, exactly once, under the shard's lock: the actor when the
//! timer fires for the last time or the service stops, a handle when it cancels. (When a repeating
//! timer fires, the actor releases its key and claims it again for the timer's next entry under
//! the same lock, so the timer never looks ended.) Its `Scheduled` future learns the outcome
//! through the shard's watchers (see `watch.rs`).

mod debounce;
mod fired;
mod pause;
mod replace;
mod shard;
mod wake;
mod watch;
mod wheel;

#[cfg(all(test, loom))]
mod loom;
#[cfg(test)]
mod tests;

use std::hash::BuildHasher;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::PoisonError;
use std::task::Waker;

use tokio::time::Instant;

use super::clock::{Clock, Due};
use super::config::WheelKind;
use super::key::Key;
use super::metrics::ServiceMetrics;
use super::stats::Stats;
use super::sync::{AtomicUsize, Mutex, MutexGuard};
use super::timer::{Run, Timer, ARMED};
use crate::lateness::Recent;
use crate::Error;
pub(crate) use fired::Fired;
pub(crate) use pause::PARKED;
use shard::{Shard, SWEEP_AT};
use wake::Wake;
pub(crate) use watch::Outcome;

/// Where a new timer went, for its `Scheduled` future to find it again without hashing its key:
/// its shard, the slab slot of the wheel entry it was placed in (a hint only: the timer may have
/// moved, ended or been cancelled since), and its serial number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub shard: u32,
    pub entry: u32,
    pub serial: u64,
}

/// The most timers [`Builder::capacity`](super::Builder::capacity) reserves room for: 2^28,
/// some 24 GB at about 88 bytes a timer, of which the key maps' 3 GB are written at the start.
pub(crate) const MAX_CAPACITY: usize = 1 << 28;

/// One shard, on its own cache lines so that locking one does not slow a neighbour.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

pub(crate) struct Shared {
    shards: Box<[Padded]>,
    hasher: foldhash::fast::RandomState,
    /// `shards.len()` is `1 << shard_bits`.
    shard_bits: u32,
    pub max_pending: usize,
    /// Timers pending across all shards, kept only when `max_pending` is set.
    limited_pending: AtomicUsize,
    wake: Wake,
    /// How late timers fired recently: the actor adds each advance's figures.
    pub lateness: Mutex<Recent>,
    /// The number of the next `TimerQueue`, which names its key space.
    pub next_queue: std::sync::atomic::AtomicU64,
    /// The service's clock, here so that a `TimerHandle` (which holds this `Shared`) need not
    /// carry a copy: a handle small enough to share a cache line with its ticket costs one
    /// cache miss less on a push-back.
    pub clock: Clock,
    /// The service's name ([`Builder::name`](super::Builder::name)), for its metrics and its
    /// jobs' spans.
    pub name: Box<str>,
    /// Its metrics (nothing, without the `metrics` feature).
    pub metrics: ServiceMetrics,
    /// The turns of the debounced keys' runs (`Scheduler::debounce`): a run holds its key's
    /// turn while it runs, so that the next burst's run waits for it. Only keys with a run
    /// pending or running have one (a dead entry goes at the next debounce of any key).
    pub debounce_turns: std::sync::Mutex<std::collections::HashMap<Box<str>, std::sync::Weak<tokio::sync::Mutex<()>>>>,
}

impl Shared {
    /// Four shards per core (as a power of two), each with an empty wheel of `kind`, and room
    /// for its share of `capacity` timers (see [`Builder::capacity`](super::Builder::capacity)).
    /// `name` is the service's, for its metrics (registered here) and its jobs' spans.
    pub fn new(
        kind: WheelKind,
        slots: usize,
        max_pending: usize,
        capacity: usize,
        clock: Clock,
        name: &str,
    ) -> Result<Self, Error> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shard_bits = (cores * 4).clamp(4, 64).next_power_of_two().trailing_zeros();
        Self::with_shards(kind, slots, max_pending, capacity, shard_bits, clock, name)
    }

    /// As [`new`](Self::new), with `1 << shard_bits` shards (at least 2).
    fn with_shards(
        kind: WheelKind,
        slots: usize,
        max_pending: usize,
        capacity: usize,
        shard_bits: u32,
        clock: Clock,
        name: &str,
    ) -> Result<Self, Error> {
        debug_assert!((1..64).contains(&shard_bits), "{shard_bits} shard bits: `locate` shifts by 64 minus them");
        let hasher = foldhash::fast::RandomState::default();
        // A shard's share, with room for the keys not spreading quite evenly; room past
        // `max_pending` would never be used.
        let capacity = capacity.min(max_pending);
        let share = capacity.div_ceil(1 << shard_bits);
        let share = if capacity == 0 { 0 } else { share.saturating_add(share / 16 + 64) };
        // Checked before anything is allocated: the key maps of the room are written at once, so
        // a room no machine could hold would end the process instead of failing here.
        if capacity > MAX_CAPACITY {
            return Err(Error::invalid(format!(
                "capacity {capacity} is more than the {MAX_CAPACITY} timers a service reserves room for \
                 (some 24 GB): ask for less, the room grows as timers come"
            )));
        }
        let shards = (0..1u32 << shard_bits)
            .map(|_| Ok(Padded(Mutex::new(Shard::new(kind, slots, share)?))))
            .collect::<Result<_, Error>>()?;
        Ok(Shared {
            shards,
            hasher,
            shard_bits,
            max_pending,
            limited_pending: AtomicUsize::new(0),
            wake: Wake::new(),
            lateness: Mutex::default(),
            next_queue: std::sync::atomic::AtomicU64::new(0),
            clock,
            name: name.into(),
            metrics: ServiceMetrics::new(name),
            debounce_turns: std::sync::Mutex::default(),
        })
    }

    /// The turn of the debounced runs of `key`, made if none is held, and the dead turns of
    /// other keys dropped while there are many.
    pub fn debounce_turn(&self, key: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.debounce_turns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(turn) = turns.get(key).and_then(std::sync::Weak::upgrade) {
            return turn;
        }
        if turns.len() >= 64 && turns.len().is_power_of_two() {
            turns.retain(|_, turn| turn.strong_count() > 0);
        }
        let turn = std::sync::Arc::new(tokio::sync::Mutex::new(()));
        turns.insert(key.into(), std::sync::Arc::downgrade(&turn));
        turn
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of a key, and the key's hash. The shard comes from the top bits, which the
    /// key map does not use (it places and tags keys by the low 32).
    fn locate(&self, key: &[u8]) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        ((hash >> (64 - self.shard_bits)) as usize, hash)
    }

    /// Locks a shard. Nothing user-supplied runs under a shard's lock, so only a bug of this
    /// crate can poison one; the shard is used as it is then, rather than panic again in every
    /// later call (and abort, from the drops that lock it while a panic unwinds).
    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        self.shards[shard].0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the actor if a timer set at `set_at` and due at `deadline` in `shard`'s wheel
    /// cannot wait for its next wake-up. Called under the shard's lock, after the timer is
    /// placed (see `wake.rs`).
    fn wake_if_urgent(&self, shard: &mut Shard, set_at: u64, deadline: u64) {
        if self.wake.urgent(set_at, shard.wheel.wake_by(deadline)) {
            self.wake.wake_actor();
        }
    }

    /// Resolves when a timer has been placed that the actor's next wake-up would be too late for.
    pub async fn ready(&self) {
        self.wake.ready().await
    }

    /// Claims `timer.key` for a new timer due at `due` and puts it in the shard's wheel. Returns
    /// where it went.
    pub fn add(&self, timer: Timer, due: Due, watched: bool) -> Result<Ticket, Error> {
        let (shard, hash) = self.locate(timer.key.as_bytes());
        let claimed = {
            let mut s = self.lock(shard);
            let claimed = self.claim(&mut s, hash, timer, due.deadline, watched);
            if claimed.is_ok() {
                self.wake_if_urgent(&mut s, due.set_at, due.deadline);
            }
            claimed
        };
        // A refused timer is dropped here, with no lock held.
        let (serial, entry) = claimed.map_err(|(error, _timer)| error)?;
        Ok(Ticket { shard: shard as u32, entry, serial })
    }

    /// Claims many keys (none watched), in order, taking each shard's lock once for all its
    /// keys: a locked instruction waits for earlier stores to reach the cache, so one lock per
    /// key would pay each key's cache miss in turn, while under one lock the misses of a shard's
    /// keys overlap.
    /// Returns each claimed timer's serial number, for the caller to cancel it by.
    pub fn add_many(&self, timers: Vec<(Timer, u64)>, set_at: u64) -> Vec<Result<u64, Error>> {
        let mut results = vec![Ok(0); timers.len()];
        let mut refused = Vec::new();
        if !self.reserve(timers.len()) {
            // Too close to `max_pending` to know in advance which items fit: one by one, in order.
            for (result, (timer, deadline)) in results.iter_mut().zip(timers) {
                let (shard, hash) = self.locate(timer.key.as_bytes());
                let mut s = self.lock(shard);
                match self.claim(&mut s, hash, timer, deadline, false) {
                    Ok((serial, _)) => {
                        *result = Ok(serial);
                        self.wake_if_urgent(&mut s, set_at, deadline);
                    }
                    Err((error, timer)) => {
                        *result = Err(error);
                        refused.push(timer);
                    }
                }
            }
            return results;
        }
        let mut groups = self.by_shard(timers.iter().map(|(timer, _)| timer.key.as_bytes()));
        let mut timers: Vec<Option<(Timer, u64)>> = timers.into_iter().map(Some).collect();
        for (shard, batch) in groups.drain(..) {
            let mut s = self.lock(shard);
            // Touch every key's home slot first: the loads do not depend on one another, so the
            // processor overlaps their cache misses, where the claims below would wait on each.
            for &(_, hash) in &batch {
                s.keys.touch(hash);
            }
            let mut urgent = false;
            for (i, hash) in batch {
                let (timer, deadline) = timers[i].take().expect("each timer is in one group");
                // Room in `max_pending` is held already.
                match s.claim(hash, timer, deadline, false) {
                    Ok((serial, _)) => {
                        results[i] = Ok(serial);
                        urgent |= self.wake.urgent(set_at, s.wheel.wake_by(deadline));
                    }
                    Err((error, timer)) => {
                        results[i] = Err(error);
                        refused.push(timer);
                        self.release(1);
                    }
                }
            }
            if urgent {
                self.wake.wake_actor();
            }
        }
        results
    }

    /// Claims the key for one timer under its shard's lock, counting it against `max_pending`.
    /// A refused timer comes back with the error, to be dropped once the lock is released.
    fn claim(
        &self,
        s: &mut Shard,
        hash: u64,
        timer: Timer,
        deadline: u64,
        watched: bool,
    ) -> Result<(u64, u32), (Error, Timer)> {
        if !self.reserve(1) {
            return Err((Error::Full(self.max_pending), timer));
        }
        s.claim(hash, timer, deadline, watched).inspect_err(|_| self.release(1))
    }

    /// Reserves room for `n` more pending timers under `max_pending`, all or none.
    fn reserve(&self, n: usize) -> bool {
        self.max_pending == usize::MAX
            || self
                .limited_pending
                .fetch_update(Relaxed, Relaxed, |pending| pending.checked_add(n).filter(|&p| p <= self.max_pending))
                .is_ok()
    }

    /// Gives back the room of `n` timers that ended or were never accepted.
    fn release(&self, n: usize) {
        if self.max_pending != usize::MAX && n > 0 {
            self.limited_pending.fetch_sub(n, Relaxed);
        }
    }

    /// Groups keys (by position) under the shard that holds them, each with its hash; a
    /// counting sort, since shards are few.
    fn by_shard<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Vec<(usize, Vec<(usize, u64)>)> {
        let mut groups: Vec<(usize, Vec<(usize, u64)>)> = (0..self.shards.len()).map(|s| (s, Vec::new())).collect();
        for (i, key) in keys.enumerate() {
            let (shard, hash) = self.locate(key);
            groups[shard].1.push((i, hash));
        }
        groups.retain(|(_, batch)| !batch.is_empty());
        groups
    }

    /// Moves the timer holding `key` to the deadline `due` (tick `deadline`, set at tick
    /// `set_at`); a repeating timer goes on at its period from `due`.
    pub fn move_timer(&self, key: &[u8], due: Instant, deadline: u64, set_at: u64) -> Result<(), Error> {
        let (shard, hash) = self.locate(key);
        let mut s = self.lock(shard);
        if s.closed {
            return Err(Error::Stopped);
        }
        let pos = s.find(hash, key, None).ok_or(Error::NotFound)?;
        let index = s.keys.index_at(pos);
        // A later deadline needs no wake-up: the actor wakes for the old one anyway.
        if s.move_to(index, deadline, due) {
            self.wake_if_urgent(&mut s, set_at, deadline);
        }
        Ok(())
    }

    /// Moves the timer of `ticket` (holding `key`) as [`move_timer`](Self::move_timer) does,
    /// found by its entry: no hash and no key compare while it is still there.
    pub fn move_ticket(
        &self,
        key: &Key,
        ticket: Ticket,
        due: Instant,
        deadline: u64,
        set_at: u64,
    ) -> Result<(), Error> {
        let mut s = self.lock(ticket.shard as usize);
        if s.closed {
            return Err(Error::Stopped);
        }
        let index = s.find_ticket(ticket, key, &self.hasher).ok_or(Error::NotFound)?;
        // A later deadline needs no wake-up: the actor wakes for the old one anyway. (The
        // `move_no_wake` mutant checks no move at all.)
        if s.move_to(index, deadline, due) && cfg!(not(tw_mutant = "move_no_wake")) {
            self.wake_if_urgent(&mut s, set_at, deadline);
        }
        Ok(())
    }

    /// Moves the pending timer holding `key` to `due` (at the instant `at`), or claims the key
    /// for the timer `make` builds if none is pending, under one lock. Returns whether a timer
    /// was claimed, and the ticket of the pending timer. `make` is called only to claim (it runs
    /// no user code: it moves a job into a box), and is dropped, with whatever it holds, once
    /// the lock is released. `watched` marks a newly claimed timer as watched by a `Scheduled`.
    pub fn upsert(
        &self,
        key: &Key,
        make: impl FnOnce() -> Timer,
        due: Due,
        at: Instant,
        watched: bool,
    ) -> Result<(bool, Ticket), Error> {
        let (shard, hash) = self.locate(key.as_bytes());
        let mut s = self.lock(shard);
        if s.closed {
            return Err(Error::Stopped);
        }
        let (result, unused, placed) = match s.find(hash, key.as_bytes(), None) {
            Some(pos) => {
                let index = s.keys.index_at(pos);
                let earlier = s.move_to(index, due.deadline, at);
                let serial = s.wheel.at(index).1.serial();
                (Ok((false, Ticket { shard: shard as u32, entry: index, serial })), (Some(make), None), earlier)
            }
            None => match self.claim(&mut s, hash, make(), due.deadline, watched) {
                Ok((serial, entry)) => (Ok((true, Ticket { shard: shard as u32, entry, serial })), (None, None), true),
                Err((error, timer)) => (Err(error), (None, Some(timer)), false),
            },
        };
        // A deadline moved later needs no wake-up: the actor wakes for the old one anyway.
        if placed {
            self.wake_if_urgent(&mut s, due.set_at, due.deadline);
        }
        // What was not used (the maker of a timer not needed, or a timer refused) is dropped
        // here, with no lock held.
        drop(s);
        drop(unused);
        result
    }

    /// The deadline tick of the pending timer holding `key`, with the exact instant of a
    /// repeating timer's next run; `None` for a paused timer too, which has none.
    pub fn deadline(&self, key: &[u8]) -> Option<(u64, Option<Instant>)> {
        let (shard, hash) = self.locate(key);
        let s = self.lock(shard);
        let pos = s.find(hash, key, None)?;
        Some(Self::deadline_at(&s, s.keys.index_at(pos))).filter(|&(tick, _)| tick < PARKED)
    }

    /// As [`deadline`](Self::deadline), for the timer of `ticket` (holding `key`).
    pub fn deadline_ticket(&self, key: &Key, ticket: Ticket) -> Option<(u64, Option<Instant>)> {
        let s = self.lock(ticket.shard as usize);
        let index = s.find_ticket(ticket, key, &self.hasher)?;
        Some(Self::deadline_at(&s, index)).filter(|&(tick, _)| tick < PARKED)
    }

    fn deadline_at(s: &Shard, index: u32) -> (u64, Option<Instant>) {
        let (id, timer) = s.wheel.at(index);
        let exact = match &timer.run {
            Run::Repeat(repeat) => Some(repeat.due),
            Run::Once(_) => None,
        };
        (s.wheel.deadline(id).expect("a pending timer is in its shard's wheel"), exact)
    }

    /// The earliest deadline tick of the pending timers whose stored key starts with `prefix`
    /// (a queue's key space), one shard at a time under its lock. Each shard's wheel is read in
    /// the order its buckets come due, up to the first such timer's bucket (see
    /// `earliest_where`). A cancelled timer's emptied entry keeps its key until it is swept, so
    /// it is passed over by its mark.
    pub fn earliest_with_prefix(&self, prefix: &[u8]) -> Option<u64> {
        let wanted = |timer: &Timer| !timer.is_cancelled() && timer.key.as_bytes().starts_with(prefix);
        (0..self.shards.len()).filter_map(|shard| self.lock(shard).wheel.earliest_where(wanted)).min()
    }

    /// Whether the timer of `ticket` (holding `key`) is pending.
    pub fn contains_ticket(&self, key: &Key, ticket: Ticket) -> bool {
        self.lock(ticket.shard as usize).find_ticket(ticket, key, &self.hasher).is_some()
    }

    /// Cancels the timer holding `key` (only if it has the serial number `serial`, when given).
    /// Returns whether this call ended it.
    pub fn cancel(&self, key: &[u8], serial: Option<u64>) -> bool {
        self.take(key, serial).is_some()
    }

    /// Cancels the timer holding `key` (only if it has the serial number `serial`, when given),
    /// as [`cancel`](Self::cancel) does, and gives back its job, taken out under the lock.
    pub fn take(&self, key: &[u8], serial: Option<u64>) -> Option<Run> {
        let (shard, hash) = self.locate(key);
        let mut swept = Vec::new();
        let (waker, held) = {
            let mut s = self.lock(shard);
            let ended = s.cancel(hash, key, serial)?;
            if s.cancelled.len() >= SWEEP_AT {
                s.sweep(&mut swept);
            }
            ended
        };
        self.release(1);
        if let Some(waker) = waker {
            waker.wake();
        }
        drop(swept);
        Some(held)
    }

    /// The batch form of [`cancel`](Self::cancel), one lock per shard (see
    /// [`add_many`](Self::add_many)). Returns, per key, whether this call ended its timer.
    pub fn cancel_many(&self, keys: &[&[u8]]) -> Vec<bool> {
        let mut ended = vec![false; keys.len()];
        let mut swept = Vec::new();
        let mut held = Vec::new();
        let mut wake = Vec::new();
        for (shard, batch) in self.by_shard(keys.iter().copied()) {
            let mut s = self.lock(shard);
            // Touch every key's home slot first, as `add_many` does.
            for &(_, hash) in &batch {
                s.keys.touch(hash);
            }
            for (i, hash) in batch {
                if let Some((waker, run)) = s.cancel(hash, keys[i], None) {
                    ended[i] = true;
                    wake.extend(waker);
                    held.push(run);
                }
            }
            if s.cancelled.len() >= SWEEP_AT {
                s.sweep(&mut swept);
            }
        }
        self.release(ended.iter().filter(|&&e| e).count());
        wake.into_iter().for_each(Waker::wake);
        drop((swept, held));
        ended
    }

    /// Whether a timer with this key is pending.
    pub fn contains(&self, key: &[u8]) -> bool {
        let (shard, hash) = self.locate(key);
        self.lock(shard).find(hash, key, None).is_some()
    }

    /// The counters, summed over the shards at one instant; published as metrics too.
    ///
    /// Every shard is locked at once for the sum (in order, and this is the only call that holds
    /// more than one shard's lock, so none can deadlock). Summed one shard at a time, the count
    /// of pending timers could pass `max_pending`: a timer cancelled in a shard already read
    /// frees room that another thread's timer takes in a shard not yet read, and both were
    /// counted. Each shard counts a timer only while it holds room in `max_pending` (the room is
    /// reserved before the count goes up and given back after it goes down), so a sum taken at
    /// one instant never does.
    pub fn stats(&self) -> Stats {
        let shards: Vec<_> = (0..self.shards.len()).map(|shard| self.lock(shard)).collect();
        let mut total = Stats::default();
        for shard in &shards {
            total.add(&shard.counts);
        }
        drop(shards);
        debug_assert!(
            total.pending <= self.max_pending,
            "{} timers pending past max_pending {}",
            total.pending,
            self.max_pending
        );
        self.metrics.publish(&total);
        total
    }

    /// Whether the service has stopped (every shard is closed together, the first one first).
    #[cfg(feature = "metrics")]
    pub fn is_closed(&self) -> bool {
        self.lock(0).closed
    }

    /// For the actor, before it advances the wheels: a timer placed from now on that cannot
    /// wait wakes it again.
    pub fn clear_signal(&self) {
        self.wake.clear_signal();
    }

    /// For the actor: advances `shard`'s wheel to `now` (see `fired.rs`). Returns the
    /// wheel's next deadline.
    pub fn fire(&self, shard: usize, now: Instant, clock: &Clock, fired: &mut Fired) -> Option<u64> {
        let read = (now, clock.read_nanos(now));
        let (ended, next) = fired::advance(&mut self.lock(shard), &self.hasher, read, clock, fired);
        self.release(ended);
        next
    }

    /// For the actor: takes the entries of `shard`'s cancelled timers out of its wheel, their
    /// keys that own memory into `keys`, to be dropped with no lock held.
    pub fn sweep(&self, shard: usize, keys: &mut Vec<Key>) {
        self.lock(shard).sweep(keys);
    }

    /// For the actor, asked to give memory back: sweeps `shard` and moves its timers into a wheel
    /// and key map sized for them (see `Shard::compact`).
    pub fn shrink(&self, shard: usize) {
        let mut swept = Vec::new();
        {
            let mut s = self.lock(shard);
            s.sweep(&mut swept);
            // On failure to allocate the smaller wheel, the shard keeps the one it has.
            let _ = s.compact(&self.hasher);
            s.watchers.shrink_to_fit();
            // The actor asks the wheels for their next deadline before it waits again.
        }
        drop(swept);
    }

    /// For the actor, before it waits: publishes the tick it will wake at without being told
    /// (0 if it wakes on every tick whatever is due, at least 1 otherwise), then says whether a
    /// timer was placed meanwhile that is due before it.
    pub fn will_wake_at(&self, tick: u64) -> bool {
        // (The `publish_late` mutant looks before it publishes: a timer placed in between is
        // neither seen nor told about the new wake-up.)
        #[cfg(not(tw_mutant = "publish_late"))]
        self.wake.publish(tick);
        // A timer placed after this look finds `tick` under the shard's lock, and wakes the
        // actor if it cannot wait for it.
        let missed = tick != 0
            && (0..self.shards.len()).any(|shard| self.lock(shard).wheel.next_deadline().is_some_and(|t| t < tick));
        #[cfg(tw_mutant = "publish_late")]
        self.wake.publish(tick);
        missed
    }

    /// For the actor, once it stops (or its task is dropped): refuses every request to `shard`
    /// from now on and ends its pending timers as stopped. Returns how many there were.
    pub fn close(&self, shard: usize) -> usize {
        let (mut keys, mut timers, mut wake) = (Vec::new(), Vec::new(), Vec::new());
        let stopped = self.lock(shard).close(&mut keys, &mut timers, &mut wake);
        self.release(stopped);
        wake.into_iter().for_each(Waker::wake);
        drop((keys, timers));
        stopped
    }

    /// Polls the outcome of timer `serial` of `shard` for its `Scheduled` future.
    pub fn poll_outcome(&self, shard: u32, serial: u64, waker: &Waker) -> Option<Outcome> {
        self.lock(shard as usize).watchers.poll(serial, waker)
    }

    /// Stops watching the timer of `ticket` (holding `key`): clears its `ARMED` bit, or forgets
    /// its recorded outcome.
    pub fn unwatch(&self, key: &[u8], ticket: Ticket, polled: bool) {
        let Ticket { shard, entry, serial } = ticket;
        let mut s = self.lock(shard as usize);
        // Most often the timer is still in the entry it was placed in (a cancelled one's entry
        // has lost its serial number); if not, look its key up.
        let index = match s.wheel.try_at(entry) {
            Some((_, timer)) if timer.serial() == serial => Some(entry),
            _ => s.find(self.hasher.hash_one(key), key, Some(serial)).map(|pos| s.keys.index_at(pos)),
        };
        if let Some(index) = index {
            s.wheel.at_mut(index).serial &= !ARMED;
        }
        // An unpolled watcher of a pending timer has nothing in `watchers` to clean up. (The
        // `unwatch_keeps` mutant forgets that an ended timer's outcome may be waiting there.)
        if polled || (index.is_none() && cfg!(not(tw_mutant = "unwatch_keeps"))) {
            s.watchers.forget(serial);
        }
    }
}
