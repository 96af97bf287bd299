//! One SQLite file shared by real OS processes, as one host's processes share the embedded store:
//! three node processes run the wheel's tasks while the test schedules tasks all along; each node
//! in turn is killed with SIGKILL while its handlers run, and started again. A fourth process
//! reads the wheel (`stats`, `list` of several states) and pauses and resumes it, through the
//! library's public API, all the while. (The command line does the same from its own process in
//! cli/tests/cli.rs: its binary is only built for the cli package's tests.)
//!
//! What it shows: nothing whose `schedule` returned `Ok` is lost (each runs, and is acknowledged
//! once); nothing runs early; no task is handed out twice while a lease on it is live (a second
//! delivery comes a lease or more after the first's claim, as a higher attempt); every delivery
//! that a kill cut off in its handler is delivered again, to another process; and no task is
//! claimed while the wheel is paused.
//!
//! The processes are this test binary itself, run again with `TIMEWHEEL_PROC_ROLE` set (see
//! tests/support/node.rs). Nodes log each delivery as its handler starts (`handled.log`, the
//! support's [`NodeFiles`]) and as it ends (`ended.log`); the operator its reads and pauses
//! (`operator.log`). Every wait is for a condition, with a generous bound, so that a loaded
//! two-core machine only makes it slower.
//!
//! Run with `cargo test --features sqlite --test durable_sqlite_processes`.
#![cfg(feature = "sqlite")]

mod support;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::node::{self, Delivery, NodeFiles, NodeProcess};
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task, TaskState};

const NAME: &str = "procs";
/// The task lease: a killed node's deliveries come back after it.
const LEASE: Duration = Duration::from_secs(2);
const NODES: usize = 3;
/// The role of a process run again from this binary: `node` or `operator`.
const ENV_ROLE: &str = "TIMEWHEEL_PROC_ROLE";
const ENV_URL: &str = "TIMEWHEEL_PROC_URL";
/// The directory of the logs (a [`NodeFiles`]'s).
const ENV_DIR: &str = "TIMEWHEEL_PROC_DIR";
/// A node's id: `number * 100 + incarnation`, which the delivery log records as its node.
const ENV_ID: &str = "TIMEWHEEL_PROC_ID";
/// How long a child lives at most, should the test be gone.
const LIFETIME: Duration = Duration::from_secs(300);
/// The bound of every wait for a condition.
const PATIENCE: Duration = Duration::from_secs(120);

fn settings(url: &str) -> DurableBuilder {
    DurableScheduler::builder(url, NAME)
        .tick(Duration::from_millis(50))
        .slots(64)
        .lease(LEASE)
        .max_attempts(20)
        .backoff(Duration::from_millis(100))
        .connect_timeout(Duration::from_secs(30))
}

fn millis(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// Appends `line` to the file `name` in `dir`, in one `write` to a file opened for appending
/// (the lines of several processes never mix, and a killed process leaves no half line).
fn append(dir: &Path, name: &str, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(name))?;
    file.write_all(format!("{line}\n").as_bytes())
}

/// The whole lines of the file `name` in `dir` (none if it is missing).
fn lines(dir: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole.lines().map(str::to_owned).collect()
}

/// The body of a child process: does nothing unless started by the test below.
#[test]
fn node_process() {
    let (Some(role), Some(url), Some(dir)) = (node::setting(ENV_ROLE), node::setting(ENV_URL), node::setting(ENV_DIR))
    else {
        return;
    };
    let dir = PathBuf::from(dir);
    match role.as_str() {
        "node" => run_node(&url, &dir, &node::setting(ENV_ID).expect("node: an id")),
        "operator" => run_operator(&url, &dir),
        other => panic!("no role {other:?}"),
    }
}

/// A node: a worker whose handler logs its start, works 20 to 200 ms, logs its end and
/// acknowledges; it says it runs (a `ready-ID` file), and stops when told.
fn run_node(url: &str, dir: &Path, id: &str) {
    node::runtime().block_on(async {
        let timers = settings(url).connect().await.expect("node: connect");
        let (log, me) = (dir.to_path_buf(), id.to_owned());
        let worker = timers.run(move |task: Task| {
            let started = node::record_delivery_in(&log, &me, &task);
            let (log, me) = (log.clone(), me.clone());
            async move {
                started.map_err(|e| e.to_string())?;
                let work = 20 + task.key().bytes().map(u64::from).sum::<u64>() * 7 % 181;
                tokio::time::sleep(Duration::from_millis(work)).await;
                append(&log, "ended.log", &format!("{} {me} {}", task.key(), task.attempt())).map_err(|e| e.to_string())
            }
        });
        worker.ready().await;
        append(dir, &format!("ready-{id}"), "ready").expect("node: say it runs");
        node::until_stop_file(dir, Duration::from_millis(50), LIFETIME).await;
        worker.shutdown().await;
    });
}

