//! Flow control on Tokio's paused clock (`sqlite::memory:`, feature `sqlite`): debounce with a
//! cap and the last payload, snooze from a handler, and limits by key prefix, each checked to
//! the tick with nothing left to chance (the store's clock is Tokio's). The same behaviour on
//! real stores and real processes: `durable_flow.rs`.
//!
//! Run with `cargo test --features sqlite --test durable_flow_paused`.
#![cfg(feature = "sqlite")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_timewheel::durable::{DurableScheduler, Limit, Outcome, Task, TaskState, Worker};
use tokio_timewheel::Error;

const TICK: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
struct Run {
    key: String,
    payload: String,
    attempt: u32,
    due: SystemTime,
    /// Tokio's clock at the handler's start and end, from the test's start.
    at: Duration,
    ended: Duration,
}

#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    /// A worker whose handler records each run, works `work`, and snoozes a run `snooze` says to.
    fn worker(
        &self,
        timers: &DurableScheduler,
        start: tokio::time::Instant,
        work: Duration,
        snooze: impl Fn(&Task) -> Option<Duration> + Send + Sync + 'static,
    ) -> Worker {
        let runs = self.clone();
        let snooze = Arc::new(snooze);
        timers.run(move |task: Task| {
            let (runs, snooze) = (runs.clone(), snooze.clone());
            async move {
                let at = start.elapsed();
                tokio::time::sleep(work).await;
                if let Some(d) = snooze(&task) {
                    task.snooze(d);
                }
                runs.0.lock().unwrap().push(Run {
                    key: task.key().to_owned(),
                    payload: String::from_utf8_lossy(task.payload()).into_owned(),
                    attempt: task.attempt(),
                    due: task.due(),
                    at,
                    ended: start.elapsed(),
                });
                Ok::<(), String>(())
            }
        })
    }

    fn all(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }
}

async fn connect(name: &str) -> DurableScheduler {
    DurableScheduler::builder("sqlite::memory:", name).tick(TICK).connect().await.unwrap()
}

/// A change every 400 ms for 10 s, debounced with a 2 s quiet period and a 3 s cap: a run every
/// 3 s while the changes go on (a push-back alone would never run), each with the last change
/// before it, then one 2 s after the last change. (No call falls on a run's instant, where which
/// comes first is a race.)
#[tokio::test(start_paused = true)]
async fn debounce_runs_at_the_cap_with_the_last_payload_then_after_the_quiet_period() {
    let timers = connect("debounce").await;
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, Duration::ZERO, |_| None);
    worker.ready().await;
    let (quiet, cap) = (Duration::from_secs(2), Duration::from_secs(3));
    let mut opened = Vec::new();
    let mut calls = Vec::new();
    for i in 0..25 {
        opened.push(timers.debounce("digest", quiet, cap, format!("change {i}")).await.unwrap());
        calls.push(start.elapsed());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = runs.all();
    let payloads: Vec<&str> = got.iter().map(|r| r.payload.as_str()).collect();
    // Bursts open at 0, 3.2 (the first call after the run at 3 s), 6.4 (likewise) and 9.6 s;
    // each runs at its cap, the last 2 s after its only call: 11.6 s.
    assert_eq!(payloads, ["change 7", "change 15", "change 23", "change 24"], "{got:#?}");
    let first_calls: Vec<usize> = opened.iter().enumerate().filter(|(_, o)| **o).map(|(i, _)| i).collect();
    assert_eq!(first_calls, [0, 8, 16, 24], "the calls that opened a burst");
    for (run, first) in got.iter().zip(&first_calls) {
        let from_first = run.at - calls[*first];
        assert!(from_first <= cap + TICK, "{run:?} ran {from_first:?} after its burst's first call");
        assert!(from_first >= cap.min(quiet), "{run:?} ran early");
    }
    let last = got.last().unwrap();
    assert!(last.at >= calls[24] + quiet && last.at <= calls[24] + quiet + TICK, "{last:?}");
    worker.shutdown().await;
}

