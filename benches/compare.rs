//! Comparison benchmark: tokio-timewheel against the timers its users would otherwise pick, on the workloads of
//! BENCHMARKS.md (W1 insert, W2 cancel, W3 fire, W4 idle), all in one run.
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench compare -- <impl> <w12|w3|w4|w4base> [N] [--rt=none|current|multi] [--w4-window=SECS]
//! cargo bench -p tokio-timewheel-benches --bench compare -- suite [--quick]
//! cargo bench -p tokio-timewheel-benches --bench compare -- w4r [N] [--reps=R] [--only=NAME]
//! ```
//!
//! A single measurement prints its result lines on stdout (JSON, see `results`). `suite` runs every implementation, each
//! measurement in a fresh child process (this same executable), three repetitions in rotated order, then prints
//! the medians, their ratios against the rivals and the pass/fail of the targets, and writes
//! `target/bench-report/{report.md,w1_insert.svg,raw.jsonl}`.
//!
//! Layout: `inputs` (RNG, delays, cancel order, keys), `sink` (fire sink + histogram), `measure` (CPU, RSS,
//! output, runtimes), one module per implementation, `suite` (child processes, medians) and `report` (tables,
//! targets, SVG), on the rows, medians and tables of `results`, shared with the other benchmarks.

#[path = "compare/delayqueue.rs"]
mod delayqueue;
#[path = "compare/floor.rs"]
mod floor;
#[path = "compare/inputs.rs"]
mod inputs;
#[path = "compare/measure.rs"]
mod measure;
#[path = "process.rs"]
mod process;
#[path = "compare/report.rs"]
mod report;
#[allow(dead_code)]
#[path = "results.rs"]
mod results;
#[path = "compare/service.rs"]
mod service;
#[path = "compare/sink.rs"]
mod sink;
#[path = "compare/suite.rs"]
mod suite;
#[path = "compare/tokio_task.rs"]
mod tokio_task;
#[path = "compare/w4r.rs"]
mod w4r;
#[path = "compare/wheels.rs"]
mod wheels;

use std::time::Duration;

use measure::{IdleWindow, Rt};
use tokio_timewheel::Advance;

/// The implementations under test.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Impl {
    Hierarchical,
    Rounds,
    Service,
    ServiceBatch,
    /// The service advancing every tick instead of sleeping until the next deadline: W4 only, for comparison.
    ServiceInterval,
    TokioTask,
    DelayQueue,
    /// Not a timer: the key-map work alone that a keyed service does per timer (W1/W2 only), for reference.
    KeyMapFloor,
}

impl Impl {
    pub const ALL: [Impl; 8] = [
        Impl::Hierarchical,
        Impl::Rounds,
        Impl::Service,
        Impl::ServiceBatch,
        Impl::ServiceInterval,
        Impl::TokioTask,
        Impl::DelayQueue,
        Impl::KeyMapFloor,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Impl::Hierarchical => "tokio-timewheel-hierarchical",
            Impl::Rounds => "tokio-timewheel-rounds",
            Impl::Service => "tokio-timewheel-service",
            Impl::ServiceBatch => "tokio-timewheel-service-batch",
            Impl::ServiceInterval => "tokio-timewheel-service-interval",
            Impl::TokioTask => "tokio-task",
            Impl::DelayQueue => "tokio-delayqueue",
            Impl::KeyMapFloor => "floor-keymap",
        }
    }

    pub fn parse(name: &str) -> Option<Impl> {
        Impl::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The runtime each implementation is measured on. Both kinds were measured (`--rt=current|multi`, N = 1 M,
    /// on the 2-core machine) and `current_thread` won for every runtime-based implementation:
    /// - tokio-task: W1 622 vs 1164 ns/insert, W2 859 vs 866 ns/cancel, W3 CPU 2090 vs 2746 ms (its W3 p99 is
    ///   worse, 491 vs 291 ms, because one thread both spawns and fires);
    /// - DelayQueue lives in one task either way: W1/W2 equal, W3 p99 37 vs 50 ms;
    /// - the service (measured when requests still went over a channel): W1 791 vs 1066 ns, W2 770 vs 905 ns,
    ///   W3 CPU 2312 vs 3347 ms: caller and actor hand requests over, and on two threads a hand-over can cost a
    ///   wakeup.
    ///
    /// `--rt=multi` (2 workers, one per core) measures the other kind.
    pub fn default_rt(self) -> Rt {
        match self {
            Impl::Hierarchical | Impl::Rounds | Impl::KeyMapFloor => Rt::None,
            _ => Rt::Current,
        }
    }

    pub fn supports(self, workload: Workload) -> bool {
        if self == Impl::KeyMapFloor {
            return workload == Workload::W12;
        }
        match workload {
            Workload::W12 | Workload::W3 => self != Impl::ServiceInterval,
            Workload::W4 => self != Impl::ServiceBatch,
            Workload::W4Base => self.default_rt() != Rt::None,
        }
    }

    fn run(self, rt: Rt, workload: Workload, n: usize, idle: IdleWindow) {
        use service::Calls;
        match self {
            Impl::Hierarchical => wheels::run(self.name(), true, workload, n, idle),
            Impl::Rounds => wheels::run(self.name(), false, workload, n, idle),
            Impl::Service => service::run(self.name(), Calls::One, Advance::NextDeadline, rt, workload, n, idle),
            Impl::ServiceBatch => service::run(self.name(), Calls::Batch, Advance::NextDeadline, rt, workload, n, idle),
            Impl::ServiceInterval => service::run(self.name(), Calls::One, Advance::Interval, rt, workload, n, idle),
            Impl::TokioTask => tokio_task::run(rt, workload, n, idle),
            Impl::DelayQueue => delayqueue::run(rt, workload, n, idle),
            Impl::KeyMapFloor => floor::w12(self.name(), n),
        }
    }
}

/// What one child process measures. W1 and W2 always run together (W2 cancels W1's timers), round 2 included.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Workload {
    W12,
    W3,
    W4,
    W4Base,
}

