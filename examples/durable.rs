//! Order reviews that outlive a `kill -9` of the node running them.
//!
//! "Review the order 48 hours after delivery" cannot live in one process's memory: deploys and
//! crashes come sooner. Here the reviews live in a durable wheel in a SQLite file (the `sqlite`
//! feature: SQLite is compiled in, nothing to install), and three nodes share it, as three
//! processes of a service on one host would: this example runs itself again three times as child
//! processes, each a node whose worker hands the reviews to a handler. A few thousand reviews are
//! scheduled over a few seconds, due one to four seconds later; halfway through, the node that
//! leads the wheel (moves its cursor) is killed with SIGKILL while its handlers run, and started
//! again a second later. Another node takes the lead when the dead one's runs out, and every
//! review whose `schedule` returned `Ok` is still applied, once, and none before its time: what
//! the killed node held comes back to a node after its lease.
//!
//! Delivery is at least once: a review the killed node had started, whose acknowledgement never
//! left it, is delivered again. A handler applies a review by sending it to the parent (a line on
//! its stdout), which stands for the service's database and applies an order's review only if it
//! was not applied yet (an upsert on the order): that is what makes a second delivery harmless.
//! The example counts such redeliveries separately.
//!
//! Beside the reviews it shows a recurring task (a sweep every second, five times, upserted as a
//! node does at every start, so that a restart keeps the series rather than adding one), a typed
//! payload (an audit record as JSON, read back with `Task::json`), and a task read back with
//! `get` before it fires.
//!
//! ```text
//! cargo run --release --example durable                                # a SQLite file in a temp dir, removed at the end
//! cargo run --release --example durable -- sqlite:data/orders.db       # a file that stays (a wheel of its own in it)
//! cargo run --release --example durable -- redis://127.0.0.1:6379/     # the same on a Redis (a wheel of its own there)
//! ```
//!
//! It takes about ten seconds and prints its progress twice a second. While it runs,
//! `timewheel --url <the URL it prints> --wheel <its wheel> watch` (the workspace's command line,
//! `cargo install --path cli`) shows the wheel from yet another process.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Json, MissedRuns, Recurrence, Task};

/// A typed payload: what an audit of an order found.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Audit {
    order: usize,
    finding: String,
}

/// How many nodes (child processes) run the wheel's tasks.
const NODES: usize = 3;
/// How many order reviews to schedule.
const ORDERS: usize = 3_000;
/// Over how long they are scheduled.
const SCHEDULING: Duration = Duration::from_secs(4);
/// How long the killed node stays down.
const OUTAGE: Duration = Duration::from_secs(1);
/// The lease: a review handed out but not acknowledged comes back after this.
const LEASE: Duration = Duration::from_secs(3);
/// The environment of a node process: its number, the wheel's URL and name.
const ENV_NODE: &str = "TIMEWHEEL_EXAMPLE_NODE";
const ENV_URL: &str = "TIMEWHEEL_EXAMPLE_URL";
const ENV_WHEEL: &str = "TIMEWHEEL_EXAMPLE_WHEEL";

