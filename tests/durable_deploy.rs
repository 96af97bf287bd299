//! The deploy pattern of the guide (`guide::durable_mode`): every start of a node upserts the
//! schedules kept in code
//! (`upsert_recurring`). A node is killed with SIGKILL in the middle of a run of a series and
//! started again, upserting the same schedules at once, while the killed run's lease still lives:
//! the run is delivered again (attempt 2) within about a lease, once, and its outcome is in the
//! history once; the series goes on after it; and the other series keeps its phase across the
//! restart (its next run is not pushed back by the second upsert). And in one process: the same
//! `every(20 s)` upserted again 12 s later keeps its first due time, and a changed payload
//! replaces it.
//!
//! On the store the run selects (`support/store.rs`: a real `redis-server`, or a SQLite file of
//! the embedded store that the node processes share). The nodes are this test binary itself, run
//! again with `TIMEWHEEL_NODE_URL` set (see tests/support/node.rs). Each records every delivery in
//! a log file, which the parent reads.
//!
//! Run with `cargo test --features redis,cron --test durable_deploy` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature.
#![cfg(all(feature = "redis", feature = "cron"))]

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::durable::builder;
use support::node::{self, Delivery, NodeFiles, NodeProcess};
use support::TestStore;
use tokio_timewheel::durable::{Outcome, Recurrence, Task, TaskState};

const NAME: &str = "deploy";
/// A series on a cron expression in a zone, as in the report: every two seconds.
const REPORT: &str = "report:every2s";
/// A fixed-rate series, whose phase must survive the restart.
const SYNC: &str = "sync:every3s";
const SYNC_PERIOD_MS: u128 = 3000;
const ENV_URL: &str = "TIMEWHEEL_NODE_URL";
/// The directory of the nodes' log and stop files (`node::NodeFiles`).
const ENV_DIR: &str = "TIMEWHEEL_NODE_DIR";
const ENV_ID: &str = "TIMEWHEEL_NODE_ID";
/// How long the report's handler runs, in ms.
const ENV_REPORT_MS: &str = "TIMEWHEEL_NODE_REPORT_MS";
/// The report's payload in the schedules this node's deploy applies.
const ENV_REPORT_PAYLOAD: &str = "TIMEWHEEL_NODE_REPORT_PAYLOAD";
/// The nodes' lease: the killed run comes back within about this long.
const LEASE: Duration = Duration::from_secs(2);
const NODE_LIFETIME: Duration = Duration::from_secs(60);

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// The schedules kept in code, applied at every start; the report's payload is the deploy's.
async fn apply_schedules(timers: &tokio_timewheel::durable::DurableScheduler, report_payload: &str) {
    let report = Recurrence::cron("*/2 * * * * *").unwrap().in_tz("Europe/Berlin").unwrap();
    timers.upsert_recurring(REPORT, report, report_payload).await.expect("node: upsert the report");
    timers.upsert_recurring(SYNC, Recurrence::every(Duration::from_millis(3000)), "sync").await.expect("node: upsert");
}

/// The body of a node process: does nothing unless started by the test below.
#[test]
fn node_process() {
    let settings = (node::setting(ENV_URL), node::setting(ENV_ID), node::setting(ENV_DIR));
    let (Some(url), Some(id), Some(dir)) = settings else { return };
    let dir = std::path::PathBuf::from(dir);
    let report_ms = node::setting(ENV_REPORT_MS).and_then(|ms| ms.parse().ok()).unwrap_or(0);
    let report_payload = node::setting(ENV_REPORT_PAYLOAD).unwrap_or_default();
    node::runtime().block_on(async move {
        let timers = builder(&url, NAME).lease(LEASE).connect().await.expect("node: connect");
        apply_schedules(&timers, &report_payload).await;
        let log = dir.clone();
        let worker = timers.run(move |task: Task| {
            let recorded = node::record_delivery_in(&log, &id, &task);
            async move {
                recorded.map_err(|e| e.to_string())?;
                if task.key() == REPORT {
                    tokio::time::sleep(Duration::from_millis(report_ms)).await;
                }
                Ok::<(), String>(())
            }
        });
        node::until_stop_file(&dir, Duration::from_millis(100), NODE_LIFETIME).await;
        worker.shutdown().await;
    });
}

