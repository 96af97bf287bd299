//! Ambiguous replies: Redis stalls (`DEBUG SLEEP`) past the client's response timeout, so a call's
//! first attempt runs at the server while the client gives up on it. Each call must still
//! answer as if it ran once.
//!
//! Each runs against a real `redis-server` that each test starts in a temp directory on a free port of
//! 127.0.0.1 (see `support/redis_server.rs`); every test starts from `support::durable::builder`
//! (a 50 ms tick, 32 slots, a lease of 1 s). Each check is written so that it can fail.
//!
//! Run with `cargo test --features redis --test durable_ambiguous`. Without a `redis-server` the tests
//! print a skip note and pass, except under `CI=true`, where they fail. They need Redis itself
//! (`DEBUG SLEEP`): on Redis only, they skip when `TIMEWHEEL_TEST_STORE` names another store
//! (`support/store.rs`).
#![cfg(feature = "redis")]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use support::durable::{assert_once, verify, wait_until, Expectations, Handled, Log, LEASE, TICK};
use support::redis_server::RedisServer;
use tokio_timewheel::durable::{DurableBuilder, Task};

/// How long the client waits for a reply here: shorter than every stall the tests cause.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);

/// The settings of every test here: `support::durable::builder`'s (whose connect timeout, 5 s,
/// outlasts every stall), with a response timeout that a stall outlasts.
fn builder(url: &str, name: &str) -> DurableBuilder {
    support::durable::builder(url, name).response_timeout(RESPONSE_TIMEOUT)
}

/// Ambiguous replies to `schedule`: Redis sleeps (`DEBUG SLEEP`) longer than the client's
/// response timeout, so the first attempt times out at the client but runs at the server. The
/// call must still answer `Ok` to its own caller (not `DuplicateKey`) and leave one task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_schedule_is_neither_duplicated_nor_refused() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "ambiguous-schedule").connect().await.expect("connect");
    let log = Log::default();
    let mut want = Expectations { expected: HashMap::new(), uncertain: HashSet::new() };
    for i in 0..4 {
        server.command_detached(&["DEBUG", "SLEEP", "0.6"]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let key = format!("amb-{i}");
        let delay = Duration::from_millis(1500);
        let before = SystemTime::now();
        let started = Instant::now();
        let result = timers.schedule(&key, delay, "x").await;
        assert!(started.elapsed() >= RESPONSE_TIMEOUT, "the server was not asleep: the test proves nothing");
        assert_eq!(result, Ok(()), "schedule of {key} after an ambiguous timeout");
        want.expected.insert(key, before + delay);
    }
    assert_eq!(timers.len().await.unwrap(), 4, "a retried schedule created a second task");
    let worker = timers.run(log.handler(0));
    let keys: HashSet<String> = want.expected.keys().cloned().collect();
    assert!(wait_until(Duration::from_secs(6), || keys.is_subset(&log.distinct_keys())).await, "not all fired");
    tokio::time::sleep(LEASE + TICK * 4).await;
    worker.shutdown().await;
    verify(&want, &log.all()).unwrap_or_else(|p| panic!("{p}"));
    assert_once(&log);
}

/// Ambiguous replies to the tick, claim and ack scripts: the server stalls for longer than the
/// response timeout again and again while tasks come due. Each task is handled exactly once, on
/// its first attempt (a claim whose reply was lost is retried and gets its tasks back), none
/// early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_tick_claim_and_ack_hand_each_task_out_once() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "ambiguous-tick").connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));
    let mut want = Expectations { expected: HashMap::new(), uncertain: HashSet::new() };
    for i in 0..200u64 {
        let key = format!("tick-{i}");
        let delay = Duration::from_millis(300 + i * 10);
        let before = SystemTime::now();
        timers.schedule(&key, delay, vec![]).await.expect("schedule");
        want.expected.insert(key, before + delay);
    }
    let stalls = async {
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            server.command_detached(&["DEBUG", "SLEEP", "0.35"]);
            tokio::time::sleep(Duration::from_millis(350)).await;
        }
    };
    stalls.await;
    let keys: HashSet<String> = want.expected.keys().cloned().collect();
    let done = wait_until(Duration::from_secs(8), || keys.is_subset(&log.distinct_keys())).await;
    tokio::time::sleep(LEASE + TICK * 6).await;
    worker.shutdown().await;
    assert!(done, "never handled: {:?}", keys.difference(&log.distinct_keys()).take(5).collect::<Vec<_>>());
    verify(&want, &log.all()).unwrap_or_else(|p| panic!("{p}"));
    assert_once(&log);
    // A claim whose reply was lost is made again with the same claim id and gets its tasks
    // back, so none waits out a lease and none is delivered as a second attempt.
    let late: Vec<Handled> = log.all().into_iter().filter(|h| h.attempt > 1).collect();
    assert!(late.is_empty(), "delivered again after a lost claim reply: {late:?}");
}

