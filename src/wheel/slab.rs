//! A generational slab whose entries know their place in their bucket.
//!
//! Both wheels keep their entries here. An entry is addressed by an [`EntryId`]: its index in the
//! slab plus the generation the slot had when the entry was inserted. Removing an entry bumps the
//! slot's generation, so an old id can never reach the entry that reuses the slot. A slot whose
//! generation would wrap is retired instead of reused, so ids never alias, even in theory.
//!
//! # Buckets are arrays, not linked lists
//! A bucket is a `Vec` of entry indices, and each entry records its position there (the wheel
//! knows the bucket: it keeps it in the entry's `aux` word, or works it out). Walking a bucket when it comes due is why: a linked list hands over the next entry's
//! index only once the current entry has been read, so a walk over entries spread through a
//! large slab waits for one cache miss after another (about 200 ns per entry at a million
//! timers); an array names every entry up front, and the processor fetches many at once.
//!
//! Removing an entry leaves a hole at its position: one write, where a doubly linked list
//! writes both neighbours. The holes of a bucket form a free list threaded through the holes
//! themselves, and new entries fill them first, so a bucket never holds more slots than the most
//! entries it has held at once (like the slab itself), and nothing is ever moved: an entry's
//! position stays valid until it leaves. Walks skip the holes; each was made by a removal, which
//! pays for stepping over it. An emptied bucket forgets its holes. The wheel owns the buckets and
//! passes them in by `&mut`, which keeps the borrows simple.

/// "No entry": the end of the free list.
pub(crate) const NIL: u32 = u32::MAX;

/// Marks a bucket slot as a hole; the low bits are the position of the next hole.
const HOLE: u32 = 1 << 31;

/// "No hole": the end of a bucket's list of holes.
const NO_HOLE: u32 = HOLE - 1;

/// The largest number of slots the slab hands out; indices (and so bucket positions) stay clear
/// of the `HOLE` bit and of `NO_HOLE`.
pub(crate) const MAX_ENTRIES: usize = NO_HOLE as usize;

/// Spare room (in entries) a bucket keeps once it is empty, so a bucket that fills and empties
/// every revolution does not reallocate each time, while one that held a burst gives it back.
const KEEP_SPARE: usize = 1024;

/// One bucket: its entries' indices, with holes where entries left.
#[derive(Clone)]
pub(crate) struct Bucket {
    slots: Vec<u32>,
    /// Entries in `slots` that are not holes.
    live: usize,
    /// The most recent hole, whose slot names the next one; `NO_HOLE` if there is none.
    first_hole: u32,
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket { slots: Vec::new(), live: 0, first_hole: NO_HOLE }
    }
}

impl Bucket {
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The number of entries (holes not counted).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Takes out the entry in the last occupied slot, dropping the holes after it, for a bucket
    /// drained from its end. Any holes left before it are forgotten (walks still skip them), so
    /// inserts that follow append rather than follow a list that may point past the end.
    pub fn pop(&mut self) -> Option<u32> {
        while let Some(index) = self.slots.pop() {
            if index & HOLE == 0 {
                self.live -= 1;
                return Some(index);
            }
            self.first_hole = NO_HOLE;
        }
        None
    }

    /// The entries, with their positions.
    pub fn entries(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        (0..self.slots.len()).filter_map(|position| Some((position, self.entry_at(position)?)))
    }

    /// The number of slots, entries and holes.
    pub fn slots_len(&self) -> usize {
        self.slots.len()
    }

    /// The entry at `position`, unless it is a hole.
    pub fn entry_at(&self, position: usize) -> Option<u32> {
        Some(self.slots[position]).filter(|index| index & HOLE == 0)
    }

    /// Adds entry `index`, in the latest hole if there is one, and returns its position.
    fn insert(&mut self, index: u32) -> usize {
        self.live += 1;
        if self.first_hole == NO_HOLE {
            self.slots.push(index);
            return self.slots.len() - 1;
        }
        let position = self.first_hole as usize;
        self.first_hole = self.slots[position] & !HOLE;
        self.slots[position] = index;
        position
    }

    /// Turns the entry at `position` into a hole (its entry has left).
    pub fn vacate(&mut self, position: usize) {
        debug_assert_eq!(self.slots[position] & HOLE, 0, "position {position} is a hole already");
        self.slots[position] = HOLE | self.first_hole;
        self.first_hole = position as u32;
        self.live -= 1;
    }

