//! [`SharedConn`]: the connection that every handle and worker of one `connect` shares, whatever
//! the deployment (`deployment.rs`), and the one way commands are sent on it: with retries of
//! transient failures inside a bounded window, and a failover followed where the deployment
//! allows. It knows no script; `scripts` builds the calls and reads their replies.

use std::time::Duration;

use redis::{FromRedisValue, ScriptInvocation};
use tokio::time::Instant;

use super::deployment::{addresses, speaks_plain_text, Connection, Deployment};
use crate::durable::config::{Config, TlsSettings, Topology};
use crate::durable::time::ceil_ms;
use crate::error::RedisFailure;
use crate::Error;

/// The shared connection, and the settings of its retries.
pub(crate) struct SharedConn {
    /// The wheel's name, for logs.
    name: String,
    source: Deployment,
    /// The one link every call goes through, for a node or a cluster (which reconnect by
    /// themselves); `None` for Sentinel, whose link the source finds again after a failover.
    fixed: Option<Connection>,
    cfg: ConnSettings,
}

/// What of the settings the connection uses.
struct ConnSettings {
    retry_window: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// The response timeout of the dedicated connections of blocking waits: longer than the
    /// longest wait.
    long_response: Duration,
    /// How many replicas must confirm a change, and for how long to wait for them.
    replicas: Option<(usize, Duration)>,
}

impl SharedConn {
    /// Connects to `topology` within `deadline`. `long_response` is the response timeout of
    /// the dedicated connections of blocking waits; `quiet`, the scripts whose changes an
    /// embedded store does not count (see [`Deployment::new`]).
    pub(crate) async fn connect(
        topology: &Topology,
        tls: &TlsSettings,
        cfg: &Config,
        long_response: Duration,
        deadline: Instant,
        quiet: &[&str],
    ) -> Result<Self, Error> {
        let source = Deployment::new(topology, tls, cfg, long_response, quiet)?;
        let addrs = addresses(topology);
        let secure = topology.urls().iter().any(|url| url.starts_with("rediss://"));
        let settings = ConnSettings {
            retry_window: cfg.retry_window(),
            response_timeout: cfg.response_timeout,
            connect_timeout: cfg.connect_timeout,
            long_response,
            replicas: cfg.replicas,
        };
        let mut conn = SharedConn { name: cfg.name.clone(), source, fixed: None, cfg: settings };
        // Connecting retries transient failures (a cluster still electing, a sentinel naming a
        // primary that is not one yet) until the deadline, as every call does.
        // A refused connection, or a server that does not answer as Redis, is not retried here:
        // waiting out the connect timeout would only hide what is wrong behind "timed out".
        let window = deadline.saturating_duration_since(Instant::now());
        let connecting = conn.retrying_unless(
            window,
            CONNECT_TIMEOUT,
            |err| connect_failure(err, &addrs),
            |link| async move { Ok(link) },
        );
        // A plain-text Redis answers no TLS handshake: it waits for the end of a command line that
        // never comes. If the handshake has not finished soon, ask the port in plain text.
        let connected = if secure {
            tokio::select! {
                connected = connecting => connected,
                addr = plain_text_port(&addrs) => Err(not_tls(&addr)),
            }
        } else {
            connecting.await
        };
        let link = connected.map_err(|e| match e {
            Error::Redis(f) if f.category() == "timed out" => unreachable(cfg.connect_timeout),
            e => e,
        })?;
        if !conn.source.makes_anew() {
            conn.fixed = Some(link);
        }
        Ok(conn)
    }

    /// A connection of its own (for a blocking wait that would hold up the shared one), whose
    /// replies may take the long response timeout given to `connect`.
    pub(crate) async fn dedicated(&self, cfg: &Config) -> Option<Connection> {
        let connect: std::pin::Pin<Box<dyn std::future::Future<Output = redis::RedisResult<Connection>> + Send + '_>> =
            Box::pin(self.source.dedicated(cfg, self.cfg.long_response));
        tokio::time::timeout(self.cfg.connect_timeout, connect).await.ok()?.ok()
    }

