//! Per-script tests of what recurring series add to the scripts, on seeded keys: a record with a
//! spec (`store/lua/includes/record.lua`), moved on by the next due time the node hands to `ack.lua`
//! (and `claim.lua`, `fail.lua`), the burst cap of a fixed rate in Lua, and `upsert.lua` with the
//! upserts it queues behind a running run (`store/lua/includes/queued.lua`), which whatever ends the
//! run (`ack`, `fail`, the tick) or cancels it takes up.

use super::{acks, dump, meta, redis_now_ms, seed_lease, wheel};
use crate::durable::series::{Spec, Stored, MAX_BURST};
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::{self, Ack, Cancelled, Failed, NewTask, Upserted};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::When;
use crate::durable::{TaskOptions, WheelKeys};
use crate::origin::Origin;
use crate::MissedRuns;

const SPEC: &str = "0 cron Europe/Berlin */5 * * * * *";

/// The record of a series with a spec: due, deliveries, claim token, runs left, skip, the spec,
/// no error, the payload.
fn spec_rec(due: u64, attempt: u32, token: u64, runs: i64, payload: &str) -> String {
    format!("{due}:{attempt}:{token}:0:{runs}:2:c{}:{SPEC}0:{payload}", SPEC.len())
}

fn ack(key: &str, token: &str, next_due: &str) -> Ack {
    Ack {
        key: key.into(),
        token: token.into(),
        next_due: next_due.into(),
        options: TaskOptions::new(),
        run: String::new(),
    }
}

/// `upsert.lua` through its Rust function, for the series `series` under `key` with `payload`,
/// no trace and the node's retry settings.
async fn upsert(w: &WheelClient, keys: &WheelKeys, id: &str, key: &str, series: &Stored, payload: &[u8]) -> Upserted {
    let task = NewTask {
        key: key.into(),
        when: When::At(series.first_due_ms),
        payload: payload.to_vec(),
        origin: Origin::none(),
        options: TaskOptions::new(),
    };
    scripts::upsert(w, keys, id, &task, series).await.unwrap()
}

fn series(first_due_ms: u64, every_ms: u64, spec: &str) -> Stored {
    Stored { every_ms, runs: None, missed: MissedRuns::Skip, spec: spec.into(), first_due_ms }
}

/// An acknowledged run of a series with a spec is moved to the next due time the node handed
/// over, its spec and payload kept; '0', '' or a time not after the run's own end the series;
/// the last counted run ends it whatever the node says. A claim answers the spec beside the task.
#[tokio::test]
async fn ack_moves_a_spec_series_to_the_nodes_next_due() {
    let Some((server, timers)) = wheel("s-spec").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let due = now - 100;
    for (k, runs) in [("on", -1), ("zero", -1), ("none", -1), ("back", -1), ("last", 1), ("counted", 3)] {
        server.command(&["HSET", &keys.tasks(), k, &spec_rec(due, 1, 7, runs, "p")]);
        seed_lease(&server, keys, k, 7, now + 60_000);
    }
    let next = (due + 5000).to_string();
    let given = [
        ack("on", "7", &next),
        ack("zero", "7", "0"),
        ack("none", "7", ""),
        ack("back", "7", &due.to_string()),
        ack("last", "7", &next),
        ack("counted", "7", &next),
    ];
    assert_eq!(scripts::ack(w, keys, &given, Window::Default).await.unwrap(), [true; 6]);
    let d = dump(&server, keys);
    assert_eq!(
        d["tasks"],
        format!("counted={} on={}", spec_rec(due + 5000, 0, 0, 2, "p"), spec_rec(due + 5000, 0, 0, -1, "p"))
    );
    assert_eq!(d["far"], format!("counted@{next} on@{next}"), "beyond the ring of 8 x 100 ms");
    assert!(!d.contains_key("leased"), "{d:?}");
    assert_eq!(meta(&server, keys, "acked"), 6);

    // Claimed when due, the task carries its spec and policy for the worker to read (a claim
    // takes a task once its score in `ready` is due: one not yet due stays).
    server.command(&["DEL", &keys.far()]);
    server.command(&["ZADD", &keys.ready(), &next, "on"]);
    assert!(scripts::claim(w, keys, 1, "c0", false, "").await.unwrap().is_empty(), "claimed before its due time");
    server.command(&["ZADD", &keys.ready(), &due.to_string(), "on"]);
    let claimed = scripts::claim(w, keys, 1, "c1", false, "").await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].spec, Some(Spec { text: SPEC.into(), missed: b'2' }));
    assert_eq!(claimed[0].task.payload(), b"p");
    // A record without a spec carries none.
    super::super::store::scripts::schedule(
        w,
        keys,
        "r1",
        &[scripts::NewTask::new("plain".into(), crate::durable::time::When::At(1), b"q".to_vec())],
        false,
        None,
    )
    .await
    .unwrap();
    let plain = scripts::claim(w, keys, 1, "c2", false, "c1").await.unwrap();
    assert_eq!((plain[0].task.key(), plain[0].spec.as_ref()), ("plain", None));
}

