//! Replacing a pending timer in one step: the old timer ends as cancelled and the new one takes
//! its key under the same hold of the key's shard lock, so no call sees the key free in between
//! and no two timers ever hold it.

use super::super::clock::Due;
use super::super::timer::Timer;
use super::shard::SWEEP_AT;
use super::{Shared, Ticket};
use crate::wheel::MAX_ENTRIES;
use crate::Error;

impl Shared {
    /// Ends the pending timer holding `timer.key`, if there is one, as a cancel does (its
    /// watcher is told `Cancelled`, the stats count it), and claims the key for `timer`, due at
    /// `due`, under one lock. Returns whether the key was free (a timer created, not replaced)
    /// and where the new timer went. The replaced timer hands its room under `max_pending` to
    /// the new one, so a replace never fails for want of room; what it held is dropped, and its
    /// watcher woken, once the lock is released.
    pub fn replace(&self, timer: Timer, due: Due, watched: bool) -> Result<(bool, Ticket), Error> {
        let (shard, hash) = self.locate(timer.key.as_bytes());
        let mut swept = Vec::new();
        let mut s = self.lock(shard);
        if s.closed {
            drop(s);
            return Err(Error::Stopped);
        }
        let replaced = s.find(hash, timer.key.as_bytes(), None).map(|pos| {
            let index = s.keys.index_at(pos);
            let ended = s.cancel_at(pos, index);
            // The replaced timer's entry waits in the wheel to be swept: sweep now if the wheel
            // has no room beside it for the new one.
            if s.cancelled.len() >= SWEEP_AT || s.wheel.len() >= MAX_ENTRIES {
                s.sweep(&mut swept);
            }
            ended
        });
        let claimed = if replaced.is_some() {
            // The key was just released and the room is the replaced timer's.
            s.claim(hash, timer, due.deadline, watched)
        } else {
            self.claim(&mut s, hash, timer, due.deadline, watched)
        };
        if claimed.is_ok() {
            self.wake_if_urgent(&mut s, due.set_at, due.deadline);
        }
        drop(s);
        let created = replaced.is_none();
        if let Some((waker, held)) = replaced {
            if claimed.is_err() {
                // Only a stopped shard or a full wheel refuses, and neither can be the case
                // here; were it, the room goes back as for any cancel.
                self.release(1);
            }
            if let Some(waker) = waker {
                waker.wake();
            }
            drop(held);
        }
        drop(swept);
        // A refused timer is dropped here, with no lock held.
        let (serial, entry) = claimed.map_err(|(error, _timer)| error)?;
        Ok((created, Ticket { shard: shard as u32, entry, serial }))
    }
}
