//! The guide: how to do each thing, a page a topic, with examples that are doctests (built
//! with every feature; the ones that need Redis are compiled, not run).
//!
//! The pages, in reading order: `recurring` (both modes); for the durable mode,
//! `durable_mode`, `operating` and `command_line`, which need the `redis` feature (docs.rs
//! documents every feature); `traces` and `security` (both modes).
//!
//! The crate's front page says what it is for, its features and the quick start. The rules
//! live with the items they govern, and the pages link to them: [`Scheduler`](crate::Scheduler)
//! (guarantees, errors, cancel safety), [`Recurrence`](crate::Recurrence) (cron syntax, daylight
//! saving), [`MissedRuns`](crate::MissedRuns) (each mode's default for missed runs), and with the
//! `redis` feature the `durable` module (the durable mode's semantics, Redis settings,
//! deployments and layout in Redis).
//!
//! This module holds no code.

#[doc = include_str!("recurring.md")]
pub mod recurring {}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[doc = include_str!("durable_mode.md")]
pub mod durable_mode {}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[doc = include_str!("operating.md")]
pub mod operating {}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[doc = include_str!("command_line.md")]
pub mod command_line {}

#[doc = include_str!("traces.md")]
pub mod traces {}

#[doc = include_str!("security.md")]
pub mod security {}
