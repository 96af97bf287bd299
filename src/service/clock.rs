//! The one place where `Instant`s become wheel ticks and back.
//!
//! Tick `t` is the instant `origin + t * tick`. Deadlines round *up* to a tick and the current
//! time rounds *down*, so a timer never fires before its deadline: it fires once the clock's tick
//! reaches the deadline's, which is at most one tick after the deadline itself.
//!
//! # The latest deadline
//! Deadlines saturate at the clock's [`last`](Clock::last) tick: [`MAX_DEADLINE`], or earlier
//! if the tick is so long that `Instant` ends sooner. A later delay or instant (`Duration::MAX`
//! among them) is clamped to it, as `tokio::time::sleep` clamps a deadline that `Instant`
//! cannot represent to a far-future instant: the timer is accepted, it has a deadline that
//! [`instant`](Clock::instant) can name, and it never comes. The ticks past `MAX_DEADLINE` are
//! the shards' to use (a paused timer is parked there, see `shards/pause.rs`).

use std::time::Duration;

use tokio::time::Instant;

use crate::Error;

/// The bits a deadline tick has: [`MAX_DEADLINE`] is the largest tick they hold.
pub(crate) const DEADLINE_BITS: u32 = 48;

/// The latest deadline tick of any clock: some 8,900 years from the service's start at the
/// default 1 ms tick (and at least that at any tick `Builder` allows). Later deadlines are
/// clamped to it (see the module docs).
pub(crate) const MAX_DEADLINE: u64 = (1 << DEADLINE_BITS) - 1;

/// When a new timer is due, as a deadline tick, and the tick it was set at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due {
    pub deadline: u64,
    pub set_at: u64,
}

/// The clock read once, at `now`: nanoseconds since the origin (see [`Clock::read`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    since: Result<u64, u128>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    tick_nanos: u64,
    /// The latest deadline tick: [`MAX_DEADLINE`], or the last tick that starts at an
    /// `Instant` if that comes sooner. Every deadline is clamped to it.
    last: u64,
}

impl Clock {
    pub fn new(tick: Duration) -> Result<Self, Error> {
        let tick_nanos =
            u64::try_from(tick.as_nanos()).map_err(|_| Error::invalid("the tick must be shorter than 584 years"))?;
        if tick_nanos == 0 {
            return Err(Error::invalid("the tick must be longer than zero"));
        }
        let mut clock = Clock { origin: Instant::now(), tick_nanos, last: MAX_DEADLINE };
        if clock.instant(MAX_DEADLINE).is_none() {
            // A tick of hours or more, past which `Instant` ends before `MAX_DEADLINE` ticks:
            // search for the last tick that has an instant (tick 0, the origin, has one).
            let (mut has, mut has_not) = (0, MAX_DEADLINE);
            while has_not - has > 1 {
                let mid = has + (has_not - has) / 2;
                if clock.instant(mid).is_some() {
                    has = mid;
                } else {
                    has_not = mid;
                }
            }
            clock.last = has;
        }
        debug_assert!(clock.instant(clock.last).is_some(), "the last tick {} has no instant", clock.last);
        Ok(clock)
    }

