//! Per-script tests of a task's own retry settings ([`TaskOptions`]), on seeded keys in the style
//! of `scripts.rs`: the record's optional retry field (`store/lua/includes/record.lua`) as
//! `schedule.lua` and `upsert.lua` write it and `reschedule.lua` keeps it, and `fail.lua` and
//! `tick.lua` (a lease that ran out) reading it in place of the node's settings. The wheel of
//! these tests allows 3 attempts, 1 s apart at first (see `super::wheel`).

use std::time::Duration;

use super::{dump, meta, redis_now_ms, seed_lease, wheel, TICK_MS};
use crate::durable::series::Stored;
use crate::durable::store::scripts::{self, Ack, Failed, Moved, NewTask, ScheduleAnswer};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::When;
use crate::durable::TaskOptions;
use crate::MissedRuns;

/// A task's record with the retry field `retry` (`<max attempts>/<backoff ms>`), as the scripts
/// write it: due, deliveries, claim token, no series, the field, the last error, the payload.
fn rec_with(due: u64, attempt: u32, token: u64, retry: &str, err: &str, payload: &str) -> String {
    format!("{due}:{attempt}:{token}:0:0:0:r{}:{retry}{}:{err}{payload}", retry.len(), err.len())
}

/// The same record without the retry field: a task that follows the node.
fn rec(due: u64, attempt: u32, token: u64, err: &str, payload: &str) -> String {
    format!("{due}:{attempt}:{token}:0:0:0:{}:{err}{payload}", err.len())
}

/// A delivery of `key` under claim token 7 with the task's own settings `options`, as the worker
/// reads them from the claimed record.
fn failed(key: &str, options: TaskOptions) -> Ack {
    Ack { options, ..Ack::plain(key, "7") }
}

/// The due time of `key` in the far tier.
fn far_due(d: &std::collections::BTreeMap<String, String>, key: &str) -> Option<u64> {
    d.get("far")?.split(' ').find_map(|e| e.strip_prefix(&format!("{key}@"))?.parse().ok())
}

