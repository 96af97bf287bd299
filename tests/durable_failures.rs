//! Failure tests of the durable mode, each against a real `redis-server` that the test starts in a
//! temp directory on a free port of 127.0.0.1 (see `support/redis_server.rs`), kills and restarts.
//!
//! Every test uses a short tick (50 ms), a small ring (32 slots) and a short lease (1 s), so the
//! whole file runs in about a minute, most of it the 100,000-task test, which runs alone. Each check is written so that it can fail: the durability test has a
//! negative control (the same run with AOF off must be caught losing tasks), and the timing checks
//! compare against times read before the calls that set them.
//!
//! Run with `cargo test --features redis --test durable_failures`. Without a `redis-server` the
//! tests print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]
// The tests hold a guard of `SERIAL` across their awaits on purpose: it is what keeps the
// 100,000-task test alone on the machine. Each guard lives in a test's root future.
#![allow(clippy::await_holding_lock)]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use support::durable::{keys, leader_value, wait_until, Handled, Log};
use support::redis_server::{Persistence, RedisServer, Reply};
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task};
use tokio_timewheel::Error;

const TICK: Duration = Duration::from_millis(50);
const SLOTS: usize = 32;
const LEASE: Duration = Duration::from_secs(1);

/// Redis's `TIME` is read in whole milliseconds inside the scripts, so a due time can sit up to
/// 1 ms before `SystemTime::now() + delay` taken just before the call.
const CLOCK_SLACK: Duration = Duration::from_millis(1);

