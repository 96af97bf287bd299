//! The one place where `Instant`s become wheel ticks and back.
//!
//! Tick `t` is the instant `origin + t * tick`. Deadlines round *up* to a tick and the current
//! time rounds *down*, so a timer never fires before its deadline: it fires once the clock's tick
//! reaches the deadline's, which is at most one tick after the deadline itself.

use std::time::Duration;

use tokio::time::Instant;

use crate::Error;

/// When a new timer is due, as a deadline tick, and the tick it was set at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due {
    pub deadline: u64,
    pub set_at: u64,
}

/// The clock read once, at `now`: nanoseconds since the origin (see [`Clock::read`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    now: Instant,
    since: Result<u64, u128>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    tick_nanos: u64,
}

impl Clock {
    pub fn new(tick: Duration) -> Result<Self, Error> {
        let tick_nanos =
            u64::try_from(tick.as_nanos()).map_err(|_| Error::invalid("the tick must be shorter than 584 years"))?;
        if tick_nanos == 0 {
            return Err(Error::invalid("the tick must be longer than zero"));
        }
        Ok(Clock { origin: Instant::now(), tick_nanos })
    }

    /// Nanoseconds from the origin to `at` (0 before it), saturating, and the tick then. The tick
    /// is worked out from the exact time, not the saturated nanoseconds: past 584 years of
    /// nanoseconds (a tick of a second or more gets there) the clock must still move on.
    pub fn read_nanos(&self, at: Instant) -> (u64, u64) {
        let reading = self.read(at);
        (reading.since.unwrap_or(u64::MAX), self.tick_of(&reading))
    }

    /// How far `now_nanos` (from [`read_nanos`](Self::read_nanos)) is past the start of tick
    /// `deadline`.
    pub fn late_by(&self, now_nanos: u64, deadline: u64) -> Duration {
        Duration::from_nanos(now_nanos.saturating_sub(deadline.saturating_mul(self.tick_nanos)))
    }

    /// The current tick, rounded down.
    pub fn now(&self) -> u64 {
        self.tick_at(Instant::now())
    }

    pub fn tick_at(&self, at: Instant) -> u64 {
        self.tick_of(&self.read(at))
    }

