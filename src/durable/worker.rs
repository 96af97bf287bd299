//! `Worker`: ticks the wheel when it holds the leadership, claims due tasks and runs the handler.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::conn::Inner;
use super::scripts::SCRIPTS;
use super::Task;
use crate::Error;

/// The most tasks one claim takes.
const CLAIM_BATCH: usize = 64;
/// The most outcomes recorded in one call.
const ACK_BATCH: usize = 64;
/// How long the claim loop waits to gather free handlers while tasks are waiting.
const GATHER: Duration = Duration::from_millis(2);
/// The shortest wait for a wake-up (with a very short tick and lease, waiting less would be
/// polling).
const MIN_WAIT: Duration = Duration::from_millis(10);

type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Handler = Arc<dyn Fn(Task) -> HandlerFuture + Send + Sync>;

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

pub(crate) fn start<F, Fut, E>(inner: Arc<Inner>, handler: F) -> Worker
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
    let done = tokio::spawn(supervise(inner, handler, stop_rx));
    Worker { stop, done: Some(done) }
}

/// Runs the leader loop and the claim loop; on stop, lets the handlers finish before the
/// leadership is given up.
async fn supervise(inner: Arc<Inner>, handler: Handler, stop: watch::Receiver<bool>) {
    let node = inner.ids.next();
    let (leader_stop, leader_stop_rx) = watch::channel(false);
    let bid_now = Arc::new(Notify::new());
    let leader = {
        let (inner, bid_now) = (inner.clone(), bid_now.clone());
        tokio::spawn(async move { super::leader::run(&inner, node, leader_stop_rx, &bid_now).await })
    };
    claim_loop(&inner, handler, stop, &bid_now).await;
    let _ = leader_stop.send(true);
    let _ = leader.await;
}

/// Whether the worker was told to stop (or its `Worker` was dropped).
fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

async fn claim_loop(inner: &Arc<Inner>, handler: Handler, mut stop: watch::Receiver<bool>, bid_now: &Notify) {
    let concurrency = inner.cfg.concurrency;
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut waker: Option<Waker> = None;
    let mut failures = 0u32;
    let mut backlog = false;
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let recorder = tokio::spawn(record_outcomes(inner.clone(), done_rx));
    // A claim that failed, perhaps after it landed (its reply lost): it is made again with the
    // same id and the same handlers, so that it gets back the tasks its first attempt took.
    let mut unanswered: Option<(String, Vec<OwnedSemaphorePermit>)> = None;
    // The last claim answered: its record of what it took is no longer needed.
    let mut answered = String::new();
    while !stopping(&stop) {
        let (claim_id, held) = match unanswered.take() {
            Some(retry) => retry,
            None => {
                let first = tokio::select! {
                    p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                    () = stopped(&mut stop) => break,
                };
                let mut held = vec![first];
                let batch = CLAIM_BATCH.min(concurrency);
                take_free(&permits, &mut held, batch);
                if backlog && held.len() < batch.div_ceil(4) {
                    // Tasks are waiting and handlers are finishing: gather a few more free
                    // handlers rather than claiming one task per round trip.
                    let until = tokio::time::Instant::now() + GATHER;
                    while held.len() < batch.div_ceil(4) {
                        match tokio::time::timeout_at(until, permits.clone().acquire_owned()).await {
                            Ok(Ok(p)) => held.push(p),
                            _ => break,
                        }
                    }
                    take_free(&permits, &mut held, batch);
                }
                (inner.ids.next(), held)
            }
        };
        let wanted = held.len();
        let tasks = match claim(inner, wanted, &claim_id, false, &answered).await {
            Ok(tasks) => {
                answered = claim_id;
                tasks
            }
            Err(e) => {
                unanswered = Some((claim_id, held));
                failures += 1;
                if failures == 1 {
                    tracing::warn!(wheel = %inner.name, error = %e, "claiming failed; retrying with a backoff");
                }
                // Soon enough that the retry finds the claimed tasks still leased to it.
                pause(&mut stop, retry_delay(failures).min(inner.cfg.lease() / 4)).await;
                continue;
            }
        };
        if failures > 0 {
            tracing::info!(wheel = %inner.name, "claiming works again");
            failures = 0;
        }
        let got = tasks.len();
        backlog = got == wanted;
        start_handlers(&handler, &done_tx, tasks, held);
        if got == wanted {
            // Perhaps more are ready: let another idle worker know, and claim again.
            if got > 0 {
                pass_on_wake(inner).await;
            }
            continue;
        }
        wait_for_wake(inner, &mut waker, &mut stop, bid_now).await;
    }
    // A claim left unanswered at the stop may have taken tasks: one last try gets them back
    // (taking nothing new) and runs them like the others in flight, rather than leaving them to
    // come back after the lease as another attempt.
    if let Some((claim_id, held)) = unanswered.take() {
        match claim(inner, held.len(), &claim_id, true, "").await {
            Ok(tasks) => start_handlers(&handler, &done_tx, tasks, held),
            Err(e) => lost(inner, "(an unanswered claim)", &e),
        }
    }
    // Wait for every handler in flight (each holds a permit until its ack or retry is recorded).
    drop(done_tx);
    let _ = permits.acquire_many(u32::try_from(concurrency).unwrap_or(u32::MAX)).await;
    let _ = recorder.await;
}

