//! Pausing a timer: it keeps the time left to its deadline and does not fire until every pause
//! is resumed.
//!
//! A paused timer stays pending, in its entry and under its key, parked at a deadline tick past
//! [`PARKED`] that holds the ticks it had left and how many pauses it holds (see [`Parked`]):
//! being paused *is* having a parked deadline, so there is no flag to keep in step.
//!
//! # Pauses stack
//! Each pause counts one and each resume undoes one, so overlapping pauses compose (two stuns
//! on one buff: the buff runs again when the later one ends, not the earlier). Only the resume
//! of the last pause puts the timer back in the wheel, with the ticks it had left, from then.
//! A resume of a timer that is not paused changes nothing. Anything that moves the timer (a
//! reschedule, a push-back) sets a real deadline, which clears every pause and resumes it
//! there. A cancel, a replace or a stop ends a paused timer as any other.

use tokio::time::Instant;

use super::super::clock::{Clock, DEADLINE_BITS, MAX_DEADLINE};
use super::super::timer::Run;
use super::shard::Shard;
use super::Shared;
use crate::Error;

/// The first parked deadline tick: no clock reaches it, since every real deadline is clamped
/// to at most [`MAX_DEADLINE`] (see `clock.rs`), far below. A timer parked at or past it never
/// fires.
pub(crate) const PARKED: u64 = 1 << 63;

/// The most pauses a timer holds at once: the bits between a deadline's and [`PARKED`]'s count
/// the pauses past the first.
const MAX_PAUSES: u64 = 1 << (63 - DEADLINE_BITS);

/// A paused timer's parked deadline, read: `PARKED | (pauses - 1) << DEADLINE_BITS | ticks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parked {
    /// The pauses the timer holds, `1..=MAX_PAUSES`.
    pauses: u64,
    /// The ticks it had left when it was first paused, at most [`MAX_DEADLINE`].
    ticks: u64,
}

impl Parked {
    /// The parked deadline `deadline` holds, or `None` if it is a real one (the timer runs).
    fn read(deadline: u64) -> Option<Self> {
        (deadline >= PARKED)
            .then(|| Parked { pauses: ((deadline - PARKED) >> DEADLINE_BITS) + 1, ticks: deadline & MAX_DEADLINE })
    }

    /// The parked deadline tick.
    fn deadline(self) -> u64 {
        debug_assert!(
            (1..=MAX_PAUSES).contains(&self.pauses) && self.ticks <= MAX_DEADLINE,
            "{} pauses (at most {MAX_PAUSES}) and {} ticks left (at most {MAX_DEADLINE})",
            self.pauses,
            self.ticks
        );
        PARKED | (self.pauses - 1) << DEADLINE_BITS | self.ticks
    }
}

impl Shared {
    /// Adds a pause to the pending timer holding `key`: one not paused is parked with the ticks
    /// it had left at `now`, one paused already counts one pause more. Returns the time left.
    pub fn pause(&self, key: &[u8], now: Instant) -> Result<std::time::Duration, Error> {
        self.with_pending(key, |s, index, clock| {
            let (id, timer) = s.wheel.at(index);
            let deadline = s.wheel.deadline(id).expect("a pending timer is in its shard's wheel");
            if let Some(parked) = Parked::read(deadline) {
                if parked.pauses == MAX_PAUSES {
                    return Err(Error::invalid(format!(
                        "the timer is paused {MAX_PAUSES} times already, the most it can be: resume it before pausing \
                         it again"
                    )));
                }
                // A later deadline: one write to the entry, which stays where it is.
                s.wheel.reschedule(id, Parked { pauses: parked.pauses + 1, ..parked }.deadline());
                return Ok(span(clock, parked.ticks));
            }
            let ticks = deadline.saturating_sub(clock.tick_at(now));
            debug_assert!(ticks <= MAX_DEADLINE, "a real deadline {deadline} is at most {MAX_DEADLINE}");
            // A repeating timer keeps its exact due instant for when it is resumed; `move_to`
            // sets it again then.
            let due = match &timer.run {
                Run::Repeat(repeat) => repeat.due,
                Run::Once(_) => now,
            };
            s.move_to(index, Parked { pauses: 1, ticks }.deadline(), due);
            Ok(span(clock, ticks))
        })
    }

