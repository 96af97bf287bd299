//! The durable wheel's coalescing of the calls in flight, on the store the run selects
//! (`support/store.rs`: a real `redis-server`, or a SQLite file of the embedded store):
//! concurrent `schedule`, `cancel` and `reschedule` calls of one handle (and its clones) go to
//! the store as few script calls, each caller getting its own answer and its own error; a lone
//! call goes at once, as one script call of its own. On Redis, script calls are counted with
//! `INFO commandstats` (`EVALSHA`), and no worker runs, so every script call counted is the
//! test's; the embedded store has no such count, so there the answers and what the wheel holds
//! are checked. A failed script call (Redis killed) and a lost reply (`DEBUG SLEEP`) are
//! Redis's.
//!
//! Run with `cargo test --features redis --test durable_coalescing` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use support::redis_server::RedisServer;
use support::TestStore;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler};
use tokio_timewheel::Error;

const HOUR: Duration = Duration::from_secs(3600);

/// The tests' settings (`support::durable::builder`) with a tick of 100 ms, 64 slots and a
/// response timeout of a second.
fn builder(url: &str, name: &str) -> DurableBuilder {
    support::durable::builder(url, name)
        .tick(Duration::from_millis(100))
        .slots(64)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(3))
}

/// The script calls the server has run so far; `None` on a store other than Redis, which does not
/// count them.
fn script_calls(store: &TestStore) -> Option<u64> {
    let server = store.redis()?;
    let calls = tokio::task::block_in_place(|| server.command_calls());
    Some(calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0))
}

/// The script calls run since `before` (a reading of [`script_calls`]), on Redis.
fn script_calls_since(store: &TestStore, before: Option<u64>) -> Option<u64> {
    Some(script_calls(store)? - before?)
}

/// The payload of the pending task `key`, as `get` reads it.
async fn payload_of(timers: &DurableScheduler, key: &str) -> Option<String> {
    let task = timers.get(key).await.unwrap()?;
    Some(String::from_utf8(task.payload().to_vec()).unwrap())
}

/// The due time of the pending task `key` in ms since the Unix epoch, as `get` reads it.
async fn due_ms_of(timers: &DurableScheduler, key: &str) -> Option<u64> {
    let task = timers.get(key).await.unwrap()?;
    Some(task.due().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64)
}

/// Many concurrent schedules, from clones of one handle, two callers for most keys and some keys
/// pending already: each key is scheduled once, by the caller told `Ok` (its payload is the one
/// stored), and every other caller is told its own `DuplicateKey`. Fewer script calls than calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_schedules_each_get_their_own_answer() {
    let Some(store) = TestStore::start() else { return };
    let name = "many";
    let timers = builder(&store.url(), name).connect().await.expect("connect");
    for i in 0..10 {
        timers.schedule(format!("pre-{i}"), HOUR, "pre").await.unwrap();
    }
    let before = script_calls(&store);
    let mut calls = Vec::new();
    for i in 0..100 {
        for caller in ["a", "b"] {
            calls.push((format!("k-{i}"), format!("{caller}-{i}")));
        }
    }
    calls.extend((0..10).map(|i| (format!("pre-{i}"), "again".to_string())));
    let answers = join_all(calls.iter().enumerate().map(|(n, (key, payload))| {
        let timers = timers.clone();
        async move { timers.schedule(key, HOUR + Duration::from_millis(n as u64), payload.as_bytes()).await }
    }))
    .await;
    let sent = script_calls_since(&store, before);

    let mut winners: HashMap<&str, &str> = HashMap::new();
    for ((key, payload), answer) in calls.iter().zip(&answers) {
        match answer {
            Ok(()) => assert!(winners.insert(key, payload).is_none(), "{key} was scheduled twice"),
            Err(Error::DuplicateKey(k)) => assert_eq!(k, key, "a caller was told another's duplicate"),
            Err(e) => panic!("schedule of {key}: {e}"),
        }
    }
    assert_eq!(winners.len(), 100, "each new key scheduled once, no pending one again");
    for (key, payload) in &winners {
        assert_eq!(payload_of(&timers, key).await.as_deref(), Some(*payload), "{key}: not the winner's payload");
    }
    for i in 0..10 {
        assert_eq!(payload_of(&timers, &format!("pre-{i}")).await.as_deref(), Some("pre"));
    }
    assert_eq!(timers.len().await.unwrap(), 110);
    if let Some(sent) = sent {
        assert!(sent < calls.len() as u64 / 2, "{} concurrent calls made {sent} script calls", calls.len());
    }
}

