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
//! Where things are (dependencies point down this list only):
//! - `builder.rs`: [`Builder`], which spawns the actor and hands out the first [`Scheduler`];
//! - `scheduler.rs`: the handle, [`Scheduler`]; `scheduled.rs`: the [`Scheduled`] future and
//!   its [`CancelOnDrop`] guard; `queue.rs`: [`TimerQueue`] and its [`Expirations`] stream;
//! - `actor.rs`: the actor's loop and the commands it takes over its channel;
//! - `shards/`: the timers shared by both: routing and `max_pending` (`mod.rs`), one shard's key
//!   map and wheel (`shard.rs`, `wheel.rs`), the fire path (`fired.rs`), the wake-up protocol
//!   between handles and actor (`wake.rs`), the watchers behind `Scheduled` (`watch.rs`);
//! - `timer.rs` (what a wheel entry holds), `job.rs` (how jobs start), `key.rs` and `index.rs`
//!   (keys and the key map), `clock.rs` (instants to ticks), `stats.rs`, `config.rs`,
//!   `publish.rs` (the metrics, every second, with the `metrics` feature), and
//!   `sync.rs` (std's or loom's locks and atomics).

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
