//! A durable series whose next runs are worked out on the node: a cron expression in a time
//! zone, or a fixed rate with an end. Lua cannot read a calendar, so the record of such a task
//! carries a spec (see `store/lua/includes/record.lua`), the text written here; the worker that ends a
//! run reads it back, works out the next due time on Redis's clock, and hands it to the script
//! that ends the run, which places it in the same step. A fixed rate without an end needs no
//! spec: `store/lua/includes/advance.lua` moves it on in Lua.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::time::{from_unix_ms, unix_ms, whole_ms, MAX_DUE_MS};
use crate::{Error, MissedRuns, Recurrence};

/// The most missed runs a series with [`MissedRuns::Burst`] makes up at once, in the durable
/// mode: after a longer outage, the earlier of its missed runs are skipped and the last this many
/// run one after the other. Shared with the Lua (`MAX_BURST`), which applies it to fixed rates.
pub const MAX_BURST: usize = 100;

/// What a recurrence is stored as in Redis, and how the script moves it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The fixed rate moved on in Lua, in ms; 0 for a series with a spec.
    pub(crate) every_ms: u64,
    /// Runs in all (`None`: no limit).
    pub(crate) runs: Option<u64>,
    /// The policy for missed runs: the recurrence's own if it names one, else `Skip`.
    pub(crate) missed: MissedRuns,
    /// The spec, for a series whose next runs the node works out; empty for a fixed rate
    /// without an end.
    pub(crate) spec: String,
    /// The first run, in ms on Redis's clock.
    pub(crate) first_due_ms: u64,
}

/// The digit of a missed-run policy in a record.
pub(crate) fn missed_digit(missed: MissedRuns) -> u8 {
    match missed {
        MissedRuns::Burst => 0,
        MissedRuns::Delay => 1,
        MissedRuns::Skip => 2,
    }
}

fn missed_of(digit: u8) -> MissedRuns {
    match digit {
        b'0' => MissedRuns::Burst,
        b'1' => MissedRuns::Delay,
        _ => MissedRuns::Skip,
    }
}

/// How `recurrence`, scheduled when Redis's clock reads `now_ms`, is stored: checked, its first
/// run worked out.
///
/// # Errors
/// [`Error::Invalid`] for what [`Recurrence::validate`] refuses, a period not a whole number of
/// milliseconds, or a series with no run left after now (an end already past).
pub(crate) fn store(recurrence: &Recurrence, now_ms: u64) -> Result<Stored, Error> {
    recurrence.validate()?;
    let missed = recurrence.missed_given().unwrap_or(MissedRuns::Skip);
    let end_ms = recurrence.end().map_or(0, unix_ms);
    let (every_ms, spec) = match recurrence.period() {
        Some(period) => {
            let ms = whole_ms(period, "period of a durable recurrence")?;
            match recurrence.end() {
                None => (ms, String::new()),
                Some(_) => (0, format!("{end_ms} every {ms}")),
            }
        }
        None => (0, cron_spec(recurrence, end_ms)?),
    };
    let now = from_unix_ms(now_ms);
    let first = recurrence.first_due(now).ok_or_else(|| recurrence.no_run_after(now))?;
    let first_due_ms = unix_ms(first);
    if first_due_ms >= MAX_DUE_MS {
        return Err(Error::invalid(format!("the recurrence ({recurrence}) first runs after the year 2286")));
    }
    Ok(Stored { every_ms, runs: recurrence.max_runs(), missed, spec, first_due_ms })
}

#[cfg(feature = "cron")]
fn cron_spec(recurrence: &Recurrence, end_ms: u64) -> Result<String, Error> {
    match (recurrence.zone(), recurrence.expression()) {
        (Some(zone), Some(expression)) => Ok(format!("{end_ms} cron {zone} {expression}")),
        _ => Err(Error::invalid(format!("the recurrence ({recurrence}) has neither a period nor a cron expression"))),
    }
}

#[cfg(not(feature = "cron"))]
fn cron_spec(recurrence: &Recurrence, _end_ms: u64) -> Result<String, Error> {
    Err(Error::invalid(format!("the recurrence ({recurrence}) has no period")))
}

/// A spec read back from a claimed record, with the record's missed-run digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Spec {
    pub(crate) text: String,
    pub(crate) missed: u8,
}

impl Spec {
    /// The recurrence the spec stands for.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a spec this build cannot read (a cron spec without the `cron`
    /// feature, or text no version of this crate writes).
    pub(crate) fn recurrence(&self) -> Result<Recurrence, Error> {
        let bad = || Error::invalid(format!("a durable series' spec {:?} does not read", self.text));
        let (end, cadence) = self.text.split_once(' ').ok_or_else(bad)?;
        let end_ms: u64 = end.parse().map_err(|_| bad())?;
        let recurrence = match cadence.split_once(' ').ok_or_else(bad)? {
            ("every", ms) => Recurrence::every(std::time::Duration::from_millis(ms.parse().map_err(|_| bad())?)),
            ("cron", rest) => cron_of(rest).ok_or_else(bad)??,
            _ => return Err(bad()),
        };
        let recurrence = recurrence.missed(missed_of(self.missed));
        Ok(if end_ms > 0 { recurrence.until(from_unix_ms(end_ms)) } else { recurrence })
    }

