//! A shard's key map: which wheel entry holds each key, in 8 bytes per slot.
//!
//! The keys themselves are stored once, in the wheel entries (a timer needs its key when it
//! fires). The map holds only the entry's index, with 32 bits of the key's hash beside it, in
//! one `u64` per slot of an open-addressing table with linear probing. So an insert reads and
//! writes one cache line, where a map holding the keys needs a control byte and a 32-byte bucket
//! in two places; the table is a quarter of the size; and growing it rehashes from the stored
//! bits, touching no key. A lookup compares the stored hash bits first and reads a wheel entry's
//! key only when they match (through the `is` closure its caller passes).
//!
//! Removal shifts the entries after the slot back (no tombstones), so a probe always ends at the
//! first empty slot, and the table never needs cleaning.

use std::collections::TryReserveError;

/// A vacant slot. Occupied slots hold `hash_bits << 32 | (index + 1)`, never 0.
const EMPTY: u64 = 0;

/// The fewest slots a table allocates.
const MIN_SLOTS: usize = 16;

pub(crate) struct KeyIndex {
    slots: Vec<u64>,
    len: usize,
}

/// The 32 bits of a key's hash that the table stores and places it by.
fn bits(hash: u64) -> u32 {
    hash as u32
}

fn pack(hash: u64, index: u32) -> u64 {
    (bits(hash) as u64) << 32 | (index as u64 + 1)
}

fn index_of(slot: u64) -> u32 {
    (slot as u32).wrapping_sub(1)
}

/// How many entries a table of `slots` slots holds before it grows: three quarters full.
fn room(slots: usize) -> usize {
    slots / 4 * 3
}

impl KeyIndex {
    pub fn new() -> Self {
        KeyIndex { slots: Vec::new(), len: 0 }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many entries fit before the table grows.
    pub fn capacity(&self) -> usize {
        room(self.slots.len())
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, slot_or_hash_bits: u32) -> usize {
        slot_or_hash_bits as usize & self.mask()
    }

    /// Makes room for `additional` more entries, so that inserting them allocates nothing.
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        let wanted = self.len.saturating_add(additional);
        if wanted <= self.capacity() {
            return Ok(());
        }
        // The fewest slots, a power of two, that hold `wanted` at three quarters full; an
        // impossible size asks for `usize::MAX` slots, which the allocator refuses.
        let slots = wanted.saturating_add(wanted / 3 + 1).max(MIN_SLOTS).checked_next_power_of_two();
        let slots = slots.unwrap_or(usize::MAX);
        let mut table = Vec::new();
        table.try_reserve_exact(slots)?;
        table.resize(slots, EMPTY);
        self.rehash_into(table);
        Ok(())
    }

    /// Moves every entry into `table` (empty slots, a power of two of them).
    fn rehash_into(&mut self, table: Vec<u64>) {
        let old = std::mem::replace(&mut self.slots, table);
        for slot in old.into_iter().filter(|&s| s != EMPTY) {
            let pos = self.vacant_from(self.home((slot >> 32) as u32));
            self.slots[pos] = slot;
        }
    }

    /// The first vacant slot at or after `pos`. There is always one: the table is at most three
    /// quarters full.
    fn vacant_from(&self, mut pos: usize) -> usize {
        while self.slots[pos] != EMPTY {
            pos = (pos + 1) & self.mask();
        }
        pos
    }

    /// The slot of the entry with this hash for which `is(index)` holds, if any.
    pub fn find(&self, hash: u64, is: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.probe(hash, is).ok()
    }

    /// The slot of the entry with this hash for which `is(index)` holds, or else the vacant slot
    /// where such an entry goes. Call [`reserve_one`](Self::reserve_one) first.
    pub fn find_or_vacant(&self, hash: u64, is: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        debug_assert!(self.len < self.capacity(), "find_or_vacant needs room for one more entry");
        self.probe(hash, is)
    }

