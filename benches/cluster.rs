//! D6: one durable wheel on a 3-primary Redis Cluster, split into 1, 2 and 4 partitions: tasks per
//! second and Redis CPU per task, for scheduling (one call each, 64 in flight) and for the fire
//! path (schedule, tick, claim and acknowledge, 4 workers).
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench cluster                 # N = 20,000, 3 repetitions
//! cargo bench -p tokio-timewheel-benches --bench cluster -- --quick      # N = 2,000, 1 repetition
//! options: --n=N --reps=R --partitions=1,2,4
//! ```
//!
//! Redis CPU is read from every primary's `INFO cpu` (`used_cpu_sys + used_cpu_user` of the
//! server process) before and after each phase: the figure that does not depend on how busy this
//! machine is. The cluster is started by the tests' harness (`tests/support/topology.rs`) on
//! 127.0.0.1, AOF `everysec`, each phase against a wheel of its own. Each measurement prints one
//! JSON line; the end prints the medians and what they project for a cluster of 16 primaries.

#[allow(dead_code)]
#[path = "results.rs"]
mod results;
// The tests' support layer, whose deployments need this crate's `redis` feature (on by default).
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use results::{num, Medians, Row, Table};
use support::topology::Cluster;
use tokio::task::JoinSet;
use tokio_timewheel::durable::{DurableScheduler, Task};

/// How many schedules are in flight at once in the one-call-each phase.
const IN_FLIGHT: usize = 64;
/// Workers (of 16 handlers each) in the fire phase.
const WORKERS: usize = 4;

struct Options {
    n: usize,
    reps: usize,
    partitions: Vec<usize>,
}

fn options() -> Options {
    let mut o = Options { n: 20_000, reps: 3, partitions: vec![1, 2, 4] };
    for arg in std::env::args().skip(1) {
        if arg == "--quick" {
            o.n = 2_000;
            o.reps = 1;
        } else if let Some(v) = arg.strip_prefix("--n=") {
            o.n = v.parse().expect("--n=N");
        } else if let Some(v) = arg.strip_prefix("--reps=") {
            o.reps = v.parse().expect("--reps=R");
        } else if let Some(v) = arg.strip_prefix("--partitions=") {
            o.partitions = v.split(',').map(|p| p.parse().expect("--partitions=1,2,4")).collect();
        }
    }
    o
}

/// Each primary's CPU seconds so far (system + user), by port.
fn cpu(cluster: &Cluster) -> BTreeMap<u16, f64> {
    cluster
        .primaries()
        .into_iter()
        .map(|node| {
            let info = node.command(&["INFO", "cpu"]);
            let text = info.as_str().unwrap_or_default().to_string();
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            (node.port(), field("used_cpu_sys") + field("used_cpu_user"))
        })
        .collect()
}

/// Each primary's time in commands so far (`INFO commandstats`, every command's `usec`, the
/// scripts' inner commands counted in the script's; the benchmark's own `INFO` left out), in
/// seconds, by port: Redis's work for the clients, without the cluster bus and the background,
/// but timed on the wall clock, so a loaded machine stretches it (printed beside the CPU time).
fn command_time(cluster: &Cluster) -> BTreeMap<u16, f64> {
    cluster
        .primaries()
        .into_iter()
        .map(|node| {
            let info = node.command(&["INFO", "commandstats"]);
            let usec: f64 = info
                .as_str()
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
                .filter_map(|l| l.split(',').find_map(|f| f.strip_prefix("usec=")))
                .filter_map(|v| v.parse::<f64>().ok())
                .sum();
            (node.port(), usec / 1e6)
        })
        .collect()
}

/// CPU microseconds per task spent between two readings, in all and on the busiest primary.
fn cpu_per_task(before: &BTreeMap<u16, f64>, after: &BTreeMap<u16, f64>, n: usize) -> (f64, f64) {
    let spent: Vec<f64> = after.iter().map(|(port, s)| s - before.get(port).copied().unwrap_or(0.0)).collect();
    let total: f64 = spent.iter().sum();
    let busiest = spent.iter().copied().fold(0.0, f64::max);
    (total * 1e6 / n as f64, busiest * 1e6 / n as f64)
}

async fn connect(cluster: &Cluster, name: &str, partitions: usize) -> DurableScheduler {
    DurableScheduler::cluster(cluster.seed_urls(), name)
        .tick(Duration::from_millis(100))
        .slots(600)
        .partitions(partitions)
        .connect()
        .await
        .expect("connect to the cluster")
}

