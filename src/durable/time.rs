//! Conversions between Rust's time types and the whole milliseconds the scripts use, each with
//! its rounding direction: a due time or lease rounds up, so nothing is ever early.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Error;

/// The latest due time a task may have, in ms since the Unix epoch (the year 2286): keeps every
/// number in the scripts exact in Lua's doubles and printable as an integer.
pub(crate) const MAX_DUE_MS: u64 = 10_000_000_000_000;

/// Whether Tokio's clock is paused in the current runtime (`tokio::time::pause`, or a test's
/// `start_paused`): its `Instant::now` stands still while real time passes. Spins a few
/// microseconds of real time to see.
pub(crate) fn tokio_clock_paused() -> bool {
    let (tokio_then, then) = (tokio::time::Instant::now(), std::time::Instant::now());
    while then.elapsed() < Duration::from_micros(20) {
        std::hint::spin_loop();
    }
    tokio::time::Instant::now() == tokio_then
}

/// `d` in whole milliseconds, rounded up (a deadline is never early).
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// `at` in ms since the Unix epoch, rounded up; a time before the epoch is 0 (due at once).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(ceil_ms).unwrap_or(0)
}

/// The instant `ms` milliseconds after the Unix epoch (a time read back from Redis).
pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// `d` as a whole, non-zero number of milliseconds, or [`Error::Invalid`] naming `what`.
pub(crate) fn whole_ms(d: Duration, what: &str) -> Result<u64, Error> {
    if d.is_zero() || !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(Error::invalid(format!("the {what} must be a whole, non-zero number of milliseconds (got {d:?})")));
    }
    u64::try_from(d.as_millis()).map_err(|_| Error::invalid(format!("the {what} is too long")))
}

/// When a task is due: after a delay from Redis's now, or at a time on Redis's clock (both in
/// whole ms, checked against [`MAX_DUE_MS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    Delay(u64),
    At(u64),
}

impl When {
    pub(crate) fn delay(d: Duration) -> Result<Self, Error> {
        delay_ms(d).map(When::Delay)
    }

    pub(crate) fn at(at: SystemTime) -> Result<Self, Error> {
        let ms = unix_ms(at);
        if ms >= MAX_DUE_MS {
            return Err(Error::invalid("the due time is too far: the latest is the year 2286"));
        }
        Ok(When::At(ms))
    }
}

/// A delay in whole milliseconds (rounded up), checked: not past the latest due time.
pub(crate) fn delay_ms(d: Duration) -> Result<u64, Error> {
    let ms = ceil_ms(d);
    if ms >= MAX_DUE_MS {
        return Err(Error::invalid(format!("the delay {d:?} is too long: the latest due time is the year 2286")));
    }
    Ok(ms)
}

/// This process's estimate of Redis's clock: the local clock plus the offset last seen in a
/// reply that carried Redis's time. Only a guess, used to name the ring slots a task may go to
/// (a wrong guess sends the task to the far tier, never early or late); every decision that
/// matters is made by the scripts on Redis's own clock.
///
/// A store in this process alone (`sqlite::memory:`) keeps its time on Tokio's clock, from a
/// wall-clock time read when it opened: that clock is read here as it is, no guess (on paused
/// time, a guess from the wall clock would fall behind by every jump).
#[derive(Debug, Default)]
pub(crate) struct RedisClock {
    /// Redis's ms minus the local ms, when Redis's were read.
    offset_ms: AtomicI64,
    /// The store's clock, when it is Tokio's: ms at the instant.
    tokio: Option<(u64, tokio::time::Instant)>,
    /// How long the leader's last tick call took (ms): how far Redis's clock moves on while a
    /// call travels.
    round_trip_ms: AtomicU64,
    /// A count that each round trip of at least [`SLOW_LINK_MS`] raises by one (to twice
    /// [`SLOW_IN_A_ROW`] once it reaches [`SLOW_IN_A_ROW`]) and each faster one lowers by four:
    /// at [`SLOW_IN_A_ROW`] or more, the link is slow.
    slow_in_a_row: AtomicU32,
    /// Notified when the link turns slow (see [`RedisClock::slow_link`]).
    turned_slow: tokio::sync::Notify,
}

/// A round trip to the store at least this long (ms) is a slow link's: a claim for a due time
/// goes that much early, and a second claim loop keeps claims going while one is on the way
/// (`worker::claim`).
pub(crate) const SLOW_LINK_MS: u64 = 20;
/// How many round trips in a row must be slow for the link to count as slow: a fast link's
/// round trip is slow now and then (a loaded host, a large claim); a slow link's always is. A
/// slow link counts as fast again after two fast round trips in a row.
const SLOW_IN_A_ROW: u32 = 4;

impl RedisClock {
    /// The clock of a store whose time is Tokio's from `base` (ms at an instant), or an estimate
    /// of a server's clock (`None`).
    pub(crate) fn new(tokio: Option<(u64, tokio::time::Instant)>) -> Self {
        RedisClock {
            offset_ms: AtomicI64::new(0),
            tokio,
            round_trip_ms: AtomicU64::new(0),
            slow_in_a_row: AtomicU32::new(0),
            turned_slow: tokio::sync::Notify::new(),
        }
    }

