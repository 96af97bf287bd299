//! The connections of the three deployments the durable mode runs on: one Redis node (plain or
//! TLS), a primary found through Redis Sentinel, and a Redis Cluster. [`Deployment`] makes and
//! remakes them; [`Connection`] is a handle on any of them that scripts and commands go through.

use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value,
};

use crate::durable::config::{Config, TlsSettings, Topology};
use crate::Error;

/// A handle on a connection of any deployment: cheap to clone, every clone on the same
/// connection(s).
#[derive(Clone)]
pub(crate) enum Connection {
    /// One node: reconnects to the same address by itself when the connection drops; made anew
    /// by [`Deployment`] when a call times out on it (a connection dropped silently, which
    /// answers nothing and never fails). The number tells one connection from the next.
    Node(u64, ConnectionManager),
    /// Sentinel's primary: never reconnects by itself, so that a revived old primary is never
    /// written to; [`Deployment`] finds the primary again instead. The number tells one found
    /// primary from the next.
    Primary(u64, MultiplexedConnection),
    /// A cluster: follows `MOVED`/`ASK`, resharding and failover by itself.
    Cluster(ClusterConnection),
    /// The embedded store, in this process.
    #[cfg(feature = "sqlite")]
    Embedded(super::sqlite::EmbeddedConn),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Node(_, c) => c.req_packed_command(cmd),
            Connection::Primary(_, c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sqlite")]
            Connection::Embedded(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Node(_, c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Primary(_, c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sqlite")]
            Connection::Embedded(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Node(_, c) => c.get_db(),
            Connection::Primary(_, c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
            #[cfg(feature = "sqlite")]
            Connection::Embedded(c) => c.get_db(),
        }
    }
}

impl Connection {
    /// Runs `cmd`, which names no key (`INFO`, `WAIT`, `CLIENT ...`), on the node that holds
    /// `key`: the primary of its hash slot, in a cluster; the one node otherwise.
    pub(crate) async fn beside<T: redis::FromRedisValue>(&mut self, cmd: &Cmd, key: &str) -> RedisResult<T> {
        match self {
            Connection::Cluster(c) => {
                let route = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = c.route_command(cmd.clone(), route).await?;
                redis::from_redis_value(value).map_err(Into::into)
            }
            _ => cmd.query_async(self).await,
        }
    }
}

/// Makes the connections of one deployment, and makes them again after a failover. Made once
/// per `connect`, so the sizes of its variants do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Deployment {
    Node {
        client: Client,
        /// The shared connection while it is trusted, with its number; `None` once a call timed
        /// out on it.
        current: RwLock<Option<(u64, ConnectionManager)>>,
        /// How many shared connections were made so far.
        made: std::sync::atomic::AtomicU64,
        /// Held while one is being made, so that the calls that all timed out wait for one.
        making: tokio::sync::Mutex<()>,
    },
    Sentinel {
        sentinel: tokio::sync::Mutex<SentinelClient>,
        /// The primary's connection while it is trusted, with its number; `None` once a failure
        /// made it suspect.
        current: RwLock<Option<(u64, MultiplexedConnection)>>,
        /// How many primaries were found so far.
        found: std::sync::atomic::AtomicU64,
        /// Held while a primary is being found, so that the calls that all found the old one
        /// suspect wait for one new connection instead of each making its own.
        finding: tokio::sync::Mutex<()>,
    },
    Cluster {
        client: ClusterClient,
        long_client: ClusterClient,
    },
    /// The embedded store, opened once a `connect`.
    #[cfg(feature = "sqlite")]
    Embedded(std::sync::Arc<super::sqlite::Store>),
}

impl Deployment {
    /// The source for `topology`, checked (URLs, TLS settings) but not connected yet. An embedded
    /// store counts no change made by the scripts `quiet` names (SHA1s): the tick's, which its
    /// leader makes itself.
    pub(crate) fn new(
        topology: &Topology,
        tls: &TlsSettings,
        cfg: &Config,
        long_response: Duration,
        quiet: &[&str],
    ) -> Result<Self, Error> {
        if let Topology::Embedded(url) = topology {
            return embedded(url, cfg, quiet);
        }
        let urls = topology.urls();
        if urls.is_empty() {
            return Err(Error::invalid("no Redis URL was given: name at least one node (or sentinel)"));
        }
        let secure = urls.iter().any(|u| u.starts_with("rediss://"));
        if secure && !urls.iter().all(|u| u.starts_with("rediss://")) {
            return Err(Error::invalid("the URLs mix redis:// and rediss://: use TLS for all of them or none"));
        }
        if tls.is_set() && !secure {
            return Err(Error::invalid(
                "tls_root_ca or tls_client_auth was given, but the URL is redis://: use rediss:// for TLS",
            ));
        }
        for url in &urls {
            url.into_connection_info().map_err(|e| malformed_url(url, &e))?;
        }
        let malformed = |e: redis::RedisError| Error::invalid(format!("a Redis URL is malformed: {e}"));
        Ok(match topology {
            Topology::Node(url) => {
                let client = if tls.is_set() {
                    Client::build_with_tls(url.as_str(), tls.certificates())
                } else {
                    Client::open(url.as_str())
                };
                Deployment::Node {
                    client: client.map_err(malformed)?,
                    current: RwLock::new(None),
                    made: std::sync::atomic::AtomicU64::new(0),
                    making: tokio::sync::Mutex::new(()),
                }
            }
            Topology::Sentinel { sentinels, master } => {
                let infos = sentinels
                    .iter()
                    .map(|u| u.as_str().into_connection_info())
                    .collect::<RedisResult<Vec<_>>>()
                    .map_err(malformed)?;
                let first = infos[0].redis_settings().clone();
                let addrs: Vec<ConnectionAddr> = infos.iter().map(|i| i.addr().clone()).collect();
                let mut b = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master).map_err(malformed)?;
                if let Some(user) = first.username() {
                    b = b.set_client_to_sentinel_username(user).set_client_to_redis_username(user);
                }
                if let Some(password) = first.password() {
                    b = b.set_client_to_sentinel_password(password).set_client_to_redis_password(password);
                }
                if secure {
                    b = b
                        .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure);
                    if tls.is_set() {
                        b = b
                            .set_client_to_sentinel_certificates(tls.certificates())
                            .set_client_to_redis_certificates(tls.certificates());
                    }
                }
                Deployment::Sentinel {
                    sentinel: tokio::sync::Mutex::new(b.build().map_err(malformed)?),
                    current: RwLock::new(None),
                    found: std::sync::atomic::AtomicU64::new(0),
                    finding: tokio::sync::Mutex::new(()),
                }
            }
            Topology::Cluster(seeds) => {
                let build = |response: Duration| {
                    let mut b = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
                        .connection_timeout(cfg.connect_timeout)
                        .response_timeout(response)
                        .retries(3);
                    if secure {
                        b = b.tls(redis::TlsMode::Secure);
                        if tls.is_set() {
                            b = b.certs(tls.certificates());
                        }
                    }
                    b.build().map_err(malformed)
                };
                Deployment::Cluster { client: build(cfg.response_timeout)?, long_client: build(long_response)? }
            }
            Topology::Embedded(_) => unreachable!("the embedded store was opened above"),
        })
    }

    /// A connection for the calls of every handle, with these timeouts: made anew for a node or
    /// a cluster, the one trusted now (or a new one) for Sentinel.
    pub(crate) async fn connect_shared(
        &self,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> RedisResult<Connection> {
        match self {
            Deployment::Node { client, current, made, making } => {
                let trusted = || current.read().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some((n, conn)) = trusted() {
                    return Ok(Connection::Node(n, conn));
                }
                let _making = making.lock().await;
                if let Some((n, conn)) = trusted() {
                    return Ok(Connection::Node(n, conn)); // made by the call that held the lock
                }
                let config = manager_config(response_timeout, connect_timeout);
                let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
                let n = made.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                *current.write().unwrap_or_else(|p| p.into_inner()) = Some((n, conn.clone()));
                Ok(Connection::Node(n, conn))
            }
            Deployment::Sentinel { current, found, finding, .. } => {
                let trusted = || current.read().unwrap_or_else(|p| p.into_inner()).clone();
                if let Some((n, conn)) = trusted() {
                    return Ok(Connection::Primary(n, conn));
                }
                let _finding = finding.lock().await;
                if let Some((n, conn)) = trusted() {
                    return Ok(Connection::Primary(n, conn)); // found by the call that held the lock
                }
                let conn = self.primary(response_timeout, connect_timeout).await?;
                let n = found.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                *current.write().unwrap_or_else(|p| p.into_inner()) = Some((n, conn.clone()));
                Ok(Connection::Primary(n, conn))
            }
            Deployment::Cluster { client, .. } => Ok(Connection::Cluster(client.get_async_connection().await?)),
            #[cfg(feature = "sqlite")]
            Deployment::Embedded(store) => Ok(Connection::Embedded(store.connect())),
        }
    }

    /// A connection of its own, whose replies may take `response_timeout` (for a blocking wait
    /// that would hold up the shared one).
    pub(crate) async fn dedicated(&self, cfg: &Config, response_timeout: Duration) -> RedisResult<Connection> {
        match self {
            Deployment::Node { client, .. } => {
                let config = manager_config(response_timeout, cfg.connect_timeout);
                Ok(Connection::Node(0, ConnectionManager::new_with_config(client.clone(), config).await?))
            }
            Deployment::Sentinel { .. } => {
                Ok(Connection::Primary(0, self.primary(response_timeout, cfg.connect_timeout).await?))
            }
            Deployment::Cluster { long_client, .. } => {
                Ok(Connection::Cluster(long_client.get_async_connection().await?))
            }
            #[cfg(feature = "sqlite")]
            Deployment::Embedded(store) => Ok(Connection::Embedded(store.connect())),
        }
    }

    /// Forgets the shared connection after a failure that may mean a failover (Sentinel: the
    /// next call asks the sentinels again) or a connection dropped silently (one node: the next
    /// call makes a new one; a connection that drops with an error reconnects by itself).
    pub(crate) fn suspect(&self, failed: &Connection) {
        /// Forgets `current` if it is still connection `failed`: another call may have made a
        /// new one since.
        fn forget<C>(current: &RwLock<Option<(u64, C)>>, failed: u64) {
            let mut current = current.write().unwrap_or_else(|p| p.into_inner());
            if current.as_ref().is_some_and(|(n, _)| *n == failed) {
                *current = None;
            }
        }
        match (self, failed) {
            (Deployment::Sentinel { current, .. }, Connection::Primary(failed, _)) => forget(current, *failed),
            (Deployment::Node { current, .. }, Connection::Node(failed, _)) => forget(current, *failed),
            _ => {}
        }
    }

    /// Whether this source re-resolves its node after a failure (Sentinel).
    pub(crate) fn follows_failover(&self) -> bool {
        matches!(self, Deployment::Sentinel { .. })
    }

    /// Whether this source makes its shared connection anew after a failure that [`suspect`]
    /// notes (Sentinel, which finds the primary again, and one node, whose connection may have
    /// dropped silently), rather than keeping one for good.
    ///
    /// [`suspect`]: Self::suspect
    pub(crate) fn makes_anew(&self) -> bool {
        matches!(self, Deployment::Sentinel { .. } | Deployment::Node { .. })
    }

    /// Whether this is a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Deployment::Cluster { .. })
    }

    /// The primary the sentinels name now, connected and checked with `ROLE`: a node that does
    /// not call itself master (an old primary that came back and is not yet demoted, say) is
    /// never used.
    async fn primary(
        &self,
        response_timeout: Duration,
        connect_timeout: Duration,
    ) -> RedisResult<MultiplexedConnection> {
        let Deployment::Sentinel { sentinel, .. } = self else { unreachable!("only Sentinel has a primary to find") };
        let client = sentinel.lock().await.async_get_client().await?;
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(connect_timeout));
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        let is_master = matches!(role.first(), Some(Value::BulkString(b)) if b == b"master")
            || matches!(role.first(), Some(Value::SimpleString(s)) if s == "master");
        if !is_master {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "the node Sentinel named is not (or no longer) a primary",
                "its ROLE is not master: a failover is under way".to_string(),
            )));
        }
        Ok(conn)
    }
}

