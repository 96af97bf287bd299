//! What each section of the page shows, read through the wheel's public calls: one small
//! function a section, each answering the JSON its endpoint sends.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::durable::{DurableScheduler, ListCursor, TaskState};
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

/// How late this process's workers claimed their deliveries over the recent window, as
/// [`DurableScheduler::lateness`] tells any caller (the plot beside it draws the wheel-wide
/// figures, [`figures`]).
pub(super) fn lateness(timers: &DurableScheduler) -> Value {
    let late = timers.lateness();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    json!({
        "count": late.count,
        "p50_ms": ms(late.p50),
        "p99_ms": ms(late.p99),
        "max_ms": ms(late.max),
        "window_s": crate::LATENESS_WINDOW.as_secs(),
    })
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

/// Each wheel's counts by state and whether it is paused, one `stats` call a wheel; a wheel
/// that could not be read says why.
pub(super) async fn overview(wheels: &[(String, DurableScheduler)]) -> Value {
    let mut shown = Vec::with_capacity(wheels.len());
    for (name, timers) in wheels {
        shown.push(match timers.stats().await {
            Ok(s) => json!({
                "wheel": name,
                "waiting": s.waiting,
                "ready": s.ready,
                "running": s.in_flight,
                "dead": s.dead,
                "pending": s.pending,
                "paused": s.paused,
            }),
            Err(e) => json!({ "wheel": name, "error": e.to_string() }),
        });
    }
    json!({ "wheels": shown })
}

/// A page of the tasks in `state` after `after` ([`DurableScheduler::list`]), payloads left out
/// (the detail view reads one at a time), and the cursor of the next page as opaque text.
pub(super) async fn tasks(
    timers: &DurableScheduler,
    state: TaskState,
    after: Option<&ListCursor>,
    limit: usize,
) -> Result<Value, Error> {
    let (tasks, next) = timers.list(state, after, limit).await?.into_parts();
    Ok(json!({
        "state": state_name(state),
        "limit": limit,
        "tasks": tasks.iter().map(|t| json!({
            "key": t.key(),
            "due_ms": unix_ms(t.due()),
            "overdue_ms": t.overdue_by().map(|late| u64::try_from(late.as_millis()).unwrap_or(u64::MAX)),
            "attempt": t.attempt(),
            "worker": t.worker(),
            "claimed_ms": t.claimed_at().map(unix_ms),
            "last_error": t.last_error(),
            "payload_bytes": t.payload().len(),
            "outcome": t.finished().map(|run| run.outcome().as_str()),
            "started_ms": t.finished().and_then(|run| run.started_at()).map(unix_ms),
            "handler_ms": t.finished().and_then(|run| run.handler_duration()).map(|d| d.as_secs_f64() * 1000.0),
            "finished_ms": t.finished().map(|run| unix_ms(run.finished_at())),
        })).collect::<Vec<_>>(),
        "next": next.as_ref().map(encode_cursor),
    }))
}

/// A cursor as the text `api/tasks` answers in `next`: the hex digits of its
/// [`Display`](std::fmt::Display) form, so that it goes in an address as it is and the page
/// never reads it.
pub(super) fn encode_cursor(cursor: &ListCursor) -> String {
    cursor.to_string().bytes().map(|b| format!("{b:02x}")).collect()
}

/// The cursor [`encode_cursor`] wrote, or `None` for other text.
pub(super) fn decode_cursor(text: &str) -> Option<ListCursor> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect();
    String::from_utf8(bytes?).ok()?.parse().ok()
}

fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Waiting => "waiting",
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        TaskState::Finished => "finished",
        _ => "dead",
    }
}

/// The payload of the task `key` ([`DurableScheduler::get`]), its first
/// [`PAYLOAD_SHOWN`](super::PAYLOAD_SHOWN) bytes shown as pretty JSON when the whole of it is
/// JSON, else as text when it is UTF-8, else as hex.
pub(super) async fn payload(timers: &DurableScheduler, key: &str) -> Result<Value, Error> {
    let Some(task) = timers.get(key).await? else {
        return Ok(json!({ "key": key, "found": false }));
    };
    let (format, shown) = show_payload(task.payload());
    Ok(json!({
        "key": key,
        "found": true,
        "state": state_name(task.state()),
        "bytes": task.payload().len(),
        "format": format,
        "shown": shown,
        "truncated": task.payload().len() > super::PAYLOAD_SHOWN,
    }))
}

