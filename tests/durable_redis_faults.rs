//! Redis failing under the durable mode: SIGKILLed with and without AOF (the negative control), away
//! for longer than a call's retry window, and writes that wait for a replica.
//!
//! Each runs against a real `redis-server` that each test starts in a temp directory on a free port of
//! 127.0.0.1 (see `support/redis_server.rs`); every test starts from `support::durable::builder`
//! (a 50 ms tick, 32 slots, a lease of 1 s). Each check is written so that it can fail.
//!
//! Run with `cargo test --features redis --test durable_redis_faults`. Without a `redis-server` the tests
//! print a skip note and pass, except under `CI=true`, where they fail. They need Redis itself
//! (killed, restarted, replicated): on Redis only, they skip when `TIMEWHEEL_TEST_STORE` names
//! another store (`support/store.rs`).
#![cfg(feature = "redis")]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use support::durable::{builder, keys, verify, wait_until, Expectations, Handled, Log, TICK};
use support::redis_server::{Persistence, RedisServer};
use tokio_timewheel::Error;

/// How many schedules must succeed before the kill, and again after the restart.
const EACH_SIDE: usize = 160;

/// The scenario behind the test: schedule tasks at a steady rate, SIGKILL Redis once
/// [`EACH_SIDE`] schedules have succeeded, restart it on the same directory 700 ms later, keep
/// scheduling until as many more have succeeded, then wait for the tasks. Counted rather than
/// timed, so that a loaded machine (fewer schedules a second) still gives a run that means
/// something.
async fn kill_redis_mid_run(server: &mut RedisServer, name: &str) -> (Expectations, Vec<Handled>) {
    let timers = builder(&server.url(), name).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));

    let stop = Arc::new(AtomicBool::new(false));
    let succeeded = Arc::new(AtomicUsize::new(0));
    let producer = {
        let timers = timers.clone();
        let (stop, succeeded) = (stop.clone(), succeeded.clone());
        tokio::spawn(async move {
            let mut want = Expectations { expected: HashMap::new(), uncertain: HashSet::new() };
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("order-{i}:review");
                let delay = Duration::from_millis(100 + (i * 37) % 1500);
                let before = SystemTime::now();
                match tokio::time::timeout(Duration::from_secs(3), timers.schedule(&key, delay, i.to_be_bytes())).await
                {
                    Ok(Ok(())) => {
                        want.expected.insert(key, before + delay);
                        succeeded.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        assert!(!matches!(e, Error::DuplicateKey(_)), "fresh key {key} reported {e}");
                        want.uncertain.insert(key);
                    }
                    Err(_elapsed) => {
                        want.uncertain.insert(key);
                    }
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            want
        })
    };

    let count = || succeeded.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(30), || count() >= EACH_SIDE).await;
    tokio::task::block_in_place(|| server.kill());
    tokio::time::sleep(Duration::from_millis(700)).await;
    tokio::task::block_in_place(|| server.restart());
    let before_restart = count();
    wait_until(Duration::from_secs(30), || count() >= before_restart + EACH_SIDE).await;
    stop.store(true, Ordering::Relaxed);
    let want = producer.await.expect("producer");

    // The last task is due at most 1.6 s after it was scheduled; a task claimed just before the
    // kill whose ack was lost comes back after the lease.
    let everything = want.expected.keys().cloned().collect::<HashSet<_>>();
    wait_until(Duration::from_secs(8), || everything.is_subset(&log.distinct_keys())).await;
    // Whatever else is still coming, give it a tick and some to show up.
    tokio::time::sleep(TICK * 4).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), worker.shutdown()).await;
    (want, log.all())
}

/// Redis killed with SIGKILL mid-run and restarted on the same directory (AOF `everysec`):
/// every task whose `schedule` returned `Ok` fires, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_redis_loses_no_acknowledged_task() {
    let Some(mut server) = RedisServer::start() else { return };
    let (want, log) = kill_redis_mid_run(&mut server, "kill-aof").await;
    assert!(
        want.expected.len() >= 2 * EACH_SIDE,
        "too few schedules succeeded to mean anything: {}",
        want.expected.len()
    );
    match verify(&want, &log) {
        Ok(summary) => eprintln!("sigkill with AOF: {} scheduled, {summary}", want.expected.len()),
        Err(problems) => panic!("after SIGKILL and restart with AOF:\n{problems}\nredis log:\n{}", server.log_tail()),
    }
}

