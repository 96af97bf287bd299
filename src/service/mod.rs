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
//!
//! Where things are: the table of docs/DESIGN.md, the one map of these files (dependencies
//! point down it only; the crate's `layering` tests hold the code to it).

mod actor;
mod builder;
mod clock;
mod config;
mod handle;
mod index;
mod job;
mod key;
mod metrics;
#[cfg(feature = "metrics")]
mod publish;
mod queue;
mod scheduled;
mod scheduler;
mod shards;
mod stats;
mod sync;
mod timer;

pub use builder::Builder;
pub use config::{
    Advance, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_LAG_WARNING, DEFAULT_NAME, DEFAULT_SLOTS, DEFAULT_TICK,
    MIN_TICK,
};
pub use handle::{TimerGuard, TimerHandle};
pub use queue::{Expirations, TimerQueue};
pub use scheduled::{CancelOnDrop, Scheduled};
pub use scheduler::Scheduler;
pub use stats::Stats;
