//! What a handler receives: `Task`, one delivery of a due task. The files beside it hold what the
//! wheel's reads answer, one concern a file.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod dead;
mod info;
#[cfg(feature = "serde")]
mod json;
mod page;
mod stats;

pub use dead::DeadTask;
pub use info::{FinishedRun, Outcome, TaskInfo, TaskState};
pub(crate) use page::finished_places;
pub use page::{ListCursor, ListPage};
pub use stats::{DurableStats, Figures, MinuteCounts};

/// One delivery of a due task to a [`Worker`](super::Worker)'s handler.
///
/// Delivery is at least once: the same task can reach a handler again (with a higher
/// [`attempt`](Self::attempt)) if a worker died or its lease ran out before it acknowledged, so
/// make handlers idempotent on the [`key`](Self::key).
///
/// Two tasks are equal when their deliveries are (key, payload, attempt, due and claim times):
/// their [`cancel_token`](Self::cancel_token)s are not compared.
#[derive(Debug, Clone)]
pub struct Task {
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u32,
    pub(crate) due: SystemTime,
    pub(crate) claimed_at: SystemTime,
    /// Cancelled when the handler should stop: see [`Task::cancel_token`].
    pub(crate) cancel: tokio_util::sync::CancellationToken,
    /// The snooze asked for by [`Task::snooze`], in ms plus one (0: none), shared by clones.
    pub(crate) snooze: Arc<AtomicU64>,
}

impl PartialEq for Task {
    fn eq(&self, other: &Self) -> bool {
        (&self.key, &self.payload, self.attempt, self.due, self.claimed_at)
            == (&other.key, &other.payload, other.attempt, other.due, other.claimed_at)
    }
}

impl Eq for Task {}

/// Building a delivery by hand, to unit-test a handler without Redis.
impl Task {
    /// A first delivery of `key` with `payload`, due and claimed now, with a cancel token of its
    /// own: what a worker would hand a handler, for the handler's unit tests. The `with_`
    /// methods set the rest; cancel the [`cancel_token`](Self::cancel_token) to play a
    /// [`cancel_running`](super::DurableScheduler::cancel_running).
    ///
    /// # Examples
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tokio_timewheel::durable::Task;
    ///
    /// async fn review(task: Task) -> Result<(), String> {
    ///     if task.attempt() > 3 { return Err(format!("{} gave up", task.key())) }
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let due = SystemTime::now() - Duration::from_secs(2);
    /// let task = Task::new("order-42:review", "42").with_attempt(4).with_due(due);
    /// assert_eq!(review(task).await, Err("order-42:review gave up".to_string()));
    /// # }
    /// ```
    pub fn new(key: impl Into<String>, payload: impl Into<Vec<u8>>) -> Task {
        let now = SystemTime::now();
        Task {
            key: key.into(),
            payload: payload.into(),
            attempt: 1,
            due: now,
            claimed_at: now,
            cancel: tokio_util::sync::CancellationToken::new(),
            snooze: Arc::default(),
        }
    }

    /// This delivery as attempt `attempt` (1 is the first delivery; 0 reads as 1).
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Task {
        self.attempt = attempt.max(1);
        self
    }

    /// This delivery due at `due`.
    #[must_use]
    pub fn with_due(mut self, due: SystemTime) -> Task {
        self.due = due;
        self
    }

    /// This delivery claimed at `claimed_at`.
    #[must_use]
    pub fn with_claimed_at(mut self, claimed_at: SystemTime) -> Task {
        self.claimed_at = claimed_at;
        self
    }
}

impl Task {
    /// The key the task was scheduled under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload given to `schedule`; empty for a [`Finished`](TaskState::Finished) run,
    /// whose payload the history does not keep.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Which delivery this is: 1 on the first, 2 after one failure or one expired lease, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the task was due, on Redis's clock (for a retry: when the retry was due).
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// When a worker claimed this delivery, on Redis's clock (whole milliseconds, rounded up):
    /// from then on the task is running, and `cancel` leaves it to its lease. `claimed_at - due`
    /// is how late it was handed out.
    pub fn claimed_at(&self) -> SystemTime {
        self.claimed_at
    }

