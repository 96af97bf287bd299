//! Recurring timers in process: `schedule_recurring`, `upsert_recurring`, the bounds of a
//! `Recurrence`, pausing and resuming; under `tokio::time::pause()` where the runtime allows.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_timewheel::{Advance, Error, MissedRuns, Recurrence, Repeat, Scheduler, WheelKind};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// A job log: each run records its job's name and the (paused) time it was started at.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(&'static str, Instant)>>>);

impl Log {
    fn job(&self, name: &'static str) -> impl Fn(String) -> std::future::Ready<()> + Send + Sync + 'static {
        let log = self.0.clone();
        move |_key| {
            log.lock().unwrap().push((name, Instant::now()));
            std::future::ready(())
        }
    }

    fn runs(&self) -> Vec<(&'static str, Instant)> {
        self.0.lock().unwrap().clone()
    }

    /// The offsets from `from` of the runs of `name`.
    fn offsets(&self, name: &str, from: Instant) -> Vec<Duration> {
        self.runs().into_iter().filter(|(n, _)| *n == name).map(|(_, at)| at - from).collect()
    }
}

fn every(ms: u64) -> Recurrence {
    Recurrence::every(Duration::from_millis(ms))
}

fn invalid<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    match result {
        Err(Error::Invalid(why)) => why,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn every_runs_at_a_fixed_rate_as_schedule_repeating_does() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let done = timer.schedule_recurring("a", every(100), log.job("a")).await.unwrap();
    let twin = timer.schedule_repeating("b", 100 * MS, Repeat::Times(3), log.job("b")).await.unwrap();
    twin.await.unwrap();
    assert_eq!(log.offsets("a", start), [100 * MS, 200 * MS, 300 * MS]);
    assert_eq!(log.offsets("a", start), log.offsets("b", start));
    assert!(timer.cancel("a").await);
    assert_eq!(done.await, Err(Error::Cancelled));
    assert_eq!(
        timer.schedule_recurring("b", every(100), log.job("b")).await.map(drop),
        Ok(()),
        "the key is free once the series ended"
    );
    assert_eq!(
        timer.schedule_recurring("b", every(100), log.job("b")).await.map(drop),
        Err(Error::DuplicateKey("b".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn a_limit_ends_the_series_and_its_scheduled_resolves_ok() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let done = timer.schedule_recurring("poison", every(250).limit(4), log.job("p")).await.unwrap();
    assert_eq!(done.await, Ok(()));
    assert_eq!(log.offsets("p", start), [250 * MS, 500 * MS, 750 * MS, 1000 * MS]);
    assert!(!timer.contains("poison"));
    assert_eq!(timer.stats().fired, 4);
}

#[tokio::test(start_paused = true)]
async fn until_ends_the_series_on_the_wall_clock_mapped_onto_tokios() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    // The end is a wall-clock time, 350 ms from now; with Tokio's clock paused, the wall clock
    // is mapped onto it when the series is scheduled.
    let r = every(100).until(SystemTime::now() + 350 * MS);
    let done = timer.schedule_recurring("u", &r, log.job("u")).await.unwrap();
    assert_eq!(done.await, Ok(()));
    assert_eq!(log.offsets("u", start), [100 * MS, 200 * MS, 300 * MS]);
    assert!(r.end().is_some(), "passed by reference, the recurrence is still the caller's");
}

#[tokio::test(start_paused = true)]
async fn a_start_puts_the_first_run_there_and_keeps_its_grid() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let r = every(300).starting(SystemTime::now() + SEC).limit(3);
    timer.schedule_recurring("s", r, log.job("s")).await.unwrap().await.unwrap();
    let runs = log.offsets("s", start);
    assert_eq!(runs.len(), 3);
    // The wall clock moves a little in real time between the test's reading and the
    // service's: within a millisecond, the first run is at the start, the rest on its grid.
    assert!(runs[0] >= SEC - MS && runs[0] <= SEC + MS, "{runs:?}");
    assert_eq!([runs[1] - runs[0], runs[2] - runs[1]], [300 * MS, 300 * MS]);
}

#[tokio::test(start_paused = true)]
async fn missed_runs_follow_the_recurrences_policy() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    timer.schedule_recurring("skip", every(10).missed(MissedRuns::Skip), log.job("skip")).await.unwrap();
    timer.schedule_recurring("burst", every(10), log.job("burst")).await.unwrap();
    // Both moved a second into the past: Skip runs once, Burst makes up the hundred runs.
    timer.reschedule_at("skip", start - SEC).await.unwrap();
    timer.reschedule_at("burst", start - SEC).await.unwrap();
    tokio::time::sleep(5 * MS).await;
    let skipped = log.offsets("skip", start).len();
    let burst = log.offsets("burst", start).len();
    assert_eq!(skipped, 1, "one run for the missed ones");
    assert!(burst > 50, "{burst} runs made up");
}

#[tokio::test(start_paused = true)]
async fn upsert_creates_a_timer_when_the_key_is_free() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    assert_eq!(timer.upsert_recurring("k", every(100).limit(2), log.job("new")).await, Ok(true));
    assert!(timer.contains("k"));
    tokio::time::sleep(SEC).await;
    assert_eq!(log.offsets("new", start), [100 * MS, 200 * MS]);
    assert!(!timer.contains("k"));
}

