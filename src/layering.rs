//! The layering of docs/DESIGN.md, checked: dependencies point downwards only. At the crate's
//! level the pure wheels use nothing else; what both modes share (errors, the lateness
//! histogram, recurrences, the trace context of `origin`) uses neither mode; the service never
//! uses the durable mode. Inside each mode, every file imports only from the files below it in
//! that mode's table.
//!
//! The check reads the sources as text (comments and `mod tests` blocks aside): an import is a
//! path that starts with one of a file's prefixes, `super::` for a mode's top-level files and
//! `super::super::` for those of a folder (whose `super::` names their own siblings), and
//! `crate::<mode>::` for both.

/// One file of a mode: the layer it belongs to (its own name, or its folder's), the prefixes by
/// which it names the mode's layers, and its source.
struct File {
    layer: &'static str,
    prefixes: [&'static str; 2],
    source: &'static str,
}

/// A mode's top-level file `name.rs` (or `name/mod.rs`).
macro_rules! top {
    ($mode:literal, $layer:literal, $path:literal) => {
        File { layer: $layer, prefixes: ["super::", concat!("crate::", $mode, "::")], source: include_str!($path) }
    };
}

/// A file inside a mode's folder `layer/`, other than its `mod.rs`.
macro_rules! inner {
    ($mode:literal, $layer:literal, $path:literal) => {
        File {
            layer: $layer,
            prefixes: ["super::super::", concat!("crate::", $mode, "::")],
            source: include_str!($path),
        }
    };
}

/// Every import of a file that names a layer above its own.
fn upward(files: &[File]) -> Vec<String> {
    let mut layers: Vec<&str> = Vec::new();
    for file in files {
        if layers.last() != Some(&file.layer) {
            assert!(!layers.contains(&file.layer), "{} is listed in two places", file.layer);
            layers.push(file.layer);
        }
    }
    let level = |name: &str| layers.iter().position(|l| *l == name);
    let mut found = Vec::new();
    for file in files {
        let own = level(file.layer).unwrap();
        for line in code(file.source) {
            for prefix in file.prefixes {
                for (i, _) in line.match_indices(prefix) {
                    // `super::super::x` holds `super::x` too: only a prefix that starts a path counts.
                    if line[..i].ends_with("super::") {
                        continue;
                    }
                    let rest = &line[i + prefix.len()..];
                    let used: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if level(&used).is_some_and(|used| used > own) {
                        found.push(format!("{} uses {used}: {line}", file.layer));
                    }
                }
            }
        }
    }
    found
}

/// The lines of a source that are code: no comments, and no `mod tests` block at its end.
fn code(source: &str) -> impl Iterator<Item = &str> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
    code.lines().map(str::trim).filter(|l| !l.starts_with("//"))
}

/// `src/service/`, from the bottom up (the table of docs/DESIGN.md).
const SERVICE: &[File] = &[
    top!("service", "sync", "service/sync.rs"),
    top!("service", "config", "service/config.rs"),
    top!("service", "clock", "service/clock.rs"),
    top!("service", "key", "service/key.rs"),
    top!("service", "index", "service/index.rs"),
    top!("service", "stats", "service/stats.rs"),
    top!("service", "job", "service/job.rs"),
    top!("service", "timer", "service/timer.rs"),
    top!("service", "metrics", "service/metrics/mod.rs"),
    inner!("service", "metrics", "service/metrics/on.rs"),
    inner!("service", "metrics", "service/metrics/off.rs"),
    top!("service", "shards", "service/shards/mod.rs"),
    inner!("service", "shards", "service/shards/shard.rs"),
    inner!("service", "shards", "service/shards/wheel.rs"),
    inner!("service", "shards", "service/shards/fired.rs"),
    inner!("service", "shards", "service/shards/wake.rs"),
    inner!("service", "shards", "service/shards/watch.rs"),
    inner!("service", "shards", "service/shards/replace.rs"),
    inner!("service", "shards", "service/shards/pause.rs"),
    top!("service", "handle", "service/handle.rs"),
    top!("service", "scheduled", "service/scheduled.rs"),
    top!("service", "actor", "service/actor.rs"),
    top!("service", "scheduler", "service/scheduler.rs"),
    top!("service", "queue", "service/queue.rs"),
    top!("service", "publish", "service/publish.rs"),
    top!("service", "builder", "service/builder.rs"),
];

