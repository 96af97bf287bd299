//! The pure timing wheels: no tokio, no clock, no I/O.
//!
//! Time inside a wheel is a bare `u64` count of ticks that the caller passes in; what a tick is
//! (a millisecond, a second) is the caller's business. Both wheels keep their entries in a
//! generational slab, so [`insert`](Wheel::insert) and [`remove`](Wheel::remove) are O(1) and
//! allocate nothing once the slab has grown to the working set, and a stale [`EntryId`] is refused
//! rather than aliasing a newer entry. Buckets are arrays of slab indices, not linked lists, so a
//! bucket that comes due names all its entries at once; a removal leaves a hole in its bucket that
//! the bucket's next insert fills, so nothing moves.
//!
//! These are the wheels the [`Scheduler`](crate::Scheduler) runs on, public so that a driver of
//! your own (a game loop, a simulation, a sans-IO protocol) can use them directly: call
//! [`advance`](Wheel::advance) with the current tick, and sleep until
//! [`next_deadline`](Wheel::next_deadline).
//!
//! # The two wheels
//! - [`HierarchicalWheel`]: Kafka-style levels, each level's tick `slots` times the tick below,
//!   created lazily as far deadlines arrive, up to one that spans all of `u64`. An entry goes to
//!   the lowest level that reaches its deadline; when an upper bucket comes due, its entries are
//!   demoted to the levels below until they expire on their exact tick at level 0.
//!   [`next_deadline`](Wheel::next_deadline) comes from per-level occupancy bitmaps, so a driver
//!   sleeps straight to the next due bucket and empty ticks cost nothing. Pick it for mixed
//!   delays, far deadlines (a 48-hour review beside 30-second timeouts) and idle periods: almost
//!   always.
//! - [`RoundsWheel`]: one ring of `slots` one-tick buckets; an entry more than a revolution away
//!   carries a count of rounds that the cursor counts down each time it passes the entry's
//!   bucket. It never demotes, but every pass over a bucket touches all its entries, so pick it
//!   when nearly all delays fit in one revolution (`slots` ticks).
//!
//! # Draining busy buckets
//! Demoting a busy upper bucket all at once, on the tick it starts, would hold up the entries due
//! on that tick. So each level of the hierarchical wheel has `2 * slots` buckets, twice the span of
//! one bucket of the level above, and a bucket above level 0 that holds more than 256 entries is
//! moved down in up to `slots` shares over the time of one of its own buckets before it is due:
//! one share a tick for level 1, one every `slots` ticks for level 2, and so on; the last 256 or
//! fewer go down on its start tick. `next_deadline` reports the ticks a drain needs, and an insert
//! that makes a bucket busy enough to drain can bring `next_deadline` earlier, so a driver asks
//! again after inserting.
//!
//! # Choosing `slots`
//! - **Hierarchical.** Level 0 has `2 * slots` buckets of one tick, level 1 `2 * slots` buckets of
//!   `slots` ticks, and so on. More slots mean fewer levels and fewer demotions, but more memory
//!   (40 bytes per bucket, so `80 * slots` bytes per level, allocated as deadlines reach the
//!   level) and more room held: a bucket that has held entries keeps up to 1,024 indices (4 KiB)
//!   of room once empty. Fewer slots mean more wake-ups to drain busy buckets: at 64 slots of
//!   1 ms, the driver wakes every 64 ms while a busy level-2 bucket is within 4 s of its start,
//!   and every 4 s for a busy level-3 bucket within 4.4 minutes of its start. 64 (the service's
//!   default) keeps a small wheel small and, with draining, fires a burst of a million timers as
//!   punctually as 4,096 did (see
//!   [BENCHMARKS.md](https://github.com/tokio-timewheel/tokio-timewheel/blob/main/BENCHMARKS.md)).
//!   At least 2.
//! - **Rounds.** Enough slots that one revolution covers the usual delay (4,096 slots of 1 ms
//!   cover 4 s); the whole ring (40 bytes a bucket) is allocated up front. At least 1.
//!
//! Powers of two are fastest (slot arithmetic becomes shifts and masks); at most [`MAX_SLOTS`].
//!
//! # Examples
//! ```
//! use tokio_timewheel::wheel::{HierarchicalWheel, Wheel};
//!
//! let mut wheel = HierarchicalWheel::new(64)?;
//! let soon = wheel.insert(5, "soon");
//! wheel.insert(90_000, "much later");
//! assert_eq!(wheel.remove(soon), Some("soon"));
//! assert_eq!(wheel.remove(soon), None, "a stale id is refused");
//!
//! let mut fired = Vec::new();
//! wheel.advance(100_000, |e| fired.push((e.deadline, e.value)));
//! assert_eq!(fired, [(90_000, "much later")]);
//! # Ok::<(), tokio_timewheel::Error>(())
//! ```