#[tokio::test(start_paused = true)]
async fn upsert_replaces_the_recurrence_and_the_job_of_the_pending_timer() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let old = timer.schedule_recurring("k", every(100), log.job("old")).await.unwrap();
    tokio::time::sleep(250 * MS).await;
    assert_eq!(log.offsets("old", start), [100 * MS, 200 * MS]);
    assert_eq!(timer.upsert_recurring("k", every(300), log.job("new")).await, Ok(false));
    assert_eq!(old.await, Err(Error::Cancelled), "the replaced timer ended as cancelled");
    tokio::time::sleep(SEC).await;
    assert_eq!(log.offsets("old", start), [100 * MS, 200 * MS], "the old job never runs again");
    assert_eq!(log.offsets("new", start), [550 * MS, 850 * MS, 1150 * MS], "the new series starts at the upsert");
    assert_eq!(timer.len(), 1);
    let stats = timer.stats();
    assert_eq!((stats.scheduled, stats.cancelled, stats.pending), (2, 1, 1));
    // A bad recurrence leaves the pending timer as it was.
    assert!(invalid(timer.upsert_recurring("k", every(0), log.job("bad")).await).contains("every(0s)"));
    assert_eq!(timer.deadline("k"), Some(start + 1450 * MS));
}

#[tokio::test(start_paused = true)]
async fn upsert_replaces_a_one_shot_timer_too() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let once = timer.schedule("k", 50 * MS, |_| async {}).await.unwrap();
    assert_eq!(timer.upsert_recurring("k", every(100).limit(1), log.job("new")).await, Ok(false));
    assert_eq!(once.await, Err(Error::Cancelled));
    tokio::time::sleep(SEC).await;
    assert_eq!(log.offsets("new", start), [100 * MS]);
    assert_eq!(timer.stats().fired, 1, "the one-shot job never ran");
}

#[tokio::test(start_paused = true)]
async fn cancel_then_upsert_schedules_again() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    assert_eq!(timer.upsert_recurring("k", every(100), log.job("first")).await, Ok(true));
    assert!(timer.cancel("k").await);
    assert_eq!(timer.upsert_recurring("k", every(100).limit(1), log.job("second")).await, Ok(true));
    tokio::time::sleep(SEC).await;
    assert_eq!(log.offsets("first", start), []);
    assert_eq!(log.offsets("second", start), [100 * MS]);
}

