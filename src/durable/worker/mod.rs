//! `Worker`: ticks the wheel when it holds the leadership (`leader`), claims due tasks into a
//! buffer, as many as its handlers are free for and some ahead of them (`claim`), runs the
//! handlers on what the buffer holds (`handler`), renews the leases of what it holds, buffered
//! or running (`lease`), records what the runs came to, the acknowledgements on the next claim
//! where one comes (`outcome`), and waits for a wake-up when nothing is ready (`wake`). In loop
//! order: [`start`] spawns `supervise`, which runs the leader loop beside the claim loop (and,
//! with the `metrics` feature, the loop that publishes the wheel's gauges: `gauges`) and, on
//! stop, lets the handlers finish before the leadership is given up.

mod cancel;
mod claim;
#[cfg(feature = "metrics")]
mod gauges;
mod handler;
mod lease;
mod outcome;
mod stop;
mod wake;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::leader::Lead;
use super::store::client::WheelClient;
use super::store::scripts::registry;
use super::Task;
use claim::Signals;
use handler::Handler;

/// A running worker, made by [`DurableScheduler::run`](super::DurableScheduler::run).
///
/// While its handlers run, the worker renews their leases every third of the lease, so a
/// handler may run longer than the lease (up to the handler timeout); a task comes back to
/// another worker only when its worker died or was cut off from Redis.
///
/// Call [`shutdown`](Self::shutdown) or [`shutdown_timeout`](Self::shutdown_timeout) to stop it
/// cleanly. Dropping it stops it too, without waiting: handlers in flight run to their end (their
/// leases renewed, their outcomes recorded), and a leadership it held is given up once they have.
#[must_use = "dropping the Worker stops it: keep it, and call shutdown when the node stops"]
pub struct Worker {
    stop: watch::Sender<bool>,
    abandon: watch::Sender<bool>,
    wind_down: watch::Sender<bool>,
    status: Arc<Status>,
    done: Option<JoinHandle<()>>,
}

