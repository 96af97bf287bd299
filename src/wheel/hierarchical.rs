//! The hierarchical (Kafka-style) timing wheel.
//!
//! Level `n` has `2 * slots` buckets of `slots^n` ticks each, so it reaches `2 * slots^(n+1)`
//! ticks ahead: twice the tick of the level above (see "Draining" below). Levels are created on
//! the first deadline that overflows the top one, up to the level that spans all of `u64`.
//!
//! Each level looks at a window of its buckets in a row, starting at the bucket that holds the
//! clock (the level's cursor). An entry goes to the lowest level whose window holds its
//! deadline. When `advance` reaches an upper bucket's start, it moves the clock there and
//! re-inserts ("demotes") the bucket's entries, each landing on a strictly lower level, until
//! they reach level 0 and expire on their exact tick. Buckets are visited in order of their start
//! tick, found through per-level occupancy bitmaps, so empty ticks cost nothing: that is the
//! "precise advance" Kafka gets from its DelayQueue of buckets, without the heap.
//!
//! # Draining a bucket before it is due
//! Demoting a bucket moves every entry in it, and a busy bucket can hold tens of thousands (a
//! million timers due over two seconds put 32,000 in each 64-tick level-1 bucket of a 64-slot
//! wheel; spread over twenty seconds, 200,000 in each 4,096-tick level-2 bucket): moved all at
//! once, on the tick the bucket starts, they hold up the entries due on that tick and the next
//! few. So every level is twice as wide as the tick of the level above: once the clock is within
//! one bucket (`slots^n` ticks) of the start of a level-`n` bucket, the window of level `n - 1`
//! holds the whole bucket, and the wheel moves it down in up to `slots` shares, one each time
//! the clock passes a multiple of level `n - 1`'s tick (every tick for level 1, every `slots`
//! ticks for level 2, ...). A share is `len / shares left`, taken from the end of the bucket in
//! no particular order, since every entry fits lower down; those entries may in turn be drained
//! on from the level they land in. An advance that passes several multiples at once moves that
//! many shares, so however the wheel is driven the bucket goes down evenly. A bucket of at most
//! [`DRAIN_MIN`] entries, including what is left of a drained one, is demoted on its start tick
//! as before.
//! `next_deadline` reports the ticks a drain needs, so a driver that sleeps between deadlines
//! wakes for them.
//!
//! Invariant (checked after every operation by `holds_its_invariant` below): every occupied bucket
//! starts after the clock, except level 0's cursor bucket, which holds only entries already due.
//! Every entry sits in its level's bucket for its deadline, inside that level's window.

use super::bitmap::Bitmap;
use super::slab::{Bucket, EntryId, Slab};
use super::{check_slots, Expired, Wheel};

/// A bucket above level 0 holding more entries than this is drained into the levels below over
/// the ticks before it is due, rather than demoted all at once (see the module docs). Moving
/// this many at once takes some tens of microseconds.
pub(crate) const DRAIN_MIN: usize = 256;

/// A hierarchical timing wheel: O(1) insert and remove, advance by due bucket.
///
/// See the [module docs](crate::wheel) for an example.
///
/// `A` sets the alignment of the wheel's entries (each entry is a few words of bookkeeping and
/// the value): the default `()` packs them, which suits small values; for values of about 40
/// bytes, an entry is 64 bytes, and a 64-byte aligned `A` (see
/// [`with_alignment`](Self::with_alignment)) keeps each in one cache line, which saves a cache
/// miss per entry touched when the wheel is larger than the cache.
pub struct HierarchicalWheel<T, A = ()> {
    slab: Slab<T, A>,
    /// The buckets' entries: bucket `slot` of level `l` is `buckets[levels[l].first + slot]`.
    buckets: Vec<Bucket>,
    levels: Vec<Level>,
    /// Half the buckets of each level.
    slots: u64,
    /// `log2(slots)` when `slots` is a power of two, so slot arithmetic is shifts and masks.
    shift: Option<u32>,
    /// The clock: the largest tick `advance` has been given.
    now: u64,
    /// The earliest tick at which a bucket that inserts since the last `advance` made busy enough
    /// to drain needs its first share (see [`take_armed_drain`](Self::take_armed_drain)).
    armed_drain: Option<u64>,
}