/// Most tests hold this for reading and run side by side; the 100,000-task test holds it for
/// writing, so its `SLOWLOG` check does not measure the CPU contention of the others (the machine
/// has two cores).
static SERIAL: RwLock<()> = RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    SERIAL.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    SERIAL.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The settings every test starts from.
fn builder(server: &RedisServer, name: &str) -> DurableBuilder {
    DurableScheduler::builder(server.url(), name)
        .tick(TICK)
        .slots(SLOTS)
        .lease(LEASE)
        .max_attempts(5)
        .backoff(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
}

/// What a run must show: every key in `expected` handled at least once, none before its bound,
/// nothing handled that was never scheduled.
struct Expectations {
    /// Key -> the earliest time it may be handled (`now() + delay` read before its `schedule`).
    expected: HashMap<String, SystemTime>,
    /// Keys whose `schedule` was attempted but did not return `Ok` (they may fire or not).
    uncertain: HashSet<String>,
}

/// The problems found in `log` against `want`, or `Ok` with a short summary.
fn verify(want: &Expectations, log: &[Handled]) -> Result<String, String> {
    let mut problems = Vec::new();
    let mut seen: HashMap<&str, Vec<&Handled>> = HashMap::new();
    for h in log {
        seen.entry(&h.key).or_default().push(h);
    }
    let missing: Vec<&String> = want.expected.keys().filter(|k| !seen.contains_key(k.as_str())).collect();
    if !missing.is_empty() {
        let mut sample: Vec<_> = missing.iter().take(5).collect();
        sample.sort();
        problems.push(format!("{} of {} acknowledged tasks lost, e.g. {sample:?}", missing.len(), want.expected.len()));
    }
    let unknown: Vec<&&str> =
        seen.keys().filter(|k| !want.expected.contains_key(**k) && !want.uncertain.contains(**k)).collect();
    if !unknown.is_empty() {
        problems.push(format!("{} tasks handled that were never scheduled, e.g. {:?}", unknown.len(), &unknown[..1]));
    }
    for (key, deliveries) in &seen {
        for h in deliveries {
            if let Some(&not_before) = want.expected.get(*key) {
                if h.at + CLOCK_SLACK < not_before || h.due + CLOCK_SLACK < not_before {
                    problems.push(format!(
                        "{key} early: handled {:?} / due {:?} before its earliest time",
                        not_before.duration_since(h.at).unwrap_or_default(),
                        not_before.duration_since(h.due).unwrap_or_default()
                    ));
                }
            }
            if h.at + CLOCK_SLACK < h.due {
                problems.push(format!("{key} handed out {:?} before its due()", h.due.duration_since(h.at).unwrap()));
            }
        }
    }
    let redelivered = seen.values().filter(|d| d.len() > 1).count();
    if problems.is_empty() {
        Ok(format!("{} tasks handled, {} of them more than once", seen.len(), redelivered))
    } else {
        problems.truncate(10);
        Err(problems.join("\n"))
    }
}

/// Each key handled exactly once.
fn assert_once(log: &Log) {
    let mut count: HashMap<String, Vec<u32>> = HashMap::new();
    for h in log.all() {
        count.entry(h.key).or_default().push(h.attempt);
    }
    let twice: Vec<_> = count.iter().filter(|(_, attempts)| attempts.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "tasks handled more than once (key, attempts): {twice:?}");
}

/// The scenario behind the test: schedule tasks at a steady rate, SIGKILL Redis about halfway,
/// restart it on the same directory 700 ms later, keep scheduling, then wait for the tasks.
async fn kill_redis_mid_run(server: &mut RedisServer, name: &str) -> (Expectations, Vec<Handled>) {
    let timers = builder(server, name).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(log.handler(0));

    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let timers = timers.clone();
        let stop = stop.clone();
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

    tokio::time::sleep(Duration::from_millis(1200)).await;
    tokio::task::block_in_place(|| server.kill());
    tokio::time::sleep(Duration::from_millis(700)).await;
    tokio::task::block_in_place(|| server.restart());
    tokio::time::sleep(Duration::from_millis(1000)).await;
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
    let _guard = shared();
    let Some(mut server) = RedisServer::start() else { return };
    let (want, log) = kill_redis_mid_run(&mut server, "kill-aof").await;
    assert!(want.expected.len() > 300, "too few schedules succeeded to mean anything: {}", want.expected.len());
    match verify(&want, &log) {
        Ok(summary) => eprintln!("sigkill with AOF: {} scheduled, {summary}", want.expected.len()),
        Err(problems) => panic!("after SIGKILL and restart with AOF:\n{problems}\nredis log:\n{}", server.log_tail()),
    }
}

/// The negative control: the same run with AOF off must be caught losing tasks, which shows
/// that the check above can fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_without_aof_is_caught_losing_tasks() {
    let _guard = shared();
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

/// A worker that does its side effect and then dies before the ack (its runtime is shut down
/// under it): the task comes back after the lease with `attempt == 2`, to another worker, once.
#[test]
fn worker_dying_before_ack_gets_the_task_redelivered_after_the_lease() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let log = Log::default();

    // The doomed node: its handler records, then never returns.
    let doomed = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let _doomed_worker = doomed.block_on(async {
        let timers = builder(&server, "dies").connect().await.expect("connect");
        let log = log.clone();
        timers.run(move |task: Task| {
            log.record(&task, 1);
            async move {
                std::future::pending::<()>().await;
                Ok::<(), std::io::Error>(())
            }
        })
    });

    let survivor = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    survivor.block_on(async {
        let timers = builder(&server, "dies").connect().await.expect("connect");
        timers.schedule("order-1:review", Duration::from_millis(100), "payload").await.expect("schedule");
        assert!(wait_until(Duration::from_secs(3), || log.of("order-1:review").len() == 1).await, "never delivered");
    });
    // The process dies: every task of its runtime is dropped where it stands, the ack never sent.
    doomed.shutdown_background();

    survivor.block_on(async {
        let timers = builder(&server, "dies").connect().await.expect("connect");
        let worker = timers.run(log.handler(2));
        let redelivered = wait_until(LEASE * 3 + Duration::from_secs(1), || log.of("order-1:review").len() >= 2).await;
        let deliveries = log.of("order-1:review");
        assert!(redelivered, "not redelivered after the lease: {deliveries:?}");
        let (first, second) = (&deliveries[0], &deliveries[1]);
        assert_eq!((first.node, first.attempt), (1, 1), "{deliveries:?}");
        assert_eq!((second.node, second.attempt), (2, 2), "{deliveries:?}");
        let gap = second.at.duration_since(first.at).unwrap();
        assert!(
            gap + Duration::from_millis(100) >= LEASE,
            "redelivered {gap:?} after the first delivery, within the lease"
        );
        assert_eq!(first.due, second.due, "a redelivery keeps the task's due time");
        // Acknowledged now: no third delivery, and the key is free again.
        tokio::time::sleep(LEASE + TICK * 4).await;
        assert_eq!(log.of("order-1:review").len(), 2, "{:?}", log.of("order-1:review"));
        assert!(!timers.contains("order-1:review").await.unwrap());
        assert_eq!(timers.len().await.unwrap(), 0);
        timers.schedule("order-1:review", Duration::from_secs(60), "again").await.expect("key free after the ack");
        worker.shutdown().await;
    });
}

