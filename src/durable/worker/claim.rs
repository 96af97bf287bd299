//! The claim loop: gathers free handlers, claims that many ready tasks in one call (retried under
//! the same claim id until a reply comes), starts their handlers, and waits for a wake-up when
//! nothing is ready. Beside it, the partition's recorder of outcomes and renewer of leases. On
//! stop, it gets back what an unanswered claim took and lets every handler finish and its
//! outcome be recorded, unless told to abandon them first.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};

use super::handler::{start_handlers, Handler, Handlers};
use super::lease::{renew_leases, Deliveries};
use super::outcome::{lost, record_outcomes};
use super::stop::{abandoned, pause, stopped, stopping};
use super::wake::{pass_on_wake, wait_for_wake, Waker};
use crate::durable::client::WheelClient;
use crate::durable::scripts;

/// The most tasks one claim takes.
const CLAIM_BATCH: usize = 64;
/// How long the claim loop waits to gather free handlers while tasks are waiting.
const GATHER: Duration = Duration::from_millis(2);

/// How a claim loop is told to stop, to abandon its handlers, and tells that it claims.
pub(super) struct Signals {
    /// True: stop claiming, let the handlers finish.
    pub(super) stop: watch::Receiver<bool>,
    /// True: drop the handlers still running (the end of `shutdown_timeout`).
    pub(super) abandon: watch::Receiver<bool>,
    /// Counts the loops of the worker that have had their first answer from Redis.
    pub(super) started: Arc<watch::Sender<usize>>,
}

/// Claims from partition `part` for handlers that hold one of `permits` each (the worker's
/// concurrency, shared by the claim loops of every partition: the semaphore hands freed permits
/// to the waiting loops in turn, so partitions with work share the handlers fairly).
pub(super) async fn claim_loop(
    wheel: &Arc<WheelClient>,
    part: usize,
    permits: Arc<Semaphore>,
    handler: Handler,
    signals: Signals,
    bid_now: &Notify,
) {
    let Signals { mut stop, mut abandon, started } = signals;
    let concurrency = wheel.cfg.concurrency;
    let keys = &wheel.partitions[part].keys;
    let mut waker: Option<Waker> = None;
    let mut failures = 0u32;
    let mut backlog = false;
    let mut claimed_once = false;
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let deliveries = Arc::new(Deliveries::default());
    let recorder = tokio::spawn(record_outcomes(wheel.clone(), part, done_rx, deliveries.clone()));
    let renewer = tokio::spawn(renew_leases(wheel.clone(), part, deliveries.clone()));
    let handlers =
        Handlers { handler, timeout: wheel.cfg.handler_timeout, done: done_tx, deliveries: deliveries.clone() };
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
                (wheel.ids.next(), held)
            }
        };
        let wanted = held.len();
        let tasks = match scripts::claim(wheel, keys, wanted, &claim_id, false, &answered).await {
            Ok(tasks) => {
                answered = claim_id;
                tasks
            }
            Err(e) => {
                unanswered = Some((claim_id, held));
                failures += 1;
                if failures == 1 {
                    tracing::warn!(wheel = %wheel.name(), partition = part, error = %e, "claiming failed; retrying with a backoff");
                }
                // Soon enough that the retry finds the claimed tasks still leased to it.
                pause(&mut stop, retry_delay(failures).min(wheel.cfg.lease() / 4)).await;
                continue;
            }
        };
        if failures > 0 {
            tracing::info!(wheel = %wheel.name(), "claiming works again");
            failures = 0;
        }
        if !claimed_once {
            claimed_once = true;
            started.send_modify(|n| *n += 1);
        }
        let got = tasks.len();
        backlog = got == wanted;
        start_handlers(wheel, part, &handlers, tasks, held);
        if got == wanted {
            // Perhaps more are ready: let another idle worker know, and claim again.
            if got > 0 {
                pass_on_wake(wheel, keys).await;
            }
            continue;
        }
        wait_for_wake(wheel, keys, &mut waker, &mut stop, bid_now).await;
    }
    // A claim left unanswered at the stop may have taken tasks: one last try gets them back
    // (taking nothing new) and runs them like the others in flight, rather than leaving them to
    // come back after the lease as another attempt.
    if let Some((claim_id, held)) = unanswered.take() {
        match scripts::claim(wheel, keys, held.len(), &claim_id, true, "").await {
            Ok(tasks) => start_handlers(wheel, part, &handlers, tasks, held),
            Err(e) => lost(wheel, "(an unanswered claim)", &e),
        }
    }
    // Wait for every handler in flight (each holds a permit until its ack or retry is recorded,
    // its lease renewed meanwhile), or drop those still running when told to abandon them.
    drop(handlers);
    tokio::select! {
        _ = permits.acquire_many(u32::try_from(concurrency).unwrap_or(u32::MAX)) => {}
        () = abandoned(&mut abandon) => deliveries.abandon(wheel, part).await,
    }
    let _ = recorder.await;
    renewer.abort();
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
