//! The hierarchical (Kafka-style) timing wheel.
//!
//! Level 0 has `slots` buckets of one tick each. Level `n + 1` has `slots` buckets whose tick is
//! level `n`'s whole span, so level `n` reaches `slots^(n+1)` ticks ahead. Levels are created on
//! the first deadline that overflows the top one, up to the level that spans all of `u64`.
//!
//! Each level looks at a window of `slots` consecutive buckets starting at the bucket that holds
//! the clock (the level's cursor). An entry goes to the lowest level whose window holds its
//! deadline. When `advance` reaches an upper bucket's start, it moves the clock there and
//! re-inserts ("demotes") the bucket's entries, each landing on a strictly lower level, until
//! they reach level 0 and expire on their exact tick. Buckets are visited in order of their start
//! tick, found through per-level occupancy bitmaps, so empty ticks cost nothing: that is the
//! "precise advance" Kafka gets from its DelayQueue of buckets, without the heap.
//!
//! Invariant (checked by the model tests): every occupied bucket starts after the clock, except
//! level 0's cursor bucket, which holds only entries already due.

use super::bitmap::Bitmap;
use super::slab::{Bucket, EntryId, Slab};
use super::{check_slots, Expired, ExternalIds, Wheel};

/// A hierarchical timing wheel: O(1) insert and remove, advance by due bucket.
///
/// See the [module docs](crate::wheel) for an example.
pub struct HierarchicalWheel<T> {
    slab: Slab<T>,
    /// The buckets' entries: bucket `slot` of level `l` is `buckets[l * slots + slot]`.
    buckets: Vec<Bucket>,
    levels: Vec<Level>,
    slots: u64,
    /// `log2(slots)` when `slots` is a power of two, so slot arithmetic is shifts and masks.
    shift: Option<u32>,
    /// The clock: the largest tick `advance` has been given.
    now: u64,
}

struct Level {
    /// Ticks per bucket: `slots^level`.
    tick: u64,
    /// Ticks covered by the level's window (`tick * slots`), or `None` when that exceeds `u64`:
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

    /// A wheel whose ids the caller chooses, through [`ExternalIds::insert_at`].
    pub(crate) fn with_external_ids(slots: usize) -> Result<Self, crate::Error> {
        Ok(HierarchicalWheel { slab: Slab::with_external_ids(), ..Self::new(slots)? })
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
        match self.shift {
            Some(shift) => ((t >> (shift * level as u32)) & (self.slots - 1)) as usize,
            None => (t / self.levels[level].tick % self.slots) as usize,
        }
    }

    /// The lowest level whose window holds `deadline` (which must be after the clock), creating
    /// levels as needed.
    fn level_for(&mut self, deadline: u64) -> usize {
        debug_assert!(deadline > self.now, "deadline {deadline} is not after the clock {}", self.now);
        // No level below `floor(log_slots(deadline - now))` can hold the deadline: a level's
        // window starts at or before the clock and spans `slots^(level + 1)` ticks. So start the
        // search there, which leaves at most two levels to try; each window holds the one below.
        let mut level = match self.shift {
            Some(shift) => ((63 - (deadline - self.now).leading_zeros()) / shift) as usize,
            None => 0,
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
        let tick = match self.levels.last() {
            None => 1,
            Some(top) => top.span.expect("a level spanning all of u64 has no level above it"),
        };
        self.levels.push(Level {
            tick,
            span: tick.checked_mul(self.slots),
            occupied: Bitmap::new(self.slots as usize),
        });
        self.buckets.resize_with(self.buckets.len() + self.slots as usize, Bucket::default);
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
        let bucket = level * self.slots as usize + slot;
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
                best = Some((start, level, (cursor + k) % self.slots as usize));
            }
        }
        best
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
            let slots = self.slots as usize;
            self.levels[bucket / slots].occupied.clear(bucket % slots);
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
            let bucket = level * self.slots as usize + slot;
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
    }

    fn next_deadline(&self) -> Option<u64> {
        self.next_bucket().map(|(start, ..)| start)
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

impl<T> ExternalIds<T> for HierarchicalWheel<T> {
    fn insert_at(&mut self, id: EntryId, deadline: u64, value: T) {
        self.slab.insert_at(id, deadline, value);
        self.place(id.index());
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
                    assert_eq!(wheel.slot(level, t), (t / tick % slots as u64) as usize, "slots {slots} level {level}");
                }
            }
        }
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
