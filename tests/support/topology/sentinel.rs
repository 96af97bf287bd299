//! A primary and a replica watched by three sentinels.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::super::redis_server::{Launch, Persistence, RedisServer, Reply};
use super::{info_field, info_of, probe, start_node, wait_for, wait_or_panic, TlsCerts, SETTLE_TIMEOUT};

/// What the sentinels call the primary they watch.
pub const MASTER_NAME: &str = "mymaster";

/// `sentinel down-after-milliseconds`: how long a silent primary takes to be marked down.
///
/// Three times Sentinel's PING period (1 s), never one. A failover resets each sentinel's link
/// to the new primary and times it from that moment, but the link may not reconnect until 1 s
/// after its last attempt at the dead primary, so with 1 s a sentinel could take the new
/// primary for down before its first PING was even answered. Right after a failover it then
/// counts the other sentinels' fresh "down" answers about the old primary as agreement, starts
/// another failover at once, and promotes the only replica it knows: the restarted old primary,
/// stale data and all, whose `replica-priority` it cannot see while the node calls itself a
/// master. On a loaded machine that happened about once in twenty runs.
const SENTINEL_DOWN_AFTER_MS: u64 = 3000;

/// `sentinel failover-timeout`: also how long a sentinel waits after voting for another before
/// it tries a failover itself (twice this).
const SENTINEL_FAILOVER_TIMEOUT_MS: u64 = 5000;

/// How long a failover may take from the kill until every sentinel names the new primary and
/// has heard it answer: the primary marked down, then two elections (a split vote makes the
/// sentinels try again twice the failover timeout later), then the promotion seen in `INFO`
/// and passed on in the sentinels' hello messages.
pub const FAILOVER_TIMEOUT: Duration =
    Duration::from_millis(SENTINEL_DOWN_AFTER_MS + 2 * 2 * SENTINEL_FAILOVER_TIMEOUT_MS + 10_000);

/// How long Sentinel may take to make a restarted old primary a replica of the new one: it
/// leaves a node that calls itself master alone for 8 s after it last saw the node down and
/// after the node first reported the role, and it reads a replica's role from `INFO`, sent
/// every 10 s; a sentinel whose own timer stalled for 2 s (a busy machine) stops acting for
/// 30 s (TILT).
const DEMOTION_TIMEOUT: Duration = Duration::from_secs(8 + 2 * 10 + 30);

/// One sentinel: a `redis-server <config> --sentinel`, the config in a directory of its own
/// (Sentinel rewrites it).
struct Sentinel {
    server: RedisServer,
    /// Dropped after the server.
    _config_dir: tempfile::TempDir,
}

/// A primary and one replica, AOF on, watched by three sentinels (quorum 2) under
/// [`MASTER_NAME`]; plain or all TLS ([`start_tls`](Self::start_tls)).
pub struct SentinelSet {
    /// The data nodes: `[0]` started as the primary, `[1]` as its replica.
    nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    /// The node [`kill_primary`](Self::kill_primary) killed, and its port.
    killed: Option<usize>,
    scheme: &'static str,
}

impl SentinelSet {
    /// The plain set, once the replica is in sync and every sentinel sees the primary, the
    /// replica and the two other sentinels. `None` (after a skip note) without redis-server.
    pub fn start() -> Option<SentinelSet> {
        Self::launch(None)
    }

    /// The set with TLS everywhere: data nodes and sentinels listen with TLS only, replication
    /// and the sentinels' links to the data nodes use TLS (`tls-replication yes`), and a client
    /// certificate is required if `require_client_cert`. The URLs are `rediss://`.
    pub fn start_tls(certs: &TlsCerts, require_client_cert: bool) -> Option<SentinelSet> {
        Self::launch(Some((certs, require_client_cert)))
    }

