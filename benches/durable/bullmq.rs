//! BullMQ delayed jobs (Node): `bullmq/bench.mjs` runs each measurement in its own `node` process against the
//! server this process started, with the inputs written to a JSON file. `npm install` installs BullMQ into
//! `benches/durable/bullmq/node_modules` on the first run, at the versions of `package-lock.json` (not `npm ci`,
//! which refuses a lock file that lacks the optional native packages of other platforms); without `node` the
//! rival is skipped with a note.

use std::io::{BufRead, BufReader};
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
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
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

/// Runs one mode to its end and returns the numbers of its JSON line.
async fn run(mode: &str, server: &RedisServer, inputs: &Path, variant: Option<&str>) -> Fields {
    let child = spawn(mode, server, inputs, variant);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().expect("node output");
    assert!(out.status.success(), "bench.mjs {mode} failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| panic!("bench.mjs {mode} printed nothing"));
    crate::parse_fields(line).unwrap_or_else(|| panic!("bench.mjs {mode}: unparsed {line:?}"))
}

/// D1 (`add` per job with 64 in flight, or `addBulk` of 1,024), D2, and D4 (`remove` per job, 64 in flight;
/// BullMQ has no call to remove many jobs by id, so the batched run measures no D4).
pub async fn d124(server: &RedisServer, inputs: &Path, n: usize, batch: bool) -> Vec<(&'static str, Fields)> {
    let before = server::used_memory(server).await;
    let d1 = run("schedule", server, inputs, Some(if batch { "batch" } else { "one" })).await;
    let after = server::used_memory(server).await;
    let mut out = vec![("D1", d1), ("D2", vec![("redis_bytes_per_task", (after - before) / n as f64)])];
    if !batch {
        let d4 = run("cancel", server, inputs, None).await;
        let cancelled = d4.iter().find(|f| f.0 == "cancelled").map_or(0.0, |f| f.1);
        assert_eq!(cancelled as usize, n, "BullMQ: every delayed job removed once");
        out.push(("D4", d4.into_iter().filter(|f| f.0 == "cancels_per_s").collect()));
    }
    out
}

pub async fn d3(server: &RedisServer, inputs: &Path) -> Fields {
    run("fire", server, inputs, None).await
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
