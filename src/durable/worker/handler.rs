//! Running the user's handler on claimed tasks: a runner holds one of the worker's handler
//! permits and runs the buffered tasks of its partition one after another until the buffer is
//! empty, so a handler that finishes starts the next task without a round trip. A panic is a
//! failure like an `Err`, so is a run longer than the handler timeout; each outcome goes to the
//! partition's [`Outcomes`].

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::lease::Deliveries;
use super::outcome::Outcomes;
use crate::durable::series::Specs;
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::{Ack, Claimed};
use crate::durable::time::unix_ms;
use crate::durable::Task;

pub(super) type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// The user's handler, its error turned into text.
pub(super) type Handler = Arc<dyn Fn(Task) -> HandlerFuture + Send + Sync>;

/// What running a claimed task needs: the handler, its time limit, where its outcome goes, the
/// list of the partition's deliveries (whose buffer the runners take their tasks from, and whose
/// leases are renewed while they wait and run), the worker's handler permits, the record of
/// how long runs take and the series' specs read so far.
#[derive(Clone)]
pub(super) struct Handlers {
    pub(super) handler: Handler,
    pub(super) timeout: Duration,
    pub(super) outcomes: Arc<Outcomes>,
    pub(super) deliveries: Arc<Deliveries>,
    pub(super) permits: Arc<Semaphore>,
    /// Told (every waiter) when a runner gives its permit back: the claim loops of every
    /// partition share the permits, and one whose buffer waits for a free handler starts a runner.
    pub(super) freed: Arc<Notify>,
    pub(super) runs: Arc<RunTimes>,
    /// The specs of the series this partition's tasks belong to, each read once.
    pub(super) specs: Arc<Specs>,
    pub(super) wheel: Arc<WheelClient>,
    pub(super) part: usize,
}

/// How long the handlers' runs take, as a moving average: how far ahead of its free handlers a
/// worker may claim (see [`RunTimes::ahead`]).
#[derive(Default)]
pub(super) struct RunTimes {
    /// The average run in ns, 0 until a first run ended.
    average_ns: AtomicU64,
}

/// The longest time before the handler timeout at which a handler's token is cancelled (a tenth
/// of the timeout when that is less).
const TIMEOUT_GRACE: Duration = Duration::from_secs(1);

/// How much work a worker claims ahead of its free handlers: about this long of it.
pub(super) const AHEAD: Duration = Duration::from_millis(50);

impl RunTimes {
    fn record(&self, run: Duration) {
        let ns = u64::try_from(run.as_nanos()).unwrap_or(u64::MAX).max(1);
        // An average over about the last 16 runs; a lost update between two runners is no harm.
        let old = self.average_ns.load(Ordering::Relaxed);
        let new = if old == 0 { ns } else { old - old / 16 + ns / 16 };
        self.average_ns.store(new.max(1), Ordering::Relaxed);
    }

    /// How many tasks `handlers` handlers start within [`AHEAD`] at the runs' average, at most
    /// `prefetch`: none before a first run has ended, since nothing says yet how long runs take.
    pub(super) fn ahead(&self, handlers: usize, prefetch: usize) -> usize {
        match self.average_ns.load(Ordering::Relaxed) {
            0 => 0,
            ns => {
                let n = (handlers as u128 * AHEAD.as_nanos()) / u128::from(ns);
                usize::try_from(n).unwrap_or(usize::MAX).min(prefetch)
            }
        }
    }
}

/// Starts runners, each holding one of `permits`, for the tasks in the buffer.
pub(super) fn start_runners(handlers: &Handlers, permits: Vec<OwnedSemaphorePermit>, runners: &mut JoinSet<()>) {
    for permit in permits {
        let h = handlers.clone();
        runners.spawn(run_buffered(h, permit));
    }
}

/// Runs the buffered tasks of one partition one after another while it holds `permit`. Its
/// permit goes back once the buffer is empty; if tasks came meanwhile and a permit is free, it
/// takes it again and goes on (the claim loop, which starts runners for what it buffers, may
/// have found none free an instant before).
async fn run_buffered(h: Handlers, permit: OwnedSemaphorePermit) {
    let mut permit = Some(permit);
    loop {
        let Some(claimed) = h.deliveries.next() else {
            drop(permit.take());
            h.deliveries.changed.notify_one();
            h.freed.notify_waiters();
            if h.deliveries.buffered() == 0 {
                return;
            }
            match h.permits.clone().try_acquire_owned() {
                Ok(p) => {
                    permit = Some(p);
                    continue;
                }
                Err(_) => return,
            }
        };
        if run_one(&h, claimed).await.is_err() {
            // Recording the failure is a task spawned just now, which waits in this thread's
            // next-to-run slot, where no other thread takes it: let it go first, before the
            // next handler, which may hold the thread (a panic's hook printing a backtrace
            // holds it for a few hundred ms in a debug build).
            tokio::task::yield_now().await;
        }
    }
}

