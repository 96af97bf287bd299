//! What a handler receives, what the dead letters hold, and what `stats` reports.

use std::time::{Duration, SystemTime};

use super::series::Series;
use super::TaskOptions;
use crate::Recurrence;

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

/// A task that failed `max_attempts` times, kept in the dead letters until
/// [`requeue_dead`](super::DurableScheduler::requeue_dead) puts it back.
///
/// Its key is free again: a new task may be scheduled under it (and if that one dies too, its
/// record replaces this one).
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadTask {
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempts: u32,
    pub(crate) last_error: String,
    pub(crate) died: SystemTime,
    pub(crate) due: SystemTime,
}

impl DeadTask {
    /// The key the task was scheduled under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload given to `schedule`.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// How many deliveries the task had.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last failure: the handler's error text, its panic message, "the handler timed out
    /// after ..." (the handler timeout), or "lease expired" (its worker died or was cut off).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// When the task went to the dead letters, on Redis's clock.
    pub fn died(&self) -> SystemTime {
        self.died
    }

    /// When its last delivery was due, on Redis's clock.
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// The payload read as JSON into a `T`, as [`Task::json`] reads it.
    ///
    /// # Errors
    /// [`Error::Payload`](crate::Error::Payload) when the payload is not the JSON of a `T`.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::Error> {
        super::payload::from_json(&self.key, &self.payload)
    }
}

/// Where a task is in its life, as [`TaskInfo::state`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Not yet made ready by a tick: not yet due (or waiting out a retry's backoff), or due while
    /// no leader ticked the wheel, which [`TaskInfo::overdue_by`] tells apart.
    Waiting,
    /// Due, waiting for a worker (or its lease ran out: the next tick hands it out again).
    Ready,
    /// Claimed by a worker under a live lease: its handler runs.
    Running,
    /// In the dead letters, after its last attempt failed.
    Dead,
    /// A run that ended, as the wheel's history keeps it (see
    /// [`DurableBuilder::history_limit`](super::DurableBuilder::history_limit)): acknowledged,
    /// dead or cancelled while it ran, [`TaskInfo::finished`] tells which. Only
    /// [`list`](super::DurableScheduler::list) reads it; [`get`](super::DurableScheduler::get)
    /// reads a task's current state.
    Finished,
}

impl TaskState {
    /// Every state, in the order of a task's life.
    pub const ALL: [TaskState; 5] =
        [TaskState::Waiting, TaskState::Ready, TaskState::Running, TaskState::Dead, TaskState::Finished];

    /// The state's name, in lower case: `waiting`, `ready`, `running`, `dead` or `finished`, as
    /// the command line, the dashboard, the cursors and the scripts write it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::Dead => "dead",
            TaskState::Finished => "finished",
        }
    }
}

/// The state's name, as [`TaskState::as_str`] writes it.
impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a state's name, as [`TaskState::as_str`] writes it.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) naming the states, for any other text.
///
/// # Examples
/// ```
/// # #[cfg(feature = "redis")] {
/// use tokio_timewheel::durable::TaskState;
///
/// assert_eq!("dead".parse::<TaskState>().unwrap(), TaskState::Dead);
/// assert_eq!(TaskState::Running.to_string(), "running");
/// assert!("gone".parse::<TaskState>().is_err());
/// # }
/// ```
impl std::str::FromStr for TaskState {
    type Err = crate::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == text).ok_or_else(|| {
            crate::Error::invalid(format!("{text:?} is not a task state: waiting, ready, running, dead or finished"))
        })
    }
}

/// How a finished run ended, as [`FinishedRun::outcome`] tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Its handler succeeded and the run was acknowledged (a recurring task's series goes on).
    Acknowledged,
    /// Its last attempt failed (or its last lease ran out): it went to the dead letters.
    Dead,
    /// Cancelled while it ran ([`cancel_running`](super::DurableScheduler::cancel_running)).
    Cancelled,
}

impl Outcome {
    /// `acknowledged`, `dead` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acknowledged => "acknowledged",
            Outcome::Dead => "dead",
            Outcome::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run that ended went, as the wheel's history keeps it: for a
/// [`Finished`](TaskState::Finished) task, [`TaskInfo::finished`].
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedRun {
    pub(crate) outcome: Outcome,
    pub(crate) started_at: Option<SystemTime>,
    pub(crate) finished_at: SystemTime,
    pub(crate) handler_duration: Option<std::time::Duration>,
}

impl FinishedRun {
    /// Acknowledged, dead or cancelled.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// When its handler started, on Redis's clock as the worker's node estimated it; `None` when
    /// it never started (cancelled while it waited in a worker's buffer) or its last lease ran
    /// out (the worker that held it is not heard from).
    pub fn started_at(&self) -> Option<SystemTime> {
        self.started_at
    }

    /// When Redis recorded its end, on Redis's clock: the acknowledgement or failure landing,
    /// or the tick that found its lease run out.
    pub fn finished_at(&self) -> SystemTime {
        self.finished_at
    }

    /// How long its handler ran, as the worker measured it (to the microsecond); `None` when
    /// [`started_at`](Self::started_at) is.
    pub fn handler_duration(&self) -> Option<std::time::Duration> {
        self.handler_duration
    }
}

/// One task as [`get`](super::DurableScheduler::get) or [`list`](super::DurableScheduler::list)
/// read it: pending, dead, or a finished run from the history.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) due: SystemTime,
    pub(crate) attempt: u32,
    pub(crate) state: TaskState,
    pub(crate) last_error: Option<String>,
    /// Redis's clock when the task was read: what [`overdue_by`](TaskInfo::overdue_by) measures
    /// from.
    pub(crate) read_at: SystemTime,
    /// For a running task read by `list`: when it was claimed, and the node id of the worker
    /// that claimed it (`None` when not known).
    pub(crate) claim: Option<(SystemTime, Option<String>)>,
    /// For a finished run read from the history: how it went.
    pub(crate) finished: Option<FinishedRun>,
    /// The task's own retry settings, as `get` reads them (empty for the node's, and in what
    /// `list` and `due_next` read).
    pub(crate) options: TaskOptions,
    /// The series the task is a run of, as `get`, `list` and `due_next` read it from its
    /// record; `None` for a task that runs once, a dead letter and a finished run.
    pub(crate) series: Option<Series>,
}

impl TaskInfo {
    /// The key the task was scheduled under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload given to `schedule`.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// When it is (or its last delivery was) due, on Redis's clock.
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// How many deliveries it has had so far: 0 before the first, and while running the number
    /// of the delivery that runs; for a finished run, how many it took.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Waiting, ready, running, dead, or a finished run.
    pub fn state(&self) -> TaskState {
        self.state
    }

