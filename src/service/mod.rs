//! The Tokio timer service: an actor task that owns a wheel, and cloneable handles to it.
//!
//! [`Scheduler::builder`] configures and spawns the actor. Handles send it requests over a
//! bounded channel; the key map is shared, so duplicate checks, `contains`, `len` and cancels
//! answer without waiting for the actor. Due jobs start on a Tokio task apart from the wheel's.
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
