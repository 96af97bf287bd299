//! The batch calls of a handle, `schedule_many` and `cancel_many`: their items split by
//! partition into batches of the coalescers' sizes, sent a few at a time over the one
//! connection (so round trips overlap) with the same script calls that the coalescers send, and
//! their answers put back in the callers' order.

use std::sync::Arc;

use tokio::task::{JoinError, JoinSet};

use super::{cancel_batch, schedule_batch, BATCH_BYTES, CANCEL_BATCH, SCHEDULE_BATCH};
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::NewTask;
use crate::error::RedisFailure;
use crate::Error;

/// How many `schedule_many` script calls are in flight at once. Two, as for coalesced calls: a
/// worker's claims and acks and the leader's ticks share the connection and wait behind every
/// call already on it, so a deeper pipeline makes tasks late while a big batch goes in (eight
/// made D3's p99 235-315 ms, two 109 ms; BENCHMARKS.md) and gains about 5% of its throughput.
const SCHEDULE_PIPELINE: usize = 2;

/// Schedules the checked items of a `schedule_many` (each a task with its partition, or the
/// item's own error), answering one result per item in order.
pub(crate) async fn schedule_many(
    wheel: &Arc<WheelClient>,
    checked: Vec<Result<(usize, NewTask), Error>>,
) -> Result<Vec<Result<(), Error>>, Error> {
    let mut results: Vec<Result<(), Error>> = Vec::with_capacity(checked.len());
    // One batch a partition, each sent as it fills (a partition's calls go to its own node).
    let mut batches: Vec<(Vec<(usize, NewTask)>, usize)> = wheel.partitions.iter().map(|_| (Vec::new(), 0)).collect();
    // Batches go out a few at a time over the one connection, so round trips overlap.
    let mut in_flight = JoinSet::new();
    for item in checked {
        match item {
            Err(e) => results.push(Err(e)),
            Ok((part, task)) => {
                let (batch, bytes) = &mut batches[part];
                if batch.len() == SCHEDULE_BATCH || (*bytes + task.payload.len() > BATCH_BYTES && !batch.is_empty()) {
                    if in_flight.len() >= SCHEDULE_PIPELINE {
                        settle(in_flight.join_next().await, &mut results)?;
                    }
                    in_flight.spawn(send_batch(wheel.clone(), part, std::mem::take(batch)));
                    *bytes = 0;
                }
                *bytes += task.payload.len();
                batch.push((results.len(), task));
                results.push(Ok(()));
            }
        }
    }
    for (part, (batch, _)) in batches.into_iter().enumerate() {
        if !batch.is_empty() {
            in_flight.spawn(send_batch(wheel.clone(), part, batch));
        }
    }
    while let Some(done) = in_flight.join_next().await {
        settle(Some(done), &mut results)?;
    }
    Ok(results)
}

/// Cancels `keys`, a batch of at most [`CANCEL_BATCH`] per partition at a time, answering
/// whether each was cancelled, in order.
pub(crate) async fn cancel_many(wheel: &WheelClient, keys: Vec<String>) -> Result<Vec<bool>, Error> {
    let mut out = vec![false; keys.len()];
    // Each partition's keys, with their places in the answer.
    let mut by_partition: Vec<Vec<usize>> = vec![Vec::new(); wheel.partitions.len()];
    for (i, key) in keys.iter().enumerate() {
        by_partition[wheel.partition_of(key).index].push(i);
    }
    for (part, places) in by_partition.into_iter().enumerate() {
        for chunk in places.chunks(CANCEL_BATCH) {
            let chunk_keys: Vec<&str> = chunk.iter().map(|&i| keys[i].as_str()).collect();
            for (&i, answer) in chunk.iter().zip(cancel_batch(wheel, part, &chunk_keys, None).await) {
                out[i] = answer?;
            }
        }
    }
    Ok(out)
}

/// The index (in the caller's results) and key of each task of a batch that found its key
/// pending.
type Duplicates = Vec<(usize, String)>;

/// Sends one `schedule.lua` call for `batch`, all of partition `part` (each task with its index
/// in the caller's results); a Redis failure is the whole batch's.
async fn send_batch(wheel: Arc<WheelClient>, part: usize, batch: Vec<(usize, NewTask)>) -> Result<Duplicates, Error> {
    let (indexes, tasks): (Vec<usize>, Vec<NewTask>) = batch.into_iter().unzip();
    let outcomes = schedule_batch(&wheel, part, None, &tasks, None).await;
    let mut duplicates = Vec::new();
    for ((index, task), outcome) in indexes.into_iter().zip(tasks).zip(outcomes) {
        match outcome {
            Ok(()) => {}
            Err(Error::DuplicateKey(_)) => duplicates.push((index, task.key)),
            Err(e) => return Err(e),
        }
    }
    Ok(duplicates)
}

/// Writes one finished batch's duplicates into `results`.
fn settle(
    done: Option<Result<Result<Duplicates, Error>, JoinError>>,
    results: &mut [Result<(), Error>],
) -> Result<(), Error> {
    let Some(done) = done else { return Ok(()) };
    let duplicates = done.map_err(|e| Error::Redis(RedisFailure::new("internal", e.to_string(), false)))??;
    for (index, key) in duplicates {
        results[index] = Err(Error::DuplicateKey(key));
    }
    Ok(())
}
