//! What the wheel reads of one task: `TaskInfo`, its `TaskState`, and how a finished run went.

use std::time::{Duration, SystemTime};

use crate::durable::series::{self, Series};
use crate::durable::time;
use crate::durable::TaskOptions;
use crate::Recurrence;

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
    /// [`DurableBuilder::history_limit`](crate::durable::DurableBuilder::history_limit)):
    /// acknowledged, dead or cancelled while it ran, [`TaskInfo::finished`] tells which. Only
    /// [`list`](crate::durable::DurableScheduler::list) reads it;
    /// [`get`](crate::durable::DurableScheduler::get) reads a task's current state.
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
    /// Cancelled while it ran
    /// ([`cancel_running`](crate::durable::DurableScheduler::cancel_running)).
    Cancelled,
    /// Its handler asked for it to run again later ([`Task::snooze`](crate::durable::Task::snooze)):
    /// the task is waiting again, with the same attempt number.
    Snoozed,
}

impl Outcome {
    /// `acknowledged`, `dead`, `cancelled` or `snoozed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acknowledged => "acknowledged",
            Outcome::Dead => "dead",
            Outcome::Cancelled => "cancelled",
            Outcome::Snoozed => "snoozed",
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

/// One task as [`get`](crate::durable::DurableScheduler::get) or
/// [`list`](crate::durable::DurableScheduler::list) read it: pending, dead, or a finished run from
/// the history.
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
    /// [`Finished`](TaskState::Finished) run as [`list`](crate::durable::DurableScheduler::list)
    /// reads it, `None` otherwise.
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
    /// [`list`](crate::durable::DurableScheduler::list) reads it, `None` otherwise (or when a
    /// worker of an earlier version claimed it).
    pub fn claimed_at(&self) -> Option<SystemTime> {
        self.claim.as_ref().map(|(at, _)| *at)
    }

    /// The node id of the worker that runs the task (as
    /// [`workers`](crate::durable::DurableScheduler::workers) and
    /// [`leaders`](crate::durable::DurableScheduler::leaders) name it): for a running task as
    /// [`list`](crate::durable::DurableScheduler::list) reads it, `None` otherwise (or when a
    /// worker of an earlier version claimed it).
    pub fn worker(&self) -> Option<&str> {
        self.claim.as_ref().and_then(|(_, node)| node.as_deref())
    }

    /// The task's own max attempts ([`TaskOptions::max_attempts`]) as
    /// [`get`](crate::durable::DurableScheduler::get) reads it: `None` for a task that follows the
    /// node's [`max_attempts`](crate::durable::DurableBuilder::max_attempts) (a dead letter keeps
    /// the task's own), and for a task read by [`list`](crate::durable::DurableScheduler::list) or
    /// [`due_next`](crate::durable::DurableScheduler::due_next), which do not read them.
    pub fn max_attempts(&self) -> Option<u32> {
        self.options.own_max_attempts()
    }

    /// The base of the task's own backoff ([`TaskOptions::backoff`], in whole milliseconds) as
    /// [`get`](crate::durable::DurableScheduler::get) reads it: `None` for a task that follows the
    /// node's [`backoff`](crate::durable::DurableBuilder::backoff), and where
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
    /// [`schedule_recurring`]: crate::durable::DurableScheduler::schedule_recurring
    /// [`upsert_recurring`]: crate::durable::DurableScheduler::upsert_recurring
    /// [`schedule_repeating`]: crate::durable::DurableScheduler::schedule_repeating
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
                let due_ms = time::unix_ms(self.due);
                let ended_ms = time::unix_ms(self.read_at).max(due_ms);
                series::next_due(recurrence, due_ms, ended_ms).map(time::from_unix_ms)
            }
            _ => None,
        }
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
}
