//! How the command line shows what it read: tables and lines for people, JSON values for
//! scripts. Nothing here talks to Redis.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio_timewheel::durable::{DeadTask, DurableStats, MinuteCounts, TaskInfo, TaskState};

/// A payload as a person reads it: pretty JSON when it parses as JSON, else text when it is
/// UTF-8, else hex. The second value names which.
pub fn payload(bytes: &[u8]) -> (String, &'static str) {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return (serde_json::to_string_pretty(&value).unwrap_or_default(), "json");
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), "text"),
        Err(_) => (hex(bytes), "hex"),
    }
}

/// A payload as a JSON value: the value itself when it is JSON, else a string (the text, or
/// its hex), with its encoding beside it.
pub fn payload_json(bytes: &[u8]) -> (Value, &'static str) {
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return (value, "json");
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => (Value::String(text.to_string()), "text"),
        Err(_) => (Value::String(hex(bytes)), "hex"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// A payload on one line of at most `width` characters, for a table.
pub fn payload_short(bytes: &[u8], width: usize) -> String {
    let (text, encoding) = match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => (value.to_string(), "json"),
        Err(_) => payload(bytes),
    };
    let one_line = text.replace(['\n', '\r', '\t'], " ");
    let shown = clip(&one_line, width);
    if encoding == "hex" {
        format!("0x{shown}")
    } else {
        shown
    }
}

/// `text` cut to `width` characters, with an ellipsis when cut.
pub fn clip(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A state's name as the command line takes and prints it.
pub fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Waiting => "waiting",
        TaskState::Ready => "ready",
        TaskState::Running => "running",
        TaskState::Dead => "dead",
        TaskState::Finished => "finished",
        _ => "other",
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `t` in UTC, as `2026-11-27 23:59:01.250Z`.
pub fn utc(t: SystemTime) -> String {
    let ms = unix_ms(t);
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// How far `t` is from `now`: "in 3.2s" or "3.2s ago".
pub fn relative(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", span(ahead)),
        Err(e) => format!("{} ago", span(e.duration())),
    }
}

/// A due time as a table shows it: "in 3.2s", or "overdue 1.5s" once past.
pub fn due(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", span(ahead)),
        Err(e) => format!("overdue {}", span(e.duration())),
    }
}

/// A duration in the largest unit that keeps it short: 850ms, 3.2s, 4m05s, 2h10m, 3d04h.
pub fn span(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms}ms"),
        1000..=59_999 => format!("{:.1}s", d.as_secs_f64()),
        _ => {
            let s = d.as_secs();
            match s {
                0..=3599 => format!("{}m{:02}s", s / 60, s % 60),
                3600..=86_399 => format!("{}h{:02}m", s / 3600, s / 60 % 60),
                _ => format!("{}d{:02}h", s / 86_400, s / 3600 % 24),
            }
        }
    }
}

/// The stats as a JSON object.
pub fn stats_json(wheel: &str, s: &DurableStats) -> Value {
    json!({
        "wheel": wheel,
        "pending": s.pending,
        "waiting": s.waiting,
        "ready": s.ready,
        "running": s.in_flight,
        "dead": s.dead,
        "cursor_lag_ticks": s.cursor_lag_ticks,
        "paused": s.paused,
        "scheduled": s.scheduled,
        "handed_out": s.handed_out,
        "acked": s.acked,
        "retried": s.retried,
        "dead_lettered": s.dead_lettered,
        "cancelled": s.cancelled,
    })
}

/// The stats for a person.
pub fn stats_text(wheel: &str, s: &DurableStats) -> String {
    let mut out = String::new();
    let paused = if s.paused { "   PAUSED: no worker claims until resume" } else { "" };
    let _ = writeln!(out, "wheel {wheel}{paused}");
    let _ = writeln!(
        out,
        "  pending  {:>10}   (waiting {}, ready {}, running {})",
        s.pending, s.waiting, s.ready, s.in_flight
    );
    let _ = writeln!(out, "  dead     {:>10}", s.dead);
    let lag = if s.cursor_lag_ticks > 1 { "   (no leader ticks, or it is catching up)" } else { "" };
    let _ = writeln!(out, "  cursor lag {:>8} tick(s){lag}", s.cursor_lag_ticks);
    let _ = writeln!(
        out,
        "  since the wheel was created: scheduled {}, handed out {}, acknowledged {}, retried {}, dead-lettered {}, \
         cancelled {}",
        s.scheduled, s.handed_out, s.acked, s.retried, s.dead_lettered, s.cancelled
    );
    out
}

