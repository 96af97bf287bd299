//! The Redis deployments that production runs, started for a test: a TLS-only server
//! ([`TlsServer`], with a private CA from [`TlsCerts`]), a primary and a replica watched by three
//! sentinels ([`SentinelSet`]), and a cluster ([`Cluster`]), plain or over TLS. Every process is a
//! [`RedisServer`]: its own temp directory, a free port on 127.0.0.1, AOF on (sentinels keep no
//! data), SIGKILL by its handle and on drop, restartable on the same directory and port.
//!
//! Each `start` returns `None` with a skip note when there is no `redis-server` (or, for what
//! needs it, no `redis-cli`), and panics under `CI=true` instead. A deployment that does not come
//! up within its bounded wait panics with what it last saw and the logs' tails.
//!
//! The helper drives the servers itself, over plain RESP or over TLS with a small `rustls`
//! client, never through the crate under test.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use super::redis_server::{self, Launch, Persistence, RedisServer, Reply, Transport};

/// How long a deployment may take to reach its steady state (replicas in sync, sentinels aware
/// of each other, every slot served) on a loaded machine.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(45);

/// The pause between two probes of a condition.
const POLL: Duration = Duration::from_millis(50);

/// The read timeout of one probe: a stalled server costs one probe, not the whole wait.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the sentinels call the primary they watch.
pub const MASTER_NAME: &str = "mymaster";

/// `sentinel down-after-milliseconds`: how long a silent primary takes to be marked down.
const SENTINEL_DOWN_AFTER_MS: u64 = 1000;

/// `sentinel failover-timeout`.
const SENTINEL_FAILOVER_TIMEOUT_MS: u64 = 5000;

/// `cluster-node-timeout`: how long a silent node takes to be marked failing.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

// ---------------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------------

/// A private CA, a server certificate for `127.0.0.1` and `localhost`, and a client certificate,
/// all signed by the CA; in memory (PEM) and in a temp directory (the files redis-server reads).
/// Each call makes an unrelated CA: a second one is the wrong CA of a refusal test.
pub struct TlsCerts {
    ca_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
    ca_der: CertificateDer<'static>,
    client_cert_der: CertificateDer<'static>,
    client_key_der: PrivatePkcs8KeyDer<'static>,
    dir: tempfile::TempDir,
}

impl TlsCerts {
    /// A fresh CA and its two leaf certificates (ECDSA P-256), written to a new temp directory.
    pub fn generate() -> TlsCerts {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair,
            KeyUsagePurpose,
        };
        let key = || KeyPair::generate().expect("generate a key pair");

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "tokio-timewheel test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = key();
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        // redis-server also presents its certificate as a client, to its primary and to the other
        // nodes of a cluster, hence both purposes.
        let mut server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("server params");
        server_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
        server_params.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
        let server_key = key();
        let server_cert = server_params.signed_by(&server_key, &issuer).expect("sign the server certificate");

        let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        client_params.distinguished_name.push(DnType::CommonName, "tokio-timewheel test client");
        client_params.extended_key_usages = vec![Eku::ClientAuth];
        let client_key = key();
        let client_cert = client_params.signed_by(&client_key, &issuer).expect("sign the client certificate");