    /// The last failure's text (a handler's error, a panic, "lease expired"), if it failed; for
    /// a finished run, the error it died of.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// How the run ended, its start and end and how long its handler took: for a
    /// [`Finished`](TaskState::Finished) run as [`list`](super::DurableScheduler::list) reads
    /// it, `None` otherwise.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::{DurableScheduler, Outcome, TaskState}, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let page = timers.list(TaskState::Finished, None, 100).await?;
    /// for task in page.tasks() {
    ///     let Some(run) = task.finished() else { continue };
    ///     if run.outcome() == Outcome::Dead {
    ///         println!("{} died after {} attempts: {:?}", task.key(), task.attempt(), task.last_error());
    ///     } else {
    ///         println!("{} {} in {:?}", task.key(), run.outcome(), run.handler_duration());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn finished(&self) -> Option<&FinishedRun> {
        self.finished.as_ref()
    }

    /// How long past its due time the task waited, unhanded, when it was read (on Redis's
    /// clock): `Some` for a task waiting or ready whose due time had passed, `None` for one not
    /// yet due, running or dead.
    ///
    /// A ready task is overdue by less than a tick or two while workers keep up. A waiting task
    /// that is overdue has not been made ready yet: no leader ticked the wheel since it fell due
    /// (no worker runs, or a takeover is under way), and it is handed out on the first tick.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::{DurableScheduler, TaskState}, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if let Some(task) = timers.get("order-950:review").await? {
    ///     match task.overdue_by() {
    ///         Some(late) if task.state() == TaskState::Waiting => println!("{late:?} overdue: is a worker running?"),
    ///         Some(late) => println!("{late:?} overdue, waiting for a worker"),
    ///         None => println!("{:?}, due at {:?}", task.state(), task.due()),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn overdue_by(&self) -> Option<std::time::Duration> {
        if !matches!(self.state, TaskState::Waiting | TaskState::Ready) {
            return None;
        }
        self.read_at.duration_since(self.due).ok().filter(|late| !late.is_zero())
    }

    /// When a worker claimed the task, on Redis's clock: for a running task as
    /// [`list`](super::DurableScheduler::list) reads it, `None` otherwise (or when a worker of an
    /// earlier version claimed it).
    pub fn claimed_at(&self) -> Option<SystemTime> {
        self.claim.as_ref().map(|(at, _)| *at)
    }

    /// The node id of the worker that runs the task (as [`workers`](super::DurableScheduler::workers)
    /// and [`leaders`](super::DurableScheduler::leaders) name it): for a running task as
    /// [`list`](super::DurableScheduler::list) reads it, `None` otherwise (or when a worker of an
    /// earlier version claimed it).
    pub fn worker(&self) -> Option<&str> {
        self.claim.as_ref().and_then(|(_, node)| node.as_deref())
    }

    /// The task's own max attempts ([`TaskOptions::max_attempts`]) as
    /// [`get`](super::DurableScheduler::get) reads it: `None` for a task that follows the node's
    /// [`max_attempts`](super::DurableBuilder::max_attempts) (a dead letter keeps the task's own),
    /// and for a task read by [`list`](super::DurableScheduler::list) or
    /// [`due_next`](super::DurableScheduler::due_next), which do not read them.
    pub fn max_attempts(&self) -> Option<u32> {
        self.options.own_max_attempts()
    }

    /// The base of the task's own backoff ([`TaskOptions::backoff`], in whole milliseconds) as
    /// [`get`](super::DurableScheduler::get) reads it: `None` for a task that follows the node's
    /// [`backoff`](super::DurableBuilder::backoff), and where
    /// [`max_attempts`](Self::max_attempts) is `None` for want of reading it.
    pub fn backoff(&self) -> Option<Duration> {
        self.options.own_backoff_ms().map(Duration::from_millis)
    }

    /// Whether the task's due time had passed, and it was not handed out yet, when it was read:
    /// [`overdue_by`](Self::overdue_by) is `Some`.
    pub fn is_overdue(&self) -> bool {
        self.overdue_by().is_some()
    }

    /// Whether the task is a run of a series ([`schedule_recurring`], [`upsert_recurring`],
    /// [`schedule_repeating`]): its due time is the series' next run, and when that run ends the
    /// series is placed at the one after. `false` for a task that runs once, and for a dead
    /// letter or a finished run, which keep no series (the series of a run that died goes on
    /// without it).
    ///
    /// [`schedule_recurring`]: super::DurableScheduler::schedule_recurring
    /// [`upsert_recurring`]: super::DurableScheduler::upsert_recurring
    /// [`schedule_repeating`]: super::DurableScheduler::schedule_repeating
    pub fn is_recurring(&self) -> bool {
        self.series.is_some()
    }

    /// The series' recurrence as the task's record keeps it: its cadence (a
    /// [period](Recurrence::period), or a cron expression in a zone: `Recurrence::expression` and
    /// `Recurrence::zone`, feature `cron`), its [end](Recurrence::end) and its
    /// [missed-run policy](Recurrence::missed_runs) (the one the series follows, the durable
    /// default `Skip` if it was given none). `None` for a task that is not
    /// [recurring](Self::is_recurring), and for a series whose recurrence this build cannot read
    /// (a cron series without the `cron` feature, or one written by a later version), which
    /// [`unreadable_recurrence`](Self::unreadable_recurrence) gives as text.
    ///
    /// The record keeps how many runs are left ([`runs_left`](Self::runs_left)) rather than the
    /// [limit](Recurrence::limit) and the [start](Recurrence::starting) the series was given, so
    /// the recurrence has neither. Its `Display` form is the cadence:
    /// `every 20s`, `cron "0 3 * * *" in Europe/Berlin`.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if let Some(task) = timers.get("report:nightly").await? {
    ///     match (task.recurrence(), task.next_run()) {
    ///         (Some(series), Some(next)) => println!("{series}, next at {next:?}"),
    ///         (Some(series), None) => println!("{series}: this run is its last"),
    ///         (None, _) if task.is_recurring() => println!("a series this build cannot read"),
    ///         (None, _) => println!("runs once, at {:?}", task.due()),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recurrence(&self) -> Option<&Recurrence> {
        self.series.as_ref()?.recurrence.as_ref().ok()
    }

    /// The recurrence of a series this build cannot read, as the record stores it (for a
    /// cron series, `<end ms> cron <zone> <expression>`); `None` when
    /// [`recurrence`](Self::recurrence) reads it, or the task is not recurring.
    pub fn unreadable_recurrence(&self) -> Option<&str> {
        self.series.as_ref()?.recurrence.as_ref().err().map(String::as_str)
    }

    /// How many runs the series has left, the one due (or running) included: `None` for a
    /// series with no [limit](Recurrence::limit), and for a task that is not
    /// [recurring](Self::is_recurring).
    pub fn runs_left(&self) -> Option<u64> {
        self.series.as_ref()?.runs_left
    }

    /// When the series runs next, on Redis's clock: for a waiting or ready task its
    /// [due](Self::due) time (the run that waits), for a running one the run after it, as the
    /// series' recurrence places it were the run to end when the task was read (a run that ends
    /// later may move it on, by the series' missed-run policy). `None` for a task that is not
    /// [recurring](Self::is_recurring), a running series' last run (no
    /// [run left](Self::runs_left) after it, or its end reached), and a running series whose
    /// recurrence this build cannot read.
    pub fn next_run(&self) -> Option<SystemTime> {
        let series = self.series.as_ref()?;
        match self.state {
            TaskState::Waiting | TaskState::Ready => Some(self.due),
            TaskState::Running if series.runs_left != Some(1) => {
                let recurrence = series.recurrence.as_ref().ok()?;
                let due_ms = super::time::unix_ms(self.due);
                let ended_ms = super::time::unix_ms(self.read_at).max(due_ms);
                super::series::next_due(recurrence, due_ms, ended_ms).map(super::time::from_unix_ms)
            }
            _ => None,
        }
    }
}

