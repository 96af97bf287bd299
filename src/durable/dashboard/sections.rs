//! What each section of the page shows, read through the wheel's public calls: one small
//! function a section, each answering the JSON its endpoint sends.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::durable::{DurableScheduler, TaskState};
use crate::lateness::Histogram;
use crate::Error;

/// The counts by state and the counters, as [`DurableScheduler::stats`] reads them.
pub(super) async fn counts(timers: &DurableScheduler) -> Result<Value, Error> {
    let s = timers.stats().await?;
    Ok(json!({
        "waiting": s.waiting,
        "ready": s.ready,
        "running": s.in_flight,
        "dead": s.dead,
        "pending": s.pending,
        "cursor_lag_ticks": s.cursor_lag_ticks,
        "scheduled": s.scheduled,
        "handed_out": s.handed_out,
        "acked": s.acked,
        "retried": s.retried,
        "dead_lettered": s.dead_lettered,
        "paused": s.paused,
    }))
}

/// The first bar of the lateness plot holds everything below this (2^10 us, 1.02 ms); each next
/// bar doubles it.
const FIRST_BAR_US: u64 = 1 << 10;
/// The plot shows at least up to this bound (2^17 us, 131 ms), so that its scale stays put
/// while the figures are small.
const LAST_BAR_AT_LEAST_US: u64 = 1 << 17;

/// How late this process's workers claimed their deliveries over the recent window: the figures
/// of [`DurableScheduler::lateness`], and the distribution in bars of doubling width.
pub(super) fn lateness(timers: &DurableScheduler) -> Value {
    let (figures, histogram) = timers.wheel.lateness();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    json!({
        "count": figures.count,
        "p50_ms": ms(figures.p50),
        "p99_ms": ms(figures.p99),
        "max_ms": ms(figures.max),
        "window_s": crate::LATENESS_WINDOW.as_secs(),
        "bars": bars(&histogram).into_iter().map(|(below_us, count)| json!({"below_us": below_us, "count": count})).collect::<Vec<_>>(),
    })
}

/// The histogram in bars `[0, 1024 us)`, `[1024, 2048)`, ... each bar's upper bound twice the
/// one before: the histogram's buckets never straddle a power of two, so each lands in one bar
/// whole. From the first bar to the last that holds a value (or [`LAST_BAR_AT_LEAST_US`]).
fn bars(histogram: &Histogram) -> Vec<(u64, u64)> {
    let mut bars: Vec<(u64, u64)> = Vec::new();
    let mut below = FIRST_BAR_US;
    while below <= LAST_BAR_AT_LEAST_US {
        bars.push((below, 0));
        below *= 2;
    }
    for (upper, count) in histogram.buckets() {
        let upper_us = u64::try_from(upper.as_micros()).unwrap_or(u64::MAX);
        // The bar whose bound is above the bucket's largest value.
        let bar = if upper_us < FIRST_BAR_US { 0 } else { (upper_us / FIRST_BAR_US).ilog2() as usize + 1 };
        while bars.len() <= bar {
            let next = bars.last().map_or(FIRST_BAR_US, |&(b, _)| b.saturating_mul(2));
            bars.push((next, 0));
        }
        bars[bar].1 += count;
    }
    bars
}

/// The dead letters, oldest first, up to `limit` (payloads left out: they may be anything).
pub(super) async fn dead_letters(timers: &DurableScheduler, limit: usize) -> Result<Value, Error> {
    let dead = timers.dead_letters(limit).await?;
    Ok(json!({
        "limit": limit,
        "letters": dead.iter().map(|d| json!({
            "key": d.key(),
            "attempts": d.attempts(),
            "last_error": d.last_error(),
            "died_ms": unix_ms(d.died()),
        })).collect::<Vec<_>>(),
    }))
}

/// One task by its key: whether one is pending.
/// Answers "detail": {"state": "waiting" | "ready" | "running" | "dead", "due_ms", "overdue_ms"
/// (null unless [`TaskInfo::overdue_by`](crate::durable::TaskInfo::overdue_by) says so), "attempt",
/// "payload_bytes", "last_error"} (null when there is no such task), and "pending" from its
/// state, which app.js's `search` shows.
pub(super) async fn find_task(timers: &DurableScheduler, key: &str) -> Result<Value, Error> {
    let Some(task) = timers.get(key).await? else {
        return Ok(json!({ "key": key, "pending": false, "detail": null }));
    };
    let state = match task.state() {
        TaskState::Waiting => "waiting",
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        _ => "dead",
    };
    Ok(json!({
        "key": key,
        "pending": state != "dead",
        "detail": {
            "state": state,
            "due_ms": unix_ms(task.due()),
            "overdue_ms": task.overdue_by().map(|late| late.as_millis() as u64),
            "attempt": task.attempt(),
            "payload_bytes": task.payload().len(),
            "last_error": task.last_error(),
        },
    }))
}