    /// The latest deadline tick (see the module docs): it has an instant, and it is at most
    /// [`MAX_DEADLINE`].
    pub fn last(&self) -> u64 {
        self.last
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

    /// The tick of a deadline `nanos` after the origin, rounded up and clamped to the
    /// [`last`](Self::last) tick.
    fn deadline_of(&self, nanos: u128) -> u64 {
        u64::try_from(nanos.div_ceil(self.tick_nanos as u128)).map_or(self.last, |tick| tick.min(self.last))
    }

    /// The tick of a deadline, rounded up and clamped to the [`last`](Self::last) tick;
    /// instants before the origin map to tick 0.
    pub fn deadline(&self, at: Instant) -> u64 {
        match self.since_origin(at) {
            Ok(nanos) => nanos.div_ceil(self.tick_nanos).min(self.last),
            Err(nanos) => self.deadline_of(nanos),
        }
    }

    /// The tick of a deadline, rounded up, or `None` past the [`last`](Self::last) tick: for a
    /// repeating timer's next run, which never comes if it is that far.
    pub fn deadline_within(&self, at: Instant) -> Option<u64> {
        let tick = match self.since_origin(at) {
            Ok(nanos) => nanos.div_ceil(self.tick_nanos),
            Err(nanos) => u64::try_from(nanos.div_ceil(self.tick_nanos as u128)).ok()?,
        };
        (tick <= self.last).then_some(tick)
    }

    /// When a timer set now for `delay` is due.
    pub fn after(&self, delay: Duration) -> Due {
        self.after_from(Instant::now(), delay)
    }

    /// When a timer set at `now` for `delay` is due.
    pub fn after_from(&self, now: Instant, delay: Duration) -> Due {
        self.after_reading(&self.read(now), delay)
    }

    /// When a timer moved at `now` to `delay` later is due, and the instant it is due at, which
    /// a repeating timer keeps to stay on its period: `now + delay`, or the instant of the
    /// [`last`](Self::last) tick if the deadline was clamped to it.
    pub fn moved(&self, now: Instant, delay: Duration) -> (Due, Instant) {
        let due = self.after_from(now, delay);
        let at = match now.checked_add(delay) {
            Some(at) if due.deadline < self.last => at,
            _ => self.instant(due.deadline).expect("a deadline up to the last tick has an instant"),
        };
        (due, at)
    }

    /// The time since the origin at `now`, for the timers of a batch, all set at that instant.
    pub fn read(&self, now: Instant) -> Reading {
        Reading { since: self.since_origin(now) }
    }

    /// The tick of the `reading`, rounded down.
    pub fn tick_of(&self, reading: &Reading) -> u64 {
        match reading.since {
            Ok(nanos) => nanos / self.tick_nanos,
            Err(nanos) => u64::try_from(nanos / self.tick_nanos as u128).unwrap_or(u64::MAX),
        }
    }

    /// When a timer set at the `reading` for `delay` is due, clamped to the
    /// [`last`](Self::last) tick. Stays in integers: this runs once per timer scheduled.
    pub fn after_reading(&self, reading: &Reading, delay: Duration) -> Due {
        let Reading { since } = *reading;
        if let (Ok(since), Ok(delay)) = (since, u64::try_from(delay.as_nanos())) {
            if let Some(due) = since.checked_add(delay) {
                return Due { deadline: due.div_ceil(self.tick_nanos).min(self.last), set_at: since / self.tick_nanos };
            }
        }
        // Past 584 years of nanoseconds: the same in 128 bits (a `Duration` is less than 2^64
        // seconds, so the sum cannot overflow).
        let since128 = since.map_or_else(|nanos| nanos, u128::from);
        Due { deadline: self.deadline_of(since128 + delay.as_nanos()), set_at: self.tick_of(reading) }
    }

    /// The instant `delay` after `now`, which a repeating timer keeps to stay on its period.
    #[inline]
    pub fn instant_after(now: Instant, delay: Duration) -> Result<Instant, Error> {
        now.checked_add(delay).ok_or_else(|| {
            Error::invalid(format!("a delay of {delay:?} puts the deadline past what Instant can represent"))
        })
    }

    /// A new timer due at the instant `at`, clamped to the [`last`](Self::last) tick.
    pub fn at(&self, at: Instant) -> Due {
        Due { deadline: self.deadline(at), set_at: self.now() }
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
        assert_eq!(clock.deadline(origin), 0);
        assert_eq!(clock.deadline(origin + Duration::from_millis(1)), 1);
        assert_eq!(clock.deadline(origin + Duration::from_millis(10)), 1);
        assert_eq!(clock.deadline(origin + Duration::from_millis(11)), 2);
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
            // Both sides of 584 years of nanoseconds, where the integer path hands over to u128
            // (at ticks of nanoseconds, both are clamped to the last tick).
            for delay in [Duration::ZERO, Duration::from_nanos(1), Duration::from_millis(1500), 500 * year, 700 * year]
            {
                let due = clock.after_from(now, delay);
                assert_eq!(due.deadline, clock.deadline(now + delay), "{tick:?} + {delay:?}");
                assert_eq!(due.set_at, clock.tick_at(now));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unrepresentable_ticks_are_errors_not_panics() {
        assert!(Clock::new(Duration::ZERO).is_err());
        assert!(Clock::new(Duration::MAX).is_err());
        let coarse = Clock::new(Duration::from_secs(1)).unwrap();
        assert_eq!(coarse.instant(u64::MAX), None, "u64::MAX seconds is past any Instant");
    }

    /// The farthest instant after `now` that an `Instant` reaches, to within a second.
    fn farthest(now: Instant) -> Instant {
        let (mut has, mut has_not) = (0u64, u64::MAX);
        while has_not - has > 1 {
            let mid = has + (has_not - has) / 2;
            if now.checked_add(Duration::from_secs(mid)).is_some() {
                has = mid;
            } else {
                has_not = mid;
            }
        }
        now + Duration::from_secs(has)
    }

    /// A deadline past the last tick, by any path (a delay in 64 or 128 bits, one past what
    /// `Instant` can represent, an instant), is clamped to it, and the last tick has an
    /// instant, whatever the tick: a deadline is never lost, nor read as a parked one.
    #[tokio::test(start_paused = true)]
    async fn far_deadlines_are_clamped_to_the_last_tick_which_has_an_instant() {
        let ticks = [
            Duration::from_nanos(1),
            Duration::from_millis(1),
            Duration::from_secs(3600),
            Duration::from_nanos(u64::MAX),
        ];
        for tick in ticks {
            let clock = Clock::new(tick).unwrap();
            let last = clock.last();
            assert!(last <= MAX_DEADLINE, "{tick:?}: {last}");
            assert!(clock.instant(last).is_some(), "{tick:?}: the last tick has an instant");
            assert!(last == MAX_DEADLINE || clock.instant(last + 1).is_none(), "{tick:?}: {last} is the last with one");
            tokio::time::advance(Duration::from_millis(1_234)).await;
            let now = Instant::now();
            let since = now.duration_since(clock.origin).as_nanos();
            let far =
                [Duration::from_nanos(u64::MAX), Duration::from_secs(1 << 54), Duration::from_millis(u64::MAX - 1)];
            for delay in far.into_iter().chain([Duration::MAX]) {
                let exact = (since + delay.as_nanos()).div_ceil(tick.as_nanos());
                let deadline = u64::try_from(exact).map_or(last, |exact| exact.min(last));
                assert_eq!(clock.after_from(now, delay).deadline, deadline, "{tick:?} + {delay:?}");
                let (due, at) = clock.moved(now, delay);
                let at_expected = if deadline < last { Some(now + delay) } else { clock.instant(last) };
                assert_eq!((due.deadline, Some(at)), (deadline, at_expected), "{tick:?} + {delay:?}");
            }
            assert_eq!(clock.after_from(now, Duration::MAX).deadline, last, "{tick:?}: Duration::MAX is clamped");
            assert_eq!(clock.deadline(farthest(now)), last, "{tick:?}");
            assert_eq!(clock.at(farthest(now)).deadline, last, "{tick:?}");
            if tick <= Duration::from_secs(3600) {
                assert_eq!(clock.deadline_within(farthest(now)), None, "{tick:?}: a run that far never comes");
            }
        }
        // Short of the last tick, nothing is clamped.
        let year = Duration::from_secs(365 * 86_400);
        let clock = Clock::new(Duration::from_millis(1)).unwrap();
        let now = Instant::now();
        let (due, at) = clock.moved(now, 1_000 * year);
        assert_eq!((due.deadline, at), (clock.deadline(now + 1_000 * year), now + 1_000 * year));
        assert_eq!(clock.deadline_within(now + 1_000 * year), Some(due.deadline));
        assert!(due.deadline < clock.last());
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
