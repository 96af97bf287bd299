//! Type erasure for user jobs.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A job the actor can start any number of times (once per firing).
pub(crate) trait Job: Send + Sync + 'static {
    /// Calls the user's closure with the key and spawns the future it returns as a Tokio task.
    /// A closure that panics before returning its future is reported and does not unwind into
    /// the actor; a panic inside the future stays in its own task.
    fn start(&self, key: String);
}

impl<F, Fut> Job for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn start(&self, key: String) {
        match catch_unwind(AssertUnwindSafe(|| self(key))) {
            Ok(future) => drop(tokio::spawn(future)),
            Err(_) => tracing::error!("a timer job panicked before returning its future"),
        }
    }
}