/// A worker paused past its lease (its runtime's thread frozen, as a GC pause or a stopped VM
/// would) with a handler in hand: its renewals stop, so the task goes to another worker
/// (attempt 2) while the first handler is still under way. When the first worker wakes, its
/// late outcome (refused by Redis, or not even sent once its renewal was refused) must not
/// complete the second's delivery: when the second fails, the task is retried (attempt 3). Had
/// the stale outcome been taken as an ack, attempt 3 would never come.
#[test]
fn a_paused_workers_late_outcome_cannot_complete_the_redelivery() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let name = "stale-ack";
    let log = Log::default();

    // Node 1 on a current-thread runtime of its own thread, so that one blocking call freezes
    // it whole: its lease renewals, its leader loop and its handler. Its handler acks 1.5
    // leases after its start, which falls while it is frozen: it acks as soon as it wakes.
    let node1 = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let node1_handle = node1.handle().clone();
    let (stop_node1, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = node1.block_on(async {
        let timers = builder(&server, name).connect().await.expect("connect");
        let log = log.clone();
        let worker = timers.run(move |task: Task| {
            log.record(&task, 1);
            let attempt = task.attempt();
            async move {
                if attempt == 1 {
                    tokio::time::sleep(LEASE * 3 / 2).await;
                }
                Ok::<(), String>(())
            }
        });
        worker.ready().await;
        timers.schedule("order-2:review", Duration::from_millis(100), "p").await.unwrap();
        worker
    });
    let node1_thread = std::thread::spawn(move || {
        node1.block_on(async move {
            let _ = stopped.await;
            let _ = tokio::time::timeout(Duration::from_secs(3), worker.shutdown()).await;
        });
    });
    let started = Instant::now();
    while log.of("order-2:review").is_empty() {
        assert!(started.elapsed() < Duration::from_secs(3), "node 1 never got the task");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Freeze node 1 for 2.5 leases, with the task in hand.
    node1_handle.spawn(async { std::thread::sleep(LEASE * 5 / 2) });

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        // Node 2: its attempt fails after node 1 woke and sent its late outcome.
        let timers = builder(&server, name).connect().await.expect("connect");
        let worker2 = timers.run({
            let log = log.clone();
            move |task: Task| {
                log.record(&task, 2);
                let attempt = task.attempt();
                async move {
                    match attempt {
                        2 => {
                            tokio::time::sleep(LEASE * 2).await;
                            Err("attempt 2 fails on purpose".to_string())
                        }
                        _ => Ok(()),
                    }
                }
            }
        });
        let third = wait_until(LEASE * 6, || log.of("order-2:review").len() >= 3).await;
        let seen: Vec<(usize, u32)> = log.of("order-2:review").iter().map(|h| (h.node, h.attempt)).collect();
        assert!(third, "node 1's late outcome completed attempt 2's delivery: deliveries {seen:?}");
        assert_eq!(seen[..2], [(1, 1), (2, 2)]);
        assert_eq!(seen[2].1, 3, "{seen:?}");
        tokio::time::sleep(LEASE + TICK * 4).await;
        assert_eq!(log.of("order-2:review").len(), 3, "handled again after the final ack");
        assert!(!timers.contains("order-2:review").await.unwrap());
        worker2.shutdown().await;
    });
    let _ = stop_node1.send(());
    node1_thread.join().expect("node 1");
}

