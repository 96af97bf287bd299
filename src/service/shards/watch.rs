//! The watchers behind `Scheduled` futures: where a timer's outcome waits for its future, or the
//! future's waker waits for the outcome.
//!
//! A future that is never polled registers nothing here: its timer carries an `ARMED` bit in its
//! serial number instead (see `timer.rs`), and only an armed timer's end records an outcome. A
//! polled future parks its waker under its timer's serial number; the timer's end replaces the
//! waker by the outcome and hands the waker back, to be called once the shard's lock is released.
//! Dropping the future clears the bit or forgets the entry, so an outcome is only ever recorded
//! for a future that can still read it.

use std::collections::HashMap;
use std::task::Waker;

use crate::Error;

/// How a timer ended, as its `Scheduled` future reports it.
pub(crate) type Outcome = Result<(), Error>;

enum Watch {
    Waiting(Waker),
    Done(Outcome),
}

/// A shard's watchers, by timer serial number.
#[derive(Default)]
pub(super) struct Watchers(HashMap<u64, Watch>);

impl Watchers {
    /// Records how timer `serial` ended. Returns the waker of its future if it was waiting.
    pub fn record(&mut self, serial: u64, outcome: &Outcome) -> Option<Waker> {
        match self.0.insert(serial, Watch::Done(outcome.clone())) {
            // (The `drop_waker` mutant loses the parked waker.)
            Some(Watch::Waiting(waker)) if cfg!(not(tw_mutant = "drop_waker")) => Some(waker),
            _ => None,
        }
    }

    /// The outcome of timer `serial` if it has ended; otherwise parks `waker` until it does.
    pub fn poll(&mut self, serial: u64, waker: &Waker) -> Option<Outcome> {
        match self.0.remove(&serial) {
            Some(Watch::Done(outcome)) => Some(outcome),
            Some(Watch::Waiting(old)) if old.will_wake(waker) => {
                self.0.insert(serial, Watch::Waiting(old));
                None
            }
            _ => {
                self.0.insert(serial, Watch::Waiting(waker.clone()));
                None
            }
        }
    }

    /// Forgets timer `serial`'s parked waker or recorded outcome.
    pub fn forget(&mut self, serial: u64) {
        self.0.remove(&serial);
    }

    /// Gives back the room of watchers that have gone.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }

    /// How many wakers and outcomes are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The recorded outcome of timer `serial`, if it has one.
    #[cfg(test)]
    pub fn outcome(&self, serial: u64) -> Option<Outcome> {
        match self.0.get(&serial) {
            Some(Watch::Done(outcome)) => Some(outcome.clone()),
            _ => None,
        }
    }
}
