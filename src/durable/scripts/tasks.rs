//! The scripts a [`DurableScheduler`](crate::durable::DurableScheduler) calls for one task or a
//! batch: `schedule.lua`, `cancel.lua`, `reschedule.lua`, `requeue_dead.lua`.

use super::{invoke, SCRIPTS};
use crate::durable::conn::Window;
use crate::durable::time::When;
use crate::durable::wheel::Wheel;
use crate::durable::WheelKeys;
use crate::Error;

/// One task on its way to `schedule.lua`.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub(crate) key: String,
    pub(crate) when: When,
    pub(crate) payload: Vec<u8>,
    /// Makes a retried call recognise its own first attempt.
    pub(crate) request_id: String,
}

/// What `schedule.lua` did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduled {
    /// Scheduled now.
    Created,
    /// Scheduled by an earlier attempt of this request (a retry whose first attempt landed).
    AlreadyByThisRequest,
    /// The key is pending under another request: `DuplicateKey`.
    Duplicate,
}

/// Schedules `tasks` in one call.
pub(crate) async fn schedule(wheel: &Wheel, keys: &WheelKeys, tasks: &[NewTask]) -> Result<Vec<Scheduled>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.schedule);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots);
    for task in tasks {
        let (mode, ms) = task.when.args();
        inv.arg(&task.key).arg(task.payload.as_slice()).arg(mode).arg(ms).arg(&task.request_id);
    }
    let reply: Vec<i64> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            1 => Scheduled::Created,
            2 => Scheduled::AlreadyByThisRequest,
            _ => Scheduled::Duplicate,
        })
        .collect())
}

/// What `cancel.lua` found under one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancelled {
    /// It was waiting or ready (or its lease had run out): cancelled by this call.
    Yes,
    /// No task under the key.
    NotPending,
    /// A worker holds it under a live lease: left alone.
    Running,
}

/// Cancels the tasks under `task_keys` in one call, as cancel `cancel_id` (the same for every retry
/// of one call).
pub(crate) async fn cancel(
    wheel: &Wheel,
    keys: &WheelKeys,
    cancel_id: &str,
    task_keys: &[impl AsRef<str>],
) -> Result<Vec<Cancelled>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.cancel);
    inv.arg(wheel.cfg.slots).arg(wheel.cfg.done_ttl_ms).arg(cancel_id);
    for key in task_keys {
        inv.arg(key.as_ref());
    }
    let reply: Vec<i64> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            1 => Cancelled::Yes,
            2 => Cancelled::Running,
            _ => Cancelled::NotPending,
        })
        .collect())
}

/// What `reschedule.lua` did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moved {
    Yes,
    NotPending,
    /// A worker holds it under a live lease: left alone.
    Running,
}

/// Moves each task of `moves` (key, new time) in one call, in order.
pub(crate) async fn reschedule(
    wheel: &Wheel,
    keys: &WheelKeys,
    moves: &[(impl AsRef<str>, When)],
) -> Result<Vec<Moved>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.reschedule);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots);
    for (key, when) in moves {
        let (mode, ms) = when.args();
        inv.arg(key.as_ref()).arg(mode).arg(ms);
    }
    let reply: Vec<i64> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            1 => Moved::Yes,
            2 => Moved::Running,
            _ => Moved::NotPending,
        })
        .collect())
}

/// What `requeue_dead.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeued {
    Yes,
    NotDead,
    /// A new task with this key is pending: the dead letter stays.
    KeyPending,
}

/// Puts the dead letter `key` back, due at once, under request `request_id`.
pub(crate) async fn requeue_dead(
    wheel: &Wheel,
    keys: &WheelKeys,
    key: &str,
    request_id: &str,
) -> Result<Requeued, Error> {
    let mut inv = invoke(keys, &SCRIPTS.requeue_dead);
    inv.arg(key).arg(request_id).arg(wheel.cfg.tick_ms);
    Ok(match wheel.conn.call::<i64>(&inv, Window::Default).await? {
        1 => Requeued::Yes,
        -1 => Requeued::KeyPending,
        _ => Requeued::NotDead,
    })
}