/// A stale leader: node 1 leads, then its runtime thread is frozen for 2.5 leases (as a GC
/// pause or a stopped VM would). Node 2 takes the lead within the lease; when node 1 wakes, its
/// cursor moves are refused (the leadership stays with node 2) and nothing is handed out twice
/// within a lease; every task is handled.
#[test]
fn a_paused_leader_is_replaced_and_fenced_off() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let name = "stale-leader";
    let log = Log::default();

    // Node 1 on a current-thread runtime of its own thread, so that one blocking call freezes it
    // whole: its ticker, its lease renewal and its handlers.
    let node1 = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let node1_handle = node1.handle().clone();
    let (stop_node1, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = node1.block_on(async {
        let worker = builder(&server, name).connect().await.expect("connect").run(log.handler(1));
        tokio::time::timeout(LEASE * 3, worker.ready()).await.expect("node 1 never ran");
        worker
    });
    assert!(worker.is_leader(), "node 1, alone, does not lead");
    let node1_thread = std::thread::spawn(move || {
        node1.block_on(async move {
            let _ = stopped.await;
            let _ = tokio::time::timeout(Duration::from_secs(3), worker.shutdown()).await;
        });
    });
    let first_leader = leader_value(&server, name).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let timers = builder(&server, name).connect().await.expect("connect");
        let worker2 = timers.run(log.handler(2));
        let mut want = Expectations { expected: HashMap::new(), uncertain: HashSet::new() };
        for i in 0..300u64 {
            let key = format!("t{i}");
            let delay = Duration::from_millis(200 + i * 11);
            let before = SystemTime::now();
            timers.schedule(&key, delay, vec![]).await.expect("schedule");
            want.expected.insert(key, before + delay);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(leader_value(&server, name).as_ref(), Some(&first_leader), "node 1 lost the lead unprovoked");

        // Freeze node 1 for 2.5 leases.
        let frozen_at = Instant::now();
        node1_handle.spawn(async { std::thread::sleep(LEASE * 5 / 2) });
        let mut takeover = None;
        while frozen_at.elapsed() < LEASE * 5 / 2 {
            match leader_value(&server, name) {
                Some(v) if v != first_leader => {
                    takeover.get_or_insert(frozen_at.elapsed());
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let takeover = takeover.expect("node 2 never took the lead while node 1 was frozen");
        assert!(takeover <= LEASE * 3 / 2 + Duration::from_millis(300), "took {takeover:?} to replace the leader");
        let second_leader = leader_value(&server, name).unwrap();

        // Node 1 is awake again and tries its stale token: it must not get the lead back.
        tokio::time::sleep(LEASE * 3 / 2).await;
        assert_eq!(leader_value(&server, name), Some(second_leader), "the stale leader took the lead back");

        let keys: HashSet<String> = want.expected.keys().cloned().collect();
        assert!(
            wait_until(Duration::from_secs(8), || keys.is_subset(&log.distinct_keys())).await,
            "{} tasks never handled",
            keys.difference(&log.distinct_keys()).count()
        );
        tokio::time::sleep(TICK * 4).await;
        let all = log.all();
        if let Err(problems) = verify(&want, &all) {
            panic!("{problems}");
        }
        // A second delivery is only allowed once the first one's lease ran out (node 1 frozen
        // with the task in hand); never two inside one lease.
        let mut by_key: HashMap<&str, Vec<&Handled>> = HashMap::new();
        for h in &all {
            by_key.entry(&h.key).or_default().push(h);
        }
        for (key, deliveries) in by_key {
            for pair in deliveries.windows(2) {
                let gap = pair[1].at.duration_since(pair[0].at).unwrap_or_default();
                assert!(
                    gap + Duration::from_millis(100) >= LEASE && pair[1].attempt > pair[0].attempt,
                    "{key} handed out twice within a lease: {deliveries:?}"
                );
            }
        }
        worker2.shutdown().await;
    });
    let _ = stop_node1.send(());
    node1_thread.join().expect("node 1");
}

/// Every node down for more than a revolution (32 slots x 50 ms = 1.6 s; down 2.5 s) while
/// clients keep scheduling, near and far: when a worker comes back, every task fires once, none
/// early, and the overdue ones fire promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_down_for_more_than_a_revolution() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "outage").connect().await.expect("connect");
    let log = Log::default();
    let mut want = Expectations { expected: HashMap::new(), uncertain: HashSet::new() };
    let mut schedule = |key: String, delay: Duration| {
        let timers = timers.clone();
        let before = SystemTime::now();
        want.expected.insert(key.clone(), before + delay);
        async move { timers.schedule(&key, delay, key.as_bytes().to_vec()).await.expect("schedule") }
    };

    let worker = timers.run(log.handler(0));
    for i in 0..50u64 {
        schedule(format!("before-{i}"), Duration::from_millis(100 + i * 80)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    worker.shutdown().await;
    let down_at = SystemTime::now();

    // Nobody ticks now. Schedules continue: due during the outage, due just after it, and far
    // beyond a revolution.
    for i in 0..100u64 {
        schedule(format!("during-{i}"), Duration::from_millis(50 + i * 20)).await;
    }
    for i in 0..20u64 {
        schedule(format!("far-{i}"), Duration::from_millis(3500 + i * 150)).await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stats = timers.stats().await.expect("stats");
    assert!(stats.cursor_lag_ticks > SLOTS as _, "the cursor should lag a revolution behind: {stats:?}");

    let back_at = SystemTime::now();
    let worker = timers.run(log.handler(1));
    let keys: HashSet<String> = want.expected.keys().cloned().collect();
    let all_fired = wait_until(Duration::from_secs(8), || keys.is_subset(&log.distinct_keys())).await;
    tokio::time::sleep(TICK * 4).await;
    worker.shutdown().await;
    assert!(all_fired, "never fired: {:?}", keys.difference(&log.distinct_keys()).take(5).collect::<Vec<_>>());
    if let Err(problems) = verify(&want, &log.all()) {
        panic!("{problems}");
    }
    assert_once(&log);
    // Overdue tasks (due while nobody ticked) fire soon after the restart, not a revolution late.
    for h in log.all().iter().filter(|h| h.due > down_at && h.due < back_at) {
        let late = h.at.duration_since(back_at).unwrap_or_default();
        assert!(late < Duration::from_secs(2), "{} fired {late:?} after the restart", h.key);
    }
    let stats = timers.stats().await.expect("stats");
    assert!(stats.cursor_lag_ticks <= 2, "the cursor did not catch up: {stats:?}");
    assert_eq!(timers.len().await.unwrap(), 0);
}

/// Ambiguous replies to `schedule`: Redis sleeps (`DEBUG SLEEP`) longer than the client's
/// response timeout, so the first attempt times out at the client but runs at the server. The
/// call must still answer `Ok` to its own caller (not `DuplicateKey`) and leave one task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_schedule_is_neither_duplicated_nor_refused() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "ambiguous-schedule")
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
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
        assert!(started.elapsed() >= Duration::from_millis(200), "the server was not asleep: the test proves nothing");
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
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "ambiguous-tick")
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
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
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "ambiguous-cancel")
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
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
        assert!(started.elapsed() >= Duration::from_millis(200), "the server was not asleep: the test proves nothing");
        assert_eq!(answer, Ok(true), "cancel of {key} after an ambiguous timeout");
    }
    tokio::time::sleep(Duration::from_millis(2500) + TICK * 4).await;
    worker.shutdown().await;
    assert!(log.all().is_empty(), "a cancelled task fired: {:?}", log.all());
    assert_eq!(timers.len().await.unwrap(), 0);
}