/// A snapshot of a durable wheel, read from Redis in one call per partition.
///
/// The gauges (`pending` to `cursor_lag_ticks`) are exact at the moment of the call; the
/// counters (`scheduled` to `cancelled`) count since the wheel was first used and are kept
/// by every node together.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurableStats {
    /// Tasks scheduled and not yet acknowledged, cancelled or dead: `waiting + ready + in_flight`.
    pub pending: usize,
    /// Tasks not yet due (or waiting out a retry backoff).
    pub waiting: usize,
    /// Due tasks waiting for a worker.
    pub ready: usize,
    /// Tasks claimed by a worker and not yet acknowledged.
    pub in_flight: usize,
    /// Tasks in the dead letters.
    pub dead: usize,
    /// How many ticks the cursor is behind Redis's clock: 0 or 1 while a leader ticks; larger
    /// when no worker runs or while the cursor catches up.
    pub cursor_lag_ticks: u64,
    /// Tasks accepted by `schedule` and its kin.
    pub scheduled: u64,
    /// Deliveries to handlers (each retry counts).
    pub handed_out: u64,
    /// Deliveries acknowledged.
    pub acked: u64,
    /// Deliveries that failed and were scheduled again.
    pub retried: u64,
    /// Tasks moved to the dead letters.
    pub dead_lettered: u64,
    /// Tasks cancelled by `cancel` and `cancel_many`, and running tasks that ended as cancelled
    /// after `cancel_running`.
    pub cancelled: u64,
    /// Whether the wheel is paused (for a partitioned wheel: any of its partitions), by
    /// [`pause`](super::DurableScheduler::pause): workers claim nothing new, while the leader
    /// ticks and tasks fall due and wait, ready.
    pub paused: bool,
}

impl DurableStats {
    /// Adds a partition's figures: sums, and the largest cursor lag.
    pub(crate) fn add(&mut self, part: &DurableStats) {
        self.pending += part.pending;
        self.waiting += part.waiting;
        self.ready += part.ready;
        self.in_flight += part.in_flight;
        self.dead += part.dead;
        self.cursor_lag_ticks = self.cursor_lag_ticks.max(part.cursor_lag_ticks);
        self.scheduled += part.scheduled;
        self.handed_out += part.handed_out;
        self.acked += part.acked;
        self.retried += part.retried;
        self.dead_lettered += part.dead_lettered;
        self.cancelled += part.cancelled;
        self.paused |= part.paused;
    }
}

/// The wheel-wide figures of the last minutes, as [`figures`](super::DurableScheduler::figures)
/// read them from Redis: what every node's workers did, whichever process asks.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub(crate) minutes: Vec<MinuteCounts>,
    pub(crate) lateness: Vec<(Duration, u64)>,
}

impl Figures {
    /// One entry a minute, oldest first, the current (unfinished) minute last; minutes in which
    /// nothing happened count zeros.
    pub fn minutes(&self) -> &[MinuteCounts] {
        &self.minutes
    }

    /// How late deliveries were claimed over those minutes, after their due time on Redis's
    /// clock: `(bound, count)` buckets in rising order, each counting the deliveries later than
    /// the previous bound and no later than this one (under 1 ms, under 2 ms, 4 ms, ... a bucket
    /// an octave, the last open-ended, given as `Duration::MAX`). Empty buckets are left out.
    pub fn lateness(&self) -> &[(Duration, u64)] {
        &self.lateness
    }

    /// The upper bound of the bucket that holds the `q` quantile of the lateness (`q` from 0 to
    /// 1), within a factor of two; `None` when nothing was claimed.
    pub fn lateness_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.lateness.iter().map(|&(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        self.lateness
            .iter()
            .find(|&&(_, n)| {
                seen += n;
                seen >= rank
            })
            .map(|&(bound, _)| bound)
    }
}

/// What the wheel's workers did in one minute of Redis's clock, all nodes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinuteCounts {
    /// When the minute began.
    pub start: SystemTime,
    /// Deliveries handed to workers (claimed).
    pub handed_out: u64,
    /// Deliveries acknowledged (handlers that succeeded).
    pub acked: u64,
    /// Deliveries that failed: a handler's error, panic or timeout, or a lease that ran out
    /// (each retried or sent to the dead letters).
    pub failed: u64,
    /// Tasks sent to the dead letters.
    pub dead: u64,
}

/// One page of [`list`](super::DurableScheduler::list) (the tasks of one state in that state's
/// order) or of [`due_next`](super::DurableScheduler::due_next), and where the next page starts.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub(crate) tasks: Vec<TaskInfo>,
    pub(crate) next: Option<ListCursor>,
}

impl ListPage {
    /// The tasks of this page, in their state's order (see
    /// [`list`](super::DurableScheduler::list)).
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }

    /// Where the next page starts; `None` when this page reached the end.
    pub fn next(&self) -> Option<&ListCursor> {
        self.next.as_ref()
    }

    /// Takes the page apart into its tasks and the next page's cursor.
    pub fn into_parts(self) -> (Vec<TaskInfo>, Option<ListCursor>) {
        (self.tasks, self.next)
    }
}