mod bitmap;
mod hierarchical;
mod rounds;
mod slab;

pub use hierarchical::HierarchicalWheel;
#[cfg(test)]
pub(crate) use hierarchical::DRAIN_MIN;
pub use rounds::RoundsWheel;
pub use slab::EntryId;
pub(crate) use slab::MAX_ENTRIES;

/// The largest `slots` a wheel accepts: the buckets of the rounds ring, half those of a
/// hierarchical level.
pub const MAX_SLOTS: usize = 1 << 20;

/// An entry handed out by [`Wheel::advance`] because its deadline has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The id the entry had; it is stale from now on.
    pub id: EntryId,
    /// The tick the entry was due at (at most the `now` passed to `advance`).
    pub deadline: u64,
    /// The value given to [`Wheel::insert`].
    pub value: T,
}

/// The operations both wheels share.
///
/// The wheel has a clock, [`now`](Wheel::now), which only `advance` moves and which never goes
/// back. Every operation is O(1) except `advance`, which costs O(levels) per bucket it empties
/// plus O(1) per entry it expires or moves.
pub trait Wheel<T> {
    /// Adds `value`, due at tick `deadline`, and returns its id.
    ///
    /// Any `u64` deadline is accepted. A deadline at or before [`now`](Wheel::now) is due at once:
    /// the next call to `advance` yields it, whatever `now` that call passes.
    fn insert(&mut self, deadline: u64, value: T) -> EntryId;

    /// Removes the entry `id` and gives its value back, or `None` if `id` is stale (the entry
    /// was removed or expired already).
    fn remove(&mut self, id: EntryId) -> Option<T>;

    /// Moves the clock to `max(self.now(), now)` and calls `expired` once for every entry whose
    /// deadline is at or before the clock, in no particular order. Calling it again with the same
    /// or an earlier `now` is harmless; jumps of any size cost per bucket visited, not per tick.
    fn advance(&mut self, now: u64, expired: impl FnMut(Expired<T>));

    /// The tick at which `advance` next has work to do, or `None` if the wheel is empty.
    ///
    /// No entry is due before it, so `advance` with an earlier tick yields nothing: a driver can
    /// sleep until then. It may be earlier than the earliest deadline (the hierarchical wheel
    /// wakes to demote or drain an upper bucket, the rounds wheel to count down rounds), and it is at most
    /// `now()` when an entry is already due. An insert can bring it earlier than the new entry's
    /// own deadline (when it makes a hierarchical bucket busy enough to drain), so a driver asks
    /// again after inserting.
    fn next_deadline(&self) -> Option<u64>;

    /// Moves the pending entry `id` to tick `deadline` and returns its id afterwards, or `None`
    /// if `id` is stale. The wheels of this crate keep the entry in its slab slot, so the id
    /// stays the same and stays valid; the default implementation removes and inserts, which
    /// gives a new id.
    ///
    /// A later deadline costs [`HierarchicalWheel`] one write, as `tokio::time::Sleep::reset`
    /// does: the entry stays in its bucket and is filed again when that bucket comes due, as
    /// any entry of an upper level is. So pushing a deadline back again and again costs no
    /// bucket work until the old deadline comes, and [`next_deadline`](Wheel::next_deadline)
    /// may report that tick, with nothing due. An earlier deadline files the entry again at
    /// once.
    fn reschedule(&mut self, id: EntryId, deadline: u64) -> Option<EntryId> {
        let value = self.remove(id)?;
        Some(self.insert(deadline, value))
    }

