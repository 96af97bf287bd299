//! Recording what each handler's run came to. The acknowledgements wait in [`Outcomes`] for the
//! claim loop's next claim, which carries them (one call a cycle: `claim.lua` acknowledges, then
//! claims); [`record_outcomes`] sends those no claim took: at once while the claim loop waits
//! for a wake-up (no claim is coming), else once [`ACK_BATCH`] wait or the oldest has waited
//! [`ACK_LINGER`], one call on the wire at a time. Each failure goes on a task of its own (a
//! retry after its backoff, or the dead letters), beside the acks rather than ahead of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::lease::Deliveries;
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::{self, Ack, Failed};
use crate::durable::store::shared_conn::Window;
use crate::Error;

/// The most acknowledgements one `ack.lua` call carries: bounded, so that one call holds Redis
/// for a few milliseconds at most (BENCHMARKS.md, "The fire path's Redis work, cut").
pub(super) const ACK_BATCH: usize = 128;
/// How long an acknowledgement waits for a claim to carry it before it goes on its own.
pub(super) const ACK_LINGER: Duration = Duration::from_millis(10);

/// The outcomes of one partition's deliveries on their way to Redis.
pub(super) struct Outcomes {
    /// The partition's deliveries, which forget each one once its outcome is recorded.
    deliveries: Arc<Deliveries>,
    pending: Mutex<Pending>,
    /// Told when an acknowledgement arrives in an empty list or fills a batch, when the claim
    /// loop starts waiting for a wake-up, and when the worker stops.
    arrived: Notify,
    /// True while the claim loop waits for a wake-up: no claim is coming to carry the acks.
    idle: AtomicBool,
}

#[derive(Default)]
struct Pending {
    /// The deliveries whose handlers succeeded, oldest first.
    acks: Vec<Ack>,
    /// When the oldest came.
    since: Option<Instant>,
    /// The failures being recorded, each on a task of its own.
    failures: JoinSet<()>,
    /// No outcome comes any more: send what is left and end.
    closed: bool,
}

impl Outcomes {
    pub(super) fn new(deliveries: Arc<Deliveries>) -> Self {
        Outcomes { deliveries, pending: Mutex::default(), arrived: Notify::new(), idle: AtomicBool::new(false) }
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome of the delivery `ack` of partition `part`: `snooze_ms`, when the handler
    /// snoozed the task (whatever it returned), else `outcome`.
    pub(super) fn push(
        &self,
        wheel: &Arc<WheelClient>,
        part: usize,
        ack: Ack,
        outcome: Result<(), String>,
        snooze_ms: Option<u64>,
    ) {
        let mut pending = self.pending();
        if let Some(ms) = snooze_ms {
            let (wheel, deliveries) = (wheel.clone(), self.deliveries.clone());
            pending.failures.spawn(async move {
                let window = Window::Within(wheel.cfg.lease().max(wheel.cfg.retry_window()));
                if record_snooze(&wheel, part, &ack, ms, window).await {
                    deliveries.forget(&ack.token);
                } else {
                    deliveries.forget_and_give_back(&ack.key, &ack.token);
                }
            });
            return;
        }
        match outcome {
            Ok(()) => {
                pending.acks.push(ack);
                let n = pending.acks.len();
                if n == 1 {
                    pending.since = Some(Instant::now());
                }
                drop(pending);
                if n == 1 || n == ACK_BATCH {
                    self.arrived.notify_one();
                }
            }
            Err(why) => {
                let (wheel, deliveries) = (wheel.clone(), self.deliveries.clone());
                pending.failures.spawn(async move {
                    let window = Window::Within(wheel.cfg.lease().max(wheel.cfg.retry_window()));
                    if record_failure(&wheel, part, &ack, &why, window).await {
                        deliveries.forget(&ack.token);
                    } else {
                        deliveries.forget_and_give_back(&ack.key, &ack.token);
                    }
                });
            }
        }
    }

    /// Takes up to `n` acknowledgements, oldest first, for a claim to carry.
    pub(super) fn take(&self, n: usize) -> Vec<Ack> {
        let mut pending = self.pending();
        let n = n.min(pending.acks.len());
        let taken: Vec<Ack> = pending.acks.drain(..n).collect();
        if pending.acks.is_empty() {
            pending.since = None;
        } else if n > 0 {
            // What is left waited from about now on: it missed this claim by no fault of its own.
            pending.since = Some(Instant::now());
        }
        taken
    }

    /// Puts back acknowledgements that a claim did not deliver (a claim given up at a stop).
    pub(super) fn put_back(&self, acks: Vec<Ack>) {
        let mut pending = self.pending();
        if acks.is_empty() {
            return;
        }
        let rest = std::mem::replace(&mut pending.acks, acks);
        pending.acks.extend(rest);
        pending.since.get_or_insert_with(Instant::now);
        drop(pending);
        self.arrived.notify_one();
    }

    /// The claim loop waits for a wake-up (`true`) or claims again (`false`).
    pub(super) fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::Relaxed);
        if idle {
            self.arrived.notify_one();
        }
    }

    /// No outcome comes any more.
    pub(super) fn close(&self) {
        self.pending().closed = true;
        self.arrived.notify_one();
    }

    /// Whether the recorder sends a call now, whether it is to end, and else how long until the
    /// oldest acknowledgement has waited its linger.
    fn due(&self) -> (bool, bool, Option<Duration>) {
        let pending = self.pending();
        if pending.acks.is_empty() {
            return (false, pending.closed, None);
        }
        let waited = pending.since.map_or(ACK_LINGER, |s| s.elapsed());
        let now = pending.closed
            || self.idle.load(Ordering::Relaxed)
            || pending.acks.len() >= ACK_BATCH
            || waited >= ACK_LINGER;
        (now, false, Some(ACK_LINGER.saturating_sub(waited)))
    }
}

