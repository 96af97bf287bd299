//! The durable benchmark's report: medians over the repetitions, tokio-timewheel's ratios against each rival,
//! and the targets as PASS/FAIL; printed and written to `target/bench-report/durable.md` (+ `durable.jsonl`).

use crate::inputs::workers;
use crate::results::{self, num, report_dir, Row, Table};
use crate::{Impl, Options};

/// The medians of one run's rows (they all have the same N).
struct Medians {
    all: results::Medians,
    n: usize,
}

impl Medians {
    fn new(rows: &[Row], n: usize) -> Medians {
        Medians { all: results::Medians::new(rows), n }
    }

    fn get(&self, imp: &str, workload: &str, field: &str) -> Option<f64> {
        self.all.get(imp, workload, self.n, field)
    }
}

/// The columns of the table: title, workload, field. Redis CPU per task is the server's CPU time (`INFO cpu`)
/// over the timed phase of D1, D3 (from the first insert to the last acknowledgement) or D4 divided by N, read
/// the same way around every implementation: what a task costs Redis, which does not depend on how busy this
/// shared machine was as the throughput does; lower is better, so a ratio below 1x there favours
/// tokio-timewheel, as in D2.
const COLUMNS: [(&str, &str, &str); 18] = [
    ("D1 tasks/s", "D1", "tasks_per_s"),
    ("D1 Redis CPU µs/task (lower is better)", "D1", "redis_cpu_us_per_task"),
    ("D2 bytes/task", "D2", "redis_bytes_per_task"),
    ("D3 p50 ms", "D3", "late_p50_ms"),
    ("D3 p99 ms", "D3", "late_p99_ms"),
    ("D3 max ms", "D3", "late_max_ms"),
    ("D3 p99 after insert ms", "D3", "late_p99_after_insert_ms"),
    ("D3 dup", "D3", "duplicates"),
    ("D3 early", "D3", "early"),
    ("D3 handled", "D3", "handled"),
    ("D3 wall ms", "D3", "wall_ms"),
    ("D3 Redis CPU µs/task (lower is better)", "D3", "redis_cpu_us_per_task"),
    ("D4 cancels/s", "D4", "cancels_per_s"),
    ("D4 Redis CPU µs/task (lower is better)", "D4", "redis_cpu_us_per_task"),
    ("D7 acks/s", "D7", "acks_per_s"),
    ("D7 Redis CPU µs/task (lower is better)", "D7", "redis_cpu_us_per_task"),
    ("D5 cmds/s", "D5", "commands_per_s"),
    ("D5 client calls/s", "D5", "client_calls_per_s"),
];

/// Columns where tokio-timewheel's cells carry ratios against the rivals.
const RATIO_COLUMNS: [&str; 7] = [
    "tasks_per_s",
    "redis_cpu_us_per_task",
    "redis_bytes_per_task",
    "late_p99_ms",
    "cancels_per_s",
    "commands_per_s",
    "acks_per_s",
];

fn table(m: &Medians) -> Table {
    let rival_pairs = [
        (Impl::Timewheel.name(), Impl::RIVALS.map(Impl::name)),
        (Impl::Timewheel.batch_name(), Impl::RIVALS.map(Impl::batch_name)),
    ];
    let names = Impl::ALL.into_iter().flat_map(|i| [i.name(), i.batch_name()]);
    let header = std::iter::once("impl").chain(COLUMNS.iter().map(|c| c.0)).map(String::from).collect();
    let mut rows = Vec::new();
    for name in names {
        if !m.all.has(name) {
            continue;
        }
        let rivals = rival_pairs.iter().find(|p| p.0 == name).map(|p| p.1);
        let mut row = vec![name.to_string()];
        for (_, workload, field) in COLUMNS {
            let cell = match m.get(name, workload, field) {
                None => "-".to_string(),
                Some(v) => match rivals {
                    Some(rivals) if RATIO_COLUMNS.contains(&field) => {
                        // A rival whose D3 or D7 workers stopped before handling every task has no figure
                        // for the whole run to compare with (its CPU was spent on part of the tasks, and
                        // its D7 rate is the -1 of "no figure").
                        let stopped = |r: &str| {
                            matches!(workload, "D3" | "D7")
                                && m.get(r, workload, "handled") < m.get(name, workload, "handled")
                        };
                        let ratios: Vec<String> = rivals
                            .iter()
                            .map(|r| match m.get(r, workload, field) {
                                Some(b) if b > 0.0 && !stopped(r) => format!("{:.2}x", v / b),
                                _ => "-".into(),
                            })
                            .collect();
                        format!("{} ({})", num(v), ratios.join(" / "))
                    }
                    _ => num(v),
                },
            };
            row.push(cell);
        }
        rows.push(row);
    }
    Table { title: String::new(), header, rows }
}

