//! `Scheduler`: the cheap, cloneable handle to the timer service (the handle half of the actor
//! and handle pair; the actor is `actor.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::actor::Command;
use super::clock::{Clock, Due};
use super::handle::TimerHandle;
use super::job::{self, Job, Wake};
use super::key::Key;
use super::scheduled::{CancelOnDrop, Scheduled};
use super::shards::{Shared, Ticket};
use super::stats::Stats;
use super::timer::{Anchor, Calendar, Repeating, Run, Timer};
use crate::error::check_key;
use crate::origin::Origin;
use crate::recurrence::{MissedRuns, Recurrence, Repeat};
use crate::{Error, Lateness};

/// The shortest period of a repeating timer.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// A handle to a running timer service.
///
/// `Clone + Send + Sync + 'static`; a clone is two reference-count increments. Every clone
/// reaches the same timers, so a timer scheduled on one task can be cancelled by key from any
/// other. When the last handle is dropped, the service stops as if [`stop`](Self::stop) had been
/// called; a handle captured by a pending timer's job counts, so a repeating job that holds a
/// clone keeps the service alive until it is cancelled or `stop` is called.
///
/// # Guarantees
/// - **Firing.** Never before the deadline; on an unloaded runtime within two ticks after it,
///   for ticks of 1 ms or more (Tokio's timers have 1 ms resolution, so with a shorter tick
///   allow 1 ms plus a tick). Deadlines round up to a tick, and are fixed when a method is
///   called, as with `tokio::time::sleep`; a zero delay or a deadline in the past fires on the
///   next tick, and one too far for the wheel is clamped (see [`schedule`](Self::schedule)'s
///   "Far deadlines"), so every pending timer that is not [paused](Self::pause) has a
///   [`deadline`](Self::deadline).
/// - **Keys** are unique among pending timers: scheduling a pending key returns
///   [`Error::DuplicateKey`] and leaves the pending timer alone
///   ([`schedule_or_reset`](Self::schedule_or_reset) moves it instead). Once a timer ends, its
///   key is free. A key is 1 to [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, by one rule in every
///   call that takes one: an empty or longer key is [`Error::Invalid`] in every call that
///   returns a `Result` (the [`TimerQueue`](crate::TimerQueue)'s too, and once the service has
///   stopped), and reads as a key with nothing pending under it in the calls that do not
///   ([`cancel`](Self::cancel) is `false`, [`deadline`](Self::deadline) is `None`).
/// - **Exactly once.** Every accepted timer ends exactly once: fired, cancelled or stopped. A
///   cancel that returns `true` wins against a firing in progress: the job does not run.
///   [`Scheduled`] futures tell which way a timer ended; [`stats`](Self::stats) counts them.
/// - **Nothing runs under a lock, and the wheel never waits for a job**: see
///   [`schedule`](Self::schedule)'s "Jobs".
/// - **Tests.** All time comes from `tokio::time`, so `#[tokio::test(start_paused = true)]`,
///   `tokio::time::pause()` and `advance()` drive the service deterministically.
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
    /// The deadline is fixed and the key claimed when this method is called, as with
    /// `tokio::time::sleep`: a future first awaited 100 ms later still fires `delay` after the
    /// call, and from the call on the key is pending ([`contains`](Self::contains) is true, and
    /// the timer can be cancelled or moved by key). The future only reports the outcome.
    ///
    /// The job is called once, on the service's task, and the future it returns is polled first
    /// on a task shared with the jobs due at the same tick and, if it has to wait, goes on as a
    /// Tokio task of its own; so a slow or panicking job never holds up the wheel. It fires no
    /// earlier than `delay` after the call and, on an unloaded runtime, within two ticks of it; a
    /// zero delay fires on the next tick. The job is `FnOnce`: it may own what it needs, such as a
    /// `oneshot::Sender`.
    ///
    /// # Jobs
    /// A one-shot job is `FnOnce(String) -> impl Future<Output = ()>`; a repeating job is `Fn`,
    /// called once per run. Each gets the timer's key. The service calls the due jobs' closures
    /// (which only build futures) and polls each future once on a task shared by the jobs due
    /// in the same advance; a job that finishes in that poll (log, count, send, close) costs no
    /// task, and one that has to wait goes on as a Tokio task of its own. So a job that awaits
    /// never delays another; what the jobs due together share is the synchronous part of each,
    /// so keep it short (use `spawn_blocking` for heavy work). A panic in the closure or in any
    /// poll of its future is caught and logged through `tracing` at `ERROR` (target
    /// `tokio_timewheel::job`), with the timer's key and the panic's message; the run counts as
    /// fired. Each job runs inside a
    /// `tracing` span `timer` with the fields `wheel` ([`Builder::name`](crate::Builder::name))
    /// and `key`, at the `DEBUG` level under the target `tokio_timewheel::job`, so that its logs
    /// say which timer they come from; a span that no subscriber wants costs one level check.
    ///
    /// # Far deadlines
    /// Every delay is accepted. A deadline past the service's latest deadline tick, 2^48 ticks
    /// after it started (some 8,900 years at the default 1 ms tick), or past what `Instant` can
    /// represent (as with `Duration::MAX`), is clamped to that tick, as `tokio::time::sleep`
    /// clamps such a deadline to a far-future instant: the timer is pending, its
    /// [`deadline`](Self::deadline) reads that tick's instant, and it never comes. The same holds
    /// for every call that sets a deadline, from a delay or an `Instant`.
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a timer with this key is pending (that timer is untouched);
    /// - [`Error::Invalid`] for a key that is empty or longer than
    ///   [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Full`] when `max_pending` timers are pending;
    /// - [`Error::Stopped`] once the service has stopped.
    ///
    /// # Cancel safety
    /// If this future is dropped before it completes, the timer it scheduled at the call is
    /// cancelled (it ends as cancelled, counted in [`stats`](Self::stats)) and the key is free
    /// again; once it has completed, dropping the [`Scheduled`] does not cancel the timer.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (tx, rx) = tokio::sync::oneshot::channel();
    /// let done = timer.schedule("req-1", Duration::from_millis(250), move |key| async move {
    ///     let _ = tx.send(format!("{key}: no answer in 250 ms"));
    /// }).await?;
    /// let err = timer.schedule("req-1", Duration::from_secs(1), |_| async {}).await.unwrap_err();
    /// assert_eq!(err, Error::DuplicateKey("req-1".into()));
    /// done.await?; // resolves once the job has been started
    /// assert_eq!(rx.await.unwrap(), "req-1: no answer in 250 ms");
    /// # Ok(()) }
    /// ```
    pub fn schedule<K, F, Fut>(
        &self,
        key: K,
        delay: Duration,
        job: F,
    ) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.submit(Prepared::new(
            key.as_ref(),
            Ok(self.clock.after(delay)),
            Run::Once(job::once(job, &Origin::current())),
        ))
    }

    /// Like [`schedule`](Self::schedule), with an absolute deadline. A deadline in the past
    /// fires on the next tick.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub fn schedule_at<K, F, Fut>(
        &self,
        key: K,
        deadline: Instant,
        job: F,
    ) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.submit(Prepared::new(
            key.as_ref(),
            Ok(self.clock.at(deadline)),
            Run::Once(job::once(job, &Origin::current())),
        ))
    }

    /// Runs `job` every `period`, first one period after the call, at a fixed rate: run `n` is
    /// due at `start + n * period` however late earlier runs were, so the timer never drifts
    /// (runs missed while the service was held up are made up at once, in either
    /// [`Advance`](crate::Advance) mode, like `MissedTickBehavior::Burst`). The returned
    /// [`Scheduled`] resolves after the last run of [`Repeat::Times`]; cancel by key to end it
    /// early.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), and [`Error::Invalid`] for a period shorter than 1 ms
    /// (the resolution of Tokio's timer; missed runs are made up at once, so a service woken at
    /// most once a millisecond could never catch up with a period of nanoseconds), a period so
    /// long that its first run is past what `Instant` can represent (a repeating timer keeps
    /// the instant of each run), or `Repeat::Times(0)`. A period shorter than the tick is
    /// allowed: its runs come in bursts, each tick making up the runs due in it.
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
    pub fn schedule_repeating<K, F, Fut>(
        &self,
        key: K,
        period: Duration,
        repeat: Repeat,
        job: F,
    ) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.schedule_repeating_with(key, period, repeat, MissedRuns::Burst, job)
    }

    /// Like [`schedule_repeating`](Self::schedule_repeating), with a policy for the runs the
    /// timer misses (see [`MissedRuns`]): a run is missed when its time has passed by the
    /// moment the run before it fires, as when the runtime was held up or the timer was moved
    /// into the past with [`reschedule_at`](Self::reschedule_at).
    ///
    /// # Errors
    /// As [`schedule_repeating`](Self::schedule_repeating).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, MissedRuns, Repeat, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let ms = Duration::from_millis;
    /// timer.schedule_repeating_with("poll", ms(10), Repeat::Forever, MissedRuns::Skip, |_| async {}).await?;
    /// // Moved a second into the past: one run now, not a hundred to catch up.
    /// timer.reschedule_at("poll", Instant::now() - ms(1_000)).await?;
    /// tokio::time::sleep(ms(25)).await;
    /// assert!(timer.stats().fired <= 3);
    /// # Ok(()) }
    /// ```
    pub fn schedule_repeating_with<K, F, Fut>(
        &self,
        key: K,
        period: Duration,
        repeat: Repeat,
        missed: MissedRuns,
        job: F,
    ) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let recurrence = match repeat {
            Repeat::Times(0) => Err(Error::invalid("Repeat::Times needs at least one run")),
            Repeat::Times(n) => Ok(Recurrence::every(period).missed(missed).limit(n)),
            Repeat::Forever => Ok(Recurrence::every(period).missed(missed)),
        };
        let prepared = recurrence.and_then(|recurrence| {
            let (run, due) = self.recurring(recurrence, job::shared(job, &Origin::current()))?;
            Prepared::new(key.as_ref(), Ok(due), run)
        });
        self.submit(prepared)
    }

    /// Runs `job` with the timer's key at every run of `recurrence`: a fixed rate
    /// ([`Recurrence::every`]) or a cron expression in a time zone (`Recurrence::cron`, with the
    /// `cron` feature), with its limit, start, end and missed-run policy (see [`Recurrence`]).
    /// The returned [`Scheduled`] resolves `Ok` after the last run (past the limit or the end);
    /// cancel by key to end the series early, or [`upsert_recurring`](Self::upsert_recurring)
    /// to change it. [`schedule_repeating`](Self::schedule_repeating) is this with
    /// `Recurrence::every(period)`.
    ///
    /// # Tokio's clock and the wall clock
    /// The wheel runs on Tokio's clock. An `every` recurrence with neither a start nor an end
    /// stays on it entirely, as `schedule_repeating` does: its runs are `start + n * period` in
    /// Tokio instants. A cron recurrence, or one with a start or an end (which are
    /// `SystemTime`s), is on the wall clock: when it is scheduled, `SystemTime::now()` and
    /// Tokio's `Instant::now()` are read together, and every run's wall-clock time is mapped
    /// to the Tokio instant as far from that pair (a run at 03:00:00 is due at the instant that
    /// lies as far after the call as 03:00:00 lies after the wall-clock time of the call).
    /// So with Tokio's clock paused (`start_paused`, `advance`), a cron timer follows Tokio's
    /// clock, starting from the real wall-clock time of the call: a test can advance through a
    /// day in no time. A wall clock stepped while a timer is pending (NTP, a changed system
    /// time) is not followed by that timer until it is scheduled again
    /// ([`upsert_recurring`](Self::upsert_recurring) reads the pair anew).
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), and [`Error::Invalid`] for a recurrence that
    /// [`Recurrence::validate`] refuses, an `every` period shorter than 1 ms (as for
    /// `schedule_repeating`), or a recurrence with no run left after the call (its end has
    /// passed, or a cron expression names no date to come).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Recurrence, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// // A regeneration buff: five ticks of healing, one every 2 s.
    /// let regen = Recurrence::every(Duration::from_secs(2)).limit(5);
    /// let done = timer.schedule_recurring("regen:player-9", regen, |key| async move {
    ///     println!("{key}: +3 hp");
    /// }).await?;
    /// done.await?;
    /// assert_eq!(timer.stats().fired, 5);
    /// # Ok(()) }
    /// ```
    ///
    /// With the `cron` feature, a game's daily reset at 05:00 server time:
    /// ```
    /// # #[cfg(feature = "cron")]
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tokio_timewheel::Error> {
    /// # use tokio_timewheel::{Recurrence, Scheduler};
    /// let timer = Scheduler::builder().start()?;
    /// let reset = Recurrence::cron("0 5 * * *")?.in_tz("Europe/Berlin")?;
    /// timer.schedule_recurring("daily-reset", reset, |_| async { /* refill the daily quests */ }).await?;
    /// assert!(timer.deadline("daily-reset").is_some());
    /// # Ok(()) }
    /// # #[cfg(not(feature = "cron"))]
    /// # fn main() {}
    /// ```
    pub fn schedule_recurring<K, R, F, Fut>(
        &self,
        key: K,
        recurrence: R,
        job: F,
    ) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_
    where
        K: AsRef<str>,
        R: Into<Recurrence>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let prepared = self
            .recurring(recurrence.into(), job::shared(job, &Origin::current()))
            .and_then(|(run, due)| Prepared::new(key.as_ref(), Ok(due), run));
        self.submit(prepared)
    }

    /// Schedules `job` at every run of `recurrence` under `key`, replacing the timer pending
    /// under it, if any, in one step under the key's lock: returns `Ok(true)` if it created a
    /// timer, `Ok(false)` if it replaced the pending one. The call to change a series: a new
    /// schedule, a new job, or both, with no moment at which neither the old timer nor the new
    /// one holds the key, and never both.
    ///
    /// # What "replaced" means
    /// The pending timer under the key (a recurring, repeating or one-shot timer, or a keyed
    /// sleep) ends as cancelled, as [`cancel`](Self::cancel) would end it: its job never runs
    /// again, its [`Scheduled`] resolves `Err(Error::Cancelled)`, its [`TimerHandle`]s see it
    /// ended, and [`stats`](Self::stats) count a cancel and a schedule. The new series starts
    /// at the call: its first run is its first after the call (or at its start), never at the
    /// call itself, so the upsert starts no run. A run of the old timer already started (its
    /// job is a Tokio task of its own once it waits) goes on to its end with the old job, as a
    /// run that outlasts its period goes on beside the next; no later run uses the old job or
    /// the old recurrence. The new timer has no [`Scheduled`]: watch the key with
    /// [`contains`](Self::contains) or [`deadline`](Self::deadline).
    ///
    /// # Errors
    /// As [`schedule_recurring`](Self::schedule_recurring), except that a pending key is not an
    /// error; a refused recurrence leaves the pending timer as it was.
    ///
    /// # Cancel safety
    /// The timer was created or replaced when the method was called; dropping the future does
    /// not undo it (only the answer is lost).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Recurrence, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let every = |ms| Recurrence::every(Duration::from_millis(ms));
    /// assert!(timer.upsert_recurring("autosave", every(60_000), |_| async {}).await?, "created");
    /// // The player turned autosave up to every 10 s: the old series ends, the new one runs.
    /// assert!(!timer.upsert_recurring("autosave", every(10_000), |_| async {}).await?, "replaced");
    /// assert_eq!(timer.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn upsert_recurring<K, R, F, Fut>(
        &self,
        key: K,
        recurrence: R,
        job: F,
    ) -> impl Future<Output = Result<bool, Error>> + Send + '_
    where
        K: AsRef<str>,
        R: Into<Recurrence>,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let upserted = (|| {
            let key = key.as_ref();
            check_key(key)?;
            let (run, due) = self.recurring(recurrence.into(), job::shared(job, &Origin::current()))?;
            self.check_running()?;
            self.shared.replace(Timer::new(Key::from(key), run), due, false)
        })();
        Self::report(upserted.map(|(created, _ticket)| created))
    }

    /// The run of a timer following `recurrence`, and when it is first due: on Tokio's clock
    /// for a plain fixed rate, else on the wall clock through an [`Anchor`] read now (see
    /// [`schedule_recurring`](Self::schedule_recurring)).
    fn recurring(&self, recurrence: Recurrence, job: Arc<dyn Job>) -> Result<(Run, Due), Error> {
        recurrence.validate()?;
        let missed = recurrence.missed_runs();
        let runs_left = recurrence.max_runs();
        let period = recurrence.period();
        if let Some(period) = period.filter(|&period| period < MIN_PERIOD) {
            return Err(Error::invalid(format!(
                "a repeating timer's period ({period:?}) must be at least {MIN_PERIOD:?}, the resolution \
                 of Tokio's timer: the service could never keep up with a shorter one"
            )));
        }
        let now = Instant::now();
        if let (Some(period), None, None) = (period, recurrence.start(), recurrence.end()) {
            let due = Clock::instant_after(now, period)?;
            let repeat = Repeating { period, missed, due, runs_left, job, calendar: None };
            return Ok((Run::Repeat(Box::new(repeat)), self.clock.after_from(now, period)));
        }
        let anchor = Anchor::new(now, SystemTime::now());
        let wall = anchor.wall(now).expect("the anchor's own instant has its wall-clock time");
        let first = recurrence.first_due(wall).ok_or_else(|| recurrence.no_run_after(wall))?;
        let due = anchor.instant(first).ok_or_else(|| {
            Error::invalid(format!(
                "{recurrence} first runs at {}, which Tokio's clock cannot represent",
                crate::error::Rfc3339(first)
            ))
        })?;
        let calendar = Some(Box::new(Calendar { recurrence, anchor }));
        let repeat = Repeating { period: period.unwrap_or_default(), missed, due, runs_left, job, calendar };
        Ok((Run::Repeat(Box::new(repeat)), self.clock.at(due)))
    }

    /// Waits for `delay` under `key`: `Ok(())` once it has elapsed, `Err(Error::Cancelled)` if
    /// [`cancel`](Self::cancel)`(key)` is called from anywhere first. As with
    /// `tokio::time::sleep`, the deadline is fixed when this method is called, not when the
    /// future is first polled, and so is the key claimed: from the call on, the sleep can be
    /// cancelled or moved by key, even before the future is first polled.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), plus [`Error::Cancelled`] as above.
    ///
    /// # Cancel safety
    /// Dropping the future, polled or not, cancels the keyed sleep (like dropping
    /// `tokio::time::sleep`), so the key is free again.
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
    pub fn sleep_keyed(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let prepared = Prepared::new(key.as_ref(), Ok(self.clock.after(delay)), Run::Once(Box::new(Wake)));
        let claimed = self.claim_watched(prepared);
        async move { claimed?.await }
    }

    /// Schedules many timers in one pass, taking each shard's lock once: the way to create a
    /// million timers in a short time. Returns one result per item, in order; an item that fails
    /// (a duplicate key, also within the batch, an empty or overlong key, `Full`) fails
    /// alone. Every deadline is fixed when this method is called (the items are read then); the
    /// keys are claimed when the future is first polled, after it has given the service its turn
    /// (the one call that claims its keys later than the call, so that a task sending batch
    /// after batch cannot hold a current-thread runtime: the service runs before each batch).
    /// Timers scheduled this way have no [`Scheduled`] future: they end as any other (fired,
    /// cancelled, stopped) and are counted in [`stats`](Self::stats).
    ///
    /// # How many per call
    /// A call holds its thread while it places its batch, and on that thread timers due
    /// meanwhile wait for it. Around a thousand timers per call keeps each call well under a
    /// millisecond and costs about the same per timer as larger batches (see
    /// [BENCHMARKS.md](https://github.com/tokio-timewheel/tokio-timewheel/blob/main/BENCHMARKS.md)).
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
    pub fn schedule_many<I, K, F, Fut>(&self, items: I) -> impl Future<Output = Vec<Result<(), Error>>> + Send + '_
    where
        I: IntoIterator<Item = (K, Duration, F)>,
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let now = Instant::now();
        let reading = self.clock.read(now);
        // Check every item now, then claim the keys of the good ones in one go.
        let items = items.into_iter();
        let mut results = Vec::with_capacity(items.size_hint().0);
        let mut timers = Vec::with_capacity(items.size_hint().0);
        let origin = Origin::current();
        for (key, delay, job) in items {
            let key = key.as_ref();
            let checked = check_key(key).map(|()| self.clock.after_reading(&reading, delay));
            results.push(checked.map(|due| {
                timers.push((Timer::new(Key::from(key), Run::Once(job::once(job, &origin))), due.deadline));
            }));
        }
        let set_at = self.clock.tick_of(&reading);
        async move {
            // A batch costs the caller one unit of Tokio's cooperative budget however large it
            // is, so a task sending batch after batch could place millions of timers before the
            // actor (on a current-thread runtime) gets to run, and those due meanwhile would fire
            // late. Give the actor its turn before each batch (before, not after: nothing is
            // claimed yet, so a future dropped here schedules nothing).
            tokio::task::yield_now().await;
            if timers.is_empty() {
                return results;
            }
            let mut claimed = self.shared.add_many(timers, set_at).into_iter();
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                *result = claimed.next().expect("one outcome per claim").map(drop);
            }
            results
        }
    }

    /// Cancels many timers in one pass, taking each shard's lock once. Returns, per key in
    /// order, whether a pending timer was cancelled (as [`cancel`](Self::cancel) would).
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

    /// Claims the key of a checked request for a watched timer, at the call; the future reports
    /// the outcome, and cancels the timer if it is dropped before it completes.
    fn submit(&self, prepared: Result<Prepared, Error>) -> impl Future<Output = Result<Scheduled, Error>> + Send + '_ {
        let claimed = self.claim_watched(prepared);
        async move {
            // A schedule waits for nothing while there is room, so without this a task scheduling
            // in a loop would hold its thread, and on a current-thread runtime the service too.
            tokio::task::coop::consume_budget().await;
            claimed.map(CancelOnDrop::disarm)
        }
    }

    /// Claims the key of a checked request for a watched timer, now, behind a guard that cancels
    /// it when dropped.
    fn claim_watched(&self, prepared: Result<Prepared, Error>) -> Result<CancelOnDrop, Error> {
        let Prepared { key, due, run } = prepared?;
        self.check_running()?;
        let ticket = self.shared.add(Timer::new(key.clone(), run), due, true)?;
        Ok(Scheduled::new(self.shared.clone(), key, ticket).cancel_on_drop())
    }

    /// Claims the key of a checked timer nobody watches, at the call; the future reports the
    /// outcome, and cancels the timer if it is dropped before it completes.
    pub(crate) fn submit_unwatched(
        &self,
        prepared: Result<Prepared, Error>,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let claimed = prepared.and_then(|Prepared { key, due, run }| {
            self.check_running()?;
            let ticket = self.shared.add(Timer::new(key.clone(), run), due, false)?;
            Ok(Batch { shared: &self.shared, claimed: vec![(key, ticket.serial)] })
        });
        async move {
            tokio::task::coop::consume_budget().await;
            claimed.map(|mut claimed| claimed.claimed.clear())
        }
    }

    /// Moves the pending timer with this key, or schedules `job` under it if none is pending,
    /// in one step under the key's lock: no other task can take the key in between. The call
    /// for a keep-alive: each message on a connection pushes its idle timeout back, and the
    /// first one arms it. Returns `Ok(true)` if a new timer was scheduled (as `HashSet::insert`
    /// does), `Ok(false)` if the pending one was moved, in which case `job` is dropped unused
    /// and the pending timer keeps its own job (a repeating timer continues at its period from
    /// the new deadline). The deadline is fixed, and the timer armed or moved, when this method
    /// is called; the future reports which. [`schedule_or_reset_handle`](Self::schedule_or_reset_handle)
    /// does the same and hands back a [`TimerHandle`], which moves the timer with no key lookup
    /// and can cancel it on drop.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule), except that a pending key is not an error.
    ///
    /// # Cancel safety
    /// The timer was armed or moved when the method was called; dropping the future does not
    /// undo it (only the answer is lost).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let idle = Duration::from_secs(30);
    /// let on_idle = |key: String| async move { println!("{key}: idle, closing") };
    /// assert!(timer.schedule_or_reset("idle:conn-7", idle, on_idle).await?, "first message: armed");
    /// tokio::time::sleep(Duration::from_secs(20)).await;
    /// assert!(!timer.schedule_or_reset("idle:conn-7", idle, on_idle).await?, "traffic: pushed back");
    /// # Ok(()) }
    /// ```
    pub fn schedule_or_reset<K, F, Fut>(
        &self,
        key: K,
        delay: Duration,
        job: F,
    ) -> impl Future<Output = Result<bool, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let upserted = self.upsert(key.as_ref(), delay, || Run::Once(job::once(job, &Origin::current())));
        Self::report(upserted.map(|(claimed, ..)| claimed))
    }

    /// Debounces the timer under `key`: one run for a burst of calls, `quiet` after the burst's
    /// last call and never later than `max_wait` after its first, running the **last** call's
    /// `job` (the earlier calls' jobs are dropped, never run). Returns `true` when this call
    /// opened a new burst, `false` when it joined the pending one. Each call's deadline is fixed
    /// when it is made, as `tokio::time::sleep`'s is, and rounded up to the tick.
    ///
    /// Once the timer fires, the burst is over: the next call opens a new one at once, and its
    /// job, when it fires, waits for the last burst's job to end before it runs (each debounced
    /// job takes its key's turn), so the jobs of one key never overlap, as the durable
    /// [`debounce`](crate::durable::DurableScheduler::debounce)'s runs do not. (Its timer still
    /// fires on time: what waits is the job.) A call on a key whose pending timer was scheduled another way opens a burst
    /// on that timer (from this call on) and replaces its job; a key that holds a repeating timer
    /// is refused. [`cancel`](Self::cancel) ends a burst; [`schedule_or_reset`](Self::schedule_or_reset)
    /// keeps its meaning (it moves the timer, keeps its job, and leaves the cap alone).
    ///
    /// # Errors
    /// - [`Error::Invalid`] if `max_wait` is shorter than `quiet` (pass equal ones for a fixed
    ///   delay), for a key `schedule` refuses, or for a key that holds a repeating timer;
    /// - [`Error::Full`] and [`Error::Stopped`] as [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// The timer was armed or moved when the method was called; dropping the future does not
    /// undo it (only the answer is lost).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (quiet, max_wait) = (Duration::from_secs(2), Duration::from_secs(10));
    /// for rev in 0..3 {
    ///     let opened = timer.debounce("doc-7:digest", quiet, max_wait, move |key: String| async move {
    ///         println!("{key}: send the digest of revision {rev}") // only rev 2's runs
    ///     }).await?;
    ///     assert_eq!(opened, rev == 0);
    ///     tokio::time::sleep(Duration::from_millis(500)).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn debounce<K, F, Fut>(
        &self,
        key: K,
        quiet: Duration,
        max_wait: Duration,
        job: F,
    ) -> impl Future<Output = Result<bool, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // Each run takes its key's turn, so that a burst's run waits for the last burst's to end.
        let turn = self.shared.debounce_turn(key.as_ref());
        let job = move |key: String| async move {
            let _turn = turn.lock().await;
            job(key).await;
        };
        let debounced = self.debounce_now(key.as_ref(), quiet, max_wait, job::once(job, &Origin::current()));
        Self::report(debounced)
    }

    /// [`debounce`](Self::debounce)'s work, done at the call.
    fn debounce_now(
        &self,
        key: &str,
        quiet: Duration,
        max_wait: Duration,
        job: Box<dyn job::OnceJob>,
    ) -> Result<bool, Error> {
        check_key(key)?;
        if max_wait < quiet {
            return Err(Error::invalid(format!(
                "debounce of {key:?}: max_wait ({max_wait:?}) is shorter than quiet ({quiet:?}); give a max_wait of at \
                 least quiet (equal ones make a fixed delay)"
            )));
        }
        self.check_running()?;
        let reading = self.clock.read(Instant::now());
        let (quiet, cap) = (self.clock.after_reading(&reading, quiet), self.clock.after_reading(&reading, max_wait));
        self.shared.debounce(&Key::from(key), job, quiet, cap.deadline)
    }

    /// Moves the pending timer with this key, or schedules `job` under it if none is pending, as
    /// [`schedule_or_reset`](Self::schedule_or_reset) does, and returns a [`TimerHandle`] to the
    /// pending timer, new or moved: the keep-alive's call. The handle pushes the deadline back
    /// on each message with no key lookup ([`TimerHandle::reschedule`]), and
    /// [`TimerHandle::cancel_on_drop`] makes it cancel the timer when the connection goes.
    ///
    /// # Errors
    /// As [`schedule_or_reset`](Self::schedule_or_reset).
    ///
    /// # Cancel safety
    /// As [`schedule_or_reset`](Self::schedule_or_reset): the timer was armed or moved at the
    /// call; dropping the future loses only the handle.
    ///
    /// # Examples
    /// See [`TimerHandle`].
    pub fn schedule_or_reset_handle<K, F, Fut>(
        &self,
        key: K,
        delay: Duration,
        job: F,
    ) -> impl Future<Output = Result<TimerHandle, Error>> + Send + '_
    where
        K: AsRef<str>,
        F: FnOnce(String) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let upserted = self.upsert(key.as_ref(), delay, || Run::Once(job::once(job, &Origin::current())));
        Self::report(upserted.map(|(_, key, ticket)| self.handle(key, ticket)))
    }

    /// Moves the pending timer with this key to `delay` from now, or claims the key for a new
    /// timer running what `run` makes, under one lock. Returns whether a timer was claimed, and
    /// the pending timer's key and ticket (for a handle). `run` is called only if the key is
    /// claimed: a push-back builds no timer (no allocation for its job), and `run` (with what it
    /// captured) is dropped once the shard's lock is released.
    pub(crate) fn upsert(
        &self,
        key: &str,
        delay: Duration,
        run: impl FnOnce() -> Run,
    ) -> Result<(bool, Key, Ticket), Error> {
        self.upsert_stored(key, |key: &str| Key::from(key), delay, run)
    }

    /// As [`upsert`](Self::upsert), the key stored as `store` makes it.
    pub(crate) fn upsert_stored(
        &self,
        key: &str,
        store: impl FnOnce(&str) -> Key,
        delay: Duration,
        run: impl FnOnce() -> Run,
    ) -> Result<(bool, Key, Ticket), Error> {
        check_key(key)?;
        let (due, at) = self.clock.moved(Instant::now(), delay);
        let key = store(key);
        self.check_running()?;
        let (claimed, ticket) = self.shared.upsert(&key, || Timer::new(key.clone(), run()), due, at, false)?;
        Ok((claimed, key, ticket))
    }

    /// A handle to the timer of `ticket`, which holds `key`.
    pub(crate) fn handle(&self, key: Key, ticket: Ticket) -> TimerHandle {
        TimerHandle::new(self.shared.clone(), key, ticket)
    }

    /// A future that reports an outcome reached at the call, after giving way now and then, as
    /// `schedule` does.
    pub(crate) async fn report<T: Send>(outcome: Result<T, Error>) -> Result<T, Error> {
        tokio::task::coop::consume_budget().await;
        outcome
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    fn check_running(&self) -> Result<(), Error> {
        if self.tx.is_closed() {
            return Err(Error::Stopped);
        }
        Ok(())
    }

    /// Cancels the pending timer with this key. Returns `true` if one was pending: its job will
    /// not run and its [`Scheduled`] resolves `Err(Error::Cancelled)`. For a repeating timer,
    /// runs already started go on, and a run the service was firing at the very moment of the
    /// cancel may still start its job just after `cancel` returns; no later run does. Returns
    /// `false` if no timer had the key. [`cancel_now`](Self::cancel_now) does the same without
    /// `async`, for `Drop` impls. The cancelled timer's job (and what it captured) is dropped
    /// before the call returns, on the caller's thread with no lock held.
    ///
    /// # Cancel safety
    /// The cancel takes effect the first time the future is polled, entirely; dropping the future
    /// after that leaves the timer cancelled.
    ///
    /// # Examples
    /// See [`Scheduler`].
    pub async fn cancel(&self, key: &str) -> bool {
        let cancelled = self.cancel_now(key);
        // Give way now and then to the service and other tasks, as `schedule` does.
        tokio::task::coop::consume_budget().await;
        cancelled
    }

    /// Cancels the pending timer with this key at once, as [`cancel`](Self::cancel) does, from
    /// synchronous code such as a `Drop` impl. It takes one uncontended lock and never waits for
    /// the service. Unlike `cancel` it does not count against the task's cooperative budget, so
    /// a loop of many cancels on one task should use `cancel` or
    /// [`cancel_many`](Self::cancel_many).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// struct Connection { id: u64, timer: Scheduler }
    ///
    /// impl Drop for Connection {
    ///     fn drop(&mut self) {
    ///         self.timer.cancel_now(&format!("idle:conn-{}", self.id));
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// timer.schedule("idle:conn-7", Duration::from_secs(30), |_| async {}).await?;
    /// drop(Connection { id: 7, timer: timer.clone() });
    /// assert!(!timer.contains("idle:conn-7"));
    /// # Ok(()) }
    /// ```
    pub fn cancel_now(&self, key: &str) -> bool {
        self.shared.cancel(key.as_bytes(), None)
    }

    /// Moves the pending timer with this key to `delay` after the call; a repeating timer
    /// continues at its period from there. A [paused](Self::pause) timer is resumed there,
    /// every pause cleared. A deadline too far for the wheel is clamped, as
    /// [`schedule`](Self::schedule)'s is.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a key that is empty or longer than
    /// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, [`Error::NotFound`] if no timer with this key
    /// is pending, [`Error::Stopped`] once the service has stopped.
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
    pub fn reschedule<'a>(
        &'a self,
        key: &'a str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        let moved = check_key(key).map(|()| self.clock.moved(Instant::now(), delay));
        self.move_timer(key.as_bytes(), moved)
    }

    /// Pauses the pending timer with this key: it keeps the time left to its next run and does
    /// not fire until [`resume`](Self::resume)d, as a stun freezes a buff's remaining time.
    /// Returns the time left. A paused timer stays pending under its key
    /// ([`contains`](Self::contains) is true, it counts against `max_pending`, its
    /// [`Scheduled`] waits) but has no [`deadline`](Self::deadline); it can be cancelled or
    /// replaced, and a move ([`reschedule`](Self::reschedule),
    /// [`reschedule_at`](Self::reschedule_at), [`schedule_or_reset`](Self::schedule_or_reset),
    /// a [`TimerHandle`] push-back) sets a deadline, which clears every pause and resumes it
    /// there. The time left is kept in whole ticks of the service's clock (a deadline already
    /// rounds up to one).
    ///
    /// # Pauses stack
    /// Each `pause` counts one pause and each `resume` undoes one: the timer runs again, with
    /// the time it had left when first paused, only once every pause is resumed. So two
    /// overlapping stuns compose: the buff runs again when the later one ends, not the first.
    /// Pausing a paused timer changes nothing but the count, and returns its time left. A timer
    /// holds at most 32,768 pauses at once.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a key that is empty or longer than
    /// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, or for a timer that holds 32,768 pauses
    /// already; [`Error::NotFound`] if no timer with this key is pending, [`Error::Stopped`]
    /// once the service has stopped.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the timer was not paused.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let secs = Duration::from_secs;
    /// timer.schedule("haste:player-9", secs(10), |key| async move { println!("{key} wears off") }).await?;
    /// tokio::time::sleep(secs(4)).await;
    /// assert_eq!(timer.pause("haste:player-9").await?, secs(6), "stunned: the buff's time stands still");
    /// tokio::time::sleep(secs(1)).await;
    /// assert_eq!(timer.pause("haste:player-9").await?, secs(6), "a second stun overlaps the first");
    /// tokio::time::sleep(secs(2)).await;
    /// assert_eq!(timer.resume("haste:player-9").await?, secs(6), "the first stun is over, not the second");
    /// assert_eq!(timer.deadline("haste:player-9"), None, "still stunned");
    /// tokio::time::sleep(secs(30)).await;
    /// assert_eq!(timer.resume("haste:player-9").await?, secs(6), "both stuns are over: 6 s to go");
    /// assert!(timer.deadline("haste:player-9").is_some());
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, key: &str) -> Result<Duration, Error> {
        check_key(key)?;
        // Give way now and then, as `schedule` does, before anything has changed.
        tokio::task::coop::consume_budget().await;
        self.check_running()?;
        self.shared.pause(key.as_bytes(), Instant::now())
    }

    /// Undoes one [`pause`](Self::pause) of the timer with this key: once every pause is
    /// undone, its time left counts down again from now. Returns the time left, which while
    /// other pauses remain is the time it will have when they are resumed (the timer stays
    /// paused, with no [`deadline`](Self::deadline)). A timer that is not paused is left as it
    /// is, and its time left returned. See [`pause`](Self::pause)'s "Pauses stack".
    ///
    /// # Errors
    /// [`Error::Invalid`] for a key that is empty or longer than
    /// [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes, [`Error::NotFound`] if no timer with this key
    /// is pending, [`Error::Stopped`] once the service has stopped.
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, the timer was not resumed.
    ///
    /// # Examples
    /// See [`pause`](Self::pause).
    pub async fn resume(&self, key: &str) -> Result<Duration, Error> {
        check_key(key)?;
        tokio::task::coop::consume_budget().await;
        self.check_running()?;
        self.shared.resume(key.as_bytes(), Instant::now())
    }

    /// Moves the pending timer with this key to the absolute `deadline`; a repeating timer
    /// continues at its period from there. A deadline in the past fires on the next tick.
    ///
    /// # Errors
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Cancel safety
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// timer.schedule("order-42:review", Duration::from_secs(3600), |_| async {}).await?;
    /// let at = Instant::now() + Duration::from_secs(60);
    /// timer.reschedule_at("order-42:review", at).await?;
    /// assert_eq!(timer.deadline("order-42:review"), Some(at));
    /// # Ok(()) }
    /// ```
    pub fn reschedule_at<'a>(
        &'a self,
        key: &'a str,
        deadline: Instant,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.move_timer(key.as_bytes(), check_key(key).map(|()| (self.clock.at(deadline), deadline)))
    }

    /// Moves the pending timer with the stored key `key` to `moved` (its due ticks and instant).
    pub(crate) async fn move_timer(&self, key: &[u8], moved: Result<(Due, Instant), Error>) -> Result<(), Error> {
        // Give way now and then, as `schedule` does, before anything has moved.
        tokio::task::coop::consume_budget().await;
        let (Due { deadline, set_at }, at) = moved?;
        self.check_running()?;
        self.shared.move_timer(key, at, deadline, set_at)
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// When the pending timer with this key is next due, or `None` if none is pending or it is
    /// [paused](Self::pause) (by any pause not yet resumed). Every other pending timer has one,
    /// however far (see [`schedule`](Self::schedule)'s "Far deadlines"). The instant is the deadline rounded up to the service's tick (a repeating timer's next run is
    /// exact), which is when the timer becomes due; it is the instant `reschedule_at` was given
    /// when that is a whole number of ticks from the service's start, as with the default 1 ms
    /// tick under paused time. One lock, no allocation.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// timer.schedule("cooldown:p1:fireball", Duration::from_secs(5), |_| async {}).await?;
    /// let left = timer.deadline("cooldown:p1:fireball").unwrap() - Instant::now();
    /// assert_eq!(left, Duration::from_secs(5)); // "ready in 5.0 s"
    /// assert_eq!(timer.deadline("cooldown:p1:frostbolt"), None);
    /// # Ok(()) }
    /// ```
    pub fn deadline(&self, key: &str) -> Option<Instant> {
        match self.shared.deadline(key.as_bytes())? {
            (_, Some(exact)) => Some(exact),
            (tick, None) => self.clock.instant(tick),
        }
    }

    /// Whether a timer with this key is pending. Answers from the shared key map, without a
    /// round trip to the service.
    pub fn contains(&self, key: &str) -> bool {
        self.shared.contains(key.as_bytes())
    }

    /// The number of pending timers, counted at one instant: never more than
    /// [`max_pending`](crate::Builder::max_pending).
    pub fn len(&self) -> usize {
        self.shared.stats().pending
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The service's name, given to [`Builder::name`](crate::Builder::name).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// A snapshot of the counters, all read at one instant (every shard's lock is held for the
    /// read, briefly holding up the calls on the service's keys). With the `metrics` feature,
    /// the call also publishes them (see [`metrics`]).
    ///
    /// [`metrics`]: https://docs.rs/tokio-timewheel/latest/tokio_timewheel/metrics/index.html
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Gives back the memory that the timers no longer need: every shard's wheel and key map are
    /// rebuilt to the size of the timers they hold (and of [`Builder::capacity`](crate::Builder::capacity)),
    /// and the service's own buffers cut to a small size. The service does the same by itself
    /// for a shard whose timers fall below a quarter of its room (past room for 4,096 timers), as
    /// timers fire; this call also covers cancelled timers and the service's buffers. It costs
    /// one pass over the pending timers, shard by shard, on the service's task.
    ///
    /// # Cancel safety
    /// The work is done by the service whether or not the future is still there to see it end.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let burst = (0..10_000).map(|i| (format!("t-{i}"), Duration::from_secs(60), |_: String| async {}));
    /// timer.schedule_many(burst).await;
    /// timer.cancel_many((0..10_000).map(|i| format!("t-{i}"))).await;
    /// timer.shrink_to_fit().await;
    /// # Ok(()) }
    /// ```
    pub async fn shrink_to_fit(&self) {
        let (reply, done) = oneshot::channel();
        if self.tx.send(Command::ShrinkToFit(reply)).await.is_ok() {
            let _ = done.await;
        }
    }

    /// How late timers fired over the last [`LATENESS_WINDOW`](crate::LATENESS_WINDOW) to twice
    /// that: p50, p99 and max, measured by the service from the start of each timer's deadline
    /// tick to the moment it fired, for every run of every timer. The service also logs a
    /// warning when it falls behind (see [`Builder::lag_warning`](crate::Builder::lag_warning)).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// timer.sleep_keyed("warm-up", Duration::from_millis(10)).await?;
    /// let late = timer.lateness();
    /// assert_eq!(late.count, 1);
    /// println!("p50 {:?}, p99 {:?}, max {:?}", late.p50, late.p99, late.max);
    /// # Ok(()) }
    /// ```
    pub fn lateness(&self) -> Lateness {
        self.shared.lateness.lock().unwrap_or_else(std::sync::PoisonError::into_inner).read()
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

/// Timers claimed at a call whose future has not completed: dropped, it cancels them (each by
/// its serial number, so never a later timer that took the key). Emptied once the future
/// completes.
struct Batch<'a> {
    shared: &'a Shared,
    claimed: Vec<(Key, u64)>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for (key, serial) in self.claimed.drain(..) {
            self.shared.cancel(key.as_bytes(), Some(serial));
        }
    }
}

/// A timer checked when a method is called, before it claims the key.
pub(crate) struct Prepared {
    key: Key,
    due: Due,
    run: Run,
}

impl Prepared {
    pub(crate) fn new(key: &str, due: Result<Due, Error>, run: Run) -> Result<Self, Error> {
        Self::stored(key, |key: &str| Key::from(key), due, run)
    }

    /// As [`new`](Self::new), the key stored as `store` makes it (a queue's key in its own key
    /// space).
    pub(crate) fn stored(
        key: &str,
        store: impl FnOnce(&str) -> Key,
        due: Result<Due, Error>,
        run: Run,
    ) -> Result<Self, Error> {
        check_key(key)?;
        Ok(Prepared { key: store(key), due: due?, run })
    }
}
