//! What each section of the page shows, read through the wheel's public calls: one small
//! function a section, each answering the JSON its endpoint sends. What the wheel reads goes out
//! as its own JSON (the `Serialize` of [`TaskInfo`](crate::durable::TaskInfo),
//! [`DurableStats`](crate::durable::DurableStats), [`Figures`](crate::durable::Figures), ...),
//! with what the page needs beside it.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{json, Value};

use crate::durable::{DurableScheduler, ListCursor, TaskState};
use crate::Error;

/// `item`'s JSON (a task's or a dead letter's) with its payload left out, its size and encoding
/// kept: a page of them stays small whatever they carry, and `api/payload` shows one at a time.
fn without_payload(item: &impl Serialize) -> Value {
    let mut shown = json!(item);
    if let Some(fields) = shown.as_object_mut() {
        fields.remove("payload");
    }
    shown
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

/// The dead letters, oldest first, up to `limit`, each a [`DeadTask`](crate::durable::DeadTask)'s
/// JSON without its payload.
pub(super) async fn dead_letters(timers: &DurableScheduler, limit: usize) -> Result<Value, Error> {
    let dead = timers.dead_letters(limit).await?;
    Ok(json!({
        "limit": limit,
        "letters": dead.iter().map(without_payload).collect::<Vec<_>>(),
    }))
}

/// One task by its key: `{"key", "pending", "detail"}`, the detail the task's
/// [`TaskInfo`](crate::durable::TaskInfo) JSON without its payload (`null` when there is no such
/// task), and `pending` from its state, which app.js's `search` shows.
pub(super) async fn find_task(timers: &DurableScheduler, key: &str) -> Result<Value, Error> {
    let task = timers.get(key).await?;
    Ok(json!({
        "key": key,
        "pending": task.as_ref().is_some_and(|t| t.state() != TaskState::Dead),
        "detail": task.as_ref().map(without_payload),
    }))
}

/// What falls due over the next hour, a bar a minute.
/// ([`DurableScheduler::due_counts`]: tasks already due count in the first bar.)
pub(super) async fn due_plot(timers: &DurableScheduler) -> Result<Value, Error> {
    let now = SystemTime::now();
    let counts = timers.due_counts(now, DUE_BUCKET, DUE_BUCKETS).await?;
    Ok(json!({
        "from_unix_ms": unix_ms(now),
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

/// The limits by key prefix ([`DurableScheduler::limits`]), which app.js's `showLimits` lists
/// beside the counts: `{"limits": [{"prefix", "limit", "rate", "per_ms", "running"}]}`, each
/// limit as its [`Display`](std::fmt::Display) says it (`20 starts per 1s, 5 running`) and its
/// parts (`null` for a part it does not have).
pub(super) async fn limits(timers: &DurableScheduler) -> Result<Value, Error> {
    let limits: Vec<Value> = timers
        .limits()
        .await?
        .into_iter()
        .map(|(prefix, limit)| {
            let rate = limit.rate_limit();
            json!({
                "prefix": prefix,
                "limit": limit.to_string(),
                "rate": rate.map(|(starts, _)| starts),
                "per_ms": rate.map(|(_, per)| u64::try_from(per.as_millis()).unwrap_or(u64::MAX)),
                "running": limit.running_limit(),
            })
        })
        .collect();
    Ok(json!({ "limits": limits }))
}

/// Each wheel's [`DurableStats`](crate::durable::DurableStats), with its name as `wheel`, one
/// `stats` call a wheel; a wheel that could not be read says why.
pub(super) async fn overview(wheels: &[(String, DurableScheduler)]) -> Value {
    let mut shown = Vec::with_capacity(wheels.len());
    for (name, timers) in wheels {
        shown.push(match timers.stats().await {
            Ok(stats) => {
                let mut wheel = json!(stats);
                wheel["wheel"] = json!(name);
                wheel
            }
            Err(e) => json!({ "wheel": name, "error": e.to_string() }),
        });
    }
    json!({ "wheels": shown })
}

/// A page of the tasks in `state` after `after` ([`DurableScheduler::list`]), as the
/// [`ListPage`](crate::durable::ListPage) JSON with the tasks' payloads left out (the detail view
/// reads one at a time) and the cursor of the next page as opaque text ([`encode_cursor`]), and
/// the state and limit asked for.
pub(super) async fn tasks(
    timers: &DurableScheduler,
    state: TaskState,
    after: Option<&ListCursor>,
    limit: usize,
) -> Result<Value, Error> {
    let page = timers.list(state, after, limit).await?;
    Ok(json!({
        "state": state,
        "limit": limit,
        "tasks": page.tasks().iter().map(without_payload).collect::<Vec<_>>(),
        "next": page.next().map(encode_cursor),
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

/// The task `key` ([`DurableScheduler::get`]) as its [`TaskInfo`](crate::durable::TaskInfo)
/// JSON, with `found`, and for its payload, instead of the whole of it, `shown`: its first
/// [`PAYLOAD_SHOWN`](super::PAYLOAD_SHOWN) bytes as its `payload_encoding` says, pretty when it is
/// JSON and all of it is shown, as a hex dump when it is bytes; `truncated` when that is not all.
pub(super) async fn payload(timers: &DurableScheduler, key: &str) -> Result<Value, Error> {
    let Some(task) = timers.get(key).await? else {
        return Ok(json!({ "key": key, "found": false }));
    };
    let mut shown = without_payload(&task);
    let encoding = shown["payload_encoding"].as_str().unwrap_or("hex").to_owned();
    shown["found"] = json!(true);
    shown["shown"] = json!(show_payload(task.payload(), &encoding));
    shown["truncated"] = json!(task.payload().len() > super::PAYLOAD_SHOWN);
    Ok(shown)
}

/// The first [`PAYLOAD_SHOWN`](super::PAYLOAD_SHOWN) bytes of `payload`, shown as its
/// `encoding` says (`"json"`, `"text"` or `"hex"`, the payload's JSON's): pretty JSON when all
/// of it fits, text up to the last whole character, or a hex dump of 16 bytes a line.
fn show_payload(payload: &[u8], encoding: &str) -> String {
    let head = &payload[..payload.len().min(super::PAYLOAD_SHOWN)];
    if encoding == "json" && head.len() == payload.len() {
        if let Ok(value) = serde_json::from_slice::<Value>(payload) {
            return serde_json::to_string_pretty(&value).unwrap_or_default();
        }
    }
    if encoding != "hex" {
        // Cut in the middle of a character: the text up to it.
        let whole = match std::str::from_utf8(head) {
            Ok(text) => text,
            Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default(),
        };
        return whole.to_owned();
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
    lines.join("\n")
}

/// How many minutes the chart of the wheel-wide figures shows: an hour.
const FIGURES_SHOWN: usize = 60;

/// The wheel-wide figures of the last hour ([`DurableScheduler::figures`], every node's), as
/// their [`Figures`](crate::durable::Figures) JSON: a minute at a time what was handed out,
/// acknowledged, failed and buried, and how late deliveries were claimed (app.js draws the
/// lateness buckets as bars of doubling width).
pub(super) async fn figures(timers: &DurableScheduler) -> Result<Value, Error> {
    Ok(json!(timers.figures(FIGURES_SHOWN).await?))
}

/// Milliseconds since the Unix epoch (0 before it).
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
    fn a_payload_shows_as_its_encoding_says() {
        let shown = show_payload(br#"{"order":42,"lines":[1,2]}"#, "json");
        assert!(shown.contains("\n  \"order\": 42"), "{shown}");
        assert_eq!(show_payload(b"plain words", "text"), "plain words");
        assert_eq!(show_payload(b"", "text"), "");
        let shown = show_payload(&[0, 1, 0xff, b'A'], "hex");
        assert!(shown.starts_with("00000000  00 01 ff 41"), "{shown}");
        assert!(shown.ends_with("..A"), "{shown}");
        // A large text payload is cut at its bound, between characters.
        let long = "é".repeat(super::super::PAYLOAD_SHOWN);
        assert_eq!(show_payload(long.as_bytes(), "text").len(), super::super::PAYLOAD_SHOWN);
        // A large JSON payload, cut: its text as it is, up to the bound.
        let big = format!("[{}0]", "1,".repeat(super::super::PAYLOAD_SHOWN));
        let shown = show_payload(big.as_bytes(), "json");
        assert_eq!((shown.len(), &shown[..4]), (super::super::PAYLOAD_SHOWN, "[1,1"));
    }
}
