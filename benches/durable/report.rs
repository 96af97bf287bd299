//! The durable benchmark's report: medians over the repetitions, tokio-timewheel's ratios against each rival,
//! and the targets as PASS/FAIL; printed and written to `target/bench-report/durable.md` (+ `durable.jsonl`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::inputs::WORKERS;
use crate::{Impl, Options};

/// One result line.
pub struct Row {
    imp: String,
    workload: String,
    n: usize,
    fields: Vec<(String, f64)>,
}

impl Row {
    pub fn new(imp: &str, workload: &str, n: usize, fields: &[(&str, f64)]) -> Row {
        let fields = fields.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Row { imp: imp.to_string(), workload: workload.to_string(), n, fields }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Parses a line of `durable.jsonl` (or of the benchmark's stdout).
    pub fn parse(line: &str) -> Option<Row> {
        let body = line.trim().strip_prefix('{')?.strip_suffix('}')?;
        let (mut imp, mut workload, mut n, mut fields) = (None, None, None, Vec::new());
        // Values are names or numbers, never with commas or quotes inside, so splitting is enough.
        for pair in body.split(',') {
            let (key, value) = pair.split_once(':')?;
            let key = key.trim().strip_prefix('"')?.strip_suffix('"')?;
            let text = value.trim().strip_prefix('"').and_then(|v| v.strip_suffix('"'));
            match (key, text) {
                ("impl", Some(v)) => imp = Some(v.to_string()),
                ("workload", Some(v)) => workload = Some(v.to_string()),
                ("n", None) => n = value.trim().parse().ok(),
                (_, None) => fields.push((key.to_string(), value.trim().parse().ok()?)),
                _ => {}
            }
        }
        Some(Row { imp: imp?, workload: workload?, n: n?, fields })
    }

    fn json(&self) -> String {
        let mut line = format!("{{\"impl\":\"{}\",\"workload\":\"{}\",\"n\":{}", self.imp, self.workload, self.n);
        for (k, v) in &self.fields {
            line.push_str(&format!(",\"{k}\":{v}"));
        }
        line + "}"
    }
}

/// Medians by (implementation, workload, field), and how many samples each has.
struct Medians(BTreeMap<(String, String, String), (f64, usize)>);

impl Medians {
    fn new(rows: &[Row]) -> Medians {
        let mut samples: BTreeMap<_, Vec<f64>> = BTreeMap::new();
        for row in rows {
            for (field, value) in &row.fields {
                samples.entry((row.imp.clone(), row.workload.clone(), field.clone())).or_default().push(*value);
            }
        }
        Medians(
            samples
                .into_iter()
                .map(|(key, mut v)| {
                    v.sort_by(f64::total_cmp);
                    let mid = v.len() / 2;
                    let median = if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 };
                    (key, (median, v.len()))
                })
                .collect(),
        )
    }

    fn get(&self, imp: &str, workload: &str, field: &str) -> Option<f64> {
        self.0.get(&(imp.to_string(), workload.to_string(), field.to_string())).map(|m| m.0)
    }
}

fn num(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

/// The columns of the table: title, workload, field.
const COLUMNS: [(&str, &str, &str); 13] = [
    ("D1 tasks/s", "D1", "tasks_per_s"),
    ("D2 bytes/task", "D2", "redis_bytes_per_task"),
    ("D3 p50 ms", "D3", "late_p50_ms"),
    ("D3 p99 ms", "D3", "late_p99_ms"),
    ("D3 max ms", "D3", "late_max_ms"),
    ("D3 p99 after insert ms", "D3", "late_p99_after_insert_ms"),
    ("D3 dup", "D3", "duplicates"),
    ("D3 early", "D3", "early"),
    ("D3 handled", "D3", "handled"),
    ("D3 wall ms", "D3", "wall_ms"),
    ("D4 cancels/s", "D4", "cancels_per_s"),
    ("D5 cmds/s", "D5", "commands_per_s"),
    ("D5 client calls/s", "D5", "client_calls_per_s"),
];

/// Columns where tokio-timewheel's cells carry ratios against the rivals.
const RATIO_COLUMNS: [&str; 5] =
    ["tasks_per_s", "redis_bytes_per_task", "late_p99_ms", "cancels_per_s", "commands_per_s"];

fn table(m: &Medians) -> Vec<Vec<String>> {
    let rival_pairs = [
        (Impl::Timewheel.name(), [Impl::Apalis.name(), Impl::Bullmq.name()]),
        (Impl::Timewheel.batch_name(), [Impl::Apalis.batch_name(), Impl::Bullmq.batch_name()]),
    ];
    let names = Impl::ALL.into_iter().flat_map(|i| [i.name(), i.batch_name()]);
    let mut rows = vec![std::iter::once("impl").chain(COLUMNS.iter().map(|c| c.0)).map(String::from).collect()];
    for name in names {
        if !m.0.keys().any(|k| k.0 == name) {
            continue;
        }
        let rivals = rival_pairs.iter().find(|p| p.0 == name).map(|p| p.1);
        let mut row = vec![name.to_string()];
        for (_, workload, field) in COLUMNS {
            let cell = match m.get(name, workload, field) {
                None => "-".to_string(),
                Some(v) => match rivals {
                    Some(rivals) if RATIO_COLUMNS.contains(&field) => {
                        let ratios: Vec<String> = rivals
                            .iter()
                            .map(|r| match m.get(r, workload, field) {
                                Some(b) if b != 0.0 => format!("{:.2}x", v / b),
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
    rows
}

fn text(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (s, &w))| if c == 0 { format!("{s:<w$}") } else { format!("{s:>w$}") })
                .collect();
            cells.join("  ").trim_end().to_string() + "\n"
        })
        .collect()
}

fn markdown(rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}\n", rows[0].join(" | "), "---|".repeat(rows[0].len()));
    for r in &rows[1..] {
        out += &format!("| {} |\n", r.join(" | "));
    }
    out
}

/// "A few" calls per tick for an idle wheel: one tick call, one wait per idle worker (each blocks for at most a
/// tick), and one for the leader lease's renewal. Judged on the calls clients send (round trips): the commands
/// a script runs inside Redis (INFO commandstats counts those too, about nine for one tick call) are reported
/// beside it.
pub const D5_FEW_PER_TICK: f64 = WORKERS as f64 + 2.0;

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
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

fn verdicts(options: &Options, m: &Medians) -> Vec<String> {
    let tw = Impl::Timewheel.name();
    let twb = Impl::Timewheel.batch_name();
    let (ap, apb, bq, bqb) =
        (Impl::Apalis.name(), Impl::Apalis.batch_name(), Impl::Bullmq.name(), Impl::Bullmq.batch_name());
    let at_least = |x: f64| move |v: f64| v >= x;
    let d1 = vec![
        check("one call vs BullMQ", ratio(m, tw, bq, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("one call vs apalis-redis", ratio(m, tw, ap, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("batch vs BullMQ addBulk", ratio(m, twb, bqb, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
        check("batch vs apalis-redis push_all", ratio(m, twb, apb, "D1", "tasks_per_s"), at_least(2.0), ">= 2x"),
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
        check("duplicates", m.get(tw, "D3", "duplicates"), |v| v == 0.0, "= 0"),
        check("early", m.get(tw, "D3", "early"), |v| v == 0.0, "= 0"),
        check("handled", m.get(tw, "D3", "handled"), |v| v as usize == options.n, &format!("= {}", options.n)),
    ];
    let d5 = vec![
        check(
            "client calls per tick",
            m.get(tw, "D5", "client_calls_per_tick"),
            |v| v <= D5_FEW_PER_TICK,
            &format!("<= {D5_FEW_PER_TICK}"),
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

/// `<target dir>/bench-report`, found from this executable's path (`<target>/release/deps/durable-*`).
fn report_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current executable");
    exe.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| "target".into()).join("bench-report")
}

/// How many repetitions the rows hold: the most samples of any one figure.
pub fn repetitions(rows: &[Row]) -> usize {
    Medians::new(rows).0.values().map(|m| m.1).max().unwrap_or(0)
}

/// The rows of earlier runs' `durable.jsonl` files (`--report-from=a.jsonl,b.jsonl`), to report them together.
pub fn read(paths: &str) -> Vec<Row> {
    paths
        .split(',')
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("read {p}: {e}"))
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| Row::parse(&l))
        .collect()
}

pub fn write(options: &Options, rows: &[Row]) {
    let m = Medians::new(rows);
    let table = table(&m);
    let verdicts = verdicts(options, &m);
    let heading = format!(
        "tokio-timewheel durable mode vs apalis-redis and BullMQ — medians of {} run(s), N = {}, D5 over {} s, \
         tick {} ms x {} slots",
        options.reps,
        options.n,
        options.d5_window.as_secs(),
        options.tick_ms,
        options.slots
    );
    let note = "tokio-timewheel cells: median (ratio vs apalis-redis / ratio vs BullMQ); -batch rows against the \
                rivals' -batch rows";
    print!("\n{heading}\n{note}\n\n{}\n", text(&table));
    for v in &verdicts {
        println!("{v}");
    }
    let mut md = format!("# {heading}\n\n{note}\n\n{}\n## Targets\n\n", markdown(&table));
    for v in &verdicts {
        md += &format!("- `{v}`\n");
    }
    let dir = report_dir();
    if std::fs::create_dir_all(&dir).is_ok() {
        let raw: String = rows.iter().map(|r| r.json() + "\n").collect();
        let _ = std::fs::write(dir.join("durable.jsonl"), raw);
        if std::fs::write(dir.join("durable.md"), md).is_ok() {
            eprintln!("wrote {}", dir.join("durable.md").display());
        }
    }
}