        let dir = tempfile::Builder::new().prefix("timewheel-tls-").tempdir().expect("create a temp dir for certs");
        let certs = TlsCerts {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            ca_der: ca_cert.der().clone(),
            client_cert_der: client_cert.der().clone(),
            client_key_der: PrivatePkcs8KeyDer::from(client_key.serialize_der()),
            dir,
        };
        for (file, pem) in [
            ("ca.crt", &certs.ca_pem),
            ("server.crt", &certs.server_cert_pem),
            ("server.key", &certs.server_key_pem),
            ("client.crt", &certs.client_cert_pem),
            ("client.key", &certs.client_key_pem),
        ] {
            std::fs::write(certs.dir.path().join(file), pem).unwrap_or_else(|e| panic!("write {file}: {e}"));
        }
        certs
    }

    /// The CA's certificate, PEM: what a client trusts.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// The client's certificate, PEM: what a client presents when the server asks for one.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client's private key, PKCS#8 PEM.
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// The directory holding `ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir().join("ca.crt")
    }

    pub fn server_cert_file(&self) -> PathBuf {
        self.dir().join("server.crt")
    }

    pub fn server_key_file(&self) -> PathBuf {
        self.dir().join("server.key")
    }

    pub fn client_cert_file(&self) -> PathBuf {
        self.dir().join("client.crt")
    }

    pub fn client_key_file(&self) -> PathBuf {
        self.dir().join("client.key")
    }

    /// A `rustls` client configuration that trusts this CA only, presenting the client
    /// certificate if `with_client_cert`.
    pub fn client_config(&self, with_client_cert: bool) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("add the test CA to a root store");
        // The provider is named rather than taken from the process default, which is ambiguous
        // when another dependency enables a second one.
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots);
        let config = if with_client_cert {
            let key = PrivateKeyDer::Pkcs8(self.client_key_der.clone_key());
            builder.with_client_auth_cert(vec![self.client_cert_der.clone()], key).expect("a valid client certificate")
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(config)
    }

    /// redis-server's arguments for these files: its certificate and key, the CA it checks
    /// clients (and, as a client, its peers) against, and whether a client must present a
    /// certificate.
    pub fn server_args(&self, require_client_cert: bool) -> Vec<String> {
        let path = |p: PathBuf| p.to_str().expect("cert path is UTF-8").to_owned();
        vec![
            "--tls-cert-file".into(),
            path(self.server_cert_file()),
            "--tls-key-file".into(),
            path(self.server_key_file()),
            "--tls-ca-cert-file".into(),
            path(self.ca_file()),
            "--tls-auth-clients".into(),
            if require_client_cert { "yes" } else { "no" }.into(),
        ]
    }

    /// redis-cli's arguments to connect with TLS, trusting this CA and presenting the client
    /// certificate.
    pub fn cli_args(&self) -> Vec<String> {
        let path = |p: PathBuf| p.to_str().expect("cert path is UTF-8").to_owned();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(self.ca_file()),
            "--cert".into(),
            path(self.client_cert_file()),
            "--key".into(),
            path(self.client_key_file()),
        ]
    }

    /// How the helper speaks to servers of this CA: over TLS, with the client certificate.
    pub fn transport(&self) -> Transport {
        let config = self.client_config(true);
        Arc::new(move |addr, args, timeout| tls_command_at(&config, addr, args, timeout))
    }
}

/// Sends one command over a fresh TLS connection to `addr` (checked as the IP address
/// `127.0.0.1`) and returns the reply. A certificate the client does not trust, or a server that
/// refuses the client's, is an `Err`.
pub fn tls_command_at(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    args: &[&str],
    timeout: Duration,
) -> std::io::Result<Reply> {
    let connection =
        rustls::ClientConnection::new(config.clone(), ServerName::from(addr.ip())).map_err(std::io::Error::other)?;
    let socket = TcpStream::connect_timeout(&addr, timeout)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream.write_all(&redis_server::encode(args))?;
    stream.flush()?;
    redis_server::read_reply(&mut BufReader::new(stream))
}

/// A TLS-only redis-server (`--port 0 --tls-port <port>`), AOF on.
pub struct TlsServer {
    server: RedisServer,
    cli_tls: Vec<String>,
}

impl TlsServer {
    /// A server presenting `certs`' server certificate; with `require_client_cert` it refuses a
    /// client without a certificate signed by `certs`' CA (`--tls-auth-clients yes`). `None`
    /// (after a skip note) when there is no redis-server.
    pub fn start(certs: &TlsCerts, require_client_cert: bool) -> Option<TlsServer> {
        let args = certs.server_args(require_client_cert);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let launch = Launch { config_file: None, tls: Some(certs.transport()) };
        let server = RedisServer::start_launched(Persistence::Aof, &args, launch)?;
        Some(TlsServer { server, cli_tls: certs.cli_args() })
    }