/// The fourth process: reads the wheel over and over (stats, and a page of the running, waiting
/// and finished tasks), and every second or so pauses it for 400 ms, logging each pause's window
/// (`pause PAUSED_MS RESUMING_MS`: after `pause` returned, before `resume` is called) and each
/// round of reads (`read`). It panics (its exit says so) on an error or a count that does not
/// add up.
fn run_operator(url: &str, dir: &Path) {
    node::runtime().block_on(async {
        // The wheel as the nodes recorded it, as the command line opens it.
        let timers = settings(url).only_existing().connect().await.expect("operator: connect");
        let started = Instant::now();
        let mut last_pause = Instant::now();
        while !dir.join("stop").exists() && started.elapsed() < LIFETIME {
            let stats = timers.stats().await.expect("operator: stats");
            assert_eq!(stats.pending, stats.waiting + stats.ready + stats.in_flight, "{stats:?}");
            assert!(stats.scheduled >= stats.acked + stats.pending as u64, "{stats:?}");
            let running = timers.list(TaskState::Running, None, 100).await.expect("operator: list running");
            for task in running.tasks() {
                assert_eq!(task.state(), TaskState::Running, "{task:?}");
                assert!(task.worker().is_some() && task.claimed_at().is_some(), "{task:?}");
            }
            let waiting = timers.list(TaskState::Waiting, None, 100).await.expect("operator: list waiting");
            assert!(waiting.tasks().iter().all(|t| t.state() == TaskState::Waiting));
            let finished = timers.list(TaskState::Finished, None, 20).await.expect("operator: list finished");
            assert!(finished.tasks().iter().all(|t| t.finished().is_some()));
            append(
                dir,
                "operator.log",
                &format!(
                    "read {} {} {} {}",
                    stats.pending,
                    running.tasks().len(),
                    waiting.tasks().len(),
                    finished.tasks().len()
                ),
            )
            .expect("operator: log");
            if last_pause.elapsed() >= Duration::from_secs(1) {
                timers.pause().await.expect("operator: pause");
                let paused = millis(SystemTime::now());
                assert!(timers.is_paused().await.expect("operator: is_paused"));
                assert!(timers.stats().await.expect("operator: stats").paused);
                tokio::time::sleep(Duration::from_millis(400)).await;
                let resuming = millis(SystemTime::now());
                timers.resume().await.expect("operator: resume");
                assert!(!timers.is_paused().await.expect("operator: is_paused"));
                append(dir, "operator.log", &format!("pause {paused} {resuming}")).expect("operator: log");
                last_pause = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

fn spawn(role: &str, url: &str, dir: &Path, id: usize) -> NodeProcess {
    NodeProcess::spawn([
        (ENV_ROLE, role.to_owned()),
        (ENV_URL, url.to_owned()),
        (ENV_DIR, dir.display().to_string()),
        (ENV_ID, id.to_string()),
    ])
}

/// Polls `done` every 10 ms until it holds; panics with `what` after [`PATIENCE`].
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "timed out after {PATIENCE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The deliveries that node `id` started and did not end: `(key, attempt, claimed_ms)`.
fn unfinished(files: &NodeFiles, id: usize) -> Vec<(String, u32, u128)> {
    let ended: HashSet<(String, u32)> = lines(files.dir(), "ended.log")
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(1) == Some(&id.to_string().as_str())).then(|| (f[0].to_owned(), f[2].parse().unwrap()))
        })
        .collect();
    files
        .deliveries()
        .into_iter()
        .filter(|d| d.node == id && !ended.contains(&(d.key.clone(), d.attempt)))
        .map(|d| (d.key, d.attempt, d.claimed_ms))
        .collect()
}

/// The tasks scheduled: the key and the earliest time it may run, of each `schedule` that
/// returned `Ok`; and the errors of the others.
#[derive(Default)]
struct Scheduled {
    accepted: HashMap<String, u128>,
    errors: Vec<String>,
}

/// Schedules 20 tasks every 100 ms, each due 100 to 1,500 ms later and by its own call, until
/// `stop`.
async fn load(timers: DurableScheduler, stop: Arc<AtomicBool>, scheduled: Arc<Mutex<Scheduled>>) {
    let started = tokio::time::Instant::now();
    let mut n = 0u64;
    for round in 1u32.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (timers, scheduled) = (timers.clone(), scheduled.clone());
            let key = format!("task-{n:06}");
            let delay = Duration::from_millis(100 + n * 131 % 1400);
            n += 1;
            calls.spawn(async move {
                let not_before = millis(SystemTime::now() + delay);
                let result = timers.schedule(&key, delay, key.clone()).await;
                let mut scheduled = scheduled.lock().unwrap();
                match result {
                    Ok(()) => drop(scheduled.accepted.insert(key, not_before)),
                    Err(e) => scheduled.errors.push(format!("{key}: {e}")),
                }
            });
        }
        calls.join_all().await;
        tokio::time::sleep_until(started + Duration::from_millis(100) * round).await;
    }
}

