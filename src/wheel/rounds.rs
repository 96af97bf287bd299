//! The single-level rounds wheel (one ring with per-entry circle counts).
//!
//! One ring of `slots` buckets of one tick each; the cursor is the clock. An entry due at tick `d`
//! lives in bucket `d % slots` and carries `rounds`: how many times the cursor will pass that
//! bucket before tick `d`. Each visit counts it down; an entry visited at zero has come due.
//! Entries due at or before the clock wait on a separate overdue list that the next `advance`
//! drains first.
//!
//! The ring costs one bucket walk per visit even for entries rounds away (the "idle spin" the
//! hierarchical wheel avoids), so pick enough slots to cover the usual delays in one revolution.
//! A jump of a whole revolution or more sweeps every bucket once and recomputes the rounds, so
//! any jump costs O(entries), never O(ticks).

use super::bitmap::Bitmap;
use super::slab::{Bucket, EntryId, Slab};
use super::{check_slots, Expired, Wheel};

/// An entry's `aux` when it sits in the overdue list; otherwise `aux` is its rounds count.
const OVERDUE: u32 = 1 << 31;

/// The largest rounds count an entry carries.
const MAX_ROUNDS: u32 = OVERDUE - 1;

/// A single-level timing wheel with a rounds count per entry.
///
/// # Examples
/// ```
/// use tokio_timewheel::wheel::{RoundsWheel, Wheel};
///
/// // Delayed messages: 3600 one-second slots, a task 3610 s away goes round once.
/// let mut wheel = RoundsWheel::new(3600)?;
/// wheel.insert(3610, "auto-review order 42");
/// let mut fired = Vec::new();
/// wheel.advance(3609, |e| fired.push(e.value));
/// assert!(fired.is_empty());
/// wheel.advance(3610, |e| fired.push(e.value));
/// assert_eq!(fired, ["auto-review order 42"]);
/// # Ok::<(), tokio_timewheel::Error>(())
/// ```
///
/// `A` sets the alignment of the wheel's entries, as for
/// [`HierarchicalWheel`](super::HierarchicalWheel) (see [`with_alignment`](Self::with_alignment)).
pub struct RoundsWheel<T, A = ()> {
    slab: Slab<T, A>,
    /// The `slots` ring buckets, then the overdue list at index `slots`.
    buckets: Vec<Bucket>,
    /// Occupancy of the ring buckets (not of the overdue list).
    occupied: Bitmap,
    slots: u64,
    /// The cursor: the last tick visited.
    now: u64,
}

impl<T> RoundsWheel<T> {
    /// A ring of `slots` one-tick buckets.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) unless `1 <= slots <=` [`MAX_SLOTS`](super::MAX_SLOTS).
    pub fn new(slots: usize) -> Result<Self, crate::Error> {
        Self::with_alignment(slots)
    }
}

