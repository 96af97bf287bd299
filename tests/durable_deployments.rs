//! The durable wheel on the deployments production runs, each against real servers started by
//! the test on free 127.0.0.1 ports: a replica named by mistake, TLS, Sentinel and Cluster
//! (`support/topology.rs`), on Redis only; and a wheel split into partitions, on the store the run
//! selects (`support/store.rs`: a `redis-server`, or a SQLite file of the embedded store), whose
//! check of each partition's keys reads them in Redis, on Redis only.
//!
//! Run with `cargo test --features redis --test durable_deployments` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use support::durable::{wait_until, Log};
use support::redis_server::{Persistence, RedisServer};
use support::topology::{Cluster, SentinelSet, TlsCerts, TlsServer};
use support::TestStore;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task, WheelKeys};
use tokio_timewheel::Error;

const TICK: Duration = Duration::from_millis(50);

fn tuned(builder: DurableBuilder) -> DurableBuilder {
    builder
        .tick(TICK)
        .slots(32)
        .lease(Duration::from_secs(2))
        .backoff(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
}

/// A wheel of 4 partitions on one node: each partition has its own keys and its own leader;
/// keys stay unique across the wheel; cancel, reschedule, contains, stats and dead letters
/// cover every partition; every task fires once; a node with another partition count (the
/// default 1 included) is refused, with an error that names the count and is not retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_wheel_is_one_wheel_to_its_users() {
    let Some(store) = TestStore::start() else { return };
    let name = "parts";
    let timers = tuned(DurableScheduler::builder(store.url(), name)).partitions(4).connect().await.expect("connect");
    const N: usize = 400;
    let items = (0..N).map(|i| (format!("k{i}"), Duration::from_millis(100 + (i as u64 % 7) * 30), vec![1u8]));
    assert!(timers.schedule_many(items).await.unwrap().iter().all(Result::is_ok));
    assert_eq!(timers.schedule("k7", Duration::from_secs(1), vec![]).await, Err(Error::DuplicateKey("k7".into())));
    timers.schedule("far", Duration::from_secs(3600), vec![]).await.unwrap();
    assert!(timers.contains("far").await.unwrap());
    assert_eq!(timers.cancel_many(["k1", "k2", "nope", "k1"]).await.unwrap(), [true, true, false, false]);
    timers.reschedule("k3", Duration::from_secs(3600)).await.unwrap();
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.pending, stats.scheduled), (N - 2 + 1, N as u64 + 1), "{stats:?}");

    // Every partition holds some of the tasks, under its own hash tag (read in Redis).
    for p in 0..4 {
        let keys = WheelKeys::for_partition(name, p, 4);
        assert!(keys.prefix().starts_with(&format!("tw:{{{name}:{p}~")), "{}", keys.prefix());
    }
    if let Some(server) = store.redis() {
        let mut held = Vec::new();
        for p in 0..4 {
            let keys = WheelKeys::for_partition(name, p, 4);
            let far = server.command(&["ZCARD", &keys.far()]).as_int().unwrap_or(0);
            let ring = server.command(&["GET", &keys.ring()]).as_int().unwrap_or(0);
            held.push(far + ring);
        }
        assert!(held.iter().all(|&n| n > 50), "tasks per partition: {held:?}");
    }

    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(10), || log.len() >= N - 3).await, "{} of {}", log.len(), N - 3);
    tokio::time::sleep(TICK * 6).await;
    // Each partition has been ticked by a leader of its own.
    let leaders = timers.leaders().await.unwrap();
    assert_eq!(leaders.len(), 4, "{leaders:?}");
    for (p, leader) in leaders.iter().enumerate() {
        assert!(leader.is_some(), "partition {p} has no leader");
    }
    worker.shutdown().await;
    let seen: Vec<String> = log.all().into_iter().map(|h| h.key).collect();
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (N - 3, N - 3), "a task fired twice or was lost");
    assert!(!distinct.contains(&"k1".to_string()) && !distinct.contains(&"k3".to_string()));
    assert_eq!(timers.len().await.unwrap(), 2, "far and k3 are left");

    for other in [1, 8] {
        let refused = tuned(DurableScheduler::builder(store.url(), name)).partitions(other).connect().await;
        let Err(e @ Error::Invalid(_)) = refused else { panic!("{other} partitions were not refused: {refused:?}") };
        assert!(e.to_string().contains("4 partition") && !e.is_retryable(), "{e}");
    }
    let default = tuned(DurableScheduler::builder(store.url(), name)).connect().await;
    assert!(matches!(default, Err(Error::Invalid(_))), "the default count was not refused: {default:?}");
}

