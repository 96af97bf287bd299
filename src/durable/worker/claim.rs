//! The claim loop: keeps the partition's buffer of claimed tasks topped up for the worker's
//! handlers (as many as are free, and as many more as they are expected to start within
//! [`AHEAD`](super::handler::AHEAD), at most the prefetch), claiming in one call that also
//! acknowledges what finished since the last (retried under the same claim id until a reply
//! comes); starts runners of handlers for what it buffered; and waits for a wake-up when nothing
//! is ready. Beside it, the partition's recorder of the acknowledgements no claim carried, and
//! renewer of leases. On stop, it gets back what an unanswered claim took and lets the handlers
//! run what the buffer holds and their outcomes be recorded, unless told to abandon them first.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;

use super::cancel::follow_cancels;
use super::handler::{claimed_late, start_runners, Handler, Handlers, RunTimes};
use super::lease::{give_back_leases, renew_leases, Deliveries};
use super::outcome::{lost, record_outcomes, refused, Outcomes};
use super::stop::{abandoned, pause, stopped, stopping};
use super::wake::{wait_for_wake, Waker};
use crate::durable::client::WheelClient;
use crate::durable::scripts::{self, Claim, Claimed};
use crate::durable::shared_conn::Window;

/// The most tasks one claim takes, and the most acknowledgements it carries: a claim of 64 with
/// 64 acknowledgements costs Redis about 4 million instructions (`src/durable/tests/costs.rs`), a few
/// milliseconds in which it serves no one else, as a claim of 64 did before it carried any.
const MAX_CLAIM: usize = 64;
/// How long the claim loop waits to gather free handlers while tasks are waiting and it claims
/// nothing ahead of them.
const GATHER: Duration = Duration::from_millis(2);

/// How a claim loop is told to stop, to abandon its handlers, and tells that it claims; and the
/// id of its worker's node, which its claims record.
pub(super) struct Signals {
    /// True: stop claiming, let the handlers finish.
    pub(super) stop: watch::Receiver<bool>,
    /// True: drop the handlers still running (the end of `shutdown_timeout`).
    pub(super) abandon: watch::Receiver<bool>,
    /// True: cancel the running handlers' tokens (`shutdown_timeout`'s bound is near).
    pub(super) wind_down: watch::Receiver<bool>,
    /// Counts the loops of the worker that have had their first answer from Redis.
    pub(super) started: Arc<watch::Sender<usize>>,
    /// The id of the worker's node.
    pub(super) node: String,
}