/// Runs the handler on each claimed task, one permit each (released once its outcome is
/// recorded); permits left over are released at once.
fn start_handlers(
    handler: &Handler,
    done_tx: &mpsc::UnboundedSender<Outcome>,
    tasks: Vec<(Task, String)>,
    mut held: Vec<OwnedSemaphorePermit>,
) {
    for ((task, token), permit) in tasks.into_iter().zip(held.drain(..)) {
        let (handler, done) = (handler.clone(), done_tx.clone());
        tokio::spawn(async move {
            let key = task.key.clone();
            let outcome = run_handler(&handler, task).await;
            // The permit goes with the outcome and is released once it is recorded.
            let _ = done.send(Outcome { key, token, outcome, _permit: permit });
        });
    }
}

/// Moves free permits into `held`, up to `batch` in all.
fn take_free(permits: &Arc<Semaphore>, held: &mut Vec<OwnedSemaphorePermit>, batch: usize) {
    while held.len() < batch {
        match permits.clone().try_acquire_owned() {
            Ok(p) => held.push(p),
            Err(_) => break,
        }
    }
}

fn retry_delay(failures: u32) -> Duration {
    (Duration::from_millis(50) * 2u32.saturating_pow(failures.saturating_sub(1).min(6))).min(Duration::from_secs(2))
}

async fn pause(stop: &mut watch::Receiver<bool>, wait: Duration) {
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        () = stopped(stop) => {}
    }
}

/// Claims up to `n` ready tasks under `claim_id`; with `replay_only`, only gets back what an
/// earlier attempt under this id took.
async fn claim(
    inner: &Inner,
    n: usize,
    claim_id: &str,
    replay_only: bool,
    previous: &str,
) -> Result<Vec<(Task, String)>, Error> {
    let mut inv = inner.script(&SCRIPTS.claim);
    inv.arg(n)
        .arg(inner.cfg.lease_ms)
        .arg(claim_id)
        .arg(if replay_only { "1" } else { "0" })
        .arg(inner.cfg.done_ttl_ms)
        .arg(previous);
    let flat: Vec<Vec<u8>> = inner.call(&inv, inner.cfg.response_timeout).await?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let number = |b: &[u8]| text(b).parse::<u64>().unwrap_or(0);
    Ok(flat
        .chunks_exact(5)
        .map(|t| {
            let task = Task {
                key: text(&t[0]),
                payload: t[1].clone(),
                attempt: u32::try_from(number(&t[2])).unwrap_or(u32::MAX),
                due: UNIX_EPOCH + Duration::from_millis(number(&t[3])),
            };
            (task, text(&t[4]))
        })
        .collect())
}

