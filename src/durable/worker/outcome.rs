//! Recording what each handler's run came to: the acks of everything waiting in one call, each
//! failure on its own (a retry after its backoff, or the dead letters).

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::durable::conn::Window;
use crate::durable::scripts::{self, Failed};
use crate::durable::wheel::Wheel;
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

/// Records outcomes as they come: the acks of everything waiting in one call, each failure on
/// its own. Ends when every sender is gone and the channel is drained.
/// Records the outcomes of partition `part`'s deliveries.
pub(super) async fn record_outcomes(wheel: Arc<Wheel>, part: usize, mut done: mpsc::UnboundedReceiver<Outcome>) {
    let keys = &wheel.partitions[part].keys;
    let metrics = wheel.metrics.partition(part);
    // Keep trying while the lease lasts: after it the task is handed out again anyway.
    let window = Window::Within(wheel.cfg.lease().max(wheel.cfg.retry_window()));
    let mut batch = Vec::with_capacity(ACK_BATCH);
    while done.recv_many(&mut batch, ACK_BATCH).await > 0 {
        let mut acks = Vec::with_capacity(batch.len());
        for o in &batch {
            match &o.outcome {
                Ok(()) => acks.push((o.key.as_str(), o.token.as_str())),
                Err(why) => {
                    tracing::debug!(wheel = %wheel.name(), key = %o.key, error = %why, "a handler failed");
                    match scripts::fail(&wheel, keys, &o.key, &o.token, why, window).await {
                        Ok(Failed::Dead) => {
                            metrics.dead();
                            tracing::warn!(
                                wheel = %wheel.name(), key = %o.key, error = %why,
                                "a task failed its last attempt and went to the dead letters"
                            );
                        }
                        Ok(Failed::Retried) => metrics.retried(),
                        Ok(Failed::Refused) => {}
                        Err(e) => lost(&wheel, &o.key, &e),
                    }
                }
            }
        }
        if !acks.is_empty() {
            if let Err(e) = scripts::ack(&wheel, keys, &acks, window).await {
                lost(&wheel, "(a batch)", &e);
            }
        }
        drop(acks);
        batch.clear();
    }
}

pub(super) fn lost(wheel: &Wheel, key: &str, e: &Error) {
    tracing::warn!(
        wheel = %wheel.name(), key = %key, error = %e,
        "could not record a delivery's outcome; the task is handed out again after its lease"
    );
}
