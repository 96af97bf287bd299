//! How a durable worker runs its handlers, on the store the run selects (`support/store.rs`: a
//! real `redis-server` started for each test, or a SQLite file of the embedded store): leases
//! renewed while a handler runs longer than the lease, the handler timeout, `shutdown` and
//! `shutdown_timeout`, waiting until a worker runs and asking whether it leads, routes.
//!
//! Run with `cargo test --features redis --test durable_workers` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::durable::{builder, wait_until, Log, LEASE, TICK};
use support::TestStore;
use tokio_timewheel::durable::{DurableScheduler, Error, Task};

/// A handler that records its delivery (as `node`), sleeps `run`, and acknowledges.
fn sleeper(
    log: &Log,
    node: usize,
    run: Duration,
) -> impl Fn(Task) -> futures::future::BoxFuture<'static, Result<(), String>> {
    let log = log.clone();
    move |task: Task| {
        log.record(&task, node);
        Box::pin(async move {
            tokio::time::sleep(run).await;
            Ok(())
        })
    }
}

/// Waits until the task under `key` is no longer pending.
async fn gone(timers: &DurableScheduler, key: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !timers.contains(key).await.unwrap() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A handler three times as long as the lease, with two workers competing: its worker renews
/// the lease, so it runs once, is acknowledged, and no dead letter or retry comes of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_three_times_the_lease_runs_once_and_is_acknowledged() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "long").connect().await.expect("connect");
    let log = Log::default();
    let workers = [timers.run(sleeper(&log, 1, LEASE * 3)), timers.run(sleeper(&log, 2, LEASE * 3))];
    for w in &workers {
        w.ready().await;
    }
    let started = Instant::now();
    timers.schedule("slow", Duration::from_millis(100), "x").await.unwrap();
    assert!(gone(&timers, "slow", LEASE * 6).await, "never acknowledged: {:?}", log.all());
    let took = started.elapsed();
    assert!(took >= LEASE * 3, "acknowledged after {took:?}, before the handler could have finished");
    // Another lease and a few ticks: nothing comes back.
    tokio::time::sleep(LEASE + TICK * 4).await;
    let deliveries = log.of("slow");
    assert_eq!(deliveries.len(), 1, "started more than once: {deliveries:?}");
    assert_eq!(deliveries[0].attempt, 1);
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.acked, stats.retried, stats.dead, stats.pending), (1, 0, 0, 0), "{stats:?}");
    assert!(timers.dead_letters(10).await.unwrap().is_empty());
    for w in workers {
        w.shutdown().await;
    }
}

/// A handler still running when `shutdown` is called is waited for, its lease renewed all the
/// while, and acknowledged when it finishes, however long past the lease that is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_handler_longer_than_the_lease_and_acknowledges_it() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "drain").connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run(sleeper(&log, 1, LEASE * 2));
    timers.schedule("draining", Duration::ZERO, "x").await.unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await, "never started");
    let started = Instant::now();
    worker.shutdown().await;
    let took = started.elapsed();
    assert!(took + Duration::from_millis(200) >= LEASE * 2, "shutdown returned after {took:?}, mid-handler");
    assert!(!timers.contains("draining").await.unwrap(), "the finished handler was not acknowledged");
    assert_eq!(timers.stats().await.unwrap().acked, 1);
}

/// `shutdown_timeout` returns within its bound although a handler sleeps far longer. A handler
/// that finishes within the bound is acknowledged; the one still running is dropped and its
/// lease given back, so another worker gets it on the next tick (long before its 5 s lease
/// would have run out), as the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_returns_within_its_bound_and_gives_the_lease_back() {
    let Some(store) = TestStore::start() else { return };
    let lease = Duration::from_secs(5);
    let timers = builder(&store.url(), "bounded").lease(lease).connect().await.expect("connect");
    let log = Log::default();
    let dropped = Arc::new(AtomicUsize::new(0));
    let worker = timers.run({
        let (log, dropped) = (log.clone(), dropped.clone());
        move |task: Task| {
            log.record(&task, 1);
            let run = if task.key() == "quick" { Duration::from_millis(200) } else { Duration::from_secs(60) };
            let guard = DropCounter(dropped.clone());
            async move {
                tokio::time::sleep(run).await;
                std::mem::forget(guard);
                Ok::<(), String>(())
            }
        }
    });
    timers.schedule("quick", Duration::ZERO, "x").await.unwrap();
    timers.schedule("slow", Duration::ZERO, "x").await.unwrap();
    assert!(wait_until(Duration::from_secs(3), || log.len() == 2).await, "never started: {:?}", log.all());

    let bound = Duration::from_millis(800);
    let started = Instant::now();
    worker.shutdown_timeout(bound).await;
    let took = started.elapsed();
    eprintln!("shutdown_timeout({bound:?}) returned after {took:?}");
    assert!(took + Duration::from_millis(20) >= bound, "returned after {took:?}, before its bound");
    assert!(took < bound + Duration::from_millis(300), "returned after {took:?}, well past its bound");
    assert!(gone(&timers, "quick", Duration::from_secs(1)).await, "the handler that finished was not acknowledged");
    assert!(
        wait_until(Duration::from_secs(1), || dropped.load(Ordering::SeqCst) == 1).await,
        "the slow handler was not dropped"
    );

    // The slow task comes back at once to another worker, as the next attempt.
    let given_back = Instant::now();
    let other = timers.run(log.handler(2));
    assert!(wait_until(lease, || log.of("slow").len() == 2).await, "the dropped handler's task never came back");
    let back_after = given_back.elapsed();
    let second = &log.of("slow")[1];
    assert_eq!((second.node, second.attempt), (2, 2), "{:?}", log.of("slow"));
    assert!(back_after < lease / 2, "came back after {back_after:?}: its lease was not given back");
    assert_eq!(log.of("quick").len(), 1, "the finished handler's task was handed out again");
    other.shutdown().await;
}