/// How to show `payload`: `("json" | "text" | "hex" | "empty", the text)`, of its first
/// [`PAYLOAD_SHOWN`](super::PAYLOAD_SHOWN) bytes.
fn show_payload(payload: &[u8]) -> (&'static str, String) {
    if payload.is_empty() {
        return ("empty", String::new());
    }
    let head = &payload[..payload.len().min(super::PAYLOAD_SHOWN)];
    if head.len() == payload.len() {
        if let Ok(value) = serde_json::from_slice::<Value>(payload) {
            return ("json", serde_json::to_string_pretty(&value).unwrap_or_default());
        }
    }
    match std::str::from_utf8(head) {
        Ok(text) => return ("text", text.to_owned()),
        // Cut in the middle of a character: the text up to it.
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
            return ("text", String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned())
        }
        Err(_) => {}
    }
    let lines: Vec<String> = head
        .chunks(16)
        .enumerate()
        .map(|(i, row)| {
            let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
            let text: String =
                row.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
            format!("{:08x}  {:<47}  {text}", i * 16, hex.join(" "))
        })
        .collect();
    ("hex", lines.join("\n"))
}

/// How many minutes the chart of the wheel-wide figures shows: an hour.
const FIGURES_SHOWN: usize = 60;
/// The lateness bars of the wheel-wide figures reach at least this bound (128 ms), so that
/// their scale stays put while the figures are small.
const FIGURES_LATENESS_AT_LEAST: Duration = Duration::from_millis(128);

/// The wheel-wide figures of the last hour ([`DurableScheduler::figures`], every node's): a
/// minute at a time what was handed out, acknowledged, failed and buried, and how late
/// deliveries were claimed, in bars of doubling width from the first bound to the last that
/// holds a count (`below_us` null for the open-ended last one).
pub(super) async fn figures(timers: &DurableScheduler) -> Result<Value, Error> {
    let figures = timers.figures(FIGURES_SHOWN).await?;
    let lateness = figures.lateness();
    // The octaves from 1 ms to the last finite bound that holds a count (at least
    // FIGURES_LATENESS_AT_LEAST), then the open-ended bucket if it holds any.
    let count_at = |bound: Duration| lateness.iter().filter(|&&(b, _)| b == bound).map(|&(_, n)| n).sum::<u64>();
    let last =
        lateness.iter().map(|&(b, _)| b).filter(|&b| b != Duration::MAX).fold(FIGURES_LATENESS_AT_LEAST, Duration::max);
    let mut bars: Vec<(Option<u64>, u64)> = Vec::new();
    let mut bound = Duration::from_millis(1);
    while bound <= last {
        bars.push((Some(u64::try_from(bound.as_micros()).unwrap_or(u64::MAX)), count_at(bound)));
        bound *= 2;
    }
    let beyond = count_at(Duration::MAX);
    if beyond > 0 {
        bars.push((None, beyond));
    }
    debug_assert_eq!(
        bars.iter().map(|&(_, n)| n).sum::<u64>(),
        lateness.iter().map(|&(_, n)| n).sum::<u64>(),
        "every bucket of {lateness:?} lands in a bar: {bars:?}"
    );
    let ms = |d: Option<Duration>| d.filter(|d| *d != Duration::MAX).map(|d| d.as_secs_f64() * 1e3);
    Ok(json!({
        "minutes": figures.minutes().iter().map(|m| json!({
            "start_ms": unix_ms(m.start),
            "handed_out": m.handed_out,
            "acked": m.acked,
            "failed": m.failed,
            "dead": m.dead,
        })).collect::<Vec<_>>(),
        "lateness": bars.into_iter().map(|(below_us, count)| json!({ "below_us": below_us, "count": count })).collect::<Vec<_>>(),
        "claimed": lateness.iter().map(|&(_, n)| n).sum::<u64>(),
        "p50_ms": ms(figures.lateness_quantile(0.5)),
        "p99_ms": ms(figures.lateness_quantile(0.99)),
    }))
}

/// Milliseconds since the Unix epoch (0 before it).
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_goes_through_its_opaque_text() {
        let page = "dead:1767225600000:a key/with ?&=# and : colons".parse::<ListCursor>().unwrap();
        let text = encode_cursor(&page);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert_eq!(decode_cursor(&text), Some(page));
        for bad in ["", "0", "zz", "6465", "ff00", "64656164"] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_payload_shows_as_json_text_or_hex() {
        let (format, shown) = show_payload(br#"{"order":42,"lines":[1,2]}"#);
        assert_eq!(format, "json");
        assert!(shown.contains("\n  \"order\": 42"), "{shown}");
        assert_eq!(show_payload(b"plain words"), ("text", "plain words".to_owned()));
        assert_eq!(show_payload(b""), ("empty", String::new()));
        let (format, shown) = show_payload(&[0, 1, 0xff, b'A']);
        assert_eq!(format, "hex");
        assert!(shown.starts_with("00000000  00 01 ff 41"), "{shown}");
        assert!(shown.ends_with("..A"), "{shown}");
        // A large text payload is cut at its bound, between characters.
        let long = "é".repeat(super::super::PAYLOAD_SHOWN);
        let (format, shown) = show_payload(long.as_bytes());
        assert_eq!((format, shown.len()), ("text", super::super::PAYLOAD_SHOWN));
    }
}
