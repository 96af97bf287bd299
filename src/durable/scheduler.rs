//! `DurableScheduler`: the cheap, cloneable handle to a wheel kept in Redis.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::coalesce::{self, Calls};
use super::series::Stored;
use super::store::client::WheelClient;
use super::store::scripts::{self, NewTask, ScheduleAnswer};
use super::time::{delay_ms, When};
use super::{IntoPayload, Task, TaskOptions, Worker};
use crate::origin::Origin;
use crate::Error;

/// A handle to a durable timing wheel kept in Redis, shared by every node that connects to it.
///
/// `Clone + Send + Sync`; a clone shares the connection. Tasks are scheduled by key with a
/// payload, fire at their due time (on Redis's clock) and are handed to a [`Worker`]'s handler;
/// see the [module docs](super) for the guarantees and the Redis settings they need.
///
/// Every call that takes a key refuses an empty one, or one over
/// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, with [`Error::Invalid`] before anything is sent,
/// the rule of the in-process [`Scheduler`](crate::Scheduler) too.
///
/// # Concurrent calls go together
/// The [`schedule`](Self::schedule), [`cancel`](Self::cancel) and
/// [`reschedule`](Self::reschedule) calls (and their `_at` forms) of a handle and its clones are
/// coalesced, as a batching client does: a call that finds fewer than two calls of its kind on the
/// wire (per partition) goes at once, with no timer or linger; calls that come while two are on
/// the wire wait, and go together as one script call when one of those returns. So many
/// concurrent callers cost Redis one script call a batch rather than one each, and a lone caller
/// is not slowed down. A batch carries at most 64 schedules or reschedules, or
/// 128 cancels, and at most 1 MiB of keys and payloads; a payload too heavy to share a batch goes
/// alone, and the lighter calls behind it do not wait for it.
///
/// Each caller gets its own answer ([`Error::DuplicateKey`], `false`, [`Error::NotFound`]) and
/// its own error: a call refused by its checks (an empty key, a payload over the maximum) fails
/// before it is queued and never reaches a batch; a failure of the whole script call (Redis away,
/// say) is the error of every caller in the batch. A batch is retried as a unit, with the same
/// request ids, so it is as safe to retry as a single call. [`schedule_many`](Self::schedule_many)
/// and [`cancel_many`](Self::cancel_many) send their own batches directly.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use tokio_timewheel::durable::DurableScheduler;
///
/// # async fn run() -> Result<(), tokio_timewheel::Error> {
/// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").connect().await?;
/// timers.schedule("order-42:review", Duration::from_secs(48 * 3600), b"order-42".to_vec()).await?;
/// assert!(timers.contains("order-42:review").await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DurableScheduler {
    pub(crate) wheel: Arc<WheelClient>,
    /// The calls in flight of this handle and its clones, coalesced per partition and kind.
    calls: Arc<Calls>,
    /// The retry settings of the tasks this handle makes (checked; empty for the node's), set by
    /// [`with_options`](Self::with_options).
    options: TaskOptions,
}

