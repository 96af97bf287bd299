//! Recording what each handler's run came to: the acks the way a batching client sends, one
//! call on the wire at a time with everything that came in meanwhile; each failure on its own (a
//! retry after its backoff, or the dead letters), beside the acks rather than ahead of them.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinSet;

use super::lease::Deliveries;
use crate::durable::client::WheelClient;
use crate::durable::scripts::{self, Failed};
use crate::durable::shared_conn::Window;
use crate::Error;

/// The most outcomes recorded in one call.
const ACK_BATCH: usize = 64;

/// A handler's verdict on one delivery, on its way to Redis.
pub(super) struct Outcome {
    pub(super) key: String,
    pub(super) token: String,
    pub(super) outcome: Result<(), String>,
    /// Held until the outcome is recorded, so `shutdown` waits for it.
    pub(super) _permit: OwnedSemaphorePermit,
}

/// Records the outcomes of partition `part`'s deliveries as they come: the acks that came in
/// while the last ack call was on the wire go together in the next (one call at a time: a lone
/// ack goes at once, a busy worker sends few calls); each failure goes on a task of its own, so
/// that its call never holds the acks back. Once an outcome is recorded, `running` forgets its
/// delivery (its lease is renewed until then). Ends when every sender is gone, the channel is
/// drained and every failure is recorded.
pub(super) async fn record_outcomes(
    wheel: Arc<WheelClient>,
    part: usize,
    mut done: mpsc::UnboundedReceiver<Outcome>,
    deliveries: Arc<Deliveries>,
) {
    let keys = &wheel.partitions[part].keys;
    // Keep trying while the lease lasts: after it the task is handed out again anyway.
    let window = Window::Within(wheel.cfg.lease().max(wheel.cfg.retry_window()));
    let mut batch = Vec::with_capacity(ACK_BATCH);
    let mut failures = JoinSet::new();
    while done.recv_many(&mut batch, ACK_BATCH).await > 0 {
        let mut acks = Vec::with_capacity(batch.len());
        for o in batch.drain(..) {
            match o.outcome {
                Ok(()) => acks.push(o),
                Err(why) => {
                    let Outcome { key, token, _permit: permit, .. } = o;
                    let (wheel, deliveries) = (wheel.clone(), deliveries.clone());
                    failures.spawn(async move {
                        record_failure(wheel, part, &key, &token, &why, window).await;
                        deliveries.forget(&token);
                        drop(permit);
                    });
                }
            }
        }
        while failures.try_join_next().is_some() {}
        if !acks.is_empty() {
            let deliveries: Vec<(&str, &str)> = acks.iter().map(|o| (o.key.as_str(), o.token.as_str())).collect();
            match scripts::ack(&wheel, keys, &deliveries, window).await {
                Ok(answers) => {
                    for ((key, _), acked) in deliveries.iter().zip(answers) {
                        if !acked {
                            // Its lease went to another worker (this one's renewal was refused
                            // too, unless the two crossed), or an earlier attempt of this call
                            // landed.
                            tracing::debug!(wheel = %wheel.name(), key = %key, "an acknowledgement was refused");
                        }
                    }
                }
                Err(e) => lost(&wheel, "(a batch)", &e),
            }
        }
        // Recorded: their leases are no longer renewed, and their permits go back.
        for o in acks {
            deliveries.forget(&o.token);
        }
    }
    while failures.join_next().await.is_some() {}
}

/// Records that the delivery of `key` under `token` failed with `why`.
async fn record_failure(wheel: Arc<WheelClient>, part: usize, key: &str, token: &str, why: &str, window: Window) {
    tracing::debug!(wheel = %wheel.name(), key = %key, error = %why, "a handler failed");
    let metrics = wheel.metrics.partition(part);
    match scripts::fail(&wheel, &wheel.partitions[part].keys, key, token, why, window).await {
        Ok(Failed::Dead) => {
            metrics.dead();
            tracing::warn!(
                wheel = %wheel.name(), key = %key, error = %why,
                "a task failed its last attempt and went to the dead letters"
            );
        }
        Ok(Failed::Retried) => metrics.retried(),
        Ok(Failed::Refused) => {}
        Err(e) => lost(&wheel, key, &e),
    }
}

pub(super) fn lost(wheel: &WheelClient, key: &str, e: &Error) {
    tracing::warn!(
        wheel = %wheel.name(), key = %key, error = %e,
        "could not record a delivery's outcome; the task is handed out again after its lease"
    );
}