async fn pass_on_wake(inner: &Inner) {
    // As `wake()` in lua/common.lua: at most 8 tokens wait.
    push_token(inner, &inner.key("wake"), 7).await;
}

/// Pushes a token on the list `key`, keeping at most `keep + 1`.
async fn push_token(inner: &Inner, key: &str, keep: isize) {
    let mut conn = inner.conn.clone();
    let _: Result<(), _> =
        redis::pipe().lpush(key, 1).ignore().ltrim(key, 0, keep).ignore().query_async(&mut conn).await;
}

/// The connection an idle worker blocks on, and its client id on the server (to unblock it).
struct Waker {
    conn: ConnectionManager,
    /// Read again after any error: the connection may have been made anew since.
    id: Option<i64>,
}

/// How long an idle worker waits for a wake-up before it claims anyway. Every script that makes
/// tasks ready (the tick moving them on or requeueing expired leases, a failure's retry due at
/// once, `schedule` or `reschedule` of a task already due, `requeue_dead`) pushes one, and a
/// worker that claims a full batch passes it on, so this is only a safety net (for a wake-up
/// lost with a connection, say): a third of the leadership's lease (at most 10 s / 3), or a tick
/// if that is longer. An idle worker costs one wait and one claim per this, not per tick.
fn idle_wait(inner: &Inner) -> Duration {
    (inner.cfg.leader_lease() / 3).max(inner.cfg.tick()).max(MIN_WAIT)
}

/// Waits for a wake-up token (pushed when tasks become ready) for up to [`idle_wait`], on a
/// connection of its own: a blocking `BLPOP` would hold up every other call on the shared one.
/// When the wait fails (the token may have been taken and its reply lost), it pauses a tick and
/// returns, so the worker claims.
async fn wait_for_wake(inner: &Inner, waker: &mut Option<Waker>, stop: &mut watch::Receiver<bool>, bid_now: &Notify) {
    let wait = idle_wait(inner);
    let on_error = inner.cfg.tick().max(MIN_WAIT);
    if waker.is_none() {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(wait + inner.cfg.response_timeout))
            .set_connection_timeout(Some(inner.cfg.connect_timeout))
            .set_max_delay(Duration::from_secs(1));
        let connect = ConnectionManager::new_with_config(inner.client.clone(), config);
        match tokio::time::timeout(inner.cfg.connect_timeout, connect).await {
            Ok(Ok(conn)) => *waker = Some(Waker { conn, id: None }),
            _ => {
                pause(stop, on_error).await;
                return;
            }
        }
    }
    let Some(w) = waker.as_mut() else { return };
    let id = match w.id {
        Some(id) => Some(id),
        None => match redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut w.conn).await {
            Ok(id) => Some(*w.id.insert(id)),
            // A server that refuses `CLIENT ID` (renamed away, say): wait without it.
            Err(e) if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) => None,
            Err(_) => {
                pause(stop, on_error).await;
                return;
            }
        },
    };
    // Also on `lead`, where a leader giving up the lead leaves a token: this node then bids.
    let (wake, lead) = (inner.key("wake"), inner.key("lead"));
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(&wake).arg(&lead).arg(wait.as_secs_f64());
    let mut blpop = std::pin::pin!(cmd.query_async::<Option<(String, redis::Value)>>(&mut w.conn));
    let r = tokio::select! {
        r = &mut blpop => r,
        () = stopped(stop) => {
            // Dropping the wait would leave the `BLPOP` on the server, where it could still take
            // a token meant for the others: unblock it and see what it got (bounded by the
            // connection's response timeout), and put back a token it took.
            let Some(id) = id else {
                // No id to unblock it with: a spare token makes up for one it may take.
                pass_on_wake(inner).await;
                return;
            };
            let r = loop {
                let mut unblock = redis::cmd("CLIENT");
                unblock.arg("UNBLOCK").arg(id);
                let mut conn = inner.conn.clone();
                let _: Result<i64, _> = unblock.query_async(&mut conn).await;
                if let Ok(r) = tokio::time::timeout(MIN_WAIT, &mut blpop).await {
                    break r;
                }
            };
            match r {
                Ok(Some((key, _))) => push_token(inner, &key, if key == lead { 0 } else { 7 }).await,
                Ok(None) => {}
                // Perhaps it took one, its reply lost: one spare token costs an empty claim.
                Err(_) => pass_on_wake(inner).await,
            }
            return;
        }
    };
    match r {
        Ok(Some((key, _))) if key == lead => bid_now.notify_one(),
        Ok(_) => {}
        Err(_) => {
            w.id = None;
            pause(stop, on_error).await;
        }
    }
}