    /// Takes a pause off the timer holding `key`: the last one puts it back in the wheel with
    /// the ticks it had left, from `now`. Returns the time left (the time it will have, while
    /// pauses remain); a timer that is not paused is left as it is, and its time left returned.
    pub fn resume(&self, key: &[u8], now: Instant) -> Result<std::time::Duration, Error> {
        self.with_pending(key, |s, index, clock| {
            let (id, _) = s.wheel.at(index);
            let deadline = s.wheel.deadline(id).expect("a pending timer is in its shard's wheel");
            let now_tick = clock.tick_at(now);
            let Some(parked) = Parked::read(deadline) else {
                return Ok(span(clock, deadline.saturating_sub(now_tick)));
            };
            if parked.pauses > 1 {
                s.wheel.reschedule(id, Parked { pauses: parked.pauses - 1, ..parked }.deadline());
                return Ok(span(clock, parked.ticks));
            }
            let deadline = now_tick.saturating_add(parked.ticks).min(clock.last());
            let at = clock.instant(deadline).expect("a deadline up to the clock's last tick has an instant");
            if s.move_to(index, deadline, at) {
                self.wake_if_urgent(s, now_tick, deadline);
            }
            Ok(span(clock, parked.ticks))
        })
    }

    /// Runs `f` on the pending timer holding `key` (its slab slot), under its shard's lock.
    fn with_pending<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(&mut Shard, u32, &Clock) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (shard, hash) = self.locate(key);
        let mut s = self.lock(shard);
        if s.closed {
            return Err(Error::Stopped);
        }
        let pos = s.find(hash, key, None).ok_or(Error::NotFound)?;
        let index = s.keys.index_at(pos);
        f(&mut s, index, &self.clock)
    }
}

/// The time `ticks` ticks of `clock` take.
fn span(clock: &Clock, ticks: u64) -> std::time::Duration {
    match (clock.instant(0), clock.instant(ticks)) {
        (Some(origin), Some(end)) => end - origin,
        _ => std::time::Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every count of pauses and every time left, at their edges, is read back as written, and
    /// no real deadline reads as parked.
    #[test]
    fn a_parked_deadline_reads_back_as_written() {
        for pauses in [1, 2, 3, 255, 256, MAX_PAUSES - 1, MAX_PAUSES] {
            for ticks in [0, 1, 2, 1 << 32, MAX_DEADLINE - 1, MAX_DEADLINE] {
                let parked = Parked { pauses, ticks };
                let deadline = parked.deadline();
                assert!(deadline >= PARKED, "{parked:?} is parked at {deadline}");
                assert_eq!(Parked::read(deadline), Some(parked), "{deadline:#x}");
            }
        }
        assert_eq!(Parked { pauses: MAX_PAUSES, ticks: MAX_DEADLINE }.deadline(), u64::MAX, "every bit is used");
        for deadline in [0, 1, MAX_DEADLINE, PARKED - 1] {
            assert_eq!(Parked::read(deadline), None, "{deadline:#x} is a real deadline");
        }
    }

    /// One pause more or less moves a parked deadline by one step of the count, never into
    /// the ticks or out of the parked range.
    #[test]
    fn a_pause_more_is_a_later_parked_deadline() {
        let once = Parked { pauses: 1, ticks: MAX_DEADLINE }.deadline();
        let twice = Parked { pauses: 2, ticks: MAX_DEADLINE }.deadline();
        assert_eq!(twice - once, 1 << DEADLINE_BITS);
        assert_eq!(once, PARKED + MAX_DEADLINE);
    }

    /// A timer holds up to `MAX_PAUSES` pauses (the number `Scheduler::pause`'s docs give); one
    /// more is refused and changes nothing. It stays paused until the last is resumed, then
    /// runs with the ticks it had left.
    #[test]
    fn a_timer_holds_at_most_max_pauses() {
        use crate::service::{clock::Due, config::WheelKind, job::Wake, key::Key, timer::Timer};
        assert_eq!(MAX_PAUSES, 32_768);
        let clock = Clock::new(std::time::Duration::from_millis(1)).unwrap();
        let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0, clock, "test").unwrap();
        let timer = Timer::new(Key::from("buff"), Run::Once(Box::new(Wake)));
        shared.add(timer, Due { deadline: 1_000, set_at: 0 }, false).unwrap();
        let (now, left) = (clock.instant(0).unwrap(), std::time::Duration::from_secs(1));
        for _ in 0..MAX_PAUSES {
            assert_eq!(shared.pause(b"buff", now), Ok(left));
        }
        assert!(matches!(shared.pause(b"buff", now), Err(Error::Invalid(why)) if why.contains("32768")));
        for _ in 1..MAX_PAUSES {
            assert_eq!(shared.resume(b"buff", now), Ok(left));
            assert_eq!(shared.deadline(b"buff"), None, "still paused");
        }
        let later = clock.instant(500).unwrap();
        assert_eq!(shared.resume(b"buff", later), Ok(left));
        assert_eq!(shared.deadline(b"buff"), Some((1_500, None)), "the ticks it had left, from the last resume");
        assert_eq!(shared.resume(b"buff", later), Ok(left), "not paused: nothing changes");
    }
}
