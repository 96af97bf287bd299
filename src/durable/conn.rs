//! The shared state behind every handle: the connection, the settings, and the one way scripts
//! are called (with retries of transient failures inside a bounded window).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation};
use tokio::time::Instant;

use super::builder::MAX_BACKOFF;
use super::scripts::SCRIPTS;
use super::{DurableBuilder, RedisFailure};
use crate::Error;

/// The latest due time a task may have, in ms since the Unix epoch (the year 2286): keeps every
/// number in the scripts exact in Lua's doubles and printable as an integer.
pub(crate) const MAX_DUE_MS: u64 = 10_000_000_000_000;
/// The largest payload Redis stores in one value.
const REDIS_MAX_VALUE: usize = 512 << 20;
/// The longest leadership lease: a leader that dies is replaced within this even when tasks have
/// a long lease (for slow handlers), which would otherwise leave the wheel unticked that long.
pub(crate) const MAX_LEADER_LEASE: Duration = Duration::from_secs(10);
/// The longest lease: whole milliseconds Redis accepts as an expiry (`PX`) added to its clock.
const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a finished task's request id is remembered, at least: a `schedule` retried later than
/// this after its first attempt landed and its task finished would create the task again.
const MIN_DONE_TTL: Duration = Duration::from_secs(60);

/// The validated settings, in the units the scripts use.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) tick_ms: u64,
    pub(crate) slots: u64,
    pub(crate) lease_ms: u64,
    pub(crate) max_attempts: u32,
    pub(crate) max_payload: usize,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_ms: u64,
    pub(crate) concurrency: usize,
    /// How many replicas must confirm a change, and for how long to wait for them.
    pub(crate) replicas: Option<(usize, Duration)>,
    /// How long a finished task's request id is kept (`done:<key>`), in ms.
    pub(crate) done_ttl_ms: u64,
}

impl Config {
    pub(crate) fn new(b: &DurableBuilder) -> Result<Self, Error> {
        validate_name(&b.name)?;
        let tick_ms = whole_ms(b.tick, "tick")?;
        if b.slots == 0 || b.slots > super::MAX_SLOTS {
            return Err(Error::invalid(format!("slots must be between 1 and {} (got {})", super::MAX_SLOTS, b.slots)));
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
        Ok(Config {
            tick_ms,
            slots: b.slots as u64,
            lease_ms,
            max_attempts: b.max_attempts,
            max_payload: b.max_payload,
            response_timeout: b.response_timeout,
            connect_timeout: b.connect_timeout,
            backoff_ms: ceil_ms(b.backoff.min(MAX_BACKOFF)),
            concurrency: b.concurrency,
            replicas: b.replicas,
            done_ttl_ms: ceil_ms((retry_window * 4).max(MIN_DONE_TTL)),
        })
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The leadership's lease: the task lease, at most [`MAX_LEADER_LEASE`].
    pub(crate) fn leader_lease(&self) -> Duration {
        self.lease().min(MAX_LEADER_LEASE)
    }

    pub(crate) fn leader_lease_ms(&self) -> u64 {
        ceil_ms(self.leader_lease())
    }

    /// How long one call keeps retrying transient failures before it returns one.
    pub(crate) fn retry_window(&self) -> Duration {
        self.connect_timeout
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

/// `d` in whole milliseconds, rounded up (a deadline is never early).
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn whole_ms(d: Duration, what: &str) -> Result<u64, Error> {
    if d.is_zero() || !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(Error::invalid(format!("the {what} must be a whole, non-zero number of milliseconds (got {d:?})")));
    }
    u64::try_from(d.as_millis()).map_err(|_| Error::invalid(format!("the {what} is too long")))
}

/// `at` in ms since the Unix epoch, rounded up; a time before the epoch is 0 (due at once).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(ceil_ms).unwrap_or(0)
}

/// Makes ids unique across processes and calls: request ids of `schedule` and node ids of
/// workers. Not secret; only unique.
#[derive(Debug)]
pub(crate) struct Ids {
    prefix: String,
    next: AtomicU64,
}

impl Ids {
    pub(crate) fn new() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
        Ids { prefix: format!("{:016x}", h.finish()), next: AtomicU64::new(0) }
    }

    pub(crate) fn next(&self) -> String {
        format!("{}.{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// What every handle and worker of one `connect` shares.
pub(crate) struct Inner {
    pub(crate) name: String,
    /// `tw:{name}:`, the start of every key of the wheel.
    pub(crate) prefix: String,
    /// `tw:{name}:meta`, passed as KEYS[1] to every script.
    pub(crate) meta: String,
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
    pub(crate) cfg: Config,
    pub(crate) ids: Ids,
}

impl Inner {
    /// A call of `script` with the wheel's KEYS[1] and ARGV[1] in place.
    pub(crate) fn script<'a>(&self, script: &'a Script) -> ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(&self.meta).arg(&self.prefix);
        inv
    }

    /// Runs `inv`, retrying transient failures with a short backoff for up to `window`. Every
    /// script is safe to run twice, so a retry after an ambiguous failure (a timeout whose
    /// request did reach Redis) does no harm.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        window: Duration,
    ) -> Result<T, Error> {
        self.retrying(window, |mut conn| async move { inv.invoke_async::<T>(&mut conn).await }).await
    }

    /// Runs one plain command the same way as [`call`](Self::call), with the default window.
    pub(crate) async fn command<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.retrying(self.cfg.retry_window(), |mut conn| async move { cmd.query_async::<T>(&mut conn).await }).await
    }

