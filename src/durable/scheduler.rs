//! `DurableScheduler`: the cheap, cloneable handle to a wheel kept in Redis.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::task::{JoinError, JoinSet};

use super::coalesce::{self, Calls, BATCH_BYTES, CANCEL_BATCH, SCHEDULE_BATCH};
use super::scripts::{self, NewTask, Requeued};
use super::time::When;
use super::wheel::Wheel;
use super::{DeadTask, DurableStats, Task, Worker};
use crate::error::RedisFailure;
use crate::Error;

/// How many `schedule_many` script calls are in flight at once.
const SCHEDULE_PIPELINE: usize = 8;
/// How many dead letters one `dead_letters` script call reads at most (payloads included).
const DEAD_LETTERS_PAGE: usize = 128;

/// A handle to a durable timing wheel kept in Redis, shared by every node that connects to it.
///
/// `Clone + Send + Sync`; a clone shares the connection. Tasks are scheduled by key with a
/// payload, fire at their due time (on Redis's clock) and are handed to a [`Worker`]'s handler;
/// see the [module docs](super) for the guarantees and the Redis settings they need.
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
    pub(crate) wheel: Arc<Wheel>,
    /// The calls in flight of this handle and its clones, coalesced per partition and kind.
    calls: Arc<Calls>,
}

impl fmt::Debug for DurableScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableScheduler").field("name", &self.wheel.name()).finish_non_exhaustive()
    }
}

impl DurableScheduler {
    /// The handle to a wheel just opened.
    pub(crate) fn new(wheel: Wheel) -> Self {
        let wheel = Arc::new(wheel);
        let calls = Arc::new(Calls::new(&wheel));
        DurableScheduler { wheel, calls }
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
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), Error> {
        self.schedule_one(key.as_ref(), When::delay(delay)?, payload.into(), None).await
    }

    /// [`schedule`](Self::schedule) with a request id of the caller's choosing, for tests of
    /// retried requests: two calls with the same key and request id create one task.
    #[cfg(test)]
    pub(crate) async fn schedule_with_request_id(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl Into<Vec<u8>>,
        request_id: &str,
    ) -> Result<(), Error> {
        self.schedule_one(key.as_ref(), When::delay(delay)?, payload.into(), Some(request_id)).await
    }