/// A call while the run's handler runs opens the next burst, whose run waits for the running one
/// to end: runs under one key never overlap. A cancel ends a burst.
#[tokio::test(start_paused = true)]
async fn debounce_during_a_run_waits_for_it_and_cancel_ends_a_burst() {
    let timers = connect("debounce-running").await;
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, Duration::from_secs(5), |_| None);
    worker.ready().await;
    let second = Duration::from_secs(1);
    assert!(timers.debounce("k", second, second, "first").await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await; // the run started at ~1 s, ends at ~6 s
    assert!(timers.debounce("k", second, second, "second").await.unwrap(), "a new burst behind the run");
    assert!(!timers.debounce("k", second, Duration::from_secs(2), "third").await.unwrap(), "joins it");
    tokio::time::sleep(Duration::from_secs(12)).await;
    let got = runs.all();
    assert_eq!(got.iter().map(|r| r.payload.as_str()).collect::<Vec<_>>(), ["first", "third"], "{got:#?}");
    assert!(got[1].at >= got[0].ended, "the second run started before the first ended: {got:#?}");
    assert!(got[1].at <= got[0].ended + TICK * 2, "{got:#?}");

    assert!(timers.debounce("c", second * 3, second * 9, "x").await.unwrap());
    assert!(!timers.debounce("c", second * 3, second * 9, "y").await.unwrap());
    assert!(timers.cancel("c").await.unwrap());
    assert!(timers.debounce("c", second * 3, second * 9, "z").await.unwrap(), "a cancel ended the burst");
    tokio::time::sleep(Duration::from_secs(20)).await;
    let c: Vec<String> = runs.all().into_iter().filter(|r| r.key == "c").map(|r| r.payload).collect();
    assert_eq!(c, ["z"]);

    let bad = timers.debounce("d", Duration::from_secs(2), Duration::from_secs(1), "x").await;
    assert!(matches!(bad, Err(Error::Invalid(ref why)) if why.contains("max_wait")), "{bad:?}");
    assert!(matches!(timers.debounce("", second, second, "x").await, Err(Error::Invalid(_))));
    worker.shutdown().await;
}

/// A snoozed run comes again after its delay with the same attempt number, is never a dead
/// letter for it (here: snoozed more often than `max_attempts`), and is in the history as
/// snoozed; a snoozed task waits, and a cancel takes it back.
#[tokio::test(start_paused = true)]
async fn a_snoozed_task_runs_again_after_its_delay_with_the_same_attempt() {
    let timers =
        DurableScheduler::builder("sqlite::memory:", "snooze").tick(TICK).max_attempts(2).connect().await.unwrap();
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let seen = Arc::new(Mutex::new(0u32));
    let count = seen.clone();
    let worker = runs.worker(&timers, start, Duration::ZERO, move |task| {
        let mut n = count.lock().unwrap();
        *n += 1;
        match task.key() {
            // Snoozed four times (twice max_attempts), then done.
            "order-1" if *n <= 4 => Some(Duration::from_secs(30)),
            "parked" => Some(Duration::MAX),
            _ => None,
        }
    });
    worker.ready().await;
    timers.schedule("order-1", Duration::from_secs(1), "o1").await.unwrap();
    tokio::time::sleep(Duration::from_secs(200)).await;
    let got: Vec<Run> = runs.all().into_iter().filter(|r| r.key == "order-1").collect();
    assert_eq!(got.len(), 5, "{got:#?}");
    assert!(got.iter().all(|r| r.attempt == 1), "{got:#?}");
    for pair in got.windows(2) {
        let gap = pair[1].at - pair[0].ended;
        assert!(gap >= Duration::from_secs(30) && gap <= Duration::from_secs(30) + TICK, "{gap:?}: {got:#?}");
        assert!(pair[1].due > pair[0].due);
    }
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.acked, stats.dead), (1, 0), "{stats:?}");
    let finished = timers.list(TaskState::Finished, None, 100).await.unwrap();
    let outcomes: Vec<Outcome> = finished.tasks().iter().filter_map(|t| t.finished()).map(|f| f.outcome()).collect();
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Snoozed).count(), 4, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == Outcome::Acknowledged).count(), 1, "{outcomes:?}");

    // A snooze of Duration::MAX parks the task (clamped to Task::MAX_SNOOZE); it waits and can
    // be cancelled like any waiting task.
    timers.schedule("parked", Duration::ZERO, "p").await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let parked = timers.get("parked").await.unwrap().expect("still there");
    assert_eq!(parked.state(), TaskState::Waiting, "{parked:?}");
    assert!(parked.due() > SystemTime::now() + Duration::from_secs(20 * 365 * 24 * 3600), "{parked:?}");
    assert!(timers.cancel("parked").await.unwrap());
    worker.shutdown().await;
}