    async fn retrying<T, F, Fut>(&self, window: Duration, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let deadline = Instant::now() + window;
        let mut wait = Duration::from_millis(10);
        loop {
            let attempt = tokio::time::timeout_at(deadline, attempt(self.conn.clone())).await;
            let failure = match attempt {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(err)) => RedisFailure::from(err),
                Err(_) => RedisFailure::new(
                    "timed out",
                    format!("no answer from Redis within {window:?} (the connect timeout)"),
                    true,
                ),
            };
            if !failure.is_retryable() || Instant::now() + wait >= deadline {
                return Err(Error::Redis(failure));
            }
            tracing::debug!(wheel = %self.name, error = %failure, "retrying a Redis call");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(250));
        }
    }

    /// Runs `inv` once with the default retry window.
    pub(crate) async fn run<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>) -> Result<T, Error> {
        self.call(inv, self.cfg.retry_window()).await
    }

    /// Waits for the configured replicas to hold this connection's writes so far, if any are
    /// configured.
    pub(crate) async fn replicate(&self) -> Result<(), Error> {
        let Some((replicas, timeout)) = self.cfg.replicas else { return Ok(()) };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ceil_ms(timeout).max(1));
        let confirmed: usize = self.command(&wait).await?;
        if confirmed < replicas {
            return Err(Error::Redis(RedisFailure::new(
                "replication",
                format!(
                    "the change is on the primary, but only {confirmed} of {replicas} replicas confirmed it within \
                     {timeout:?}: it could be lost in a failover"
                ),
                true,
            )));
        }
        Ok(())
    }

    pub(crate) fn key(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    /// Opens the wheel in Redis (see `lua/open.lua`).
    pub(crate) async fn open(&self) -> Result<(), Error> {
        let mut inv = self.script(&SCRIPTS.open);
        inv.arg(self.cfg.tick_ms).arg(self.cfg.slots);
        let reply: Vec<String> = self.run(&inv).await?;
        if reply.first().map(String::as_str) == Some("1") {
            return Ok(());
        }
        let (tick, slots) = (reply.get(1).cloned().unwrap_or_default(), reply.get(2).cloned().unwrap_or_default());
        Err(Error::invalid(format!(
            "the wheel {:?} in Redis runs with a {tick} ms tick and {slots} slots, not {} ms and {}: connect with \
             the same settings as the other nodes, or use another name",
            self.name, self.cfg.tick_ms, self.cfg.slots
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_whole_milliseconds() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(5)), 5);
        assert_eq!(ceil_ms(Duration::from_micros(5001)), 6);
        assert_eq!(ceil_ms(Duration::MAX), u64::MAX);
        assert_eq!(unix_ms(UNIX_EPOCH + Duration::from_micros(1500)), 2);
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_secs(1)), 0, "before the epoch is due at once");
    }

    #[test]
    fn ticks_are_whole_milliseconds() {
        assert_eq!(whole_ms(Duration::from_secs(1), "tick").unwrap(), 1000);
        assert!(whole_ms(Duration::ZERO, "tick").is_err());
        assert!(whole_ms(Duration::from_micros(1500), "tick").is_err());
    }

    #[test]
    fn names_that_would_break_the_keys_are_refused() {
        for ok in ["orders", "orders-eu_1", "Bestellungen", "注文"] {
            assert!(validate_name(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "a{b", "a}b", "a:b", "a b", "a\tb", "a\u{0}b"] {
            assert!(matches!(validate_name(bad), Err(Error::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn ids_are_unique() {
        let (a, b) = (Ids::new(), Ids::new());
        let ids = [a.next(), a.next(), b.next(), b.next()];
        for (i, x) in ids.iter().enumerate() {
            for y in &ids[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }
}
