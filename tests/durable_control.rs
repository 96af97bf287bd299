//! Controlling a running durable wheel, against a real `redis-server` started for each test (see
//! `support/redis_server.rs`): what `get` and `due_next` say of a task overdue while no leader
//! ticks; pausing and resuming the workers' claims.
//!
//! Run with `cargo test --features redis --test durable_control`. Without a `redis-server` the
//! tests print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, Instant};

use support::durable::{builder, wait_until, Log, TICK};
use support::redis_server::RedisServer;
use tokio_timewheel::durable::TaskState;

/// With no worker running, nothing ticks: a task whose due time passed is still waiting, and
/// `get` and `due_next` say how long it is overdue; a task not yet due is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_due_while_no_leader_ticks_reads_as_overdue() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "overdue").connect().await.expect("connect");
    timers.schedule("late", Duration::from_millis(50), "x").await.unwrap();
    timers.schedule("later", Duration::from_secs(3600), "y").await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let late = timers.get("late").await.unwrap().expect("pending");
    assert_eq!(late.state(), TaskState::Waiting, "no leader ticked");
    let by = late.overdue_by().expect("overdue");
    // Due 50 ms after the call, read 400 ms after it: 350 ms overdue, give or take a tick.
    assert!(by >= Duration::from_millis(300) && by < Duration::from_secs(5), "{by:?}");
    assert!(late.is_overdue());
    let later = timers.get("later").await.unwrap().expect("pending");
    assert_eq!((later.state(), later.overdue_by()), (TaskState::Waiting, None));

    let page = timers.due_next(10, None).await.unwrap();
    let keys: Vec<(&str, bool)> = page.tasks().iter().map(|t| (t.key(), t.is_overdue())).collect();
    assert_eq!(keys, [("late", true), ("later", false)]);
    assert!(page.tasks()[0].overdue_by().unwrap() >= by, "read later, overdue longer");
}

/// How much later than a tick a test lets a wake-up come, for a loaded machine.
const LOAD_MARGIN: Duration = Duration::from_millis(200);

/// A pause holds across a restart of every node: while tasks fall due the leader ticks them
/// ready, and no worker, old or new, claims one. `resume` wakes the idle worker at once: it
/// claims them within a tick (plus a margin for load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_a_restart_of_every_node_and_resume_hands_out_within_a_tick() {
    let Some(server) = RedisServer::start() else { return };
    let log = Log::default();
    {
        let timers = builder(&server.url(), "pause").connect().await.expect("connect");
        let worker = log.worker(&timers);
        worker.ready().await;
        timers.pause().await.unwrap();
        assert!(timers.is_paused().await.unwrap());
        for i in 0..20u64 {
            timers.schedule(format!("t{i}"), Duration::from_millis(100 + 10 * i), "x").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        worker.shutdown().await;
    }
    // Every node again: a new connection and a new worker, which leads now.
    let timers = builder(&server.url(), "pause").connect().await.expect("connect");
    let worker = log.worker(&timers);
    worker.ready().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while timers.stats().await.unwrap().ready < 20 && Instant::now() < deadline {
        tokio::time::sleep(TICK).await;
    }
    tokio::time::sleep(TICK * 4).await;
    let stats = timers.stats().await.unwrap();
    assert!(stats.paused && timers.is_paused().await.unwrap());
    assert_eq!((stats.ready, log.len()), (20, 0), "ready and waiting, none handed out");

    let resumed = Instant::now();
    timers.resume().await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || log.len() == 20).await, "{} handled", log.len());
    let took = resumed.elapsed();
    eprintln!("resume to the last of 20 handled: {took:?}");
    assert!(took < TICK + LOAD_MARGIN, "{took:?}");
    assert!(!timers.is_paused().await.unwrap() && !timers.stats().await.unwrap().paused);
    worker.shutdown().await;
}
