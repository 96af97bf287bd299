//! [`Recurrence`]: when a recurring timer runs, on the wall clock, as a pure value. It reads no
//! clock: every question takes the time it is about, so both modes (and tests) ask it with
//! their own idea of now.

#[cfg(feature = "cron")]
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, SystemTime};

#[cfg(feature = "cron")]
use super::cron::Cron;
use super::MissedRuns;
use crate::error::Rfc3339;
use crate::Error;

/// When a recurring timer runs: at a fixed rate ([`every`](Self::every)) or on a cron
/// expression in a time zone ([`cron`](Self::cron), with the `cron` feature), with optional
/// bounds ([`limit`](Self::limit), [`starting`](Self::starting), [`until`](Self::until)) and a
/// policy for missed runs ([`missed`](Self::missed)). A value, built in a chain; it reads no
/// clock and schedules nothing: [`Scheduler::schedule_recurring`](crate::Scheduler::schedule_recurring)
/// and [`upsert_recurring`](crate::Scheduler::upsert_recurring) run it, and
/// [`next_after`](Self::next_after) answers when it runs.
///
/// # The runs
/// - **`every(period)`** runs a period after its start, then every period, at a fixed rate (run
///   `n` at `start + n * period`), as [`schedule_repeating`](crate::Scheduler::schedule_repeating)
///   does. With [`starting`](Self::starting) the first run is at the start itself and the series
///   keeps that grid, as tokio's `interval_at`; without one, the series starts when it is
///   scheduled, and [`next_after`](Self::next_after)`(t)` is a period after `t`.
/// - **`cron(expression)`** runs at every second of the wall clock that the expression names,
///   in UTC unless [`in_tz`](Self::in_tz) names an IANA zone. With a start, the first run is
///   the expression's first at or after it; without, its first after the time it is scheduled.
///   Five fields (minute, hour, day of month, month, day of week: `0 3 * * *`) or six, with a
///   second first (`*/10 * * * * *`); names (`MON`, `JAN`), `L`, `W`, `#` and nicknames
///   (`@daily`, `@hourly`) as croner reads them. When both day fields are given, a day matching
///   either runs, as in Vixie cron.
///
/// # Daylight saving (cron in a zone that has it)
/// A cron expression names wall-clock times; where the zone's clock jumps, some of those times
/// do not exist and some exist twice. A *fixed time* is an expression whose second, minute and
/// hour are each one number (`30 2 * * *`); any `*`, step, list or range in those three makes
/// it an *interval*, which names instants rather than one time of day. The table, with Berlin's
/// transitions of 2026 (02:00 CET becomes 03:00 CEST on 29 March; 03:00 CEST becomes 02:00 CET
/// on 25 October):
///
/// | Expression | Spring forward (a gap) | Fall back (a fold) |
/// |---|---|---|
/// | fixed time in the changed hour, `30 2 * * *` | runs once, at the first instant after the gap: 03:00 CEST | runs once, at its first occurrence: 02:30 CEST, not again at 02:30 CET |
/// | fixed time elsewhere, `0 3 * * *` | runs once, as on any day | runs once, as on any day |
/// | interval, `*/15 * * * *` | the times the gap skips are not run: 92 runs on the 23-hour day | every real instant it names, both passes of the hour: 100 runs on the 25-hour day |
/// | interval over hours, `0 */1 * * *` | 23 runs | 25 runs |
/// | interval inside the changed hour, `*/15 2 * * *` | no run that day (none of its times exists) | 8 runs, both passes |
///
/// So across a transition nothing runs twice that names one time of day, nothing that names a
/// time of day is lost, an interval follows real time, and [`next_after`](Self::next_after)
/// never goes back: each run is strictly after the time asked about. A zone's rules are those
/// of the IANA database compiled into the crate (through chrono-tz), never the host's files.
///
/// # Bounds
/// - [`limit`](Self::limit)`(n)`: at most `n` runs (at least 1), counted from the start. A
///   scheduled series counts its runs itself; [`next_after`](Self::next_after) counts them only
///   when the recurrence has a [`starting`](Self::starting) time to count from.
/// - [`until`](Self::until)`(end)`: no run after `end` (a run at `end` is made).
/// - [`starting`](Self::starting)`(start)`: no run before `start`.
///
/// When a series has no run left, its timer ends and its [`Scheduled`](crate::Scheduled)
/// resolves `Ok`.
///
/// # Missed runs
/// [`missed`](Self::missed) says what a series does about runs whose time passed while nothing
/// could fire them. Without it, the mode's default applies, whatever the cadence and whatever
/// the call: see [`MissedRuns`], the one place that states it. For `cron`,
/// [`MissedRuns::Delay`] is `Skip`: a calendar has no period to shift by.
///
/// # Errors
/// Built in a chain, a recurrence is checked where it can be: [`cron`](Self::cron) and
/// [`in_tz`](Self::in_tz) return [`Error::Invalid`] naming the expression or zone and what is
/// wrong. The rest is checked by [`validate`](Self::validate), which scheduling calls: a zero
/// period, `limit(0)`, an end before the start.
///
/// # Examples
/// ```
/// use std::time::{Duration, SystemTime};
/// use tokio_timewheel::{MissedRuns, Recurrence};
///
/// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
/// let every = Recurrence::every(Duration::from_millis(100)).starting(start).limit(3).missed(MissedRuns::Skip);
/// assert_eq!(every.next_after(start - Duration::from_secs(1)), Some(start));
/// assert_eq!(every.next_after(start), Some(start + Duration::from_millis(100)));
/// assert_eq!(every.next_after(start + Duration::from_millis(200)), None, "three runs made");
/// assert!(every.validate().is_ok());
/// assert!(Recurrence::every(Duration::ZERO).validate().is_err());
/// ```
///
/// With the `cron` feature:
/// ```
/// # #[cfg(feature = "cron")]
/// # fn main() -> Result<(), tokio_timewheel::Error> {
/// # use std::time::{Duration, SystemTime};
/// # use tokio_timewheel::Recurrence;
/// // A game's daily reset at 05:00, Berlin time.
/// let reset = Recurrence::cron("0 5 * * *")?.in_tz("Europe/Berlin")?;
/// // 2026-03-29 00:00 UTC: the next reset is 05:00 CEST, 03:00 UTC (the clocks went forward).
/// let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_774_742_400);
/// assert_eq!(reset.next_after(t), Some(t + Duration::from_secs(3 * 3600)));
/// assert!(Recurrence::cron("0 5 * *").is_err());
/// # Ok(()) }
/// # #[cfg(not(feature = "cron"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a recurrence does nothing until it is scheduled"]
pub struct Recurrence {
    cadence: Cadence,
    /// At most this many runs, counted from the start.
    limit: Option<u64>,
    /// No run after this.
    until: Option<SystemTime>,
    /// No run before this; the grid of `every`.
    start: Option<SystemTime>,
    /// `None` takes the mode's default (see [`MissedRuns`]).
    missed: Option<MissedRuns>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Cadence {
    Every(Duration),
    #[cfg(feature = "cron")]
    Cron(Box<Cron>),
}

impl Recurrence {
    /// Runs every `period`, at a fixed rate (see [the runs](Self#the-runs)). A zero period is
    /// refused by [`validate`](Self::validate), and so when scheduled.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::Recurrence;
    /// let heartbeat = Recurrence::every(Duration::from_secs(5));
    /// assert_eq!(heartbeat.period(), Some(Duration::from_secs(5)));
    /// ```
    pub fn every(period: Duration) -> Self {
        Recurrence::with(Cadence::Every(period))
    }

