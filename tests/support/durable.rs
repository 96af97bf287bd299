//! What the durable tests share: the delivery log, its handlers and workers, waiting for a
//! condition, and the wheel's key names (from the crate's own [`WheelKeys`], never rebuilt by
//! hand). Also compiled into the crate's own durable tests (`src/durable/tests/`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, DurableStats, Task, WheelKeys, Worker};

use super::redis_server::RedisServer;
use super::store::TestStore;

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

/// Waits (30 s at most, asking every tick) until the wheel's stats say `done`; panics with
/// `what` and the last stats if they never do.
pub async fn stats_until(timers: &DurableScheduler, what: &str, done: impl Fn(&DurableStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = timers.stats().await.unwrap();
        if done(&stats) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {stats:?}");
        tokio::time::sleep(TICK).await;
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

/// Who leads the wheel of `timers` (of one partition) now, if a node does, as a value that
/// another leader changes: on Redis the leader key's fencing token ([`leader_value`]: the node's
/// id and its bid, so a node that lost the lead and took it back reads as a change too), on
/// another store the leading node's id, as [`DurableScheduler::leaders`] answers it.
pub async fn leader_of(store: &TestStore, timers: &DurableScheduler) -> Option<String> {
    match store.redis() {
        Some(server) => leader_value(server, timers.name()),
        None => timers.leaders().await.expect("leaders").into_iter().next().flatten(),
    }
}

/// A handle on a wheel for a test's own threads, outside any runtime (they watch node
/// processes): who leads it, read as [`leader_of`] reads it. It connects with [`builder`]'s
/// settings, as the nodes do.
pub struct Watcher {
    runtime: tokio::runtime::Runtime,
    timers: DurableScheduler,
    /// The server, on Redis, and the key it holds the leader's token in.
    redis: Option<(std::net::SocketAddr, String)>,
}

impl Watcher {
    pub fn new(store: &TestStore, name: &str) -> Watcher {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let timers = runtime.block_on(builder(&store.url(), name).connect()).expect("the watcher connects");
        let redis = store.redis().map(|server| (server.addr(), keys(name).leader()));
        Watcher { runtime, timers, redis }
    }

    /// Who leads now (`None` when nobody does, or the store did not answer).
    pub fn leader(&self) -> Option<String> {
        match &self.redis {
            Some((addr, key)) => {
                let reply = super::redis_server::command_at(*addr, &["GET", key], Duration::from_secs(2)).ok()?;
                reply.as_str().map(str::to_owned)
            }
            None => self.runtime.block_on(self.timers.leaders()).ok()?.into_iter().next().flatten(),
        }
    }
}

/// The tests' tick, ring and lease: short, so that a test runs in seconds.
pub const TICK: Duration = Duration::from_millis(50);
pub const SLOTS: usize = 32;
pub const LEASE: Duration = Duration::from_secs(1);

/// The settings every durable test starts from (a test changes what it needs): a 50 ms tick, 32
/// slots, a lease of a second, retries after 100 ms, a response timeout of 500 ms.
pub fn builder(url: &str, name: &str) -> DurableBuilder {
    tuned(DurableScheduler::builder(url, name))
}

/// The settings of [`builder`] on any builder (one for Sentinel, say).
pub fn tuned(builder: DurableBuilder) -> DurableBuilder {
    builder
        .tick(TICK)
        .slots(SLOTS)
        .lease(LEASE)
        .max_attempts(5)
        .backoff(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
}

/// Redis's `TIME` is read in whole milliseconds inside the scripts, so a due time can sit up to
/// 1 ms before `SystemTime::now() + delay` taken just before the call.
pub const CLOCK_SLACK: Duration = Duration::from_millis(1);

/// What a run must show: every key in `expected` handled at least once, none before its bound,
/// nothing handled that was never scheduled.
pub struct Expectations {
    /// Key -> the earliest time it may be handled (`now() + delay` read before its `schedule`).
    pub expected: HashMap<String, SystemTime>,
    /// Keys whose `schedule` was attempted but did not return `Ok` (they may fire or not).
    pub uncertain: HashSet<String>,
}

/// The problems found in `log` against `want`, or `Ok` with a short summary.
pub fn verify(want: &Expectations, log: &[Handled]) -> Result<String, String> {
    let mut problems = Vec::new();
    let mut seen: HashMap<&str, Vec<&Handled>> = HashMap::new();
    for h in log {
        seen.entry(&h.key).or_default().push(h);
    }
    let missing: Vec<&String> = want.expected.keys().filter(|k| !seen.contains_key(k.as_str())).collect();
    if !missing.is_empty() {
        let mut sample: Vec<_> = missing.iter().take(5).collect();
        sample.sort();
        problems.push(format!("{} of {} acknowledged tasks lost, e.g. {sample:?}", missing.len(), want.expected.len()));
    }
    let unknown: Vec<&&str> =
        seen.keys().filter(|k| !want.expected.contains_key(**k) && !want.uncertain.contains(**k)).collect();
    if !unknown.is_empty() {
        problems.push(format!("{} tasks handled that were never scheduled, e.g. {:?}", unknown.len(), &unknown[..1]));
    }
    for (key, deliveries) in &seen {
        for h in deliveries {
            if let Some(&not_before) = want.expected.get(*key) {
                if h.at + CLOCK_SLACK < not_before || h.due + CLOCK_SLACK < not_before {
                    problems.push(format!(
                        "{key} early: handled {:?} / due {:?} before its earliest time",
                        not_before.duration_since(h.at).unwrap_or_default(),
                        not_before.duration_since(h.due).unwrap_or_default()
                    ));
                }
            }
            if h.at + CLOCK_SLACK < h.due {
                problems.push(format!("{key} handed out {:?} before its due()", h.due.duration_since(h.at).unwrap()));
            }
        }
    }
    let redelivered = seen.values().filter(|d| d.len() > 1).count();
    if problems.is_empty() {
        Ok(format!("{} tasks handled, {} of them more than once", seen.len(), redelivered))
    } else {
        problems.truncate(10);
        Err(problems.join("\n"))
    }
}

/// Each key handled exactly once.
pub fn assert_once(log: &Log) {
    let mut count: HashMap<String, Vec<u32>> = HashMap::new();
    for h in log.all() {
        count.entry(h.key).or_default().push(h.attempt);
    }
    let twice: Vec<_> = count.iter().filter(|(_, attempts)| attempts.len() > 1).take(5).collect();
    assert!(twice.is_empty(), "tasks handled more than once (key, attempts): {twice:?}");
}

/// How badly this process's runtime is starved: a task that sleeps 5 ms over and over and
/// records the most it overslept. A test that bounds how late something fires adds the worst
/// stall seen (twice: the leader's tick and the worker's claim can each be held up), so that a
/// loaded machine does not fail it while a wheel that is late by itself still does.
pub struct StallProbe {
    worst_us: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl StallProbe {
    pub fn start() -> Self {
        let worst_us = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let worst = worst_us.clone();
        let task = tokio::spawn(async move {
            loop {
                let asked = Duration::from_millis(5);
                let start = tokio::time::Instant::now();
                tokio::time::sleep(asked).await;
                let over = start.elapsed().saturating_sub(asked);
                worst.fetch_max(over.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
            }
        });
        StallProbe { worst_us, task }
    }

    /// The longest oversleep so far.
    pub fn worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl Drop for StallProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}
