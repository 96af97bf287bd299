//! The durable wheel on Tokio's paused clock (`sqlite::memory:`, feature `sqlite`): what a unit
//! test of durable code can rely on. The store's clock is Tokio's, and its leader sleeps until
//! the next due time (woken by every change the process makes), so days of paused time run in
//! a moment; every run still comes on its tick, never early, once.
//!
//! Run with `cargo test --features sqlite --test durable_paused`.
#![cfg(feature = "sqlite")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_timewheel::durable::{DurableScheduler, Task, Worker};
use tokio_timewheel::Recurrence;

/// The default tick: a run is claimed within one tick of its due time.
const TICK: Duration = Duration::from_secs(1);

/// One run, on the store's clock and on Tokio's.
#[derive(Debug, Clone)]
struct Run {
    key: String,
    attempt: u32,
    due: SystemTime,
    claimed: SystemTime,
    /// Tokio's clock at the handler's start, from the test's start.
    at: Duration,
}

#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<Run>>>);

impl Runs {
    /// A worker whose handler records each run and then does what `outcome` says for it.
    fn worker(
        &self,
        timers: &DurableScheduler,
        start: tokio::time::Instant,
        outcome: impl Fn(&Task) -> Option<Duration> + Send + Sync + 'static,
    ) -> Worker {
        let runs = self.clone();
        let outcome = Arc::new(outcome);
        timers.run(move |task: Task| {
            runs.0.lock().unwrap().push(Run {
                key: task.key().to_owned(),
                attempt: task.attempt(),
                due: task.due(),
                claimed: task.claimed_at(),
                at: start.elapsed(),
            });
            let hang = outcome(&task);
            async move {
                match hang {
                    // Runs this long, then fails.
                    Some(d) => {
                        tokio::time::sleep(d).await;
                        Err("took too long")
                    }
                    None => Ok(()),
                }
            }
        })
    }

    fn of(&self, key: &str) -> Vec<Run> {
        self.0.lock().unwrap().iter().filter(|r| r.key == key).cloned().collect()
    }
}

/// Claimed on its tick: never before its due time, at most a tick after.
fn assert_on_tick(run: &Run) {
    let late =
        run.claimed.duration_since(run.due).unwrap_or_else(|e| panic!("{run:?} claimed {:?} early", e.duration()));
    assert!(late <= TICK, "{run:?} claimed {late:?} late");
}

/// How late a run may be claimed at most, on the paused clock, when a handler is free: the
/// tick moves a tick's tasks to `ready` before it begins, and the worker claims each when due
/// (waiting at least 5 ms between such claims, so that close ones go out together).
const AT_DUE: Duration = Duration::from_millis(5);

/// Tasks fire at their due time, not on the next tick boundary: on a 1 s tick, tasks due at
/// every offset within a tick (and one scheduled less than a tick ahead, one hours ahead in the
/// far tier, one moved by `reschedule`) are each claimed within [`AT_DUE`] of it, never before.
/// On the tick alone they came up to a second late.
#[tokio::test(start_paused = true)]
async fn tasks_fire_at_their_due_time_not_on_the_tick() {
    let start = tokio::time::Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "paused").connect().await.unwrap();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, |_| None);
    // Off the tick boundary, so that no offset falls on it by chance.
    tokio::time::sleep(Duration::from_millis(1_234)).await;
    let mut want = Vec::new();
    for ms in [200, 1_001, 1_350, 1_999, 2_500, 7_777, 5 * 3600 * 1000 + 321] {
        let key = format!("in-{ms}");
        timers.schedule(key.as_str(), Duration::from_millis(ms), "").await.unwrap();
        want.push(key);
    }
    timers.schedule("moved", Duration::from_secs(3600), "").await.unwrap();
    timers.reschedule("moved", Duration::from_millis(3_141)).await.unwrap();
    want.push("moved".into());
    tokio::time::sleep(Duration::from_secs(6 * 3600)).await;
    worker.shutdown().await;
    for key in &want {
        let got = runs.of(key);
        assert_eq!(got.len(), 1, "{key}: {got:?}");
        let late = got[0]
            .claimed
            .duration_since(got[0].due)
            .unwrap_or_else(|e| panic!("{key} claimed {:?} early", e.duration()));
        assert!(late <= AT_DUE, "{key} claimed {late:?} after its due time");
    }
}

