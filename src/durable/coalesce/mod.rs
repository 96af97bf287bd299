//! Coalescing the calls in flight: the concurrent `schedule`, `cancel` and `reschedule` calls of
//! one handle (and its clones) go to Redis as one script call per partition and kind while calls
//! of that kind are on the wire, the way a batching client sends (`queue`); and what one
//! script call of a batch sends and how its answers go back to each caller, which `schedule_many`
//! and `cancel_many` use for their own batches too (`many`).
//!
//! Each caller gets its own answer (its `DuplicateKey`, `false`, `NotFound`) and its own error; a
//! failure of the whole call (Redis away, say) is every caller's. A batch is retried as a unit
//! (the same script call, with the same request ids), so a batch is as safe to retry as one call.

mod many;
mod queue;

use std::sync::Arc;

use tokio::time::Instant;

pub(crate) use many::{cancel_many, schedule_many};
use queue::{Answers, Bounds, Coalescer, SendBatch};

use super::store::client::WheelClient;
use super::store::scripts::{self, Cancelled, Moved, NewTask, ScheduleAnswer};
use super::time::When;
use crate::Error;

/// How many tasks one `schedule.lua` call carries at most: keeps each call well under a
/// millisecond of Redis's time.
pub(crate) const SCHEDULE_BATCH: usize = 64;
/// How many bytes of keys and payloads one script call of a batch carries at most (a call's
/// size in Redis's input buffer, and the time Redis spends copying it); one item always goes,
/// so an item larger than this goes alone.
pub(crate) const BATCH_BYTES: usize = 1 << 20;
/// How many keys one `cancel.lua` call carries at most.
pub(crate) const CANCEL_BATCH: usize = 128;
/// How many tasks one `reschedule.lua` call moves at most.
const RESCHEDULE_BATCH: usize = 64;
/// How many calls of one kind are on the wire at once for one partition. Two: with one, Redis
/// waits while the client reads a batch's reply and sends the next; a second keeps it busy
/// meanwhile, and a third gains nothing more (BENCHMARKS.md, "Coalescing the calls in flight").
const IN_FLIGHT: usize = 2;

/// The calls in flight of one handle and its clones: per kind, one [`Coalescer`] per partition
/// (each partition is a script call of its own, on its own node in a cluster).
pub(crate) struct Calls {
    schedule: Vec<Coalescer<NewTask, ()>>,
    cancel: Vec<Coalescer<String, bool>>,
    reschedule: Vec<Coalescer<(String, When), ()>>,
}

impl Calls {
    /// No task runs until a call comes: each kind's sender is started by the call that finds
    /// none running.
    pub(crate) fn new(wheel: &Arc<WheelClient>) -> Self {
        Calls {
            schedule: per_partition(wheel, SCHEDULE_BATCH, BATCH_BYTES, |w, part, tasks, first| async move {
                schedule_batch(&w, part, None, &tasks, Some(first)).await
            }),
            cancel: per_partition(wheel, CANCEL_BATCH, BATCH_BYTES, |w, part, keys, first| async move {
                cancel_batch(&w, part, &keys, Some(first)).await
            }),
            reschedule: per_partition(wheel, RESCHEDULE_BATCH, BATCH_BYTES, |w, part, moves, first| async move {
                reschedule_batch(&w, part, &moves, first).await
            }),
        }
    }

    /// Schedules `task` on partition `part` (the key's, checked by the caller): `Ok`, or its
    /// `DuplicateKey`, or the error of its batch.
    pub(crate) async fn schedule(&self, part: usize, task: NewTask) -> Result<(), Error> {
        let bytes = task.key.len() + task.payload.len();
        self.schedule[part].call(task, bytes).await
    }

    /// Cancels the task `key` of partition `part`: whether this call cancelled it.
    pub(crate) async fn cancel(&self, part: usize, key: String) -> Result<bool, Error> {
        let bytes = key.len();
        self.cancel[part].call(key, bytes).await
    }

    /// Moves the task `key` of partition `part` to `when`: `Ok`, or `NotFound`.
    pub(crate) async fn reschedule(&self, part: usize, key: String, when: When) -> Result<(), Error> {
        let bytes = key.len();
        self.reschedule[part].call((key, when), bytes).await
    }
}

/// One coalescer per partition of `wheel`, each sending its batches with `send`.
fn per_partition<I, A, F, Fut>(wheel: &Arc<WheelClient>, items: usize, bytes: usize, send: F) -> Vec<Coalescer<I, A>>
where
    I: Send + 'static,
    A: Send + 'static,
    F: Fn(Arc<WheelClient>, usize, Vec<I>, Instant) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Answers<A>> + Send + 'static,
{
    // A call queued for its whole window (the link down) is not sent: see `SharedConn::by_deadline_of`.
    let bounds = Bounds { items, bytes, in_flight: IN_FLIGHT, window: Some(wheel.cfg.retry_window()) };
    (0..wheel.partitions.len())
        .map(|part| {
            let (wheel, send) = (wheel.clone(), send.clone());
            let send: SendBatch<I, A> = Box::new(move |batch, first| Box::pin(send(wheel.clone(), part, batch, first)));
            Coalescer::new(bounds, send)
        })
        .collect()
}

