//! What the wheels hold for a timer.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::clock::Clock;
use super::job::{Job, JobRef, OnceJob};
use super::key::Key;
use crate::recurrence::{MissedRuns, Recurrence};

/// The most missed runs a repeating timer with [`MissedRuns::Burst`] makes up at once, in
/// process: after a longer stall (or a jump of paused time past many of its periods), the earlier
/// missed runs are skipped and the last this many fire one after the other. Without a bound, a
/// 1 ms timer would fire a billion times for a runtime stalled 12 days.
pub(crate) const MAX_BURST: usize = 100_000;

/// A timer: the value a shard's wheel holds for it. 40 bytes, so that a wheel entry holding one
/// is 64 bytes, one cache line.
pub(crate) struct Timer {
    pub key: Key,
    pub run: Run,
    /// The timer's serial number in its shard, which names it for its `Scheduled` future, with
    /// [`ARMED`] set while such a future watches it. Set when the timer is claimed; it stays the
    /// same while a repeating timer moves from one wheel entry to the next.
    pub serial: u64,
}

/// The bit of [`Timer::serial`] set while a `Scheduled` future watches the timer.
pub(crate) const ARMED: u64 = 1 << 63;

/// The serial number of a cancelled timer's emptied entry while it waits to be swept, which no
/// timer has: a `Ticket` that points at the entry then does not take it for its pending timer,
/// and a search by key prefix passes over it.
pub(crate) const CANCELLED: u64 = u64::MAX;

/// What a timer does when it fires.
pub(crate) enum Run {
    /// A one-shot timer's job; [`Wake`](super::job::Wake) for a keyed sleep, which only wakes
    /// its waiter.
    Once(Box<dyn OnceJob>),
    /// A repeating timer's job and schedule, boxed so that one-shot timers stay small.
    Repeat(Box<Repeating>),
}

impl Run {
    /// What a cancelled timer's entry runs until it is swept: a job that holds nothing (a unit
    /// struct, so boxing it allocates nothing), put in place of the job the cancel took out.
    pub fn released() -> Self {
        Run::Once(Box::new(super::job::Wake))
    }

    /// Forgets a cancelled timer's [`released`](Self::released) job when its entry is swept. It
    /// is a unit struct whose box allocated nothing, so forgetting it leaks nothing, and spares
    /// its drop, a call through its vtable that does nothing (BENCHMARKS.md, "Keyed cancel").
    pub fn forget_released(self) {
        debug_assert!(matches!(&self, Run::Once(job) if job.only_wakes()), "only a released job is forgotten");
        std::mem::forget(self);
    }
}

pub(crate) struct Repeating {
    /// The fixed rate on Tokio's clock, when there is no [`calendar`](Self::calendar).
    pub period: Duration,
    /// What a run does to the runs it finds already due, when there is no calendar.
    pub missed: MissedRuns,
    /// When the run the timer is waiting for is due; the next one is due a period later (or
    /// where the calendar puts it).
    pub due: Instant,
    /// Runs left including the one waited for; `None` repeats until cancelled.
    pub runs_left: Option<u64>,
    /// Shared, so that a run can be started with no lock held while the timer waits in the
    /// wheel for the next.
    pub job: Arc<dyn Job>,
    /// A recurrence on the wall clock (a cron expression, or a start or end given as a
    /// `SystemTime`), which then places every run; `None` for a fixed rate on Tokio's clock,
    /// placed by `period` and `missed`. Boxed: most repeating timers have none.
    pub calendar: Option<Box<Calendar>>,
}

/// A recurrence on the wall clock and where that clock meets Tokio's.
pub(crate) struct Calendar {
    pub recurrence: Recurrence,
    pub anchor: Anchor,
}

/// The one place where a timer's wall clock meets Tokio's: `wall` is the `SystemTime` read
/// with the Tokio `instant`, and every other time is mapped by its distance from them. Read
/// once, when the timer is scheduled (or replaced), so a paused Tokio clock drives a calendar
/// as it drives every other timer; a wall clock stepped later (by NTP, by hand) is not followed
/// until the timer is scheduled again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anchor {
    instant: Instant,
    wall: SystemTime,
}

impl Anchor {
    pub fn new(instant: Instant, wall: SystemTime) -> Self {
        Anchor { instant, wall }
    }

