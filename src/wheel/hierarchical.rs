//! The hierarchical (Kafka-style) timing wheel.
//!
//! Level `n >= 1` has `slots` buckets of `slots^n` ticks each, so it reaches `slots^(n+1)` ticks
//! ahead. Level 0 has twice as many buckets, `2 * slots` of one tick each (see "Draining" below).
//! Levels are created on the first deadline that overflows the top one, up to the level that
//! spans all of `u64`.
//!
//! Each level looks at a window of its buckets in a row, starting at the bucket that holds the
//! clock (the level's cursor). An entry goes to the lowest level whose window holds its
//! deadline. When `advance` reaches an upper bucket's start, it moves the clock there and
//! re-inserts ("demotes") the bucket's entries, each landing on a strictly lower level, until
//! they reach level 0 and expire on their exact tick. Buckets are visited in order of their start
//! tick, found through per-level occupancy bitmaps, so empty ticks cost nothing: that is the
//! "precise advance" Kafka gets from its DelayQueue of buckets, without the heap.
//!
//! # Draining level 1 before it is due
//! Demoting a bucket moves every entry in it, and a busy level-1 bucket can hold tens of
//! thousands (a million timers due over two seconds put 32,000 in each 64-tick bucket of a
//! 64-slot wheel): moved all at once, on the tick the bucket starts, they hold up the entries due
//! on that tick and the next few. So level 0 is twice as wide as the levels above: once the clock
//! is within `slots` ticks of a level-1 bucket's start, level 0's window holds the whole bucket,
//! and each `advance` moves a share of it down (`len / ticks left`, from the end of the bucket, in
//! no particular order, since every entry fits). A bucket of at most [`DRAIN_MIN`] entries is
//! demoted on its start tick as before. `next_deadline` reports the ticks a drain needs, so a
//! driver that sleeps between deadlines wakes for them; one that advances by larger steps drains
//! in larger shares, and whatever is left on the start tick is demoted then.
//!
//! Invariant (checked by the model tests): every occupied bucket starts after the clock, except
//! level 0's cursor bucket, which holds only entries already due.

use super::bitmap::Bitmap;
use super::slab::{Bucket, EntryId, Slab};
use super::{check_slots, Expired, Wheel};

/// A level-1 bucket holding more entries than this is drained into level 0 over the ticks before
/// it is due, rather than demoted all at once (see the module docs). Moving this many at once
/// takes some tens of microseconds.
pub(crate) const DRAIN_MIN: usize = 256;

/// A hierarchical timing wheel: O(1) insert and remove, advance by due bucket.
///
/// See the [module docs](crate::wheel) for an example.
pub struct HierarchicalWheel<T> {
    slab: Slab<T>,
    /// The buckets' entries: bucket `slot` of level `l` is `buckets[levels[l].first + slot]`.
    buckets: Vec<Bucket>,
    levels: Vec<Level>,
    /// Buckets per level above level 0 (which has twice as many).
    slots: u64,
    /// `log2(slots)` when `slots` is a power of two, so slot arithmetic is shifts and masks.
    shift: Option<u32>,
    /// The clock: the largest tick `advance` has been given.
    now: u64,
}

struct Level {
    /// Ticks per bucket: `slots^level`.
    tick: u64,
    /// Buckets in the level: `2 * slots` for level 0, `slots` above.
    len: u64,
    /// The index of the level's first bucket in `buckets`.
    first: usize,
    /// Ticks covered by the level's window (`tick * len`), or `None` when that exceeds `u64`:
    /// the level then holds every deadline that reaches it.
    span: Option<u64>,
    occupied: Bitmap,
}

impl<T> HierarchicalWheel<T> {
    /// A wheel with `slots` buckets per level.
    ///
    /// Powers of two are fastest (slot arithmetic becomes shifts); 64 is a good default.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) unless `2 <= slots <=` [`MAX_SLOTS`](super::MAX_SLOTS).
    pub fn new(slots: usize) -> Result<Self, crate::Error> {
        check_slots(slots, 2)?;
        Ok(HierarchicalWheel {
            slab: Slab::new(),
            buckets: Vec::new(),
            levels: Vec::new(),
            slots: slots as u64,
            shift: slots.is_power_of_two().then(|| slots.trailing_zeros()),
            now: 0,
        })
    }

    /// The number of levels created so far.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The start of the bucket of `level` that holds tick `t`.
    fn bucket_start(&self, level: usize, t: u64) -> u64 {
        let tick = self.levels[level].tick;
        match self.shift {
            Some(_) => t & !(tick - 1),
            None => t - t % tick,
        }
    }