/// The settings every node and the parent share (a wheel's tick and slots must agree).
fn settings(url: &str, wheel: &str) -> DurableBuilder {
    DurableScheduler::builder(url, wheel)
        .tick(Duration::from_millis(100))
        .slots(600)
        .lease(LEASE)
        .max_attempts(5)
        .concurrency(32)
        .connect_timeout(Duration::from_secs(10))
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    let result = match std::env::var(ENV_NODE) {
        Ok(number) => runtime.block_on(node(number.parse().unwrap_or(0))),
        Err(_) => runtime.block_on(parent(std::env::args().nth(1))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------------------------------------
// A node: a worker on the wheel, until the parent closes its stdin (or kills it).

/// The body of a node process: runs a worker whose handler reports each delivery on stdout, one
/// line each, then "works" on it for a few tens of milliseconds (so that a kill finds handlers
/// running) and says it is done; says whether it leads the wheel (ticks it); stops, letting its
/// handlers finish, when stdin closes.
async fn node(number: usize) -> Result<ExitCode, Failure> {
    let (url, wheel) = (std::env::var(ENV_URL)?, std::env::var(ENV_WHEEL)?);
    let timers = settings(&url, &wheel).connect().await?;
    let worker = timers.run(move |task: Task| async move {
        report(number, &task)?;
        // The review's work: 20 to 60 ms.
        let work = 20 + task.key().bytes().map(u64::from).sum::<u64>() % 41;
        tokio::time::sleep(Duration::from_millis(work)).await;
        say(&format!("done {number}"))?;
        Ok::<(), Failure>(())
    });
    worker.ready().await;
    say(&format!("ready {number}"))?;
    // Until the parent closes our stdin (or is gone), saying when this node takes or loses the
    // lead.
    let mut stdin_closed =
        tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink()));
    let mut leading = false;
    loop {
        tokio::select! {
            closed = &mut stdin_closed => {
                closed??;
                break;
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if worker.is_leader() != leading {
                    leading = !leading;
                    say(&format!("lead {number} {}", u8::from(leading)))?;
                }
            }
        }
    }
    worker.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// Sends one delivery to the parent: `review NODE ORDER ATTEMPT DUE_MS AT_MS`, `sweep NODE
/// ATTEMPT DUE_MS` or `audit NODE ATTEMPT ORDER FINDING` (and the handler's end, `done NODE`). A
/// delivery the parent did not get is not applied: the handler fails, and the task is retried.
fn report(number: usize, task: &Task) -> Result<(), Failure> {
    let line = match task.key() {
        "sweep" => format!("sweep {number} {} {}", task.attempt(), millis(task.due())),
        key if key.starts_with("audit:") => {
            let audit: Audit = task.json()?;
            format!("audit {number} {} {} {}", task.attempt(), audit.order, audit.finding)
        }
        key => {
            let order = key.trim_start_matches("order-").trim_end_matches(":review");
            let (due, at) = (millis(task.due()), millis(SystemTime::now()));
            format!("review {number} {order} {} {due} {at}", task.attempt())
        }
    };
    say(&line)
}

fn say(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------------------
// The parent: schedules the reviews, runs the nodes, kills one, and checks the outcome.

/// What the nodes reported, applied as the service's database would: each order's review once.
struct Reviews {
    /// Per order: 0 = not applied yet, 1 = applied.
    applied: Vec<AtomicU8>,
    /// Per order: the earliest time its review may run (`now + delay`, read before `schedule`).
    not_before_ms: Vec<AtomicU64>,
    /// Per order: whether its `schedule` returned `Ok`.
    scheduled: Vec<AtomicBool>,
    deliveries: AtomicU64,
    /// Deliveries of a review already applied: skipped.
    redeliveries: AtomicU64,
    /// Deliveries after the first (attempt 2 or more): what the killed node held.
    handed_out_again: AtomicU64,
    early: AtomicU64,
    by_node: [AtomicU64; NODES],
    /// The runs of the recurring sweep (by due time), and the audits read back from their JSON;
    /// and their deliveries.
    sweeps: Mutex<std::collections::HashSet<u64>>,
    audits: Mutex<std::collections::HashSet<String>>,
    other_deliveries: AtomicU64,
    /// Per node: whether it said it runs, and is up.
    ready: [AtomicBool; NODES],
    /// Per node: handlers started and not done.
    running: [AtomicU64; NODES],
    /// The node that leads the wheel, as it last said; `NODES` for none.
    leader: AtomicUsize,
}

impl Reviews {
    fn new() -> Reviews {
        Reviews {
            applied: (0..ORDERS).map(|_| AtomicU8::new(0)).collect(),
            not_before_ms: (0..ORDERS).map(|_| AtomicU64::new(0)).collect(),
            scheduled: (0..ORDERS).map(|_| AtomicBool::new(false)).collect(),
            deliveries: AtomicU64::new(0),
            redeliveries: AtomicU64::new(0),
            handed_out_again: AtomicU64::new(0),
            early: AtomicU64::new(0),
            by_node: Default::default(),
            sweeps: Mutex::default(),
            audits: Mutex::default(),
            other_deliveries: AtomicU64::new(0),
            ready: Default::default(),
            running: Default::default(),
            leader: AtomicUsize::new(NODES),
        }
    }

    /// Applies one line a node sent.
    fn take(&self, line: &str) {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        match (f[0], num(1).map(|n| n as usize).filter(|&n| n < NODES)) {
            ("ready", Some(node)) => self.ready[node].store(true, Relaxed),
            ("done", Some(node)) => {
                let _ = self.running[node].fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
            }
            ("lead", Some(node)) if f.get(2) == Some(&"1") => self.leader.store(node, Relaxed),
            ("lead", Some(node)) => {
                let _ = self.leader.compare_exchange(node, NODES, Relaxed, Relaxed);
            }
            ("sweep", Some(_)) => {
                self.other_deliveries.fetch_add(1, Relaxed);
                self.sweeps.lock().unwrap().insert(num(3).unwrap_or(0));
            }
            ("audit", Some(node)) => {
                self.other_deliveries.fetch_add(1, Relaxed);
                let (order, finding) = (f.get(3).unwrap_or(&"?"), f.get(4..).map(|w| w.join(" ")).unwrap_or_default());
                let attempt = f.get(2).unwrap_or(&"?");
                println!("audit of order {order} on node {node} (attempt {attempt}): {finding}");
                self.audits.lock().unwrap().insert(order.to_string());
            }
            ("review", Some(node)) => {
                let (Some(order), Some(attempt), Some(due), Some(at)) = (num(2), num(3), num(4), num(5)) else {
                    return;
                };
                let Some(applied) = self.applied.get(order as usize) else { return };
                self.running[node].fetch_add(1, Relaxed);
                self.deliveries.fetch_add(1, Relaxed);
                if attempt > 1 {
                    self.handed_out_again.fetch_add(1, Relaxed);
                }
                if at < due || at < self.not_before_ms[order as usize].load(Relaxed) {
                    self.early.fetch_add(1, Relaxed);
                }
                if applied.swap(1, Relaxed) == 1 {
                    self.redeliveries.fetch_add(1, Relaxed);
                } else {
                    self.by_node[node].fetch_add(1, Relaxed);
                }
            }
            _ => {}
        }
    }

    fn applied(&self) -> usize {
        self.applied.iter().filter(|a| a.load(Relaxed) == 1).count()
    }

    fn scheduled(&self) -> usize {
        self.scheduled.iter().filter(|s| s.load(Relaxed)).count()
    }

    /// Orders scheduled with `Ok` whose review was never applied.
    fn missing(&self) -> usize {
        (0..ORDERS).filter(|&i| self.scheduled[i].load(Relaxed) && self.applied[i].load(Relaxed) == 0).count()
    }
}

/// A node's process, its stdin (closed to stop it) and the thread reading its reports.
struct Node {
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Node {
    /// Runs this program again as node `number`.
    fn spawn(number: usize, url: &str, wheel: &str, reviews: &Arc<Reviews>) -> Result<Node, Failure> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(ENV_NODE, number.to_string())
            .env(ENV_URL, url)
            .env(ENV_WHEEL, wheel)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let reviews = reviews.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => reviews.take(&line),
                    Err(_) => break,
                }
            }
        });
        Ok(Node { stdin: child.stdin.take(), child, reader: Some(reader) })
    }

    /// SIGKILL: no shutdown, no acknowledgement of what its handlers were doing.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }

    /// Closes its stdin (it shuts its worker down, letting its handlers finish) and waits up to
    /// `timeout` for it to end.
    fn stop(&mut self, timeout: Duration) -> bool {
        self.stdin.take();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A spread of delays from 1 s to 4 s without a random-number crate: an LCG is plenty here.
fn delay_of(order: usize) -> Duration {
    let x = (order as u64).wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 33;
    Duration::from_millis(1_000 + x % 3_000)
}

/// Waits up to 30 s for node `number` to say it runs.
async fn until_ready(reviews: &Reviews, number: usize) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reviews.ready[number].load(Relaxed) {
        if Instant::now() > deadline {
            return Err(format!("node {number} did not start within 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn parent(url: Option<String>) -> Result<ExitCode, Failure> {
    // A SQLite file in a temp directory unless a URL is given; then a wheel of its own there.
    let (_dir, url, wheel) = match url {
        None => {
            let dir = tempfile::Builder::new().prefix("timewheel-durable-example-").tempdir()?;
            let url = format!("sqlite:{}", dir.path().join("orders.db").display());
            (Some(dir), url, "orders".to_string())
        }
        Some(url) => (None, url, format!("orders-example-{}", std::process::id())),
    };
    // The parent's own handle: it creates the wheel (the file too), schedules, and reads back.
    let timers = settings(&url, &wheel).connect().await?;
    println!("the wheel {wheel:?} at {url}");
    println!("  (from another terminal: timewheel --url {url} --wheel {wheel} watch)");

    let reviews = Arc::new(Reviews::new());
    let nodes: Arc<Mutex<Vec<Node>>> = Arc::new(Mutex::new(Vec::new()));
    for number in 0..NODES {
        let node = Node::spawn(number, &url, &wheel, &reviews)?;
        nodes.lock().unwrap().push(node);
    }
    for number in 0..NODES {
        until_ready(&reviews, number).await?;
    }
    let pids: Vec<u32> = nodes.lock().unwrap().iter().map(|n| n.child.id()).collect();
    println!("{NODES} nodes run, each a process of its own (pids {pids:?})");

    // A recurring sweep (every second, five runs, each made up if no node ran when it fell
    // due) and a typed audit, read back before it fires.
    let sweep = Recurrence::every(Duration::from_secs(1)).limit(5).missed(MissedRuns::Burst);
    timers.upsert_recurring("sweep", sweep, "sweep").await?;
    let audit = Audit { order: 42, finding: "shipped late, refund the postage".into() };
    timers.schedule("audit:42", Duration::from_secs(2), Json(&audit)).await?;
    if let Some(task) = timers.get("audit:42").await? {
        println!(
            "audit:42 is {:?}, due in {:?}, {} deliveries so far, payload {}",
            task.state(),
            task.due().duration_since(SystemTime::now()).unwrap_or_default(),
            task.attempt(),
            String::from_utf8_lossy(task.payload())
        );
    }

    let start = Instant::now();
    let progress = tokio::spawn({
        let reviews = reviews.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let leader = reviews.leader.load(Relaxed);
                let up: Vec<&str> = (0..NODES)
                    .map(|n| match (reviews.ready[n].load(Relaxed), n == leader) {
                        (false, _) => "DOWN",
                        (true, true) => "up*",
                        (true, false) => "up",
                    })
                    .collect();
                println!(
                    "{:>5.1} s  scheduled {:>5}  reviewed {:>5}  handed out again {:>3}  redeliveries {:>3}  nodes {} (* leads)",
                    start.elapsed().as_secs_f64(),
                    reviews.scheduled(),
                    reviews.applied(),
                    reviews.handed_out_again.load(Relaxed),
                    reviews.redeliveries.load(Relaxed),
                    up.join(" "),
                );
            }
        }
    });

    println!("scheduling {ORDERS} order reviews over {SCHEDULING:?}, each due 1-4 s later");
    // Halfway through the scheduling, once it runs handlers, the node that leads the wheel (or
    // node 1, if none said so yet) dies, and comes back.
    let crash = tokio::spawn({
        let (nodes, reviews, url, wheel) = (nodes.clone(), reviews.clone(), url.clone(), wheel.clone());
        async move {
            tokio::time::sleep(SCHEDULING / 2).await;
            let victim = Some(reviews.leader.load(Relaxed)).filter(|&n| n < NODES).unwrap_or(1);
            let deadline = Instant::now() + SCHEDULING;
            while reviews.running[victim].load(Relaxed) == 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let (pid, running) = tokio::task::block_in_place(|| {
                let mut nodes = nodes.lock().unwrap();
                let running = reviews.running[victim].load(Relaxed);
                nodes[victim].kill();
                (nodes[victim].child.id(), running)
            });
            reviews.ready[victim].store(false, Relaxed);
            reviews.running[victim].store(0, Relaxed);
            let leading = reviews.leader.compare_exchange(victim, NODES, Relaxed, Relaxed).is_ok();
            println!("--- kill -9 node {victim} (pid {pid}) with {running} handlers running");
            if leading {
                println!(
                    "    it led the wheel: no node ticks it until its leadership runs out (within the lease, \
                     {LEASE:?}), then another takes over"
                );
            }
            tokio::time::sleep(OUTAGE).await;
            let node = Node::spawn(victim, &url, &wheel, &reviews)?;
            let pid = node.child.id();
            nodes.lock().unwrap()[victim] = node;
            until_ready(&reviews, victim).await?;
            let leader = reviews.leader.load(Relaxed);
            let leads = if leader < NODES { format!("; node {leader} leads") } else { String::new() };
            println!("--- node {victim} started again (pid {pid}) after {OUTAGE:?}{leads}");
            Ok::<(), Failure>(())
        }
    });

    // Orders arrive in small groups, each review scheduled by its own call.
    const GROUP: usize = 20;
    let scheduling_started = tokio::time::Instant::now();
    for group in (0..ORDERS).step_by(GROUP) {
        let mut calls = tokio::task::JoinSet::new();
        for order in group..(group + GROUP).min(ORDERS) {
            let (timers, reviews) = (timers.clone(), reviews.clone());
            calls.spawn(async move {
                let delay = delay_of(order);
                reviews.not_before_ms[order].store(millis(SystemTime::now() + delay), Relaxed);
                match timers.schedule(format!("order-{order}:review"), delay, order.to_string()).await {
                    Ok(()) => reviews.scheduled[order].store(true, Relaxed),
                    Err(e) => println!("order-{order}: not scheduled, and the caller knows it: {e}"),
                }
            });
        }
        calls.join_all().await;
        let next = SCHEDULING.mul_f64((group + GROUP) as f64 / ORDERS as f64);
        tokio::time::sleep_until(scheduling_started + next).await;
    }
    crash.await??;

    // The last review is due 4 s after it was scheduled; one the killed node held comes back
    // after its lease.
    let deadline = Instant::now() + Duration::from_secs(4) + LEASE * 3;
    while (reviews.missing() > 0 || reviews.sweeps.lock().unwrap().len() < 5) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    progress.abort();
    // Each node stops as a deploy would stop it: its handlers finish, then it exits.
    let stopped = tokio::task::block_in_place(|| {
        let mut all = true;
        for node in nodes.lock().unwrap().iter_mut() {
            all &= node.stop(Duration::from_secs(30));
        }
        all
    });
    let stats = timers.stats().await?;

    let (scheduled, missing, early) = (reviews.scheduled(), reviews.missing(), reviews.early.load(Relaxed));
    let by_node: Vec<u64> = reviews.by_node.iter().map(|n| n.load(Relaxed)).collect();
    println!();
    println!("scheduled with Ok   {scheduled}");
    println!("reviews applied     {} (by node: {by_node:?})", reviews.applied());
    println!("deliveries          {}", reviews.deliveries.load(Relaxed));
    println!(
        "handed out again    {} (the killed node's, after its lease: attempt 2)",
        reviews.handed_out_again.load(Relaxed)
    );
    println!(
        "redeliveries        {} (reviews the killed node had started; the idempotent apply skipped them)",
        reviews.redeliveries.load(Relaxed)
    );
    println!("missing             {missing}");
    println!("early               {early}");
    println!(
        "sweeps              {} runs of 5, audits read back {} ({} deliveries of the two)",
        reviews.sweeps.lock().unwrap().len(),
        reviews.audits.lock().unwrap().len(),
        reviews.other_deliveries.load(Relaxed)
    );
    println!(
        "the wheel says      {} acknowledged, {} pending, {} dead; nodes stopped cleanly: {stopped}",
        stats.acked, stats.pending, stats.dead
    );
    if missing > 0 || early > 0 {
        println!("FAILED: every scheduled review should be applied once, none early");
        return Ok(ExitCode::FAILURE);
    }
    println!("every review scheduled with Ok was applied once, none early, across a kill -9 of a node");
    Ok(ExitCode::SUCCESS)
}
