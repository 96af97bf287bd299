//! A fresh `redis-server` for each measurement: 127.0.0.1 on a free port, its own temporary directory, AOF with
//! `appendfsync everysec`, no RDB snapshots, `maxmemory-policy noeviction` — the settings the durable mode asks
//! production servers for. Killed (SIGKILL) and its directory removed on drop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

pub const REDIS_SERVER: &str = "/usr/bin/redis-server";

pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    control: MultiplexedConnection,
}

impl RedisServer {
    /// Whether a server binary is there to start (`apt-get install redis-server` puts it there).
    pub fn available() -> bool {
        std::path::Path::new(REDIS_SERVER).exists()
    }

    pub async fn start() -> RedisServer {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tw-durable-bench-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the server's directory");
        // A port the kernel just handed out and we released: free unless something grabs it in between.
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port").local_addr().unwrap().port();
        let child = Command::new(REDIS_SERVER)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""])
            .args(["--maxmemory-policy", "noeviction", "--daemonize", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {REDIS_SERVER}: {e}"));
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("redis URL");
        let started = Instant::now();
        let control = loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING").query_async::<String>(&mut c).await.is_ok() {
                    break c;
                }
            }
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server on port {port} did not answer PING");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        RedisServer { child, port, dir, control }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    async fn info(&self, section: &str) -> BTreeMap<String, String> {
        let text: String = redis::cmd("INFO").arg(section).query_async(&mut self.control.clone()).await.expect("INFO");
        text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
    }

    /// `used_memory` from `INFO memory`, in bytes, read after a second's pause so that client and AOF buffers
    /// of the calls just made have drained.
    pub async fn used_memory(&self) -> f64 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.info("memory").await["used_memory"].parse().expect("used_memory")
    }

    /// Calls per command from `INFO commandstats`, leaving out `INFO` itself (the benchmark's own reads).
    pub async fn command_calls(&self) -> BTreeMap<String, u64> {
        self.info("commandstats")
            .await
            .into_iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("cmdstat_")?.to_string();
                let calls = v.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok()?;
                (name != "info").then_some((name, calls))
            })
            .collect()
    }

    /// Redis's clock (`TIME`), in microseconds since the Unix epoch.
    #[allow(dead_code)]
    pub async fn time_us(&self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut self.control.clone()).await.expect("TIME");
        s * 1_000_000 + us
    }
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
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port)).await.expect("connect MONITOR");
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
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