/// Schedules `n` tasks an hour away, one call each with [`IN_FLIGHT`] in flight.
async fn schedule_phase(cluster: &Cluster, name: &str, partitions: usize, n: usize) -> Row {
    let timers = connect(cluster, name, partitions).await;
    let (before, before_cmd) = (cpu(cluster), command_time(cluster));
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut callers = JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let (timers, next) = (timers.clone(), next.clone());
        callers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                timers
                    .schedule(format!("order-{i}"), Duration::from_secs(3600), vec![7u8; 32])
                    .await
                    .expect("schedule");
            }
        });
    }
    while callers.join_next().await.is_some() {}
    let took = started.elapsed();
    let (cpu_us, busiest_us) = cpu_per_task(&before, &cpu(cluster), n);
    let (cmd_us, _) = cpu_per_task(&before_cmd, &command_time(cluster), n);
    Row::new(
        &format!("partitions-{partitions}"),
        "D6-schedule",
        n,
        &[
            ("tasks_per_s", n as f64 / took.as_secs_f64()),
            ("command_us_per_task", cmd_us),
            ("redis_cpu_us_per_task", cpu_us),
            ("busiest_primary_cpu_us_per_task", busiest_us),
        ],
    )
}

/// Schedules `n` tasks due within a second (batched) and lets [`WORKERS`] workers drain them:
/// the whole path, schedule to acknowledgement.
async fn fire_phase(cluster: &Cluster, name: &str, partitions: usize, n: usize) -> Row {
    let timers = connect(cluster, name, partitions).await;
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let done = done.clone();
            timers.run(move |_task: Task| {
                done.fetch_add(1, Ordering::Relaxed);
                std::future::ready(Ok::<(), std::io::Error>(()))
            })
        })
        .collect();
    let (before, before_cmd) = (cpu(cluster), command_time(cluster));
    let started = Instant::now();
    let items = (0..n).map(|i| (format!("order-{i}"), Duration::from_millis((i % 1000) as u64), vec![7u8; 32]));
    assert!(timers.schedule_many(items).await.expect("schedule_many").iter().all(Result::is_ok));
    let limit = started + Duration::from_secs(120);
    while done.load(Ordering::Relaxed) < n && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    let handled = done.load(Ordering::Relaxed);
    // Let the last acknowledgements land before the CPU is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (cpu_us, busiest_us) = cpu_per_task(&before, &cpu(cluster), n);
    let (cmd_us, _) = cpu_per_task(&before_cmd, &command_time(cluster), n);
    for w in workers {
        w.shutdown().await;
    }
    Row::new(
        &format!("partitions-{partitions}"),
        "D6-fire",
        n,
        &[
            ("tasks_per_s", handled as f64 / took.as_secs_f64()),
            ("command_us_per_task", cmd_us),
            ("redis_cpu_us_per_task", cpu_us),
            ("busiest_primary_cpu_us_per_task", busiest_us),
            ("handled", handled as f64),
        ],
    )
}

fn main() {
    let o = options();
    let Some(cluster) = Cluster::start(3, 0) else {
        eprintln!("no redis-server or redis-cli: D6 needs a cluster (apt-get install -y redis-server redis-tools)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut rows = Vec::new();
    for rep in 0..o.reps {
        // Rotated order, so that no partition count always runs first.
        let mut order = o.partitions.clone();
        let len = order.len();
        order.rotate_left(rep % len);
        for &p in &order {
            for row in [
                rt.block_on(schedule_phase(&cluster, &format!("d6s-{rep}-{p}"), p, o.n)),
                rt.block_on(fire_phase(&cluster, &format!("d6f-{rep}-{p}"), p, o.n)),
            ] {
                println!("{}", row.line(&[]));
                rows.push(row);
            }
        }
    }
    let medians = Medians::new(&rows);
    let fields = ["tasks_per_s", "command_us_per_task", "redis_cpu_us_per_task", "busiest_primary_cpu_us_per_task"];
    let mut table = Table {
        title: format!("D6, medians of {} repetition(s), N = {}", o.reps, o.n),
        header: ["workload", "partitions"].iter().chain(&fields).map(|s| s.to_string()).collect(),
        rows: Vec::new(),
    };
    for workload in ["D6-schedule", "D6-fire"] {
        for &p in &o.partitions {
            let imp = format!("partitions-{p}");
            let mut row = vec![workload.to_string(), p.to_string()];
            row.extend(fields.iter().map(|f| medians.get(&imp, workload, o.n, f).map_or("-".into(), num)));
            table.rows.push(row);
        }
    }
    println!("\n{}", table.text());
    for workload in ["D6-schedule", "D6-fire"] {
        // CPU time, not command time: `INFO commandstats` times commands on the wall clock, which
        // a loaded machine stretches; `INFO cpu` counts the process's CPU (background included).
        let Some(one) = medians.get("partitions-1", workload, o.n, "redis_cpu_us_per_task") else { continue };
        let per_core = 1e6 / one;
        println!(
            "{workload}: {one:.1} us of Redis CPU a task: one primary core carries at most about {per_core:.0} \
             tasks/s; a wheel of 16 or more partitions on 16 primaries about {:.0} tasks/s (one partition: {per_core:.0}, \
             whatever the cluster)",
            16.0 * per_core
        );
    }
}