fn handled(files: &NodeFiles) -> Vec<Delivery> {
    files.deliveries()
}

/// Polls the delivery log until `found` finds something in it, for up to `timeout`.
fn wait_for<T>(files: &NodeFiles, timeout: Duration, found: impl Fn(&[Delivery]) -> Option<T>) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Some(t) = found(&handled(files)) {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn spawn(url: &str, files: &NodeFiles, id: usize, report_ms: u64, report_payload: &str) -> NodeProcess {
    NodeProcess::spawn([
        (ENV_URL, url.to_owned()),
        (ENV_DIR, files.dir().display().to_string()),
        (ENV_ID, id.to_string()),
        (ENV_REPORT_MS, report_ms.to_string()),
        (ENV_REPORT_PAYLOAD, report_payload.to_owned()),
    ])
}

/// The deploy pattern after a SIGKILL, the same schedules applied again: the run in flight is
/// delivered again, once, as attempt 2, and the series goes on (the upsert kept it).
#[test]
fn a_run_killed_with_its_node_is_delivered_again_after_the_restarts_upsert() {
    kill_mid_run_then_deploy("fast", "fast");
}

/// The same, with a deploy that changed the report (its payload): the killed run is still
/// delivered again first, as attempt 2 with what it carried, and only then does the new series
/// (queued behind it by the upsert) take over.
#[test]
fn a_changed_series_takes_over_only_after_the_killed_run() {
    let log = kill_mid_run_then_deploy("v1", "v2");
    let again = log.iter().position(|h| h.key == REPORT && h.attempt == 2).expect("delivered again");
    assert_eq!(log[again].payload, "v1", "the killed run carries its own payload: {log:#?}");
    let reports: Vec<&Delivery> = log.iter().filter(|h| h.key == REPORT).collect();
    let first_new = log.iter().position(|h| h.key == REPORT && h.payload == "v2").expect("the new series ran");
    assert!(first_new > again, "the new series ran before the killed run came back: {log:#?}");
    assert!(
        log[first_new..].iter().filter(|h| h.key == REPORT).all(|h| h.payload == "v2"),
        "the old series ran after the new one took over: {reports:#?}"
    );
}

/// Node 1 (its deploy's report payload `before`) is killed 0.5 s into a run of the report; node
/// 2 (payload `after`) starts at once and upserts while the killed run's lease lives. Checks what
/// both deploys share and returns the delivery log.
fn kill_mid_run_then_deploy(before: &str, after: &str) -> Vec<Delivery> {
    let Some(store) = TestStore::start() else { return Vec::new() };
    let url = store.url();
    let files = NodeFiles::new();

    // Node 1's report handler runs for 10 s: it is killed in the middle of a run.
    let mut first = spawn(&url, &files, 1, 10_000, before);
    let killed =
        wait_for(&files, Duration::from_secs(20), |log| log.iter().find(|h| h.key == REPORT && h.node == 1).cloned())
            .expect("node 1 never started a run of the report");
    std::thread::sleep(Duration::from_millis(500));
    let sync_before: Vec<u128> = handled(&files).iter().filter(|h| h.key == SYNC).map(|h| h.due_ms).collect();
    first.kill();
    let killed_at = Instant::now();

    // Started again at once: its upsert lands while the killed run's lease still lives.
    let mut second = spawn(&url, &files, 2, 50, after);
    let again = wait_for(&files, LEASE * 5, |log| {
        log.iter().find(|h| h.key == REPORT && h.due_ms == killed.due_ms && h.node == 2).cloned()
    })
    .expect("the killed run was never delivered again");
    let back_after = killed_at.elapsed();
    // Two more runs of the report after it, and two of the sync after the restart.
    let later = wait_for(&files, Duration::from_secs(20), |log| {
        let reports = log.iter().filter(|h| h.key == REPORT && h.due_ms > killed.due_ms).count();
        let syncs = log.iter().filter(|h| h.key == SYNC && h.node == 2).count();
        (reports >= 2 && syncs >= 2).then_some(())
    });
    files.stop();
    let stopped = second.join(Duration::from_secs(10)).is_some();
    let log = handled(&files);
    assert!(later.is_some(), "the series did not go on after the restart: {log:#?}");
    assert!(stopped, "node 2 did not stop when told");

    // Delivered again as attempt 2, within about a lease of the kill (the lease, a tick, a
    // claim; the lease had been renewed at most a renewal round before the kill).
    assert_eq!((killed.attempt, again.attempt), (1, 2), "{log:#?}");
    assert!(back_after <= LEASE + Duration::from_millis(1500), "delivered again {back_after:?} after the kill");
    eprintln!("the killed run was delivered again {back_after:?} after the kill (lease {LEASE:?})");
    let of_killed: Vec<&Delivery> = log.iter().filter(|h| h.key == REPORT && h.due_ms == killed.due_ms).collect();
    assert_eq!(of_killed.len(), 2, "the killed run: once on node 1, once again on node 2: {of_killed:#?}");
    // No run of either series twice at one attempt, and none early.
    let mut seen = std::collections::HashSet::new();
    for h in &log {
        assert!(seen.insert((h.key.clone(), h.due_ms, h.attempt)), "delivered twice: {h:?} in {log:#?}");
        assert!(h.at_ms + 1 >= h.due_ms, "early: {h:?}");
    }
    // The sync kept its phase: every run of it, before and after the restart, on one grid.
    let syncs: Vec<u128> = log.iter().filter(|h| h.key == SYNC).map(|h| h.due_ms).collect();
    assert!(!sync_before.is_empty() || syncs.len() >= 2, "{log:#?}");
    let phase = syncs[0] % SYNC_PERIOD_MS;
    assert!(syncs.iter().all(|d| d % SYNC_PERIOD_MS == phase), "the sync's phase moved at the restart: {syncs:?}");

    // The killed run's one outcome is in the history: acknowledged, as attempt 2.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let timers = builder(&url, NAME).connect().await.expect("connect");
        let history = timers.list(TaskState::Finished, None, 1000).await.expect("history");
        let runs: Vec<_> =
            history.tasks().iter().filter(|t| t.key() == REPORT && millis(t.due()) == killed.due_ms).collect();
        assert_eq!(runs.len(), 1, "the killed run's outcome, once: {runs:#?}");
        assert_eq!(runs[0].finished().map(|f| f.outcome()), Some(Outcome::Acknowledged));
        assert_eq!(runs[0].attempt(), 2);
        assert_eq!(timers.stats().await.unwrap().dead, 0, "nothing went to the dead letters");
    });
    log
}

/// The same `every(20 s)` series upserted again 12 s later keeps its first due time (a restart
/// does not push it back); another payload replaces it, due 20 s after that call.
#[tokio::test]
async fn the_same_series_upserted_again_keeps_its_due_time() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "phase").connect().await.expect("connect");
    let every = || Recurrence::every(Duration::from_secs(20));
    assert!(timers.upsert_recurring("sync:crm", every(), "crm").await.unwrap(), "made");
    let first = timers.deadline("sync:crm").await.unwrap().expect("due");
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(!timers.upsert_recurring("sync:crm", every(), "crm").await.unwrap(), "it was pending");
    assert_eq!(timers.deadline("sync:crm").await.unwrap(), Some(first), "the first due time is kept");
    let changed_at = SystemTime::now();
    assert!(!timers.upsert_recurring("sync:crm", every(), "crm-v2").await.unwrap());
    let replaced = timers.deadline("sync:crm").await.unwrap().expect("due");
    assert!(
        replaced > first && replaced + Duration::from_secs(1) >= changed_at + Duration::from_secs(20),
        "{replaced:?}"
    );
    let info = timers.get("sync:crm").await.unwrap().expect("pending");
    assert_eq!(info.payload(), b"crm-v2");
}
