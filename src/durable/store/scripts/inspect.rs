//! The scripts that read the wheel, and the dead letters' upkeep: `stats.lua`, `get.lua`,
//! `dead_letters.lua`, `delete_dead.lua`, `due_next.lua`, `due_counts.lua`, `list.lua`, and
//! `finished.lua`, which reads the history of finished runs.

use super::{invoke, number, text, SCRIPTS};
use crate::durable::series::read_series;
use crate::durable::series::Series;
use crate::durable::store::client::WheelClient;
use crate::durable::store::formats::{Ended, HistoryRun, Retry};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::from_unix_ms;
use crate::durable::WheelKeys;
use crate::durable::{DeadTask, DurableStats, FinishedRun, Outcome, TaskInfo, TaskOptions, TaskState};
use crate::Error;

/// The wheel's gauges and counters, read at one moment.
pub(crate) async fn stats(wheel: &WheelClient, keys: &WheelKeys) -> Result<DurableStats, Error> {
    let mut inv = invoke(keys, &SCRIPTS.stats);
    inv.arg(wheel.cfg.tick_ms);
    let r: Vec<i64> = wheel.conn.call(&inv, Window::Default).await?;
    let at = |i: usize| r.get(i).copied().unwrap_or(0).max(0) as u64;
    let (waiting, ready, leased) = (at(0) as usize, at(1) as usize, at(2) as usize);
    Ok(DurableStats {
        pending: waiting + ready + leased,
        waiting,
        ready,
        in_flight: leased,
        dead: at(3) as usize,
        cursor_lag_ticks: at(4),
        scheduled: at(5),
        handed_out: at(6),
        acked: at(7),
        retried: at(8),
        dead_lettered: at(9),
        cancelled: at(10),
        paused: at(11) == 1,
    })
}

/// Up to `limit` dead letters from rank `offset` on, oldest first.
pub(crate) async fn dead_letters(
    wheel: &WheelClient,
    keys: &WheelKeys,
    limit: usize,
    offset: usize,
) -> Result<Vec<DeadTask>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.dead_letters);
    inv.arg(limit).arg(offset);
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(flat
        .chunks_exact(6)
        .map(|d| DeadTask {
            key: text(&d[0]),
            payload: d[1].clone(),
            attempts: u32::try_from(number(&d[2])).unwrap_or(u32::MAX),
            last_error: text(&d[3]),
            died: from_unix_ms(number(&d[4])),
            due: from_unix_ms(number(&d[5])),
        })
        .collect())
}

/// The task under `key`, pending or dead.
pub(crate) async fn get(wheel: &WheelClient, keys: &WheelKeys, key: &str) -> Result<Option<TaskInfo>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.get);
    inv.arg(key);
    let r: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    let Ok([state, due, attempt, err, payload, now, retry, every, runs, missed, spec]) = <[Vec<u8>; 11]>::try_from(r)
    else {
        return Ok(None);
    };
    let Some(state) = std::str::from_utf8(&state).ok().and_then(|s| s.parse::<TaskState>().ok()) else {
        return Ok(None);
    };
    Ok(Some(TaskInfo {
        key: key.to_string(),
        payload,
        due: from_unix_ms(number(&due)),
        attempt: u32::try_from(number(&attempt)).unwrap_or(u32::MAX),
        state,
        last_error: Some(text(&err)).filter(|e| !e.is_empty()),
        read_at: from_unix_ms(number(&now)),
        claim: None,
        finished: None,
        options: Retry::options_of(&retry),
        series: series_of(&every, &runs, &missed, &spec),
    }))
}

/// The series of a task from the four fields the reading scripts answer for it (record.lua's
/// period ms, runs left, missed-run digit and spec): `None` for a task that runs once.
fn series_of(every: &[u8], runs: &[u8], missed: &[u8], spec: &[u8]) -> Option<Series> {
    let runs = std::str::from_utf8(runs).ok().and_then(|r| r.parse().ok()).unwrap_or(-1);
    read_series(number(every), runs, missed.first().copied().unwrap_or(b'2'), &text(spec))
}

/// Deletes the dead letter `key`; false if there was none.
pub(crate) async fn delete_dead(wheel: &WheelClient, keys: &WheelKeys, key: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.delete_dead);
    inv.arg(key);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}