    /// Schedules a task under `key`, due at `at` on Redis's clock; a time in the past makes it
    /// due at once.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let at = SystemTime::now() + Duration::from_secs(3600);
    /// timers.schedule_at("invoice-7:remind", at, "invoice-7").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub async fn schedule_at(
        &self,
        key: impl AsRef<str>,
        at: SystemTime,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), Error> {
        self.schedule_one(key.as_ref(), When::at(at)?, payload.into(), None).await
    }

    /// Schedules many tasks in few round trips, each as [`schedule`](Self::schedule) would.
    ///
    /// Returns one result per item, in order: `Ok`, or the item's own [`Error::DuplicateKey`] or
    /// [`Error::Invalid`]; the other items are scheduled regardless. A key given twice is
    /// scheduled once and the other item reports `DuplicateKey` (batches overlap, so which one
    /// wins is not fixed unless both are among the same 64 items, where the first wins).
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
        P: Into<Vec<u8>>,
    {
        let mut results: Vec<Result<(), Error>> = Vec::new();
        // One batch a partition, each sent as it fills (a partition's calls go to its own node).
        let mut batches: Vec<(Vec<(usize, NewTask)>, usize)> =
            self.wheel.partitions.iter().map(|_| (Vec::new(), 0)).collect();
        // Batches go out a few at a time over the one connection, so round trips overlap.
        let mut in_flight = JoinSet::new();
        for (key, delay, payload) in items {
            let (key, payload) = (key.as_ref(), payload.into());
            let checked = self.check(key, &payload).and_then(|()| When::delay(delay));
            match checked {
                Err(e) => results.push(Err(e)),
                Ok(when) => {
                    let part = self.wheel.partition_of(key).index;
                    let (batch, bytes) = &mut batches[part];
                    if batch.len() == SCHEDULE_BATCH || (*bytes + payload.len() > BATCH_BYTES && !batch.is_empty()) {
                        if in_flight.len() >= SCHEDULE_PIPELINE {
                            settle(in_flight.join_next().await, &mut results)?;
                        }
                        in_flight.spawn(send_batch(self.wheel.clone(), part, std::mem::take(batch)));
                        *bytes = 0;
                    }
                    *bytes += payload.len();
                    let task = NewTask { key: key.to_string(), when, payload, request_id: self.wheel.ids.next() };
                    batch.push((results.len(), task));
                    results.push(Ok(()));
                }
            }
        }
        for (part, (batch, _)) in batches.into_iter().enumerate() {
            if !batch.is_empty() {
                in_flight.spawn(send_batch(self.wheel.clone(), part, batch));
            }
        }
        while let Some(done) = in_flight.join_next().await {
            settle(Some(done), &mut results)?;
        }
        Ok(results)
    }

    /// Cancels the task under `key` if it has not started. Returns true if this call cancelled
    /// it: then no handler of that task starts after the call returns, on any node.
    ///
    /// What it answers, by the task's state when the call reaches Redis:
    /// - **waiting** (due later, in the wheel) or **ready** (due, not yet claimed by a worker):
    ///   removed, `true`; the key is free at once;
    /// - **running** (claimed by a worker under a live lease: its handler has started, or the
    ///   claim's reply is on its way and will start it): left alone, `false`. Its lease runs its
    ///   course: an `Ok` from the handler acknowledges it, a failure retries it as usual. While
    ///   it runs, [`contains`](Self::contains) answers true; cancel it again after it failed if
    ///   it must not be retried;
    /// - a task whose lease ran out (its worker died, or its handler outran the lease) is no
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
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future while the call waits for its batch takes it out (it is not sent);
    /// dropping it once its batch was sent may still cancel the task. Either way the other calls
    /// of the batch are not affected.
    pub async fn cancel(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
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
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after a request was sent may still cancel its tasks.
    pub async fn cancel_many<K: AsRef<str>>(&self, keys: impl IntoIterator<Item = K>) -> Result<Vec<bool>, Error> {
        let keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_string()).collect();
        let mut out = vec![false; keys.len()];
        // Each partition's keys, with their places in the answer.
        let mut by_partition: Vec<Vec<usize>> = vec![Vec::new(); self.wheel.partitions.len()];
        for (i, key) in keys.iter().enumerate() {
            by_partition[self.wheel.partition_of(key).index].push(i);
        }
        for (part, places) in by_partition.into_iter().enumerate() {
            for chunk in places.chunks(CANCEL_BATCH) {
                let chunk_keys: Vec<&str> = chunk.iter().map(|&i| keys[i].as_str()).collect();
                for (&i, answer) in chunk.iter().zip(coalesce::cancel_batch(&self.wheel, part, &chunk_keys).await) {
                    out[i] = answer?;
                }
            }
        }
        Ok(out)
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

    /// Whether a task with this key is pending: waiting, ready or running (claimed by a worker
    /// and not yet acknowledged; a running task cannot be cancelled or moved).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if !timers.contains("order-42:review").await? {
    ///     timers.schedule("order-42:review", Duration::from_secs(60), Vec::new()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn contains(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let mut exists = redis::cmd("EXISTS");
        let key = key.as_ref();
        exists.arg(self.wheel.partition_of(key).keys.task(key));
        self.wheel.conn.command(&exists).await
    }

    /// How many tasks are pending: scheduled and not yet acknowledged, cancelled or dead.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// println!("{} tasks pending", timers.len().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn len(&self) -> Result<usize, Error> {
        Ok(self.stats().await?.pending)
    }

    /// Whether no task is pending.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// assert!(timers.is_empty().await? == (timers.len().await? == 0));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.len().await? == 0)
    }

    /// A snapshot of the wheel's gauges and counters.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let stats = timers.stats().await?;
    /// println!("{} pending, {} dead, cursor {} ticks behind", stats.pending, stats.dead, stats.cursor_lag_ticks);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn stats(&self) -> Result<DurableStats, Error> {
        let mut total = DurableStats::default();
        for part in &self.wheel.partitions {
            total.add(&scripts::stats(&self.wheel, &part.keys).await?);
        }
        Ok(total)
    }

    /// Up to `limit` dead letters, oldest first (read a page of 128 per call, so a large
    /// `limit` does not hold Redis up; a list that changes meanwhile can skip or repeat one).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// for dead in timers.dead_letters(100).await? {
    ///     println!("{} died after {} attempts: {}", dead.key(), dead.attempts(), dead.last_error());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadTask>, Error> {
        let mut out = Vec::new();
        // Each partition's oldest `limit`, a page per call (so a large `limit` never holds Redis
        // up for long), then the oldest `limit` of them all.
        for part in &self.wheel.partitions {
            let mut read = 0;
            while read < limit {
                let page = (limit - read).min(DEAD_LETTERS_PAGE);
                let got = scripts::dead_letters(&self.wheel, &part.keys, page, read).await?;
                let full = got.len() == page;
                read += got.len();
                out.extend(got);
                if !full {
                    break;
                }
            }
        }
        out.sort_by(|a, b| a.died.cmp(&b.died).then_with(|| a.key.cmp(&b.key)));
        out.truncate(limit);
        Ok(out)
    }

    /// Puts the dead task under `key` back, due at once with its attempts reset to 0. Returns
    /// whether there was such a dead letter (true also when a retry after an ambiguous failure
    /// finds that its first attempt did put it back).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// for dead in timers.dead_letters(100).await? {
    ///     timers.requeue_dead(dead.key()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a new task with this key is pending (the dead letter stays);
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still requeue the task.
    pub async fn requeue_dead(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        let keys = &self.wheel.partition_of(key).keys;
        match scripts::requeue_dead(&self.wheel, keys, key, &self.wheel.ids.next()).await? {
            Requeued::Yes => self.wheel.conn.replicate(&keys.meta()).await.map(|()| true),
            Requeued::KeyPending => Err(Error::DuplicateKey(key.to_string())),
            Requeued::NotDead => Ok(false),
        }
    }

    /// Starts a [`Worker`] on the current Tokio runtime: it takes part in ticking the wheel (one
    /// node at a time holds the leadership) and runs `handler` on due tasks, up to `concurrency`
    /// at once.
    ///
    /// `Ok` acknowledges the task (its key is free again); an `Err` or a panic retries it after
    /// the backoff, and after `max_attempts` deliveries it goes to the dead letters with the
    /// error's text.
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

    /// Checks a key and payload before they go to Redis.
    fn check(&self, key: &str, payload: &[u8]) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::invalid("the key must not be empty"));
        }
        if payload.len() > self.wheel.cfg.max_payload {
            return Err(Error::invalid(format!(
                "the payload of {:?} is {} bytes, over the maximum of {}: store large data elsewhere and schedule \
                 a reference to it, or raise DurableBuilder::max_payload",
                key,
                payload.len(),
                self.wheel.cfg.max_payload
            )));
        }
        Ok(())
    }

    async fn schedule_one(
        &self,
        key: &str,
        when: When,
        payload: Vec<u8>,
        request_id: Option<&str>,
    ) -> Result<(), Error> {
        // Checked before it is queued: a bad call never reaches its batch.
        self.check(key, &payload)?;
        let request_id = request_id.map_or_else(|| self.wheel.ids.next(), str::to_string);
        let task = NewTask { key: key.to_string(), when, payload, request_id };
        self.calls.schedule(self.wheel.partition_of(key).index, task).await
    }

    async fn move_task(&self, key: &str, when: When) -> Result<(), Error> {
        self.calls.reschedule(self.wheel.partition_of(key).index, key.to_string(), when).await
    }
}

