//! The SQLite suite (`--suite=sqlite`): tokio-timewheel's embedded SQLite store (the `sqlite` feature) beside the
//! SQLite job queues its users would otherwise embed, apalis-sqlite 1.0, effectum 0.7 and riverqueue 0.5 (River's
//! Rust client on its SQLite driver), each at its default durability and again with a disk flush at every
//! commit; and the Redis store on the same machine in the same run, for its D1, D4 and D7.
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench durable -- --suite=sqlite             # N = 10,000, 3 repetitions
//! options: --n=N --reps=R --stores=NAME[,NAME] --workload=D124|D3-4|D3-64|D7[,...] --limit=SECS (D3/D7's wait)
//! ```
//!
//! Workloads, with the Redis suite's inputs (keys, 32-byte payload, delays, cancel order) and D3's sink:
//! - D1 one schedule call per task with 64 in flight (tasks/s), D2 bytes on disk a pending task (the store's files,
//!   database and WAL after `PRAGMA wal_checkpoint(TRUNCATE)`, with D1's N tasks pending, minus the empty store's,
//!   over N), D4 one cancel per task in the random cancel order with 64 in flight (cancels/s);
//! - D3 N tasks due over U[0, 10 s] through the batch call (1,024 a call) while the workers run, with one worker of
//!   4 handlers (`D3-4`) and with 4 workers of 16 (`D3-64`): lateness p50/p99/max, wall time to the last
//!   acknowledgement;
//! - D7 N tasks already due, then 4 workers of 16 start: acknowledgements per second to the last one.
//!
//! CPU a task: the measuring process's CPU time (user + system, all threads, `getrusage`) over the timed phase
//! over N. The store runs in that process in every case: tokio-timewheel's in this benchmark's process, each rival
//! in a child process of its own per measurement (`benches/sqlite-rivals/`, crates outside the workspace whose
//! SQLite libraries cannot share its resolve; built here with `cargo build --release` before the first
//! measurement). Each measurement gets a fresh folder for its files under the system's temporary folder.
//!
//! Rivals that keep no durability setting of their own at a flush per commit measure once per repetition, and
//! their rows stand in both tables (effectum and riverqueue already flush at every commit by default).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_timewheel::durable::{Durability, DurableScheduler, Task, Worker};

use crate::inputs::{concurrency, index_of, set_shape, workers, Inputs, BATCH, IN_FLIGHT, PAYLOAD};
use crate::lateness::{system_time_us, Sink};
use crate::results::{self, num, report_dir, Row, Table};
use crate::{emit, Fields, Options};

const WHEEL: &str = "bench";

/// The stores of the suite, in report order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Store {
    /// tokio-timewheel's embedded store: `Durability::Process` (`false`) or `PowerLoss` (`true`).
    Wheel(bool),
    /// apalis-sqlite: its setup's `synchronous = OFF` (`false`) or FULL (`true`).
    Apalis(bool),
    Effectum,
    Riverqueue,
    /// tokio-timewheel on Redis (D1, D4 and D7 only).
    Redis,
}

impl Store {
    const ALL: [Store; 7] = [
        Store::Wheel(false),
        Store::Wheel(true),
        Store::Apalis(false),
        Store::Apalis(true),
        Store::Effectum,
        Store::Riverqueue,
        Store::Redis,
    ];

    fn name(self) -> &'static str {
        match self {
            Store::Wheel(false) => "tokio-timewheel-sqlite",
            Store::Wheel(true) => "tokio-timewheel-sqlite-flush",
            Store::Apalis(false) => "apalis-sqlite",
            Store::Apalis(true) => "apalis-sqlite-flush",
            Store::Effectum => "effectum",
            Store::Riverqueue => "riverqueue",
            Store::Redis => "tokio-timewheel-redis",
        }
    }

    fn runs(self, w: &str) -> bool {
        self != Store::Redis || matches!(w, "D124" | "D7")
    }
}

/// The workloads of the suite: name, workers, handlers each.
const WORKLOADS: [(&str, usize, usize); 4] = [("D124", 4, 16), ("D3-4", 1, 4), ("D3-64", 4, 16), ("D7", 4, 16)];