    fn launch(tls: Option<(&TlsCerts, bool)>) -> Option<SentinelSet> {
        let started = Instant::now();
        let (launch, mut tls_args) = match tls {
            Some((certs, require)) => (Launch { config_file: None, tls: Some(certs.transport()) }, {
                let mut args = certs.server_args(require);
                args.extend(["--tls-replication".into(), "yes".into()]);
                args
            }),
            None => (Launch::default(), Vec::new()),
        };

        let primary = start_node(&tls_args, &launch)?;
        let mut replica_args = tls_args.clone();
        replica_args.extend(["--replicaof".into(), "127.0.0.1".into(), primary.port().to_string()]);
        let replica = start_node(&replica_args, &launch)?;
        wait_or_panic("the replica to sync with the primary", &[&primary, &replica], SETTLE_TIMEOUT, || {
            replica_synced_to(&replica, primary.port())
        });

        let mut sentinels = Vec::new();
        tls_args.push("--sentinel".into());
        for _ in 0..3 {
            let config_dir =
                tempfile::Builder::new().prefix("timewheel-sentinel-").tempdir().expect("create a sentinel temp dir");
            let config_file = config_dir.path().join("sentinel.conf");
            let config = format!(
                "sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {SENTINEL_DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} {SENTINEL_FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n\
                 sentinel resolve-hostnames no\n\
                 sentinel announce-hostnames no\n\
                 sentinel announce-ip 127.0.0.1\n",
                port = primary.port()
            );
            std::fs::write(&config_file, config).expect("write sentinel.conf");
            let launch = Launch { config_file: Some(config_file), tls: launch.tls.clone() };
            let args: Vec<&str> = tls_args.iter().map(String::as_str).collect();
            let server = RedisServer::start_launched(Persistence::None, &args, launch)?;
            sentinels.push(Sentinel { server, _config_dir: config_dir });
        }
        let set = SentinelSet {
            nodes: vec![primary, replica],
            sentinels,
            killed: None,
            scheme: if tls.is_some() { "rediss" } else { "redis" },
        };
        let (primary_port, replica_port) = (set.nodes[0].port(), set.nodes[1].port());
        set.wait_or_panic(
            "every sentinel to see the primary, the replica and the other sentinels",
            SETTLE_TIMEOUT,
            || {
                for sentinel in &set.sentinels {
                    let sentinel = &sentinel.server;
                    let master = master_addr(sentinel)?;
                    if master != primary_port {
                        return Err(format!("sentinel {} names {master} as master", sentinel.port()));
                    }
                    let replicas = sentinel_table(sentinel, &["SENTINEL", "REPLICAS", MASTER_NAME])?;
                    let good = replicas.iter().any(|r| {
                        r.get("port").is_some_and(|p| *p == replica_port.to_string())
                            && r.get("flags").is_some_and(|f| f == "slave")
                            && r.get("master-link-status").is_some_and(|s| s == "ok")
                    });
                    if !good {
                        return Err(format!("sentinel {} sees replicas {replicas:?}", sentinel.port()));
                    }
                    let others = sentinel_table(sentinel, &["SENTINEL", "SENTINELS", MASTER_NAME])?;
                    if others.len() < 2 {
                        return Err(format!("sentinel {} knows {} other sentinels", sentinel.port(), others.len()));
                    }
                }
                Ok(())
            },
        );
        eprintln!("sentinel set up in {:?}", started.elapsed());
        Some(set)
    }