impl<T, A> RoundsWheel<T, A> {
    /// As [`new`](RoundsWheel::new), with every entry aligned as `A` is (see
    /// [`HierarchicalWheel::with_alignment`](super::HierarchicalWheel::with_alignment)).
    ///
    /// # Errors
    /// As [`new`](RoundsWheel::new).
    ///
    /// # Examples
    /// ```
    /// use tokio_timewheel::wheel::{RoundsWheel, Wheel};
    ///
    /// #[repr(align(64))]
    /// struct Line;
    ///
    /// let mut wheel = RoundsWheel::<[u64; 5], Line>::with_alignment(3600)?;
    /// wheel.insert(3610, [1; 5]);
    /// let mut fired = Vec::new();
    /// wheel.advance(3610, |e| fired.push(e.value));
    /// assert_eq!(fired, [[1; 5]]);
    /// # Ok::<(), tokio_timewheel::Error>(())
    /// ```
    pub fn with_alignment(slots: usize) -> Result<Self, crate::Error> {
        check_slots(slots, 1)?;
        Ok(RoundsWheel {
            slab: Slab::new(),
            buckets: vec![Bucket::default(); slots + 1],
            occupied: Bitmap::new(slots),
            slots: slots as u64,
            now: 0,
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

    /// The earliest deadline of the pending entries whose value `wanted` accepts, if any: the
    /// overdue list, then the ring's buckets in the order the cursor reaches them, stopping at the
    /// first bucket whose first tick is at or after the best deadline found so far (an entry's
    /// deadline is never before the first tick its bucket is visited).
    pub(crate) fn earliest_where(&self, mut wanted: impl FnMut(&T) -> bool) -> Option<u64> {
        let mut best: Option<u64> = None;
        let mut visit = |bucket: usize, best: &mut Option<u64>| {
            for (_, index) in self.buckets[bucket].entries() {
                let entry = self.slab.get(index);
                if entry.value.as_ref().is_some_and(&mut wanted) {
                    *best = Some(best.map_or(entry.deadline(), |b| b.min(entry.deadline())));
                }
            }
        };
        visit(self.overdue(), &mut best);
        let slots = self.slots as usize;
        let first = (self.now % self.slots + 1) as usize % slots;
        let mut k = 0;
        while let Some(next) = self.occupied.next_set_from((first + k) % slots) {
            k += next;
            let start = self.now.saturating_add(1 + k as u64);
            if k >= slots || best.is_some_and(|b| b <= start) {
                break;
            }
            visit((first + k) % slots, &mut best);
            k += 1;
        }
        best
    }

    fn overdue(&self) -> usize {
        self.slots as usize
    }

    /// The bucket entry `index` sits in: its deadline's, unless it was overdue when placed.
    fn bucket_of(&self, index: u32) -> usize {
        let entry = self.slab.get(index);
        if entry.aux == OVERDUE {
            self.overdue()
        } else {
            (entry.deadline() % self.slots) as usize
        }
    }

    /// Revolutions the cursor makes past `deadline`'s bucket after tick `from` and before
    /// `deadline`, saturated to [`MAX_ROUNDS`] (a saturated count is recomputed when it runs
    /// out).
    fn rounds_after(&self, from: u64, deadline: u64) -> u32 {
        ((deadline - from - 1) / self.slots).min(u64::from(MAX_ROUNDS)) as u32
    }

    /// Links entry `index` where its deadline belongs, seen from cursor `from`.
    fn place(&mut self, index: u32, from: u64) {
        let deadline = self.slab.get(index).deadline();
        if deadline <= from {
            let overdue = self.overdue();
            self.slab.push(&mut self.buckets, overdue, index);
            self.slab.get_mut(index).aux = OVERDUE;
            return;
        }
        let slot = (deadline % self.slots) as usize;
        self.slab.get_mut(index).aux = self.rounds_after(from, deadline);
        self.slab.push(&mut self.buckets, slot, index);
        self.occupied.set(slot);
    }

    /// Hands each entry of bucket `bucket` to `expire`, which says whether it expired; the
    /// others stay where they are. `expire` places no entry.
    fn visit_bucket(&mut self, bucket: usize, mut expire: impl FnMut(&mut Self, u32) -> bool) {
        let mut taken = Slab::<T>::take_bucket(&mut self.buckets, bucket);
        for position in 0..taken.slots_len() {
            if let Some(index) = taken.entry_at(position) {
                if expire(self, index) {
                    taken.vacate(position);
                }
            }
        }
        if taken.is_empty() {
            self.occupied.clear(bucket);
        }
        Slab::<T>::restore_bucket(&mut self.buckets, bucket, taken);
    }

    fn expire_into(&mut self, index: u32, expired: &mut impl FnMut(Expired<T>)) {
        let id = self.slab.id_of(index);
        let deadline = self.slab.get(index).deadline();
        expired(Expired { id, deadline, value: self.slab.free(index) });
    }
}

impl<T, A> Wheel<T> for RoundsWheel<T, A> {
    fn insert(&mut self, deadline: u64, value: T) -> EntryId {
        let id = self.slab.insert(deadline, value);
        self.place(id.index(), self.now);
        id
    }

    fn remove(&mut self, id: EntryId) -> Option<T> {
        let index = self.slab.index_of(id)?;
        let bucket = self.bucket_of(index);
        if self.slab.unlink(&mut self.buckets, bucket, index) && bucket != self.overdue() {
            self.occupied.clear(bucket);
        }
        Some(self.slab.free(index))
    }

    /// Unlinks the entry and files it again at `deadline`, in the same slab slot, so its id
    /// stays the same.
    fn reschedule(&mut self, id: EntryId, deadline: u64) -> Option<EntryId> {
        let index = self.slab.index_of(id)?;
        let bucket = self.bucket_of(index);
        if self.slab.unlink(&mut self.buckets, bucket, index) && bucket != self.overdue() {
            self.occupied.clear(bucket);
        }
        self.slab.get_mut(index).set_deadline(deadline);
        self.place(index, self.now);
        Some(id)
    }

    fn advance(&mut self, now: u64, mut expired: impl FnMut(Expired<T>)) {
        let overdue = self.overdue();
        let mut taken = Slab::<T>::take_bucket(&mut self.buckets, overdue);
        for (_, index) in taken.entries() {
            self.expire_into(index, &mut expired);
        }
        taken.clear();
        Slab::<T>::restore_bucket(&mut self.buckets, overdue, taken);
        if now <= self.now {
            return;
        }
        let steps = now - self.now;
        if steps >= self.slots {
            // A revolution or more: every bucket would be visited, so sweep each once.
            for bucket in 0..self.slots as usize {
                self.visit_bucket(bucket, |wheel, i| {
                    if wheel.slab.get(i).deadline() <= now {
                        wheel.expire_into(i, &mut expired);
                        return true;
                    }
                    let rounds = wheel.rounds_after(now, wheel.slab.get(i).deadline());
                    wheel.slab.get_mut(i).aux = rounds;
                    false
                });
            }
        } else {
            // Visit the occupied buckets of ticks now+1 ..= now+steps, in tick order.
            let first = ((self.now + 1) % self.slots) as usize;
            let mut k = 0;
            while let Some(found) = self.occupied.next_set_from((first + k) % self.slots as usize) {
                k += found;
                if k as u64 >= steps {
                    break;
                }
                let tick = self.now + 1 + k as u64;
                self.visit_bucket((first + k) % self.slots as usize, |wheel, i| {
                    let (rounds, deadline) = (wheel.slab.get(i).aux, wheel.slab.get(i).deadline());
                    if rounds > 0 {
                        wheel.slab.get_mut(i).aux -= 1;
                        return false;
                    }
                    if deadline <= tick {
                        debug_assert_eq!(deadline, tick, "entry expired off its own tick");
                        wheel.expire_into(i, &mut expired);
                        return true;
                    }
                    // The count was saturated: work out the rest from here.
                    wheel.slab.get_mut(i).aux = wheel.rounds_after(tick, deadline);
                    false
                });
                k += 1;
            }
        }
        self.now = now;
    }

    fn next_deadline(&self) -> Option<u64> {
        if !self.buckets[self.overdue()].is_empty() {
            return Some(self.now);
        }
        let first = ((self.now % self.slots + 1) % self.slots) as usize;
        // A bucket is visited next at the first tick after the cursor that maps onto it.
        self.occupied.next_set_from(first).map(|k| self.now.saturating_add(1 + k as u64))
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

impl<T, A> std::fmt::Debug for RoundsWheel<T, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundsWheel")
            .field("slots", &self.slots)
            .field("len", &self.slab.len())
            .field("now", &self.now)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_room_is_used_without_growing_and_too_much_is_an_error() {
        let mut wheel = RoundsWheel::new(64).unwrap();
        wheel.try_reserve(1_000).unwrap();
        let room = wheel.slab.capacity();
        for i in 0..1_000 {
            wheel.insert(10 + i, i);
        }
        assert_eq!(wheel.slab.capacity(), room, "no entry was moved by growth");
        assert!(wheel.try_reserve(usize::MAX).is_err());
    }

    #[test]
    fn rounds_count_down_once_per_revolution() {
        let mut wheel = RoundsWheel::new(4).unwrap();
        let id = wheel.insert(10, ());
        let index = wheel.slab.index_of(id).unwrap();
        assert_eq!(wheel.slab.get(index).aux, 2, "bucket 2 is passed at ticks 2 and 6 before 10");
        wheel.advance(2, |_| panic!("not due"));
        assert_eq!(wheel.slab.get(index).aux, 1);
        wheel.advance(9, |_| panic!("not due"));
        assert_eq!(wheel.slab.get(index).aux, 0);
        let mut fired = 0;
        wheel.advance(10, |e| {
            assert_eq!(e.deadline, 10);
            fired += 1;
        });
        assert_eq!(fired, 1);
    }

    #[test]
    fn a_saturated_count_is_recomputed_not_fired_early() {
        let mut wheel = RoundsWheel::new(4).unwrap();
        let far = 8 * u32::MAX as u64 + 1; // bucket 1, about 2^33 rounds away
        let id = wheel.insert(far, ());
        let index = wheel.slab.index_of(id).unwrap();
        assert_eq!(wheel.slab.get(index).aux, MAX_ROUNDS, "saturated");
        // Pretend the cursor has counted the saturated rounds down to zero.
        wheel.slab.get_mut(index).aux = 0;
        wheel.advance(1, |e| panic!("fired {} at tick 1", e.deadline));
        assert_eq!(wheel.slab.get(index).aux, MAX_ROUNDS, "recomputed, and still saturated");
        let mut fired = Vec::new();
        wheel.advance(far, |e| fired.push(e.deadline));
        assert_eq!(fired, [far]);
    }
}