/// The rivals' two binaries, built from `benches/sqlite-rivals/`.
struct Binaries {
    sqlx: PathBuf,
    effectum: PathBuf,
}

/// Builds the rivals' crates (release) in `<target>/sqlite-rivals` and returns their binaries.
fn build_rivals() -> Binaries {
    let target = report_dir().parent().map(Path::to_path_buf).unwrap_or_else(|| "target".into()).join("sqlite-rivals");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sqlite-rivals");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for krate in ["sqlx", "effectum"] {
        eprintln!("durable: building the SQLite rivals in sqlite-rivals/{krate} (cargo build --release)");
        let status = Command::new(&cargo)
            .args(["build", "--release", "--manifest-path"])
            .arg(root.join(krate).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo");
        if !status.success() {
            crate::fail(&format!("building benches/sqlite-rivals/{krate} failed"));
        }
    }
    Binaries { sqlx: target.join("release/sqlx-rivals"), effectum: target.join("release/effectum-rival") }
}

/// A fresh folder for one measurement's files, removed on drop.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tw-sqlite-bench-{}-{next}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the measurement's folder");
        Folder(dir)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// This process's CPU time so far (user and system, every thread), in seconds.
fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

fn cpu_per_task(before: f64, n: usize) -> f64 {
    (cpu_seconds() - before) * 1e6 / n as f64
}

/// Checkpoints the wheel's file into its database (a connection of the benchmark's own, while the store's is
/// idle), then sums the store's files but the WAL index (`-shm`, shared memory).
fn disk_bytes(dir: &Path) -> f64 {
    let db = dir.join("wheel.db");
    if db.exists() {
        let conn = rusqlite::Connection::open(&db).expect("open the wheel's file");
        conn.busy_timeout(Duration::from_secs(5)).expect("busy timeout");
        let _: (i64, i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("checkpoint");
    }
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir).expect("read the store's folder").flatten() {
        if !entry.file_name().to_string_lossy().ends_with("-shm") {
            total += entry.metadata().map_or(0, |m| m.len());
        }
    }
    total as f64
}

async fn connect(dir: &Path, flush: bool, options: &Options) -> DurableScheduler {
    let url = format!("sqlite:{}", dir.join("wheel.db").display());
    let durability = if flush { Durability::PowerLoss } else { Durability::Process };
    let builder = DurableScheduler::builder(url, WHEEL)
        .durability(durability)
        .tick(Duration::from_millis(options.tick_ms))
        .slots(options.slots)
        .concurrency(concurrency());
    let builder = if options.history_off { builder.history_limit(0) } else { builder };
    builder.connect().await.expect("tokio-timewheel sqlite connect")
}

async fn schedule_batches(timers: &DurableScheduler, keys: &[String], delay_ms: impl Fn(usize) -> u64) {
    for (c, chunk) in keys.chunks(BATCH).enumerate() {
        let items = chunk.iter().enumerate().map(|(j, key)| {
            let i = c * BATCH + j;
            (key.as_str(), Duration::from_millis(delay_ms(i)), PAYLOAD.as_bytes())
        });
        let results = timers.schedule_many(items).await.expect("schedule_many");
        assert!(results.iter().all(Result::is_ok), "tokio-timewheel: a batch item was refused");
    }
}

/// D1, D2 and D4 on the embedded store, one call per task with 64 in flight.
async fn wheel_d124(dir: &Path, flush: bool, options: &Options, inputs: &Inputs) -> Vec<(&'static str, Fields)> {
    let timers = connect(dir, flush, options).await;
    let n = inputs.n;
    let empty = tokio::task::block_in_place(|| disk_bytes(dir));
    let cpu = cpu_seconds();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let timers = &timers;
            let key = inputs.keys[i].as_str();
            let delay = Duration::from_millis(inputs.d1_delays_ms[i]);
            async move { timers.schedule(key, delay, PAYLOAD.as_bytes()).await.expect("schedule") }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<()>()
        .await;
    let d1_s = started.elapsed().as_secs_f64();
    let d1_cpu = cpu_per_task(cpu, n);
    let bytes = (tokio::task::block_in_place(|| disk_bytes(dir)) - empty) / n as f64;

    let cpu = cpu_seconds();
    let started = Instant::now();
    let cancelled = futures::stream::iter(inputs.cancel_order.iter().copied())
        .map(|i| {
            let timers = &timers;
            let key = inputs.keys[i as usize].as_str();
            async move { timers.cancel(key).await.expect("cancel") as usize }
        })
        .buffer_unordered(IN_FLIGHT)
        .fold(0, |a, b| async move { a + b })
        .await;
    let d4_s = started.elapsed().as_secs_f64();
    let d4_cpu = cpu_per_task(cpu, n);
    assert_eq!(cancelled, n, "tokio-timewheel: every pending task cancelled once");
    vec![
        ("D1", vec![("tasks_per_s", n as f64 / d1_s), ("cpu_us_per_task", d1_cpu)]),
        ("D2", vec![("disk_bytes_per_task", bytes), ("disk_bytes_empty", empty)]),
        ("D4", vec![("cancels_per_s", n as f64 / d4_s), ("cpu_us_per_task", d4_cpu)]),
    ]
}

