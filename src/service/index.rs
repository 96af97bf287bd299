//! A shard's key map: which wheel entry holds each key, in 8 bytes per slot.
//!
//! The keys themselves are stored once, in the wheel entries (a timer needs its key when it
//! fires). The map holds only the entry's index, with 32 bits of the key's hash (its *tag*,
//! see below) beside it, in
//! one `u64` per slot of an open-addressing table with linear probing. So an insert usually reads
//! and writes one cache line (a probe walks 1.5 slots on average at half full, 8.5 at the most
//! the table holds, three quarters), where a map holding the keys needs a control byte and a
//! 32-byte bucket in two places; the table is under a third of the size; and growing it rehashes
//! from the stored tags, touching no key. A lookup compares the stored tags first and reads
//! a wheel entry's key only when they match (through the `is` closure its caller passes).
//!
//! Removal shifts the entries after the slot back (no tombstones), so a probe always ends at the
//! first empty slot, and the table never needs cleaning.
//!
//! # Hostile keys
//! Keys often come from clients, and linear probing degrades to a walk over every entry when
//! many keys share a home slot, and to a key compare at each when they share their stored bits
//! too. The key hasher's seed is the first defence; the table does not rely on it alone, since
//! that seed is not drawn from a cryptographic source and a key's hash shows through the
//! service's behaviour (its shard decides, for one, the order in which timers due together
//! fire). Two secrets of the table's own, drawn from the operating system's random source
//! (through `std`'s `RandomState`), decide instead:
//! - which 32 bits a key stores, its *tag*: the high half of its 64-bit hash times a random odd
//!   word, drawn when the table is made and kept for its life (the entries keep their tags as
//!   it grows). For two different hashes the tags agree with a chance of at most 2^-31 whatever
//!   the hashes, so keys made to agree in any part of their hash, even by someone who knows the
//!   hasher's seed, get tags as different as random keys'; only keys whose whole 64-bit hashes
//!   agree share a tag, and making many of those takes about 2^64 tries each;
//! - where a tag places the key (see [`Placement`]), drawn again each time the table grows.
//!
//! The cost is two multiplies per lookup.

use std::collections::TryReserveError;
use std::hash::BuildHasher;

/// A vacant slot. Occupied slots hold `tag << 32 | (index + 1)`, never 0.
const EMPTY: u64 = 0;

/// The fewest slots a table allocates.
const MIN_SLOTS: usize = 16;

pub(crate) struct KeyIndex {
    slots: Vec<u64>,
    len: usize,
    /// Multiplies a key's hash into its tag: odd, drawn at random when the table is made.
    tagging: u64,
    /// Whether a hash is mixed (a bijection of 64 bits) before the multiply: always, but in the
    /// unkeyed test table, which tags by the hash's low half as it is; so the flag and its
    /// branch exist only in tests, out of the service's lookups.
    #[cfg(test)]
    fold: bool,
    /// Where a tag places a key in `slots`.
    placement: Placement,
    /// Draws the placement of each new table: [`Placement::random`], or a fixed one in tests.
    redraw: fn() -> Placement,
}

/// MurmurHash3's 64-bit finaliser: a bijection that spreads every input bit over every output
/// bit.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// A random word from `std`'s `RandomState`, whose keys come from the operating system's random
/// source (once per thread, then stepped for each new state).
fn random_word(salt: u8) -> u64 {
    std::hash::RandomState::new().hash_one(salt)
}

/// A keyed map from a key's tag to its home slot: bits 32 and up of `tag * mul + add`
/// (mod 2^64), as many as the table has slots for. This is Dietzfelbinger's multiply-add-shift
/// scheme, strongly universal: for two keys whose tags differ, and `mul` and `add` drawn at
/// random, the chance that they share a home in a table of 2^k slots is 2^-k, whatever the
/// tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    mul: u64,
    add: u64,
}

impl Placement {
    fn random() -> Self {
        Placement { mul: random_word(0), add: random_word(1) }
    }

    /// The placement that puts a key at its tag's low bits, as the table did before it was
    /// keyed: for tests that put keys at chosen slots.
    #[cfg(test)]
    const IDENTITY: Placement = Placement { mul: 1 << 32, add: 0 };