/// Sends the acknowledgements of partition `part` that no claim took (see the module docs),
/// until the worker stops and every outcome is recorded. Once an outcome is recorded,
/// `deliveries` forgets its delivery (its lease is renewed until then).
pub(super) async fn record_outcomes(wheel: Arc<WheelClient>, part: usize, outcomes: Arc<Outcomes>) {
    let deliveries = outcomes.deliveries.clone();
    let keys = &wheel.partitions[part].keys;
    // Keep trying while the lease lasts: after it the task is handed out again anyway.
    let window = Window::Within(wheel.cfg.lease().max(wheel.cfg.retry_window()));
    loop {
        let arrived = outcomes.arrived.notified();
        let (send, end, wait) = outcomes.due();
        if send {
            let acks = outcomes.take(ACK_BATCH);
            let sent = send_acks(&wheel, keys, &acks, window).await;
            for ack in &acks {
                if sent {
                    deliveries.forget(&ack.token);
                } else {
                    deliveries.forget_and_give_back(&ack.key, &ack.token);
                }
            }
            continue;
        }
        if end {
            break;
        }
        match wait {
            Some(wait) => {
                tokio::select! {
                    () = arrived => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
            None => arrived.await,
        }
    }
    let mut failures = std::mem::take(&mut outcomes.pending().failures);
    while failures.join_next().await.is_some() {}
}

/// Acknowledges `acks` in one `ack.lua` call, logging what was refused or lost. False when the
/// call got no answer.
async fn send_acks(wheel: &WheelClient, keys: &crate::durable::WheelKeys, acks: &[Ack], window: Window) -> bool {
    match scripts::ack(wheel, keys, acks, window).await {
        Ok(answers) => {
            refused(wheel, acks, &answers);
            true
        }
        Err(e) => {
            lost(wheel, "(a batch)", &e);
            false
        }
    }
}

/// Logs the acknowledgements that Redis refused.
pub(super) fn refused(wheel: &WheelClient, deliveries: &[Ack], answers: &[bool]) {
    for (Ack { key, .. }, acked) in deliveries.iter().zip(answers) {
        if !acked {
            // Its lease went to another worker (this one's renewal was refused too, unless the
            // two crossed), or an earlier attempt of this call landed.
            tracing::debug!(wheel = %wheel.name(), key = %key, "an acknowledgement was refused");
        }
    }
}

/// Records that the delivery `ack` failed with `why`. False when the call got no answer.
async fn record_failure(wheel: &WheelClient, part: usize, ack: &Ack, why: &str, window: Window) -> bool {
    let key = ack.key.as_str();
    tracing::debug!(wheel = %wheel.name(), key = %key, error = %why, "a handler failed");
    let metrics = wheel.metrics.partition(part);
    match scripts::fail(wheel, &wheel.partitions[part].keys, ack, why, window).await {
        Ok(Failed::Dead) => {
            metrics.dead();
            tracing::warn!(
                wheel = %wheel.name(), key = %key, error = %why,
                "a task failed its last attempt and went to the dead letters"
            );
        }
        Ok(Failed::Retried) => metrics.retried(),
        Ok(Failed::Refused | Failed::Snoozed) => {}
        Ok(Failed::Cancelled) => {
            tracing::debug!(wheel = %wheel.name(), key = %key, "a cancelled task's handler failed; it ends as cancelled")
        }
        Err(e) => {
            lost(wheel, key, &e);
            return false;
        }
    }
    true
}

/// Records that the delivery `ack` was snoozed for `ms`. False when the call got no answer.
async fn record_snooze(wheel: &WheelClient, part: usize, ack: &Ack, ms: u64, window: Window) -> bool {
    let key = ack.key.as_str();
    tracing::debug!(wheel = %wheel.name(), key = %key, snooze_ms = ms, "a handler snoozed its task");
    match scripts::snooze(wheel, &wheel.partitions[part].keys, ack, ms, window).await {
        Ok(Failed::Snoozed) => wheel.metrics.partition(part).snoozed(),
        Ok(_) => {}
        Err(e) => {
            lost(wheel, key, &e);
            return false;
        }
    }
    true
}

pub(super) fn lost(wheel: &WheelClient, key: &str, e: &Error) {
    tracing::warn!(
        wheel = %wheel.name(), key = %key, error = %e,
        "could not record a delivery's outcome; its lease is given back once Redis answers, or runs out"
    );
}
