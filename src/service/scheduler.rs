//! `Scheduler`: the cheap, cloneable handle to the timer service (the handle half of the actor
//! and handle pair; the actor is `actor.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::actor::Command;
use super::clock::{Clock, Due};
use super::job::Wake;
use super::key::Key;
use super::scheduled::Scheduled;
use super::shards::Shared;
use super::stats::Stats;
use super::timer::{Repeating, Run, Timer};
use crate::Error;

/// How many times a repeating timer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// This many runs, then the timer ends (its [`Scheduled`] resolves `Ok`). Must be at least 1.
    Times(u64),
    /// Until cancelled or the service stops.
    Forever,
}

/// A handle to a running timer service.
///
/// `Clone + Send + Sync + 'static`; a clone is two reference-count increments. Every clone
/// reaches the same timers, so a timer scheduled on one task can be cancelled by key from any
/// other. When the last handle is dropped, the service stops as if [`stop`](Self::stop) had been
/// called; a handle captured by a pending timer's job counts, so a repeating job that holds a
/// clone keeps the service alive until it is cancelled or `stop` is called.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tokio_timewheel::{Error, Scheduler};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let timer = Scheduler::builder().start()?;
/// timer.schedule("conn-7", Duration::from_secs(30), |key| async move {
///     println!("{key} timed out");
/// }).await?;
/// assert!(timer.contains("conn-7"));
/// assert!(timer.cancel("conn-7").await, "traffic arrived: the timeout is cancelled");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    clock: Clock,
}

impl Scheduler {
    pub(crate) fn new(tx: mpsc::Sender<Command>, shared: Arc<Shared>, clock: Clock) -> Self {
        Scheduler { tx, shared, clock }
    }

