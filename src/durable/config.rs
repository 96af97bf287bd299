//! The settings of a durable wheel: their defaults and limits, and their validation into the
//! units the scripts use. The builder only gathers them ([`Settings`]); [`Config::new`] checks
//! them once, before anything touches Redis.

use std::time::Duration;

use super::time::{ceil_ms, whole_ms};
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
/// The default time `connect` waits for Redis before it gives up, and every call retries a
/// transient failure before it returns it: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default base of the retry backoff of a failed task: 1 s (then 2 s, 4 s, ...).
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);
/// The longest retry backoff of a failed task: 1 hour.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// The most partitions a wheel may have: 1,024 (each partition is a wheel of its own, with its
/// own leadership to bid for and wake-up list to wait on).
pub const MAX_PARTITIONS: usize = 1024;
/// The default number of handlers one [`Worker`](super::Worker) runs at once: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;
/// The default number of ready tasks one [`Worker`](super::Worker) claims ahead of its free
/// handlers, per partition: 128, two claims' worth. See
/// [`DurableBuilder::prefetch`](super::DurableBuilder::prefetch).
pub const DEFAULT_PREFETCH: usize = 128;
/// The default longest run of one handler: 30 minutes. A worker renews the leases of the
/// handlers it runs, so without a bound a hung handler would hold its task (and a place among
/// the worker's handlers) for good; with it, the handler is dropped and the delivery counts as
/// failed.
pub const DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The default number of finished runs a wheel keeps in its history: 10,000, the last few hours
/// of a wheel that runs a task a second (BENCHMARKS.md says what they cost). See
/// [`DurableBuilder::history_limit`](super::DurableBuilder::history_limit).
pub const DEFAULT_HISTORY_LIMIT: usize = 10_000;
/// The most finished runs a wheel may keep in its history: 10 million.
pub const MAX_HISTORY_LIMIT: usize = 10_000_000;
/// The default longest a finished run stays in the history: 24 hours, long enough to look back
/// on last night's runs in the morning. See
/// [`DurableBuilder::history_age`](super::DurableBuilder::history_age).
pub const DEFAULT_HISTORY_AGE: Duration = Duration::from_secs(24 * 3600);
/// The longest a finished run may stay in the history: 365 days.
pub const MAX_HISTORY_AGE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest wait for a wake-up (with a very short tick and lease, waiting less would be
/// polling).
pub(crate) const MIN_WAIT: Duration = Duration::from_millis(10);
/// The largest payload Redis stores in one value.
const REDIS_MAX_VALUE: usize = 512 << 20;
/// The longest leadership lease: a leader that dies is replaced within this even when tasks have
/// a long lease (for slow handlers), which would otherwise leave the wheel unticked that long.
pub(crate) const MAX_LEADER_LEASE: Duration = Duration::from_secs(10);
/// The leadership's lease on a store in this process alone (see [`Config::leader_lease`]).
pub(crate) const LOCAL_LEADER_LEASE: Duration = Duration::from_secs(6 * 3600);
/// How often a worker says it runs, on a shared store (see [`Config::heartbeat`]).
const HEARTBEAT: Duration = Duration::from_secs(2);
/// The longest lease: whole milliseconds Redis accepts as an expiry (`PX`) added to its clock.
const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a call's answer is kept, at least: a `schedule` retried later than this after its
/// first attempt landed and its task finished would create the task again.
const MIN_REQUEST_TTL: Duration = Duration::from_secs(60);

/// How far a commit of the embedded SQLite store (feature `sqlite`) reaches before the call that
/// made it returns; [`DurableBuilder::durability`](super::DurableBuilder::durability) sets it.
/// The Redis deployments follow their server's own settings (`appendonly`, `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Survives the process's death, any moment of it: SQLite's write-ahead log, written at
    /// each commit and flushed to the disk at checkpoints (`synchronous = NORMAL`). A power loss
    /// or an operating system crash may lose the last commits. The default.
    #[default]
    Process,
    /// Survives the machine's power loss too: each commit is flushed to the disk before the call
    /// returns (`synchronous = FULL`), a disk flush a commit (calls that arrive together share
    /// one).
    PowerLoss,
}