/// The negative control: the same run with AOF off must be caught losing tasks, which shows
/// that the check above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_without_aof_is_caught_losing_tasks() {
    let Some(mut server) = RedisServer::start_without_aof() else { return };
    let (want, log) = kill_redis_mid_run(&mut server, "kill-none").await;
    match verify(&want, &log) {
        Ok(summary) => panic!("the run without AOF lost nothing ({summary}): the durability check cannot see loss"),
        Err(problems) => {
            assert!(problems.contains("lost"), "expected lost tasks, got:\n{problems}");
            eprintln!("negative control caught: {}", problems.lines().next().unwrap());
        }
    }
}

/// Redis away for longer than a call's retry window: the call fails with a retryable error
/// within that window (never hangs); the worker keeps going and resumes when Redis returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_longer_than_the_retry_window() {
    let Some(mut server) = RedisServer::start() else { return };
    let window = Duration::from_secs(1);
    let timers = builder(&server.url(), "away").connect_timeout(window).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));
    timers.schedule("before", Duration::from_millis(1500), "x").await.unwrap();
    std::thread::sleep(Duration::from_millis(1100)); // let AOF's everysec write it
    tokio::task::block_in_place(|| server.kill());
    let started = Instant::now();
    let result = timers.schedule("during", Duration::from_millis(100), "x").await;
    let took = started.elapsed();
    match &result {
        Err(e) => assert!(e.is_retryable(), "Redis being away should be retryable: {e}"),
        Ok(()) => panic!("schedule succeeded with Redis killed"),
    }
    assert!(took < window * 2 + Duration::from_millis(500), "the failing call took {took:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| server.restart());
    timers.schedule("after", Duration::from_millis(100), "x").await.expect("schedule once Redis is back");
    let back = wait_until(Duration::from_secs(5), || log.of("before").len() == 1 && log.of("after").len() == 1).await;
    worker.shutdown().await;
    assert!(back, "the worker did not resume: {:?}", log.all());
    assert!(log.of("during").is_empty(), "a schedule that failed fired");
}

/// `wait_for_replicas`: with no replica connected a schedule fails with a retryable error
/// (the write did not reach a replica in time); with one, it succeeds and the replica already
/// holds the task when `schedule` returns, so a failover to it would keep the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_wait_for_a_replica_when_asked() {
    let Some(alone) = RedisServer::start() else { return };
    let timers = builder(&alone.url(), "replicated")
        .wait_for_replicas(1, Duration::from_millis(100))
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let started = Instant::now();
    match timers.schedule("lonely", Duration::from_secs(60), "x").await {
        Err(e) => assert!(e.is_retryable(), "no replica acknowledged the write: should be retryable: {e}"),
        Ok(()) => panic!("schedule waited for a replica that does not exist, and succeeded"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "the failing schedule took {:?}", started.elapsed());

    let Some(primary) = RedisServer::start() else { return };
    let port = primary.port().to_string();
    let Some(replica) = RedisServer::start_with(Persistence::Aof, &["--replicaof", "127.0.0.1", &port]) else { return };
    let linked = wait_until(Duration::from_secs(10), || {
        replica.command(&["INFO", "replication"]).as_str().is_some_and(|info| info.contains("master_link_status:up"))
    })
    .await;
    assert!(linked, "the replica never linked up");
    let timers = builder(&primary.url(), "replicated")
        .wait_for_replicas(1, Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    for i in 0..20 {
        let key = format!("copied-{i}");
        timers.schedule(&key, Duration::from_millis(200), "x").await.expect("schedule with a replica");
        let on_replica = replica.command(&["HEXISTS", &keys("replicated").tasks(), &key]).as_int();
        assert_eq!(on_replica, Some(1), "{key} was not on the replica when schedule returned");
    }
    let log = Log::default();
    let worker = timers.run(log.handler(0));
    assert!(wait_until(Duration::from_secs(3), || log.distinct_keys().len() == 20).await);
    worker.shutdown().await;
}
