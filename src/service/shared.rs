//! The timers, shared by the handles and the actor: split into shards by key, each shard a key
//! map and a wheel of its own behind one lock, with the watchers and counters of its timers.
//!
//! # One lock per request, and no hand-over
//! A key's shard is chosen by its hash. Scheduling claims the key and puts the timer in the
//! shard's wheel under that shard's lock; cancelling releases the key under it and leaves the
//! timer's entry in `cancelled`, to be swept out of the wheel with others (see [`Shard::sweep`]).
//! So a request costs one uncontended lock, it is complete when its call returns, and the actor
//! never sees a timer before it is due. Every entry in a shard's wheel is named by its key's slot
//! in the shard's key map (which holds the entry's slab slot, not the key: the key is in the
//! entry) or waits in `cancelled`; the actor sweeps a shard before it advances it, so every entry
//! it finds due holds its key.
//!
//! # The actor
//! On each wake-up the actor advances every shard's wheel to the clock's tick, one shard at a time
//! under its lock: it ends the timers that have run for the last time, puts repeating ones back,
//! and takes their jobs and keys out. It calls the jobs once the lock is released, so no user code
//! ever runs under a shard's lock (timers dropped by a cancel or a stop are dropped outside it too).
//!
//! # Waking the actor only when it must
//! The actor publishes the tick it will wake at anyway (`next_wake`). A new timer due before then
//! wakes it through `ready`; everything else waits for that wake-up, so a burst of schedules and
//! cancels costs no task switch per request. The actor looks at the wheels once more after
//! publishing, so a timer placed while it was busy is never left behind.
//!
//! # Who ends a timer
//! Whoever removes a timer's key ends it, exactly once, under the shard's lock: the actor when the
//! timer fires for the last time or the service stops, a handle when it cancels. (When a repeating
//! timer fires, the actor releases its key and claims it again for the timer's next entry under
//! the same lock, so the timer never looks ended.)
//!
//! # Watching a timer without allocating for it
//! A `Scheduled` future that is never polled costs nothing beyond an `ARMED` bit in its timer's
//! serial number. When an armed timer ends, its outcome is left in the shard's `watchers` for the
//! future to collect; a polled future parks its waker there. Dropping the future clears the bit, so
//! outcomes are only ever recorded for futures that can still read them. A future names its timer
//! by a serial number, unique in its shard, which stays the same while a repeating timer moves
//! from one wheel entry to the next; it also keeps its shard and the entry the timer was placed in
//! (a [`Ticket`]), so that dropping it finds a timer that has not moved without a lookup.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::builder::WheelKind;
use super::clock::{Clock, Due};
use super::command::{Run, Timer, ARMED};
use super::handle::Stats;
use super::index::KeyIndex;
use super::job::JobRef;
use super::key::{Key, Probe};
use crate::wheel::{EntryId, Expired, HierarchicalWheel, RoundsWheel, Wheel};
use crate::Error;

/// How a timer ended, as its `Scheduled` future reports it.
pub(crate) type Outcome = Result<(), Error>;

/// Where a new timer went, for its `Scheduled` future to find it again without hashing its key:
/// its shard, the slab slot of the wheel entry it was placed in (a hint only: the timer may have
/// moved, ended or been cancelled since), and its serial number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub shard: u32,
    pub entry: u32,
    pub serial: u64,
}

/// The serial number a cancelled timer's entry gets while it waits to be swept, which no timer
/// has: a [`Ticket`] that points at the entry then does not take it for its pending timer.
const CANCELLED: u64 = u64::MAX;

enum Watch {
    Waiting(Waker),
    Done(Outcome),
}

/// A shard's wheel, of the kind the builder chose.
enum ShardWheel {
    Hierarchical(HierarchicalWheel<Timer>),
    Rounds(RoundsWheel<Timer>),
}

impl ShardWheel {
    fn new(kind: WheelKind, slots: usize, capacity: usize) -> Result<Self, Error> {
        Ok(match kind {
            WheelKind::Hierarchical => {
                let mut wheel = HierarchicalWheel::new(slots)?;
                wheel.try_reserve(capacity)?;
                ShardWheel::Hierarchical(wheel)
            }
            WheelKind::Rounds => {
                let mut wheel = RoundsWheel::new(slots)?;
                wheel.try_reserve(capacity)?;
                ShardWheel::Rounds(wheel)
            }
        })
    }

    /// The pending timer in slab slot `index`; the key map names no other.
    fn at(&self, index: u32) -> (EntryId, &Timer) {
        self.try_at(index).expect("the key map names pending timers only")
    }

    /// The pending or cancelled timer in slab slot `index`, if any.
    fn try_at(&self, index: u32) -> Option<(EntryId, &Timer)> {
        match self {
            ShardWheel::Hierarchical(w) => w.at(index),
            ShardWheel::Rounds(w) => w.at(index),
        }
    }

    fn at_mut(&mut self, index: u32) -> &mut Timer {
        match self {
            ShardWheel::Hierarchical(w) => w.at_mut(index),
            ShardWheel::Rounds(w) => w.at_mut(index),
        }
        .expect("the key map names pending timers only")
    }

    fn insert(&mut self, deadline: u64, timer: Timer) -> EntryId {
        match self {
            ShardWheel::Hierarchical(w) => w.insert(deadline, timer),
            ShardWheel::Rounds(w) => w.insert(deadline, timer),
        }
    }

