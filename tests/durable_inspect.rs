//! Looking at a durable wheel and keeping it tidy, on the store the run selects
//! (`support/store.rs`: a real `redis-server` started for each test, or a SQLite file of the
//! embedded store): `get` and `deadline` through every state a task goes through, deleting dead
//! letters, `schedule_or_reset` raced by two nodes, paging, workers and leaders, the wheel-wide
//! figures. The checks that write or read the wheel's keys in Redis themselves (a minute of
//! figures long gone, a record of a later version, nothing written for a wheel never opened) run
//! on Redis only.
//!
//! Run with `cargo test --features redis --test durable_inspect` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::durable::wait_until;
use support::TestStore;
use tokio::sync::Notify;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Task, TaskState};
use tokio_timewheel::Error;

/// The tests' settings (`support::durable::builder`) with a lease of 10 s, one attempt (a
/// failure is a dead letter at once) and a response timeout of a second.
fn builder(url: &str, name: &str) -> DurableBuilder {
    support::durable::builder(url, name)
        .lease(Duration::from_secs(10))
        .max_attempts(1)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(3))
}

/// `get` tells waiting, ready, running and dead apart, with the payload, the due time, the
/// deliveries so far and the last error; `deadline` answers the pending task's due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_deadline_follow_a_task_through_its_states() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "inspect").connect().await.expect("connect");
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

/// Runs `future` to its end from inside a synchronous `wait_until` condition.
fn sync<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// A task's state, read inside a `wait_until` condition.
fn state_of(timers: &DurableScheduler, key: &str) -> Option<TaskState> {
    sync(timers.get(key)).ok().flatten().map(|t| t.state())
}

/// Two nodes race `schedule_or_reset` on the same keys: each key is scheduled once (one `true`
/// per key), the other call moves it (`false`), and every task keeps the payload of the call that
/// scheduled it, due at the later call's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_or_reset_raced_by_two_nodes_schedules_once() {
    let Some(store) = TestStore::start() else { return };
    let a = builder(&store.url(), "upsert").connect().await.expect("connect a");
    let b = builder(&store.url(), "upsert").connect().await.expect("connect b");
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

/// `due_next` lists the waiting and ready tasks by due time then key, a page at a time, across
/// partitions, the ring and the far tier, each task once; `due_counts` counts the same tasks by
/// due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_next_pages_through_every_pending_task_in_due_order() {
    let Some(store) = TestStore::start() else { return };
    // A ring of 64 x 50 ms = 3.2 s: the tasks due in minutes wait in the far tier.
    let timers = builder(&store.url(), "listing").slots(64).partitions(3).connect().await.expect("connect");
    let past = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let mut want = Vec::new();
    for i in 0..40u64 {
        let key = format!("t{i:02}");
        match i % 4 {
            0 => timers.schedule_at(&key, past + Duration::from_secs(i), "late").await.unwrap(),
            1 => timers.schedule(&key, Duration::from_millis(500 + i * 50), "soon").await.unwrap(),
            2 => timers.schedule(&key, Duration::from_secs(60 + i), "later").await.unwrap(),
            _ => timers.schedule(&key, Duration::from_millis(500 + (i - 1) * 50), "tie").await.unwrap(),
        }
        want.push(key);
    }
    // Two cancelled tasks (one in the ring, one far) are not listed.
    assert!(timers.cancel("t05").await.unwrap() && timers.cancel("t06").await.unwrap());
    want.retain(|k| k != "t05" && k != "t06");

    let mut seen = Vec::new();
    let mut page = timers.due_next(None, 7).await.unwrap();
    loop {
        assert!(page.tasks().len() <= 7);
        seen.extend(page.tasks().iter().cloned());
        let Some(next) = page.next().cloned() else { break };
        page = timers.due_next(Some(&next), 7).await.unwrap();
    }
    let keys: Vec<&str> = seen.iter().map(|t| t.key()).collect();
    let mut sorted = want.clone();
    sorted.sort();
    let mut listed: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    listed.sort();
    assert_eq!(listed, sorted, "listed {keys:?}");
    for pair in seen.windows(2) {
        assert!((pair[0].due(), pair[0].key()) < (pair[1].due(), pair[1].key()), "out of order: {pair:?}");
    }
    let late: Vec<&str> = seen.iter().filter(|t| t.payload() == b"late").map(|t| t.key()).collect();
    assert_eq!(late.len(), 10);
    assert!(seen[..10].iter().all(|t| t.payload() == b"late" && t.state() == TaskState::Ready), "{seen:?}");
    assert!(seen[10..].iter().all(|t| t.state() == TaskState::Waiting), "{seen:?}");
    assert!(matches!(timers.due_next(None, 0).await, Err(Error::Invalid(_))));

    // Counted by minute: the late and soon ones in the first, the later ones in the second. The
    // ring's slots count whole, so the task cancelled in the ring (t05) counts until the cursor
    // passes its tick; the one cancelled in the far tier (t06) does not.
    let counts = timers.due_counts(SystemTime::now(), Duration::from_secs(60), 3).await.unwrap();
    assert_eq!(counts, [10 + 19 + 1, 9, 0]);
}