    /// `rediss://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.server.port())
    }

    /// The TLS port (there is no plain one).
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// One command over TLS, with the client certificate; panics on an I/O error.
    pub fn command(&self, args: &[&str]) -> Reply {
        self.server.command(args)
    }

    /// One command through `redis-cli --tls` with the client certificate: its output, trimmed
    /// (`Err` with its stderr when it fails). `None` when there is no redis-cli.
    pub fn cli(&self, args: &[&str]) -> Option<Result<String, String>> {
        let mut cli_args = self.cli_tls.clone();
        cli_args.extend(["-h".into(), "127.0.0.1".into(), "-p".into(), self.port().to_string()]);
        cli_args.extend(args.iter().map(|a| a.to_string()));
        run_cli(&cli_args, Duration::from_secs(20))
    }

    /// SIGKILL; harmless when already killed.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts again on the same directory and port, and waits until it answers over TLS.
    pub fn restart(&mut self) {
        self.server.restart();
    }

    pub fn log_tail(&self) -> String {
        self.server.log_tail()
    }

    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    pub fn server_mut(&mut self) -> &mut RedisServer {
        &mut self.server
    }
}

// ---------------------------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------------------------

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
        set.wait_or_panic("every sentinel to see the primary, the replica and the other sentinels", || {
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
        });
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
    /// replica after [`SENTINEL_DOWN_AFTER_MS`] and an election.
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.master_port();
        let index = self.nodes.iter().position(|n| n.port() == port).expect("the master is a data node");
        self.nodes[index].kill();
        self.killed = Some(index);
        port
    }

    /// Waits until every sentinel names a new primary (not the one killed) and that node reports
    /// `role:master`; its port, or `None` after `timeout`.
    pub fn wait_for_failover(&self, timeout: Duration) -> Option<u16> {
        let old = self.nodes[self.killed.expect("kill_primary before wait_for_failover")].port();
        wait_for(timeout, || {
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
            Ok(new)
        })
        .ok()
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
        self.nodes[index].restart();
        let master = self.master_port();
        let node = &self.nodes[index];
        if point_it {
            let reply = node.command(&["REPLICAOF", "127.0.0.1", &master.to_string()]);
            assert_eq!(reply, Reply::Status("OK".into()), "REPLICAOF on {}", node.port());
        }
        wait_or_panic(
            "the old primary to come back as a replica of the new one",
            &[node, self.node(master)],
            SETTLE_TIMEOUT,
            || replica_synced_to(node, master),
        );
    }

    fn wait_or_panic<T>(&self, what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
        let mut all: Vec<&RedisServer> = self.nodes.iter().collect();
        all.extend(self.sentinels.iter().map(|s| &s.server));
        wait_or_panic(what, &all, SETTLE_TIMEOUT, probe)
    }
}

/// A data node with AOF on, whose replicas start their full sync at once (the default waits 5 s
/// for more replicas to share a diskless transfer).
fn start_node(args: &[String], launch: &Launch) -> Option<RedisServer> {
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--repl-diskless-sync-delay", "0"]);
    RedisServer::start_launched(Persistence::Aof, &args, launch.clone())
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

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// A Redis Cluster on 127.0.0.1: primaries with replicas, AOF on, each node in its own directory
/// with its own `nodes.conf`, created by `redis-cli --cluster create`; plain or TLS.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    /// Indices of nodes killed and not restarted.
    killed: Vec<usize>,
    scheme: &'static str,
}