    fn remove(&mut self, id: EntryId) -> Option<Timer> {
        match self {
            ShardWheel::Hierarchical(w) => w.remove(id),
            ShardWheel::Rounds(w) => w.remove(id),
        }
    }

    fn advance(&mut self, now: u64, expired: impl FnMut(Expired<Timer>)) {
        match self {
            ShardWheel::Hierarchical(w) => w.advance(now, expired),
            ShardWheel::Rounds(w) => w.advance(now, expired),
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        match self {
            ShardWheel::Hierarchical(w) => w.next_deadline(),
            ShardWheel::Rounds(w) => w.next_deadline(),
        }
    }

    /// The tick by which the actor must advance this wheel for a timer just placed at
    /// `deadline`: the deadline, or earlier if placing it made a bucket busy enough to drain
    /// ahead of its start (see the hierarchical wheel's docs).
    fn wake_by(&mut self, deadline: u64) -> u64 {
        match self {
            ShardWheel::Hierarchical(w) => w.take_armed_drain().map_or(deadline, |t| t.min(deadline)),
            ShardWheel::Rounds(_) => deadline,
        }
    }

    fn len(&self) -> usize {
        match self {
            ShardWheel::Hierarchical(w) => w.len(),
            ShardWheel::Rounds(w) => w.len(),
        }
    }
}

/// How many cancelled timers a shard keeps in its wheel before the cancel that makes it this many
/// sweeps them out (the actor sweeps every shard it advances, too). Few enough that the entries,
/// which each cancel has just read to compare its key, are still in cache when they are swept.
const SWEEP_AT: usize = 64;

/// One shard, on its own cache lines so that locking one does not slow a neighbour.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

struct Shard {
    /// Which wheel entry holds each claimed key (see [`KeyIndex`]).
    keys: KeyIndex,
    wheel: ShardWheel,
    /// The wheel entries of cancelled timers, whose keys are released already, taken out of the
    /// wheel together (see [`Shard::sweep`]).
    cancelled: Vec<EntryId>,
    watchers: HashMap<u64, Watch>,
    /// The serial number of the next timer.
    next_serial: u64,
    /// Set once the service has stopped: requests are refused from then on.
    closed: bool,
    counts: Stats,
}

/// What the actor collects from the shards in one advance, to be acted on with no lock held.
#[derive(Default)]
pub(crate) struct Fired {
    /// The jobs to start: each with its deadline tick and its timer's key.
    pub jobs: Vec<(u64, JobRef, Key)>,
    /// The watchers of the timers that ended.
    pub wakers: Vec<Waker>,
    /// Cancelled timers taken out of the wheels, to be dropped with no lock held.
    pub swept: Vec<Timer>,
    /// Reused buffers of the entries due in one shard, and their keys' hashes.
    due: Vec<Expired<Timer>>,
    hashes: Vec<u64>,
    /// The most items any of these buffers has held in this window of [`TRIM_EVERY`] advances.
    peak: usize,
    /// Advances so far in this window.
    advances: u32,
}

/// The buffers are trimmed once every this many advances, to the most they held meanwhile: a
/// load that bursts now and then keeps its room (at one advance per tick, the window is about a
/// second of activity).
const TRIM_EVERY: u32 = 1024;

/// A reused buffer keeps room for at least this many items between advances.
const KEEP: usize = 1024;

/// Gives back the room of a buffer that a burst left far larger than its recent use: one that
/// has held at most a quarter of its room is cut to twice that use (and `KEEP`), so a steady
/// load reallocates nothing and a million timers firing at once do not hold their buffers' room
/// for good.
fn trim<T>(buffer: &mut Vec<T>, used: usize) {
    if buffer.capacity() > KEEP.max(4 * used) {
        buffer.shrink_to(KEEP.max(2 * used));
    }
}

impl Fired {
    /// Records that a buffer held `n` items.
    fn used(&mut self, n: usize) {
        self.peak = self.peak.max(n);
    }

    /// For the actor, before it empties the buffers it reads: records how full they are.
    pub fn note_use(&mut self) {
        self.used(self.jobs.len().max(self.wakers.len()).max(self.swept.len()));
    }

