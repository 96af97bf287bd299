//! `Worker`: ticks the wheel when it holds the leadership, claims due tasks and runs the handler.

use std::fmt;

/// A running worker, made by [`DurableScheduler::run`](super::DurableScheduler::run).
///
/// Call [`shutdown`](Self::shutdown) to stop it cleanly. Dropping it stops it too, without
/// waiting: handlers in flight run to their end, and a leadership it held lapses after the lease.
pub struct Worker {
    _private: (),
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

impl Worker {
    /// Stops claiming tasks, waits for the handlers in flight to finish (and be acknowledged or
    /// retried), and gives up the leadership if this worker held it, so another node takes over
    /// at once.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the worker stopping in the background, as dropping the
    /// `Worker` does.
    pub async fn shutdown(self) {
        todo!()
    }
}
