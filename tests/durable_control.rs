//! Controlling a running durable wheel, on the store the run selects (`support/store.rs`: a
//! real `redis-server` started for each test, or a SQLite file of the embedded store): what
//! `get` and `due_next` say of a task overdue while no leader ticks; pausing and resuming the
//! workers' claims; a handler's cancellation token, cancelled by `cancel_running`,
//! `shutdown_timeout`'s bound and the handler timeout. On Redis only: a lost lease (made by
//! writing the lease's key), the controls on a cluster, and the checks that read the wheel's
//! keys in Redis (claims and cancel requests left behind).
//!
//! Run with `cargo test --features redis --test durable_control` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use support::durable::{builder, keys, stats_until, wait_until, Log, LEASE, SLOTS, TICK};
use support::redis_server::RedisServer;
use support::topology::Cluster;
use support::TestStore;
use tokio::sync::mpsc;
use tokio_timewheel::durable::{DurableScheduler, ListCursor, Task, TaskInfo, TaskState, WheelKeys};

/// With no worker running, nothing ticks: a task whose due time passed is still waiting, and
/// `get` and `due_next` say how long it is overdue; a task not yet due is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_due_while_no_leader_ticks_reads_as_overdue() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "overdue").connect().await.expect("connect");
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

    let page = timers.due_next(None, 10).await.unwrap();
    let keys: Vec<(&str, bool)> = page.tasks().iter().map(|t| (t.key(), t.is_overdue())).collect();
    assert_eq!(keys, [("late", true), ("later", false)]);
    assert!(page.tasks()[0].overdue_by().unwrap() >= by, "read later, overdue longer");
}

/// How much later than a tick a test lets a wake-up come, for a loaded machine.
const LOAD_MARGIN: Duration = Duration::from_millis(200);

/// A pause holds across a restart of every node, on every partition: while tasks fall due the
/// leaders tick them ready, and no worker, old or new, claims one. `resume` wakes the idle worker at once: it
/// claims them within a tick (plus a margin for load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_holds_across_a_restart_of_every_node_and_resume_hands_out_within_a_tick() {
    let Some(store) = TestStore::start() else { return };
    let log = Log::default();
    {
        let timers = builder(&store.url(), "pause").partitions(2).connect().await.expect("connect");
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
    let timers = builder(&store.url(), "pause").partitions(2).connect().await.expect("connect");
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
    // Acknowledged, their claims are forgotten (on Redis, whose keys the test reads).
    if let Some(server) = store.redis() {
        let parts = [WheelKeys::for_partition("pause", 0, 2), WheelKeys::for_partition("pause", 1, 2)];
        let forgotten = || parts.iter().all(|k| server.command(&["ZCARD", &k.claimed()]).as_int() == Some(0));
        assert!(wait_until(Duration::from_secs(5), forgotten).await, "claims left after the acknowledgements");
    }
    worker.shutdown().await;
}

/// The bound on how soon a handler that awaits its token ends once the token should be
/// cancelled, and the margin a loaded machine gets beyond it.
const TOKEN_BOUND: Duration = Duration::from_millis(100);

/// What a handler that awaits its token tells the test: a delivery started, or ended (its token
/// was cancelled).
#[derive(Debug)]
struct Event {
    key: String,
    attempt: u32,
    ended: bool,
    at: Instant,
}

/// A handler that reports its start, awaits its token, reports its end and returns `Err` for a
/// key that starts with "err", else `Ok`; for a key that starts with "dead", it fails at once.
fn awaits_its_token(events: mpsc::UnboundedSender<Event>) -> impl Fn(Task) -> BoxFuture<'static, Result<(), String>> {
    move |task: Task| {
        let events = events.clone();
        Box::pin(async move {
            let (key, attempt) = (task.key().to_string(), task.attempt());
            if key.starts_with("dead") {
                return Err("failed at once".to_string());
            }
            let _ = events.send(Event { key: key.clone(), attempt, ended: false, at: Instant::now() });
            let token: tokio_util::sync::CancellationToken = task.cancel_token();
            token.cancelled().await;
            let _ = events.send(Event { key: key.clone(), attempt, ended: true, at: Instant::now() });
            if key.starts_with("err") {
                Err("stopped: cancelled".to_string())
            } else {
                Ok(())
            }
        })
    }
}

