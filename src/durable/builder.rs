//! `DurableBuilder`: gathers the settings of a durable wheel (`config` holds their defaults and
//! checks them) and connects. Imported by nothing: it is the top of the durable module.

use std::time::Duration;

use super::config::{Settings, Topology};
#[cfg(doc)]
use super::config::{
    DEFAULT_BACKOFF, DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_HANDLER_TIMEOUT, DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD, DEFAULT_PREFETCH, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SLOTS, DEFAULT_TICK,
    MAX_BACKOFF, MAX_PARTITIONS, MAX_SLOTS,
};
use super::DurableScheduler;
use crate::Error;

impl DurableScheduler {
    /// A [`DurableBuilder`] for the wheel `name` on the one Redis at `url`, with the defaults:
    /// `redis://host:port/db`, or `rediss://` for TLS (verified against the system's roots, or
    /// the CA given to [`tls_root_ca`](DurableBuilder::tls_root_ca); never skipped). A username
    /// and password go in the URL (`redis://user:password@host:port/`).
    ///
    /// For a primary with replicas behind Redis Sentinel use [`sentinel`](Self::sentinel), for
    /// a Redis Cluster [`cluster`](Self::cluster): a node whose address can change under the
    /// wheel (a failover) needs them.
    pub fn builder(url: impl AsRef<str>, name: impl AsRef<str>) -> DurableBuilder {
        DurableBuilder { settings: Settings::new(name.as_ref(), Topology::of_url(url.as_ref())) }
    }

    /// A [`DurableBuilder`] for the wheel `name` on the primary that the given sentinels call
    /// `master`. The wheel follows every failover: after a dropped connection, a timeout or a
    /// `READONLY` reply it asks the sentinels again, and it checks `ROLE` before it trusts a
    /// node, so a revived old primary is never written to. `rediss://` sentinel URLs mean TLS
    /// for the sentinels and the data nodes alike; credentials in the first URL are used for
    /// both.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let sentinels = ["redis://sentinel-a:26379", "redis://sentinel-b:26379", "redis://sentinel-c:26379"];
    /// let timers = DurableScheduler::sentinel(sentinels, "mymaster", "orders").connect().await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel(
        sentinels: impl IntoIterator<Item = impl AsRef<str>>,
        master: impl AsRef<str>,
        name: impl AsRef<str>,
    ) -> DurableBuilder {
        let topology = Topology::Sentinel {
            sentinels: sentinels.into_iter().map(|s| s.as_ref().to_string()).collect(),
            master: master.as_ref().to_string(),
        };
        DurableBuilder { settings: Settings::new(name.as_ref(), topology) }
    }

    /// A [`DurableBuilder`] for the wheel `name` on the Redis Cluster that any of `seeds`
    /// belongs to. The client follows `MOVED` and `ASK`, resharding and failover by itself;
    /// every key of a partition shares one hash tag, so each partition lives on one slot. Split
    /// a busy wheel with [`partitions`](DurableBuilder::partitions) to spread it over the
    /// cluster's primaries.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let seeds = ["redis://redis-a:7000", "redis://redis-b:7000"];
    /// let timers = DurableScheduler::cluster(seeds, "orders").partitions(8).connect().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster(seeds: impl IntoIterator<Item = impl AsRef<str>>, name: impl AsRef<str>) -> DurableBuilder {
        let topology = Topology::Cluster(seeds.into_iter().map(|s| s.as_ref().to_string()).collect());
        DurableBuilder { settings: Settings::new(name.as_ref(), topology) }
    }
}

/// Configures a durable wheel and connects to it. Made by [`DurableScheduler::builder`].
///
/// Every node that shares a wheel must use the same `tick` and `slots` (the first node to
/// connect records them in Redis, and a node with different values is refused); `lease`,
/// `max_attempts`, `backoff` and the rest are per node (and a task may have its own
/// `max_attempts` and `backoff`: see [`TaskOptions`](super::TaskOptions)).
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
    settings: Settings,
}

