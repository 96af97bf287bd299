//! What the wheel reads, as JSON (or any serde format), under the `serde` feature: what the
//! dashboard answers and the command line prints with `--json`, so that each field has one name.
//! The rules (times, durations, payloads, nulls) are written once, on `TaskInfo`'s `Serialize`.

use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime};

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

use super::{
    DeadTask, DurableStats, Figures, FinishedRun, ListCursor, ListPage, MinuteCounts, Outcome, TaskInfo, TaskState,
};
use crate::durable::time::unix_ms;
use crate::error::Rfc3339;
use crate::{MissedRuns, Recurrence};

/// `d` in whole milliseconds (saturating).
fn in_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `"waiting"`, `"ready"`, `"running"`, `"dead"` or `"finished"`, as [`TaskState::as_str`].
impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `"acknowledged"`, `"dead"` or `"cancelled"`, as [`Outcome::as_str`].
impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The cursor's text, as its `Display` writes it and `str::parse` reads it back.
impl Serialize for ListCursor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `{"pending", "waiting", "ready", "running", "dead", "cursor_lag_ticks", "scheduled",
/// "handed_out", "acked", "retried", "dead_lettered", "cancelled", "paused"}`: the fields of
/// the struct, [`in_flight`](DurableStats::in_flight) named `running` as its state is.
impl Serialize for DurableStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field, by name: a field added to the struct does not build until it is here.
        let DurableStats {
            pending,
            waiting,
            ready,
            in_flight,
            dead,
            cursor_lag_ticks,
            scheduled,
            handed_out,
            acked,
            retried,
            dead_lettered,
            cancelled,
            paused,
        } = *self;
        let mut m = s.serialize_struct("DurableStats", 13)?;
        m.serialize_field("pending", &pending)?;
        m.serialize_field("waiting", &waiting)?;
        m.serialize_field("ready", &ready)?;
        m.serialize_field("running", &in_flight)?;
        m.serialize_field("dead", &dead)?;
        m.serialize_field("cursor_lag_ticks", &cursor_lag_ticks)?;
        m.serialize_field("scheduled", &scheduled)?;
        m.serialize_field("handed_out", &handed_out)?;
        m.serialize_field("acked", &acked)?;
        m.serialize_field("retried", &retried)?;
        m.serialize_field("dead_lettered", &dead_lettered)?;
        m.serialize_field("cancelled", &cancelled)?;
        m.serialize_field("paused", &paused)?;
        m.end()
    }
}

/// `{"start_unix_ms", "handed_out", "acked", "failed", "dead"}`.
impl Serialize for MinuteCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let MinuteCounts { start, handed_out, acked, failed, dead } = *self;
        let mut m = s.serialize_struct("MinuteCounts", 5)?;
        m.serialize_field("start_unix_ms", &unix_ms(start))?;
        m.serialize_field("handed_out", &handed_out)?;
        m.serialize_field("acked", &acked)?;
        m.serialize_field("failed", &failed)?;
        m.serialize_field("dead", &dead)?;
        m.end()
    }
}

/// `{"minutes": [MinuteCounts, ...], "lateness": {"claimed", "p50_below_ms",
/// "p99_below_ms", "buckets": [{"below_ms", "count"}, ...]}}`: the minutes oldest first;
/// how many deliveries were claimed over them, the bound of the bucket that holds the median
/// and the 99th percentile of their lateness ([`Figures::lateness_quantile`]), and the
/// buckets that hold any, each counting the deliveries claimed less than `below_ms` after
/// their due time and no less than the bound before it. The open-ended last bucket, and a
/// quantile that falls in it, has a `below_ms` of `null`; so do the quantiles when nothing
/// was claimed.
impl Serialize for Figures {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Figures", 2)?;
        m.serialize_field("minutes", &self.minutes)?;
        m.serialize_field("lateness", &Lateness(self))?;
        m.end()
    }
}

/// A lateness bound in ms; `None` for the open-ended bucket's `Duration::MAX`.
fn bound_ms(bound: Duration) -> Option<u64> {
    (bound != Duration::MAX).then(|| in_ms(bound))
}