    /// Walks from the hash's home slot to the entry `is` accepts, or to the first vacant slot.
    fn probe(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Result<usize, usize> {
        let mut pos = self.home(bits(hash));
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return Err(pos);
            }
            if (slot >> 32) as u32 == bits(hash) && is(index_of(slot)) {
                return Ok(pos);
            }
            pos = (pos + 1) & self.mask();
        }
    }

    /// Makes room for one more entry, growing the table (to twice its slots) if it is full.
    pub fn reserve_one(&mut self) {
        if self.len >= self.capacity() {
            let slots = (self.slots.len() * 2).max(MIN_SLOTS);
            self.rehash_into(vec![EMPTY; slots]);
        }
    }

    /// Puts an entry in `vacant`, the slot `find_or_vacant` gave for this hash, with no change
    /// to the table since.
    pub fn fill(&mut self, vacant: usize, hash: u64, index: u32) {
        debug_assert_eq!(self.slots[vacant], EMPTY);
        self.slots[vacant] = pack(hash, index);
        self.len += 1;
    }

    /// Adds an entry whose key is known to be absent.
    pub fn insert_new(&mut self, hash: u64, index: u32) {
        self.reserve_one();
        let pos = self.vacant_from(self.home(bits(hash)));
        self.fill(pos, hash, index);
    }

    /// The entry index in an occupied slot.
    pub fn index_at(&self, pos: usize) -> u32 {
        index_of(self.slots[pos])
    }

    /// Points an occupied slot at another entry (of the same key).
    pub fn set_index(&mut self, pos: usize, index: u32) {
        self.slots[pos] = self.slots[pos] & !(u32::MAX as u64) | (index as u64 + 1);
    }

    /// Empties an occupied slot, moving back the entries after it that may move, so that no
    /// probe stops short of its entry.
    pub fn remove(&mut self, pos: usize) {
        let mask = self.mask();
        let mut hole = pos;
        let mut next = pos;
        loop {
            next = (next + 1) & mask;
            let slot = self.slots[next];
            if slot == EMPTY {
                break;
            }
            // An entry may fill the hole if the hole is no nearer its home than the entry is
            // now: it would then be found on the way from its home.
            let home = self.home((slot >> 32) as u32);
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.slots[hole] = slot;
                hole = next;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
    }

    /// Removes every entry, keeping the room.
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Move(u16),
        Reserve(u16),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => any::<u16>().prop_map(|k| Op::Insert(k % 512)),
            5 => any::<u16>().prop_map(|k| Op::Remove(k % 512)),
            2 => any::<u16>().prop_map(|k| Op::Move(k % 512)),
            1 => any::<u16>().prop_map(|n| Op::Reserve(n % 300)),
            1 => Just(Op::Clear),
        ]
    }

    /// A key's hash: few distinct values, so that many keys share their stored bits and their
    /// home slot, and probes run long and wrap around.
    fn hash_of(key: u16) -> u64 {
        (key as u64 % 37).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3 << 3 | (key as u64 % 3)
    }

    /// The "wheel": entry index -> key, as the service reads it through `is`.
    fn find(index: &KeyIndex, entries: &BTreeMap<u32, u16>, key: u16) -> Option<usize> {
        index.find(hash_of(key), |i| entries[&i] == key)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Against a `BTreeMap` from key to entry index: every key present is found at its
        /// index, no absent key is found, and the length and room agree.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..600)) {
            let mut index = KeyIndex::new();
            let mut model: BTreeMap<u16, u32> = BTreeMap::new();
            let mut entries: BTreeMap<u32, u16> = BTreeMap::new();
            let mut next_entry = 0u32;
            for op in ops {
                match op {
                    Op::Insert(key) => {
                        index.reserve_one();
                        let found = index.find_or_vacant(hash_of(key), |i| entries[&i] == key);
                        prop_assert_eq!(found.is_ok(), model.contains_key(&key));
                        if let Err(vacant) = found {
                            index.fill(vacant, hash_of(key), next_entry);
                            model.insert(key, next_entry);
                            entries.insert(next_entry, key);
                            next_entry += 1;
                        }
                    }
                    Op::Remove(key) => {
                        let found = find(&index, &entries, key);
                        prop_assert_eq!(found.is_some(), model.contains_key(&key));
                        if let Some(pos) = found {
                            prop_assert_eq!(index.index_at(pos), model[&key]);
                            index.remove(pos);
                            entries.remove(&model.remove(&key).unwrap());
                        }
                    }
                    Op::Move(key) => {
                        if let Some(pos) = find(&index, &entries, key) {
                            entries.remove(&model[&key]);
                            index.set_index(pos, next_entry);
                            model.insert(key, next_entry);
                            entries.insert(next_entry, key);
                            next_entry += 1;
                        }
                    }
                    Op::Reserve(n) => {
                        index.try_reserve(n as usize).unwrap();
                        prop_assert!(index.capacity() >= model.len() + n as usize);
                    }
                    Op::Clear => {
                        index.clear();
                        model.clear();
                        entries.clear();
                    }
                }
                prop_assert_eq!(index.len(), model.len());
                prop_assert!(index.len() <= index.capacity());
            }
            for key in 0..512u16 {
                let found = find(&index, &entries, key).map(|pos| index.index_at(pos));
                prop_assert_eq!(found, model.get(&key).copied(), "key {}", key);
            }
        }
    }

    #[test]
    fn reserved_room_takes_inserts_without_growing() {
        let mut index = KeyIndex::new();
        index.try_reserve(10_000).unwrap();
        let (slots, capacity) = (index.slots.len(), index.capacity());
        assert!(capacity >= 10_000);
        for i in 0..10_000u32 {
            index.insert_new(u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15), i);
        }
        assert_eq!(index.slots.len(), slots);
        assert_eq!(index.capacity(), capacity);
    }

    #[test]
    fn an_impossible_reservation_is_an_error() {
        assert!(KeyIndex::new().try_reserve(usize::MAX).is_err());
        assert!(KeyIndex::new().try_reserve(usize::MAX / 4).is_err());
    }

    #[test]
    fn room_for_a_thousand_entries_takes_2048_slots() {
        let mut index = KeyIndex::new();
        index.try_reserve(1000).unwrap();
        assert_eq!(index.slots.len(), 2048);
        index.try_reserve(1536).unwrap();
        assert_eq!(index.slots.len(), 2048, "1,536 is three quarters of 2,048");
        index.try_reserve(1537).unwrap();
        assert_eq!(index.slots.len(), 4096);
    }
}
