//! Calls racing the wheel: cancels and reschedules against the tick that makes their tasks due,
//! and random operations checked against what each call answered.
//!
//! Each runs on the store the run selects (`support/store.rs`: a real `redis-server` that each
//! test starts in a temp directory on a free port of 127.0.0.1, or a SQLite file of the embedded
//! store); every test starts from `support::durable::builder` (a 50 ms tick, 32 slots, a lease of
//! 1 s). Each check is written so that it can fail; the one of the ring's own keys reads them in
//! Redis, on Redis only.
//!
//! Run with `cargo test --features redis --test durable_races` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use support::durable::{builder, keys, Handled, Log, CLOCK_SLACK, LEASE, SLOTS, TICK};
use support::TestStore;
use tokio_timewheel::durable::Task;
use tokio_timewheel::Error;

/// Cancel and reschedule racing the tick that makes the tasks due, while handlers (30 ms
/// each) are in flight. Whatever each call answered:
/// - cancel `true`: no delivery starts after the answer (one in flight may have started before);
/// - cancel `false`: it had been handed out already, so it fired exactly once;
/// - reschedule `Ok`: exactly one delivery starts after the answer, no earlier than the new time
///   (a task in flight is taken back, so one delivery may also have started before the answer);
/// - reschedule `NotFound`: it had been handed out already, so it fired exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_race_the_tick() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "race").concurrency(32).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run({
        let log = log.clone();
        move |task: Task| {
            log.record(&task, 0);
            async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Ok::<(), std::io::Error>(())
            }
        }
    });
    const N: u64 = 400;
    const MOVE: Duration = Duration::from_millis(500);
    let due = SystemTime::now() + Duration::from_millis(700);
    for i in 0..N {
        timers.schedule_at(format!("r{i}"), due, vec![]).await.unwrap();
    }
    // Start the calls a little before the due time so that they straddle it.
    tokio::time::sleep(due.duration_since(SystemTime::now()).unwrap_or_default().saturating_sub(TICK)).await;
    let mut calls = Vec::new();
    for i in 0..N {
        let timers = timers.clone();
        calls.push(tokio::spawn(async move {
            let key = format!("r{i}");
            let asked_at = SystemTime::now();
            if i % 2 == 0 {
                let answer = timers.cancel(&key).await.expect("cancel");
                (key, Ok(answer), asked_at, SystemTime::now())
            } else {
                let answer = timers.reschedule(&key, MOVE).await;
                (key, Err(answer), asked_at, SystemTime::now())
            }
        }));
        if i % 50 == 49 {
            tokio::time::sleep(TICK / 2).await;
        }
    }
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(call.await.unwrap());
    }
    tokio::time::sleep(MOVE + LEASE + TICK * 6).await;
    worker.shutdown().await;
    let (mut cancelled, mut moved, mut taken_back) = (0, 0, 0);
    for (key, answer, asked_at, answered_at) in outcomes {
        let fired = log.of(&key);
        let before: Vec<&Handled> = fired.iter().filter(|h| h.at <= answered_at).collect();
        let after: Vec<&Handled> = fired.iter().filter(|h| h.at > answered_at).collect();
        match answer {
            Ok(true) => {
                cancelled += 1;
                assert!(after.is_empty() && before.len() <= 1, "{key}: cancel said true at {answered_at:?}: {fired:?}");
            }
            Ok(false) => assert_eq!(fired.len(), 1, "{key}: cancel said false (handed out already): {fired:?}"),
            Err(Ok(())) => {
                moved += 1;
                taken_back += before.len();
                assert!(before.len() <= 1 && after.len() == 1, "{key}: rescheduled at {answered_at:?}: {fired:?}");
                let new_time = asked_at + MOVE;
                assert!(
                    after[0].due + CLOCK_SLACK >= new_time && after[0].at + CLOCK_SLACK >= new_time,
                    "{key} fired before its new time after its reschedule answered Ok: {fired:?}"
                );
            }
            Err(Err(Error::NotFound)) => {
                assert_eq!(fired.len(), 1, "{key}: reschedule said NotFound (handed out already): {fired:?}")
            }
            Err(Err(e)) => panic!("reschedule of {key}: {e}"),
        }
    }
    eprintln!("race: of {N}, {cancelled} cancelled, {moved} rescheduled ({taken_back} of them taken back in flight)");
    assert_eq!(timers.len().await.unwrap(), 0);
}

/// One call of the random-operations test and what it answered.
#[derive(Debug)]
struct Op {
    kind: &'static str,
    asked_at: SystemTime,
    answered_at: SystemTime,
    /// Whether the call changed the task: schedule `Ok`, reschedule `Ok`, cancel `true`.
    took: bool,
    /// For a schedule or reschedule that took: the earliest time the task may now start.
    not_before: SystemTime,
}