    /// The wall-clock time of the Tokio instant `at`.
    pub fn wall(&self, at: Instant) -> Option<SystemTime> {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.wall.checked_add(after),
            None => self.wall.checked_sub(self.instant.duration_since(at)),
        }
    }

    /// The Tokio instant of the wall-clock time `wall`.
    pub fn instant(&self, wall: SystemTime) -> Option<Instant> {
        match wall.duration_since(self.wall) {
            Ok(after) => self.instant.checked_add(after),
            Err(before) => self.instant.checked_sub(before.duration()),
        }
    }
}

impl Timer {
    /// A timer not yet claimed (its serial number comes with its key's claim).
    pub fn new(key: Key, run: Run) -> Self {
        Timer { key, run, serial: 0 }
    }

    /// Whether this is a cancelled timer's entry, waiting to be swept: it keeps its key, but
    /// its job is [`Run::released`] and no key-map slot names it.
    pub fn is_cancelled(&self) -> bool {
        self.serial == CANCELLED
    }

    /// The serial number, without the [`ARMED`] bit.
    pub fn serial(&self) -> u64 {
        self.serial & !ARMED
    }

    /// When a repeating timer's next run is due (instant and tick), or `None` if this run is
    /// its last (a next run past the clock's last tick never comes), for a run fired at `now`.
    /// [`Recurrence::next_run`] places it, as it places every series' next run: a timer with a
    /// calendar on the wall clock through its anchor; a fixed rate on Tokio's clock, read as a
    /// wall clock whose origin is when this run was due (a fixed rate without a start is the
    /// same from any origin), with its [`MissedRuns`]. Fixed rate: a period after this run was
    /// due, not after now, unless that is already past (the next run is missed) and the policy
    /// says otherwise.
    pub fn next_run(&self, clock: &Clock, now: Instant) -> Option<(Instant, u64)> {
        let Run::Repeat(repeat) = &self.run else {
            return None;
        };
        if repeat.runs_left == Some(1) {
            return None;
        }
        let fixed_rate;
        let (recurrence, anchor) = match &repeat.calendar {
            Some(calendar) => (&calendar.recurrence, calendar.anchor),
            None => {
                fixed_rate = Recurrence::every(repeat.period).missed(repeat.missed);
                (&fixed_rate, Anchor::new(repeat.due, SystemTime::UNIX_EPOCH))
            }
        };
        let next = recurrence.next_run(anchor.wall(repeat.due)?, anchor.wall(now)?, Some(MAX_BURST))?;
        let due = anchor.instant(next)?;
        debug_assert!(due > repeat.due, "the run after {:?} is {due:?}", repeat.due);
        Some((due, clock.deadline_within(due)?))
    }

    /// Moves a repeating timer on to its next run, due at `due`, and returns its job for this
    /// run.
    pub fn next_repeat(&mut self, due: Instant) -> Arc<dyn Job> {
        let Run::Repeat(repeat) = &mut self.run else {
            unreachable!("only a repeating timer runs again");
        };
        repeat.due = due;
        repeat.runs_left = repeat.runs_left.map(|n| n - 1);
        repeat.job.clone()
    }

    /// The key and the job of a timer's last run, if it has one to start.
    pub fn into_last_run(self) -> (Key, Option<JobRef>) {
        let job = match self.run {
            Run::Once(job) if job.only_wakes() => None,
            Run::Once(job) => Some(JobRef::Owned(job)),
            Run::Repeat(repeat) => Some(JobRef::Shared(repeat.job)),
        };
        (self.key, job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the slab's 20 bytes of its own, a wheel entry holding a timer is 64 bytes.
    #[test]
    fn a_timer_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<Timer>(), 40);
        assert_eq!(std::mem::size_of::<Option<Timer>>(), 40);
    }

    #[tokio::test(start_paused = true)]
    async fn an_anchor_maps_both_ways_on_both_sides_of_it() {
        let now = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let anchor = Anchor::new(now, wall);
        for offset in [Duration::ZERO, Duration::from_nanos(1), Duration::from_millis(1_500)] {
            assert_eq!(anchor.wall(now + offset), Some(wall + offset));
            assert_eq!(anchor.instant(wall + offset), Some(now + offset));
            assert_eq!(anchor.instant(wall - offset), now.checked_sub(offset));
        }
        // Some 2^63 seconds after an anchor's wall-clock time: a SystemTime, but no Instant.
        let early = Anchor::new(now, SystemTime::UNIX_EPOCH - Duration::from_secs(1 << 40));
        assert_eq!(early.instant(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::MAX / 2)), None, "no such instant");
    }
}
