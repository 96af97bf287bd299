//! The suite's report: medians with ratios against both rivals, the targets' verdicts, on stderr-free stdout as
//! text and in `report.md`, and `w1_insert.svg` drawn by hand.

use std::fmt::Write as _;
use std::path::Path;

use crate::results::{self, num, Row, Table};
use crate::suite::{Config, REPETITIONS};
use crate::{Impl, Workload};

/// The two rivals every tokio-timewheel figure is compared with.
const RIVALS: [Impl; 2] = [Impl::TokioTask, Impl::DelayQueue];

/// Medians over the repetitions, by implementation, workload name, N and field.
struct Medians(results::Medians);

impl Medians {
    fn new(rows: &[Row]) -> Self {
        Medians(results::Medians::new(rows))
    }

    fn get(&self, imp: Impl, workload: &str, n: usize, field: &str) -> Option<f64> {
        self.0.get(imp.name(), workload, n, field)
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), num)
}

/// `value (ratio vs tokio-task / ratio vs DelayQueue)` (no `|`, which would split a markdown cell) for tokio-timewheel implementations, the plain value for rivals.
fn with_ratios(m: &Medians, imp: Impl, workload: &str, n: usize, field: &str) -> String {
    let Some(v) = m.get(imp, workload, n, field) else {
        return "-".to_string();
    };
    if RIVALS.contains(&imp) {
        return num(v);
    }
    let ratios: Vec<String> = RIVALS
        .iter()
        .map(|&r| match m.get(r, workload, n, field) {
            Some(base) if base != 0.0 => format!("{:.2}x", v / base),
            _ => "-".to_string(),
        })
        .collect();
    format!("{} ({})", num(v), ratios.join(" / "))
}

const RATIO_NOTE: &str = "tokio-timewheel cells: median (ratio vs tokio-task / ratio vs tokio-delayqueue)";

fn tables(config: &Config, m: &Medians) -> Vec<Table> {
    let w12_impls: Vec<Impl> = Impl::ALL.into_iter().filter(|i| i.supports(Workload::W12)).collect();
    let w12_metrics = [
        ("W1 insert: wall ns per timer", "W1", "ns_per_insert"),
        ("W1 insert: CPU ns per timer", "W1", "cpu_ns_per_insert"),
        ("W1 insert: resident bytes per pending timer", "W1", "rss_bytes_per_timer"),
        ("W2 cancel: wall ns per timer", "W2", "ns_per_cancel"),
        ("W2 cancel: CPU ns per timer", "W2", "cpu_ns_per_cancel"),
        ("W1 round 2 (allocator warm): wall ns per timer", "W1r2", "ns_per_insert"),
        ("W1 round 2: resident bytes per pending timer", "W1r2", "rss_bytes_per_timer"),
        ("W2 round 2: wall ns per cancel", "W2r2", "ns_per_cancel"),
    ];
    let mut tables = Vec::new();
    for (title, workload, field) in w12_metrics {
        let mut header = vec!["impl".to_string()];
        header.extend(config.sizes.iter().map(|&n| format!("N={}", short(n))));
        let rows = w12_impls
            .iter()
            .map(|&imp| {
                let mut row = vec![imp.name().to_string()];
                row.extend(config.sizes.iter().map(|&n| with_ratios(m, imp, workload, n, field)));
                row
            })
            .collect();
        tables.push(Table { title: format!("{title} — {RATIO_NOTE}"), header, rows });
    }

    let n = config.w3_n;
    let header =
        ["impl", "fired", "early", "all fired ms", "insert ms", "CPU ms", "p50 ms", "p99 ms", "p99.9 ms", "max ms"];
    let rows = Impl::ALL
        .into_iter()
        .filter(|i| i.supports(Workload::W3))
        .map(|imp| {
            let get = |f| opt(m.get(imp, "W3", n, f));
            let count = |f| m.get(imp, "W3", n, f).map_or("-".to_string(), |v| format!("{v:.0}"));
            vec![
                imp.name().to_string(),
                count("fired"),
                count("early_fires"),
                get("wall_ms_all_fired"),
                get("insert_phase_ms"),
                with_ratios(m, imp, "W3", n, "cpu_ms"),
                get("late_p50_ms"),
                with_ratios(m, imp, "W3", n, "late_p99_ms"),
                get("late_p999_ms"),
                get("late_max_ms"),
            ]
        })
        .collect();
    tables.push(Table {
        title: format!("W3 fire, N={} — lateness in ms; {RATIO_NOTE}", short(n)),
        header: header.map(String::from).to_vec(),
        rows,
    });

    let n = config.w4_n;
    let rows = Impl::ALL
        .into_iter()
        .filter(|i| i.supports(Workload::W4))
        .map(|imp| {
            vec![
                imp.name().to_string(),
                imp.default_rt().name().to_string(),
                opt(m.get(imp, "W4", n, "cpu_ms")),
                opt(m.get(imp, "W4base", n, "cpu_ms")),
            ]
        })
        .collect();
    tables.push(Table {
        title: format!(
            "W4 idle: CPU ms over {} s with {} one-hour timers (W4base: the same runtime, no timers)",
            config.w4_window_s,
            short(n)
        ),
        header: ["impl", "runtime", "W4 CPU ms", "W4base CPU ms"].map(String::from).to_vec(),
        rows,
    });
    tables
}

