//! A generational slab whose entries double as nodes of index-linked bucket lists.
//!
//! Both wheels keep their entries here. An entry is addressed by an [`EntryId`]: its index in the
//! slab plus the generation the slot had when the entry was inserted. Removing an entry bumps the
//! slot's generation, so an old id can never reach the entry that reuses the slot. A slot whose
//! generation would wrap is retired instead of reused, so ids never alias, even in theory.
//!
//! Buckets are doubly linked lists threaded through the entries by index (no pointers, no
//! `unsafe`). The wheel owns the bucket heads and passes them in by `&mut`, the way tokio-util's
//! `Stack` is handed its store, which keeps the borrows simple.

/// "No entry": the end of a list, or an empty bucket.
pub(crate) const NIL: u32 = u32::MAX;

/// Set in [`Entry::prev`] when the entry is the first of its bucket; the low bits are then the
/// bucket's index. This lets `unlink` fix the bucket head without storing a bucket per entry.
const HEAD: u32 = 1 << 31;

/// The largest number of slots the slab hands out; indices must stay clear of the `HEAD` bit.
pub(crate) const MAX_ENTRIES: usize = (HEAD - 1) as usize;

/// Identifies one inserted entry. Stale ids (of entries since removed or expired) are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId {
    index: u32,
    generation: u32,
}

impl EntryId {
    pub(crate) const fn new(index: u32, generation: u32) -> Self {
        EntryId { index, generation }
    }

    pub(crate) const fn index(self) -> u32 {
        self.index
    }

    pub(crate) const fn generation(self) -> u32 {
        self.generation
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

pub(crate) struct Entry<T> {
    /// The tick at which the entry is due.
    pub deadline: u64,
    /// Next entry in the bucket (or in the free list, for a vacant slot); `NIL` at the end.
    pub next: u32,
    /// Previous entry in the bucket, or `HEAD | bucket` for the bucket's first entry.
    pub prev: u32,
    /// Bumped each time the slot is vacated.
    pub generation: u32,
    /// Revolutions left before the entry expires (the rounds wheel's circle count; unused by the
    /// hierarchical wheel, and free: it sits in what would otherwise be padding).
    pub rounds: u32,
    /// `Some` while the slot is occupied.
    pub value: Option<T>,
}

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list of vacant slots, threaded through `next`.
    free: u32,
    len: usize,
    /// Slots freed since the free list was last put back in index order.
    freed_since_relink: usize,
    /// Whether ids come from outside ([`Slab::insert_at`]) rather than from the free list.
    external_ids: bool,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab { entries: Vec::new(), free: NIL, len: 0, freed_since_relink: 0, external_ids: false }
    }

    /// A slab whose ids are all chosen by the caller through [`Slab::insert_at`]: it keeps no
    /// free list, and the caller hands out each freed slot again with the next generation.
    pub fn with_external_ids() -> Self {
        Slab { external_ids: true, ..Slab::new() }
    }