/// Dead letters page past the first ones, and are trimmed by count and by age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_page_and_their_retention_trims_them() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "dead").dead_letter_limit(8).connect().await.expect("connect");
    let worker = timers.run(|task: Task| async move { Err::<(), _>(std::io::Error::other(task.key().to_string())) });
    for i in 0..12 {
        timers.schedule(format!("d{i:02}"), Duration::from_millis(10 * i), "x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // 12 die; the leader keeps the newest 8.
    assert!(wait_until(Duration::from_secs(5), || stats(&timers).dead_lettered == 12).await, "{:?}", stats(&timers));
    assert!(wait_until(Duration::from_secs(5), || stats(&timers).dead == 8).await, "kept {}", stats(&timers).dead);
    let all = timers.dead_letters(100).await.unwrap();
    assert_eq!(all.len(), 8);
    // The one pager reads them on, in the same order, a page at a time.
    let mut paged = Vec::new();
    let mut page = timers.list(TaskState::Dead, None, 3).await.unwrap();
    loop {
        paged.extend(page.tasks().iter().map(|t| t.key().to_string()));
        let Some(next) = page.next().cloned() else { break };
        page = timers.list(TaskState::Dead, Some(&next), 3).await.unwrap();
    }
    assert_eq!(paged, all.iter().map(|d| d.key().to_string()).collect::<Vec<_>>());
    assert!(matches!(timers.list(TaskState::Dead, None, 0).await, Err(Error::Invalid(_))));
    worker.shutdown().await;

    // By age: a node whose retention is 200 ms clears them once it leads.
    let short = builder(&store.url(), "dead").dead_letter_max_age(Duration::from_millis(200)).connect().await.unwrap();
    let worker = short.run(|_: Task| async { Ok::<(), std::io::Error>(()) });
    assert!(wait_until(Duration::from_secs(5), || stats(&short).dead == 0).await, "kept {}", stats(&short).dead);
    worker.shutdown().await;
}

fn stats(timers: &DurableScheduler) -> tokio_timewheel::durable::DurableStats {
    sync(timers.stats()).expect("stats")
}

/// The workers that run are listed from any node, and the leader among them; a worker that
/// shuts down is taken out of the list at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_leaders_are_listed() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "nodes").connect().await.expect("connect");
    let other = builder(&store.url(), "nodes").connect().await.expect("connect another node");
    assert!(timers.workers().await.unwrap().is_empty());
    assert_eq!(timers.leaders().await.unwrap(), [None]);
    let first = timers.run(|_: Task| async { Ok::<(), std::io::Error>(()) });
    let second = other.run(|_: Task| async { Ok::<(), std::io::Error>(()) });
    first.ready().await;
    second.ready().await;
    assert!(wait_until(Duration::from_secs(5), || listed(&timers).len() == 2).await, "{:?}", listed(&timers));
    let workers = listed(&timers);
    let leader = timers.leaders().await.unwrap()[0].clone().expect("a leader");
    assert!(workers.contains(&leader), "the leader {leader} is not among the workers {workers:?}");
    assert_eq!(first.is_leader() as usize + second.is_leader() as usize, 1);
    second.shutdown().await;
    assert!(wait_until(Duration::from_secs(2), || listed(&timers).len() == 1).await, "{:?}", listed(&timers));
    first.shutdown().await;
    assert!(wait_until(Duration::from_secs(2), || listed(&timers).is_empty()).await);
}