/// Minutes of wheel-wide figures as a JSON array.
pub fn minutes_json(minutes: &[MinuteCounts]) -> Value {
    Value::Array(
        minutes
            .iter()
            .map(|m| {
                json!({
                    "start_unix_ms": unix_ms(m.start),
                    "handed_out": m.handed_out,
                    "acked": m.acked,
                    "failed": m.failed,
                    "dead": m.dead,
                })
            })
            .collect(),
    )
}

/// Minutes of wheel-wide figures as a table, a minute a row.
pub fn minutes_table(minutes: &[MinuteCounts]) -> String {
    let rows: Vec<Vec<String>> = minutes
        .iter()
        .map(|m| {
            let start = utc(m.start);
            vec![
                start.get(11..16).unwrap_or(&start).to_string(),
                m.handed_out.to_string(),
                m.acked.to_string(),
                m.failed.to_string(),
                m.dead.to_string(),
            ]
        })
        .collect();
    table(&["MINUTE", "HANDED OUT", "ACKED", "FAILED", "DEAD"], &rows)
}

/// A task as a JSON object.
pub fn task_json(t: &TaskInfo) -> Value {
    let (payload, encoding) = payload_json(t.payload());
    json!({
        "key": t.key(),
        "state": state_name(t.state()),
        "due_unix_ms": unix_ms(t.due()),
        "attempt": t.attempt(),
        "last_error": t.last_error(),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// A task for a person, one field a line, its payload last.
pub fn task_text(t: &TaskInfo, now: SystemTime) -> String {
    let (payload, encoding) = payload(t.payload());
    let mut out = String::new();
    let _ = writeln!(out, "key         {}", t.key());
    let _ = writeln!(out, "state       {}", state_name(t.state()));
    let _ = writeln!(out, "due         {} ({})", utc(t.due()), due(t.due(), now));
    let _ = writeln!(out, "attempts    {}", t.attempt());
    if let Some(error) = t.last_error() {
        let _ = writeln!(out, "last error  {error}");
    }
    let _ = writeln!(out, "payload     ({encoding}, {} bytes)", t.payload().len());
    for line in payload.lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// A dead letter as a JSON object.
pub fn dead_json(d: &DeadTask) -> Value {
    let (payload, encoding) = payload_json(d.payload());
    json!({
        "key": d.key(),
        "attempts": d.attempts(),
        "last_error": d.last_error(),
        "died_unix_ms": unix_ms(d.died()),
        "due_unix_ms": unix_ms(d.due()),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// Rows under a header, each column as wide as its widest cell; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<w$}  ");
            }
        }
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_show_as_json_text_or_hex() {
        assert_eq!(payload(br#"{"a":1}"#), ("{\n  \"a\": 1\n}".to_string(), "json"));
        assert_eq!(payload(b"plain words"), ("plain words".to_string(), "text"));
        assert_eq!(payload(&[0xff, 0x00, 0x10]), ("ff0010".to_string(), "hex"));
        assert_eq!(payload_short(br#"{"a": [1, 2]}"#, 40), r#"{"a":[1,2]}"#);
        assert_eq!(payload_short(&[0xff, 0xfe], 40), "0xfffe");
        assert_eq!(payload_short(b"abcdefghij", 5), "abcd…");
    }

    #[test]
    fn times_read_as_utc_and_spans() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01 00:00:00.000Z");
        // 2026-11-27 23:59:01.250 UTC.
        assert_eq!(utc(UNIX_EPOCH + Duration::from_millis(1_795_823_941_250)), "2026-11-27 23:59:01.250Z");
        // A leap day.
        assert_eq!(utc(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29 00:00:00.000Z");
        assert_eq!(span(Duration::from_millis(850)), "850ms");
        assert_eq!(span(Duration::from_millis(3_250)), "3.2s");
        assert_eq!(span(Duration::from_secs(245)), "4m05s");
        assert_eq!(span(Duration::from_secs(7_800)), "2h10m");
        assert_eq!(span(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d04h");
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(due(now + Duration::from_secs(2), now), "in 2.0s");
        assert_eq!(due(now - Duration::from_millis(1500), now), "overdue 1.5s");
    }

    #[test]
    fn a_table_pads_every_column_but_the_last() {
        let rows = vec![vec!["a".to_string(), "long cell".to_string(), "x".to_string()]];
        assert_eq!(table(&["KEY", "B", "C"], &rows), "KEY  B          C\na    long cell  x\n");
    }
}