impl Workload {
    const ALL: [Workload; 4] = [Workload::W12, Workload::W3, Workload::W4, Workload::W4Base];

    /// The command-line name.
    pub fn arg(self) -> &'static str {
        match self {
            Workload::W12 => "w12",
            Workload::W3 => "w3",
            Workload::W4 => "w4",
            Workload::W4Base => "w4base",
        }
    }

    /// The `workload` field of the JSON lines (W12 prints W1, W2, W1r2 and W2r2 instead).
    pub fn name(self) -> &'static str {
        match self {
            Workload::W12 => "W12",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W4Base => "W4base",
        }
    }

    fn default_n(self) -> usize {
        match self {
            Workload::W12 | Workload::W3 => 1_000_000,
            Workload::W4 | Workload::W4Base => 10_000,
        }
    }
}

const USAGE: &str = "usage: compare <impl> <w12|w3|w4|w4base> [N] [--rt=none|current|multi] [--w4-window=SECS]
       compare suite [--quick]
       compare w4r [N] [--reps=R] [--only=NAME]
impls: tokio-timewheel-hierarchical tokio-timewheel-rounds tokio-timewheel-service tokio-timewheel-service-batch
       tokio-timewheel-service-interval (w4 only) tokio-task tokio-delayqueue";

fn main() {
    let mut positional = Vec::new();
    let mut rt = None;
    let mut window_s = 5.0;
    let mut quick = false;
    let mut reps = 5;
    let mut only = None;
    for arg in std::env::args().skip(1) {
        if let Some(v) = arg.strip_prefix("--rt=") {
            rt = Some(Rt::parse(v).unwrap_or_else(|| fail(&format!("unknown runtime {v:?}"))));
        } else if let Some(v) = arg.strip_prefix("--w4-window=") {
            window_s = v.parse().unwrap_or_else(|_| fail(&format!("bad --w4-window {v:?}")));
        } else if let Some(v) = arg.strip_prefix("--reps=") {
            reps = v.parse().unwrap_or_else(|_| fail(&format!("bad --reps {v:?}")));
        } else if let Some(v) = arg.strip_prefix("--only=") {
            only = Some(v.to_owned());
        } else if arg == "--quick" {
            quick = true;
        } else if !arg.starts_with("--") {
            positional.push(arg);
        }
        // Other --flags (cargo bench adds --bench) are not ours.
    }

    match positional.as_slice() {
        [suite] if suite == "suite" => suite::run(quick),
        [w4r, rest @ ..] if w4r == "w4r" && rest.len() <= 1 => {
            let n = rest.first().map_or(100_000, |n| n.replace('_', "").parse().unwrap_or_else(|_| fail("bad N")));
            w4r::run(n, reps, only.as_deref());
        }
        [imp, workload, rest @ ..] if rest.len() <= 1 => {
            let imp = Impl::parse(imp).unwrap_or_else(|| fail(&format!("unknown implementation {imp:?}")));
            let workload = Workload::ALL
                .into_iter()
                .find(|w| w.arg() == workload)
                .unwrap_or_else(|| fail(&format!("unknown workload {workload:?}")));
            if !imp.supports(workload) {
                fail(&format!("{} does not run {}", imp.name(), workload.arg()));
            }
            let n = match rest.first() {
                Some(n) => n.replace('_', "").parse().unwrap_or_else(|_| fail(&format!("bad N {n:?}"))),
                None => workload.default_n(),
            };
            let idle = IdleWindow { settle: Duration::from_secs(1), window: Duration::from_secs_f64(window_s) };
            let rt = match (imp.default_rt(), rt) {
                (Rt::None, _) => Rt::None,
                (_, Some(Rt::None)) => fail(&format!("{} needs a runtime", imp.name())),
                (default, rt) => rt.unwrap_or(default),
            };
            imp.run(rt, workload, n, idle);
        }
        _ => fail("missing arguments"),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("compare: {msg}\n{USAGE}");
    std::process::exit(2)
}
