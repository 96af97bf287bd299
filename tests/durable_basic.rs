//! The durable wheel's everyday behaviour, on the store the run selects (`support/store.rs`: a
//! real `redis-server` started for each test, or with `TIMEWHEEL_TEST_STORE=sqlite` a SQLite
//! file of the embedded store): scheduling, firing on time, keys, idempotent retries, cancel and
//! reschedule, the far tier, bad input, retries and dead letters, and a cursor that was down for
//! more than a revolution. On Redis only: an unreachable or wrong server, Redis settings that lose
//! tasks, and the checks that read or write Redis's keys themselves (the cursor, claim records,
//! the leadership's expiry).
//!
//! Run with `cargo test --features redis --test durable_basic` (on Redis), or
//! `TIMEWHEEL_TEST_STORE=sqlite cargo test --features sqlite --test durable_basic`. Without a
//! `redis-server` the tests on Redis print a skip note and pass, except under `CI=true`, where
//! they fail.
#![cfg(feature = "redis")]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use support::durable::{keys, wait_until, Handled, Log};
use support::logs::Captured;
use support::redis_server::RedisServer;
use support::TestStore;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task, Worker};
use tokio_timewheel::Error;

const TICK: Duration = Duration::from_millis(100);
/// How late a task may reach its handler on an unloaded loopback setup: one tick plus 50 ms.
const LATE: Duration = Duration::from_millis(150);
/// Redis's `TIME` is read in whole milliseconds, so a due time can sit up to 1 ms before
/// `SystemTime::now() + delay` read just before the call.
const SLACK: Duration = Duration::from_millis(1);

/// The tests' settings (`support::durable::builder`) with a tick of 100 ms, which `LATE` is
/// measured against, 64 slots, a lease of 5 s and a response timeout of a second.
fn builder(url: &str, name: &str) -> DurableBuilder {
    support::durable::builder(url, name)
        .tick(TICK)
        .slots(64)
        .lease(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(3))
}

fn assert_on_time(seen: &Handled, due: SystemTime, after_call: SystemTime, delay: Duration) {
    assert!(seen.at + SLACK >= due, "{} fired {:?} early", seen.key, due.duration_since(seen.at).unwrap_or_default());
    let latest = after_call + delay + LATE;
    assert!(
        seen.at <= latest,
        "{} fired {:?} late (more than one tick + 50 ms)",
        seen.key,
        seen.at.duration_since(after_call + delay).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_fires_once_on_time_and_frees_the_key() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "basic").connect().await.expect("connect");
    let log = Log::default();
    let worker = log.worker(&timers);

    let delay = Duration::from_millis(400);
    let before = SystemTime::now();
    timers.schedule("order-1", delay, b"payload-1".to_vec()).await.expect("schedule");
    let after = SystemTime::now();
    assert!(timers.contains("order-1").await.unwrap());
    assert_eq!(timers.len().await.unwrap(), 1);
    assert_eq!(timers.schedule("order-1", delay, b"again".to_vec()).await, Err(Error::DuplicateKey("order-1".into())));

    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await, "order-1 never fired");
    let seen = &log.of("order-1")[0];
    assert_on_time(seen, before + delay, after, delay);
    assert_eq!(seen.attempt, 1);
    assert_eq!(seen.payload, b"payload-1");

    // Acknowledged: the key is free again and the task is gone.
    let mut pending = 1;
    for _ in 0..100 {
        pending = timers.len().await.unwrap();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pending, 0, "the acknowledged task is still pending");
    assert!(!timers.contains("order-1").await.unwrap());
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.handed_out, stats.acked), (1, 1, 1), "{stats:?}");
    timers.schedule("order-1", Duration::from_secs(60), Vec::new()).await.expect("the key is free after the ack");

    // A zero delay and a time in the past are due at once; schedule_at is on Redis's clock.
    let before = SystemTime::now();
    timers.schedule("now", Duration::ZERO, Vec::new()).await.unwrap();
    timers.schedule_at("past", SystemTime::now() - Duration::from_secs(3600), Vec::new()).await.unwrap();
    let at = SystemTime::now() + Duration::from_millis(300);
    timers.schedule_at("at", at, Vec::new()).await.unwrap();
    let after = SystemTime::now();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 4).await, "{:?}", log.all());
    assert_on_time(&log.of("now")[0], before, after, Duration::ZERO);
    assert_on_time(&log.of("past")[0], before, after, Duration::ZERO);
    assert_on_time(&log.of("at")[0], at, at, Duration::ZERO);
    worker.shutdown().await;
    assert_eq!(log.len(), 4, "something fired twice: {:?}", log.all());
}