/// Ambiguous replies to `cancel`,: the first attempt times out at the client but
/// runs at the server, and the retry finds the task gone. The call must still answer true (it did
/// cancel the task), and the task must not fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_cancel_still_cancels() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "ambiguous-cancel").connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));
    let keys: Vec<String> = (0..4).map(|i| format!("c{i}")).collect();
    for key in &keys {
        timers.schedule(key, Duration::from_millis(2500), "x").await.unwrap();
    }
    for key in &keys {
        server.command_detached(&["DEBUG", "SLEEP", "0.6"]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let started = Instant::now();
        let answer = timers.cancel(key).await;
        assert!(started.elapsed() >= RESPONSE_TIMEOUT, "the server was not asleep: the test proves nothing");
        assert_eq!(answer, Ok(true), "cancel of {key} after an ambiguous timeout");
    }
    tokio::time::sleep(Duration::from_millis(2500) + TICK * 4).await;
    worker.shutdown().await;
    assert!(log.all().is_empty(), "a cancelled task fired: {:?}", log.all());
    assert_eq!(timers.len().await.unwrap(), 0);
}

type DeadTaskSummary = (String, u32, String);

/// Dead letters over several pages list each once, oldest first; a `requeue_dead` whose
/// reply was lost (`DEBUG SLEEP` past the response timeout,) still answers true, and
/// the task comes back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_and_an_ambiguous_requeue_still_answers_true() {
    const N: usize = 300;
    let Some(server) = RedisServer::start() else { return };
    // A lease longer than the four stalls together: with one attempt, a requeued task whose
    // claim is retried past its lease would die again without running, which is not what this
    // test is about.
    let timers = builder(&server.url(), "dead-pages")
        .max_attempts(1)
        .lease(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let log = Log::default();
    let healed = Arc::new(AtomicBool::new(false));
    let worker = timers.run({
        let log = log.clone();
        let healed = healed.clone();
        move |task: Task| {
            log.record(&task, 0);
            std::future::ready(if healed.load(Ordering::Relaxed) { Ok(()) } else { Err("boom") })
        }
    });
    let keys: Vec<String> = (0..N).map(|i| format!("dead-{i:03}")).collect();
    for (i, key) in keys.iter().enumerate() {
        timers.schedule(key, TICK * (i / 100) as u32, "x").await.unwrap();
    }
    let mut dead = 0;
    for _ in 0..200 {
        dead = timers.stats().await.unwrap().dead;
        if dead == N {
            break;
        }
        tokio::time::sleep(TICK).await;
    }
    assert_eq!(dead, N, "not every task died");
    let listed = timers.dead_letters(N * 2).await.unwrap();
    let listed_keys: Vec<&str> = listed.iter().map(|d| d.key()).collect();
    assert_eq!(listed_keys.len(), N, "each dead letter once");
    assert_eq!(listed_keys.iter().collect::<HashSet<_>>().len(), N, "each dead letter once");
    assert!(listed.windows(2).all(|w| w[0].died() <= w[1].died()), "oldest first");
    assert_eq!(timers.dead_letters(5).await.unwrap(), listed[..5]);
    assert!(timers.dead_letters(0).await.unwrap().is_empty());

    healed.store(true, Ordering::Relaxed);
    for key in &keys[..4] {
        server.command_detached(&["DEBUG", "SLEEP", "0.6"]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let started = Instant::now();
        let answer = timers.requeue_dead(key).await;
        assert!(started.elapsed() >= RESPONSE_TIMEOUT, "the server was not asleep: the test proves nothing");
        assert_eq!(answer, Ok(true), "requeue_dead of {key} after an ambiguous timeout");
    }
    let requeued = wait_until(Duration::from_secs(5), || keys[..4].iter().all(|k| log.of(k).len() == 2)).await;
    assert!(
        requeued,
        "requeued tasks did not run: {:?} {:?}",
        keys[..4].iter().map(|k| log.of(k)).collect::<Vec<_>>(),
        timers.stats().await
    );
    tokio::time::sleep(LEASE + TICK * 4).await;
    worker.shutdown().await;
    for key in &keys[..4] {
        assert_eq!(log.of(key).len(), 2, "{key}: died once, requeued once: {:?}", log.of(key));
    }
    let again: Vec<DeadTaskSummary> = timers
        .dead_letters(N)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| keys[..4].iter().any(|k| k == d.key()))
        .map(|d| (d.key().to_string(), d.attempts(), d.last_error().to_string()))
        .collect();
    assert!(
        again.is_empty(),
        "requeued tasks died again: {again:?} {:?}",
        log.all().iter().filter(|h| keys[..4].contains(&h.key)).collect::<Vec<_>>()
    );
    assert_eq!(timers.stats().await.unwrap().dead, N - 4);
}