struct Lateness<'a>(&'a Figures);

impl Serialize for Lateness<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let figures = self.0;
        let mut m = s.serialize_struct("Lateness", 4)?;
        m.serialize_field("claimed", &figures.lateness.iter().map(|&(_, n)| n).sum::<u64>())?;
        m.serialize_field("p50_below_ms", &figures.lateness_quantile(0.5).and_then(bound_ms))?;
        m.serialize_field("p99_below_ms", &figures.lateness_quantile(0.99).and_then(bound_ms))?;
        m.serialize_field("buckets", &Buckets(&figures.lateness))?;
        m.end()
    }
}

struct Buckets<'a>(&'a [(Duration, u64)]);

impl Serialize for Buckets<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|&(bound, count)| Bucket { bound, count }))
    }
}

struct Bucket {
    bound: Duration,
    count: u64,
}

impl Serialize for Bucket {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Bucket", 2)?;
        m.serialize_field("below_ms", &bound_ms(self.bound))?;
        m.serialize_field("count", &self.count)?;
        m.end()
    }
}

/// `{"tasks": [TaskInfo, ...], "next": the cursor's text, or null at the end}`.
impl Serialize for ListPage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("ListPage", 2)?;
        m.serialize_field("tasks", &self.tasks)?;
        m.serialize_field("next", &self.next)?;
        m.end()
    }
}

/// `{"outcome", "started_unix_ms", "finished_unix_ms", "handler_ms"}`: `started_unix_ms`
/// and `handler_ms` (to the microsecond, as a fraction) `null` when the handler never
/// started or its lease ran out.
impl Serialize for FinishedRun {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let FinishedRun { outcome, started_at, finished_at, handler_duration } = *self;
        let mut m = s.serialize_struct("FinishedRun", 4)?;
        m.serialize_field("outcome", &outcome)?;
        m.serialize_field("started_unix_ms", &started_at.map(unix_ms))?;
        m.serialize_field("finished_unix_ms", &unix_ms(finished_at))?;
        m.serialize_field("handler_ms", &handler_duration.map(|d| d.as_micros() as f64 / 1000.0))?;
        m.end()
    }
}