fn start_workers(timers: &DurableScheduler, sink: Arc<Sink>) -> Vec<Worker> {
    (0..workers())
        .map(|_| {
            let sink = sink.clone();
            timers.run(move |task: Task| {
                // Due on the store's clock (the wall clock, for a file), start on this host's: the same clock.
                sink.handle(index_of(task.key()), system_time_us(task.due()));
                async { Ok::<(), std::convert::Infallible>(()) }
            })
        })
        .collect()
}

/// Polls `len` every `every` until nothing is pending (at most 30 s): whether it got there.
async fn wait_empty(timers: &DurableScheduler, every: Duration) -> bool {
    let limit = Instant::now() + Duration::from_secs(30);
    while Instant::now() < limit {
        if timers.len().await.expect("len") == 0 {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    false
}

async fn wheel_d3(dir: &Path, flush: bool, options: &Options, inputs: &Inputs, limit: Duration) -> Fields {
    let timers = connect(dir, flush, options).await;
    let sink = Arc::new(Sink::new(inputs.n));
    let running = start_workers(&timers, sink.clone());
    let cpu = cpu_seconds();
    let started = Instant::now();
    schedule_batches(&timers, &inputs.keys, |i| inputs.d3_delays_ms[i]).await;
    sink.insert_done();
    let all = sink.wait_all(limit).await;
    let acked = all && wait_empty(&timers, Duration::from_millis(5)).await;
    let wall_ms = if acked { started.elapsed().as_secs_f64() * 1e3 } else { -1.0 };
    let cpu = cpu_per_task(cpu, inputs.n);
    tokio::time::sleep(crate::D3_DUPLICATE_WATCH).await;
    for w in running {
        w.shutdown().await;
    }
    let mut fields = sink.fields(wall_ms);
    fields.push(("cpu_us_per_task", cpu));
    fields
}

async fn wheel_d7(dir: &Path, flush: bool, options: &Options, inputs: &Inputs, limit: Duration) -> Fields {
    let timers = connect(dir, flush, options).await;
    schedule_batches(&timers, &inputs.keys, |_| 0).await;
    let sink = Arc::new(Sink::new(inputs.n));
    let cpu = cpu_seconds();
    let started = Instant::now();
    let running = start_workers(&timers, sink.clone());
    let all = sink.wait_all(limit).await;
    let acked = all && wait_empty(&timers, Duration::from_millis(2)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_per_task(cpu, inputs.n);
    let left = if acked { 0 } else { timers.len().await.unwrap_or(inputs.n).min(inputs.n) };
    for w in running {
        w.shutdown().await;
    }
    let all_fields = sink.fields(elapsed * 1e3);
    let keep = ["duplicates", "handled", "wall_ms"];
    let mut fields = vec![("acks_per_s", (inputs.n - left) as f64 / elapsed), ("complete", acked as u8 as f64)];
    fields.extend(all_fields.into_iter().filter(|(k, _)| keep.contains(k)));
    fields.push(("cpu_us_per_task", cpu));
    fields
}

/// Runs `f` on a fresh two-worker multi-thread runtime, as a task of it, as the Redis suite's `measure` does.
fn local<Fut, T>(f: Fut) -> T
where
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let out = rt.block_on(async move { tokio::spawn(f).await.expect("the measurement panicked") });
    rt.shutdown_timeout(Duration::from_secs(5));
    out
}

/// One measurement of a rival in its child process: its result lines (`D1 {...}`), by workload.
fn child(
    bin: &Path,
    rival: &str,
    flush: bool,
    w: &str,
    dir: &Path,
    n: usize,
    limit: Duration,
) -> Vec<(String, Fields)> {
    let workload = if w.starts_with("D3") { "D3" } else { w };
    let output = Command::new(bin)
        .arg(format!("--rival={rival}"))
        .arg(format!("--durability={}", if flush { "flush" } else { "default" }))
        .arg(format!("--workload={workload}"))
        .arg(format!("--n={n}"))
        .arg(format!("--dir={}", dir.display()))
        .arg(format!("--workers={}", workers()))
        .arg(format!("--concurrency={}", concurrency()))
        .arg(format!("--limit={}", limit.as_secs()))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the rival");
    if !output.status.success() {
        eprintln!("  {rival} {w}: the child exited with {}", output.status);
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (name, json) = line.split_once(' ')?;
            let name = if name == "D3" { w.to_string() } else { name.to_string() };
            Some((name, crate::parse_fields(json)?))
        })
        .collect()
}

fn measure_one(
    rows: &mut Vec<Row>,
    bins: &Binaries,
    options: &'static Options,
    inputs: &'static Inputs,
    store: Store,
    w: &'static str,
    limit: Duration,
) {
    let n = inputs.n;
    let folder = Folder::new(store.name());
    let dir: &'static Path = Box::leak(folder.0.clone().into_boxed_path());
    let results: Vec<(String, Fields)> = match store {
        Store::Wheel(flush) => match w {
            "D124" => local(wheel_d124(dir, flush, options, inputs))
                .into_iter()
                .map(|(name, fields)| (name.to_string(), fields))
                .collect(),
            "D7" => vec![(w.to_string(), local(wheel_d7(dir, flush, options, inputs, limit)))],
            _ => vec![(w.to_string(), local(wheel_d3(dir, flush, options, inputs, limit)))],
        },
        Store::Apalis(flush) => child(&bins.sqlx, "apalis-sqlite", flush, w, dir, n, limit),
        Store::Riverqueue => child(&bins.sqlx, "riverqueue", false, w, dir, n, limit),
        Store::Effectum => child(&bins.effectum, "effectum", false, w, dir, n, limit),
        Store::Redis => {
            let results = match w {
                "D124" => {
                    crate::measure(
                        |server| async move { crate::timewheel::d124(&server, options, inputs, false).await },
                    )
                }
                _ => vec![(
                    "D7",
                    crate::measure(|server| async move { crate::timewheel::d7(&server, options, inputs).await }),
                )],
            };
            results.into_iter().map(|(name, fields)| (name.to_string(), fields)).collect()
        }
    };
    drop(folder);
    if results.is_empty() {
        eprintln!("  {} {w}: no result", store.name());
    }
    for (workload, fields) in results {
        emit(rows, store.name(), &workload, n, &fields);
    }
}

/// The suite's command line beyond [`Options`]: the stores, the workloads, D3/D7's wait, and N (10,000 unless
/// `--n` says otherwise: the rivals' slowest paths run at tens of tasks a second).
struct Suite {
    stores: Vec<Store>,
    workloads: Vec<&'static str>,
    limit: Duration,
    n: usize,
}

fn suite_args() -> Suite {
    let mut suite = Suite {
        stores: Store::ALL.to_vec(),
        workloads: WORKLOADS.iter().map(|w| w.0).collect(),
        limit: Duration::from_secs(70),
        n: 10_000,
    };
    for arg in std::env::args().skip(1) {
        let (flag, value) = arg.split_once('=').unwrap_or((&arg, ""));
        match flag {
            "--stores" => {
                suite.stores = value
                    .split(',')
                    .map(|v| {
                        Store::ALL
                            .into_iter()
                            .find(|s| s.name() == v)
                            .unwrap_or_else(|| crate::fail(&format!("bad {v}")))
                    })
                    .collect()
            }
            "--workload" => {
                let wanted: Vec<&str> = value.split(',').collect();
                suite.workloads = WORKLOADS.iter().map(|w| w.0).filter(|w| wanted.contains(w)).collect();
            }
            "--limit" => {
                suite.limit = Duration::from_secs(value.parse().unwrap_or_else(|_| crate::fail("bad --limit")))
            }
            "--n" => suite.n = value.replace('_', "").parse().unwrap_or_else(|_| crate::fail("bad --n")),
            _ => {}
        }
    }
    suite
}

pub fn main(mut options: Options) {
    let suite = suite_args();
    options.n = suite.n;
    let mut stores = suite.stores.clone();
    if stores.contains(&Store::Redis) && !crate::redis_server::installed() {
        eprintln!("durable: redis-server not found: the Redis store is left out");
        stores.retain(|&s| s != Store::Redis);
    }
    let bins = build_rivals();
    let inputs: &'static Inputs = Box::leak(Box::new(Inputs::new(options.n)));
    let options: &'static Options = Box::leak(Box::new(options));
    let mut rows = Vec::new();
    let total =
        options.reps * suite.workloads.iter().map(|w| stores.iter().filter(|s| s.runs(w)).count()).sum::<usize>();
    let mut done = 0;
    for rep in 0..options.reps {
        let mut order = stores.clone();
        let len = order.len().max(1);
        order.rotate_left(rep % len);
        for &w in &suite.workloads {
            let &(_, workers, handlers) = WORKLOADS.iter().find(|x| x.0 == w).expect("workload");
            set_shape(workers, handlers);
            for &store in order.iter().filter(|s| s.runs(w)) {
                done += 1;
                eprintln!("[{done}/{total}] rep {}/{}: {} {w} N={}", rep + 1, options.reps, store.name(), options.n);
                measure_one(&mut rows, &bins, options, inputs, store, w, suite.limit);
            }
        }
    }
    report(options, &rows);
}

/// The report: one table per durability, the targets, written to `target/bench-report/durable-sqlite.md` and
/// the rows to `durable-sqlite.jsonl`.
fn report(options: &Options, rows: &[Row]) {
    let m = results::Medians::new(rows);
    let n = options.n;
    let get = |s: &str, w: &str, f: &str| m.get(s, w, n, f);
    let columns: [(&str, &str, &str); 13] = [
        ("D1 tasks/s", "D1", "tasks_per_s"),
        ("D1 CPU µs/task", "D1", "cpu_us_per_task"),
        ("D4 cancels/s", "D4", "cancels_per_s"),
        ("D4 CPU µs/task", "D4", "cpu_us_per_task"),
        ("D7 acks/s", "D7", "acks_per_s"),
        ("D7 CPU µs/task", "D7", "cpu_us_per_task"),
        ("D3-4 p99 ms", "D3-4", "late_p99_ms"),
        ("D3-4 max ms", "D3-4", "late_max_ms"),
        ("D3-4 CPU µs/task", "D3-4", "cpu_us_per_task"),
        ("D3-64 p99 ms", "D3-64", "late_p99_ms"),
        ("D3-64 max ms", "D3-64", "late_max_ms"),
        ("D3-64 CPU µs/task", "D3-64", "cpu_us_per_task"),
        ("disk bytes/pending task", "D2", "disk_bytes_per_task"),
    ];
    let tables = [
        (
            "Default durability",
            ["tokio-timewheel-sqlite", "apalis-sqlite", "effectum", "riverqueue", "tokio-timewheel-redis"],
        ),
        (
            "A disk flush at every commit",
            ["tokio-timewheel-sqlite-flush", "apalis-sqlite-flush", "effectum", "riverqueue", "tokio-timewheel-redis"],
        ),
    ];
    let mut md = format!(
        "# tokio-timewheel's SQLite store vs apalis-sqlite, effectum, riverqueue — medians of {} run(s), N = {n}\n\n",
        options.reps
    );
    let mut verdicts = Vec::new();
    for (title, stores) in tables {
        let header = std::iter::once("store").chain(columns.iter().map(|c| c.0)).map(String::from).collect();
        let mut table_rows = Vec::new();
        for store in stores {
            if !m.has(store) {
                continue;
            }
            let mut row = vec![store.to_string()];
            for (_, w, f) in columns {
                let cell = match get(store, w, f) {
                    None => "-".into(),
                    Some(v) => {
                        let handled = get(store, w, "handled");
                        let partial = matches!(w, "D3-4" | "D3-64" | "D7") && handled.is_some_and(|h| (h as usize) < n);
                        let incomplete = w == "D7" && get(store, w, "complete") == Some(0.0);
                        if partial {
                            format!("{} ({} of {n} handled)", num(v), num(handled.unwrap_or(0.0)))
                        } else if incomplete {
                            format!("{} (not all acknowledged)", num(v))
                        } else {
                            num(v)
                        }
                    }
                };
                row.push(cell);
            }
            table_rows.push(row);
        }
        let table = Table { title: title.to_string(), header, rows: table_rows };
        print!("\n{}", table.text());
        md += &format!("## {title}\n\n{}\n", table.markdown());
        let ours = stores[0];
        let rivals = &stores[1..4];
        let best = |w: &str, f: &str, higher: bool| {
            rivals.iter().filter_map(|r| Some((*r, get(r, w, f)?))).filter(|(_, v)| *v > 0.0).fold(
                None,
                |best: Option<(&str, f64)>, (r, v)| match best {
                    Some((_, b)) if (higher && b >= v) || (!higher && b <= v) => best,
                    _ => Some((r, v)),
                },
            )
        };
        let mut lines = Vec::new();
        for (label, w, f) in [("D1", "D1", "tasks_per_s"), ("D4", "D4", "cancels_per_s"), ("D7", "D7", "acks_per_s")] {
            let (Some(v), Some((r, b))) = (get(ours, w, f), best(w, f, true)) else {
                lines.push(format!("{label}: no data"));
                continue;
            };
            let redis = get("tokio-timewheel-redis", w, f);
            let vs_redis = redis.map_or("no Redis figure".into(), |x| {
                format!("{:.2}x the Redis store's {} ({})", v / x, num(x), if v >= x { "ok" } else { "MISSED" })
            });
            lines.push(format!(
                "{label} {}: {:.2}x the best rival ({r} {}) ({}); {vs_redis}",
                num(v),
                v / b,
                num(b),
                if v >= 2.0 * b { "ok" } else { "MISSED" }
            ));
        }
        match get(ours, "D3-4", "late_p99_ms") {
            Some(p) => {
                lines.push(format!("D3-4 p99 {} ms (<= 20 ms {})", num(p), if p <= 20.0 { "ok" } else { "MISSED" }))
            }
            None => lines.push("D3-4 p99: no data".into()),
        }
        for w in ["D3-4", "D3-64"] {
            if let (Some(v), Some((r, b))) = (get(ours, w, "cpu_us_per_task"), best(w, "cpu_us_per_task", false)) {
                lines.push(format!(
                    "{w} CPU {} µs/task: {:.2}x the best rival's ({r} {}) (<= 0.5x {})",
                    num(v),
                    v / b,
                    num(b),
                    if v <= 0.5 * b { "ok" } else { "MISSED" }
                ));
            }
        }
        if let (Some(v), Some((r, b))) =
            (get(ours, "D2", "disk_bytes_per_task"), best("D2", "disk_bytes_per_task", false))
        {
            lines.push(format!(
                "bytes on disk a pending task {}: {:.2}x the best rival's ({r} {}) (<= 0.5x {})",
                num(v),
                v / b,
                num(b),
                if v <= 0.5 * b { "ok" } else { "MISSED" }
            ));
        }
        for line in &lines {
            println!("{title}: {line}");
        }
        verdicts.push((title, lines));
    }
    md += "## Targets\n\n";
    for (title, lines) in verdicts {
        for line in lines {
            md += &format!("- {title}: {line}\n");
        }
    }
    let dir = report_dir();
    if std::fs::create_dir_all(&dir).is_ok() {
        let raw: String = rows.iter().map(|r| r.line(&[]) + "\n").collect();
        let _ = std::fs::write(dir.join("durable-sqlite.jsonl"), raw);
        if std::fs::write(dir.join("durable-sqlite.md"), md).is_ok() {
            eprintln!("wrote {}", dir.join("durable-sqlite.md").display());
        }
    }
}
