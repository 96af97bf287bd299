//! A Redis Cluster: creation, failover, restart and live slot migration.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::super::redis_server::{self, Launch, RedisServer, Reply};
use super::{
    find_cli, info_field, info_of, logs, parse_info, probe, run_cli, start_node, wait_for, wait_or_panic, TlsCerts,
    SETTLE_TIMEOUT,
};

/// `cluster-node-timeout`: how long a silent node takes to be marked failing.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

/// How long a failover may take from the kill until the slot's new primary serves it and every
/// live node agrees: the primary marked failing by a majority (a node timeout, then gossip), a
/// replica's election (it waits 0.5 to 1 s and more by its rank, and tries again after twice
/// its 2 s election timeout if it loses), with room for a busy machine.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

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
    /// `cluster_state:ok`: the new primary's port. Panics, with the nodes' logs, after
    /// [`FAILOVER_TIMEOUT`].
    pub fn wait_for_failover(&self, slot: u16) -> u16 {
        let nodes: Vec<&RedisServer> = self.nodes.iter().collect();
        wait_or_panic(&format!("a replica to take over slot {slot}"), &nodes, FAILOVER_TIMEOUT, || {
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
