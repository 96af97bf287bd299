//! Running the user's handler on one claimed task: a panic is a failure like an `Err`, so is a
//! run longer than the handler timeout; the outcome goes to the recorder with the handler's
//! permit.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tracing::Instrument;

use super::lease::Deliveries;
use super::outcome::Outcome;
use crate::durable::client::WheelClient;
use crate::durable::scripts::Claimed;
use crate::durable::Task;

pub(super) type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// The user's handler, its error turned into text.
pub(super) type Handler = Arc<dyn Fn(Task) -> HandlerFuture + Send + Sync>;

/// What running a claimed task needs: the handler, its time limit, where its outcome goes, and
/// the list of the partition's deliveries (whose leases are renewed while they run).
#[derive(Clone)]
pub(super) struct Handlers {
    pub(super) handler: Handler,
    pub(super) timeout: Duration,
    pub(super) done: mpsc::UnboundedSender<Outcome>,
    pub(super) deliveries: Arc<Deliveries>,
}

/// Runs the handler on each task claimed from partition `part`, one permit each (released once
/// its outcome is recorded); permits left over are released at once. Each runs inside a
/// `tracing` span `task` (target `tokio_timewheel::durable`, level `INFO`) with the wheel's name,
/// the partition, the key and the attempt. How late each was claimed is recorded first.
pub(super) fn start_handlers(
    wheel: &WheelClient,
    part: usize,
    handlers: &Handlers,
    tasks: Vec<Claimed>,
    mut held: Vec<OwnedSemaphorePermit>,
) {
    let late = |task: &Task| task.claimed_at.duration_since(task.due).unwrap_or_default();
    wheel.record_lateness(tasks.iter().map(|claimed| late(&claimed.task)));
    let metrics = wheel.metrics.partition(part);
    for (Claimed { task, token }, permit) in tasks.into_iter().zip(held.drain(..)) {
        metrics.fired(late(&task));
        let span = tracing::info_span!(
            target: "tokio_timewheel::durable",
            "task",
            wheel = wheel.name(),
            partition = part,
            key = task.key.as_str(),
            attempt = task.attempt
        );
        let h = handlers.clone();
        let (listed_key, listed_token) = (task.key.clone(), token.clone());
        handlers.deliveries.start(&listed_key, &listed_token, move || {
            tokio::spawn(
                async move {
                    let key = task.key.clone();
                    let outcome = match tokio::time::timeout(h.timeout, run_handler(&h.handler, task)).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(format!("the handler timed out after {:?} (the handler timeout)", h.timeout)),
                    };
                    // A delivery whose lease went to another worker, or that was abandoned at a
                    // shutdown, has no outcome to record: Redis would refuse it.
                    if h.deliveries.finish(&token) {
                        // The permit goes with the outcome and is released once it is recorded.
                        let _ = h.done.send(Outcome { key, token, outcome, _permit: permit });
                    }
                }
                .instrument(span),
            )
            .abort_handle()
        });
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