/// The next event, within 5 s.
async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an event within 5 s").expect("open")
}

/// Waits until the task `key` is no longer pending.
async fn gone(timers: &DurableScheduler, key: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !timers.contains(key).await.unwrap() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// `cancel_running` from another handle cancels the running handler's token at once (the
/// handler that awaits it ends within 100 ms, plus a margin for load), and whatever the handler
/// returns, `Ok` or `Err`, the task ends as cancelled: gone, not retried, not a dead letter, not
/// acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_running_stops_the_handler_at_once_and_the_task_ends_as_cancelled() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "cancel-running").connect().await.expect("connect");
    let other = builder(&store.url(), "cancel-running").connect().await.expect("connect");
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    for key in ["ok-1", "err-1"] {
        timers.schedule(key, Duration::from_millis(50), "x").await.unwrap();
    }
    let mut started = vec![next(&mut events).await.key, next(&mut events).await.key];
    started.sort();
    assert_eq!(started, ["err-1", "ok-1"]);
    for key in ["ok-1", "err-1"] {
        let asked = Instant::now();
        assert!(other.cancel_running(key).await.unwrap(), "{key} is running");
        let ended = next(&mut events).await;
        assert!(ended.ended && ended.key == key, "{ended:?}");
        let took = ended.at - asked;
        eprintln!("{key}: cancel_running to the handler's end: {took:?}");
        assert!(took < TOKEN_BOUND + LOAD_MARGIN, "{key}: {took:?}");
        assert!(gone(&timers, key).await, "{key} still pending");
    }
    // Not handed out again: a few ticks and more than a lease later, nothing started.
    tokio::time::sleep(LEASE + TICK * 4).await;
    assert!(events.try_recv().is_err(), "a cancelled task ran again");
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.cancelled, stats.acked, stats.retried, stats.dead, stats.pending), (2, 0, 0, 0, 0), "{stats:?}");
    assert!(timers.dead_letters(10).await.unwrap().is_empty());
    assert!(!other.cancel_running("ok-1").await.unwrap(), "no longer running");
    if let Some(server) = store.redis() {
        let no_requests_left = server.command(&["HLEN", &keys("cancel-running").cancelling()]).as_int();
        assert_eq!(no_requests_left, Some(0));
        let k = keys("cancel-running");
        let claims_left = server.command(&["ZCARD", &k.claimed()]).as_int();
        assert_eq!(claims_left, Some(0), "the ended tasks' claims are forgotten");
    }
    worker.shutdown().await;
}

/// `cancel_running` of a task that is not running (waiting, ready, or none) answers false and
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_running_of_a_task_not_running_answers_false_and_changes_nothing() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "not-running").connect().await.expect("connect");
    timers.schedule("waiting", Duration::from_secs(3600), "x").await.unwrap();
    // Ready: due, ticked, but paused, so no worker claims it.
    timers.pause().await.unwrap();
    let worker = Log::default().worker(&timers);
    worker.ready().await;
    timers.schedule("ready", Duration::from_millis(10), "y").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while timers.get("ready").await.unwrap().unwrap().state() != TaskState::Ready && Instant::now() < deadline {
        tokio::time::sleep(TICK).await;
    }
    // The figures, the cursor's lag aside (it moves with the clock).
    let figures = || async {
        let mut stats = timers.stats().await.unwrap();
        stats.cursor_lag_ticks = 0;
        stats
    };
    let before = figures().await;
    for key in ["waiting", "ready", "never-scheduled"] {
        assert!(!timers.cancel_running(key).await.unwrap(), "{key}");
    }
    assert_eq!(timers.get("waiting").await.unwrap().unwrap().state(), TaskState::Waiting);
    assert_eq!(timers.get("ready").await.unwrap().unwrap().state(), TaskState::Ready);
    assert_eq!(figures().await, before);
    if let Some(server) = store.redis() {
        assert_eq!(server.command(&["EXISTS", &keys("not-running").cancelling()]).as_int(), Some(0));
    }
    worker.shutdown().await;
}

