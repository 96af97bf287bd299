//! How the command line shows what it read: tables and lines for people; for scripts, the
//! library's own JSON of what it read (its `serde` form), with the fields the command adds
//! around it. Nothing here talks to Redis.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tokio_timewheel::durable::{DurableStats, Limit, MinuteCounts, TaskInfo, TaskState};
use tokio_timewheel::{MissedRuns, Recurrence};

/// `value`'s JSON object (the library's serde form of a stats, a task, ...) with `fields` added
/// beside its own: `{"wheel": .., "pending": .., ...}`.
pub fn object_with<'a>(value: &impl Serialize, fields: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    let mut object = match serde_json::to_value(value) {
        Ok(Value::Object(object)) => object,
        other => panic!("the library serialises its types as JSON objects, not {other:?}"),
    };
    object.extend(fields.into_iter().map(|(name, v)| (name.to_string(), v)));
    Value::Object(object)
}

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

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `t` in UTC as RFC 3339, to the millisecond: `2026-11-27T23:59:01.250Z`.
pub fn utc(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `t` on the wall clock of the IANA zone `zone`, as RFC 3339 with the zone's offset and its
/// abbreviation: `2026-11-28T00:59:01.250+01:00 CET`. `None` for UTC itself (the time in UTC
/// says it all) and for a name that is no zone.
pub fn local(t: SystemTime, zone: &str) -> Option<String> {
    let tz: chrono_tz::Tz = zone.parse().ok()?;
    if tz == chrono_tz::Tz::UTC {
        return None;
    }
    let at = chrono::DateTime::<chrono::Utc>::from(t).with_timezone(&tz);
    Some(at.format("%Y-%m-%dT%H:%M:%S%.3f%:z %Z").to_string())
}

/// A series' cadence: `every 20s`, `cron "0 3 * * *" in Europe/Berlin`.
pub fn cadence(r: &Recurrence) -> String {
    match (r.period(), r.expression()) {
        (Some(period), _) => format!("every {period:?}"),
        (None, expression) => format!("cron {:?} in {}", expression.unwrap_or(""), r.zone().unwrap_or("UTC")),
    }
}

/// A missed-run policy's name: burst, delay or skip.
pub fn missed_name(missed: MissedRuns) -> &'static str {
    match missed {
        MissedRuns::Burst => "burst",
        MissedRuns::Delay => "delay",
        MissedRuns::Skip => "skip",
    }
}

/// A series' recurrence on one line: its cadence, missed-run policy, end and runs left.
pub fn recurrence_line(t: &TaskInfo) -> Option<String> {
    let Some(r) = t.recurrence() else {
        return t.unreadable_recurrence().map(|raw| format!("a series this build cannot read: {raw}"));
    };
    let mut line = format!("{}, missed runs: {}", cadence(r), missed_name(r.missed_runs()));
    if let Some(end) = r.end() {
        let _ = write!(line, ", until {}", utc(end));
    }
    if let Some(left) = t.runs_left() {
        let _ = write!(line, ", {left} run{} left", if left == 1 { "" } else { "s" });
    }
    Some(line)
}

/// A series' next run in UTC, and beside it on the wall clock of its zone (when that is not
/// UTC): `2026-12-08T02:00:00.000Z · Europe/Berlin 2026-12-08T03:00:00.000+01:00 CET`.
pub fn next_run(t: &TaskInfo) -> Option<String> {
    let next = t.next_run()?;
    let zone = t.recurrence().and_then(Recurrence::zone);
    Some(match zone.and_then(|z| Some((z, local(next, z)?))) {
        Some((zone, local)) => format!("{} · {zone} {local}", utc(next)),
        None => utc(next),
    })
}

