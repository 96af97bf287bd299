//! The settings a [`Builder`](super::Builder) collects that other parts of the service read: the
//! kinds of wheel and advance, and the defaults.

use std::time::Duration;

/// The default tick: 1 ms, the resolution of Tokio's own timer.
pub const DEFAULT_TICK: Duration = Duration::from_millis(1);
/// The shortest tick [`Builder::start`](super::Builder::start) accepts: 1 ms, the resolution of
/// Tokio's timer, which cannot wake the service more often than that.
pub const MIN_TICK: Duration = Duration::from_millis(1);
/// The default number of buckets per wheel level (or in the rounds ring).
pub const DEFAULT_SLOTS: usize = 64;
/// The default capacity of the channel that carries `flush` and `stop` to the actor.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 1024;

/// The default of [`Builder::name`](super::Builder::name).
pub const DEFAULT_NAME: &str = "default";

/// The default of [`Builder::lag_warning`](super::Builder::lag_warning): warn when timers fire
/// more than 100 ticks late (100 ms at the default tick).
pub const DEFAULT_LAG_WARNING: u64 = 100;

/// Which timing wheel the service keeps its timers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WheelKind {
    /// Kafka-style levels that reach any deadline; cheap for far and sparse timers, and lets the
    /// actor sleep straight to the next due bucket. The default.
    #[default]
    Hierarchical,
    /// One ring of `slots` buckets with a rounds count per timer; simple and quick when nearly
    /// all delays fit in one revolution (`slots * tick`), wasteful for far deadlines.
    Rounds,
}

/// How the actor moves the wheel's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Advance {
    /// Sleep until the wheels' next due bucket, woken early by a new timer due before it. Idle
    /// costs nothing. The default.
    #[default]
    NextDeadline,
    /// Wake on a `tokio::time::interval` of one tick (at least 1 ms, the resolution of Tokio's
    /// timer), like the classic ticker loop, whether or not anything is due.
    Interval,
}
