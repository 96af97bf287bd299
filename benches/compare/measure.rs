//! Measurement helpers (wall clock, process CPU, resident memory), the JSON-lines output, and the Tokio
//! runtime configurations the rivals run on.

use std::future::Future;
use std::time::{Duration, Instant};

pub use crate::process::cpu_ns;

/// Resident set size (VmRSS) of the process, in bytes.
pub fn rss_bytes() -> u64 {
    crate::process::rss().expect("VmRSS in /proc/self/status")
}

/// The state of the process at the start of a measured phase.
pub struct Snapshot {
    rss: u64,
    cpu: u64,
    wall: Instant,
}

/// What a measured phase cost.
pub struct Sample {
    pub wall_ns: u64,
    pub cpu_ns: u64,
    pub rss_delta: i64,
}

impl Snapshot {
    /// Reads RSS first and the wall clock last, so the slow /proc read stays outside the timed window.
    pub fn take() -> Self {
        let rss = rss_bytes();
        let cpu = cpu_ns();
        Snapshot { rss, cpu, wall: Instant::now() }
    }

    pub fn finish(&self) -> Sample {
        let wall_ns = self.wall.elapsed().as_nanos() as u64;
        let cpu_ns = cpu_ns() - self.cpu;
        Sample { wall_ns, cpu_ns, rss_delta: rss_bytes() as i64 - self.rss as i64 }
    }
}

/// Prints one result line: a flat JSON object (see `results.rs`), with the runtime it was measured on.
pub fn emit(imp: &str, workload: &str, n: usize, rt: Rt, fields: &[(&str, f64)]) {
    println!("{}", crate::results::Row::new(imp, workload, n, fields).line(&[("rt", rt.name())]));
}

/// W1 then W2 of one round (1, or 2 = allocator warm) for `n` timers; `w2_extra` adds fields to the W2 line.
pub fn emit_w12(imp: &str, round: u32, n: usize, rt: Rt, w1: &Sample, w2: &Sample, w2_extra: &[(&str, f64)]) {
    let suffix = if round == 1 { "" } else { "r2" };
    let per = |v: u64| v as f64 / n as f64;
    emit(
        imp,
        &format!("W1{suffix}"),
        n,
        rt,
        &[
            ("ns_per_insert", per(w1.wall_ns)),
            ("cpu_ns_per_insert", per(w1.cpu_ns)),
            ("rss_bytes_per_timer", w1.rss_delta as f64 / n as f64),
        ],
    );
    emit(
        imp,
        &format!("W2{suffix}"),
        n,
        rt,
        &[&[("ns_per_cancel", per(w2.wall_ns)), ("cpu_ns_per_cancel", per(w2.cpu_ns))], w2_extra].concat(),
    );
}

/// Both rounds of W1/W2, in that order, in one process.
pub const ROUNDS: [u32; 2] = [1, 2];

/// How an implementation's runtime is configured. `None` is for the pure wheels, driven on the bench's own
/// thread without any runtime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rt {
    None,
    /// `current_thread`: everything on the calling thread.
    Current,
    /// `multi_thread` with 2 workers, one per core of the benchmark machine.
    Multi,
}

impl Rt {
    pub fn name(self) -> &'static str {
        match self {
            Rt::None => "none",
            Rt::Current => "current",
            Rt::Multi => "multi",
        }
    }

    pub fn parse(s: &str) -> Option<Rt> {
        [Rt::None, Rt::Current, Rt::Multi].into_iter().find(|rt| rt.name() == s)
    }

    pub fn build(self) -> tokio::runtime::Runtime {
        let mut builder = match self {
            Rt::Current => tokio::runtime::Builder::new_current_thread(),
            Rt::Multi => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
            Rt::None => unreachable!("no runtime wanted"),
        };
        builder.enable_all().build().expect("tokio runtime")
    }
}

/// Runs `fut` as a task of a fresh runtime of kind `rt` (on a worker, like application code would) and returns
/// its output.
pub fn run_in_task<F>(rt: Rt, fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = rt.build();
    runtime.block_on(async { tokio::spawn(fut).await.expect("measuring task panicked") })
}

/// W4 timing: settle, then measure CPU over a window of wall time.
#[derive(Clone, Copy)]
pub struct IdleWindow {
    pub settle: Duration,
    pub window: Duration,
}

impl IdleWindow {
    /// Sleeps through the settling time, then returns the process CPU ms spent during the window. The calling
    /// thread only sleeps, so it adds nothing to what it measures.
    pub fn measure(self) -> f64 {
        std::thread::sleep(self.settle);
        let before = cpu_ns();
        std::thread::sleep(self.window);
        (cpu_ns() - before) as f64 / 1e6
    }
}

/// W4 for a runtime-based implementation: `setup` runs inside a runtime of kind `rt` (driven by its own thread,
/// so a `current_thread` runtime keeps running too) and returns whatever must stay alive; then the idle window
/// is measured from this thread. `setup` returning `()` right away gives W4base.
pub fn idle_runtime<F, Fut>(rt: Rt, idle: IdleWindow, setup: F) -> f64
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future,
    Fut::Output: 'static,
{
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let driver = std::thread::spawn(move || {
        rt.build().block_on(async move {
            let keep = setup().await;
            ready_tx.send(()).expect("main thread waits");
            let _ = stop_rx.await;
            drop(keep);
        })
    });
    ready_rx.recv().expect("W4 setup finished");
    let cpu_ms = idle.measure();
    stop_tx.send(()).expect("driver waits");
    driver.join().expect("W4 driver thread");
    cpu_ms
}
