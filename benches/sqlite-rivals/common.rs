//! What the SQLite rivals' child processes share (each crate includes this file): the command line the durable
//! benchmark (`benches/durable/sqlite.rs`) runs them with, the workloads D1/D2/D4, D3 and D7 written once over a
//! [`Rival`], and the result lines it reads back.
//!
//! The inputs, the generator and D3's sink are the durable benchmark's own files (`benches/durable/inputs.rs`,
//! `benches/compare/inputs.rs`, `benches/durable/lateness.rs`), included by path, so that every store gets the
//! same keys, payload, delays and cancel order, and is judged by the same sink.
//!
//! ```text
//! <rival binary> --rival=NAME --durability=default|flush --workload=D124|D3|D7 --n=N --dir=DIR
//!                [--workers=W --concurrency=C] [--limit=SECS]
//! ```
//!
//! Each result is one line on stdout: the workload's name, a space, and a flat JSON object of numbers.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::inputs::{Inputs, BATCH, IN_FLIGHT};
use crate::lateness::{now_us, Sink};

/// How long D3 keeps the workers running after the last acknowledgement, to catch a task handled twice
/// (`benches/durable.rs`'s `D3_DUPLICATE_WATCH`).
const DUPLICATE_WATCH: Duration = Duration::from_secs(2);

pub struct Args {
    pub rival: String,
    /// `--durability=flush`: a disk flush at every commit.
    pub flush: bool,
    pub workload: String,
    pub n: usize,
    /// The folder of the store's files (created by the parent, removed by it).
    pub dir: PathBuf,
    /// How long D3 and D7 wait for every task before they report what they have.
    pub limit: Duration,
}

impl Args {
    pub fn parse() -> Args {
        let mut args = Args {
            rival: String::new(),
            flush: false,
            workload: String::new(),
            n: 10_000,
            dir: std::env::temp_dir(),
            limit: Duration::from_secs(70),
        };
        let (mut workers, mut concurrency) = (4, 16);
        for arg in std::env::args().skip(1) {
            let (flag, value) = arg.split_once('=').unwrap_or((&arg, ""));
            let number = || value.parse::<u64>().unwrap_or_else(|_| panic!("bad {arg}"));
            match flag {
                "--rival" => args.rival = value.to_string(),
                "--durability" => args.flush = value == "flush",
                "--workload" => args.workload = value.to_string(),
                "--n" => args.n = number() as usize,
                "--dir" => args.dir = PathBuf::from(value),
                "--limit" => args.limit = Duration::from_secs(number()),
                "--workers" => workers = number() as usize,
                "--concurrency" => concurrency = number() as usize,
                _ => panic!("unknown argument {arg}"),
            }
        }
        crate::inputs::set_shape(workers, concurrency);
        args
    }
}

/// This process's CPU time so far (user and system, every thread), in seconds.
pub fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The bytes of the store's files in `dir`: the database, its WAL (after the caller's checkpoint) or rollback
/// journal; not the WAL index (`-shm`), which is memory shared between connections.
pub fn disk_bytes(dir: &Path) -> f64 {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir).expect("read the store's folder").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with("-shm") {
            total += entry.metadata().map_or(0, |m| m.len());
        }
    }
    total as f64
}

/// Prints one result line for the parent.
pub fn emit(workload: &str, fields: &[(&str, f64)]) {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    println!("{workload} {{{}}}", body.join(","));
}

/// What every handler reaches: the sink, and each task's due time on this process's clock (the time before the
/// schedule call plus the delay asked for: a rival that keeps whole seconds and rounds up is charged with it).
pub struct Shared {
    pub sink: Sink,
    due_us: Box<[AtomicI64]>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("handled", &self.sink.distinct()).finish()
    }
}

impl Shared {
    pub fn new(n: usize) -> Shared {
        Shared { sink: Sink::new(n), due_us: (0..n).map(|_| AtomicI64::new(i64::MAX)).collect() }
    }

    /// Notes task `i` as due `delay_ms` from now (call it before the task is scheduled).
    fn set_due(&self, i: usize, delay_ms: u64) {
        self.due_us[i].store(now_us() + delay_ms as i64 * 1000, Relaxed);
    }

