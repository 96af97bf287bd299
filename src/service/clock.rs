//! The one place where `Instant`s become wheel ticks and back.
//!
//! Tick `t` is the instant `origin + t * tick`. Deadlines round *up* to a tick and the current
//! time rounds *down*, so a timer never fires before its deadline: it fires once the clock's tick
//! reaches the deadline's, which is at most one tick after the deadline itself.

use std::time::Duration;

use tokio::time::Instant;

use crate::Error;

/// When a new timer is due, as an instant and as a deadline tick, and the tick it was set at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due {
    pub at: Instant,
    pub deadline: u64,
    pub set_at: u64,
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

    /// The current tick, rounded down.
    pub fn now(&self) -> u64 {
        self.tick_at(Instant::now())
    }

    pub fn tick_at(&self, at: Instant) -> u64 {
        match self.since_origin(at) {
            Ok(nanos) => nanos / self.tick_nanos,
            Err(nanos) => u64::try_from(nanos / self.tick_nanos as u128).unwrap_or(u64::MAX),
        }
    }

    /// Nanoseconds from the origin to `at` (0 if before): as a `u64` for the next 584 years,
    /// so the common case divides in 64 bits, else as the full `u128`.
    fn since_origin(&self, at: Instant) -> Result<u64, u128> {
        let elapsed = at.saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos()).map_err(|_| elapsed.as_nanos())
    }

    /// The tick of a deadline, rounded up; instants before the origin map to tick 0.
    pub fn deadline(&self, at: Instant) -> Result<u64, Error> {
        match self.since_origin(at) {
            Ok(nanos) => Ok(nanos.div_ceil(self.tick_nanos)),
            Err(nanos) => u64::try_from(nanos.div_ceil(self.tick_nanos as u128))
                .map_err(|_| Error::invalid("the deadline is too far in the future to be represented in ticks")),
        }
    }

    /// When a timer set now for `delay` is due.
    pub fn after(&self, delay: Duration) -> Result<Due, Error> {
        self.after_from(Instant::now(), delay)
    }

    pub fn after_from(&self, now: Instant, delay: Duration) -> Result<Due, Error> {
        let at = now.checked_add(delay).ok_or_else(|| {
            Error::invalid(format!("a delay of {delay:?} puts the deadline past what Instant can represent"))
        })?;
        Ok(Due { at, deadline: self.deadline(at)?, set_at: self.tick_at(now) })
    }

    /// A new timer due at the instant `at`.
    pub fn at(&self, at: Instant) -> Result<Due, Error> {
        Ok(Due { at, deadline: self.deadline(at)?, set_at: self.now() })
    }

    pub fn instant(&self, t: u64) -> Option<Instant> {
        let nanos = t.checked_mul(self.tick_nanos)?;
        self.origin.checked_add(Duration::from_nanos(nanos))
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
    async fn unrepresentable_values_are_errors_not_panics() {
        assert!(Clock::new(Duration::ZERO).is_err());
        assert!(Clock::new(Duration::MAX).is_err());
        let clock = Clock::new(Duration::from_nanos(1)).unwrap();
        assert!(clock.after(Duration::MAX).is_err());
        assert!(clock.after(Duration::from_secs(600 * 365 * 86_400)).is_err(), "more than u64 nanoseconds of ticks");
        let coarse = Clock::new(Duration::from_secs(1)).unwrap();
        assert_eq!(coarse.instant(u64::MAX), None, "u64::MAX seconds is past any Instant");
    }
}
