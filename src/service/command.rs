//! The messages handles send to the actor.

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::job::Job;
use super::key::Key;
use crate::wheel::EntryId;
use crate::Error;

/// A timer on its way into the wheel, and the value the wheel holds for it.
pub(crate) struct Timer {
    pub key: Key,
    /// `None` for a keyed sleep, which only wakes its waiter.
    pub job: Option<Box<dyn Job>>,
    /// Present for repeating timers only, so one-shot timers stay small.
    pub repeat: Option<Box<Repeating>>,
}

pub(crate) struct Repeating {
    pub period: std::time::Duration,
    /// When the run the timer is waiting for is due; the next one is due a period later.
    pub due: Instant,
    /// Runs left including the one waited for; `None` repeats until cancelled.
    pub runs_left: Option<u64>,
}

pub(crate) struct Add {
    pub timer: Timer,
    /// The entry id the handle drew from the pool and recorded in the key map.
    pub id: EntryId,
    /// The deadline tick.
    pub deadline: u64,
}

pub(crate) enum Command {
    Add(Add),
    /// A batch of `Add`s in one message.
    AddMany(Vec<Add>),
    /// Take a cancelled timer (whose key the handle already released) out of the wheel.
    Remove {
        id: EntryId,
    },
    /// A batch of `Remove`s in one message.
    RemoveMany(Vec<EntryId>),
    Reschedule {
        key: Key,
        due: Instant,
        deadline: u64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// Reply once every command sent before this one has been handled.
    Flush(oneshot::Sender<()>),
    Stop(oneshot::Sender<usize>),
}