/// The embedded store a `sqlite:` URL names, opened.
#[cfg(feature = "sqlite")]
fn embedded(url: &str, cfg: &Config, quiet: &[&str]) -> Result<Deployment, Error> {
    let place = super::sqlite::Place::parse(url)?;
    Ok(Deployment::Embedded(super::sqlite::Store::open(&place, cfg.durability, quiet)?))
}

/// A `sqlite:` URL without the feature that serves it.
#[cfg(not(feature = "sqlite"))]
fn embedded(url: &str, _cfg: &Config, _quiet: &[&str]) -> Result<Deployment, Error> {
    Err(Error::invalid(format!(
        "the URL {url:?} names the embedded SQLite store, which this build does not have: enable the \
         crate's `sqlite` feature"
    )))
}

/// The form of the URLs the durable mode takes, for the errors about a malformed one.
const URL_FORM: &str = "redis://[user:pass@]host:port/[db], or rediss://[user:pass@]host:port/[db] for TLS, or \
                        sqlite:<path> or sqlite::memory: for the embedded store (feature `sqlite`)";

/// The error of a URL the redis crate refused (with `err`): what is wrong with it, where the
/// URL's shape says, and the form expected. The URL is shown without its password.
fn malformed_url(url: &str, err: &redis::RedisError) -> Error {
    let what = what_is_wrong(url).unwrap_or_else(|| err.to_string());
    Error::invalid(format!("the Redis URL {:?} is malformed: {what}; write it as {URL_FORM}", redacted(url)))
}