/// One `schedule.lua` call for `tasks` (all of partition `part`, under `request_id` or a new
/// one), then the wait for the replicas if it wrote anything. Each task's outcome: `Ok`, its
/// `DuplicateKey`, or the error of the call (every task's) or of the replication (every task
/// written). With `first` (when the batch's first call was made), the call gives up its
/// retries counting from then, not from now (see [`SharedConn::by_deadline_of`]).
///
/// [`SharedConn::by_deadline_of`]: super::store::shared_conn::SharedConn::by_deadline_of
pub(crate) async fn schedule_batch(
    wheel: &WheelClient,
    part: usize,
    request_id: Option<&str>,
    tasks: &[NewTask],
    first: Option<Instant>,
) -> Answers<()> {
    let keys = &wheel.partitions[part].keys;
    // One id per call, kept by its retries: a retry whose first attempt landed gets its answer.
    let request_id = request_id.map_or_else(|| wheel.ids.next(), str::to_string);
    let call = scripts::schedule(wheel, keys, &request_id, tasks, false, None);
    let outcomes = match wheel.conn.by_deadline_of(first, call).await {
        Ok(outcomes) => outcomes,
        Err(e) => return vec![Err(e); tasks.len()],
    };
    // Something was written (or was, by this call's first attempt): replicate it.
    let written = outcomes
        .iter()
        .filter(|&&o| matches!(o, ScheduleAnswer::Created | ScheduleAnswer::AlreadyByThisRequest))
        .count();
    if written > 0 {
        wheel.metrics.partition(part).scheduled(written as u64);
    }
    let replicated = if written > 0 { wheel.conn.replicate(&keys.meta()).await } else { Ok(()) };
    tasks
        .iter()
        .zip(outcomes)
        .map(|(task, outcome)| match outcome {
            ScheduleAnswer::Created | ScheduleAnswer::AlreadyByThisRequest => replicated.clone(),
            // (`Moved` and `Running` answer only a call with `reset`, which this is not.)
            ScheduleAnswer::Duplicate | ScheduleAnswer::Moved | ScheduleAnswer::Running => {
                Err(Error::DuplicateKey(task.key.clone()))
            }
        })
        .collect()
}

/// One `cancel.lua` call for `task_keys` (all of partition `part`), then the wait for the
/// replicas if it cancelled anything. Each key's answer: whether this call cancelled it, or the
/// error of the call (every key's) or of the replication (every key cancelled). `first`: as
/// [`schedule_batch`]'s.
pub(crate) async fn cancel_batch(
    wheel: &WheelClient,
    part: usize,
    task_keys: &[impl AsRef<str>],
    first: Option<Instant>,
) -> Answers<bool> {
    let keys = &wheel.partitions[part].keys;
    // One id per call, kept by its retries: a retry whose first attempt landed still answers
    // true (see `store/lua/cancel.lua`).
    let cancel_id = wheel.ids.next();
    let call = scripts::cancel(wheel, keys, &cancel_id, task_keys);
    let answers = match wheel.conn.by_deadline_of(first, call).await {
        Ok(answers) => answers,
        Err(e) => return vec![Err(e); task_keys.len()],
    };
    // A cancel lost in a failover would let the task fire after all.
    let cancelled = answers.iter().filter(|&&a| a == Cancelled::Yes).count();
    if cancelled > 0 {
        wheel.metrics.partition(part).cancelled(cancelled as u64);
    }
    let replicated = if cancelled > 0 { wheel.conn.replicate(&keys.meta()).await } else { Ok(()) };
    answers
        .into_iter()
        .map(|answer| match answer {
            Cancelled::Yes => replicated.clone().map(|()| true),
            Cancelled::NotPending | Cancelled::Running => Ok(false),
        })
        .collect()
}

/// One `reschedule.lua` call for `moves` (all of partition `part`), then the wait for the
/// replicas if it moved anything. Each move's outcome: `Ok`, `NotFound` (no task waiting or
/// ready under the key), or the error of the call (every move's) or of the replication (every
/// move made). `first`: when the batch's first call was made, as [`schedule_batch`]'s.
async fn reschedule_batch(wheel: &WheelClient, part: usize, moves: &[(String, When)], first: Instant) -> Answers<()> {
    let keys = &wheel.partitions[part].keys;
    let answers = match wheel.conn.by_deadline_of(Some(first), scripts::reschedule(wheel, keys, moves)).await {
        Ok(answers) => answers,
        Err(e) => return vec![Err(e); moves.len()],
    };
    let moved = answers.contains(&Moved::Yes);
    let replicated = if moved { wheel.conn.replicate(&keys.meta()).await } else { Ok(()) };
    answers
        .into_iter()
        .map(|answer| match answer {
            Moved::Yes => replicated.clone(),
            Moved::NotPending | Moved::Running => Err(Error::NotFound),
        })
        .collect()
}