/// 100,000 tasks due on one tick: every one fires once, and `SLOWLOG` (threshold 10 ms) holds
/// no call of the crate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_tasks_on_one_tick() {
    const N: usize = 100_000;
    let _guard = exclusive();
    let Some(server) =
        RedisServer::start_with(Persistence::Aof, &["--slowlog-log-slower-than", "10000", "--slowlog-max-len", "1024"])
    else {
        return;
    };
    // SLOWLOG times wall-clock time, so a server preempted by the rest of a two-core machine
    // shows slow calls that are not its own work; a higher priority keeps the measure honest.
    let prioritized = server.raise_priority();
    let timers = builder(&server, "burst").concurrency(256).connect().await.expect("connect");
    server.command(&["SLOWLOG", "RESET"]);

    let started = Instant::now();
    // Time enough to schedule them all on a slow machine; none of them fires before `due`.
    let due = SystemTime::now() + Duration::from_secs(10);
    let mut batch = Vec::with_capacity(1000);
    for i in 0..N {
        batch.push((format!("b{i}"), due.duration_since(SystemTime::now()).unwrap_or_default(), [0u8; 8]));
        if batch.len() == 1000 {
            let results = timers.schedule_many(batch.drain(..)).await.expect("schedule_many");
            assert!(results.iter().all(Result::is_ok), "{:?}", results.iter().find(|r| r.is_err()));
        }
    }
    let scheduled_in = started.elapsed();
    // `schedule_many` takes delays; everything must still land on one tick (or its neighbour,
    // when the batches straddle a tick boundary).
    assert!(scheduled_in < Duration::from_secs(10), "scheduling 100,000 took {scheduled_in:?}: raise the due time");

    let fired = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(vec![0u8; N]));
    let worker = timers.run({
        let fired = fired.clone();
        let seen = seen.clone();
        move |task: Task| {
            let i: usize = task.key()[1..].parse().unwrap();
            seen.lock().unwrap()[i] += 1;
            fired.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    });
    let all = wait_until(Duration::from_secs(60), || fired.load(Ordering::Relaxed) >= N).await;
    let drained_in = started.elapsed();
    tokio::time::sleep(LEASE + TICK * 4).await;
    worker.shutdown().await;
    assert!(all, "only {} of {N} fired", fired.load(Ordering::Relaxed));
    let twice = seen.lock().unwrap().iter().filter(|&&n| n > 1).count();
    assert_eq!(twice, 0, "{twice} tasks handled more than once");
    assert_eq!(fired.load(Ordering::Relaxed), N);

    let (slow, stalled) = slow_calls(&server);
    assert!(slow.is_empty(), "calls of the crate over 10 ms (redis-server priority raised: {prioritized:?}): {slow:?}");
    if !stalled.is_empty() {
        eprintln!("SLOWLOG entries excused as the host stalling Redis, not the crate's work: {stalled:?}");
    }
    eprintln!("100,000 on one tick: scheduled in {scheduled_in:?}, all handled {drained_in:?} after the start");
}

