//! Durable-mode comparison benchmark: tokio-timewheel's Redis-backed wheel against apalis-redis (Rust, this
//! process), BullMQ delayed jobs (Node), `bullmq-official` (BullMQ's Rust port, this process) and ChasquiMQ's
//! producer (Rust, this process; D1, D2 and D4 only: its consumer needs Redis 8.6), on the durable workloads
//! D1–D7, each measurement against a fresh local `redis-server` that this benchmark starts itself.
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench durable               # N = 100,000, D5 over 60 s, 3 repetitions
//! cargo bench -p tokio-timewheel-benches --bench durable -- --quick    # N = 10,000, D5 over 10 s, 1 repetition
//! options: --reps=R --n=N --d5-window=SECS --impl=NAME[,NAME] --workload=D124|D3|D5|D7[,...]
//!          --limit-other=on (tokio-timewheel: a limit on a prefix none of the keys has, to measure its cost)
//!          --workers=W --concurrency=C (D3, D5 and D7: W workers of C handlers each; 4 of 16 by default)
//!          --tick-ms=MS --slots=S (tokio-timewheel's wheel; 100 ms and 36,000 by default)
//!          --history=on|off (tokio-timewheel's history of finished runs: the default bounds, or none)
//!          --flavor=multi|current (the Rust implementations' Tokio runtime: two workers, the default, or one thread)
//!          --chasquimq=tuned (ChasquiMQ as its own benchmarks run it, rows `chasquimq-tuned`: durable/chasquimq.rs)
//!          --driver=spawned|blocking (the workload's calls in a task of the runtime, as a service's handlers make
//!          them, the default; or on the thread that blocks on the runtime, as before `f38074e`)
//!          --report-from=A.jsonl[,B.jsonl] (report earlier runs together instead of measuring; pass the --n,
//!          --tick-ms and --d5-window they ran with for the heading and targets)
//! ```
//!
//! Workloads (the same keys `order-{i}`, 32-byte payload and delays for everyone):
//! - D1 schedule N tasks with delays U[1 s, 3600 s]: one call each with 64 in flight, and (`-batch` rows) through
//!   the implementation's batch call, 1,024 per call: tasks per second; and Redis's CPU time (`INFO cpu`) and
//!   script calls (`EVALSHA`, `EVAL`) over that timed phase, per task (`server::Work`, read alike for everyone);
//! - D2 Redis `used_memory` after D1 minus before, per task;
//! - D3 fire N tasks with delays U[0, 10 s] with 4 workers of 16 handlers each: lateness (handler start minus due)
//!   p50 / p99 / max, duplicates, early starts, wall time until the last acknowledgement; and p50 / p99 of the
//!   tasks due after the insert phase, which do not wait behind the schedule calls; and Redis's CPU time and script
//!   calls per task from the first insert to the last acknowledgement;
//! - D4 cancel D1's tasks in a random order (the in-process benchmark's W2 order): cancels per second, and Redis's
//!   CPU time and script calls per task as in D1;
//! - D5 N tasks an hour away and the 4 workers idle: Redis commands per second over the window
//!   (`INFO commandstats`, which counts the commands that scripts run inside Redis too; the benchmark's own
//!   `INFO` calls left out), and the calls clients send (round trips, counted through `MONITOR`); for
//!   tokio-timewheel also per tick, and its script calls and waits (`EVALSHA`, `EVAL`, `BLPOP`) per tick, which
//!   must stay at 2 or fewer. `--impl=tokio-timewheel --workload=D5 --d5-window=20` measures that alone.
//!
//! - D7 N tasks already due (scheduled while no worker runs), then the workers start, no-op handlers: the fire
//!   path's capacity, acknowledgements per second from the workers' start to the last acknowledgement, and Redis's
//!   CPU time and script calls per task over that phase.
//!
//! Each measurement prints one flat JSON line; the end prints medians, the ratios of tokio-timewheel against
//! each rival, and the targets as PASS/FAIL, and writes `target/bench-report/durable.md` and `durable.jsonl`.
//!
//! `--suite=sqlite` runs the embedded SQLite store beside its SQLite rivals instead (`durable/sqlite.rs` says how).
//!
//! Layout: `inputs` (keys, payload, delays; the generator is `compare/inputs.rs`'s), `server` (the throwaway
//! redis-server of the tests, `redis_server`, and its INFO readings), `lateness` (D3's sink), one module per
//! implementation, `report` (on the rows, medians and tables of `results`, shared with the other benchmarks).

