//! When a handle must wake the actor, and when it need not.
//!
//! The actor publishes the tick it will wake at anyway (`next_wake`). A handle that places a timer
//! due before then, or finds that wake-up overdue, wakes it through `ready`; everything else waits
//! for that wake-up, so a burst of schedules and cancels costs no task switch per request.
//!
//! # Why no due timer is left behind
//! The actor stores `next_wake` and *then* looks at every shard's next deadline, each under the
//! shard's lock. A handle places its timer and *then* reads `next_wake`, under the same lock. So
//! for any timer, either the actor's look comes after the placing (under the lock, it sees the
//! timer and advances again at once), or the handle's read comes after the store (it sees the new
//! `next_wake` and wakes the actor if the timer is due before it). `signalled` only saves repeated
//! notifications: the actor clears it before it advances the shards, so a handle that locks a
//! shard after that advance sees it cleared.

use std::sync::atomic::Ordering::Relaxed;

use super::super::sync::{AtomicBool, AtomicU64, Notify};

pub(super) struct Wake {
    /// The tick the actor wakes at without being told (`u64::MAX`: not at all; 0: on every tick,
    /// so that no timer is urgent).
    next_wake: AtomicU64,
    /// Wakes the actor for timers that cannot wait; `signalled` is set while a wake-up is on its
    /// way.
    ready: Notify,
    signalled: AtomicBool,
}

impl Wake {
    pub fn new() -> Self {
        Wake { next_wake: AtomicU64::new(u64::MAX), ready: Notify::new(), signalled: AtomicBool::new(false) }
    }

    /// Whether a timer set at tick `set_at` and due at `deadline` cannot wait for the actor's
    /// next wake-up: it is due before it, or that wake-up is overdue (the runtime has not got
    /// round to it: the actor is nudged at most about once per tick then).
    pub fn urgent(&self, set_at: u64, deadline: u64) -> bool {
        let wake = self.next_wake.load(Relaxed);
        wake != 0 && (deadline < wake || set_at >= wake)
    }

    /// Wakes the actor unless a wake-up is already on its way. Called under a shard's lock, so
    /// if the actor has advanced that shard since it last cleared `signalled`, this sees the
    /// cleared flag.
    pub fn wake_actor(&self) {
        if !self.signalled.load(Relaxed) && !self.signalled.swap(true, Relaxed) {
            self.ready.notify_one();
        }
    }

    /// For the actor: resolves when a timer has been placed that its next wake-up would be too
    /// late for.
    pub async fn ready(&self) {
        self.ready.notified().await
    }

    /// For the actor, before it advances the wheels: a timer placed from now on that cannot
    /// wait wakes it again.
    pub fn clear_signal(&self) {
        self.signalled.store(false, Relaxed);
    }

    /// For the actor, before it looks at the shards' next deadlines: publishes the tick it will
    /// wake at.
    pub fn publish(&self, tick: u64) {
        self.next_wake.store(tick, Relaxed);
    }

    /// Whether a wake-up is on its way.
    #[cfg(test)]
    pub fn signalled(&self) -> bool {
        self.signalled.load(Relaxed)
    }

    /// For the `loom` models: takes the permit a wake-up left.
    #[cfg(loom)]
    pub fn take_permit(&self) -> bool {
        self.ready.take_permit()
    }
}
