//! The synchronisation that handles and the actor share: the shards' locks and the atomics of the
//! wake-up protocol and of `max_pending`.
//!
//! Built from `std` normally, and from `loom` under `--cfg loom`, so that `loom` can run the
//! models in `shards/loom.rs` through every interleaving of these operations (the pattern of
//! tokio's own `loom` module). Under `loom`, tokio's `Notify` is replaced by a permit flag that
//! the models read: they call the protocol's steps directly and never run the actor's loop.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Wakes the actor: tokio's `Notify`, whose `notify_one` leaves a permit when nobody waits.
#[cfg(not(loom))]
pub(crate) type Notify = tokio::sync::Notify;

/// Under `loom`: the permit alone, for the models to take.
#[cfg(loom)]
#[derive(Default)]
pub(crate) struct Notify(AtomicBool);

#[cfg(loom)]
impl Notify {
    pub fn new() -> Self {
        Notify(AtomicBool::new(false))
    }

    pub fn notify_one(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Takes the permit, if one was left.
    pub fn take_permit(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::Acquire)
    }

    /// The actor's loop is not run under `loom`.
    pub async fn notified(&self) {
        std::future::pending().await
    }
}