#[test]
fn three_node_processes_killed_in_turn_under_load_lose_nothing() {
    let began = Instant::now();
    let store = tempfile::Builder::new().prefix("timewheel-procs-").tempdir().unwrap();
    let url = format!("sqlite:{}", store.path().join("data/orders.db").display());
    let files = NodeFiles::new();
    let dir = files.dir().to_path_buf();
    let runtime = node::runtime();
    // The test's own handle: it creates the wheel, schedules, and reads the outcome.
    let timers = runtime.block_on(settings(&url).connect()).expect("connect");
    let ready = |id: usize| dir.join(format!("ready-{id}")).exists();

    let mut nodes: Vec<(NodeProcess, usize)> =
        (0..NODES).map(|n| (spawn("node", &url, &dir, n * 100), n * 100)).collect();
    for n in 0..NODES {
        wait_for(&format!("node {n} to run"), || ready(n * 100));
    }
    let mut operator = spawn("operator", &url, &dir, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let scheduled = Arc::new(Mutex::new(Scheduled::default()));
    let loading = runtime.spawn(load(timers.clone(), stop.clone(), scheduled.clone()));
    eprintln!("{:>6.1?}  three nodes and the operator run; the load started", began.elapsed());

    // Each node in turn: killed while its handlers run, started again at once.
    struct Kill {
        id: usize,
        at_ms: u128,
        /// The deliveries it started and did not end: (key, attempt, claimed_ms).
        cut_off: Vec<(String, u32, u128)>,
    }
    let mut kills = Vec::new();
    for (process, slot_id) in &mut nodes {
        let id = *slot_id;
        wait_for(&format!("node {id} to run handlers"), || {
            let started = files.deliveries().iter().filter(|d| d.node == id).count();
            started >= 20 && !unfinished(&files, id).is_empty()
        });
        process.kill();
        let at_ms = millis(SystemTime::now());
        let cut_off = unfinished(&files, id);
        eprintln!(
            "{:>6.1?}  SIGKILL to node {id} with {} handlers running; started again as node {}",
            began.elapsed(),
            cut_off.len(),
            id + 1
        );
        (*process, *slot_id) = (spawn("node", &url, &dir, id + 1), id + 1);
        wait_for(&format!("node {} to run", id + 1), || ready(id + 1));
        // The next kill once this one's cut-off deliveries are back (after their lease) and the
        // new process runs tasks.
        wait_for(&format!("node {id}'s cut-off deliveries to come back"), || {
            let log = files.deliveries();
            cut_off.iter().all(|(key, attempt, _)| log.iter().any(|d| d.key == *key && d.attempt > *attempt))
        });
        wait_for(&format!("node {} to run 20 tasks", id + 1), || {
            files.deliveries().iter().filter(|d| d.node == id + 1).count() >= 20
        });
        kills.push(Kill { id, at_ms, cut_off });
    }
    wait_for("the operator to pause the wheel twice", || {
        lines(&dir, "operator.log").iter().filter(|l| l.starts_with("pause ")).count() >= 2
    });
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(loading).unwrap();
    let Scheduled { accepted, errors } = std::mem::take(&mut *scheduled.lock().unwrap());
    eprintln!(
        "{:>6.1?}  the load stopped: {} tasks scheduled, {} schedule errors {:?}",
        began.elapsed(),
        accepted.len(),
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    wait_for("every task acknowledged", || {
        let stats = runtime.block_on(timers.stats()).unwrap();
        stats.pending == 0 && stats.acked as usize >= accepted.len()
    });
    eprintln!("{:>6.1?}  every task acknowledged", began.elapsed());
    files.stop();
    for (node, id) in &mut nodes {
        let status = node.join(Duration::from_secs(60)).unwrap_or_else(|| panic!("node {id} did not stop"));
        assert!(status.success(), "node {id} failed: {status}");
    }
    let status = operator.join(Duration::from_secs(60)).expect("the operator did not stop");
    assert!(status.success(), "the operator failed ({status}): its panic is above");

    // Nothing accepted lost, nothing unknown, nothing early.
    let log = files.deliveries();
    let mut by_key: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &log {
        by_key.entry(&d.key).or_default().push(d);
    }
    let lost: Vec<&String> = accepted.keys().filter(|k| !by_key.contains_key(k.as_str())).take(5).collect();
    assert!(lost.is_empty(), "accepted and never run: {lost:?} (of {})", accepted.len());
    let errors_keys: HashSet<&str> = errors.iter().filter_map(|e| e.split(':').next()).collect();
    for d in &log {
        assert!(accepted.contains_key(&d.key) || errors_keys.contains(d.key.as_str()), "never scheduled: {d:?}");
        assert!(d.at_ms + 1 >= d.due_ms, "started before its due time: {d:?}");
        if let Some(&not_before) = accepted.get(&d.key) {
            assert!(d.due_ms + 1 >= not_before, "due before `now + delay` at its schedule: {d:?}");
        }
    }
    // No task handed out twice under a live lease: each later delivery a higher attempt, whose
    // handler started (on the host's clock, after its claim ran) a lease or more after the claim
    // before it (on the store's clock, the same host's: a lease runs out only when a script's
    // clock has passed its end). The claims' own times are not compared: the embedded store
    // stamps a call with the time it was made, so a claim that waited for the file's lock
    // carries a time before that of a script another process ran meanwhile (the one that found
    // the lease run out, say).
    let (mut again, mut closest) = (0, i128::MAX);
    for deliveries in by_key.values_mut() {
        deliveries.sort_by_key(|d| (d.attempt, d.claimed_ms));
        for pair in deliveries.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            assert!(next.attempt > first.attempt, "one attempt delivered twice: {first:?} then {next:?}");
            assert!(
                next.at_ms + 1 >= first.claimed_ms + LEASE.as_millis(),
                "delivered again {} ms after its claim, within its lease: {first:?} then {next:?}",
                next.at_ms.saturating_sub(first.claimed_ms)
            );
            again += 1;
            closest = closest.min(next.claimed_ms as i128 - first.claimed_ms as i128);
        }
    }
    // Each delivery a kill cut off came back, to another process, after its lease.
    let (mut cut_off, mut back_after) = (0, Vec::new());
    for kill in &kills {
        for (key, attempt, claimed) in &kill.cut_off {
            cut_off += 1;
            let back = by_key[key.as_str()].iter().find(|d| d.attempt > *attempt && d.node != kill.id);
            let back =
                back.unwrap_or_else(|| panic!("{key} (attempt {attempt}) was cut off in node {} for good", kill.id));
            assert!(back.at_ms + 1 >= claimed + LEASE.as_millis(), "back within its lease: {back:?}");
            back_after.push(back.claimed_ms.saturating_sub(kill.at_ms));
        }
    }
    assert!(cut_off > 0, "no kill found a handler running");
    back_after.sort_unstable();
    // Nothing claimed while the wheel was paused.
    let operator_log = lines(&dir, "operator.log");
    let pauses: Vec<(u128, u128)> = operator_log
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix("pause ")?.split(' ').collect();
            Some((f[0].parse().unwrap(), f[1].parse().unwrap()))
        })
        .collect();
    for &(paused, resuming) in &pauses {
        let claimed: Vec<&Delivery> =
            log.iter().filter(|d| d.claimed_ms > paused + 1 && d.claimed_ms < resuming).collect();
        assert!(
            claimed.is_empty(),
            "claimed while paused ({paused}..{resuming}): {:?}",
            &claimed[..claimed.len().min(3)]
        );
    }
    let reads = operator_log.iter().filter(|l| l.starts_with("read ")).count();
    // The wheel's own count: each accepted task acknowledged once, none dead.
    let stats = runtime.block_on(timers.stats()).unwrap();
    assert_eq!((stats.pending, stats.dead), (0, 0), "{stats:?}");
    assert!(
        stats.acked as usize >= accepted.len() && stats.acked as usize <= accepted.len() + errors.len(),
        "{stats:?}"
    );
    eprintln!(
        "{:>6.1?}  {} tasks accepted, {} deliveries, {again} of them again ({cut_off} cut off by the {} kills, all \
         back {:?}..{:?} ms after the kill, the lease \
         {LEASE:?}; claims of one task {closest} ms apart at the closest); the operator read {reads} times and paused {} times, nothing claimed while paused",
        began.elapsed(),
        accepted.len(),
        log.len(),
        kills.len(),
        back_after.first().unwrap_or(&0),
        back_after.last().unwrap_or(&0),
        pauses.len()
    );
}