/// Claims from partition `part` for handlers that hold one of `permits` each (the worker's
/// concurrency, shared by the claim loops of every partition).
pub(super) async fn claim_loop(
    wheel: &Arc<WheelClient>,
    part: usize,
    permits: Arc<Semaphore>,
    handler: Handler,
    freed: Arc<Notify>,
    signals: Signals,
    bid_now: &Notify,
) {
    let Signals { mut stop, mut abandon, mut wind_down, started, node } = signals;
    let node = node.as_str();
    let (concurrency, prefetch) = (wheel.cfg.concurrency, wheel.cfg.prefetch);
    let keys = &wheel.partitions[part].keys;
    let mut waker: Option<Waker> = None;
    let mut failures = 0u32;
    let mut backlog = false;
    let mut claimed_once = false;
    let deliveries = Arc::new(Deliveries::default());
    let outcomes = Arc::new(Outcomes::new(deliveries.clone()));
    let recorder = tokio::spawn(record_outcomes(wheel.clone(), part, outcomes.clone()));
    let renewer = tokio::spawn(renew_leases(wheel.clone(), part, deliveries.clone()));
    let cancels = tokio::spawn(follow_cancels(wheel.clone(), part, deliveries.clone()));
    let handlers = Handlers {
        handler,
        timeout: wheel.cfg.handler_timeout,
        outcomes: outcomes.clone(),
        deliveries: deliveries.clone(),
        permits: permits.clone(),
        freed,
        runs: Arc::new(RunTimes::default()),
        wheel: wheel.clone(),
        part,
    };
    let mut runners = JoinSet::new();
    // A claim that failed, perhaps after it landed (its reply lost): it is made again with the
    // same id and the same acknowledgements, so that it gets back the tasks its first attempt
    // took.
    // A claim whose reply never came: its id, its acknowledgements, and when it was first sent
    // (the leases of what it took, if it took anything, started after that).
    let mut unanswered: Option<(String, Vec<scripts::Ack>, tokio::time::Instant)> = None;
    // The last claim answered: its record of what it took is no longer needed.
    let mut answered = String::new();
    while !stopping(&stop) {
        while runners.try_join_next().is_some() {}
        let (claim_id, acks, want, sent) = match unanswered.take() {
            Some((id, acks, sent)) => (id, acks, room(&handlers, concurrency, prefetch).max(1), sent),
            None => {
                let room = wait_for_room(&handlers, concurrency, prefetch, backlog, &mut runners, &mut stop);
                let Some(want) = room.await else {
                    break;
                };
                // The leases of what this call claims start after it is sent.
                (wheel.ids.next(), outcomes.take(MAX_CLAIM), want, tokio::time::Instant::now())
            }
        };
        let call = Claim { n: want, claim_id: &claim_id, replay_only: false, previous: &answered, node, acks: &acks };
        let reply = match scripts::claim_and_ack(wheel, keys, &call, Window::Response).await {
            Ok(reply) => reply,
            Err(e) => {
                unanswered = Some((claim_id, acks, sent));
                failures += 1;
                if failures == 1 {
                    tracing::warn!(wheel = %wheel.name(), partition = part, error = %e, "claiming failed; retrying with a backoff");
                }
                // Soon enough that the retry finds the claimed tasks still leased to it.
                pause(&mut stop, retry_delay(failures).min(wheel.cfg.lease() / 4)).await;
                continue;
            }
        };
        refused(wheel, &acks, &reply.acked);
        for ack in &acks {
            deliveries.forget(&ack.token);
        }
        answered = claim_id;
        if failures > 0 {
            tracing::info!(wheel = %wheel.name(), "claiming works again");
            failures = 0;
        }
        if !claimed_once {
            claimed_once = true;
            started.send_modify(|n| *n += 1);
        }
        let got = reply.claimed.len();
        backlog = got == want;
        run(&handlers, &deliveries, reply.claimed, sent + wheel.cfg.lease(), &mut runners).await;
        if got == want {
            // Perhaps more are ready (the claim passed a wake-up on to an idle worker, if none
            // was waiting yet): claim again once there is room.
            continue;
        }
        outcomes.set_idle(true);
        wait_for_wake(wheel, keys, &mut waker, &mut stop, bid_now).await;
        outcomes.set_idle(false);
    }
    // A claim left unanswered at the stop may have taken tasks: one last try gets them back
    // (taking nothing new) and runs them like the others in flight, rather than leaving them to
    // come back after the lease as another attempt.
    if let Some((claim_id, acks, sent)) = unanswered.take() {
        let call = Claim { n: 0, claim_id: &claim_id, replay_only: true, previous: "", node, acks: &acks };
        match scripts::claim_and_ack(wheel, keys, &call, Window::Response).await {
            Ok(reply) => {
                refused(wheel, &acks, &reply.acked);
                for ack in &acks {
                    deliveries.forget(&ack.token);
                }
                run(&handlers, &deliveries, reply.claimed, sent + wheel.cfg.lease(), &mut runners).await;
            }
            Err(e) => {
                lost(wheel, "(an unanswered claim)", &e);
                outcomes.put_back(acks);
            }
        }
    }
    // Wait for the handlers to run what the buffer holds (each runner holds a permit until the
    // buffer is empty), or drop those still running when told to abandon them.
    let all = u32::try_from(concurrency).unwrap_or(u32::MAX);
    let mut wound_down = false;
    loop {
        tokio::select! {
            told = async { wind_down.wait_for(|w| *w).await.map(|_| ()) }, if !wound_down => {
                wound_down = true;
                if told.is_ok() {
                    deliveries.cancel_running();
                }
            }
            held = permits.clone().acquire_many_owned(all) => {
                if deliveries.buffered() == 0 {
                    break;
                }
                // A runner ended just as tasks came: start runners again.
                drop(held);
                start_free_runners(&handlers, &deliveries, &mut runners);
                tokio::task::yield_now().await;
            }
            () = abandoned(&mut abandon) => {
                runners.abort_all();
                deliveries.abandon(wheel, part).await;
                break;
            }
        }
    }
    drop(handlers);
    while runners.join_next().await.is_some() {}
    outcomes.close();
    let _ = recorder.await;
    renewer.abort();
    cancels.abort();
}