/// `#[tokio::test]`'s default runtime has one thread: the worker, its leader loop and its
/// handlers share it with the test.
#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "single").connect().await.expect("connect");
    let log = Log::default();
    let worker = log.worker(&timers);
    for i in 0..3u64 {
        timers.schedule(format!("c{i}"), Duration::from_millis(100 * i), Vec::new()).await.unwrap();
    }
    assert!(wait_until(Duration::from_secs(3), || log.len() == 3).await, "{:?}", log.all());
    worker.shutdown().await;
    assert_eq!(timers.len().await.unwrap(), 0);
}

/// The batch calls with the iterators people write (closures over borrowed keys) run inside a
/// spawned task: their futures are `Send`. This fails to compile if `schedule_many` holds the
/// caller's iterator across an await.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_calls_with_borrowing_iterators_run_in_spawned_tasks() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "spawned").connect().await.expect("connect");
    let handle = tokio::spawn(async move {
        let keys: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        let items =
            keys.iter().enumerate().map(|(i, k)| (k.as_str(), Duration::from_secs(60 + i as u64), b"p".as_slice()));
        let scheduled = timers.schedule_many(items).await.unwrap();
        let cancelled = timers.cancel_many(keys.iter().filter(|k| k.ends_with('7'))).await.unwrap();
        (
            scheduled.iter().filter(|r| r.is_ok()).count(),
            cancelled.iter().filter(|&&c| c).count(),
            timers.len().await.unwrap(),
        )
    });
    assert_eq!(handle.await.unwrap(), (100, 10, 90));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_freed_by_cancel_ack_and_death() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "keys").max_attempts(1).connect().await.expect("connect");
    timers.schedule("k", Duration::from_secs(60), Vec::new()).await.unwrap();
    assert_eq!(timers.schedule("k", Duration::from_secs(1), Vec::new()).await, Err(Error::DuplicateKey("k".into())));
    assert!(timers.cancel("k").await.unwrap());
    assert!(!timers.cancel("k").await.unwrap(), "a second cancel finds nothing");
    assert!(!timers.contains("k").await.unwrap());
    timers.schedule("k", Duration::from_secs(60), Vec::new()).await.expect("free after cancel");
    assert_eq!(timers.cancel_many(["k", "none"]).await.unwrap(), vec![true, false]);
    timers.schedule("k", Duration::from_secs(60), Vec::new()).await.unwrap();
    assert_eq!(timers.cancel_many(["k", "k"]).await.unwrap(), vec![true, false], "one task, cancelled once");

    // A batch reports each item: ok, duplicate (within the batch too), invalid.
    timers.schedule("taken", Duration::from_secs(60), Vec::new()).await.unwrap();
    let results = timers
        .schedule_many([
            ("a", Duration::from_secs(60), Vec::new()),
            ("taken", Duration::from_secs(60), Vec::new()),
            ("", Duration::from_secs(60), Vec::new()),
            ("a", Duration::from_secs(1), Vec::new()),
        ])
        .await
        .unwrap();
    assert_eq!(results[0], Ok(()));
    assert_eq!(results[1], Err(Error::DuplicateKey("taken".into())));
    assert!(matches!(results[2], Err(Error::Invalid(_))), "{:?}", results[2]);
    assert_eq!(results[3], Err(Error::DuplicateKey("a".into())));
    assert_eq!(timers.len().await.unwrap(), 2);

    // Dead (one attempt, failing handler): the key is free while the dead letter stays.
    timers.schedule("doomed", Duration::ZERO, b"x".to_vec()).await.unwrap();
    let worker = timers.run(|task: Task| async move {
        if task.key() == "doomed" {
            Err("no such order".to_string())
        } else {
            Ok(())
        }
    });
    let mut dead = Vec::new();
    for _ in 0..300 {
        dead = timers.dead_letters(10).await.unwrap();
        if !dead.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].key(), dead[0].payload(), dead[0].attempts()), ("doomed", &b"x"[..], 1));
    assert_eq!(dead[0].last_error(), "no such order");
    assert!(!timers.contains("doomed").await.unwrap());
    timers.schedule("doomed", Duration::from_secs(60), Vec::new()).await.expect("free after death");
    assert_eq!(timers.requeue_dead("doomed").await, Err(Error::DuplicateKey("doomed".into())));
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reschedule_contains_len_and_stats() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "moves").connect().await.expect("connect");
    assert_eq!(timers.reschedule("missing", Duration::from_secs(1)).await, Err(Error::NotFound));
    assert_eq!(timers.reschedule_at("missing", SystemTime::now()).await, Err(Error::NotFound));

    timers.schedule("soon", Duration::from_secs(3600), b"s".to_vec()).await.unwrap();
    timers.schedule("later", Duration::from_millis(200), b"l".to_vec()).await.unwrap();
    timers.schedule("gone", Duration::from_millis(200), Vec::new()).await.unwrap();
    assert_eq!(timers.len().await.unwrap(), 3);
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.pending, stats.waiting, stats.ready, stats.in_flight), (3, 3, 0, 0), "{stats:?}");

    assert!(timers.cancel("gone").await.unwrap());
    let before = SystemTime::now();
    timers.reschedule("soon", Duration::from_millis(300)).await.unwrap();
    let after = SystemTime::now();
    timers.reschedule("later", Duration::from_secs(3600)).await.unwrap();
    let at = SystemTime::now() + Duration::from_millis(600);
    timers.schedule("at", Duration::from_secs(3600), Vec::new()).await.unwrap();
    timers.reschedule_at("at", at).await.unwrap();
    assert!(timers.contains("later").await.unwrap());
    assert!(!timers.contains("gone").await.unwrap());

    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(3), || log.len() == 2).await, "{:?}", log.all());
    tokio::time::sleep(TICK * 3).await;
    let seen = log.all();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_on_time(&log.of("soon")[0], before + Duration::from_millis(300), after, Duration::from_millis(300));
    assert_eq!(log.of("soon")[0].payload, b"s", "reschedule keeps the payload");
    assert_on_time(&log.of("at")[0], at, at, Duration::ZERO);
    assert!(log.of("later").is_empty() && log.of("gone").is_empty());
    worker.shutdown().await;
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.pending, stats.acked, stats.scheduled), (1, 2, 4), "{stats:?}");
    assert!(stats.cursor_lag_ticks <= 2, "{stats:?}");
}

