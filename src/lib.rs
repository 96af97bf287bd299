#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, rust_2018_idioms)]

mod error;
mod service;
pub mod wheel;

pub use error::Error;
pub use service::{
    Advance, Builder, Repeat, Scheduled, Scheduler, Stats, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_SLOTS,
    DEFAULT_TICK,
};