/// What is wrong with a URL the redis crate refused, if its shape tells: the scheme, the host,
/// the port or the database number. `None` if it looks right (the redis crate's reason stands).
fn what_is_wrong(url: &str) -> Option<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some("it does not start with redis:// (or rediss://)".to_owned());
    };
    if !matches!(scheme, "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "unix") {
        return Some(format!("its scheme is {scheme:?}, not redis, rediss or sqlite"));
    }
    if scheme.ends_with("unix") {
        return None;
    }
    let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host_port)| host_port);
    let (host, port) = match host_port.strip_prefix('[') {
        // An IPv6 address: `[::1]:6379`.
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return Some(format!("its IPv6 host {host_port:?} has no closing `]`")),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Some("it names no host".to_owned());
    }
    if let Some(port) = port.filter(|port| !matches!(port.parse::<u16>(), Ok(1..))) {
        return Some(format!("its port {port:?} is not a number from 1 to 65535"));
    }
    let db = path.strip_prefix('/').unwrap_or(path);
    let db = &db[..db.find(['?', '#']).unwrap_or(db.len())];
    if !db.is_empty() && db.parse::<i64>().is_err() {
        return Some(format!("its database {db:?} (after the host's slash) is not a number"));
    }
    None
}

/// `url` with the password of its user part, if any, replaced by `***`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once('@') {
        Some((user, _)) => {
            let shown = user.split_once(':').map_or(user.to_owned(), |(name, _)| format!("{name}:***"));
            format!("{scheme}://{shown}@{}", &rest[user.len() + 1..])
        }
        None => url.to_owned(),
    }
}

/// The addresses (`host:port`) that the URLs of `topology` name, for errors and
/// [`speaks_plain_text`]. Called once [`Deployment::new`] has checked the URLs.
pub(crate) fn addresses(topology: &Topology) -> Vec<String> {
    topology
        .urls()
        .into_iter()
        .filter_map(|url| url.into_connection_info().ok())
        .map(|i| i.addr().to_string())
        .collect()
}

/// Whether the server at `addr` answers a plain-text `PING` as Redis does (`+PONG`, or an error
/// such as `-NOAUTH`): then it does not speak TLS on that port. A TLS server answers with an
/// alert or closes the connection; that, or no answer within `wait`, is `false`.
pub(crate) async fn speaks_plain_text(addr: &str, wait: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let first = stream.read_u8().await.ok()?;
        Some(matches!(first, b'+' | b'-'))
    };
    matches!(tokio::time::timeout(wait, probe).await, Ok(Some(true)))
}

/// The settings of a one-node connection: these timeouts, and a reconnect that retries twice
/// (the calls retry within their own window, so a refusal, TLS say, surfaces at once).
fn manager_config(response_timeout: Duration, connect_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(connect_timeout))
        .set_max_delay(Duration::from_secs(1))
        .set_number_of_retries(2)
}
