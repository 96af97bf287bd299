//! With the `metrics` feature: every worker reads the wheel's gauges (`stats.lua`, one call per
//! partition) every [`GAUGES_EVERY`] and publishes them, so that each process running a worker
//! reports them (the same figures: they are the whole wheel's).
//!
//! The workers, rather than the leader: a leadership moves between nodes, and a node that lost
//! it would go on reporting the figures it read last as though they were current.
//!
//! On a store in this process alone (`sqlite::memory:`), whose every change is known here, a
//! worker reads them again only after the store changed (and at most every [`GAUGES_EVERY`]):
//! an idle wheel then does nothing at all, which a test on paused time needs.

use std::time::Duration;

use tokio::sync::watch;

use super::stop::{pause, stopping};
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts;

/// How often a worker reads and publishes the gauges.
pub(crate) const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// Publishes the gauges of every partition until the worker stops. A failed read is logged at
/// `DEBUG` and tried again at the next turn: the gauges keep their last figures meanwhile.
pub(super) async fn publish_gauges(wheel: &WheelClient, mut stop: watch::Receiver<bool>) {
    let mut changes = wheel.conn.changes();
    while !stopping(&stop) {
        if let Some(c) = changes.as_mut() {
            c.borrow_and_update();
        }
        for part in &wheel.partitions {
            match scripts::stats(wheel, &part.keys).await {
                Ok(stats) => wheel.metrics.partition(part.index).gauges(&stats),
                Err(e) => {
                    tracing::debug!(wheel = %wheel.name(), partition = part.index, error = %e, "could not read the gauges")
                }
            }
        }
        pause(&mut stop, GAUGES_EVERY).await;
        if let Some(c) = changes.as_mut() {
            tokio::select! {
                r = c.changed() => if r.is_err() { break },
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
}