/// A leader asleep until its next due time (hours away) wakes for what is scheduled, moved or
/// cancelled meanwhile: each runs on its tick, once, and the whole takes well under a second.
#[tokio::test(start_paused = true)]
async fn a_sleeping_leader_wakes_for_every_change() {
    let real = Instant::now();
    let start = tokio::time::Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "paused").connect().await.unwrap();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, |_| None);
    timers.schedule("far", Duration::from_secs(40 * 3600), "").await.unwrap();
    // Three hours of nothing: the leader sleeps (it renews its lead every two hours).
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    let t0 = start.elapsed();
    timers.schedule("soon", Duration::from_secs(10), "").await.unwrap();
    timers.schedule("later", Duration::from_secs(3600), "").await.unwrap();
    timers.schedule("moved", Duration::from_secs(30 * 3600), "").await.unwrap();
    timers.schedule("dropped", Duration::from_secs(20), "").await.unwrap();
    timers.reschedule("moved", Duration::from_secs(25)).await.unwrap();
    assert!(timers.cancel("dropped").await.unwrap());
    tokio::time::sleep(Duration::from_secs(41 * 3600)).await;
    worker.shutdown().await;
    for (key, after) in [("soon", 10), ("moved", 25), ("later", 3600)] {
        let got = runs.of(key);
        assert_eq!(got.len(), 1, "{key}: {got:?}");
        assert_on_tick(&got[0]);
        let at = got[0].at - t0;
        let want = Duration::from_secs(after);
        assert!(at >= want && at <= want + TICK + Duration::from_millis(50), "{key} ran {at:?} after it was scheduled");
    }
    let far = runs.of("far");
    assert_eq!(far.len(), 1, "{far:?}");
    assert_on_tick(&far[0]);
    assert!(runs.of("dropped").is_empty(), "a cancelled task ran");
    let took = real.elapsed();
    assert!(took < Duration::from_secs(1), "44 hours of paused time took {took:?}");
}

/// A handler that outlives its timeout fails; its retry comes after the backoff, on its tick:
/// the failure's new due time wakes the sleeping leader too.
#[tokio::test(start_paused = true)]
async fn a_retry_after_a_handler_timeout_comes_on_time() {
    let start = tokio::time::Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "paused")
        .handler_timeout(Duration::from_secs(120))
        .backoff(Duration::from_secs(600))
        .connect()
        .await
        .unwrap();
    let runs = Runs::default();
    // The first attempt hangs for an hour; the second returns at once.
    let worker = runs.worker(&timers, start, |task| (task.attempt() == 1).then_some(Duration::from_secs(3600)));
    timers.schedule("slow", Duration::from_secs(3600), "").await.unwrap();
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    worker.shutdown().await;
    let got = runs.of("slow");
    assert_eq!(got.iter().map(|r| r.attempt).collect::<Vec<_>>(), vec![1, 2], "{got:?}");
    got.iter().for_each(assert_on_tick);
    // The retry: the timeout (120 s) after the first start, then the backoff (600 s).
    let gap = got[1].at - got[0].at;
    let (least, most) = (Duration::from_secs(120 + 600), Duration::from_secs(120 + 600) + TICK);
    assert!(gap >= least && gap <= most, "the retry came {gap:?} after the first attempt");
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.acked, stats.retried), (1, 1), "{stats:?}");
}

/// A series every hour runs 48 times in 48 hours of paused time, each on its tick.
#[tokio::test(start_paused = true)]
async fn an_hourly_series_runs_48_times_in_two_days() {
    let real = Instant::now();
    let start = tokio::time::Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "paused").connect().await.unwrap();
    let runs = Runs::default();
    let worker = runs.worker(&timers, start, |_| None);
    timers.upsert_recurring("hourly", Recurrence::every(Duration::from_secs(3600)), "").await.unwrap();
    tokio::time::sleep(Duration::from_secs(48 * 3600) + Duration::from_secs(30)).await;
    worker.shutdown().await;
    let got = runs.of("hourly");
    assert_eq!(got.len(), 48, "{got:?}");
    got.iter().for_each(assert_on_tick);
    for (i, pair) in got.windows(2).enumerate() {
        let period = pair[1].due.duration_since(pair[0].due).unwrap();
        assert_eq!(period, Duration::from_secs(3600), "between runs {i} and {}", i + 1);
    }
    let took = real.elapsed();
    assert!(took < Duration::from_secs(2), "48 runs over 48 hours of paused time took {took:?}");
}