/// A worker that learns its delivery's lease went to another delivery (its renewal is refused)
/// cancels that handler's token: within a renewal round (a third of the lease) of the new
/// delivery's start, and 100 ms (plus the margin) once the renewal is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_handlers_token() {
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "lost-lease").connect().await.expect("connect");
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    timers.schedule("job", Duration::from_millis(50), "x").await.unwrap();
    let first = next(&mut events).await;
    assert_eq!((first.attempt, first.ended), (1, false));
    // The lease runs out as if the worker had been cut off: the next tick hands the task out again.
    // (A lease is its claim call's: every call's entry in `leased` runs out.)
    let leased = keys("lost-lease").leased();
    let calls = server.command(&["ZRANGE", &leased, "0", "-1"]);
    for call in calls.as_array().iter().filter_map(|c| c.as_str()) {
        server.command(&["ZADD", &leased, "1", call]);
    }
    let second = next(&mut events).await;
    assert_eq!((second.key.as_str(), second.attempt, second.ended), ("job", 2, false));
    let ended = next(&mut events).await;
    assert_eq!((ended.attempt, ended.ended), (1, true), "the first delivery's token is cancelled");
    let took = ended.at - second.at;
    eprintln!("the lease's new delivery to the old handler's end: {took:?}");
    assert!(took < LEASE / 3 + TOKEN_BOUND + LOAD_MARGIN, "{took:?}");
    assert!(timers.cancel_running("job").await.unwrap());
    let last = next(&mut events).await;
    assert_eq!((last.attempt, last.ended), (2, true));
    assert!(gone(&timers, "job").await);
    worker.shutdown().await;
}

/// `shutdown_timeout` cancels the running handlers' tokens before its bound (a tenth of it, at
/// most a second, before), so a handler that awaits its token ends within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_cancels_the_tokens_before_its_bound() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "wind-down").connect().await.expect("connect");
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    timers.schedule("job", Duration::from_millis(50), "x").await.unwrap();
    assert!(!next(&mut events).await.ended);
    let bound = Duration::from_secs(1);
    let asked = Instant::now();
    worker.shutdown_timeout(bound).await;
    let returned = asked.elapsed();
    let ended = next(&mut events).await;
    assert!(ended.ended);
    let took = ended.at - asked;
    eprintln!("shutdown_timeout({bound:?}): the handler ended after {took:?}, the call returned after {returned:?}");
    assert!(took <= bound + TOKEN_BOUND + LOAD_MARGIN && took >= bound - bound / 10, "{took:?}");
    // It ended with Ok before the bound: acknowledged, not handed out again.
    assert!(gone(&timers, "job").await);
}

/// The handler timeout cancels the token a tenth of it (at most a second) before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_timeout_cancels_the_token_before_it() {
    let Some(store) = TestStore::start() else { return };
    let timeout = Duration::from_millis(600);
    let timers = builder(&store.url(), "timeout-grace").handler_timeout(timeout).connect().await.expect("connect");
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    timers.schedule("job", Duration::from_millis(50), "x").await.unwrap();
    let started = next(&mut events).await;
    let ended = next(&mut events).await;
    assert!(ended.ended);
    let took = ended.at - started.at;
    eprintln!("handler timeout {timeout:?}: the token was cancelled after {took:?}");
    assert!(took >= timeout - timeout / 10 - TICK && took < timeout, "{took:?}");
    assert!(gone(&timers, "job").await, "ended with Ok within the timeout: acknowledged");
    worker.shutdown().await;
}