/// A fixed rate moved on in Lua makes up at most MAX_BURST missed runs: the earlier ones are
/// skipped, the last MAX_BURST are due at once, on the series' grid.
#[tokio::test]
async fn a_fixed_rate_burst_in_lua_is_capped() {
    let Some((server, timers)) = wheel("s-burst").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let period = 10;
    let due = now - 10_000;
    let few = now - 35;
    for (k, d) in [("many", due), ("few", few)] {
        server.command(&["HSET", &keys.tasks(), k, &format!("{d}:1:7:{period}:-1:0:0:x")]);
    }
    assert_eq!(scripts::ack(w, keys, &acks(&[("many", "7"), ("few", "7")]), Window::Default).await.unwrap(), [true; 2]);
    let after = redis_now_ms(&server);
    let due_of = |k: &str| -> u64 {
        let r = server.command(&["HGET", &keys.tasks(), k]);
        r.as_str().unwrap().split(':').next().unwrap().parse().unwrap()
    };
    let next = due_of("many");
    assert_eq!((next - due) % period, 0, "on the grid");
    let behind_now = |t: u64| (t.saturating_sub(next)) / period + 1;
    // From `next` up to Redis's now at the ack there are MAX_BURST runs (one more if a ms passed).
    let burst = behind_now(now);
    assert!(
        next <= now && (MAX_BURST as u64 - 1..=MAX_BURST as u64 + (after - now) / period + 1).contains(&burst),
        "{next} {now} {burst}"
    );
    assert_eq!(due_of("few"), few + period, "under the cap: every missed run");
}