    /// Nanoseconds from the origin to `at` (0 if before): as a `u64` for the next 584 years,
    /// so the common case divides in 64 bits, else as the full `u128`.
    fn since_origin(&self, at: Instant) -> Result<u64, u128> {
        let elapsed = at.saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos()).map_err(|_| elapsed.as_nanos())
    }

    /// The tick of a deadline `nanos` after the origin, rounded up.
    fn deadline_of(&self, nanos: u128) -> Result<u64, Error> {
        u64::try_from(nanos.div_ceil(self.tick_nanos as u128))
            .map_err(|_| Error::invalid("the deadline is too far in the future to be represented in ticks"))
    }

    /// The tick of a deadline, rounded up; instants before the origin map to tick 0.
    pub fn deadline(&self, at: Instant) -> Result<u64, Error> {
        match self.since_origin(at) {
            Ok(nanos) => Ok(nanos.div_ceil(self.tick_nanos)),
            Err(nanos) => self.deadline_of(nanos),
        }
    }

    /// When a timer set now for `delay` is due.
    pub fn after(&self, delay: Duration) -> Result<Due, Error> {
        self.after_from(Instant::now(), delay)
    }

    /// When a timer set at `now` for `delay` is due.
    pub fn after_from(&self, now: Instant, delay: Duration) -> Result<Due, Error> {
        self.after_reading(&self.read(now), delay)
    }

    /// The time since the origin at `now`, for the timers of a batch, all set at that instant.
    pub fn read(&self, now: Instant) -> Reading {
        Reading { now, since: self.since_origin(now) }
    }

    /// The tick of the `reading`, rounded down.
    pub fn tick_of(&self, reading: &Reading) -> u64 {
        match reading.since {
            Ok(nanos) => nanos / self.tick_nanos,
            Err(nanos) => u64::try_from(nanos / self.tick_nanos as u128).unwrap_or(u64::MAX),
        }
    }

    /// When a timer set at the `reading` for `delay` is due. Stays in integers: this runs once
    /// per timer scheduled.
    pub fn after_reading(&self, reading: &Reading, delay: Duration) -> Result<Due, Error> {
        let Reading { now, since } = *reading;
        if let (Ok(since), Ok(delay)) = (since, u64::try_from(delay.as_nanos())) {
            if let Some(due) = since.checked_add(delay) {
                return Ok(Due { deadline: due.div_ceil(self.tick_nanos), set_at: since / self.tick_nanos });
            }
        }
        // Past 584 years of nanoseconds: the same in 128 bits, and the instant must exist.
        Self::instant_after(now, delay)?;
        let since = since.map_or_else(|nanos| nanos, u128::from);
        Ok(Due { deadline: self.deadline_of(since + delay.as_nanos())?, set_at: self.tick_at(now) })
    }

    /// The instant `delay` after `now`, which repeating timers and moves keep to stay on their
    /// period.
    #[inline]
    pub fn instant_after(now: Instant, delay: Duration) -> Result<Instant, Error> {
        now.checked_add(delay).ok_or_else(|| {
            Error::invalid(format!("a delay of {delay:?} puts the deadline past what Instant can represent"))
        })
    }

    /// A new timer due at the instant `at`.
    pub fn at(&self, at: Instant) -> Result<Due, Error> {
        Ok(Due { deadline: self.deadline(at)?, set_at: self.now() })
    }

    /// The instant tick `t` starts at, or `None` if no `Instant` is that far on. In 128 bits: a
    /// tick past 584 years of nanoseconds is still an instant.
    pub fn instant(&self, t: u64) -> Option<Instant> {
        let nanos = u128::from(t) * u128::from(self.tick_nanos);
        let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
        self.origin.checked_add(Duration::new(secs, (nanos % 1_000_000_000) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadlines_round_up_and_now_rounds_down() {
        let clock = Clock::new(Duration::from_millis(10)).unwrap();
        let origin = Instant::now();
        assert_eq!(clock.deadline(origin).unwrap(), 0);
        assert_eq!(clock.deadline(origin + Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(clock.deadline(origin + Duration::from_millis(10)).unwrap(), 1);
        assert_eq!(clock.deadline(origin + Duration::from_millis(11)).unwrap(), 2);
        tokio::time::advance(Duration::from_millis(19)).await;
        assert_eq!(clock.now(), 1);
        assert_eq!(clock.instant(2), Some(origin + Duration::from_millis(20)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_set_now_is_due_where_its_instant_is() {
        let year = Duration::from_secs(365 * 86_400);
        for tick in [Duration::from_nanos(1), Duration::from_nanos(7), Duration::from_millis(1), Duration::from_secs(1)]
        {
            let clock = Clock::new(tick).unwrap();
            tokio::time::advance(Duration::from_nanos(123_456_789)).await;
            let now = Instant::now();
            // Both sides of 584 years of nanoseconds, where the integer path hands over to u128.
            for delay in [Duration::ZERO, Duration::from_nanos(1), Duration::from_millis(1500), 500 * year, 700 * year]
            {
                let Ok(due) = clock.after_from(now, delay) else {
                    assert_eq!(
                        tick,
                        Duration::from_nanos(1),
                        "only 1 ns ticks overflow here, not {tick:?} + {delay:?}"
                    );
                    continue;
                };
                assert_eq!(due.deadline, clock.deadline(now + delay).unwrap(), "{tick:?} + {delay:?}");
                assert_eq!(due.set_at, clock.tick_at(now));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unrepresentable_values_are_errors_not_panics() {
        assert!(Clock::new(Duration::ZERO).is_err());
        assert!(Clock::new(Duration::MAX).is_err());
        let clock = Clock::new(Duration::from_nanos(1)).unwrap();
        assert!(clock.after(Duration::MAX).is_err());
        assert!(clock.after(Duration::from_secs(600 * 365 * 86_400)).is_err(), "more than u64 nanoseconds of ticks");
        let coarse = Clock::new(Duration::from_secs(1)).unwrap();
        assert_eq!(coarse.instant(u64::MAX), None, "u64::MAX seconds is past any Instant");
    }

    /// Past 584 years of nanoseconds since the origin, the tick still moves on and ticks still
    /// have instants (a saturated reading once froze the wheels at `u64::MAX / tick`, so a
    /// timer due later never fired, and a pending timer had no deadline).
    #[tokio::test(start_paused = true)]
    async fn the_clock_reads_past_584_years_of_nanoseconds() {
        let tick = Duration::from_nanos(u64::MAX);
        let clock = Clock::new(tick).unwrap();
        let coarse = Clock::new(Duration::from_secs(3600)).unwrap();
        let origin = Instant::now();
        assert_eq!(clock.instant(2), Some(origin + tick + tick));
        tokio::time::advance(tick + tick + tick).await;
        assert_eq!(clock.read_nanos(Instant::now()), (u64::MAX, 3));
        assert_eq!(clock.tick_at(Instant::now()), 3);
        let hours = 3 * u128::from(u64::MAX) / 3_600_000_000_000;
        assert_eq!(u128::from(coarse.read_nanos(Instant::now()).1), hours);
    }
}