/// One target's verdict: it passes if every check does.
struct Verdict {
    id: &'static str,
    what: String,
    checks: Vec<(bool, String)>,
}

impl Verdict {
    fn line(&self) -> String {
        let pass = !self.checks.is_empty() && self.checks.iter().all(|c| c.0);
        let figures: Vec<&str> = self.checks.iter().map(|c| c.1.as_str()).collect();
        format!("{} {}: {} {}", self.id, self.what, if pass { "PASS" } else { "FAIL" }, figures.join("; "))
    }
}

/// `label a/b = r x (<= limit)`, passing if `a <= limit * b`; missing data fails.
fn ratio_check(label: &str, a: Option<f64>, b: Option<f64>, limit: f64) -> (bool, String) {
    match (a, b) {
        (Some(a), Some(b)) => {
            let ratio = if b != 0.0 { format!("{:.2}x", a / b) } else { "inf".to_string() };
            let pass = a <= limit * b;
            let mark = if pass { "ok" } else { "MISSED" };
            (pass, format!("{label} {}/{} = {ratio} (<= {limit}x {mark})", num(a), num(b)))
        }
        _ => (false, format!("{label}: no data")),
    }
}

fn limit_check(label: &str, v: Option<f64>, limit: f64, unit: &str) -> (bool, String) {
    match v {
        Some(v) => {
            let pass = v <= limit;
            let mark = if pass { "ok" } else { "MISSED" };
            (pass, format!("{label} {}{unit} (<= {limit}{unit} {mark})", num(v)))
        }
        None => (false, format!("{label}: no data")),
    }
}