/// Calls refused by their checks (an empty key, a payload over the maximum) fail alone, before
/// they are queued: the calls around them are scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_call_fails_only_its_caller() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "bad").max_payload(16).connect().await.expect("connect");
    let mut calls: Vec<(String, Vec<u8>)> = (0..50).map(|i| (format!("ok-{i}"), b"small".to_vec())).collect();
    calls.insert(10, (String::new(), b"x".to_vec()));
    calls.insert(30, ("big".to_string(), vec![0; 17]));
    let answers = join_all(calls.iter().map(|(key, payload)| timers.schedule(key, HOUR, payload.clone()))).await;
    for ((key, _), answer) in calls.iter().zip(&answers) {
        match key.as_str() {
            "" | "big" => assert!(matches!(answer, Err(Error::Invalid(_))), "{key:?}: {answer:?}"),
            _ => assert_eq!(answer, &Ok(()), "{key}"),
        }
    }
    assert_eq!(timers.len().await.unwrap(), 50);
    assert!(!timers.contains("big").await.unwrap());
}

/// Concurrent cancels (two callers for some keys, keys never scheduled) and reschedules (each to a
/// time of its own, keys never scheduled): each caller gets its own answer, and each task is where
/// its own caller moved it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cancels_and_reschedules_each_get_their_own_answer() {
    let Some(store) = TestStore::start() else { return };
    let name = "moves";
    let timers = builder(&store.url(), name).connect().await.expect("connect");
    let items = (0..60).map(|i| (format!("t-{i}"), HOUR, Vec::new()));
    assert!(timers.schedule_many(items).await.unwrap().iter().all(Result::is_ok));
    let base_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + 2 * 3_600_000;
    let at = |i: u64| UNIX_EPOCH + Duration::from_millis(base_ms + i * 1000);

    let before = script_calls(&store);
    let cancel_keys: Vec<String> = (0..30)
        .flat_map(|i| [format!("t-{i}"), format!("t-{i}")])
        .chain((0..10).map(|i| format!("none-{i}")))
        .collect();
    let move_keys: Vec<String> =
        (30..60).map(|i| format!("t-{i}")).chain((0..10).map(|i| format!("gone-{i}"))).collect();
    let (cancels, moves) = tokio::join!(
        join_all(cancel_keys.iter().map(|key| timers.cancel(key))),
        join_all(move_keys.iter().enumerate().map(|(i, key)| timers.reschedule_at(key, at(i as u64)))),
    );
    let sent = script_calls_since(&store, before);

    let mut cancelled: HashMap<&str, usize> = HashMap::new();
    for (key, answer) in cancel_keys.iter().zip(cancels) {
        if answer.unwrap_or_else(|e| panic!("cancel of {key}: {e}")) {
            *cancelled.entry(key).or_default() += 1;
        }
    }
    assert_eq!(cancelled.len(), 30, "{cancelled:?}");
    assert!(cancelled.iter().all(|(key, &n)| n == 1 && key.starts_with("t-")), "{cancelled:?}");
    for (i, (key, answer)) in move_keys.iter().zip(moves).enumerate() {
        if key.starts_with("gone-") {
            assert_eq!(answer, Err(Error::NotFound), "{key}");
        } else {
            assert_eq!(answer, Ok(()), "{key}");
            let due = due_ms_of(&timers, key).await;
            assert_eq!(due, Some(base_ms + i as u64 * 1000), "{key} is not where its caller moved it");
        }
    }
    assert_eq!(timers.len().await.unwrap(), 30);
    let calls = (cancel_keys.len() + move_keys.len()) as u64;
    if let Some(sent) = sent {
        assert!(sent < calls / 2, "{calls} concurrent calls made {sent} script calls");
    }
}