/// The URL of the embedded store in this process's memory.
pub(crate) const LOCAL_URL: &str = "sqlite::memory:";

/// Where the wheel's Redis is, as the builder was told.
#[derive(Debug, Clone)]
pub(crate) enum Topology {
    /// One node (or a proxy in front of several), by URL.
    Node(String),
    /// The primary that these sentinels name `master`.
    Sentinel { sentinels: Vec<String>, master: String },
    /// A Redis Cluster reached through any of these seed nodes.
    Cluster(Vec<String>),
    /// The embedded store, by its `sqlite:` URL (feature `sqlite`).
    Embedded(String),
}

impl Topology {
    /// The deployment a builder's URL names: the embedded store for `sqlite:`, else one node.
    pub(crate) fn of_url(url: &str) -> Topology {
        if url.starts_with("sqlite:") {
            Topology::Embedded(url.to_string())
        } else {
            Topology::Node(url.to_string())
        }
    }

    /// Whether the store lives in this process alone: `sqlite::memory:`.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, Topology::Embedded(url) if url == LOCAL_URL)
    }

    /// The URLs given, for the TLS check.
    pub(crate) fn urls(&self) -> Vec<&str> {
        match self {
            Topology::Node(url) | Topology::Embedded(url) => vec![url.as_str()],
            Topology::Sentinel { sentinels, .. } => sentinels.iter().map(String::as_str).collect(),
            Topology::Cluster(seeds) => seeds.iter().map(String::as_str).collect(),
        }
    }
}

/// The TLS settings beyond the URL's `rediss://`: a private CA, a client certificate.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) root_ca: Option<Vec<u8>>,
    /// `(certificate, key)`, both PEM.
    pub(crate) client_auth: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsSettings {
    pub(crate) fn is_set(&self) -> bool {
        self.root_ca.is_some() || self.client_auth.is_some()
    }

    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_auth
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
            root_cert: self.root_ca.clone(),
        }
    }
}

/// The settings as the builder gathered them, not yet checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) name: String,
    pub(crate) topology: Topology,
    pub(crate) tls: TlsSettings,
    pub(crate) partitions: usize,
    pub(crate) tick: Duration,
    pub(crate) slots: usize,
    pub(crate) lease: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff: Duration,
    pub(crate) concurrency: usize,
    pub(crate) prefetch: usize,
    pub(crate) handler_timeout: Duration,
    pub(crate) replicas: Option<(usize, Duration)>,
    pub(crate) durability: Durability,
    pub(crate) dead_letter_limit: usize,
    pub(crate) dead_letter_max_age: Option<Duration>,
    pub(crate) history_limit: usize,
    pub(crate) history_age: Duration,
    /// Open only a wheel that a node already opened, with the settings recorded in Redis.
    pub(crate) only_existing: bool,
    /// Make a handler's span a child of the span that scheduled its task, not only linked to
    /// it (set only with the `opentelemetry` feature).
    pub(crate) trace_parent: bool,
}

impl Settings {
    /// The defaults, for the wheel `name` on `topology`.
    pub(crate) fn new(name: &str, topology: Topology) -> Self {
        Settings {
            name: name.to_string(),
            topology,
            tls: TlsSettings::default(),
            partitions: 1,
            tick: DEFAULT_TICK,
            slots: DEFAULT_SLOTS,
            lease: DEFAULT_LEASE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_payload: DEFAULT_MAX_PAYLOAD,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            backoff: DEFAULT_BACKOFF,
            concurrency: DEFAULT_CONCURRENCY,
            prefetch: DEFAULT_PREFETCH,
            handler_timeout: DEFAULT_HANDLER_TIMEOUT,
            replicas: None,
            durability: Durability::Process,
            dead_letter_limit: 0,
            dead_letter_max_age: None,
            history_limit: DEFAULT_HISTORY_LIMIT,
            history_age: DEFAULT_HISTORY_AGE,
            only_existing: false,
            trace_parent: false,
        }
    }
}