/// The index (in the caller's results) and key of each task of a batch that found its key
/// pending.
type Duplicates = Vec<(usize, String)>;

/// Sends one `schedule.lua` call for `batch`, all of partition `part` (each task with its index
/// in the caller's results); a Redis failure is the whole batch's.
async fn send_batch(wheel: Arc<Wheel>, part: usize, batch: Vec<(usize, NewTask)>) -> Result<Duplicates, Error> {
    let (indexes, tasks): (Vec<usize>, Vec<NewTask>) = batch.into_iter().unzip();
    let outcomes = coalesce::schedule_batch(&wheel, part, &tasks).await;
    let mut duplicates = Vec::new();
    for ((index, task), outcome) in indexes.into_iter().zip(tasks).zip(outcomes) {
        match outcome {
            Ok(()) => {}
            Err(Error::DuplicateKey(_)) => duplicates.push((index, task.key)),
            Err(e) => return Err(e),
        }
    }
    Ok(duplicates)
}

/// Writes one finished batch's duplicates into `results`.
fn settle(
    done: Option<Result<Result<Duplicates, Error>, JoinError>>,
    results: &mut [Result<(), Error>],
) -> Result<(), Error> {
    let Some(done) = done else { return Ok(()) };
    let duplicates = done.map_err(|e| Error::Redis(RedisFailure::new("internal", e.to_string(), false)))??;
    for (index, key) in duplicates {
        results[index] = Err(Error::DuplicateKey(key));
    }
    Ok(())
}
