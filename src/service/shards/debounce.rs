//! Debouncing a key in one step under its shard's lock: a new timer opens a burst, a call on a
//! pending one moves it and swaps its job, and the burst's cap stays with the job
//! ([`Debounced`]), so a debounced timer costs no more room than any other.

use super::super::clock::Due;
use super::super::job::{Debounced, OnceJob};
use super::super::key::Key;
use super::super::timer::{Run, Timer};
use super::Shared;
use crate::Error;

impl Shared {
    /// Debounces `key` with `job`: a pending one-shot timer under it moves to the earlier of
    /// `quiet` and its burst's cap and takes `job` in place of its own; without one, a new timer
    /// due at the earlier of `quiet` and `cap_if_new` opens a burst with that cap (a pending
    /// timer that no debounce made opens one too, keeping its place in the wheel). Returns
    /// whether a burst was opened. The replaced job is dropped once the lock is released.
    pub fn debounce(&self, key: &Key, job: Box<dyn OnceJob>, quiet: Due, cap_if_new: u64) -> Result<bool, Error> {
        let (shard, hash) = self.locate(key.as_bytes());
        let mut s = self.lock(shard);
        if s.closed {
            return Err(Error::Stopped);
        }
        let Some(pos) = s.find(hash, key.as_bytes(), None) else {
            let deadline = quiet.deadline.min(cap_if_new);
            let timer = Timer::new(key.clone(), Run::Once(Box::new(Debounced { cap: cap_if_new, job })));
            return match self.claim(&mut s, hash, timer, deadline, false) {
                Ok(_) => {
                    self.wake_if_urgent(&mut s, quiet.set_at, deadline);
                    Ok(true)
                }
                Err((error, timer)) => {
                    drop(s);
                    drop(timer);
                    Err(error)
                }
            };
        };
        let index = s.keys.index_at(pos);
        let Run::Once(pending) = &mut s.wheel.at_mut(index).run else {
            return Err(Error::invalid(format!(
                "{:?} holds a repeating timer, which debounce does not move: cancel it first",
                key.as_str()
            )));
        };
        let (cap, opened) = match pending.burst_cap() {
            Some(cap) => (cap, false),
            None => (cap_if_new, true),
        };
        let deadline = quiet.deadline.min(cap);
        let replaced = std::mem::replace(pending, Box::new(Debounced { cap, job }));
        if s.move_to(index, deadline, tokio::time::Instant::now()) {
            self.wake_if_urgent(&mut s, quiet.set_at, deadline);
        }
        drop(s);
        drop(replaced);
        Ok(opened)
    }
}