/// Where a page of [`list`](super::DurableScheduler::list) ends: the next page starts after this
/// task in its state's order (its due time, its place in the claim order or its death time, then
/// its key), so a task that comes or
/// goes meanwhile neither shifts nor repeats the others. It belongs to one state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListCursor {
    pub(crate) state: TaskState,
    /// The due time in ms, the claim token (claim order), the death time in ms, or the end
    /// time in ms of the last finished run listed.
    pub(crate) score: u64,
    /// The task's key; for the finished runs, where each partition's history is to be read on:
    /// the number of the next run to read in each, comma-separated (see [`finished_places`]).
    pub(crate) key: String,
}

impl ListCursor {
    /// The state whose tasks it pages.
    pub fn state(&self) -> TaskState {
        self.state
    }
}

/// The cursor as text, to hand to another process or put in an address and read back with
/// [`str::parse`]: `<state>:<ms>:<key>`, the state in lower case (`waiting`, `ready`,
/// `running`, `dead`, `finished`), then the due, claim, death or end time in milliseconds since
/// the Unix epoch, then the key as it is (it may hold `:` itself: it is everything after the
/// second one). A cursor of finished runs holds the end time of the last run listed, then where
/// each partition's history is to be read on instead of a key: `finished:<ms>:<n>,<n>,...`.
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::{durable::{DurableScheduler, ListCursor, TaskState}, Error};
/// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
/// let page = timers.list(TaskState::Dead, None, 100).await?;
/// if let Some(next) = page.next() {
///     let text = next.to_string(); // "dead:1767225600000:order-42:review", say
///     let again: ListCursor = text.parse()?;
///     let _more = timers.list(TaskState::Dead, Some(&again), 100).await?;
/// }
/// # Ok(()) }
/// ```
impl std::fmt::Display for ListCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.state, self.score, self.key)
    }
}

/// Reads a cursor written by its [`Display`](std::fmt::Display) form.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for text not of the form `<state>:<ms>:<key>`.
impl std::str::FromStr for ListCursor {
    type Err = crate::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || crate::Error::invalid(format!("{text:?} is not a list cursor (<state>:<ms>:<key>)"));
        let mut parts = text.splitn(3, ':');
        let (Some(state), Some(score), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let state: TaskState = state.parse().map_err(|_| bad())?;
        let score = score.parse().map_err(|_| bad())?;
        if state == TaskState::Finished && finished_places(key).is_none() {
            return Err(bad());
        }
        Ok(ListCursor { state, score, key: key.to_owned() })
    }
}

/// Where each partition's history is to be read on, from the key of a cursor of finished runs:
/// the number of the next run to read in each partition, comma-separated, in partition order.
pub(crate) fn finished_places(key: &str) -> Option<Vec<u64>> {
    key.split(',').map(|n| n.parse().ok()).collect()
}

// What the wheel reads, as JSON (or any serde format), under the `serde` feature: what the
// dashboard answers and the command line prints with `--json`, so that each field has one name.
// The rules (times, durations, payloads, nulls) are written once, on `TaskInfo`'s `Serialize`.
#[cfg(feature = "serde")]
mod json {
    use std::fmt::{self, Write as _};
    use std::time::{Duration, SystemTime};

    use serde::ser::{SerializeStruct, Serializer};
    use serde::Serialize;

    use super::{
        DeadTask, DurableStats, Figures, FinishedRun, ListCursor, ListPage, MinuteCounts, Outcome, TaskInfo, TaskState,
    };
    use crate::durable::time::unix_ms;
    use crate::error::Rfc3339;
    use crate::{MissedRuns, Recurrence};

    /// `d` in whole milliseconds (saturating).
    fn in_ms(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }

    /// `"waiting"`, `"ready"`, `"running"`, `"dead"` or `"finished"`, as [`TaskState::as_str`].
    impl Serialize for TaskState {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    /// `"acknowledged"`, `"dead"` or `"cancelled"`, as [`Outcome::as_str`].
    impl Serialize for Outcome {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    /// The cursor's text, as its `Display` writes it and `str::parse` reads it back.
    impl Serialize for ListCursor {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(self)
        }
    }

    /// `{"pending", "waiting", "ready", "running", "dead", "cursor_lag_ticks", "scheduled",
    /// "handed_out", "acked", "retried", "dead_lettered", "cancelled", "paused"}`: the fields of
    /// the struct, [`in_flight`](DurableStats::in_flight) named `running` as its state is.
    impl Serialize for DurableStats {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            // Every field, by name: a field added to the struct does not build until it is here.
            let DurableStats {
                pending,
                waiting,
                ready,
                in_flight,
                dead,
                cursor_lag_ticks,
                scheduled,
                handed_out,
                acked,
                retried,
                dead_lettered,
                cancelled,
                paused,
            } = *self;
            let mut m = s.serialize_struct("DurableStats", 13)?;
            m.serialize_field("pending", &pending)?;
            m.serialize_field("waiting", &waiting)?;
            m.serialize_field("ready", &ready)?;
            m.serialize_field("running", &in_flight)?;
            m.serialize_field("dead", &dead)?;
            m.serialize_field("cursor_lag_ticks", &cursor_lag_ticks)?;
            m.serialize_field("scheduled", &scheduled)?;
            m.serialize_field("handed_out", &handed_out)?;
            m.serialize_field("acked", &acked)?;
            m.serialize_field("retried", &retried)?;
            m.serialize_field("dead_lettered", &dead_lettered)?;
            m.serialize_field("cancelled", &cancelled)?;
            m.serialize_field("paused", &paused)?;
            m.end()
        }
    }

