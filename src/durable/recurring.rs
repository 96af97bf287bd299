//! `DurableScheduler`'s calls for a series given as a [`Recurrence`]: a cron expression in a
//! time zone or a fixed rate, with its bounds and its missed-run policy. An `impl` block of its
//! own; how such a series is stored and moved on is `series.rs`.

use super::scheduler::DurableScheduler;
use super::series::{self, Stored};
use super::store::scripts::{self, Upserted};
use super::time::When;
use super::IntoPayload;
use crate::{Error, Recurrence};

impl DurableScheduler {
    /// Schedules the recurring task `key` with `payload`, run as `recurrence` says: on a cron
    /// expression in a time zone (`Recurrence::cron`, feature `cron`) or at a fixed rate
    /// (`Recurrence::every`), with its [limit](Recurrence::limit), [start](Recurrence::starting),
    /// [end](Recurrence::until) and [missed-run policy](Recurrence::missed). Each run is
    /// delivered to a worker's handler like any task ([`Task::due`](super::Task::due) is that
    /// run's time), and the series goes on as
    /// [`schedule_repeating`](Self::schedule_repeating) describes: once per run, whatever node
    /// ticks, failures retried, [`cancel`](Self::cancel) ends it while its next run waits.
    ///
    /// - **Time is Redis's.** A cron expression names wall-clock times in its zone (see
    ///   [`Recurrence`] for daylight saving); they are instants on Redis's clock, and no run is
    ///   handed out before its time. The first run is the recurrence's first after now (or at
    ///   or after its start), worked out on this node from its estimate of Redis's clock.
    /// - **Placed atomically.** The recurrence is stored with the task in Redis, so any node can
    ///   move it on. When a run ends, the worker that ran it works out the next run's time (Lua,
    ///   in Redis, cannot read a calendar) and hands it to the script that records the run's
    ///   end, which places it in the same step: a run is ended once, so no run is handed out
    ///   twice by the wheel, whatever nodes race. (A fixed rate without an end is moved on in
    ///   Redis itself, as `schedule_repeating`'s.)
    /// - **Missed runs**: after a time when nothing ran the series (every node down, or Redis
    ///   away), the default here is [`MissedRuns::Skip`](crate::MissedRuns::Skip) for every
    ///   recurrence: one run stands for the missed ones, then the series is back on its
    ///   schedule. [`Burst`](crate::MissedRuns::Burst), when given, makes up at most
    ///   [`MAX_BURST`](super::MAX_BURST) of them; [`Delay`](crate::MissedRuns::Delay) shifts a
    ///   fixed rate, and is `Skip` for a cron expression.
    /// - A run given up after its last attempt goes to the dead letters as a copy and the series
    ///   goes on with its next run; if the run's last lease ran out (its worker died), the next
    ///   run is due at once and the series is back on its schedule after it.
    /// - Every node that runs workers must be of this version or later: an older one cannot
    ///   read the stored recurrence.
    ///
    /// # Examples
    /// ```no_run
    /// # #[cfg(feature = "cron")]
    /// # async fn run(timers: tokio_timewheel::durable::DurableScheduler) -> Result<(), tokio_timewheel::Error> {
    /// use tokio_timewheel::durable::Recurrence;
    ///
    /// // The nightly report, at 03:00 Berlin time, summer and winter.
    /// let nightly = Recurrence::cron("0 3 * * *")?.in_tz("Europe/Berlin")?;
    /// timers.schedule_recurring("report:nightly", nightly, "all").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a task is pending under `key` (see
    ///   [`upsert_recurring`](Self::upsert_recurring) to replace it);
    /// - [`Error::Invalid`] for a recurrence [`validate`](Recurrence::validate) refuses, a
    ///   period that is not a whole number of milliseconds, a recurrence with no run left after
    ///   now (an end already past), or the input [`schedule`](Self::schedule) refuses;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still schedule the series.
    pub async fn schedule_recurring(
        &self,
        key: impl AsRef<str>,
        recurrence: impl Into<Recurrence>,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let payload = self.checked(key, payload)?;
        let series = series::store(&recurrence.into(), self.wheel.clock.now_ms())?;
        let task = self.new_task(key, When::At(series.first_due_ms), payload);
        self.schedule_series(task, &series).await
    }

