//! The fire path's buffer of tasks claimed ahead of the free handlers (`DurableBuilder::prefetch`).
//! A worker in a process of its own claims a full buffer behind a handler that hangs, and the
//! process is killed with SIGKILL: every buffered task is handed out again within about a lease
//! (never while the dead worker's lease lives), to another worker, once each; a `cancel` of a
//! buffered task answers `false` (it is claimed) and keeps its promise. And a worker that shuts
//! down runs what its buffer holds.
//!
//! On the store the run selects (`support/store.rs`: a real `redis-server`, or a SQLite file of
//! the embedded store that the node process shares). The node is this test binary itself, run
//! again with `TIMEWHEEL_NODE_URL` set: the test `node_process` then runs the worker; in a normal
//! run it does nothing. It writes the keys it starts to a log file the test reads. The check that
//! no task is claimed again while its lease lives reads the leases' ends in Redis, on Redis only.
//!
//! Run with `cargo test --features redis --test durable_fire_path` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature.
#![cfg(feature = "redis")]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::durable::{keys, wait_until, Log};
use support::node::{self, NodeFiles, NodeProcess};
use support::TestStore;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task};

const NAME: &str = "fire";
const TICK: Duration = Duration::from_millis(50);
const LEASE: Duration = Duration::from_secs(2);
/// Tasks the node claims ahead of its one handler.
const PREFETCH: usize = 24;
const ENV_URL: &str = "TIMEWHEEL_NODE_URL";
/// The directory of the log the node appends each task it starts to (`node::NodeFiles`).
const ENV_DIR: &str = "TIMEWHEEL_NODE_DIR";

fn builder(url: &str) -> DurableBuilder {
    DurableScheduler::builder(url, NAME)
        .tick(TICK)
        .slots(64)
        .lease(LEASE)
        .response_timeout(Duration::from_millis(500))
        .concurrency(1)
        .prefetch(PREFETCH)
}