struct Level {
    /// Ticks per bucket: `slots^level`.
    tick: u64,
    /// Buckets in the level: `2 * slots`.
    len: u64,
    /// The index of the level's first bucket in `buckets`.
    first: usize,
    /// Ticks covered by the level's window (`tick * len`), or `None` when that exceeds `u64`:
    /// the level then holds every deadline that reaches it.
    span: Option<u64>,
    occupied: Bitmap,
}

impl<T> HierarchicalWheel<T> {
    /// A wheel whose levels each have `2 * slots` buckets, each level's tick `slots` times the
    /// tick of the level below.
    ///
    /// Powers of two are fastest (slot arithmetic becomes shifts); 64 is a good default.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) unless `2 <= slots <=` [`MAX_SLOTS`](super::MAX_SLOTS).
    pub fn new(slots: usize) -> Result<Self, crate::Error> {
        Self::with_alignment(slots)
    }
}

impl<T, A> HierarchicalWheel<T, A> {
    /// As [`new`](HierarchicalWheel::new), with every entry aligned as `A` is.
    ///
    /// # Errors
    /// As [`new`](HierarchicalWheel::new).
    ///
    /// # Examples
    /// ```
    /// use tokio_timewheel::wheel::{HierarchicalWheel, Wheel};
    ///
    /// /// A cache line.
    /// #[repr(align(64))]
    /// struct Line;
    ///
    /// // Each entry starts a cache line.
    /// let mut wheel = HierarchicalWheel::<[u64; 5], Line>::with_alignment(64)?;
    /// wheel.insert(10, [7; 5]);
    /// let mut fired = Vec::new();
    /// wheel.advance(10, |e| fired.push(e.value));
    /// assert_eq!(fired, [[7; 5]]);
    /// # Ok::<(), tokio_timewheel::Error>(())
    /// ```
    pub fn with_alignment(slots: usize) -> Result<Self, crate::Error> {
        check_slots(slots, 2)?;
        Ok(HierarchicalWheel {
            slab: Slab::new(),
            buckets: Vec::new(),
            levels: Vec::new(),
            slots: slots as u64,
            shift: slots.is_power_of_two().then(|| slots.trailing_zeros()),
            now: 0,
            armed_drain: None,
        })
    }

