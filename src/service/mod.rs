//! The Tokio timer service: an actor task that owns a wheel, and cloneable handles to it.
//!
//! [`Scheduler::builder`] configures and spawns the actor. The key map is shared and split into
//! shards; a handle claims or releases a key and queues the matching request for the actor under
//! the shard's one lock, so duplicate checks, `contains`, `len` and cancels answer without waiting
//! for the actor. Due jobs start on a Tokio task apart from the wheel's.
//!
//! All time comes from `tokio::time`, so `tokio::time::pause()` and `advance()` drive the
//! service deterministically in tests.

mod actor;
mod builder;
mod clock;
mod command;
mod handle;
mod ids;
mod job;
mod key;
mod scheduled;
mod shared;

pub use builder::{Advance, Builder, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_SLOTS, DEFAULT_TICK};
pub use handle::{Repeat, Scheduler, Stats};
pub use scheduled::Scheduled;