/// What falls due over the next hour, a bar a minute.
/// ([`DurableScheduler::due_counts`]: tasks already due count in the first bar.)
pub(super) async fn due_plot(timers: &DurableScheduler) -> Result<Value, Error> {
    let now = SystemTime::now();
    let counts = timers.due_counts(now, DUE_BUCKET, DUE_BUCKETS).await?;
    Ok(json!({
        "from_ms": unix_ms(now),
        "bucket_s": DUE_BUCKET.as_secs(),
        "counts": counts,
    }))
}

/// The width of one bar of the due plot.
const DUE_BUCKET: Duration = Duration::from_secs(60);
/// How many bars: an hour.
const DUE_BUCKETS: usize = 60;

/// The node that leads each partition ([`DurableScheduler::leaders`]) and the workers that run
/// ([`DurableScheduler::workers`]), which app.js's `showNodes` lists.
pub(super) async fn leader_and_workers(timers: &DurableScheduler) -> Result<Value, Error> {
    let leaders: Vec<Value> = timers
        .leaders()
        .await?
        .into_iter()
        .enumerate()
        .map(|(partition, node)| json!({ "partition": partition, "node": node.unwrap_or_else(|| "nobody".into()) }))
        .collect();
    let workers: Vec<Value> = timers.workers().await?.into_iter().map(|node| json!({ "node": node })).collect();
    Ok(json!({ "leaders": leaders, "workers": workers }))
}

/// What an action did, for its answer: the HTTP status and the JSON body.
pub(super) type Done = (axum::http::StatusCode, Value);

/// Puts the dead letter `key` back (due at once, attempts reset).
pub(super) async fn requeue(timers: &DurableScheduler, key: &str) -> Result<Done, Error> {
    use axum::http::StatusCode;
    Ok(match timers.requeue_dead(key).await {
        Ok(true) => (StatusCode::OK, json!({ "key": key, "requeued": true })),
        Ok(false) => (StatusCode::NOT_FOUND, json!({ "key": key, "error": "no dead letter under this key" })),
        Err(Error::DuplicateKey(_)) => (
            StatusCode::CONFLICT,
            json!({ "key": key, "error": "a task under this key is pending: the dead letter stays" }),
        ),
        Err(e) => return Err(e),
    })
}

/// Deletes the dead letter `key` for good.
pub(super) async fn delete_dead_letter(timers: &DurableScheduler, key: &str) -> Result<Done, Error> {
    use axum::http::StatusCode;
    Ok(if timers.delete_dead(key).await? {
        (StatusCode::OK, json!({ "key": key, "deleted": true }))
    } else {
        (StatusCode::NOT_FOUND, json!({ "key": key, "error": "no dead letter under this key" }))
    })
}

/// Milliseconds since the Unix epoch (0 before it).
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lateness_lands_in_the_bar_that_bounds_it() {
        let mut h = Histogram::default();
        let late_ms = [0, 1, 2, 3, 4, 7, 8, 9, 100, 131, 132, 5_000];
        for ms in late_ms {
            h.record(Duration::from_millis(ms));
        }
        let bars = bars(&h);
        assert_eq!(bars.iter().map(|&(_, n)| n).sum::<u64>(), late_ms.len() as u64);
        for ms in late_ms {
            let us = ms * 1000;
            let bar = bars.iter().position(|&(below, _)| us < below).expect("a bar bounds it");
            let above = if bar == 0 { 0 } else { bars[bar - 1].0 };
            assert!(us >= above, "{ms} ms in bar [{above}, {}) us", bars[bar].0);
        }
        let count = |below: u64| bars.iter().find(|&&(b, _)| b == below).unwrap().1;
        assert_eq!(count(1 << 10), 2, "0 and 1 ms");
        assert_eq!(count(1 << 11), 1, "2 ms");
        assert_eq!(count(1 << 12), 2, "3 and 4 ms");
        assert_eq!(count(1 << 13), 2, "7 and 8 ms (8,000 us is below 8,192)");
        assert_eq!(count(1 << 14), 1, "9 ms");
        assert_eq!(count(1 << 17), 2, "100 and 131 ms");
        assert_eq!(count(1 << 18), 1, "132 ms");
        assert_eq!(bars.last().unwrap(), &(1 << 23, 1), "5 s, the last bar");
        assert!(bars.windows(2).all(|w| w[1].0 == 2 * w[0].0), "{bars:?}");
    }

    #[test]
    fn an_empty_histogram_gives_the_bars_of_the_least_range() {
        let bars = bars(&Histogram::default());
        assert_eq!(bars.first(), Some(&(FIRST_BAR_US, 0)));
        assert_eq!(bars.last(), Some(&(LAST_BAR_AT_LEAST_US, 0)));
    }
}