    /// Runs at the wall-clock times the cron `expression` names, read in UTC until
    /// [`in_tz`](Self::in_tz) names another zone (see [the runs](Self#the-runs) for the syntax
    /// and [daylight saving](Self#daylight-saving-cron-in-a-zone-that-has-it) for the rules
    /// where the clock jumps).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the expression and what is wrong with it: a wrong number of
    /// fields, a value out of range, a character cron does not know.
    ///
    /// # Examples
    /// ```
    /// # fn main() -> Result<(), tokio_timewheel::Error> {
    /// # use tokio_timewheel::{Error, Recurrence};
    /// let nightly = Recurrence::cron("0 3 * * *")?;
    /// assert_eq!(nightly.zone(), Some("UTC"));
    /// let Err(Error::Invalid(why)) = Recurrence::cron("0 25 * * *") else { panic!() };
    /// assert!(why.contains("\"0 25 * * *\""), "{why}");
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron(expression: &str) -> Result<Self, Error> {
        Ok(Recurrence::with(Cadence::Cron(Box::new(Cron::parse(expression)?))))
    }

    /// Reads a cron recurrence's fields in the IANA time zone `zone` (`"Europe/Berlin"`,
    /// `"America/New_York"`, `"UTC"`) instead of UTC, the default. The zone database is the one
    /// compiled into the crate.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the zone if it is not an IANA zone name, or if the recurrence
    /// is an [`every`](Self::every): a fixed rate counts real time, which has no zone.
    ///
    /// # Examples
    /// ```
    /// # fn main() -> Result<(), tokio_timewheel::Error> {
    /// # use tokio_timewheel::Recurrence;
    /// let nightly = Recurrence::cron("0 3 * * *")?.in_tz("Europe/Berlin")?;
    /// assert_eq!(nightly.zone(), Some("Europe/Berlin"));
    /// assert!(Recurrence::cron("0 3 * * *")?.in_tz("Europe/Atlantis").is_err());
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn in_tz(mut self, zone: &str) -> Result<Self, Error> {
        match &mut self.cadence {
            Cadence::Cron(cron) => cron.in_zone(zone)?,
            Cadence::Every(period) => {
                return Err(Error::invalid(format!(
                    "time zone {zone:?} given to Recurrence::every({period:?}): a fixed rate counts real \
                     time, which has no zone; a zone is for Recurrence::cron"
                )))
            }
        }
        Ok(self)
    }

