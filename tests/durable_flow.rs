//! Flow control across real OS processes on a real store (Redis, or a SQLite file with
//! `TIMEWHEEL_TEST_STORE=sqlite`, see support/store.rs): debounce calls from two processes,
//! limits obeyed by three node processes together, and a snooze from a handler.
//!
//! The processes are this test binary itself, run again with `TIMEWHEEL_FLOW_ROLE` set (see
//! tests/support/node.rs). Nodes log each delivery as its handler starts (the support's
//! `handled.log`, with the store's due and claim times) and as it ends (`ended.log`, the
//! handler's own clock); callers log each call. Every wait is for a condition, with a generous
//! bound, so that a loaded machine only makes it slower; the bounds on timing allow for a
//! loaded machine too, and say which.
//!
//! Run with `cargo test --features redis,sqlite --test durable_flow` (on Redis), and again with
//! `TIMEWHEEL_TEST_STORE=sqlite`.

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::node::{self, Delivery, NodeFiles, NodeProcess};
use support::store::TestStore;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Limit, Outcome, Task, TaskState};

const NAME: &str = "flow";
const TICK: Duration = Duration::from_millis(50);
const ENV_ROLE: &str = "TIMEWHEEL_FLOW_ROLE";
const ENV_URL: &str = "TIMEWHEEL_FLOW_URL";
const ENV_DIR: &str = "TIMEWHEEL_FLOW_DIR";
const ENV_ID: &str = "TIMEWHEEL_FLOW_ID";
/// How long a handler works, in ms.
const ENV_WORK: &str = "TIMEWHEEL_FLOW_WORK_MS";
/// A debouncer's first call (ms since the Unix epoch), and its calls' spacing.
const ENV_START: &str = "TIMEWHEEL_FLOW_START_MS";
const LIFETIME: Duration = Duration::from_secs(300);
const PATIENCE: Duration = Duration::from_secs(120);

/// Debounce: 30 calls, one every 200 ms, from two processes in turn.
const CALLS: u64 = 30;
const SPACING_MS: u64 = 200;
const QUIET: Duration = Duration::from_millis(500);
const MAX_WAIT: Duration = Duration::from_millis(1500);

fn settings(url: &str) -> DurableBuilder {
    DurableScheduler::builder(url, NAME).tick(TICK).slots(64).lease(Duration::from_secs(5))
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

fn append(dir: &Path, name: &str, line: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(name)).expect("open a log");
    file.write_all(format!("{line}\n").as_bytes()).expect("write a log line");
}

fn lines(dir: &Path, name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole.lines().map(|l| l.split(' ').map(str::to_owned).collect()).collect()
}

/// The body of a child process: does nothing unless started by a test below.
#[test]
fn node_process() {
    let (Some(role), Some(url), Some(dir)) = (node::setting(ENV_ROLE), node::setting(ENV_URL), node::setting(ENV_DIR))
    else {
        return;
    };
    let dir = PathBuf::from(dir);
    let id = node::setting(ENV_ID).expect("an id");
    match role.as_str() {
        "node" => run_node(&url, &dir, &id),
        "debouncer" => run_debouncer(&url, &dir, &id),
        other => panic!("no role {other:?}"),
    }
}

/// A node: a worker whose handler logs its start and end and works `ENV_WORK` ms; a task under
/// `snooze:` snoozes for a second on its first run (a marker file says it did).
fn run_node(url: &str, dir: &Path, id: &str) {
    let work = Duration::from_millis(node::setting(ENV_WORK).map_or(20, |w| w.parse().expect("work ms")));
    node::runtime().block_on(async {
        let timers = settings(url).concurrency(8).connect().await.expect("node: connect");
        let (log, me) = (dir.to_path_buf(), id.to_owned());
        let worker = timers.run(move |task: Task| {
            let (log, me) = (log.clone(), me.clone());
            async move {
                node::record_delivery_in(&log, &me, &task).map_err(|e| e.to_string())?;
                let started = now_ms();
                tokio::time::sleep(work).await;
                if task.key().starts_with("snooze:") {
                    let marker = log.join(format!("snoozed-{}", task.key()));
                    if std::fs::OpenOptions::new().write(true).create_new(true).open(&marker).is_ok() {
                        task.snooze(Duration::from_secs(1));
                    }
                }
                append(&log, "ended.log", &format!("{} {me} {started} {}", task.key(), now_ms()));
                Ok::<(), String>(())
            }
        });
        worker.ready().await;
        append(dir, &format!("ready-{id}"), "ready");
        node::until_stop_file(dir, Duration::from_millis(50), LIFETIME).await;
        worker.shutdown().await;
    });
}

