//! State shared by the handles and the actor: the key map, split into shards that each hold
//! their keys, id pool, watchers, counters and the inbox of requests on their way to the actor.
//!
//! # One lock per request
//! A key's shard is chosen by its hash. Scheduling claims the key, draws the timer's id and
//! queues its `Add` under that shard's lock; cancelling releases the key and queues the
//! `Remove` under it too. So a request costs one uncontended lock and no channel, there is
//! never a key claimed whose `Add` has not been sent, and the actor sees the requests for one
//! key in the order they changed the map. The actor takes each shard's inbox whole when it
//! wakes.
//!
//! # Waking the actor only when it must
//! The actor publishes the tick it will wake at anyway (`next_wake`). A new timer due before
//! then wakes it through `ready`; so does a reschedule (its caller awaits the answer) and an
//! inbox reaching its capacity. Everything else waits for the actor's next wake-up, so a burst
//! of schedules and cancels costs no task switch per request. The actor looks at the inboxes
//! once more after publishing, so a request queued while it was busy is never left behind.
//!
//! # Who ends a timer
//! Every accepted timer has one entry in the key map from `schedule` until it ends. Whoever
//! removes that entry ends the timer, exactly once: the actor when the timer fires for the last
//! time or the service stops, a handle when it cancels. The actor re-checks the entry before it
//! runs a job, so a timer cancelled a moment before its deadline never runs.
//!
//! # Watching a timer without allocating for it
//! A `Scheduled` future that is never polled costs nothing beyond an `ARMED` bit in the key map
//! entry. When an armed timer ends, its outcome is left in the shard's `watchers` for the future
//! to collect; a polled future parks its waker there. Dropping the future clears the bit, so
//! outcomes are only ever recorded for futures that can still read them.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use hashbrown::HashTable;
use tokio::sync::Notify;

use super::clock::Due;
use super::command::{Op, Timer};
use super::handle::Stats;
use super::ids::IdPool;
use super::key::{Key, Probe};
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

enum Watch {
    Waiting(Waker),
    Done(Outcome),
}

/// Who ends a timer, which says whether its entry is still in the wheel.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    /// A handle (a cancel): the entry stays in the wheel until the actor takes the queued
    /// `Remove`.
    Handle,
    /// The actor, which has already taken the entry out of the wheel (or will, on stopping).
    Actor,
}

/// One shard, on its own cache lines so that locking one does not slow a neighbour.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

struct Shard {
    keys: HashTable<(Key, Slot)>,
    ids: IdPool,
    watchers: HashMap<EntryId, Watch>,
    inbox: Vec<Op>,
    /// Set once the service has stopped: requests are refused from then on.
    closed: bool,
    /// A sender found the inbox full and waits for the actor to empty it.
    blocked: bool,
    counts: Stats,
}

pub(crate) struct Shared {
    shards: Box<[Padded]>,
    hasher: foldhash::fast::RandomState,
    /// `shards.len()` is `1 << shard_bits`.
    shard_bits: u32,
    /// Inbox length at which senders wait for the actor.
    inbox_cap: usize,
    pub max_pending: usize,
    /// Timers pending across all shards, kept only when `max_pending` is set.
    limited_pending: AtomicUsize,
    /// The tick the actor wakes at without being told (`u64::MAX`: not at all; 0: on every tick,
    /// so that no request is urgent).
    next_wake: AtomicU64,
    /// Wakes the actor for requests that cannot wait; `signalled` is set while a wake-up is on
    /// its way.
    ready: Notify,
    signalled: AtomicBool,
    /// Wakes senders that found an inbox full once the actor has emptied it.
    room: Notify,
}