    /// Runs `job` with the timer's key once `delay` has passed.
    ///
    /// The job is called on the service's task, and the future it returns is polled first on a
    /// task shared with the jobs due at the same tick and, if it has to wait, goes on as a Tokio
    /// task of its own; so a slow or panicking job never holds up the wheel (see the README's
    /// "Jobs" for what jobs due together share). It fires no
    /// earlier than `delay` from now and, on an unloaded runtime, within two ticks of it; a zero
    /// delay fires on the next tick.
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a timer with this key is pending (that timer is untouched);
    /// - [`Error::Invalid`] for an empty key or a delay whose deadline cannot be represented;
    /// - [`Error::Full`] when `max_pending` timers are pending;
    /// - [`Error::Stopped`] once the service has stopped.
    ///
    /// # Cancel safety
    /// If this future is dropped before it completes, the timer is not scheduled and the key is
    /// free again.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let done = timer.schedule("req-1", Duration::from_millis(250), |key| async move {
    ///     println!("{key}: no answer in 250 ms");
    /// }).await?;
    /// let err = timer.schedule("req-1", Duration::from_secs(1), |_| async {}).await.unwrap_err();
    /// assert_eq!(err, Error::DuplicateKey("req-1".into()));
    /// done.await?; // resolves once the job has been started
    /// # Ok(()) }
    /// ```
    pub async fn schedule<K, F, Fut>(&self, key: K, delay: Duration, job: F) -> Result<Scheduled, Error>
    where
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let due = self.clock.after(delay)?;
        self.submit(key.as_ref(), due, Run::Once(Box::new(job))).await
    }

    /// Like [`schedule`](Self::schedule), with an absolute deadline. A deadline in the past
    /// fires on the next tick.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub async fn schedule_at<K, F, Fut>(&self, key: K, deadline: Instant, job: F) -> Result<Scheduled, Error>
    where
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let due = self.clock.at(deadline)?;
        self.submit(key.as_ref(), due, Run::Once(Box::new(job))).await
    }

    /// Runs `job` every `period`, first one period from now, at a fixed rate: run `n` is due at
    /// `start + n * period` however late earlier runs were, so the timer never drifts (runs
    /// missed while the service was held up are made up at once). The returned [`Scheduled`]
    /// resolves after the last run of [`Repeat::Times`]; cancel by key to end it early.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), and [`Error::Invalid`] for a zero period or
    /// `Repeat::Times(0)`.
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Repeat, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// // A poison buff: three ticks of damage, one a second.
    /// let done = timer.schedule_repeating("poison:player-9", Duration::from_secs(1), Repeat::Times(3), |key| async move {
    ///     println!("{key}: -5 hp");
    /// }).await?;
    /// done.await?;
    /// assert_eq!(timer.stats().fired, 3);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_repeating<K, F, Fut>(
        &self,
        key: K,
        period: Duration,
        repeat: Repeat,
        job: F,
    ) -> Result<Scheduled, Error>
    where
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if period.is_zero() {
            return Err(Error::invalid("a repeating timer's period must be longer than zero"));
        }
        let runs_left = match repeat {
            Repeat::Times(0) => return Err(Error::invalid("Repeat::Times needs at least one run")),
            Repeat::Times(n) => Some(n),
            Repeat::Forever => None,
        };
        let now = Instant::now();
        let due = self.clock.after_from(now, period)?;
        let repeat =
            Box::new(Repeating { period, due: Clock::instant_after(now, period)?, runs_left, job: Arc::new(job) });
        self.submit(key.as_ref(), due, Run::Repeat(repeat)).await
    }

    /// Waits for `delay` under `key`: `Ok(())` once it has elapsed, `Err(Error::Cancelled)` if
    /// [`cancel`](Self::cancel)`(key)` is called from anywhere first.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), plus [`Error::Cancelled`] as above.
    ///
    /// # Cancel safety
    /// Dropping the future cancels the keyed sleep (like dropping `tokio::time::sleep`), so the
    /// key is free again.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let other = timer.clone();
    /// let sleeper = tokio::spawn(async move { other.sleep_keyed("cooldown:player-9", Duration::from_secs(5)).await });
    /// tokio::time::sleep(Duration::from_secs(1)).await;
    /// timer.cancel("cooldown:player-9").await;
    /// assert_eq!(sleeper.await.unwrap(), Err(Error::Cancelled));
    /// # Ok(()) }
    /// ```
    pub async fn sleep_keyed(&self, key: impl AsRef<str>, delay: Duration) -> Result<(), Error> {
        let due = self.clock.after(delay)?;
        let scheduled = self.submit(key.as_ref(), due, Run::Once(Box::new(Wake))).await?;
        let mut guard = CancelOnDrop {
            scheduler: self,
            key: scheduled.shared_key().clone(),
            serial: scheduled.serial(),
            armed: true,
        };
        let outcome = scheduled.await;
        guard.armed = false;
        outcome
    }

    /// Schedules many timers in one pass, taking each shard's lock once: the way to create a million
    /// timers in a short time. Returns one result per item, in order; an item that fails (a
    /// duplicate key, also within the batch, an empty key, a delay out of range, `Full`) fails
    /// alone. Timers scheduled this way have no [`Scheduled`] future: they end as any other
    /// (fired, cancelled, stopped) and are counted in [`stats`](Self::stats).
    ///
    /// # How many per call
    /// A call holds its thread while it places its batch (about 250–350 ns per timer with a
    /// million pending, on the 2-core machine of `BENCHMARKS.md`), and on that thread timers due
    /// meanwhile wait for it. Around a thousand timers per call keeps each call well under a
    /// millisecond and costs about the same per timer as larger batches: for a million timers due over
    /// two seconds, batches of 4,096 put the 99th percentile of lateness at 11–12 ms, batches of
    /// 1,024 at 4.6–6.2 ms.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, none of the batch is scheduled.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let job = |key: String| async move { println!("{key} timed out") };
    /// let results = timer
    ///     .schedule_many([("conn-1", Duration::from_secs(30), job), ("conn-1", Duration::from_secs(5), job)])
    ///     .await;
    /// assert_eq!(results, [Ok(()), Err(Error::DuplicateKey("conn-1".into()))]);
    /// assert_eq!(timer.cancel_many(["conn-1", "conn-2"]).await, [true, false]);
    /// # Ok(()) }
    /// ```
    pub async fn schedule_many<I, K, F, Fut>(&self, items: I) -> Vec<Result<(), Error>>
    where
        I: IntoIterator<Item = (K, Duration, F)>,
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // A batch costs the caller one unit of Tokio's cooperative budget however large it is, so
        // a task sending batch after batch could place millions of timers before the actor (on
        // a current-thread runtime) gets to run, and those due meanwhile would fire late. Give
        // the actor its turn before each batch (before, not after: nothing is claimed yet, so a
        // future dropped here schedules nothing).
        tokio::task::yield_now().await;
        let now = Instant::now();
        let reading = self.clock.read(now);
        // Check every item first, then claim the keys of the good ones in one go.
        let items = items.into_iter();
        let mut results = Vec::with_capacity(items.size_hint().0);
        let mut timers = Vec::with_capacity(items.size_hint().0);
        for (key, delay, job) in items {
            let key = key.as_ref();
            let checked = self.check_key(key).and_then(|()| self.clock.after_reading(&reading, delay));
            results.push(checked.map(|due| {
                timers.push((Timer::new(Key::from(key), Run::Once(Box::new(job))), due.deadline));
            }));
        }
        if timers.is_empty() {
            return results;
        }
        let mut claimed = self.shared.add_many(timers, self.clock.tick_of(&reading)).into_iter();
        for result in results.iter_mut().filter(|r| r.is_ok()) {
            *result = claimed.next().expect("one outcome per claim");
        }
        results
    }

    /// Cancels many timers in one pass, taking each shard's lock once. Returns, per key in order, whether
    /// a pending timer was cancelled (as [`cancel`](Self::cancel) would).
    ///
    /// # Cancel safety
    /// The cancels take effect, all of them, the first time the future is polled. The future
    /// then yields once, to give the service its turn; dropping it there leaves the timers
    /// cancelled but loses the results.
    ///
    /// # Examples
    /// See [`schedule_many`](Self::schedule_many).
    pub async fn cancel_many<I, S>(&self, keys: I) -> Vec<bool>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let ended = {
            let keys: Vec<S> = keys.into_iter().collect();
            let keys: Vec<&[u8]> = keys.iter().map(|key| key.as_ref().as_bytes()).collect();
            self.shared.cancel_many(&keys)
        };
        // As in `schedule_many`: a batch would cost one unit of the cooperative budget however
        // large it is, so a task cancelling batch after batch could hold a current-thread runtime
        // for a hundred of them (some 50 ms for batches of 4,096) while timers due meanwhile wait.
        // Give the service its turn after each batch (after: the cancels are done by then).
        tokio::task::yield_now().await;
        ended
    }

    async fn submit(&self, key: &str, due: Due, run: Run) -> Result<Scheduled, Error> {
        // A schedule waits for nothing while there is room, so without this a task scheduling
        // in a loop would hold its thread, and on a current-thread runtime the service too.
        tokio::task::coop::consume_budget().await;
        self.check_key(key)?;
        let key = Key::from(key);
        let ticket = self.shared.add(Timer::new(key.clone(), run), due, true)?;
        Ok(Scheduled::new(self.shared.clone(), key, ticket))
    }

    fn check_key(&self, key: &str) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::invalid("a timer key must not be empty"));
        }
        if self.tx.is_closed() {
            return Err(Error::Stopped);
        }
        Ok(())
    }

    /// Cancels the pending timer with this key. Returns `true` if one was pending: its job will
    /// not run and its [`Scheduled`] resolves `Err(Error::Cancelled)`. For a repeating timer,
    /// runs already started go on, and a run the service was firing at the very moment of the
    /// cancel may still start its job just after `cancel` returns; no later run does. Returns
    /// `false` if no timer had the key.
    ///
    /// # Cancel safety
    /// The cancel takes effect the first time the future is polled, entirely; dropping the future
    /// after that leaves the timer cancelled.
    ///
    /// # Examples
    /// See [`Scheduler`].
    pub async fn cancel(&self, key: &str) -> bool {
        let cancelled = self.shared.cancel(key.as_bytes(), None);
        // As in `submit`: give way now and then to the service and other tasks.
        tokio::task::coop::consume_budget().await;
        cancelled
    }

    /// Moves the pending timer with this key to `delay` from now; a repeating timer continues
    /// at its period from there.
    ///
    /// # Errors
    /// [`Error::NotFound`] if no timer with this key is pending, [`Error::Invalid`] for a delay
    /// whose deadline cannot be represented, [`Error::Stopped`] once the service has stopped.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the timer has not moved.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// timer.schedule("idle:conn-7", Duration::from_secs(30), |_| async {}).await?;
    /// timer.reschedule("idle:conn-7", Duration::from_secs(30)).await?; // traffic: start over
    /// assert_eq!(timer.reschedule("conn-unknown", Duration::from_secs(1)).await, Err(Error::NotFound));
    /// # Ok(()) }
    /// ```
    pub async fn reschedule(&self, key: &str, delay: Duration) -> Result<(), Error> {
        let now = Instant::now();
        let Due { deadline, set_at } = self.clock.after_from(now, delay)?;
        let due = Clock::instant_after(now, delay)?;
        if self.tx.is_closed() {
            return Err(Error::Stopped);
        }
        // As in `submit`: give way now and then, before anything has moved.
        tokio::task::coop::consume_budget().await;
        self.shared.move_timer(key, due, deadline, set_at)
    }

    /// Whether a timer with this key is pending. Answers from the shared key map, without a
    /// round trip to the service.
    pub fn contains(&self, key: &str) -> bool {
        self.shared.contains(key)
    }

    /// The number of pending timers.
    pub fn len(&self) -> usize {
        self.shared.stats().pending
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the counters. Each field is read on its own, so under concurrent use they
    /// may be a moment apart from one another.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Waits until the service's actor has answered this call. By then it has dropped the jobs
    /// of the timers cancelled before the call and, with [`Advance::NextDeadline`](crate::Advance),
    /// started the jobs due by the call's tick. Schedules, cancels and reschedules need no
    /// flush: each is complete when its own call returns. Returns at once if the service has
    /// stopped.
    pub async fn flush(&self) {
        let (reply, done) = oneshot::channel();
        if self.tx.send(Command::Flush(reply)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Stops the service and returns how many pending timers it dropped. Their jobs never run
    /// and their [`Scheduled`] futures resolve `Err(Error::Stopped)`; jobs already running go
    /// on. Later calls on any handle fail with [`Error::Stopped`], and `stop` itself returns 0.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let done = timer.schedule("a", Duration::from_secs(60), |_| async {}).await?;
    /// assert_eq!(timer.stop().await, 1);
    /// assert_eq!(done.await, Err(Error::Stopped));
    /// assert_eq!(timer.stop().await, 0);
    /// # Ok(()) }
    /// ```
    pub async fn stop(&self) -> usize {
        let (reply, done) = oneshot::channel();
        if self.tx.send(Command::Stop(reply)).await.is_err() {
            return 0;
        }
        done.await.unwrap_or(0)
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("stats", &self.stats()).finish()
    }
}

/// Cancels a keyed sleep whose future is dropped before it completes.
struct CancelOnDrop<'a> {
    scheduler: &'a Scheduler,
    key: Key,
    serial: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.scheduler.shared.cancel(self.key.as_bytes(), Some(self.serial));
    }
}