/// A debouncer: calls `debounce` every other spacing from `ENV_START` (the process `id` 0 first,
/// 1 a spacing later), payload the call's number, and logs `seq started_ms ended_ms opened`.
fn run_debouncer(url: &str, dir: &Path, id: &str) {
    let start: u128 = node::setting(ENV_START).expect("a start").parse().expect("start ms");
    let me: u64 = id.parse().expect("a number");
    node::runtime().block_on(async {
        let timers = settings(url).only_existing().connect().await.expect("debouncer: connect");
        for seq in (me..CALLS).step_by(2) {
            let at = start + u128::from(seq * SPACING_MS);
            let wait = at.saturating_sub(now_ms());
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
            let started = now_ms();
            let opened = timers.debounce("digest", QUIET, MAX_WAIT, seq.to_string()).await.expect("debounce");
            append(dir, "calls.log", &format!("{seq} {started} {} {opened}", now_ms()));
        }
    });
}

fn spawn(role: &str, url: &str, dir: &Path, id: usize, extra: &[(&str, String)]) -> NodeProcess {
    let mut env = vec![
        (ENV_ROLE.to_owned(), role.to_owned()),
        (ENV_URL.to_owned(), url.to_owned()),
        (ENV_DIR.to_owned(), dir.display().to_string()),
        (ENV_ID.to_owned(), id.to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    NodeProcess::spawn(env)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "timed out after {PATIENCE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Three node processes, each ready.
fn start_nodes(url: &str, files: &NodeFiles, work_ms: u64) -> Vec<NodeProcess> {
    let nodes: Vec<NodeProcess> =
        (0..3).map(|i| spawn("node", url, files.dir(), i, &[(ENV_WORK, work_ms.to_string())])).collect();
    wait_for("three ready nodes", || (0..3).all(|i| files.dir().join(format!("ready-{i}")).exists()));
    nodes
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// 30 debounce calls 200 ms apart from two processes, with a 500 ms quiet period and a 1.5 s
/// cap: a run at each cap while the calls go on (about every 1.6 s), each with the last call
/// before it, and one after the last call; none twice, none early, none past its burst's cap.
#[test]
fn debounce_calls_from_two_processes_run_once_a_burst_with_the_last_payload() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let timers = runtime().block_on(settings(&url).connect()).unwrap();
    let _nodes = start_nodes(&url, &files, 20);
    let start = now_ms() + 1000;
    let mut callers: Vec<NodeProcess> =
        (0..2).map(|i| spawn("debouncer", &url, files.dir(), i, &[(ENV_START, start.to_string())])).collect();
    for caller in &mut callers {
        assert!(caller.join(PATIENCE).is_some_and(|s| s.success()), "a debouncer failed");
    }
    let calls = lines(files.dir(), "calls.log");
    assert_eq!(calls.len() as u64, CALLS);
    // seq -> (started, ended, opened)
    let calls: HashMap<u64, (u128, u128, bool)> = calls
        .iter()
        .map(|f| (f[0].parse().unwrap(), (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3] == "true")))
        .collect();
    let last_call_ended = calls.values().map(|c| c.1).max().unwrap();
    wait_for("the last burst's run", || files.deliveries().iter().any(|d| d.payload == (CALLS - 1).to_string()));
    std::thread::sleep(TICK * 10);
    let runs: Vec<Delivery> = files.deliveries();
    let payloads: Vec<u64> = runs.iter().map(|d| d.payload.parse().unwrap()).collect();
    // About one run a cap (6 s of calls, a cap of 1.5 s): 4, or 3 to 5 on a loaded machine,
    // whose late claims shift which calls a burst takes.
    eprintln!("debounce: payloads {payloads:?}");
    assert!((3..=5).contains(&runs.len()), "{} runs: {runs:#?}", runs.len());
    assert!(payloads.windows(2).all(|p| p[0] < p[1]), "a payload twice, or out of order: {payloads:?}");
    assert_eq!(*payloads.last().unwrap(), CALLS - 1, "the last run has the last call's payload");
    assert!(runs.iter().all(|d| d.attempt == 1), "{runs:#?}");
    let opened = calls.values().filter(|c| c.2).count();
    assert_eq!(opened, runs.len(), "one burst opened per run: {calls:?}");
    let mut previous_claim = 0;
    for run in &runs {
        let payload: u64 = run.payload.parse().unwrap();
        // The last payload of its burst: every call that ended before the run's claim is this
        // one or older, and this one started before the claim.
        let (p_started, _, _) = calls[&payload];
        assert!(p_started <= run.claimed_ms + 5, "{run:?} carries a call made after it: {calls:?}");
        for (seq, (_, ended, _)) in &calls {
            if *ended + 5 < run.claimed_ms {
                assert!(*seq <= payload || *ended + 5 < previous_claim, "{run:?} missed call {seq}");
            }
        }
        // Never past the cap: due within max_wait of the first call that came after the last run.
        let first = calls.values().filter(|c| c.0 >= previous_claim).map(|c| c.1).min().unwrap();
        assert!(run.due_ms <= first + MAX_WAIT.as_millis() + 5, "{run:?} due past its cap ({first})");
        assert!(run.claimed_ms + 1 >= run.due_ms, "{run:?} claimed early");
        previous_claim = run.claimed_ms;
    }
    let last = runs.last().unwrap();
    assert!(last.due_ms <= last_call_ended + QUIET.as_millis() + 5, "{last:?} later than quiet after the last call");
    files.stop();
    drop(timers);
}

/// 200 tasks due at once under `Limit::rate(20, 1 s)`, run by three node processes: no second of
/// the handlers' clocks holds more than 20 starts, all 200 start, once each, evenly over about
/// 10 s (51 ms apart).
#[test]
fn a_rate_limit_holds_across_three_node_processes() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let rt = runtime();
    let timers = rt.block_on(settings(&url).connect()).unwrap();
    rt.block_on(timers.set_limit("api:", Limit::rate(20, Duration::from_secs(1)))).unwrap();
    let _nodes = start_nodes(&url, &files, 20);
    let due = SystemTime::now() + Duration::from_secs(1);
    let keys: Vec<String> = (0..200).map(|i| format!("api:{i:03}")).collect();
    rt.block_on(async {
        for key in &keys {
            timers.schedule_at(key, due, "").await.unwrap();
        }
    });
    wait_for("200 starts", || files.deliveries().len() >= 200);
    std::thread::sleep(Duration::from_millis(500));
    let runs = files.deliveries();
    assert_eq!(runs.len(), 200, "a task started twice");
    let mut starts: Vec<u128> = runs.iter().map(|d| d.at_ms).collect();
    starts.sort_unstable();
    // The store spaces the starts 51 ms apart; a handler starts a few ms after its start time,
    // by its node's wake-up: allow 20 ms of that (the margin the spacing keeps).
    for i in 20..starts.len() {
        assert!(starts[i] - starts[i - 20] >= 980, "21 starts within a second: {:?}", &starts[i - 20..=i]);
    }
    let mut per_second: HashMap<u128, usize> = HashMap::new();
    for s in &starts {
        *per_second.entry(s / 1000).or_default() += 1;
    }
    assert!(per_second.values().all(|n| *n <= 20), "a second of the handlers' clock held more than 20 starts");
    let due_ms = due.duration_since(UNIX_EPOCH).unwrap().as_millis();
    let span = starts[199] - due_ms;
    eprintln!("rate limit: first start {} ms after due, last {span} ms", starts[0] - due_ms);
    assert!((9500..=11_000).contains(&span), "the last start came {span} ms after the due time");
    files.stop();
}

/// `Limit::running(1)` on three node processes: the handlers' own clocks never see two reports
/// overlap; a key under no limit runs beside them.
#[test]
fn a_running_limit_of_one_never_overlaps_across_three_node_processes() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let rt = runtime();
    let timers = rt.block_on(settings(&url).connect()).unwrap();
    rt.block_on(timers.set_limit("report:", Limit::running(1))).unwrap();
    let _nodes = start_nodes(&url, &files, 300);
    rt.block_on(async {
        for i in 0..8 {
            timers.schedule(format!("report:{i}"), Duration::from_millis(500), "").await.unwrap();
        }
        timers.schedule("free", Duration::from_millis(600), "").await.unwrap();
    });
    wait_for("8 reports and the free key ended", || lines(files.dir(), "ended.log").len() >= 9);
    let mut reports: Vec<(u128, u128)> = lines(files.dir(), "ended.log")
        .iter()
        .filter(|f| f[0].starts_with("report:"))
        .map(|f| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        .collect();
    reports.sort_unstable();
    assert_eq!(reports.len(), 8);
    for pair in reports.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "two reports overlapped: {pair:?}");
    }
    let free = files.deliveries().into_iter().find(|d| d.key == "free").unwrap();
    assert!(free.claimed_ms < reports[3].0, "the free key waited behind the reports: {free:?}");
    files.stop();
}