/// "A few" calls per tick for an idle wheel: one tick call, one wait per idle worker (each blocks for at most a
/// tick), and one for the leader lease's renewal. Judged on the calls clients send (round trips): the commands
/// a script runs inside Redis (INFO commandstats counts those too, about nine for one tick call) are reported
/// beside it.
pub fn d5_few_per_tick() -> f64 {
    workers() as f64 + 2.0
}

/// What an idle wheel's nodes send per tick, counted by `INFO commandstats`: about one tick call by the leader,
/// the bids of the others every quarter lease, and the idle workers' waits and claims (each every third of the
/// lease when no wake-up comes); 1.36 when measured, so 2 leaves room for a busy machine but not for a call per
/// worker and tick.
pub const D5_SENT_PER_TICK: f64 = 2.0;

fn check(label: &str, v: Option<f64>, pass: impl Fn(f64) -> bool, limit: &str) -> (bool, String) {
    match v {
        Some(v) => {
            let ok = pass(v);
            (ok, format!("{label} {} ({limit} {})", num(v), if ok { "ok" } else { "MISSED" }))
        }
        None => (false, format!("{label}: no data")),
    }
}

fn ratio(m: &Medians, a: &str, b: &str, workload: &str, field: &str) -> Option<f64> {
    match (m.get(a, workload, field), m.get(b, workload, field)) {
        // A negative figure is a rival's "no figure" (-1).
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn verdicts(options: &Options, m: &Medians) -> Vec<String> {
    let tw = Impl::Timewheel.name();
    let twb = Impl::Timewheel.batch_name();
    let (ap, apb, bq, bqb) =
        (Impl::Apalis.name(), Impl::Apalis.batch_name(), Impl::Bullmq.name(), Impl::Bullmq.batch_name());
    let (bqr, bqrb, cq) = (Impl::BullmqRust.name(), Impl::BullmqRust.batch_name(), Impl::Chasquimq.name());
    let at_least = |x: f64| move |v: f64| v >= x;
    let d1 = vec![
        check("one call vs BullMQ", ratio(m, tw, bq, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("one call vs apalis-redis", ratio(m, tw, ap, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("batch vs BullMQ addBulk", ratio(m, twb, bqb, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("batch vs apalis-redis push_all", ratio(m, twb, apb, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("one call vs bullmq-official", ratio(m, tw, bqr, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("batch vs bullmq-official add_bulk", ratio(m, twb, bqrb, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("one call vs ChasquiMQ", ratio(m, tw, cq, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
    ];
    let d2 =
        vec![check("bytes/task vs BullMQ", ratio(m, tw, bq, "D2", "redis_bytes_per_task"), |v| v <= 0.5, "<= 0.5x")];
    let tick_limit = options.tick_ms as f64 + 50.0;
    let p99 = m.get(tw, "D3", "late_p99_ms");
    // A rival that did not handle every task has no p99 to compare with: its workers stopped (the table says how
    // many it handled), which counts as beaten.
    let below = |rival: &str| match (p99, m.get(rival, "D3", "late_p99_ms"), m.get(rival, "D3", "handled")) {
        (Some(_), Some(_), Some(h)) if (h as usize) < options.n => {
            (true, format!("vs {rival}: it handled {h:.0} of {} (ok)", options.n))
        }
        (Some(a), Some(b), _) => {
            (a < b, format!("p99 {} vs {rival} {} ({})", num(a), num(b), if a < b { "ok" } else { "MISSED" }))
        }
        _ => (false, format!("p99 vs {rival}: no data")),
    };
    let d3 = vec![
        check("p99 ms", p99, |v| v <= tick_limit, &format!("<= tick + 50 = {tick_limit}")),
        (
            true,
            format!(
                "(p99 of the tasks due after the insert phase: {} ms)",
                m.get(tw, "D3", "late_p99_after_insert_ms").map_or("no data".into(), num)
            ),
        ),
        below(ap),
        below(bq),
        below(bqr),
        check("duplicates", m.get(tw, "D3", "duplicates"), |v| v == 0.0, "= 0"),
        check("early", m.get(tw, "D3", "early"), |v| v == 0.0, "= 0"),
        check("handled", m.get(tw, "D3", "handled"), |v| v as usize == options.n, &format!("= {}", options.n)),
    ];
    let d5 = vec![
        check(
            "client calls per tick",
            m.get(tw, "D5", "client_calls_per_tick"),
            |v| v <= d5_few_per_tick(),
            &format!("<= {}", d5_few_per_tick()),
        ),
        check(
            "script calls and waits (EVALSHA, EVAL, BLPOP) per tick",
            m.get(tw, "D5", "evalsha_eval_blpop_per_tick"),
            |v| v <= D5_SENT_PER_TICK,
            &format!("<= {D5_SENT_PER_TICK}"),
        ),
        (
            true,
            format!(
                "(commands per tick, in-script ones included: {})",
                m.get(tw, "D5", "commands_per_tick").map_or("no data".into(), num)
            ),
        ),
    ];
    [("D1", d1), ("D2", d2), ("D3", d3), ("D5", d5)]
        .into_iter()
        .map(|(id, checks)| {
            let pass = checks.iter().all(|c| c.0);
            let figures: Vec<&str> = checks.iter().map(|c| c.1.as_str()).collect();
            format!("{id}: {} {}", if pass { "PASS" } else { "FAIL" }, figures.join("; "))
        })
        .collect()
}

pub fn write(options: &Options, rows: &[Row]) {
    let m = Medians::new(rows, options.n);
    let table = table(&m);
    let verdicts = verdicts(options, &m);
    let heading = format!(
        "tokio-timewheel durable mode vs apalis-redis, BullMQ, bullmq-official and ChasquiMQ — medians of {} run(s), N = {}, D5 over {} s, \
         tick {} ms x {} slots, {} worker(s) of {} handlers",
        options.reps,
        options.n,
        options.d5_window.as_secs(),
        options.tick_ms,
        options.slots,
        crate::inputs::workers(),
        crate::inputs::concurrency()
    );
    let note = "tokio-timewheel cells: median (ratio vs apalis-redis / BullMQ / bullmq-official / ChasquiMQ, - where \
                that rival has no figure); -batch rows against the \
                rivals' -batch rows; Redis CPU µs/task: INFO cpu over the timed phase / N, lower is better (a ratio \
                below 1x favours tokio-timewheel)";
    print!("\n{heading}\n{note}\n\n{}\n", table.text());
    for v in &verdicts {
        println!("{v}");
    }
    let mut md = format!("# {heading}\n\n{note}\n\n{}\n## Targets\n\n", table.markdown());
    for v in &verdicts {
        md += &format!("- `{v}`\n");
    }
    let dir = report_dir();
    if std::fs::create_dir_all(&dir).is_ok() {
        let raw: String = rows.iter().map(|r| r.line(&[]) + "\n").collect();
        let _ = std::fs::write(dir.join("durable.jsonl"), raw);
        if std::fs::write(dir.join("durable.md"), md).is_ok() {
            eprintln!("wrote {}", dir.join("durable.md").display());
        }
    }
}