    /// The leader's last tick call took `took`, there and back.
    pub(crate) fn note_round_trip(&self, took: std::time::Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.round_trip_ms.store(ms, Ordering::Relaxed);
        let slow = ms >= SLOW_LINK_MS;
        let before = self.slow_in_a_row.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            // Turning slow fills the count, so that only two fast round trips in a row end it.
            Some(if !slow {
                n.saturating_sub(4)
            } else if n + 1 >= SLOW_IN_A_ROW {
                2 * SLOW_IN_A_ROW
            } else {
                n + 1
            })
        });
        if slow && before.is_ok_and(|n| n < SLOW_IN_A_ROW) && self.slow_link() {
            self.turned_slow.notify_waiters();
        }
    }

    /// Whether the link to the store is slow: its last [`SLOW_IN_A_ROW`] round trips each took
    /// at least [`SLOW_LINK_MS`] (or it was slow, and at most one faster one came since).
    pub(crate) fn slow_link(&self) -> bool {
        self.slow_in_a_row.load(Ordering::Relaxed) >= SLOW_IN_A_ROW
    }

    /// Waits until the link is slow: at once if it is, else until it turns slow (no timer, so
    /// that a runtime on paused time is never woken for it).
    pub(crate) async fn until_slow_link(&self) {
        loop {
            let turned = self.turned_slow.notified();
            let mut turned = std::pin::pin!(turned);
            turned.as_mut().enable();
            if self.slow_link() {
                return;
            }
            turned.await;
        }
    }

    /// How long the last tick or claim call took, there and back, in ms.
    pub(crate) fn round_trip_ms(&self) -> u64 {
        self.round_trip_ms.load(Ordering::Relaxed)
    }

    /// Learns from Redis's time `redis_ms`, read just now.
    pub(crate) fn learn(&self, redis_ms: u64) {
        let local = unix_ms(SystemTime::now()) as i64;
        self.offset_ms.store(redis_ms as i64 - local, Ordering::Relaxed);
    }

    /// Redis's clock now, as far as this process can tell, in ms.
    pub(crate) fn now_ms(&self) -> u64 {
        if let Some((base_ms, at)) = self.tokio {
            let since = tokio::time::Instant::now().saturating_duration_since(at);
            return base_ms.saturating_add(u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
        }
        let local = unix_ms(SystemTime::now()) as i64;
        (local + self.offset_ms.load(Ordering::Relaxed)).max(0) as u64
    }

    /// The ticks a task due `when` may fall in, by this estimate: one for a time on Redis's
    /// clock, the ticks within [`GUESS_MS`] of the estimate for a delay (at most four).
    pub(crate) fn ticks(&self, when: When, tick_ms: u64) -> std::ops::RangeInclusive<u64> {
        let due_tick = |ms: u64| ms.div_ceil(tick_ms);
        match when {
            When::At(ms) => due_tick(ms)..=due_tick(ms),
            When::Delay(ms) => {
                let due = self.now_ms() + ms;
                let first = due_tick(due.saturating_sub(GUESS_MS));
                first..=due_tick(due + GUESS_MS).min(first + 3)
            }
        }
    }
}

/// How far this process's estimate of Redis's clock may be off, for the slots a delayed task may
/// go to: the time a call takes to reach Redis, and the drift since the estimate was made.
pub(crate) const GUESS_MS: u64 = 25;

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait for a slow link ends when the fourth slow round trip in a row is noted, and at
    /// once while the link is slow.
    #[tokio::test]
    async fn a_wait_for_a_slow_link_ends_when_it_turns_slow() {
        let clock = std::sync::Arc::new(RedisClock::new(None));
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move { clock.until_slow_link().await }
        });
        for _ in 0..3 {
            clock.note_round_trip(std::time::Duration::from_millis(400));
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "the wait ended before the link was slow");
        clock.note_round_trip(std::time::Duration::from_millis(400));
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.expect("the wait went on").unwrap();
        clock.until_slow_link().await;
    }

    /// Four slow round trips in a row make the link slow; one fast one among them starts the
    /// count again, and a slow link is fast again after two fast round trips.
    #[test]
    fn a_link_is_slow_after_four_slow_round_trips_and_fast_after_two_fast_ones() {
        let clock = RedisClock::new(None);
        let note = |ms: u64| clock.note_round_trip(std::time::Duration::from_millis(ms));
        for _ in 0..3 {
            note(SLOW_LINK_MS);
        }
        assert!(!clock.slow_link(), "slow after three");
        note(1);
        for _ in 0..3 {
            note(400);
        }
        assert!(!clock.slow_link(), "a fast round trip did not start the count again");
        note(400);
        assert!(clock.slow_link(), "not slow after four in a row");
        note(1);
        assert!(clock.slow_link(), "one fast round trip right after it turned slow made it fast");
        note(400);
        for _ in 0..10 {
            note(400);
        }
        note(1);
        assert!(clock.slow_link(), "one fast round trip made a slow link fast");
        note(1);
        assert!(!clock.slow_link(), "still slow after two fast round trips");
        assert_eq!(clock.round_trip_ms(), 1);
    }

    #[test]
    fn deadlines_round_up_to_whole_milliseconds() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(5)), 5);
        assert_eq!(ceil_ms(Duration::from_micros(5001)), 6);
        assert_eq!(ceil_ms(Duration::MAX), u64::MAX);
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_micros(1500)), 2);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0, "before the epoch is due at once");
    }

    #[test]
    fn ticks_are_whole_milliseconds() {
        assert_eq!(whole_ms(Duration::from_secs(1), "tick").unwrap(), 1000);
        assert!(whole_ms(Duration::ZERO, "tick").is_err());
        assert!(whole_ms(Duration::from_micros(1500), "tick").is_err());
    }
}
