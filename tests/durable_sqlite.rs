//! The durable wheel on the embedded SQLite store (feature `sqlite`): no server. A task hours
//! away on paused time (`sqlite::memory:` follows Tokio's clock) runs once, in seconds;
//! a file keeps what was scheduled across a reopen; the fire path hands every task out once;
//! bad URLs and files are refused with what to do.
//!
//! Run with `cargo test --features sqlite --test durable_sqlite`.
#![cfg(feature = "sqlite")]

mod support;

use std::time::{Duration, Instant, SystemTime};

use support::durable::Log;
use tokio_timewheel::durable::{DurableScheduler, Task};
use tokio_timewheel::Error;

/// A task due in 48 hours, on Tokio's paused clock: it runs once as soon as the runtime is idle,
/// with its due time read on that clock and no lateness to speak of, in well under a second of
/// real time: the leader of a store in this process sleeps until the next due time.
#[tokio::test(start_paused = true)]
async fn a_task_hours_away_runs_once_on_paused_time() {
    let real = Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "orders").connect().await.expect("connect");
    let log = Log::default();
    let worker = log.worker(&timers);
    let scheduled_at = SystemTime::now();
    let later = Duration::from_secs(48 * 3600);
    timers.schedule("order-42:review", later, "42").await.unwrap();
    tokio::time::sleep(later + Duration::from_secs(5)).await;
    worker.shutdown().await;
    let runs = log.of("order-42:review");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    // The store's clock is Tokio's from the wall-clock time it opened at: the real time the
    // connect took stands still on it, so the due time is 48 hours from the call within that.
    let due_at = run.due.duration_since(scheduled_at - Duration::from_secs(1)).unwrap_or_default();
    assert!(due_at >= later && due_at < later + Duration::from_secs(2), "due {due_at:?} after the call, less 1 s");
    let late = run.claimed.duration_since(run.due).unwrap_or_default();
    assert!(late <= Duration::from_secs(2), "claimed {late:?} after its due time (a tick is 1 s)");
    assert_eq!(timers.stats().await.unwrap().acked, 1);
    let took = real.elapsed();
    eprintln!("48 hours of paused time took {took:?} of real time");
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// A file keeps the wheel: scheduled tasks and counters are there after the handle is dropped
/// and the file opened again, and a worker then hands each task out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_keeps_the_wheel_and_every_task_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("data/orders.db").display());
    {
        let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("created with its folder");
        for i in 0..200u64 {
            timers.schedule(format!("order-{i}"), Duration::from_millis(200 + i * 3), "p").await.unwrap();
        }
        assert!(timers.cancel("order-7").await.unwrap());
        assert_eq!(timers.len().await.unwrap(), 199);
    }
    let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("reopen");
    assert_eq!(timers.len().await.unwrap(), 199, "kept across the reopen");
    let log = Log::default();
    let worker = log.worker(&timers);
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.len() < 199 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    support::durable::assert_once(&log);
    assert_eq!(log.distinct_keys().len(), 199);
    assert!(!log.distinct_keys().contains("order-7"), "a cancelled task never ran");
    for h in log.all() {
        assert!(h.at >= h.due, "{h:?} early");
    }
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.acked, stats.cancelled, stats.pending), (200, 199, 1, 0), "{stats:?}");
}

/// Bad URLs and files are errors that say what to do; nothing panics.
#[tokio::test]
async fn bad_urls_and_files_are_refused_with_what_to_do() {
    let invalid = |r: Result<DurableScheduler, Error>| match r {
        Err(Error::Invalid(why)) => why,
        Err(other) => panic!("expected Error::Invalid, got {other:?}"),
        Ok(_) => panic!("expected Error::Invalid, got a wheel"),
    };
    let why = invalid(DurableScheduler::builder("sqlite:", "w").connect().await);
    assert!(why.contains("sqlite::memory:"), "{why}");
    let why = invalid(DurableScheduler::builder("mysql://127.0.0.1/db", "w").connect().await);
    assert!(why.contains("sqlite"), "the schemes it takes: {why}");

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, just some text that is long enough").unwrap();
    let why = invalid(DurableScheduler::builder(format!("sqlite:{}", text.display()), "w").connect().await);
    assert!(why.contains("notes.txt"), "names the file: {why}");
    let under_a_file = text.join("wheel.db");
    let why = invalid(DurableScheduler::builder(format!("sqlite:{}", under_a_file.display()), "w").connect().await);
    assert!(why.contains("wheel.db"), "{why}");
}

/// A handler on the embedded store gets what it gets on Redis: payload, attempt, due time.
#[tokio::test(start_paused = true)]
async fn a_failed_task_is_retried_then_dead_on_the_embedded_store() {
    let timers = DurableScheduler::builder("sqlite::memory:", "retries")
        .max_attempts(2)
        .backoff(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    timers.schedule("flaky", Duration::from_secs(10), "p").await.unwrap();
    let worker = timers.run(|task: Task| async move { Err::<(), _>(format!("attempt {} failed", task.attempt())) });
    tokio::time::sleep(Duration::from_secs(60)).await;
    worker.shutdown().await;
    let dead = timers.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].key(), dead[0].attempts(), dead[0].last_error()), ("flaky", 2, "attempt 2 failed"));
}