/// A handler's verdict on one delivery, on its way to Redis.
struct Outcome {
    key: String,
    token: String,
    outcome: Result<(), String>,
    /// Held until the outcome is recorded, so `shutdown` waits for it.
    _permit: OwnedSemaphorePermit,
}

/// Runs the handler on one task; a panic counts as a failure, whether the handler panics when
/// called or its future panics when polled (the call happens inside the first poll).
async fn run_handler(handler: &Handler, task: Task) -> Result<(), String> {
    let handler = handler.clone();
    let run: HandlerFuture = Box::pin(async move { handler(task).await });
    match CatchUnwind(run).await {
        Ok(result) => result,
        Err(panic) => Err(format!("the handler panicked: {}", panic_message(&*panic))),
    }
}

/// Records outcomes as they come: the acks of everything waiting in one call, each failure on
/// its own. Ends when every sender is gone and the channel is drained.
async fn record_outcomes(inner: Arc<Inner>, mut done: mpsc::UnboundedReceiver<Outcome>) {
    // Keep trying while the lease lasts: after it the task is handed out again anyway.
    let window = inner.cfg.lease().max(inner.cfg.retry_window());
    let mut batch = Vec::with_capacity(ACK_BATCH);
    while done.recv_many(&mut batch, ACK_BATCH).await > 0 {
        let mut acks = inner.script(&SCRIPTS.ack);
        acks.arg(inner.cfg.done_ttl_ms);
        let mut any = false;
        for o in &batch {
            match &o.outcome {
                Ok(()) => {
                    acks.arg(&o.key).arg(&o.token);
                    any = true;
                }
                Err(why) => {
                    tracing::debug!(wheel = %inner.name, key = %o.key, error = %why, "a handler failed");
                    let mut inv = inner.script(&SCRIPTS.fail);
                    inv.arg(&o.key)
                        .arg(&o.token)
                        .arg(why)
                        .arg(inner.cfg.max_attempts)
                        .arg(inner.cfg.backoff_ms)
                        .arg(super::conn::ceil_ms(super::MAX_BACKOFF))
                        .arg(inner.cfg.tick_ms)
                        .arg(inner.cfg.slots)
                        .arg(inner.cfg.done_ttl_ms);
                    if let Err(e) = inner.call::<i64>(&inv, window).await {
                        lost(&inner, &o.key, &e);
                    }
                }
            }
        }
        if any {
            if let Err(e) = inner.call::<Vec<i64>>(&acks, window).await {
                lost(&inner, "(a batch)", &e);
            }
        }
        batch.clear();
    }
}

fn lost(inner: &Inner, key: &str, e: &Error) {
    tracing::warn!(
        wheel = %inner.name, key = %key, error = %e,
        "could not record a delivery's outcome; the task is handed out again after its lease"
    );
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(not a string)".to_string()
    }
}

/// A future that turns a panic while it is polled into an `Err` with the panic's payload.
struct CatchUnwind(HandlerFuture);

impl Future for CatchUnwind {
    type Output = Result<Result<(), String>, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