/// `upsert.lua`: makes the task when none is pending; keeps the same series as it is (its next
/// run, so its phase); replaces a waiting or ready one whole; queues behind a run in flight (held
/// under a live lease, or one that ran out, or waiting to be delivered again), the later upsert
/// replacing the earlier, and an upsert of the series in flight dropping what was queued. The run
/// in flight is never lost: a failure (not its last attempt) is retried and the tick delivers a
/// run whose lease ran out again, the queued series waiting behind them; whatever ends the run
/// (its ack, its death) takes the queued series up. A cancel drops what is queued. A retry of one
/// call answers the same and changes nothing.
#[tokio::test]
async fn upsert_makes_keeps_replaces_or_queues_behind_a_run_in_flight() {
    let Some((server, timers)) = wheel("s-upsert").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    // The cursor at now, as a leader keeps it: a task due by now is ready.
    server.command(&["SET", &keys.cursor(), &(now / 100).to_string()]);
    let far = now + 60_000;
    let a = series(far, 0, SPEC);
    assert_eq!(upsert(w, keys, "u1", "a", &a, b"one").await, Upserted::Created);
    let d = dump(&server, keys);
    let first = format!("{far}:0:0:0:-1:2:c{}:{SPEC}0:one", SPEC.len());
    assert_eq!(d["tasks"], format!("a={first}"));
    assert_eq!(d["far"], format!("a@{far}"));
    assert_eq!(meta(&server, keys, "scheduled"), 1);
    // Its retry: the same answer, nothing changed.
    assert_eq!(upsert(w, keys, "u1", "a", &series(far + 1, 5, ""), b"x").await, Upserted::Created);
    assert_eq!(dump(&server, keys), d);
    // The same series again, as a node upserts it at each start (its first run worked out anew):
    // kept whole, its next run unchanged.
    assert_eq!(upsert(w, keys, "u1b", "a", &series(far + 7_000, 0, SPEC), b"one").await, Upserted::Kept);
    let mut after = dump(&server, keys);
    assert_eq!(after.remove("req:u1b").as_deref(), Some("2"), "its answer, kept for a retry");
    assert_eq!(after, d);
    // Replaced whole: a fixed rate now, another payload, its first run due now (ready).
    let b = series(now - 200, 250, "");
    assert_eq!(upsert(w, keys, "u2", "a", &b, b"two").await, Upserted::Replaced);
    let d = dump(&server, keys);
    assert_eq!(d["tasks"], format!("a={}:0:0:250:-1:2:0:two", now - 200));
    assert_eq!(d["ready"], format!("a@{}", now - 200));
    assert!(!d.contains_key("far"), "the old place is gone: {d:?}");
    // Another payload, or another period, is another series; the same of both is kept.
    assert_eq!(upsert(w, keys, "u2b", "a", &series(now + 900, 250, ""), b"two").await, Upserted::Kept);
    let mut after = dump(&server, keys);
    after.remove("req:u2b");
    assert_eq!(after, d);
    server.command(&["DEL", &keys.ready()]);
    server.command(&["HDEL", &keys.tasks(), "a"]);

    // Runs in flight: `r`, `f`, `c`, `t` and `s` held under a live lease, `e` under one that ran
    // out (the tick has not passed it yet), `w` waiting to be delivered again after a failure.
    // A lease is a claim call's: `t` and `e` were claimed by calls of their own (tokens 9 and 8),
    // the others by one call (token 7).
    let running = spec_rec(now - 100, 1, 7, -1, "old");
    let (running_e, running_t) = (spec_rec(now - 100, 1, 8, -1, "old"), spec_rec(now - 100, 1, 9, -1, "old"));
    for (k, tok) in [("r", 7), ("f", 7), ("c", 7), ("t", 9), ("s", 7), ("e", 8)] {
        let rec = spec_rec(now - 100, 1, tok, -1, "old");
        server.command(&["HSET", &keys.tasks(), k, &rec]);
        let until = if k == "e" { now - 10 } else { now + 60_000 };
        seed_lease(&server, keys, k, tok, until);
    }
    let retrying = spec_rec(far, 1, 0, -1, "old");
    server.command(&["HSET", &keys.tasks(), "w", &retrying]);
    server.command(&["ZADD", &keys.far(), &far.to_string(), "w"]);
    assert_eq!(upsert(w, keys, "u3", "r", &series(far, 0, SPEC), b"early").await, Upserted::Queued);
    assert_eq!(upsert(w, keys, "u4", "r", &series(far + 1, 0, SPEC), b"late").await, Upserted::Queued);
    for (i, k) in ["f", "c", "t", "e", "w", "s"].iter().enumerate() {
        let id = format!("u5{i}");
        assert_eq!(upsert(w, keys, &id, k, &series(now - 200, 0, SPEC), b"new").await, Upserted::Queued);
    }
    // The series in flight upserted again: what was queued behind it goes, the series goes on.
    assert_eq!(upsert(w, keys, "u6", "s", &series(far, 0, SPEC), b"old").await, Upserted::Kept);
    let d = dump(&server, keys);
    let queued = |due: u64, p: &str| format!("{due}:0:0:0:-1:2:c{}:{SPEC}0:{p}", SPEC.len());
    assert_eq!(
        d["tasks"],
        format!("c={running} e={running_e} f={running} r={running} s={running} t={running_t} w={retrying}"),
        "the runs are left alone"
    );
    let new = queued(now - 200, "new");
    assert_eq!(d["upserts"], format!("c={new} e={new} f={new} r={} t={new} w={new}", queued(far + 1, "late")));

    // The ack takes it up instead of the node's next due time.
    assert_eq!(
        scripts::ack(w, keys, &[ack("r", "7", &(now + 5000).to_string())], Window::Default).await.unwrap(),
        [true]
    );
    // A failure (not its last attempt) is retried after its backoff; the queued series waits.
    assert_eq!(scripts::fail(w, keys, &ack("f", "7", ""), "boom", Window::Default).await.unwrap(), Failed::Retried);
    // A cancel leaves the run to its lease and drops what was queued behind it.
    assert_eq!(scripts::cancel(w, keys, "x1", &["c"]).await.unwrap(), [Cancelled::Running]);
    let d = dump(&server, keys);
    let failed = server.command(&["HGET", &keys.tasks(), "f"]).as_str().unwrap().to_string();
    let (f_due, f_rest) = failed.split_once(':').unwrap();
    let f_due: u64 = f_due.parse().unwrap();
    assert!(f_due >= now + 1000, "retried after its backoff of 1 s: {failed}");
    assert_eq!(f_rest, format!("1:0:0:-1:2:c{}:{SPEC}4:boomold", SPEC.len()), "the same run, its attempt kept");
    assert_eq!(
        d["tasks"],
        format!(
            "c={running} e={running_e} f={failed} r={} s={running} t={running_t} w={retrying}",
            queued(far + 1, "late")
        )
    );
    assert_eq!(d["upserts"], format!("e={new} f={new} t={new} w={new}"));
    assert!(d["far"].contains(&format!("r@{}", far + 1)), "{d:?}");

    // The tick, finding the leases of `t` and `e` ran out, hands their runs out again (ready,
    // their attempt kept); the series queued behind them waits.
    server.command(&["ZADD", &keys.leased(), &(now - 10).to_string(), "9"]);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let tick = redis_now_ms(&server) / 100;
    scripts::tick(w, keys, "me:1", 128, tick - 2..=tick + 2, 1).await.unwrap();
    let d = dump(&server, keys);
    let expired = format!("{}:1:0:0:-1:2:c{}:{SPEC}13:lease expiredold", now - 100, SPEC.len());
    assert!(d["tasks"].contains(&format!("e={expired}")) && d["tasks"].contains(&format!("t={expired}")), "{d:?}");
    assert_eq!(d["ready"], format!("e@{0} t@{0}", now - 100));
    assert_eq!(d["upserts"], format!("e={new} f={new} t={new} w={new}"));

    // Delivered again as attempt 2 and acknowledged: the queued series takes over, due at once.
    let again = scripts::claim(w, keys, 8, "c9", false, "").await.unwrap();
    let mut got: Vec<(&str, u32)> = again.iter().map(|c| (c.task.key(), c.task.attempt())).collect();
    got.sort();
    assert_eq!(got, [("e", 2), ("t", 2)]);
    let acks: Vec<Ack> = again.iter().map(|c| ack(c.task.key(), &c.token, &(now + 5000).to_string())).collect();
    assert_eq!(scripts::ack(w, keys, &acks, Window::Default).await.unwrap(), [true; 2]);
    let d = dump(&server, keys);
    assert!(d["tasks"].contains(&format!("e={new}")) && d["tasks"].contains(&format!("t={new}")), "{d:?}");
    assert_eq!(d["upserts"], format!("f={new} w={new}"));
    // Each run's outcome is in the history once: `r`'s ack, then the two delivered again.
    let history = d["history"].clone();
    assert_eq!(history.matches(":a:").count(), 3, "{history}");
}

