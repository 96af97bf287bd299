//! The `timewheel` binary against a real redis-server and against a SQLite file (the embedded
//! store, which the binary opens beside the test's own process): every subcommand, its `--json`
//! parsed back and checked against what the library reads, and its exit codes. The tests on
//! Redis skip (with a note) where no redis-server is installed; those on SQLite always run.

#[path = "../../tests/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use serde_json::Value;
use tokio_timewheel::durable::{DurableScheduler, Task};

const WHEEL: &str = "cli-orders";

/// Runs `timewheel --url URL --wheel WHEEL ARGS...`.
fn timewheel(url: &str, wheel: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .args(["--url", url, "--wheel", wheel, "--connect-timeout", "10"])
        .args(args)
        .output()
        .expect("the timewheel binary runs")
}

/// Runs it with `--json`, checks it exited with `code`, and parses what it printed.
fn json(url: &str, args: &[&str], code: i32) -> Value {
    let out = timewheel(url, WHEEL, &[&["--json"], args].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(code),
        "timewheel {args:?}: stdout {stdout}, stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("timewheel {args:?} printed no JSON ({e}): {stdout}"))
}

/// Runs it for a person, checks the exit code, and gives back stdout and stderr.
fn text(url: &str, wheel: &str, args: &[&str], code: i32) -> (String, String) {
    let out = timewheel(url, wheel, args);
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    assert_eq!(out.status.code(), Some(code), "timewheel {args:?}: stdout {stdout}, stderr {stderr}");
    (stdout, stderr)
}

async fn wheel(url: &str) -> DurableScheduler {
    DurableScheduler::builder(url, WHEEL)
        .tick(Duration::from_millis(50))
        .max_attempts(1)
        .connect()
        .await
        .expect("the test wheel opens")
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where a test's wheel lives: a redis-server of its own, or a SQLite file in a temp directory.
enum Store {
    Redis(RedisServer),
    Sqlite(tempfile::TempDir),
}

impl Store {
    /// A redis-server; `None` (with a note) where none is installed.
    fn redis() -> Option<Store> {
        RedisServer::start().map(Store::Redis)
    }

    /// A SQLite file, made by the first `connect`, in a temp directory of its own.
    fn sqlite() -> Store {
        Store::Sqlite(tempfile::Builder::new().prefix("timewheel-cli-").tempdir().expect("a temp dir"))
    }

    fn url(&self) -> String {
        match self {
            Store::Redis(server) => server.url(),
            Store::Sqlite(dir) => format!("sqlite:{}", dir.path().join("orders.db").display()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_reads_and_acts_as_the_library_does() {
    let Some(store) = Store::redis() else { return };
    every_subcommand(&store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_on_a_sqlite_file() {
    let store = Store::sqlite();
    every_subcommand(&store.url()).await;
}

async fn every_subcommand(url: &str) {
    let url = url.to_string();
    let timers = wheel(&url).await;

    // Three waiting tasks: JSON, text and binary payloads.
    timers.schedule("order:1", Duration::from_secs(3600), br#"{"id":1,"total":9.5}"#.to_vec()).await.unwrap();
    timers.schedule("order:2", Duration::from_secs(7200), b"plain text".to_vec()).await.unwrap();
    timers.schedule("order:3", Duration::from_secs(10_800), vec![0xff, 0x00, 0x7f]).await.unwrap();

    // stats
    let stats = json(&url, &["stats"], 0);
    assert_eq!(stats["wheel"], WHEEL);
    assert_eq!(stats["pending"], 3);
    assert_eq!(stats["waiting"], 3);
    assert_eq!(stats["scheduled"], 3);
    assert_eq!((&stats["running"], &stats["cancelled"]), (&serde_json::json!(0), &serde_json::json!(0)), "{stats}");
    // The library's own JSON of the stats, the wheel's name beside it.
    let mut want = serde_json::to_value(timers.stats().await.unwrap()).unwrap();
    want["wheel"] = WHEEL.into();
    want["cursor_lag_ticks"] = stats["cursor_lag_ticks"].clone();
    assert_eq!(stats, want);
    let (out, _) = text(&url, WHEEL, &["stats"], 0);
    assert!(out.contains("pending") && out.contains("(waiting 3, ready 0, running 0)"), "{out}");

    // get: each payload as its kind, a missing key exits 1
    let one = json(&url, &["get", "order:1"], 0);
    assert_eq!(one["state"], "waiting");
    assert_eq!(one["payload_encoding"], "json");
    // The JSON payload as it was scheduled, as text.
    assert_eq!(one["payload"], r#"{"id":1,"total":9.5}"#);
    let payload: Value = serde_json::from_str(one["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["total"], 9.5);
    assert_eq!(json(&url, &["get", "order:2"], 0)["payload"], "plain text");
    let binary = json(&url, &["get", "order:3"], 0);
    assert_eq!((binary["payload_encoding"].as_str(), binary["payload"].as_str()), (Some("hex"), Some("ff007f")));
    let info = timers.get("order:1").await.unwrap().unwrap();
    let due_ms = info.due().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    assert_eq!(one["due_unix_ms"].as_u64(), Some(due_ms));
    assert_eq!(json(&url, &["get", "order:none"], 1), Value::Null);
    let (out, _) = text(&url, WHEEL, &["get", "order:1"], 0);
    assert!(out.contains("\"total\": 9.5") && out.contains("state       waiting"), "{out}");

    // due-next: by due time, with a limit
    let due = json(&url, &["due-next", "--limit", "2"], 0);
    let keys: Vec<&str> = due["tasks"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["order:1", "order:2"]);
    let next = due["next"].as_str().expect("a cursor: there is more");
    let rest = json(&url, &["due-next", "--limit", "2", "--after", next], 0);
    let keys: Vec<&str> = rest["tasks"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
    assert_eq!((keys, &rest["next"]), (vec!["order:3"], &Value::Null));
    let (out, _) = text(&url, WHEEL, &["due-next"], 0);
    assert!(out.starts_with("KEY") && out.contains("order:3") && out.contains("0xff007f"), "{out}");

    // cancel: true once, then nothing to act on
    assert_eq!(json(&url, &["cancel", "order:3"], 0)["done"], true);
    assert!(!timers.contains("order:3").await.unwrap());
    assert_eq!(json(&url, &["cancel", "order:3"], 1)["done"], false);

    // dead: three letters from a handler that always fails (one attempt each)
    for i in 0..3 {
        timers.schedule(format!("bad:{i}"), Duration::ZERO, format!("bad {i}").into_bytes()).await.unwrap();
    }
    let worker = timers.run(|_task| async { Err::<(), _>("the payment service said no") });
    wait_for("three dead letters", async || timers.stats().await.unwrap().dead == 3).await;
    worker.shutdown().await;
    let dead = json(&url, &["dead"], 0);
    let letters = dead.as_array().unwrap();
    assert_eq!(letters.len(), 3);
    assert!(letters.iter().all(|d| d["last_error"] == "the payment service said no" && d["attempts"] == 1));
    let oldest = &timers.dead_letters(1).await.unwrap()[0];
    assert_eq!(letters[0], serde_json::to_value(oldest).unwrap(), "a dead letter's own JSON");
    for letter in letters {
        let key = letter["key"].as_str().unwrap();
        assert_eq!(letter["payload"], format!("bad {}", &key[4..]), "{letter}");
        assert_eq!((&letter["payload_encoding"], &letter["payload_bytes"]), (&Value::from("text"), &Value::from(5)));
    }
    let (out, _) = text(&url, WHEEL, &["dead"], 0);
    assert!(out.contains("the payment service said no") && out.contains("bad:2"), "{out}");

    assert_eq!(json(&url, &["dead", "--delete", "bad:0"], 0)["done"], true);
    assert_eq!(json(&url, &["dead", "--delete", "bad:0"], 1)["done"], false);
    assert_eq!(json(&url, &["dead", "--requeue", "bad:1"], 0)["done"], true);
    assert!(timers.contains("bad:1").await.unwrap(), "a requeued letter is pending again");
    assert_eq!(json(&url, &["dead", "--requeue-all"], 0)["requeued"], 1);
    assert!(timers.contains("bad:2").await.unwrap());
    assert_eq!(json(&url, &["dead", "--requeue-all"], 1)["requeued"], 0);
    assert_eq!(timers.stats().await.unwrap().dead, 0);

    // watch: two refreshes, each a JSON line
    let out = timewheel(&url, WHEEL, &["--json", "watch", "--interval", "0.2", "--count", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), 2);
    let pending = timers.stats().await.unwrap().pending;
    assert!(lines.iter().all(|l| l["pending"] == pending), "{lines:?}");
    assert_eq!(lines[0]["due_per_10s_next_minute"].as_array().map(Vec::len), Some(6));
    assert!(lines.iter().all(|l| l["wheel"] == WHEEL && l["cancelled"].is_u64()), "{lines:?}");
    // The wheel-wide figures: the three deliveries that failed and died, whichever process ran them.
    let figures = &lines[1]["figures"];
    let minutes = figures["minutes"].as_array().expect("minutes");
    assert_eq!(minutes.len(), 10);
    let total = |what: &str| minutes.iter().map(|m| m[what].as_u64().unwrap()).sum::<u64>();
    assert_eq!((total("handed_out"), total("failed"), total("dead")), (3, 3, 3));
    assert_eq!(figures["lateness"]["claimed"], 3, "{figures}");
    assert!(figures["lateness"]["p99_below_ms"].as_f64().is_some(), "{figures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_errors_say_what_went_wrong() {
    let Some(store) = Store::redis() else { return };
    let url = store.url();

    // A wheel nobody opened is refused (4), and not created.
    let (_, err) = text(&url, "no-such-wheel", &["stats"], 4);
    assert!(err.contains("no wheel named \"no-such-wheel\""), "{err}");
    let (_, err) = text(&url, "no-such-wheel", &["stats"], 4);
    assert!(err.contains("no wheel named"), "the first call created nothing: {err}");

    // Nothing listening: 3, at once, with what to check.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let (_, err) = text(&format!("redis://127.0.0.1:{closed}/"), WHEEL, &["stats"], 3);
    assert!(err.contains("--url"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "a refused connection is reported at once");

    // Usage errors are clap's: 2.
    let _ = wheel(&url).await;
    text(&url, WHEEL, &["dead", "--requeue", "a", "--delete", "b"], 2);
    text(&url, WHEEL, &["no-such-command"], 2);
    let (_, err) = text(&url, WHEEL, &["watch", "--interval", "0"], 4);
    assert!(err.contains("--interval"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pause_resume_and_cancel_running() {
    let Some(store) = Store::redis() else { return };
    list_pause_resume(&store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pause_resume_and_cancel_running_on_a_sqlite_file() {
    let store = Store::sqlite();
    list_pause_resume(&store.url()).await;
}

async fn list_pause_resume(url: &str) {
    let url = url.to_string();
    let timers = wheel(&url).await;

    // list: 120 waiting tasks, paged by the cursor the command prints, each key once.
    let tasks: Vec<_> = (0..120).map(|i| (format!("w:{i:03}"), Duration::from_secs(600 + i), Vec::new())).collect();
    timers.schedule_many(tasks).await.unwrap().into_iter().for_each(|r| r.expect("scheduled"));
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["list", "waiting", "--limit", "50"];
        if let Some(cursor) = &after {
            args.extend(["--after", cursor.as_str()]);
        }
        let page = json(&url, &args, 0);
        seen.extend(page["tasks"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap().to_string()));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..120).map(|i| format!("w:{i:03}")).collect();
    assert_eq!(seen, expected, "every waiting task once, by due time");
    let all = json(&url, &["list", "waiting", "--limit", "7", "--all"], 0);
    assert_eq!(all["tasks"].as_array().unwrap().len(), 120);
    let (_, err) = text(&url, WHEEL, &["list", "waiting", "--after", "nonsense"], 4);
    assert!(err.contains("--after"), "{err}");

    // pause: stats say so and nothing is handed out; resume hands it out.
    assert_eq!(json(&url, &["pause"], 0)["done"], true);
    assert!(timers.is_paused().await.unwrap());
    assert_eq!(json(&url, &["stats"], 0)["paused"], true);
    let (out, _) = text(&url, WHEEL, &["stats"], 0);
    assert!(out.contains("PAUSED"), "{out}");
    timers.schedule("now", Duration::ZERO, Vec::new()).await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = {
        let started = started.clone();
        timers.run(move |task: Task| {
            let started = started.clone();
            async move {
                if task.key() == "long" {
                    started.notify_one();
                    task.cancel_token().cancelled().await;
                }
                Ok::<(), String>(())
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(timers.stats().await.unwrap().handed_out, 0, "nothing is handed out while paused");
    assert_eq!(json(&url, &["resume"], 0)["done"], true);
    wait_for("the ready task handed out after resume", async || timers.stats().await.unwrap().acked == 1).await;

    // cancel-running: a running handler's token is cancelled and the task ends as cancelled.
    assert_eq!(json(&url, &["cancel-running", "long"], 1)["done"], false, "not running: nothing to act on");
    timers.schedule("long", Duration::ZERO, Vec::new()).await.unwrap();
    started.notified().await;
    let running = json(&url, &["list", "running"], 0);
    assert_eq!(running["tasks"][0]["key"], "long");
    assert!(running["tasks"][0]["worker"].is_string(), "{running}");
    assert_eq!(json(&url, &["cancel-running", "long"], 0)["done"], true);
    wait_for("the cancelled task gone", async || !timers.contains("long").await.unwrap()).await;
    worker.shutdown().await;
    assert_eq!(timers.stats().await.unwrap().dead, 0, "ended as cancelled, not dead");

    // list finished: the history, newest first, as the library lists it; paged by the cursor
    // the command prints.
    let finished = json(&url, &["list", "finished"], 0);
    let runs = finished["tasks"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str, u64)> = runs
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap(),
                r["state"].as_str().unwrap(),
                r["finished"]["outcome"].as_str().unwrap(),
                r["attempt"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(summary, [("long", "finished", "cancelled", 1), ("now", "finished", "acknowledged", 1)], "{finished}");
    let listed = timers.list(tokio_timewheel::durable::TaskState::Finished, None, 10).await.unwrap();
    for (row, run) in runs.iter().zip(listed.tasks()) {
        let end = run.finished().unwrap().finished_at();
        let shown = &row["finished"];
        assert_eq!(
            shown["finished_unix_ms"].as_u64(),
            Some(end.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64)
        );
        assert!(shown["handler_ms"].as_f64().is_some() && shown["started_unix_ms"].as_u64().is_some(), "{row}");
        assert_eq!(*row, serde_json::to_value(run).unwrap(), "a finished run's own JSON");
    }
    let first = json(&url, &["list", "finished", "--limit", "1"], 0);
    let next = first["next"].as_str().expect("a cursor").to_owned();
    let second = json(&url, &["list", "finished", "--limit", "1", "--after", &next], 0);
    assert_eq!(second["tasks"][0]["key"], "now");
    let (out, _) = text(&url, WHEEL, &["list", "finished"], 0);
    assert!(out.starts_with("KEY") && out.contains("OUTCOME") && out.contains("cancelled"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_list_show_a_series_and_run_now_runs_a_waiting_task() {
    let Some(store) = Store::redis() else { return };
    series_and_run_now(&store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_list_show_a_series_and_run_now_on_a_sqlite_file() {
    let store = Store::sqlite();
    series_and_run_now(&store.url()).await;
}

async fn series_and_run_now(url: &str) {
    use tokio_timewheel::Recurrence;

    let url = url.to_string();
    let timers = wheel(&url).await;

    // A cron series in Berlin: its expression and zone, its next run in UTC and on Berlin's clock.
    let nightly = Recurrence::cron("0 3 * * *").unwrap().in_tz("Europe/Berlin").unwrap();
    timers.schedule_recurring("report:nightly", nightly, b"all".to_vec()).await.unwrap();
    let due = timers.get("report:nightly").await.unwrap().unwrap().due();
    let due_ms = due.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let got = json(&url, &["get", "report:nightly"], 0);
    assert_eq!(got["recurring"], true, "{got}");
    let r = &got["recurrence"];
    assert_eq!((r["expression"].as_str(), r["zone"].as_str()), (Some("0 3 * * *"), Some("Europe/Berlin")), "{got}");
    assert_eq!(
        (r["cadence"].as_str(), r["missed"].as_str()),
        (Some("cron \"0 3 * * *\" in Europe/Berlin"), Some("skip"))
    );
    assert_eq!((r["period_ms"].is_null(), r["runs_left"].is_null(), r["end_unix_ms"].is_null()), (true, true, true));
    assert_eq!(r["next_run_unix_ms"].as_u64(), Some(due_ms), "a waiting series runs next at its due time");
    let utc = r["next_run_utc"].as_str().unwrap();
    assert!(utc.ends_with(":00:00.000Z") && (utc.contains("T01:") || utc.contains("T02:")), "03:00 in Berlin: {utc}");
    let local = r["next_run_local"].as_str().unwrap();
    assert!(local.contains("T03:00:00.000+01:00 CET") || local.contains("T03:00:00.000+02:00 CEST"), "{local}");
    let (out, _) = text(&url, WHEEL, &["get", "report:nightly"], 0);

    assert!(out.contains("recurrence  cron \"0 3 * * *\" in Europe/Berlin, missed runs: skip"), "{out}");
    assert!(out.contains(&format!("next run    {utc} · Europe/Berlin {local} (in ")), "{out}");
    assert!(!out.contains("\ndue "), "a waiting series shows its next run, not the same time twice: {out}");

    // A fixed rate: `every 20s`, no local time; a one-shot task has no series.
    timers.schedule_recurring("sync", Recurrence::every(Duration::from_secs(20)).limit(4), Vec::new()).await.unwrap();
    let (out, _) = text(&url, WHEEL, &["get", "sync"], 0);
    assert!(out.contains("recurrence  every 20s, missed runs: skip, 4 runs left"), "{out}");
    let got = json(&url, &["get", "sync"], 0);
    assert_eq!(
        (got["recurrence"]["period_ms"].as_u64(), got["recurrence"]["next_run_local"].is_null()),
        (Some(20_000), true)
    );
    timers.schedule("once", Duration::from_secs(3600), Vec::new()).await.unwrap();
    let once = json(&url, &["get", "once"], 0);
    assert_eq!((&once["recurring"], &once["recurrence"]), (&Value::Bool(false), &Value::Null), "{once}");
    let (out, _) = text(&url, WHEEL, &["get", "once"], 0);
    assert!(out.contains("due ") && !out.contains("recurrence"), "{out}");

    // list: a page with a series shows its recurrence and next run.
    let past = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let overdue = Recurrence::every(Duration::from_secs(60)).starting(past);
    timers.schedule_recurring("overdue", overdue, Vec::new()).await.unwrap();
    let ready = json(&url, &["list", "ready"], 0);
    assert_eq!(ready["tasks"][0]["recurrence"]["period_ms"], 60_000, "{ready}");
    let (out, _) = text(&url, WHEEL, &["list", "ready"], 0);
    assert!(out.starts_with("KEY") && out.contains("RECURRENCE") && out.contains("every 60s"), "{out}");
    timers.cancel("overdue").await.unwrap();

    // run-now: a missing key, then a waiting task made due now and run.
    assert_eq!(json(&url, &["run-now", "nobody"], 1), serde_json::json!({ "done": false, "reason": "missing" }));
    let (_, err) = text(&url, WHEEL, &["run-now", "nobody"], 1);
    assert!(err.contains("no task \"nobody\""), "{err}");
    let (out, _) = text(&url, WHEEL, &["run-now", "once"], 0);
    assert!(out.contains("\"once\" is due now"), "{out}");
    let moved = timers.get("once").await.unwrap().unwrap();
    assert!(moved.due() <= std::time::SystemTime::now() + Duration::from_secs(1), "due now: {:?}", moved.due());
    let ran = json(&url, &["run-now", "report:nightly"], 0);
    assert_eq!(ran["done"], true, "{ran}");
    let started = Arc::new(tokio::sync::Notify::new());
    let worker = {
        let started = started.clone();
        timers.run(move |task: Task| {
            let started = started.clone();
            async move {
                if task.key() == "long" {
                    started.notify_one();
                    task.cancel_token().cancelled().await;
                }
                Ok::<(), String>(())
            }
        })
    };
    wait_for("the task made due now run", async || !timers.contains("once").await.unwrap()).await;
    // The series ran now and waits for its next 03:00 again.
    wait_for("the series' run now ran", async || {
        timers.get("report:nightly").await.unwrap().is_some_and(|t| t.due() == due && t.attempt() == 0)
    })
    .await;

    // A running task is left alone; a dead letter is pointed at `dead --requeue`.
    timers.schedule("long", Duration::ZERO, Vec::new()).await.unwrap();
    started.notified().await;
    assert_eq!(json(&url, &["run-now", "long"], 1)["reason"], "running");
    let (_, err) = text(&url, WHEEL, &["run-now", "long"], 1);
    assert!(err.contains("is running"), "{err}");
    assert!(timers.cancel_running("long").await.unwrap());
    worker.shutdown().await;
    let (out, _) = text(&url, WHEEL, &["--help"], 0);
    assert!(out.contains("run-now"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_limit_limits_stats_and_clear_limit() {
    let Some(store) = Store::redis() else { return };
    limits(&store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_limit_limits_stats_and_clear_limit_on_a_sqlite_file() {
    let store = Store::sqlite();
    limits(&store.url()).await;
}

async fn limits(url: &str) {
    use tokio_timewheel::durable::Limit;

    let url = url.to_string();
    let timers = wheel(&url).await;

    // None yet: `limits` says so, its JSON is an empty array, and `stats` has no limits line.
    let (out, _) = text(&url, WHEEL, &["limits"], 0);
    assert_eq!(out, "no limits\n");
    assert_eq!(json(&url, &["limits"], 0), serde_json::json!([]));
    let (out, _) = text(&url, WHEEL, &["stats"], 0);
    assert!(!out.contains("limits"), "{out}");

    // set-limit: both parts, then one part; what the library reads back.
    let set = json(&url, &["set-limit", "api:", "--rate", "20", "--per", "1s", "--running", "5"], 0);
    assert_eq!(set, serde_json::json!({ "done": true, "replaced": false }));
    let (out, _) = text(&url, WHEEL, &["set-limit", "report:", "--running", "1"], 0);
    assert!(out.contains("limited \"report:\" to 1 running"), "{out}");
    let api = Limit::rate(20, Duration::from_secs(1)).and(Limit::running(5));
    let want = vec![("api:".to_string(), api), ("report:".to_string(), Limit::running(1))];
    assert_eq!(timers.limits().await.unwrap(), want);

    // limits: a line each, and its JSON.
    let (out, _) = text(&url, WHEEL, &["limits"], 0);
    assert_eq!(out, "api:     20 starts per 1s, 5 running\nreport:  1 running\n");
    assert_eq!(
        json(&url, &["limits"], 0),
        serde_json::json!([
            { "prefix": "api:", "rate": 20, "per_ms": 1000, "running": 5 },
            { "prefix": "report:", "rate": null, "per_ms": null, "running": 1 },
        ])
    );

    // A second set-limit replaces the prefix's limit, whole.
    let (out, _) = text(&url, WHEEL, &["set-limit", "api:", "--rate", "10", "--per", "500ms"], 0);
    assert!(out.contains("limited \"api:\" to 10 starts per 500ms (in place of its previous limit)"), "{out}");
    assert_eq!(json(&url, &["set-limit", "api:", "--rate", "10", "--per", "500ms"], 0)["replaced"], true);
    assert_eq!(timers.limits().await.unwrap()[0], ("api:".to_string(), Limit::rate(10, Duration::from_millis(500))));
    assert_eq!(
        json(&url, &["limits"], 0)[0],
        serde_json::json!({ "prefix": "api:", "rate": 10, "per_ms": 500, "running": null })
    );

    // stats: a line of the limits, after the counts.
    let (out, _) = text(&url, WHEEL, &["stats"], 0);
    assert!(out.contains("\n  limits: \"api:\" 10 starts per 500ms; \"report:\" 1 running\n"), "{out}");
    assert!(out.contains("(waiting 0, ready 0, running 0)"), "{out}");

    // clear-limit: once, then nothing to act on (1).
    let (out, _) = text(&url, WHEEL, &["clear-limit", "api:"], 0);
    assert!(out.contains("cleared the limit on \"api:\""), "{out}");
    let (_, err) = text(&url, WHEEL, &["clear-limit", "api:"], 1);
    assert!(err.contains("no limit on \"api:\""), "{err}");
    assert_eq!(json(&url, &["clear-limit", "api:"], 1)["done"], false);
    assert_eq!(timers.limits().await.unwrap(), vec![("report:".to_string(), Limit::running(1))]);
    let (out, _) = text(&url, WHEEL, &["limits"], 0);
    assert_eq!(out, "report:  1 running\n");
    assert_eq!(json(&url, &["clear-limit", "report:"], 0)["done"], true);
    let (out, _) = text(&url, WHEEL, &["limits"], 0);
    assert_eq!(out, "no limits\n");
    let (out, _) = text(&url, WHEEL, &["stats"], 0);
    assert!(!out.contains("limits"), "{out}");

    // No limit to set, or a rate without its window, or a duration that is none: usage errors (2).
    let (_, err) = text(&url, WHEEL, &["set-limit", "api:"], 2);
    assert!(err.contains("set-limit needs a limit: --rate N --per DURATION, --running N, or both"), "{err}");
    let (_, err) = text(&url, WHEEL, &["set-limit", "api:", "--rate", "5"], 2);
    assert!(err.contains("--per"), "{err}");
    let (_, err) = text(&url, WHEEL, &["set-limit", "api:", "--per", "1s"], 2);
    assert!(err.contains("--rate"), "{err}");
    let (_, err) = text(&url, WHEEL, &["set-limit", "api:", "--rate", "5", "--per", "5x"], 2);
    assert!(err.contains("--per") && err.contains("5x"), "{err}");

    // A zero rate, or a zero running limit: refused (4) with the library's Error::Invalid message.
    for (args, limit) in [
        (&["--rate", "0", "--per", "1s"][..], Limit::rate(0, Duration::from_secs(1))),
        (&["--running", "0"][..], Limit::running(0)),
    ] {
        let Err(refused @ tokio_timewheel::Error::Invalid(_)) = timers.set_limit("api:", limit).await else {
            panic!("the library refuses {limit:?}");
        };
        let (_, err) = text(&url, WHEEL, &[&["set-limit", "api:"][..], args].concat(), 4);
        assert!(err.contains(&format!("error: {refused}")), "{args:?}: {err}");
    }
    assert_eq!(timers.limits().await.unwrap(), Vec::new(), "nothing set by the refused calls");

    let (out, _) = text(&url, WHEEL, &["--help"], 0);
    assert!(out.contains("limits") && out.contains("set-limit") && out.contains("clear-limit"), "{out}");
}

/// `--url sqlite:PATH` as the nodes were given it: absolute, relative to the working directory,
/// `sqlite://`, a path with a comma (which `--url` otherwise splits URLs at); and what it refuses
/// without creating anything: a path with no file, `sqlite::memory:`, a file that is not a
/// wheel's, a wheel nobody opened, `--tls-ca`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_urls_and_what_they_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a,b").join("orders.db");
    let url = format!("sqlite:{}", file.display());
    let timers = wheel(&url).await;
    timers.schedule("order:1", Duration::from_secs(3600), Vec::new()).await.unwrap();

    assert_eq!(json(&url, &["stats"], 0)["pending"], 1, "a path with a comma");
    assert_eq!(json(&format!("sqlite://{}", file.display()), &["stats"], 0)["pending"], 1);
    let relative = Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .current_dir(file.parent().unwrap())
        .args(["--url", "sqlite:orders.db", "--wheel", WHEEL, "--json", "stats"])
        .output()
        .unwrap();
    assert_eq!(relative.status.code(), Some(0), "{}", String::from_utf8_lossy(&relative.stderr));
    let stats: Value = serde_json::from_slice(&relative.stdout).unwrap();
    assert_eq!(stats["pending"], 1, "a path relative to the working directory");

    // A path with no file: refused (4), and nothing created there.
    let missing = dir.path().join("typo").join("orders.db");
    let (_, err) = text(&format!("sqlite:{}", missing.display()), WHEEL, &["stats"], 4);
    assert!(err.contains("there is no file") && err.contains("typo"), "{err}");
    assert!(!dir.path().join("typo").exists(), "the command line created a folder");
    let (_, err) = text("sqlite::memory:", WHEEL, &["stats"], 4);
    assert!(err.contains("sqlite::memory:") && err.contains("the SQLite file the wheel's nodes use"), "{err}");
    // A file that is not a wheel's, and a wheel that nobody opened in a file that is.
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a database at all, just some text that is long enough").unwrap();
    let (_, err) = text(&format!("sqlite:{}", notes.display()), WHEEL, &["stats"], 4);
    assert!(err.contains("notes.txt") && err.contains("not a SQLite database"), "{err}");
    let (_, err) = text(&url, "no-such-wheel", &["stats"], 4);
    assert!(err.contains("no wheel named \"no-such-wheel\""), "{err}");
    let (_, err) = text(&url, WHEEL, &["--tls-ca", "ca.pem", "stats"], 4);
    assert!(err.contains("--tls-ca"), "{err}");
    assert_eq!(timers.len().await.unwrap(), 1, "nothing changed");
}

/// The fourth process: while two nodes run a SQLite wheel under load (tasks scheduled and
/// firing all along), `timewheel` reads it (`stats`, `list`, `due-next`, `watch`), pauses it (no
/// task is handed out until it resumes) and resumes it, from a process of its own; every task
/// still runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_reads_and_pauses_a_sqlite_wheel_while_nodes_run() {
    use std::collections::HashMap;
    use std::sync::Mutex;

    const TASKS: usize = 1500;
    let store = Store::sqlite();
    let url = store.url();
    let timers = wheel(&url).await;
    // Two nodes, each on a connection of its own, counting each key's deliveries.
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let node = wheel(&url).await;
        let runs = runs.clone();
        workers.push(node.run(move |task: Task| {
            *runs.lock().unwrap().entry(task.key().to_string()).or_default() += 1;
            async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<(), String>(())
            }
        }));
    }
    // The load: 20 tasks every 50 ms, each due 100 to 600 ms later.
    let load = tokio::spawn({
        let timers = timers.clone();
        async move {
            for batch in 0..TASKS / 20 {
                let tasks: Vec<_> = (0..20)
                    .map(|i| {
                        let n = batch * 20 + i;
                        (format!("load:{n:05}"), Duration::from_millis(100 + (n as u64 * 37) % 500), Vec::new())
                    })
                    .collect();
                for r in timers.schedule_many(tasks).await.unwrap() {
                    r.expect("scheduled");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    wait_for("the first tasks acknowledged", async || timers.stats().await.unwrap().acked > 100).await;

    // Reads, from another process, while the nodes run.
    for _ in 0..3 {
        let stats = json(&url, &["stats"], 0);
        let count = |f: &str| stats[f].as_u64().unwrap_or_else(|| panic!("{f} in {stats}"));
        assert_eq!(count("pending"), count("waiting") + count("ready") + count("running"), "{stats}");
        assert!(count("scheduled") >= count("acked") + count("pending"), "{stats}");
        assert_eq!(stats["paused"], false);
    }
    let running = json(&url, &["list", "running", "--limit", "100"], 0);
    assert!(running["tasks"].is_array(), "{running}");
    let finished = json(&url, &["list", "finished", "--limit", "5"], 0);
    assert_eq!(finished["tasks"].as_array().map(Vec::len), Some(5), "{finished}");
    let due = json(&url, &["due-next", "--limit", "5"], 0);
    assert!(due["tasks"].is_array(), "{due}");
    let out = timewheel(&url, WHEEL, &["--json", "watch", "--interval", "0.2", "--count", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);

    // Paused: once `pause` has returned, no worker claims; tasks still fall due and wait.
    assert_eq!(json(&url, &["pause"], 0)["done"], true);
    let at_pause = timers.stats().await.unwrap();
    assert!(at_pause.paused, "{at_pause:?}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let stats = json(&url, &["stats"], 0);
    assert_eq!(stats["paused"], true);
    assert_eq!(stats["handed_out"].as_u64(), Some(at_pause.handed_out), "handed out while paused: {stats}");
    assert_eq!(json(&url, &["resume"], 0)["done"], true);
    wait_for("tasks handed out after resume", async || timers.stats().await.unwrap().handed_out > at_pause.handed_out)
        .await;

    load.await.unwrap();
    wait_for("every task acknowledged", async || {
        let stats = timers.stats().await.unwrap();
        stats.pending == 0 && stats.acked == TASKS as u64
    })
    .await;
    for worker in workers {
        worker.shutdown().await;
    }
    let runs = runs.lock().unwrap();
    assert_eq!(runs.len(), TASKS);
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
    let stats = json(&url, &["stats"], 0);
    assert_eq!((stats["acked"].as_u64(), stats["dead"].as_u64()), (Some(TASKS as u64), Some(0)), "{stats}");
}