/// A URL that names a replica: the wheel cannot write there, and the error says so (and that
/// Sentinel finds the primary) instead of retrying in vain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_named_by_mistake_is_a_clear_error() {
    let Some(primary) = RedisServer::start() else { return };
    let port = primary.port().to_string();
    let Some(replica) = RedisServer::start_with(Persistence::Aof, &["--replicaof", "127.0.0.1", &port]) else {
        return;
    };
    let result = tuned(DurableScheduler::builder(replica.url(), "ro")).connect().await;
    let Err(e) = result else { panic!("connected to a replica") };
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("replica") && e.to_string().contains("sentinel"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// TLS, Sentinel and Cluster, on the harness of support/topology.rs.
// ---------------------------------------------------------------------------------------------

/// Schedule, fire and cancel over TLS with a private CA; mutual TLS; and the refusals: another
/// CA, the system's roots (which do not know the test's CA), no client certificate where one is
/// required. The refusals name TLS or the certificate, and are not retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_mutual_tls() {
    let certs = TlsCerts::generate();
    let Some(server) = TlsServer::start(&certs, false) else { return };
    let timers = tuned(DurableScheduler::builder(server.url(), "tls"))
        .tls_root_ca(certs.ca_pem())
        .connect()
        .await
        .expect("connect over TLS");
    let log = Log::default();
    let worker = log.worker(&timers);
    timers.schedule("a", Duration::from_millis(100), b"over tls".to_vec()).await.unwrap();
    timers.schedule("b", Duration::from_secs(60), vec![]).await.unwrap();
    assert!(timers.cancel("b").await.unwrap());
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await, "a never fired over TLS");
    assert_eq!(log.of("a")[0].payload, b"over tls");
    worker.shutdown().await;

    let refused = |result: Result<DurableScheduler, Error>, what: &str| {
        let Err(e) = result else { panic!("{what}: connected") };
        let text = e.to_string().to_lowercase();
        assert!(text.contains("tls") || text.contains("certificate"), "{what}: {e}");
        assert!(!e.is_retryable(), "{what}: a TLS refusal is not worth retrying: {e}");
    };
    let stranger = TlsCerts::generate();
    refused(
        tuned(DurableScheduler::builder(server.url(), "tls")).tls_root_ca(stranger.ca_pem()).connect().await,
        "another CA",
    );
    refused(tuned(DurableScheduler::builder(server.url(), "tls")).connect().await, "the system's roots");
    let plain = tuned(DurableScheduler::builder(server.url().replace("rediss://", "redis://"), "tls"))
        .tls_root_ca(certs.ca_pem())
        .connect()
        .await;
    assert!(matches!(plain, Err(Error::Invalid(_))), "a CA with a redis:// URL: {plain:?}");

    let Some(mutual) = TlsServer::start(&certs, true) else { return };
    let without = tuned(DurableScheduler::builder(mutual.url(), "mtls")).tls_root_ca(certs.ca_pem()).connect().await;
    assert!(without.is_err(), "connected without the client certificate the server asks for");
    let timers = tuned(DurableScheduler::builder(mutual.url(), "mtls"))
        .tls_root_ca(certs.ca_pem())
        .tls_client_auth(certs.client_cert_pem(), certs.client_key_pem())
        .connect()
        .await
        .expect("connect with a client certificate");
    timers.schedule("m", Duration::from_secs(60), vec![]).await.unwrap();
    assert!(timers.contains("m").await.unwrap());
}

/// What a failover run found, from the schedules' answers and the handlers' log.
#[derive(Debug, Default)]
struct Failover {
    /// Schedules answered `Ok` (or `DuplicateKey` on a repeat: the first attempt landed).
    acknowledged: usize,
    /// Acknowledged tasks that fired at least once.
    fired: usize,
    lost: Vec<String>,
    early: Vec<String>,
    /// Deliveries beyond the first of a task (reported, through `Debug`).
    #[allow(dead_code)]
    duplicated: usize,
    /// The longest time without a schedule answered `Ok`, from the last before the kill on:
    /// how long work stalled (calls retry inside it, so none need fail). Reported; how long a
    /// failover takes is Sentinel's and the cluster's business, and a loaded machine stretches it.
    #[allow(dead_code)]
    stalled: Option<Duration>,
    /// From the end of the failover (the new primary serving, the old one back as its synced
    /// replica) to the next schedule answered `Ok`: what the client adds to the failover.
    resumed_after: Option<Duration>,
    /// Schedules still failing after their retries (neither acknowledged nor counted lost).
    gave_up: usize,
}