    /// The run after the one due at `due_ms` that ended when Redis's clock read `now_ms`, as
    /// the script that ends the run takes it: ms as text, or `"0"` when the series has no run
    /// left (past its end, or a spec that does not read, which is logged). A worker asks its
    /// [`Specs`], which read each spec once.
    #[cfg(test)]
    pub(crate) fn next_due(&self, due_ms: u64, now_ms: u64) -> String {
        self.next_due_by(&self.recurrence(), due_ms, now_ms)
    }

    /// [`next_due`](Self::next_due), the spec already read into `recurrence`.
    fn next_due_by(&self, recurrence: &Result<Recurrence, Error>, due_ms: u64, now_ms: u64) -> String {
        match recurrence {
            Ok(recurrence) => next_due(recurrence, due_ms, now_ms).map_or_else(|| "0".to_string(), |ms| ms.to_string()),
            Err(e) => {
                tracing::error!(spec = %self.text, error = %e, "a durable series ends: its spec does not read");
                "0".to_string()
            }
        }
    }
}

/// How many specs [`Specs`] keeps read.
const SPECS_KEPT: usize = 256;

/// The specs a worker has read, each read once: a worker runs the same few series again and
/// again, and a cron expression is parsed once rather than at the end of each run. At most
/// [`SPECS_KEPT`] of them; one more forgets them all, to be read again as their runs end.
#[derive(Debug, Default)]
pub(crate) struct Specs {
    read: Mutex<HashMap<Spec, Arc<Result<Recurrence, Error>>>>,
}

impl Specs {
    /// [`Spec::next_due`], `spec` read at most once while it is kept.
    pub(crate) fn next_due(&self, spec: &Spec, due_ms: u64, now_ms: u64) -> String {
        spec.next_due_by(&self.read(spec), due_ms, now_ms)
    }

    /// The recurrence `spec` stands for, shared so that no lock is held while its next run is
    /// worked out (a capped burst of a calendar walks its runs) or while it is parsed.
    fn read(&self, spec: &Spec) -> Arc<Result<Recurrence, Error>> {
        if let Some(read) = self.kept().get(spec) {
            return read.clone();
        }
        let read = Arc::new(spec.recurrence());
        let mut kept = self.kept();
        if kept.len() >= SPECS_KEPT {
            kept.clear();
        }
        kept.insert(spec.clone(), read.clone());
        read
    }

    fn kept(&self) -> MutexGuard<'_, HashMap<Spec, Arc<Result<Recurrence, Error>>>> {
        self.read.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many specs are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept().len()
    }
}

#[cfg(feature = "cron")]
fn cron_of(rest: &str) -> Option<Result<Recurrence, Error>> {
    let (zone, expression) = rest.split_once(' ')?;
    Some(Recurrence::cron(expression).and_then(|r| r.in_tz(zone)))
}

#[cfg(not(feature = "cron"))]
fn cron_of(rest: &str) -> Option<Result<Recurrence, Error>> {
    Some(Err(Error::invalid(format!("the cron series {rest:?} needs this crate's `cron` feature"))))
}

/// The run after the one due at `due_ms` that ended at `now_ms` (both on Redis's clock), as
/// [`Recurrence::next_run`] places it by `recurrence`'s missed-run policy, a burst capped at
/// [`MAX_BURST`] runs; `None` past its end. Always after `due_ms`.
pub(crate) fn next_due(recurrence: &Recurrence, due_ms: u64, now_ms: u64) -> Option<u64> {
    let next = recurrence.next_run(from_unix_ms(due_ms), from_unix_ms(now_ms), Some(MAX_BURST))?;
    let ms = unix_ms(next);
    debug_assert!(ms > due_ms, "the run after {due_ms} is {ms}");
    (ms > due_ms && ms < MAX_DUE_MS).then_some(ms)
}

/// A series as a task's record keeps it, read back (see [`read_series`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Series {
    /// Its cadence, end and missed-run policy; or, for a spec this build cannot read, the spec's
    /// text.
    pub(crate) recurrence: Result<Recurrence, String>,
    /// The runs still to come, the current one included; `None` for no limit.
    pub(crate) runs_left: Option<u64>,
}