    /// The count of the store's changes, when the store lives in this process alone (see
    /// `embedded::Store::changes`); `None` for every other deployment.
    pub(crate) fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match &self.source {
            #[cfg(feature = "sqlite")]
            Deployment::Embedded(store) => store.changes(),
            _ => None,
        }
    }

    /// How many commands this process ran on an embedded store (`None` for Redis).
    #[cfg(all(test, feature = "sqlite"))]
    pub(crate) fn store_calls(&self) -> Option<u64> {
        match &self.source {
            #[cfg(feature = "sqlite")]
            Deployment::Embedded(store) => Some(store.calls()),
            _ => None,
        }
    }

    /// Whether the scripts are worth loading ahead (`scripts::preload`): on one node or
    /// Sentinel's primary (a cluster's nodes load each on first use; an embedded store runs them
    /// in process).
    pub(crate) fn preloads_scripts(&self) -> bool {
        self.source.makes_anew()
    }

    /// The store's clock when it is Tokio's (see `embedded::Store::tokio_clock`).
    pub(crate) fn tokio_clock(&self) -> Option<(u64, tokio::time::Instant)> {
        match &self.source {
            #[cfg(feature = "sqlite")]
            Deployment::Embedded(store) => store.tokio_clock(),
            _ => None,
        }
    }

    /// The shared connection itself, for a call sent once with no retry (`None` while Sentinel
    /// is being asked for the primary).
    pub(crate) async fn shared(&self) -> Option<Connection> {
        match &self.fixed {
            Some(link) => Some(link.clone()),
            None => tokio::time::timeout(self.cfg.connect_timeout, self.link()).await.ok()?.ok(),
        }
    }

    async fn link(&self) -> redis::RedisResult<Connection> {
        match &self.fixed {
            Some(link) => Ok(link.clone()),
            // Type-erased: the connecting futures of the redis crate's Sentinel and Cluster
            // clients are deep enough that every caller's future otherwise overflows rustc's
            // query depth (seen compiling the doc examples that await a schedule).
            None => {
                let connect: std::pin::Pin<
                    Box<dyn std::future::Future<Output = redis::RedisResult<Connection>> + Send + '_>,
                > = Box::pin(self.source.connect_shared(self.cfg.response_timeout, self.cfg.connect_timeout));
                connect.await
            }
        }
    }

    /// Runs `inv`, retrying transient failures with a short backoff for up to `window`. Every
    /// script is safe to run twice, so a retry after an ambiguous failure (a timeout whose
    /// request did reach Redis) does no harm.
    pub(crate) async fn call<T: FromRedisValue>(&self, inv: &ScriptInvocation<'_>, window: Window) -> Result<T, Error> {
        self.retrying(
            self.window(window),
            window.bound(),
            |mut link| async move { inv.invoke_async::<T>(&mut link).await },
        )
        .await
    }

    /// Runs one command that names a key the same way, in the default window.
    pub(crate) async fn command<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        self.retrying(self.cfg.retry_window, CONNECT_TIMEOUT, |mut link| async move {
            cmd.query_async::<T>(&mut link).await
        })
        .await
    }

    /// Runs one command that names no key (`INFO`, `CONFIG GET`, `WAIT`) on the node that holds
    /// `key` (the primary of its slot, in a cluster), in the default window.
    pub(crate) async fn command_beside<T: FromRedisValue>(&self, cmd: &redis::Cmd, key: &str) -> Result<T, Error> {
        self.retrying(
            self.cfg.retry_window,
            CONNECT_TIMEOUT,
            |mut link| async move { link.beside::<T>(cmd, key).await },
        )
        .await
    }

    /// Runs `call` (a call made with [`Window::Default`]), giving up when the default window has
    /// passed since `first`, the instant a user made it (`None`: since now, which the call's own
    /// window already bounds). A call that waited in a queue behind others on the wire thus gives
    /// up within the window of when it was made, as its caller was promised, not of when it was
    /// sent; one whose window passed while it waited is not sent at all.
    pub(crate) async fn by_deadline_of<T>(
        &self,
        first: Option<Instant>,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let Some(first) = first else { return call.await };
        let deadline = first + self.cfg.retry_window;
        if Instant::now() >= deadline {
            return Err(Error::Redis(timed_out(self.cfg.retry_window, CONNECT_TIMEOUT)));
        }
        tokio::time::timeout_at(deadline, call)
            .await
            .unwrap_or_else(|_| Err(Error::Redis(timed_out(self.cfg.retry_window, CONNECT_TIMEOUT))))
    }

    fn window(&self, window: Window) -> Duration {
        match window {
            Window::Default => self.cfg.retry_window,
            Window::Response => self.cfg.response_timeout,
            Window::Within(d) => d,
        }
    }

    /// Runs `attempt` on the link, retrying transient failures for up to `window`, which the
    /// setting named `bound` set (for the message of a call that runs out of it).
    async fn retrying<T, F, Fut>(&self, window: Duration, bound: &'static str, attempt: F) -> Result<T, Error>
    where
        F: FnMut(Connection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        self.retrying_unless(window, bound, |_| None, attempt).await
    }

    /// [`retrying`](Self::retrying), except that a failure to connect for which `fail_fast`
    /// gives an error is returned at once, as that error.
    async fn retrying_unless<T, F, Fut>(
        &self,
        window: Duration,
        bound: &'static str,
        fail_fast: impl Fn(&redis::RedisError) -> Option<Error>,
        mut attempt: F,
    ) -> Result<T, Error>
    where
        F: FnMut(Connection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let deadline = Instant::now() + window;
        let mut wait = Duration::from_millis(10);
        loop {
            let failure = match tokio::time::timeout_at(deadline, self.link()).await {
                Err(_) => timed_out(window, bound),
                Ok(Err(err)) => match fail_fast(&err) {
                    Some(error) => return Err(error),
                    None => self.failure(err),
                },
                Ok(Ok(link)) => match tokio::time::timeout_at(deadline, attempt(link.clone())).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(err)) => {
                        if may_be_failover(&err) {
                            self.source.suspect(&link);
                        }
                        self.failure(err)
                    }
                    Err(_) => {
                        self.source.suspect(&link);
                        timed_out(window, bound)
                    }
                },
            };
            if !failure.is_retryable() || Instant::now() + wait >= deadline {
                // A call that ran out of its window on a timeout (the redis crate's own says
                // only "timed out") says how long it tried, and which setting set that.
                let failure = if failure.category() == "timed out" { timed_out(window, bound) } else { failure };
                return Err(Error::Redis(failure));
            }
            tracing::debug!(wheel = %self.name, error = %failure, "retrying a Redis call");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(250));
        }
    }

    /// What `err` means here: replies that depend on the deployment say what to do.
    fn failure(&self, err: redis::RedisError) -> RedisFailure {
        match err.code() {
            Some("MOVED" | "ASK") if !self.source.is_cluster() => RedisFailure::new(
                "key moved",
                format!(
                    "Redis answered {err}: the server is a Redis Cluster node; connect with DurableScheduler::cluster"
                ),
                false,
            ),
            // The cluster client follows these itself; one that still surfaces (a slot moving
            // twice in a row, say) is worth the same call again.
            Some("MOVED" | "ASK") => RedisFailure::new("key moved", format!("{err}: the slot is moving"), true),
            // A multi-key call during a slot migration, some of whose keys have moved: Redis
            // asks for the call again once the slot has moved.
            Some("TRYAGAIN") => {
                RedisFailure::new("slot moving", format!("{err}: the wheel's slot is moving; retrying"), true)
            }
            Some("READONLY") if self.source.follows_failover() => {
                RedisFailure::new("failover", format!("{err}: the primary is changing; retrying on the new one"), true)
            }
            Some("READONLY") => RedisFailure::new(
                "read only",
                format!(
                    "Redis answered {err}: the URL names a replica; connect to the primary, or name the sentinels \
                     with DurableScheduler::sentinel"
                ),
                false,
            ),
            // A server that sees a script touch a key on another node (the scripts declare every
            // key, but a server mid-migration may still say so) is retried likewise.
            _ if err.to_string().contains("non local key") => {
                RedisFailure::new("slot moving", format!("{err}: the wheel's slot is moving; retrying"), true)
            }
            // Sentinel names no primary in the middle of a failover (the old one is down and the
            // new one not yet promoted).
            _ if matches!(err.kind(), redis::ErrorKind::MasterNameNotFoundBySentinel) => RedisFailure::new(
                "failover",
                format!("{err}: the sentinels name no primary yet (a failover under way, or a wrong master name)"),
                true,
            ),
            _ if is_not_tls(&err) => RedisFailure::new(
                "TLS",
                format!(
                    "the TLS handshake with Redis failed: {err}; the server may not speak TLS on that port: use \
                     redis:// for it, or check the port (Redis serves TLS on its tls-port)"
                ),
                false,
            )
            .caused_by(err),
            _ if is_tls_refusal(&err) => RedisFailure::new(
                "TLS",
                format!(
                    "the TLS handshake with Redis failed: {err}; if a private CA signed the server's certificate, \
                     give it with tls_root_ca, and a client certificate with tls_client_auth if the server asks \
                     for one"
                ),
                false,
            ),
            _ => RedisFailure::from(err),
        }
    }

    /// Waits for the configured replicas of the node that holds `key` to hold this
    /// connection's writes so far, if any are configured.
    pub(crate) async fn replicate(&self, key: &str) -> Result<(), Error> {
        let Some((replicas, timeout)) = self.cfg.replicas else { return Ok(()) };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ceil_ms(timeout).max(1));
        let confirmed: usize = self.command_beside(&wait, key).await?;
        if confirmed < replicas {
            // With Sentinel, too few replicas may mean this primary was cut off and replaced.
            if let Some(link) = &self.fixed {
                self.source.suspect(link);
            } else if let Ok(link) = self.link().await {
                self.source.suspect(&link);
            }
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

/// Whether `err` is a TLS handshake that met something other than TLS: rustls reports a reply
/// that is no TLS record (a plain-text error, an HTTP response) as a corrupt message.
fn is_not_tls(err: &redis::RedisError) -> bool {
    let text = err.to_string().to_lowercase();
    text.contains("corrupt message") || text.contains("invalidcontenttype")
}

/// Whether `err` is a TLS handshake refused for a certificate (the server's not trusted, or
/// the client's missing or refused), which no retry mends. rustls reports it through an I/O
/// error whose text names the certificate or the alert.
fn is_tls_refusal(err: &redis::RedisError) -> bool {
    let text = err.to_string().to_lowercase();
    text.contains("certificate") || text.contains("fatal alert") || text.contains("handshake")
}

/// Whether `err` may mean that the node is no longer the primary: the connection failed or
/// timed out, or the node turned read-only.
fn may_be_failover(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || err.is_connection_dropped() || err.code() == Some("READONLY")
}

/// The failure of a call that had no answer within `window`, set by the setting named `bound`.
fn timed_out(window: Duration, bound: &str) -> RedisFailure {
    RedisFailure::new(
        "timed out",
        format!(
            "no answer from Redis within {window:?} ({bound}, which bounds how long this call retries): the link to \
             Redis is down or too slow, or the server is"
        ),
        true,
    )
}

/// The setting behind [`Window::Default`], and the window of `connect`.
const CONNECT_TIMEOUT: &str = "the connect timeout";

/// What a failure to connect means at once, with no retry: a refused connection, or a reply
/// that is not Redis's protocol (the URL names some other server's port). `addrs` are the
/// addresses of the URLs, for the message.
fn connect_failure(err: &redis::RedisError, addrs: &[String]) -> Option<Error> {
    if err.is_connection_refusal() {
        return Some(refused(err));
    }
    if err.kind() == redis::ErrorKind::Parse {
        let at = match addrs {
            [addr] => format!("the server at {addr}"),
            addrs => format!("a server at {}", addrs.join(", ")),
        };
        return Some(Error::Redis(
            RedisFailure::new(
                "not Redis",
                format!(
                    "{at} did not answer as Redis (its reply is not the Redis protocol): is it a Redis port? Check \
                     the host and port of the URL"
                ),
                false,
            )
            .caused_by(err.clone()),
        ));
    }
    None
}

/// How long a TLS connection may take before [`plain_text_port`] asks whether the port speaks
/// plain text: far longer than a handshake on a local network, far shorter than a connect
/// timeout.
const PLAIN_TEXT_CHECK_AFTER: Duration = Duration::from_millis(300);

/// The first of `addrs` whose server answers a plain-text `PING` as Redis does, asked once
/// [`PLAIN_TEXT_CHECK_AFTER`] has passed; pending for ever if none does (a TLS server, or one
/// that is slow to answer at all, is left to the connect timeout).
async fn plain_text_port(addrs: &[String]) -> String {
    tokio::time::sleep(PLAIN_TEXT_CHECK_AFTER).await;
    for addr in addrs {
        if speaks_plain_text(addr, Duration::from_secs(1)).await {
            return addr.clone();
        }
    }
    std::future::pending().await
}

/// The error of a `rediss://` connect to a server that answers in plain text.
fn not_tls(addr: &str) -> Error {
    Error::Redis(RedisFailure::new(
        "TLS",
        format!(
            "the TLS handshake with Redis at {addr} failed: the server there answers in plain text, so it may not \
             speak TLS on that port: use redis:// for it, or check the port (Redis serves TLS on its tls-port)"
        ),
        false,
    ))
}

/// The error of a `connect` whose connection was refused: nothing listens at the address.
/// Retryable, since a Redis that is starting or restarting refuses too; but it comes at once,
/// not after the connect timeout.
fn refused(err: &redis::RedisError) -> Error {
    Error::Redis(RedisFailure::new(
        "refused",
        format!(
            "Redis refused the connection ({err}): nothing listens at that address; is Redis running, and are the \
             host and port right?"
        ),
        true,
    ))
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

impl Window {
    /// The setting that sets this window, named as its builder method is documented.
    fn bound(self) -> &'static str {
        match self {
            Window::Default => CONNECT_TIMEOUT,
            Window::Response => "the response timeout",
            Window::Within(_) => "the task's lease, or the connect timeout if longer",
        }
    }
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