/// An object of the fields `key`, `state`, `due_unix_ms`, `overdue_ms`, `attempt`,
/// `max_attempts`, `backoff_ms`, `last_error`, `worker`, `claimed_unix_ms`, `finished`,
/// `recurring`, `recurrence`, `payload`, `payload_encoding` and `payload_bytes`, each what the
/// accessor of its name reads ([`overdue_by`](TaskInfo::overdue_by) for `overdue_ms`,
/// [`claimed_at`](TaskInfo::claimed_at) for `claimed_unix_ms`, [`is_recurring`] for
/// `recurring`), in the form that every type of the durable wheel serialises to:
///
/// - times are whole milliseconds since the Unix epoch on Redis's clock, in fields named
///   `*_unix_ms`; durations are milliseconds, in fields named `*_ms`;
/// - a [`TaskState`] or an [`Outcome`] is its lower-case name (`"waiting"`, `"cancelled"`),
///   a [`ListCursor`] its text (as its `Display` writes it);
/// - a payload is three fields: `payload`, its text when it is UTF-8, else its bytes in hex
///   (two lower-case digits a byte); `payload_encoding`, `"json"` when the whole payload is a
///   JSON document (the text is then that JSON, as it was scheduled: `fromjson` in jq, or
///   `JSON.parse`, reads it), `"text"` for other UTF-8, or `"hex"`; and `payload_bytes`;
/// - what a value does not have is `null`, never left out, so that every object of a type
///   has the same fields.
///
/// `finished` is a [`FinishedRun`] or `null`. `recurrence` is `null` for a task that runs
/// once, else the series it is a run of, as [`recurrence`](TaskInfo::recurrence) and its kin
/// read it: `cadence` (`"every 20s"`, `"cron \"0 3 * * *\" in Europe/Berlin"`), `period_ms`,
/// `expression` and `zone` (each `null` where the cadence has none), `end_unix_ms`, `missed`
/// (`"burst"`, `"delay"` or `"skip"`), `runs_left` (`null`: no limit), `next_run_unix_ms`
/// ([`next_run`](TaskInfo::next_run)), `next_run_utc` (RFC 3339), `next_run_local` (RFC 3339
/// on the zone's wall clock, with its abbreviation: `"2026-12-08T03:00:00.000+01:00 CET"`;
/// `null` in UTC), and `unreadable`, the stored text of a recurrence this build cannot read
/// ([`unreadable_recurrence`](TaskInfo::unreadable_recurrence)), the fields taken from the
/// recurrence then `null`.
///
/// [`is_recurring`]: TaskInfo::is_recurring
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::{durable::DurableScheduler, Error};
/// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
/// if let Some(task) = timers.get("order-42:review").await? {
///     let json = serde_json::to_value(&task).expect("a task serialises");
///     println!("{} is {}, due at {} ms", json["key"], json["state"], json["due_unix_ms"]);
/// }
/// # Ok(()) }
/// ```
impl Serialize for TaskInfo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field, by name: a field added to the struct does not build until it is
        // shown here or said to be left out.
        let TaskInfo {
            key,
            payload,
            due,
            attempt,
            state,
            last_error,
            read_at: _, // in overdue_ms and next_run
            claim: _,   // worker and claimed_unix_ms
            finished,
            options: _, // max_attempts and backoff_ms
            series: _,  // recurring and recurrence
        } = self;
        let mut m = s.serialize_struct("TaskInfo", 16)?;
        m.serialize_field("key", key)?;
        m.serialize_field("state", state)?;
        m.serialize_field("due_unix_ms", &unix_ms(*due))?;
        m.serialize_field("overdue_ms", &self.overdue_by().map(in_ms))?;
        m.serialize_field("attempt", attempt)?;
        m.serialize_field("max_attempts", &self.max_attempts())?;
        m.serialize_field("backoff_ms", &self.backoff().map(in_ms))?;
        m.serialize_field("last_error", last_error)?;
        m.serialize_field("worker", &self.worker())?;
        m.serialize_field("claimed_unix_ms", &self.claimed_at().map(unix_ms))?;
        m.serialize_field("finished", finished)?;
        m.serialize_field("recurring", &self.is_recurring())?;
        m.serialize_field("recurrence", &self.is_recurring().then_some(Series(self)))?;
        payload_fields(&mut m, payload)?;
        m.end()
    }
}

/// An object of the fields `key`, `attempts`, `last_error`, `died_unix_ms`, `due_unix_ms`,
/// `payload`, `payload_encoding` and `payload_bytes`, in the form
/// [`TaskInfo`'s](TaskInfo#impl-Serialize-for-TaskInfo) JSON describes.
impl Serialize for DeadTask {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let DeadTask { key, payload, attempts, last_error, died, due } = self;
        let mut m = s.serialize_struct("DeadTask", 8)?;
        m.serialize_field("key", key)?;
        m.serialize_field("attempts", attempts)?;
        m.serialize_field("last_error", last_error)?;
        m.serialize_field("died_unix_ms", &unix_ms(*died))?;
        m.serialize_field("due_unix_ms", &unix_ms(*due))?;
        payload_fields(&mut m, payload)?;
        m.end()
    }
}

/// The payload's three fields: `payload`, `payload_encoding`, `payload_bytes`.
fn payload_fields<M: SerializeStruct>(m: &mut M, payload: &[u8]) -> Result<(), M::Error> {
    match std::str::from_utf8(payload) {
        Ok(text) => {
            let json = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
            m.serialize_field("payload", text)?;
            m.serialize_field("payload_encoding", if json { "json" } else { "text" })?;
        }
        Err(_) => {
            m.serialize_field("payload", &Hex(payload))?;
            m.serialize_field("payload_encoding", "hex")?;
        }
    }
    m.serialize_field("payload_bytes", &payload.len())
}