fn verdicts(config: &Config, m: &Medians) -> Vec<Verdict> {
    use Impl::*;
    let n = config.target_n;
    let w12 = |imp, workload, field| m.get(imp, workload, n, field);
    let at = short(n);
    let t2_sizes = if config.quick { vec![10_000, 100_000] } else { config.sizes.clone() };
    let (t2_small, t2_large) = (t2_sizes[0], *t2_sizes.last().expect("sizes"));
    let w3 = |imp, field| m.get(imp, "W3", config.w3_n, field);
    let w4 = |imp, workload| m.get(imp, workload, config.w4_n, "cpu_ms");
    // W1 insert time, W2 cancel time and W1 bytes of `ours` against `rival`, each under its limit.
    let w12_checks = |ours, rival, [insert, cancel, bytes]: [f64; 3]| {
        let checks = [
            ("W1 ns/insert", "W1", "ns_per_insert", insert),
            ("W2 ns/cancel", "W2", "ns_per_cancel", cancel),
            ("bytes/timer", "W1", "rss_bytes_per_timer", bytes),
        ];
        let check = |(what, workload, field, limit)| {
            ratio_check(what, w12(ours, workload, field), w12(rival, workload, field), limit)
        };
        checks.into_iter().map(check).collect::<Vec<_>>()
    };
    let interval = w4(ServiceInterval, "W4").map_or("-".into(), num);
    // What the key map alone costs per insert, against DelayQueue's whole insert: the floor under T4.
    let floor = match (w12(KeyMapFloor, "W1", "ns_per_insert"), w12(DelayQueue, "W1", "ns_per_insert")) {
        (Some(f), Some(d)) if d > 0.0 => format!("(the key map alone, floor-keymap: {} ns = {:.2}x)", num(f), f / d),
        _ => "(floor-keymap: no data)".into(),
    };
    // The same workload through `schedule_many`, for comparison: T5 itself is judged on one call per timer.
    let batched = match (w3(ServiceBatch, "late_p99_ms"), w3(ServiceBatch, "cpu_ms"), w3(DelayQueue, "cpu_ms")) {
        (Some(p99), Some(cpu), Some(d)) if d > 0.0 => {
            format!("(schedule_many: p99 {} ms, CPU ms {}/{} = {:.2}x)", num(p99), num(cpu), num(d), cpu / d)
        }
        _ => "(schedule_many: no data)".into(),
    };
    vec![
        Verdict {
            id: "T1",
            what: format!("pure hierarchical vs DelayQueue at N={at}"),
            checks: w12_checks(Hierarchical, DelayQueue, [0.5, 0.33, 0.75]),
        },
        Verdict {
            id: "T2",
            what: format!("pure hierarchical W1 ns/insert at N={} vs N={}", short(t2_large), short(t2_small)),
            checks: vec![ratio_check(
                "W1 ns/insert",
                m.get(Hierarchical, "W1", t2_large, "ns_per_insert"),
                m.get(Hierarchical, "W1", t2_small, "ns_per_insert"),
                1.5,
            )],
        },
        Verdict {
            id: "T3",
            what: format!("service (one call per timer) vs tokio-task at N={at}"),
            checks: w12_checks(Service, TokioTask, [0.33, 0.5, 0.25]),
        },
        Verdict {
            id: "T4",
            what: format!("service batch vs DelayQueue at N={at}"),
            checks: vec![
                ratio_check(
                    "W1 ns/timer",
                    w12(ServiceBatch, "W1", "ns_per_insert"),
                    w12(DelayQueue, "W1", "ns_per_insert"),
                    1.0,
                ),
                (true, floor),
            ],
        },
        Verdict {
            id: "T5",
            what: format!("W3 through the service at N={}", short(config.w3_n)),
            checks: vec![
                match w3(Service, "fired") {
                    Some(f) => (f as usize == config.w3_n, format!("fired {}/{}", f as usize, config.w3_n)),
                    None => (false, "fired: no data".to_string()),
                },
                match w3(Service, "early_fires") {
                    Some(e) => (e == 0.0, format!("early fires {e:.0}")),
                    None => (false, "early fires: no data".to_string()),
                },
                limit_check("p99 lateness", w3(Service, "late_p99_ms"), 5.0, " ms"),
                ratio_check("CPU ms", w3(Service, "cpu_ms"), w3(DelayQueue, "cpu_ms"), 1.0),
                (true, batched),
            ],
        },
        Verdict {
            id: "T6",
            what: format!(
                "W4 idle through the service (NextDeadline) vs its bare runtime, {} timers, {} s",
                short(config.w4_n),
                config.w4_window_s
            ),
            checks: vec![
                ratio_check("CPU ms", w4(Service, "W4"), w4(Service, "W4base"), 2.0),
                (true, format!("(Advance::Interval: {interval} ms)")),
            ],
        },
    ]
}

/// 10000 -> "10K", 1000000 -> "1M".
fn short(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}

/// Prints the tables and targets, and writes `report.md` and `w1_insert.svg` into `dir`.
pub fn write(config: &Config, rows: &[Row], dir: &Path) {
    let m = Medians::new(rows);
    let tables = tables(config, &m);
    let verdicts = verdicts(config, &m);
    let mode =
        if config.quick { "quick: N = 100K everywhere, W4 window 2 s; T2 compares 100K with 10K" } else { "full" };
    let heading = format!("tokio-timewheel comparison — medians of {REPETITIONS} runs ({mode})");

    let mut text = format!("\n{heading}\n\n");
    for t in &tables {
        text += &t.text();
        text.push('\n');
    }
    for v in &verdicts {
        text += &v.line();
        text.push('\n');
    }
    print!("{text}");

    let mut md = format!("# {heading}\n\n");
    for t in &tables {
        md += &t.markdown();
        md.push('\n');
    }
    md += "## Targets\n\n";
    for v in &verdicts {
        md += &format!("- `{}`\n", v.line());
    }
    md += "\n![W1 ns per insert against N](w1_insert.svg)\n";
    std::fs::write(dir.join("report.md"), md).expect("write report.md");
    std::fs::write(dir.join("w1_insert.svg"), svg_w1(&m)).expect("write w1_insert.svg");
    eprintln!("wrote {}", dir.join("report.md").display());
}

