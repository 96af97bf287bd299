//! What the benchmarks share about their results: one flat JSON object per measurement (a line on stdout, and a
//! line of the `.jsonl` files the reports keep), the medians over repetitions, the tables they are printed in,
//! and the directory the reports go to.
//!
//! A line reads `{"impl":"tokio-timewheel-service","workload":"W1","n":1000000,"ns_per_insert":112.5,...}`: the
//! implementation, the workload and N, then the figures, all numbers. Other string fields (`"rt":"current"`) say
//! how a figure was taken and are not figures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

/// One measurement: one line.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub imp: String,
    pub workload: String,
    pub n: usize,
    /// The figures, in the order they were printed.
    pub fields: Vec<(String, f64)>,
}

impl Row {
    pub fn new(imp: &str, workload: &str, n: usize, fields: &[(&str, f64)]) -> Row {
        let fields = fields.iter().map(|&(name, value)| (name.to_string(), value)).collect();
        Row { imp: imp.to_string(), workload: workload.to_string(), n, fields }
    }

    /// Reads a line; `None` when it is not a JSON object with `impl`, `workload` and `n`.
    pub fn parse(line: &str) -> Option<Row> {
        let mut object = object(line)?;
        let text = |value: Value| value.as_str().map(String::from);
        let imp = text(object.remove("impl")?)?;
        let workload = text(object.remove("workload")?)?;
        let n = object.remove("n")?.as_u64()? as usize;
        Some(Row { imp, workload, n, fields: numbers(object) })
    }

    /// The line, with `extra` string fields (such as `("rt", "current")`) after `n`. A figure that is not finite
    /// is written as -1 (JSON has no NaN), and every figure is rounded to three decimals.
    pub fn line(&self, extra: &[(&str, &str)]) -> String {
        let mut object = Map::new();
        object.insert("impl".into(), self.imp.clone().into());
        object.insert("workload".into(), self.workload.clone().into());
        object.insert("n".into(), self.n.into());
        for &(name, value) in extra {
            object.insert(name.into(), value.into());
        }
        for (name, value) in &self.fields {
            let value = if value.is_finite() { (value * 1000.0).round() / 1000.0 } else { -1.0 };
            let number = match value.fract() == 0.0 && value.abs() < 1e15 {
                true => Number::from(value as i64),
                false => Number::from_f64(value).expect("finite"),
            };
            object.insert(name.clone(), Value::Number(number));
        }
        Value::Object(object).to_string()
    }
}

/// The numbers of a flat JSON object, in their order (what `durable/bullmq/bench.mjs` prints: figures only).
pub fn figures(line: &str) -> Option<Vec<(String, f64)>> {
    Some(numbers(object(line)?))
}

fn object(line: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(line.trim()).ok()? {
        Value::Object(object) => Some(object),
        _ => None,
    }
}

fn numbers(object: Map<String, Value>) -> Vec<(String, f64)> {
    object.into_iter().filter_map(|(name, value)| Some((name, value.as_f64()?))).collect()
}

/// The rows of `.jsonl` files (comma-separated paths, relative ones from the repository's root, since `cargo
/// bench` runs a benchmark in `benches/`), lines that are not rows left out.
pub fn read(paths: &str) -> Vec<Row> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = |path: &str| {
        let path = root.join(path);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
    };
    paths.split(',').flat_map(|path| text(path).lines().filter_map(Row::parse).collect::<Vec<_>>()).collect()
}

/// Medians over the repetitions, by implementation, workload, N and field, with how many samples each has.
pub struct Medians(BTreeMap<(String, String, usize, String), (f64, usize)>);

impl Medians {
    pub fn new(rows: &[Row]) -> Medians {
        let mut samples: BTreeMap<_, Vec<f64>> = BTreeMap::new();
        for row in rows {
            for (field, value) in &row.fields {
                let key = (row.imp.clone(), row.workload.clone(), row.n, field.clone());
                samples.entry(key).or_default().push(*value);
            }
        }
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            let mid = values.len() / 2;
            let median = if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 };
            (median, values.len())
        };
        Medians(samples.into_iter().map(|(key, values)| (key, median(values))).collect())
    }

    pub fn get(&self, imp: &str, workload: &str, n: usize, field: &str) -> Option<f64> {
        self.0.get(&(imp.to_string(), workload.to_string(), n, field.to_string())).map(|m| m.0)
    }

    /// Every N measured for `workload`.
    pub fn sizes(&self, workload: &str) -> BTreeSet<usize> {
        self.0.keys().filter(|k| k.1 == workload).map(|k| k.2).collect()
    }

    /// Whether any figure of `imp` is there.
    pub fn has(&self, imp: &str) -> bool {
        self.0.keys().any(|k| k.0 == imp)
    }

    /// The most samples of any one figure: how many repetitions the rows hold.
    pub fn repetitions(&self) -> usize {
        self.0.values().map(|m| m.1).max().unwrap_or(0)
    }
}

/// A table rendered both as aligned text and as markdown.
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The title on a line of its own (when there is one), then the header and the rows, the first column
    /// aligned left and the others right.
    pub fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|c| {
                let cells = std::iter::once(&self.header[c]).chain(self.rows.iter().map(|r| &r[c]));
                cells.map(|s| s.chars().count()).max().unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (s, &w))| if c == 0 { format!("{s:<w$}") } else { format!("{s:>w$}") })
                .collect();
            padded.join("  ").trim_end().to_string() + "\n"
        };
        let mut out = if self.title.is_empty() { String::new() } else { format!("{}\n", self.title) };
        out += &line(&self.header);
        for row in &self.rows {
            out += &line(row);
        }
        out
    }

    /// The title as a `###` heading (when there is one), then the table.
    pub fn markdown(&self) -> String {
        let mut out = if self.title.is_empty() { String::new() } else { format!("### {}\n\n", self.title) };
        out += &format!("| {} |\n|{}\n", self.header.join(" | "), "---|".repeat(self.header.len()));
        for row in &self.rows {
            out += &format!("| {} |\n", row.join(" | "));
        }
        out
    }
}

/// Three significant figures or so, without exponent noise.
pub fn num(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

/// `<target dir>/bench-report`, found from this executable's path (`<target>/release/deps/<bench>-*`) so that
/// `CARGO_TARGET_DIR` is honoured.
pub fn report_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current executable");
    exe.ancestors().nth(3).map(PathBuf::from).unwrap_or_else(|| "target".into()).join("bench-report")
}
