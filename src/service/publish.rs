//! With the `metrics` feature: a task that publishes the service's counters every
//! [`PUBLISH_EVERY`], for as long as the service runs (on a clock that is not paused), and once
//! more after it stopped.
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
    let mut last: Option<(tokio::time::Instant, std::time::Instant)> = None;
    loop {
        every.tick().await;
        let now = (tokio::time::Instant::now(), std::time::Instant::now());
        if let Some(last) = last.replace(now) {
            if clock_jumped(last, now) {
                return;
            }
        }
        let Some(shared) = shared.upgrade() else { return };
        // Closed before the read: what the stop ended is in it, and this is the last one.
        let closed = shared.is_closed();
        shared.stats();
        if closed {
            return;
        }
    }
}

/// Whether Tokio's clock moved on by more than the real one since the last turn: it is paused
/// (a test's `start_paused`, `time::pause`) and jumps ahead. Then the task ends: a wake-up every
/// second of paused time would make a test that sleeps for a year of it take for ever, and in
/// such a test `Scheduler::stats` still publishes. Running normally, the two clocks are one.
fn clock_jumped(
    (tokio_then, real_then): (tokio::time::Instant, std::time::Instant),
    (tokio_now, real_now): (tokio::time::Instant, std::time::Instant),
) -> bool {
    let tokio_passed = tokio_now.saturating_duration_since(tokio_then);
    tokio_passed > real_now.saturating_duration_since(real_then) + PUBLISH_EVERY / 2
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Scheduler;

    /// A service on a paused clock that waits for a timer a century away: the publishing task
    /// stops at the first jump instead of waking every second of it (3 billion wake-ups, which
    /// would not end within the test's 20 s of real time).
    #[test]
    fn a_paused_clock_that_jumps_a_century_ahead_does_not_wake_the_publisher_every_second() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build();
            let fired = runtime.unwrap().block_on(async {
                let timer = Scheduler::builder().start().unwrap();
                let far = Duration::from_secs(100 * 365 * 86_400);
                let outcome = timer.schedule("far", far, |_| async {}).await.unwrap().await;
                (outcome, timer.stats().fired)
            });
            let _ = done.send(fired);
        });
        let fired = finished.recv_timeout(Duration::from_secs(20)).expect("a century of paused time in 20 s");
        assert_eq!(fired, (Ok(()), 1));
    }
}
