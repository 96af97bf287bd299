//! The messages handles send to the actor: `Op`s through the key map's shard inboxes, the rest
//! as `Command`s over the channel.

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

/// What a handle asks of the wheel when it claims or releases a key. Queued in the key's shard
/// under the lock that changes the key map, so the actor sees a shard's `Op`s in the order of
/// the map changes they go with.
pub(crate) enum Op {
    Add(Add),
    /// Take a cancelled timer (whose key the handle already released) out of the wheel.
    Remove(EntryId),
    /// Move a pending timer to a new deadline (a reschedule), and say whether it was still there.
    Move {
        id: EntryId,
        due: Instant,
        deadline: u64,
        reply: oneshot::Sender<Result<(), Error>>,
    },
}

/// Requests that go over the channel. The actor takes in every queued `Op` before it handles
/// one, so a `Command` never overtakes an `Op` sent before it.
pub(crate) enum Command {
    /// Reply once every command sent before this one has been handled.
    Flush(oneshot::Sender<()>),
    Stop(oneshot::Sender<usize>),
}