/// What `cancel` and `reschedule` answer for a running task. A handler held open on a gate has
/// claimed its task, so `cancel` answers false and `reschedule` `NotFound`, and both leave it to
/// its lease: once released, the handler's `Ok` acknowledges it and it is never handed out again.
/// Then a worker dies (its runtime is dropped) with a handler running: while the lease is live its
/// task still counts as running; once the lease ran out it does not, so `cancel` takes it (true)
/// and a new worker never hands it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_is_left_to_its_lease_and_an_expired_one_is_cancelled() {
    let Some(store) = TestStore::start() else { return };
    let lease = Duration::from_secs(1);
    let timers = builder(&store.url(), "running").lease(lease).connect().await.expect("connect");
    let log = Log::default();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let worker = timers.run({
        let (log, gate) = (log.clone(), gate.clone());
        move |task: Task| {
            log.record(&task, 0);
            let gate = gate.clone();
            async move {
                gate.acquire().await.expect("gate").forget();
                Ok::<(), std::io::Error>(())
            }
        }
    });
    timers.schedule("held", Duration::ZERO, Vec::new()).await.unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await, "held never started");
    assert!(!timers.cancel("held").await.unwrap(), "a running task is not cancelled");
    assert_eq!(timers.cancel_many(["held"]).await.unwrap(), [false]);
    assert_eq!(timers.reschedule("held", Duration::from_millis(200)).await, Err(Error::NotFound));
    assert!(timers.contains("held").await.unwrap(), "a running task is still pending");
    gate.add_permits(1);
    worker.shutdown().await;
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.pending, stats.acked), (0, 1), "the running task was acknowledged: {stats:?}");
    assert_eq!(log.of("held").len(), 1, "{:?}", log.all());

    // A worker whose runtime dies with its handler running: nothing acknowledges or ticks.
    timers.schedule("orphan", Duration::ZERO, Vec::new()).await.unwrap();
    let dying = timers.clone();
    let started = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (worker, attempt) = rt.block_on(async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let worker = dying.run(move |task: Task| {
                let _ = tx.send(task.attempt());
                std::future::pending::<Result<(), std::io::Error>>()
            });
            (worker, rx.recv().await)
        });
        drop(rt);
        drop(worker);
        attempt
    });
    assert_eq!(started.join().unwrap(), Some(1), "the dying worker ran orphan");
    assert!(!timers.cancel("orphan").await.unwrap(), "its lease is live: still running");
    tokio::time::sleep(lease + TICK * 2).await;
    assert!(timers.cancel("orphan").await.unwrap(), "its lease ran out: no longer running");
    assert!(!timers.contains("orphan").await.unwrap());
    let worker = log.worker(&timers);
    tokio::time::sleep(TICK * 5).await;
    worker.shutdown().await;
    assert!(log.of("orphan").is_empty(), "handed out again after its cancel: {:?}", log.all());
    assert_eq!(timers.stats().await.unwrap().pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_tier_tasks_are_promoted_and_fire_on_time() {
    let Some(store) = TestStore::start() else { return };
    // 8 slots of 50 ms: one revolution is 400 ms, so most of these start in the far tier.
    let timers =
        builder(&store.url(), "far").tick(Duration::from_millis(50)).slots(8).connect().await.expect("connect");
    let log = Log::default();
    let probe = support::durable::StallProbe::start();
    let worker = log.worker(&timers);
    let delays: Vec<Duration> =
        [150u64, 450, 700, 1000, 1333, 2100, 3050].iter().map(|&ms| Duration::from_millis(ms)).collect();
    let mut calls = HashMap::new();
    for (i, delay) in delays.iter().enumerate() {
        let before = SystemTime::now();
        timers.schedule(format!("far-{i}"), *delay, Vec::new()).await.unwrap();
        calls.insert(format!("far-{i}"), (before, SystemTime::now(), *delay));
    }
    let stats = timers.stats().await.unwrap();
    assert_eq!(stats.waiting, delays.len(), "{stats:?}");
    assert!(wait_until(Duration::from_secs(6), || log.len() == delays.len()).await, "{:?}", log.all());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.len(), delays.len(), "{:?}", log.all());
    for seen in log.all() {
        let (before, after, delay) = calls[&seen.key];
        // A 50 ms tick: late by at most 50 + 50 ms, and what a starved runtime held up twice.
        let bound = Duration::from_millis(100) + 2 * probe.worst();
        assert!(seen.at + SLACK >= before + delay, "{} early", seen.key);
        assert!(
            seen.at <= after + delay + bound,
            "{} late: {:?} (bound {bound:?}, the runtime's worst stall {:?})",
            seen.key,
            seen.at.duration_since(after + delay),
            probe.worst()
        );
    }
    worker.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn connect_warns_about_settings_that_lose_tasks() {
    use support::redis_server::Persistence;
    let Some(server) = RedisServer::start_with(Persistence::None, &["--maxmemory-policy", "allkeys-lru"]) else {
        return;
    };
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt().with_writer({
        let captured = captured.clone();
        move || captured.clone()
    });
    let _guard = tracing::subscriber::set_default(subscriber.finish());
    builder(&server.url(), "unsafe").connect().await.expect("connect");
    let text = captured.text();
    assert!(text.contains("maxmemory-policy allkeys-lru"), "{text}");
    assert!(text.contains("appendonly no"), "{text}");

    let Some(safe) = RedisServer::start() else { return };
    captured.clear();
    builder(&safe.url(), "safe").connect().await.expect("connect");
    let text = captured.text();
    assert!(!text.contains("WARN"), "{text}");
}

#[test]
fn the_handles_are_cheap_to_share() {
    fn shareable<T: Clone + Send + Sync + std::fmt::Debug + 'static>() {}
    fn sendable<T: Send + Sync + std::fmt::Debug + 'static>() {}
    shareable::<DurableScheduler>();
    shareable::<tokio_timewheel::durable::RedisFailure>();
    shareable::<Task>();
    shareable::<tokio_timewheel::durable::DeadTask>();
    shareable::<tokio_timewheel::durable::DurableStats>();
    sendable::<Worker>();
    sendable::<DurableBuilder>();
}

#[tokio::test]
async fn bad_settings_are_invalid_without_touching_redis() {
    // Nothing listens here, and nothing needs to: validation comes first.
    let url = "redis://127.0.0.1:1/";
    let invalid = |r: Result<DurableScheduler, Error>| matches!(r, Err(Error::Invalid(_)));
    for name in ["", "a{b", "a}b", "a:b", "a b", "tab\t", "line\n"] {
        assert!(invalid(DurableScheduler::builder(url, name).connect().await), "name {name:?}");
    }
    assert!(invalid(DurableScheduler::builder(url, "w").tick(Duration::ZERO).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").tick(Duration::from_micros(1500)).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").slots(0).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").slots((1 << 20) + 1).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").max_attempts(0).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").concurrency(0).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").lease(Duration::ZERO).connect().await));
    assert!(invalid(DurableScheduler::builder(url, "w").lease(Duration::MAX).connect().await));
    assert!(invalid(DurableScheduler::builder("not a url", "w").connect().await));
}