/// Random schedules, cancels and reschedules, in the ring and the far tier (delays up to 2.5
/// revolutions), while a worker runs. Per key, against what each call answered:
/// - after a cancel that took, nothing starts;
/// - after a schedule or reschedule that took, exactly one delivery starts after the answer (one
///   in flight may also have started before it and been taken back), never before its time;
/// - a cancel or reschedule that did not take means the task had been handed out (claimed by a
///   worker) already;
/// - and at the end the wheel is empty, with its `ring` counter equal to what its slots hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_against_their_answers() {
    let Some(store) = TestStore::start() else { return };
    let name = "random";
    let timers = builder(&store.url(), name).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));
    let revolution = TICK * SLOTS as u32;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut ops: HashMap<String, Vec<Op>> = HashMap::new();
    let mut live: Vec<String> = Vec::new();
    let mut last_due = SystemTime::now();
    for i in 0..1500u64 {
        let roll = next(4);
        let delay = Duration::from_millis(next(revolution.as_millis() as u64 * 5 / 2));
        let asked_at = SystemTime::now();
        let (key, kind, took) = if roll < 2 || live.is_empty() {
            let key = format!("k{i}");
            timers.schedule(&key, delay, vec![]).await.expect("schedule of a fresh key");
            live.push(key.clone());
            (key, "schedule", true)
        } else {
            let key = live[next(live.len() as u64) as usize].clone();
            if roll == 2 {
                let took = timers.cancel(&key).await.expect("cancel");
                (key, "cancel", took)
            } else {
                match timers.reschedule(&key, delay).await {
                    Ok(()) => (key, "reschedule", true),
                    Err(Error::NotFound) => (key, "reschedule", false),
                    Err(e) => panic!("reschedule: {e}"),
                }
            }
        };
        if kind == "cancel" || !took {
            live.retain(|k| *k != key);
        }
        let not_before = asked_at + delay;
        if took && kind != "cancel" {
            last_due = last_due.max(not_before);
        }
        ops.entry(key).or_default().push(Op { kind, asked_at, answered_at: SystemTime::now(), took, not_before });
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    tokio::time::sleep(last_due.duration_since(SystemTime::now()).unwrap_or_default() + LEASE).await;
    tokio::time::sleep(TICK * 6).await;
    worker.shutdown().await;

    let mut problems = Vec::new();
    for (key, ops) in &ops {
        let deliveries = log.of(key);
        let last = ops.last().unwrap();
        let after = |t: SystemTime| deliveries.iter().filter(move |h| h.at > t);
        // A call that did not take found the task handed out already: claimed by a worker
        // (running) or finished. The claim is Redis's decision, on the clock this host shares;
        // the handler may start a moment after the call answered.
        for op in ops.iter().filter(|op| !op.took) {
            if !deliveries.iter().any(|h| h.claimed <= op.answered_at + CLOCK_SLACK) {
                problems.push(format!(
                    "{key}: {} did not take, yet the task had not been handed out: {ops:?} {deliveries:?}",
                    op.kind
                ));
            }
        }
        if last.kind == "cancel" && last.took && after(last.answered_at).count() > 0 {
            problems.push(format!("{key}: fired after its cancel took: {ops:?} {deliveries:?}"));
        }
        if last.kind != "cancel" && last.took {
            let since = if last.kind == "schedule" { last.asked_at } else { last.answered_at };
            if after(since).count() != 1 {
                problems.push(format!(
                    "{key}: {} deliveries after its last {}: {ops:?} {deliveries:?}",
                    after(since).count(),
                    last.kind
                ));
            }
        }
        // Every delivery starts no earlier than the time set by the last call that took and
        // had answered by then (or, before any answer, the schedule's own).
        for h in &deliveries {
            let governing =
                ops.iter().rev().find(|op| op.took && op.kind != "cancel" && op.answered_at <= h.at).unwrap_or(&ops[0]);
            if h.at + CLOCK_SLACK < governing.not_before {
                problems.push(format!(
                    "{key}: started {:?} early: {ops:?} {deliveries:?}",
                    governing.not_before.duration_since(h.at).unwrap()
                ));
            }
        }
    }
    let stray = log.distinct_keys().into_iter().filter(|k| !ops.contains_key(k)).count();
    assert_eq!(stray, 0, "deliveries of keys never scheduled");
    problems.truncate(8);
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    assert_eq!(timers.len().await.unwrap(), 0, "{:?}", timers.stats().await);
    if let Some(server) = store.redis() {
        let ring = server.command(&["GET", &keys(name).ring()]).as_int().unwrap_or(0);
        let held: i64 =
            (0..SLOTS).map(|i| server.command(&["LLEN", &keys(name).slot(i as u64)]).as_int().unwrap_or(0)).sum();
        assert_eq!((ring, held), (0, 0), "the ring counter and what the slots hold, at the end");
    }
    let kinds = |kind: &str, took: bool| ops.values().flatten().filter(|op| op.kind == kind && op.took == took).count();
    eprintln!(
        "random operations: {} schedules, {} cancels ({} too late), {} reschedules ({} too late), {} deliveries",
        kinds("schedule", true),
        kinds("cancel", true),
        kinds("cancel", false),
        kinds("reschedule", true),
        kinds("reschedule", false),
        log.all().len()
    );
}