/// A lone call is not held back for company: calls made one after the other make one script
/// call each, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_call_goes_at_once_as_its_own_script_call() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "lone").connect().await.expect("connect");
    // Each script once first: the first call of a script may load it (`NOSCRIPT`, then again).
    timers.schedule("warm", HOUR, "").await.unwrap();
    timers.reschedule("warm", HOUR).await.unwrap();
    assert!(timers.cancel("warm").await.unwrap());

    const N: u64 = 20;
    let before = script_calls(&store);
    let started = Instant::now();
    for i in 0..N {
        timers.schedule(format!("s-{i}"), HOUR, "").await.unwrap();
    }
    for i in 0..N {
        timers.reschedule(format!("s-{i}"), HOUR * 2).await.unwrap();
    }
    for i in 0..N {
        assert!(timers.cancel(format!("s-{i}")).await.unwrap());
    }
    let took = started.elapsed();
    if let Some(sent) = script_calls_since(&store, before) {
        assert_eq!(sent, 3 * N, "one after the other, each call is one script call");
    }
    // No linger, at least none of the size of a timer's tick (the bound is loose: the machine
    // running the tests may be busy).
    assert!(took < Duration::from_secs(3), "60 lone calls took {took:?}");
}

/// When the batch's script call fails (Redis is gone), every caller of the batch gets the
/// failure, retryable; once Redis is back the calls go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_script_call_is_every_callers_error() {
    let Some(mut server) = RedisServer::start() else { return };
    let window = Duration::from_millis(500);
    let timers = builder(&server.url(), "away").connect_timeout(window).connect().await.expect("connect");
    tokio::task::block_in_place(|| server.kill());
    let answers = join_all((0..20).map(|i| timers.schedule(format!("k-{i}"), HOUR, ""))).await;
    for (i, answer) in answers.iter().enumerate() {
        match answer {
            Err(e) => assert!(e.is_retryable(), "k-{i}: {e}"),
            Ok(()) => panic!("k-{i} scheduled with Redis gone"),
        }
    }
    tokio::task::block_in_place(|| server.restart());
    let answers = join_all((0..20).map(|i| timers.schedule(format!("k-{i}"), HOUR, ""))).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
}

/// A batch whose reply is lost (Redis sleeps past the response timeout, so the first attempt
/// runs but its reply comes too late) is retried as a unit with the same ids: every schedule
/// still answers `Ok` and creates one task, every cancel still answers `true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_batch_is_retried_as_one() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "ambiguous")
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let keys: Vec<String> = (0..50).map(|i| format!("k-{i}")).collect();
    let asleep = || async {
        server.command_detached(&["DEBUG", "SLEEP", "0.6"]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        Instant::now()
    };
    let slept = |started: Instant| {
        assert!(started.elapsed() >= Duration::from_millis(200), "the server was not asleep: the test proves nothing");
    };
    let started = asleep().await;
    let answers = join_all(keys.iter().map(|key| timers.schedule(key, HOUR, ""))).await;
    slept(started);
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    assert_eq!(timers.len().await.unwrap(), 50);
    let started = asleep().await;
    let answers = join_all(keys.iter().map(|key| timers.cancel(key))).await;
    slept(started);
    assert!(answers.iter().all(|a| a == &Ok(true)), "{answers:?}");
    assert_eq!(timers.len().await.unwrap(), 0);
}

/// Callers that go away (their futures dropped while queued or on the wire) break nothing: the
/// others get their answers, and each dropped call either landed or did not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_go_away_break_no_batch() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "dropped").connect().await.expect("connect");
    let answers = join_all((0..100).map(|i| {
        let timers = timers.clone();
        async move {
            let call = timers.schedule(format!("k-{i}"), HOUR, "");
            if i % 2 == 0 {
                // Polled once (queued, perhaps sent), then dropped.
                tokio::time::timeout(Duration::ZERO, call).await.ok()
            } else {
                Some(call.await)
            }
        }
    }))
    .await;
    for (i, answer) in answers.iter().enumerate() {
        if i % 2 == 1 {
            assert_eq!(answer, &Some(Ok(())), "k-{i}");
        }
    }
    // A dropped call landed or not; either way the key answers consistently afterwards (once a
    // batch of dropped calls still on the wire has had time to land).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in (0..100).step_by(2) {
        let key = format!("k-{i}");
        let pending = timers.contains(&key).await.unwrap();
        let again = timers.schedule(&key, HOUR, "").await;
        assert_eq!(again.is_err(), pending, "{key}: {again:?}");
    }
    assert_eq!(timers.len().await.unwrap(), 100);
}
