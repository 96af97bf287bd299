//! `suite`: every implementation, each measurement in a fresh child process (no allocator, runtime or page
//! cache state carried between them), three repetitions with the implementation order rotated between them so
//! no one always runs first on a cold machine.

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::results::{report_dir, Row};
use crate::{report, Impl, Workload};

pub const REPETITIONS: usize = 3;

/// The sizes and windows of one suite run.
pub struct Config {
    pub quick: bool,
    /// W1/W2 sizes. Every implementation runs 10 M: the slowest, tokio-task, takes about 35 s and 7.2 GB of the
    /// machine's 24 GB per run (the service about 45 s and 1.8 GB).
    pub sizes: Vec<usize>,
    pub w3_n: usize,
    pub w4_n: usize,
    pub w4_window_s: u64,
    /// The N at which the targets are judged.
    pub target_n: usize,
}

impl Config {
    /// Quick mode: N = 100 K for W1/W2 and W3, and a 2 s W4 window instead of 5 s.
    pub fn new(quick: bool) -> Self {
        let (sizes, w3_n, w4_window_s) = if quick {
            (vec![100_000], 100_000, 2)
        } else {
            (vec![10_000, 100_000, 1_000_000, 10_000_000], 1_000_000, 5)
        };
        Config { quick, target_n: w3_n, sizes, w3_n, w4_n: 10_000, w4_window_s }
    }
}

#[derive(Clone, Copy)]
struct Measurement {
    imp: Impl,
    workload: Workload,
    n: usize,
}

impl Measurement {
    fn label(&self) -> String {
        format!("{} {} N={}", self.imp.name(), self.workload.arg(), self.n)
    }
}

/// One repetition: W1/W2 at every size, then W3, each in rotated implementation order; then the W4 group.
fn plan(config: &Config, rep: usize) -> (Vec<Measurement>, Vec<Measurement>) {
    let mut order: Vec<Impl> = Impl::ALL.to_vec();
    let len = order.len();
    order.rotate_left(rep * 2 % len);
    let mut sequential = Vec::new();
    if config.quick {
        // T2's reference point, which the quick sizes do not include.
        sequential.push(Measurement { imp: Impl::Hierarchical, workload: Workload::W12, n: 10_000 });
    }
    for &n in &config.sizes {
        for &imp in &order {
            if imp.supports(Workload::W12) {
                sequential.push(Measurement { imp, workload: Workload::W12, n });
            }
        }
    }
    for &imp in &order {
        if imp.supports(Workload::W3) {
            sequential.push(Measurement { imp, workload: Workload::W3, n: config.w3_n });
        }
    }
    let mut idle = Vec::new();
    for workload in [Workload::W4, Workload::W4Base] {
        for &imp in &order {
            if imp.supports(workload) {
                idle.push(Measurement { imp, workload, n: config.w4_n });
            }
        }
    }
    (sequential, idle)
}

fn spawn(config: &Config, m: &Measurement) -> Child {
    let exe = std::env::current_exe().expect("current executable");
    Command::new(exe)
        .args([m.imp.name(), m.workload.arg(), &m.n.to_string()])
        .arg(format!("--w4-window={}", config.w4_window_s))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn measurement")
}

/// Waits for a child and returns its JSON lines; a failed child is reported and contributes nothing.
fn collect(child: Child, m: &Measurement, raw: &mut String) -> Vec<Row> {
    let out = child.wait_with_output().expect("wait for measurement");
    if !out.status.success() {
        eprintln!("  !! {} failed: {}", m.label(), out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|line| {
            let row = Row::parse(line);
            if row.is_none() {
                eprintln!("  !! {}: unparsed output {line:?}", m.label());
            } else {
                raw.push_str(line);
                raw.push('\n');
            }
            row
        })
        .collect()
}

pub fn run(quick: bool) {
    let config = Config::new(quick);
    let plans: Vec<_> = (0..REPETITIONS).map(|rep| plan(&config, rep)).collect();
    let total: usize = plans.iter().map(|(s, i)| s.len() + i.len()).sum();
    let started = Instant::now();
    let mut done = 0;
    let mut rows = Vec::new();
    let mut raw = String::new();
    for (rep, (sequential, idle)) in plans.iter().enumerate() {
        for m in sequential {
            done += 1;
            eprint!("[{done:>3}/{total}] rep {}/{REPETITIONS} {} ... ", rep + 1, m.label());
            let t = Instant::now();
            rows.extend(collect(spawn(&config, m), m, &mut raw));
            eprintln!("{:.1} s", t.elapsed().as_secs_f64());
        }
        // The W4 processes only sleep and count their own CPU, so they run side by side: on 2 cores, a dozen
        // mostly-parked processes do not take CPU from one another.
        eprint!(
            "[{:>3}/{total}] rep {}/{REPETITIONS} W4 group: {} idle measurements at once ... ",
            done + idle.len(),
            rep + 1,
            idle.len()
        );
        done += idle.len();
        let t = Instant::now();
        let children: Vec<Child> = idle.iter().map(|m| spawn(&config, m)).collect();
        for (child, m) in children.into_iter().zip(idle) {
            rows.extend(collect(child, m, &mut raw));
        }
        eprintln!("{:.1} s", t.elapsed().as_secs_f64());
    }
    eprintln!("suite done in {:.0} s", started.elapsed().as_secs_f64());

    let dir = report_dir();
    std::fs::create_dir_all(&dir).expect("create the report directory");
    std::fs::write(dir.join("raw.jsonl"), raw).expect("write raw.jsonl");
    report::write(&config, &rows, &dir);
}
