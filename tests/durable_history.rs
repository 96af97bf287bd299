//! The history of finished runs, on the store the run selects (`support/store.rs`: a real
//! `redis-server` started for each test, or a SQLite file of the embedded store):
//! `list(TaskState::Finished, ..)` pages every run once, newest first; the runs' outcomes,
//! attempts and handler times; the bounds by count and by age; no history when it is turned off
//! (on Redis, its key is checked too).
//!
//! Run with `cargo test --features redis --test durable_history` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use support::durable::{builder, keys, stats_until};
use support::TestStore;
use tokio_timewheel::durable::{
    DurableScheduler, ListCursor, Outcome, Task, TaskInfo, TaskState, MAX_HISTORY_AGE, MAX_HISTORY_LIMIT,
};
use tokio_timewheel::Error;

/// Every finished run, paged `limit` at a time (each cursor handed on as its text and read
/// back), with the number of pages.
async fn list_all(timers: &DurableScheduler, limit: usize) -> (Vec<TaskInfo>, usize) {
    let (mut all, mut pages) = (Vec::new(), 0);
    let mut cursor: Option<ListCursor> = None;
    loop {
        let page = timers.list(TaskState::Finished, cursor.as_ref(), limit).await.unwrap();
        pages += 1;
        assert!(page.tasks().len() <= limit);
        let (tasks, next) = page.into_parts();
        all.extend(tasks);
        match next {
            Some(next) => cursor = Some(next.to_string().parse().expect("a cursor reads back from its text")),
            None => return (all, pages),
        }
        assert!(pages < 10_000, "paging does not end");
    }
}

/// A handler that sleeps 20 ms for a key that starts with "slow", fails for one that starts with
/// "dead", waits for its cancellation for one that starts with "wait", and succeeds at once
/// otherwise.
fn handler() -> impl Fn(Task) -> BoxFuture<'static, Result<(), String>> {
    |task: Task| {
        Box::pin(async move {
            let key = task.key().to_string();
            if key.starts_with("slow") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            } else if key.starts_with("dead") {
                return Err(format!("{key} failed"));
            } else if key.starts_with("wait") {
                task.cancel_token().cancelled().await;
            }
            Ok(())
        })
    }
}

fn keys_of(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

/// Schedules `keys` due at once.
async fn schedule_now(timers: &DurableScheduler, keys: &[String]) {
    let tasks = keys.iter().map(|k| (k.clone(), Duration::from_millis(1), Vec::new()));
    timers.schedule_many(tasks).await.unwrap();
}

/// `list(Finished)` pages 1,000 acknowledged runs of a wheel of two partitions, every run once,
/// newest first, by pages of 1,000, 100 and 7 whose cursors go through their text; each run
/// acknowledged after one attempt, with its start and how long its handler took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_finished_pages_every_run_once_newest_first() {
    const N: usize = 1000;
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "history").partitions(2).concurrency(64).connect().await.expect("connect");
    let worker = timers.run(handler());
    worker.ready().await;
    let scheduled = SystemTime::now();
    schedule_now(&timers, &keys_of("run", N)).await;
    stats_until(&timers, "acknowledged", |s| s.acked == N as u64).await;
    worker.shutdown().await;

    for limit in [1000, 100, 7] {
        let (runs, pages) = list_all(&timers, limit).await;
        let mut keys: Vec<String> = runs.iter().map(|t| t.key().to_string()).collect();
        keys.sort();
        assert_eq!(keys, keys_of("run", N), "by {limit}: every run once, in {pages} pages");
        assert_eq!(pages, N / limit + 1, "by {limit}");
        let ends: Vec<SystemTime> = runs.iter().map(|t| t.finished().expect("a finished run").finished_at()).collect();
        assert!(ends.windows(2).all(|w| w[0] >= w[1]), "by {limit}: newest first");
        for t in &runs {
            let run = t.finished().unwrap();
            assert_eq!(
                (t.state(), run.outcome(), t.attempt(), t.last_error()),
                (TaskState::Finished, Outcome::Acknowledged, 1, None)
            );
            let started = run.started_at().expect("the handler started");
            assert!(started + Duration::from_secs(1) >= scheduled, "{started:?}");
            assert!(run.handler_duration().expect("it ran") < Duration::from_secs(5));
            assert!(t.payload().is_empty() && t.worker().is_none() && t.overdue_by().is_none());
        }
    }
    let wrong = timers.list(TaskState::Finished, None, 1).await.unwrap().into_parts().1.unwrap();
    assert!(matches!(timers.list(TaskState::Dead, Some(&wrong), 10).await, Err(Error::Invalid(_))));
    let other_wheel: ListCursor = "finished:1:0,5,9".parse().unwrap();
    assert!(matches!(timers.list(TaskState::Finished, Some(&other_wheel), 10).await, Err(Error::Invalid(_))));
}

