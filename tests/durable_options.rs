//! A task's own retry settings (`TaskOptions`, given by `DurableScheduler::with_options`) on the
//! store the run selects (`support/store.rs`: a real `redis-server` started for each test, or a
//! SQLite file of the embedded store): a task allowed one attempt dies at its first failure while
//! the node allows five; a task with its own backoff is retried after it, one without after the
//! node's; settings no task may have are refused.
//!
//! Run with `cargo test --features redis --test durable_options` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, SystemTime};

use support::durable::{builder, wait_until, Log};
use support::TestStore;
use tokio_timewheel::durable::{Task, TaskOptions, TaskState, MAX_BACKOFF};
use tokio_timewheel::Error;

/// A handler that records each delivery and fails it.
fn failing(log: &Log) -> impl Fn(Task) -> std::future::Ready<Result<(), String>> + Send + Sync + 'static {
    let log = log.clone();
    move |task: Task| {
        log.record(&task, 0);
        std::future::ready(Err(format!("attempt {} failed", task.attempt())))
    }
}

/// The node allows 5 attempts (100 ms apart at first): a task scheduled with `max_attempts(1)`
/// is delivered once and is a dead letter after that one failure, while a task without settings
/// of its own, failing the same way, is delivered five times before it dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_allowed_one_attempt_dies_at_its_first_failure_while_the_node_allows_five() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "one-attempt").connect().await.expect("connect");
    let once = timers.with_options(TaskOptions::new().max_attempts(1)).expect("valid options");
    once.schedule("once", Duration::ZERO, "x").await.unwrap();
    timers.schedule("plain", Duration::ZERO, "y").await.unwrap();
    let log = Log::default();
    let worker = timers.run(failing(&log));

    let dead = |timers: &tokio_timewheel::durable::DurableScheduler| {
        let timers = timers.clone();
        async move { timers.dead_letters(10).await.unwrap() }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while dead(&timers).await.len() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown().await;

    let letters = dead(&timers).await;
    let attempts =
        |key: &str| letters.iter().find(|d| d.key() == key).map(|d| (d.attempts(), d.last_error().to_string()));
    assert_eq!(attempts("once"), Some((1, "attempt 1 failed".to_string())), "{letters:?}");
    assert_eq!(attempts("plain"), Some((5, "attempt 5 failed".to_string())), "{letters:?}");
    let delivered = |key: &str| log.of(key).iter().map(|h| h.attempt).collect::<Vec<_>>();
    assert_eq!(delivered("once"), [1], "delivered once, never retried");
    assert_eq!(delivered("plain"), [1, 2, 3, 4, 5]);
}

/// The node waits 10 s before a first retry; a task with its own backoff of 300 ms is retried
/// after that, and one without waits the node's 10 s. The due times written in Redis are exact
/// (Redis's clock when the failure was recorded, plus the backoff), so the bounds are those of
/// a failure's round trip; the retry itself comes after its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_its_own_backoff_is_retried_after_it_and_one_without_after_the_nodes() {
    let Some(store) = TestStore::start() else { return };
    let timers =
        builder(&store.url(), "own-backoff").backoff(Duration::from_secs(10)).connect().await.expect("connect");
    let own = Duration::from_millis(300);
    let quick = timers.with_options(TaskOptions::new().backoff(own)).expect("valid options");
    quick.schedule("quick", Duration::ZERO, "x").await.unwrap();
    timers.schedule("plain", Duration::ZERO, "y").await.unwrap();
    let log = Log::default();
    let worker = timers.run(failing(&log));

    // The node's backoff: the retry of `plain` is due 10 s after its first failure.
    assert!(wait_until(Duration::from_secs(5), || log.of("plain").len() == 1).await, "plain delivered");
    let first = log.of("plain")[0].clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let waiting = loop {
        let task = timers.get("plain").await.unwrap().expect("pending");
        if task.last_error().is_some() {
            break task;
        }
        assert!(tokio::time::Instant::now() < deadline, "plain's failure not recorded: {task:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!((waiting.state(), waiting.attempt()), (TaskState::Waiting, 1));
    let wait = waiting.due().duration_since(first.claimed).expect("due after the claim");
    assert!(wait >= Duration::from_secs(10) && wait < Duration::from_secs(12), "the node's backoff: {wait:?}");

    // Its own backoff: retried 300 ms after its failure, long before the node's 10 s.
    assert!(wait_until(Duration::from_secs(5), || log.of("quick").len() >= 2).await, "quick retried");
    worker.shutdown().await;
    let quick = log.of("quick");
    let (first, second) = (&quick[0], &quick[1]);
    assert_eq!((first.attempt, second.attempt), (1, 2));
    // The retry's due time, as Redis wrote it: its failure was recorded after its first claim.
    let wait = second.due.duration_since(first.claimed).expect("due after the claim");
    assert!(wait >= own && wait < Duration::from_secs(2), "its own backoff: {wait:?}");
    assert!(second.claimed >= second.due, "not handed out before its due time");
    if SystemTime::now() < waiting.due() {
        assert_eq!(log.of("plain").len(), 1, "plain still waits for the node's backoff");
    }
}

/// Settings no task may have are refused with what to do instead, and schedule nothing: zero
/// attempts, a backoff over the longest a retry waits. The bounds themselves are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_no_task_may_have_are_refused() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "bad-options").connect().await.expect("connect");
    let zero = timers.with_options(TaskOptions::new().max_attempts(0)).map(|_| ());
    assert!(matches!(&zero, Err(Error::Invalid(why)) if why.contains("at least 1")), "{zero:?}");
    let long = timers.with_options(TaskOptions::new().backoff(MAX_BACKOFF + Duration::from_millis(1))).map(|_| ());
    assert!(matches!(&long, Err(Error::Invalid(why)) if why.contains("MAX_BACKOFF")), "{long:?}");
    assert!(timers.is_empty().await.unwrap());

    let edge =
        timers.with_options(TaskOptions::new().max_attempts(1).backoff(MAX_BACKOFF)).expect("the bounds are valid");
    edge.schedule("edge", Duration::from_secs(60), "x").await.unwrap();
    assert!(edge.contains("edge").await.unwrap());
}

