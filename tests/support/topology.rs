//! The Redis deployments that production runs, started for a test: a TLS-only server
//! ([`TlsServer`], with a private CA from [`TlsCerts`]), a primary and a replica watched by three
//! sentinels ([`SentinelSet`]), and a cluster ([`Cluster`]), plain or over TLS. Every process is a
//! [`RedisServer`]: its own temp directory, a free port on 127.0.0.1, AOF on (sentinels keep no
//! data), SIGKILL by its handle and on drop, restartable on the same directory and port.
//!
//! Each `start` returns `None` with a skip note when there is no `redis-server` (or, for what
//! needs it, no `redis-cli`), and panics under `CI=true` instead. A deployment that does not come
//! up within its bounded wait panics with what it last saw and the logs' tails.
//!
//! The helper drives the servers itself, over plain RESP or over TLS with a small `rustls`
//! client, never through the crate under test.
//!
//! One file a deployment: [`tls`], [`sentinel`], [`cluster`]; what they share (probing, waiting,
//! redis-cli) is here.

mod cluster;
mod sentinel;
mod tls;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use cluster::{Cluster, SLOTS};
pub use sentinel::{SentinelSet, SentinelWatch, MASTER_NAME};
pub use tls::{tls_command_at, TlsCerts, TlsServer};

use super::redis_server::{Launch, Persistence, RedisServer, Reply};

/// How long a deployment may take to reach its steady state (replicas in sync, sentinels aware
/// of each other, every slot served) on a loaded machine.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(45);

/// The pause between two probes of a condition.
const POLL: Duration = Duration::from_millis(50);

/// The read timeout of one probe: a stalled server costs one probe, not the whole wait.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A data node with AOF on, whose replicas start their full sync at once (the default waits 5 s
/// for more replicas to share a diskless transfer).
fn start_node(args: &[String], launch: &Launch) -> Option<RedisServer> {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--repl-diskless-sync-delay", "0"]);
    RedisServer::start_launched(Persistence::Aof, &args, launch.clone())
}

/// One command with the probe timeout; an I/O error or an error reply is an `Err`.
fn probe(node: &RedisServer, args: &[&str]) -> Result<Reply, String> {
    match node.command_timeout(args, PROBE_TIMEOUT) {
        Ok(Reply::Error(e)) => Err(format!("{args:?} on {}: {e}", node.port())),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{args:?} on {}: {e}", node.port())),
    }
}

/// `INFO <section>` as fields.
fn info_of(node: &RedisServer, section: &str) -> Result<HashMap<String, String>, String> {
    Ok(parse_info(&probe(node, &["INFO", section])?))
}

/// One field of `INFO <section>`.
pub fn info_field(node: &RedisServer, section: &str, field: &str) -> Result<String, String> {
    info_of(node, section)?.remove(field).ok_or_else(|| format!("no {field} in INFO {section} of {}", node.port()))
}

fn parse_info(reply: &Reply) -> HashMap<String, String> {
    reply
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Polls `probe` every [`POLL`] until it is `Ok`, or returns its last `Err` after `timeout`.
fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(why) if Instant::now() >= deadline => return Err(why),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`wait_for`], panicking with what it last saw and the servers' log tails.
fn wait_or_panic<T>(
    what: &str,
    servers: &[&RedisServer],
    timeout: Duration,
    probe: impl FnMut() -> Result<T, String>,
) -> T {
    wait_for(timeout, probe)
        .unwrap_or_else(|why| panic!("timed out after {timeout:?} waiting for {what}; last: {why}\n{}", logs(servers)))
}

/// The log tails of `servers`, each under a header.
fn logs(servers: &[&RedisServer]) -> String {
    servers.iter().map(|s| format!("--- redis-server on port {} ---\n{}\n", s.port(), s.log_tail())).collect()
}

/// `$TIMEWHEEL_REDIS_CLI`, else `/usr/bin/redis-cli` (Debian's `redis-tools`, which
/// `redis-server` pulls in), else on `PATH`. `None` with a skip note, or a panic under `CI=true`.
pub fn find_cli() -> Option<PathBuf> {
    let found = std::env::var_os("TIMEWHEEL_REDIS_CLI").map(PathBuf::from).or_else(|| {
        let debian = PathBuf::from("/usr/bin/redis-cli");
        if debian.is_file() {
            return Some(debian);
        }
        std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join("redis-cli")).find(|p| p.is_file())
    });
    if found.is_none() {
        let hint = "install it with `apt-get install -y redis-tools` (or set TIMEWHEEL_REDIS_CLI to its path)";
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("redis-cli not found and CI=true: {hint}");
        }
        eprintln!("redis-cli not found ({hint}): skipping");
    }
    found
}

/// Runs redis-cli with `args`, killing it after `timeout`: its stdout, trimmed, or `Err` with
/// its status and output. `None` when there is no redis-cli.
fn run_cli(args: &[String], timeout: Duration) -> Option<Result<String, String>> {
    let cli = find_cli()?;
    let out = tempfile::tempfile().expect("a temp file for redis-cli's output");
    let err = tempfile::tempfile().expect("a temp file for redis-cli's errors");
    let mut child = Command::new(&cli)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone a file handle"))
        .stderr(err.try_clone().expect("clone a file handle"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", cli.display()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for redis-cli") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(POLL);
    };
    let read = |mut file: std::fs::File| {
        use std::io::{Read, Seek};
        let mut text = String::new();
        let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
        text
    };
    let (stdout, stderr) = (read(out), read(err));
    Some(match status {
        Some(status) if status.success() => Ok(stdout.trim().to_owned()),
        Some(status) => Err(format!("redis-cli {args:?} exited with {status}\n{stdout}\n{stderr}")),
        None => Err(format!("redis-cli {args:?} still running after {timeout:?}, killed\n{stdout}\n{stderr}")),
    })
}
