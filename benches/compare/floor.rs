//! `floor-keymap`: not a timer, a reference. The bare key-map work that any keyed timer service must do per
//! timer, and nothing else: copy the caller's keys into 16-byte inline keys, then insert them (W1) or remove
//! them (W2, in the cancel order) in a hashbrown `HashTable` with foldhash, on the bench's thread, growing from
//! empty, no lock, no wheel, no clock. A keyed service cannot insert for less than this; T4 asks the whole
//! service to insert for less than `DelayQueue`, which keeps no keys at all.
//!
//! The copy is a pass of its own, the fastest way found: copying each key just before its insert costs about
//! 2.5x as much at 1M keys, as the reads of the caller's strings then queue behind the table's cache misses.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::inputs::{self, W12Inputs};
use crate::measure::{self, Rt, Snapshot, ROUNDS};

/// A key of up to 15 bytes with its length, as the service stores short keys.
type InlineKey = [u8; 16];

fn inline(key: &str) -> InlineKey {
    let mut k = [0u8; 16];
    k[..key.len()].copy_from_slice(key.as_bytes());
    k[15] = key.len() as u8;
    k
}

pub fn w12(imp: &str, n: usize) {
    let inputs = W12Inputs::new(n);
    let keys = inputs::keys(n);
    assert!(keys.iter().all(|k| k.len() < 16), "the floor stores keys inline");
    let hasher = foldhash::fast::RandomState::default();
    let hash = |k: &InlineKey| hasher.hash_one(k);
    let mut table: HashTable<(InlineKey, u32)> = HashTable::new();
    for round in ROUNDS {
        let snap = Snapshot::take();
        let copied: Vec<InlineKey> = keys.iter().map(|k| inline(k)).collect();
        for (i, key) in copied.into_iter().enumerate() {
            table.insert_unique(hash(&key), (key, i as u32), |(k, _)| hash(k));
        }
        let w1 = snap.finish();
        assert_eq!(table.len(), n, "{imp}: entries after W1");

        let snap = Snapshot::take();
        let mut missed = 0usize;
        let copied: Vec<InlineKey> = inputs.cancel_order.iter().map(|&i| inline(&keys[i as usize])).collect();
        for key in copied {
            match table.find_entry(hash(&key), |(k, _)| *k == key) {
                Ok(entry) => drop(entry.remove()),
                Err(_) => missed += 1,
            }
        }
        let w2 = snap.finish();
        assert_eq!((missed, table.len()), (0, 0), "{imp}: entries after W2");
        // A fresh table each round, as a service's map grows afresh after a restart.
        table = HashTable::new();
        measure::emit_w12(imp, round, n, Rt::None, &w1, &w2, &[]);
    }
}
