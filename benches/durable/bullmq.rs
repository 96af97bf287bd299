//! BullMQ delayed jobs (Node): `bullmq/bench.mjs` runs each measurement in its own `node` process against the
//! server this process started, with the inputs written to a JSON file. `npm install` installs BullMQ into
//! `benches/durable/bullmq/node_modules` on the first run, at the versions of `package-lock.json` (not `npm ci`,
//! which refuses a lock file that lacks the optional native packages of other platforms), with `--no-save` so
//! that npm leaves the lock file as committed; without `node` the rival is skipped with a note.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::server::{self, RedisServer};
use crate::Fields;

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("durable/bullmq")
}

/// Checks for `node` and installs BullMQ if needed; `Err` says why the rival is skipped.
pub fn prepare() -> Result<(), String> {
    let version = Command::new("node").arg("--version").output();
    match version {
        Ok(out) if out.status.success() => {}
        _ => return Err("`node` not found: BullMQ is skipped (install Node.js 18+ to compare with it)".into()),
    }
    let dir = dir();
    if dir.join("node_modules/bullmq/package.json").exists() {
        return Ok(());
    }
    eprintln!("installing BullMQ: npm install in {}", dir.display());
    let status = Command::new("npm")
        .args(["install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("npm not runnable ({e}): BullMQ is skipped"))?;
    if !status.success() {
        return Err(format!("npm install failed ({status}): BullMQ is skipped"));
    }
    Ok(())
}

fn spawn(mode: &str, server: &RedisServer, inputs: &Path, variant: Option<&str>) -> Child {
    Command::new("node")
        .arg(dir().join("bench.mjs"))
        .args([mode, &server.port().to_string()])
        .arg(inputs)
        .args(variant)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn node")
}

/// The numbers of the last line a mode printed, once it exited successfully.
fn result(mode: &str, status: std::process::ExitStatus, last: Option<String>) -> Fields {
    assert!(status.success(), "bench.mjs {mode} failed: {status}");
    let line = last.unwrap_or_else(|| panic!("bench.mjs {mode} printed nothing"));
    crate::parse_fields(&line).unwrap_or_else(|| panic!("bench.mjs {mode}: unparsed {line:?}"))
}

/// Runs a mode with a timed phase of `n` jobs (`schedule`, `cancel`) to its end and returns the numbers of its
/// JSON line followed by Redis's work over that phase ([`server::Work`]), read here when the script says `start`
/// (before it starts its clock) and `stop` (after it stops it): the same readings as around the other
/// implementations' timed phases, and the script waits for an answer each time, so that they bracket its timed
/// phase and nothing else.
async fn run_timed(mode: &str, server: &RedisServer, inputs: &Path, variant: Option<&str>, n: usize) -> Fields {
    let mut child = spawn(mode, server, inputs, variant);
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    // Pipes and readings block: the whole conversation runs off the runtime's workers.
    let (last, work) = tokio::task::block_in_place(|| {
        let (mut start, mut work, mut last) = (None, None, None);
        for line in stdout.lines() {
            let line = line.expect("read bench.mjs");
            match line.as_str() {
                "start" => start = Some(server::Work::read(server)),
                "stop" => work = Some(start.as_ref().expect("bench.mjs: stop before start").per_task(server, n)),
                _ => {
                    last = Some(line);
                    continue;
                }
            }
            writeln!(stdin, "read").expect("answer bench.mjs");
        }
        (last, work)
    });
    let status = child.wait().expect("node exit");
    let fields = result(mode, status, last);
    fields.into_iter().chain(work.unwrap_or_else(|| panic!("bench.mjs {mode}: no timed phase"))).collect()
}

/// D1 (`add` per job with 64 in flight, or `addBulk` of 1,024), D2, and D4 (`remove` per job, 64 in flight;
/// BullMQ has no call to remove many jobs by id, so the batched run measures no D4); D1 and D4 with Redis's work
/// over their timed phases, read as for the other implementations (`run_timed`).
pub async fn d124(server: &RedisServer, inputs: &Path, n: usize, batch: bool) -> Vec<(&'static str, Fields)> {
    let before = server::used_memory(server).await;
    let d1 = run_timed("schedule", server, inputs, Some(if batch { "batch" } else { "one" }), n).await;
    let after = server::used_memory(server).await;
    let mut out = vec![("D1", d1), ("D2", vec![("redis_bytes_per_task", (after - before) / n as f64)])];
    if !batch {
        let d4 = run_timed("cancel", server, inputs, None, n).await;
        let cancelled = d4.iter().find(|f| f.0 == "cancelled").map_or(0.0, |f| f.1);
        assert_eq!(cancelled as usize, n, "BullMQ: every delayed job removed once");
        out.push(("D4", d4.into_iter().filter(|f| f.0 != "cancelled").collect()));
    }
    out
}

/// D3, with Redis's work from the start of the inserts to the last acknowledgement (`run_timed`).
pub async fn d3(server: &RedisServer, inputs: &Path, n: usize) -> Fields {
    run_timed("fire", server, inputs, None, n).await
}

/// D7: jobs added with no delay while no worker runs, then the workers start; Redis's work from their start to
/// the last completion (`run_timed`).
pub async fn d7(server: &RedisServer, inputs: &Path, n: usize) -> Fields {
    run_timed("drain", server, inputs, None, n).await
}

/// D5's setup: the node process holding 100,000 jobs an hour away and four idle workers, once it says ready.
pub async fn d5_setup(server: &RedisServer, inputs: &Path) -> impl Sized {
    let mut child = spawn("idle", server, inputs, None);
    let stdout = child.stdout.take().expect("piped stdout");
    let ready = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .expect("read bench.mjs idle");
    assert!(ready.contains("ready"), "bench.mjs idle: {ready:?}");
    Idle(child)
}

/// Closing stdin stops the idle node process; it is killed if it has not exited within 10 s.
struct Idle(Child);

impl Drop for Idle {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