/// Runs the handler on one claimed task, inside a `tracing` span `task` (target
/// `tokio_timewheel::durable`, level `INFO`) with the wheel's name, the partition, the key and
/// the attempt, which follows the span that scheduled the task (with the `opentelemetry`
/// feature), and hands its outcome on. Returns the outcome: `Err` for a failure.
async fn run_one(
    h: &Handlers,
    Claimed { task, token, spec, recurring, origin, options, start_at_ms }: Claimed,
) -> Result<(), ()> {
    if let Some(at) = start_at_ms {
        // A rate limit spaced its start (limits.lua): on the store's clock, as this node reads it.
        let wait = at.saturating_sub(h.wheel.clock.now_ms());
        if wait > 0 {
            tokio::select! {
                () = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
                () = task.cancel.cancelled() => {}
            }
        }
        // Told to stop while it waited (its lease lost, or the worker stopping): it does not
        // start, and no outcome goes out; its lease is given back (refused if it was lost). A
        // cancel request goes on below, to end it as cancelled.
        if task.cancel.is_cancelled() && !h.deliveries.requested(&token) {
            h.deliveries.forget_and_give_back(&task.key, &token);
            return Ok(());
        }
    }
    let span = tracing::info_span!(
        target: "tokio_timewheel::durable",
        "task",
        wheel = h.wheel.name(),
        partition = h.part,
        key = task.key.as_str(),
        attempt = task.attempt
    );
    // Linked to the span that scheduled the task; its child only when asked, and never a run of
    // a series, whose every run starts a trace of its own (one trace would grow without end).
    origin.follow(&span, h.wheel.cfg.trace_parent && !recurring);
    let (key, due, attempt) = (task.key.clone(), task.due, task.attempt);
    let (cancel, snooze) = (task.cancel.clone(), task.snooze.clone());
    if h.deliveries.requested(&token) {
        // Cancelled (`cancel_running`) while it waited in the buffer: it does not start, and its
        // outcome ends it as cancelled.
        tracing::debug!(wheel = %h.wheel.name(), key = %key, "a task claimed ahead was cancelled before it started");
        if h.deliveries.finish(&token) {
            let run = history_run(h, &key, unix_ms(due), task.attempt, None);
            h.outcomes.push(&h.wheel, h.part, Ack { key, token, next_due: String::new(), run, options }, Ok(()), None);
        }
        return Ok(());
    }
    let started = Instant::now();
    let started_ms = h.wheel.clock.now_ms();
    // The handler's token is cancelled a grace before the timeout, so it may end cleanly.
    let grace = (h.timeout / 10).min(TIMEOUT_GRACE);
    let near_timeout = async {
        tokio::time::sleep(h.timeout - grace).await;
        cancel.cancel();
        std::future::pending::<Result<(), String>>().await
    };
    let run = async {
        let handler = run_handler(&h.handler, task);
        let guarded = async {
            tokio::select! {
                outcome = handler => outcome,
                never = near_timeout => never,
            }
        };
        match tokio::time::timeout(h.timeout, guarded).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("the handler timed out after {:?} (the handler timeout)", h.timeout)),
        }
    };
    let outcome = run.instrument(span).await;
    let took = started.elapsed();
    h.runs.record(took);
    h.wheel.metrics.partition(h.part).handled(took, outcome.is_ok());
    // A delivery whose lease went to another worker, or that was abandoned at a shutdown, has no
    // outcome to record: Redis would refuse it.
    let result = outcome.as_ref().map(|_| ()).map_err(|_| ());
    if h.deliveries.finish(&token) {
        // A series with a spec: its next run, worked out now (on Redis's clock, as this node
        // estimates it), goes to the script that ends this one (see `durable/series.rs`).
        let next_due =
            spec.map_or_else(String::new, |spec| h.specs.next_due(&spec, unix_ms(due), h.wheel.clock.now_ms()));
        let took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let run = history_run(h, &key, unix_ms(due), attempt, Some((started_ms, took_us)));
        // A snooze asked for by the handler (`Task::snooze`) ends the run whatever it returned.
        let snooze_ms = snooze.load(std::sync::atomic::Ordering::Relaxed).checked_sub(1);
        h.outcomes.push(&h.wheel, h.part, Ack { key, token, next_due, run, options }, outcome, snooze_ms);
    }
    result
}

/// The run of a delivery for the wheel's history ([`Ack::run`]), or nothing when this node keeps
/// no history: an argument fewer for Redis to read.
fn history_run(h: &Handlers, key: &str, due_ms: u64, attempt: u32, handler: Option<(u64, u64)>) -> String {
    if h.wheel.cfg.history_limit == 0 {
        return String::new();
    }
    Ack::run(key, due_ms, attempt, handler)
}

/// Records how late each task was claimed (the lateness metric and histogram).
pub(super) fn claimed_late(wheel: &WheelClient, part: usize, tasks: &[Claimed]) {
    let late = |task: &Task| task.claimed_at.duration_since(task.due).unwrap_or_default();
    wheel.record_lateness(tasks.iter().map(|claimed| late(&claimed.task)));
    let metrics = wheel.metrics.partition(part);
    for c in tasks {
        metrics.fired(late(&c.task));
    }
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