/// A task with its own max attempts dies at its first failure while the node allows three; one
/// with its own backoff is retried after it (and keeps its settings), placed in the ring slot
/// the worker declared for that backoff; one without settings follows the node.
#[tokio::test]
async fn fail_uses_the_tasks_own_settings_and_the_nodes_without_them() {
    let Some((server, timers)) = wheel("o-fail").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["HSET", &keys.tasks(), "once", &rec_with(5, 1, 7, "1/", "", "x")]);
    server.command(&["HSET", &keys.tasks(), "quick", &rec_with(5, 2, 7, "/150", "", "y")]);
    server.command(&["HSET", &keys.tasks(), "plain", &rec(5, 1, 7, "", "z")]);
    for k in ["once", "quick", "plain"] {
        seed_lease(&server, keys, k, 7, now + 60_000);
    }

    // Its own max attempts, 1: the first failure is its last, though the node allows 3.
    let once = TaskOptions::new().max_attempts(1);
    assert_eq!(scripts::fail(w, keys, &failed("once", once), "boom", Window::Default).await.unwrap(), Failed::Dead);
    let d = dump(&server, keys);
    // The dead letter keeps the task's own settings, for `requeue_dead`.
    assert_eq!(d["dead_tasks"], "once=5:1:r2:1/4:boomx");
    assert!(!d["tasks"].contains("once="), "{d:?}");
    assert_eq!(meta(&server, keys, "dead_lettered"), 1);

    // Its own backoff, 150 ms: the second failure waits 300 ms (150 * 2^1), not the node's 2 s;
    // within the ring (8 x 100 ms), in a slot, its settings and error kept.
    let quick = TaskOptions::new().backoff(Duration::from_millis(150));
    let before = redis_now_ms(&server);
    assert_eq!(
        scripts::fail(w, keys, &failed("quick", quick), "slow", Window::Default).await.unwrap(),
        Failed::Retried
    );
    let after = redis_now_ms(&server);
    let d = dump(&server, keys);
    let record = d["tasks"].split(' ').find_map(|e| e.strip_prefix("quick=")).expect("quick pending").to_string();
    let due: u64 = record.split(':').next().unwrap().parse().unwrap();
    assert!(due >= before + 300 && due <= after + 301, "due {due}, now {before}..{after}");
    assert_eq!(record, rec_with(due, 2, 0, "/150", "slow", "y"));
    let slot = keys.slot(due.div_ceil(TICK_MS) % super::SLOTS);
    let slot = slot.strip_prefix(keys.prefix()).unwrap();
    assert_eq!(d.get(slot).map(String::as_str), Some("quick"), "in its slot, not the far tier: {d:?}");
    assert_eq!(far_due(&d, "quick"), None);

    // No settings of its own: the node's backoff (1 s at the first failure), beyond the ring.
    let before = redis_now_ms(&server);
    let plain = Ack::plain("plain", "7");
    assert_eq!(scripts::fail(w, keys, &plain, "boom", Window::Default).await.unwrap(), Failed::Retried);
    let after = redis_now_ms(&server);
    let d = dump(&server, keys);
    let due = far_due(&d, "plain").expect("in the far tier");
    assert!(due >= before + 1000 && due <= after + 1001, "due {due}, now {before}..{after}");
    assert!(d["tasks"].contains(&format!("plain={}", rec(due, 1, 0, "boom", "z"))), "{d:?}");
    assert_eq!(meta(&server, keys, "retried"), 2);

    // ... and the node's max attempts: its third failure is its last.
    server.command(&["HSET", &keys.tasks(), "plain", &rec(5, 3, 7, "", "z")]);
    assert_eq!(scripts::fail(w, keys, &plain, "again", Window::Default).await.unwrap(), Failed::Dead);
    // A task whose own max attempts is above the node's is retried past the node's.
    server.command(&["HSET", &keys.tasks(), "many", &rec_with(5, 3, 7, "10/", "", "m")]);
    let many = TaskOptions::new().max_attempts(10);
    assert_eq!(scripts::fail(w, keys, &failed("many", many), "boom", Window::Default).await.unwrap(), Failed::Retried);
}

/// A lease that ran out on the last attempt the task's own settings allow buries it, while the
/// node would allow more; one without settings goes back to `ready`.
#[tokio::test]
async fn a_lease_that_ran_out_on_the_tasks_own_last_attempt_buries_it() {
    let Some((server, timers)) = wheel("o-tick").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["HSET", &keys.tasks(), "once", &rec_with(5, 1, 7, "1/", "", "x")]);
    server.command(&["HSET", &keys.tasks(), "plain", &rec(5, 1, 7, "", "z")]);
    for k in ["once", "plain"] {
        seed_lease(&server, keys, k, 7, now - 1_000);
    }
    server.command(&["SET", &keys.leader(), "me:1"]);
    scripts::tick(w, keys, "me:1", 128, 0..=0, 1).await.unwrap();
    let d = dump(&server, keys);
    assert_eq!(d["dead_tasks"], "once=5:1:r2:1/13:lease expiredx");
    assert_eq!(d["tasks"], format!("plain={}", rec(5, 1, 0, "lease expired", "z")));
    assert_eq!(d["ready"], "plain@5");
}