/// Redis's clock stepping back (a failover to a host whose clock is behind, an NTP step) leaves
/// the cursor ahead of the clock. A task due within that gap must still wait for its due time on
/// the clock, not go out at once because its tick is at or before the cursor. Simulated by
/// moving the cursor 5 s ahead, which is what a 5 s step back of the clock does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_ahead_of_the_clock_fires_nothing_early() {
    let Some(server) = RedisServer::start() else { return };
    let name = "clock-back";
    let timers = builder(&server.url(), name).connect().await.expect("connect");
    let now_tick = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() / TICK.as_millis();
    server.command(&["SET", &keys(name).cursor(), &(now_tick + 50).to_string()]);
    let log = Log::default();
    let worker = log.worker(&timers);
    let delay = Duration::from_millis(1500);
    let before = SystemTime::now();
    timers.schedule("soon", delay, Vec::new()).await.unwrap();
    let after = SystemTime::now();
    assert!(wait_until(Duration::from_secs(4), || log.len() == 1).await, "never fired");
    worker.shutdown().await;
    assert_on_time(&log.of("soon")[0], before + delay, after, delay);
}

/// What a claim took is remembered (so a retry of the claim gets it back) only until the worker's
/// next claim is answered: a busy wheel does not keep a record per claim for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_records_do_not_pile_up() {
    let Some(server) = RedisServer::start() else { return };
    let name = "claim-records";
    let timers =
        builder(&server.url(), name).lease(Duration::from_secs(3600)).concurrency(4).connect().await.expect("connect");
    let items: Vec<_> = (0..60).map(|i| (format!("r{i}"), Duration::ZERO, Vec::<u8>::new())).collect();
    assert!(timers.schedule_many(items).await.unwrap().iter().all(Result::is_ok));
    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(5), || log.len() == 60).await, "only {} handled", log.len());
    tokio::time::sleep(TICK * 3).await;
    let records = server.command(&["KEYS", &keys(name).claim("*")]);
    let records: Vec<&str> = records.as_array().iter().filter_map(|r| r.as_str()).collect();
    assert!(records.len() <= 1, "{} claim records left: {records:?}", records.len());
    for record in &records {
        let pttl = server.command(&["PTTL", record]).as_int().unwrap_or(-2);
        assert!(pttl <= 600_000, "{record} kept for {pttl} ms");
    }
    worker.shutdown().await;
}