    /// The home of `tag` in a table with `mask + 1` slots (at most 2^32).
    fn home(self, tag: u32, mask: usize) -> usize {
        ((tag as u64).wrapping_mul(self.mul).wrapping_add(self.add) >> 32) as usize & mask
    }
}

/// `index` is a wheel's slab slot, below 2^31 (`MAX_ENTRIES`), so `index + 1` stays in the low
/// half.
fn pack(tag: u32, index: u32) -> u64 {
    debug_assert!(index < u32::MAX, "slab slot {index} does not fit beside the tag");
    (tag as u64) << 32 | (index as u64 + 1)
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
        let tagging = random_word(2) | 1;
        KeyIndex {
            slots: Vec::new(),
            len: 0,
            tagging,
            #[cfg(test)]
            fold: true,
            placement: Placement::random(),
            redraw: Placement::random,
        }
    }

    /// A table that tags keys by the low 32 bits of their hash and places them by the low bits
    /// of that, unkeyed, so that a test can put keys at chosen slots.
    #[cfg(test)]
    fn unkeyed() -> Self {
        let (placement, redraw) = (Placement::IDENTITY, || Placement::IDENTITY);
        KeyIndex { slots: Vec::new(), len: 0, tagging: 1 << 32, fold: false, placement, redraw }
    }

    /// The 32 bits of a key's hash that the table stores and places it by: the high half of
    /// `hash * tagging` (mod 2^64), multiply-shift hashing, universal for odd random `tagging`.
    /// A keyed table first mixes the hash with MurmurHash3's 64-bit finaliser (a bijection, so
    /// distinct hashes stay distinct): without it, hashes in arithmetic progression (alike in
    /// their low bits, `i << k | c`) make tags in arithmetic progression, which about one draw
    /// of the multipliers in fifteen packed into a few slots (the test of alike keys failed 4
    /// times in 60).
    fn tag(&self, hash: u64) -> u32 {
        #[cfg(test)]
        let hash = if self.fold { fmix64(hash) } else { hash };
        #[cfg(not(test))]
        let hash = fmix64(hash);
        (hash.wrapping_mul(self.tagging) >> 32) as u32
    }

    /// How many keys the table holds.
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

    /// The home slot of a key by its tag.
    fn home(&self, tag: u32) -> usize {
        self.placement.home(tag, self.mask())
    }

    /// Makes room for `additional` more entries, so that inserting them allocates nothing.
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        let wanted = self.len.saturating_add(additional);
        if wanted <= self.capacity() {
            return Ok(());
        }
        // The fewest slots, a power of two, that hold `wanted` at three quarters full; an
        // impossible size asks for `usize::MAX` slots, which the allocator refuses.
        let slots = wanted.div_ceil(3).checked_mul(4).and_then(|n| n.max(MIN_SLOTS).checked_next_power_of_two());
        let slots = slots.unwrap_or(usize::MAX);
        let mut table = Vec::new();
        table.try_reserve_exact(slots)?;
        table.resize(slots, EMPTY);
        self.rehash_into(table);
        Ok(())
    }

    /// Moves every entry into `table` (empty slots, a power of two of them), placed afresh.
    fn rehash_into(&mut self, table: Vec<u64>) {
        debug_assert!(table.len().is_power_of_two() && table.len() as u64 <= 1 << 32, "{} slots", table.len());
        let old = std::mem::replace(&mut self.slots, table);
        self.placement = (self.redraw)();
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
        let tag = self.tag(hash);
        let mut pos = self.home(tag);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return Err(pos);
            }
            if (slot >> 32) as u32 == tag && is(index_of(slot)) {
                return Ok(pos);
            }
            pos = (pos + 1) & self.mask();
        }
    }

    /// Loads the home slot of a hash, so that a lookup soon after finds it in cache.
    pub fn touch(&self, hash: u64) {
        if !self.slots.is_empty() {
            std::hint::black_box(self.slots[self.home(self.tag(hash))]);
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
        self.slots[vacant] = pack(self.tag(hash), index);
        self.len += 1;
    }

    /// Adds an entry whose key is known to be absent.
    pub fn insert_new(&mut self, hash: u64, index: u32) {
        self.reserve_one();
        let pos = self.vacant_from(self.home(self.tag(hash)));
        self.fill(pos, hash, index);
    }

    /// The entry index in an occupied slot.
    pub fn index_at(&self, pos: usize) -> u32 {
        index_of(self.slots[pos])
    }

    /// Points an occupied slot at another entry (of the same key). The service no longer needs
    /// it (a moved timer keeps its entry); the model test still moves keys with it.
    #[cfg(test)]
    pub fn set_index(&mut self, pos: usize, index: u32) {
        self.slots[pos] = pack(0, index) | self.slots[pos] & !(u32::MAX as u64);
    }

    /// Empties an occupied slot, moving back the entries after it that may move, so that no
    /// probe stops short of its entry.
    #[inline]
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

    /// A simple SplitMix64 step, for hashes that look random.
    fn splitmix(i: u64) -> u64 {
        let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Slots walked per insert and per remove, on average, of 1,000 members of a hash family (member
    /// `j` has hash `family(j)`) in `table`, which holds `n` random entries and `f` members first.
    fn slots_walked(mut table: KeyIndex, n: u64, f: u64, family: &dyn Fn(u64) -> u64) -> (f64, f64) {
        const MEASURED: u64 = 1_000;
        let walk = |table: &KeyIndex, hash: u64, pos: usize| {
            (pos.wrapping_sub(table.home(table.tag(hash))) & table.mask()) + 1
        };
        // Entry `i` holds hash `hashes[i]`; the ids are distinct, so no key compare matches on insert.
        let mut hashes = Vec::new();
        let mut add = |table: &mut KeyIndex, hash: u64| {
            table.reserve_one();
            let vacant = table.find_or_vacant(hash, |_| false).expect_err("ids are distinct");
            let walked = walk(table, hash, vacant);
            table.fill(vacant, hash, hashes.len() as u32);
            hashes.push(hash);
            walked
        };
        for i in 0..n {
            add(&mut table, splitmix(i));
        }
        for j in 0..f {
            add(&mut table, family(j));
        }
        let measured: Vec<(u32, u64)> = (f..f + MEASURED).map(|j| ((n + j) as u32, family(j))).collect();
        let inserted: usize = measured.iter().map(|&(_, hash)| add(&mut table, hash)).sum();
        let mut removed = 0;
        for &(id, hash) in &measured {
            let pos = table.find(hash, |i| i == id).expect("the member is present");
            removed += walk(&table, hash, pos);
            table.remove(pos);
        }
        (inserted as f64 / MEASURED as f64, removed as f64 / MEASURED as f64)
    }

    /// Hashes made to collide, by someone who knows the key hasher's seed and so picks keys by their
    /// hash, cost the table at most 4x the slots that random hashes cost per insert and per remove,
    /// in a table of 10,000 random entries and as many of the family as of random ones: `low-20`,
    /// hashes that agree in their low 20 bits (the bits that placed a key in a table of up to a
    /// million slots, about 2^20 tries a key), and `low-32`, that agree in the 32 bits an unkeyed
    /// table stores (about 2^32 tries a key). The same family walks hundreds of times as far in an
    /// unkeyed table, so the check can fail. (It was the hostile benchmark's quick check, which
    /// compiled this file a second time to feed the map hand-picked hashes; only the crate can.)
    #[test]
    fn hashes_made_to_collide_walk_about_as_far_as_random_ones() {
        const N: u64 = 10_000;
        let random = |j: u64| splitmix(j ^ 0xA5A5_0000_0000_0000);
        let low_20 = move |j| (random(j) & !0xF_FFFF) | 0x1_2345;
        let low_32 = move |j| (random(j) & !0xFFFF_FFFF) | 0x89AB_CDEF;
        // A family's name, its hashes, and how many of it the table holds first.
        type Family<'a> = (&'a str, &'a dyn Fn(u64) -> u64, [u64; 2]);
        let families: [Family<'_>; 2] = [("low-20", &low_20, [1_000, 10_000]), ("low-32", &low_32, [100, 1_000])];
        for (name, family, sizes) in families {
            for f in sizes {
                let (ri, rr) = slots_walked(KeyIndex::new(), N, f, &random);
                let (i, r) = slots_walked(KeyIndex::new(), N, f, family);
                assert!(
                    i <= 4.0 * ri && r <= 4.0 * rr,
                    "{name}, {f} of them: {i:.2} and {r:.2} slots per insert and remove, random hashes {ri:.2} and {rr:.2}"
                );
            }
        }
        let (ri, _) = slots_walked(KeyIndex::unkeyed(), N, 1_000, &random);
        let (i, _) = slots_walked(KeyIndex::unkeyed(), N, 1_000, &low_20);
        assert!(i > 100.0 * ri, "unkeyed, low-20: {i:.2} slots per insert, random hashes {ri:.2}");
    }

    /// Keys `0..KEYS`, of which the table holds a good share at any time.
    const KEYS: u16 = 200;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        /// Removes a key present, picked by `Index` among them (or an absent one, if none is).
        Remove(prop::sample::Index),
        Move(prop::sample::Index),
        RemoveAbsent(u16),
        Reserve(u16),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            40 => (0..KEYS).prop_map(Op::Insert),
            25 => any::<prop::sample::Index>().prop_map(Op::Remove),
            8 => any::<prop::sample::Index>().prop_map(Op::Move),
            4 => (0..KEYS).prop_map(Op::RemoveAbsent),
            2 => (0..300u16).prop_map(Op::Reserve),
            1 => Just(Op::Clear),
        ]
    }

    /// A key's hash: one of 23 values, so that many keys share their stored bits and the key
    /// compare decides. Their homes are a few slots at both ends of a table of up to 256 slots,
    /// so clusters run long, merge and wrap around the end.
    fn hash_of(key: u16) -> u64 {
        let class = key as u64 % 23;
        let home = [0x00, 0x01, 0xFE, 0xFF, 0x7F][class as usize % 5];
        (class * 0x0001_0101) << 8 | home
    }

    /// The "wheel": entry index -> key, as the service reads it through `is`.
    fn find(index: &KeyIndex, entries: &BTreeMap<u32, u16>, key: u16) -> Option<usize> {
        index.find(hash_of(key), |i| entries[&i] == key)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Against a `BTreeMap` from key to entry index: after every operation every key
        /// present is found at its index and no absent key is found, and the length and room
        /// agree. Unkeyed, so that the homes are the chosen ones of `hash_of`, and keyed.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..400), keyed in any::<bool>()) {
            let mut index = if keyed { KeyIndex::new() } else { KeyIndex::unkeyed() };
            let mut model: BTreeMap<u16, u32> = BTreeMap::new();
            let mut entries: BTreeMap<u32, u16> = BTreeMap::new();
            let mut next_entry = 0u32;
            for op in ops {
                let present: Vec<u16> = model.keys().copied().collect();
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
                    Op::Remove(pick) if !present.is_empty() => {
                        let key = present[pick.index(present.len())];
                        let pos = find(&index, &entries, key);
                        prop_assert!(pos.is_some(), "key {} is present", key);
                        let pos = pos.unwrap();
                        prop_assert_eq!(index.index_at(pos), model[&key]);
                        index.remove(pos);
                        entries.remove(&model.remove(&key).unwrap());
                    }
                    Op::Move(pick) if !present.is_empty() => {
                        let key = present[pick.index(present.len())];
                        let pos = find(&index, &entries, key).unwrap();
                        entries.remove(&model[&key]);
                        index.set_index(pos, next_entry);
                        model.insert(key, next_entry);
                        entries.insert(next_entry, key);
                        next_entry += 1;
                    }
                    Op::Remove(_) | Op::Move(_) => {}
                    Op::RemoveAbsent(key) => {
                        prop_assert_eq!(find(&index, &entries, key).is_some(), model.contains_key(&key));
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
                for key in 0..KEYS {
                    let found = find(&index, &entries, key).map(|pos| index.index_at(pos));
                    prop_assert_eq!(found, model.get(&key).copied(), "key {}", key);
                }
            }
        }
    }

    /// Entries at slots 0, 1 and 2 with homes 0, 1 and 0: removing the first must move the third
    /// back past the second, which cannot move.
    #[test]
    fn a_removal_moves_back_entries_past_one_that_stays() {
        let mut index = KeyIndex::unkeyed();
        let (a, b, c) = (1 << 8, 1, 2 << 8);
        for (i, hash) in [a, b, c].into_iter().enumerate() {
            index.insert_new(hash, i as u32);
        }
        let pos = index.find(a, |i| i == 0).unwrap();
        index.remove(pos);
        assert_eq!(index.find(b, |i| i == 1).map(|p| index.index_at(p)), Some(1));
        assert_eq!(index.find(c, |i| i == 2).map(|p| index.index_at(p)), Some(2));
        assert_eq!(index.find(a, |i| i == 0), None);
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
    fn a_reservation_takes_the_fewest_slots_that_hold_it() {
        for (wanted, slots) in [(1, 16), (12, 16), (13, 32), (1000, 2048), (1536, 2048), (1537, 4096)] {
            let mut index = KeyIndex::new();
            index.try_reserve(wanted).unwrap();
            assert_eq!(index.slots.len(), slots, "room for {wanted}");
        }
    }

    /// How far each entry sits past its home, summed: the slots that lookups walk in excess.
    fn displacement(index: &KeyIndex) -> usize {
        let mask = index.mask();
        let occupied = index.slots.iter().enumerate().filter(|&(_, &slot)| slot != EMPTY);
        occupied.map(|(pos, &slot)| pos.wrapping_sub(index.home((slot >> 32) as u32)) & mask).sum()
    }

    /// Hashes that agree in their low `bits` bits and differ above: what someone who knew the
    /// key hasher's seed could make by trial (about 2^bits tries each) to fill one slot's
    /// cluster (20 bits, for tables of up to a million slots), or to share the 32 bits that an
    /// unkeyed table would store (32).
    fn alike_in_low_bits(bits: u32, n: u64) -> impl Iterator<Item = u64> {
        (0..n).map(move |i| i << bits | 0x5A5A_5A5A & ((1 << bits) - 1))
    }

    #[test]
    fn keys_alike_in_their_low_bits_share_one_cluster_unkeyed_and_spread_out_keyed() {
        const N: u64 = 4096;
        for bits in [20, 32] {
            let mut unkeyed = KeyIndex::unkeyed();
            let mut keyed = KeyIndex::new();
            for (i, hash) in alike_in_low_bits(bits, N).enumerate() {
                unkeyed.insert_new(hash, i as u32);
                keyed.insert_new(hash, i as u32);
            }
            // Unkeyed, the n-th key walks past the n - 1 before it.
            let n = N as usize;
            assert_eq!(displacement(&unkeyed), n * (n - 1) / 2, "{bits} bits alike");
            // Keyed, about half a slot a key at half full; 4 would take a freak draw.
            let keyed_displacement = displacement(&keyed);
            assert!(keyed_displacement < 4 * n, "{keyed_displacement} slots of displacement, {bits} bits alike");
            // And the keyed tags differ, so no lookup compares a key it does not look for.
            let mut tags: Vec<u64> = keyed.slots.iter().filter(|&&s| s != EMPTY).map(|s| s >> 32).collect();
            tags.sort_unstable();
            tags.dedup();
            assert!(tags.len() >= n - 2, "{} distinct tags for {n} keys, {bits} bits alike", tags.len());
        }
    }

    #[test]
    fn the_unkeyed_tag_is_the_low_half_of_the_hash() {
        let index = KeyIndex::unkeyed();
        for hash in [0, 1, 0x1234_5678_9ABC_DEF0, u64::MAX] {
            assert_eq!(index.tag(hash), hash as u32);
        }
    }

    #[test]
    fn every_table_gets_its_own_secrets_and_growing_draws_a_new_placement() {
        let (a, b) = (KeyIndex::new(), KeyIndex::new());
        assert_ne!((a.tagging, a.placement), (b.tagging, b.placement));
        assert_eq!(a.tagging & 1, 1, "an odd multiplier");
        let mut index = KeyIndex::new();
        index.insert_new(1, 0);
        let before = index.placement;
        index.try_reserve(1000).unwrap();
        assert_ne!(index.placement, before);
        let tagging = index.tagging;
        index.try_reserve(100_000).unwrap();
        assert_eq!(index.tagging, tagging, "the stored tags stay valid as the table grows");
        assert_eq!(index.find(1, |i| i == 0).map(|pos| index.index_at(pos)), Some(0));
    }

    #[test]
    fn the_unkeyed_placement_is_the_low_bits() {
        for (bits, mask) in [(0, 15), (0x1234_5678, 0xFF), (u32::MAX, 0xFFFF), (u32::MAX, u32::MAX as usize)] {
            assert_eq!(Placement::IDENTITY.home(bits, mask), bits as usize & mask);
        }
    }
}