#[path = "durable/apalis.rs"]
mod apalis;
#[path = "durable/bullmq.rs"]
mod bullmq;
#[path = "durable/bullmq_rust.rs"]
mod bullmq_rust;
#[path = "durable/chasquimq.rs"]
mod chasquimq;
#[allow(dead_code)]
#[path = "compare/inputs.rs"]
mod compare_inputs;
#[path = "durable/inputs.rs"]
mod inputs;
#[path = "durable/lateness.rs"]
mod lateness;
#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[path = "durable/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "results.rs"]
mod results;
#[path = "durable/server.rs"]
mod server;
#[path = "durable/sqlite.rs"]
mod sqlite;
#[path = "durable/timewheel.rs"]
mod timewheel;

use std::future::Future;
use std::time::Duration;

use inputs::Inputs;
use results::Row;
use server::RedisServer;

/// One measurement's numbers, by field name (`tasks_per_s`, `late_p99_ms`, ...).
pub type Fields = Vec<(&'static str, f64)>;

/// How long D3 waits for every task after the insert phase before it reports what it has.
pub const D3_LIMIT: Duration = Duration::from_secs(10 + 60);
/// How long D3 keeps the workers running after the last acknowledgement, to catch a task handled twice.
pub const D3_DUPLICATE_WATCH: Duration = Duration::from_secs(2);

/// The implementations under test.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Impl {
    Timewheel,
    Apalis,
    Bullmq,
    /// `bullmq-official`, the Rust port of BullMQ.
    BullmqRust,
    /// ChasquiMQ's producer (its consumer needs Redis 8.6).
    Chasquimq,
}

impl Impl {
    pub const ALL: [Impl; 5] = [Impl::Timewheel, Impl::Apalis, Impl::Bullmq, Impl::BullmqRust, Impl::Chasquimq];

    /// The rivals of tokio-timewheel, in the order of its ratios in the report.
    pub const RIVALS: [Impl; 4] = [Impl::Apalis, Impl::Bullmq, Impl::BullmqRust, Impl::Chasquimq];