/// A series with a spec whose last attempt fails goes on at the node's next due time (a copy to
/// the dead letters); one whose last attempt's lease ran out has no node's answer, so the tick
/// makes its next run due at once (its own end puts the series back on its schedule).
#[tokio::test]
async fn a_spec_series_goes_on_after_its_last_attempt() {
    let Some((server, timers)) = wheel("s-spec-dead").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["SET", &keys.cursor(), &(now / 100).to_string()]);
    let due = now - 1000;
    // The wheel's max attempts are 3: this is the last.
    server.command(&["HSET", &keys.tasks(), "failed", &spec_rec(due, 3, 7, -1, "p")]);
    seed_lease(&server, keys, "failed", 7, now + 60_000);
    let next = now + 30_000;
    let got = scripts::fail(w, keys, &ack("failed", "7", &next.to_string()), "boom", Window::Default).await.unwrap();
    assert_eq!(got, Failed::Dead);
    let d = dump(&server, keys);
    assert_eq!(d["tasks"], format!("failed={}", spec_rec(next, 0, 0, -1, "p")));
    assert_eq!(d["far"], format!("failed@{next}"));
    assert!(d["dead_tasks"].starts_with("failed="), "{d:?}");

    server.command(&["DEL", &keys.far()]);
    server.command(&["HSET", &keys.tasks(), "expired", &spec_rec(due, 3, 8, -1, "p")]);
    seed_lease(&server, keys, "expired", 8, now - 10);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let tick = redis_now_ms(&server) / 100;
    scripts::tick(w, keys, "me:1", 128, tick - 2..=tick + 2, 1).await.unwrap();
    let record = server.command(&["HGET", &keys.tasks(), "expired"]).as_str().expect("the series ended").to_string();
    let next_due: u64 = record.split(':').next().unwrap().parse().unwrap();
    assert!(next_due >= now && next_due <= redis_now_ms(&server), "{record}");
    assert_eq!(record, spec_rec(next_due, 0, 0, -1, "p"));
    let d = dump(&server, keys);
    assert!(d["dead_tasks"].contains("expired="), "{d:?}");
    // Due at once: ready, or in the far tier or its slot until the next tick (its due time rounds
    // up to a tick the cursor has not reached yet).
    // (The history keeps the run that died, beside the places of the wheel.)
    assert!(d["history"].contains(":d:") && d["history"].contains("expiredlease expired"), "{d:?}");
    let placed = d
        .iter()
        .filter(|(k, v)| !["tasks", "dead_tasks", "history"].contains(&k.as_str()) && v.contains("expired"))
        .count();
    assert_eq!(placed, 2, "its dead letter and one place: {d:?}");
}