    /// For the actor, once the buffers are empty at the end of an advance: at the end of each
    /// window of [`TRIM_EVERY`] advances, cuts down the room a burst left (see [`trim`]).
    pub fn trim(&mut self) {
        self.advances += 1;
        if self.advances < TRIM_EVERY {
            return;
        }
        self.advances = 0;
        let used = std::mem::take(&mut self.peak);
        trim(&mut self.jobs, used);
        trim(&mut self.wakers, used);
        trim(&mut self.swept, used);
        trim(&mut self.due, used);
        trim(&mut self.hashes, used);
    }
}

pub(crate) struct Shared {
    shards: Box<[Padded]>,
    hasher: foldhash::fast::RandomState,
    /// `shards.len()` is `1 << shard_bits`.
    shard_bits: u32,
    pub max_pending: usize,
    /// Timers pending across all shards, kept only when `max_pending` is set.
    limited_pending: AtomicUsize,
    /// The tick the actor wakes at without being told (`u64::MAX`: not at all; 0: on every tick,
    /// so that no timer is urgent).
    next_wake: AtomicU64,
    /// Wakes the actor for timers that cannot wait; `signalled` is set while a wake-up is on its
    /// way.
    ready: Notify,
    signalled: AtomicBool,
}

impl Shared {
    /// Four shards per core (as a power of two), each with an empty wheel of `kind`, and room
    /// for its share of `capacity` timers (see [`Builder::capacity`](super::Builder::capacity)).
    pub fn new(kind: WheelKind, slots: usize, max_pending: usize, capacity: usize) -> Result<Self, Error> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shard_bits = (cores * 4).clamp(4, 64).next_power_of_two().trailing_zeros();
        let hasher = foldhash::fast::RandomState::default();
        // A shard's share, with room for the keys not spreading quite evenly; room past
        // `max_pending` would never be used.
        let capacity = capacity.min(max_pending);
        let share = capacity.div_ceil(1 << shard_bits);
        let share = if capacity == 0 { 0 } else { share.saturating_add(share / 16 + 64) };
        // Checked before anything is allocated.
        if share > crate::wheel::MAX_ENTRIES {
            return Err(Error::invalid(format!(
                "no room for {capacity} timers: a shard's wheel holds at most {} entries",
                crate::wheel::MAX_ENTRIES
            )));
        }
        let shards = (0..1u32 << shard_bits)
            .map(|_| {
                let mut keys = KeyIndex::new();
                keys.try_reserve(share).map_err(|e| Error::invalid(format!("no room for {capacity} timers: {e}")))?;
                Ok(Padded(Mutex::new(Shard {
                    keys,
                    wheel: ShardWheel::new(kind, slots, share)?,
                    cancelled: Vec::new(),
                    watchers: HashMap::new(),
                    next_serial: 0,
                    closed: false,
                    counts: Stats::default(),
                })))
            })
            .collect::<Result<_, Error>>()?;
        Ok(Shared {
            shards,
            hasher,
            shard_bits,
            max_pending,
            limited_pending: AtomicUsize::new(0),
            next_wake: AtomicU64::new(u64::MAX),
            ready: Notify::new(),
            signalled: AtomicBool::new(false),
        })
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

    /// Whether a timer set at tick `set_at` and due at `deadline` cannot wait for the actor's
    /// next wake-up: it is due before it, or that wake-up is overdue (the runtime has not got
    /// round to it: the actor is nudged at most about once per tick then).
    fn urgent(&self, set_at: u64, deadline: u64) -> bool {
        let wake = self.next_wake.load(Relaxed);
        wake != 0 && (deadline < wake || set_at >= wake)
    }

    /// Wakes the actor unless a wake-up is already on its way. Called under a shard's lock, so
    /// if the actor has advanced that shard since it last cleared `signalled`, this sees the
    /// cleared flag.
    fn wake_actor(&self) {
        if !self.signalled.load(Relaxed) && !self.signalled.swap(true, Relaxed) {
            self.ready.notify_one();
        }
    }