/// 30 tasks due at once under a rate of 5 a second start 5 a second, in due order, and none of
/// them counts as late for the wait the limit imposed; a key under no limit is not held behind
/// them; a running limit of 1 never overlaps two handlers.
#[tokio::test(start_paused = true)]
async fn limits_hold_back_starts_without_holding_back_other_keys() {
    let timers = connect("limits").await;
    assert!(timers.set_limit("api:", Limit::rate(5, Duration::from_secs(1))).await.unwrap());
    assert!(timers.set_limit("report:", Limit::running(1)).await.unwrap());
    assert!(!timers.set_limit("report:", Limit::running(1)).await.unwrap(), "replaced");
    assert_eq!(
        timers.limits().await.unwrap(),
        [("api:".to_owned(), Limit::rate(5, Duration::from_secs(1))), ("report:".to_owned(), Limit::running(1))]
    );
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, Duration::from_millis(300), |_| None);
    worker.ready().await;
    for i in 0..30 {
        timers.schedule(format!("api:{i:02}"), Duration::from_secs(1), "").await.unwrap();
    }
    for i in 0..4 {
        timers.schedule(format!("report:{i}"), Duration::from_secs(1), "").await.unwrap();
    }
    timers.schedule("free", Duration::from_secs(1), "").await.unwrap();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let got = runs.all();
    let mut api: Vec<&Run> = got.iter().filter(|r| r.key.starts_with("api:")).collect();
    api.sort_by_key(|r| r.at);
    assert_eq!(api.len(), 30, "{got:#?}");
    for (i, r) in api.iter().enumerate().skip(5) {
        assert!(r.at - api[i - 5].at >= Duration::from_secs(1), "6 starts within a second: {api:#?}");
    }
    // Spaced 204 ms apart (a fifth of a second, and the 2 % margin), on the dot on paused time.
    for pair in api.windows(2) {
        assert_eq!(pair[1].at - pair[0].at, Duration::from_millis(204), "{api:#?}");
    }
    let keys: Vec<&str> = api.iter().map(|r| r.key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "not in due order");
    let free = got.iter().find(|r| r.key == "free").expect("the free key ran");
    assert!(free.at <= Duration::from_secs(1) + TICK, "{free:?}");
    let mut reports: Vec<&Run> = got.iter().filter(|r| r.key.starts_with("report:")).collect();
    reports.sort_by_key(|r| r.at);
    assert_eq!(reports.len(), 4);
    for pair in reports.windows(2) {
        assert!(pair[1].at >= pair[0].ended, "two reports overlapped: {reports:#?}");
    }
    // The limit's wait is not lateness: every claim is counted within a tick of when it could run.
    let figures = timers.figures(5).await.unwrap();
    let latest = figures.lateness_quantile(1.0).expect("claims counted");
    assert!(latest <= Duration::from_millis(256), "{:?}", figures.lateness());

    assert!(timers.clear_limit("api:").await.unwrap());
    assert!(!timers.clear_limit("api:").await.unwrap());
    assert_eq!(timers.limits().await.unwrap().len(), 1);
    for bad in [Limit::rate(0, Duration::from_secs(1)), Limit::rate(1, Duration::ZERO), Limit::running(0)] {
        assert!(matches!(timers.set_limit("x:", bad).await, Err(Error::Invalid(_))), "{bad:?}");
    }
    assert!(matches!(timers.set_limit("", Limit::running(1)).await, Err(Error::Invalid(_))));
    worker.shutdown().await;
}