fn redis_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The body of the node process: one handler, which records each start and hangs on a `slow-`
/// task (so that what the node claims ahead stays in its buffer). Does nothing unless started by
/// the test below.
#[test]
fn node_process() {
    let (Some(url), Some(dir)) = (node::setting(ENV_URL), node::setting(ENV_DIR)) else { return };
    let dir = std::path::PathBuf::from(dir);
    node::runtime().block_on(async move {
        let timers = builder(&url).connect().await.expect("node: connect");
        let _worker = timers.run(move |task: Task| {
            // An append to a file: a run that does not hang still takes next to no time.
            node::record_delivery_in(&dir, "1", &task).expect("node: record the start");
            async move {
                if task.key().starts_with("slow-") {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
                Ok::<(), String>(())
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

/// The keys the node started, in order.
fn started(files: &NodeFiles) -> Vec<String> {
    files.deliveries().into_iter().map(|d| d.key).collect()
}

/// The tasks claimed and not yet acknowledged (leased), in a handler or a worker's buffer.
fn leased(timers: &DurableScheduler) -> usize {
    let stats = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(timers.stats()));
    stats.expect("stats").in_flight
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_with_a_full_buffer_has_its_tasks_handed_out_again_within_a_lease() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let timers = builder(&url).connect().await.unwrap();
    let dir = files.dir().display().to_string();
    let mut node = NodeProcess::spawn([(ENV_URL, &url), (ENV_DIR, &dir)]);

    // A first task that finishes at once tells the node how long runs take (next to nothing), so
    // that it claims the whole prefetch ahead of its one handler.
    timers.schedule("warm-up", Duration::ZERO, b"w".to_vec()).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || started(&files) == ["warm-up"]).await,
        "the node never ran the warm-up task: {:?}",
        started(&files)
    );
    let slow: Vec<String> = (0..=PREFETCH).map(|i| format!("slow-{i:02}")).collect();
    let results = timers.schedule_many(slow.iter().map(|k| (k.as_str(), Duration::ZERO, &b"s"[..]))).await.unwrap();
    assert!(results.iter().all(Result::is_ok));

    // The node claims one for its handler (which hangs) and the rest into its buffer.
    let full = wait_until(Duration::from_secs(10), || leased(&timers) == slow.len()).await;
    assert!(full, "the node did not claim ahead: {} leased", leased(&timers));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let running = started(&files);
    assert_eq!(running.len(), 2, "one handler: the warm-up, then one slow task: {running:?}");
    let buffered: Vec<&String> = slow.iter().filter(|k| !running.contains(k)).collect();
    assert_eq!(buffered.len(), PREFETCH);

    // A buffered task is claimed: cancel leaves it alone and answers false.
    assert!(!timers.cancel(buffered[0]).await.unwrap(), "cancel took a task a worker holds");

    // The leases as the node last renewed them (read in Redis, on Redis), then SIGKILL.
    let lease_end: HashMap<String, u64> = match store.redis() {
        Some(server) => {
            // A task's lease is its claim call's: the call with the greatest first token at or
            // below the task's claim token.
            let scored = |key: String| -> Vec<(String, u64)> {
                let flat = server.command(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]);
                let flat: Vec<&str> = flat.as_array().iter().filter_map(|r| r.as_str()).collect();
                flat.chunks(2).map(|p| (p[0].to_owned(), p[1].parse().unwrap())).collect()
            };
            let calls: Vec<(u64, u64)> =
                scored(keys(NAME).leased()).into_iter().map(|(first, end)| (first.parse().unwrap(), end)).collect();
            scored(keys(NAME).claimed())
                .into_iter()
                .map(|(key, token)| {
                    let call = calls.iter().filter(|(first, _)| *first <= token).max_by_key(|(first, _)| *first);
                    (key, call.expect("the claim call of a claimed task").1)
                })
                .collect()
        }
        None => HashMap::new(),
    };
    node.kill();
    let killed = Instant::now();

    // Another worker gets every one of them, once each, after its lease ran out.
    let log = Log::default();
    let worker = timers.run(log.handler(1));
    let all = wait_until(LEASE + Duration::from_secs(8), || log.distinct_keys().len() == slow.len()).await;
    let took = killed.elapsed();
    assert!(all, "{} of {} handed out again after {took:?}", log.distinct_keys().len(), slow.len());
    assert!(took <= LEASE + Duration::from_secs(4), "handed out again only after {took:?}");
    tokio::time::sleep(LEASE).await;
    worker.shutdown().await;
    for key in &slow {
        let deliveries = log.of(key);
        assert_eq!(deliveries.len(), 1, "{key}: {deliveries:?}");
        let d = &deliveries[0];
        assert_eq!(d.attempt, 2, "{key}: the dead worker's claim was its first delivery");
        if store.is_redis() {
            let end = lease_end[key];
            assert!(
                redis_ms(d.claimed) >= end,
                "{key} claimed again at {} while its lease lived (to {end})",
                redis_ms(d.claimed)
            );
        }
    }
    let stats = timers.stats().await.unwrap();
    assert_eq!(stats.pending, 0, "{stats:?}");
}

/// `shutdown` runs what the buffer holds, as it lets running handlers finish: every task claimed
/// ahead is handled once and acknowledged, none left leased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_runs_what_the_buffer_holds() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url()).connect().await.unwrap();
    let log = Log::default();
    let slow_log = log.clone();
    // Each run takes 5 ms after a first quick one: the worker claims about 50 ms of work ahead.
    let worker = timers.run(move |task: Task| {
        let log = slow_log.clone();
        async move {
            log.record(&task, 0);
            if task.key() != "first" {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<(), String>(())
        }
    });
    timers.schedule("first", Duration::ZERO, Vec::new()).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || log.len() == 1).await);
    let keys: Vec<String> = (0..200).map(|i| format!("t-{i}")).collect();
    timers.schedule_many(keys.iter().map(|k| (k.as_str(), Duration::ZERO, &b""[..]))).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || leased(&timers) > 1).await, "the worker never claimed ahead");
    worker.shutdown().await;
    let handled = log.distinct_keys().len();
    assert_eq!(log.len(), handled, "a task ran twice");
    assert_eq!(leased(&timers), 0, "shutdown left tasks leased");
    assert_eq!(timers.len().await.unwrap() as usize, 201 - handled, "what was not handled is still pending, unclaimed");
}