/// Upserts race from 32 tasks on a multi-thread runtime, round after round: each round leaves
/// exactly one timer under the key, one upsert of the round created it and every other replaced
/// the one before, and only the surviving timer's job ever runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_upserts_leave_exactly_one_pending_timer() {
    let timer = Scheduler::builder().start().unwrap();
    for round in 0..20 {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let barrier = Arc::new(tokio::sync::Barrier::new(32));
        let tasks: Vec<_> = (0..32u64)
            .map(|i| {
                let (timer, ran, barrier) = (timer.clone(), ran.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    // An hour and i seconds: far enough that nothing fires while the round runs,
                    // and the period tells the survivor.
                    let r = Recurrence::every(Duration::from_secs(3600 + i)).limit(1);
                    let job = move |_key: String| {
                        ran.lock().unwrap().push(i);
                        async {}
                    };
                    timer.upsert_recurring("race", r, job).await.unwrap()
                })
            })
            .collect();
        let mut created = 0;
        for task in tasks {
            created += usize::from(task.await.unwrap());
        }
        assert_eq!(created, 1, "round {round}: one upsert created the timer, the others replaced it");
        assert_eq!(timer.len(), 1, "round {round}");
        // Real time passes between the upsert and this look: well under half a second.
        let left = timer.deadline("race").unwrap() + Duration::from_millis(500) - Instant::now();
        let survivor = left.as_secs() - 3600;
        // Fire the survivor now: its job, and no other, runs.
        timer.reschedule("race", Duration::ZERO).await.unwrap();
        while timer.contains("race") {
            tokio::time::sleep(MS).await;
        }
        timer.flush().await;
        assert_eq!(*ran.lock().unwrap(), [survivor], "round {round}");
    }
    let stats = timer.stats();
    assert_eq!((stats.scheduled, stats.cancelled, stats.fired, stats.pending), (20 * 32, 20 * 31, 20, 0));
}

#[tokio::test(start_paused = true)]
async fn bad_recurrences_are_invalid_and_say_what_is_wrong() {
    let timer = Scheduler::builder().start().unwrap();
    let job = |_: String| async {};
    let schedule = |r: Recurrence| timer.schedule_recurring("k", r, job);
    assert!(invalid(schedule(every(0)).await).contains("every(0s)"));
    assert!(invalid(schedule(Recurrence::every(Duration::from_micros(500))).await).contains("at least 1ms"));
    assert!(invalid(schedule(every(10).limit(0)).await).contains("limit(0)"));
    let now = SystemTime::now();
    let why = invalid(schedule(every(10).starting(now + SEC).until(now)).await);
    assert!(why.contains("until") && why.contains("starting"), "{why}");
    let why = invalid(schedule(every(10).until(now - SEC)).await);
    assert!(why.contains("every 10ms") && why.contains("no run"), "{why}");
    let why = invalid(timer.schedule_recurring("", every(10), job).await);
    assert!(why.contains("key"), "{why}");
    assert!(timer.is_empty(), "nothing was scheduled");
}

/// Every wheel and advance mode (at a 10 ms tick, to keep the interval modes short): a parked
/// deadline is past anything either wheel reaches.
#[tokio::test(start_paused = true)]
async fn a_paused_timer_keeps_its_time_left_and_counts_it_again_when_resumed() {
    for wheel in [WheelKind::Hierarchical, WheelKind::Rounds] {
        for advance in [Advance::NextDeadline, Advance::Interval] {
            let timer = Scheduler::builder().tick(10 * MS).slots(64).wheel(wheel).advance(advance).start().unwrap();
            let log = Log::default();
            let start = Instant::now();
            let buff = timer.schedule("buff", 10 * SEC, log.job("buff")).await.unwrap();
            tokio::time::sleep(4 * SEC).await;
            assert_eq!(timer.pause("buff").await, Ok(6 * SEC));
            assert_eq!(timer.deadline("buff"), None);
            assert!(timer.contains("buff"));
            tokio::time::sleep(100 * SEC).await;
            assert_eq!(log.runs(), [], "a paused timer does not fire ({wheel:?}, {advance:?})");
            assert_eq!(timer.resume("buff").await, Ok(6 * SEC));
            assert_eq!(timer.resume("buff").await, Ok(6 * SEC), "running already: nothing changes");
            assert_eq!(timer.deadline("buff"), Some(start + 110 * SEC));
            assert_eq!(buff.await, Ok(()));
            assert_eq!(log.offsets("buff", start), [110 * SEC], "{wheel:?}, {advance:?}");
            assert_eq!(timer.pause("buff").await, Err(Error::NotFound));
            assert_eq!(timer.resume("nothing").await, Err(Error::NotFound));
            timer.stop().await;
        }
    }
}

