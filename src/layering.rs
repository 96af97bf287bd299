//! The layering of docs/DESIGN.md, checked: dependencies point downwards only. At the crate's
//! level the pure wheels use nothing else; what both modes share (errors, the lateness
//! histogram, recurrences, the trace context of `origin`) uses neither mode; the service never
//! uses the durable mode. Inside each mode, every file imports only from the files below it in
//! that mode's table.
//!
//! The check reads the sources as text (comments and `mod tests` blocks aside): an import is a
//! path that starts with one of a file's prefixes, as many `super::` as lead from the file to
//! the mode (one for a top-level file or a folder's `mod.rs`, one more a folder deeper), or
//! `crate::<mode>::`; each name of a group (`{a, b::{c}}`) counts, over as many lines as it
//! takes. A layer is a top-level file or folder of the mode; names re-exported at the mode's
//! root (`crate::durable::Task`) are not traced to their layer.

/// One file of a mode: the layer it belongs to (its own name, or its top folder's), the prefixes
/// by which it names the mode's layers, and its source.
struct File {
    layer: String,
    prefixes: [String; 2],
    source: String,
}

impl File {
    /// The file at `path` (under `src/`) of `mode`, which names the mode's layers by the
    /// `super::`s that lead up to the mode and as `crate::<mode>::`.
    fn read(mode: &str, path: &str) -> File {
        let inside = path.strip_prefix(&format!("{mode}/")).expect("a file of the mode");
        let layer = inside.split_once('/').map_or(inside.trim_end_matches(".rs"), |(folder, _)| folder);
        // As many `super::` as there are modules between the file and the mode: one for a
        // top-level file or a folder's `mod.rs`, one more for each folder deeper.
        let folders = inside.matches('/').count();
        let depth = if inside.ends_with("/mod.rs") { folders } else { folders + 1 };
        let full = format!("{}/src/{path}", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
        File { layer: layer.to_string(), prefixes: ["super::".repeat(depth), format!("crate::{mode}::")], source }
    }
}

/// The files of `mode` in the order of its table in docs/DESIGN.md ("Where things are"), from
/// the bottom up: the one map of the mode's files, which these tests hold the code to. A row's
/// first cell names files (`src/<mode>/a.rs`, then others of its folder as `b.rs`) or starts
/// with a folder (`src/<mode>/f/`: its `mod.rs`, then its other files); test files (`tests.rs`,
/// `loom.rs`, `tests/`) and what is not Rust are left out.
fn table(mode: &str) -> Vec<String> {
    let design = include_str!("../docs/DESIGN.md");
    let mut rows: Vec<Vec<String>> = Vec::new();
    for line in design.lines() {
        let Some(cell) = line.strip_prefix(&format!("| `src/{mode}/")).and_then(|l| l.split(" | ").next()) else {
            continue;
        };
        let cell = format!("`src/{mode}/{cell}");
        let mut names = cell.split('`').skip(1).step_by(2);
        let first = names.next().expect("a path").trim_start_matches("src/").to_string();
        let folder = first.rsplit_once('/').map_or("", |(folder, _)| folder).to_string();
        let mut paths = Vec::new();
        if first.ends_with('/') {
            paths.extend(folder_files(&first));
        }
        for name in std::iter::once(first.clone()).chain(names.map(|n| format!("{folder}/{n}"))) {
            if name.ends_with(".rs") && !is_test_file(&name) {
                paths.push(name);
            }
        }
        if !paths.is_empty() {
            rows.push(paths);
        }
    }
    // The service's table runs from the top down, the durable mode's from the bottom up.
    if mode == "service" {
        rows.reverse();
    }
    rows.concat()
}

/// The Rust files of the folder `path` (under `src/`): its `mod.rs` first, then the others by
/// name, test files left out.
fn folder_files(path: &str) -> Vec<String> {
    if path.ends_with("/tests/") {
        return Vec::new();
    }
    let dir = format!("{}/src/{path}", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".rs") && n != "mod.rs")
        .map(|n| format!("{path}{n}"))
        .filter(|n| !is_test_file(n))
        .collect();
    names.sort();
    std::iter::once(format!("{path}mod.rs")).chain(names).collect()
}

fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.ends_with("/loom.rs") || path.contains("/tests/")
}

/// Every Rust file of `mode` but its own `mod.rs` and its tests, under `src/`.
fn files_on_disk(mode: &str) -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("a source folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.to_string_lossy().into_owned());
            }
        }
    }
    let src = format!("{}/src/", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    walk(std::path::Path::new(&format!("{src}{mode}")), &mut out);
    let own = format!("{mode}/mod.rs");
    let mut files: Vec<String> = out
        .into_iter()
        .map(|p| p.trim_start_matches(&src).to_string())
        .filter(|p| *p != own && !is_test_file(p))
        .collect();
    files.sort();
    files
}

