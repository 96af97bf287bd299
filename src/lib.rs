#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod durable;
mod error;
pub mod guide;
mod lateness;
#[cfg(test)]
mod layering;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod origin;
mod recurrence;
mod service;
pub mod wheel;

// The crate's own durable tests share the integration tests' support code, which names the
// crate `tokio_timewheel`.
#[cfg(all(test, feature = "redis"))]
extern crate self as tokio_timewheel;

pub use error::{Error, MAX_KEY_LEN};
pub use lateness::{Lateness, LATENESS_WINDOW};
pub use recurrence::{MissedRuns, Recurrence, Repeat};
pub use service::{
    Advance, Builder, CancelOnDrop, Expirations, Scheduled, Scheduler, Stats, TimerGuard, TimerHandle, TimerQueue,
    WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_LAG_WARNING, DEFAULT_NAME, DEFAULT_SLOTS, DEFAULT_TICK, MIN_TICK,
};
