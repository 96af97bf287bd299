//! What the durable tests share: the delivery log, its handlers and workers, waiting for a
//! condition, and the wheel's key names (from the crate's own [`WheelKeys`], never rebuilt by
//! hand). Also compiled into the crate's own durable tests (`src/durable/tests/`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_timewheel::durable::{DurableScheduler, Task, WheelKeys, Worker};

use super::redis_server::RedisServer;

/// One delivery of a task to a handler.
#[derive(Clone, Debug)]
pub struct Handled {
    pub key: String,
    pub attempt: u32,
    /// Its due time, as the task carried it (Redis's clock).
    pub due: SystemTime,
    /// When the handler started, on this machine's clock (which is also Redis's: same host).
    pub at: SystemTime,
    /// When a worker claimed the delivery, on Redis's clock.
    pub claimed: SystemTime,
    pub payload: Vec<u8>,
    /// Which node (worker) handled it, as the test numbered them.
    pub node: usize,
}

/// Every delivery any handler saw, in order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Handled>>>);

impl Log {
    /// Records one delivery, at the time of the call.
    pub fn record(&self, task: &Task, node: usize) {
        let handled = Handled {
            key: task.key().to_owned(),
            attempt: task.attempt(),
            due: task.due(),
            at: SystemTime::now(),
            claimed: task.claimed_at(),
            payload: task.payload().to_vec(),
            node,
        };
        self.0.lock().unwrap().push(handled);
    }

    /// A handler that records the delivery (as `node`) and acknowledges it.
    pub fn handler(
        &self,
        node: usize,
    ) -> impl Fn(Task) -> std::future::Ready<Result<(), std::io::Error>> + Send + Sync + 'static {
        let log = self.clone();
        move |task: Task| {
            log.record(&task, node);
            std::future::ready(Ok(()))
        }
    }

    /// A worker on `timers` running [`handler`](Self::handler) as node 0.
    pub fn worker(&self, timers: &DurableScheduler) -> Worker {
        timers.run(self.handler(0))
    }

    pub fn all(&self) -> Vec<Handled> {
        self.0.lock().unwrap().clone()
    }

    pub fn of(&self, key: &str) -> Vec<Handled> {
        self.0.lock().unwrap().iter().filter(|h| h.key == key).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn distinct_keys(&self) -> HashSet<String> {
        self.0.lock().unwrap().iter().map(|h| h.key.clone()).collect()
    }
}

/// Polls `done` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The key names of the wheel `name`.
pub fn keys(name: &str) -> WheelKeys {
    WheelKeys::new(name)
}

/// The fencing token of the node that leads the wheel `name`, if one does.
pub fn leader_value(server: &RedisServer, name: &str) -> Option<String> {
    server.command(&["GET", &keys(name).leader()]).as_str().map(str::to_owned)
}
