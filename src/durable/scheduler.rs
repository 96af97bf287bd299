//! `DurableScheduler`: the cheap, cloneable handle to a wheel kept in Redis.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{DeadTask, DurableBuilder, DurableStats, Task, Worker};
use crate::Error;

/// A handle to a durable timing wheel kept in Redis, shared by every node that connects to it.
///
/// `Clone + Send + Sync`; a clone shares the connection. Tasks are scheduled by key with a
/// payload, fire at their due time (on Redis's clock) and are handed to a [`Worker`]'s handler;
/// see the [module docs](super) for the guarantees and the Redis settings they need.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use tokio_timewheel::durable::DurableScheduler;
///
/// # async fn run() -> Result<(), tokio_timewheel::Error> {
/// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").connect().await?;
/// timers.schedule("order-42:review", Duration::from_secs(48 * 3600), b"order-42".to_vec()).await?;
/// assert!(timers.contains("order-42:review").await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DurableScheduler {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
}

impl fmt::Debug for DurableScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableScheduler").field("name", &self.inner.name).finish_non_exhaustive()
    }
}

impl DurableScheduler {
    /// A [`DurableBuilder`] for the wheel `name` on the Redis at `url` (`redis://host:port/db`,
    /// `rediss://` for TLS is not enabled), with the defaults.
    pub fn builder(url: impl AsRef<str>, name: impl AsRef<str>) -> DurableBuilder {
        DurableBuilder::new(url.as_ref(), name.as_ref())
    }

    pub(crate) async fn connect(builder: DurableBuilder) -> Result<Self, Error> {
        let _ = (builder.url, builder.name);
        todo!()
    }

    /// Schedules a task under `key`, due `delay` after the call reaches Redis (on Redis's clock).
    ///
    /// It is handed to a worker's handler on the first tick at or after its due time, never
    /// before. A zero delay makes it due at once.
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a task with this key is pending (it is left untouched);
    /// - [`Error::Invalid`] for an empty key or a payload over `max_payload`;
    /// - [`Error::Redis`] if Redis failed; the call retries transient failures with the same
    ///   request id for up to the connect timeout, so a schedule that did land is not repeated.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still schedule the task.
    pub async fn schedule(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), Error> {
        let _ = (key, delay, payload.into());
        todo!()
    }

    /// [`schedule`](Self::schedule) with a request id of the caller's choosing, for tests of
    /// retried requests: two calls with the same key and request id create one task.
    #[doc(hidden)]
    pub async fn schedule_with_request_id(
        &self,
        key: impl AsRef<str>,
        delay: Duration,
        payload: impl Into<Vec<u8>>,
        request_id: &str,
    ) -> Result<(), Error> {
        let _ = (key, delay, payload.into(), request_id);
        todo!()
    }

    /// Schedules a task under `key`, due at `at` on Redis's clock; a time in the past makes it
    /// due at once.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub async fn schedule_at(
        &self,
        key: impl AsRef<str>,
        at: SystemTime,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), Error> {
        let _ = (key, at, payload.into());
        todo!()
    }

    /// Schedules many tasks in few round trips, each as [`schedule`](Self::schedule) would.
    ///
    /// Returns one result per item, in order: `Ok`, or the item's own [`Error::DuplicateKey`] or
    /// [`Error::Invalid`]; the other items are scheduled regardless.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed; items of batches sent before the failure stay scheduled,
    /// and calling again with the same items reports those as `DuplicateKey`.
    ///
    /// # Cancel safety
    /// Dropping the future may leave a prefix of the items scheduled.
    pub async fn schedule_many<K, P>(
        &self,
        items: impl IntoIterator<Item = (K, Duration, P)>,
    ) -> Result<Vec<Result<(), Error>>, Error>
    where
        K: AsRef<str>,
        P: Into<Vec<u8>>,
    {
        let _: Vec<(String, Duration, Vec<u8>)> =
            items.into_iter().map(|(k, d, p)| (k.as_ref().to_string(), d, p.into())).collect();
        todo!()
    }

    /// Cancels the pending task under `key`. Returns whether there was one.
    ///
    /// A task in flight (claimed by a worker) is cancelled too; its handler runs on, but its
    /// acknowledgement finds nothing and it is never delivered again.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still cancel the task.
    pub async fn cancel(&self, key: &str) -> Result<bool, Error> {
        let _ = key;
        todo!()
    }

    /// Cancels the pending tasks under `keys`, returning for each whether there was one.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// As [`cancel`](Self::cancel).
    pub async fn cancel_many<K: AsRef<str>>(&self, keys: impl IntoIterator<Item = K>) -> Result<Vec<bool>, Error> {
        let _ = keys.into_iter().count();
        todo!()
    }

    /// Moves the pending task under `key` to `delay` from now (on Redis's clock), keeping its
    /// payload. A task in flight is taken back from its worker.
    ///
    /// # Errors
    /// - [`Error::NotFound`] if no task with this key is pending;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still move the task.
    pub async fn reschedule(&self, key: &str, delay: Duration) -> Result<(), Error> {
        let _ = (key, delay);
        todo!()
    }

    /// Moves the pending task under `key` to `at` on Redis's clock, keeping its payload.
    ///
    /// # Errors
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Cancel safety
    /// As [`reschedule`](Self::reschedule).
    pub async fn reschedule_at(&self, key: &str, at: SystemTime) -> Result<(), Error> {
        let _ = (key, at);
        todo!()
    }

    /// Whether a task with this key is pending (waiting, ready or in flight).
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn contains(&self, key: &str) -> Result<bool, Error> {
        let _ = key;
        todo!()
    }

    /// How many tasks are pending: scheduled and not yet acknowledged, cancelled or dead.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn len(&self) -> Result<usize, Error> {
        todo!()
    }

    /// Whether no task is pending.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.len().await? == 0)
    }

    /// A snapshot of the wheel's gauges and counters.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn stats(&self) -> Result<DurableStats, Error> {
        todo!()
    }

    /// Up to `limit` dead letters, oldest first.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadTask>, Error> {
        let _ = limit;
        todo!()
    }

    /// Puts the dead task under `key` back, due at once with its attempts reset to 0. Returns
    /// whether there was such a dead letter.
    ///
    /// # Errors
    /// - [`Error::DuplicateKey`] if a new task with this key is pending (the dead letter stays);
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still requeue the task.
    pub async fn requeue_dead(&self, key: &str) -> Result<bool, Error> {
        let _ = key;
        todo!()
    }

    /// Starts a [`Worker`] on the current Tokio runtime: it takes part in ticking the wheel (one
    /// node at a time holds the leadership) and runs `handler` on due tasks, up to `concurrency`
    /// at once.
    ///
    /// `Ok` acknowledges the task (its key is free again); an `Err` or a panic retries it after
    /// the backoff, and after `max_attempts` deliveries it goes to the dead letters with the
    /// error's text.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn run<F, Fut, E>(&self, handler: F) -> Worker
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        let _ = handler;
        todo!()
    }
}