    /// A token that is cancelled when this delivery's handler should stop, at once, of its own
    /// accord (it is also dropped at the bounds below, at its next `.await`, but a handler that
    /// watches the token can end cleanly, say by giving up a call in flight):
    ///
    /// - [`cancel_running`](super::DurableScheduler::cancel_running) was called for its key, from
    ///   any node: whatever the handler then returns, the task ends as cancelled (neither retried
    ///   nor a dead letter);
    /// - the worker learned that the delivery's lease went to another worker (it was cut off
    ///   from Redis or paused past its lease): its outcome will not be recorded;
    /// - the worker is stopping with [`shutdown_timeout`](super::Worker::shutdown_timeout),
    ///   whose bound is near: at a tenth of the bound (at most a second) before it;
    /// - the [handler timeout](super::DurableBuilder::handler_timeout) is near: a tenth of it (at
    ///   most a second) before it.
    ///
    /// Clones of the task share the token.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::{DurableScheduler, Task};
    ///
    /// # async fn export(_key: &str) -> Result<(), std::io::Error> { Ok(()) }
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|task: Task| async move {
    ///     let token = task.cancel_token();
    ///     tokio::select! {
    ///         done = export(task.key()) => done,
    ///         () = token.cancelled() => Ok(()), // stop the export; the task ends as cancelled
    ///     }
    /// });
    /// # }
    /// ```
    pub fn cancel_token(&self) -> tokio_util::sync::CancellationToken {
        self.cancel.clone()
    }

    /// Asks for this run to end as *snoozed* when the handler returns, whether it returns `Ok` or
    /// `Err`: "not yet". The task is due again `delay` after the run ends (on the store's clock),
    /// as the waiting task it was, under the same key and with the same payload:
    ///
    /// - its [`attempt`](Self::attempt) does not grow (the next delivery has the same number),
    ///   and a snooze never makes a dead letter, however often it comes;
    /// - the history records the run as [`Outcome::Snoozed`];
    /// - [`cancel`](super::DurableScheduler::cancel) and
    ///   [`reschedule`](super::DurableScheduler::reschedule) treat it as any waiting task; a
    ///   [`cancel_running`](super::DurableScheduler::cancel_running) that reached this run ends
    ///   it as cancelled instead;
    /// - an [`upsert_recurring`](super::DurableScheduler::upsert_recurring) queued behind the run
    ///   keeps waiting, as behind a retry.
    ///
    /// The last call wins. `delay` is clamped to [`MAX_SNOOZE`](Self::MAX_SNOOZE) (about 30
    /// years, as `tokio::time::sleep` clamps its far deadlines), so a huge delay parks the task
    /// rather than failing the run. A snooze asked for after the lease was lost, or after a
    /// timeout, changes nothing: that run's outcome is not recorded.
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// use tokio_timewheel::durable::{DurableScheduler, Task};
    ///
    /// # async fn order_ready(_key: &str) -> bool { true }
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|task: Task| async move {
    ///     if !order_ready(task.key()).await {
    ///         task.snooze(Duration::from_secs(30 * 60)); // look again in 30 minutes
    ///     }
    ///     Ok::<(), String>(())
    /// });
    /// # }
    /// ```
    pub fn snooze(&self, delay: Duration) {
        let ms = crate::durable::time::ceil_ms(delay.min(Self::MAX_SNOOZE));
        self.snooze.store(ms + 1, Ordering::Relaxed);
    }

    /// The longest [`snooze`](Self::snooze): longer ones are clamped to it (30 years).
    pub const MAX_SNOOZE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

    /// The delay [`snooze`](Self::snooze) asked for, if it was called (after the clamp).
    pub fn snoozed(&self) -> Option<Duration> {
        match self.snooze.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms - 1)),
        }
    }

    /// Takes the task apart into its key and payload.
    pub fn into_parts(self) -> (String, Vec<u8>) {
        (self.key, self.payload)
    }

    /// The payload read as JSON into a `T`: the other half of a [`Json`](super::Json) payload.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::{DurableScheduler, Task};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Review {
    ///     order: u64,
    /// }
    ///
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|task: Task| async move {
    ///     let review: Review = task.json()?;
    ///     println!("review order {}", review.order);
    ///     Ok::<(), tokio_timewheel::Error>(())
    /// });
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Payload`](crate::Error::Payload) when the payload is not the JSON of a `T` (it
    /// was scheduled with another type, or as bytes). Returned from a handler, that fails the
    /// delivery like any error: it is retried, then goes to the dead letters, where
    /// [`DeadTask::json`] reads it the same way.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::Error> {
        super::payload::from_json(&self.key, &self.payload)
    }
}