/// A dead letter keeps the task's own settings and `requeue_dead` puts the task back with them
/// (and `get` reads them from the dead letter); a dead letter without them, or one written
/// before the field existed, comes back following the node.
#[tokio::test]
async fn a_requeued_dead_letter_keeps_its_own_settings() {
    let Some((server, timers)) = wheel("o-requeue").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    server.command(&["HSET", &keys.dead_tasks(), "own", "5:2:r5:4/1504:boomx", "old", "5:3:4:bangy"]);
    server.command(&["ZADD", &keys.dead(), "1", "own", "2", "old"]);

    let own = timers.get("own").await.unwrap().expect("the dead letter");
    assert_eq!((own.max_attempts(), own.backoff()), (Some(4), Some(Duration::from_millis(150))));
    assert_eq!((own.payload(), own.last_error()), (&b"x"[..], Some("boom")));
    let old = timers.get("old").await.unwrap().expect("the dead letter");
    assert_eq!((old.max_attempts(), old.payload(), old.last_error()), (None, &b"y"[..], Some("bang")));

    for (key, id) in [("own", "r1"), ("old", "r2")] {
        assert_eq!(scripts::requeue_dead(w, keys, key, id).await.unwrap(), scripts::Requeued::Yes);
    }
    let d = dump(&server, keys);
    let record = |key: &str| {
        d["tasks"].split(' ').find_map(|e| e.strip_prefix(&format!("{key}="))).map(str::to_owned).unwrap_or_default()
    };
    let (own, old) = (record("own"), record("old"));
    assert!(own.ends_with(":0:0:0:0:0:r5:4/1500:x"), "{own}");
    assert!(old.ends_with(":0:0:0:0:0:0:y"), "{old}");
}

/// `schedule.lua` writes the retry field only for a task that has settings of its own, in a
/// batch with others that have none; `reschedule.lua` and a `schedule_or_reset` that moves the
/// task keep it; `upsert.lua` replaces it with its own.
#[tokio::test]
async fn the_record_carries_the_settings_only_when_set_and_moves_keep_them() {
    let Some((server, timers)) = wheel("o-record").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let far = redis_now_ms(&server) + 60_000;
    let own = TaskOptions::new().max_attempts(2).backoff(Duration::from_millis(500));
    let task = |k: &str| NewTask::new(k.to_string(), When::At(far), b"p".to_vec());
    let tasks = [task("a"), task("b").with_options(own), task("c").with_options(TaskOptions::new().max_attempts(4))];
    let answer = scripts::schedule(w, keys, "r1", &tasks, false, None).await.unwrap();
    assert_eq!(answer, [ScheduleAnswer::Created; 3]);
    let d = dump(&server, keys);
    let expected = [("a", rec(far, 0, 0, "", "p")), ("b", rec_with(far, 0, 0, "2/500", "", "p"))];
    let expected = format!("a={} b={} c={}", expected[0].1, expected[1].1, rec_with(far, 0, 0, "4/", "", "p"));
    assert_eq!(d["tasks"], expected);

    // Moved: kept.
    let moved = scripts::reschedule(w, keys, &[("b", When::At(far + 1))]).await.unwrap();
    assert_eq!(moved, [Moved::Yes]);
    // Moved by a schedule_or_reset that has settings of its own: the task keeps its own.
    let reset = [NewTask::new("c".into(), When::At(far + 2), b"q".to_vec()).with_options(own)];
    assert_eq!(scripts::schedule(w, keys, "r2", &reset, true, None).await.unwrap(), [ScheduleAnswer::Moved]);
    let d = dump(&server, keys);
    let expected = format!(
        "a={} b={} c={}",
        rec(far, 0, 0, "", "p"),
        rec_with(far + 1, 0, 0, "2/500", "", "p"),
        rec_with(far + 2, 0, 0, "4/", "", "p")
    );
    assert_eq!(d["tasks"], expected);

    // A series upserted with settings has them; upserted again without, it has none.
    let series =
        Stored { every_ms: 1000, runs: None, missed: MissedRuns::Skip, spec: String::new(), first_due_ms: far };
    let upsert = |options: TaskOptions| NewTask::new("s".into(), When::At(far), b"u".to_vec()).with_options(options);
    scripts::upsert(w, keys, "u1", &upsert(own), &series).await.unwrap();
    let with = dump(&server, keys)["tasks"].clone();
    assert!(with.contains(&format!("s={far}:0:0:1000:-1:2:r5:2/5000:u")), "{with}");
    scripts::upsert(w, keys, "u2", &upsert(TaskOptions::new()), &series).await.unwrap();
    let without = dump(&server, keys)["tasks"].clone();
    assert!(without.contains(&format!("s={far}:0:0:1000:-1:2:0:u")), "{without}");
}