/// A series' cells of a table: its cadence and its next run (empty for a task that runs once).
pub fn series_cells(t: &TaskInfo) -> [String; 2] {
    let cadence = match (t.recurrence(), t.unreadable_recurrence()) {
        (Some(r), _) => cadence(r),
        (None, Some(_)) => "(unreadable)".to_string(),
        (None, None) => String::new(),
    };
    let next = if t.is_recurring() { next_run(t).unwrap_or_else(|| "none".to_string()) } else { String::new() };
    [cadence, next]
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

/// The limits by prefix as `limits --json` prints them: `[{"prefix", "rate", "per_ms",
/// "running"}]`, `null` for a part a limit does not have.
pub fn limits_json(limits: &[(String, Limit)]) -> Value {
    let shown = limits
        .iter()
        .map(|(prefix, limit)| {
            let rate = limit.rate_limit();
            serde_json::json!({
                "prefix": prefix,
                "rate": rate.map(|(n, _)| n),
                "per_ms": rate.map(|(_, per)| u64::try_from(per.as_millis()).unwrap_or(u64::MAX)),
                "running": limit.running_limit(),
            })
        })
        .collect();
    Value::Array(shown)
}

/// The limits by prefix for a person, a line each: the prefix, then its limit, in a column;
/// `no limits` when there are none.
pub fn limits_text(limits: &[(String, Limit)]) -> String {
    if limits.is_empty() {
        return "no limits\n".to_string();
    }
    let width = limits.iter().map(|(prefix, _)| prefix.chars().count()).max().unwrap_or(0);
    limits.iter().fold(String::new(), |mut out, (prefix, limit)| {
        let _ = writeln!(out, "{prefix:<width$}  {limit}");
        out
    })
}

/// The limits on the line `stats` adds for them: `  limits: "api:" 20 starts per 1s; "report:"
/// 1 running`; `None` when there are none.
pub fn limits_line(limits: &[(String, Limit)]) -> Option<String> {
    if limits.is_empty() {
        return None;
    }
    let shown: Vec<String> = limits.iter().map(|(prefix, limit)| format!("{prefix:?} {limit}")).collect();
    Some(format!("  limits: {}", shown.join("; ")))
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

/// A task for a person, one field a line, its payload last. A run of a series shows its
/// recurrence and its next run (in place of the due time while it waits: the same instant).
pub fn task_text(t: &TaskInfo, now: SystemTime) -> String {
    let (payload, encoding) = payload(t.payload());
    let mut out = String::new();
    let _ = writeln!(out, "key         {}", t.key());
    let _ = writeln!(out, "state       {}", t.state().as_str());
    let waiting = matches!(t.state(), TaskState::Waiting | TaskState::Ready);
    if !(t.is_recurring() && waiting) {
        let _ = writeln!(out, "due         {} ({})", utc(t.due()), due(t.due(), now));
    }
    if let Some(line) = recurrence_line(t) {
        let _ = writeln!(out, "recurrence  {line}");
        match (next_run(t), t.next_run()) {
            (Some(line), Some(next)) => {
                let _ = writeln!(out, "next run    {line} ({})", due(next, now));
            }
            _ => {
                let _ = writeln!(out, "next run    none after this run");
            }
        }
    }
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
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2026-11-27 23:59:01.250 UTC.
        assert_eq!(utc(UNIX_EPOCH + Duration::from_millis(1_795_823_941_250)), "2026-11-27T23:59:01.250Z");
        // A leap day.
        assert_eq!(utc(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000Z");
        // On a zone's wall clock, summer and winter; none for UTC or a name that is no zone.
        let winter = UNIX_EPOCH + Duration::from_millis(1_795_823_941_250);
        assert_eq!(local(winter, "Europe/Berlin").as_deref(), Some("2026-11-28T00:59:01.250+01:00 CET"));
        let summer = UNIX_EPOCH + Duration::from_secs(1_782_871_200); // 2026-07-01 02:00 UTC
        assert_eq!(local(summer, "Europe/Berlin").as_deref(), Some("2026-07-01T04:00:00.000+02:00 CEST"));
        assert_eq!(local(summer, "America/New_York").as_deref(), Some("2026-06-30T22:00:00.000-04:00 EDT"));
        assert_eq!((local(summer, "UTC"), local(summer, "Mars/Olympus")), (None, None));
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
    fn limits_show_a_line_each_and_as_json() {
        let limits = vec![
            ("api:".to_string(), Limit::rate(20, Duration::from_secs(1)).and(Limit::running(5))),
            ("report:".to_string(), Limit::running(1)),
            ("slow:".to_string(), Limit::rate(3, Duration::from_millis(1500))),
        ];
        assert_eq!(
            limits_text(&limits),
            "api:     20 starts per 1s, 5 running\nreport:  1 running\nslow:    3 starts per 1.5s\n"
        );
        assert_eq!(limits_text(&[]), "no limits\n");
        assert_eq!(
            limits_line(&limits).as_deref(),
            Some(r#"  limits: "api:" 20 starts per 1s, 5 running; "report:" 1 running; "slow:" 3 starts per 1.5s"#)
        );
        assert_eq!(limits_line(&[]), None);
        assert_eq!(
            limits_json(&limits),
            serde_json::json!([
                { "prefix": "api:", "rate": 20, "per_ms": 1000, "running": 5 },
                { "prefix": "report:", "rate": null, "per_ms": null, "running": 1 },
                { "prefix": "slow:", "rate": 3, "per_ms": 1500, "running": null },
            ])
        );
        assert_eq!(limits_json(&[]), serde_json::json!([]));
    }

    #[test]
    fn a_table_pads_every_column_but_the_last() {
        let rows = vec![vec!["a".to_string(), "long cell".to_string(), "x".to_string()]];
        assert_eq!(table(&["KEY", "B", "C"], &rows), "KEY  B          C\na    long cell  x\n");
    }
}
