//! Looking at a durable wheel and keeping it tidy, against a real `redis-server`: `get` and
//! `deadline` through every state a task goes through, deleting dead letters, and
//! `schedule_or_reset` raced by two nodes.
//!
//! Run with `cargo test --features redis --test durable_inspect`. Without a `redis-server` the
//! tests print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::durable::wait_until;
use support::redis_server::RedisServer;
use tokio::sync::Notify;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task, TaskState};
use tokio_timewheel::Error;

fn builder(server: &RedisServer, name: &str) -> DurableBuilder {
    DurableScheduler::builder(server.url(), name)
        .tick(Duration::from_millis(50))
        .lease(Duration::from_secs(10))
        .max_attempts(1)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(3))
}

/// `get` tells waiting, ready, running and dead apart, with the payload, the due time, the
/// deliveries so far and the last error; `deadline` answers the pending task's due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_deadline_follow_a_task_through_its_states() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server, "inspect").connect().await.expect("connect");
    assert_eq!(timers.get("nothing").await.unwrap(), None);
    assert_eq!(timers.deadline("nothing").await.unwrap(), None);

    // Waiting: due in an hour.
    let before = SystemTime::now();
    timers.schedule("later", Duration::from_secs(3600), "for later").await.unwrap();
    let later = timers.get("later").await.unwrap().expect("pending");
    assert_eq!((later.key(), later.payload(), later.attempt()), ("later", &b"for later"[..], 0));
    assert_eq!(later.state(), TaskState::Waiting);
    assert_eq!(later.last_error(), None);
    let due = later.due().duration_since(before).unwrap();
    assert!(due >= Duration::from_secs(3600) - Duration::from_millis(1), "{due:?}");
    assert!(due < Duration::from_secs(3600) + Duration::from_secs(1), "{due:?}");
    assert_eq!(timers.deadline("later").await.unwrap(), Some(later.due()));

    // Ready: due long ago, no worker yet.
    let past = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    timers.schedule_at("now", past, "at once").await.unwrap();
    let now = timers.get("now").await.unwrap().expect("pending");
    assert_eq!((now.state(), now.due()), (TaskState::Ready, past));

    // Running, then dead (one attempt allowed): the handler waits until told to fail.
    let release = Arc::new(Notify::new());
    let worker = timers.run({
        let release = release.clone();
        move |task: Task| {
            let release = release.clone();
            async move {
                if task.key() == "now" {
                    release.notified().await;
                }
                Err::<(), _>(std::io::Error::other(format!("{} failed", task.key())))
            }
        }
    });
    let mut running = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            running = state_of(&timers, "now");
            running == Some(TaskState::Running)
        })
        .await,
        "never seen running: {running:?}"
    );
    let seen = timers.get("now").await.unwrap().unwrap();
    assert_eq!((seen.state(), seen.attempt()), (TaskState::Running, 1));
    assert_eq!(timers.deadline("now").await.unwrap(), Some(past), "a running task answers its due time");
    release.notify_one();
    assert!(wait_until(Duration::from_secs(5), || state_of(&timers, "now") == Some(TaskState::Dead)).await);
    let dead = timers.get("now").await.unwrap().unwrap();
    assert_eq!((dead.attempt(), dead.last_error(), dead.payload()), (1, Some("now failed"), &b"at once"[..]));
    assert_eq!(dead.due(), past);
    assert_eq!(timers.deadline("now").await.unwrap(), None, "a dead letter is not pending");
    worker.shutdown().await;

    // A dead letter deleted is gone; a second delete finds nothing.
    assert_eq!(timers.dead_letters(10).await.unwrap().len(), 1);
    assert!(timers.delete_dead("now").await.unwrap());
    assert!(!timers.delete_dead("now").await.unwrap());
    assert_eq!(timers.get("now").await.unwrap(), None);
    assert!(timers.dead_letters(10).await.unwrap().is_empty());
    assert_eq!(timers.stats().await.unwrap().dead, 0);
}

/// Reads a task's state from inside a synchronous `wait_until` condition.
fn state_of(timers: &DurableScheduler, key: &str) -> Option<TaskState> {
    let timers = timers.clone();
    let key = key.to_string();
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(async move { timers.get(&key).await.ok().flatten() })
    })
    .map(|t| t.state())
}

/// Two nodes race `schedule_or_reset` on the same keys: each key is scheduled once (one `true`
/// per key), the other call moves it (`false`), and every task keeps the payload of the call that
/// scheduled it, due at the later call's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_or_reset_raced_by_two_nodes_schedules_once() {
    let Some(server) = RedisServer::start() else { return };
    let a = builder(&server, "upsert").connect().await.expect("connect a");
    let b = builder(&server, "upsert").connect().await.expect("connect b");
    const KEYS: usize = 200;
    let race = |timers: DurableScheduler, who: &'static str| {
        tokio::spawn(async move {
            let mut fresh = Vec::new();
            for i in 0..KEYS {
                fresh.push(timers.schedule_or_reset(format!("k{i}"), Duration::from_secs(60), who).await.unwrap());
            }
            fresh
        })
    };
    let (fa, fb) = (race(a.clone(), "a"), race(b.clone(), "b"));
    let (fa, fb) = (fa.await.unwrap(), fb.await.unwrap());
    for i in 0..KEYS {
        assert!(fa[i] ^ fb[i], "key k{i}: a scheduled {}, b scheduled {}", fa[i], fb[i]);
        let task = a.get(format!("k{i}")).await.unwrap().expect("pending");
        assert_eq!(task.payload(), if fa[i] { b"a" } else { b"b" }, "k{i} lost the payload it was scheduled with");
    }
    assert_eq!(a.len().await.unwrap(), KEYS);
    assert_eq!(a.stats().await.unwrap().scheduled, KEYS as u64);

    // A later reset moves the due time and keeps the payload.
    let before = a.deadline("k0").await.unwrap().unwrap();
    assert!(!b.schedule_or_reset("k0", Duration::from_secs(600), "c").await.unwrap());
    let after = a.get("k0").await.unwrap().unwrap();
    assert!(after.due() > before + Duration::from_secs(500), "{:?} -> {:?}", before, after.due());
    assert_ne!(after.payload(), b"c");
    // Bad input is refused before anything is sent.
    assert!(matches!(a.schedule_or_reset("", Duration::from_secs(1), "x").await, Err(Error::Invalid(_))));
}