impl Cluster {
    /// `primaries` primaries (at least 3) with `replicas_per_primary` replicas each, once every
    /// node says `cluster_state:ok` with all 16384 slots served and every replica is in sync.
    /// `None` (after a skip note) without redis-server or redis-cli.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> Option<Cluster> {
        Self::launch(primaries, replicas_per_primary, None)
    }

    /// The same over TLS only: clients, the cluster bus (`tls-cluster yes`) and replication
    /// (`tls-replication yes`); a client certificate is required if `require_client_cert`.
    pub fn start_tls(
        certs: &TlsCerts,
        primaries: usize,
        replicas_per_primary: usize,
        require_client_cert: bool,
    ) -> Option<Cluster> {
        Self::launch(primaries, replicas_per_primary, Some((certs, require_client_cert)))
    }

    fn launch(primaries: usize, replicas_per_primary: usize, tls: Option<(&TlsCerts, bool)>) -> Option<Cluster> {
        assert!(primaries >= 3, "redis-cli --cluster create needs at least 3 primaries, not {primaries}");
        let started = Instant::now();
        find_cli()?;
        let (launch, mut args, cli_tls) = match tls {
            Some((certs, require)) => {
                let mut args = certs.server_args(require);
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
                (Launch { config_file: None, tls: Some(certs.transport()) }, args, certs.cli_args())
            }
            None => (Launch::default(), Vec::new(), Vec::new()),
        };
        args.extend(
            [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                // A replica may be promoted however long its link has been down: a test that
                // kills a primary soon after a restart still gets its failover.
                "--cluster-replica-validity-factor",
                "0",
            ]
            .map(String::from),
        );
        let mut nodes = Vec::new();
        for _ in 0..primaries * (1 + replicas_per_primary) {
            // The bus port is named: the default, port + 10000, can be past 65535.
            let mut node_args = args.clone();
            node_args.extend(["--cluster-port".into(), redis_server::free_port().to_string()]);
            nodes.push(start_node(&node_args, &launch)?);
        }
        let cluster = Cluster { nodes, killed: Vec::new(), scheme: if tls.is_some() { "rediss" } else { "redis" } };

        let mut create = cli_tls;
        create.extend(["--cluster".into(), "create".into()]);
        create.extend(cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        create.extend(["--cluster-replicas".into(), replicas_per_primary.to_string(), "--cluster-yes".into()]);
        if let Err(why) = run_cli(&create, SETTLE_TIMEOUT).expect("find_cli found it") {
            panic!("redis-cli --cluster create failed: {why}\n{}", logs(&cluster.nodes.iter().collect::<Vec<_>>()));
        }
        cluster.wait_settled("the new cluster to serve every slot with its replicas in sync");
        eprintln!("cluster up in {:?}", started.elapsed());
        Some(cluster)
    }

    /// `redis://127.0.0.1:<port>` of every node (`rediss://` under TLS).
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("{}://127.0.0.1:{}", self.scheme, n.port())).collect()
    }

    /// Every node, killed ones included.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes.iter().find(|n| n.port() == port).unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the key, or of its
    /// `{hash tag}` when it has a non-empty one, modulo 16384.
    pub fn slot_of(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    /// The primary serving `slot`, as a live node's `CLUSTER SLOTS` says.
    pub fn primary_for_slot(&self, slot: u16) -> &RedisServer {
        let port = self.owner_port(slot).unwrap_or_else(|why| panic!("owner of slot {slot}: {why}"));
        self.node(port)
    }

    /// A live primary that does not serve `slot`: it answers `MOVED` for keys of the slot.
    pub fn a_node_not_owning(&self, slot: u16) -> &RedisServer {
        let owner = self.primary_for_slot(slot).port();
        self.live()
            .find(|n| n.port() != owner && info_field(n, "replication", "role").is_ok_and(|r| r == "master"))
            .unwrap_or_else(|| panic!("no live primary other than {owner}"))
    }

    /// The live primaries.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.live().filter(|n| info_field(n, "replication", "role").is_ok_and(|r| r == "master")).collect()
    }

    /// `CLUSTER MYID` of a node.
    pub fn node_id(&self, node: &RedisServer) -> String {
        let reply = node.command(&["CLUSTER", "MYID"]);
        reply.as_str().unwrap_or_else(|| panic!("CLUSTER MYID on {}: {reply:?}", node.port())).to_owned()
    }

    /// SIGKILLs the primary serving `slot` and returns its port.
    pub fn kill_primary_of(&mut self, slot: u16) -> u16 {
        let port = self.primary_for_slot(slot).port();
        let index = self.index(port);
        self.nodes[index].kill();
        self.killed.push(index);
        port
    }

    /// Waits until a live replica has been promoted to serve `slot` and every live node says
    /// `cluster_state:ok`; the new primary's port, or `None` after `timeout`.
    pub fn wait_for_failover(&self, slot: u16, timeout: Duration) -> Option<u16> {
        wait_for(timeout, || {
            let owner = self.owner_port(slot)?;
            if self.killed.iter().any(|&k| self.nodes[k].port() == owner) {
                return Err(format!("slot {slot} still on the killed node {owner}"));
            }
            let role = info_field(self.node(owner), "replication", "role")?;
            if role != "master" {
                return Err(format!("{owner} reports role:{role}"));
            }
            self.check_states()?;
            Ok(owner)
        })
        .ok()
    }

    /// Restarts the node on `port` on its directory (and `nodes.conf`) and port, and waits until
    /// the cluster has settled again: a failed-over primary rejoins as a replica of its successor.
    pub fn restart(&mut self, port: u16) {
        let index = self.index(port);
        self.nodes[index].restart();
        self.killed.retain(|&k| k != index);
        self.wait_settled(&format!("node {port} to rejoin the cluster"));
    }

    /// Moves `slot` with its keys to the primary on `to_port`, live, as `redis-cli --cluster
    /// reshard` does: the slot is marked importing on the target and migrating on the source, its
    /// keys move in batches of 10 with `MIGRATE` (clients see `ASK` and `TRYAGAIN` meanwhile),
    /// then every primary is told the new owner. Returns once every live node names it.
    pub fn migrate_slot(&self, slot: u16, to_port: u16) {
        self.migrate_slot_paced(slot, to_port, 10, Duration::ZERO);
    }

    /// [`migrate_slot`](Self::migrate_slot) with `batch` keys a `MIGRATE` and a `pause` after
    /// each batch, to hold the slot half-moved while a workload runs.
    pub fn migrate_slot_paced(&self, slot: u16, to_port: u16, batch: usize, pause: Duration) {
        assert!(batch > 0, "a batch of no keys moves nothing");
        let source = self.primary_for_slot(slot);
        let target = self.node(to_port);
        assert_ne!(source.port(), to_port, "slot {slot} is already on {to_port}");
        let (source_id, target_id) = (self.node_id(source), self.node_id(target));
        let slot_s = slot.to_string();
        let must = |node: &RedisServer, args: &[&str]| {
            let reply = node.command(args);
            if let Reply::Error(e) = &reply {
                panic!("{args:?} on {}: {e}\n{}", node.port(), logs(&[source, target]));
            }
            reply
        };
        must(target, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &source_id]);
        must(source, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &target_id]);
        let batch_s = batch.to_string();
        let target_port = to_port.to_string();
        loop {
            let keys = must(source, &["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch_s]);
            let keys: Vec<&str> = keys.as_array().iter().filter_map(Reply::as_str).collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &target_port, "", "0", "10000", "KEYS"];
            migrate.extend(&keys);
            let reply = must(source, &migrate);
            // NOKEY: the batch's keys expired or were deleted meanwhile; the next batch goes on.
            if reply.as_str() != Some("OK") && reply.as_str() != Some("NOKEY") {
                panic!("MIGRATE of {} keys of slot {slot} answered {reply:?}", keys.len());
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
        // The target first (it ends the import and takes a new epoch), then the source, then the
        // other primaries, as redis-cli does.
        must(target, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
        must(source, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
        for node in self.primaries() {
            if node.port() != source.port() && node.port() != to_port {
                must(node, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &target_id]);
            }
        }
        self.wait_or_panic(&format!("every node to name {to_port} the owner of slot {slot}"), || {
            for node in self.live() {
                let owner = slot_owner(node, slot)?;
                if owner != to_port {
                    return Err(format!("{} names {owner} the owner of slot {slot}", node.port()));
                }
            }
            Ok(())
        });
    }

    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    fn index(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port() == port).unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// The owner of `slot` per the first live node that answers.
    fn owner_port(&self, slot: u16) -> Result<u16, String> {
        let mut last = String::from("no live node");
        for node in self.live() {
            match slot_owner(node, slot) {
                Ok(port) => return Ok(port),
                Err(why) => last = why,
            }
        }
        Err(last)
    }

    /// `Ok` when every live node says `cluster_state:ok` with every slot served and knows every
    /// node, and every live replica's link is up.
    fn check_states(&self) -> Result<(), String> {
        for node in self.live() {
            let info = cluster_info(node)?;
            let field = |name: &str| info.get(name).map(String::as_str).unwrap_or("?");
            if field("cluster_state") != "ok"
                || field("cluster_slots_ok") != SLOTS.to_string()
                || field("cluster_known_nodes") != self.nodes.len().to_string()
            {
                return Err(format!(
                    "{}: cluster_state:{} slots_ok:{} known_nodes:{}",
                    node.port(),
                    field("cluster_state"),
                    field("cluster_slots_ok"),
                    field("cluster_known_nodes")
                ));
            }
            let replication = info_of(node, "replication")?;
            if replication.get("role").is_some_and(|r| r == "slave")
                && replication.get("master_link_status").is_none_or(|s| s != "up")
            {
                return Err(format!("replica {} has its link down", node.port()));
            }
        }
        Ok(())
    }

    /// Waits until [`check_states`](Self::check_states) holds, with the same map of slots seen by
    /// every live node.
    fn wait_settled(&self, what: &str) {
        self.wait_or_panic(what, || {
            self.check_states()?;
            let mut maps = self.live().map(|n| Ok((n.port(), slot_map(n)?))).collect::<Result<Vec<_>, String>>()?;
            let (first_port, first) = maps.pop().ok_or("no live node")?;
            match maps.iter().find(|(_, map)| *map != first) {
                Some((port, _)) => Err(format!("{port} and {first_port} see different slot maps")),
                None => Ok(()),
            }
        });
    }

    fn wait_or_panic<T>(&self, what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
        wait_or_panic(what, &self.nodes.iter().collect::<Vec<_>>(), SETTLE_TIMEOUT, probe)
    }
}

/// The port of the primary `CLUSTER SLOTS` on `node` names for `slot`.
fn slot_owner(node: &RedisServer, slot: u16) -> Result<u16, String> {
    slot_map(node)?
        .into_iter()
        .find(|&(start, end, _)| (start..=end).contains(&slot))
        .map(|(_, _, port)| port)
        .ok_or_else(|| format!("{} serves no one for slot {slot}", node.port()))
}

/// `CLUSTER SLOTS` as sorted `(first slot, last slot, primary's port)` ranges.
fn slot_map(node: &RedisServer) -> Result<Vec<(u16, u16, u16)>, String> {
    let reply = probe(node, &["CLUSTER", "SLOTS"])?;
    let mut map = Vec::new();
    for range in reply.as_array() {
        let range = range.as_array();
        let number = |r: Option<&Reply>| r.and_then(Reply::as_int).and_then(|n| u16::try_from(n).ok());
        let (Some(start), Some(end), Some(port)) =
            (number(range.first()), number(range.get(1)), number(range.get(2).and_then(|p| p.as_array().get(1))))
        else {
            return Err(format!("{}: bad CLUSTER SLOTS entry {range:?}", node.port()));
        };
        map.push((start, end, port));
    }
    map.sort_unstable();
    Ok(map)
}

fn cluster_info(node: &RedisServer) -> Result<HashMap<String, String>, String> {
    Ok(parse_info(&probe(node, &["CLUSTER", "INFO"])?))
}

/// The hash slot of a key (`HASH_SLOT` of Redis's cluster.c).
fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16_xmodem(hashed) % SLOTS
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis Cluster uses.
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

// ---------------------------------------------------------------------------------------------
// Shared
// ---------------------------------------------------------------------------------------------

/// One command with the probe timeout; an I/O error or an error reply is an `Err`.
fn probe(node: &RedisServer, args: &[&str]) -> Result<Reply, String> {
    match node.command_timeout(args, PROBE_TIMEOUT) {
        Ok(Reply::Error(e)) => Err(format!("{args:?} on {}: {e}", node.port())),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{args:?} on {}: {e}", node.port())),
    }
}

/// `INFO <section>` as fields.
fn info_of(node: &RedisServer, section: &str) -> Result<HashMap<String, String>, String> {
    Ok(parse_info(&probe(node, &["INFO", section])?))
}

/// One field of `INFO <section>`.
pub fn info_field(node: &RedisServer, section: &str, field: &str) -> Result<String, String> {
    info_of(node, section)?.remove(field).ok_or_else(|| format!("no {field} in INFO {section} of {}", node.port()))
}

fn parse_info(reply: &Reply) -> HashMap<String, String> {
    reply
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Polls `probe` every [`POLL`] until it is `Ok`, or returns its last `Err` after `timeout`.
fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(why) if Instant::now() >= deadline => return Err(why),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// [`wait_for`], panicking with what it last saw and the servers' log tails.
fn wait_or_panic<T>(
    what: &str,
    servers: &[&RedisServer],
    timeout: Duration,
    probe: impl FnMut() -> Result<T, String>,
) -> T {
    wait_for(timeout, probe)
        .unwrap_or_else(|why| panic!("timed out after {timeout:?} waiting for {what}; last: {why}\n{}", logs(servers)))
}

/// The log tails of `servers`, each under a header.
fn logs(servers: &[&RedisServer]) -> String {
    servers.iter().map(|s| format!("--- redis-server on port {} ---\n{}\n", s.port(), s.log_tail())).collect()
}

/// `$REDIS_CLI`, else `/usr/bin/redis-cli` (Debian's `redis-tools`, which `redis-server` pulls
/// in), else on `PATH`. `None` with a skip note, or a panic under `CI=true`.
pub fn find_cli() -> Option<PathBuf> {
    let found = std::env::var_os("REDIS_CLI").map(PathBuf::from).or_else(|| {
        let debian = PathBuf::from("/usr/bin/redis-cli");
        if debian.is_file() {
            return Some(debian);
        }
        std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join("redis-cli")).find(|p| p.is_file())
    });
    if found.is_none() {
        let hint = "install it with `apt-get install -y redis-tools` (or set REDIS_CLI to its path)";
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("redis-cli not found and CI=true: {hint}");
        }
        eprintln!("redis-cli not found ({hint}): skipping");
    }
    found
}

/// Runs redis-cli with `args`, killing it after `timeout`: its stdout, trimmed, or `Err` with
/// its status and output. `None` when there is no redis-cli.
fn run_cli(args: &[String], timeout: Duration) -> Option<Result<String, String>> {
    let cli = find_cli()?;
    let out = tempfile::tempfile().expect("a temp file for redis-cli's output");
    let err = tempfile::tempfile().expect("a temp file for redis-cli's errors");
    let mut child = Command::new(&cli)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone a file handle"))
        .stderr(err.try_clone().expect("clone a file handle"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", cli.display()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for redis-cli") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(POLL);
    };
    let read = |mut file: std::fs::File| {
        use std::io::{Read, Seek};
        let mut text = String::new();
        let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
        text
    };
    let (stdout, stderr) = (read(out), read(err));
    Some(match status {
        Some(status) if status.success() => Ok(stdout.trim().to_owned()),
        Some(status) => Err(format!("redis-cli {args:?} exited with {status}\n{stdout}\n{stderr}")),
        None => Err(format!("redis-cli {args:?} still running after {timeout:?}, killed\n{stdout}\n{stderr}")),
    })
}