    /// Makes the task under `key` the series `recurrence` with `payload`, whatever is pending
    /// there, in one atomic step; returns `true` if it made the task (none was pending) and
    /// `false` if one was pending. For a series whose definition is kept in code or
    /// configuration and applied at every start of every node (the deploy pattern): an upsert
    /// that changes nothing keeps the series as it runs, and no run is lost to it.
    ///
    /// What it does, by what is pending under `key` when the call reaches Redis:
    /// - **the same series**: nothing changes, and the series keeps its next run, so its phase.
    ///   The same means the same cadence (period, or cron expression and zone), end, missed-run
    ///   policy, [`TaskOptions`](super::TaskOptions) and payload, and no more runs left than
    ///   `recurrence`'s [limit](Recurrence::limit) (a counted series that ran some of its runs
    ///   is still the same series; the record keeps the runs left, not the limit, so an upsert
    ///   that only raises a limit keeps the series too: cancel it and schedule it again to raise
    ///   one). The first run's time, which this call works out anew at
    ///   each start (and a [start](Recurrence::starting) that moved), is not compared: to move a
    ///   series' phase, [`reschedule`](Self::reschedule) its next run, or cancel it and schedule
    ///   it again.
    /// - **a run in flight** (a worker runs it, or its lease ran out and it waits to be handed
    ///   out again, or it failed and waits for its retry): the run is finished first, as
    ///   at-least-once promises (a run killed with its node is delivered again after its lease,
    ///   as its next attempt), its one outcome recorded in the history; the new series waits
    ///   behind it and takes the place of whatever the run's end would have placed next (its
    ///   first run due at its own time, at once if that has passed by then). A later upsert
    ///   replaces the one waiting; an upsert of the series in flight drops it. So a key never has
    ///   two runs at once, and at most one series waits behind a run.
    /// - **another series, or a one-shot task, waiting**: replaced whole, its recurrence, its
    ///   payload and its next run, which is the new recurrence's first.
    ///
    /// Concurrent upserts of one key, from any nodes, leave one series: the last to reach Redis,
    /// whole. After [`cancel`](Self::cancel), an upsert schedules the key again (and answers
    /// `true`); a `cancel` of a run in flight drops a series queued behind it.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(timers: tokio_timewheel::durable::DurableScheduler) -> Result<(), tokio_timewheel::Error> {
    /// use tokio_timewheel::durable::Recurrence;
    ///
    /// // At every start of a node: the sync runs every 10 minutes. A restart keeps its next run
    /// // (the same series); a deploy that changes the period or the payload replaces it.
    /// let made = timers.upsert_recurring("sync:crm", Recurrence::every(Duration::from_secs(600)), "crm").await?;
    /// println!("{}", if made { "scheduled" } else { "applied" });
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`schedule_recurring`](Self::schedule_recurring), but never `DuplicateKey`.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still make or replace the series.
    pub async fn upsert_recurring(
        &self,
        key: impl AsRef<str>,
        recurrence: impl Into<Recurrence>,
        payload: impl IntoPayload,
    ) -> Result<bool, Error> {
        let key = key.as_ref();
        let payload = self.checked(key, payload)?;
        let series: Stored = series::store(&recurrence.into(), self.wheel.clock.now_ms())?;
        let keys = &self.wheel.partition_of(key).keys;
        let task = self.new_task(key, When::At(series.first_due_ms), payload);
        let answer = scripts::upsert(&self.wheel, keys, &self.wheel.ids.next(), &task, &series).await?;
        self.wheel.conn.replicate(&keys.meta()).await?;
        Ok(answer == Upserted::Created)
    }
}
