//! The metrics the docs list are the metrics the crate records: the metrics example's workload
//! (`examples/metrics.rs`, included here) runs against a real `redis-server`, and its Prometheus
//! scrape must hold every metric of the tables in `tokio_timewheel::metrics`, of
//! the type they say, with the labels they say, and no other.
//!
//! Run with `cargo test --features metrics,redis --test metrics`. Without a `redis-server` the
//! test prints a skip note and passes, except under `CI=true`, where it fails.

#[allow(dead_code)]
#[path = "../examples/metrics.rs"]
mod example;

use std::collections::{BTreeMap, BTreeSet};

/// A documented metric: its type, and its labels.
type Documented = BTreeMap<String, (String, BTreeSet<String>)>;

/// The rows of the metrics tables in `text`: `| `name` | type | `label`, ... | what |`.
fn documented(text: &str) -> Documented {
    let mut out = Documented::new();
    for line in text.lines() {
        let line = line.trim_start_matches("//!").trim();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, kind, labels, ..] = cells[..] else { continue };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else { continue };
        if !name.starts_with("tokio_timewheel_") {
            continue;
        }
        let labels = labels.split(',').map(|l| l.trim().trim_matches('`').to_owned()).collect();
        let previous = out.insert(name.to_owned(), (kind.to_owned(), labels));
        assert!(previous.is_none(), "{name} is listed twice");
    }
    out
}

/// The metrics in a scrape: name, type (from `# TYPE`), and the label names of its samples.
fn scraped(scrape: &str) -> Documented {
    let mut out = Documented::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            out.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
        }
    }
    for line in scrape.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, _value)) = line.rsplit_once(' ') else { continue };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| out.contains_key(*f)))
            .unwrap_or(name);
        let Some((_, names)) = out.get_mut(family) else { continue };
        for pair in labels.trim_end_matches('}').split(',').filter(|p| !p.is_empty()) {
            let label = pair.split_once('=').expect("label=value").0;
            if label != "le" && label != "quantile" {
                names.insert(label.to_owned());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_metric_is_in_the_scrape_and_nothing_else() {
    let module_docs = documented(include_str!("../src/metrics.rs"));
    assert!(module_docs.len() >= 14, "the module docs list the metrics: {module_docs:?}");

    let Some(server) = example::redis_server::RedisServer::start() else { return };
    let recorder = example::recorder().expect("install the recorder");
    let scrape = example::workload(&recorder, &server.url(), "orders").await.expect("the workload");
    let ours: Documented =
        scraped(&scrape).into_iter().filter(|(name, _)| name.starts_with("tokio_timewheel_")).collect();
    for (name, (kind, labels)) in &module_docs {
        let Some((scraped_kind, scraped_labels)) = ours.get(name) else {
            panic!("{name} is documented but not in the scrape:\n{scrape}");
        };
        assert_eq!(scraped_kind, kind, "{name}'s type");
        assert_eq!(scraped_labels, labels, "{name}'s labels");
    }
    let undocumented: Vec<&String> = ours.keys().filter(|name| !module_docs.contains_key(*name)).collect();
    assert!(undocumented.is_empty(), "in the scrape but not in the docs: {undocumented:?}");
    for state in ["waiting", "ready", "running", "dead"] {
        assert!(scrape.contains(&format!("state=\"{state}\"")), "the tasks gauge of state {state}:\n{scrape}");
    }
    for partition in ["0", "1"] {
        assert!(scrape.contains(&format!("partition=\"{partition}\"")), "partition {partition}:\n{scrape}");
    }
}
