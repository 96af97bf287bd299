//! The server of one measurement, and what the benchmark reads off it.
//!
//! The server is the tests' throwaway `redis-server` (`tests/support/redis_server.rs`): 127.0.0.1 on a free port,
//! its own temporary directory, AOF with `appendfsync everysec` and no RDB snapshots; here also with
//! `maxmemory-policy noeviction`, the settings the durable mode asks production servers for. Killed (SIGKILL) and
//! its directory removed on drop.
//!
//! Its readings go over the harness's own connection (plain RESP, no client library), so they add no command
//! to what is counted but `INFO`, which the counts leave out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::redis_server::Persistence;
pub use crate::redis_server::RedisServer;
use crate::Fields;

/// A fresh server; the caller has checked that one is installed.
pub fn start() -> RedisServer {
    RedisServer::start_with(Persistence::Aof, &["--maxmemory-policy", "noeviction"]).expect("redis-server installed")
}

/// `used_memory` from `INFO memory`, in bytes, read after a second's pause so that client and AOF buffers of the
/// calls just made have drained.
pub async fn used_memory(server: &RedisServer) -> f64 {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let info = crate::server::blocking(|| server.info("memory"));
    info["used_memory"].parse().expect("used_memory")
}

/// The server's CPU time so far (`used_cpu_sys + used_cpu_user` from `INFO cpu`), in seconds: Redis's work
/// whatever the machine's load, unlike the wall-clock `usec` of `INFO commandstats`.
pub fn cpu_seconds(server: &RedisServer) -> f64 {
    let info = crate::server::blocking(|| server.info("cpu"));
    let field = |name: &str| info.get(name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    field("used_cpu_sys") + field("used_cpu_user")
}

/// Redis's work so far, read before and after a timed phase (the caller's clock stopped first, so the readings
/// stay out of its throughput figure): the server's CPU time, which counts the same work the same on a busy or
/// a quiet machine, unlike the throughput beside it; and the script calls it has run, which say how many tasks
/// one call carried.
pub struct Work {
    cpu_s: f64,
    script_calls: u64,
}

impl Work {
    pub fn read(server: &RedisServer) -> Work {
        Work { cpu_s: cpu_seconds(server), script_calls: script_calls(server) }
    }

    /// `redis_cpu_us_per_task` and `script_calls_per_task` of the phase from this reading until now, over its
    /// `n` tasks: the fields every implementation's D1 and D4 lines carry.
    pub fn per_task(&self, server: &RedisServer, n: usize) -> Fields {
        let now = Work::read(server);
        vec![
            ("redis_cpu_us_per_task", (now.cpu_s - self.cpu_s) * 1e6 / n as f64),
            ("script_calls_per_task", now.script_calls.saturating_sub(self.script_calls) as f64 / n as f64),
        ]
    }
}

/// The script calls (`EVALSHA` and `EVAL`) the server has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    let calls = command_calls(server);
    ["evalsha", "eval"].iter().map(|name| calls.get(*name).copied().unwrap_or(0)).sum()
}

/// Calls per command from `INFO commandstats` (see [`RedisServer::command_calls`]).
pub fn command_calls(server: &RedisServer) -> BTreeMap<String, u64> {
    crate::server::blocking(|| server.command_calls())
}

/// A `MONITOR` connection counting the commands that clients send (round trips), by command, apart from those
/// that scripts run inside Redis (which `INFO commandstats` counts too); the benchmark's own `INFO` calls are
/// left out.
pub struct Monitor {
    counts: Arc<Mutex<MonitorCounts>>,
    reader: tokio::task::JoinHandle<()>,
}

#[derive(Clone, Default)]
pub struct MonitorCounts {
    /// Commands sent by clients, by lowercase name.
    pub clients: BTreeMap<String, u64>,
    /// Commands run by scripts.
    pub scripts: u64,
}

impl Monitor {
    pub async fn start(server: &RedisServer) -> Monitor {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.expect("connect MONITOR");
        stream.write_all(b"MONITOR\r\n").await.expect("send MONITOR");
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let ok = lines.next_line().await.expect("MONITOR reply");
        assert_eq!(ok.as_deref(), Some("+OK"), "MONITOR refused");
        let counts: Arc<Mutex<MonitorCounts>> = Default::default();
        let c = counts.clone();
        let reader = tokio::spawn(async move {
            // `+1700000000.123456 [0 127.0.0.1:5678] "evalsha" ...`, or `[0 lua]` for a command a script ran.
            while let Ok(Some(line)) = lines.next_line().await {
                let Some((source, rest)) = line.split_once("] ") else { continue };
                let name = rest.split('"').nth(1).unwrap_or("").to_ascii_lowercase();
                if name == "info" {
                    continue;
                }
                let mut c = c.lock().unwrap();
                if source.ends_with(" lua") {
                    c.scripts += 1;
                } else {
                    *c.clients.entry(name).or_default() += 1;
                }
            }
        });
        Monitor { counts, reader }
    }

    pub fn counts(&self) -> MonitorCounts {
        self.counts.lock().unwrap().clone()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Per-command call counts between two readings of `INFO commandstats`.
pub fn calls_between(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, &v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|&(_, v)| v > 0)
        .collect()
}

/// Runs a short blocking read of the harness's own connection: through `block_in_place` on a multi-thread
/// runtime, directly on a current-thread one (which has no other worker to hand its tasks to).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => f(),
        _ => tokio::task::block_in_place(f),
    }
}
