//! What the durable mode answers to bad input and misuse, in words a newcomer can act on: one rule
//! for keys in every call (empty, or over `MAX_KEY_LEN` bytes: `Error::Invalid`, nothing sent);
//! "task", not "timer", and the key in `DuplicateKey`; the real reason a cron that never matches
//! has no run, with times in RFC 3339; a clear refusal to run on Tokio's paused clock; and a
//! `Task` built by hand for a handler's unit test.
//!
//! On the store the run selects (`support/store.rs`: a real `redis-server`, or a SQLite file of
//! the embedded store). Run with `cargo test --features redis,cron --test durable_errors` (on
//! Redis), or with `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, SystemTime};

use support::durable::builder;
use support::TestStore;
use tokio_timewheel::durable::{Recurrence, Task};
use tokio_timewheel::{Error, MAX_KEY_LEN};

fn invalid<T: std::fmt::Debug>(got: Result<T, Error>) -> String {
    match got {
        Err(Error::Invalid(why)) => why,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

/// Every durable call that takes a key refuses an empty one and one over `MAX_KEY_LEN` bytes
/// with `Error::Invalid`, before anything reaches Redis; a key of `MAX_KEY_LEN` bytes is taken.
#[tokio::test]
async fn every_call_refuses_an_empty_or_overlong_key_alike() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "keys").connect().await.expect("connect");
    let long = "k".repeat(MAX_KEY_LEN + 1);
    let sec = Duration::from_secs(1);
    let later = SystemTime::now() + Duration::from_secs(60);
    let every = || Recurrence::every(Duration::from_secs(60));
    for key in ["", long.as_str()] {
        let mut why = vec![
            invalid(timers.schedule(key, sec, "p").await),
            invalid(timers.schedule_at(key, later, "p").await),
            invalid(timers.schedule_or_reset(key, sec, "p").await),
            invalid(timers.schedule_recurring(key, every(), "p").await),
            invalid(timers.upsert_recurring(key, every(), "p").await),
            invalid(timers.cancel(key).await),
            invalid(timers.cancel_many([key]).await),
            invalid(timers.reschedule(key, sec).await),
            invalid(timers.reschedule_at(key, later).await),
            invalid(timers.get(key).await),
            invalid(timers.deadline(key).await),
            invalid(timers.contains(key).await),
            invalid(timers.requeue_dead(key).await),
            invalid(timers.delete_dead(key).await),
            invalid(timers.cancel_running(key).await),
        ];
        let many = timers.schedule_many([(key, sec, b"p".to_vec())]).await.expect("the call goes");
        why.push(invalid(many.into_iter().next().expect("one answer")));
        for why in why {
            let expected = if key.is_empty() { "the key is empty" } else { "over the maximum of 4096" };
            assert!(why.contains(expected), "{why}");
        }
    }
    assert_eq!(timers.stats().await.unwrap().scheduled, 0, "nothing reached Redis");
    let longest = "k".repeat(MAX_KEY_LEN);
    timers.schedule(&longest, Duration::from_secs(60), "p").await.expect("a key of MAX_KEY_LEN bytes");
    assert!(timers.cancel(&longest).await.unwrap());
}

/// `DuplicateKey` names the key and a task (not a timer); `NotFound` names a running task as one
/// of its reasons.
#[tokio::test]
async fn errors_name_the_key_and_say_task() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "words").connect().await.expect("connect");
    timers.schedule("order-42:review", Duration::from_secs(60), "p").await.unwrap();
    let duplicate = timers.schedule("order-42:review", Duration::from_secs(60), "p").await.unwrap_err();
    assert_eq!(duplicate, Error::DuplicateKey("order-42:review".into()));
    let text = duplicate.to_string();
    assert!(text.contains("\"order-42:review\"") && text.contains("task"), "{text}");
    let missing = timers.reschedule("order-43:review", Duration::from_secs(1)).await.unwrap_err();
    assert_eq!(missing, Error::NotFound);
    assert!(missing.to_string().contains("a worker is running it"), "{missing}");
}

/// A cron expression that never matches (30 February) is refused for that reason, in both modes,
/// not for an end it does not have; an end that has passed says so, with its time in RFC 3339.
#[cfg(feature = "cron")]
#[tokio::test]
async fn a_cron_that_never_matches_says_so() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "never").connect().await.expect("connect");
    let never = Recurrence::cron("0 3 30 2 *").unwrap();
    let why = invalid(timers.schedule_recurring("report:feb30", never.clone(), "p").await);
    assert!(why.contains("matches no time that exists") && !why.contains("end"), "{why}");
    assert!(!why.contains("tv_sec") && why.contains('T') && why.contains('Z'), "RFC 3339: {why}");
    let in_process = tokio_timewheel::Scheduler::builder().start().unwrap();
    let why_here = invalid(in_process.schedule_recurring("report:feb30", never, |_| async {}).await);
    assert!(why_here.contains("matches no time that exists"), "{why_here}");

    let ended = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let past = Recurrence::every(Duration::from_secs(60)).until(ended);
    let why = invalid(timers.upsert_recurring("sync:past", past, "p").await);
    assert!(why.contains("its end (2023-11-14T22:13:20.000Z) has passed"), "{why}");
}

/// On Tokio's paused clock the durable mode says it cannot run there, at once, rather than
/// timing out.
#[tokio::test(start_paused = true)]
async fn connecting_on_paused_time_says_what_to_do() {
    let started = std::time::Instant::now();
    // No server is needed: the check comes before any connection.
    let Err(Error::Invalid(why)) = builder("redis://127.0.0.1:1/", "paused").connect().await else {
        panic!("expected Error::Invalid")
    };
    assert!(why.contains("paused") && why.contains("#[tokio::test]"), "{why}");
    assert!(started.elapsed() < Duration::from_secs(1), "answered at once");
}

/// A handler can be unit-tested on a `Task` built by hand.
#[tokio::test]
async fn a_handler_is_unit_tested_on_a_task_built_by_hand() {
    async fn handler(task: Task) -> Result<String, String> {
        let token = task.cancel_token();
        if token.is_cancelled() {
            return Err("cancelled".into());
        }
        let late = task.claimed_at().duration_since(task.due()).unwrap_or_default();
        Ok(format!(
            "{} #{} {} late {}s",
            task.key(),
            task.attempt(),
            String::from_utf8_lossy(task.payload()),
            late.as_secs()
        ))
    }
    let due = SystemTime::now() - Duration::from_secs(5);
    let task =
        Task::new("order-42:review", "42").with_attempt(2).with_due(due).with_claimed_at(due + Duration::from_secs(3));
    assert_eq!(handler(task.clone()).await.unwrap(), "order-42:review #2 42 late 3s");
    let fresh = Task::new("k", Vec::new());
    assert_eq!((fresh.attempt(), fresh.due() <= fresh.claimed_at()), (1, true));
    task.cancel_token().cancel();
    assert_eq!(handler(task).await, Err("cancelled".to_string()), "a clone shares the token");
}
