//! A throwaway `redis-server` for tests and benchmarks: its own temp directory, a free port on
//! 127.0.0.1, killed with SIGKILL by its handle (and on drop), restartable on the same directory
//! and port so the append-only file is what it comes back with.
//!
//! The tests include it as `support::redis_server`; the durable benchmark (`benches/durable.rs`)
//! includes this same file through `#[path]`. So it uses nothing but `std`, `tempfile` and `libc`.
//!
//! The server is found at `$TIMEWHEEL_REDIS_SERVER`, else `/usr/bin/redis-server` (Debian's
//! package), else on `PATH`. When there is none, [`RedisServer::start`] returns `None` and prints
//! a skip note, except under `CI=true`, where it panics: CI must run these tests, not skip them.
//!
//! Any server that takes `redis-server`'s command line will do. CI runs the durable tests twice:
//! on Debian's Redis 7.0, then with `TIMEWHEEL_REDIS_SERVER` naming Valkey 8's `valkey-server`
//! (and `TIMEWHEEL_REDIS_CLI` its `valkey-cli`, which creates the test clusters; see
//! `topology.rs`). That build of Valkey has no TLS, so its run skips the tests named `tls`:
//!
//! ```text
//! TIMEWHEEL_REDIS_SERVER=/path/to/valkey-server TIMEWHEEL_REDIS_CLI=/path/to/valkey-cli \
//!     cargo test --features redis,serde,metrics,dashboard --lib --test durable_basic -- --skip tls
//! ```
//!
//! The durable behaviour tests that run on every store start their store through
//! `store.rs`'s `TestStore`, which starts this server when `TIMEWHEEL_TEST_STORE` is `redis` (or
//! unset). When it names another store (`sqlite`), every start here returns `None` with a skip
//! note: the tests that need Redis itself (killing it, `DEBUG SLEEP`, Sentinel, Cluster, TLS)
//! belong to the run on Redis.
//!
//! The helper speaks just enough RESP over a plain `TcpStream` ([`RedisServer::command`]) to wait
//! for `PING` and to drive the server from a test (`DEBUG SLEEP`, `SLOWLOG`, `CONFIG SET`) without
//! going through the crate under test.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a (re)started server may take to answer `PING` with `PONG` (loading its AOF included).
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How many fresh ports to try when the first one turns out to be taken by the time the server
/// binds it (the port is picked by binding port 0 and letting go of it, which can race).
const PORT_ATTEMPTS: usize = 5;

/// What to tell a person who has no server.
pub const INSTALL_HINT: &str =
    "install one with `apt-get install -y redis-server` (or set TIMEWHEEL_REDIS_SERVER to its path)";

/// How a [`RedisServer`] persists its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// `--appendonly yes --appendfsync everysec`: what the durable mode asks of production.
    Aof,
    /// `--appendonly no`: every write is lost on SIGKILL. The negative control of a durability test.
    None,
}

/// A running (or killed, to be restarted) `redis-server` child process.
pub struct RedisServer {
    /// `None` between [`kill`](Self::kill) and [`restart`](Self::restart).
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    persistence: Persistence,
    extra: Vec<String>,
    launch: Launch,
    /// Dropped last: the server is killed before its directory goes.
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// A server with AOF on (`everysec`), or `None` with a skip note on stderr when there is no
    /// `redis-server` on this machine. Panics under `CI=true` when there is none, or when the
    /// server does not come up.
    pub fn start() -> Option<Self> {
        Self::start_with(Persistence::Aof, &[])
    }

    /// A server that keeps nothing across a SIGKILL: the negative control.
    pub fn start_without_aof() -> Option<Self> {
        Self::start_with(Persistence::None, &[])
    }

    /// A server with `persistence` and extra `--name value` arguments appended to the defaults.
    pub fn start_with(persistence: Persistence, extra: &[&str]) -> Option<Self> {
        Self::start_launched(persistence, extra, Launch::default())
    }