    /// What a handler calls first: task `i` starts now.
    pub fn handle(&self, i: usize) {
        self.sink.handle(i, self.due_us[i].load(Relaxed));
    }
}

/// One rival, as the workloads drive it. Every call is the rival's own public API unless its docs say to
/// do otherwise (each implementation says where).
#[allow(async_fn_in_trait)]
pub trait Rival: Sized {
    /// What a cancel needs besides the key (the id the rival returned on insert, for a rival whose cancel
    /// takes its own id).
    type Id;
    /// The running workers.
    type Running;
    /// Whether the rival keeps due times in whole seconds (the benchmark rounds them up): D7 then waits for
    /// that second to pass before it starts the workers.
    const WHOLE_SECONDS: bool;

    async fn open(dir: &Path, flush: bool) -> Self;
    /// One schedule call: task `i` (key `key`) due `delay_ms` from now.
    async fn schedule(&self, i: usize, key: &str, delay_ms: u64) -> Self::Id;
    /// One batch call: tasks `(i, delay_ms)`.
    async fn schedule_many(&self, keys: &[String], items: &[(usize, u64)]);
    /// Cancels pending task `i`: whether it was cancelled.
    async fn cancel(&self, i: usize, key: &str, id: Self::Id) -> bool;
    /// Moves the WAL into the database (`PRAGMA wal_checkpoint(TRUNCATE)`), before the file sizes are read.
    async fn checkpoint(&self);
    /// Starts the workers (`inputs::workers()` of `inputs::concurrency()` handlers each).
    async fn start(&self, shared: Arc<Shared>) -> Self::Running;
    /// Tasks not acknowledged yet (pending, running, or handled but not yet marked done).
    async fn left(&self) -> u64;
    async fn stop(&self, running: Self::Running);
    /// Closes the store at the end of the measurement.
    async fn close(self) {}
}

fn per_task(cpu_before: f64, n: usize) -> f64 {
    (cpu_seconds() - cpu_before) * 1e6 / n as f64
}

/// D1 (one schedule call per task, 64 in flight), D2 (bytes on disk a pending task, after a checkpoint) and D4
/// (one cancel per task in the cancel order, 64 in flight), each with this process's CPU time per task.
pub async fn d124<R: Rival>(args: &Args, inputs: &Inputs) {
    let n = inputs.n;
    let rival = R::open(&args.dir, args.flush).await;
    rival.checkpoint().await;
    let empty = disk_bytes(&args.dir);
    let cpu = cpu_seconds();
    let started = Instant::now();
    let mut ids: Vec<Option<R::Id>> = (0..n).map(|_| None).collect();
    let rival_ref = &rival;
    let mut done = futures::stream::iter(0..n)
        .map(|i| async move { (i, rival_ref.schedule(i, &inputs.keys[i], inputs.d1_delays_ms[i]).await) })
        .buffer_unordered(IN_FLIGHT);
    while let Some((i, id)) = done.next().await {
        ids[i] = Some(id);
    }
    drop(done);
    let d1_s = started.elapsed().as_secs_f64();
    let d1_cpu = per_task(cpu, n);
    rival.checkpoint().await;
    let bytes = (disk_bytes(&args.dir) - empty) / n as f64;

    let cpu = cpu_seconds();
    let started = Instant::now();
    let order = inputs.cancel_order.iter().map(|&i| {
        let i = i as usize;
        (i, ids[i].take().expect("scheduled"))
    });
    let order: Vec<(usize, R::Id)> = order.collect();
    let cancelled = futures::stream::iter(order)
        .map(|(i, id)| async move { rival_ref.cancel(i, &inputs.keys[i], id).await as usize })
        .buffer_unordered(IN_FLIGHT)
        .fold(0, |a, b| async move { a + b })
        .await;
    let d4_s = started.elapsed().as_secs_f64();
    let d4_cpu = per_task(cpu, n);
    assert_eq!(cancelled, n, "{}: every pending task cancelled once", args.rival);
    rival.close().await;
    emit("D1", &[("tasks_per_s", n as f64 / d1_s), ("cpu_us_per_task", d1_cpu)]);
    emit("D2", &[("disk_bytes_per_task", bytes), ("disk_bytes_empty", empty)]);
    emit("D4", &[("cancels_per_s", n as f64 / d4_s), ("cpu_us_per_task", d4_cpu)]);
}