    pub fn name(self) -> &'static str {
        match self {
            Impl::Timewheel => "tokio-timewheel",
            Impl::Apalis => "apalis-redis",
            Impl::Bullmq => "bullmq",
            Impl::BullmqRust => "bullmq-official",
            Impl::Chasquimq => "chasquimq",
        }
    }

    /// The name of the rows measured through the batch call.
    pub fn batch_name(self) -> &'static str {
        match self {
            Impl::Timewheel => "tokio-timewheel-batch",
            Impl::Apalis => "apalis-redis-batch",
            Impl::Bullmq => "bullmq-batch",
            Impl::BullmqRust => "bullmq-official-batch",
            Impl::Chasquimq => "chasquimq-batch",
        }
    }

    /// Whether the implementation runs a workload on this benchmark's server: ChasquiMQ's consumer (and its add
    /// of a job due now) needs Redis 8.6, so on an older server it has D1, D2 and D4 only.
    pub fn runs(self, w: Workload) -> bool {
        self != Impl::Chasquimq
            || matches!(w, Workload::D124 | Workload::D124Batch)
            || REDIS_8_6.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One child measurement of a repetition.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Workload {
    /// D1, D2 and D4, one call per task.
    D124,
    /// D1 and D2 (and D4 where there is a batch cancel) through the batch call.
    D124Batch,
    D3,
    D5,
    D7,
}

impl Workload {
    const ALL: [Workload; 5] = [Workload::D124, Workload::D124Batch, Workload::D3, Workload::D5, Workload::D7];

    fn matches(self, filter: &str) -> bool {
        match self {
            Workload::D124 | Workload::D124Batch => filter == "D124",
            Workload::D3 => filter == "D3",
            Workload::D5 => filter == "D5",
            Workload::D7 => filter == "D7",
        }
    }
}

pub struct Options {
    pub quick: bool,
    pub reps: usize,
    pub n: usize,
    pub d5_window: Duration,
    pub d5_settle: Duration,
    pub tick_ms: u64,
    pub slots: usize,
    /// `--history=off`: tokio-timewheel keeps no history of finished runs (`history_limit(0)`).
    pub history_off: bool,
    /// `--limit-other=on`: tokio-timewheel's wheel has a limit (a rate and a running limit) on a
    /// prefix none of the workload's keys has, to measure what limits cost the keys under none.
    pub limit_other: bool,
    impls: Vec<Impl>,
    workloads: Vec<Workload>,
    /// Report these `durable.jsonl` files instead of measuring.
    report_from: Option<String>,
}

impl Options {
    fn parse() -> Options {
        let mut quick = false;
        let mut reps = None;
        let mut n = None;
        let mut window = None;
        let mut tick_ms = 100;
        let mut slots = 36_000;
        let mut history_off = false;
        let mut limit_other = false;
        let mut impls = Impl::ALL.to_vec();
        let mut workloads = Workload::ALL.to_vec();
        let mut report_from = None;
        let (mut workers, mut concurrency) = (4, 16);
        for arg in std::env::args().skip(1) {
            let (flag, value) = arg.split_once('=').unwrap_or((&arg, ""));
            let number = |v: &str| v.replace('_', "").parse::<u64>().unwrap_or_else(|_| fail(&format!("bad {arg}")));
            match flag {
                "--quick" => quick = true,
                "--reps" => reps = Some(number(value) as usize),
                "--n" => n = Some(number(value) as usize),
                "--d5-window" => window = Some(number(value)),
                "--tick-ms" => tick_ms = number(value),
                "--slots" => slots = number(value) as usize,
                "--history" => match value {
                    "on" => history_off = false,
                    "off" => history_off = true,
                    _ => fail(&format!("bad {arg}: on or off")),
                },
                "--limit-other" => match value {
                    "on" => limit_other = true,
                    "off" => limit_other = false,
                    _ => fail(&format!("bad {arg}: on or off")),
                },
                "--report-from" => report_from = Some(value.to_string()),
                "--workers" => workers = number(value) as usize,
                "--concurrency" => concurrency = number(value) as usize,
                "--driver" => match value {
                    "spawned" => {}
                    "blocking" => BLOCKING.store(true, std::sync::atomic::Ordering::Relaxed),
                    _ => fail(&format!("bad {arg}: blocking or spawned")),
                },
                "--flavor" => match value {
                    "multi" => {}
                    "current" => CURRENT_THREAD.store(true, std::sync::atomic::Ordering::Relaxed),
                    _ => fail(&format!("bad {arg}: multi or current")),
                },
                "--impl" => {
                    impls = value
                        .split(',')
                        .map(|v| {
                            Impl::ALL.into_iter().find(|i| i.name() == v).unwrap_or_else(|| fail(&format!("bad {v}")))
                        })
                        .collect()
                }
                "--workload" => {
                    let filters: Vec<&str> = value.split(',').collect();
                    workloads = Workload::ALL.into_iter().filter(|w| filters.iter().any(|f| w.matches(f))).collect();
                }
                // cargo bench adds --bench; other flags are not ours either.
                _ => {}
            }
        }
        inputs::set_shape(workers.max(1), concurrency.max(1));
        Options {
            quick,
            reps: reps.unwrap_or(if quick { 1 } else { 3 }),
            n: n.unwrap_or(if quick { 10_000 } else { 100_000 }),
            d5_window: Duration::from_secs(window.unwrap_or(if quick { 10 } else { 60 })),
            d5_settle: Duration::from_secs(2),
            tick_ms,
            slots,
            history_off,
            limit_other,
            impls,
            workloads,
            report_from,
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("durable: {msg}");
    std::process::exit(2)
}

/// The 1-minute load average: the machine is shared, and a measurement taken while it is busy is marked.
fn load1() -> f64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(-1.0)
}

/// Prints one result line (a flat JSON object, with the load average at its end) and keeps it for the report.
fn emit(rows: &mut Vec<Row>, imp: &str, workload: &str, n: usize, fields: &[(&str, f64)]) {
    let fields: Vec<(&str, f64)> = fields.iter().copied().chain([("load1", load1())]).collect();
    let row = Row::new(imp, workload, n, &fields);
    println!("{}", row.line(&[]));
    rows.push(row);
}

/// D7's fields from its sink: acknowledgements per second over `wall_s` (from the workers' start to the last
/// acknowledgement; negative when not every task was acknowledged), and the sink's counts.
pub fn d7_fields(sink: &lateness::Sink, wall_s: f64, n: usize) -> Fields {
    let all = sink.fields(wall_s * 1e3);
    let keep = ["duplicates", "handled", "wall_ms"];
    let acks_per_s = if wall_s > 0.0 { n as f64 / wall_s } else { -1.0 };
    std::iter::once(("acks_per_s", acks_per_s)).chain(all.into_iter().filter(|(k, _)| keep.contains(k))).collect()
}

/// The numbers of a flat JSON object (what `bench.mjs` prints); names are leaked, which a benchmark can afford.
pub fn parse_fields(line: &str) -> Option<Fields> {
    let leak = |name: String| -> &'static str { Box::leak(name.into_boxed_str()) };
    Some(results::figures(line)?.into_iter().map(|(name, value)| (leak(name), value)).collect())
}

/// Whether the server is Redis 8.6 or later (read from a first server's `INFO server` at the start).
static REDIS_8_6: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The server's `redis_version`, and whether it is 8.6 or later (Valkey reports 7.2.4 there, so it is not).
fn redis_version() -> (String, bool) {
    let version = server::start().info("server").get("redis_version").cloned().unwrap_or_default();
    let numbers: Vec<u32> = version.split('.').map(|v| v.parse().unwrap_or(0)).collect();
    let at_least = (numbers.first().copied().unwrap_or(0), numbers.get(1).copied().unwrap_or(0)) >= (8, 6);
    (version, at_least)
}

/// `--flavor=current`: the Rust implementations run on a current-thread runtime instead.
static CURRENT_THREAD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `--driver=blocking`: each measurement runs on the thread that blocks on its runtime instead of as a task of it.
static BLOCKING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `f` on a fresh runtime against a fresh server, and drops both afterwards, so nothing of one measurement
/// (tasks, connections, keys) reaches the next: a two-worker multi-thread runtime (one worker per core of the
/// benchmark machine), or with `--flavor=current` a current-thread one (the client then takes one core and
/// leaves the other to Redis).
///
/// The measurement (the workload's calls) runs as a task of the runtime, as a service's calls do (from its
/// request handlers' tasks); with `--driver=blocking` on the thread that blocks on the runtime, which on a
/// multi-thread runtime is not one of its workers (every answer then crosses to it).
fn measure<F, Fut, T>(f: F) -> T
where
    F: FnOnce(RedisServer) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = if CURRENT_THREAD.load(std::sync::atomic::Ordering::Relaxed) {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
    };
    let measurement = f(server::start());
    let out = if BLOCKING.load(std::sync::atomic::Ordering::Relaxed) {
        rt.block_on(measurement)
    } else {
        rt.block_on(async move { tokio::spawn(measurement).await.expect("the measurement panicked") })
    };
    rt.shutdown_timeout(Duration::from_secs(5));
    out
}

/// D5 around an implementation's setup: settle, then count Redis commands over the window.
async fn idle_commands<G>(server: &RedisServer, options: &Options, setup: impl Future<Output = G>) -> Fields {
    let guard = setup.await;
    tokio::time::sleep(options.d5_settle).await;
    let monitor = server::Monitor::start(server).await;
    let before = server::command_calls(server);
    let clients_before = monitor.counts().clients;
    tokio::time::sleep(options.d5_window).await;
    let after = server::command_calls(server);
    let clients = server::calls_between(&clients_before, &monitor.counts().clients);
    drop(guard);
    let calls = server::calls_between(&before, &after);
    let secs = options.d5_window.as_secs_f64();
    let total: u64 = calls.values().sum();
    let sent: u64 = ["evalsha", "eval", "blpop"].iter().map(|name| calls.get(*name).copied().unwrap_or(0)).sum();
    let mut fields: Fields = vec![
        ("commands_per_s", total as f64 / secs),
        ("client_calls_per_s", clients.values().sum::<u64>() as f64 / secs),
        ("evalsha_eval_blpop_per_s", sent as f64 / secs),
    ];
    for (prefix, calls) in [("cmd", calls), ("client", clients)] {
        for (name, count) in calls {
            let name: &'static str = Box::leak(format!("{prefix}_{name}_per_s").into_boxed_str());
            fields.push((name, count as f64 / secs));
        }
    }
    fields
}

fn run_one(
    rows: &mut Vec<Row>,
    options: &'static Options,
    inputs: &'static Inputs,
    json: &'static std::path::Path,
    imp: Impl,
    w: Workload,
) {
    let n = inputs.n;
    match w {
        Workload::D124 | Workload::D124Batch => {
            let batch = w == Workload::D124Batch;
            let name = if batch { imp.batch_name() } else { imp.name() };
            let results = measure(|server| async move {
                match imp {
                    Impl::Timewheel => timewheel::d124(&server, options, inputs, batch).await,
                    Impl::Apalis => apalis::d124(&server, inputs, batch).await,
                    Impl::Bullmq => bullmq::d124(&server, json, n, batch).await,
                    Impl::BullmqRust => bullmq_rust::d124(&server, inputs, batch).await,
                    Impl::Chasquimq => chasquimq::d124(&server, inputs, batch).await,
                }
            });
            for (workload, fields) in results {
                emit(rows, name, workload, n, &fields);
            }
        }
        Workload::D3 => {
            let fields = measure(|server| async move {
                match imp {
                    Impl::Timewheel => timewheel::d3(&server, options, inputs).await,
                    Impl::Apalis => apalis::d3(&server, inputs).await,
                    Impl::Bullmq => bullmq::d3(&server, json, n).await,
                    Impl::BullmqRust => bullmq_rust::d3(&server, inputs).await,
                    Impl::Chasquimq => chasquimq::d3(&server, inputs).await,
                }
            });
            emit(rows, row_name(imp), "D3", n, &fields);
        }
        Workload::D7 => {
            let fields = measure(|server| async move {
                match imp {
                    Impl::Timewheel => timewheel::d7(&server, options, inputs).await,
                    Impl::Apalis => apalis::d7(&server, inputs).await,
                    Impl::Bullmq => bullmq::d7(&server, json, n).await,
                    Impl::BullmqRust => bullmq_rust::d7(&server, inputs).await,
                    Impl::Chasquimq => chasquimq::d7(&server, inputs).await,
                }
            });
            emit(rows, row_name(imp), "D7", n, &fields);
        }
        Workload::D5 => {
            let mut fields = measure(|server| async move {
                match imp {
                    Impl::Timewheel => {
                        idle_commands(&server, options, timewheel::d5_setup(&server, options, inputs)).await
                    }
                    Impl::Apalis => idle_commands(&server, options, apalis::d5_setup(&server, inputs)).await,
                    Impl::Bullmq => idle_commands(&server, options, bullmq::d5_setup(&server, json)).await,
                    Impl::BullmqRust => idle_commands(&server, options, bullmq_rust::d5_setup(&server, inputs)).await,
                    Impl::Chasquimq => idle_commands(&server, options, chasquimq::d5_setup(&server, inputs)).await,
                }
            });
            if imp == Impl::Timewheel {
                let tick_s = options.tick_ms as f64 / 1e3;
                fields.insert(3, ("commands_per_tick", fields[0].1 * tick_s));
                fields.insert(4, ("client_calls_per_tick", fields[1].1 * tick_s));
                fields.insert(5, ("evalsha_eval_blpop_per_tick", fields[2].1 * tick_s));
            }
            emit(rows, imp.name(), "D5", n, &fields);
        }
    }
}

/// The name of `imp`'s rows in this run (ChasquiMQ's say which configuration ran).
fn row_name(imp: Impl) -> &'static str {
    if imp == Impl::Chasquimq {
        chasquimq::row_name()
    } else {
        imp.name()
    }
}