/// The waiting and ready tasks due in `[from_ms, until_ms]` after `(from_ms, after)` (all of
/// `from_ms` when `after` is empty), at most `limit`, reading the slots of `ticks`.
pub(crate) async fn due_next(
    wheel: &WheelClient,
    keys: &WheelKeys,
    (from_ms, after): (u64, &str),
    until_ms: u64,
    ticks: Option<std::ops::RangeInclusive<u64>>,
    limit: usize,
    waiting_only: bool,
) -> Result<Vec<TaskInfo>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.due_next);
    for t in ticks.into_iter().flatten() {
        inv.key(keys.slot(t % wheel.cfg.slots));
    }
    inv.arg(from_ms).arg(after).arg(until_ms).arg(limit).arg(if waiting_only { "waiting" } else { "" });
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    let read_at = from_unix_ms(flat.first().map_or(0, |now| number(now)));
    Ok(flat[1.min(flat.len())..]
        .chunks_exact(9)
        .map(|t| TaskInfo {
            key: text(&t[0]),
            state: if t[1] == b"ready" { TaskState::Ready } else { TaskState::Waiting },
            due: from_unix_ms(number(&t[2])),
            attempt: u32::try_from(number(&t[3])).unwrap_or(u32::MAX),
            payload: t[4].clone(),
            last_error: None,
            read_at,
            claim: None,
            finished: None,
            options: TaskOptions::new(),
            series: series_of(&t[5], &t[6], &t[7], &t[8]),
        })
        .collect())
}

/// How many waiting and ready tasks fall due in each of `buckets` buckets of `bucket_ms` from
/// `from_ms` (the first also counts those due before), counting the slots of `ticks` whole.
pub(crate) async fn due_counts(
    wheel: &WheelClient,
    keys: &WheelKeys,
    from_ms: u64,
    bucket_ms: u64,
    buckets: usize,
    ticks: std::ops::RangeInclusive<u64>,
) -> Result<Vec<u64>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.due_counts);
    let first = *ticks.start();
    for t in ticks {
        inv.key(keys.slot(t % wheel.cfg.slots));
    }
    inv.arg(from_ms).arg(bucket_ms).arg(buckets).arg(first).arg(wheel.cfg.tick_ms);
    wheel.conn.call(&inv, Window::Default).await
}

/// Whether a task is pending under `key` (`HEXISTS` on the partition's records).
pub(crate) async fn contains(wheel: &WheelClient, keys: &WheelKeys, key: &str) -> Result<bool, Error> {
    let mut exists = redis::cmd("HEXISTS");
    exists.arg(keys.tasks()).arg(key);
    wheel.conn.command(&exists).await
}

/// The partition's cursor: the last tick the leader moved (`GET cursor`); `None` before the
/// first tick.
pub(crate) async fn cursor(wheel: &WheelClient, keys: &WheelKeys) -> Result<Option<u64>, Error> {
    wheel.conn.command(redis::cmd("GET").arg(keys.cursor())).await
}

/// The tick (ms), slots and partition count recorded for the wheel by the first node that opened
/// it (`HMGET` on its record); `None` when no node has.
pub(crate) async fn recorded(wheel: &WheelClient, keys: &WheelKeys) -> Result<Option<(u64, usize, usize)>, Error> {
    let mut hmget = redis::cmd("HMGET");
    hmget.arg(keys.meta()).arg("tick_ms").arg("slots").arg("partitions");
    let fields: Vec<Option<u64>> = wheel.conn.command(&hmget).await?;
    Ok(match fields.as_slice() {
        [Some(tick_ms), Some(slots), partitions] => {
            let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            Some((*tick_ms, as_usize(*slots), as_usize(partitions.unwrap_or(1))))
        }
        _ => None,
    })
}

/// The partition's figures a minute (`HGETALL` on `figures`): each field `<minute>:<what>` with
/// its count (see `lua/includes/figures.lua`).
pub(crate) async fn figures(wheel: &WheelClient, keys: &WheelKeys) -> Result<Vec<(String, u64)>, Error> {
    wheel.conn.command(redis::cmd("HGETALL").arg(keys.figures())).await
}

/// The node that leads the partition, from its fencing token `<node>:<epoch>` (`GET leader`);
/// `None` while no node leads it.
pub(crate) async fn leader(wheel: &WheelClient, keys: &WheelKeys) -> Result<Option<String>, Error> {
    let token: Option<String> = wheel.conn.command(redis::cmd("GET").arg(keys.leader())).await?;
    Ok(token.map(|t| t.rsplit_once(':').map_or(t.clone(), |(node, _)| node.to_string())))
}