/// Every task of `state`, paged `limit` at a time, with the number of pages.
async fn list_all(timers: &DurableScheduler, state: TaskState, limit: usize) -> (Vec<TaskInfo>, usize) {
    let (mut all, mut pages) = (Vec::new(), 0);
    let mut cursor: Option<ListCursor> = None;
    loop {
        let page = timers.list(state, cursor.as_ref(), limit).await.unwrap();
        pages += 1;
        assert!(page.tasks().len() <= limit);
        let (tasks, next) = page.into_parts();
        all.extend(tasks);
        match next {
            Some(next) => cursor = Some(next),
            None => return (all, pages),
        }
        assert!(pages < 10_000, "paging does not end");
    }
}

/// `list` pages 1,000 tasks in each state (waiting, ready, running, dead), every key once, none
/// missing, each page in its state's order, while nothing changes; running tasks say which
/// worker holds them and since when. On a wheel of two partitions, whose pages it merges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_every_task_of_each_state_once() {
    const N: usize = 1000;
    let Some(store) = TestStore::start() else { return };
    let timers =
        builder(&store.url(), "list").partitions(2).max_attempts(1).concurrency(N).connect().await.expect("connect");
    let (tx, _events) = mpsc::unbounded_channel();
    // Keys that start with "dead" fail at once (and, with one attempt, die); the others run until
    // cancelled.
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    let keys_of = |prefix: &str| (0..N).map(|i| format!("{prefix}-{i:04}")).collect::<Vec<_>>();
    let soon = |prefix: &str| keys_of(prefix).into_iter().map(|k| (k, Duration::from_millis(10), Vec::new()));
    timers.schedule_many(soon("dead")).await.unwrap();
    stats_until(&timers, "dead", |s| s.dead == N).await;
    timers.schedule_many(soon("running")).await.unwrap();
    stats_until(&timers, "running", |s| s.in_flight == N).await;
    timers.pause().await.unwrap();
    timers.schedule_many(soon("ready")).await.unwrap();
    stats_until(&timers, "ready", |s| s.ready == N).await;
    let later = keys_of("waiting").into_iter().map(|k| (k, Duration::from_secs(3600), Vec::new()));
    timers.schedule_many(later).await.unwrap();
    let node = worker_node(&timers).await;

    for (state, prefix) in [
        (TaskState::Waiting, "waiting"),
        (TaskState::Ready, "ready"),
        (TaskState::Running, "running"),
        (TaskState::Dead, "dead"),
    ] {
        for limit in [1000, 100, 7] {
            let (tasks, pages) = list_all(&timers, state, limit).await;
            let mut keys: Vec<String> = tasks.iter().map(|t| t.key().to_string()).collect();
            // Waiting and ready tasks by due time, then key. (Running ones come in claim order,
            // dead ones by when they died, which `TaskInfo` does not show.)
            let order: Vec<(std::time::SystemTime, &str)> = tasks.iter().map(|t| (t.due(), t.key())).collect();
            if matches!(state, TaskState::Waiting | TaskState::Ready) {
                assert!(order.windows(2).all(|w| w[0] < w[1]), "{state:?} by {limit}: out of order");
            }
            assert!(tasks.iter().all(|t| t.state() == state), "{state:?}");
            if state == TaskState::Waiting {
                let dues: std::collections::HashSet<_> = tasks.iter().map(|t| t.due()).collect();
                assert!(dues.len() < N / 2, "scheduled in batches, many share a due time: pages end amid ties");
            }
            keys.sort();
            let before = keys.len();
            keys.dedup();
            assert_eq!(before, keys.len(), "{state:?} by {limit}: a key listed twice");
            assert_eq!(keys, keys_of(prefix), "{state:?} by {limit}: every key once, in {pages} pages");
            // Full pages, then the last one (empty when the full ones hold them all).
            assert_eq!(pages, N / limit + 1, "{state:?} by {limit}");
            if state == TaskState::Running {
                assert!(tasks.iter().all(|t| t.worker() == Some(node.as_str())), "{:?}", tasks[0].worker());
            } else {
                assert!(tasks.iter().all(|t| t.worker().is_none() && t.claimed_at().is_none()));
            }
        }
    }
    let wrong = timers.list(TaskState::Ready, None, 1).await.unwrap().into_parts().1.unwrap();
    assert!(timers.list(TaskState::Dead, Some(&wrong), 10).await.is_err(), "a cursor of another state");
    assert!(timers.list(TaskState::Dead, None, 0).await.is_err());
    assert!(timers.list(TaskState::Dead, None, tokio_timewheel::durable::MAX_PAGE + 1).await.is_err());
    worker.shutdown_timeout(Duration::from_millis(100)).await;
}