    /// Forgets every entry and hole, giving back the room if it is large.
    pub fn clear(&mut self) {
        self.live = 0;
        self.first_hole = NO_HOLE;
        self.slots.clear();
        if self.slots.capacity() > KEEP_SPARE {
            self.slots = Vec::new();
        }
    }
}

/// Identifies one inserted entry. Stale ids (of entries since removed or expired) are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    index: u32,
    generation: u32,
}

impl EntryId {
    pub(crate) const fn index(self) -> u32 {
        self.index
    }

    /// The id as one `u64` (generation in the high half), for storing in atomics or maps.
    pub const fn to_u64(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }

    /// The inverse of [`EntryId::to_u64`].
    pub const fn from_u64(raw: u64) -> Self {
        EntryId { index: raw as u32, generation: (raw >> 32) as u32 }
    }
}

/// An entry is aligned at least as `A` is (see [`HierarchicalWheel`](super::HierarchicalWheel)'s
/// docs): `()` packs entries; a 64-byte aligned `A` keeps an entry of up to 64 bytes in one
/// cache line, where a slab allocation that starts 16 bytes into a line would split every entry
/// across two.
pub(crate) struct Entry<T, A = ()> {
    /// Takes no room; gives the entry `A`'s alignment.
    _align: [A; 0],
    /// The tick at which the entry is due, as two halves so that the entry is aligned to 4
    /// bytes only: with a small value that saves the 4 bytes of padding a `u64` would need.
    deadline: [u32; 2],
    /// The entry's position in its bucket; for a vacant slot, the next slot of the free list.
    link: u32,
    /// The wheel's own word about the entry: the hierarchical wheel keeps its bucket here, the
    /// rounds wheel its circle count.
    pub aux: u32,
    /// Bumped each time the slot is vacated.
    pub generation: u32,
    /// `Some` while the slot is occupied.
    pub value: Option<T>,
}

impl<T, A> Entry<T, A> {
    fn new(deadline: u64, generation: u32, value: Option<T>) -> Self {
        Entry { _align: [], deadline: [deadline as u32, (deadline >> 32) as u32], link: NIL, aux: 0, generation, value }
    }

    /// The tick at which the entry is due.
    pub fn deadline(&self) -> u64 {
        u64::from(self.deadline[1]) << 32 | u64::from(self.deadline[0])
    }

    /// Sets the tick at which the entry is due; the wheel files it accordingly.
    pub fn set_deadline(&mut self, deadline: u64) {
        self.deadline = [deadline as u32, (deadline >> 32) as u32];
    }
}

pub(crate) struct Slab<T, A = ()> {
    entries: Vec<Entry<T, A>>,
    /// Head of the free list of vacant slots, threaded through `link`.
    free: u32,
    len: usize,
    /// Slots freed since the free list was last put back in index order.
    freed_since_relink: usize,
}