/// Two overlapping stuns: each `pause` counts, each `resume` undoes one, and the timer runs
/// again, with the time it had left, only once both are over. Every wheel and advance mode.
#[tokio::test(start_paused = true)]
async fn pauses_stack_and_the_timer_runs_again_only_when_every_one_is_resumed() {
    for wheel in [WheelKind::Hierarchical, WheelKind::Rounds] {
        for advance in [Advance::NextDeadline, Advance::Interval] {
            let timer = Scheduler::builder().tick(10 * MS).slots(64).wheel(wheel).advance(advance).start().unwrap();
            let log = Log::default();
            let start = Instant::now();
            let buff = timer.schedule("buff", 10 * SEC, log.job("buff")).await.unwrap();
            tokio::time::sleep(4 * SEC).await;
            assert_eq!(timer.pause("buff").await, Ok(6 * SEC), "the first stun");
            tokio::time::sleep(SEC).await;
            assert_eq!(timer.pause("buff").await, Ok(6 * SEC), "the second stun: the time left is still 6 s");
            tokio::time::sleep(SEC).await;
            assert_eq!(timer.resume("buff").await, Ok(6 * SEC), "the first stun ends: one is left");
            assert_eq!(timer.deadline("buff"), None, "still paused ({wheel:?}, {advance:?})");
            tokio::time::sleep(100 * SEC).await;
            assert_eq!(log.runs(), [], "still paused: it does not fire ({wheel:?}, {advance:?})");
            assert!(timer.contains("buff"));
            assert_eq!(timer.resume("buff").await, Ok(6 * SEC), "the second stun ends");
            let resumed = Instant::now();
            assert_eq!(timer.deadline("buff"), Some(resumed + 6 * SEC));
            assert_eq!(timer.resume("buff").await, Ok(6 * SEC), "running already: nothing changes");
            assert_eq!(buff.await, Ok(()));
            assert_eq!(log.offsets("buff", start), [resumed + 6 * SEC - start], "{wheel:?}, {advance:?}");
            timer.stop().await;
        }
    }
}

/// A move clears every pause, however many: the timer runs at its new deadline, and a later
/// `resume` finds it running.
#[tokio::test(start_paused = true)]
async fn a_move_clears_every_pause() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    timer.schedule("buff", 10 * SEC, log.job("buff")).await.unwrap();
    for _ in 0..3 {
        timer.pause("buff").await.unwrap();
    }
    timer.reschedule("buff", 2 * SEC).await.unwrap();
    assert_eq!(timer.deadline("buff"), Some(start + 2 * SEC));
    assert_eq!(timer.resume("buff").await, Ok(2 * SEC), "not paused any more");
    tokio::time::sleep(3 * SEC).await;
    assert_eq!(log.offsets("buff", start), [2 * SEC]);
}

#[tokio::test(start_paused = true)]
async fn a_paused_repeating_timer_resumes_on_its_period() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    timer.schedule_recurring("regen", every(1000).limit(3), log.job("r")).await.unwrap();
    tokio::time::sleep(1300 * MS).await;
    assert_eq!(timer.pause("regen").await, Ok(700 * MS));
    tokio::time::sleep(5 * SEC).await;
    assert_eq!(timer.resume("regen").await, Ok(700 * MS));
    tokio::time::sleep(5 * SEC).await;
    assert_eq!(log.offsets("r", start), [1000 * MS, 7000 * MS, 8000 * MS]);
}

#[tokio::test(start_paused = true)]
async fn a_paused_timer_can_be_cancelled_or_moved_which_resumes_it() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    let cancelled = timer.schedule("a", SEC, log.job("a")).await.unwrap();
    timer.schedule("b", SEC, log.job("b")).await.unwrap();
    timer.pause("a").await.unwrap();
    timer.pause("b").await.unwrap();
    assert!(timer.cancel("a").await);
    assert_eq!(cancelled.await, Err(Error::Cancelled));
    timer.reschedule("b", 2 * SEC).await.unwrap();
    assert_eq!(timer.deadline("b"), Some(start + 2 * SEC));
    tokio::time::sleep(3 * SEC).await;
    assert_eq!(log.offsets("b", start), [2 * SEC]);
    assert_eq!(log.offsets("a", start), []);
    // Stopping the service ends a paused timer as stopped.
    let paused = timer.schedule("c", SEC, log.job("c")).await.unwrap();
    timer.pause("c").await.unwrap();
    assert_eq!(timer.stop().await, 1);
    assert_eq!(paused.await, Err(Error::Stopped));
    assert_eq!(timer.pause("c").await, Err(Error::Stopped));
}