/// The validated settings, in the units the scripts use.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) partitions: usize,
    pub(crate) tick_ms: u64,
    pub(crate) slots: u64,
    pub(crate) lease_ms: u64,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_ms: u64,
    pub(crate) concurrency: usize,
    /// The most ready tasks a worker claims ahead of its free handlers, per partition.
    pub(crate) prefetch: usize,
    /// The longest a handler may run before it is dropped and its delivery fails.
    pub(crate) handler_timeout: Duration,
    /// How many replicas must confirm a change, and for how long to wait for them.
    pub(crate) replicas: Option<(usize, Duration)>,
    /// How far a commit of the embedded store is flushed.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) durability: Durability,
    /// How long a call's answer is kept for its retries (`req:<id>`), in ms.
    pub(crate) request_ttl_ms: u64,
    /// The most dead letters kept (0: no limit).
    pub(crate) dead_letter_limit: usize,
    /// The longest a dead letter is kept, in ms (0: no limit).
    pub(crate) dead_letter_max_age_ms: u64,
    /// The most finished runs each partition's history keeps (its share of the wheel's limit,
    /// rounded up); 0: no history.
    pub(crate) history_limit: usize,
    /// The longest a finished run stays in the history, in ms (at least 1 while there is a
    /// history).
    pub(crate) history_age_ms: u64,
    /// A handler's span is a child of the span that scheduled its task (a run of a series
    /// aside), not only linked to it; never true without the `opentelemetry` feature.
    pub(crate) trace_parent: bool,
    /// The store lives in this process alone (`sqlite::memory:`): every node of the wheel runs
    /// here and the store tells the leader of every change, so an idle wheel sleeps until its
    /// next due time (see [`Config::leader_lease`]).
    pub(crate) local: bool,
}

