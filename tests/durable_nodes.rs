//! Three nodes, as three separate processes, share one durable wheel; the leader's process is
//! killed with SIGKILL. Another node takes over within the lease, and every task is handled, each
//! once except where the killed node had it in hand (then once more, after its lease, with a
//! higher attempt). And a node killed in the middle of a handler that ran past its lease (its
//! lease renewed until then) has its task handed out again within about one lease.
//!
//! On the store the run selects (`support/store.rs`: a real `redis-server`, or a SQLite file of
//! the embedded store that the node processes share). The nodes are this test binary itself, run
//! again with `TIMEWHEEL_NODE_URL` set: in that case the test `node_process` runs a worker until
//! told to stop; in a normal run it does nothing. Each node records every delivery in a log file
//! (`support::node::NodeFiles`), which the parent reads. Who leads is read as
//! `support::durable::Watcher` reads it: the fencing token on Redis, the leading node's id
//! elsewhere.
//!
//! Run with `cargo test --features redis --test durable_nodes` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature.
#![cfg(feature = "redis")]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::durable::{builder, Watcher, LEASE, TICK};
use support::node::{self, Delivery, NodeFiles, NodeProcess};
use support::TestStore;
use tokio_timewheel::durable::Task;

const NAME: &str = "nodes";
const ENV_URL: &str = "TIMEWHEEL_NODE_URL";
/// The directory of the nodes' log and stop files (`node::NodeFiles`).
const ENV_DIR: &str = "TIMEWHEEL_NODE_DIR";
const ENV_ID: &str = "TIMEWHEEL_NODE_ID";
/// How long a node's handler runs after it records its delivery, in ms (0 when unset).
const ENV_HANDLER_MS: &str = "TIMEWHEEL_NODE_HANDLER_MS";
/// A node stops by itself after this long, should the parent be gone.
const NODE_LIFETIME: Duration = Duration::from_secs(60);

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// The body of a node process. Does nothing unless started by [`three_nodes_survive_the_leaders_sigkill`].
#[test]
fn node_process() {
    let settings = (node::setting(ENV_URL), node::setting(ENV_ID), node::setting(ENV_DIR));
    let (Some(url), Some(id), Some(dir)) = settings else { return };
    let dir = std::path::PathBuf::from(dir);
    let run = Duration::from_millis(node::setting(ENV_HANDLER_MS).and_then(|ms| ms.parse().ok()).unwrap_or(0));
    node::runtime().block_on(async move {
        let timers = builder(&url, NAME).concurrency(8).connect().await.expect("node: connect");
        let log = dir.clone();
        let worker = timers.run(move |task: Task| {
            let recorded = node::record_delivery_in(&log, &id, &task);
            async move {
                recorded.map_err(|e| e.to_string())?;
                tokio::time::sleep(run).await;
                Ok::<(), String>(())
            }
        });
        node::until_stop_file(&dir, Duration::from_millis(100), NODE_LIFETIME).await;
        worker.shutdown().await;
    });
}

/// A node process (killed on drop), with the number the test gave it.
struct Node {
    id: usize,
    process: NodeProcess,
}

impl Node {
    fn spawn(url: &str, files: &NodeFiles, id: usize) -> Node {
        Self::spawn_with_handler(url, files, id, Duration::ZERO)
    }

    /// A node whose handler runs for `run` after it records its delivery.
    fn spawn_with_handler(url: &str, files: &NodeFiles, id: usize, run: Duration) -> Node {
        let env = [
            (ENV_URL, url.to_owned()),
            (ENV_DIR, files.dir().display().to_string()),
            (ENV_ID, id.to_string()),
            (ENV_HANDLER_MS, run.as_millis().to_string()),
        ];
        Node { id, process: NodeProcess::spawn(env) }
    }

    /// SIGKILL.
    fn kill(&mut self) {
        self.process.kill();
    }

    /// Waits up to `timeout` for the process to end by itself, then kills it. Whether it ended by
    /// itself.
    fn join(&mut self, timeout: Duration) -> bool {
        self.process.join(timeout).is_some()
    }
}

/// Node 1, alone on the wheel, once it has taken the lead.
fn first_node_leading(store: &TestStore, files: &NodeFiles, watcher: &Watcher) -> Node {
    let node = Node::spawn(&store.url(), files, 1);
    let started = Instant::now();
    while watcher.leader().is_none() {
        assert!(started.elapsed() < Duration::from_secs(20), "node 1 never took the lead");
        std::thread::sleep(Duration::from_millis(20));
    }
    node
}

/// Every delivery the nodes recorded.
fn handled(files: &NodeFiles) -> Vec<Delivery> {
    files.deliveries()
}