/// Counts the handlers dropped before they finished (the guard is forgotten at the end of a run).
struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A hung handler is dropped after the handler timeout and counts as a failure: retried after
/// the backoff, then dead with the timeout in its last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_timeout_turns_a_hung_handler_into_a_failure() {
    let Some(store) = TestStore::start() else { return };
    let timeout = Duration::from_millis(300);
    let timers =
        builder(&store.url(), "hung").handler_timeout(timeout).max_attempts(2).connect().await.expect("connect");
    let log = Log::default();
    let worker = timers.run({
        let log = log.clone();
        move |task: Task| {
            log.record(&task, 1);
            async move {
                std::future::pending::<()>().await;
                Ok::<(), String>(())
            }
        }
    });
    timers.schedule("hangs", Duration::ZERO, "x").await.unwrap();
    let dead = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let dead = timers.dead_letters(10).await.unwrap();
            if !dead.is_empty() || Instant::now() > deadline {
                break dead;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(dead.len(), 1, "never dead: {:?}", log.all());
    assert_eq!(dead[0].attempts(), 2);
    assert!(dead[0].last_error().contains("timed out"), "{}", dead[0].last_error());
    let attempts: Vec<(u32, std::time::SystemTime)> = log.of("hangs").iter().map(|h| (h.attempt, h.at)).collect();
    assert_eq!(attempts.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2]);
    let gap = attempts[1].1.duration_since(attempts[0].1).unwrap();
    assert!(gap >= timeout, "retried {gap:?} after the first delivery, before the timeout");
    assert!(gap < LEASE, "retried {gap:?} after the first delivery: by the lease, not the timeout");
    worker.shutdown().await;

    let zero = builder(&store.url(), "hung").handler_timeout(Duration::ZERO).connect().await;
    assert!(matches!(zero, Err(Error::Invalid(_))), "{zero:?}");
}

/// `ready` returns once a worker runs, and then `is_leader` tells who ticks: the first worker
/// on a wheel leads (each of its partitions), a second one does not, and takes over when the
/// first shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_then_is_leader_tells_who_ticks() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "who").partitions(3).connect().await.expect("connect");
    let log = Log::default();
    let first = log.worker(&timers);
    tokio::time::timeout(Duration::from_secs(5), first.ready()).await.expect("the first worker never ran");
    assert!(first.is_leader());
    assert_eq!(first.partitions_led(), 3);

    let second = log.worker(&timers);
    tokio::time::timeout(Duration::from_secs(5), second.ready()).await.expect("the second worker never ran");
    assert!(!second.is_leader());
    assert_eq!(second.partitions_led(), 0);
    tokio::time::timeout(Duration::from_millis(100), first.ready()).await.expect("ready, once ready, waits");

    first.shutdown().await;
    assert!(
        wait_until(LEASE, || second.partitions_led() == 3).await,
        "the second worker leads {} of 3 partitions after the first gave them up",
        second.partitions_led()
    );
    second.shutdown().await;
}

/// `run_routes` hands each task to the handler of the longest prefix of its key, else to the
/// fallback; without a fallback, a task no route takes fails with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_send_each_kind_of_task_to_its_handler() {
    use tokio_timewheel::durable::Routes;
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "routes").max_attempts(1).connect().await.expect("connect");
    let seen = Arc::new(Mutex::new(Vec::<(&'static str, String)>::new()));
    let route = |name: &'static str| {
        let seen = seen.clone();
        move |task: Task| {
            seen.lock().unwrap().push((name, task.key().to_string()));
            std::future::ready(Ok::<(), String>(()))
        }
    };
    let keys = ["order:1", "order:vip:2", "email:3", "other:4"];
    for key in keys {
        timers.schedule(key, Duration::ZERO, Vec::new()).await.unwrap();
    }
    let routes = Routes::new().on("order:", route("order")).on("order:vip:", route("vip")).on("email:", route("email"));
    let worker = timers.run_routes(routes);
    let deadline = Instant::now() + Duration::from_secs(20);
    while timers.stats().await.unwrap().pending > 0 {
        assert!(Instant::now() < deadline, "{:?}", seen.lock().unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    assert_eq!(
        got,
        [("email", "email:3".to_string()), ("order", "order:1".to_string()), ("vip", "order:vip:2".to_string())]
    );
    let dead = timers.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key(), "other:4");
    assert!(dead[0].last_error().contains("no route for the task \"other:4\""), "{}", dead[0].last_error());

    // With a fallback, nothing is left over.
    timers.requeue_dead("other:4").await.unwrap();
    let worker = timers.run_routes(Routes::new().on("order:", route("order")).fallback(route("fallback")));
    let deadline = Instant::now() + Duration::from_secs(20);
    while timers.stats().await.unwrap().pending > 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    assert!(seen.lock().unwrap().contains(&("fallback", "other:4".to_string())));
}