/// A long task lease (for slow handlers) does not make the leadership as long: a leader that
/// dies is replaced within 10 s, not within the task lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_task_lease_keeps_the_leadership_lease_short() {
    let Some(server) = RedisServer::start() else { return };
    let name = "long-lease";
    let timers = builder(&server.url(), name).lease(Duration::from_secs(3600)).connect().await.expect("connect");
    let worker = timers.run(|_task: Task| async { Ok::<(), std::io::Error>(()) });
    worker.ready().await;
    assert!(worker.is_leader());
    let pttl = server.command(&["PTTL", &keys(name).leader()]).as_int().unwrap_or(-2);
    worker.shutdown().await;
    assert!(pttl > 0 && pttl <= 10_000, "the leadership's lease is {pttl} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_and_payloads_are_invalid() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "input").max_payload(1024).connect().await.expect("connect");
    let err = timers.schedule("", Duration::from_secs(1), Vec::new()).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    let err = timers.schedule("big", Duration::from_secs(1), vec![0u8; 1025]).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert!(!err.is_retryable());
    timers.schedule("max", Duration::from_secs(1), vec![7u8; 1024]).await.expect("a payload of exactly the maximum");
    let err = timers.schedule("forever", Duration::from_secs(u64::MAX / 4), Vec::new()).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert_eq!(timers.len().await.unwrap(), 1);

    // Another node with other wheel settings is refused.
    let err = builder(&store.url(), "input").slots(65).connect().await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_that_replicas_did_not_confirm_is_a_retryable_error() {
    let Some(store) = TestStore::start() else { return };
    // The test's store has no replicas (the embedded store never has), so WAIT 1 always falls
    // short.
    let timers = builder(&store.url(), "replicas")
        .wait_for_replicas(1, Duration::from_millis(50))
        .connect()
        .await
        .expect("connect");
    let err = timers.schedule("w", Duration::from_secs(60), Vec::new()).await.unwrap_err();
    assert!(matches!(err, Error::Redis(_)) && err.is_retryable(), "{err:?}");
    // The change is on the primary: a repeat finds the key taken.
    assert_eq!(timers.schedule("w", Duration::from_secs(60), Vec::new()).await, Err(Error::DuplicateKey("w".into())));
    assert!(timers.contains("w").await.unwrap());
    let too_long = builder(&store.url(), "replicas").wait_for_replicas(1, Duration::from_secs(5)).connect().await;
    assert!(matches!(too_long, Err(Error::Invalid(_))), "{too_long:?}");
}

/// A port where nothing listens refuses the connection: `connect` says so at once (not after the
/// connect timeout, and not as "timed out"). A listener that never answers times out within
/// the connect timeout and says so. Both are retryable: a Redis that is starting refuses too.
#[tokio::test]
async fn unreachable_redis_says_refused_at_once_or_timed_out_within_the_connect_timeout() {
    let timeout = Duration::from_secs(3);
    // A free port, let go of: nothing listens there (only 127.0.0.1 is ever a target of these
    // tests).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = Instant::now();
    let result = DurableScheduler::builder(format!("redis://{closed}/"), "w").connect_timeout(timeout).connect().await;
    let took = started.elapsed();
    let Err(Error::Redis(failure)) = &result else { panic!("connected to a closed port: {result:?}") };
    assert_eq!(failure.category(), "refused", "{failure}");
    assert!(failure.to_string().contains("refused") && !failure.to_string().contains("timed out"), "{failure}");
    assert!(failure.is_retryable(), "{failure}");
    // The redis crate's own reconnect tries twice more, within a second.
    assert!(took < Duration::from_millis(1500), "a refused connection took {took:?} to report");
    eprintln!("refused after {took:?}");

    // A listener on loopback that never answers: the handshake completes in the kernel's
    // backlog, and then nothing.
    let timeout = Duration::from_millis(800);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("redis://{}/", silent.local_addr().unwrap());
    let started = Instant::now();
    let result = DurableScheduler::builder(&silent_url, "w").connect_timeout(timeout).connect().await;
    let took = started.elapsed();
    let Err(Error::Redis(failure)) = &result else { panic!("connected to a silent listener: {result:?}") };
    assert_eq!(failure.category(), "timed out", "{failure}");
    assert!(failure.to_string().contains("timed out"), "{failure}");
    assert!(failure.is_retryable(), "{failure}");
    assert!(took + Duration::from_millis(50) >= timeout, "gave up after {took:?}, before the connect timeout");
    assert!(took < timeout + Duration::from_millis(500), "took {took:?}");
}

/// How long `connect` may take to report a wrong URL or port, against a connect timeout of
/// [`PATIENT`]: the errors come within a second, and half the timeout leaves room for a loaded
/// machine while still telling them from a wait for the timeout.
const SOON: Duration = Duration::from_secs(5);
const PATIENT: Duration = Duration::from_secs(10);

/// `rediss://` at a plain-text Redis: the server never answers the TLS handshake (it waits for
/// the end of a command line), so `connect` asks the port in plain text and says that the
/// handshake failed and the server may not speak TLS there, instead of waiting out the connect
/// timeout and asking whether Redis runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_at_a_plain_text_port_says_the_server_may_not_speak_tls() {
    let Some(server) = RedisServer::start() else { return };
    let url = server.url().replace("redis://", "rediss://");
    let started = Instant::now();
    let result = DurableScheduler::builder(&url, "w").connect_timeout(PATIENT).connect().await;
    let took = started.elapsed();
    eprintln!("rediss:// at a plain-text port failed after {took:?}");
    let Err(Error::Redis(failure)) = &result else { panic!("connected over TLS to a plain-text port: {result:?}") };
    let text = failure.to_string();
    assert_eq!(failure.category(), "TLS", "{text}");
    assert!(text.contains("TLS handshake") && text.contains("may not speak TLS"), "{text}");
    assert!(text.contains("use redis://") && text.contains("check the port"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{}", server.port())), "names the address: {text}");
    assert!(!failure.is_retryable(), "{text}");
    assert!(took < SOON, "took {took:?} of a {PATIENT:?} connect timeout");
}

/// A port where some other server answers (here an HTTP server's `400 Bad Request`): `connect`
/// says at once that the server at that address did not answer as Redis, not the parser's
/// raw complaint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_does_not_speak_redis_says_so() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            });
        }
    });
    let started = Instant::now();
    let result = DurableScheduler::builder(format!("redis://{addr}/"), "w").connect_timeout(PATIENT).connect().await;
    let took = started.elapsed();
    let Err(Error::Redis(failure)) = &result else { panic!("connected to an HTTP server: {result:?}") };
    let text = failure.to_string();
    assert_eq!(failure.category(), "not Redis", "{text}");
    assert!(text.contains(&format!("the server at {addr} did not answer as Redis")), "{text}");
    assert!(text.contains("is it a Redis port?"), "{text}");
    assert!(!text.contains('\n'), "one line, not the parser's: {text}");
    assert!(!failure.is_retryable(), "{text}");
    assert!(took < SOON, "took {took:?} of a {PATIENT:?} connect timeout");
}