    /// Makes room for `additional` more entries than the wheel holds, so that inserting them
    /// allocates nothing but the odd bucket's growth. A burst of inserts then pays no copying of
    /// the entries as they grow.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) if the room cannot be allocated, or would take
    /// the wheel past the 2^31 - 1 entries it can hold.
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), crate::Error> {
        self.slab.try_reserve(additional)
    }

    /// The pending entry in slab slot `index` (an [`EntryId::index`]), if any: its id and value.
    /// For a driver that keeps its own index of entries by slot.
    pub(crate) fn at(&self, index: u32) -> Option<(EntryId, &T)> {
        self.slab.live(index)
    }

    /// The value of the pending entry in slab slot `index`, if any.
    pub(crate) fn at_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slab.live_mut(index)
    }

    /// The `slots` the wheel was made with.
    pub fn slots(&self) -> usize {
        self.slots as usize
    }

    /// Every pending entry's deadline and value, in no set order, consuming the wheel: for a
    /// driver that moves its entries into a wheel of another size.
    pub(crate) fn into_entries(self) -> impl Iterator<Item = (u64, T)> {
        self.slab.into_live()
    }

    /// The entries the wheel has room for before its slab grows.
    pub(crate) fn room(&self) -> usize {
        self.slab.capacity()
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
        let len = 2 * self.slots as usize;
        (bucket / len, bucket % len)
    }

    /// The lowest level whose window holds `deadline` (which must be after the clock), creating
    /// levels as needed.
    fn level_for(&mut self, deadline: u64) -> usize {
        debug_assert!(deadline > self.now, "deadline {deadline} is not after the clock {}", self.now);
        // Level 0's window is the `2 * slots` ticks from the clock. Above it, no level below
        // `floor(log_slots((deadline - now) / 2))` can hold the deadline: a level's window starts
        // at or before the clock and spans `2 * slots^(level + 1)` ticks. So start the search
        // there, which leaves at most two levels to try; each window holds the one below.
        let mut level = match self.shift {
            Some(shift) if deadline - self.now >= 2 * self.slots => {
                ((63 - ((deadline - self.now) / 2).leading_zeros()) / shift) as usize
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
        let len = 2 * self.slots;
        let tick = match self.levels.last() {
            None => 1,
            Some(top) => {
                assert!(top.span.is_some(), "a level spanning all of u64 has no level above it");
                // Below a level spanning all of u64, `tick * slots` fits.
                top.tick * self.slots
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
        if level > 0 && self.buckets[bucket].len() == DRAIN_MIN + 1 {
            let at = self.drain_at(level, self.bucket_start(level, deadline));
            self.armed_drain = Some(self.armed_drain.map_or(at, |t| t.min(at)));
        }
    }

    /// The earliest deadline of the pending entries whose value `wanted` accepts, if any.
    ///
    /// Visits each level's buckets in the order they come due and stops at the first that
    /// starts at or after the best deadline found so far: every entry is filed no later than its
    /// deadline (an entry pushed back stays in a bucket that starts before it). So it reads the
    /// entries filed before that deadline, not the whole wheel.
    pub(crate) fn earliest_where(&self, mut wanted: impl FnMut(&T) -> bool) -> Option<u64> {
        let mut best: Option<u64> = None;
        for (level, l) in self.levels.iter().enumerate() {
            let len = l.len as usize;
            let cursor = self.slot(level, self.now);
            let base = self.bucket_start(level, self.now);
            // `k`: the distance from the cursor of the next bucket to look at.
            let mut k = 0;
            while let Some(next) = l.occupied.next_set_from((cursor + k) % len) {
                k += next;
                let start = base.saturating_add((k as u64).saturating_mul(l.tick));
                if k >= len || best.is_some_and(|b| b <= start) {
                    break;
                }
                for (_, index) in self.buckets[l.first + (cursor + k) % len].entries() {
                    let entry = self.slab.get(index);
                    debug_assert!(
                        k == 0 || entry.deadline() >= start,
                        "entry {index} due at {} is filed in a bucket of level {level} starting at {start}",
                        entry.deadline()
                    );
                    if entry.value.as_ref().is_some_and(&mut wanted) {
                        best = Some(best.map_or(entry.deadline(), |b| b.min(entry.deadline())));
                    }
                }
                k += 1;
            }
        }
        best
    }

    /// Takes the earliest tick at which a bucket that inserts made busy enough to drain (since
    /// the last `advance`, or the last call) needs its first share, if any. A driver that
    /// publishes when it will next advance, and lets other threads insert meanwhile, checks this
    /// after each insert as it checks the new deadline: the drain may be due long before the
    /// entry itself.
    pub(crate) fn take_armed_drain(&mut self) -> Option<u64> {
        self.armed_drain.take()
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

    /// The bucket of `level` (at least 1) to drain next, if any (see the module docs): the first
    /// occupied one, if it holds more than [`DRAIN_MIN`] entries. Returns `(start, bucket)`; the
    /// drain begins once the clock reaches `start - tick`, where `tick` is the level's.
    fn to_drain(&self, level: usize) -> Option<(u64, usize)> {
        let l = &self.levels[level];
        let cursor = self.slot(level, self.now);
        // Never the cursor's own bucket, which starts at or before the clock and so is empty.
        let k = l.occupied.next_set_from(cursor)?;
        let start = self.bucket_start(level, self.now).saturating_add(k as u64 * l.tick);
        let bucket = l.first + (cursor + k) % l.len as usize;
        (self.buckets[bucket].len() > DRAIN_MIN).then_some((start, bucket))
    }

    /// The drain of a bucket of `level` starting at `start`: the tick its lead starts at, and
    /// its step (the tick of the level below), each multiple of which from the lead on moves a
    /// share.
    fn lead_and_step(&self, level: usize, start: u64) -> (u64, u64) {
        (start - self.levels[level].tick, self.levels[level - 1].tick)
    }

    /// The tick at which the drain of a bucket of `level` starting at `start` next moves a share:
    /// the start of its lead, or the next multiple of its step after the clock.
    fn drain_at(&self, level: usize, start: u64) -> u64 {
        let (lead, step) = self.lead_and_step(level, start);
        lead.max((self.now / step + 1) * step)
    }

    /// Moves the shares of each bucket being drained down the levels that are due for a clock
    /// that has moved from `from` to `self.now`: one per multiple of the drain's step, from its
    /// lead on, that the clock has passed.
    fn drain(&mut self, from: u64) {
        // From the top, so that what a level passes down is counted in the share of the next.
        for level in (1..self.levels.len()).rev() {
            let Some((start, bucket)) = self.to_drain(level) else {
                continue;
            };
            let (lead, step) = self.lead_and_step(level, start);
            if self.now < lead {
                continue;
            }
            // The multiples of the step in `from + 1..=now` from the lead (itself one) on.
            let passed = (self.now / step + 1) - (from / step + 1).max(lead / step);
            if passed == 0 {
                continue;
            }
            // Every entry of the bucket is due in `start..start + tick`, inside the window of
            // the level below, and after the clock: each lands lower down, not due.
            debug_assert!(start > self.now, "level-{level} bucket at {start} not after the clock {}", self.now);
            // `shares_left` still to come after this advance, on top of the `passed` due now (at
            // most `slots` of them each: the clock is before `start`).
            let shares_left = (start - self.now).div_ceil(step) - 1;
            let len = self.buckets[bucket].len() as u64;
            let share = (len * passed).div_ceil(passed + shares_left) as usize;
            for _ in 0..share {
                let index = self.buckets[bucket].pop().expect("the bucket holds `share` entries");
                self.place(index);
                // Lower, unless `reschedule` pushed the entry back past this bucket.
                debug_assert!(
                    self.level_and_slot(self.slab.get(index).aux as usize).0 < level
                        || self.slab.get(index).deadline() >= start + self.levels[level].tick,
                    "drained lower"
                );
            }
            if self.buckets[bucket].is_empty() {
                let (level, slot) = self.level_and_slot(bucket);
                self.levels[level].occupied.clear(slot);
                self.buckets[bucket].clear();
            }
        }
    }
}

impl<T, A> Wheel<T> for HierarchicalWheel<T, A> {
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

    /// A later deadline is written into the entry, which stays in its bucket (lazily filed: see
    /// [`Wheel::reschedule`]); an earlier one unlinks the entry and files it again. Either way
    /// the entry keeps its slab slot and its id.
    fn reschedule(&mut self, id: EntryId, deadline: u64) -> Option<EntryId> {
        let index = self.slab.index_of(id)?;
        let entry = self.slab.get_mut(index);
        if deadline >= entry.deadline() {
            // Its bucket starts at or before the old deadline, so it comes due no later than
            // the new one, and filing it then puts it where the new deadline belongs.
            entry.set_deadline(deadline);
            return Some(id);
        }
        let bucket = entry.aux as usize;
        if self.slab.unlink(&mut self.buckets, bucket, index) {
            let (level, slot) = self.level_and_slot(bucket);
            self.levels[level].occupied.clear(slot);
        }
        self.slab.get_mut(index).set_deadline(deadline);
        self.place(index);
        Some(id)
    }

    fn advance(&mut self, now: u64, mut expired: impl FnMut(Expired<T>)) {
        let from = self.now;
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
            // Each entry expires or lands elsewhere, never back in this bucket: in a lower level,
            // or (pushed back past this bucket by `reschedule`) wherever its deadline belongs.
            for (_, index) in taken.entries() {
                let deadline = self.slab.get(index).deadline();
                if deadline <= target {
                    let id = self.slab.id_of(index);
                    expired(Expired { id, deadline, value: self.slab.free(index) });
                } else {
                    self.place(index);
                }
            }
            taken.clear();
            Slab::<T>::restore_bucket(&mut self.buckets, bucket, taken);
        }
        self.now = target;
        self.drain(from);
        // The caller asks `next_deadline` after an advance, which covers every drain.
        self.armed_drain = None;
    }

    fn next_deadline(&self) -> Option<u64> {
        let due = self.next_bucket().map(|(start, ..)| start);
        let drains = (1..self.levels.len()).filter_map(|level| {
            let (start, _) = self.to_drain(level)?;
            Some(self.drain_at(level, start))
        });
        due.into_iter().chain(drains).min()
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

impl<T, A> std::fmt::Debug for HierarchicalWheel<T, A> {
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
    use proptest::prelude::*;

    use super::*;

    impl<T> HierarchicalWheel<T> {
        /// Panics unless the module docs' invariant holds: each bucket's bit says whether it is
        /// occupied, every entry is in the bucket its deadline maps to, in its level's window and
        /// (outside level 0's cursor bucket) after the clock, and the buckets hold every entry.
        fn check_invariant(&self) {
            let mut held = 0;
            for (level, l) in self.levels.iter().enumerate() {
                for slot in 0..l.len as usize {
                    let bucket = &self.buckets[l.first + slot];
                    let bit = l.occupied.next_set_from(slot) == Some(0);
                    assert_eq!(
                        bit,
                        !bucket.is_empty(),
                        "level {level} slot {slot}: bit against {} entries",
                        bucket.len()
                    );
                    held += bucket.len();
                    for (_, index) in bucket.entries() {
                        let entry = self.slab.get(index);
                        let deadline = entry.deadline();
                        assert_eq!(entry.aux as usize, l.first + slot, "entry {index} knows its bucket");
                        assert_eq!(self.slot(level, deadline), slot, "level {level}: {deadline} in slot {slot}");
                        if level == 0 && slot == self.slot(0, self.now) && deadline <= self.now {
                            continue;
                        }
                        let start = self.bucket_start(level, deadline);
                        assert!(
                            start > self.now,
                            "level {level}: bucket of {deadline} starts by the clock {}",
                            self.now
                        );
                        if let Some(span) = l.span {
                            let window = self.bucket_start(level, self.now);
                            assert!(
                                deadline - window < span,
                                "level {level}: {deadline} past the window from {window}"
                            );
                        }
                    }
                }
            }
            assert_eq!(held, self.slab.len(), "the buckets hold every entry");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// `count` entries due `delay + i % spread` ticks from the clock.
        Burst {
            delay: u64,
            spread: u64,
            count: usize,
        },
        Remove {
            n: usize,
        },
        Advance {
            step: u64,
        },
        /// Advance to `next_deadline`, as a sleeping driver does.
        Sleep,
    }

    fn op() -> impl Strategy<Value = Op> {
        let delay = prop_oneof![0..200u64, 0..20_000u64, 0..5_000_000u64, any::<u64>()];
        prop_oneof![
            3 => (delay, 1..5_000u64, prop_oneof![1..20usize, 250..700usize])
                .prop_map(|(delay, spread, count)| Op::Burst { delay, spread, count }),
            2 => any::<usize>().prop_map(|n| Op::Remove { n }),
            2 => prop_oneof![0..3u64, 0..100_000u64].prop_map(|step| Op::Advance { step }),
            4 => Just(Op::Sleep),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Bursts at every level, drained and demoted by a driver that sleeps between
        /// `next_deadline`s or jumps ahead: the invariant holds after every operation, nothing
        /// fires early, and every wake-up at `next_deadline` fires or moves something.
        #[test]
        fn holds_its_invariant(slots in prop_oneof![2usize..10, Just(16), Just(64)], ops in prop::collection::vec(op(), 1..60)) {
            let mut wheel = HierarchicalWheel::new(slots).unwrap();
            let mut ids = Vec::new();
            for op in ops {
                match op {
                    Op::Burst { delay, spread, count } => {
                        for i in 0..count as u64 {
                            ids.push(wheel.insert(wheel.now().saturating_add(delay.saturating_add(i % spread)), ()));
                        }
                    }
                    Op::Remove { n } => {
                        if !ids.is_empty() {
                            wheel.remove(ids[n % ids.len()]);
                        }
                    }
                    Op::Advance { step } => {
                        let now = wheel.now().saturating_add(step);
                        wheel.advance(now, |e| assert!(e.deadline <= now, "{} fired at {now}", e.deadline));
                    }
                    Op::Sleep => {
                        let Some(next) = wheel.next_deadline() else { continue };
                        let before: Vec<usize> = wheel.buckets.iter().map(|b| b.len()).collect();
                        let mut fired = 0;
                        wheel.advance(next, |e| {
                            assert!(e.deadline <= next, "{} fired at {next}", e.deadline);
                            fired += 1;
                        });
                        let moved = before.iter().zip(&wheel.buckets).any(|(&n, b)| n != b.len());
                        prop_assert!(fired > 0 || moved, "the wake-up at {next} did nothing");
                    }
                }
                wheel.check_invariant();
            }
        }
    }

    /// A 64-slot wheel with `count` entries due `start + i % spread` (value `i`).
    fn filled(count: u64, start: u64, spread: u64) -> HierarchicalWheel<u64> {
        let mut wheel = HierarchicalWheel::new(64).unwrap();
        for i in 0..count {
            wheel.insert(start + i % spread, i);
        }
        wheel
    }

    fn drain<T>(wheel: &mut HierarchicalWheel<T>, now: u64) -> Vec<(u64, T)> {
        let mut out = Vec::new();
        wheel.advance(now, |e| out.push((e.deadline, e.value)));
        out
    }

    /// The classic worked example of a Kafka-style wheel: 1 ms x 20 slots, clock at 2 ms. A 350 ms task climbs to level 1
    /// (20 ms buckets, the one for 340..360). The seed's 450 ms task goes to level 2 in Kafka's
    /// wheel, but each level here is twice as wide, so it stays in level 1; an 850 ms task takes
    /// its place in level 2 (400 ms buckets, the one for 800..1200). At 800 ms that one is
    /// demoted with 50 ms left into level 1's 840..860 bucket, and both come back down to fire on
    /// their exact tick.
    #[test]
    fn worked_example_of_twenty_slots() {
        let mut wheel = HierarchicalWheel::new(20).unwrap();
        assert!(drain(&mut wheel, 2).is_empty());
        wheel.insert(352, "350 ms");
        assert_eq!(wheel.levels(), 2, "level 1 reaches 800 ticks ahead");
        wheel.insert(852, "850 ms");
        assert_eq!(wheel.levels(), 3);
        assert_eq!(wheel.next_deadline(), Some(340), "level 1's 340..360 bucket is due first");
        assert!(drain(&mut wheel, 340).is_empty(), "demoted at 340, not yet due");
        assert_eq!(wheel.next_deadline(), Some(352));
        assert_eq!(drain(&mut wheel, 352), [(352, "350 ms")]);
        assert_eq!(wheel.next_deadline(), Some(800), "level 2's 800..1200 bucket");
        assert!(drain(&mut wheel, 800).is_empty());
        assert_eq!(wheel.next_deadline(), Some(840), "demoted into level 1's 840..860 bucket");
        assert!(drain(&mut wheel, 851).is_empty());
        assert_eq!(drain(&mut wheel, 10_000), [(852, "850 ms")]);
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
                    let len = 2 * slots as u64;
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
        let mut wheel = filled(32_000, 128, 64);
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

    /// A load spread over seconds ahead: 64,000 entries in one 4,096-tick level-2 bucket. They go
    /// down in 64 shares, one every 64 ticks of the 4,096 before the bucket starts, then on to
    /// level 0 as each level-1 bucket comes within reach; no advance moves more than a few
    /// thousand, where demoting the bucket whole would move all 64,000 on tick 8,192.
    #[test]
    fn a_full_level_two_bucket_is_drained_in_shares_before_it() {
        let mut wheel = filled(64_000, 8192, 4096);
        let level2 = wheel.levels[2].first + 2;
        assert_eq!(wheel.buckets[level2].len(), 64_000, "all in level 2's bucket for 8192..12288");
        assert_eq!(wheel.next_deadline(), Some(4096), "the drain starts one bucket ahead");
        let sizes = |w: &HierarchicalWheel<u64>| w.buckets.iter().map(|b| b.len()).collect::<Vec<_>>();
        let mut fired = 0;
        let mut wake_ups_in_lead = 0;
        while let Some(next) = wheel.next_deadline() {
            if next < 8192 {
                wake_ups_in_lead += 1;
            }
            let before = sizes(&wheel);
            let left = wheel.len();
            let out = drain(&mut wheel, next);
            assert!(out.iter().all(|&(deadline, _)| deadline == next), "each on its own tick");
            fired += out.len();
            // Entries that moved left one bucket and joined another; fired ones only left.
            let changed: usize = before.iter().zip(sizes(&wheel)).map(|(a, b)| a.abs_diff(b)).sum();
            let moved = (changed - (left - wheel.len())) / 2;
            assert!(moved <= 2_000, "{moved} entries moved by the advance to {next}");
        }
        assert_eq!(fired, 64_000);
        assert!(wake_ups_in_lead >= 64, "a share every 64 ticks of the lead, {wake_ups_in_lead} wake-ups");
        assert!(wake_ups_in_lead <= 64 + 4096, "{wake_ups_in_lead} wake-ups before the bucket's start");
    }

    #[test]
    fn reserved_room_is_used_without_growing_and_too_much_is_an_error() {
        let mut wheel = HierarchicalWheel::new(64).unwrap();
        wheel.try_reserve(1_000).unwrap();
        let room = wheel.slab.capacity();
        assert!(room >= 1_000);
        for i in 0..1_000 {
            wheel.insert(10 + i, i);
        }
        assert_eq!(wheel.slab.capacity(), room, "no entry was moved by growth");
        assert!(wheel.try_reserve(usize::MAX).is_err());
        assert!(wheel.try_reserve(crate::wheel::MAX_ENTRIES).is_err(), "past what a wheel holds");
    }

    /// A driver that advances eight ticks at a time through a level-1 bucket's lead (as a
    /// service held up by a busy runtime may) drains eight shares each time, not one, and the
    /// bucket is empty before its start, so nothing is left to demote whole.
    #[test]
    fn an_advance_over_several_steps_drains_as_many_shares() {
        let mut wheel = filled(32_000, 128, 64);
        let level1 = wheel.levels[1].first + 2;
        let mut moved = Vec::new();
        for now in [64, 72, 80, 88, 96, 104, 112, 120, 127] {
            let before = wheel.buckets[level1].len();
            assert!(drain(&mut wheel, now).is_empty());
            moved.push(before - wheel.buckets[level1].len());
        }
        assert_eq!(moved, [500, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000, 4_000, 3_500]);
        assert!(wheel.buckets[level1].is_empty(), "drained before its start");
    }

    #[test]
    fn a_small_level_one_bucket_is_demoted_on_its_start_tick() {
        let mut wheel = filled(DRAIN_MIN as u64, 128, 64);
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