    /// At most `runs` runs (see [bounds](Self#bounds)); `limit(0)` is refused by
    /// [`validate`](Self::validate).
    pub fn limit(mut self, runs: u64) -> Self {
        self.limit = Some(runs);
        self
    }

    /// No run after `end`; a run at `end` is made. An end before the
    /// [start](Self::starting) is refused by [`validate`](Self::validate).
    pub fn until(mut self, end: SystemTime) -> Self {
        self.until = Some(end);
        self
    }

    /// No run before `start`. An `every` series runs first at `start` and keeps its grid
    /// (`start + n * period`); a cron series runs first at its first time at or after `start`.
    /// A start already past when the series is scheduled makes the runs since then missed
    /// (see [missed runs](Self#missed-runs)).
    pub fn starting(mut self, start: SystemTime) -> Self {
        self.start = Some(start);
        self
    }

    /// What the series does about runs it missed (see [missed runs](Self#missed-runs) for the
    /// defaults).
    pub fn missed(mut self, policy: MissedRuns) -> Self {
        self.missed = Some(policy);
        self
    }

    fn with(cadence: Cadence) -> Self {
        Recurrence { cadence, limit: None, until: None, start: None, missed: None }
    }

    /// The period of an [`every`](Self::every) recurrence; `None` for a cron one.
    #[must_use]
    pub fn period(&self) -> Option<Duration> {
        match &self.cadence {
            Cadence::Every(period) => Some(*period),
            #[cfg(feature = "cron")]
            Cadence::Cron(_) => None,
        }
    }

    /// The expression of a [`cron`](Self::cron) recurrence, as it was given; `None` for an
    /// `every` one.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    #[must_use]
    pub fn expression(&self) -> Option<&str> {
        match &self.cadence {
            Cadence::Cron(cron) => Some(cron.expression()),
            Cadence::Every(_) => None,
        }
    }

    /// The IANA name of a cron recurrence's zone (`"UTC"` unless [`in_tz`](Self::in_tz) named
    /// another); `None` for an `every` one.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    #[must_use]
    pub fn zone(&self) -> Option<&str> {
        match &self.cadence {
            Cadence::Cron(cron) => Some(cron.zone()),
            Cadence::Every(_) => None,
        }
    }