#[cfg(feature = "cron")]
mod cron {
    use super::*;

    /// A cron timer every second, six fields: once a second, at each run's exact deadline
    /// (whole wall-clock seconds mapped onto Tokio's clock) and never before it, never twice.
    #[tokio::test(start_paused = true)]
    async fn a_cron_every_second_fires_once_a_second() {
        let timer = Scheduler::builder().start().unwrap();
        let log = Log::default();
        let start = Instant::now();
        let r = Recurrence::cron("* * * * * *").unwrap();
        timer.schedule_recurring("tick", r, log.job("tick")).await.unwrap();
        let mut deadlines = Vec::new();
        for run in 1..=5 {
            let deadline = timer.deadline("tick").unwrap();
            deadlines.push(deadline);
            tokio::time::sleep_until(deadline + 2 * MS).await;
            let runs = log.runs();
            assert_eq!(runs.len(), run, "one run per second");
            let fired = runs[run - 1].1;
            assert!(fired >= deadline, "run {run} fired {:?} early", deadline - fired);
            assert!(fired - deadline <= MS, "run {run} fired {:?} late", fired - deadline);
        }
        assert!(deadlines[0] - start <= SEC, "the first run is the next whole second");
        for pair in deadlines.windows(2) {
            assert_eq!(pair[1] - pair[0], SEC, "a whole second apart");
        }
        tokio::time::sleep(500 * MS).await;
        assert_eq!(log.runs().len(), 5, "nothing more within the fifth second");
    }

    /// A cron timer is due where its next wall-clock run lies, as far after the call.
    #[tokio::test(start_paused = true)]
    async fn a_cron_timer_is_due_at_its_wall_clock_run() {
        let timer = Scheduler::builder().start().unwrap();
        let r = Recurrence::cron("0 5 * * *").unwrap().in_tz("Europe/Berlin").unwrap();
        let (before_i, before_w) = (Instant::now(), SystemTime::now());
        timer.schedule_recurring("reset", &r, |_| async {}).await.unwrap();
        let after_w = SystemTime::now();
        let run = r.next_after(before_w).unwrap();
        let left = timer.deadline("reset").unwrap() - before_i;
        let expected = run.duration_since(before_w).unwrap();
        let slack = after_w.duration_since(before_w).unwrap() + MS;
        assert!(left <= expected && expected - left <= slack, "{left:?} vs {expected:?}");
        assert!(left <= Duration::from_secs(24 * 3600));
    }

    #[tokio::test(start_paused = true)]
    async fn upsert_moves_a_series_from_every_to_cron_and_a_limit_ends_it() {
        let timer = Scheduler::builder().start().unwrap();
        let log = Log::default();
        let old = timer.schedule_recurring("k", every(100), log.job("old")).await.unwrap();
        let r = Recurrence::cron("*/2 * * * * *").unwrap().limit(2);
        assert_eq!(timer.upsert_recurring("k", r, log.job("new")).await, Ok(false));
        assert_eq!(old.await, Err(Error::Cancelled));
        tokio::time::sleep(5 * SEC).await;
        let runs = log.runs();
        assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), ["new", "new"]);
        assert_eq!(runs[1].1 - runs[0].1, 2 * SEC);
        assert!(!timer.contains("k"), "the limit ended the series");
    }

    #[tokio::test(start_paused = true)]
    async fn bad_cron_input_is_invalid_and_named() {
        let why = invalid(Recurrence::cron("0 3 * *"));
        assert!(why.contains("\"0 3 * *\""), "{why}");
        let why = invalid(Recurrence::cron("0 3 * * *").unwrap().in_tz("Mars/Olympus_Mons"));
        assert!(why.contains("\"Mars/Olympus_Mons\""), "{why}");
        let timer = Scheduler::builder().start().unwrap();
        let never = Recurrence::cron("0 0 30 2 *").unwrap();
        let why = invalid(timer.schedule_recurring("k", never, |_| async {}).await);
        assert!(why.contains("\"0 0 30 2 *\"") && why.contains("no run"), "{why}");
    }
}