/// A malformed URL is `Invalid` at once, and the message names what is wrong with it and the
/// form expected (and never shows the password).
#[tokio::test]
async fn a_malformed_url_says_what_is_wrong_and_the_form_expected() {
    let cases = [
        ("127.0.0.1:6379", "does not start with redis://"),
        ("redis//127.0.0.1:6379/", "does not start with redis://"),
        ("http://127.0.0.1:6379/", "its scheme is \"http\""),
        ("redis://:6379/", "names no host"),
        ("redis://127.0.0.1:notaport/", "its port \"notaport\" is not a number"),
        ("redis://user:hunter2@127.0.0.1:99999/", "its port \"99999\" is not a number"),
        ("redis://127.0.0.1:6379/orders", "its database \"orders\""),
    ];
    for (url, what) in cases {
        let started = Instant::now();
        let result = DurableScheduler::builder(url, "w").connect_timeout(PATIENT).connect().await;
        let took = started.elapsed();
        let Err(Error::Invalid(_)) = &result else { panic!("{url}: {result:?}") };
        let text = result.err().unwrap().to_string();
        assert!(text.contains("is malformed") && text.contains(what), "{url}: {text}");
        assert!(text.contains("redis://[user:pass@]host:port/[db]") && text.contains("rediss://"), "{url}: {text}");
        assert!(!text.contains("hunter2") && !text.contains("InvalidClientConfig"), "{url}: {text}");
        assert!(took < SOON, "{url}: took {took:?}");
    }
}

