//! The pool of wheel entry ids that handles draw from when they claim a key.
//!
//! A handle picks the timer's id itself, so the key map can record where the timer will be in
//! the wheel before the actor has seen it, and the actor never writes to the map to say so.
//! An id is given out again only with the next generation, once it is dead: by the actor when
//! it removes or expires the entry, or by a handle whose `Add` never left.

use std::sync::Mutex;

use crate::wheel::EntryId;
use crate::Error;

/// Generations stay at or below this, so an id's `u64` form leaves the top bit free (the key map
/// keeps its `ARMED` flag there). A slot whose generation is used up is retired.
const MAX_GENERATION: u32 = (1 << 31) - 1;

/// The most slots the pool hands out.
const MAX_INDEX: u32 = (1 << 31) - 2;

#[derive(Default)]
pub(crate) struct IdPool {
    pool: Mutex<Pool>,
}

#[derive(Default)]
struct Pool {
    /// Dead ids with their next generation, taken from the end.
    free: Vec<EntryId>,
    /// Indices below this have been handed out at least once.
    fresh: u32,
    /// Ids given back since `free` was last sorted.
    returned_since_sort: usize,
}

impl Pool {
    fn take(&mut self) -> Result<EntryId, Error> {
        if let Some(id) = self.free.pop() {
            return Ok(id);
        }
        if self.fresh > MAX_INDEX {
            return Err(Error::Full(MAX_INDEX as usize + 1));
        }
        self.fresh += 1;
        Ok(EntryId::new(self.fresh - 1, 0))
    }

    fn give_back(&mut self, dead: EntryId) {
        self.returned_since_sort += 1;
        if dead.generation() < MAX_GENERATION {
            self.free.push(EntryId::new(dead.index(), dead.generation() + 1));
        }
    }

    /// Cancels in random order leave `free` in random order, and the inserts that reuse it then
    /// miss the cache on every slot. When every id is free again, hand them out in index order
    /// (sorting only after half the pool's worth of returns, so it is O(log n) per id).
    fn tidy(&mut self) {
        if self.free.len() == self.fresh as usize && self.returned_since_sort >= self.free.len() / 2 {
            self.free.sort_unstable_by_key(|id| std::cmp::Reverse(id.index()));
            self.returned_since_sort = 0;
        }
    }
}

impl IdPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().expect("id pool lock poisoned")
    }

    pub fn take(&self) -> Result<EntryId, Error> {
        self.lock().take()
    }

    /// Takes `n` ids under one lock.
    pub fn take_many(&self, n: usize) -> Result<Vec<EntryId>, Error> {
        let mut pool = self.lock();
        (0..n).map(|_| pool.take()).collect()
    }

    /// Returns an id that is dead; it comes back with the next generation.
    pub fn give_back(&self, dead: EntryId) {
        let mut pool = self.lock();
        pool.give_back(dead);
        pool.tidy();
    }

    /// Returns many dead ids under one lock, and empties `dead`.
    pub fn give_back_all(&self, dead: &mut Vec<EntryId>) {
        if dead.is_empty() {
            return;
        }
        let mut pool = self.lock();
        for id in dead.drain(..) {
            pool.give_back(id);
        }
        pool.tidy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_with_the_next_generation() {
        let pool = IdPool::default();
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        assert_ne!(a, b);
        pool.give_back(a);
        let again = pool.take().unwrap();
        assert_eq!((again.index(), again.generation()), (a.index(), a.generation() + 1));
    }

    #[test]
    fn an_exhausted_generation_retires_the_slot() {
        let pool = IdPool::default();
        pool.give_back(EntryId::new(0, MAX_GENERATION));
        assert_eq!(pool.lock().free.len(), 0);
    }

    #[test]
    fn a_drained_pool_hands_ids_out_in_index_order() {
        let pool = IdPool::default();
        let mut ids = pool.take_many(6).unwrap();
        ids.swap(0, 4);
        ids.swap(1, 3);
        pool.give_back_all(&mut ids);
        let again: Vec<u32> = pool.take_many(6).unwrap().iter().map(|id| id.index()).collect();
        assert_eq!(again, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn ids_fit_below_the_armed_bit() {
        let id = EntryId::new(MAX_INDEX, MAX_GENERATION);
        assert_eq!(id.to_u64() >> 63, 0);
    }
}