/// The `SLOWLOG` entries of the crate's calls, as `(slow, stalled)`.
///
/// `SLOWLOG` times wall-clock time, so it also records the host stalling Redis (another process
/// on the CPU, a page fault). Redis 7 logs the commands a script runs as well as the script; an
/// O(1) or O(log n) single-key command costs microseconds, so one that took 10 ms is a stall, and
/// so is the script call it ran in, when it took at least half of that call. Those go to
/// `stalled`; every other entry of the crate is `slow`.
fn slow_calls(server: &RedisServer) -> (Vec<String>, Vec<String>) {
    struct Entry {
        id: i64,
        micros: i64,
        args: Vec<String>,
    }
    let entries: Vec<Entry> = server
        .command(&["SLOWLOG", "GET", "1024"])
        .as_array()
        .iter()
        .filter_map(|entry| {
            let fields = entry.as_array();
            let args = fields.get(3)?.as_array().iter().filter_map(Reply::as_str).take(3).map(str::to_owned).collect();
            Some(Entry { id: fields.first()?.as_int()?, micros: fields.get(2)?.as_int()?, args })
        })
        .filter(|e| {
            !matches!(e.args.first().map(|c| c.to_ascii_uppercase()).as_deref(), Some("SLOWLOG" | "CONFIG" | "DEBUG"))
        })
        .collect();
    let is_script = |e: &Entry| {
        matches!(e.args.first().map(|c| c.to_ascii_uppercase()).as_deref(), Some("EVAL" | "EVALSHA" | "FCALL"))
    };
    let (mut slow, mut stalled) = (Vec::new(), Vec::new());
    for e in &entries {
        let text = format!("{} us: {:?}", e.micros, e.args);
        let stall = if is_script(e) {
            entries.iter().any(|inner| inner.id == e.id - 1 && !is_script(inner) && inner.micros * 2 >= e.micros)
        } else {
            true
        };
        if stall {
            stalled.push(text);
        } else {
            slow.push(text);
        }
    }
    (slow, stalled)
}

/// Dead letters over several pages list each once, oldest first; a `requeue_dead` whose
/// reply was lost (`DEBUG SLEEP` past the response timeout,) still answers true, and
/// the task comes back once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_and_an_ambiguous_requeue_still_answers_true() {
    const N: usize = 300;
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    // A lease longer than the four stalls together: with one attempt, a requeued task whose
    // claim is retried past its lease would die again without running, which is not what this
    // test is about.
    let timers = builder(&server, "dead-pages")
        .max_attempts(1)
        .lease(Duration::from_secs(5))
        .response_timeout(Duration::from_millis(200))
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
        assert!(started.elapsed() >= Duration::from_millis(200), "the server was not asleep: the test proves nothing");
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

type DeadTaskSummary = (String, u32, String);

/// A handler that panics is retried like one that fails: after the backoff (100 ms), not
/// after the lease (1 s). Both a panic while the handler's future runs and one in the handler's
/// call itself, before it returns a future.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried_after_the_backoff() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    // The default panic hook, with RUST_BACKTRACE set, symbolises a backtrace of this debug
    // binary on the worker's thread before the panic is caught: 150 ms a panic here, 0.5 s and
    // more on a loaded machine, which this test would measure as the retry's delay. It measures
    // the backoff, so the handlers' panics print their message only (the hook is the process's:
    // another test's panic meanwhile prints no backtrace either); the default comes back after.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let timers = builder(&server, "panic").connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run({
        let log = log.clone();
        move |task: Task| {
            log.record(&task, 0);
            let attempt = task.attempt();
            if attempt == 1 && task.key() == "in-call" {
                panic!("handler panics on purpose, before returning its future");
            }
            async move {
                if attempt == 1 {
                    panic!("handler future panics on purpose");
                }
                Ok::<(), std::io::Error>(())
            }
        }
    });
    timers.schedule("in-future", Duration::from_millis(50), "x").await.unwrap();
    timers.schedule("in-call", Duration::from_millis(50), "x").await.unwrap();
    wait_until(LEASE * 3, || log.of("in-future").len() == 2 && log.of("in-call").len() == 2).await;
    tokio::time::sleep(LEASE + TICK * 4).await;
    worker.shutdown().await;
    for key in ["in-future", "in-call"] {
        let deliveries = log.of(key);
        assert_eq!(deliveries.iter().map(|h| h.attempt).collect::<Vec<_>>(), [1, 2], "{key}: {deliveries:?}");
        let gap = deliveries[1].at.duration_since(deliveries[0].at).unwrap();
        assert!(gap < LEASE / 2, "{key}: the retry after a panic came {gap:?} later, as a lease expiry, not a backoff");
    }
    let _ = std::panic::take_hook();
}

/// Redis away for longer than a call's retry window: the call fails with a retryable error
/// within that window (never hangs); the worker keeps going and resumes when Redis returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_longer_than_the_retry_window() {
    let _guard = shared();
    let Some(mut server) = RedisServer::start() else { return };
    let window = Duration::from_secs(1);
    let timers = builder(&server, "away").connect_timeout(window).connect().await.expect("connect");
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

