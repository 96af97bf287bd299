//! The test harness's deployments (`support/topology.rs`) do what the durable tests rely on: a
//! TLS-only server speaks TLS to whom it trusts and to no one else, Sentinel fails over and takes
//! the old primary back as a replica, a cluster serves every slot, fails over, and moves a slot's
//! keys live. Each test skips (with a note) when there is no redis-server, except under CI=true.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, Instant};

use support::redis_server::command_at;
use support::topology::{tls_command_at, Cluster, SentinelSet, TlsCerts, TlsServer};
use support::Reply;

fn pong() -> Reply {
    Reply::Status("PONG".into())
}

#[test]
fn a_tls_server_answers_over_tls_and_refuses_plain_text_strangers_and_clients_without_a_certificate() {
    let certs = TlsCerts::generate();
    let started = Instant::now();
    let Some(server) = TlsServer::start(&certs, true) else { return };
    eprintln!("TLS server up in {:?}", started.elapsed());
    assert!(server.url().starts_with("rediss://127.0.0.1:"), "{}", server.url());

    assert_eq!(server.command(&["PING"]), pong());
    if let Some(cli) = server.cli(&["PING"]) {
        assert_eq!(cli.as_deref(), Ok("PONG"), "redis-cli --tls");
    }

    let timeout = Duration::from_secs(5);
    let plain = command_at(server.addr(), &["PING"], timeout);
    assert!(!matches!(plain, Ok(ref r) if *r == pong()), "a plain-text PING was answered: {plain:?}");

    let stranger = TlsCerts::generate();
    let wrong_ca = tls_command_at(&stranger.client_config(true), server.addr(), &["PING"], timeout);
    assert!(wrong_ca.is_err(), "a client trusting another CA accepted the server: {wrong_ca:?}");

    let anonymous = tls_command_at(&certs.client_config(false), server.addr(), &["PING"], timeout);
    assert!(anonymous.is_err(), "a client without a certificate was answered: {anonymous:?}");
}

#[test]
fn a_tls_server_without_client_auth_answers_a_client_without_a_certificate() {
    let certs = TlsCerts::generate();
    let Some(mut server) = TlsServer::start(&certs, false) else { return };
    let anonymous = tls_command_at(&certs.client_config(false), server.addr(), &["PING"], Duration::from_secs(5));
    assert_eq!(anonymous.expect("PING without a client certificate"), pong());

    // Restarts on its port and its AOF, still TLS only.
    assert_eq!(server.command(&["SET", "k", "v"]), Reply::Status("OK".into()));
    server.command(&["BGREWRITEAOF"]);
    std::thread::sleep(Duration::from_millis(300));
    server.restart();
    assert_eq!(server.command(&["PING"]), pong());
}

#[test]
fn sentinel_promotes_the_replica_and_takes_the_old_primary_back_as_a_replica() {
    let Some(mut set) = SentinelSet::start() else { return };
    assert_eq!(set.sentinel_urls().len(), 3);
    assert_eq!(set.master_name(), "mymaster");
    let (primary, replica) = (set.nodes()[0].port(), set.nodes()[1].port());
    assert_eq!(set.master_port(), primary);
    assert_eq!(set.primary().command(&["SET", "k", "v"]), Reply::Status("OK".into()));
    assert_eq!(set.primary().command(&["WAIT", "1", "5000"]), Reply::Int(1), "the replica acknowledged the write");

    let killed_at = Instant::now();
    assert_eq!(set.kill_primary(), primary);
    let promoted = set.wait_for_failover();
    eprintln!("failover in {:?}", killed_at.elapsed());
    assert_eq!(promoted, replica);
    assert_eq!(set.primary().port(), replica);
    assert_eq!(set.primary().command(&["GET", "k"]), Reply::Bulk(Some(b"v".to_vec())));

    let restarted_at = Instant::now();
    set.restart_old_primary();
    eprintln!("old primary back as a replica in {:?}", restarted_at.elapsed());
    assert_eq!(set.master_port(), replica);
    assert_eq!(set.replica().port(), primary);
}

#[test]
fn sentinel_over_tls_syncs_its_replica_and_fails_over() {
    let certs = TlsCerts::generate();
    let Some(mut set) = SentinelSet::start_tls(&certs, true) else { return };
    assert!(set.sentinel_urls().iter().all(|u| u.starts_with("rediss://127.0.0.1:")), "{:?}", set.sentinel_urls());
    for sentinel in set.sentinels() {
        let plain = command_at(sentinel.addr(), &["PING"], Duration::from_secs(5));
        assert!(!matches!(plain, Ok(ref r) if *r == pong()), "a sentinel answered plain text: {plain:?}");
    }
    assert_eq!(set.primary().command(&["SET", "k", "v"]), Reply::Status("OK".into()));
    assert_eq!(set.primary().command(&["WAIT", "1", "5000"]), Reply::Int(1), "the replica acknowledged the write");
    assert_eq!(set.replica().command(&["GET", "k"]), Reply::Bulk(Some(b"v".to_vec())));

    let old = set.kill_primary();
    let promoted = set.wait_for_failover();
    assert_ne!(promoted, old);
    set.restart_old_primary_as_replica();
    assert_eq!(set.master_port(), promoted);
    assert_eq!(set.node(old).command(&["GET", "k"]), Reply::Bulk(Some(b"v".to_vec())));
}

