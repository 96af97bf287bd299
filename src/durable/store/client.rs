//! [`WheelClient`]: a durable wheel as this process sees it, shared by its handles and workers, and
//! its partitions.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::keys::WheelKeys;
use super::shared_conn::SharedConn;
use crate::durable::config::Config;
use crate::durable::ids::Ids;
use crate::durable::metrics::WheelMetrics;
use crate::durable::time::{RedisClock, When, GUESS_MS};
use crate::lateness::Recent;
use crate::Lateness;

/// What every handle and worker of one `connect` shares: the checked settings, the connection,
/// the id source, the wheel's partitions, and what this process measures of it.
pub(crate) struct WheelClient {
    pub(crate) cfg: Config,
    pub(crate) conn: SharedConn,
    pub(crate) ids: Ids,
    /// The keys that record the wheel's settings and partition count: the only partition's,
    /// when there is one.
    pub(crate) base: WheelKeys,
    /// Never empty; one unless `partitions(n)` was set.
    pub(crate) partitions: Vec<Partition>,
    /// This process's estimate of Redis's clock, for naming the slots a task may go to.
    pub(crate) clock: RedisClock,
    /// How late this process's workers claimed their deliveries, over the recent window.
    pub(crate) lateness: Mutex<Recent>,
    /// The wheel's metrics (nothing, without the `metrics` feature).
    pub(crate) metrics: WheelMetrics,
}

/// The ring slots a call's tasks may go to ([`WheelClient::slot_guess`]).
pub(crate) struct SlotGuess {
    /// Each slot once, in order.
    pub(crate) indices: Vec<u64>,
    /// No slot was named for two tasks (nor twice for one), so no two of them should share a
    /// slot: a placing script may then push each task's slot entry as it goes rather than gather
    /// the entries slot by slot (`place.lua`'s `new_batch`). Only a hint: should this process's
    /// estimate of Redis's clock be off by more than its guess, two tasks may share a slot after
    /// all, which costs a push more, never a task.
    pub(crate) own_slots: bool,
}

/// One partition of a wheel: a whole wheel of its own under its own hash tag (its own cursor,
/// ring, ready queue and leadership), holding the tasks whose keys hash to it.
pub(crate) struct Partition {
    pub(crate) index: usize,
    pub(crate) keys: WheelKeys,
}

impl WheelClient {
    /// The partitions of the wheel `name`: `count` of them.
    pub(crate) fn partitions(name: &str, count: usize) -> Vec<Partition> {
        (0..count).map(|index| Partition { index, keys: WheelKeys::for_partition(name, index, count) }).collect()
    }

    /// The wheel's name, for logs and errors.
    pub(crate) fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The ring slots that tasks due `whens` may go to, each once: what the caller declares to a
    /// placing script ([`declare_slots`](super::scripts::declare_slots)). A tick more than a
    /// revolution past Redis's clock (by this process's estimate) is left out: the cursor is never
    /// past Redis's clock, so such a task waits in the far tier whatever is declared.
    pub(crate) fn slot_indices(&self, whens: impl IntoIterator<Item = When>) -> Vec<u64> {
        self.slot_guess(whens).indices
    }

    /// [`slot_indices`](Self::slot_indices), and whether each task has slots of its own.
    ///
    /// None on a store in this process alone: its leader sleeps until the far tier's first due
    /// time, which it reads exactly, and moves a task into the ring only a few ticks before it is
    /// due; a task placed in the ring would keep it ticking every tick until then (and a
    /// cancelled one, whose entry stays, until the cursor passes it).
    pub(crate) fn slot_guess(&self, whens: impl IntoIterator<Item = When>) -> SlotGuess {
        if self.cfg.local {
            return SlotGuess { indices: Vec::new(), own_slots: true };
        }
        let (tick_ms, slots) = (self.cfg.tick_ms, self.cfg.slots);
        let last = (self.clock.now_ms() + GUESS_MS).div_ceil(tick_ms) + slots;
        let mut indices: Vec<u64> = whens
            .into_iter()
            .flat_map(|when| self.clock.ticks(when, tick_ms))
            .filter(|&tick| tick <= last)
            .map(|tick| tick % slots)
            .collect();
        let named = indices.len();
        indices.sort_unstable();
        indices.dedup();
        let own_slots = indices.len() == named;
        SlotGuess { indices, own_slots }
    }

    /// Records how late deliveries were claimed: `late` for each, in one lock.
    pub(crate) fn record_lateness(&self, late: impl IntoIterator<Item = Duration>) {
        let now = tokio::time::Instant::now();
        let mut recent = self.lateness.lock().unwrap_or_else(PoisonError::into_inner);
        for late in late {
            recent.record(late, now);
        }
    }

    /// The recent window of lateness, read now (a window that ended meanwhile is left out).
    pub(crate) fn lateness(&self) -> Lateness {
        let mut recent = self.lateness.lock().unwrap_or_else(PoisonError::into_inner);
        recent.rotate(tokio::time::Instant::now());
        recent.read()
    }

    /// The partition that holds the task `key`.
    pub(crate) fn partition_of(&self, key: &str) -> &Partition {
        &self.partitions[partition_index(key, self.partitions.len())]
    }
}

/// The partition of the task `key` in a wheel of `count` partitions: the 64-bit FNV-1a hash of
/// the key's UTF-8 bytes, modulo `count`. Written down and fixed (every node and every version
/// must agree): offset basis `0xcbf29ce484222325`, prime `0x100000001b3`.
pub(crate) fn partition_index(key: &str, count: usize) -> usize {
    if count <= 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % count as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is FNV-1a 64 as published: these are its reference values, so a change of the
    /// function (which would move every task of a partitioned wheel) fails here.
    #[test]
    fn the_partition_hash_is_fnv1a_64() {
        let fnv = |key: &str| partition_index(key, usize::MAX);
        assert_eq!(fnv(""), (0xcbf2_9ce4_8422_2325u64 % usize::MAX as u64) as usize);
        assert_eq!(fnv("a"), (0xaf63_dc4c_8601_ec8cu64 % usize::MAX as u64) as usize);
        assert_eq!(fnv("foobar"), (0x8594_4171_f739_67e8u64 % usize::MAX as u64) as usize);
        assert_eq!(partition_index("order-42", 1), 0);
        let spread: Vec<usize> =
            (0..8).map(|p| (0..8000).filter(|i| partition_index(&format!("k{i}"), 8) == p).count()).collect();
        assert!(spread.iter().all(|&n| (900..1100).contains(&n)), "{spread:?}");
    }
}