impl<T, A> Slab<T, A> {
    pub fn new() -> Self {
        Slab { entries: Vec::new(), free: NIL, len: 0, freed_since_relink: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The entries the slab has room for without growing.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Makes room for `additional` more entries than are stored, so that inserts up to then
    /// allocate nothing.
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), crate::Error> {
        let wanted = self.len.saturating_add(additional);
        if wanted > MAX_ENTRIES {
            return Err(crate::Error::invalid(format!("a wheel holds at most {MAX_ENTRIES} entries, not {wanted}")));
        }
        self.entries
            .try_reserve(wanted.saturating_sub(self.entries.len()))
            .map_err(|e| crate::Error::invalid(format!("no room for {additional} more timers: {e}")))
    }

    /// Stores `value` in a vacant slot (reusing the most recently freed one) and returns its id.
    ///
    /// # Panics
    /// If more than [`MAX_ENTRIES`] entries would be live at once (about 2 billion).
    pub fn insert(&mut self, deadline: u64, value: T) -> EntryId {
        self.len += 1;
        if self.free != NIL {
            let index = self.free;
            let entry = &mut self.entries[index as usize];
            self.free = entry.link;
            *entry = Entry::new(deadline, entry.generation, Some(value));
            return EntryId { index, generation: entry.generation };
        }
        let index = self.entries.len();
        assert!(index < MAX_ENTRIES, "a timing wheel holds at most {MAX_ENTRIES} entries");
        self.entries.push(Entry::new(deadline, 0, Some(value)));
        EntryId { index: index as u32, generation: 0 }
    }

    /// The live entry's index, if `id` still names one.
    pub fn index_of(&self, id: EntryId) -> Option<u32> {
        let entry = self.entries.get(id.index as usize)?;
        (entry.generation == id.generation && entry.value.is_some()).then_some(id.index)
    }

    /// The live entry in slot `index`, if any: its id and value.
    pub fn live(&self, index: u32) -> Option<(EntryId, &T)> {
        let entry = self.entries.get(index as usize)?;
        Some((EntryId { index, generation: entry.generation }, entry.value.as_ref()?))
    }

    /// The value of the live entry in slot `index`, if any.
    pub fn live_mut(&mut self, index: u32) -> Option<&mut T> {
        self.entries.get_mut(index as usize)?.value.as_mut()
    }

    pub fn id_of(&self, index: u32) -> EntryId {
        EntryId { index, generation: self.entries[index as usize].generation }
    }

    /// Vacates a live slot that is no longer in any bucket and returns its value.
    pub fn free(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take().expect("freeing a vacant slab slot");
        self.len -= 1;
        entry.generation = entry.generation.wrapping_add(1);
        if entry.generation != u32::MAX {
            // A slot whose generation is exhausted is retired rather than risk an alias.
            entry.link = self.free;
            self.free = index;
        }
        self.freed_since_relink += 1;
        if self.len == 0 && self.freed_since_relink >= self.entries.len() / 2 {
            self.relink_free();
        }
        value
    }

    /// Removals in random order (cancels) leave the free list in random order, and inserts that
    /// follow it then miss the cache on every slot. Once the slab is empty, put the list back in
    /// index order so the next inserts walk memory sequentially. Done only after at least half
    /// the slab's worth of frees, so it costs O(1) per free, amortised.
    fn relink_free(&mut self) {
        self.freed_since_relink = 0;
        self.free = NIL;
        for (index, entry) in self.entries.iter_mut().enumerate().rev() {
            if entry.generation != u32::MAX {
                entry.link = self.free;
                self.free = index as u32;
            }
        }
    }

    /// Every live entry's deadline and value, in slot order, consuming the slab.
    pub fn into_live(self) -> impl Iterator<Item = (u64, T)> {
        self.entries.into_iter().filter_map(|entry| {
            let deadline = entry.deadline();
            entry.value.map(|value| (deadline, value))
        })
    }

    pub fn get(&self, index: u32) -> &Entry<T, A> {
        &self.entries[index as usize]
    }

    pub fn get_mut(&mut self, index: u32) -> &mut Entry<T, A> {
        &mut self.entries[index as usize]
    }

    /// Adds entry `index` to `bucket`, in its latest hole if it has one.
    pub fn push(&mut self, buckets: &mut [Bucket], bucket: usize, index: u32) {
        self.entries[index as usize].link = buckets[bucket].insert(index) as u32;
    }

    /// Takes entry `index` out of `bucket`, where the wheel put it. Returns whether the bucket
    /// is now empty.
    pub fn unlink(&mut self, buckets: &mut [Bucket], bucket: usize, index: u32) -> bool {
        let position = self.entries[index as usize].link;
        let b = &mut buckets[bucket];
        debug_assert_eq!(b.slots[position as usize], index, "entry {index} is not where it says");
        b.vacate(position as usize);
        if !b.is_empty() {
            return false;
        }
        b.clear();
        true
    }

    /// Detaches `bucket` whole, to walk it. Its entries keep their places: hand it back with
    /// [`Slab::restore_bucket`] holding those that stay (vacate the others), or cleared.
    pub fn take_bucket(buckets: &mut [Bucket], bucket: usize) -> Bucket {
        std::mem::take(&mut buckets[bucket])
    }

    /// Puts back a bucket taken with [`Slab::take_bucket`]; one left with no entries is cleared.
    pub fn restore_bucket(buckets: &mut [Bucket], bucket: usize, mut taken: Bucket) {
        debug_assert!(buckets[bucket].slots.is_empty(), "bucket {bucket} filled while it was taken");
        if taken.is_empty() {
            taken.clear();
        }
        buckets[bucket] = taken;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_with_a_small_value_takes_28_bytes() {
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 28);
    }

    /// A 64-byte aligned `A` puts each entry of a 40-byte value with a niche (as the service's
    /// timers are) in a cache line of its own, whatever offset the allocator gives the slab.
    #[test]
    fn an_aligned_entry_of_a_40_byte_value_is_one_cache_line() {
        #[repr(align(64))]
        struct Line;
        type Value = (std::num::NonZeroU64, [u64; 4]);
        assert_eq!(std::mem::size_of::<Entry<Value, ()>>(), 64, "packed: 64 bytes, aligned to 8");
        assert_eq!(std::mem::size_of::<Entry<Value, Line>>(), 64);
        let mut slab = Slab::<Value, Line>::new();
        for i in 0..3 {
            slab.insert(i, (std::num::NonZeroU64::MIN, [i; 4]));
        }
        for i in 0..3 {
            assert_eq!(std::ptr::from_ref(slab.get(i)) as usize % 64, 0, "entry {i} starts a line");
        }
    }

    #[test]
    fn ids_round_trip_through_u64() {
        let id = EntryId { index: 7, generation: 3 };
        assert_eq!(EntryId::from_u64(id.to_u64()), id);
    }

    #[test]
    fn stale_ids_are_refused_after_reuse() {
        let mut slab = Slab::<_>::new();
        let a = slab.insert(1, "a");
        slab.free(slab.index_of(a).unwrap());
        let b = slab.insert(2, "b");
        assert_eq!(a.index, b.index, "the freed slot is reused");
        assert_eq!(slab.index_of(a), None);
        assert_eq!(slab.index_of(b), Some(b.index));
    }

    #[test]
    fn exhausted_generation_retires_the_slot() {
        let mut slab = Slab::<_>::new();
        let a = slab.insert(1, ());
        slab.entries[0].generation = u32::MAX - 1;
        slab.free(a.index);
        let b = slab.insert(1, ());
        assert_ne!(b.index, a.index, "a slot at the last generation must not be handed out again");
    }

    #[test]
    fn an_emptied_slab_hands_out_slots_in_index_order() {
        let mut slab = Slab::<_>::new();
        let ids: Vec<EntryId> = (0..8).map(|i| slab.insert(i, i)).collect();
        for &i in &[5, 2, 7, 0, 3, 6, 1, 4] {
            slab.free(ids[i].index);
        }
        let again: Vec<u32> = (0..8).map(|i| slab.insert(i, i).index).collect();
        assert_eq!(again, (0..8).collect::<Vec<_>>());
        assert!(ids.iter().all(|&id| slab.index_of(id).is_none()), "old ids stay stale");
    }

    #[test]
    fn unlink_leaves_a_hole_that_the_next_push_fills() {
        let mut slab = Slab::<_>::new();
        let mut buckets = vec![Bucket::default(); 2];
        let ids: Vec<u32> = (0..4).map(|i| slab.insert(i, i).index).collect();
        for &i in &ids[..3] {
            slab.push(&mut buckets, 1, i);
        }
        let entries = |b: &Bucket| b.entries().collect::<Vec<_>>();
        assert!(!slab.unlink(&mut buckets, 1, ids[0]));
        assert!(!slab.unlink(&mut buckets, 1, ids[2]));
        assert_eq!(entries(&buckets[1]), [(1, ids[1])]);
        slab.push(&mut buckets, 1, ids[3]);
        assert_eq!(entries(&buckets[1]), [(1, ids[1]), (2, ids[3])], "the latest hole is filled first");
        slab.push(&mut buckets, 1, ids[0]);
        assert_eq!(buckets[1].slots.len(), 3, "then the one before: no slot is added");
        assert!(!slab.unlink(&mut buckets, 1, ids[3]), "found where it went");
        assert!(!slab.unlink(&mut buckets, 1, ids[1]));
        assert!(slab.unlink(&mut buckets, 1, ids[0]), "now empty");
        assert!(buckets[1].slots.is_empty(), "an emptied bucket forgets its holes");
    }

    #[test]
    fn a_large_bucket_gives_its_room_back_once_empty() {
        let mut slab = Slab::<_>::new();
        let mut buckets = vec![Bucket::default()];
        let ids: Vec<u32> = (0..2 * KEEP_SPARE as u64).map(|i| slab.insert(i, i).index).collect();
        ids.iter().for_each(|&i| slab.push(&mut buckets, 0, i));
        for &i in &ids {
            slab.unlink(&mut buckets, 0, i);
        }
        assert_eq!(buckets[0].slots.capacity(), 0);
        ids.iter().for_each(|&i| slab.push(&mut buckets, 0, i));
        let mut taken = Slab::<u64>::take_bucket(&mut buckets, 0);
        taken.clear();
        Slab::<u64>::restore_bucket(&mut buckets, 0, taken);
        assert_eq!(buckets[0].slots.capacity(), 0, "a walked-out large bucket is dropped too");
    }
}