    /// The slot of `level` whose buckets hold tick `t`.
    fn slot(&self, level: usize, t: u64) -> usize {
        let l = &self.levels[level];
        match self.shift {
            Some(shift) => ((t >> (shift * level as u32)) & (l.len - 1)) as usize,
            None => (t / l.tick % l.len) as usize,
        }
    }

    /// The level and slot of bucket number `bucket`.
    fn level_and_slot(&self, bucket: usize) -> (usize, usize) {
        let level0 = 2 * self.slots as usize;
        if bucket < level0 {
            return (0, bucket);
        }
        let above = bucket - level0;
        (1 + above / self.slots as usize, above % self.slots as usize)
    }

    /// The lowest level whose window holds `deadline` (which must be after the clock), creating
    /// levels as needed.
    fn level_for(&mut self, deadline: u64) -> usize {
        debug_assert!(deadline > self.now, "deadline {deadline} is not after the clock {}", self.now);
        // Level 0's window is the `2 * slots` ticks from the clock. Above it, no level below
        // `floor(log_slots(deadline - now))` can hold the deadline: a level's window starts at
        // or before the clock and spans `slots^(level + 1)` ticks. So start the search there,
        // which leaves at most two levels to try; each window holds the one below.
        let mut level = match self.shift {
            Some(shift) if deadline - self.now >= 2 * self.slots => {
                ((63 - (deadline - self.now).leading_zeros()) / shift) as usize
            }
            _ => 0,
        };
        loop {
            while level >= self.levels.len() {
                self.add_level();
            }
            let Some(span) = self.levels[level].span else {
                return level;
            };
            if deadline - self.bucket_start(level, self.now) < span {
                return level;
            }
            level += 1;
        }
    }

    fn add_level(&mut self) {
        let (tick, len) = match self.levels.last() {
            None => (1, 2 * self.slots),
            Some(top) => {
                assert!(top.span.is_some(), "a level spanning all of u64 has no level above it");
                // Below a level spanning all of u64, `tick * slots` fits.
                (top.tick * self.slots, self.slots)
            }
        };
        self.levels.push(Level {
            tick,
            len,
            first: self.buckets.len(),
            span: tick.checked_mul(len),
            occupied: Bitmap::new(len as usize),
        });
        self.buckets.resize_with(self.buckets.len() + len as usize, Bucket::default);
    }

    /// Links entry `index` into the bucket its deadline belongs to, as seen from the clock.
    fn place(&mut self, index: u32) {
        let deadline = self.slab.get(index).deadline();
        let (level, slot) = if deadline <= self.now {
            if self.levels.is_empty() {
                self.add_level();
            }
            (0, self.slot(0, self.now))
        } else {
            let level = self.level_for(deadline);
            (level, self.slot(level, deadline))
        };
        let bucket = self.levels[level].first + slot;
        self.slab.push(&mut self.buckets, bucket, index);
        self.slab.get_mut(index).aux = bucket as u32;
        self.levels[level].occupied.set(slot);
    }

    /// The occupied bucket with the earliest start: `(start, level, slot)`.
    fn next_bucket(&self) -> Option<(u64, usize, usize)> {
        let mut best: Option<(u64, usize, usize)> = None;
        for (level, l) in self.levels.iter().enumerate() {
            let cursor = self.slot(level, self.now);
            let Some(k) = l.occupied.next_set_from(cursor) else {
                continue;
            };
            // The bucket holds a deadline <= u64::MAX, so its start fits; saturate regardless.
            let start = self.bucket_start(level, self.now).saturating_add((k as u64).saturating_mul(l.tick));
            if best.is_none_or(|(s, ..)| start < s) {
                best = Some((start, level, (cursor + k) % l.len as usize));
            }
        }
        best
    }

    /// The level-1 bucket to drain into level 0 next (see the module docs), if any: the first
    /// occupied one, if it holds more than [`DRAIN_MIN`] entries. Returns `(start, bucket)`; the
    /// drain begins once the clock is within `slots` ticks of `start`.
    fn to_drain(&self) -> Option<(u64, usize)> {
        let l = self.levels.get(1)?;
        let cursor = self.slot(1, self.now);
        // Never the cursor's own bucket, which starts at or before the clock and so is empty.
        let k = l.occupied.next_set_from(cursor)?;
        let start = self.bucket_start(1, self.now).saturating_add(k as u64 * l.tick);
        let bucket = l.first + (cursor + k) % l.len as usize;
        (self.buckets[bucket].len() > DRAIN_MIN).then_some((start, bucket))
    }