    /// [`start_with`](Self::start_with), launched as `launch` says: with a config file first, or
    /// TLS only.
    ///
    /// `None` too, with a note, when the tests run on another store (`TIMEWHEEL_TEST_STORE`, see
    /// `store.rs`): a test that starts a server itself needs Redis, and ran in the run on Redis.
    pub fn start_launched(persistence: Persistence, extra: &[&str], launch: Launch) -> Option<Self> {
        if let Some(store) = other_store() {
            eprintln!("this test needs Redis itself and the tests run on {store} ({STORE_ENV}): skipping");
            return None;
        }
        let binary = match find_binary() {
            Some(binary) => binary,
            None if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
                panic!("redis-server not found and CI=true: the durable tests need a real server; {INSTALL_HINT}")
            }
            None => {
                eprintln!("redis-server not found ({INSTALL_HINT}): skipping");
                return None;
            }
        };
        let dir = tempfile::Builder::new().prefix("timewheel-redis-").tempdir().expect("create a temp dir for redis");
        let mut server = RedisServer {
            child: None,
            binary,
            port: 0,
            persistence,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            launch,
            dir,
        };
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return Some(server),
                Err(why) => last = why,
            }
        }
        panic!("redis-server did not start after {PORT_ATTEMPTS} ports: {last}");
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's working directory (AOF, log file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The child's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Raises the server's scheduling priority so that a busy machine does not stall it: for
    /// tests that time Redis's own work, like `SLOWLOG`. First `chrt -f 10` (real-time FIFO:
    /// other processes no longer preempt it; the kernel's real-time throttling still leaves 5% of
    /// each second to everyone else), else `renice -n -10`; both need root, as in CI. Applies to
    /// the server's main thread, the one that runs commands. Returns what it did, if anything.
    pub fn raise_priority(&self) -> Option<&'static str> {
        let pid = self.pid()?.to_string();
        let run = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if run("chrt", &["-f", "-p", "10", &pid]) {
            Some("real-time FIFO")
        } else if run("renice", &["-n", "-10", "-p", &pid]) {
            Some("nice -10")
        } else {
            None
        }
    }

    /// SIGKILL (what `Child::kill` sends on Unix) and reap. The server gets no chance to flush:
    /// whatever `appendfsync everysec` had not yet written is lost, as in a power cut of the
    /// process. Harmless when already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same directory and port (killing it first if it runs) and
    /// waits until it answers `PING`, i.e. until it has loaded its AOF. Panics if it does not.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.spawn() {
            panic!("redis-server did not restart on port {}: {why}", self.port);
        }
    }

    /// The tail of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.log_lines(20)
    }

    /// The last `n` lines of the server's log.
    pub fn log_lines(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Sends one command on a fresh connection and returns the reply, with a read timeout of
    /// `timeout`. For driving the server from a test, independently of the crate under test.
    pub fn command_timeout(&self, args: &[&str], timeout: Duration) -> std::io::Result<Reply> {
        match &self.launch.tls {
            Some(tls) => tls(self.addr(), args, timeout),
            None => command_at(self.addr(), args, timeout),
        }
    }

    /// [`command_timeout`](Self::command_timeout) with 10 s, panicking on an I/O error.
    pub fn command(&self, args: &[&str]) -> Reply {
        self.command_timeout(args, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("redis command {args:?} on port {}: {e}", self.port))
    }

    /// Sends a command without waiting for its reply (e.g. `DEBUG SLEEP 2`, which would block
    /// the caller). The connection is kept open on a background thread until the reply comes.
    /// Plain connections only.
    pub fn command_detached(&self, args: &[&str]) {
        let mut stream = TcpStream::connect_timeout(&self.addr(), Duration::from_secs(5)).expect("connect to redis");
        stream.write_all(&encode(args)).expect("send to redis");
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
            let _ = read_reply(&mut BufReader::new(stream));
        });
    }

    /// The `field:value` lines of an `INFO` section (`memory`, `commandstats`, ...).
    pub fn info(&self, section: &str) -> BTreeMap<String, String> {
        let reply = self.command(&["INFO", section]);
        let text = reply.as_str().unwrap_or_else(|| panic!("INFO {section} answered {reply:?}"));
        text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_owned(), v.trim().to_owned())).collect()
    }

    /// Calls per command since the server started (or since `CONFIG RESETSTAT`), from
    /// `INFO commandstats`, which counts the commands that scripts run too. `INFO` itself, which
    /// the reading sends, is left out.
    pub fn command_calls(&self) -> BTreeMap<String, u64> {
        self.info("commandstats")
            .into_iter()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("cmdstat_")?.to_owned();
                let calls = v.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok()?;
                (name != "info").then_some((name, calls))
            })
            .collect()
    }

    fn spawn(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let dir = self.dir.path().to_str().expect("temp dir path is UTF-8").to_owned();
        let appendonly = match self.persistence {
            Persistence::Aof => "yes",
            Persistence::None => "no",
        };
        let mut args: Vec<String> = [
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--dir",
            &dir,
            "--logfile",
            "redis.log",
            "--appendonly",
            appendonly,
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--enable-debug-command",
            "yes",
            "--daemonize",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(config_file) = &self.launch.config_file {
            args.insert(0, config_file.to_str().expect("config file path is UTF-8").to_owned());
        }
        if self.launch.tls.is_some() {
            // The later `--port` wins: no plain listener, TLS on the server's port.
            args.extend(["--port", "0", "--tls-port", &port].map(String::from));
        }
        args.extend(self.extra.iter().cloned());
        let child = Command::new(&self.binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        match self.wait_ready() {
            Ok(()) => Ok(()),
            Err(why) => {
                self.kill();
                Err(format!("{why}; log:\n{}", self.log_tail()))
            }
        }
    }

    /// Polls `PING` until `PONG` (a server loading its AOF answers `-LOADING`).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("redis-server exited with {status}"));
                }
            }
            match self.command_timeout(&["PING"], Duration::from_millis(500)) {
                Ok(Reply::Status(s)) if s == "PONG" => return Ok(()),
                Ok(other) => last = format!("{other:?}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("no PONG within {READY_TIMEOUT:?} on port {} (last: {last})", self.port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("persistence", &self.persistence)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// Sends one command to the server at an address and returns its reply, with a timeout: how the
/// helper speaks to a TLS-only server (see `topology.rs`).
pub type Transport = std::sync::Arc<dyn Fn(SocketAddr, &[&str], Duration) -> std::io::Result<Reply> + Send + Sync>;

/// How [`RedisServer::start_launched`] starts the process, beyond the defaults.
#[derive(Clone, Default)]
pub struct Launch {
    /// A config file, given as the first argument (Sentinel needs one that it can rewrite).
    pub config_file: Option<PathBuf>,
    /// TLS only: `--port 0 --tls-port <port>` (the TLS files go in the extra arguments), spoken to
    /// through this transport, by [`RedisServer::command`] and the readiness check alike.
    pub tls: Option<Transport>,
}

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Error(s) => Some(s),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

/// Whether a `redis-server` binary is there to start.
pub fn installed() -> bool {
    find_binary().is_some()
}

/// Sends one command to the server at `addr` on a fresh connection and returns the reply: for a
/// thread that watches a server while the test owns its [`RedisServer`].
pub fn command_at(addr: SocketAddr, args: &[&str], timeout: Duration) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&encode(args))?;
    read_reply(&mut BufReader::new(stream))
}

