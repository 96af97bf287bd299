//! The durable wheel on the deployments production runs, each against real servers started by
//! the test on free 127.0.0.1 ports: a wheel split into partitions, a replica named by mistake,
//! TLS, Sentinel and Cluster (`support/topology.rs`).
//!
//! Run with `cargo test --features redis --test durable_deployments`. Without a `redis-server`
//! the tests print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use support::durable::{wait_until, Log};
use support::redis_server::{Persistence, RedisServer};
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, WheelKeys};
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
    let Some(server) = RedisServer::start() else { return };
    let name = "parts";
    let timers = tuned(DurableScheduler::builder(server.url(), name)).partitions(4).connect().await.expect("connect");
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

    // Every partition holds some of the tasks, under its own hash tag.
    let mut held = Vec::new();
    for p in 0..4 {
        let keys = WheelKeys::for_partition(name, p, 4);
        assert!(keys.prefix().contains(&format!("{{{name}:{p}}}")), "{}", keys.prefix());
        let far = server.command(&["ZCARD", &keys.far()]).as_int().unwrap_or(0);
        let ring = server.command(&["GET", &keys.ring()]).as_int().unwrap_or(0);
        held.push(far + ring);
    }
    assert!(held.iter().all(|&n| n > 50), "tasks per partition: {held:?}");

    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(10), || log.len() >= N - 3).await, "{} of {}", log.len(), N - 3);
    tokio::time::sleep(TICK * 6).await;
    // Each partition has been ticked by a leader of its own.
    for p in 0..4 {
        let leader = server.command(&["GET", &WheelKeys::for_partition(name, p, 4).leader()]);
        assert!(leader.as_str().is_some(), "partition {p} has no leader");
    }
    worker.shutdown().await;
    let seen: Vec<String> = log.all().into_iter().map(|h| h.key).collect();
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (N - 3, N - 3), "a task fired twice or was lost");
    assert!(!distinct.contains(&"k1".to_string()) && !distinct.contains(&"k3".to_string()));
    assert_eq!(timers.len().await.unwrap(), 2, "far and k3 are left");

    for other in [1, 8] {
        let refused = tuned(DurableScheduler::builder(server.url(), name)).partitions(other).connect().await;
        let Err(e @ Error::Invalid(_)) = refused else { panic!("{other} partitions were not refused: {refused:?}") };
        assert!(e.to_string().contains("4 partition") && !e.is_retryable(), "{e}");
    }
    let default = tuned(DurableScheduler::builder(server.url(), name)).connect().await;
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