/// Schedules `n` tasks at a steady pace (delays of 0.3 to 1.2 s) while `during` runs at about a
/// third of the way (it kills a primary and notes when, waits for the failover, revives the old
/// one); each schedule is repeated on a retryable error, as the docs advise, while the failover
/// runs and for up to 15 s after its first attempt and after the failover's end. A
/// task may fire from its first attempt's time on: an attempt that failed may have landed (a
/// write that replicas did not confirm in time is on the primary), and a repeat finds its key
/// taken (`DuplicateKey`) or, if that task fired meanwhile, schedules it again (a repeated
/// delivery, reported). Then waits for every acknowledged task and checks the log.
async fn failover_run<F>(timers: &DurableScheduler, n: usize, during: F) -> Failover
where
    F: FnOnce(&dyn Fn()) + Send + 'static,
{
    let log = Log::default();
    let workers = [timers.run(log.handler(0)), timers.run(log.handler(1))];
    let acked: Arc<Mutex<HashMap<String, SystemTime>>> = Arc::default();
    let oks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    // When `during` returned: the failover is over and the old primary is a synced replica.
    let failed_over_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let gave_up = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scheduler = {
        let (timers, acked, oks, gave_up) = (timers.clone(), acked.clone(), oks.clone(), gave_up.clone());
        let failed_over_at = failed_over_at.clone();
        tokio::spawn(async move {
            for i in 0..n {
                let key = format!("f{i}");
                let delay = Duration::from_millis(300 + (i as u64 % 10) * 100);
                let patience = Duration::from_secs(15);
                let first_attempt = Instant::now();
                // The wait for replicas fails until the failover is over, however long a loaded
                // machine makes it: keep trying until then, and for `patience` after.
                let may_retry = || {
                    let now = Instant::now();
                    now < first_attempt + patience
                        || failed_over_at.lock().unwrap().is_none_or(|at| now < at + patience)
                };
                let first_before = SystemTime::now();
                loop {
                    let answer = timers.schedule(&key, delay, vec![]).await;
                    let earliest = first_before + delay;
                    match answer {
                        Ok(()) | Err(Error::DuplicateKey(_)) => {
                            acked.lock().unwrap().insert(key.clone(), earliest);
                            oks.lock().unwrap().push(Instant::now());
                            break;
                        }
                        Err(e) if e.is_retryable() && may_retry() => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => {
                            eprintln!("{key}: gave up: {e}");
                            gave_up.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            break;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(4)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = tokio::task::spawn_blocking({
        let (killed_at, failed_over_at) = (killed_at.clone(), failed_over_at.clone());
        move || {
            during(&|| *killed_at.lock().unwrap() = Some(Instant::now()));
            *failed_over_at.lock().unwrap() = Some(Instant::now());
        }
    });
    scheduler.await.unwrap();
    killed.await.unwrap();
    let want: HashMap<String, SystemTime> = acked.lock().unwrap().clone();
    let all_fired = wait_until(Duration::from_secs(30), || {
        let seen = log.distinct_keys();
        want.keys().all(|k| seen.contains(k))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await; // late duplicates show up too
    for w in workers {
        w.shutdown().await;
    }
    let seen = log.all();
    let mut first: HashMap<&str, SystemTime> = HashMap::new();
    for h in &seen {
        let at = first.entry(h.key.as_str()).or_insert(h.at);
        *at = (*at).min(h.at);
    }
    let killed = killed_at.lock().unwrap().expect("the failover ran");
    let oks = oks.lock().unwrap().clone();
    let from = oks.iter().rposition(|&t| t <= killed).unwrap_or(0);
    let stalled = oks[from..].windows(2).map(|w| w[1] - w[0]).max();
    let failed_over = failed_over_at.lock().unwrap().expect("the failover ended");
    let resumed_after = oks.iter().find(|&&t| t >= failed_over).map(|&t| t - failed_over);
    let run = Failover {
        acknowledged: want.len(),
        fired: want.keys().filter(|k| first.contains_key(k.as_str())).count(),
        lost: want.keys().filter(|k| !first.contains_key(k.as_str())).cloned().collect(),
        early: want
            .iter()
            .filter(|(k, due)| first.get(k.as_str()).is_some_and(|at| *at + Duration::from_millis(1) < **due))
            .map(|(k, due)| {
                let ms = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis();
                let runs: Vec<String> = seen
                    .iter()
                    .filter(|h| &h.key == k)
                    .map(|h| {
                        format!("attempt {} due {} at {} claimed {}", h.attempt, ms(h.due), ms(h.at), ms(h.claimed))
                    })
                    .collect();
                format!("{k}: not before {}: {runs:?}", ms(*due))
            })
            .collect(),
        duplicated: seen.len() - first.len(),
        stalled,
        resumed_after,
        gave_up: gave_up.load(std::sync::atomic::Ordering::Relaxed),
    };
    assert!(all_fired || !run.lost.is_empty());
    run
}

/// Sentinel: the primary is SIGKILLed under load, a replica takes over, and the old primary
/// comes back later (answering as a primary until Sentinel demotes it). With `wait_for_replicas`
/// every acknowledged task fires, none early, and the same process carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load_loses_no_acknowledged_task() {
    let Some(set) = SentinelSet::start() else { return };
    let timers = tuned(DurableScheduler::sentinel(set.sentinel_urls(), set.master_name(), "sentinel"))
        .wait_for_replicas(1, Duration::from_millis(400))
        .connect()
        .await
        .expect("connect through the sentinels");
    let set = Arc::new(Mutex::new(set));
    let run = failover_run(&timers, 1500, {
        let set = set.clone();
        move |killed: &dyn Fn()| {
            let mut set = set.lock().unwrap();
            set.kill_primary();
            killed();
            set.wait_for_failover();
            set.restart_old_primary();
        }
    })
    .await;
    eprintln!("sentinel failover: {run:?}");
    assert!(run.lost.is_empty() && run.early.is_empty() && run.gave_up == 0, "{run:?}");
    assert!(run.resumed_after.is_some_and(|d| d < Duration::from_secs(10)), "work did not resume: {run:?}");
    assert_eq!(run.fired, run.acknowledged);
    timers.schedule("after", Duration::ZERO, vec![]).await.expect("the same process carries on");
}

/// Cluster: the primary of the wheel's slot is SIGKILLed under load, its replica takes over,
/// and the old primary rejoins as a replica. With `wait_for_replicas` every acknowledged task
/// fires, none early, and the same process carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_under_load_loses_no_acknowledged_task() {
    let Some(cluster) = Cluster::start(3, 1) else { return };
    let name = "clustered";
    let slot = Cluster::slot_of(&WheelKeys::new(name).meta());
    let timers = tuned(DurableScheduler::cluster(cluster.seed_urls(), name))
        .wait_for_replicas(1, Duration::from_millis(400))
        .connect()
        .await
        .expect("connect to the cluster");
    let cluster = Arc::new(Mutex::new(cluster));
    let run = failover_run(&timers, 1500, {
        let cluster = cluster.clone();
        move |killed: &dyn Fn()| {
            let mut cluster = cluster.lock().unwrap();
            let old = cluster.kill_primary_of(slot);
            killed();
            cluster.wait_for_failover(slot);
            cluster.restart(old);
        }
    })
    .await;
    eprintln!("cluster failover: {run:?}");
    assert!(run.lost.is_empty() && run.early.is_empty() && run.gave_up == 0, "{run:?}");
    assert!(run.resumed_after.is_some_and(|d| d < Duration::from_secs(10)), "work did not resume: {run:?}");
    assert_eq!(run.fired, run.acknowledged);
    timers.schedule("after", Duration::ZERO, vec![]).await.expect("the same process carries on");
}

/// A cluster wheel reached through one seed node that does not own its slot; in single-node
/// mode the same node answers MOVED, which says to use `cluster` and is not retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_wheel_through_a_seed_that_does_not_own_its_slot() {
    let Some(cluster) = Cluster::start(3, 0) else { return };
    let name = "seeded";
    let slot = Cluster::slot_of(&WheelKeys::new(name).meta());
    let other = cluster.a_node_not_owning(slot).url();
    let single = tuned(DurableScheduler::builder(&other, name)).connect().await;
    let Err(e) = single else { panic!("single-node mode on a cluster node that does not own the slot") };
    assert!(e.to_string().contains("DurableScheduler::cluster") && !e.is_retryable(), "{e}");

    let timers = tuned(DurableScheduler::cluster([other], name)).connect().await.expect("connect through the seed");
    let log = Log::default();
    let worker = log.worker(&timers);
    timers.schedule("x", Duration::from_millis(100), vec![]).await.unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await, "never fired");
    worker.shutdown().await;
}

/// The wheel's slot moves to another primary, key by key, while tasks are scheduled and fire:
/// every task fires once (a retried call may repeat a delivery within a lease), none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_under_load() {
    let Some(cluster) = Cluster::start(3, 0) else { return };
    let name = "migrating";
    let slot = Cluster::slot_of(&WheelKeys::new(name).meta());
    let timers = tuned(DurableScheduler::cluster(cluster.seed_urls(), name)).connect().await.expect("connect");
    let owner = cluster.primary_for_slot(slot).port();
    let to = cluster.primaries().into_iter().map(|n| n.port()).find(|&p| p != owner).unwrap();
    let cluster = Arc::new(cluster);
    let run = failover_run(&timers, 1500, {
        let cluster = cluster.clone();
        move |started: &dyn Fn()| {
            started();
            cluster.migrate_slot_paced(slot, to, 50, Duration::from_millis(20));
        }
    })
    .await;
    eprintln!("slot migration: {run:?}");
    assert!(run.lost.is_empty() && run.early.is_empty() && run.gave_up == 0, "{run:?}");
    assert_eq!(cluster.primary_for_slot(slot).port(), to, "the slot did not move");
}

/// Eight partitions on a 3-primary cluster: every partition is ticked and drained (tasks of all
/// of them fire), they spread over more than one primary, and a node that connects with another
/// partition count is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_partitions_on_the_cluster() {
    let Some(cluster) = Cluster::start(3, 0) else { return };
    let name = "parted";
    let timers =
        tuned(DurableScheduler::cluster(cluster.seed_urls(), name)).partitions(8).connect().await.expect("connect");
    let owners: HashSet<u16> = (0..8)
        .map(|p| cluster.primary_for_slot(Cluster::slot_of(&WheelKeys::for_partition(name, p, 8).meta())).port())
        .collect();
    assert!(owners.len() > 1, "8 partitions all on one primary");
    let items = (0..800).map(|i| (format!("p{i}"), Duration::from_millis(100 + (i % 5) * 50), Vec::<u8>::new()));
    assert!(timers.schedule_many(items).await.unwrap().iter().all(Result::is_ok));
    let log = Log::default();
    let worker = timers.run({
        let log = log.clone();
        move |task: Task| {
            log.record(&task, 0);
            std::future::ready(Ok::<(), std::io::Error>(()))
        }
    });
    assert!(wait_until(Duration::from_secs(10), || log.distinct_keys().len() == 800).await, "{} of 800", log.len());
    tokio::time::sleep(TICK * 6).await;
    worker.shutdown().await;
    assert_eq!(log.len(), 800, "a task fired twice");
    assert_eq!(timers.len().await.unwrap(), 0);
    let refused = tuned(DurableScheduler::cluster(cluster.seed_urls(), name)).partitions(2).connect().await;
    assert!(matches!(refused, Err(Error::Invalid(ref m)) if m.contains("8 partition")), "{refused:?}");
}

/// TLS behind Sentinel and on a cluster, as managed services run them: sentinels and data nodes
/// (and the cluster's bus) speak only TLS with a private CA, and the clients present a
/// certificate; a wheel schedules, fires and cancels on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_behind_sentinel_and_on_a_cluster() {
    let certs = TlsCerts::generate();
    let Some(set) = SentinelSet::start_tls(&certs, true) else { return };
    let sentinel = tuned(DurableScheduler::sentinel(set.sentinel_urls(), set.master_name(), "tls-sentinel"))
        .tls_root_ca(certs.ca_pem())
        .tls_client_auth(certs.client_cert_pem(), certs.client_key_pem());
    let Some(cluster) = Cluster::start_tls(&certs, 3, 0, true) else { return };
    let clustered = tuned(DurableScheduler::cluster(cluster.seed_urls(), "tls-cluster"))
        .tls_root_ca(certs.ca_pem())
        .tls_client_auth(certs.client_cert_pem(), certs.client_key_pem());
    for (what, builder) in [("sentinel", sentinel), ("cluster", clustered)] {
        let timers = builder.connect().await.unwrap_or_else(|e| panic!("{what}: connect over TLS: {e}"));
        let log = Log::default();
        let worker = log.worker(&timers);
        timers.schedule("a", Duration::from_millis(100), vec![]).await.unwrap();
        timers.schedule("b", Duration::from_secs(60), vec![]).await.unwrap();
        assert!(timers.cancel("b").await.unwrap(), "{what}");
        assert!(wait_until(Duration::from_secs(5), || log.len() == 1).await, "{what}: never fired");
        worker.shutdown().await;
        assert_eq!(timers.len().await.unwrap(), 0, "{what}");
    }
}
