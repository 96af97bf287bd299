//! `DurableBuilder`: gathers the settings of a durable wheel (`config` holds their defaults and
//! checks them) and connects. Imported by nothing: it is the top of the durable module.

use std::time::Duration;

use super::config::Settings;
#[cfg(doc)]
use super::config::{
    DEFAULT_BACKOFF, DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SLOTS, DEFAULT_TICK, MAX_BACKOFF, MAX_SLOTS,
};
use super::DurableScheduler;
use crate::Error;

impl DurableScheduler {
    /// A [`DurableBuilder`] for the wheel `name` on the Redis at `url` (`redis://host:port/db`,
    /// `rediss://` for TLS is not enabled), with the defaults.
    pub fn builder(url: impl AsRef<str>, name: impl AsRef<str>) -> DurableBuilder {
        DurableBuilder { url: url.as_ref().to_string(), settings: Settings::new(name.as_ref()) }
    }
}

/// Configures a durable wheel and connects to it. Made by [`DurableScheduler::builder`].
///
/// Every node that shares a wheel must use the same `tick` and `slots` (the first node to
/// connect records them in Redis, and a node with different values is refused); `lease`,
/// `max_attempts`, `backoff` and the rest are per node.
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use tokio_timewheel::durable::DurableScheduler;
///
/// # async fn run() -> Result<(), tokio_timewheel::Error> {
/// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders")
///     .tick(Duration::from_secs(1))
///     .slots(3600)
///     .lease(Duration::from_secs(30))
///     .max_attempts(5)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct DurableBuilder {
    url: String,
    settings: Settings,
}

impl DurableBuilder {
    /// How far the cursor moves at a time: tasks fire on the first tick at or after their due
    /// time. A whole number of milliseconds, at least 1 ms. Default [`DEFAULT_TICK`].
    pub fn tick(mut self, tick: Duration) -> Self {
        self.settings.tick = tick;
        self
    }

    /// How many slots the ring has: tasks due within `slots * tick` wait in the ring, later ones
    /// in the far tier until the cursor comes near. 1 to [`MAX_SLOTS`]. Default [`DEFAULT_SLOTS`].
    pub fn slots(mut self, slots: usize) -> Self {
        self.settings.slots = slots;
        self
    }

    /// How long a worker holds a claimed task before it is handed to another worker (with
    /// `attempt + 1`), measured on Redis's clock: longer than the slowest handler. Also the
    /// leader's lease, up to 10 s: a leader that stops renewing is replaced within this time, or
    /// within 10 s when the lease is longer (so a long lease for slow handlers does not leave the
    /// wheel unticked that long). 1 ms to 365 days. Default [`DEFAULT_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease;
        self
    }

    /// How many deliveries a task gets before a failing one goes to the dead letters. At least 1.
    /// Default [`DEFAULT_MAX_ATTEMPTS`].
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.settings.max_attempts = max_attempts;
        self
    }

    /// The largest payload `schedule` accepts, in bytes; a larger one is [`Error::Invalid`].
    /// At most 512 MiB (Redis's own limit). Default [`DEFAULT_MAX_PAYLOAD`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.settings.max_payload = bytes;
        self
    }

    /// How long Redis has to answer one command before the call fails with a retryable
    /// [`Error::Redis`]. Default [`DEFAULT_RESPONSE_TIMEOUT`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for Redis before it fails; also how long one
    /// call keeps retrying a transient failure before it returns it. Default
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// The base of the exponential backoff of a failed task: it is retried `backoff * 2^(n-1)`
    /// after its `n`th failed delivery, at most [`MAX_BACKOFF`]. Default [`DEFAULT_BACKOFF`].
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.settings.backoff = backoff;
        self
    }

    /// How many handlers one [`Worker`](super::Worker) runs at once. At least 1. Default
    /// [`DEFAULT_CONCURRENCY`].
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.settings.concurrency = handlers;
        self
    }

    /// Makes `schedule` and its kin, `reschedule` and `requeue_dead` wait until `replicas`
    /// replicas hold the change (Redis's `WAIT`, for up to `timeout`), so that it survives a
    /// failover. Off by default. When fewer replicas confirm in time the call returns a
    /// retryable [`Error::Redis`]: the change is on the primary, and a repeated `schedule` then
    /// reports [`Error::DuplicateKey`].
    ///
    /// `WAIT` holds up the shared connection while it waits, so keep `timeout` short; it must
    /// be shorter than the response timeout.
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.settings.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Checks the settings, connects to Redis and opens the wheel (recording `tick` and `slots`
    /// on first use, checking them afterwards).
    ///
    /// Logs a `tracing` warning when the server may lose tasks: an eviction policy other than
    /// `noeviction`, or `appendonly no`.
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty name or one holding `{`, `}`, `:`, whitespace or control
    ///   characters, a zero or fractional-millisecond tick, zero slots or more than
    ///   [`MAX_SLOTS`], a lease of zero or over 365 days, zero `max_attempts` or `concurrency`, a `max_payload` over
    ///   512 MiB, a zero timeout, a replica wait not shorter than the response timeout, a
    ///   malformed URL, a server older than Redis 6.2, or a wheel recorded in Redis with another
    ///   tick or slot count;
    /// - [`Error::Redis`] when Redis cannot be reached within the connect timeout (retryable)
    ///   or refuses the connection (a wrong password, say).
    ///
    /// # Cancel safety
    /// Dropping the future drops the connection; nothing is left behind but the wheel's
    /// settings in Redis, which the next `connect` reuses.
    pub async fn connect(self) -> Result<DurableScheduler, Error> {
        super::connect::connect(&self.url, &self.settings).await
    }
}
