//! A durable node in an OS process of its own, for the tests that kill a node with SIGKILL or
//! need one that shares nothing with the test but Redis: the test binary itself, run again with
//! only its test [`NODE_TEST`] selected and the node's settings in environment variables. In a
//! normal run none is set and that test returns at once; in the node's process it reads them
//! (with [`setting`]) and runs the node.
//!
//! The parent holds a [`NodeProcess`], which kills the process (SIGKILL) when dropped, so that a
//! failed test leaves no node behind.

use std::ffi::OsStr;
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
