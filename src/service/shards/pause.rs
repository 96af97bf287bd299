//! Pausing a timer: it keeps the time left to its deadline and does not fire until resumed.
//!
//! A paused timer stays pending, in its entry and under its key, parked at the deadline tick
//! [`PARKED`] plus the ticks it had left: being paused *is* having a parked deadline, so there
//! is no flag to keep in step, and anything that moves the timer (a reschedule, a push-back)
//! sets a real deadline and so resumes it there. A cancel, a replace or a stop ends a paused
//! timer as any other.

use tokio::time::Instant;

use super::super::clock::Clock;
use super::super::timer::Run;
use super::shard::Shard;
use super::Shared;
use crate::Error;

/// The first parked deadline tick: no clock reaches it (2^63 ticks of 1 ns is 292 years; of the
/// default 1 ms, 292 million), so a timer parked at or past it never fires. A paused timer's
/// deadline is `PARKED` plus the ticks it had left.
pub(crate) const PARKED: u64 = 1 << 63;

impl Shared {
    /// Parks the pending timer holding `key`, keeping the ticks it had left at `now`. Returns
    /// the time left; a timer paused already keeps what it had.
    pub fn pause(&self, key: &[u8], now: Instant) -> Result<std::time::Duration, Error> {
        self.with_pending(key, |s, index, clock| {
            let (id, timer) = s.wheel.at(index);
            let deadline = s.wheel.deadline(id).expect("a pending timer is in its shard's wheel");
            if deadline >= PARKED {
                return Ok(span(clock, deadline - PARKED));
            }
            let ticks = deadline.saturating_sub(clock.tick_at(now)).min(PARKED - 1);
            // A repeating timer keeps its exact due instant for when it is resumed; `move_to`
            // sets it again then.
            let due = match &timer.run {
                Run::Repeat(repeat) => repeat.due,
                Run::Once(_) => now,
            };
            s.move_to(index, PARKED + ticks, due);
            Ok(span(clock, ticks))
        })
    }

    /// Puts the paused timer holding `key` back in the wheel with the ticks it had left, from
    /// `now`. Returns the time left; a timer that is not paused is left as it is, and its time
    /// left returned.
    pub fn resume(&self, key: &[u8], now: Instant) -> Result<std::time::Duration, Error> {
        self.with_pending(key, |s, index, clock| {
            let (id, _) = s.wheel.at(index);
            let deadline = s.wheel.deadline(id).expect("a pending timer is in its shard's wheel");
            let now_tick = clock.tick_at(now);
            if deadline < PARKED {
                return Ok(span(clock, deadline.saturating_sub(now_tick)));
            }
            let ticks = deadline - PARKED;
            let deadline = now_tick.saturating_add(ticks);
            let at = clock.instant(deadline).ok_or_else(|| {
                Error::invalid("the time left of the paused timer puts its deadline past what Instant can represent")
            })?;
            if s.move_to(index, deadline, at) {
                self.wake_if_urgent(s, now_tick, deadline);
            }
            Ok(span(clock, ticks))
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