/// Bytes as lower-case hex digits, written as they are serialised.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl Serialize for Hex<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The series a task is a run of (see `TaskInfo`'s `Serialize`).
struct Series<'a>(&'a TaskInfo);

impl Serialize for Series<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let task = self.0;
        let r = task.recurrence();
        let (expression, zone) = cron_of(r);
        let next = task.next_run();
        let mut m = s.serialize_struct("Recurrence", 11)?;
        m.serialize_field("cadence", &r.map(|r| Cadence(r, expression, zone)))?;
        m.serialize_field("period_ms", &r.and_then(Recurrence::period).map(in_ms))?;
        m.serialize_field("expression", &expression)?;
        m.serialize_field("zone", &zone)?;
        m.serialize_field("end_unix_ms", &r.and_then(Recurrence::end).map(unix_ms))?;
        m.serialize_field("missed", &r.map(|r| missed_name(r.missed_runs())))?;
        m.serialize_field("runs_left", &task.runs_left())?;
        m.serialize_field("next_run_unix_ms", &next.map(unix_ms))?;
        m.serialize_field("next_run_utc", &next.map(|n| Rfc3339(n).to_string()))?;
        m.serialize_field("next_run_local", &next.zip(zone).and_then(|(n, z)| local(n, z)))?;
        m.serialize_field("unreadable", &task.unreadable_recurrence())?;
        m.end()
    }
}

/// A recurrence's cadence alone (its `Display` adds its end and limit): `every 20s`,
/// `cron "0 3 * * *" in Europe/Berlin`.
struct Cadence<'a>(&'a Recurrence, Option<&'a str>, Option<&'a str>);

impl Serialize for Cadence<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::new();
        let _ = match (self.0.period(), self.1) {
            (Some(period), _) => write!(text, "every {period:?}"),
            (None, expression) => {
                write!(text, "cron {:?} in {}", expression.unwrap_or(""), self.2.unwrap_or("UTC"))
            }
        };
        s.serialize_str(&text)
    }
}

fn missed_name(missed: MissedRuns) -> &'static str {
    match missed {
        MissedRuns::Burst => "burst",
        MissedRuns::Delay => "delay",
        MissedRuns::Skip => "skip",
    }
}

/// The expression and zone of a cron recurrence.
#[cfg(feature = "cron")]
fn cron_of(r: Option<&Recurrence>) -> (Option<&str>, Option<&str>) {
    r.map_or((None, None), |r| (r.expression(), r.zone()))
}

/// Without the `cron` feature no recurrence read has an expression (a cron series is
/// unreadable).
#[cfg(not(feature = "cron"))]
fn cron_of(_: Option<&Recurrence>) -> (Option<&str>, Option<&str>) {
    (None, None)
}

/// `t` on the wall clock of the IANA zone `zone`, as RFC 3339 with the zone's offset and
/// abbreviation: `2026-11-28T00:59:01.250+01:00 CET`. `None` for UTC itself (the time in
/// UTC says it all) and for a name that is no zone.
#[cfg(feature = "cron")]
fn local(t: SystemTime, zone: &str) -> Option<String> {
    let tz: chrono_tz::Tz = zone.parse().ok()?;
    if tz == chrono_tz::Tz::UTC {
        return None;
    }
    let at = chrono::DateTime::<chrono::Utc>::from(t).with_timezone(&tz);
    Some(at.format("%Y-%m-%dT%H:%M:%S%.3f%:z %Z").to_string())
}