fn listed(timers: &DurableScheduler) -> Vec<String> {
    sync(timers.workers()).expect("workers")
}

/// `only_existing` opens a wheel with the tick, slots and partitions recorded in Redis, whatever
/// the builder says, and refuses (creating nothing) a name that no node has opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_existing_takes_the_recorded_settings_and_creates_no_wheel() {
    let Some(store) = TestStore::start() else { return };
    let url = store.url();
    let first = DurableScheduler::builder(&url, "recorded")
        .tick(Duration::from_millis(40))
        .slots(120)
        .partitions(3)
        .connect()
        .await
        .expect("connect");
    first.schedule("a", Duration::from_secs(60), b"x".to_vec()).await.unwrap();

    // The defaults (another tick, slot and partition count) would be refused without it.
    let refused = DurableScheduler::builder(&url, "recorded").connect().await;
    assert!(matches!(refused, Err(Error::Invalid(_))), "{refused:?}");
    let admin = DurableScheduler::builder(&url, "recorded").only_existing().connect().await.expect("adopts");
    assert_eq!(admin.get("a").await.unwrap().map(|t| t.payload().to_vec()), Some(b"x".to_vec()));
    assert_eq!(admin.stats().await.unwrap().pending, 1);

    for _ in 0..2 {
        match DurableScheduler::builder(&url, "never-opened").only_existing().connect().await {
            Err(Error::Invalid(message)) => assert!(message.contains("no wheel named \"never-opened\""), "{message}"),
            other => panic!("a wheel no node opened must be refused, got {other:?}"),
        }
    }
    if let Some(server) = store.redis() {
        let keys = server.command(&["KEYS", "*never-opened*"]);
        assert!(keys.as_array().is_empty(), "nothing was written for it: {keys:?}");
    }
}

