//! How the worker's loops learn that they are to stop, and wait without missing it.

use std::time::Duration;

use tokio::sync::watch;

/// Whether the worker was told to stop (or its `Worker` was dropped).
pub(super) fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Sleeps for `wait`, or less if the worker is told to stop meanwhile.
pub(super) async fn pause(stop: &mut watch::Receiver<bool>, wait: Duration) {
    tokio::select! {
        () = tokio::time::sleep(wait) => {}
        () = stopped(stop) => {}
    }
}

/// Waits until the worker is told to abandon its handlers; never, if its `Worker` was dropped
/// without (dropping a worker lets its handlers finish).
pub(super) async fn abandoned(abandon: &mut watch::Receiver<bool>) {
    if abandon.wait_for(|a| *a).await.is_err() {
        std::future::pending::<()>().await;
    }
}