    /// The most runs the series makes ([`limit`](Self::limit)), or `None` for no limit.
    #[must_use]
    pub fn max_runs(&self) -> Option<u64> {
        self.limit
    }

    /// The time after which the series makes no run ([`until`](Self::until)).
    #[must_use]
    pub fn end(&self) -> Option<SystemTime> {
        self.until
    }

    /// The time before which the series makes no run ([`starting`](Self::starting)).
    #[must_use]
    pub fn start(&self) -> Option<SystemTime> {
        self.start
    }

    /// The policy for missed runs in process: the one given to [`missed`](Self::missed), else
    /// [`MissedRuns::Burst`], the in-process default (the durable mode's is
    /// [`MissedRuns::Skip`]; see [`MissedRuns`]).
    #[must_use]
    pub fn missed_runs(&self) -> MissedRuns {
        self.missed.unwrap_or(MissedRuns::Burst)
    }

    /// The policy given to [`missed`](Self::missed), if any (the durable mode has a default of
    /// its own).
    #[cfg(feature = "redis")]
    pub(crate) fn missed_given(&self) -> Option<MissedRuns> {
        self.missed
    }

    /// Checks what the chain could not: a period longer than zero, a limit of at least one run,
    /// an end no earlier than the start. Scheduling calls it; a recurrence it refuses has no
    /// runs ([`next_after`](Self::next_after) is `None`).
    ///
    /// # Errors
    /// [`Error::Invalid`] saying which bound is wrong and its value.
    ///
    /// # Examples
    /// ```
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{Error, Recurrence};
    /// let Err(Error::Invalid(why)) = Recurrence::every(Duration::from_secs(1)).limit(0).validate() else { panic!() };
    /// assert!(why.contains("limit(0)"), "{why}");
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        if self.cadence == Cadence::Every(Duration::ZERO) {
            return Err(Error::invalid("Recurrence::every(0s): the period must be longer than zero"));
        }
        if self.limit == Some(0) {
            return Err(Error::invalid("Recurrence::limit(0): a series makes at least one run"));
        }
        if let (Some(start), Some(end)) = (self.start, self.until) {
            if end < start {
                return Err(Error::invalid(format!(
                    "Recurrence::until({}) is before Recurrence::starting({}): the series would have no run",
                    Rfc3339(end),
                    Rfc3339(start)
                )));
            }
        }
        Ok(())
    }

    /// Why the series has no run after `now` (as [`first_due`](Self::first_due) found), for both
    /// modes' errors: its end has passed, or its limit is spent, or its cron expression never
    /// matches a time the calendar holds.
    pub(crate) fn no_run_after(&self, now: SystemTime) -> Error {
        let unbounded = Recurrence { limit: None, until: None, start: None, ..self.clone() };
        let why = match (self.until, self.limit, self.start) {
            (Some(end), _, _) if end <= now => format!("its end ({}) has passed", Rfc3339(end)),
            _ if unbounded.first_due(now).is_none() => match &self.cadence {
                #[cfg(feature = "cron")]
                Cadence::Cron(cron) => {
                    let expression = cron.expression();
                    format!("the cron expression {expression:?} matches no time that exists (up to the year 5000)")
                }
                Cadence::Every(_) => "its cadence has no run".to_string(),
            },
            (Some(end), _, _) => format!("its next run would come after its end ({})", Rfc3339(end)),
            (None, Some(runs), Some(start)) => format!("its {runs} runs from its start ({}) are over", Rfc3339(start)),
            _ => "it has no run left".to_string(),
        };
        Error::invalid(format!("{self} has no run after {}, when it was scheduled: {why}", Rfc3339(now)))
    }