/// A run in flight that dies hands its key to the series queued behind it: after its last
/// attempt failed (`fail.lua`) or its last lease ran out (the tick), the run is a dead letter and
/// in the history, and the queued series is placed. A `schedule_or_reset` that moves a run whose
/// lease ran out keeps the series queued behind it (the run is still in flight); a run ended as
/// cancelled (`cancel_running`, then its outcome) takes it away, as `cancel` does.
#[tokio::test]
async fn a_run_that_dies_hands_its_key_to_the_queued_series() {
    let Some((server, timers)) = wheel("s-upsert-dies").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["SET", &keys.cursor(), &(now / 100).to_string()]);
    let far = now + 60_000;
    // The wheel's max attempts are 3: each of these runs its last.
    // A lease is a claim call's: `failed` and `stopped` were claimed by one (token 7), `expired`
    // and `reset` by another (token 8), whose lease ran out.
    for (k, tok, until) in
        [("failed", 7, now + 60_000), ("expired", 8, now - 10), ("reset", 8, now - 10), ("stopped", 7, now + 60_000)]
    {
        let rec = spec_rec(now - 100, if k == "reset" { 1 } else { 3 }, tok, -1, "old");
        server.command(&["HSET", &keys.tasks(), k, &rec]);
        seed_lease(&server, keys, k, tok, until);
        assert_eq!(upsert(w, keys, &format!("u-{k}"), k, &series(far, 0, SPEC), b"new").await, Upserted::Queued);
    }
    let new = format!("{far}:0:0:0:-1:2:c{}:{SPEC}0:new", SPEC.len());

    let failed = ack("failed", "7", &(now + 5000).to_string());
    assert_eq!(scripts::fail(w, keys, &failed, "boom", Window::Default).await.unwrap(), Failed::Dead);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let tick = redis_now_ms(&server) / 100;
    scripts::tick(w, keys, "me:1", 128, tick - 2..=tick + 2, 1).await.unwrap();
    let d = dump(&server, keys);
    for k in ["failed", "expired"] {
        assert!(d["tasks"].contains(&format!("{k}={new}")), "{k}: the queued series placed: {d:?}");
        assert!(d["far"].contains(&format!("{k}@{far}")), "{d:?}");
        assert!(d["dead_tasks"].contains(&format!("{k}=")), "{k}: its run is a dead letter: {d:?}");
        assert!(
            d["history"].contains(&format!("{k}boom")) || d["history"].contains(&format!("{k}lease expired")),
            "{d:?}"
        );
    }
    // The reset run came back by the tick as its next attempt; its queued series still waits.
    let moved = scripts::schedule(
        w,
        keys,
        "r-reset",
        &[NewTask::new("reset".into(), When::At(now + 30_000), b"ignored".to_vec())],
        true,
        None,
    )
    .await
    .unwrap();
    assert_eq!(moved, [scripts::ScheduleAnswer::Moved]);
    let d = dump(&server, keys);
    assert_eq!(d["upserts"], format!("reset={new} stopped={new}"), "{d:?}");

    // Cancelled while it ran: the run ends as cancelled when its outcome comes, and the queued
    // series goes with it.
    assert!(scripts::control::cancel_running(w, keys, "stopped").await.unwrap());
    assert_eq!(
        scripts::fail(w, keys, &ack("stopped", "7", ""), "late", Window::Default).await.unwrap(),
        Failed::Cancelled
    );
    let d = dump(&server, keys);
    assert_eq!(d["upserts"], format!("reset={new}"), "{d:?}");
    assert!(!d["tasks"].contains("stopped="), "{d:?}");
}
