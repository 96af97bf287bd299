//! What both modes' recurring timers share: when they run ([`Recurrence`], in `series.rs`, on a
//! cron expression in `cron.rs` with the `cron` feature), how many runs ([`Repeat`]) and what
//! becomes of runs missed while nothing could fire them ([`MissedRuns`]). Neither mode owns
//! these: the in-process [`Scheduler`](crate::Scheduler) and the durable mode both take them.

#[cfg(feature = "cron")]
mod cron;
mod series;

pub use series::Recurrence;

/// How many times a repeating timer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// This many runs, then the timer ends (its [`Scheduled`](crate::Scheduled) resolves `Ok`).
    /// Must be at least 1.
    Times(u64),
    /// Until cancelled or the service stops.
    Forever,
}

/// What a repeating timer does about runs it missed, like tokio's `MissedTickBehavior`: runs
/// whose time had come and gone when the run before them fired (the service or its runtime was
/// held up, or the timer was moved into the past). A run is missed when it is already due as
/// the run before it fires; a run merely late, by less than a period, misses nothing, and the
/// timer keeps its fixed rate under every policy. Given per timer to
/// [`Scheduler::schedule_repeating_with`](crate::Scheduler::schedule_repeating_with) or
/// [`Recurrence::missed`].
///
/// **The default is one per mode, whatever the call and the cadence** (a fixed rate or a cron
/// expression):
/// - **in process, [`Burst`](MissedRuns::Burst)**, as tokio's `Interval`: a missed run is a
///   stall of the runtime, and a game tick or a cooldown makes its runs up, at most 100,000
///   of them (the earlier ones are skipped), so a long stall, or paused time jumping far ahead,
///   does not fire one timer millions of times;
/// - **durable, [`Skip`](MissedRuns::Skip)** (`DurableScheduler::schedule_repeating`,
///   `schedule_recurring`, `upsert_recurring`): missed runs there come from an outage (every node
///   down, or Redis away), and a nightly report made up ten times in a row would be ten wrong
///   runs, so one run stands for them and the series goes on at its next time. `Burst`, when
///   given, makes up at most `durable::MAX_BURST` runs there (the earlier ones are skipped).
///
/// Runs counted by [`Repeat::Times`] are runs made: a run skipped is not counted.
///
/// # Examples
/// ```
/// # use std::time::Duration;
/// # use tokio_timewheel::{Error, MissedRuns, Repeat, Scheduler};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let timer = Scheduler::builder().start()?;
/// // A status report every 10 s: after a stall, one report now, the next 10 s later.
/// timer.schedule_repeating_with("report", Duration::from_secs(10), Repeat::Forever, MissedRuns::Delay, |_| async {}).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MissedRuns {
    /// Makes up every missed run at once, one after the other, then goes on at the fixed rate
    /// (runs stay due at `start + n * period`). The default, as for tokio's `Interval`.
    #[default]
    Burst,
    /// Runs once for the missed runs, then a period after that run fired: the schedule shifts
    /// by the delay.
    Delay,
    /// Runs once for the missed runs, then at the next run of the original schedule
    /// (`start + n * period`) after that one fired: the missed runs are skipped.
    Skip,
}

#[cfg(test)]
mod tests;