    /// The next run strictly after the wall-clock time `t`, or `None` if the series has none:
    /// past its [end](Self::until), past its [limit](Self::limit) (counted from its
    /// [start](Self::starting), when it has one), an invalid recurrence (see
    /// [`validate`](Self::validate)), or a cron expression with no time left that the calendar
    /// can hold (up to the year 5000). Never `t` or earlier, and never earlier for a later `t`.
    ///
    /// For a cron recurrence with both a start and a limit, the runs from the start to `t` are
    /// walked to count them (at most `limit` of them); a scheduled series counts its runs
    /// itself and never pays this.
    ///
    /// # Examples
    /// See [`Recurrence`].
    #[must_use]
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        self.validate().ok()?;
        let run = self.after(t)?;
        if let (Some(limit), Some(start)) = (self.limit, self.start) {
            if self.runs_through(start, t, limit) >= limit {
                return None;
            }
        }
        self.within(run)
    }

    /// When a series scheduled at `now` first runs: at or after its start if it has one (which
    /// may be past `now`, a run missed), else its first run after `now`. `None` if it has no
    /// run before its end.
    pub(crate) fn first_due(&self, now: SystemTime) -> Option<SystemTime> {
        let first = match self.start {
            Some(start) => self.at_or_after(start)?,
            None => self.after(now)?,
        };
        self.within(first)
    }

    /// The run after the one due at `due`, which fires at `now`: the one place where the next run
    /// of a series is worked out, for every cadence and every missed-run policy, in both modes
    /// (the in-process service on its timers' wall clock, or on Tokio's clock read as one; the
    /// durable mode on Redis's clock, whose Lua moves a fixed rate without an end on by the same
    /// rule, checked against this one by a table of cases).
    ///
    /// The next run is a period after `due` (or the cadence's next time after it). If that is
    /// already past (at `now` or before), runs were missed, and the series'
    /// [`missed_runs`](Self::missed_runs) policy places it (see [`MissedRuns`]): `Burst` keeps it,
    /// so the missed runs follow at once, but only the last `burst_cap` of them when a cap is
    /// given (the earlier ones are skipped); `Delay` a period after `now` (for cron, as `Skip`: a
    /// calendar has no period to shift by); `Skip` the first time of the original schedule after
    /// `now`. `None` past the end. The limit is the caller's to count.
    pub(crate) fn next_run(&self, due: SystemTime, now: SystemTime, burst_cap: Option<usize>) -> Option<SystemTime> {
        let mut next = self.after(due)?;
        if next <= now {
            next = match (self.missed_runs(), &self.cadence) {
                (MissedRuns::Burst, _) => burst_cap.map_or(next, |cap| self.last_runs(next, now, cap)),
                (MissedRuns::Delay, Cadence::Every(period)) => now.checked_add(*period)?,
                (MissedRuns::Skip, Cadence::Every(period)) => grid_after(due, *period, now)?,
                #[cfg(feature = "cron")]
                (MissedRuns::Delay | MissedRuns::Skip, Cadence::Cron(cron)) => cron.after(now)?,
            };
        }
        self.within(next)
    }

    /// The first of the last `cap` runs from the run `next` up to `now` (and no further than the
    /// end): `next` itself when there are no more than `cap` of them. A fixed rate counts them;
    /// a calendar walks them, at most [`MAX_WALK`] at a time.
    fn last_runs(&self, next: SystemTime, now: SystemTime, cap: usize) -> SystemTime {
        let cap = cap.max(1);
        let last = self.until.map_or(now, |end| end.min(now));
        match &self.cadence {
            Cadence::Every(period) if period.is_zero() => next,
            Cadence::Every(period) => {
                let Ok(span) = last.duration_since(next) else {
                    return next;
                };
                let runs = span.as_nanos() / period.as_nanos() + 1;
                let skipped = runs.saturating_sub(cap as u128);
                periods_after(next, *period, skipped).unwrap_or(next)
            }
            #[cfg(feature = "cron")]
            Cadence::Cron(_) => {
                let mut window = VecDeque::with_capacity(cap);
                let mut run = Some(next);
                for _ in 0..MAX_WALK {
                    let Some(at) = run.filter(|&at| at <= last) else {
                        return window.front().copied().unwrap_or(next);
                    };
                    if window.len() == cap {
                        window.pop_front();
                    }
                    window.push_back(at);
                    run = self.after(at);
                }
                // Too many to walk: the last run walked stands for them all.
                window.back().copied().unwrap_or(next)
            }
        }
    }

    /// `run` if it is no later than the end.
    fn within(&self, run: SystemTime) -> Option<SystemTime> {
        self.until.is_none_or(|end| run <= end).then_some(run)
    }

    /// The first run strictly after `t`, the end and the limit aside.
    fn after(&self, t: SystemTime) -> Option<SystemTime> {
        match (&self.cadence, self.start) {
            (_, Some(start)) if t < start => self.at_or_after(start),
            (Cadence::Every(period), Some(start)) => grid_after(start, *period, t),
            (Cadence::Every(period), None) => t.checked_add(*period),
            #[cfg(feature = "cron")]
            (Cadence::Cron(cron), _) => cron.after(t),
        }
    }

    /// The first run at `t` or after it, the end and the limit aside.
    fn at_or_after(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.cadence {
            Cadence::Every(_) if self.start.is_none_or(|start| t <= start) => Some(self.start.unwrap_or(t)),
            Cadence::Every(_) => self.after(t.checked_sub(Duration::from_nanos(1))?),
            #[cfg(feature = "cron")]
            Cadence::Cron(cron) => cron.at_or_after(t),
        }
    }

    /// How many runs from `start` to `t`, both included, counting no further than `limit`.
    fn runs_through(&self, start: SystemTime, t: SystemTime, limit: u64) -> u64 {
        let Ok(since) = t.duration_since(start) else {
            return 0;
        };
        match &self.cadence {
            Cadence::Every(period) => {
                let runs = since.as_nanos() / period.as_nanos().max(1) + 1;
                u64::try_from(runs).unwrap_or(u64::MAX).min(limit)
            }
            #[cfg(feature = "cron")]
            Cadence::Cron(_) => {
                let mut runs = 0;
                let mut run = self.at_or_after(start);
                while let Some(at) = run.filter(|&at| at <= t && runs < limit) {
                    runs += 1;
                    run = self.after(at);
                }
                runs
            }
        }
    }
}

