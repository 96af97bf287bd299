//! The scripts a [`DurableScheduler`](crate::durable::DurableScheduler) calls for one task or a
//! batch: `schedule.lua`, `cancel.lua`, `reschedule.lua`, `requeue_dead.lua`.

use super::{declare_slots, invoke, packed, SCRIPTS};
use crate::durable::series::{missed_digit, Stored};
use crate::durable::store::client::{SlotGuess, WheelClient};
use crate::durable::store::formats::Retry;
use crate::durable::store::shared_conn::Window;
use crate::durable::time::When;
use crate::durable::{TaskOptions, WheelKeys};
use crate::origin::{self, Origin};
use crate::Error;

/// One task on its way to `schedule.lua`.
#[derive(Debug, Clone)]
pub(crate) struct NewTask {
    pub(crate) key: String,
    pub(crate) when: When,
    pub(crate) payload: Vec<u8>,
    /// The trace context of the span that scheduled it (of no size without the
    /// `opentelemetry` feature).
    pub(crate) origin: Origin,
    /// Its own retry settings, checked ([`TaskOptions::check`]); empty for the node's.
    pub(crate) options: TaskOptions,
}

impl NewTask {
    /// The task `key`, due `when`, with `payload`, scheduled from the current span, with the
    /// node's retry settings.
    pub(crate) fn new(key: String, when: When, payload: Vec<u8>) -> Self {
        NewTask { key, when, payload, origin: Origin::current(), options: TaskOptions::new() }
    }

    /// This task with its own retry settings `options` (checked).
    pub(crate) fn with_options(self, options: TaskOptions) -> Self {
        NewTask { options, ..self }
    }
}

/// The script argument that carries the retry settings of a call's tasks (see `record.lua`): one
/// line each (an empty one for a task with the node's), or "" when no task has its own, so a call
/// of tasks without them sends one empty argument.
fn joined_options(tasks: &[NewTask]) -> String {
    if tasks.iter().all(|t| t.options.is_empty()) {
        return String::new();
    }
    tasks.iter().map(|t| Retry::text_of(&t.options)).collect::<Vec<_>>().join("\n")
}

/// The two script arguments that carry the times of a call's tasks (see `due_times.lua`): their
/// milliseconds, [`packed`], and what each is, `d` (a delay) or `a` (a time), one letter for all
/// of them when they agree, else one per task.
fn pack_times(whens: impl ExactSizeIterator<Item = When> + Clone) -> (Vec<u8>, String) {
    let letter = |when: When| match when {
        When::Delay(_) => 'd',
        When::At(_) => 'a',
    };
    let mut modes: String = whens.clone().map(letter).collect();
    if modes.bytes().all(|m| modes.as_bytes().first() == Some(&m)) {
        modes.truncate(1);
    }
    let times = packed(whens.map(|when| match when {
        When::Delay(ms) | When::At(ms) => ms,
    }));
    (times, modes)
}

/// What `schedule.lua` did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScheduleAnswer {
    /// Scheduled now.
    Created,
    /// Scheduled by an earlier attempt of this call (a retry whose first attempt landed).
    AlreadyByThisRequest,
    /// The key is pending under another request: `DuplicateKey`.
    Duplicate,
    /// (`reset`) The pending task was moved to the new due time, keeping its payload.
    Moved,
    /// (`reset`) The task is running: left alone.
    Running,
}

/// Schedules `tasks` in one call, as request `request_id` (the same for every retry of it: a
/// retry whose first attempt landed gets that attempt's answer). With `reset`, a task whose key
/// is pending is moved to its new due time instead (keeping its payload); with `repeat`, every
/// task is a recurring one (its first run is each task's `when`).
pub(crate) async fn schedule(
    wheel: &WheelClient,
    keys: &WheelKeys,
    request_id: &str,
    tasks: &[NewTask],
    reset: bool,
    repeat: Option<&Stored>,
) -> Result<Vec<ScheduleAnswer>, Error> {
    let guess = wheel.slot_guess(tasks.iter().map(|t| t.when));
    schedule_in(wheel, keys, request_id, tasks, reset, repeat, &guess).await
}

/// [`schedule`] into the slots of `guess` (a test gives a wrong one).
pub(crate) async fn schedule_in(
    wheel: &WheelClient,
    keys: &WheelKeys,
    request_id: &str,
    tasks: &[NewTask],
    reset: bool,
    repeat: Option<&Stored>,
    guess: &SlotGuess,
) -> Result<Vec<ScheduleAnswer>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.schedule);
    inv.key(keys.request(request_id));
    let slots = declare_slots(&mut inv, keys, &guess.indices);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots).arg(wheel.cfg.request_ttl_ms).arg(if reset { "1" } else { "0" });
    match repeat {
        None => inv.arg(0).arg(0).arg(0),
        Some(r) => inv.arg(r.every_ms).arg(runs_arg(r.runs)).arg(missed_digit(r.missed)),
    };
    let (times, modes) = pack_times(tasks.iter().map(|t| t.when));
    inv.arg(slots).arg(times).arg(modes).arg(if guess.own_slots { "1" } else { "0" });
    inv.arg(repeat.map_or("", |r| r.spec.as_str()));
    inv.arg(origin::joined(tasks.iter().map(|t| &t.origin)));
    inv.arg(joined_options(tasks));
    for task in tasks {
        inv.arg(&task.key).arg(task.payload.as_slice());
    }
    let reply: Vec<u8> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            b'1' => ScheduleAnswer::Created,
            b'2' => ScheduleAnswer::AlreadyByThisRequest,
            b'3' => ScheduleAnswer::Running,
            b'4' => ScheduleAnswer::Moved,
            _ => ScheduleAnswer::Duplicate,
        })
        .collect())
}