    /// `{"start_unix_ms", "handed_out", "acked", "failed", "dead"}`.
    impl Serialize for MinuteCounts {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let MinuteCounts { start, handed_out, acked, failed, dead } = *self;
            let mut m = s.serialize_struct("MinuteCounts", 5)?;
            m.serialize_field("start_unix_ms", &unix_ms(start))?;
            m.serialize_field("handed_out", &handed_out)?;
            m.serialize_field("acked", &acked)?;
            m.serialize_field("failed", &failed)?;
            m.serialize_field("dead", &dead)?;
            m.end()
        }
    }

    /// `{"minutes": [MinuteCounts, ...], "lateness": {"claimed", "p50_below_ms",
    /// "p99_below_ms", "buckets": [{"below_ms", "count"}, ...]}}`: the minutes oldest first;
    /// how many deliveries were claimed over them, the bound of the bucket that holds the median
    /// and the 99th percentile of their lateness ([`Figures::lateness_quantile`]), and the
    /// buckets that hold any, each counting the deliveries claimed less than `below_ms` after
    /// their due time and no less than the bound before it. The open-ended last bucket, and a
    /// quantile that falls in it, has a `below_ms` of `null`; so do the quantiles when nothing
    /// was claimed.
    impl Serialize for Figures {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("Figures", 2)?;
            m.serialize_field("minutes", &self.minutes)?;
            m.serialize_field("lateness", &Lateness(self))?;
            m.end()
        }
    }

    /// A lateness bound in ms; `None` for the open-ended bucket's `Duration::MAX`.
    fn bound_ms(bound: Duration) -> Option<u64> {
        (bound != Duration::MAX).then(|| in_ms(bound))
    }

    struct Lateness<'a>(&'a Figures);

    impl Serialize for Lateness<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let figures = self.0;
            let mut m = s.serialize_struct("Lateness", 4)?;
            m.serialize_field("claimed", &figures.lateness.iter().map(|&(_, n)| n).sum::<u64>())?;
            m.serialize_field("p50_below_ms", &figures.lateness_quantile(0.5).and_then(bound_ms))?;
            m.serialize_field("p99_below_ms", &figures.lateness_quantile(0.99).and_then(bound_ms))?;
            m.serialize_field("buckets", &Buckets(&figures.lateness))?;
            m.end()
        }
    }

    struct Buckets<'a>(&'a [(Duration, u64)]);

    impl Serialize for Buckets<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.0.iter().map(|&(bound, count)| Bucket { bound, count }))
        }
    }

    struct Bucket {
        bound: Duration,
        count: u64,
    }

    impl Serialize for Bucket {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("Bucket", 2)?;
            m.serialize_field("below_ms", &bound_ms(self.bound))?;
            m.serialize_field("count", &self.count)?;
            m.end()
        }
    }

    /// `{"tasks": [TaskInfo, ...], "next": the cursor's text, or null at the end}`.
    impl Serialize for ListPage {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("ListPage", 2)?;
            m.serialize_field("tasks", &self.tasks)?;
            m.serialize_field("next", &self.next)?;
            m.end()
        }
    }

    /// `{"outcome", "started_unix_ms", "finished_unix_ms", "handler_ms"}`: `started_unix_ms`
    /// and `handler_ms` (to the microsecond, as a fraction) `null` when the handler never
    /// started or its lease ran out.
    impl Serialize for FinishedRun {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let FinishedRun { outcome, started_at, finished_at, handler_duration } = *self;
            let mut m = s.serialize_struct("FinishedRun", 4)?;
            m.serialize_field("outcome", &outcome)?;
            m.serialize_field("started_unix_ms", &started_at.map(unix_ms))?;
            m.serialize_field("finished_unix_ms", &unix_ms(finished_at))?;
            m.serialize_field("handler_ms", &handler_duration.map(|d| d.as_micros() as f64 / 1000.0))?;
            m.end()
        }
    }

    /// An object of the fields `key`, `state`, `due_unix_ms`, `overdue_ms`, `attempt`,
    /// `max_attempts`, `backoff_ms`, `last_error`, `worker`, `claimed_unix_ms`, `finished`,
    /// `recurring`, `recurrence`, `payload`, `payload_encoding` and `payload_bytes`, each what the
    /// accessor of its name reads ([`overdue_by`](TaskInfo::overdue_by) for `overdue_ms`,
    /// [`claimed_at`](TaskInfo::claimed_at) for `claimed_unix_ms`, [`is_recurring`] for
    /// `recurring`), in the form that every type of the durable wheel serialises to:
    ///
    /// - times are whole milliseconds since the Unix epoch on Redis's clock, in fields named
    ///   `*_unix_ms`; durations are milliseconds, in fields named `*_ms`;
    /// - a [`TaskState`] or an [`Outcome`] is its lower-case name (`"waiting"`, `"cancelled"`),
    ///   a [`ListCursor`] its text (as its `Display` writes it);
    /// - a payload is three fields: `payload`, its text when it is UTF-8, else its bytes in hex
    ///   (two lower-case digits a byte); `payload_encoding`, `"json"` when the whole payload is a
    ///   JSON document (the text is then that JSON, as it was scheduled: `fromjson` in jq, or
    ///   `JSON.parse`, reads it), `"text"` for other UTF-8, or `"hex"`; and `payload_bytes`;
    /// - what a value does not have is `null`, never left out, so that every object of a type
    ///   has the same fields.
    ///
    /// `finished` is a [`FinishedRun`] or `null`. `recurrence` is `null` for a task that runs
    /// once, else the series it is a run of, as [`recurrence`](TaskInfo::recurrence) and its kin
    /// read it: `cadence` (`"every 20s"`, `"cron \"0 3 * * *\" in Europe/Berlin"`), `period_ms`,
    /// `expression` and `zone` (each `null` where the cadence has none), `end_unix_ms`, `missed`
    /// (`"burst"`, `"delay"` or `"skip"`), `runs_left` (`null`: no limit), `next_run_unix_ms`
    /// ([`next_run`](TaskInfo::next_run)), `next_run_utc` (RFC 3339), `next_run_local` (RFC 3339
    /// on the zone's wall clock, with its abbreviation: `"2026-12-08T03:00:00.000+01:00 CET"`;
    /// `null` in UTC), and `unreadable`, the stored text of a recurrence this build cannot read
    /// ([`unreadable_recurrence`](TaskInfo::unreadable_recurrence)), the fields taken from the
    /// recurrence then `null`.
    ///
    /// [`is_recurring`]: TaskInfo::is_recurring
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if let Some(task) = timers.get("order-42:review").await? {
    ///     let json = serde_json::to_value(&task).expect("a task serialises");
    ///     println!("{} is {}, due at {} ms", json["key"], json["state"], json["due_unix_ms"]);
    /// }
    /// # Ok(()) }
    /// ```
    impl Serialize for TaskInfo {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            // Every field, by name: a field added to the struct does not build until it is
            // shown here or said to be left out.
            let TaskInfo {
                key,
                payload,
                due,
                attempt,
                state,
                last_error,
                read_at: _, // in overdue_ms and next_run
                claim: _,   // worker and claimed_unix_ms
                finished,
                options: _, // max_attempts and backoff_ms
                series: _,  // recurring and recurrence
            } = self;
            let mut m = s.serialize_struct("TaskInfo", 16)?;
            m.serialize_field("key", key)?;
            m.serialize_field("state", state)?;
            m.serialize_field("due_unix_ms", &unix_ms(*due))?;
            m.serialize_field("overdue_ms", &self.overdue_by().map(in_ms))?;
            m.serialize_field("attempt", attempt)?;
            m.serialize_field("max_attempts", &self.max_attempts())?;
            m.serialize_field("backoff_ms", &self.backoff().map(in_ms))?;
            m.serialize_field("last_error", last_error)?;
            m.serialize_field("worker", &self.worker())?;
            m.serialize_field("claimed_unix_ms", &self.claimed_at().map(unix_ms))?;
            m.serialize_field("finished", finished)?;
            m.serialize_field("recurring", &self.is_recurring())?;
            m.serialize_field("recurrence", &self.is_recurring().then_some(Series(self)))?;
            payload_fields(&mut m, payload)?;
            m.end()
        }
    }

    /// An object of the fields `key`, `attempts`, `last_error`, `died_unix_ms`, `due_unix_ms`,
    /// `payload`, `payload_encoding` and `payload_bytes`, in the form
    /// [`TaskInfo`'s](TaskInfo#impl-Serialize-for-TaskInfo) JSON describes.
    impl Serialize for DeadTask {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let DeadTask { key, payload, attempts, last_error, died, due } = self;
            let mut m = s.serialize_struct("DeadTask", 8)?;
            m.serialize_field("key", key)?;
            m.serialize_field("attempts", attempts)?;
            m.serialize_field("last_error", last_error)?;
            m.serialize_field("died_unix_ms", &unix_ms(*died))?;
            m.serialize_field("due_unix_ms", &unix_ms(*due))?;
            payload_fields(&mut m, payload)?;
            m.end()
        }
    }

    /// The payload's three fields: `payload`, `payload_encoding`, `payload_bytes`.
    fn payload_fields<M: SerializeStruct>(m: &mut M, payload: &[u8]) -> Result<(), M::Error> {
        match std::str::from_utf8(payload) {
            Ok(text) => {
                let json = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
                m.serialize_field("payload", text)?;
                m.serialize_field("payload_encoding", if json { "json" } else { "text" })?;
            }
            Err(_) => {
                m.serialize_field("payload", &Hex(payload))?;
                m.serialize_field("payload_encoding", "hex")?;
            }
        }
        m.serialize_field("payload_bytes", &payload.len())
    }

    /// Bytes as lower-case hex digits, written as they are serialised.
    struct Hex<'a>(&'a [u8]);

    impl fmt::Display for Hex<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
        }
    }

    impl Serialize for Hex<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(self)
        }
    }

    /// The series a task is a run of (see `TaskInfo`'s `Serialize`).
    struct Series<'a>(&'a TaskInfo);

    impl Serialize for Series<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let task = self.0;
            let r = task.recurrence();
            let (expression, zone) = cron_of(r);
            let next = task.next_run();
            let mut m = s.serialize_struct("Recurrence", 11)?;
            m.serialize_field("cadence", &r.map(|r| Cadence(r, expression, zone)))?;
            m.serialize_field("period_ms", &r.and_then(Recurrence::period).map(in_ms))?;
            m.serialize_field("expression", &expression)?;
            m.serialize_field("zone", &zone)?;
            m.serialize_field("end_unix_ms", &r.and_then(Recurrence::end).map(unix_ms))?;
            m.serialize_field("missed", &r.map(|r| missed_name(r.missed_runs())))?;
            m.serialize_field("runs_left", &task.runs_left())?;
            m.serialize_field("next_run_unix_ms", &next.map(unix_ms))?;
            m.serialize_field("next_run_utc", &next.map(|n| Rfc3339(n).to_string()))?;
            m.serialize_field("next_run_local", &next.zip(zone).and_then(|(n, z)| local(n, z)))?;
            m.serialize_field("unreadable", &task.unreadable_recurrence())?;
            m.end()
        }
    }

    /// A recurrence's cadence alone (its `Display` adds its end and limit): `every 20s`,
    /// `cron "0 3 * * *" in Europe/Berlin`.
    struct Cadence<'a>(&'a Recurrence, Option<&'a str>, Option<&'a str>);

    impl Serialize for Cadence<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut text = String::new();
            let _ = match (self.0.period(), self.1) {
                (Some(period), _) => write!(text, "every {period:?}"),
                (None, expression) => {
                    write!(text, "cron {:?} in {}", expression.unwrap_or(""), self.2.unwrap_or("UTC"))
                }
            };
            s.serialize_str(&text)
        }
    }

    fn missed_name(missed: MissedRuns) -> &'static str {
        match missed {
            MissedRuns::Burst => "burst",
            MissedRuns::Delay => "delay",
            MissedRuns::Skip => "skip",
        }
    }

    /// The expression and zone of a cron recurrence.
    #[cfg(feature = "cron")]
    fn cron_of(r: Option<&Recurrence>) -> (Option<&str>, Option<&str>) {
        r.map_or((None, None), |r| (r.expression(), r.zone()))
    }

    /// Without the `cron` feature no recurrence read has an expression (a cron series is
    /// unreadable).
    #[cfg(not(feature = "cron"))]
    fn cron_of(_: Option<&Recurrence>) -> (Option<&str>, Option<&str>) {
        (None, None)
    }

    /// `t` on the wall clock of the IANA zone `zone`, as RFC 3339 with the zone's offset and
    /// abbreviation: `2026-11-28T00:59:01.250+01:00 CET`. `None` for UTC itself (the time in
    /// UTC says it all) and for a name that is no zone.
    #[cfg(feature = "cron")]
    fn local(t: SystemTime, zone: &str) -> Option<String> {
        let tz: chrono_tz::Tz = zone.parse().ok()?;
        if tz == chrono_tz::Tz::UTC {
            return None;
        }
        let at = chrono::DateTime::<chrono::Utc>::from(t).with_timezone(&tz);
        Some(at.format("%Y-%m-%dT%H:%M:%S%.3f%:z %Z").to_string())
    }

    /// Without the `cron` feature no series has a zone.
    #[cfg(not(feature = "cron"))]
    fn local(_: SystemTime, _: &str) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::series::read_series;
    use crate::durable::time::from_unix_ms;

    const T0: u64 = 1_800_000_000_000;

    /// A task read in `state` at `read_ms`, due at `T0`, with the series `series`.
    fn read(state: TaskState, read_ms: u64, series: Option<Series>) -> TaskInfo {
        TaskInfo {
            key: "k".into(),
            payload: Vec::new(),
            due: from_unix_ms(T0),
            attempt: 1,
            state,
            last_error: None,
            read_at: from_unix_ms(read_ms),
            claim: None,
            finished: None,
            options: TaskOptions::new(),
            series,
        }
    }

    #[test]
    fn a_record_reads_as_a_series_or_a_one_shot_task() {
        assert_eq!(read_series(0, 0, b'0', ""), None, "no period, no spec: runs once");
        let every = read_series(20_000, -1, b'1', "").unwrap();
        let r = every.recurrence.as_ref().unwrap();
        assert_eq!(
            (r.period(), r.missed_runs(), every.runs_left),
            (Some(Duration::from_secs(20)), crate::MissedRuns::Delay, None)
        );
        assert_eq!(read_series(20_000, 3, b'2', "").unwrap().runs_left, Some(3));
        let ending = read_series(0, -1, b'2', &format!("{} every 5000", T0)).unwrap();
        assert_eq!(ending.recurrence.unwrap().end(), Some(from_unix_ms(T0)));
        // Text no version writes, or a cron spec without the `cron` feature: kept as its text.
        for spec in ["x", "0 moon 7", "12 every x"] {
            let odd = read(TaskState::Waiting, T0, read_series(0, -1, b'2', spec));
            assert!(odd.is_recurring(), "{spec}");
            assert_eq!((odd.recurrence(), odd.unreadable_recurrence()), (None, Some(spec)));
            assert_eq!(odd.next_run(), Some(odd.due()), "a waiting series runs next at its due time");
        }
        #[cfg(feature = "cron")]
        {
            let cron = read_series(0, -1, b'2', "0 cron Europe/Berlin 0 3 * * *").unwrap();
            let r = cron.recurrence.unwrap();
            assert_eq!((r.expression(), r.zone()), (Some("0 3 * * *"), Some("Europe/Berlin")));
        }
    }

    #[test]
    fn the_next_run_of_a_running_series_is_the_one_after_it() {
        let every = || read_series(20_000, -1, b'2', "");
        assert_eq!(read(TaskState::Running, T0 + 5_000, every()).next_run(), Some(from_unix_ms(T0 + 20_000)));
        // Read when the next run has passed too: Skip places it at the next time of the grid.
        assert_eq!(read(TaskState::Running, T0 + 65_000, every()).next_run(), Some(from_unix_ms(T0 + 80_000)));
        // Its last run, a series past its end, a one-shot task, a dead letter: none.
        assert_eq!(read(TaskState::Running, T0, read_series(20_000, 1, b'2', "")).next_run(), None);
        let ended = read_series(0, -1, b'2', &format!("{} every 20000", T0 + 10_000));
        assert_eq!(read(TaskState::Running, T0, ended).next_run(), None);
        assert_eq!(read(TaskState::Running, T0, None).next_run(), None);
        assert_eq!(read(TaskState::Dead, T0, every()).next_run(), None);
        assert_eq!(read(TaskState::Ready, T0 + 5_000, every()).next_run(), Some(from_unix_ms(T0)));
    }

    #[test]
    fn a_list_cursor_reads_back_from_its_text() {
        for (state, key) in [
            (TaskState::Waiting, "plain"),
            (TaskState::Ready, "order-42:review"),
            (TaskState::Running, ""),
            (TaskState::Dead, "a key/with ?&=# and :: colons"),
        ] {
            let cursor = ListCursor { state, score: 1_767_225_600_123, key: key.to_owned() };
            let text = cursor.to_string();
            assert_eq!(text.parse::<ListCursor>().unwrap(), cursor, "{text}");
        }
        assert_eq!(ListCursor { state: TaskState::Dead, score: 7, key: "a:b".into() }.to_string(), "dead:7:a:b");
        let finished = ListCursor { state: TaskState::Finished, score: 1_767_225_600_123, key: "4,0,17".into() };
        assert_eq!(finished.to_string(), "finished:1767225600123:4,0,17");
        assert_eq!(finished.to_string().parse::<ListCursor>().unwrap(), finished);
        assert_eq!(finished_places(&finished.key), Some(vec![4, 0, 17]));
        for bad in [
            "",
            "dead",
            "dead:7",
            "gone:7:k",
            "dead:-1:k",
            "dead:x:k",
            "Dead:7:k",
            "finished:7:k",
            "finished:7:",
            "finished:7:4,x",
            "finished:7:4:0",
            "finished:7:-1",
        ] {
            assert!(matches!(bad.parse::<ListCursor>(), Err(crate::Error::Invalid(_))), "{bad:?}");
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod json_tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::durable::series::read_series;
    use crate::durable::time::from_unix_ms;

    /// 2027-01-15T08:00:00.000Z.
    const T0: u64 = 1_800_000_000_000;

    /// A task read in `state` a second and a half after it fell due at `T0`.
    fn task(state: TaskState, payload: &[u8], series: Option<Series>) -> TaskInfo {
        TaskInfo {
            key: "order-42:review".into(),
            payload: payload.to_vec(),
            due: from_unix_ms(T0),
            attempt: 0,
            state,
            last_error: None,
            read_at: from_unix_ms(T0 + 1_500),
            claim: None,
            finished: None,
            options: TaskOptions::new(),
            series,
        }
    }

    fn to_json(value: &impl serde::Serialize) -> Value {
        serde_json::to_value(value).expect("serialises")
    }

    #[test]
    fn a_one_shot_task_serialises_with_its_times_and_payload() {
        let mut ready = task(TaskState::Ready, br#"{"order": 42, "lines": [1, 2]}"#, None);
        ready.attempt = 2;
        ready.last_error = Some("card declined".into());
        assert_eq!(
            to_json(&ready),
            json!({
                "key": "order-42:review",
                "state": "ready",
                "due_unix_ms": T0,
                "overdue_ms": 1_500,
                "attempt": 2,
                "max_attempts": null,
                "backoff_ms": null,
                "last_error": "card declined",
                "worker": null,
                "claimed_unix_ms": null,
                "finished": null,
                "recurring": false,
                "recurrence": null,
                // The JSON as it was scheduled, spaces and all.
                "payload": r#"{"order": 42, "lines": [1, 2]}"#,
                "payload_encoding": "json",
                "payload_bytes": 30,
            })
        );

        // Running, as list reads it: its worker and claim; not overdue.
        let mut running = task(TaskState::Running, b"plain words", None);
        running.claim = Some((from_unix_ms(T0 + 20), Some("node-7".into())));
        let shown = to_json(&running);
        assert_eq!(
            (&shown["state"], &shown["overdue_ms"], &shown["worker"], &shown["claimed_unix_ms"]),
            (&json!("running"), &Value::Null, &json!("node-7"), &json!(T0 + 20))
        );
        assert_eq!((&shown["payload"], &shown["payload_encoding"]), (&json!("plain words"), &json!("text")));

        // A finished run: how it went, its handler's time to the microsecond.
        let mut run = task(TaskState::Finished, &[0xff, 0x00, 0x7f], None);
        run.attempt = 1;
        run.finished = Some(FinishedRun {
            outcome: Outcome::Cancelled,
            started_at: Some(from_unix_ms(T0 + 30)),
            finished_at: from_unix_ms(T0 + 50),
            handler_duration: Some(Duration::from_micros(12_345)),
        });
        let shown = to_json(&run);
        assert_eq!(
            shown["finished"],
            json!({
                "outcome": "cancelled",
                "started_unix_ms": T0 + 30,
                "finished_unix_ms": T0 + 50,
                "handler_ms": 12.345,
            })
        );
        assert_eq!(
            (&shown["payload"], &shown["payload_encoding"], &shown["payload_bytes"]),
            (&json!("ff007f"), &json!("hex"), &json!(3))
        );
        let empty = to_json(&task(TaskState::Waiting, b"", None));
        assert_eq!((&empty["payload"], &empty["payload_encoding"]), (&json!(""), &json!("text")));
    }

    #[test]
    fn a_series_serialises_with_its_recurrence_and_next_run() {
        let every = task(TaskState::Waiting, b"", read_series(20_000, 3, b'1', ""));
        let shown = to_json(&every);
        assert_eq!(shown["recurring"], true);
        assert_eq!(
            shown["recurrence"],
            json!({
                "cadence": "every 20s",
                "period_ms": 20_000,
                "expression": null,
                "zone": null,
                "end_unix_ms": null,
                "missed": "delay",
                "runs_left": 3,
                "next_run_unix_ms": T0,
                "next_run_utc": "2027-01-15T08:00:00.000Z",
                "next_run_local": null,
                "unreadable": null,
            })
        );
        // Running: the next run is the one after it; with an end.
        let ending = read_series(0, -1, b'2', &format!("{} every 20000", T0 + 3_600_000));
        let r = to_json(&task(TaskState::Running, b"", ending))["recurrence"].clone();
        assert_eq!(
            (&r["next_run_unix_ms"], &r["end_unix_ms"], &r["missed"], &r["runs_left"]),
            (&json!(T0 + 20_000), &json!(T0 + 3_600_000), &json!("skip"), &Value::Null)
        );
        // A recurrence this build cannot read: its text, and nothing taken from it.
        let odd = to_json(&task(TaskState::Waiting, b"", read_series(0, -1, b'2', "12 every x")))["recurrence"].clone();
        assert_eq!(
            (&odd["unreadable"], &odd["cadence"], &odd["missed"]),
            (&json!("12 every x"), &Value::Null, &Value::Null)
        );
        assert_eq!(odd["next_run_unix_ms"], T0);
        #[cfg(feature = "cron")]
        {
            let cron = read_series(0, -1, b'2', "0 cron Europe/Berlin 0 3 * * *");
            let r = to_json(&task(TaskState::Waiting, b"", cron))["recurrence"].clone();
            assert_eq!(r["cadence"], "cron \"0 3 * * *\" in Europe/Berlin");
            assert_eq!((&r["expression"], &r["zone"]), (&json!("0 3 * * *"), &json!("Europe/Berlin")));
            assert_eq!(r["next_run_local"], "2027-01-15T09:00:00.000+01:00 CET");
        }
    }

    #[test]
    fn stats_figures_pages_and_dead_letters_serialise() {
        let stats = DurableStats {
            pending: 6,
            waiting: 3,
            ready: 2,
            in_flight: 1,
            dead: 4,
            cursor_lag_ticks: 1,
            scheduled: 20,
            handed_out: 15,
            acked: 9,
            retried: 2,
            dead_lettered: 4,
            cancelled: 5,
            paused: true,
        };
        assert_eq!(
            to_json(&stats),
            json!({
                "pending": 6, "waiting": 3, "ready": 2, "running": 1, "dead": 4, "cursor_lag_ticks": 1,
                "scheduled": 20, "handed_out": 15, "acked": 9, "retried": 2, "dead_lettered": 4,
                "cancelled": 5, "paused": true,
            })
        );

        let page = ListPage {
            tasks: vec![task(TaskState::Dead, b"x", None)],
            next: Some(ListCursor { state: TaskState::Dead, score: 7, key: "a:b".into() }),
        };
        let shown = to_json(&page);
        assert_eq!(shown["next"], "dead:7:a:b");
        assert_eq!(shown["tasks"], json!([to_json(&page.tasks[0])]));
        assert_eq!(shown["tasks"][0]["state"], "dead");
        assert_eq!(to_json(&ListPage { tasks: Vec::new(), next: None }), json!({ "tasks": [], "next": null }));

        let figures = Figures {
            minutes: vec![MinuteCounts { start: from_unix_ms(T0), handed_out: 4, acked: 1, failed: 3, dead: 2 }],
            lateness: vec![(Duration::from_millis(1), 2), (Duration::from_millis(4), 1), (Duration::MAX, 1)],
        };
        assert_eq!(
            to_json(&figures),
            json!({
                "minutes": [{ "start_unix_ms": T0, "handed_out": 4, "acked": 1, "failed": 3, "dead": 2 }],
                "lateness": {
                    "claimed": 4,
                    "p50_below_ms": 1,
                    "p99_below_ms": null,
                    "buckets": [
                        { "below_ms": 1, "count": 2 },
                        { "below_ms": 4, "count": 1 },
                        { "below_ms": null, "count": 1 },
                    ],
                },
            })
        );

        let letter = DeadTask {
            key: "payment-1".into(),
            payload: b"[1,2]".to_vec(),
            attempts: 3,
            last_error: "card declined".into(),
            died: from_unix_ms(T0 + 9),
            due: from_unix_ms(T0),
        };
        assert_eq!(
            to_json(&letter),
            json!({
                "key": "payment-1", "attempts": 3, "last_error": "card declined", "died_unix_ms": T0 + 9,
                "due_unix_ms": T0, "payload": "[1,2]", "payload_encoding": "json", "payload_bytes": 5,
            })
        );
    }
}
