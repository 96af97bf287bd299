//! What a handler receives, what the dead letters hold, and what `stats` reports.

use std::time::{Duration, SystemTime};

use super::TaskOptions;

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

    /// The payload read as JSON into a `T`: the other half of
    /// [`schedule_json`](super::DurableScheduler::schedule_json).
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
        from_json(&self.key, &self.payload)
    }
}

/// A task that failed `max_attempts` times, kept in the dead letters until
/// [`requeue_dead`](super::DurableScheduler::requeue_dead) puts it back.
///
/// Its key is free again: a new task may be scheduled under it (and if that one dies too, its
/// record replaces this one).
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
        from_json(&self.key, &self.payload)
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
}

/// `value` as the JSON payload of the task `key`.
#[cfg(feature = "serde")]
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(key: &str, value: &T) -> Result<Vec<u8>, crate::Error> {
    serde_json::to_vec(value).map_err(|e| {
        crate::Error::Payload(format!(
            "the value for task {key:?} (a {}) cannot be written as JSON: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// The JSON payload of the task `key` read into a `T`.
#[cfg(feature = "serde")]
fn from_json<T: serde::de::DeserializeOwned>(key: &str, payload: &[u8]) -> Result<T, crate::Error> {
    serde_json::from_slice(payload).map_err(|e| {
        crate::Error::Payload(format!(
            "the payload of task {key:?} ({} bytes) is not the JSON of a {}: {e}",
            payload.len(),
            std::any::type_name::<T>()
        ))
    })
}

/// A snapshot of a durable wheel, read from Redis in one call per partition.
///
/// The gauges (`pending` to `cursor_lag_ticks`) are exact at the moment of the call; the
/// counters (`scheduled` to `cancelled`) count since the wheel was first used and are kept
/// by every node together.
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

/// One page of [`due_next`](super::DurableScheduler::due_next): tasks by due time, and where the
/// next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePage {
    pub(crate) tasks: Vec<TaskInfo>,
    pub(crate) next: Option<DueCursor>,
}

impl DuePage {
    /// The tasks of this page, by due time, then key.
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }

    /// Where the next page starts; `None` when this page reached the end.
    pub fn next(&self) -> Option<&DueCursor> {
        self.next.as_ref()
    }

    /// Takes the page apart into its tasks and the next page's cursor.
    pub fn into_parts(self) -> (Vec<TaskInfo>, Option<DueCursor>) {
        (self.tasks, self.next)
    }
}

/// Where a page of [`due_next`](super::DurableScheduler::due_next) ends: the next page starts
/// after this task (due time, then key), so a task scheduled or cancelled meanwhile neither
/// shifts nor repeats the others.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DueCursor {
    pub(crate) due_ms: u64,
    pub(crate) key: String,
}

/// One page of [`list`](super::DurableScheduler::list): the tasks of one state in that state's
/// order, and where the next page starts.
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
        write!(f, "{}:{}:{}", state_word(self.state), self.score, self.key)
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
        let state = match state {
            "waiting" => TaskState::Waiting,
            "ready" => TaskState::Ready,
            "running" => TaskState::Running,
            "dead" => TaskState::Dead,
            "finished" => TaskState::Finished,
            _ => return Err(bad()),
        };
        let score = score.parse().map_err(|_| bad())?;
        if state == TaskState::Finished && finished_places(key).is_none() {
            return Err(bad());
        }
        Ok(ListCursor { state, score, key: key.to_owned() })
    }
}

/// A state's name in a cursor's text.
fn state_word(state: TaskState) -> &'static str {
    match state {
        TaskState::Waiting => "waiting",
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        TaskState::Dead => "dead",
        TaskState::Finished => "finished",
    }
}

/// Where each partition's history is to be read on, from the key of a cursor of finished runs:
/// the number of the next run to read in each partition, comma-separated, in partition order.
pub(crate) fn finished_places(key: &str) -> Option<Vec<u64>> {
    key.split(',').map(|n| n.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