/// Cancel and reschedule racing the tick that makes the tasks due, while handlers (30 ms
/// each) are in flight. Whatever each call answered:
/// - cancel `true`: no delivery starts after the answer (one in flight may have started before);
/// - cancel `false`: it had been handed out already, so it fired exactly once;
/// - reschedule `Ok`: exactly one delivery starts after the answer, no earlier than the new time
///   (a task in flight is taken back, so one delivery may also have started before the answer);
/// - reschedule `NotFound`: it had been handed out already, so it fired exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_race_the_tick() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "race").concurrency(32).connect().await.expect("connect");
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
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let name = "random";
    let timers = builder(&server, name).connect().await.expect("connect");
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
    let ring = server.command(&["GET", &keys(name).ring()]).as_int().unwrap_or(0);
    let held: i64 =
        (0..SLOTS).map(|i| server.command(&["LLEN", &keys(name).slot(i as u64)]).as_int().unwrap_or(0)).sum();
    assert_eq!((ring, held), (0, 0), "the ring counter and what the slots hold, at the end");
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

/// `wait_for_replicas`: with no replica connected a schedule fails with a retryable error
/// (the write did not reach a replica in time); with one, it succeeds and the replica already
/// holds the task when `schedule` returns, so a failover to it would keep the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_wait_for_a_replica_when_asked() {
    let _guard = shared();
    let Some(alone) = RedisServer::start() else { return };
    let timers = builder(&alone, "replicated")
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
    let timers = builder(&primary, "replicated")
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

/// Redis's command counts (`INFO commandstats`) over `window`: the calls the nodes send
/// (`EVALSHA`, `EVAL`, `BLPOP`) and every command Redis runs, those inside the scripts included,
/// both per tick; and the count of each command.
struct Counted {
    sent: f64,
    blpop: f64,
    run: f64,
    per_command: Vec<(String, u64)>,
}

async fn count_commands(server: &RedisServer, window: Duration, tick: Duration) -> Counted {
    server.command(&["CONFIG", "RESETSTAT"]);
    tokio::time::sleep(window).await;
    let stats = server.command(&["INFO", "commandstats"]);
    let stats = stats.as_str().unwrap_or_default();
    let mut per_command = Vec::new();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let (name, rest) = line.trim_start_matches("cmdstat_").split_once(':').unwrap();
        let calls: u64 = rest.split(',').find_map(|f| f.strip_prefix("calls=")).and_then(|n| n.parse().ok()).unwrap();
        if !name.starts_with("info") && !name.starts_with("config") {
            per_command.push((name.to_owned(), calls));
        }
    }
    let ticks = window.as_secs_f64() / tick.as_secs_f64();
    let calls_of = |name: &str| per_command.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
    let total: u64 = per_command.iter().map(|(_, c)| c).sum();
    Counted {
        sent: (calls_of("evalsha") + calls_of("eval") + calls_of("blpop")) as f64 / ticks,
        blpop: calls_of("blpop") as f64 / ticks,
        run: total as f64 / ticks,
        per_command,
    }
}

/// An idle wheel (1,000 tasks an hour away, three workers) costs a few Redis commands per
/// tick, whatever it holds; and every key the wheel writes carries its hash tag, so one wheel
/// lives on one cluster slot.
///
/// Per tick (50 ms here, the lease 1 s): the leader's tick call; the two others bid for the lead
/// every quarter lease (0.2 per tick each), not every tick; each of the three idle workers waits
/// for a wake-up and claims every third of the lease when none comes (0.15 each per tick): about
/// 2.3 calls per tick. Before, the others bid every tick and each worker waited a tick and
/// claimed after each wait: 9 calls per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_wheel_costs_a_few_commands_per_tick_under_one_hash_tag() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "idle").connect().await.expect("connect");
    let items = (0..1000).map(|i| (format!("later-{i}"), Duration::from_secs(3600), vec![1u8; 16]));
    assert!(timers.schedule_many(items).await.expect("schedule_many").iter().all(Result::is_ok));
    let log = Log::default();
    let workers: Vec<_> = (0..3).map(|n| timers.run(log.handler(n))).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let c = count_commands(&server, Duration::from_secs(3), TICK).await;
    let listed: Vec<String> = c.per_command.iter().map(|(n, k)| format!("{n}={k}")).collect();
    eprintln!(
        "idle wheel, 3 workers: {:.2} calls ({:.2} BLPOP) and {:.1} commands per tick ({})",
        c.sent,
        c.blpop,
        c.run,
        listed.join(" ")
    );
    // Nothing per task (1,000 of them would show), and no call per tick but the leader's.
    assert!(c.sent <= 3.0, "an idle wheel costs {:.2} calls per tick: {listed:?}", c.sent);
    assert!(c.blpop <= 0.6, "idle workers wait {:.2} times per tick: {listed:?}", c.blpop);
    assert!(c.run <= 20.0, "an idle wheel runs {:.1} commands per tick: {listed:?}", c.run);
    for worker in workers {
        worker.shutdown().await;
    }
    assert!(log.all().is_empty());

    let all = server.command(&["KEYS", "*"]);
    let prefix = keys("idle").prefix().to_string();
    let untagged: Vec<&str> =
        all.as_array().iter().filter_map(Reply::as_str).filter(|k| !k.starts_with(&prefix)).collect();
    assert!(untagged.is_empty(), "keys outside the wheel's hash tag: {untagged:?}");
    let pending = server.command(&["HLEN", &keys("idle").tasks()]).as_int();
    assert_eq!(pending, Some(1000), "the tasks are not where expected");
}