/// The variable that chooses the store the durable tests run on (`store.rs`).
pub const STORE_ENV: &str = "TIMEWHEEL_TEST_STORE";

/// The store `TIMEWHEEL_TEST_STORE` names when it is not Redis (the default).
fn other_store() -> Option<String> {
    let store = std::env::var(STORE_ENV).unwrap_or_default().trim().to_ascii_lowercase();
    (!store.is_empty() && store != "redis").then_some(store)
}

fn find_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("TIMEWHEEL_REDIS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let debian = PathBuf::from("/usr/bin/redis-server");
    if debian.is_file() {
        return Some(debian);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join("redis-server")).find(|p| p.is_file())
}

/// A port nobody listened on a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).expect("bind 127.0.0.1:0").port()
}

pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

pub fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "redis closed the connection"));
    }
    let line = line.trim_end_matches("\r\n");
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad RESP line {line:?}"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(rest.parse().map_err(|_| bad())?),
        "$" => match rest.parse::<i64>().map_err(|_| bad())? {
            n if n < 0 => Reply::Bulk(None),
            n => {
                let mut buf = vec![0; n as usize + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Reply::Bulk(Some(buf))
            }
        },
        "*" => match rest.parse::<i64>().map_err(|_| bad())? {
            n if n < 0 => Reply::Array(None),
            n => Reply::Array(Some((0..n).map(|_| read_reply(reader)).collect::<Result<_, _>>()?)),
        },
        _ => return Err(bad()),
    })
}