    /// The number of pending entries.
    fn len(&self) -> usize;

    /// Whether no entry is pending.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The wheel's clock: the largest `now` passed to `advance` so far (0 at first).
    fn now(&self) -> u64;

    /// The deadline of the pending entry `id`, or `None` if `id` is stale.
    fn deadline(&self, id: EntryId) -> Option<u64>;
}

/// Checks a slot count given by a caller; `min` is 2 for the hierarchical wheel (one slot per
/// level would never reach further) and 1 for the rounds wheel.
fn check_slots(slots: usize, min: usize) -> Result<(), crate::Error> {
    if (min..=MAX_SLOTS).contains(&slots) {
        Ok(())
    } else {
        Err(crate::Error::invalid(format!("slots must be between {min} and {MAX_SLOTS}, got {slots}")))
    }
}

/// `earliest_where` of both wheels against a model under random inserts, removes, moves (earlier
/// and later, which the hierarchical wheel writes lazily) and advances: it finds exactly the
/// earliest deadline of the entries asked for, although it stops reading early.
#[cfg(test)]
mod earliest_where {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::{EntryId, HierarchicalWheel, RoundsWheel, Wheel};

    #[derive(Debug, Clone)]
    enum Op {
        Insert { delay: u64, wanted: bool },
        Remove { n: usize },
        Move { n: usize, delay: u64 },
        Advance { step: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let delay = prop_oneof![0u64..8, 0u64..300, 0u64..100_000];
        prop_oneof![
            4 => (delay.clone(), any::<bool>()).prop_map(|(delay, wanted)| Op::Insert { delay, wanted }),
            1 => any::<usize>().prop_map(|n| Op::Remove { n }),
            3 => (any::<usize>(), delay).prop_map(|(n, delay)| Op::Move { n, delay }),
            2 => prop_oneof![0u64..4, 0u64..500].prop_map(|step| Op::Advance { step }),
        ]
    }

    fn check<W: Wheel<bool>>(mut wheel: W, earliest: impl Fn(&W) -> Option<u64>, ops: Vec<Op>) {
        let mut model: HashMap<EntryId, (u64, bool)> = HashMap::new();
        let mut ids: Vec<EntryId> = Vec::new();
        for op in ops {
            match op {
                Op::Insert { delay, wanted } => {
                    let deadline = wheel.now() + delay;
                    let id = wheel.insert(deadline, wanted);
                    model.insert(id, (deadline, wanted));
                    ids.push(id);
                }
                Op::Remove { n } if !ids.is_empty() => {
                    let id = ids.swap_remove(n % ids.len());
                    assert_eq!(wheel.remove(id), model.remove(&id).map(|(_, w)| w));
                }
                Op::Move { n, delay } if !ids.is_empty() => {
                    let id = ids[n % ids.len()];
                    if let Some(entry) = model.get_mut(&id) {
                        entry.0 = wheel.now() + delay;
                        assert_eq!(wheel.reschedule(id, entry.0), Some(id));
                    }
                }
                Op::Advance { step } => {
                    let now = wheel.now() + step;
                    wheel.advance(now, |e| assert!(model.remove(&e.id).is_some(), "{:?} fired twice", e.id));
                }
                _ => {}
            }
            let expected = model.values().filter(|(_, wanted)| *wanted).map(|(d, _)| *d).min();
            assert_eq!(earliest(&wheel), expected, "{} entries", model.len());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn hierarchical(slots in prop_oneof![2usize..10, Just(64)], ops in prop::collection::vec(op(), 1..120)) {
            check(HierarchicalWheel::new(slots).unwrap(), |w| w.earliest_where(|&wanted| wanted), ops);
        }

        #[test]
        fn rounds(slots in prop_oneof![1usize..10, Just(64)], ops in prop::collection::vec(op(), 1..120)) {
            check(RoundsWheel::new(slots).unwrap(), |w| w.earliest_where(|&wanted| wanted), ops);
        }
    }
}
