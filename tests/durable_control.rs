//! Controlling a running durable wheel, against a real `redis-server` started for each test (see
//! `support/redis_server.rs`): what `get` and `due_next` say of a task overdue while no leader
//! ticks.
//!
//! Run with `cargo test --features redis --test durable_control`. Without a `redis-server` the
//! tests print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::durable::builder;
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
