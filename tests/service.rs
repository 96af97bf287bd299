//! The service under `tokio::time::pause()`: deterministic, and run for every wheel x advance
//! combination.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_timewheel::{Advance, Error, Repeat, Scheduler, WheelKind, MIN_TICK};

const COMBOS: [(WheelKind, Advance); 4] = [
    (WheelKind::Hierarchical, Advance::NextDeadline),
    (WheelKind::Hierarchical, Advance::Interval),
    (WheelKind::Rounds, Advance::NextDeadline),
    (WheelKind::Rounds, Advance::Interval),
];

fn start(wheel: WheelKind, advance: Advance, tick: Duration) -> Scheduler {
    Scheduler::builder().tick(tick).slots(64).wheel(wheel).advance(advance).start().expect("valid settings")
}

/// A job log: each run records its key and the (paused) time it was started at.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(String, Instant)>>>);

impl Log {
    /// A job that records its run in the closure itself, i.e. at the moment the service starts
    /// it, so the log is complete as soon as the timer's `Scheduled` resolves.
    fn job(&self) -> impl Fn(String) -> std::future::Ready<()> + Send + Sync + 'static {
        let log = self.0.clone();
        move |key| {
            log.lock().unwrap().push((key, Instant::now()));
            std::future::ready(())
        }
    }

    fn runs(&self) -> Vec<(String, Instant)> {
        self.0.lock().unwrap().clone()
    }

    fn keys(&self) -> Vec<String> {
        self.runs().into_iter().map(|(k, _)| k).collect()
    }
}