    /// Moves this tick's share of the bucket being drained down to level 0.
    fn drain(&mut self) {
        let Some((start, bucket)) = self.to_drain().filter(|&(start, _)| start - self.now <= self.slots) else {
            return;
        };
        // Every entry of the bucket is due in `start..start + slots`, inside level 0's window of
        // `2 * slots` ticks from the clock, and after the clock: each lands in level 0, not due.
        debug_assert!(start > self.now, "level-1 bucket at {start} not after the clock {}", self.now);
        let share = self.buckets[bucket].len().div_ceil((start - self.now) as usize);
        for _ in 0..share {
            let index = self.buckets[bucket].pop().expect("the bucket holds `share` entries");
            self.place(index);
            debug_assert!(self.level_and_slot(self.slab.get(index).aux as usize).0 == 0, "drained into level 0");
        }
        if self.buckets[bucket].is_empty() {
            let (level, slot) = self.level_and_slot(bucket);
            self.levels[level].occupied.clear(slot);
            self.buckets[bucket].clear();
        }
    }
}

impl<T> Wheel<T> for HierarchicalWheel<T> {
    fn insert(&mut self, deadline: u64, value: T) -> EntryId {
        let id = self.slab.insert(deadline, value);
        self.place(id.index());
        id
    }

    fn remove(&mut self, id: EntryId) -> Option<T> {
        let index = self.slab.index_of(id)?;
        let bucket = self.slab.get(index).aux as usize;
        if self.slab.unlink(&mut self.buckets, bucket, index) {
            let (level, slot) = self.level_and_slot(bucket);
            self.levels[level].occupied.clear(slot);
        }
        Some(self.slab.free(index))
    }

    fn advance(&mut self, now: u64, mut expired: impl FnMut(Expired<T>)) {
        let target = now.max(self.now);
        while let Some((start, level, slot)) = self.next_bucket() {
            if start > target {
                break;
            }
            // Move the clock to the bucket so demoted entries are placed relative to it.
            self.now = self.now.max(start);
            self.levels[level].occupied.clear(slot);
            let bucket = self.levels[level].first + slot;
            let mut taken = Slab::<T>::take_bucket(&mut self.buckets, bucket);
            // Each entry lands in a lower level or expires, never back in this bucket.
            for (_, index) in taken.entries() {
                let deadline = self.slab.get(index).deadline();
                if deadline <= target {
                    let id = self.slab.id_of(index);
                    expired(Expired { id, deadline, value: self.slab.free(index) });
                } else {
                    debug_assert!(level > 0, "level-0 bucket at {start} holds deadline {deadline} > {target}");
                    self.place(index);
                }
            }
            taken.clear();
            Slab::<T>::restore_bucket(&mut self.buckets, bucket, taken);
        }
        self.now = target;
        self.drain();
    }

    fn next_deadline(&self) -> Option<u64> {
        let due = self.next_bucket().map(|(start, ..)| start);
        // A drain is due one tick after the clock, or once its bucket comes within reach.
        let drain = self.to_drain().map(|(start, _)| start.saturating_sub(self.slots).max(self.now + 1));
        due.into_iter().chain(drain).min()
    }

    fn len(&self) -> usize {
        self.slab.len()
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn deadline(&self, id: EntryId) -> Option<u64> {
        self.slab.index_of(id).map(|i| self.slab.get(i).deadline())
    }
}

impl<T> Default for HierarchicalWheel<T> {
    /// 64 slots per level.
    fn default() -> Self {
        Self::new(64).expect("64 slots is valid")
    }
}

impl<T> std::fmt::Debug for HierarchicalWheel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HierarchicalWheel")
            .field("slots", &self.slots)
            .field("levels", &self.levels.len())
            .field("len", &self.slab.len())
            .field("now", &self.now)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain<T>(wheel: &mut HierarchicalWheel<T>, now: u64) -> Vec<(u64, T)> {
        let mut out = Vec::new();
        wheel.advance(now, |e| out.push((e.deadline, e.value)));
        out
    }