/// Each outcome is recorded: acknowledged with the handler's time (a handler that sleeps 20 ms
/// took at least that), dead after its last attempt with its error, and cancelled while it ran
/// (`cancel_running`); a retried delivery is not a finished run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_dead_and_cancelled_runs_are_recorded() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "outcomes").max_attempts(2).connect().await.expect("connect");
    let worker = timers.run(handler());
    worker.ready().await;
    schedule_now(&timers, &["slow-1".to_string(), "dead-1".to_string(), "wait-1".to_string()]).await;
    stats_until(&timers, "slow-1 acknowledged, dead-1 dead", |s| s.acked == 1 && s.dead == 1 && s.in_flight == 1).await;
    assert!(timers.cancel_running("wait-1").await.unwrap());
    stats_until(&timers, "wait-1 cancelled", |s| s.cancelled == 1).await;
    worker.shutdown().await;

    let (runs, _) = list_all(&timers, 10).await;
    let by_key = |k: &str| runs.iter().find(|t| t.key() == k).unwrap_or_else(|| panic!("{k}: {runs:?}"));
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs.first().unwrap().key(), "wait-1", "newest first");

    let slow = by_key("slow-1");
    let run = slow.finished().unwrap();
    assert_eq!((run.outcome(), slow.attempt()), (Outcome::Acknowledged, 1));
    let took = run.handler_duration().unwrap();
    assert!(took >= Duration::from_millis(20) && took < Duration::from_secs(5), "{took:?}");

    let dead = by_key("dead-1");
    let run = dead.finished().unwrap();
    assert_eq!((run.outcome(), dead.attempt(), dead.last_error()), (Outcome::Dead, 2, Some("dead-1 failed")));
    assert!(run.started_at().is_some() && run.handler_duration().is_some());

    let cancelled = by_key("wait-1");
    let run = cancelled.finished().unwrap();
    assert_eq!((run.outcome(), cancelled.attempt()), (Outcome::Cancelled, 1));
    assert!(
        run.handler_duration().is_some() && run.started_at().unwrap() <= run.finished_at() + Duration::from_secs(1)
    );
}

/// The history keeps the newest `history_limit` runs: of 1,001, the newest 150, the very newest
/// first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_is_trimmed_by_count() {
    const N: usize = 1000;
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "by-count").history_limit(150).connect().await.expect("connect");
    let worker = timers.run(handler());
    worker.ready().await;
    for chunk in keys_of("run", N).chunks(100) {
        // Read before scheduling: a task due now may be acknowledged before the schedule returns.
        let done = timers.stats().await.unwrap().acked + chunk.len() as u64;
        schedule_now(&timers, chunk).await;
        stats_until(&timers, "acknowledged", |s| s.acked == done).await;
    }
    schedule_now(&timers, &["last".to_string()]).await;
    stats_until(&timers, "last", |s| s.acked == N as u64 + 1).await;
    worker.shutdown().await;

    if let Some(server) = store.redis() {
        let kept = server.command(&["LLEN", &keys("by-count").history()]).as_int().unwrap();
        assert_eq!(kept, 150);
    }
    let (runs, _) = list_all(&timers, 100).await;
    assert_eq!(runs.len(), 150);
    assert_eq!(runs[0].key(), "last");
    // The others, newest first: the last burst of 100 whole, then 49 of the one before it.
    let others: Vec<&str> = runs[1..].iter().map(|t| t.key()).collect();
    assert!(others[..100].iter().all(|k| k >= &"run-0900"), "{others:?}");
    assert!(others[100..].iter().all(|k| k.starts_with("run-08")), "{others:?}");
}

/// The history keeps a run `history_age`: the runs of a first burst are gone once a run ends
/// more than the age later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_is_trimmed_by_age() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "by-age").history_age(Duration::from_secs(1)).connect().await.expect("connect");
    let worker = timers.run(handler());
    worker.ready().await;
    schedule_now(&timers, &keys_of("old", 250)).await;
    stats_until(&timers, "old", |s| s.acked == 250).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    schedule_now(&timers, &["new".to_string()]).await;
    stats_until(&timers, "new", |s| s.acked == 251).await;
    worker.shutdown().await;

    let (runs, _) = list_all(&timers, 100).await;
    let keys: Vec<&str> = runs.iter().map(|t| t.key()).collect();
    assert_eq!(keys, ["new"], "the old runs are gone");
}

/// A history limit of 0, or an age of zero, keeps no history: no key, an empty list. Bounds
/// beyond the largest are refused when connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_history_stores_nothing_and_bad_bounds_are_refused() {
    let Some(store) = TestStore::start() else { return };
    for (name, timers) in [
        ("off", builder(&store.url(), "off").history_limit(0)),
        ("no-age", builder(&store.url(), "no-age").history_age(Duration::ZERO)),
    ] {
        let timers = timers.max_attempts(1).connect().await.expect("connect");
        let worker = timers.run(handler());
        worker.ready().await;
        schedule_now(&timers, &["ok".to_string(), "dead".to_string()]).await;
        stats_until(&timers, "both ended", |s| s.acked == 1 && s.dead == 1).await;
        worker.shutdown().await;
        if let Some(server) = store.redis() {
            assert_eq!(server.command(&["EXISTS", &keys(name).history()]).as_int(), Some(0), "{name}");
        }
        let page = timers.list(TaskState::Finished, None, 10).await.unwrap();
        assert!(page.tasks().is_empty() && page.next().is_none(), "{name}");
    }
    let too_many = builder(&store.url(), "bad").history_limit(MAX_HISTORY_LIMIT + 1).connect().await;
    assert!(matches!(too_many, Err(Error::Invalid(_))), "{too_many:?}");
    let too_old = builder(&store.url(), "bad").history_age(MAX_HISTORY_AGE + Duration::from_secs(1)).connect().await;
    assert!(matches!(too_old, Err(Error::Invalid(_))), "{too_old:?}");
}