impl DurableBuilder {
    /// How far the cursor moves at a time. The leader moves each tick's tasks to `ready` a tick
    /// before that tick begins, and a worker claims each as soon as the store's clock reaches
    /// its due time (never before), so a task starts at its due time plus a claim's round trip
    /// and the wait for a free handler, not on the next tick boundary: the tick sets how often
    /// the leader calls the store and how far ahead it looks, not how late tasks fire. (A task
    /// scheduled less than a tick ahead, or a retry, is placed straight in `ready`; a task that
    /// is in `ready` but not yet due counts as ready in [`stats`](DurableScheduler::stats) and
    /// [`get`](DurableScheduler::get), and [`cancel`](DurableScheduler::cancel) still removes it
    /// before any handler starts.) A whole number of milliseconds, at least 1 ms. Default
    /// [`DEFAULT_TICK`].
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

    /// How long a claimed task stays with its worker without word from it, on Redis's clock.
    /// A worker renews the leases of the handlers it runs every third of the lease, so a
    /// handler may run for longer (up to [`handler_timeout`](Self::handler_timeout)); a worker
    /// that dies or is cut off from Redis stops renewing, and its tasks are handed to another
    /// worker (with `attempt + 1`) within about one lease. A short lease brings a dead worker's
    /// tasks back sooner and costs a renewal call per worker every third of it.
    ///
    /// Also the leader's lease, up to 10 s: a leader that stops renewing is replaced within
    /// this time, or within 10 s when the lease is longer. 1 ms to 365 days. Default
    /// [`DEFAULT_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease;
        self
    }

    /// How many deliveries a task gets before a failing one goes to the dead letters, unless it
    /// has its own ([`TaskOptions::max_attempts`](super::TaskOptions::max_attempts)). At least 1.
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
    /// [`Error::Redis`]. A worker's leader, claim and lease renewal loops, whose calls come
    /// round again soon, also retry a failing call for this long only (their log of a failure
    /// names it). Default [`DEFAULT_RESPONSE_TIMEOUT`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// How long this node waits for an unreachable or failing Redis, in two places:
    /// [`connect`](Self::connect) fails after this long, and **every call** (`schedule`,
    /// `cancel`, `stats`, ... and a worker's outcomes; its leader, claim and renewal loops retry
    /// for the [response timeout](Self::response_timeout)) keeps retrying a transient failure (a
    /// dropped connection, a timeout, `LOADING`, a failover) for this long before it returns the error,
    /// so no call waits much longer than this for a Redis that is away. A refused connection
    /// (nothing listening) fails `connect` at once. Default [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// The base of the exponential backoff of a failed task: it is retried `backoff * 2^(n-1)`
    /// after its `n`th failed delivery, at most [`MAX_BACKOFF`], unless it has its own
    /// ([`TaskOptions::backoff`](super::TaskOptions::backoff)). Default [`DEFAULT_BACKOFF`].
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

    /// How many ready tasks one [`Worker`](super::Worker) may claim ahead of its free handlers,
    /// per partition, into a local buffer that its handlers take their next task from as they
    /// finish. A claim then carries many tasks rather than as many as handlers are free, and a
    /// handler that finishes starts its next task without waiting for a round trip to Redis:
    /// with a few fast handlers this is most of the cost and the lateness of the fire path
    /// (BENCHMARKS.md). The worker claims ahead only as many as its handlers are expected to
    /// start within about 50 ms (from how long their runs take), so a worker with slow handlers
    /// does not hoard tasks that another could run, and it claims nothing ahead until a first
    /// handler has finished.
    ///
    /// A task in the buffer is claimed: its lease is renewed with the running ones, a worker
    /// that dies leaves it to come back when its lease runs out (as for a running task), and
    /// [`cancel`](super::DurableScheduler::cancel) leaves it alone and answers `false`, as for a
    /// task whose handler has started. `shutdown` runs what the buffer holds; `shutdown_timeout`
    /// gives it back with the running ones at its bound. 0 claims only for free handlers. Default
    /// [`DEFAULT_PREFETCH`].
    pub fn prefetch(mut self, tasks: usize) -> Self {
        self.settings.prefetch = tasks;
        self
    }

    /// How far a commit of the embedded SQLite store reaches before the call that made it
    /// returns (see [`Durability`](super::Durability)): the process's death
    /// ([`Durability::Process`](super::Durability::Process), the default) or the machine's
    /// power loss too ([`Durability::PowerLoss`](super::Durability::PowerLoss)). A Redis
    /// deployment ignores it: its server's `appendfsync` says that.
    pub fn durability(mut self, durability: super::Durability) -> Self {
        self.settings.durability = durability;
        self
    }

    /// The longest one handler may run: a handler still running after this long is dropped
    /// (at its next `.await`) and its delivery counts as a failure with the error text "the
    /// handler timed out after ...", so the task is retried after the backoff, or goes to the
    /// dead letters after its last attempt, as for any failure.
    ///
    /// Leases are renewed while a handler runs, so this, not the lease, is what stops a hung
    /// handler from holding its task for good. Set it above the slowest handler's run;
    /// `Duration::MAX` lets handlers run for as long as they take. Not zero. Default
    /// [`DEFAULT_HANDLER_TIMEOUT`].
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders")
    ///     .lease(Duration::from_secs(2)) // a dead worker's tasks come back within about 2 s
    ///     .handler_timeout(Duration::from_secs(60)) // a handler may run up to a minute
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.settings.handler_timeout = timeout;
        self
    }

    /// Makes each handler's span (`task`) a child of the span that scheduled its task, so the
    /// run shows inside the scheduling request's trace. By default it is the root of a trace
    /// of its own with an OpenTelemetry link to the scheduling span: a task may run hours after
    /// the request that scheduled it ended, which a trace viewer shows best as two traces.
    ///
    /// A run of a recurring task is linked either way: each run starts a trace of its own, so
    /// that no trace grows for as long as the series runs.
    ///
    /// What the link or the parent points to is the trace context of the span current when
    /// `schedule` (or its kin) was called, kept with the task; a span that no
    /// tracing-opentelemetry layer saw has none, and its tasks are neither linked nor children.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders")
    ///     .trace_parent(true) // a run is part of the trace that scheduled it
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "opentelemetry")]
    #[cfg_attr(docsrs, doc(cfg(feature = "opentelemetry")))]
    pub fn trace_parent(mut self, parent: bool) -> Self {
        self.settings.trace_parent = parent;
        self
    }

    /// Makes `schedule` and its kin, `reschedule`, `requeue_dead` and a `cancel` that took wait
    /// until `replicas` replicas hold the change (Redis's `WAIT` on the primary of the task's
    /// partition, for up to `timeout`), so that it survives a failover: a task whose `schedule`
    /// returned `Ok` is never lost, and a cancel that answered true never comes undone. Off by
    /// default. When fewer replicas confirm in time the call returns a retryable
    /// [`Error::Redis`]: the change is on the primary, and a repeated `schedule` then reports
    /// [`Error::DuplicateKey`] (with Sentinel, the wheel also asks the sentinels again: the
    /// primary may have been cut off). If the task fired and finished before the repeat (a short
    /// delay, while no replica answers), its key is free again and the repeat schedules it once
    /// more: seen in the Sentinel failover test, where a 300 ms task repeated every 500 ms for
    /// the 10 s no replica confirmed ran at each repeat. Handlers are at least once anyway.
    ///
    /// Claims and acknowledgements do not wait: losing one in a failover only repeats a
    /// delivery (a lost claim hands the task out again at once, a lost acknowledgement after its
    /// lease), so a failover can repeat the deliveries of about the last lease before it, which
    /// at-least-once handlers absorb. On the primary set `min-replicas-to-write 1` (and
    /// `min-replicas-max-lag 10`): a primary cut off from its replicas then refuses writes
    /// (`NOREPLICAS`, retried here) instead of taking ones that its demotion would discard.
    ///
    /// `WAIT` holds up the shared connection while it waits, so keep `timeout` short; it must
    /// be shorter than the response timeout.
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.settings.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Trusts the certificate authority `pem` (one or more PEM certificates) for TLS, instead
    /// of the system's roots: for a server whose certificate a private CA signed. Needs
    /// `rediss://` URLs.
    pub fn tls_root_ca(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.settings.tls.root_ca = Some(pem.as_ref().to_vec());
        self
    }

    /// Presents the client certificate `cert_pem` with its private key `key_pem` (both PEM),
    /// for servers that ask for one (`tls-auth-clients yes`: mutual TLS). Needs `rediss://` URLs.
    pub fn tls_client_auth(mut self, cert_pem: impl AsRef<[u8]>, key_pem: impl AsRef<[u8]>) -> Self {
        self.settings.tls.client_auth = Some((cert_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// Splits the wheel into `n` partitions, each a wheel of its own under its own hash tag
    /// (`{<name>:<i>~<salt>}`, chosen so that partition `i` sits in the `i`-th of `n` equal
    /// ranges of the cluster's hash slots: see [`WheelKeys::for_partition`](super::WheelKeys::for_partition)),
    /// so that a cluster spreads them over its primaries and one busy wheel is not bound to one
    /// Redis core. A task's partition is the FNV-1a 64-bit hash of its key's
    /// UTF-8 bytes modulo `n`, the same on every node and in every version. Each partition has
    /// its own leadership (different nodes may tick different partitions); workers claim from
    /// all of them; keys stay unique across the whole wheel; `len`, `stats` and `dead_letters`
    /// cover every partition.
    ///
    /// Every node of a wheel must use the same count: the first to connect records it, and a
    /// node with another (the default 1 included) is refused with [`Error::Invalid`]. 1 to
    /// [`MAX_PARTITIONS`]; default 1, one hash tag `{<name>}`.
    pub fn partitions(mut self, n: usize) -> Self {
        self.settings.partitions = n;
        self
    }

    /// Keeps at most `n` dead letters: when more die, the leader deletes the oldest (a few
    /// hundred per tick at most). Default: no limit. 0 means no limit. Every node of a wheel
    /// should use the same retention; the leader's applies.
    pub fn dead_letter_limit(mut self, n: usize) -> Self {
        self.settings.dead_letter_limit = n;
        self
    }

    /// Keeps a dead letter at most `age` after it died: the leader deletes older ones (a few
    /// hundred per tick at most). Default: kept until requeued or deleted.
    pub fn dead_letter_max_age(mut self, age: Duration) -> Self {
        self.settings.dead_letter_max_age = Some(age);
        self
    }

    /// Keeps the last `n` finished runs of the wheel in its history, which
    /// [`list`](super::DurableScheduler::list) reads as [`Finished`](super::TaskState::Finished):
    /// each run that was acknowledged, went to the dead letters or was cancelled while it ran,
    /// with its due time, start, attempts, outcome and how long its handler took. 0 keeps no
    /// history, and writes nothing. Default [`DEFAULT_HISTORY_LIMIT`](super::DEFAULT_HISTORY_LIMIT)
    /// (10,000); at most [`MAX_HISTORY_LIMIT`](super::MAX_HISTORY_LIMIT).
    ///
    /// A wheel of several partitions keeps `n / partitions` (rounded up) in each. Each node
    /// writes the runs its workers end (and its leader, for a lease that ran out) with its own
    /// bounds: give every node the same.
    /// Keeping the history costs each finished task one list entry in Redis (see the crate's
    /// BENCHMARKS.md for what it costs the fire path).
    ///
    /// # Errors
    /// [`connect`](Self::connect) fails with [`Error::Invalid`] for more than
    /// [`MAX_HISTORY_LIMIT`](super::MAX_HISTORY_LIMIT).
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// // The last 100,000 runs, none older than a week.
    /// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders")
    ///     .history_limit(100_000)
    ///     .history_age(Duration::from_secs(7 * 24 * 3600))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn history_limit(mut self, n: usize) -> Self {
        self.settings.history_limit = n;
        self
    }

    /// Keeps a finished run in the history at most `age` after it finished: the older ones go
    /// each time runs are added (a history no run is added to keeps what it has). [`Duration::ZERO`] keeps
    /// no history. Default [`DEFAULT_HISTORY_AGE`](super::DEFAULT_HISTORY_AGE) (24 hours); at
    /// most [`MAX_HISTORY_AGE`](super::MAX_HISTORY_AGE) (365 days). See
    /// [`history_limit`](Self::history_limit).
    ///
    /// # Errors
    /// [`connect`](Self::connect) fails with [`Error::Invalid`] for an age over
    /// [`MAX_HISTORY_AGE`](super::MAX_HISTORY_AGE).
    pub fn history_age(mut self, age: Duration) -> Self {
        self.settings.history_age = age;
        self
    }

    /// Opens only a wheel that some node has already opened, with the tick, slots and
    /// partition count recorded for it in Redis in place of this builder's: for tools that
    /// read and administer a wheel (a dashboard's process, the `timewheel` command line) and
    /// must neither know a wheel's settings nor create a wheel from a mistyped name.
    /// [`connect`](Self::connect) then fails with [`Error::Invalid`] naming the wheel when
    /// Redis holds no record of it.
    ///
    /// # Examples
    /// ```no_run
    /// use tokio_timewheel::durable::DurableScheduler;
    ///
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let orders = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").only_existing().connect().await?;
    /// println!("{:?}", orders.stats().await?);
    /// # Ok(()) }
    /// ```
    pub fn only_existing(mut self) -> Self {
        self.settings.only_existing = true;
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
    ///   512 MiB, a zero timeout (response, connect or handler), a replica wait not shorter than
    ///   the response timeout, a malformed URL (the message names what is wrong), a server older than Redis 6.2, a wheel recorded
    ///   in Redis with another tick, slot or partition count, or one written by an earlier
    ///   version of this crate that still holds tasks (its layout differs: drain it with that
    ///   version first), or, with [`only_existing`](Self::only_existing), no wheel of that name;
    /// - [`Error::Redis`] when Redis does not answer within the connect timeout (category
    ///   `"timed out"`, retryable), when nothing listens at the address (category `"refused"`,
    ///   at once, retryable: a Redis that is starting refuses too), when the server at the
    ///   address does not answer as Redis (category `"not Redis"`, at once, not retryable), when
    ///   the TLS handshake fails (category `"TLS"`, not retryable: a certificate refused, or a
    ///   `rediss://` URL at a port that speaks plain text), or when the server turns the
    ///   connection down (a wrong password, say; not retryable).
    ///
    /// # Cancel safety
    /// Dropping the future drops the connection; nothing is left behind but the wheel's
    /// settings in Redis, which the next `connect` reuses.
    pub async fn connect(self) -> Result<DurableScheduler, Error> {
        let in_memory = self.settings.topology.is_local();
        if !in_memory && super::time::tokio_clock_paused() {
            return Err(Error::invalid(
                "Tokio's clock is paused in this runtime (tokio::time::pause, or #[tokio::test(start_paused = \
                 true)]), and this durable wheel runs on its store's clock (Redis's, or the wall clock for a \
                 SQLite file), which does not pause: its timeouts would all fire at once. Connect to \
                 \"sqlite::memory:\" (feature `sqlite`), whose clock is Tokio's, to test durable code on paused \
                 time; or test on a runtime whose clock runs (#[tokio::test])",
            ));
        }
        super::open::connect(&self.settings).await
    }
}