/// A series' runs as the scripts take them: -1 for no limit.
fn runs_arg(runs: Option<u64>) -> i64 {
    runs.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// What `upsert.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upserted {
    /// No task was pending under the key: made.
    Created,
    /// A waiting or ready task was replaced.
    Replaced,
    /// The same series (cadence, bounds, missed-run policy, retry settings, payload) was
    /// pending: nothing changed, its next run is kept.
    Kept,
    /// A run is in flight (held by a worker, or waiting to be delivered again): the new series
    /// is queued behind it, to take its place when it ends.
    Queued,
}

/// Makes the series `series` (its first run at `series.first_due_ms`) the one task under
/// `task.key`, with its payload, origin and retry settings (checked), whatever was pending there,
/// as request `request_id`.
pub(crate) async fn upsert(
    wheel: &WheelClient,
    keys: &WheelKeys,
    request_id: &str,
    task: &NewTask,
    series: &Stored,
) -> Result<Upserted, Error> {
    let mut inv = invoke(keys, &SCRIPTS.upsert);
    inv.key(keys.request(request_id));
    let guess = wheel.slot_guess(std::iter::once(When::At(series.first_due_ms)));
    let slots = declare_slots(&mut inv, keys, &guess.indices);
    inv.arg(wheel.cfg.tick_ms)
        .arg(wheel.cfg.slots)
        .arg(wheel.cfg.request_ttl_ms)
        .arg(slots)
        .arg(&task.key)
        .arg(series.first_due_ms)
        .arg(series.every_ms)
        .arg(runs_arg(series.runs))
        .arg(missed_digit(series.missed))
        .arg(series.spec.as_str())
        .arg(task.payload.as_slice())
        .arg(task.origin.to_text())
        .arg(Retry::text_of(&task.options));
    let reply: Vec<u8> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(match reply.first() {
        Some(b'1') => Upserted::Created,
        Some(b'2') => Upserted::Kept,
        Some(b'3') => Upserted::Queued,
        _ => Upserted::Replaced,
    })
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
    wheel: &WheelClient,
    keys: &WheelKeys,
    cancel_id: &str,
    task_keys: &[impl AsRef<str>],
) -> Result<Vec<Cancelled>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.cancel);
    inv.key(keys.request(cancel_id)).arg(wheel.cfg.request_ttl_ms);
    for key in task_keys {
        inv.arg(key.as_ref());
    }
    let reply: Vec<u8> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            b'1' => Cancelled::Yes,
            b'2' => Cancelled::Running,
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

/// Moves each task `(key, when)` of `moves` in one call; a key given twice ends at its last time.
pub(crate) async fn reschedule(
    wheel: &WheelClient,
    keys: &WheelKeys,
    moves: &[(impl AsRef<str>, When)],
) -> Result<Vec<Moved>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.reschedule);
    let slots = declare_slots(&mut inv, keys, &wheel.slot_indices(moves.iter().map(|(_, when)| *when)));
    let (times, modes) = pack_times(moves.iter().map(|(_, when)| *when));
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots).arg(slots).arg(times).arg(modes);
    for (key, _) in moves {
        inv.arg(key.as_ref());
    }
    let reply: Vec<u8> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(reply
        .into_iter()
        .map(|r| match r {
            b'1' => Moved::Yes,
            b'2' => Moved::Running,
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
    wheel: &WheelClient,
    keys: &WheelKeys,
    key: &str,
    request_id: &str,
) -> Result<Requeued, Error> {
    let mut inv = invoke(keys, &SCRIPTS.requeue_dead);
    inv.key(keys.request(request_id)).arg(key).arg(wheel.cfg.request_ttl_ms);
    Ok(match wheel.conn.call::<i64>(&inv, Window::Default).await? {
        1 => Requeued::Yes,
        -1 => Requeued::KeyPending,
        _ => Requeued::NotDead,
    })
}

/// Debounces `task` (`debounce.lua`): due `quiet_ms` after the call, at most `max_wait_ms` after
/// its burst's first call, with its payload. True when the call opened a new burst.
pub(crate) async fn debounce(
    wheel: &WheelClient,
    keys: &WheelKeys,
    task: &NewTask,
    quiet_ms: u64,
    max_wait_ms: u64,
) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.debounce);
    // The run is due within [quiet, max_wait] of now: declare the slots of both ends' ticks and
    // those between while few (a miss waits in the far tier, never early or late).
    let guess = wheel.slot_guess([When::Delay(quiet_ms), When::Delay(max_wait_ms)]);
    let slots = declare_slots(&mut inv, keys, &guess.indices);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots).arg(slots).arg(quiet_ms).arg(max_wait_ms);
    inv.arg(&task.key).arg(task.payload.as_slice());
    inv.arg(if task.options.is_empty() { String::new() } else { Retry::text_of(&task.options) });
    inv.arg(origin::joined(std::iter::once(&task.origin)));
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}