#[test]
fn slot_of_agrees_with_cluster_keyslot_and_a_migration_moves_a_slots_keys() {
    let Some(cluster) = Cluster::start(3, 1) else { return };
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.seed_urls().len(), 6);
    let node = &cluster.nodes()[0];
    for key in ["", "a", "{tag}:1", "x{tag}y", "{}tag", "{{tag}}", "tag}{", "user:{42}:name", "plain-key-123"] {
        let keyslot = node.command(&["CLUSTER", "KEYSLOT", key]).as_int().expect("CLUSTER KEYSLOT");
        assert_eq!(i64::from(Cluster::slot_of(key)), keyslot, "slot of {key:?}");
    }

    let slot = Cluster::slot_of("{tag}");
    let source = cluster.primary_for_slot(slot).port();
    for i in 0..35 {
        let key = format!("{{tag}}:{i}");
        assert_eq!(cluster.node(source).command(&["SET", &key, "v"]), Reply::Status("OK".into()));
    }
    let target = cluster.a_node_not_owning(slot).port();
    let moved = cluster.node(target).command(&["GET", "{tag}:0"]);
    assert!(matches!(&moved, Reply::Error(e) if e.starts_with("MOVED")), "{moved:?}");

    // Half-moved, the source answers ASK for a key it no longer has.
    let started = Instant::now();
    let asked = std::thread::scope(|scope| {
        let migration = scope.spawn(|| cluster.migrate_slot_paced(slot, target, 10, Duration::from_millis(200)));
        let mut asked = None;
        while asked.is_none() && !migration.is_finished() {
            asked = (0..35)
                .map(|i| cluster.node(source).command(&["GET", &format!("{{tag}}:{i}")]))
                .find(|reply| matches!(reply, Reply::Error(e) if e == &format!("ASK {slot} 127.0.0.1:{target}")));
        }
        migration.join().expect("the migration");
        asked
    });
    eprintln!("slot migrated in {:?}", started.elapsed());
    assert!(asked.is_some(), "the source never answered ASK while the slot moved");
    assert_eq!(cluster.primary_for_slot(slot).port(), target);
    let count = |port: u16| cluster.node(port).command(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
    assert_eq!(count(source), Reply::Int(0));
    assert_eq!(count(target), Reply::Int(35));
    assert_eq!(cluster.node(target).command(&["GET", "{tag}:34"]), Reply::Bulk(Some(b"v".to_vec())));
    let moved = cluster.node(source).command(&["GET", "{tag}:0"]);
    assert!(matches!(&moved, Reply::Error(e) if e == &format!("MOVED {slot} 127.0.0.1:{target}")), "{moved:?}");
}

#[test]
fn a_cluster_promotes_a_replica_and_takes_the_old_primary_back_as_a_replica() {
    let Some(mut cluster) = Cluster::start(3, 1) else { return };
    let slot = Cluster::slot_of("{tag}");
    let killed_at = Instant::now();
    let old = cluster.kill_primary_of(slot);
    let promoted = cluster.wait_for_failover(slot);
    eprintln!("cluster failover in {:?}", killed_at.elapsed());
    assert_ne!(promoted, old);

    let restarted_at = Instant::now();
    cluster.restart(old);
    eprintln!("old primary rejoined in {:?}", restarted_at.elapsed());
    let role = support::topology::info_field(cluster.node(old), "replication", "role");
    assert_eq!(role.as_deref(), Ok("slave"));
    assert_eq!(cluster.primary_for_slot(slot).port(), promoted);
}

#[test]
fn a_tls_cluster_serves_over_tls_and_migrates_a_slot() {
    let certs = TlsCerts::generate();
    let Some(cluster) = Cluster::start_tls(&certs, 3, 1, true) else { return };
    assert!(cluster.seed_urls().iter().all(|u| u.starts_with("rediss://127.0.0.1:")));
    let slot = Cluster::slot_of("{tls}");
    let source = cluster.primary_for_slot(slot).port();
    for i in 0..5 {
        assert_eq!(cluster.node(source).command(&["SET", &format!("{{tls}}:{i}"), "v"]), Reply::Status("OK".into()));
    }
    let plain = command_at(cluster.node(source).addr(), &["PING"], Duration::from_secs(5));
    assert!(!matches!(plain, Ok(ref r) if *r == pong()), "a cluster node answered plain text: {plain:?}");
    let target = cluster.a_node_not_owning(slot).port();
    cluster.migrate_slot(slot, target);
    assert_eq!(cluster.node(target).command(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]), Reply::Int(5));
}