/// What the worker's loops tell its handle.
struct Status {
    /// Each partition's leader loop: whether it leads.
    leads: Vec<Lead>,
    /// How many of the worker's loops (a leader loop and a claim loop per partition) have had
    /// their first answer from Redis.
    started: Arc<watch::Sender<usize>>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("stopping", &*self.stop.borrow())
            .field("partitions_led", &self.partitions_led())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Waits until the worker is running: each of its loops has had its first answer from
    /// Redis (for every partition, its first bid for the leadership has been answered, so
    /// [`is_leader`](Self::is_leader) tells who leads, and its first claim has been answered).
    /// Returns at once when it already is. While Redis is away it waits, so bound it with
    /// [`tokio::time::timeout`] where that matters.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tokio_timewheel::durable::{DurableScheduler, Task};
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|_task: Task| async { Ok::<(), std::io::Error>(()) });
    /// if tokio::time::timeout(Duration::from_secs(10), worker.ready()).await.is_err() {
    ///     eprintln!("the worker is not running yet: is Redis reachable?");
    /// }
    /// println!("leader: {}", worker.is_leader());
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn ready(&self) {
        let loops = 2 * self.status.leads.len();
        let mut started = self.status.started.subscribe();
        // An error means the worker's loops have ended: there is nothing more to wait for.
        let _ = started.wait_for(|n| *n >= loops).await;
    }

    /// Whether this worker leads the wheel (moves its cursor) right now: for a partitioned
    /// wheel, whether it leads at least one partition ([`partitions_led`](Self::partitions_led)
    /// counts them). As far as the worker can tell: it won or renewed the leadership less than
    /// a leadership lease ago (by this machine's clock) and has not been refused since. A
    /// worker cut off from Redis answers `false` once that lease has passed, by which time
    /// another node may lead.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::{DurableScheduler, Task};
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|_task: Task| async { Ok::<(), std::io::Error>(()) });
    /// worker.ready().await;
    /// if worker.is_leader() {
    ///     println!("this node ticks the wheel");
    /// }
    /// # }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.partitions_led() > 0
    }

    /// How many of the wheel's partitions this worker leads right now, as
    /// [`is_leader`](Self::is_leader) judges each: 0 or 1 for a wheel of one partition, up to
    /// [`partitions`](super::DurableBuilder::partitions). Different nodes may lead different
    /// partitions.
    pub fn partitions_led(&self) -> usize {
        self.status.leads.iter().filter(|l| l.holds()).count()
    }

    /// Stops claiming tasks, waits for the handlers in flight to finish, and for the handlers to
    /// run the tasks the worker claimed ahead of them (see
    /// [`prefetch`](super::DurableBuilder::prefetch)), and their outcomes to be recorded (acknowledged or retried; while Redis is away that is retried for up to the
    /// lease, after which the task is handed out again anyway), and gives up the leadership if
    /// this worker held it, so another node takes over at once. Their leases are renewed while
    /// they run, so a handler that finishes is acknowledged however long it took; the
    /// [handler timeout](super::DurableBuilder::handler_timeout) bounds the wait. To bound it
    /// more tightly, use [`shutdown_timeout`](Self::shutdown_timeout).
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::{DurableScheduler, Task};
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|_task: Task| async { Ok::<(), std::io::Error>(()) });
    /// // ... when the node is told to stop:
    /// worker.shutdown().await; // every handler has finished and its outcome is recorded
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future leaves the worker stopping in the background, as dropping the
    /// `Worker` does.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }

    /// Stops claiming tasks and waits at most `timeout` for the handlers in flight, then
    /// returns. A handler that finishes within the bound has its outcome recorded as with
    /// [`shutdown`](Self::shutdown) (and the leadership is given up once they all have).
    ///
    /// The handlers' [cancellation tokens](super::Task::cancel_token) are cancelled a tenth of
    /// `timeout` (at most a second) before the bound, so a handler that watches its token can end
    /// cleanly (its outcome is recorded as any other: an `Ok` acknowledges the task).
    /// Handlers still running when the bound runs out are dropped (at their next `.await`), and
    /// their leases, and those of the tasks claimed ahead that no handler started, are **given
    /// back**: their tasks are handed out again on the next tick, to
    /// another worker, with `attempt + 1`, as after a crash but without waiting out the lease.
    /// The giving back, the recording of outcomes still on their way and the release of the
    /// leadership finish in the background after this returns, while the runtime runs; if the
    /// process ends first, the leases run out by themselves and the tasks come back within a
    /// lease.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tokio_timewheel::durable::{DurableScheduler, Task};
    /// # async fn run(timers: DurableScheduler) {
    /// let worker = timers.run(|_task: Task| async { Ok::<(), std::io::Error>(()) });
    /// // ... when the node is told to stop, with 30 s before it is killed:
    /// worker.shutdown_timeout(Duration::from_secs(25)).await;
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future leaves the worker stopping in the background, as dropping the
    /// `Worker` does: its handlers are then not dropped.
    pub async fn shutdown_timeout(mut self, timeout: Duration) {
        let _ = self.stop.send(true);
        let grace = (timeout / 10).min(WIND_DOWN);
        if let Some(mut done) = self.done.take() {
            if tokio::time::timeout(timeout - grace, &mut done).await.is_err() {
                let _ = self.wind_down.send(true);
                if tokio::time::timeout(grace, &mut done).await.is_err() {
                    let _ = self.abandon.send(true);
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The longest time before `shutdown_timeout`'s bound at which the running handlers' tokens are
/// cancelled (a tenth of the bound when that is less).
const WIND_DOWN: Duration = Duration::from_secs(1);

pub(crate) fn start<F, Fut, E>(wheel: Arc<WheelClient>, handler: F) -> Worker
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display,
{
    let handler: Handler = Arc::new(move |task| {
        let fut = handler(task);
        Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
    });
    let (stop, stop_rx) = watch::channel(false);
    let (abandon, abandon_rx) = watch::channel(false);
    let (wind_down, wind_down_rx) = watch::channel(false);
    let status = Arc::new(Status {
        leads: wheel.partitions.iter().map(|_| Lead::default()).collect(),
        started: Arc::new(watch::Sender::new(0)),
    });
    let signals = (stop_rx, abandon_rx, wind_down_rx);
    let done = tokio::spawn(supervise(wheel, handler, signals, status.clone()));
    Worker { stop, abandon, wind_down, status, done: Some(done) }
}

/// Runs a leader loop and a claim loop for each partition; on stop, lets the handlers finish
/// (or drops them when told to abandon them) before the leaderships are given up.
async fn supervise(
    wheel: Arc<WheelClient>,
    handler: Handler,
    (stop, abandon, wind_down): (watch::Receiver<bool>, watch::Receiver<bool>, watch::Receiver<bool>),
    status: Arc<Status>,
) {
    let node = wheel.ids.next();
    let (leader_stop, leader_stop_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(wheel.cfg.concurrency));
    let freed = Arc::new(Notify::new());
    let mut leaders = JoinSet::new();
    let mut claimers = JoinSet::new();
    #[cfg(feature = "metrics")]
    {
        let (w, s) = (wheel.clone(), stop.clone());
        claimers.spawn(async move { gauges::publish_gauges(&w, s).await });
    }
    {
        let (w, n, s) = (wheel.clone(), node.clone(), stop.clone());
        claimers.spawn(async move { heartbeat(&w, &n, s).await });
    }
    for part in 0..wheel.partitions.len() {
        // Told by the partition's idle workers that its leader gave up the lead: bid at once.
        let bid_now = Arc::new(Notify::new());
        let (w, n, s, b, st) = (wheel.clone(), node.clone(), leader_stop_rx.clone(), bid_now.clone(), status.clone());
        leaders.spawn(async move {
            super::leader::run(&w, &w.partitions[part], n, s, &b, &st.leads[part], &st.started).await;
        });
        let (w, p, h, f) = (wheel.clone(), permits.clone(), handler.clone(), freed.clone());
        let signals = Signals {
            stop: stop.clone(),
            abandon: abandon.clone(),
            wind_down: wind_down.clone(),
            started: status.started.clone(),
            node: node.clone(),
        };
        // The partition's claim loop, and the second one it has while the link is slow.
        let pair = Arc::new(claim::Pair::new());
        let (w2, p2, h2, f2, s2, b2, pair2) =
            (w.clone(), p.clone(), h.clone(), f.clone(), signals.clone(), bid_now.clone(), pair.clone());
        claimers.spawn(async move { claim::claim_loop(&w, part, p, h, f, signals, &bid_now, &pair, false).await });
        claimers.spawn(async move { claim::relay_loop(&w2, part, p2, h2, f2, s2, &b2, &pair2).await });
    }
    while claimers.join_next().await.is_some() {}
    let _ = leader_stop.send(true);
    while leaders.join_next().await.is_some() {}
}

/// Says that worker `node` runs (in the wheel's registry of workers, `scripts::registry`) every
/// heartbeat until stopped, then takes it out.
async fn heartbeat(wheel: &WheelClient, node: &str, mut stop: watch::Receiver<bool>) {
    for beat in 0u64.. {
        // A failed beat is only a gap in the list: the next one mends it.
        registry::beat(wheel, node, wheel.clock.now_ms(), beat).await;
        tokio::select! {
            () = tokio::time::sleep(wheel.cfg.heartbeat()) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    registry::leave(wheel, node).await;
}
