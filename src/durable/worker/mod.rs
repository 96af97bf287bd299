//! `Worker`: ticks the wheel when it holds the leadership (`leader`), claims due tasks (`claim`),
//! runs the handler on each (`handler`), records what it came to (`outcome`), and waits for a
//! wake-up when nothing is ready (`wake`). In loop order: [`start`] spawns `supervise`, which
//! runs the leader loop beside the claim loop (and, with the `metrics` feature, the loop that
//! publishes the wheel's gauges: `gauges`) and, on stop, lets the handlers finish before the
//! leadership is given up.

mod claim;
#[cfg(feature = "metrics")]
mod gauges;
mod handler;
mod outcome;
mod stop;
mod wake;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::wheel::Wheel;
use super::Task;
use handler::Handler;

/// A running worker, made by [`DurableScheduler::run`](super::DurableScheduler::run).
///
/// Call [`shutdown`](Self::shutdown) to stop it cleanly. Dropping it stops it too, without
/// waiting: handlers in flight run to their end, and a leadership it held is given up once they
/// have.
#[must_use = "dropping the Worker stops it: keep it, and call shutdown when the node stops"]
pub struct Worker {
    stop: watch::Sender<bool>,
    done: Option<JoinHandle<()>>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker").field("stopping", &*self.stop.borrow()).finish_non_exhaustive()
    }
}

impl Worker {
    /// Stops claiming tasks, waits for the handlers in flight to finish and their outcomes to be
    /// recorded (acknowledged or retried; while Redis is away that is retried for up to the
    /// lease, after which the task is handed out again anyway), and gives up the leadership if
    /// this worker held it, so another node takes over at once.
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
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub(crate) fn start<F, Fut, E>(wheel: Arc<Wheel>, handler: F) -> Worker
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
    let done = tokio::spawn(supervise(wheel, handler, stop_rx));
    Worker { stop, done: Some(done) }
}

/// Runs a leader loop and a claim loop for each partition; on stop, lets the handlers finish
/// before the leaderships are given up.
async fn supervise(wheel: Arc<Wheel>, handler: Handler, stop: watch::Receiver<bool>) {
    let node = wheel.ids.next();
    let (leader_stop, leader_stop_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(wheel.cfg.concurrency));
    let mut leaders = JoinSet::new();
    let mut claimers = JoinSet::new();
    #[cfg(feature = "metrics")]
    {
        let (w, s) = (wheel.clone(), stop.clone());
        claimers.spawn(async move { gauges::publish_gauges(&w, s).await });
    }
    for part in 0..wheel.partitions.len() {
        // Told by the partition's idle workers that its leader gave up the lead: bid at once.
        let bid_now = Arc::new(Notify::new());
        let (w, n, s, b) = (wheel.clone(), node.clone(), leader_stop_rx.clone(), bid_now.clone());
        leaders.spawn(async move { super::leader::run(&w, &w.partitions[part], n, s, &b).await });
        let (w, p, h, s) = (wheel.clone(), permits.clone(), handler.clone(), stop.clone());
        claimers.spawn(async move { claim::claim_loop(&w, part, p, h, s, &bid_now).await });
    }
    while claimers.join_next().await.is_some() {}
    let _ = leader_stop.send(true);
    while leaders.join_next().await.is_some() {}
}