    /// `redis://127.0.0.1:<port>` of each sentinel (`rediss://` under TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| format!("{}://127.0.0.1:{}", self.scheme, s.server.port())).collect()
    }

    /// [`MASTER_NAME`].
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The sentinels' processes.
    pub fn sentinels(&self) -> Vec<&RedisServer> {
        self.sentinels.iter().map(|s| &s.server).collect()
    }

    /// The data nodes: `[0]` started as the primary, `[1]` as its replica.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The data node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes.iter().find(|n| n.port() == port).unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// The primary's port, as the first sentinel that answers names it.
    pub fn master_port(&self) -> u16 {
        let mut last = String::new();
        for sentinel in &self.sentinels {
            match master_addr(&sentinel.server) {
                Ok(port) => return port,
                Err(why) => last = why,
            }
        }
        panic!("no sentinel names a master: {last}")
    }

    /// The current primary, as the sentinels name it.
    pub fn primary(&self) -> &RedisServer {
        self.node(self.master_port())
    }

    /// The data node that is not the current primary.
    pub fn replica(&self) -> &RedisServer {
        let master = self.master_port();
        self.nodes.iter().find(|n| n.port() != master).expect("two data nodes")
    }

    /// SIGKILLs the current primary and returns its port. Sentinel then fails over to the
    /// replica after [`SENTINEL_DOWN_AFTER_MS`] and an election: see
    /// [`wait_for_failover`](Self::wait_for_failover).
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.master_port();
        let index = self.nodes.iter().position(|n| n.port() == port).expect("the master is a data node");
        self.nodes[index].kill();
        self.killed = Some(index);
        port
    }

    /// Waits until every sentinel names a new primary (not the one killed), that node reports
    /// `role:master`, and every sentinel has had its answers to `PING` and `INFO` since and
    /// takes it for up (its flags in `SENTINEL MASTERS` are `master` alone): its port. Panics,
    /// with the sentinels' logs, after [`FAILOVER_TIMEOUT`].
    pub fn wait_for_failover(&self) -> u16 {
        let old = self.nodes[self.killed.expect("kill_primary before wait_for_failover")].port();
        self.wait_or_panic("a failover: every sentinel names the new primary and hears it", FAILOVER_TIMEOUT, || {
            let mut named = Vec::new();
            for sentinel in &self.sentinels {
                named.push(master_addr(&sentinel.server)?);
            }
            let new = named[0];
            if new == old || named.iter().any(|&p| p != new) {
                return Err(format!("sentinels name {named:?} (old primary {old})"));
            }
            let role = info_field(self.node(new), "replication", "role")?;
            if role != "master" {
                return Err(format!("{new} reports role:{role}"));
            }
            for sentinel in &self.sentinels {
                let master = sentinel_table(&sentinel.server, &["SENTINEL", "MASTERS"])?
                    .into_iter()
                    .find(|m| m.get("name").is_some_and(|n| n == MASTER_NAME))
                    .ok_or_else(|| format!("sentinel {} does not monitor {MASTER_NAME}", sentinel.server.port()))?;
                let field = |name: &str| master.get(name).map(String::as_str).unwrap_or("?");
                // A switch of primary resets the sentinel's link (`last-ping-sent` counts from
                // then until a PING is answered) and forgets the run id (until an `INFO` answer).
                if field("flags") != "master" || field("last-ping-sent") != "0" || field("runid").is_empty() {
                    return Err(format!(
                        "sentinel {} sees {new} with flags {}, a PING unanswered for {} ms, run id {:?}",
                        sentinel.server.port(),
                        field("flags"),
                        field("last-ping-sent"),
                        field("runid")
                    ));
                }
            }
            Ok(new)
        })
    }

    /// Restarts the killed primary on its directory and port, and waits until Sentinel has made
    /// it a replica of the new primary and it is in sync. Panics if that does not happen within
    /// the settle timeout. Slow: Sentinel leaves an instance that calls itself master alone for
    /// 8 s (a constant of Sentinel's) and sees it through `INFO`, which it sends a replica every
    /// 10 s; [`restart_old_primary_as_replica`](Self::restart_old_primary_as_replica) is quick.
    pub fn restart_old_primary(&mut self) {
        self.restart_killed(false);
    }

    /// Restarts the killed primary and points it at the new primary itself (`REPLICAOF`), as an
    /// operator would, then waits until it is in sync: Sentinel finds it a replica already. For
    /// `restart_old_primary`'s end state without its wait; between the restart and `REPLICAOF`
    /// the node briefly answers as a primary with its old data (no sentinel names it).
    pub fn restart_old_primary_as_replica(&mut self) {
        self.restart_killed(true);
    }

    fn restart_killed(&mut self, point_it: bool) {
        let index = self.killed.take().expect("kill_primary before restarting the old primary");
        let master = self.master_port();
        self.nodes[index].restart();
        // Never promote it again, so that the set keeps its shape for the rest of the test even
        // if the sentinels later take the new primary for down. Sentinel reads a node's priority
        // from `INFO` only while the node is a replica, so this does not cover the moments
        // before Sentinel demotes it: SENTINEL_DOWN_AFTER_MS does.
        let reply = self.nodes[index].command(&["CONFIG", "SET", "replica-priority", "0"]);
        assert_eq!(reply, Reply::Status("OK".into()), "CONFIG SET replica-priority");
        let node = &self.nodes[index];
        if point_it {
            let reply = node.command(&["REPLICAOF", "127.0.0.1", &master.to_string()]);
            assert_eq!(reply, Reply::Status("OK".into()), "REPLICAOF on {}", node.port());
        }
        self.wait_or_panic("the old primary to come back as a replica of the new one", DEMOTION_TIMEOUT, || {
            let named = master_addr(&self.sentinels[0].server)?;
            assert_eq!(
                named, master,
                "the sentinels promoted {named} while the old primary came back (see their logs below)"
            );
            replica_synced_to(node, master)
        });
    }

    /// [`wait_or_panic`] on every process of the set; [`Drop`] prints their logs.
    fn wait_or_panic<T>(&self, what: &str, timeout: Duration, probe: impl FnMut() -> Result<T, String>) -> T {
        wait_for(timeout, probe)
            .unwrap_or_else(|why| panic!("timed out after {timeout:?} waiting for {what}; last: {why}"))
    }
}

impl Drop for SentinelSet {
    /// On a panic (a failed wait or a test's assertion), prints what the sentinels did: their
    /// logs say when they took a node for down (`+sdown`, `+odown`), whom they elected and
    /// promoted (`+switch-master`), whom they reconfigured (`+convert-to-slave`) and whether
    /// they stopped acting for a while (`+tilt`).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut out = String::from("the sentinel set's logs:\n");
        for node in &self.nodes {
            out += &format!("--- data node on port {} ---\n{}\n", node.port(), node.log_lines(60));
        }
        for sentinel in &self.sentinels {
            out +=
                &format!("--- sentinel on port {} ---\n{}\n", sentinel.server.port(), sentinel.server.log_lines(200));
        }
        eprintln!("{out}");
    }
}