/// A snoozed task runs again after its delay, on any node, with the same attempt number, and the
/// history has the snoozed run.
#[test]
fn a_snoozed_task_comes_back_after_its_delay_with_the_same_attempt() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let files = NodeFiles::new();
    let rt = runtime();
    let timers = rt.block_on(settings(&url).connect()).unwrap();
    let _nodes = start_nodes(&url, &files, 20);
    rt.block_on(timers.schedule("snooze:order-1", Duration::from_millis(100), "o1")).unwrap();
    wait_for("two runs", || files.deliveries().len() >= 2);
    let runs = files.deliveries();
    let ended = lines(files.dir(), "ended.log");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(runs.iter().all(|d| d.attempt == 1), "the snooze counted as an attempt: {runs:#?}");
    let first_end: u128 = ended[0][3].parse().unwrap();
    assert!(runs[1].due_ms >= first_end + 1000 - 5, "due again less than the snooze after: {runs:#?}");
    wait_for("the acknowledgement", || rt.block_on(timers.get("snooze:order-1")).unwrap().is_none());
    let finished = rt.block_on(timers.list(TaskState::Finished, None, 10)).unwrap();
    let outcomes: Vec<Outcome> = finished.tasks().iter().filter_map(|t| t.finished()).map(|f| f.outcome()).collect();
    assert_eq!(outcomes, [Outcome::Acknowledged, Outcome::Snoozed], "newest first");
    let stats = rt.block_on(timers.stats()).unwrap();
    assert_eq!((stats.acked, stats.retried, stats.dead_lettered), (1, 0, 0), "{stats:?}");
    files.stop();
}
