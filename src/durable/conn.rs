//! The connection to Redis that every handle and worker of one `connect` shares, and the one way
//! commands are sent on it: with retries of transient failures inside a bounded window. It knows
//! no script; `scripts` builds the calls and reads their replies.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, ScriptInvocation};
use tokio::time::Instant;

use super::config::Config;
use super::time::ceil_ms;
use crate::error::RedisFailure;
use crate::Error;

/// A multiplexed, reconnecting connection, and the settings of its retries.
pub(crate) struct Conn {
    /// The wheel's name, for logs.
    name: String,
    client: redis::Client,
    manager: ConnectionManager,
    /// How long one call keeps retrying transient failures.
    retry_window: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// How many replicas must confirm a change, and for how long to wait for them.
    replicas: Option<(usize, Duration)>,
}

impl Conn {
    /// Connects to `url` within `deadline`.
    pub(crate) async fn connect(url: &str, cfg: &Config, deadline: Instant) -> Result<Self, Error> {
        let client =
            redis::Client::open(url).map_err(|e| Error::invalid(format!("the Redis URL is malformed: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(cfg.response_timeout))
            .set_connection_timeout(Some(cfg.connect_timeout))
            .set_max_delay(Duration::from_secs(1));
        let manager = tokio::time::timeout_at(deadline, ConnectionManager::new_with_config(client.clone(), config))
            .await
            .map_err(|_| unreachable(cfg.connect_timeout))??;
        Ok(Conn {
            name: cfg.name.clone(),
            client,
            manager,
            retry_window: cfg.retry_window(),
            response_timeout: cfg.response_timeout,
            connect_timeout: cfg.connect_timeout,
            replicas: cfg.replicas,
        })
    }

    /// A connection of its own (for a blocking wait that would hold up the shared one), whose
    /// replies may take up to `response_timeout`.
    pub(crate) async fn dedicated(&self, response_timeout: Duration) -> Option<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            .set_max_delay(Duration::from_secs(1));
        let connect = ConnectionManager::new_with_config(self.client.clone(), config);
        tokio::time::timeout(self.connect_timeout, connect).await.ok()?.ok()
    }

    /// The shared connection itself, for a call sent once with no retry.
    pub(crate) fn shared(&self) -> ConnectionManager {
        self.manager.clone()
    }

    /// Runs `inv`, retrying transient failures with a short backoff for up to `window`. Every
    /// script is safe to run twice, so a retry after an ambiguous failure (a timeout whose
    /// request did reach Redis) does no harm.
    pub(crate) async fn call<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>, window: Window) -> Result<T, Error> {
        self.retrying(self.window(window), |mut conn| async move { inv.invoke_async::<T>(&mut conn).await }).await
    }

    /// Runs one plain command the same way, in the default window.
    pub(crate) async fn command<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.retrying(self.retry_window, |mut conn| async move { cmd.query_async::<T>(&mut conn).await }).await
    }

    fn window(&self, window: Window) -> Duration {
        match window {
            Window::Default => self.retry_window,
            Window::Response => self.response_timeout,
            Window::Within(d) => d,
        }
    }

    async fn retrying<T, F, Fut>(&self, window: Duration, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let deadline = Instant::now() + window;
        let mut wait = Duration::from_millis(10);
        loop {
            let attempt = tokio::time::timeout_at(deadline, attempt(self.manager.clone())).await;
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

    /// Waits for the configured replicas to hold this connection's writes so far, if any are
    /// configured.
    pub(crate) async fn replicate(&self) -> Result<(), Error> {
        let Some((replicas, timeout)) = self.replicas else { return Ok(()) };
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
}

/// How long a call keeps retrying transient failures.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Window {
    /// The connect timeout: calls made for a user.
    Default,
    /// One response timeout: the leader's and the claim loop's calls, which come round again soon.
    Response,
    /// As long as this: recording an outcome keeps trying while the lease lasts.
    Within(Duration),
}

/// The error of a `connect` that did not get through within the connect timeout.
pub(crate) fn unreachable(connect_timeout: Duration) -> Error {
    Error::Redis(RedisFailure::new(
        "timed out",
        format!(
            "could not connect to Redis within {connect_timeout:?} (the connect timeout): is it running and reachable?"
        ),
        true,
    ))
}
