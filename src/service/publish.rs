//! With the `metrics` feature: a task that publishes the service's counters every
//! [`PUBLISH_EVERY`], for as long as the service runs, and once more after it stopped.
//!
//! Schedules and cancels complete in the handles, without the actor, and the actor may sleep for
//! hours: so neither can publish on its own. The counters are the shards' own (`Stats`), read
//! under each shard's lock in turn, as [`Scheduler::stats`](super::Scheduler::stats) reads them;
//! nothing is added to the schedule, cancel or fire paths.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::shards::Shared;

/// How often the counters are published.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Spawns the publishing task on `runtime`. It holds the service weakly, so it keeps nothing
/// alive, and ends once the service has stopped.
pub(crate) fn spawn(runtime: &tokio::runtime::Handle, shared: &Arc<Shared>) {
    drop(runtime.spawn(run(Arc::downgrade(shared))));
}

async fn run(shared: Weak<Shared>) {
    let mut every = tokio::time::interval(PUBLISH_EVERY);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(shared) = shared.upgrade() else { return };
        // Closed before the read: what the stop ended is in it, and this is the last one.
        let closed = shared.is_closed();
        shared.stats();
        if closed {
            return;
        }
    }
}