/// W1 ns/insert against N, both axes logarithmic, one polyline per implementation.
fn svg_w1(m: &Medians) -> String {
    const COLORS: [&str; 6] = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#7f7f7f"];
    let (w, h) = (820.0, 480.0);
    let (left, right, top, bottom) = (70.0, 600.0, 40.0, 420.0);
    let impls: Vec<Impl> = Impl::ALL.into_iter().filter(|i| i.supports(Workload::W12)).collect();
    // Every N measured, which in quick mode includes T2's 10K point beside the suite's sizes.
    let sizes = m.0.sizes("W1");
    let series: Vec<(Impl, Vec<(f64, f64)>)> = impls
        .iter()
        .map(|&imp| {
            let points = sizes
                .iter()
                .filter_map(|&n| Some((n as f64, m.get(imp, "W1", n, "ns_per_insert")?)))
                .filter(|&(_, v)| v > 0.0)
                .collect();
            (imp, points)
        })
        .collect();

    // Axes span whole decades around the data (x: at least the 10K..10M the full suite uses).
    let xs = sizes.iter().map(|&n| (n as f64).log10());
    let x_lo = xs.clone().fold(4.0, f64::min).floor();
    let x_hi = xs.fold(7.0, f64::max).ceil();
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|&(_, v)| v.log10()));
    let y_lo = ys.clone().fold(f64::INFINITY, f64::min).floor().min(1.0);
    let y_hi = ys.fold(f64::NEG_INFINITY, f64::max).ceil().max(y_lo + 1.0);
    // Pixel coordinates, rounded to a tenth so the file stays readable.
    let round = |p: f64| (p * 10.0).round() / 10.0;
    let px = |n: f64| round(left + (n.log10() - x_lo) / (x_hi - x_lo) * (right - left));
    let py = |v: f64| round(bottom - (v.log10() - y_lo) / (y_hi - y_lo) * (bottom - top));

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">W1 insert: wall ns per timer against N (log-log, medians of {REPETITIONS})</text>"#,
        (left + right) / 2.0
    );
    // Grid and tick labels: every decade on both axes, with 2x and 5x minor lines on y.
    for d in x_lo as i32..=x_hi as i32 {
        let x = px(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#ddd"/>"##);
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            bottom + 18.0,
            short(10usize.pow(d as u32))
        );
    }
    for d in y_lo as i32..=y_hi as i32 {
        for (mult, major) in [(1.0, true), (2.0, false), (5.0, false)] {
            let v = mult * 10f64.powi(d);
            if v.log10() > y_hi + 1e-9 {
                continue;
            }
            let y = py(v);
            let stroke = if major { "#ccc" } else { "#eee" };
            let _ = writeln!(s, r#"<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="{stroke}"/>"#);
            let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, left - 6.0, y + 4.0, v);
        }
    }
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{top}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        right - left,
        bottom - top
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">N (timers pending)</text>"#,
        (left + right) / 2.0,
        bottom + 40.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">ns per insert</text>"#,
        (top + bottom) / 2.0,
        (top + bottom) / 2.0
    );
    for (k, (imp, points)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let path: Vec<String> = points.iter().map(|&(n, v)| format!("{},{}", px(n), py(v))).collect();
        let _ = writeln!(s, r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#, path.join(" "));
        for &(n, v) in points {
            let _ = writeln!(
                s,
                r#"<circle cx="{}" cy="{}" r="3.5" fill="{color}"><title>{} N={}: {} ns</title></circle>"#,
                px(n),
                py(v),
                imp.name(),
                short(n as usize),
                num(v)
            );
        }
        let ly = top + 10.0 + 22.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            right + 20.0,
            right + 44.0,
            right + 52.0,
            ly + 4.0,
            imp.name()
        );
    }
    s.push_str("</svg>\n");
    s
}