/// What one `list.lua` call read: its tasks (each with its score: due ms, claim token or death
/// ms), and
/// where it stopped reading when it read all it was asked for (more may follow).
pub(crate) struct Listed {
    pub(crate) tasks: Vec<(u64, TaskInfo)>,
    pub(crate) full: Option<(u64, String)>,
}

/// The ready, running or dead tasks after `(from, after)` in that state's order, at most `limit`.
pub(crate) async fn list(
    wheel: &WheelClient,
    keys: &WheelKeys,
    state: TaskState,
    (from, after): (u64, &str),
    limit: usize,
) -> Result<Listed, Error> {
    let name = match state {
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        _ => "dead",
    };
    let mut inv = invoke(keys, &SCRIPTS.list);
    inv.arg(name).arg(from).arg(after).arg(limit);
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    let Some((head, rest)) = flat.split_first_chunk::<4>() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "list.lua answered fewer than four entries",
        ))
        .into());
    };
    let [now, last_key, last_score, full] = head;
    let read_at = from_unix_ms(number(now));
    let tasks = rest
        .chunks_exact(12)
        .map(|t| {
            let score = number(&t[1]);
            let info = TaskInfo {
                key: text(&t[0]),
                payload: t[5].clone(),
                due: from_unix_ms(number(&t[2])),
                attempt: u32::try_from(number(&t[3])).unwrap_or(u32::MAX),
                state,
                last_error: Some(text(&t[4])).filter(|e| !e.is_empty()),
                read_at,
                claim: (!t[7].is_empty())
                    .then(|| (from_unix_ms(number(&t[7])), Some(text(&t[6])).filter(|n| !n.is_empty()))),
                finished: None,
                options: TaskOptions::new(),
                series: series_of(&t[8], &t[9], &t[10], &t[11]),
            };
            (score, info)
        })
        .collect();
    Ok(Listed { tasks, full: (full.as_slice() == b"1").then(|| (number(last_score), text(last_key))) })
}

/// One finished run read from the history: its number in its partition's history, and the run.
pub(crate) struct HistoryEntry {
    pub(crate) seq: u64,
    pub(crate) task: TaskInfo,
}

/// Up to `limit` finished runs from the history (`finished.lua`), newest first, from the run
/// numbered `from` on (`None`: the newest), and how many runs the partition has numbered. A run
/// that does not read (none does: the scripts write every one) is left out.
pub(crate) async fn history(
    wheel: &WheelClient,
    keys: &WheelKeys,
    from: Option<u64>,
    limit: usize,
) -> Result<(u64, Vec<HistoryEntry>), Error> {
    let mut inv = invoke(keys, &SCRIPTS.finished);
    inv.arg(from.map_or(String::new(), |f| f.to_string())).arg(limit);
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    let Some(([numbered, newest], runs)) = flat.split_first_chunk::<2>() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "finished.lua answered fewer than two entries",
        ))
        .into());
    };
    let newest = number(newest);
    let runs = runs.iter().zip(0..).filter_map(|(r, i)| history_entry(newest.checked_sub(i)?, r)).collect();
    Ok((number(numbered), runs))
}

/// The run numbered `seq` as the history holds it ([`HistoryRun`]), read into a
/// [`Finished`](TaskState::Finished) task.
fn history_entry(seq: u64, text: &[u8]) -> Option<HistoryEntry> {
    let run = HistoryRun::read(text)?;
    let finished_at = from_unix_ms(run.ended_ms);
    let outcome = match run.outcome {
        Ended::Acknowledged => Outcome::Acknowledged,
        Ended::Dead => Outcome::Dead,
        Ended::Cancelled => Outcome::Cancelled,
        Ended::Snoozed => Outcome::Snoozed,
    };
    let finished = FinishedRun {
        outcome,
        started_at: run.handler.map(|(started, _)| from_unix_ms(started)),
        finished_at,
        handler_duration: run.handler.map(|(_, took)| std::time::Duration::from_micros(took)),
    };
    let task = TaskInfo {
        key: super::text(run.key),
        payload: Vec::new(),
        due: from_unix_ms(run.due_ms),
        attempt: run.attempts,
        state: TaskState::Finished,
        last_error: Some(super::text(run.error)).filter(|e| !e.is_empty()),
        read_at: finished_at,
        claim: None,
        finished: Some(finished),
        options: TaskOptions::new(),
        series: None,
    };
    Some(HistoryEntry { seq, task })
}