    /// Seed 002's worked example: 1 ms x 20 slots, clock at 2 ms. A 350 ms task climbs to level 1
    /// (20 ms buckets, the one for 340..360), a 450 ms task to level 2 (the 400..800 bucket); at
    /// 400 ms the latter is demoted with 50 ms left into level 1's 440..460 bucket, and both come
    /// back down to fire on their exact tick.
    #[test]
    fn worked_example_of_twenty_slots() {
        let mut wheel = HierarchicalWheel::new(20).unwrap();
        assert!(drain(&mut wheel, 2).is_empty());
        wheel.insert(352, "350 ms");
        wheel.insert(452, "450 ms");
        assert_eq!(wheel.levels(), 3);
        assert_eq!(wheel.next_deadline(), Some(340), "level 1's 340..360 bucket is due first");
        assert!(drain(&mut wheel, 340).is_empty(), "demoted at 340, not yet due");
        assert_eq!(wheel.next_deadline(), Some(352));
        assert_eq!(drain(&mut wheel, 352), [(352, "350 ms")]);
        assert_eq!(wheel.next_deadline(), Some(400), "level 2's 400..800 bucket");
        assert!(drain(&mut wheel, 400).is_empty());
        assert_eq!(wheel.next_deadline(), Some(440), "demoted into level 1's 440..460 bucket");
        assert!(drain(&mut wheel, 451).is_empty());
        assert_eq!(drain(&mut wheel, 10_000), [(452, "450 ms")]);
        assert!(wheel.is_empty());
    }

    #[test]
    fn slot_and_bucket_arithmetic_agree_for_pow2_and_others() {
        for slots in [2usize, 3, 20, 64, 100] {
            let mut wheel = HierarchicalWheel::<()>::new(slots).unwrap();
            wheel.insert(u64::MAX, ());
            for level in 0..wheel.levels() {
                let tick = wheel.levels[level].tick;
                for t in [0, 1, 63, 64, 65, 12_345, u64::MAX / 3, u64::MAX] {
                    assert_eq!(wheel.bucket_start(level, t), t / tick * tick, "slots {slots} level {level} t {t}");
                    let len = if level == 0 { 2 * slots } else { slots } as u64;
                    assert_eq!(wheel.slot(level, t), (t / tick % len) as usize, "slots {slots} level {level}");
                }
            }
        }
    }

    /// W3's shape: 32,000 entries in one 64-tick level-1 bucket. They go down to level 0 a
    /// 64th at a time over the 64 ticks before the bucket starts, not all on its first tick, and
    /// `next_deadline` wakes a sleeping driver for each share.
    #[test]
    fn a_full_level_one_bucket_is_drained_over_the_ticks_before_it() {
        let mut wheel = HierarchicalWheel::new(64).unwrap();
        for i in 0..32_000u64 {
            wheel.insert(128 + i % 64, i);
        }
        let level1 = wheel.levels[1].first + 2;
        assert_eq!(wheel.buckets[level1].len(), 32_000, "all in level 1's bucket for 128..192");
        assert_eq!(wheel.next_deadline(), Some(64), "the drain starts 64 ticks ahead of the bucket");
        let mut moved = Vec::new();
        while !wheel.buckets[level1].is_empty() {
            let before = wheel.buckets[level1].len();
            let next = wheel.next_deadline().unwrap();
            assert_eq!(next, wheel.now().max(63) + 1, "a share on every tick from 64");
            assert!(drain(&mut wheel, next).is_empty(), "nothing is due before 128");
            moved.push(before - wheel.buckets[level1].len());
        }
        assert_eq!(moved, vec![500; 64], "a 64th per tick, done by tick 127");
        assert_eq!(wheel.now(), 127);
        for tick in 128..192 {
            let fired = drain(&mut wheel, tick);
            assert_eq!(fired.len(), 500);
            assert!(fired.iter().all(|&(deadline, _)| deadline == tick), "each on its own tick");
        }
        assert!(wheel.is_empty());
    }

    #[test]
    fn a_small_level_one_bucket_is_demoted_on_its_start_tick() {
        let mut wheel = HierarchicalWheel::new(64).unwrap();
        for i in 0..DRAIN_MIN as u64 {
            wheel.insert(128 + i % 64, i);
        }
        assert_eq!(wheel.next_deadline(), Some(128), "no drain for a bucket of DRAIN_MIN entries");
        assert_eq!(drain(&mut wheel, 128).len(), DRAIN_MIN / 64);
    }

    #[test]
    fn levels_stop_at_the_one_spanning_u64() {
        let mut wheel = HierarchicalWheel::new(64).unwrap();
        wheel.insert(u64::MAX, ());
        assert_eq!(wheel.levels(), 11, "64^11 > 2^64, so the eleventh level covers everything");
        assert_eq!(drain(&mut wheel, u64::MAX), [(u64::MAX, ())]);
    }

    #[test]
    fn past_deadlines_fire_on_the_next_advance_even_without_time_moving() {
        let mut wheel = HierarchicalWheel::new(8).unwrap();
        drain(&mut wheel, 1_000);
        wheel.insert(3, 'x');
        assert_eq!(wheel.next_deadline(), Some(1_000));
        assert_eq!(drain(&mut wheel, 500), [(3, 'x')], "an earlier now still drains what is due");
    }
}