/// A server that answers slowly at each step of `connect` (here: `INFO` just inside the connect
/// timeout, then nothing for the scripts) still fails within the connect timeout as a whole, not
/// within one timeout per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_fails_connect_within_one_connect_timeout() {
    use std::io::{Read, Write};
    let timeout = Duration::from_millis(800);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]).to_ascii_uppercase();
                    let reply: Vec<u8> = if text.contains("\r\nINFO\r\n") {
                        std::thread::sleep(Duration::from_millis(700));
                        let body = "redis_version:7.0.0\r\n";
                        format!("${}\r\n{body}\r\n", body.len()).into_bytes()
                    } else if text.contains("\r\nCONFIG\r\n") {
                        b"*2\r\n$1\r\nx\r\n$10\r\nnoeviction\r\n".to_vec()
                    } else if text.contains("EVAL") || text.contains("SCRIPT") || !text.starts_with('*') {
                        // Never answers the scripts (loaded at connect, then run), nor the rest
                        // of a long command (a script's text) that came in a read of its own.
                        continue;
                    } else {
                        // The connection's own set-up (CLIENT SETINFO and the like), one reply per command.
                        b"+OK\r\n".repeat(text.matches("*").count().max(1))
                    };
                    if stream.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let started = Instant::now();
    let result = DurableScheduler::builder(&url, "w").connect_timeout(timeout).connect().await;
    let took = started.elapsed();
    let err = result.expect_err("the server never opens the wheel");
    assert!(err.is_retryable(), "{err}");
    assert!(took < timeout + Duration::from_millis(300), "took {took:?} for a connect timeout of {timeout:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_back_off_then_dead_letter_and_requeue() {
    let Some(store) = TestStore::start() else { return };
    let backoff = Duration::from_millis(150);
    let timers = builder(&store.url(), "dead").max_attempts(3).backoff(backoff).connect().await.expect("connect");
    let log = Log::default();
    let healed = Arc::new(AtomicUsize::new(0));
    let worker = timers.run({
        let (log, healed) = (log.clone(), healed.clone());
        move |task: Task| {
            log.record(&task, 0);
            let healed = healed.load(Ordering::Relaxed) == 1;
            async move {
                match task.key() {
                    "panics" if task.attempt() == 1 => panic!("boom"),
                    "fails" if !healed => Err(format!("attempt {} failed", task.attempt())),
                    _ => Ok(()),
                }
            }
        }
    });
    timers.schedule("fails", Duration::ZERO, b"f".to_vec()).await.unwrap();
    timers.schedule("panics", Duration::ZERO, b"p".to_vec()).await.unwrap();

    let mut dead = Vec::new();
    for _ in 0..500 {
        dead = timers.dead_letters(10).await.unwrap();
        if !dead.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].key(), dead[0].attempts(), dead[0].last_error()), ("fails", 3, "attempt 3 failed"));
    assert_eq!(dead[0].payload(), b"f", "a dead letter keeps its payload");
    let tries = log.of("fails");
    assert_eq!(tries.iter().map(|s| s.attempt).collect::<Vec<_>>(), vec![1, 2, 3]);
    for (n, pair) in tries.windows(2).enumerate() {
        let gap = pair[1].at.duration_since(pair[0].at).unwrap();
        let wanted = backoff * 2u32.pow(n as u32);
        assert!(gap + SLACK >= wanted, "retry {} after {gap:?}, before its backoff {wanted:?}", n + 1);
        assert!(gap <= wanted + LATE + Duration::from_millis(50), "retry {} after {gap:?} (backoff {wanted:?})", n + 1);
    }
    // The panicking handler was retried and then acknowledged.
    assert!(wait_until(Duration::from_secs(2), || log.of("panics").len() == 2).await);
    assert_eq!(log.of("panics")[1].attempt, 2);

    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.dead, stats.dead_lettered), (1, 1), "{stats:?}");
    assert!(stats.retried >= 3, "{stats:?}");
    assert!(!timers.contains("fails").await.unwrap(), "a dead task's key is free");
    assert!(wait_until(Duration::from_secs(2), || log.of("panics").len() == 2).await);
    assert_eq!(timers.len().await.unwrap(), 0, "a dead task is not pending");

    healed.store(1, Ordering::Relaxed);
    assert!(timers.requeue_dead("fails").await.unwrap());
    assert!(!timers.requeue_dead("fails").await.unwrap(), "already requeued");
    assert!(wait_until(Duration::from_secs(2), || log.of("fails").len() == 4).await);
    assert_eq!(log.of("fails")[3].attempt, 1, "a requeued task starts its attempts again");
    assert_eq!(log.of("fails")[3].payload, b"f");
    let mut stats = timers.stats().await.unwrap();
    for _ in 0..100 {
        if stats.pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        stats = timers.stats().await.unwrap();
    }
    assert_eq!((stats.dead, stats.pending), (0, 0), "{stats:?}");
    assert!(timers.dead_letters(10).await.unwrap().is_empty());
    tokio::time::sleep(TICK * 4).await;
    assert_eq!(log.of("fails").len(), 4, "the requeued task was handed out again after its ack");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_down_for_more_than_a_revolution_catches_up() {
    let Some(store) = TestStore::start() else { return };
    // 8 slots of 50 ms: a revolution is 400 ms; nobody ticks for about 2.5 s.
    let timers =
        builder(&store.url(), "outage").tick(Duration::from_millis(50)).slots(8).connect().await.expect("connect");
    let mut dues = HashMap::new();
    let start = SystemTime::now();
    let mut items = Vec::new();
    for i in 0..400u64 {
        let delay = Duration::from_millis(i * 7 % 4000);
        items.push((format!("o{i}"), delay, Vec::<u8>::new()));
        dues.insert(format!("o{i}"), start + delay);
    }
    assert!(timers.schedule_many(items).await.unwrap().iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // More tasks while the cursor is down, some already overdue by Redis's clock.
    for i in 0..50u64 {
        let before = SystemTime::now();
        let at = before - Duration::from_millis(i * 20);
        timers.schedule_at(format!("late{i}"), at, Vec::new()).await.unwrap();
        dues.insert(format!("late{i}"), at);
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let stats = timers.stats().await.unwrap();
    assert!(stats.cursor_lag_ticks > 8, "the cursor should be more than a revolution behind: {stats:?}");

    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(5), || log.len() >= dues.len()).await, "{} of {}", log.len(), dues.len());
    tokio::time::sleep(Duration::from_millis(300)).await;
    worker.shutdown().await;
    let seen = log.all();
    assert_eq!(seen.len(), dues.len(), "some task fired twice");
    for s in &seen {
        assert!(s.at + SLACK >= dues[&s.key], "{} early", s.key);
    }
    let stats = timers.stats().await.unwrap();
    assert!(stats.cursor_lag_ticks <= 2, "{stats:?}");
    assert_eq!(stats.pending, 0, "{stats:?}");
}