/// A clean shutdown hands the lead over at once (not after the lease), waits for the
/// handlers in flight, and their acks land: nothing is handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_hands_over_the_lead_at_once_and_finishes_its_handlers() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    let name = "handover";
    let timers = builder(&server, name).connect().await.expect("connect");
    let log = Log::default();
    let slow = {
        let log = log.clone();
        timers.run(move |task: Task| {
            log.record(&task, 1);
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<(), std::io::Error>(())
            }
        })
    };
    slow.ready().await;
    assert!(slow.is_leader());
    let first = leader_value(&server, name);
    let other = timers.run(log.handler(2));
    other.ready().await;
    assert!(!other.is_leader());
    for i in 0..20 {
        timers.schedule(format!("h{i}"), Duration::from_millis(100), vec![]).await.unwrap();
    }
    // Wait until the first worker holds some in flight, then stop it.
    assert!(wait_until(Duration::from_secs(2), || log.all().iter().any(|h| h.node == 1)).await);
    let stopping = Instant::now();
    slow.shutdown().await;
    let took = stopping.elapsed();
    assert!(took >= Duration::from_millis(150), "shutdown returned after {took:?}, before its handlers finished");
    // The release leaves a token that the idle worker's node takes, and it bids at once: not
    // at its next periodic bid (every quarter lease), nor after the lease.
    let released = Instant::now();
    let handed_over = wait_until(LEASE / 2, || leader_value(&server, name).is_some_and(|v| Some(v) != first)).await;
    let took = released.elapsed();
    eprintln!("the lead was handed over {took:?} after the shutdown");
    assert!(handed_over, "the lead was not handed over within half a lease of the shutdown");
    assert!(took <= TICK, "the lead was handed over {took:?} after the shutdown, not at once");
    assert!(wait_until(Duration::from_secs(3), || log.distinct_keys().len() == 20).await);
    tokio::time::sleep(LEASE + TICK * 4).await;
    other.shutdown().await;
    assert_once(&log);
}

/// Payloads: empty, every byte value, exactly the maximum arrive intact; one byte more is
/// `Invalid`, and so is an empty key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_up_to_the_maximum() {
    let _guard = shared();
    let Some(server) = RedisServer::start() else { return };
    const MAX: usize = 256 * 1024;
    let timers = builder(&server, "payload").max_payload(MAX).connect().await.expect("connect");
    let received: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
    let worker = timers.run({
        let received = received.clone();
        move |task: Task| {
            received.lock().unwrap().insert(task.key().to_owned(), task.payload().to_vec());
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    });
    let max: Vec<u8> = (0..MAX).map(|i| (i * 7 + i / 256) as u8).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("bytes", (0..=255u8).collect()),
        ("crlf", b"\r\n$-1\r\n*0\r\n".to_vec()),
        ("max", max),
    ];
    for (key, payload) in &cases {
        timers.schedule(*key, Duration::from_millis(50), payload.clone()).await.unwrap();
    }
    match timers.schedule("over", Duration::from_millis(50), vec![0u8; MAX + 1]).await {
        Err(Error::Invalid(_)) => {}
        other => panic!("payload of max + 1 bytes: {other:?}"),
    }
    match timers.schedule("", Duration::from_millis(50), "x").await {
        Err(Error::Invalid(_)) => {}
        other => panic!("empty key: {other:?}"),
    }
    assert!(!timers.contains("over").await.unwrap());
    assert!(wait_until(Duration::from_secs(3), || received.lock().unwrap().len() == cases.len()).await);
    worker.shutdown().await;
    let received = received.lock().unwrap();
    for (key, payload) in &cases {
        assert!(received[*key] == *payload, "payload {key} ({} bytes) changed on the way", payload.len());
    }
}