/// `src/durable/`, from the bottom up (the table of docs/DESIGN.md).
const DURABLE: &[File] = &[
    top!("durable", "formats", "durable/formats.rs"),
    top!("durable", "payload", "durable/payload.rs"),
    top!("durable", "time", "durable/time.rs"),
    top!("durable", "series", "durable/series.rs"),
    top!("durable", "config", "durable/config.rs"),
    top!("durable", "options", "durable/options.rs"),
    top!("durable", "keys", "durable/keys.rs"),
    top!("durable", "ids", "durable/ids.rs"),
    top!("durable", "task", "durable/task.rs"),
    top!("durable", "routes", "durable/routes.rs"),
    top!("durable", "metrics", "durable/metrics/mod.rs"),
    inner!("durable", "metrics", "durable/metrics/on.rs"),
    inner!("durable", "metrics", "durable/metrics/off.rs"),
    top!("durable", "deployment", "durable/deployment.rs"),
    top!("durable", "shared_conn", "durable/shared_conn.rs"),
    top!("durable", "client", "durable/client.rs"),
    top!("durable", "scripts", "durable/scripts/mod.rs"),
    inner!("durable", "scripts", "durable/scripts/tasks.rs"),
    inner!("durable", "scripts", "durable/scripts/leader.rs"),
    inner!("durable", "scripts", "durable/scripts/worker.rs"),
    inner!("durable", "scripts", "durable/scripts/inspect.rs"),
    inner!("durable", "scripts", "durable/scripts/registry.rs"),
    inner!("durable", "scripts", "durable/scripts/server.rs"),
    inner!("durable", "scripts", "durable/scripts/wake.rs"),
    inner!("durable", "scripts", "durable/scripts/control.rs"),
    top!("durable", "leader", "durable/leader.rs"),
    top!("durable", "worker", "durable/worker/mod.rs"),
    inner!("durable", "worker", "durable/worker/claim.rs"),
    inner!("durable", "worker", "durable/worker/wake.rs"),
    inner!("durable", "worker", "durable/worker/outcome.rs"),
    inner!("durable", "worker", "durable/worker/handler.rs"),
    inner!("durable", "worker", "durable/worker/lease.rs"),
    inner!("durable", "worker", "durable/worker/stop.rs"),
    inner!("durable", "worker", "durable/worker/cancel.rs"),
    inner!("durable", "worker", "durable/worker/gauges.rs"),
    top!("durable", "coalesce", "durable/coalesce/mod.rs"),
    inner!("durable", "coalesce", "durable/coalesce/queue.rs"),
    inner!("durable", "coalesce", "durable/coalesce/many.rs"),
    top!("durable", "scheduler", "durable/scheduler.rs"),
    top!("durable", "admin", "durable/admin.rs"),
    top!("durable", "recurring", "durable/recurring.rs"),
    top!("durable", "list", "durable/list.rs"),
    top!("durable", "control", "durable/control.rs"),
    top!("durable", "open", "durable/open.rs"),
    top!("durable", "builder", "durable/builder.rs"),
    top!("durable", "dashboard", "durable/dashboard/mod.rs"),
    inner!("durable", "dashboard", "durable/dashboard/sections.rs"),
    inner!("durable", "dashboard", "durable/dashboard/guard.rs"),
];

#[test]
fn service_imports_run_downwards() {
    let upward = upward(SERVICE);
    assert!(upward.is_empty(), "{upward:#?}");
}

#[test]
fn durable_imports_run_downwards() {
    let upward = upward(DURABLE);
    assert!(upward.is_empty(), "{upward:#?}");
}

/// The crate's own layers: the wheels use nothing of the crate but themselves and its errors; what both modes
/// share uses neither; the service never uses the durable mode.
#[test]
fn modes_share_only_what_lies_below_both() {
    let wheels = [
        include_str!("wheel/mod.rs"),
        include_str!("wheel/slab.rs"),
        include_str!("wheel/bitmap.rs"),
        include_str!("wheel/hierarchical.rs"),
        include_str!("wheel/rounds.rs"),
    ];
    for source in wheels {
        for line in code(source) {
            let beyond = line.match_indices("crate::").any(|(i, _)| {
                let used = &line[i + "crate::".len()..];
                !used.starts_with("Error") && !used.starts_with("wheel::")
            });
            assert!(!line.contains("tokio") && !beyond, "a wheel uses more than itself and the errors: {line}");
        }
    }
    let shared = [
        include_str!("error/mod.rs"),
        include_str!("error/redis_failure.rs"),
        include_str!("lateness.rs"),
        include_str!("recurrence/mod.rs"),
        include_str!("recurrence/series.rs"),
        include_str!("recurrence/cron.rs"),
        include_str!("origin/mod.rs"),
        include_str!("origin/on.rs"),
        include_str!("origin/off.rs"),
    ];
    for source in shared {
        for line in code(source) {
            for mode in ["crate::service", "crate::durable", "durable::", "crate::Scheduler"] {
                assert!(!line.contains(mode), "shared code uses a mode: {line}");
            }
        }
    }
    for file in SERVICE {
        for line in code(file.source) {
            assert!(!line.contains("durable"), "the service uses the durable mode: {line}");
        }
    }
}

/// The checker finds an import that runs upwards, in a top-level file and in a folder's.
#[test]
fn the_check_finds_an_upward_import() {
    const BAD: &[File] = &[
        File { layer: "low", prefixes: ["super::", "crate::m::"], source: "use super::high::Thing;\n" },
        File { layer: "high", prefixes: ["super::", "crate::m::"], source: "use super::low::Thing;\n" },
        File { layer: "high", prefixes: ["super::super::", "crate::m::"], source: "use super::low::X;\n" },
        File { layer: "top", prefixes: ["super::super::", "crate::m::"], source: "use crate::m::high::Y;\n" },
    ];
    let found = upward(BAD);
    assert_eq!(found, ["low uses high: use super::high::Thing;"]);
    const IN_FOLDER: &[File] = &[
        File { layer: "low", prefixes: ["super::super::", "crate::m::"], source: "use super::super::high::T;\n" },
        File { layer: "high", prefixes: ["super::", "crate::m::"], source: "" },
    ];
    assert_eq!(upward(IN_FOLDER), ["low uses high: use super::super::high::T;"]);
}