impl Config {
    pub(crate) fn new(b: &Settings) -> Result<Self, Error> {
        validate_name(&b.name)?;
        let tick_ms = whole_ms(b.tick, "tick")?;
        if b.slots == 0 || b.slots > MAX_SLOTS {
            return Err(Error::invalid(format!("slots must be between 1 and {} (got {})", MAX_SLOTS, b.slots)));
        }
        let lease_ms = ceil_ms(b.lease);
        if lease_ms == 0 || b.lease > MAX_LEASE {
            return Err(Error::invalid(format!("the lease must be between 1 ms and 365 days (got {:?})", b.lease)));
        }
        if b.max_attempts == 0 {
            return Err(Error::invalid("max_attempts must be at least 1"));
        }
        if b.concurrency == 0 {
            return Err(Error::invalid("concurrency must be at least 1"));
        }
        if b.handler_timeout.is_zero() {
            return Err(Error::invalid(
                "the handler timeout must not be zero (Duration::MAX lets handlers run for as long as they take)",
            ));
        }
        if b.max_payload > REDIS_MAX_VALUE {
            return Err(Error::invalid("max_payload must be at most 512 MiB, the largest value Redis stores"));
        }
        if b.response_timeout.is_zero() || b.connect_timeout.is_zero() {
            return Err(Error::invalid("the response and connect timeouts must not be zero"));
        }
        if let Some((_, timeout)) = b.replicas {
            if timeout >= b.response_timeout {
                return Err(Error::invalid(format!(
                    "the replica wait ({timeout:?}) must be shorter than the response timeout ({:?})",
                    b.response_timeout
                )));
            }
        }
        let retry_window = b.connect_timeout + b.response_timeout;
        if b.dead_letter_max_age.is_some_and(|age| age.is_zero()) {
            return Err(Error::invalid("the dead letters' max age must not be zero"));
        }
        if b.history_limit > MAX_HISTORY_LIMIT {
            return Err(Error::invalid(format!(
                "the history keeps at most {MAX_HISTORY_LIMIT} finished runs (got {}); 0 keeps none",
                b.history_limit
            )));
        }
        if b.history_age > MAX_HISTORY_AGE {
            return Err(Error::invalid(format!(
                "the history keeps a finished run at most 365 days (got {:?}); zero keeps none",
                b.history_age
            )));
        }
        if b.partitions == 0 || b.partitions > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "partitions must be between 1 and {MAX_PARTITIONS} (got {})",
                b.partitions
            )));
        }
        Ok(Config {
            name: b.name.clone(),
            partitions: b.partitions,
            tick_ms,
            slots: b.slots as u64,
            lease_ms,
            max_attempts: b.max_attempts,
            max_payload: b.max_payload,
            response_timeout: b.response_timeout,
            connect_timeout: b.connect_timeout,
            backoff_ms: ceil_ms(b.backoff.min(MAX_BACKOFF)),
            concurrency: b.concurrency,
            prefetch: b.prefetch,
            handler_timeout: b.handler_timeout,
            replicas: b.replicas,
            durability: b.durability,
            request_ttl_ms: ceil_ms((retry_window * 4).max(MIN_REQUEST_TTL)),
            dead_letter_limit: b.dead_letter_limit,
            dead_letter_max_age_ms: b.dead_letter_max_age.map_or(0, ceil_ms),
            history_limit: if b.history_age.is_zero() { 0 } else { b.history_limit.div_ceil(b.partitions) },
            history_age_ms: ceil_ms(b.history_age),
            trace_parent: b.trace_parent,
            local: b.topology.is_local(),
        })
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// How often a worker renews the leases of the handlers it runs: a third of the lease, so
    /// that a renewal that fails once (Redis slow, or a failover) still has two more chances
    /// before the lease runs out.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.lease() / 3).max(Duration::from_millis(1))
    }

    /// The leadership's lease: the task lease, at most [`MAX_LEADER_LEASE`]; on a store in this
    /// process alone, [`LOCAL_LEADER_LEASE`].
    ///
    /// A store in this process alone has no other process whose node could take over: a leader
    /// dies only with the process (and the store with it), and one that stops gives the lead up
    /// at once (and a change in the store wakes the others to bid). Its renewals, the idle waits
    /// and the heartbeats paced by it then come every two hours, the bids every hour and a half:
    /// an idle wheel sleeps until its next due time, which is what lets a test on paused time run
    /// 48 hours of it in a moment (about 25 store calls an idle 2 hours).
    pub(crate) fn leader_lease(&self) -> Duration {
        if self.local {
            return LOCAL_LEADER_LEASE;
        }
        self.lease().min(MAX_LEADER_LEASE)
    }

    /// How often a worker says it runs, in the registry of workers: every 2 s; on a store in
    /// this process alone (where a worker leaves the registry when it stops, and a process that
    /// dies takes the store with it), every [`LOCAL_LEADER_LEASE`] / 3.
    pub(crate) fn heartbeat(&self) -> Duration {
        if self.local {
            return LOCAL_LEADER_LEASE / 3;
        }
        HEARTBEAT
    }

    pub(crate) fn leader_lease_ms(&self) -> u64 {
        ceil_ms(self.leader_lease())
    }

    /// How long one call keeps retrying transient failures before it returns one.
    pub(crate) fn retry_window(&self) -> Duration {
        self.connect_timeout
    }

    /// How long an idle worker waits for a wake-up before it claims anyway: a third of the
    /// leadership's lease (at most 10 s / 3; two hours on a store in this process alone), or a
    /// tick if that is longer, and at least [`MIN_WAIT`]. A safety net only: every script that
    /// makes tasks ready pushes a wake-up.
    pub(crate) fn idle_wait(&self) -> Duration {
        (self.leader_lease() / 3).max(self.tick()).max(MIN_WAIT)
    }

    /// [`MAX_BACKOFF`] in ms.
    pub(crate) fn max_backoff_ms(&self) -> u64 {
        ceil_ms(MAX_BACKOFF)
    }
}

fn validate_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid("the wheel's name must not be empty"));
    }
    if let Some(c) = name.chars().find(|&c| matches!(c, '{' | '}' | ':') || c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(format!(
            "the wheel's name {name:?} holds {c:?}: names may not hold braces, colons, whitespace or control \
             characters, which would break its Redis keys"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_break_the_keys_are_refused() {
        for ok in ["orders", "orders-eu_1", "Bestellungen", "注文"] {
            assert!(validate_name(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "a{b", "a}b", "a:b", "a b", "a\tb", "a\u{0}b"] {
            assert!(matches!(validate_name(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}