/// The files of `mode`, read, in the order of its table.
fn files(mode: &str) -> Vec<File> {
    table(mode).iter().map(|path| File::read(mode, path)).collect()
}

/// Every import of a file that names a layer above its own.
fn upward(files: &[File]) -> Vec<String> {
    let mut layers: Vec<&str> = Vec::new();
    for file in files {
        if layers.last() != Some(&file.layer.as_str()) {
            assert!(!layers.contains(&file.layer.as_str()), "{} is listed in two places", file.layer);
            layers.push(&file.layer);
        }
    }
    let level = |name: &str| layers.iter().position(|l| *l == name);
    let mut found = Vec::new();
    for file in files {
        let own = level(&file.layer).unwrap();
        // The code as one text, so that a group of imports over several lines reads as one.
        let lines: Vec<&str> = code(&file.source).collect();
        let text = lines.join("\n");
        for prefix in &file.prefixes {
            for (i, _) in text.match_indices(prefix.as_str()) {
                // `super::super::x` holds `super::x` too: only a prefix that starts a path counts.
                if text[..i].ends_with("super::") {
                    continue;
                }
                let line = lines[text[..i].matches('\n').count()];
                for used in names_used(&text[i + prefix.len()..]) {
                    if level(&used).is_some_and(|used| used > own) {
                        found.push(format!("{} uses {used}: {line}", file.layer));
                    }
                }
            }
        }
    }
    found
}

/// The first name of each path that `rest` (what follows a prefix) begins: one, or those of a
/// group (`{a::X, b}`), nested groups included.
fn names_used(rest: &str) -> Vec<String> {
    let ident =
        |s: &str| -> String { s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let Some(group) = rest.strip_prefix('{') else { return vec![ident(rest)] };
    let mut names = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                names.push(ident(&group[start..i]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(ident(&group[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

/// The lines of a source that are code: no comments, and no `mod tests` block at its end.
fn code(source: &str) -> impl Iterator<Item = &str> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap();
    code.lines().map(str::trim).filter(|l| !l.starts_with("//"))
}

#[test]
fn service_imports_run_downwards() {
    let upward = upward(&files("service"));
    assert!(upward.is_empty(), "{upward:#?}");
}

#[test]
fn durable_imports_run_downwards() {
    let upward = upward(&files("durable"));
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
    for file in files("service") {
        for line in code(&file.source) {
            assert!(!line.contains("durable"), "the service uses the durable mode: {line}");
        }
    }
}

/// The checker finds an import that runs upwards, in a top-level file and in a folder's.
#[test]
fn the_check_finds_an_upward_import() {
    let file = |layer: &str, parent: &str, source: &str| File {
        layer: layer.into(),
        prefixes: [parent.into(), "crate::m::".into()],
        source: source.into(),
    };
    let bad = [
        file("low", "super::", "use super::high::Thing;\n"),
        file("high", "super::", "use super::low::Thing;\n"),
        file("high", "super::super::", "use super::low::X;\n"),
        file("top", "super::super::", "use crate::m::high::Y;\n"),
    ];
    assert_eq!(upward(&bad), ["low uses high: use super::high::Thing;"]);
    let in_folder = [file("low", "super::super::", "use super::super::high::T;\n"), file("high", "super::", "")];
    assert_eq!(upward(&in_folder), ["low uses high: use super::super::high::T;"]);
    // A group, over lines, nested too.
    let grouped = [
        file("low", "super::", "use super::{\n    mid::A,\n    high::{B, C},\n};\n"),
        file("mid", "super::", ""),
        file("high", "super::", ""),
    ];
    assert_eq!(upward(&grouped), ["low uses mid: use super::{", "low uses high: use super::{"]);
    assert_eq!(names_used("{self, a::B, c}"), ["a", "c"]);
}

/// DESIGN.md's tables are the one map of each mode's files: every file of the mode is in its
/// table, once, and every file the table names exists (reading it would fail otherwise).
#[test]
fn every_file_of_a_mode_is_in_its_table_once() {
    for mode in ["service", "durable"] {
        let mut listed = table(mode);
        let on_disk = files_on_disk(mode);
        let count = listed.len();
        listed.sort();
        listed.dedup();
        assert_eq!(listed.len(), count, "docs/DESIGN.md lists a file of {mode} twice");
        let missing: Vec<&String> = on_disk.iter().filter(|f| !listed.contains(f)).collect();
        assert!(missing.is_empty(), "docs/DESIGN.md's table of {mode} leaves out {missing:?}");
        assert!(files(mode).len() == count, "every listed file of {mode} reads");
    }
}