/// Without the `cron` feature no series has a zone.
#[cfg(not(feature = "cron"))]
fn local(_: SystemTime, _: &str) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::durable::series::{read_series, Series};
    use crate::durable::time::from_unix_ms;
    use crate::durable::TaskOptions;

    /// 2027-01-15T08:00:00.000Z.
    const T0: u64 = 1_800_000_000_000;

    /// A task read in `state` a second and a half after it fell due at `T0`.
    fn task(state: TaskState, payload: &[u8], series: Option<Series>) -> TaskInfo {
        TaskInfo {
            key: "order-42:review".into(),
            payload: payload.to_vec(),
            due: from_unix_ms(T0),
            attempt: 0,
            state,
            last_error: None,
            read_at: from_unix_ms(T0 + 1_500),
            claim: None,
            finished: None,
            options: TaskOptions::new(),
            series,
        }
    }

    fn to_json(value: &impl serde::Serialize) -> Value {
        serde_json::to_value(value).expect("serialises")
    }

    #[test]
    fn a_one_shot_task_serialises_with_its_times_and_payload() {
        let mut ready = task(TaskState::Ready, br#"{"order": 42, "lines": [1, 2]}"#, None);
        ready.attempt = 2;
        ready.last_error = Some("card declined".into());
        assert_eq!(
            to_json(&ready),
            json!({
                "key": "order-42:review",
                "state": "ready",
                "due_unix_ms": T0,
                "overdue_ms": 1_500,
                "attempt": 2,
                "max_attempts": null,
                "backoff_ms": null,
                "last_error": "card declined",
                "worker": null,
                "claimed_unix_ms": null,
                "finished": null,
                "recurring": false,
                "recurrence": null,
                // The JSON as it was scheduled, spaces and all.
                "payload": r#"{"order": 42, "lines": [1, 2]}"#,
                "payload_encoding": "json",
                "payload_bytes": 30,
            })
        );

        // Running, as list reads it: its worker and claim; not overdue.
        let mut running = task(TaskState::Running, b"plain words", None);
        running.claim = Some((from_unix_ms(T0 + 20), Some("node-7".into())));
        let shown = to_json(&running);
        assert_eq!(
            (&shown["state"], &shown["overdue_ms"], &shown["worker"], &shown["claimed_unix_ms"]),
            (&json!("running"), &Value::Null, &json!("node-7"), &json!(T0 + 20))
        );
        assert_eq!((&shown["payload"], &shown["payload_encoding"]), (&json!("plain words"), &json!("text")));

        // A finished run: how it went, its handler's time to the microsecond.
        let mut run = task(TaskState::Finished, &[0xff, 0x00, 0x7f], None);
        run.attempt = 1;
        run.finished = Some(FinishedRun {
            outcome: Outcome::Cancelled,
            started_at: Some(from_unix_ms(T0 + 30)),
            finished_at: from_unix_ms(T0 + 50),
            handler_duration: Some(Duration::from_micros(12_345)),
        });
        let shown = to_json(&run);
        assert_eq!(
            shown["finished"],
            json!({
                "outcome": "cancelled",
                "started_unix_ms": T0 + 30,
                "finished_unix_ms": T0 + 50,
                "handler_ms": 12.345,
            })
        );
        assert_eq!(
            (&shown["payload"], &shown["payload_encoding"], &shown["payload_bytes"]),
            (&json!("ff007f"), &json!("hex"), &json!(3))
        );
        let empty = to_json(&task(TaskState::Waiting, b"", None));
        assert_eq!((&empty["payload"], &empty["payload_encoding"]), (&json!(""), &json!("text")));
    }

    #[test]
    fn a_series_serialises_with_its_recurrence_and_next_run() {
        let every = task(TaskState::Waiting, b"", read_series(20_000, 3, b'1', ""));
        let shown = to_json(&every);
        assert_eq!(shown["recurring"], true);
        assert_eq!(
            shown["recurrence"],
            json!({
                "cadence": "every 20s",
                "period_ms": 20_000,
                "expression": null,
                "zone": null,
                "end_unix_ms": null,
                "missed": "delay",
                "runs_left": 3,
                "next_run_unix_ms": T0,
                "next_run_utc": "2027-01-15T08:00:00.000Z",
                "next_run_local": null,
                "unreadable": null,
            })
        );
        // Running: the next run is the one after it; with an end.
        let ending = read_series(0, -1, b'2', &format!("{} every 20000", T0 + 3_600_000));
        let r = to_json(&task(TaskState::Running, b"", ending))["recurrence"].clone();
        assert_eq!(
            (&r["next_run_unix_ms"], &r["end_unix_ms"], &r["missed"], &r["runs_left"]),
            (&json!(T0 + 20_000), &json!(T0 + 3_600_000), &json!("skip"), &Value::Null)
        );
        // A recurrence this build cannot read: its text, and nothing taken from it.
        let odd = to_json(&task(TaskState::Waiting, b"", read_series(0, -1, b'2', "12 every x")))["recurrence"].clone();
        assert_eq!(
            (&odd["unreadable"], &odd["cadence"], &odd["missed"]),
            (&json!("12 every x"), &Value::Null, &Value::Null)
        );
        assert_eq!(odd["next_run_unix_ms"], T0);
        #[cfg(feature = "cron")]
        {
            let cron = read_series(0, -1, b'2', "0 cron Europe/Berlin 0 3 * * *");
            let r = to_json(&task(TaskState::Waiting, b"", cron))["recurrence"].clone();
            assert_eq!(r["cadence"], "cron \"0 3 * * *\" in Europe/Berlin");
            assert_eq!((&r["expression"], &r["zone"]), (&json!("0 3 * * *"), &json!("Europe/Berlin")));
            assert_eq!(r["next_run_local"], "2027-01-15T09:00:00.000+01:00 CET");
        }
    }

    #[test]
    fn stats_figures_pages_and_dead_letters_serialise() {
        let stats = DurableStats {
            pending: 6,
            waiting: 3,
            ready: 2,
            in_flight: 1,
            dead: 4,
            cursor_lag_ticks: 1,
            scheduled: 20,
            handed_out: 15,
            acked: 9,
            retried: 2,
            dead_lettered: 4,
            cancelled: 5,
            paused: true,
        };
        assert_eq!(
            to_json(&stats),
            json!({
                "pending": 6, "waiting": 3, "ready": 2, "running": 1, "dead": 4, "cursor_lag_ticks": 1,
                "scheduled": 20, "handed_out": 15, "acked": 9, "retried": 2, "dead_lettered": 4,
                "cancelled": 5, "paused": true,
            })
        );

        let page = ListPage {
            tasks: vec![task(TaskState::Dead, b"x", None)],
            next: Some(ListCursor { state: TaskState::Dead, score: 7, key: "a:b".into() }),
        };
        let shown = to_json(&page);
        assert_eq!(shown["next"], "dead:7:a:b");
        assert_eq!(shown["tasks"], json!([to_json(&page.tasks[0])]));
        assert_eq!(shown["tasks"][0]["state"], "dead");
        assert_eq!(to_json(&ListPage { tasks: Vec::new(), next: None }), json!({ "tasks": [], "next": null }));

        let figures = Figures {
            minutes: vec![MinuteCounts { start: from_unix_ms(T0), handed_out: 4, acked: 1, failed: 3, dead: 2 }],
            lateness: vec![(Duration::from_millis(1), 2), (Duration::from_millis(4), 1), (Duration::MAX, 1)],
        };
        assert_eq!(
            to_json(&figures),
            json!({
                "minutes": [{ "start_unix_ms": T0, "handed_out": 4, "acked": 1, "failed": 3, "dead": 2 }],
                "lateness": {
                    "claimed": 4,
                    "p50_below_ms": 1,
                    "p99_below_ms": null,
                    "buckets": [
                        { "below_ms": 1, "count": 2 },
                        { "below_ms": 4, "count": 1 },
                        { "below_ms": null, "count": 1 },
                    ],
                },
            })
        );

        let letter = DeadTask {
            key: "payment-1".into(),
            payload: b"[1,2]".to_vec(),
            attempts: 3,
            last_error: "card declined".into(),
            died: from_unix_ms(T0 + 9),
            due: from_unix_ms(T0),
        };
        assert_eq!(
            to_json(&letter),
            json!({
                "key": "payment-1", "attempts": 3, "last_error": "card declined", "died_unix_ms": T0 + 9,
                "due_unix_ms": T0, "payload": "[1,2]", "payload_encoding": "json", "payload_bytes": 5,
            })
        );
    }
}