/// A recurrence by reference, for the calls that take one by value
/// ([`Scheduler::schedule_recurring`](crate::Scheduler::schedule_recurring)): cloned.
impl From<&Recurrence> for Recurrence {
    fn from(recurrence: &Recurrence) -> Self {
        recurrence.clone()
    }
}

/// As it was built, for messages: `every 100ms, limit 5`, `cron "0 3 * * *" in Europe/Berlin`.
impl fmt::Display for Recurrence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cadence {
            Cadence::Every(period) => write!(f, "every {period:?}")?,
            #[cfg(feature = "cron")]
            Cadence::Cron(cron) => write!(f, "cron {:?} in {}", cron.expression(), cron.zone())?,
        }
        if let Some(start) = self.start {
            write!(f, ", starting {}", Rfc3339(start))?;
        }
        if let Some(end) = self.until {
            write!(f, ", until {}", Rfc3339(end))?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit {limit}")?;
        }
        Ok(())
    }
}

/// How many runs of a calendar series [`Recurrence::next_run`] walks, at most, to find the last
/// of a capped burst after an outage: past that, the last run walked is the next, and the walk
/// goes on from it when that run ends.
#[cfg(feature = "cron")]
const MAX_WALK: usize = 100_000;

/// The first time of the grid `origin + n * period` (n ≥ 1) strictly after `t`, or `origin +
/// period` if `t` is before `origin`. `None` past what `SystemTime` holds.
fn grid_after(origin: SystemTime, period: Duration, t: SystemTime) -> Option<SystemTime> {
    if period.is_zero() {
        return None;
    }
    let steps = match t.duration_since(origin) {
        Ok(since) => since.as_nanos() / period.as_nanos() + 1,
        Err(_) => 1,
    };
    periods_after(origin, period, steps)
}

/// `origin + n * period`, or `None` past what `SystemTime` holds.
fn periods_after(origin: SystemTime, period: Duration, n: u128) -> Option<SystemTime> {
    let nanos = n.checked_mul(period.as_nanos())?;
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    origin.checked_add(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}