fn main() {
    let mut options = Options::parse();
    if std::env::args().any(|a| a == "--suite=sqlite") {
        sqlite::main(options);
        return;
    }
    if let Some(paths) = &options.report_from {
        let rows = results::read(paths);
        options.n = rows.first().map_or(options.n, |r| r.n);
        options.reps = results::Medians::new(&rows).repetitions();
        report::write(&options, &rows);
        return;
    }
    if !redis_server::installed() {
        fail(&format!("redis-server not found: {}", redis_server::INSTALL_HINT));
    }
    let (version, at_least_8_6) = redis_version();
    REDIS_8_6.store(at_least_8_6, std::sync::atomic::Ordering::Relaxed);
    eprintln!("durable: redis-server {version}");
    let mut impls = options.impls.clone();
    if impls.contains(&Impl::Bullmq) {
        if let Err(why) = bullmq::prepare() {
            eprintln!("durable: {why}");
            impls.retain(|&i| i != Impl::Bullmq);
        }
    }
    // For the whole run: a spawned measurement borrows them for `'static`.
    let inputs: &'static Inputs = Box::leak(Box::new(Inputs::new(options.n)));
    let json: &'static std::path::Path =
        Box::leak(std::env::temp_dir().join(format!("tw-durable-bench-inputs-{}.json", std::process::id())).into());
    inputs.write_json(json).expect("write the inputs for node");
    let options: &'static Options = Box::leak(Box::new(options));

    let mut rows = Vec::new();
    for &w in &options.workloads {
        if impls.contains(&Impl::Chasquimq) && !Impl::Chasquimq.runs(w) {
            eprintln!("durable: chasquimq skips {w:?}: its consumer needs Redis 8.6 (this server is {version})");
        }
    }
    let runs = |w: Workload| impls.iter().filter(|i| i.runs(w)).count();
    let total = options.reps * options.workloads.iter().map(|&w| runs(w)).sum::<usize>();
    let mut done = 0;
    for rep in 0..options.reps {
        // Rotate the order so that no implementation always runs first.
        let mut order = impls.clone();
        let len = order.len().max(1);
        order.rotate_left(rep % len);
        for &w in &options.workloads {
            for &imp in order.iter().filter(|i| i.runs(w)) {
                done += 1;
                eprintln!("[{done}/{total}] rep {}/{}: {} {w:?} N={}", rep + 1, options.reps, imp.name(), options.n);
                run_one(&mut rows, options, inputs, json, imp, w);
            }
        }
    }
    let _ = std::fs::remove_file(json);
    report::write(options, &rows);
}