impl fmt::Debug for DurableScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableScheduler")
            .field("name", &self.wheel.name())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl DurableScheduler {
    /// The handle to a wheel just opened.
    pub(crate) fn new(wheel: WheelClient) -> Self {
        let wheel = Arc::new(wheel);
        let calls = Arc::new(Calls::new(&wheel));
        DurableScheduler { wheel, calls, options: TaskOptions::new() }
    }

    /// A handle whose every task gets the retry settings `options` in place of the node's: each
    /// call of it that makes a task ([`schedule`](Self::schedule), [`schedule_at`](Self::schedule_at),
    /// [`schedule_many`](Self::schedule_many),
    /// [`schedule_or_reset`](Self::schedule_or_reset) when it schedules, and the recurring calls:
    /// [`schedule_repeating`](Self::schedule_repeating), [`schedule_recurring`](Self::schedule_recurring),
    /// [`upsert_recurring`](Self::upsert_recurring) and their forms) writes them into the task's
    /// record, and whichever node records a failure of the task, or finds its lease run out, uses
    /// them. A setting `options` leaves out is the node's; the returned handle's settings replace
    /// this one's whole. See [`TaskOptions`] for what keeps them.
    ///
    /// A clone of the handle, as cheap as [`clone`](Clone::clone): it shares the connection, and
    /// its calls are coalesced with this handle's (tasks with different settings go in one batch).
    /// Its other calls (`cancel`, `get`, `run`, ...) are this handle's. Keep one per kind of task
    /// ("webhooks are tried 10 times"), or make one for a single call.
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// use tokio_timewheel::durable::{DurableScheduler, TaskOptions};
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// // The node tries a task 5 times, 1 s apart at first.
    /// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").max_attempts(5).connect().await?;
    /// // This payment capture is tried twice, 10 s apart, then goes to the dead letters.
    /// let captures = timers.with_options(TaskOptions::new().max_attempts(2).backoff(Duration::from_secs(10)))?;
    /// captures.schedule("capture:order-42", Duration::from_secs(3600), "order-42").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for settings no task may have: `max_attempts(0)`, or a backoff over
    /// [`MAX_BACKOFF`](super::MAX_BACKOFF).
    pub fn with_options(&self, options: TaskOptions) -> Result<DurableScheduler, Error> {
        options.check()?;
        Ok(DurableScheduler { options, ..self.clone() })
    }

    /// The task `key`, due `when`, with `payload`, scheduled from the current span with this
    /// handle's retry settings.
    pub(super) fn new_task(&self, key: &str, when: When, payload: Vec<u8>) -> NewTask {
        NewTask::new(key.to_string(), when, payload).with_options(self.options)
    }

    /// Schedules a task under `key`, due `delay` after the call reaches Redis (on Redis's clock).
    ///
    /// It is handed to a worker's handler on the first tick at or after its due time, never
    /// before. A zero delay makes it due at once.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// match timers.schedule("order-42:review", Duration::from_secs(48 * 3600), b"order-42".to_vec()).await {
    ///     Ok(()) => {}
    ///     Err(Error::DuplicateKey(_)) => {} // already scheduled: nothing to do
    ///     Err(e) if e.is_retryable() => { /* Redis is away for now: try again later */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a task with this key is pending (it is left untouched);
    /// - [`Error::Invalid`] for an empty key or a payload over `max_payload`;
    /// - [`Error::Redis`] if Redis failed; the call retries transient failures with the same
    ///   request id for up to the connect timeout, so a schedule that did land is not repeated.
    ///
    /// # Cancel safety
    /// Dropping the future while the call waits for its batch takes it out (it is not sent);
    /// dropping it once its batch was sent may still schedule the task. Either way the other
    /// calls of the batch are not affected.
    pub async fn schedule(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        self.schedule_one(key, When::delay(delay)?, self.checked(key, payload)?, None).await
    }

    /// [`schedule`](Self::schedule) with a request id of the caller's choosing, for tests of
    /// retried requests: two calls with the same key and request id create one task.
    #[cfg(test)]
    pub(crate) async fn schedule_with_request_id(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl IntoPayload,
        request_id: &str,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        self.schedule_one(key, When::delay(delay)?, self.checked(key, payload)?, Some(request_id)).await
    }

    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub async fn schedule_at(
        &self,
        key: impl AsRef<str>,
        at: SystemTime,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        self.schedule_one(key, When::at(at)?, self.checked(key, payload)?, None).await
    }

    /// Schedules many tasks in few round trips, each as [`schedule`](Self::schedule) would.
    ///
    /// Returns one result per item, in order: `Ok`, or the item's own [`Error::DuplicateKey`] or
    /// [`Error::Invalid`]; the other items are scheduled regardless. A key given twice is
    /// scheduled once and the other item reports `DuplicateKey` (batches overlap, so which one
    /// wins is not fixed unless both are among the same 64 items, where the first wins).
    ///
    /// The items are checked (and their payloads taken) before the first call goes out, so the
    /// whole input is in memory at once; schedule millions in chunks.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let items = (0..1000).map(|i| (format!("order-{i}:review"), Duration::from_secs(60), Vec::new()));
    /// for result in timers.schedule_many(items).await? {
    ///     result?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed; batches sent before the failure stay scheduled, and
    /// calling again with the same items reports those as `DuplicateKey`.
    ///
    /// # Cancel safety
    /// Dropping the future may leave some of the items scheduled (whole batches of up to 64).
    pub async fn schedule_many<K, P>(
        &self,
        items: impl IntoIterator<Item = (K, Duration, P)>,
    ) -> Result<Vec<Result<(), Error>>, Error>
    where
        K: AsRef<str>,
        P: IntoPayload,
    {
        // Every item is checked and made a task before the first await, so that the caller's
        // iterator (often a closure over borrowed keys) is not held across one: it would keep
        // the future from being `Send` in a spawned task (rustc cannot prove a closure with
        // borrowed arguments `Send` for every lifetime). A bad item is its own error.
        let origin = Origin::current();
        let checked: Vec<Result<(usize, NewTask), Error>> = items
            .into_iter()
            .map(|(key, delay, payload)| {
                let key = key.as_ref();
                let payload = self.checked(key, payload);
                payload.and_then(|payload| Ok((payload, When::delay(delay)?))).map(|(payload, when)| {
                    (
                        self.wheel.partition_of(key).index,
                        NewTask { key: key.to_string(), when, payload, origin: origin.clone(), options: self.options },
                    )
                })
            })
            .collect();
        coalesce::schedule_many(&self.wheel, checked).await
    }

    /// Cancels the task under `key` if it has not started. Returns true if this call cancelled
    /// it: then no handler of that task starts after the call returns, on any node.
    ///
    /// What it answers, by the task's state when the call reaches Redis:
    /// - **waiting** (due later, in the wheel) or **ready** (due, not yet claimed by a worker):
    ///   removed, `true`; the key is free at once;
    /// - **running** (claimed by a worker under a live lease: its handler has started, or the
    ///   claim's reply is on its way, or it waits in the worker's buffer of tasks claimed ahead
    ///   of its free handlers, about 50 ms of work at most: see
    ///   [`prefetch`](super::DurableBuilder::prefetch)): left alone, `false`. Its lease runs its
    ///   course: an `Ok` from the handler acknowledges it, a failure retries it as usual. While
    ///   it runs, [`contains`](Self::contains) answers true; cancel it again after it failed if
    ///   it must not be retried;
    /// - a task whose lease ran out (its worker died, or was cut off from Redis) is no
    ///   longer running: it is removed, `true`, and the late handler's acknowledgement changes
    ///   nothing;
    /// - no task under the key (never scheduled, acknowledged, dead, or cancelled already):
    ///   `false`.
    ///
    /// This is the rule of BullMQ's `remove` and asynq's `DeleteTask`, which refuse an active
    /// job: a cancel that answered `true` is a promise the caller can build on.
    ///
    /// Safe under retries: a call retried after an ambiguous failure (a timeout whose first
    /// attempt did land) still returns true, and a late retry of the cancelled task's own
    /// `schedule` does not bring it back.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// timers.schedule("order-42:review", Duration::from_secs(60), Vec::new()).await?;
    /// assert!(timers.cancel("order-42:review").await?);
    /// assert!(!timers.cancel("order-42:review").await?, "nothing left to cancel");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future while the call waits for its batch takes it out (it is not sent);
    /// dropping it once its batch was sent may still cancel the task. Either way the other calls
    /// of the batch are not affected.
    pub async fn cancel(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        self.calls.cancel(self.wheel.partition_of(key).index, key.to_string()).await
    }

    /// Cancels the tasks under `keys` that have not started, returning for each whether this
    /// call cancelled it, by the rules of [`cancel`](Self::cancel): `true` means no handler of
    /// that task starts after the call returns; a running task is left alone and answers `false`.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let cancelled = timers.cancel_many(["order-1:review", "order-2:review"]).await?;
    /// println!("{} were pending", cancelled.iter().filter(|&&c| c).count());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after a request was sent may still cancel its tasks.
    pub async fn cancel_many<K: AsRef<str>>(&self, keys: impl IntoIterator<Item = K>) -> Result<Vec<bool>, Error> {
        let keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_string()).collect();
        keys.iter().try_for_each(|k| crate::error::check_key(k))?;
        coalesce::cancel_many(&self.wheel, keys).await
    }

    /// Moves the task under `key` to `delay` from now (on Redis's clock), keeping its payload,
    /// if it has not started: after `Ok` the task is handed out once, at its new time.
    ///
    /// A task that is waiting or ready is moved. A running task (claimed by a worker under a
    /// live lease, as [`cancel`](Self::cancel) describes) is left alone and the call answers
    /// [`Error::NotFound`]: its handler runs (or is about to), and its lease runs its course;
    /// schedule the key again once it has ended if it must run once more. A task whose lease
    /// ran out is moved, and the late handler's acknowledgement changes nothing.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// match timers.reschedule("order-42:review", Duration::from_secs(24 * 3600)).await {
    ///     Ok(()) => {}
    ///     Err(Error::NotFound) => { /* it fired or was cancelled already */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::NotFound`] if no task with this key is waiting or ready (none is pending, or
    ///   its handler is running);
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future while the call waits for its batch takes it out (it is not sent);
    /// dropping it once its batch was sent may still move the task. Either way the other calls
    /// of the batch are not affected.
    pub async fn reschedule(&self, key: impl AsRef<str>, delay: Duration) -> Result<(), Error> {
        self.move_task(key.as_ref(), When::delay(delay)?).await
    }

    /// Moves the pending task under `key` to `at` on Redis's clock, keeping its payload.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// timers.reschedule_at("order-42:review", SystemTime::now() + Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Cancel safety
    /// As [`reschedule`](Self::reschedule).
    pub async fn reschedule_at(&self, key: impl AsRef<str>, at: SystemTime) -> Result<(), Error> {
        self.move_task(key.as_ref(), When::at(at)?).await
    }

    /// Moves the pending task under `key` to `delay` from now (on Redis's clock), or schedules
    /// `payload` under it if none is pending, in one atomic step (so two nodes racing schedule
    /// it once): `Ok(true)` if it scheduled, `Ok(false)` if it moved a pending task, which keeps
    /// its own payload, as the in-process
    /// [`Scheduler::schedule_or_reset`](crate::Scheduler::schedule_or_reset) does. This is the
    /// debounce of "review the order 48 hours after its last change".
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let fresh = timers.schedule_or_reset("order-7:review", Duration::from_secs(3600), "order 7").await?;
    /// println!("{}", if fresh { "scheduled" } else { "pushed back" });
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if the task under `key` is running (claimed by a worker under a
    ///   live lease): it is left to its lease, as `reschedule` leaves it;
    /// - [`Error::Invalid`] and [`Error::Redis`] as [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still schedule or move the task.
    pub async fn schedule_or_reset(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl IntoPayload,
    ) -> Result<bool, Error> {
        let key = key.as_ref();
        let payload = self.checked(key, payload)?;
        let task = self.new_task(key, When::delay(delay)?, payload);
        let keys = &self.wheel.partition_of(key).keys;
        let answer = scripts::schedule(&self.wheel, keys, &self.wheel.ids.next(), &[task], true, None).await?;
        match answer.first() {
            Some(ScheduleAnswer::Running) => Err(Error::DuplicateKey(key.to_string())),
            Some(ScheduleAnswer::Duplicate) | None => Err(Error::DuplicateKey(key.to_string())),
            Some(answer) => {
                self.wheel.conn.replicate(&keys.meta()).await?;
                Ok(matches!(answer, ScheduleAnswer::Created | ScheduleAnswer::AlreadyByThisRequest))
            }
        }
    }

    /// Debounces the task under `key`: one run for a burst of calls, `quiet` after the burst's
    /// last call and never later than `max_wait` after its first, carrying the **last** call's
    /// `payload`. Returns `true` when this call opened a new burst, `false` when it joined the
    /// open one. "Send the digest 2 s after the last change, but at least every 10 s while
    /// changes keep coming": `debounce(key, 2 s, 10 s, digest)` at each change.
    ///
    /// Every time is on the store's clock (Redis's, or the SQLite store's), so calls from many
    /// processes make one burst, and racing calls give one run. What else holds:
    ///
    /// - **A call while the run's handler runs** opens the next burst. Its run waits until the
    ///   running one ends (acknowledged, or dead after its last attempt), then takes the key:
    ///   runs under one key never overlap. Its quiet period and cap count from its own calls, so
    ///   it may be due at once when the running one ends.
    /// - **A failure or a snooze closes the burst**: the run was delivered. A call while the task
    ///   waits for its retry opens a new burst on it (it takes the new payload and due time,
    ///   keeping its attempt count).
    /// - A call on a key whose task was scheduled another way opens a burst on that task.
    /// - [`cancel`](Self::cancel) ends the burst (the next call opens a new one);
    ///   [`schedule_or_reset`](Self::schedule_or_reset) keeps its meaning (it moves a pending
    ///   task and keeps its payload, and does not touch the burst's cap).
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// // At each change of the document: one digest 2 s after the last change, at most 10 s late.
    /// let opened = timers.debounce("doc-7:digest", Duration::from_secs(2), Duration::from_secs(10), "rev 41").await?;
    /// println!("{}", if opened { "a new burst" } else { "pushed back, payload replaced" });
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] if `max_wait` is shorter than `quiet` (the cap would come first:
    ///   pass equal ones for a fixed delay), or for the key and payload `schedule` refuses;
    /// - [`Error::Redis`] if the store failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still debounce the task.
    pub async fn debounce(
        &self,
        key: impl AsRef<str>,
        quiet: Duration,
        max_wait: Duration,
        payload: impl IntoPayload,
    ) -> Result<bool, Error> {
        let key = key.as_ref();
        if max_wait < quiet {
            return Err(Error::invalid(format!(
                "debounce of {key:?}: max_wait ({max_wait:?}) is shorter than quiet ({quiet:?}); give a max_wait of at                  least quiet (equal ones make a fixed delay)"
            )));
        }
        let payload = self.checked(key, payload)?;
        let (quiet_ms, max_wait_ms) = (delay_ms(quiet)?, delay_ms(max_wait)?);
        let task = self.new_task(key, When::Delay(quiet_ms), payload);
        let keys = &self.wheel.partition_of(key).keys;
        let opened = scripts::debounce(&self.wheel, keys, &task, quiet_ms, max_wait_ms).await?;
        self.wheel.conn.replicate(&keys.meta()).await?;
        Ok(opened)
    }

    /// Schedules a recurring task under `key`: a run every `period` at a fixed rate on Redis's
    /// clock, the first one `period` after this call, `repeat` times or forever, each delivered
    /// to a worker's handler like any task (its [`Task::due`] is that run's due time). After a
    /// time when nothing ran it (every node down, or Redis away), one run stands for the missed
    /// ones and the series is back on its schedule
    /// ([`MissedRuns::Skip`](crate::MissedRuns::Skip), the durable mode's default whatever the
    /// call); see [`schedule_repeating_with`](Self::schedule_repeating_with) for the other
    /// policies.
    ///
    /// - **Once per period**: the next run is placed when a run ends (acknowledged, or given up
    ///   after its last attempt), in the same atomic step, so a run is never handed out twice
    ///   for one period by the wheel, whatever leader ticks; like every task it is delivered at
    ///   least once (a worker that dies mid-run has the run delivered again, `attempt` + 1).
    /// - **`attempt`** counts the deliveries of the current run; each run starts at 1.
    /// - **Failures**: a failed run is retried after the backoff like any task; after its last
    ///   attempt it goes to the dead letters as a copy (its key, payload and error) and the series
    ///   goes on with its next run.
    /// - **Ending it**: [`cancel`](Self::cancel) ends the series while its next run waits. A run
    ///   that is running is left to its lease (`cancel` answers `false`) and places the next run
    ///   when it ends: cancel again then. `Repeat::Times(n)` ends after `n` runs.
    /// - Runs fall due on the wheel's ticks: a period shorter than the tick runs at most once a
    ///   tick.
    ///
    /// For a cron expression in a time zone, an end, or a first run at a chosen time, see
    /// [`schedule_recurring`](Self::schedule_recurring).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{durable::DurableScheduler, Error, Repeat};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// timers.schedule_repeating("report:nightly", Duration::from_secs(24 * 3600), Repeat::Forever, "all").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a task is pending under `key`;
    /// - [`Error::Invalid`] for a zero period, `Repeat::Times(0)`, or the input `schedule` refuses;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still schedule the series.
    pub async fn schedule_repeating(
        &self,
        key: impl AsRef<str>,
        period: Duration,
        repeat: crate::Repeat,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        self.schedule_repeating_with(key, period, repeat, crate::MissedRuns::Skip, payload).await
    }

    /// [`schedule_repeating`](Self::schedule_repeating) with a policy for the runs missed while
    /// nothing ran the series (no worker, or Redis away): the run that ends late stands for them,
    /// then [`Burst`](crate::MissedRuns::Burst) keeps the fixed rate (the missed runs follow at
    /// once), [`Delay`](crate::MissedRuns::Delay) runs a period after that run ended, and
    /// [`Skip`](crate::MissedRuns::Skip) runs at the next time of the original schedule.
    ///
    /// # Errors
    /// As [`schedule_repeating`](Self::schedule_repeating).
    ///
    /// # Cancel safety
    /// As [`schedule_repeating`](Self::schedule_repeating).
    pub async fn schedule_repeating_with(
        &self,
        key: impl AsRef<str>,
        period: Duration,
        repeat: crate::Repeat,
        missed: crate::MissedRuns,
        payload: impl IntoPayload,
    ) -> Result<(), Error> {
        let key = key.as_ref();
        let payload = self.checked(key, payload)?;
        let every_ms = super::time::whole_ms(period, "period")?;
        let runs = match repeat {
            crate::Repeat::Times(0) => return Err(Error::invalid("Repeat::Times must be at least 1")),
            crate::Repeat::Times(n) => Some(n),
            crate::Repeat::Forever => None,
        };
        let task = self.new_task(key, When::delay(period)?, payload);
        let series = Stored { every_ms, runs, missed, spec: String::new(), first_due_ms: 0 };
        self.schedule_series(task, &series).await
    }

    /// Schedules the recurring `task` (its first run at its `when`) as the series `series`, then
    /// waits for the replicas: `DuplicateKey` if its key is pending.
    pub(super) async fn schedule_series(&self, task: NewTask, series: &Stored) -> Result<(), Error> {
        let keys = &self.wheel.partition_of(&task.key).keys;
        let answer = scripts::schedule(
            &self.wheel,
            keys,
            &self.wheel.ids.next(),
            std::slice::from_ref(&task),
            false,
            Some(series),
        )
        .await?;
        match answer.first() {
            Some(ScheduleAnswer::Created | ScheduleAnswer::AlreadyByThisRequest) => {
                self.wheel.conn.replicate(&keys.meta()).await
            }
            _ => Err(Error::DuplicateKey(task.key)),
        }
    }

    /// Starts a [`Worker`] that runs each task on the handler of its kind: see [`Routes`](super::Routes).
    /// Otherwise as [`run`](Self::run).
    ///
    /// # Examples
    /// See [`Routes`](super::Routes).
    pub fn run_routes(&self, routes: super::Routes) -> Worker {
        self.run(routes.into_handler())
    }

    /// Starts a [`Worker`] on the current Tokio runtime: it takes part in ticking the wheel (one
    /// node at a time holds the leadership) and runs `handler` on due tasks, up to `concurrency`
    /// at once.
    ///
    /// `Ok` acknowledges the task (its key is free again); an `Err`, a panic or a run longer
    /// than the [handler timeout](super::DurableBuilder::handler_timeout) retries it after the
    /// backoff, and after `max_attempts` deliveries it goes to the dead letters with the error's
    /// text. The worker renews the task's lease while the handler runs, however long that takes.
    ///
    /// Each handler runs inside a `tracing` span `task` (target `tokio_timewheel::durable`, level
    /// `INFO`) with the fields `wheel`, `partition`, `key` and `attempt`, so that what it logs
    /// says which delivery it is about. How late each delivery was claimed goes to
    /// [`lateness`](Self::lateness).
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::{DurableScheduler, Task}, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let worker = timers.run(|task: Task| async move {
    ///     // At least once: make this idempotent on the key.
    ///     println!("review {} (attempt {})", task.key(), task.attempt());
    ///     Ok::<(), std::io::Error>(())
    /// });
    /// // ... until the node stops:
    /// worker.shutdown().await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    #[must_use = "dropping the Worker stops it: keep it, and call shutdown when the node stops"]
    pub fn run<F, Fut, E>(&self, handler: F) -> Worker
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        super::worker::start(self.wheel.clone(), handler)
    }
}

impl DurableScheduler {
    /// Runs the tick script with `token` as the fencing token, as a leader would, until caught
    /// up; false when the token is not the leader's. For tests of fencing and concurrent tickers.
    #[cfg(test)]
    pub(crate) async fn tick_with_token(&self, token: &str) -> Result<bool, Error> {
        super::leader::tick_once(&self.wheel, &self.wheel.partitions[0], token).await
    }

    /// The bytes of `payload` for the task `key`, checked before they go to Redis: the key by
    /// the one rule for keys, the payload's conversion, and its size.
    pub(super) fn checked(&self, key: &str, payload: impl IntoPayload) -> Result<Vec<u8>, Error> {
        crate::error::check_key(key)?;
        let payload = payload.into_payload(key)?;
        if payload.len() > self.wheel.cfg.max_payload {
            return Err(Error::invalid(format!(
                "the payload of {:?} is {} bytes, over the maximum of {}: store large data elsewhere and schedule \
                 a reference to it, or raise DurableBuilder::max_payload",
                key,
                payload.len(),
                self.wheel.cfg.max_payload
            )));
        }
        Ok(payload)
    }

    async fn schedule_one(
        &self,
        key: &str,
        when: When,
        payload: Vec<u8>,
        request_id: Option<&str>,
    ) -> Result<(), Error> {
        let task = self.new_task(key, when, payload);
        let part = self.wheel.partition_of(key).index;
        match request_id {
            // A test's own request id: its call goes alone, under that id.
            Some(id) => coalesce::schedule_batch(&self.wheel, part, Some(id), &[task], None).await.remove(0),
            None => self.calls.schedule(part, task).await,
        }
    }

    async fn move_task(&self, key: &str, when: When) -> Result<(), Error> {
        crate::error::check_key(key)?;
        self.calls.reschedule(self.wheel.partition_of(key).index, key.to_string(), when).await
    }
}