/// Three node processes share one wheel; the leader's process gets SIGKILL halfway through
/// a stream of schedules.
#[test]
fn three_nodes_survive_the_leaders_sigkill() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let watcher = Watcher::new(&store, NAME);

    // Node 1 first, so that it is the leader.
    let mut nodes = vec![first_node_leading(&store, &files, &watcher)];
    let first_leader = watcher.leader().unwrap();
    nodes.push(Node::spawn(&url, &files, 2));
    nodes.push(Node::spawn(&url, &files, 3));

    // Watch the leader from a thread of its own, to time the takeover.
    let killed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let watching = {
        let (killed_at, done, first_leader) = (killed_at.clone(), done.clone(), first_leader.clone());
        let watcher = Watcher::new(&store, NAME);
        std::thread::spawn(move || -> Option<(Duration, String)> {
            while !done.load(Ordering::Relaxed) {
                let value = watcher.leader();
                if let (Some(v), Some(at)) = (value, *killed_at.lock().unwrap()) {
                    if v != first_leader {
                        return Some((at.elapsed(), v));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        })
    };

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Key -> the earliest time it may be handled, in ms.
    let mut expected: HashMap<String, u128> = HashMap::new();
    rt.block_on(async {
        let timers = builder(&url, NAME).concurrency(8).connect().await.expect("connect");
        for i in 0..600u64 {
            if i == 300 {
                let leader = tokio::task::block_in_place(|| watcher.leader());
                assert_eq!(leader.as_ref(), Some(&first_leader), "node 1 lost the lead unprovoked");
                *killed_at.lock().unwrap() = Some(Instant::now());
                nodes[0].kill();
            }
            let key = format!("review-{i}");
            let delay = Duration::from_millis(200 + (i * 13) % 1700);
            let before = SystemTime::now();
            timers.schedule(&key, delay, vec![]).await.expect("schedule");
            expected.insert(key, millis(before + delay));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });

    let deadline = Instant::now() + Duration::from_secs(15);
    let keys: HashSet<&String> = expected.keys().collect();
    loop {
        let seen: HashSet<String> = handled(&files).into_iter().map(|h| h.key).collect();
        if keys.iter().all(|k| seen.contains(*k)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never handled: {:?}",
            keys.iter().filter(|k| !seen.contains(**k)).take(5).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(LEASE + TICK * 4);
    done.store(true, Ordering::Relaxed);
    files.stop();
    for node in &mut nodes[1..] {
        assert!(node.join(Duration::from_secs(10)), "node {} did not shut down", node.id);
    }

    let (takeover, second_leader) = watching.join().unwrap().expect("nobody took over from the killed leader");
    assert!(takeover <= LEASE + Duration::from_millis(500), "took {takeover:?} to replace the killed leader");
    assert_ne!(second_leader, first_leader);

    let all = handled(&files);
    let mut by_key: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for h in &all {
        by_key.entry(&h.key).or_default().push(h);
        let not_before = expected.get(&h.key).unwrap_or_else(|| panic!("{} handled, never scheduled", h.key));
        assert!(h.at_ms + 1 >= *not_before && h.due_ms + 1 >= *not_before, "{h:?} early (not before {not_before})");
    }
    let mut redelivered = 0;
    for (key, deliveries) in &by_key {
        // Everything before the last delivery must have been node 1's, which died with it in hand.
        let (last, earlier) = deliveries.split_last().unwrap();
        for h in earlier {
            assert!(
                h.node == 1 && h.attempt < last.attempt,
                "{key} handled twice barring a lease expiry: {deliveries:?}"
            );
            assert!(last.at_ms >= h.at_ms + LEASE.as_millis() - 100, "{key} handed out again within the lease");
            redelivered += 1;
        }
    }
    let per_node = |n: usize| all.iter().filter(|h| h.node == n).count();
    eprintln!(
        "three nodes: {} tasks, takeover in {takeover:?}, handled by node 1/2/3: {}/{}/{}, {redelivered} redelivered after node 1 died",
        expected.len(),
        per_node(1),
        per_node(2),
        per_node(3)
    );
    assert!(per_node(2) + per_node(3) > 0);
}

/// A recurring task runs once per period on Redis's clock, for 20 periods, while the node that
/// leads (node 1, alone at first) is killed with SIGKILL after a few of them and node 2 takes
/// over: every period's run is handled, none early, none twice on its first delivery, and the
/// due times keep the fixed rate (missed runs made up at once: `MissedRuns::Burst`, asked for,
/// since the durable default is `Skip`).
#[test]
fn a_recurring_task_fires_once_per_period_across_the_leaders_sigkill() {
    const PERIOD: Duration = Duration::from_millis(300);
    const RUNS: usize = 20;
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let mut nodes = vec![first_node_leading(&store, &files, &Watcher::new(&store, NAME))];
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let before = SystemTime::now();
    rt.block_on(async {
        let timers = builder(&url, NAME).concurrency(8).connect().await.expect("connect");
        let repeat = tokio_timewheel::Repeat::Times(RUNS as u64);
        let burst = tokio_timewheel::MissedRuns::Burst;
        timers.schedule_repeating_with("every", PERIOD, repeat, burst, "tick").await.expect("schedule_repeating");
    });
    nodes.push(Node::spawn(&url, &files, 2));
    // Node 1 leads and runs the first few periods; then it dies.
    while handled(&files).len() < 4 {
        assert!(before.elapsed().unwrap() < Duration::from_secs(10), "the first runs never came");
        std::thread::sleep(Duration::from_millis(10));
    }
    nodes[0].kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    while handled(&files).iter().map(|h| h.due_ms).collect::<HashSet<_>>().len() < RUNS {
        assert!(Instant::now() < deadline, "only {} runs: {:?}", handled(&files).len(), handled(&files));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(PERIOD * 3 + LEASE);
    files.stop();
    assert!(nodes[1].join(Duration::from_secs(10)), "node 2 did not shut down");

    let all = handled(&files);
    let first_due = all.iter().map(|h| h.due_ms).min().unwrap();
    assert!(first_due + 1 >= millis(before + PERIOD), "the first run was due {first_due}, before a period had passed");
    let mut first_deliveries: HashMap<u128, usize> = HashMap::new();
    for h in &all {
        assert!(h.at_ms + 1 >= h.due_ms, "{h:?} handled early");
        assert_eq!((h.due_ms - first_due) % PERIOD.as_millis(), 0, "{h:?} off the fixed rate");
        if h.attempt == 1 {
            *first_deliveries.entry(h.due_ms).or_default() += 1;
        }
    }
    let dues: Vec<u128> = (0..RUNS as u128).map(|n| first_due + n * PERIOD.as_millis()).collect();
    for due in &dues {
        assert_eq!(first_deliveries.get(due), Some(&1), "the run due {due} was not handed out once: {all:?}");
    }
    assert_eq!(first_deliveries.len(), RUNS, "runs beyond the {RUNS} asked for: {all:?}");
    // Only a run node 1 had in hand when it died may have come again (a higher attempt).
    assert!(all.len() <= RUNS + 1, "{} deliveries for {RUNS} runs: {all:?}", all.len());
    eprintln!("recurring across a SIGKILL: {} deliveries for {RUNS} runs", all.len());
}

/// A node's process killed with SIGKILL in the middle of a handler that had already run for
/// 2.5 leases (its lease renewed all the while, so no other node got the task meanwhile): its
/// renewals stop, and the task is handed to another node within about one lease of the kill,
/// as the next attempt.
#[test]
fn a_node_killed_mid_handler_has_its_task_handed_out_again_within_a_lease() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let watcher = Watcher::new(&store, NAME);
    let mut slow = Node::spawn_with_handler(&url, &files, 1, Duration::from_secs(60));
    let started = Instant::now();
    while watcher.leader().is_none() {
        assert!(started.elapsed() < Duration::from_secs(20), "node 1 never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let timers = builder(&url, NAME).concurrency(8).connect().await.expect("connect");
        timers.schedule("long", Duration::from_millis(100), vec![]).await.expect("schedule");
    });
    let of_long = || handled(&files).into_iter().filter(|h| h.key == "long").collect::<Vec<_>>();
    let started = Instant::now();
    while of_long().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(5), "node 1 never got the task");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Node 2 stands by while node 1's handler runs past its lease.
    let _fast = Node::spawn(&url, &files, 2);
    std::thread::sleep(LEASE * 5 / 2);
    let before = of_long();
    assert_eq!(before.len(), 1, "handed out again while its handler ran and renewed: {before:?}");

    let killed = Instant::now();
    slow.kill();
    let mut again = Vec::new();
    while again.len() < 2 {
        assert!(killed.elapsed() < LEASE * 5, "never handed out again after the kill: {again:?}");
        std::thread::sleep(Duration::from_millis(5));
        again = of_long();
    }
    let after = killed.elapsed();
    eprintln!("handed out again {after:?} after the SIGKILL (lease {LEASE:?})");
    assert_eq!((again[1].node, again[1].attempt), (2, 2), "{again:?}");
    assert!(after <= LEASE + Duration::from_millis(500), "handed out again {after:?} after the kill");
}