/// Held tasks of one limit are not stuck behind more than a page of held tasks of another: a
/// running limit of 1 with 1,100 ten-second tasks held, and a rate of one every 2 s beside it.
#[tokio::test(start_paused = true)]
async fn a_limit_with_room_is_not_stuck_behind_many_tasks_another_holds() {
    let timers = connect("many-held").await;
    timers.set_limit("a:", Limit::running(1)).await.unwrap();
    timers.set_limit("b:", Limit::rate(1, Duration::from_secs(2))).await.unwrap();
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, Duration::from_secs(10), |_| None);
    worker.ready().await;
    let items: Vec<(String, Duration, &str)> =
        (0..1100).map(|i| (format!("a:{i:04}"), Duration::from_millis(500), "")).collect();
    for r in timers.schedule_many(items).await.unwrap() {
        r.unwrap();
    }
    for i in 0..2 {
        timers.schedule(format!("b:{i}"), Duration::from_secs(1), "").await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let got = runs.all();
    let b: Vec<Duration> = got.iter().filter(|r| r.key.starts_with("b:")).map(|r| r.at).collect();
    assert_eq!(b.len(), 2, "b:1 stuck behind a:'s held tasks: {b:?}");
    assert!(b[1] <= Duration::from_secs(4) + TICK * 3, "{b:?}");
    worker.shutdown_timeout(Duration::ZERO).await;
}

/// A rate raised takes effect at once: its next start follows the new spacing from the last
/// start, not the old one's.
#[tokio::test(start_paused = true)]
async fn raising_a_rate_takes_effect_at_once() {
    let timers = connect("raised").await;
    timers.set_limit("api:", Limit::rate(1, Duration::from_secs(60))).await.unwrap();
    let start = tokio::time::Instant::now();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, Duration::ZERO, |_| None);
    worker.ready().await;
    for i in 0..3 {
        timers.schedule(format!("api:{i}"), Duration::from_secs(1), "").await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(runs.all().len(), 1, "one start a minute");
    timers.set_limit("api:", Limit::rate(100, Duration::from_secs(1))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let at: Vec<Duration> = runs.all().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 3, "{at:?}");
    assert!(at[2] <= Duration::from_secs(5) + TICK * 3, "the raised rate waited for the old one: {at:?}");
    worker.shutdown().await;
}

/// A run that fails with a burst queued behind it: calls while it waits for its retry join the
/// queued burst, so the key's last run carries the last call's payload.
#[tokio::test(start_paused = true)]
async fn debounce_behind_a_failed_run_keeps_the_last_payload_last() {
    let timers = connect("debounce-retry").await;
    let ran = Arc::new(Mutex::new(Vec::<(String, u32)>::new()));
    let log = ran.clone();
    let worker = timers.run(move |task: Task| {
        let log = log.clone();
        async move {
            let payload = String::from_utf8_lossy(task.payload()).into_owned();
            log.lock().unwrap().push((payload.clone(), task.attempt()));
            tokio::time::sleep(Duration::from_secs(2)).await;
            if payload == "p0" && task.attempt() == 1 {
                return Err("first delivery fails".to_owned());
            }
            Ok(())
        }
    });
    worker.ready().await;
    let s = Duration::from_secs(1);
    timers.debounce("k", s, s, "p0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await; // p0 runs (fails at ~3 s)
    timers.debounce("k", s, s * 2, "p1").await.unwrap(); // queued behind the run
    tokio::time::sleep(Duration::from_millis(2000)).await; // p0 failed; its retry waits (backoff)
    timers.debounce("k", s, s * 2, "p2").await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let got = ran.lock().unwrap().clone();
    assert_eq!(got.last().map(|(p, _)| p.as_str()), Some("p2"), "{got:?}");
    assert!(!got.iter().any(|(p, _)| p == "p1"), "p1's burst ran on its own: {got:?}");
    worker.shutdown().await;
}