/// How many tasks the buffer has room for: the free handlers, and as many more as the handlers
/// are expected to start within `AHEAD`, less what the buffer holds.
fn room(handlers: &Handlers, concurrency: usize, prefetch: usize) -> usize {
    let ahead = handlers.runs.ahead(concurrency, prefetch);
    let free = handlers.permits.available_permits();
    (free + ahead).saturating_sub(handlers.deliveries.buffered()).min(MAX_CLAIM)
}

/// Waits until a claim is worth making, and returns how many tasks it is to take; `None` when
/// told to stop. A claim is worth making when handlers are free and the buffer is empty, or when
/// the buffer has run down far enough for a full claim (or to half of what is claimed ahead,
/// when that is less than two claims' worth), so that a busy worker's claims are full ones. While tasks are waiting (`backlog`)
/// and nothing is claimed ahead, it gathers free handlers a moment rather than claiming one task
/// per round trip.
async fn wait_for_room(
    handlers: &Handlers,
    concurrency: usize,
    prefetch: usize,
    backlog: bool,
    runners: &mut JoinSet<()>,
    stop: &mut watch::Receiver<bool>,
) -> Option<usize> {
    let mut gather_until = None;
    loop {
        let changed = handlers.deliveries.changed.notified();
        let mut freed = std::pin::pin!(handlers.freed.notified());
        freed.as_mut().enable();
        // Tasks wait in the buffer and a handler is free (another partition's runner gave its
        // permit back): run them.
        start_free_runners(handlers, &handlers.deliveries, runners);
        let ahead = handlers.runs.ahead(concurrency, prefetch);
        let (free, buffered) = (handlers.permits.available_permits(), handlers.deliveries.buffered());
        let room = room(handlers, concurrency, prefetch);
        let low_water = ahead.saturating_sub(MAX_CLAIM).max(ahead / 2);
        let worth = room > 0 && ((buffered == 0 && free > 0) || (ahead > 0 && buffered <= low_water));
        if worth {
            let few = backlog && ahead == 0 && room < concurrency.min(MAX_CLAIM).div_ceil(4);
            let until = *gather_until.get_or_insert_with(|| tokio::time::Instant::now() + GATHER);
            if !few || tokio::time::Instant::now() >= until {
                return Some(room);
            }
            tokio::select! {
                () = changed => {}
                () = &mut freed => {}
                () = tokio::time::sleep_until(until) => {}
                () = stopped(stop) => return None,
            }
            continue;
        }
        tokio::select! {
            () = changed => {}
            () = &mut freed => {}
            () = stopped(stop) => return None,
        }
    }
}

/// Buffers what a claim took (how late each was claimed recorded first) and starts runners for
/// it on the free handlers. A claim answered after the worker was abandoned gives its tasks
/// back at once.
async fn run(
    handlers: &Handlers,
    deliveries: &Deliveries,
    claimed: Vec<Claimed>,
    until: tokio::time::Instant,
    runners: &mut JoinSet<()>,
) {
    if claimed.is_empty() {
        return;
    }
    claimed_late(&handlers.wheel, handlers.part, &claimed);
    let back = deliveries.buffer(claimed, until);
    if !back.is_empty() {
        let back: Vec<(String, String)> = back.into_iter().map(|c| (c.task.key, c.token)).collect();
        give_back_leases(&handlers.wheel, handlers.part, &back).await;
    }
    start_free_runners(handlers, deliveries, runners);
}

/// Starts a runner on each free handler, up to what the buffer holds.
fn start_free_runners(handlers: &Handlers, deliveries: &Deliveries, runners: &mut JoinSet<()>) {
    let mut held = Vec::new();
    while held.len() < deliveries.buffered() {
        match handlers.permits.clone().try_acquire_owned() {
            Ok(p) => held.push(p),
            Err(_) => break,
        }
    }
    start_runners(handlers, held, runners);
}

fn retry_delay(failures: u32) -> Duration {
    (Duration::from_millis(50) * 2u32.saturating_pow(failures.saturating_sub(1).min(6))).min(Duration::from_secs(2))
}