#[tokio::test(start_paused = true)]
async fn fires_never_early_and_within_two_ticks() {
    for (wheel, advance) in COMBOS {
        for tick in [Duration::from_millis(1), Duration::from_millis(10)] {
            let timer = start(wheel, advance, tick);
            let log = Log::default();
            let mut expected = Vec::new();
            for (i, ms) in [0u64, 1, 2, 5, 37, 64, 65, 999, 1_000, 4_097].into_iter().enumerate() {
                let key = format!("t{i}");
                let deadline = Instant::now() + Duration::from_millis(ms);
                let done = timer.schedule(key.as_str(), Duration::from_millis(ms), log.job()).await.unwrap();
                expected.push((key, deadline, done));
            }
            for (key, deadline, done) in expected {
                assert_eq!(done.await, Ok(()), "{key} with {wheel:?}/{advance:?}");
                let (_, at) = log.runs().into_iter().find(|(k, _)| *k == key).expect("ran");
                assert!(at >= deadline, "{key} fired {:?} early ({wheel:?}/{advance:?}, tick {tick:?})", deadline - at);
                assert!(
                    at <= deadline + 2 * tick,
                    "{key} fired {:?} late ({wheel:?}/{advance:?}, tick {tick:?})",
                    at - deadline
                );
            }
            assert_eq!(log.runs().len(), 10, "each timer ran exactly once");
            assert!(timer.is_empty());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn far_deadlines_fire_on_time() {
    for (wheel, advance) in COMBOS {
        let tick = Duration::from_secs(1);
        let timer = start(wheel, advance, tick);
        let log = Log::default();
        let review = Duration::from_secs(48 * 3600); // auto-review an order after 48 hours
        let deadline = Instant::now() + review;
        let done = timer.schedule("review:order-42", review, log.job()).await.unwrap();
        assert_eq!(done.await, Ok(()));
        let at = log.runs()[0].1;
        assert!(
            at >= deadline && at <= deadline + 2 * tick,
            "{wheel:?}/{advance:?}: fired at {:?} from the deadline",
            at - deadline
        );
    }
}

/// The farthest instant after `now` that an `Instant` reaches (to within a factor of two).
fn farthest_instant(now: Instant) -> Instant {
    let mut d = Duration::from_secs(u64::MAX);
    loop {
        if let Some(at) = now.checked_add(d) {
            return at;
        }
        d /= 2;
    }
}

/// Every accepted timer has a deadline, however far: a delay or an instant past the latest
/// deadline tick (`Duration::MAX` included, which `tokio::time::sleep` takes too) is clamped to
/// that tick, never read as a paused timer's. Every call that sets a deadline, on both wheels;
/// a far delay short of the limit keeps its exact deadline.
#[tokio::test(start_paused = true)]
async fn a_far_deadline_is_clamped_and_always_has_a_deadline() {
    let year = Duration::from_secs(365 * 86_400);
    let far_delays = [Duration::from_secs(1 << 54), Duration::from_millis(u64::MAX - 1_000), Duration::MAX];
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, MIN_TICK);
        let (queue, _expired) = timer.queue::<usize>();
        let log = Log::default();
        let now = Instant::now();
        let far_at = farthest_instant(now);
        let mut latest = None;
        let mut clamped = |at: Option<Instant>, what: &str| {
            let at = at.unwrap_or_else(|| panic!("{wheel:?}/{advance:?}: {what} has no deadline"));
            assert!(at > now + 8_000 * year, "{wheel:?}/{advance:?}: {what} is due in {:?}", at - now);
            assert_eq!(
                *latest.get_or_insert(at),
                at,
                "{wheel:?}/{advance:?}: {what} is clamped to the latest deadline"
            );
        };
        let mut sleeps = Vec::new();
        for (i, &delay) in far_delays.iter().enumerate() {
            let key = |call: &str| format!("{call}-{i}");
            timer.schedule(key("schedule"), delay, log.job()).await.unwrap();
            clamped(timer.deadline(&key("schedule")), &key("schedule"));
            sleeps.push(Box::pin(timer.sleep_keyed(key("sleep"), delay)));
            clamped(timer.deadline(&key("sleep")), &key("sleep"));
            assert!(timer.schedule_or_reset(key("reset"), delay, log.job()).await.unwrap());
            clamped(timer.deadline(&key("reset")), &key("reset"));
            assert_eq!(timer.schedule_many([(key("many"), delay, log.job())]).await, [Ok(())]);
            clamped(timer.deadline(&key("many")), &key("many"));
            timer.schedule(key("moved"), Duration::from_secs(1), log.job()).await.unwrap();
            timer.reschedule(&key("moved"), delay).await.unwrap();
            clamped(timer.deadline(&key("moved")), &key("moved"));
            let handle =
                timer.schedule_or_reset_handle(key("handle"), Duration::from_secs(1), log.job()).await.unwrap();
            handle.reschedule(delay).unwrap();
            clamped(handle.deadline(), &key("handle"));
            queue.schedule(key("queue"), delay, i).await.unwrap();
            clamped(queue.deadline(&key("queue")), &key("queue"));
            queue.schedule(key("queue-moved"), Duration::from_secs(1), i).await.unwrap();
            queue.reschedule(&key("queue-moved"), delay).await.unwrap();
            clamped(queue.deadline(&key("queue-moved")), &key("queue-moved"));
        }
        timer.schedule_at("at", far_at, log.job()).await.unwrap();
        clamped(timer.deadline("at"), "schedule_at");
        timer.schedule("moved-at", Duration::from_secs(1), log.job()).await.unwrap();
        timer.reschedule_at("moved-at", far_at).await.unwrap();
        clamped(timer.deadline("moved-at"), "reschedule_at");
        queue.schedule_at("queue-at", far_at, 9).await.unwrap();
        clamped(queue.deadline("queue-at"), "TimerQueue::schedule_at");
        queue.schedule("queue-moved-at", Duration::from_secs(1), 9).await.unwrap();
        queue.reschedule_at("queue-moved-at", far_at).await.unwrap();
        clamped(queue.deadline("queue-moved-at"), "TimerQueue::reschedule_at");
        // A far timer paused and resumed is due where the time it had left puts it.
        let left = timer.pause("at").await.unwrap();
        assert!(left > 8_000 * year);
        assert_eq!(timer.deadline("at"), None, "paused");
        assert_eq!(timer.resume("at").await, Ok(left));
        assert!(timer.deadline("at").is_some_and(|at| at > now + 8_000 * year));
        // A repeating timer with a far period reads its first run's exact instant.
        let period = Duration::from_secs(1 << 54);
        timer.schedule_repeating("every", period, Repeat::Forever, log.job()).await.unwrap();
        assert_eq!(timer.deadline("every"), Some(now + period));
        // Short of the limit, a far deadline is exact.
        timer.schedule("millennium", 1_000 * year, log.job()).await.unwrap();
        assert_eq!(timer.deadline("millennium"), Some(now + 1_000 * year));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(log.runs(), [], "{wheel:?}/{advance:?}: nothing far fired");
        timer.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn schedule_at_in_the_past_fires_on_the_next_tick() {
    for (wheel, advance) in COMBOS {
        let tick = Duration::from_millis(5);
        let timer = start(wheel, advance, tick);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let log = Log::default();
        let asked = Instant::now();
        let done = timer.schedule_at("late", asked - Duration::from_millis(30), log.job()).await.unwrap();
        assert_eq!(done.await, Ok(()));
        assert!(log.runs()[0].1 <= asked + tick, "{wheel:?}/{advance:?}: past deadline not fired on the next tick");
    }
}

#[tokio::test(start_paused = true)]
async fn cancelled_timers_never_run() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let doomed = timer.schedule("conn-1", Duration::from_millis(20), log.job()).await.unwrap();
        let kept = timer.schedule("conn-2", Duration::from_millis(20), log.job()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(19)).await;
        assert!(timer.cancel("conn-1").await);
        assert!(!timer.cancel("conn-1").await, "a second cancel finds nothing");
        assert!(!timer.cancel("never-scheduled").await);
        assert_eq!(doomed.await, Err(Error::Cancelled));
        assert_eq!(kept.await, Ok(()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(log.keys(), ["conn-2"], "{wheel:?}/{advance:?}");
        let stats = timer.stats();
        assert_eq!((stats.pending, stats.fired, stats.cancelled, stats.scheduled), (0, 1, 1, 2));
    }
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_key_is_refused_and_the_first_timer_kept() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let first = timer.schedule("buff:haste", Duration::from_millis(30), log.job()).await.unwrap();
        let err = timer.schedule(String::from("buff:haste"), Duration::from_millis(5), log.job()).await.unwrap_err();
        assert_eq!(err, Error::DuplicateKey("buff:haste".into()));
        assert!(err.to_string().contains("taken by a pending timer"), "the message says what happened: {err}");
        let at = Instant::now();
        assert_eq!(first.await, Ok(()));
        assert_eq!(log.runs().len(), 1);
        assert!(log.runs()[0].1 >= at + Duration::from_millis(30), "the first timer kept its own deadline");
        // Once it has ended, the key is free again.
        assert!(timer.schedule("buff:haste", Duration::from_millis(5), log.job()).await.is_ok());
    }
}

#[tokio::test(start_paused = true)]
async fn keys_can_be_any_kind_of_string_short_or_long() {
    use std::borrow::Cow;
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let log = Log::default();
    let long = "order:auto-review:2026-11-21:0000042"; // longer than the 14 bytes stored inline
    let owned = String::from("conn-owned");
    let keys: Vec<String> = vec!["conn-str".into(), owned.clone(), format!("{long}-a"), format!("{long}-b")];
    let delay = Duration::from_millis(5);
    let mut done = vec![
        timer.schedule("conn-str", delay, log.job()).await.unwrap(),
        timer.schedule(&owned, delay, log.job()).await.unwrap(),
        timer.schedule(Cow::Borrowed(keys[2].as_str()), delay, log.job()).await.unwrap(),
        timer.schedule(Arc::<str>::from(keys[3].as_str()), delay, log.job()).await.unwrap(),
    ];
    // The same key in another form is the same key.
    let err = timer.schedule(owned.clone(), delay, log.job()).await.unwrap_err();
    assert_eq!(err, Error::DuplicateKey(owned.clone()));
    for (scheduled, key) in done.iter().zip(&keys) {
        assert_eq!(scheduled.key(), key);
        assert!(timer.contains(key), "{key} is pending");
    }
    for scheduled in done.drain(..) {
        assert_eq!(scheduled.await, Ok(()));
    }
    let mut fired = log.keys();
    fired.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(fired, expected, "each job got its own key, whole");
}

#[tokio::test(start_paused = true)]
async fn repeating_timers_run_at_a_fixed_rate() {
    for (wheel, advance) in COMBOS {
        let tick = Duration::from_millis(1);
        let timer = start(wheel, advance, tick);
        let log = Log::default();
        let period = Duration::from_millis(7);
        let start_at = Instant::now();
        let done = timer.schedule_repeating("dot", period, Repeat::Times(5), log.job()).await.unwrap();
        assert_eq!(done.await, Ok(()));
        let runs = log.runs();
        assert_eq!(runs.len(), 5, "{wheel:?}/{advance:?}");
        for (n, (_, at)) in runs.iter().enumerate() {
            let due = start_at + period * (n as u32 + 1);
            assert!(
                *at >= due && *at <= due + 2 * tick,
                "run {n} at {:?}, due {:?} ({wheel:?}/{advance:?})",
                *at - start_at,
                due - start_at
            );
        }
        assert!(!timer.contains("dot"));
        assert_eq!(timer.stats().fired, 5);
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_runtime_does_not_make_a_repeating_timer_drift() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let log = Log::default();
    let start_at = Instant::now();
    let done = timer.schedule_repeating("tick", Duration::from_millis(10), Repeat::Times(10), log.job()).await.unwrap();
    // Jump the clock 35 ms in one step, as a stalled runtime would see it: runs 1-3 are late.
    tokio::time::advance(Duration::from_millis(35)).await;
    assert_eq!(done.await, Ok(()));
    let runs = log.runs();
    assert_eq!(runs.len(), 10);
    let last = runs[9].1 - start_at;
    assert!(last >= Duration::from_millis(100) && last <= Duration::from_millis(102), "run 10 at {last:?}: drifted");
}

#[tokio::test(start_paused = true)]
async fn forever_repeats_until_cancelled() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let done =
            timer.schedule_repeating("regen", Duration::from_millis(10), Repeat::Forever, log.job()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(55)).await;
        assert!(timer.cancel("regen").await);
        assert_eq!(done.await, Err(Error::Cancelled));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(log.runs().len(), 5, "{wheel:?}/{advance:?}: runs at 10..50 ms, none after the cancel");
    }
}

#[tokio::test(start_paused = true)]
async fn sleep_keyed_wakes_or_reports_the_cancel() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let before = Instant::now();
        timer.sleep_keyed("cooldown:a", Duration::from_millis(40)).await.unwrap();
        assert!(Instant::now() >= before + Duration::from_millis(40));

        let other = timer.clone();
        let sleeper = tokio::spawn(async move { other.sleep_keyed("cooldown:b", Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(timer.contains("cooldown:b"));
        assert!(timer.cancel("cooldown:b").await);
        assert_eq!(sleeper.await.unwrap(), Err(Error::Cancelled), "{wheel:?}/{advance:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_a_keyed_sleep_cancels_it_but_dropping_scheduled_does_not() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let timed_out =
        tokio::time::timeout(Duration::from_millis(10), timer.sleep_keyed("s", Duration::from_secs(1))).await;
    assert!(timed_out.is_err());
    assert!(!timer.contains("s"), "the dropped keyed sleep released its key");
    assert_eq!(timer.stats().cancelled, 1);

    let log = Log::default();
    drop(timer.schedule("fire-and-forget", Duration::from_millis(10), log.job()).await.unwrap());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(log.keys(), ["fire-and-forget"]);
}

#[tokio::test(start_paused = true)]
async fn reschedule_moves_the_deadline_from_now() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let done = timer.schedule("idle:conn-7", Duration::from_millis(30), log.job()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let moved_at = Instant::now();
        timer.reschedule("idle:conn-7", Duration::from_millis(30)).await.unwrap();
        assert_eq!(done.await, Ok(()));
        let at = log.runs()[0].1;
        assert!(at >= moved_at + Duration::from_millis(30), "{wheel:?}/{advance:?}: fired at the old deadline");
        assert!(at <= moved_at + Duration::from_millis(32));
        assert_eq!(timer.reschedule("idle:conn-7", Duration::from_millis(1)).await, Err(Error::NotFound));
        assert_eq!(timer.reschedule("nope", Duration::from_millis(1)).await, Err(Error::NotFound));
    }
}

#[tokio::test(start_paused = true)]
async fn rescheduling_a_repeating_timer_keeps_its_period_from_there() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let log = Log::default();
    let t0 = Instant::now();
    let done = timer.schedule_repeating("r", Duration::from_millis(10), Repeat::Times(3), log.job()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await; // run 1 at 10 ms
    timer.reschedule("r", Duration::from_millis(100)).await.unwrap(); // run 2 at 115 ms, run 3 at 125 ms
    assert_eq!(done.await, Ok(()));
    let at: Vec<Duration> = log.runs().iter().map(|(_, t)| *t - t0).collect();
    assert_eq!(at, [Duration::from_millis(10), Duration::from_millis(115), Duration::from_millis(125)]);
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_an_error_never_a_panic() {
    let invalid = |r: Result<_, Error>| matches!(r, Err(Error::Invalid(_)));
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let job = |_key: String| async {};
    assert!(invalid(timer.schedule("", Duration::from_secs(1), job).await.map(drop)));
    assert!(invalid(timer.schedule_repeating("k", Duration::ZERO, Repeat::Forever, job).await.map(drop)));
    assert!(invalid(timer.schedule_repeating("k", Duration::from_secs(1), Repeat::Times(0), job).await.map(drop)));
    // A first run past what `Instant` can represent (a one-shot delay that far is clamped).
    assert!(invalid(timer.schedule_repeating("k", Duration::MAX, Repeat::Times(1), job).await.map(drop)));
    assert!(timer.is_empty(), "nothing was accepted");
    assert_eq!(timer.reschedule("k", Duration::MAX).await, Err(Error::NotFound));

    assert!(invalid(Scheduler::builder().tick(Duration::ZERO).start().map(drop)));
    assert!(invalid(Scheduler::builder().slots(0).start().map(drop)));
    assert!(invalid(Scheduler::builder().slots(0).wheel(WheelKind::Rounds).start().map(drop)));
    assert!(invalid(Scheduler::builder().slots(1).wheel(WheelKind::Hierarchical).start().map(drop)));
    assert!(invalid(Scheduler::builder().max_pending(0).start().map(drop)));
    assert!(invalid(Scheduler::builder().channel_capacity(0).start().map(drop)));
    assert!(invalid(Scheduler::builder().channel_capacity(usize::MAX).start().map(drop)));
    let err = Scheduler::builder().capacity(usize::MAX).start().unwrap_err();
    assert!(err.to_string().contains("room for"), "an impossible capacity is refused, not an abort: {err}");
    assert!(Scheduler::builder().capacity(10_000).start().is_ok());
    let err = Scheduler::builder().tick(Duration::ZERO).start().unwrap_err();
    assert!(err.to_string().contains("tick"), "the message names the setting: {err}");
}

/// A tick below Tokio's timer's resolution is refused, saying the minimum and why: the service
/// cannot wake more often, and at a 1 ns tick an idle service counted itself millions of ticks
/// late. `MIN_TICK` itself, and a tick just past it, are accepted.
#[tokio::test(start_paused = true)]
async fn a_tick_below_tokios_resolution_is_refused() {
    assert_eq!(MIN_TICK, Duration::from_millis(1));
    for tick in [Duration::from_nanos(1), Duration::from_micros(100), MIN_TICK - Duration::from_nanos(1)] {
        let Err(Error::Invalid(why)) = Scheduler::builder().tick(tick).start() else {
            panic!("a {tick:?} tick started")
        };
        assert!(why.contains("at least 1ms") && why.contains("resolution of Tokio's timer"), "{tick:?}: {why}");
        assert!(why.contains(&format!("{tick:?}")), "names the tick given: {why}");
    }
    for tick in [MIN_TICK, MIN_TICK + Duration::from_nanos(7)] {
        let timer = Scheduler::builder().tick(tick).start().expect("a tick of 1 ms or more");
        let done = timer.schedule("t", tick, |_| async {}).await.unwrap();
        assert_eq!(done.await, Ok(()));
    }
}

#[test]
fn starting_outside_a_runtime_is_an_error() {
    assert!(matches!(Scheduler::builder().start(), Err(Error::Invalid(_))));
}

#[tokio::test(start_paused = true)]
async fn max_pending_caps_the_service() {
    let timer = Scheduler::builder().max_pending(2).start().unwrap();
    let job = |_key: String| async {};
    timer.schedule("a", Duration::from_secs(1), job).await.unwrap();
    timer.schedule("b", Duration::from_secs(1), job).await.unwrap();
    assert_eq!(timer.schedule("c", Duration::from_secs(1), job).await.unwrap_err(), Error::Full(2));
    assert!(!timer.contains("c"));
    timer.cancel("a").await;
    assert!(timer.schedule("c", Duration::from_secs(1), job).await.is_ok(), "room again after a cancel");
    assert_eq!(timer.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn stop_ends_every_pending_timer_as_stopped() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let mut waiting = Vec::new();
        for i in 0..10 {
            waiting.push(timer.schedule(format!("t{i}"), Duration::from_secs(60), log.job()).await.unwrap());
        }
        let repeating =
            timer.schedule_repeating("rep", Duration::from_millis(5), Repeat::Forever, log.job()).await.unwrap();
        let other = timer.clone();
        let sleeper = tokio::spawn(async move { other.sleep_keyed("nap", Duration::from_secs(60)).await });
        tokio::time::sleep(Duration::from_millis(12)).await;
        assert_eq!(timer.stop().await, 12, "{wheel:?}/{advance:?}");
        assert_eq!(timer.stop().await, 0, "stop is idempotent");
        for done in waiting {
            assert_eq!(done.await, Err(Error::Stopped));
        }
        assert_eq!(repeating.await, Err(Error::Stopped));
        assert_eq!(sleeper.await.unwrap(), Err(Error::Stopped));
        assert_eq!(log.runs().len(), 2, "the repeating timer ran at 5 and 10 ms only");
        assert!(timer.is_empty() && !timer.contains("t0"));
        let stats = timer.stats();
        assert_eq!((stats.stopped, stats.scheduled), (12, 12));
        assert_eq!(timer.schedule("late", Duration::from_secs(1), log.job()).await.unwrap_err(), Error::Stopped);
        assert_eq!(timer.reschedule("t1", Duration::from_secs(1)).await, Err(Error::Stopped));
        assert_eq!(timer.sleep_keyed("nap", Duration::from_secs(1)).await, Err(Error::Stopped));
        assert!(!timer.cancel("t1").await);
        timer.flush().await; // returns at once
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_last_handle_stops_the_service() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let done = timer.schedule("orphan", Duration::from_secs(60), |_| async {}).await.unwrap();
    drop(timer);
    assert_eq!(done.await, Err(Error::Stopped));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_job_does_not_stop_the_wheel() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let log = Log::default();
    timer
        .schedule("panics-in-closure", Duration::from_millis(1), |_key| -> std::future::Ready<()> { panic!("boom") })
        .await
        .unwrap();
    timer.schedule("panics-in-future", Duration::from_millis(1), |_key| async { panic!("boom") }).await.unwrap();
    let after = timer.schedule("after", Duration::from_millis(5), log.job()).await.unwrap();
    assert_eq!(after.await, Ok(()));
    assert_eq!(log.keys(), ["after"]);
    assert_eq!(timer.stats().fired, 3);
}

/// Jobs due together are started together: one that finishes in its first poll, one that has to
/// wait (and goes on as a task of its own), one that panics. None holds up the others or the
/// wheel. Each records its key from inside its future, so this tests the futures being run.
#[tokio::test(start_paused = true)]
async fn jobs_due_together_all_run_whether_they_finish_wait_or_panic() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (open, gate) = tokio::sync::watch::channel(false);
    let record = |ran: &Arc<Mutex<Vec<String>>>| {
        let ran = ran.clone();
        move |key: String| {
            let ran = ran.clone();
            async move { ran.lock().unwrap().push(key) }
        }
    };
    let waits = {
        let ran = ran.clone();
        move |key: String| {
            let (mut gate, ran) = (gate.clone(), ran.clone());
            async move {
                gate.wait_for(|open| *open).await.expect("the gate stays");
                ran.lock().unwrap().push(key);
            }
        }
    };
    timer.schedule("waits", Duration::from_millis(3), waits).await.unwrap();
    timer.schedule("panics", Duration::from_millis(3), |_key| async { panic!("boom") }).await.unwrap();
    timer.schedule("quick", Duration::from_millis(3), record(&ran)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*ran.lock().unwrap(), ["quick"], "the quick job ran; the waiting one is still waiting");
    open.send(true).unwrap();
    timer.schedule("later", Duration::from_millis(5), record(&ran)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*ran.lock().unwrap(), ["quick", "waits", "later"]);
    assert_eq!(timer.stats().fired, 4);
}

/// A late wake-up fires everything due in one advance, and starts it in deadline order, one-shot
/// and repeating timers alike.
#[tokio::test(start_paused = true)]
async fn one_late_advance_starts_jobs_in_deadline_order() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let log = Log::default();
    timer.schedule("a", Duration::from_millis(5), log.job()).await.unwrap();
    timer.schedule_repeating("r", Duration::from_millis(10), Repeat::Times(2), log.job()).await.unwrap();
    let b = timer.schedule("b", Duration::from_millis(15), log.job()).await.unwrap();
    timer.flush().await;
    // One jump past "a" and the first "r": the service wakes once for both.
    tokio::time::advance(Duration::from_millis(12)).await;
    assert_eq!(b.await, Ok(()));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(log.keys(), ["a", "r", "b", "r"]);
}

/// Every accepted timer ends exactly once, whatever mix of operations it met.
#[tokio::test(start_paused = true)]
async fn every_accepted_timer_ends_exactly_once() {
    for (wheel, advance) in COMBOS {
        let timer = start(wheel, advance, Duration::from_millis(1));
        let log = Log::default();
        let mut outcomes = Vec::new();
        let mut rng = 0x5EED_u64;
        let mut next = move |n: u64| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for round in 0..400 {
            let key = format!("k{}", next(40));
            match next(4) {
                0 | 1 => {
                    if let Ok(done) = timer.schedule(key.as_str(), Duration::from_millis(next(50)), log.job()).await {
                        outcomes.push((key, done));
                    }
                }
                2 => drop(timer.cancel(&key).await),
                _ => drop(timer.reschedule(&key, Duration::from_millis(next(50))).await),
            }
            if round % 7 == 0 {
                tokio::time::sleep(Duration::from_millis(next(10))).await;
            }
        }
        let left = timer.stop().await;
        let (mut fired, mut cancelled, mut stopped) = (0, 0, 0);
        for (_, done) in outcomes.iter_mut() {
            match done.await {
                Ok(()) => fired += 1,
                Err(Error::Cancelled) => cancelled += 1,
                Err(Error::Stopped) => stopped += 1,
                Err(e) => panic!("unexpected outcome {e}"),
            }
        }
        let stats = timer.stats();
        assert_eq!(stats.scheduled as usize, outcomes.len());
        assert_eq!((stats.fired, stats.cancelled, stats.stopped), (fired, cancelled, stopped), "{wheel:?}/{advance:?}");
        assert_eq!(left as u64, stopped);
        assert_eq!(log.runs().len() as u64, fired, "every fired timer ran once, no cancelled one ran");
        assert!(
            fired > 0 && cancelled > 0 && stopped > 0,
            "the mix exercised every ending: {fired} {cancelled} {stopped}"
        );
    }
}

/// A cancel never waits for the actor, even with many requests made since it last ran: it
/// releases the key under the shard's lock, so it is complete the first time it is polled. The
/// cancelled timer never runs, and its key can be scheduled again at once.
#[tokio::test(start_paused = true)]
async fn a_cancel_completes_at_once_while_the_actor_has_not_run() {
    for repeat in [None, Some(Repeat::Forever)] {
        let timer = Scheduler::builder().channel_capacity(1).start().unwrap();
        let log = Log::default();
        let first = match repeat {
            None => timer.schedule("z", Duration::from_millis(5), log.job()).await.unwrap(),
            Some(r) => timer.schedule_repeating("z", Duration::from_millis(5), r, log.job()).await.unwrap(),
        };
        timer.flush().await;
        // Requests in (almost surely) every shard; the actor cannot run until this task yields.
        let fillers: Vec<String> = (0..64).map(|i| format!("filler-{i}")).collect();
        let fill = fillers.iter().map(|key| (key.as_str(), Duration::from_secs(60), log.job()));
        assert!(timer.schedule_many(fill).await.iter().all(Result::is_ok));
        {
            let cancel = std::pin::pin!(timer.cancel("z"));
            assert_eq!(futures::poll!(cancel), std::task::Poll::Ready(true), "the cancel waited ({repeat:?})");
        }
        assert!(!timer.contains("z"));
        assert_eq!(first.await, Err(Error::Cancelled));
        // The same key again, due after the cancelled entry would have been.
        let second = timer.schedule("z", Duration::from_millis(50), log.job()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(log.keys().is_empty(), "the cancelled entry ran ({repeat:?})");
        assert_eq!(second.await, Ok(()), "the new timer under the same key is unharmed ({repeat:?})");
        assert_eq!(log.keys(), ["z"]);
    }
}

/// A schedule, reschedule or cancel never waits for the actor: each places, moves or removes its
/// timer in the key's shard under one lock, so it is complete the first time it is polled, even
/// while the actor cannot run at all (this test's task does not yield between them, and the
/// runtime has one thread). The timers placed so fire on time once it can.
#[tokio::test(start_paused = true)]
async fn requests_complete_at_once_while_the_actor_cannot_run() {
    let timer = Scheduler::builder().channel_capacity(1).start().unwrap();
    let log = Log::default();
    let start = Instant::now();
    // Many timers placed while the actor cannot run, in one batch and one by one.
    let fillers: Vec<String> = (0..4096).map(|i| format!("filler-{i}")).collect();
    let fill = fillers.iter().map(|key| (key.as_str(), Duration::from_secs(60), log.job()));
    assert!(timer.schedule_many(fill).await.iter().all(Result::is_ok));
    for i in 0..64 {
        let key = format!("soon-{i}");
        let schedule = std::pin::pin!(timer.schedule(&key, Duration::from_millis(5), log.job()));
        let std::task::Poll::Ready(scheduled) = futures::poll!(schedule) else {
            panic!("schedule {i} waited");
        };
        drop(scheduled.unwrap());
    }
    let reschedule = std::pin::pin!(timer.reschedule("soon-0", Duration::from_millis(10)));
    assert_eq!(futures::poll!(reschedule), std::task::Poll::Ready(Ok(())), "the reschedule waited");
    let cancel = std::pin::pin!(timer.cancel("soon-1"));
    assert_eq!(futures::poll!(cancel), std::task::Poll::Ready(true), "the cancel waited");
    assert_eq!(timer.len(), 4096 + 63, "every timer is counted before the actor has run");
    let again = timer.schedule("soon-2", Duration::from_secs(1), log.job()).await;
    assert_eq!(again.unwrap_err(), Error::DuplicateKey("soon-2".into()), "the key is claimed at once");
    assert!(log.keys().is_empty());

    tokio::time::sleep(Duration::from_millis(20)).await;
    let runs = log.runs();
    assert_eq!(runs.len(), 63, "the 5 ms timers but the cancelled one, and the moved one");
    for (key, at) in runs {
        let due = if key == "soon-0" { 10 } else { 5 };
        let late = at.duration_since(start);
        assert!(
            late >= Duration::from_millis(due) && late <= Duration::from_millis(due + 2),
            "{key} ran {late:?} after the start, due at {due} ms"
        );
    }
    assert_eq!(timer.len(), 4096);
}

/// Timers placed after a Stop was sent but before the actor handled it were accepted, so the stop
/// must end them too: as stopped, none left pending.
#[tokio::test(start_paused = true)]
async fn requests_queued_behind_a_stop_are_not_lost() {
    let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, Duration::from_millis(1));
    let job = |_key: String| async {};
    // Both are placed before the actor runs and takes the Stop off the channel.
    let (dropped, x, y) = tokio::join!(
        timer.stop(),
        timer.schedule("x", Duration::from_secs(1), job),
        timer.schedule("y", Duration::from_secs(1), job),
    );
    let (x, y) = (x.expect("accepted before the stop was handled"), y.expect("accepted too"));
    assert_eq!(dropped, 2, "the stop counts the timers queued behind it");
    assert_eq!(x.await, Err(Error::Stopped));
    assert_eq!(y.await, Err(Error::Stopped));
    assert!(!timer.contains("x") && !timer.contains("y"));
    assert_eq!(timer.len(), 0);
    assert_eq!(timer.stats().stopped, 2);
}

/// A cancelled timer's job is dropped soon even while the actor sleeps: a shard sweeps the entries
/// of its cancelled timers out of its wheel once it holds a batch of them (1,024), so a burst of
/// cancels does not hold on to their jobs until the actor next wakes; and the actor sweeps every
/// shard whenever it runs.
#[tokio::test(start_paused = true)]
async fn cancelled_jobs_are_dropped_while_the_actor_sleeps() {
    // Enough that every shard sweeps at least once however many there are (at most 64).
    const N: usize = 100_000;
    const MOST_UNSWEPT: usize = 64 * 1023;
    let timer = Scheduler::builder().start().unwrap();
    let token = Arc::new(());
    let keys: Vec<String> = (0..N).map(|i| format!("k-{i}")).collect();
    for key in &keys {
        let token = token.clone();
        let job = move |_key: String| {
            let _held = &token;
            async {}
        };
        timer.schedule(key, Duration::from_secs(3600), job).await.unwrap();
    }
    assert_eq!(Arc::strong_count(&token), N + 1, "every pending job holds the token");
    for key in &keys {
        assert!(timer.cancel(key).await);
    }
    let held = Arc::strong_count(&token) - 1;
    assert!(held <= MOST_UNSWEPT, "{held} cancelled jobs still held while the actor slept");
    timer.flush().await; // the actor runs, and sweeps every shard
    assert_eq!(Arc::strong_count(&token), 1, "every cancelled job dropped once the actor has run");
    assert_eq!(timer.stats().cancelled, N as u64);
}

/// A runtime that goes away before the service's task first runs still ends the timers it had
/// accepted: they resolve `Err(Stopped)`, nothing stays pending, and later calls, batches
/// included, are refused. (The actor's shutdown path used to exist only once its task had run,
/// so these timers never ended, `len` stayed 1 and `schedule_many` kept accepting timers.)
#[test]
fn a_runtime_dropped_before_the_service_ran_ends_its_timers() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (timer, done) = rt.block_on(async {
        let timer = Scheduler::builder().start().unwrap();
        let done = timer.schedule("a", Duration::from_millis(10), |_| async {}).await.unwrap();
        (timer, done)
    });
    drop(rt);
    let other = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    other.block_on(async {
        let outcome = tokio::time::timeout(Duration::from_secs(1), done).await;
        assert_eq!(outcome, Ok(Err(Error::Stopped)), "the accepted timer ended as stopped");
        assert_eq!(timer.len(), 0);
        assert!(!timer.contains("a"));
        assert_eq!(timer.stats().stopped, 1);
        let refused = timer.schedule_many([("b", Duration::from_millis(10), |_: String| async {})]).await;
        assert_eq!(refused, [Err(Error::Stopped)]);
        assert_eq!(timer.schedule("c", Duration::from_millis(10), |_| async {}).await.unwrap_err(), Error::Stopped);
        assert_eq!(timer.stop().await, 0);
    });
}

/// A repeating timer's missed runs, as tokio's `MissedTickBehavior` handles missed ticks: a
/// 10 ms timer moved a second into the past makes up its hundred runs at once with `Burst` (as
/// `schedule_repeating` always did), runs once and then every 10 ms from that run with `Delay`,
/// and runs once and then on its original 10 ms schedule with `Skip`.
#[tokio::test(start_paused = true)]
async fn missed_runs_burst_delay_or_skip() {
    use tokio_timewheel::MissedRuns;
    let ms = Duration::from_millis;
    for missed in [MissedRuns::Burst, MissedRuns::Delay, MissedRuns::Skip] {
        let timer = start(WheelKind::Hierarchical, Advance::NextDeadline, ms(1));
        let log = Log::default();
        let start = Instant::now();
        timer.schedule_repeating_with("poll", ms(10), Repeat::Forever, missed, log.job()).await.unwrap();
        timer.reschedule_at("poll", start - ms(1_000)).await.unwrap();
        tokio::time::sleep(ms(25)).await;
        let runs: Vec<Duration> = log.runs().into_iter().map(|(_, at)| at - start).collect();
        let first = runs[0];
        assert!(first <= ms(1), "{missed:?}: the missed run ran at once, not {first:?}");
        match missed {
            MissedRuns::Burst => {
                assert!(runs.len() >= 100, "{missed:?}: {} runs, the missed ones made up", runs.len());
                assert!(runs[..100].iter().all(|&at| at <= ms(2)), "{missed:?}: made up at once");
            }
            MissedRuns::Delay => assert_eq!(runs, [first, first + ms(10), first + ms(20)], "{missed:?}"),
            MissedRuns::Skip => assert_eq!(runs, [first, ms(10), ms(20)], "{missed:?}"),
        }
    }
}