/// One sentinel that watches a primary under several names, each at an address of its own (the
/// primary's port, or a fault proxy's in front of it). Sentinel gives every client of a name the
/// same address, so a test that cuts one node's link to the primary names the proxied address
/// to that node alone. It never acts: there is no replica to promote, and it takes a primary for
/// down only after a minute of silence.
pub struct SentinelWatch {
    sentinel: Sentinel,
}

impl SentinelWatch {
    /// The sentinel, once it has reached the primary under every name of `names` (name, port).
    /// `None` (after a skip note) without redis-server.
    pub fn start(names: &[(&str, u16)]) -> Option<SentinelWatch> {
        let config_dir =
            tempfile::Builder::new().prefix("timewheel-sentinel-").tempdir().expect("create a sentinel temp dir");
        let config_file = config_dir.path().join("sentinel.conf");
        let mut config = String::from(
            "sentinel resolve-hostnames no\nsentinel announce-hostnames no\nsentinel announce-ip 127.0.0.1\n",
        );
        for (name, port) in names {
            config += &format!(
                "sentinel monitor {name} 127.0.0.1 {port} 1\n\
                 sentinel down-after-milliseconds {name} 60000\n\
                 sentinel failover-timeout {name} 600000\n"
            );
        }
        std::fs::write(&config_file, config).expect("write sentinel.conf");
        let launch = Launch { config_file: Some(config_file), tls: None };
        let server = RedisServer::start_launched(Persistence::None, &["--sentinel"], launch)?;
        let watch = SentinelWatch { sentinel: Sentinel { server, _config_dir: config_dir } };
        for (name, port) in names {
            wait_or_panic(
                &format!("the sentinel to reach the primary as {name}"),
                &[&watch.sentinel.server],
                SETTLE_TIMEOUT,
                || {
                    let masters = sentinel_table(&watch.sentinel.server, &["SENTINEL", "MASTERS"])?;
                    let master = masters.iter().find(|m| m.get("name").is_some_and(|n| n == name));
                    match master.and_then(|m| Some((m.get("port")?, m.get("flags")?))) {
                        Some((p, flags)) if *p == port.to_string() && flags == "master" => Ok(()),
                        other => Err(format!("{name}: {other:?}")),
                    }
                },
            );
        }
        Some(watch)
    }

    /// `redis://127.0.0.1:<port>` of the sentinel.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.sentinel.server.port())
    }
}

/// The master's port as `SENTINEL get-master-addr-by-name` gives it.
fn master_addr(sentinel: &RedisServer) -> Result<u16, String> {
    let reply = probe(sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
    match reply.as_array() {
        [ip, port] => {
            let port = port.as_str().and_then(|p| p.parse().ok()).ok_or(format!("bad reply {reply:?}"))?;
            if ip.as_str() != Some("127.0.0.1") {
                return Err(format!("sentinel names master {ip:?}:{port}, not on 127.0.0.1"));
            }
            Ok(port)
        }
        _ => Err(format!("sentinel {} answered {reply:?}", sentinel.port())),
    }
}

/// A `SENTINEL REPLICAS`-like reply: an array of flat field-value arrays.
fn sentinel_table(sentinel: &RedisServer, args: &[&str]) -> Result<Vec<HashMap<String, String>>, String> {
    let reply = probe(sentinel, args)?;
    Ok(reply
        .as_array()
        .iter()
        .map(|entry| {
            entry
                .as_array()
                .chunks(2)
                .filter_map(|kv| Some((kv.first()?.as_str()?.to_owned(), kv.get(1)?.as_str()?.to_owned())))
                .collect()
        })
        .collect())
}

/// `Ok` once `node` replicates from `127.0.0.1:<master>` with its link up.
fn replica_synced_to(node: &RedisServer, master: u16) -> Result<(), String> {
    let info = info_of(node, "replication")?;
    let field = |name: &str| info.get(name).map(String::as_str).unwrap_or("?");
    if field("role") == "slave"
        && field("master_host") == "127.0.0.1"
        && field("master_port") == master.to_string()
        && field("master_link_status") == "up"
    {
        Ok(())
    } else {
        Err(format!(
            "{} reports role:{} master {}:{} link {}",
            node.port(),
            field("role"),
            field("master_host"),
            field("master_port"),
            field("master_link_status")
        ))
    }
}
