//! The Tokio timer service: shards of timers, an actor task that moves their wheels on, and
//! cloneable handles.
//!
//! [`Scheduler::builder`] configures and spawns the actor. The timers are split into shards by
//! key, each a key map and a wheel behind one lock; a handle claims a key and places its timer in
//! the shard's wheel, or releases it, under that lock, so every request is complete when its call
//! returns and none waits for the actor. The actor advances the wheels and starts due jobs on a
//! Tokio task apart from its own.
//!
//! All time comes from `tokio::time`, so `tokio::time::pause()` and `advance()` drive the
//! service deterministically in tests.

mod actor;
mod builder;
mod clock;
mod command;
mod handle;
mod index;
mod job;
mod key;
mod scheduled;
mod shared;

pub use builder::{Advance, Builder, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_SLOTS, DEFAULT_TICK};
pub use handle::{Repeat, Scheduler, Stats};
pub use scheduled::Scheduled;