    /// Resolves when a timer has been placed that the actor's next wake-up would be too late for.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Claims `timer.key` for a new timer due at `due` and puts it in the shard's wheel. Returns
    /// where it went.
    pub fn add(&self, timer: Timer, due: Due, watched: bool) -> Result<Ticket, Error> {
        let (shard, hash) = self.locate(timer.key.as_bytes());
        let claimed = {
            let mut s = self.lock(shard);
            let claimed = self.claim(&mut s, hash, timer, due.deadline, watched);
            if claimed.is_ok() && self.urgent(due.set_at, s.wheel.wake_by(due.deadline)) {
                self.wake_actor();
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
    pub fn add_many(&self, timers: Vec<(Timer, u64)>, set_at: u64) -> Vec<Result<(), Error>> {
        let mut results = vec![Ok(()); timers.len()];
        let mut refused = Vec::new();
        if !self.reserve(timers.len()) {
            // Too close to `max_pending` to know in advance which items fit: one by one, in order.
            for (result, (timer, deadline)) in results.iter_mut().zip(timers) {
                let (shard, hash) = self.locate(timer.key.as_bytes());
                let mut s = self.lock(shard);
                if let Err((error, timer)) = self.claim(&mut s, hash, timer, deadline, false) {
                    *result = Err(error);
                    refused.push(timer);
                } else if self.urgent(set_at, s.wheel.wake_by(deadline)) {
                    self.wake_actor();
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
                    Ok(_) => urgent |= self.urgent(set_at, s.wheel.wake_by(deadline)),
                    Err((error, timer)) => {
                        results[i] = Err(error);
                        refused.push(timer);
                        self.release(1);
                    }
                }
            }
            if urgent {
                self.wake_actor();
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
    pub fn move_timer(&self, key: &str, due: Instant, deadline: u64, set_at: u64) -> Result<(), Error> {
        let (shard, hash) = self.locate(key.as_bytes());
        let mut guard = self.lock(shard);
        if guard.closed {
            return Err(Error::Stopped);
        }
        let pos = guard.find(hash, key.as_bytes(), None).ok_or(Error::NotFound)?;
        let Shard { keys, wheel, .. } = &mut *guard;
        let (id, _) = wheel.at(keys.index_at(pos));
        let mut timer = wheel.remove(id).expect("a pending timer is in its shard's wheel");
        if let Run::Repeat(repeat) = &mut timer.run {
            repeat.due = due;
        }
        keys.set_index(pos, wheel.insert(deadline, timer).index());
        if self.urgent(set_at, wheel.wake_by(deadline)) {
            self.wake_actor();
        }
        Ok(())
    }

    /// Cancels the timer holding `key` (only if it has the serial number `serial`, when given).
    /// Returns whether this call ended it.
    pub fn cancel(&self, key: &[u8], serial: Option<u64>) -> bool {
        let (shard, hash) = self.locate(key);
        let mut swept = Vec::new();
        let waker = {
            let mut s = self.lock(shard);
            let Some(waker) = s.cancel(hash, key, serial) else {
                return false;
            };
            if s.cancelled.len() >= SWEEP_AT {
                s.sweep(&mut swept);
            }
            waker
        };
        self.release(1);
        if let Some(waker) = waker {
            waker.wake();
        }
        drop(swept);
        true
    }

    /// The batch form of [`cancel`](Self::cancel), one lock per shard (see
    /// [`add_many`](Self::add_many)). Returns, per key, whether this call ended its timer.
    pub fn cancel_many(&self, keys: &[&[u8]]) -> Vec<bool> {
        let mut ended = vec![false; keys.len()];
        let mut swept = Vec::new();
        let mut wake = Vec::new();
        for (shard, batch) in self.by_shard(keys.iter().copied()) {
            let mut s = self.lock(shard);
            // Touch every key's home slot first, as `add_many` does.
            for &(_, hash) in &batch {
                s.keys.touch(hash);
            }
            for (i, hash) in batch {
                if let Some(waker) = s.cancel(hash, keys[i], None) {
                    ended[i] = true;
                    wake.extend(waker);
                }
            }
            if s.cancelled.len() >= SWEEP_AT {
                s.sweep(&mut swept);
            }
        }
        self.release(ended.iter().filter(|&&e| e).count());
        wake.into_iter().for_each(Waker::wake);
        drop(swept);
        ended
    }

    /// Whether a timer with this key is pending.
    pub fn contains(&self, key: &str) -> bool {
        let (shard, hash) = self.locate(key.as_bytes());
        self.lock(shard).find(hash, key.as_bytes(), None).is_some()
    }

    /// The counters, summed over the shards.
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        for shard in 0..self.shards.len() {
            let c = self.lock(shard).counts;
            total.pending += c.pending;
            total.scheduled += c.scheduled;
            total.fired += c.fired;
            total.cancelled += c.cancelled;
            total.stopped += c.stopped;
        }
        total
    }

    /// For the actor, before it advances the wheels: a timer placed from now on that cannot
    /// wait wakes it again.
    pub fn clear_signal(&self) {
        self.signalled.store(false, Relaxed);
    }

    /// For the actor: advances `shard`'s wheel to tick `now`, ends the timers that have run for
    /// the last time and puts the repeating ones back, and adds their jobs and watchers to
    /// `fired`. Returns the wheel's next deadline.
    pub fn fire(&self, shard: usize, now: u64, clock: &Clock, fired: &mut Fired) -> Option<u64> {
        let mut due = std::mem::take(&mut fired.due);
        let mut s = self.lock(shard);
        // From here on every entry in the wheel holds its key.
        s.sweep(&mut fired.swept);
        s.wheel.advance(now, |expired| due.push(expired));
        fired.used(due.len());
        // Release every due timer's key before putting any repeating one back: the key map
        // names entries by slab slot, and a timer put back may take the slot of a due one whose
        // key is still to be released. First only a load of each key's home slot, as batches do:
        // the loads do not depend on one another, so their cache misses overlap, and the
        // removals then hit the cache.
        let hashes = &mut fired.hashes;
        hashes.clear();
        for Expired { value: timer, .. } in &due {
            let hash = self.hasher.hash_one(timer.key.as_bytes());
            s.keys.touch(hash);
            hashes.push(hash);
        }
        for (Expired { id, .. }, &hash) in due.iter().zip(&fired.hashes) {
            let pos = s.keys.find(hash, |i| i == id.index()).expect("a due timer holds its key");
            s.keys.remove(pos);
        }
        let mut ended = 0;
        for (Expired { deadline, value: mut timer, .. }, &hash) in due.drain(..).zip(&fired.hashes) {
            s.counts.fired += 1;
            match timer.next_run(clock) {
                None => {
                    fired.wakers.extend(s.finish(timer.serial, &Ok(())));
                    ended += 1;
                    if let (key, Some(job)) = timer.into_last_run() {
                        fired.jobs.push((deadline, job, key));
                    }
                }
                // More runs to come: the key is claimed again and the timer goes back in the
                // wheel, with its serial number.
                Some((next_due, next)) => {
                    let job = timer.next_repeat(next_due);
                    let key = timer.key.clone();
                    let entry = s.wheel.insert(next, timer);
                    s.keys.insert_new(hash, entry.index());
                    fired.jobs.push((deadline, JobRef::Shared(job), key));
                }
            }
        }
        // What the repeating timers put back may have armed a drain: `next` covers it.
        s.wheel.wake_by(now);
        let next = s.wheel.next_deadline();
        drop(s);
        self.release(ended);
        fired.due = due;
        next
    }

    /// For the actor: takes the entries of `shard`'s cancelled timers out of its wheel, into
    /// `timers` to be dropped with no lock held.
    pub fn sweep(&self, shard: usize, timers: &mut Vec<Timer>) {
        self.lock(shard).sweep(timers);
    }

    /// For the actor, before it waits: publishes the tick it will wake at without being told
    /// (0 if it wakes on every tick whatever is due, at least 1 otherwise), then says whether a
    /// timer was placed meanwhile that is due before it.
    pub fn will_wake_at(&self, tick: u64) -> bool {
        self.next_wake.store(tick, Relaxed);
        // A timer placed after this look finds `tick` under the shard's lock, and wakes the
        // actor if it cannot wait for it.
        tick != 0
            && (0..self.shards.len()).any(|shard| self.lock(shard).wheel.next_deadline().is_some_and(|t| t < tick))
    }

    /// For the actor, once it stops (or its task is dropped): refuses every request to `shard`
    /// from now on and ends its pending timers as stopped. Returns how many there were.
    pub fn close(&self, shard: usize) -> usize {
        let mut timers = Vec::new();
        let mut wake = Vec::new();
        let stopped = {
            let mut s = self.lock(shard);
            s.closed = true;
            // Cancelled timers, ended already, then every pending one.
            s.sweep(&mut timers);
            let swept = timers.len();
            s.wheel.advance(u64::MAX, |expired| timers.push(expired.value));
            s.keys.clear();
            let pending = &timers[swept..];
            s.counts.stopped += pending.len() as u64;
            for timer in pending {
                wake.extend(s.finish(timer.serial, &Err(Error::Stopped)));
            }
            pending.len()
        };
        self.release(stopped);
        wake.into_iter().for_each(Waker::wake);
        drop(timers);
        stopped
    }

    /// Polls the outcome of timer `serial` of `shard` for its `Scheduled` future.
    pub fn poll_outcome(&self, shard: u32, serial: u64, waker: &Waker) -> Option<Outcome> {
        let watchers = &mut self.lock(shard as usize).watchers;
        match watchers.remove(&serial) {
            Some(Watch::Done(outcome)) => Some(outcome),
            Some(Watch::Waiting(old)) if old.will_wake(waker) => {
                watchers.insert(serial, Watch::Waiting(old));
                None
            }
            _ => {
                watchers.insert(serial, Watch::Waiting(waker.clone()));
                None
            }
        }
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
        // An unpolled watcher of a pending timer has nothing in `watchers` to clean up.
        if polled || index.is_none() {
            s.watchers.remove(&serial);
        }
    }
}

impl Shard {
    /// The key map slot of the pending timer holding `key` (whose hash is `hash`), if it has
    /// the serial number `serial` (when given).
    fn find(&self, hash: u64, key: &[u8], serial: Option<u64>) -> Option<usize> {
        let probe = Probe::new(key);
        self.keys.find(hash, |index| {
            let (_, timer) = self.wheel.at(index);
            timer.key.matches(&probe) && serial.is_none_or(|s| timer.serial() == s)
        })
    }

    /// Claims the key for a timer (already counted against `max_pending`) and puts the timer in
    /// the wheel; returns its serial number and its entry's slab slot.
    fn claim(
        &mut self,
        hash: u64,
        mut timer: Timer,
        deadline: u64,
        watched: bool,
    ) -> Result<(u64, u32), (Error, Timer)> {
        if self.closed {
            return Err((Error::Stopped, timer));
        }
        if self.wheel.len() >= crate::wheel::MAX_ENTRIES {
            return Err((Error::Full(crate::wheel::MAX_ENTRIES), timer));
        }
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
        Ok((serial, entry.index()))
    }

    /// Cancels the timer holding `key` if it has the serial number `serial` (when given):
    /// releases the key, leaves its wheel entry to the next sweep, tells its watcher and counts
    /// it. Returns whether it ended a timer, with the watcher's waker to call once unlocked.
    fn cancel(&mut self, hash: u64, key: &[u8], serial: Option<u64>) -> Option<Option<Waker>> {
        let pos = self.find(hash, key, serial)?;
        let index = self.keys.index_at(pos);
        let (id, _) = self.wheel.at(index);
        let serial = std::mem::replace(&mut self.wheel.at_mut(index).serial, CANCELLED);
        self.keys.remove(pos);
        self.cancelled.push(id);
        self.counts.cancelled += 1;
        Some(self.finish(serial, &Err(Error::Cancelled)))
    }

    /// Takes the cancelled timers' entries out of the wheel, into `timers` to be dropped once
    /// unlocked. Done in batches because the entries' places in their buckets are scattered
    /// through memory: with every id known up front the processor fetches several at once, where
    /// a cancel that took its own entry out would wait for each in turn.
    fn sweep(&mut self, timers: &mut Vec<Timer>) {
        timers.reserve(self.cancelled.len());
        for id in self.cancelled.drain(..) {
            timers.extend(self.wheel.remove(id));
        }
    }

    /// The bookkeeping of a timer that has ended, its key released: records `outcome` for its
    /// watcher, if it has one, and returns the waker to call once unlocked.
    /// `serial` is the timer's, with its [`ARMED`] bit.
    fn finish(&mut self, serial: u64, outcome: &Outcome) -> Option<Waker> {
        self.counts.pending -= 1;
        if serial & ARMED == 0 {
            return None;
        }
        match self.watchers.insert(serial & !ARMED, Watch::Done(outcome.clone())) {
            Some(Watch::Waiting(waker)) => Some(waker),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::job::Wake;

    /// The actor sleeps until tick 8,192, when one far timer's level-2 bucket (8,192..12,288 at
    /// 64 slots) starts. Timers due in that bucket can wait for it, until there are enough of
    /// them to drain the bucket ahead of its start, 4,096 ticks earlier: the request that makes
    /// it busy enough wakes the actor for that, be it a schedule, a batch or a reschedule.
    #[test]
    fn a_request_that_makes_a_bucket_busy_enough_to_drain_wakes_the_actor() {
        for last in ["schedule", "schedule_many", "reschedule"] {
            let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0).unwrap();
            shared.will_wake_at(8192);
            let mut keys = (0..).map(|i| format!("k-{i}")).filter(|k| shared.locate(k.as_bytes()).0 == 0);
            let mut timer = || Timer::new(Key::from(keys.next().unwrap().as_str()), Run::Once(Box::new(Wake)));
            for i in 0..crate::wheel::DRAIN_MIN as u64 {
                shared.add(timer(), Due { deadline: 9_000 + i, set_at: 0 }, false).unwrap();
            }
            let far = timer();
            let far_key = far.key.as_str().to_owned();
            shared.add(far, Due { deadline: 100_000, set_at: 0 }, false).unwrap();
            assert!(!shared.signalled.load(Relaxed), "{last}: due after the actor's wake-up, and no drain yet");
            match last {
                "schedule" => shared.add(timer(), Due { deadline: 12_000, set_at: 0 }, false).map(drop),
                "schedule_many" => shared.add_many(vec![(timer(), 12_000)], 0).remove(0),
                _ => shared.move_timer(&far_key, Instant::now(), 12_000, 0),
            }
            .unwrap();
            assert!(shared.signalled.load(Relaxed), "{last}: the bucket's drain starts at 4,096, before 8,192");
        }
    }

    /// With room for 10,000 timers, scheduling them rehashes no shard's key map: each keeps the
    /// table it started with (a rehash would have replaced it by a larger one).
    #[test]
    fn room_made_at_the_start_is_used_without_growing() {
        let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 10_000).unwrap();
        let room =
            |shared: &Shared| (0..shared.shard_count()).map(|s| shared.lock(s).keys.capacity()).collect::<Vec<_>>();
        let before = room(&shared);
        assert!(before.iter().all(|&c| c * shared.shard_count() >= 10_000), "{before:?}");
        for i in 0..10_000u64 {
            let timer = Timer::new(Key::from(format!("t-{i}").as_str()), Run::Once(Box::new(Wake)));
            shared.add(timer, Due { deadline: 1_000 + i, set_at: 0 }, false).unwrap();
        }
        assert_eq!(room(&shared), before);
        let unreserved = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0).unwrap();
        assert!(room(&unreserved).iter().all(|&c| c == 0), "no room is made by default");
    }

    #[test]
    fn buffers_give_back_what_a_burst_left_but_keep_what_a_steady_load_uses() {
        let mut buffer: Vec<u64> = Vec::new();
        buffer.extend(0..1_000_000);
        buffer.clear();
        trim(&mut buffer, 1_000_000);
        assert!(buffer.capacity() >= 1_000_000, "the advance that used it keeps it");
        trim(&mut buffer, 300_000);
        assert!(buffer.capacity() >= 1_000_000, "a third of it is still in use");
        trim(&mut buffer, 500);
        assert!((KEEP..2 * KEEP).contains(&buffer.capacity()), "cut to KEEP, not {}", buffer.capacity());
        buffer.extend(0..10_000);
        buffer.clear();
        let steady = buffer.capacity();
        for _ in 0..3 {
            trim(&mut buffer, 10_000);
            assert_eq!(buffer.capacity(), steady, "a steady 10,000 per advance is never reallocated");
        }
    }

    /// A `Scheduled` dropped unpolled clears its timer's `ARMED` bit, so the timer's end leaves
    /// no outcome in `watchers` that nobody would collect; a watched timer's end leaves one.
    #[test]
    fn a_timer_whose_watcher_dropped_records_no_outcome() {
        for dropped in [true, false] {
            let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0).unwrap();
            let clock = Clock::new(std::time::Duration::from_millis(1)).unwrap();
            let key = "order-42";
            let due = Due { deadline: 5, set_at: 0 };
            let ticket = shared.add(Timer::new(Key::from(key), Run::Once(Box::new(Wake))), due, true).unwrap();
            if dropped {
                shared.unwatch(key.as_bytes(), ticket, false);
            }
            let mut fired = Fired::default();
            for shard in 0..shared.shard_count() {
                shared.fire(shard, 10, &clock, &mut fired);
            }
            assert_eq!(shared.stats().fired, 1);
            let watchers: usize = (0..shared.shard_count()).map(|s| shared.lock(s).watchers.len()).sum();
            assert_eq!(watchers, usize::from(!dropped), "watcher dropped: {dropped}");
        }
    }

    #[test]
    fn the_room_of_a_burst_is_kept_while_bursts_recur_within_a_window() {
        let mut fired = Fired::default();
        let burst = |fired: &mut Fired| {
            fired.hashes.extend(0..100_000);
            fired.used(fired.hashes.len());
            fired.hashes.clear();
        };
        burst(&mut fired);
        let room = fired.hashes.capacity();
        for window in 0..3 {
            for advance in 0..TRIM_EVERY {
                if advance == window * 100 {
                    burst(&mut fired);
                }
                fired.used(10);
                fired.trim();
            }
            assert_eq!(fired.hashes.capacity(), room, "a burst in window {window} keeps the room");
        }
        for _ in 0..TRIM_EVERY {
            fired.used(10);
            fired.trim();
        }
        assert!(fired.hashes.capacity() < 2 * KEEP, "a window with no burst gives the room back");
    }
}

/// The shards against a model (a `BTreeMap` of pending timers): schedules one by one and in
/// batches, watched or not, one-shot and repeating; cancels by key, by serial number and in
/// batches; moves; dropped watchers; advances; and a final stop. After every step each key is
/// pending exactly when the model says and the counters agree; at the end each watched timer that
/// ended has its outcome recorded, and nothing else is.
#[cfg(test)]
mod model {
    use super::*;
    use crate::service::command::Repeating;
    use crate::service::job::Wake;
    use proptest::prelude::*;
    use std::collections::btree_map::Entry;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    #[derive(Debug, Clone)]
    enum Op {
        Add {
            key: u8,
            delay: u8,
            repeat: Option<(u8, Option<u8>)>,
            watched: bool,
        },
        AddMany(Vec<(u8, u8)>),
        Cancel {
            key: u8,
            serial: u8,
        },
        CancelMany(Vec<u8>),
        Move {
            key: u8,
            delay: u8,
        },
        Unwatch(u8),
        /// Drops the watcher of a watched timer that has ended, picked among them.
        DropEnded(prop::sample::Index),
        Advance(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u8..KEYS;
        prop_oneof![
            6 => (key.clone(), 0u8..40, prop::option::weighted(0.4, (1u8..6, prop::option::of(1u8..5))), any::<bool>())
                .prop_map(|(key, delay, repeat, watched)| Op::Add { key, delay, repeat, watched }),
            2 => prop::collection::vec((key.clone(), 0u8..40), 0..8).prop_map(Op::AddMany),
            4 => (key.clone(), 0u8..3).prop_map(|(key, serial)| Op::Cancel { key, serial }),
            1 => prop::collection::vec(key.clone(), 0..8).prop_map(Op::CancelMany),
            2 => (key.clone(), 0u8..40).prop_map(|(key, delay)| Op::Move { key, delay }),
            1 => key.clone().prop_map(Op::Unwatch),
            1 => any::<prop::sample::Index>().prop_map(Op::DropEnded),
            4 => (0u8..12).prop_map(Op::Advance),
        ]
    }

    struct M {
        serial: u64,
        /// What the timer's `Scheduled` would hold; its entry goes stale as the timer moves.
        ticket: Ticket,
        deadline: u64,
        repeat: Option<(u64, Option<u64>)>,
        watched: bool,
    }

    /// Keys `key-0` to `key-23`, few enough that they collide often.
    const KEYS: u8 = 24;

    fn name(k: u8) -> String {
        format!("key-{k}")
    }

    fn run(kind: WheelKind, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let shared = Shared::new(kind, 4, usize::MAX, 0).unwrap();
        shared.will_wake_at(0);
        let clock = Clock::new(std::time::Duration::from_millis(1)).unwrap();
        let job: Arc<dyn crate::service::job::Job> = Arc::new(|_k: String| async {});
        let mut model: BTreeMap<u8, M> = BTreeMap::new();
        let mut outcomes: BTreeMap<(usize, u64), Outcome> = BTreeMap::new();
        // The watched timers that ended, whose watchers are still there.
        let mut watching_ended: Vec<(u8, Ticket)> = Vec::new();
        let mut now = 0u64;
        let mut fired_total = 0u64;
        let mut fired = Fired::default();
        for op in ops {
            match op {
                Op::Add { key, delay, repeat, watched } => {
                    let deadline = now + delay as u64;
                    let rep = repeat.map(|(p, runs)| {
                        Box::new(Repeating {
                            period: std::time::Duration::from_millis(p as u64),
                            due: clock.instant(deadline).unwrap(),
                            runs_left: runs.map(u64::from),
                            job: job.clone(),
                        })
                    });
                    let r = shared.add(
                        Timer::new(
                            Key::from(name(key).as_str()),
                            rep.map_or_else(|| Run::Once(Box::new(Wake)), Run::Repeat),
                        ),
                        Due { deadline, set_at: now },
                        watched,
                    );
                    match model.entry(key) {
                        Entry::Occupied(_) => prop_assert!(matches!(r, Err(Error::DuplicateKey(_)))),
                        Entry::Vacant(vacant) => {
                            let repeat = repeat.map(|(p, r)| (p as u64, r.map(u64::from)));
                            let ticket = r.unwrap();
                            vacant.insert(M { serial: ticket.serial, ticket, deadline, repeat, watched });
                        }
                    }
                }
                Op::AddMany(items) => {
                    let timers = items
                        .iter()
                        .map(|&(k, d)| {
                            (Timer::new(Key::from(name(k).as_str()), Run::Once(Box::new(Wake))), now + d as u64)
                        })
                        .collect();
                    let rs = shared.add_many(timers, now);
                    for (&(k, d), r) in items.iter().zip(rs) {
                        let Entry::Vacant(vacant) = model.entry(k) else {
                            prop_assert!(matches!(r, Err(Error::DuplicateKey(_))));
                            continue;
                        };
                        prop_assert!(r.is_ok());
                        // A batch returns no serial numbers: read it from the shard.
                        let (shard, hash) = shared.locate(name(k).as_bytes());
                        let s = shared.lock(shard);
                        let pos = s.find(hash, name(k).as_bytes(), None).unwrap();
                        let entry = s.keys.index_at(pos);
                        let serial = s.wheel.at(entry).1.serial();
                        drop(s);
                        let ticket = Ticket { shard: shard as u32, entry, serial };
                        vacant.insert(M { serial, ticket, deadline: now + d as u64, repeat: None, watched: false });
                    }
                }
                Op::Cancel { key, serial } => {
                    let m = model.get(&key);
                    let given = match (serial, m) {
                        (0, _) => None,
                        (1, Some(m)) => Some(m.serial),
                        _ => Some(u64::MAX >> 2),
                    };
                    let ended = shared.cancel(name(key).as_bytes(), given);
                    let expect = m.is_some() && serial != 2;
                    prop_assert_eq!(ended, expect);
                    if ended {
                        let m = model.remove(&key).unwrap();
                        if m.watched {
                            outcomes.insert((shared.locate(name(key).as_bytes()).0, m.serial), Err(Error::Cancelled));
                            watching_ended.push((key, m.ticket));
                        }
                    }
                }
                Op::CancelMany(keys) => {
                    let names: Vec<String> = keys.iter().map(|&k| name(k)).collect();
                    let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                    let ended = shared.cancel_many(&refs);
                    for (&k, e) in keys.iter().zip(ended) {
                        prop_assert_eq!(e, model.contains_key(&k));
                        if let Some(m) = model.remove(&k) {
                            if m.watched {
                                outcomes.insert((shared.locate(name(k).as_bytes()).0, m.serial), Err(Error::Cancelled));
                                watching_ended.push((k, m.ticket));
                            }
                        }
                    }
                }
                Op::Move { key, delay } => {
                    let deadline = now + delay as u64;
                    let r = shared.move_timer(&name(key), clock.instant(deadline).unwrap(), deadline, now);
                    match model.get_mut(&key) {
                        Some(m) => {
                            prop_assert!(r.is_ok());
                            m.deadline = deadline;
                        }
                        None => prop_assert!(matches!(r, Err(Error::NotFound))),
                    }
                }
                Op::Unwatch(key) => {
                    if let Some(m) = model.get_mut(&key) {
                        shared.unwatch(name(key).as_bytes(), m.ticket, false);
                        m.watched = false;
                    }
                }
                Op::DropEnded(pick) => {
                    if !watching_ended.is_empty() {
                        let (key, ticket) = watching_ended.swap_remove(pick.index(watching_ended.len()));
                        shared.unwatch(name(key).as_bytes(), ticket, false);
                        outcomes.remove(&(ticket.shard as usize, ticket.serial));
                    }
                }
                Op::Advance(dt) => {
                    now += dt as u64;
                    for shard in 0..shared.shard_count() {
                        shared.fire(shard, now, &clock, &mut fired);
                    }
                    fired.jobs.clear();
                    fired.wakers.clear();
                    fired.swept.clear();
                    let due: Vec<u8> = model.iter().filter(|(_, m)| m.deadline <= now).map(|(&k, _)| k).collect();
                    for k in due {
                        fired_total += 1;
                        let m = model.get_mut(&k).unwrap();
                        match m.repeat {
                            Some((p, runs)) if runs != Some(1) => {
                                m.deadline += p;
                                m.repeat = Some((p, runs.map(|n| n - 1)));
                            }
                            _ => {
                                let m = model.remove(&k).unwrap();
                                if m.watched {
                                    outcomes.insert((shared.locate(name(k).as_bytes()).0, m.serial), Ok(()));
                                    watching_ended.push((k, m.ticket));
                                }
                            }
                        }
                    }
                }
            }
            for k in 0..KEYS {
                prop_assert_eq!(shared.contains(&name(k)), model.contains_key(&k), "key {}", k);
            }
            let st = shared.stats();
            prop_assert_eq!(st.pending, model.len());
            prop_assert_eq!(st.fired, fired_total);
        }
        // Every recorded outcome is there for its watcher.
        for ((shard, serial), outcome) in &outcomes {
            let found = match shared.lock(*shard).watchers.get(serial) {
                Some(Watch::Done(o)) => Some(o.clone()),
                _ => None,
            };
            prop_assert_eq!(found.as_ref(), Some(outcome), "serial {}", serial);
        }
        let total: usize = (0..shared.shard_count()).map(|s| shared.lock(s).watchers.len()).sum();
        prop_assert_eq!(total, outcomes.len(), "watchers hold exactly the outcomes of watched timers that ended");
        let stopped: usize = (0..shared.shard_count()).map(|s| shared.close(s)).sum();
        prop_assert_eq!(stopped, model.len());
        for (k, m) in &model {
            if m.watched {
                let shard = shared.locate(name(*k).as_bytes()).0;
                let found = match shared.lock(shard).watchers.get(&m.serial) {
                    Some(Watch::Done(o)) => Some(o.clone()),
                    _ => None,
                };
                prop_assert_eq!(found, Some(Err(Error::Stopped)));
            }
        }
        prop_assert_eq!(shared.stats().pending, 0);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn shared_matches_model_hierarchical(ops in prop::collection::vec(op(), 1..200)) { run(WheelKind::Hierarchical, ops)?; }
        #[test]
        fn shared_matches_model_rounds(ops in prop::collection::vec(op(), 1..200)) { run(WheelKind::Rounds, ops)?; }
    }
}
