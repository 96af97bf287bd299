//! The fire path: what one advance of a shard collects, and the buffers it is collected in.

use std::hash::BuildHasher;
use std::task::Waker;

use tokio::time::Instant;

use super::super::clock::Clock;
use super::super::job::JobRef;
use super::super::key::Key;
use super::super::timer::Timer;
use super::shard::Shard;
use crate::lateness::Histogram;
use crate::wheel::Expired;

/// What the actor collects from the shards in one advance, to be acted on with no lock held.
#[derive(Default)]
pub(crate) struct Fired {
    /// The jobs to start: each with its deadline tick and its timer's key.
    pub jobs: Vec<(u64, JobRef, Key)>,
    /// The watchers of the timers that ended.
    pub wakers: Vec<Waker>,
    /// The keys of cancelled timers taken out of the wheels (those that own memory), to be
    /// dropped with no lock held.
    pub swept: Vec<Key>,
    /// How late the timers fired in this advance were, from their deadline ticks' start.
    pub late: Histogram,
    /// The most ticks any of them was late by.
    pub lag: u64,
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
    pub(super) fn used(&mut self, n: usize) {
        self.peak = self.peak.max(n);
    }

    /// For the actor, before it empties the buffers it reads: records how full they are.
    pub fn note_use(&mut self) {
        self.used(self.jobs.len().max(self.wakers.len()).max(self.swept.len()));
    }

    /// For the actor, when asked to give memory back: cuts every buffer down to [`KEEP`].
    pub fn shrink_to_fit(&mut self) {
        self.advances = 0;
        self.peak = 0;
        self.trim_all(0);
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
        self.trim_all(used);
    }

    /// Cuts every buffer down to what a use of `used` items needs (see [`trim`]).
    fn trim_all(&mut self, used: usize) {
        trim(&mut self.jobs, used);
        trim(&mut self.wakers, used);
        trim(&mut self.swept, used);
        trim(&mut self.due, used);
        trim(&mut self.hashes, used);
    }
}

/// Advances `shard`'s wheel to tick `now` (`now_nanos` after the clock's origin): ends the timers that have run for the last time and
/// puts the repeating ones back, adding their jobs and watchers to `fired`. Returns how many
/// timers ended, for `max_pending`, and the wheel's next deadline.
pub(super) fn advance(
    shard: &mut Shard,
    hasher: &impl BuildHasher,
    (now_instant, (now_nanos, now)): (Instant, (u64, u64)),
    clock: &Clock,
    fired: &mut Fired,
) -> (usize, Option<u64>) {
    let mut due = std::mem::take(&mut fired.due);
    // From here on every entry in the wheel holds its key. (The `no_sweep` mutant skips it.)
    #[cfg(not(tw_mutant = "no_sweep"))]
    shard.sweep(&mut fired.swept);
    shard.wheel.advance(now, |expired| due.push(expired));
    fired.used(due.len());
    // Release every due timer's key before putting any repeating one back: the key map names
    // entries by slab slot, and a timer put back may take the slot of a due one whose key is
    // still to be released. First only a load of each key's home slot, as batches do: the loads
    // do not depend on one another, so their cache misses overlap, and the removals then hit the
    // cache.
    let hashes = &mut fired.hashes;
    hashes.clear();
    for Expired { value: timer, .. } in &due {
        let hash = hasher.hash_one(timer.key.as_bytes());
        shard.keys.touch(hash);
        hashes.push(hash);
    }
    for (Expired { id, .. }, &hash) in due.iter().zip(&fired.hashes) {
        let pos = shard.keys.find(hash, |i| i == id.index()).expect("a due timer holds its key");
        shard.keys.remove(pos);
    }
    let mut ended = 0;
    for (Expired { deadline, value: mut timer, .. }, &hash) in due.drain(..).zip(&fired.hashes) {
        shard.counts.fired += 1;
        fired.late.record(clock.late_by(now_nanos, deadline));
        fired.lag = fired.lag.max(now.saturating_sub(deadline));
        match timer.next_run(clock, now_instant) {
            None => {
                fired.wakers.extend(shard.finish(timer.serial, &Ok(())));
                ended += 1;
                if let (key, Some(job)) = timer.into_last_run() {
                    fired.jobs.push((deadline, job, key));
                }
            }
            // More runs to come: the key is claimed again and the timer goes back in the wheel,
            // with its serial number.
            Some((next_due, next)) => {
                let job = timer.next_repeat(next_due);
                let key = timer.key.clone();
                let entry = shard.wheel.insert(next, timer);
                shard.keys.insert_new(hash, entry.index());
                fired.jobs.push((deadline, JobRef::Shared(job), key));
            }
        }
    }
    // A burst that has fired leaves room for far more timers than are left: give it back (see
    // `Shard::sparse`; each pass is paid for by the three quarters of the room that emptied).
    if shard.sparse() {
        // On failure to allocate the smaller wheel, the shard keeps the one it has.
        let _ = shard.compact(hasher);
    }
    // What the repeating timers put back may have armed a drain: `next` covers it.
    shard.wheel.wake_by(now);
    fired.due = due;
    shard.check();
    (ended, shard.wheel.next_deadline())
}

#[cfg(test)]
mod tests {
    use super::*;

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