/// The node id of the one worker running on `timers`.
async fn worker_node(timers: &DurableScheduler) -> String {
    let workers = timers.workers().await.unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    workers[0].clone()
}

/// A task whose cancel was requested while its handler ignores its token, and whose worker then
/// goes away (here `shutdown_timeout` drops the handler and gives its lease back): when the lease
/// runs out the task ends as cancelled, rather than being handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_whose_worker_goes_away_ends_as_cancelled() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "cancel-gone").connect().await.expect("connect");
    let log = Log::default();
    let handler = {
        let log = log.clone();
        move |task: Task| {
            log.record(&task, 1);
            async {
                // Deaf to its token.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let worker = timers.run(handler);
    worker.ready().await;
    timers.schedule("job", Duration::from_millis(10), "x").await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || log.len() == 1).await);
    assert!(timers.cancel_running("job").await.unwrap());
    assert_eq!(timers.get("job").await.unwrap().unwrap().state(), TaskState::Running, "left to its handler");
    worker.shutdown_timeout(Duration::from_millis(100)).await;
    // Another worker would take it on the next tick, were it handed out again.
    let other = timers.run(log.handler(2));
    other.ready().await;
    assert!(gone(&timers, "job").await, "ends when its lease runs out");
    tokio::time::sleep(TICK * 4).await;
    assert_eq!(log.len(), 1, "not handed out again");
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.cancelled, stats.retried, stats.dead, stats.acked), (1, 0, 0, 0), "{stats:?}");
    other.shutdown().await;
}

/// On a Redis Cluster, a wheel of two partitions: `cancel_running` reaches the handler at once
/// (every worker follows each partition's stream of requests on the node that holds it), `list`
/// finds the running task and its worker, and the pause holds on every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controls_on_a_cluster() {
    let Some(cluster) = Cluster::start(3, 0) else { return };
    let timers = DurableScheduler::cluster(cluster.seed_urls(), "ctl")
        .tick(TICK)
        .slots(SLOTS)
        .lease(LEASE)
        .partitions(2)
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect to the cluster");
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = timers.run(awaits_its_token(tx));
    worker.ready().await;
    for key in ["a", "b", "c", "d"] {
        timers.schedule(key, Duration::from_millis(10), "x").await.unwrap();
    }
    for _ in 0..4 {
        assert!(!next(&mut events).await.ended);
    }
    let (running, _) = list_all(&timers, TaskState::Running, 3).await;
    let node = worker_node(&timers).await;
    assert_eq!(running.len(), 4);
    assert!(running.iter().all(|t| t.worker() == Some(node.as_str()) && t.claimed_at().is_some()));
    for key in ["a", "b", "c", "d"] {
        let asked = Instant::now();
        assert!(timers.cancel_running(key).await.unwrap(), "{key}");
        let ended = next(&mut events).await;
        assert!(ended.ended && ended.key == key, "{ended:?}");
        let took = ended.at - asked;
        eprintln!("cluster, {key}: cancel_running to the handler's end: {took:?}");
        assert!(took < TOKEN_BOUND + LOAD_MARGIN, "{key}: {took:?}");
    }
    timers.pause().await.unwrap();
    assert!(timers.is_paused().await.unwrap() && timers.stats().await.unwrap().paused);
    timers.resume().await.unwrap();
    assert!(!timers.is_paused().await.unwrap());
    worker.shutdown().await;
}
