//! A durable node in an OS process of its own, for the tests that kill a node with SIGKILL or
//! need one that shares nothing with the test but the store: the test binary itself, run again with
//! only its test [`NODE_TEST`] selected and the node's settings in environment variables. In a
//! normal run none is set and that test returns at once; in the node's process it reads them
//! (with [`setting`]) and runs the node.
//!
//! The parent holds a [`NodeProcess`], which kills the process (SIGKILL) when dropped, so that a
//! failed test leaves no node behind.
//!
//! Nodes report to their parent through files ([`NodeFiles`]: a log of deliveries, a stop file),
//! which work on every store the tests run on (`store.rs`): on a SQLite file, the nodes and the
//! parent share the wheel's file as they would share a server. (A test that runs on Redis only
//! may signal its nodes through Redis instead: [`until_told_to_stop`].)

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The test that each file's node process runs: `#[test] fn node_process()`, which does
/// nothing unless its settings are set.
pub const NODE_TEST: &str = "node_process";

/// A setting of the node, as the parent passed it to [`NodeProcess::spawn`]; `None` in a normal
/// run of the tests.
pub fn setting(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The runtime a node runs on: two worker threads, as on the machines that run the tests.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("node: a runtime")
}

/// Waits until the key `stop` exists in Redis (polled every `poll`; an error reading it counts
/// as not yet), or `lifetime` has passed, should the parent be gone.
pub async fn until_told_to_stop(
    conn: &mut redis::aio::MultiplexedConnection,
    stop: &str,
    poll: Duration,
    lifetime: Duration,
) {
    let started = Instant::now();
    while started.elapsed() < lifetime {
        tokio::time::sleep(poll).await;
        if let Ok(1) = redis::cmd("EXISTS").arg(stop).query_async::<i64>(conn).await {
            break;
        }
    }
}

/// A node's process, killed (SIGKILL) on drop.
pub struct NodeProcess {
    child: Child,
}

impl NodeProcess {
    /// Runs this test binary's [`NODE_TEST`] in a new process with the settings `env` (its
    /// stdout is dropped; its stderr, where a panic goes, is the test's).
    pub fn spawn<K: AsRef<OsStr>, V: AsRef<OsStr>>(env: impl IntoIterator<Item = (K, V)>) -> NodeProcess {
        let child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([NODE_TEST, "--exact", "--nocapture", "--test-threads", "1", "--quiet"])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn a node process");
        NodeProcess { child }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then waits for the process to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `timeout` for the process to end by itself: how it ended, or `None` if it
    /// did not (then it is killed).
    pub fn join(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        None
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One delivery a node process wrote to its log with [`record_delivery_in`], as
/// [`deliveries_in`] reads it back: times in ms since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub key: String,
    /// Which node handled it, as the test numbered them.
    pub node: usize,
    pub attempt: u32,
    /// When the task was due, and when the worker claimed it (the store's clock).
    pub due_ms: u128,
    pub claimed_ms: u128,
    /// When the handler started, on the node's clock (the same host's).
    pub at_ms: u128,
    /// The task's payload, as text.
    pub payload: String,
}

fn unix_ms(t: std::time::SystemTime) -> u128 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// The line of the delivery of `task` to `node`, as it starts now:
/// `key node attempt due_ms claimed_ms at_ms payload` (the key has no space in these tests).
fn delivery_line(node: &str, task: &tokio_timewheel::durable::Task) -> String {
    format!(
        "{} {node} {} {} {} {} {}",
        task.key(),
        task.attempt(),
        unix_ms(task.due()),
        unix_ms(task.claimed_at()),
        unix_ms(std::time::SystemTime::now()),
        String::from_utf8_lossy(task.payload())
    )
}

/// A line of [`delivery_line`], read back.
fn read_delivery(line: &str) -> Delivery {
    let f: Vec<&str> = line.splitn(7, ' ').collect();
    Delivery {
        key: f[0].to_owned(),
        node: f[1].parse().expect("a node number"),
        attempt: f[2].parse().expect("an attempt"),
        due_ms: f[3].parse().expect("a due time"),
        claimed_ms: f[4].parse().expect("a claim time"),
        at_ms: f[5].parse().expect("a start time"),
        payload: f.get(6).unwrap_or(&"").to_string(),
    }
}

/// What node processes and their parent share on any store (`store.rs`): files in a temp
/// directory of the test's own, which the parent hands to its nodes (as an environment
/// variable, [`NodeFiles::dir`]). A node appends each delivery to a log file
/// ([`record_delivery_in`]), the parent reads the log ([`NodeFiles::deliveries`]), and a file
/// that exists tells the nodes to stop ([`NodeFiles::stop`], [`until_stop_file`]).
pub struct NodeFiles {
    dir: tempfile::TempDir,
}

/// The log file of [`NodeFiles`], in its directory.
const LOG_FILE: &str = "handled.log";
/// The file whose existence tells the nodes to stop.
const STOP_FILE: &str = "stop";

impl NodeFiles {
    pub fn new() -> NodeFiles {
        NodeFiles { dir: tempfile::Builder::new().prefix("timewheel-nodes-").tempdir().expect("a temp dir for nodes") }
    }

    /// The directory to hand to the nodes.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every delivery the nodes recorded, in the order they wrote them.
    pub fn deliveries(&self) -> Vec<Delivery> {
        deliveries_in(self.dir())
    }

    /// Tells the nodes to stop.
    pub fn stop(&self) {
        std::fs::write(self.dir().join(STOP_FILE), b"stop").expect("write the stop file");
    }
}

impl Default for NodeFiles {
    fn default() -> Self {
        Self::new()
    }
}

/// Appends the delivery of `task` to `node` to the log in `dir` (a [`NodeFiles`]'s), one line
/// `key node attempt due_ms claimed_ms at_ms payload`, in one `write` to a file opened for
/// appending: the lines of several processes never mix.
pub fn record_delivery_in(dir: &Path, node: &str, task: &tokio_timewheel::durable::Task) -> std::io::Result<()> {
    use std::io::Write;
    let mut line = delivery_line(node, task);
    line.push('\n');
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(LOG_FILE))?;
    let written = file.write(line.as_bytes())?;
    if written == line.len() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("wrote {written} of the {} bytes of a delivery's line", line.len())))
    }
}

/// Every whole line [`record_delivery_in`] wrote to the log in `dir`, in order (a line still
/// being written is left for the next read).
pub fn deliveries_in(dir: &Path) -> Vec<Delivery> {
    let text = match std::fs::read_to_string(dir.join(LOG_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("read the nodes' log: {e}"),
    };
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole.lines().map(read_delivery).collect()
}

/// Waits until the stop file of `dir` exists (polled every `poll`), or `lifetime` has passed,
/// should the parent be gone.
pub async fn until_stop_file(dir: &Path, poll: Duration, lifetime: Duration) {
    let started = Instant::now();
    while started.elapsed() < lifetime {
        tokio::time::sleep(poll).await;
        if dir.join(STOP_FILE).exists() {
            break;
        }
    }
}