async fn schedule_in_batches<R: Rival>(rival: &R, shared: &Shared, inputs: &Inputs, delay: impl Fn(usize) -> u64) {
    for chunk in (0..inputs.n).collect::<Vec<_>>().chunks(BATCH) {
        let items: Vec<(usize, u64)> = chunk.iter().map(|&i| (i, delay(i))).collect();
        for &(i, d) in &items {
            shared.set_due(i, d);
        }
        rival.schedule_many(&inputs.keys, &items).await;
    }
}

/// Polls every 5 ms until the rival holds no unacknowledged task (at most `limit`): whether it got there.
async fn wait_acked<R: Rival>(rival: &R, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if rival.left().await == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// D3: the workers run, N tasks due over U[0, 10 s] go in through the batch call (1,024 a call); lateness,
/// duplicates, early starts, wall time to the last acknowledgement, CPU per task over all of it.
pub async fn d3<R: Rival>(args: &Args, inputs: &Inputs) {
    let n = inputs.n;
    let rival = R::open(&args.dir, args.flush).await;
    let shared = Arc::new(Shared::new(n));
    let running = rival.start(shared.clone()).await;
    let cpu = cpu_seconds();
    let started = Instant::now();
    schedule_in_batches(&rival, &shared, inputs, |i| inputs.d3_delays_ms[i]).await;
    shared.sink.insert_done();
    let all = shared.sink.wait_all(args.limit).await;
    let acked = all && wait_acked(&rival, Duration::from_secs(30)).await;
    let wall_ms = if acked { started.elapsed().as_secs_f64() * 1e3 } else { -1.0 };
    let cpu = per_task(cpu, n);
    tokio::time::sleep(DUPLICATE_WATCH).await;
    rival.stop(running).await;
    rival.close().await;
    let mut fields = shared.sink.fields(wall_ms);
    fields.push(("cpu_us_per_task", cpu));
    emit("D3", &fields);
}

/// D7: N tasks already due (scheduled through the batch call while no worker runs), then the workers start:
/// acknowledgements per second from their start to the last acknowledgement; when not every task was
/// acknowledged within the limit, those acknowledged by then over the time taken (`complete` 0).
pub async fn d7<R: Rival>(args: &Args, inputs: &Inputs) {
    let n = inputs.n;
    let rival = R::open(&args.dir, args.flush).await;
    let shared = Arc::new(Shared::new(n));
    schedule_in_batches(&rival, &shared, inputs, |_| 0).await;
    if R::WHOLE_SECONDS {
        // Due by the rival's clock (whole seconds, rounded up): wait for that second to pass.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }
    let cpu = cpu_seconds();
    let started = Instant::now();
    let running = rival.start(shared.clone()).await;
    let all = shared.sink.wait_all(args.limit).await;
    let acked = all && wait_acked(&rival, Duration::from_secs(30)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = per_task(cpu, n);
    let done = if acked { n as u64 } else { n as u64 - rival.left().await.min(n as u64) };
    rival.stop(running).await;
    rival.close().await;
    let all_fields = shared.sink.fields(elapsed * 1e3);
    let keep = ["duplicates", "handled", "wall_ms"];
    let mut fields = vec![("acks_per_s", done as f64 / elapsed), ("complete", acked as u8 as f64)];
    fields.extend(all_fields.into_iter().filter(|(k, _)| keep.contains(k)));
    fields.push(("cpu_us_per_task", cpu));
    emit("D7", &fields);
}

/// Runs the workload the command line names on `R`, on a two-worker multi-thread runtime (one worker per core
/// of the benchmark machine, as the durable benchmark's own measurements run), the workload's calls made from
/// a task of that runtime.
pub fn run<R, F, Fut>(args: Args, workload: F)
where
    R: Rival,
    F: FnOnce(&'static Args, &'static Inputs) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let args: &'static Args = Box::leak(Box::new(args));
    let inputs: &'static Inputs = Box::leak(Box::new(Inputs::new(args.n)));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move { tokio::spawn(workload(args, inputs)).await.expect("the measurement panicked") });
    rt.shutdown_timeout(Duration::from_secs(5));
}
