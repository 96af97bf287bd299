//! The tests that choose a request id or a fencing token, which no public method lets a caller
//! do: a retried `schedule` recognised by its request id (before and after its task fired, and
//! after another caller cancelled it), and the leader's fencing (a stale token moves nothing,
//! two tickers under one token hand each task out once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::support::durable::{builder, keys, wait_until, Log, LEASE, TICK};
use super::support::redis_server::Reply;
use super::Server;
use crate::Error;

/// Redis's `TIME` is read in whole milliseconds, so a due time can sit up to 1 ms before
/// `SystemTime::now() + delay` read just before the call.
const SLACK: Duration = Duration::from_millis(1);

/// A `schedule` retried with its request id (its first reply was lost) answers `Ok` and creates
/// no second task: while the task is pending, and after it fired and was acknowledged. Another
/// request for the key is a real duplicate while the task is pending, and a new task after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_schedule_is_recognised_by_its_request_id_before_and_after_it_fired() {
    let Some(server) = Server::start() else { return };
    let timers = builder(&server.url(), "retry").connect().await.expect("connect");
    let delay = Duration::from_millis(300);
    timers.schedule_with_request_id("r", delay, b"1".to_vec(), "req-1").await.unwrap();
    timers.schedule_with_request_id("r", delay, b"1".to_vec(), "req-1").await.unwrap();
    assert_eq!(timers.len().await.unwrap(), 1);
    assert_eq!(
        timers.schedule_with_request_id("r", delay, b"2".to_vec(), "req-2").await,
        Err(Error::DuplicateKey("r".into()))
    );

    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(3), || log.len() == 1).await);
    let mut pending = 1;
    for _ in 0..100 {
        pending = timers.len().await.unwrap();
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pending, 0, "the task was not acknowledged");
    // A retry arriving after the task fired and was acknowledged creates nothing.
    assert_eq!(timers.schedule_with_request_id("r", Duration::ZERO, b"1".to_vec(), "req-1").await, Ok(()));
    assert_eq!(timers.len().await.unwrap(), 0);
    tokio::time::sleep(TICK * 6).await;
    assert_eq!(log.len(), 1, "the late retry scheduled the task a second time: {:?}", log.all());
    // A new request for the key schedules it again. (A new call has a new id: `req-2` answered
    // DuplicateKey above, and its retry would answer the same.)
    timers.schedule_with_request_id("r", Duration::from_millis(50), b"2".to_vec(), "req-3").await.unwrap();
    assert!(wait_until(Duration::from_secs(2), || log.len() == 2).await, "a new request was swallowed");
    worker.shutdown().await;
}

/// A `schedule` whose reply was lost is retried; if the task was cancelled in between (by
/// another caller who saw it pending), the late retry must not bring it back, and it still
/// answers `Ok` to its own caller. Every key-taking method accepts `&str`, `String` and `&String`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_retry_of_a_cancelled_schedule_creates_nothing() {
    let Some(server) = Server::start() else { return };
    let timers = builder(&server.url(), "retry-cancel").connect().await.expect("connect");
    let key = String::from("c");
    timers.schedule_with_request_id(&key, Duration::from_secs(60), b"1".to_vec(), "req-1").await.unwrap();
    assert!(timers.contains(key.clone()).await.unwrap());
    assert!(timers.cancel(&key).await.unwrap());
    timers.schedule_with_request_id(&key, Duration::from_secs(60), b"1".to_vec(), "req-1").await.unwrap();
    assert!(!timers.contains(&key).await.unwrap(), "the cancelled task came back");
    assert_eq!(timers.len().await.unwrap(), 0);
    assert!(!timers.cancel(key.clone()).await.unwrap());
    assert_eq!(timers.reschedule(key.clone(), Duration::from_secs(1)).await, Err(Error::NotFound));
    // A new request for the key is a new task.
    timers.schedule_with_request_id(&key, Duration::from_secs(60), b"2".to_vec(), "req-2").await.unwrap();
    assert!(timers.contains(key).await.unwrap());
}