/// The series of a task whose record holds the period `every_ms`, `runs` left (-1: no limit),
/// the missed-run `digit` and the `spec` (record.lua's fields, as the scripts that read a task
/// answer them): `None` for a task that runs once (no period and no spec). A spec this build
/// cannot read (a cron spec without the `cron` feature, or text no version of this crate
/// writes) is kept as its text, so that the task still reads.
pub(crate) fn read_series(every_ms: u64, runs: i64, digit: u8, spec: &str) -> Option<Series> {
    if every_ms == 0 && spec.is_empty() {
        return None;
    }
    let recurrence = if spec.is_empty() {
        Ok(Recurrence::every(std::time::Duration::from_millis(every_ms)).missed(missed_of(digit)))
    } else {
        Spec { text: spec.to_owned(), missed: digit }.recurrence().map_err(|_| spec.to_owned())
    };
    Some(Series { recurrence, runs_left: u64::try_from(runs).ok() })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T0: u64 = 1_800_000_000_000;

    fn read(stored: &Stored) -> Recurrence {
        Spec { text: stored.spec.clone(), missed: b'0' + missed_digit(stored.missed) }.recurrence().unwrap()
    }

    #[test]
    fn a_fixed_rate_without_an_end_is_left_to_lua() {
        let stored = store(&Recurrence::every(Duration::from_secs(5)).limit(3), T0).unwrap();
        assert_eq!((stored.every_ms, stored.runs, stored.spec.as_str()), (5000, Some(3), ""));
        assert_eq!(stored.missed, MissedRuns::Skip, "the durable default");
        assert_eq!(stored.first_due_ms, T0 + 5000);
    }

    #[test]
    fn a_fixed_rate_with_an_end_reads_back() {
        let end = from_unix_ms(T0 + 60_000);
        let r = Recurrence::every(Duration::from_secs(5)).until(end).missed(MissedRuns::Burst);
        let stored = store(&r, T0).unwrap();
        assert_eq!(stored.every_ms, 0);
        assert_eq!(stored.spec, format!("{} every 5000", T0 + 60_000));
        let back = read(&stored);
        assert_eq!(next_due(&back, T0 + 5000, T0 + 5001), Some(T0 + 10_000));
        assert_eq!(next_due(&back, T0 + 60_000, T0 + 60_001), None, "past the end");
    }

    #[test]
    fn burst_is_capped() {
        let r = Recurrence::every(Duration::from_secs(1)).missed(MissedRuns::Burst);
        let next = next_due(&r, T0, T0 + 1_000_000).unwrap();
        assert_eq!(next, T0 + 1_000_000 - (MAX_BURST as u64 - 1) * 1000, "the last {MAX_BURST} runs");
        assert_eq!(next_due(&r, T0, T0 + 5500), Some(T0 + 1000), "under the cap: all of them");
    }

    #[test]
    fn an_end_already_past_is_refused() {
        let r = Recurrence::every(Duration::from_secs(1)).until(from_unix_ms(T0 - 1));
        let Err(Error::Invalid(why)) = store(&r, T0) else { panic!() };
        assert!(why.contains("has no run after") && why.contains(") has passed"), "{why}");
        assert!(store(&Recurrence::every(Duration::from_micros(1500)), T0).is_err());
    }

    #[cfg(feature = "cron")]
    #[test]
    fn a_cron_series_reads_back_and_skips_by_default() {
        let r = Recurrence::cron("0 3 * * *").unwrap().in_tz("Europe/Berlin").unwrap();
        let stored = store(&r, T0).unwrap();
        assert_eq!(stored.spec, "0 cron Europe/Berlin 0 3 * * *");
        let back = read(&stored);
        assert_eq!(back.missed_runs(), MissedRuns::Skip);
        let first = stored.first_due_ms;
        // Down for five days: one run now, then the next 03:00.
        let now = first + 5 * 86_400_000 + 1000;
        let next = next_due(&back, first, now).unwrap();
        assert!(next > now && next - now < 86_400_000, "{next} {now}");
        assert_eq!(next % 1000, 0);
        assert_eq!(Spec { text: "x".into(), missed: b'2' }.next_due(first, now), "0");
    }

    /// A worker's specs answer as each spec does, read once and kept up to a bound.
    #[test]
    fn specs_are_read_once_and_kept_up_to_a_bound() {
        let specs = Specs::default();
        let every = |ms: u64| Spec { text: format!("0 every {ms}"), missed: b'0' };
        for spec in [every(5000), every(5000), Spec { text: "x".into(), missed: b'2' }] {
            for now in [T0 + 1, T0 + 1_000_000] {
                assert_eq!(specs.next_due(&spec, T0, now), spec.next_due(T0, now), "{spec:?} at {now}");
            }
        }
        assert_eq!(specs.len(), 2, "each spec once, the unreadable one too");
        assert_eq!(specs.next_due(&every(5000), T0, T0 + 1), (T0 + 5000).to_string());
        // The same text with another policy is another series.
        let skip = Spec { missed: b'2', ..every(5000) };
        assert_eq!(specs.next_due(&skip, T0, T0 + 12_000), (T0 + 15_000).to_string());
        assert_eq!(specs.len(), 3);
        for ms in 1..=SPECS_KEPT as u64 {
            specs.next_due(&every(ms), T0, T0 + 1);
        }
        assert!(specs.len() <= SPECS_KEPT, "{}", specs.len());
    }
}
