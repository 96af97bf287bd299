//! `DurableBuilder`: the settings of a durable wheel, their defaults and their validation.

use std::time::Duration;

use super::DurableScheduler;
use crate::Error;

/// The default tick of a durable wheel: 1 s.
pub const DEFAULT_TICK: Duration = Duration::from_secs(1);
/// The default number of slots in the ring: 3,600, one revolution an hour at the default tick.
pub const DEFAULT_SLOTS: usize = 3600;
/// The most slots a ring may have: 2^20.
pub const MAX_SLOTS: usize = 1 << 20;
/// The default lease: a claimed task not acknowledged within 30 s goes to another worker.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The default number of deliveries before a failing task goes to the dead letters: 5.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// The default largest payload: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;
/// The default time Redis has to answer one command: 2 s.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The default time `connect` waits for Redis before it gives up: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default base of the retry backoff of a failed task: 1 s (then 2 s, 4 s, ...).
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// The longest retry backoff of a failed task: 1 hour.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// The default number of handlers one [`Worker`](super::Worker) runs at once: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;

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
    pub(crate) url: String,
    pub(crate) name: String,
    pub(crate) tick: Duration,
    pub(crate) slots: usize,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff: Duration,
    pub(crate) concurrency: usize,
    pub(crate) replicas: Option<(usize, Duration)>,
}

impl DurableBuilder {
    pub(crate) fn new(url: &str, name: &str) -> Self {
        DurableBuilder {
            url: url.to_string(),
            name: name.to_string(),
            tick: DEFAULT_TICK,
            slots: DEFAULT_SLOTS,
            lease: DEFAULT_LEASE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_payload: DEFAULT_MAX_PAYLOAD,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            backoff: DEFAULT_BACKOFF,
            concurrency: DEFAULT_CONCURRENCY,
            replicas: None,
        }
    }

    /// How far the cursor moves at a time: tasks fire on the first tick at or after their due
    /// time. A whole number of milliseconds, at least 1 ms. Default [`DEFAULT_TICK`].
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// How many slots the ring has: tasks due within `slots * tick` wait in the ring, later ones
    /// in the far tier until the cursor comes near. 1 to [`MAX_SLOTS`]. Default [`DEFAULT_SLOTS`].
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// How long a worker holds a claimed task before it is handed to another worker (with
    /// `attempt + 1`), measured on Redis's clock: longer than the slowest handler. Also the
    /// leader's lease, up to 10 s: a leader that stops renewing is replaced within this time, or
    /// within 10 s when the lease is longer (so a long lease for slow handlers does not leave the
    /// wheel unticked that long). 1 ms to 365 days. Default [`DEFAULT_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How many deliveries a task gets before a failing one goes to the dead letters. At least 1.
    /// Default [`DEFAULT_MAX_ATTEMPTS`].
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The largest payload `schedule` accepts, in bytes; a larger one is [`Error::Invalid`].
    /// At most 512 MiB (Redis's own limit). Default [`DEFAULT_MAX_PAYLOAD`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// How long Redis has to answer one command before the call fails with a retryable
    /// [`Error::Redis`]. Default [`DEFAULT_RESPONSE_TIMEOUT`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for Redis before it fails; also how long one
    /// call keeps retrying a transient failure before it returns it. Default
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The base of the exponential backoff of a failed task: it is retried `backoff * 2^(n-1)`
    /// after its `n`th failed delivery, at most [`MAX_BACKOFF`]. Default [`DEFAULT_BACKOFF`].
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// How many handlers one [`Worker`](super::Worker) runs at once. At least 1. Default
    /// [`DEFAULT_CONCURRENCY`].
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
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
        self.replicas = (replicas > 0).then_some((replicas, timeout));
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
        DurableScheduler::connect(self).await
    }
}