/// The fencing itself, driven by hand: a leader whose lease ran out and was taken by another is
/// refused, and its refused call moves neither the cursor nor any task; the new leader's call
/// does; a repeated tick moves nothing twice; every task is then handed out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_moves_neither_cursor_nor_tasks() {
    let Some(server) = Server::start() else { return };
    let name = "fenced";
    let keys = keys(name);
    let timers = builder(&server.url(), name).connect().await.expect("connect");
    let int = |reply: Reply| reply.as_int().unwrap_or(0);

    server.command(&["SET", &keys.leader(), "old:1", "PX", "300"]);
    for i in 0..20 {
        timers.schedule(format!("a{i}"), Duration::from_millis(100), vec![]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(timers.tick_with_token("old:1").await.unwrap(), "the live leader was refused");
    let cursor = int(server.command(&["GET", &keys.cursor()]));
    assert_eq!(int(server.command(&["ZCARD", &keys.ready()])), 20, "the leader's tick moved the due tasks");

    // The old leader's lease (renewed by its tick) runs out; a new leader takes over.
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    assert_eq!(server.command(&["SET", &keys.leader(), "new:2", "PX", "10000", "NX"]).as_str(), Some("OK"));
    // Due more than a tick ahead, so that a schedule places them in their slots (one due by the
    // end of the next tick goes straight to `ready`), where only a tick moves them.
    for i in 0..10 {
        timers.schedule(format!("b{i}"), TICK * 2 + Duration::from_millis(20), vec![]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(250)).await;

    assert!(!timers.tick_with_token("old:1").await.unwrap(), "the stale leader's tick was accepted");
    assert_eq!(int(server.command(&["GET", &keys.cursor()])), cursor, "a refused tick moved the cursor");
    assert_eq!(int(server.command(&["ZCARD", &keys.ready()])), 20, "a refused tick moved tasks");

    assert!(timers.tick_with_token("new:2").await.unwrap(), "the new leader was refused");
    assert!(int(server.command(&["GET", &keys.cursor()])) > cursor, "the new leader's tick did not move the cursor");
    assert_eq!(int(server.command(&["ZCARD", &keys.ready()])), 30);
    assert!(timers.tick_with_token("new:2").await.unwrap());
    assert_eq!(int(server.command(&["ZCARD", &keys.ready()])), 30, "a repeated tick moved tasks again");

    // A worker (whose own leader loop cannot win while new:2 holds the lease) hands each out once.
    let log = Log::default();
    let worker = log.worker(&timers);
    assert!(wait_until(Duration::from_secs(3), || log.distinct_keys().len() == 30).await);
    tokio::time::sleep(TICK * 4).await;
    worker.shutdown().await;
    assert_eq!(log.len(), 30, "a task was handed out twice: {:?}", log.all());
}

/// Two "leaders" with the same token tick at once, as if the fence had let both through: the
/// moves are atomic scripts, so every task is still handed out once, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tickers_hand_each_task_out_once() {
    let Some(server) = Server::start() else { return };
    let name = "tickers";
    let a = builder(&server.url(), name).lease(Duration::from_secs(30)).connect().await.expect("connect");
    let b = builder(&server.url(), name).lease(Duration::from_secs(30)).connect().await.expect("connect");
    server.command(&["SET", &keys(name).leader(), "both:1"]);
    const N: usize = 600;
    let mut items = Vec::new();
    let start = SystemTime::now();
    for i in 0..N {
        items.push((format!("t{i}"), Duration::from_millis((i as u64 * 997) % 1500), Vec::<u8>::new()));
    }
    let dues: HashMap<String, SystemTime> = items.iter().map(|(k, d, _)| (k.clone(), start + *d)).collect();
    assert!(a.schedule_many(items).await.unwrap().iter().all(Result::is_ok));

    let stop = Arc::new(AtomicBool::new(false));
    let mut tickers = Vec::new();
    for timers in [a.clone(), b.clone(), a.clone(), b.clone()] {
        let stop = stop.clone();
        tickers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                assert!(timers.tick_with_token("both:1").await.unwrap(), "the token is the leader's");
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }));
    }
    // Workers whose own leader loops cannot win (the leader key is taken): they only claim.
    let log = Log::default();
    let workers = [log.worker(&a), log.worker(&b), log.worker(&a)];
    assert!(wait_until(Duration::from_secs(5), || log.len() >= N).await, "{} of {N}", log.len());
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tickers {
        t.await.unwrap();
    }
    for w in workers {
        w.shutdown().await;
    }
    let seen = log.all();
    assert_eq!(seen.len(), N, "some task was handed out twice");
    for s in &seen {
        assert!(s.at + SLACK >= dues[&s.key], "{} early", s.key);
        assert_eq!(s.attempt, 1);
    }
    // A stale token is refused.
    assert!(!a.tick_with_token("stale:0").await.unwrap());
}
