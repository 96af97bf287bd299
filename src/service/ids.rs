//! The pools of wheel entry ids that handles draw from when they claim a key.
//!
//! A handle picks the timer's id itself, so the key map can record where the timer will be in
//! the wheel before the actor has seen it, and the actor never writes to the map to say so.
//! Each shard of the key map has its own pool, guarded by the shard's lock: shard `s` of `n`
//! hands out the indices `s, s + n, s + 2n, ...`, so an id names its shard. An id is given out
//! again only with the next generation, once it is dead, when the actor has removed or expired
//! its entry.

use crate::wheel::EntryId;
use crate::Error;

/// Generations stay at or below this, so an id's `u64` form leaves the top bit free (the key map
/// keeps its `ARMED` flag there). A slot whose generation is used up is retired.
const MAX_GENERATION: u32 = (1 << 31) - 1;

/// The most slots the pool hands out.
const MAX_INDEX: u32 = (1 << 31) - 2;

/// The ids of one shard: indices `first + k * stride`.
pub(crate) struct IdPool {
    first: u32,
    stride: u32,
    /// Dead ids with their next generation, taken from the end.
    free: Vec<EntryId>,
    /// How many indices have been handed out at least once.
    fresh: u32,
    /// Ids given back since `free` was last sorted.
    returned_since_tidy: usize,
}

impl IdPool {
    pub fn new(first: u32, stride: u32) -> Self {
        IdPool { first, stride, free: Vec::new(), fresh: 0, returned_since_tidy: 0 }
    }

    pub fn take(&mut self) -> Result<EntryId, Error> {
        if let Some(id) = self.free.pop() {
            return Ok(id);
        }
        let index = self.fresh.checked_mul(self.stride).and_then(|i| i.checked_add(self.first));
        match index.filter(|&i| i <= MAX_INDEX) {
            Some(index) => {
                self.fresh += 1;
                Ok(EntryId::new(index, 0))
            }
            None => Err(Error::Full((MAX_INDEX as usize + 1) / self.stride as usize)),
        }
    }

    /// Returns many dead ids, and empties `dead`; each comes back with its next generation.
    pub fn give_back_all(&mut self, dead: &mut Vec<EntryId>) {
        if dead.is_empty() {
            return;
        }
        self.returned_since_tidy += dead.len();
        let next = dead.drain(..).filter(|id| id.generation() < MAX_GENERATION);
        self.free.extend(next.map(|id| EntryId::new(id.index(), id.generation() + 1)));
        self.tidy();
    }

    /// Cancels in random order leave `free` in random order, and the inserts that reuse it then
    /// miss the cache on every slot. When every id is free again, after at least half the
    /// pool's worth of returns, rebuild `free` in index order: one pass that places each id by
    /// its index, so O(1) per id returned.
    fn tidy(&mut self) {
        if self.free.len() != self.fresh as usize || self.returned_since_tidy < self.free.len() / 2 {
            return;
        }
        let mut by_index = vec![None; self.free.len()];
        for id in self.free.drain(..) {
            by_index[((id.index() - self.first) / self.stride) as usize] = Some(id);
        }
        // Taken from the end: lowest index last.
        self.free.extend(by_index.into_iter().rev().flatten());
        self.returned_since_tidy = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(pool: &mut IdPool, n: usize) -> Vec<EntryId> {
        (0..n).map(|_| pool.take().unwrap()).collect()
    }

    #[test]
    fn ids_come_back_with_the_next_generation() {
        let mut pool = IdPool::new(0, 1);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert_ne!(a, b);
        pool.give_back_all(&mut vec![a]);
        let again = pool.take().unwrap();
        assert_eq!((again.index(), again.generation()), (a.index(), a.generation() + 1));
    }

    #[test]
    fn an_exhausted_generation_retires_the_slot() {
        let mut pool = IdPool::new(0, 1);
        pool.give_back_all(&mut vec![EntryId::new(0, MAX_GENERATION)]);
        assert_eq!(pool.free.len(), 0);
    }

    #[test]
    fn a_drained_pool_hands_ids_out_in_index_order() {
        let mut pool = IdPool::new(0, 1);
        let mut ids = take(&mut pool, 6);
        ids.swap(0, 4);
        ids.swap(1, 3);
        pool.give_back_all(&mut ids);
        let again: Vec<u32> = take(&mut pool, 6).iter().map(|id| id.index()).collect();
        assert_eq!(again, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_shard_hands_out_its_own_stride_of_indices() {
        let mut pool = IdPool::new(3, 8);
        let indices: Vec<u32> = take(&mut pool, 3).iter().map(|id| id.index()).collect();
        assert_eq!(indices, [3, 11, 19]);
    }

    #[test]
    fn a_shard_out_of_indices_is_full() {
        let mut pool = IdPool::new(MAX_INDEX - 1, 4);
        assert_eq!(pool.take().unwrap().index(), MAX_INDEX - 1);
        assert!(matches!(pool.take(), Err(Error::Full(_))));
    }

    #[test]
    fn ids_fit_below_the_armed_bit() {
        let id = EntryId::new(MAX_INDEX, MAX_GENERATION);
        assert_eq!(id.to_u64() >> 63, 0);
    }
}