    /// Stores `value` in the vacant slot `id.index`, which takes `id.generation`.
    ///
    /// # Panics
    /// If the slab hands out its own ids, or the slot is occupied (both bugs of the caller).
    pub fn insert_at(&mut self, id: EntryId, deadline: u64, value: T) {
        assert!(self.external_ids, "insert_at on a slab that hands out its own ids");
        let index = id.index as usize;
        assert!(index < MAX_ENTRIES, "a timing wheel holds at most {MAX_ENTRIES} entries");
        if index >= self.entries.len() {
            self.entries.resize_with(index + 1, || Entry {
                deadline: 0,
                next: NIL,
                prev: NIL,
                generation: 0,
                rounds: 0,
                value: None,
            });
        }
        let entry = &mut self.entries[index];
        assert!(entry.value.is_none(), "insert_at {id:?}: the slot is occupied");
        *entry = Entry { deadline, next: NIL, prev: NIL, generation: id.generation, rounds: 0, value: Some(value) };
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
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
            self.free = entry.next;
            entry.deadline = deadline;
            entry.value = Some(value);
            return EntryId { index, generation: entry.generation };
        }
        let index = self.entries.len();
        assert!(index < MAX_ENTRIES, "a timing wheel holds at most {MAX_ENTRIES} entries");
        self.entries.push(Entry { deadline, next: NIL, prev: NIL, generation: 0, rounds: 0, value: Some(value) });
        EntryId { index: index as u32, generation: 0 }
    }

    /// The live entry's index, if `id` still names one.
    pub fn index_of(&self, id: EntryId) -> Option<u32> {
        let entry = self.entries.get(id.index as usize)?;
        (entry.generation == id.generation && entry.value.is_some()).then_some(id.index)
    }

    pub fn id_of(&self, index: u32) -> EntryId {
        EntryId { index, generation: self.entries[index as usize].generation }
    }

    /// Vacates a live slot that is no longer linked into any bucket and returns its value.
    pub fn free(&mut self, index: u32) -> T {
        let entry = &mut self.entries[index as usize];
        let value = entry.value.take().expect("freeing a vacant slab slot");
        self.len -= 1;
        entry.generation = entry.generation.wrapping_add(1);
        if self.external_ids {
            return value;
        }
        if entry.generation != u32::MAX {
            // A slot whose generation is exhausted is retired rather than risk an alias.
            entry.next = self.free;
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
                entry.next = self.free;
                self.free = index as u32;
            }
        }
    }

    pub fn get(&self, index: u32) -> &Entry<T> {
        &self.entries[index as usize]
    }

    pub fn get_mut(&mut self, index: u32) -> &mut Entry<T> {
        &mut self.entries[index as usize]
    }

    /// Links entry `index` at the front of `bucket`.
    pub fn push(&mut self, heads: &mut [u32], bucket: usize, index: u32) {
        debug_assert!(bucket < HEAD as usize, "bucket {bucket} does not fit beside the HEAD bit");
        let old = heads[bucket];
        if old != NIL {
            self.entries[old as usize].prev = index;
        }
        let entry = &mut self.entries[index as usize];
        entry.next = old;
        entry.prev = HEAD | bucket as u32;
        heads[bucket] = index;
    }

    /// Unlinks entry `index` from its bucket. Returns the bucket if it is now empty.
    pub fn unlink(&mut self, heads: &mut [u32], index: u32) -> Option<usize> {
        let Entry { next, prev, .. } = self.entries[index as usize];
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
        if prev & HEAD == 0 {
            self.entries[prev as usize].next = next;
            return None;
        }
        let bucket = (prev & !HEAD) as usize;
        heads[bucket] = next;
        (next == NIL).then_some(bucket)
    }

    /// Detaches the whole list of `bucket` and returns its first entry; walk it with `next`.
    /// The walked entries keep stale links until they are pushed elsewhere or freed.
    pub fn take_bucket(heads: &mut [u32], bucket: usize) -> u32 {
        std::mem::replace(&mut heads[bucket], NIL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_u64() {
        let id = EntryId { index: 7, generation: 3 };
        assert_eq!(EntryId::from_u64(id.to_u64()), id);
    }

    #[test]
    fn stale_ids_are_refused_after_reuse() {
        let mut slab = Slab::new();
        let a = slab.insert(1, "a");
        slab.free(slab.index_of(a).unwrap());
        let b = slab.insert(2, "b");
        assert_eq!(a.index, b.index, "the freed slot is reused");
        assert_eq!(slab.index_of(a), None);
        assert_eq!(slab.index_of(b), Some(b.index));
    }

    #[test]
    fn exhausted_generation_retires_the_slot() {
        let mut slab = Slab::new();
        let a = slab.insert(1, ());
        slab.entries[0].generation = u32::MAX - 1;
        slab.free(a.index);
        let b = slab.insert(1, ());
        assert_ne!(b.index, a.index, "a slot at the last generation must not be handed out again");
    }

    #[test]
    fn an_emptied_slab_hands_out_slots_in_index_order() {
        let mut slab = Slab::new();
        let ids: Vec<EntryId> = (0..8).map(|i| slab.insert(i, i)).collect();
        for &i in &[5, 2, 7, 0, 3, 6, 1, 4] {
            slab.free(ids[i].index);
        }
        let again: Vec<u32> = (0..8).map(|i| slab.insert(i, i).index).collect();
        assert_eq!(again, (0..8).collect::<Vec<_>>());
        assert!(ids.iter().all(|&id| slab.index_of(id).is_none()), "old ids stay stale");
    }

    #[test]
    fn external_ids_go_where_they_are_told() {
        let mut slab = Slab::with_external_ids();
        let id = EntryId::new(5, 7);
        slab.insert_at(id, 1, "x");
        assert_eq!(slab.index_of(id), Some(5));
        assert_eq!(slab.index_of(EntryId::new(5, 6)), None);
        assert_eq!(slab.free(5), "x");
        assert_eq!(slab.index_of(id), None, "stale once freed");
        slab.insert_at(EntryId::new(5, 8), 2, "y");
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn unlink_fixes_heads_and_neighbours() {
        let mut slab = Slab::new();
        let mut heads = vec![NIL; 2];
        let ids: Vec<u32> = (0..3).map(|i| slab.insert(i, i).index).collect();
        for &i in &ids {
            slab.push(&mut heads, 1, i);
        }
        // Bucket 1 is now 2 -> 1 -> 0.
        assert_eq!(slab.unlink(&mut heads, ids[1]), None);
        assert_eq!(slab.get(ids[2]).next, ids[0]);
        assert_eq!(slab.unlink(&mut heads, ids[2]), None, "bucket still holds entry 0");
        assert_eq!(heads[1], ids[0]);
        assert_eq!(slab.unlink(&mut heads, ids[0]), Some(1));
        assert_eq!(heads[1], NIL);
    }
}
