//! What a durable wheel's leader logs when it cannot take the lead, loses it, or cannot reach
//! Redis: the reason it can tell, and the setting that bounded a failed call. A node that
//! restarts alone while its previous run's lead lasts is told another node leads for now; a node
//! alone whose lead lapsed (its lease ran out while Redis restarted or was out of reach) is told
//! so, not that another node ticks; one that did lose the lead to another node is told that.
//!
//! Run with `cargo test --features redis --test durable_leader_logs`. Without a `redis-server`
//! the test prints a skip note and passes, except under `CI=true`, where it fails. It needs Redis
//! itself (it writes the leader's key, `DEBUG SLEEP`): on Redis only, it skips when
//! `TIMEWHEEL_TEST_STORE` names another store (`support/store.rs`).
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::durable::{keys, leader_value, wait_until};
use support::logs::Captured;
use support::redis_server::RedisServer;
use tokio_timewheel::durable::{DurableScheduler, Task};

const NAME: &str = "leader-logs";

/// Waits (up to `limit`) for a line logged into `captured` that holds every one of `parts`, and
/// returns it.
async fn line_with(captured: &Captured, parts: &[&str], limit: Duration) -> String {
    let found = || captured.text().lines().find(|l| parts.iter().all(|p| l.contains(p))).map(str::to_owned);
    wait_until(limit, || found().is_some()).await;
    found().unwrap_or_else(|| panic!("no line with {parts:?} within {limit:?} in:\n{}", captured.text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_says_why_it_lost_the_lead_and_which_setting_bounded_a_failed_call() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).init();
    let Some(server) = RedisServer::start() else { return };
    let timers = DurableScheduler::builder(server.url(), NAME)
        .tick(Duration::from_millis(50))
        .lease(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect");
    let leader = keys(NAME).leader();

    // A node that restarts alone: its previous run's lead, never given up, still has a second to
    // run. The node says another node leads for now, and takes the lead once that runs out.
    server.command(&["SET", &leader, "previous-run.0:1", "PX", "1000"]);
    let worker = timers.run(|_task: Task| async { Ok::<(), String>(()) });
    worker.ready().await;
    let line = line_with(&captured, &["INFO", "another node leads"], Duration::from_secs(10)).await;
    assert!(line.contains("this node's previous run"), "{line}");
    assert!(wait_until(Duration::from_secs(10), || worker.is_leader()).await, "the only node never led");
    assert!(!captured.text().contains("lost the leadership"), "{}", captured.text());

    // The lead lapses with no other node about (as when Redis restarts without the key, or is
    // out of reach for longer than the lease): the node takes it back and says it lapsed.
    server.command(&["DEL", &leader]);
    let line = line_with(&captured, &["WARN", "leadership lapsed"], Duration::from_secs(10)).await;
    assert!(line.contains("no other node held it") && line.contains("2s"), "{line}");
    assert!(!captured.text().contains("lost the leadership"), "a node alone was told it lost:\n{}", captured.text());
    assert!(wait_until(Duration::from_secs(10), || worker.is_leader()).await, "the lead never came back");

    // Another node takes the lead (a token of a node of its own, for a second): this one says so.
    server.command(&["SET", &leader, "another-node.0:99", "PX", "1000"]);
    let line = line_with(&captured, &["WARN", "lost the leadership to another node"], Duration::from_secs(10)).await;
    assert!(line.contains("bids again"), "{line}");
    assert!(wait_until(Duration::from_secs(10), || worker.is_leader()).await, "the lead never came back");
    assert!(leader_value(&server, NAME).is_some_and(|t| t != "another-node.0:99"));

    // Redis stops answering for longer than the response timeout (`DEBUG SLEEP`): the leader's
    // failed tick says it had no answer within the response timeout, not the connect timeout
    // (3 s here).
    server.command_detached(&["DEBUG", "SLEEP", "1.5"]);
    let line = line_with(&captured, &["ticking failed", "timed out"], Duration::from_secs(10)).await;
    assert!(line.contains("within 500ms (the response timeout"), "{line}");
    assert!(
        !captured.text().contains("(the connect timeout"),
        "a call bounded by the response timeout:\n{}",
        captured.text()
    );
    assert!(wait_until(Duration::from_secs(10), || worker.is_leader()).await, "the lead never came back");
    worker.shutdown().await;
}
