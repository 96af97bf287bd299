//! `TaskOptions`: a task's own retry settings, in place of the node's, and their checks. Their
//! text in the task's record (the optional retry field of `store/lua/includes/record.lua`) is
//! the stores' business: `store/formats.rs`'s `Retry`.

use std::time::Duration;

use super::config::MAX_BACKOFF;
use super::time::ceil_ms;
use crate::Error;

/// A task's own retry settings, in place of the node's
/// [`max_attempts`](super::DurableBuilder::max_attempts) and
/// [`backoff`](super::DurableBuilder::backoff): what BullMQ's job options `attempts` and
/// `backoff` and asynq's `MaxRetry` are. A setting left out is the node's.
///
/// Tasks get them from the handle that schedules them:
/// [`DurableScheduler::with_options`](super::DurableScheduler::with_options) checks them once and
/// gives a handle whose every call that makes a task (`schedule` and its `_at` and
/// `_many` forms, `schedule_or_reset`, the recurring ones) gives it these settings. The task keeps
/// them in its record in Redis, so whichever node records its failure or finds its lease run out
/// uses them; a task without them costs nothing extra and follows the settings of that node.
///
/// What keeps or replaces them:
/// - [`reschedule`](super::DurableScheduler::reschedule) and a
///   [`schedule_or_reset`](super::DurableScheduler::schedule_or_reset) that moves a pending task
///   keep the task's own (as they keep its payload);
/// - [`upsert_recurring`](super::DurableScheduler::upsert_recurring) replaces them with the
///   upserting handle's, as it replaces the rest of the series (none when that handle has none);
/// - each run of a recurring task has them, and a retry keeps them;
/// - a dead letter keeps them, and [`requeue_dead`](super::DurableScheduler::requeue_dead) puts
///   the task back with them.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use tokio_timewheel::durable::{DurableScheduler, TaskOptions};
///
/// # async fn run(timers: DurableScheduler) -> Result<(), tokio_timewheel::Error> {
/// // A webhook is tried 10 times, 30 s apart at first (then 60 s, 120 s, ...), whatever the
/// // node's settings; an email once.
/// let webhooks = timers.with_options(TaskOptions::new().max_attempts(10).backoff(Duration::from_secs(30)))?;
/// webhooks.schedule("webhook:order-42", Duration::ZERO, "https://example.com/hook").await?;
/// let once = timers.with_options(TaskOptions::new().max_attempts(1))?;
/// once.schedule("email:order-42", Duration::from_secs(60), "order 42 shipped").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[must_use = "options do nothing until given to DurableScheduler::with_options"]
pub struct TaskOptions {
    max_attempts: Option<u32>,
    backoff: Option<Duration>,
}

impl TaskOptions {
    /// No settings of the task's own: every one is the node's.
    pub const fn new() -> Self {
        TaskOptions { max_attempts: None, backoff: None }
    }

    /// How many deliveries the task gets before a failing one goes to the dead letters: 1 for a
    /// task that is never retried. At least 1, checked by
    /// [`with_options`](super::DurableScheduler::with_options).
    pub const fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The base of the task's exponential backoff: it is retried `backoff * 2^(n-1)` after its
    /// `n`th failed delivery, at most [`MAX_BACKOFF`] (so a backoff of [`MAX_BACKOFF`] retries at
    /// a fixed rate). Rounded up to whole milliseconds; zero retries at once. At most
    /// [`MAX_BACKOFF`], checked by [`with_options`](super::DurableScheduler::with_options).
    pub const fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Whether every setting is the node's.
    pub(crate) fn is_empty(&self) -> bool {
        self.max_attempts.is_none() && self.backoff.is_none()
    }

    /// The task's own max attempts, if it has them.
    pub(crate) fn own_max_attempts(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The task's own backoff base in whole ms, if it has one.
    pub(crate) fn own_backoff_ms(&self) -> Option<u64> {
        self.backoff.map(ceil_ms)
    }

    /// [`Error::Invalid`] for settings no task may have: zero attempts, a backoff over
    /// [`MAX_BACKOFF`].
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.max_attempts == Some(0) {
            return Err(Error::invalid(
                "TaskOptions::max_attempts must be at least 1 (the first delivery counts): give 1 for a task that \
                 is never retried",
            ));
        }
        if let Some(backoff) = self.backoff.filter(|b| *b > MAX_BACKOFF) {
            return Err(Error::invalid(format!(
                "TaskOptions::backoff of {backoff:?} is over MAX_BACKOFF ({MAX_BACKOFF:?}), the longest a retry \
                 waits: give at most that (a retry never waits longer)"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_attempts_and_a_backoff_over_the_cap_are_refused() {
        assert!(TaskOptions::new().check().is_ok());
        assert!(TaskOptions::new().max_attempts(1).backoff(MAX_BACKOFF).check().is_ok());
        for bad in
            [TaskOptions::new().max_attempts(0), TaskOptions::new().backoff(MAX_BACKOFF + Duration::from_millis(1))]
        {
            assert!(matches!(bad.check(), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}