/// The figures a minute live in Redis: a handle with no worker (an admin process's) reads what
/// the workers did, per minute and in lateness buckets, and minutes older than Redis keeps are
/// dropped by the first count of a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_handle_reads_the_wheel_wide_figures_the_workers_wrote() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "figures").connect().await.expect("connect");
    let keys = tokio_timewheel::durable::WheelKeys::new("figures");
    // A minute long gone, which the first count of this minute must drop (written in Redis).
    if let Some(server) = store.redis() {
        server.command(&["HSET", &keys.figures(), "1000:a", "7", "1000:l3", "2"]);
    }

    let good: Vec<_> = (0..40).map(|i| (format!("good-{i}"), Duration::ZERO, Vec::new())).collect();
    timers.schedule_many(good).await.unwrap().into_iter().for_each(|r| r.expect("scheduled"));
    for i in 0..4 {
        timers.schedule(format!("bad-{i}"), Duration::ZERO, Vec::new()).await.unwrap();
    }
    let worker = timers.run(|task: Task| async move {
        if task.key().starts_with("bad") {
            Err("refused")
        } else {
            Ok(())
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = timers.stats().await.unwrap();
        if s.pending == 0 && s.dead == 4 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "every task acknowledged or dead: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;

    let admin = DurableScheduler::builder(store.url(), "figures").only_existing().connect().await.expect("admin");
    let figures = admin.figures(5).await.expect("figures");
    assert_eq!(figures.minutes().len(), 5);
    let sum = |f: fn(&tokio_timewheel::durable::MinuteCounts) -> u64| figures.minutes().iter().map(f).sum::<u64>();
    assert_eq!((sum(|m| m.handed_out), sum(|m| m.acked), sum(|m| m.failed), sum(|m| m.dead)), (44, 40, 4, 4));
    assert_eq!(figures.lateness().iter().map(|&(_, n)| n).sum::<u64>(), 44, "{:?}", figures.lateness());
    assert!(figures.lateness().windows(2).all(|w| w[0].0 < w[1].0), "buckets rise: {:?}", figures.lateness());
    assert!(figures.lateness_quantile(0.99).is_some());
    let starts: Vec<_> = figures.minutes().iter().map(|m| m.start).collect();
    assert!(starts.windows(2).all(|w| w[1].duration_since(w[0]).unwrap() == Duration::from_secs(60)));
    assert_eq!(admin.figures(5).await.unwrap(), timers.figures(5).await.unwrap(), "every handle reads the same");

    if let Some(server) = store.redis() {
        let old = server.command(&["HEXISTS", &keys.figures(), "1000:a"]);
        assert_eq!(old.as_int(), Some(0), "the long-gone minute was dropped");
    }
    assert!(matches!(admin.figures(0).await, Err(Error::Invalid(_))));
    assert!(matches!(admin.figures(121).await, Err(Error::Invalid(_))));
}

/// `get` tells a series from a one-shot task and gives its recurrence as the record keeps it: a
/// fixed rate, a counted one, one with an end, a cron expression in a zone (feature `cron`); its
/// next run is its due time while it waits, and the run after while one runs. A record whose
/// series this build cannot read still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_tells_a_series_and_its_recurrence() {
    use tokio_timewheel::{MissedRuns, Recurrence};

    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "series").connect().await.expect("connect");
    let before = SystemTime::now();

    // A one-shot task: no series.
    timers.schedule("once", Duration::from_secs(3600), "one").await.unwrap();
    let once = timers.get("once").await.unwrap().expect("pending");
    assert!(!once.is_recurring());
    assert_eq!((once.recurrence(), once.runs_left(), once.next_run()), (None, None, None));
    assert_eq!(once.unreadable_recurrence(), None);

    // Every 20 s, for ever: the durable default for missed runs, Skip.
    timers.schedule_recurring("every", Recurrence::every(Duration::from_secs(20)), "tick").await.unwrap();
    let every = timers.get("every").await.unwrap().expect("pending");
    assert!(every.is_recurring());
    let r = every.recurrence().expect("a fixed rate reads");
    assert_eq!((r.period(), r.end(), r.missed_runs()), (Some(Duration::from_secs(20)), None, MissedRuns::Skip));
    assert_eq!(r.to_string(), "every 20s");
    assert_eq!((every.runs_left(), every.state()), (None, TaskState::Waiting));
    assert_eq!(every.next_run(), Some(every.due()), "a waiting series runs next at its due time");
    let ahead = every.due().duration_since(before).unwrap();
    assert!(ahead > Duration::from_secs(19) && ahead < Duration::from_secs(21), "{ahead:?}");

    // Counted, with a policy of its own; and a fixed rate with an end (stored as a spec).
    let counted = Recurrence::every(Duration::from_secs(20)).limit(3).missed(MissedRuns::Burst);
    timers.schedule_recurring("counted", counted, "").await.unwrap();
    let counted = timers.get("counted").await.unwrap().unwrap();
    assert_eq!((counted.runs_left(), counted.recurrence().unwrap().missed_runs()), (Some(3), MissedRuns::Burst));
    let end = UNIX_EPOCH + Duration::from_millis(4_000_000_000_123);
    timers.schedule_recurring("ending", Recurrence::every(Duration::from_secs(20)).until(end), "").await.unwrap();
    let ending = timers.get("ending").await.unwrap().unwrap();
    let r = ending.recurrence().expect("a fixed rate with an end reads");
    assert_eq!((r.period(), r.end()), (Some(Duration::from_secs(20)), Some(end)));
    // `schedule_repeating` makes a series too.
    timers.schedule_repeating("twice", Duration::from_secs(30), tokio_timewheel::Repeat::Times(2), "").await.unwrap();
    let twice = timers.get("twice").await.unwrap().unwrap();
    assert_eq!(
        (twice.recurrence().and_then(Recurrence::period), twice.runs_left()),
        (Some(Duration::from_secs(30)), Some(2))
    );

    // A cron expression in Berlin: its expression and zone, its next run the next 03:00 there.
    #[cfg(feature = "cron")]
    {
        let nightly = Recurrence::cron("0 3 * * *").unwrap().in_tz("Europe/Berlin").unwrap();
        timers.schedule_recurring("nightly", nightly.clone(), "report").await.unwrap();
        let task = timers.get("nightly").await.unwrap().expect("pending");
        assert!(task.is_recurring());
        let r = task.recurrence().expect("a cron series reads with the cron feature");
        assert_eq!((r.expression(), r.zone(), r.period()), (Some("0 3 * * *"), Some("Europe/Berlin"), None));
        assert_eq!((r.end(), r.missed_runs(), task.runs_left()), (None, MissedRuns::Skip, None));
        assert_eq!(r.to_string(), "cron \"0 3 * * *\" in Europe/Berlin");
        assert_eq!(task.next_run(), Some(task.due()));
        assert_eq!(nightly.next_after(before), Some(task.due()), "the next 03:00 in Berlin");
    }

    // A series whose spec this build cannot read (a later version's, say) still reads (its
    // record written in Redis).
    if let Some(server) = store.redis() {
        let keys = tokio_timewheel::durable::WheelKeys::new("series");
        let spec = "0 moon 7";
        let record = format!("{}:0:0:0:-1:2:c{}:{spec}0:payload", 4_000_000_000_000u64, spec.len());
        server.command(&["HSET", &keys.tasks(), "odd", &record]);
        let odd = timers.get("odd").await.unwrap().expect("it reads");
        assert!(odd.is_recurring());
        assert_eq!((odd.recurrence(), odd.unreadable_recurrence(), odd.payload()), (None, Some(spec), &b"payload"[..]));
        server.command(&["HDEL", &keys.tasks(), "odd"]);
    }

    // Running: the next run is the one after, a period on; `list` of running tasks says the same.
    timers.cancel("every").await.unwrap();
    let start = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let fast = Recurrence::every(Duration::from_secs(20)).starting(start);
    timers.schedule_recurring("fast", fast, "").await.unwrap();
    let ready = timers.list(TaskState::Ready, None, 10).await.unwrap();
    assert_eq!(ready.tasks().len(), 1, "{ready:?}");
    assert_eq!(ready.tasks()[0].recurrence().and_then(Recurrence::period), Some(Duration::from_secs(20)));
    let release = Arc::new(Notify::new());
    let worker = timers.run({
        let release = release.clone();
        move |_task: Task| {
            let release = release.clone();
            async move {
                release.notified().await;
                Ok::<(), std::io::Error>(())
            }
        }
    });
    assert!(wait_until(Duration::from_secs(5), || state_of(&timers, "fast") == Some(TaskState::Running)).await);
    let running = timers.get("fast").await.unwrap().unwrap();
    let next = running.next_run().expect("a run after this one");
    assert!(next > SystemTime::now() - Duration::from_secs(1), "skipped on past the missed runs: {next:?}");
    assert_eq!(next.duration_since(start).unwrap().as_millis() % 20_000, 0, "on the series' grid: {next:?}");
    let listed = timers.list(TaskState::Running, None, 10).await.unwrap();
    assert_eq!(listed.tasks()[0].recurrence(), running.recurrence());
    release.notify_one();
    worker.shutdown().await;
}