/// Every call of a handle made by `with_options` that makes a task gives it the settings, and
/// `get` reads them back; a task made by the node's handle has none, and a `schedule_or_reset`
/// that moves a pending task, or a `reschedule`, leaves the task's own as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_of_the_handle_gives_its_tasks_the_settings_and_get_reads_them() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "all-calls").connect().await.expect("connect");
    let backoff = Duration::from_millis(250);
    let own = timers.with_options(TaskOptions::new().max_attempts(2).backoff(backoff)).expect("valid options");
    let hour = Duration::from_secs(3600);
    own.schedule("schedule", hour, "x").await.unwrap();
    own.schedule_at("schedule_at", SystemTime::now() + hour, "x").await.unwrap();
    for result in own.schedule_many([("many-1", hour, "x"), ("many-2", hour, "x")]).await.unwrap() {
        result.unwrap();
    }
    assert!(own.schedule_or_reset("or_reset", hour, "x").await.unwrap());
    own.schedule_repeating("repeating", hour, tokio_timewheel::Repeat::Forever, "x").await.unwrap();
    own.schedule_recurring("recurring", tokio_timewheel::durable::Recurrence::every(hour), "x").await.unwrap();
    assert!(own.upsert_recurring("upserted", tokio_timewheel::durable::Recurrence::every(hour), "x").await.unwrap());
    timers.schedule("plain", hour, "x").await.unwrap();

    let settings = |key: &'static str| {
        let timers = timers.clone();
        async move {
            let task = timers.get(key).await.unwrap().unwrap_or_else(|| panic!("{key} pending"));
            (task.max_attempts(), task.backoff())
        }
    };
    for key in ["schedule", "schedule_at", "many-1", "many-2", "or_reset", "repeating", "recurring", "upserted"] {
        assert_eq!(settings(key).await, (Some(2), Some(backoff)), "{key}");
    }
    assert_eq!(settings("plain").await, (None, None));

    // Moves keep the task's own, whichever handle moves it.
    assert!(!timers.schedule_or_reset("or_reset", hour * 2, "y").await.unwrap(), "moved");
    timers.reschedule("schedule", hour * 2).await.unwrap();
    assert!(!own.schedule_or_reset("plain", hour * 2, "y").await.unwrap(), "moved");
    assert_eq!(settings("or_reset").await, (Some(2), Some(backoff)));
    assert_eq!(settings("schedule").await, (Some(2), Some(backoff)));
    assert_eq!(settings("plain").await, (None, None));
    // An upsert replaces them with its own handle's: none.
    assert!(!timers
        .upsert_recurring("upserted", tokio_timewheel::durable::Recurrence::every(hour), "y")
        .await
        .unwrap());
    assert_eq!(settings("upserted").await, (None, None));
}