impl Shared {
    /// A key map of four shards per core (as a power of two), whose inboxes together hold about
    /// `capacity` requests before senders wait.
    pub fn new(max_pending: usize, capacity: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shard_bits = (cores * 4).clamp(4, 64).next_power_of_two().trailing_zeros();
        let count = 1u32 << shard_bits;
        let hasher = foldhash::fast::RandomState::default();
        let shards = (0..count)
            .map(|s| {
                Padded(Mutex::new(Shard {
                    keys: HashTable::new(),
                    ids: IdPool::new(s, count),
                    watchers: HashMap::new(),
                    inbox: Vec::new(),
                    closed: false,
                    blocked: false,
                    counts: Stats::default(),
                }))
            })
            .collect();
        Shared {
            shards,
            hasher,
            shard_bits,
            inbox_cap: capacity.div_ceil(count as usize),
            max_pending,
            limited_pending: AtomicUsize::new(0),
            next_wake: AtomicU64::new(u64::MAX),
            ready: Notify::new(),
            signalled: AtomicBool::new(false),
            room: Notify::new(),
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard of a key, and the key's hash. The shard comes from the bits just below the
    /// top seven, which the table itself uses for neither its bucket index nor its tags.
    fn locate(&self, key: &[u8]) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        ((hash << 7 >> (64 - self.shard_bits)) as usize, hash)
    }

    /// The shard whose pool `id` came from.
    pub fn shard_of_id(&self, id: EntryId) -> usize {
        id.index() as usize & (self.shards.len() - 1)
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        self.shards[shard].0.lock().expect("key map shard lock poisoned")
    }

    /// Runs `request` on the key's shard once its inbox has room (or the service has stopped,
    /// which `request` is to check), waking the actor if `request` says it is urgent. Cancel
    /// safe: nothing happens to the shard until `request`.
    async fn with_room<R>(&self, shard: usize, mut request: impl FnMut(&mut Shard) -> (R, bool)) -> R {
        // Most requests find room at once, and need no `Notified` to wait with.
        if let Some(result) = self.try_request(shard, &mut request) {
            return result;
        }
        loop {
            // Taken before the check, so a `notify_waiters` after it is not missed.
            let room = self.room.notified();
            if let Some(result) = self.try_request(shard, &mut request) {
                return result;
            }
            room.await;
        }
    }

    /// Runs `request` if `shard`'s inbox has room (or the service has stopped); otherwise marks
    /// the shard as having a sender waiting.
    fn try_request<R>(&self, shard: usize, request: &mut impl FnMut(&mut Shard) -> (R, bool)) -> Option<R> {
        let mut guard = self.lock(shard);
        if guard.inbox.len() < self.inbox_cap || guard.closed {
            let (result, urgent) = request(&mut guard);
            self.nudge(&guard, urgent);
            return Some(result);
        }
        // The request that filled the inbox has woken the actor already (see `nudge`).
        guard.blocked = true;
        None
    }

    /// Whether a timer set at tick `set_at` and due at `deadline` cannot wait for the actor's
    /// next wake-up: it is due before it, or that wake-up is overdue (the runtime has not got
    /// round to it: the actor is nudged at most about once per tick then).
    fn urgent(&self, set_at: u64, deadline: u64) -> bool {
        let wake = self.next_wake.load(Relaxed);
        wake != 0 && (deadline < wake || set_at >= wake)
    }

    /// Called under `shard`'s lock after queueing requests: wakes the actor if they are urgent
    /// or the inbox is full.
    fn nudge(&self, shard: &Shard, urgent: bool) {
        if urgent || shard.inbox.len() >= self.inbox_cap {
            self.wake_actor();
        }
    }

    /// Wakes the actor unless a wake-up is already on its way. The caller holds a shard's lock,
    /// so if the actor has emptied that shard since it last cleared `signalled`, this sees the
    /// cleared flag.
    fn wake_actor(&self) {
        if !self.signalled.load(Relaxed) && !self.signalled.swap(true, Relaxed) {
            self.ready.notify_one();
        }
    }

    /// Resolves when requests may be waiting in the inboxes.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// Claims `timer.key` for a new timer due at `deadline` and queues its `Add`, waiting while
    /// the shard's inbox is full. Returns the timer's id.
    pub async fn add(&self, timer: Timer, due: Due, watched: bool) -> Result<EntryId, Error> {
        let (shard, hash) = self.locate(timer.key.as_bytes());
        let mut timer = Some(timer);
        self.with_room(shard, |s| {
            let timer = timer.take().expect("a request runs once");
            (self.claim(s, hash, timer, due.deadline, watched), self.urgent(due.set_at, due.deadline))
        })
        .await
    }

    /// Claims many keys (none watched), in order, taking each shard's lock once for all its
    /// keys: a locked instruction waits for earlier stores to reach the cache, so one lock per
    /// key would pay each key's cache miss in turn, while under one lock the misses of a shard's
    /// keys overlap. Waits first until no inbox is full, so the whole batch goes in or, if the
    /// future is dropped while waiting, none of it.
    pub async fn add_many(&self, timers: Vec<(Timer, u64)>, set_at: u64) -> Vec<Result<(), Error>> {
        loop {
            let room = self.room.notified();
            let mut full = false;
            for shard in 0..self.shards.len() {
                let mut s = self.lock(shard);
                if s.inbox.len() >= self.inbox_cap && !s.closed {
                    s.blocked = true;
                    full = true;
                }
            }
            if !full {
                break;
            }
            room.await;
        }
        let mut results = vec![Ok(()); timers.len()];
        if !self.reserve(timers.len()) {
            // Too close to `max_pending` to know in advance which items fit: one by one, in order.
            for (result, (timer, deadline)) in results.iter_mut().zip(timers) {
                let (shard, hash) = self.locate(timer.key.as_bytes());
                let mut s = self.lock(shard);
                *result = self.claim(&mut s, hash, timer, deadline, false).map(drop);
                self.nudge(&s, self.urgent(set_at, deadline));
            }
            return results;
        }
        let mut groups = self.by_shard(timers.iter().map(|(timer, _)| timer.key.as_bytes()));
        let mut timers: Vec<Option<(Timer, u64)>> = timers.into_iter().map(Some).collect();
        for (shard, batch) in groups.drain(..) {
            let mut s = self.lock(shard);
            let mut urgent = false;
            for (i, hash) in batch {
                let (timer, deadline) = timers[i].take().expect("each timer is in one group");
                urgent |= self.urgent(set_at, deadline);
                // Room in `max_pending` is held already.
                results[i] = s.claim(&self.hasher, hash, timer, deadline, false).map(drop);
                if results[i].is_err() {
                    self.release(1);
                }
            }
            self.nudge(&s, urgent);
        }
        results
    }

    /// Claims the key for one timer under its shard's lock, counting it against `max_pending`.
    fn claim(&self, s: &mut Shard, hash: u64, timer: Timer, deadline: u64, watched: bool) -> Result<EntryId, Error> {
        if !self.reserve(1) {
            return Err(Error::Full(self.max_pending));
        }
        s.claim(&self.hasher, hash, timer, deadline, watched).inspect_err(|_| self.release(1))
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

    /// Moves the timer holding `key` to a new deadline: queues the move behind the shard's
    /// earlier requests, so it finds the timer in the wheel. `make` builds the request from the
    /// timer's id.
    pub async fn move_timer(&self, key: &str, make: impl FnOnce(EntryId) -> Op) -> Result<(), Error> {
        let (shard, hash) = self.locate(key.as_bytes());
        let mut make = Some(make);
        self.with_room(shard, |s| {
            if s.closed {
                return (Err(Error::Stopped), false);
            }
            let Some(slot) = s.find(hash, key.as_bytes()) else {
                return (Err(Error::NotFound), false);
            };
            s.inbox.push(make.take().expect("a request runs once")(slot.id()));
            // Its caller awaits the answer.
            (Ok(()), true)
        })
        .await
    }

    /// Ends the timer holding `key` (only if it has the id `id`, when given) and reports
    /// `outcome` to its watcher. Returns the timer's id if this call ended it.
    pub fn end(&self, key: &[u8], id: Option<EntryId>, outcome: Outcome, by: By) -> Option<EntryId> {
        let (shard, hash) = self.locate(key);
        let mut wake = None;
        let ended = {
            let mut s = self.lock(shard);
            let ended = s.end(hash, key, id, &outcome, by, |w| wake = Some(w))?;
            // A cancelled entry can wait in the wheel: it is checked before it fires.
            self.nudge(&s, false);
            ended
        };
        self.release(1);
        if let Some(waker) = wake {
            waker.wake();
        }
        Some(ended)
    }

    /// The batch form of [`end`](Self::end), one lock per shard (see
    /// [`add_many`](Self::add_many)). Returns, per key, the id of the timer this call ended.
    pub fn end_many(&self, timers: &[(&[u8], Option<EntryId>)], outcome: Outcome, by: By) -> Vec<Option<EntryId>> {
        let mut ended = vec![None; timers.len()];
        let mut wake = Vec::new();
        for (shard, batch) in self.by_shard(timers.iter().map(|(key, _)| *key)) {
            let mut s = self.lock(shard);
            for (i, hash) in batch {
                let (key, id) = timers[i];
                ended[i] = s.end(hash, key, id, &outcome, by, |w| wake.push(w));
            }
            self.nudge(&s, false);
        }
        self.release(ended.iter().flatten().count());
        wake.into_iter().for_each(Waker::wake);
        ended
    }

    /// The id of the pending timer holding `key`.
    pub fn id_of(&self, key: &str) -> Option<EntryId> {
        let (shard, hash) = self.locate(key.as_bytes());
        self.lock(shard).find(hash, key.as_bytes()).map(Slot::id)
    }

    /// Whether a timer with this key is pending.
    pub fn contains(&self, key: &str) -> bool {
        self.id_of(key).is_some()
    }

    /// For the actor, about a repeating timer that has just run: if `key` still holds timer `id`,
    /// counts the run and returns `true`; otherwise the timer was cancelled meanwhile.
    pub fn ran_again(&self, key: &[u8], id: EntryId) -> bool {
        let (shard, hash) = self.locate(key);
        let mut s = self.lock(shard);
        let pending = s.find(hash, key).is_some_and(|slot| slot.id() == id);
        s.counts.fired += u64::from(pending);
        pending
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

    /// For the actor: takes the requests queued in `shard` into `ops` (empty on entry), and gives
    /// back the `dead` ids that came from it. Clears `signalled` first when `shard` is the first,
    /// so a request queued after the actor has looked at its shard wakes it again.
    pub fn take_requests(&self, shard: usize, ops: &mut Vec<Op>, dead: &mut Vec<EntryId>) {
        if shard == 0 {
            self.signalled.store(false, Relaxed);
        }
        let blocked = {
            let mut s = self.lock(shard);
            std::mem::swap(&mut s.inbox, ops);
            s.ids.give_back_all(dead);
            std::mem::take(&mut s.blocked)
        };
        if blocked {
            self.room.notify_waiters();
        }
    }

    /// For the actor, before it waits: publishes the tick it will wake at without being told
    /// (0 if it wakes on every tick whatever is due, at least 1 otherwise), then says whether requests arrived
    /// meanwhile that it must take first.
    pub fn will_wake_at(&self, tick: u64) -> bool {
        self.next_wake.store(tick, Relaxed);
        // A request queued after this look finds `tick` under the shard's lock, and wakes the
        // actor if it cannot wait for it.
        (0..self.shards.len()).any(|shard| !self.lock(shard).inbox.is_empty())
    }

    /// For the actor, once it stops: refuses every request from now on and takes those queued.
    pub fn close(&self, shard: usize, ops: &mut Vec<Op>) {
        let mut s = self.lock(shard);
        s.closed = true;
        ops.append(&mut s.inbox);
        let blocked = std::mem::take(&mut s.blocked);
        drop(s);
        if blocked {
            self.room.notify_waiters();
        }
    }

    /// Polls the outcome of timer `id` (holding `key`) for its `Scheduled` future.
    pub fn poll_outcome(&self, key: &[u8], id: EntryId, waker: &Waker) -> Option<Outcome> {
        let (shard, _) = self.locate(key);
        let watchers = &mut self.lock(shard).watchers;
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
    pub fn unwatch(&self, key: &[u8], id: EntryId, polled: bool) {
        let (shard, hash) = self.locate(key);
        let mut s = self.lock(shard);
        let pending = match s.find_mut(hash, key) {
            Some(slot) if slot.id() == id => {
                slot.0 &= !ARMED;
                true
            }
            _ => false,
        };
        // An unpolled watcher of a pending timer has nothing in `watchers` to clean up.
        if polled || !pending {
            s.watchers.remove(&id);
        }
    }
}

impl Shard {
    fn find(&self, hash: u64, key: &[u8]) -> Option<Slot> {
        let probe = Probe::new(key);
        self.keys.find(hash, |(k, _)| k.matches(&probe)).map(|&(_, slot)| slot)
    }

    fn find_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Slot> {
        let probe = Probe::new(key);
        self.keys.find_mut(hash, |(k, _)| k.matches(&probe)).map(|(_, slot)| slot)
    }

    /// Claims the key for a timer (already counted against `max_pending`), draws its id and
    /// queues its `Add`. `hasher` rehashes the keys if the table grows.
    fn claim(
        &mut self,
        hasher: &foldhash::fast::RandomState,
        hash: u64,
        timer: Timer,
        deadline: u64,
        watched: bool,
    ) -> Result<EntryId, Error> {
        if self.closed {
            return Err(Error::Stopped);
        }
        let entry = self.keys.entry(hash, |(k, _)| *k == timer.key, |(k, _)| hasher.hash_one(k.as_bytes()));
        let hashbrown::hash_table::Entry::Vacant(vacant) = entry else {
            return Err(Error::DuplicateKey(timer.key.as_str().to_owned()));
        };
        let id = self.ids.take()?;
        vacant.insert((timer.key.clone(), Slot(id.to_u64() | if watched { ARMED } else { 0 })));
        self.inbox.push(Op::Add(super::command::Add { timer, id, deadline }));
        self.counts.pending += 1;
        self.counts.scheduled += 1;
        Ok(id)
    }

    /// Ends the timer holding `key` if it has the id `id` (when given): releases the key,
    /// records `outcome` for its watcher (handing `wake` the waker to call once unlocked),
    /// counts it, and queues its `Remove` if a handle ended it.
    fn end(
        &mut self,
        hash: u64,
        key: &[u8],
        id: Option<EntryId>,
        outcome: &Outcome,
        by: By,
        wake: impl FnOnce(Waker),
    ) -> Option<EntryId> {
        let probe = Probe::new(key);
        let owned = |(k, slot): &(Key, Slot)| k.matches(&probe) && id.is_none_or(|id| slot.id() == id);
        let (_, slot) = self.keys.find_entry(hash, owned).ok()?.remove().0;
        let id = slot.id();
        if slot.armed() {
            if let Some(Watch::Waiting(waker)) = self.watchers.insert(id, Watch::Done(outcome.clone())) {
                wake(waker);
            }
        }
        self.counts.pending -= 1;
        match outcome {
            Ok(()) => self.counts.fired += 1,
            Err(Error::Cancelled) => self.counts.cancelled += 1,
            Err(_) => self.counts.stopped += 1,
        }
        if by == By::Handle {
            self.inbox.push(Op::Remove(id));
        }
        Some(id)
    }
}
