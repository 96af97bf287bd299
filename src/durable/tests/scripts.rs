//! One script at a time, in the style of asynq's `rdb_test.go`: seed the wheel's keys, run one
//! script through its Rust function, compare the keys afterwards (every key but `meta`, whose
//! counters are checked one by one). Deterministic: no worker or leader runs, so nothing moves
//! but what the script under test moves; times are chosen relative to Redis's clock read by the
//! test.

use std::time::Duration;

use super::{acks, dump, expect, meta, redis_now_ms, seed_lease, wheel, SLOTS, TICK_MS};
use crate::durable::store::scripts::{
    self, Ack, Bid, Cancelled, Claim, Failed, Moved, NewTask, Requeued, ScheduleAnswer, TickReply,
};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::When;
use crate::durable::{TaskState, WheelKeys};

/// A task's record as the scripts write it (`store/lua/includes/record.lua`): due, deliveries, claim
/// token, period, runs left, missed-run policy, then the last error's length, the error and the
/// payload.
fn rec(due: u64, attempt: u32, token: u64, err: &str, payload: &str) -> String {
    format!("{due}:{attempt}:{token}:0:0:0:{}:{err}{payload}", err.len())
}

/// A dead letter's record: its last due time, deliveries, the error's length, the error and the
/// payload.
fn dead_rec(due: u64, attempts: u32, err: &str, payload: &str) -> String {
    format!("{due}:{attempts}:{}:{err}{payload}", err.len())
}

/// `k=<record>` pairs as `dump` shows a hash, in key order.
fn hash(pairs: &[(&str, String)]) -> String {
    let mut pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(" ")
}

/// The cursor the wheel was opened with.
fn cursor(server: &super::Server, keys: &WheelKeys) -> u64 {
    server.command(&["GET", &keys.cursor()]).as_int().expect("cursor") as u64
}

/// Seeds task `k` as `schedule` leaves one due at the start of tick `tick`, within the ring.
fn seed_waiting(server: &super::Server, keys: &WheelKeys, k: &str, tick: u64) {
    let due = tick * TICK_MS;
    server.command(&["HSET", &keys.tasks(), k, &rec(due, 0, 0, "", "x")]);
    server.command(&["RPUSH", &keys.slot(tick % SLOTS), k]);
    server.command(&["INCR", &keys.ring()]);
}

/// Seeds task `k` as `schedule` leaves one due at `due`, beyond the ring.
fn seed_far(server: &super::Server, keys: &WheelKeys, k: &str, due: u64) {
    server.command(&["HSET", &keys.tasks(), k, &rec(due, 0, 0, "", "x")]);
    server.command(&["ZADD", &keys.far(), &due.to_string(), k]);
}

/// Seeds task `k` as `schedule` leaves a task that is due.
fn seed_ready(server: &super::Server, keys: &WheelKeys, k: &str, due: u64, payload: &str) {
    server.command(&["HSET", &keys.tasks(), k, &rec(due, 0, 0, "", payload)]);
    server.command(&["ZADD", &keys.ready(), &due.to_string(), k]);
}

/// Seeds task `k` as a claim leaves it: delivery `attempt` under token `7`, its lease ending at
/// `lease_end`. A lease is a claim call's: the tasks seeded so share one, which the last of them
/// sets.
fn seed_running(server: &super::Server, keys: &WheelKeys, k: &str, due: u64, attempt: u32, lease_end: u64) {
    seed_claimed(server, keys, k, due, attempt, 7, lease_end);
}

/// Seeds task `k` as a claim leaves it under `token`, its claim call's lease ending at
/// `lease_end`: with a token other than 7, a call of its own (a lease that ran out beside
/// running tasks, say).
fn seed_claimed(server: &super::Server, keys: &WheelKeys, k: &str, due: u64, attempt: u32, token: u64, lease_end: u64) {
    server.command(&["HSET", &keys.tasks(), k, &rec(due, attempt, token, "", "x")]);
    seed_lease(server, keys, k, token, lease_end);
}

fn new_task(key: &str, due_ms: u64) -> NewTask {
    NewTask::new(key.to_string(), When::At(due_ms), b"x".to_vec())
}

#[tokio::test]
async fn schedule_writes_the_record_and_its_place_and_a_retry_gets_the_same_answer() {
    let Some((server, timers)) = wheel("s-schedule").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let (soon, far, past) = ((c + 3) * TICK_MS, (c + SLOTS + 5) * TICK_MS, redis_now_ms(&server) - 5_000);
    let tasks = [new_task("a", soon), new_task("b", far), new_task("p", past), new_task("a", soon + 1)];
    let got = scripts::schedule(w, keys, "r1", &tasks, false, None).await.unwrap();
    assert_eq!(
        got,
        [ScheduleAnswer::Created, ScheduleAnswer::Created, ScheduleAnswer::Created, ScheduleAnswer::Duplicate]
    );
    let d = dump(&server, keys);
    let records = [("a", rec(soon, 0, 0, "", "x")), ("b", rec(far, 0, 0, "", "x")), ("p", rec(past, 0, 0, "", "x"))];
    let want = expect(&[
        ("cursor", &c.to_string()),
        ("tasks", &hash(&records)),
        (&format!("slot:{}", (c + 3) % SLOTS), "a"),
        ("ring", "1"),
        ("far", &format!("b@{far}")),
        ("ready", &format!("p@{past}")),
        ("wake", "1"),
        ("req:r1", "1110"),
    ]);
    assert_eq!(d, want);
    assert_eq!(meta(&server, keys, "scheduled"), 3);

    // A delay is added to Redis's clock (rounded up), and the slot it lands in is found from this
    // process's estimate of that clock.
    let before = redis_now_ms(&server);
    let delayed = |key: &str, ms: u64| NewTask::new(key.into(), When::Delay(ms), b"y".to_vec());
    let got = scripts::schedule(w, keys, "r2", &[delayed("c", 30_000), delayed("d", 350)], false, None).await.unwrap();
    assert_eq!(got, [ScheduleAnswer::Created, ScheduleAnswer::Created]);
    let after = redis_now_ms(&server);
    let due: u64 = server.command(&["ZSCORE", &keys.far(), "c"]).as_str().unwrap().parse().unwrap();
    assert!(due > before + 30_000 - 1 && due <= after + 30_001, "due {due}, now {before}..{after}");
    let d = dump(&server, keys);
    assert_eq!(d["ring"], "2", "the delayed task did not go to its slot: {d:?}");

    // A key pending from an earlier call is a duplicate; two tasks of one tick share its slot.
    let same = (c + 7) * TICK_MS;
    let tasks2 = [new_task("c", soon), new_task("e", same - 10), new_task("f", same)];
    let got = scripts::schedule(w, keys, "r3", &tasks2, false, None).await.unwrap();
    assert_eq!(got, [ScheduleAnswer::Duplicate, ScheduleAnswer::Created, ScheduleAnswer::Created]);
    let d = dump(&server, keys);
    assert_eq!(d[&format!("slot:{}", (c + 7) % SLOTS)], "e f", "{d:?}");
    assert_eq!(d["ring"], "4", "{d:?}");
    assert_eq!(meta(&server, keys, "scheduled"), 7);
    server.command(&["HDEL", &keys.tasks(), "e", "f"]);
    server.command(&["DEL", &keys.slot((c + 7) % SLOTS)]);
    server.command(&["SET", &keys.ring(), "2"]);

    // The same call again (its reply was lost) answers as the first did, writing nothing, even
    // after its tasks finished.
    server.command(&["HDEL", &keys.tasks(), "a", "b", "p"]);
    server.command(&["DEL", &keys.far(), &keys.ready()]);
    let d = dump(&server, keys);
    let got = scripts::schedule(w, keys, "r1", &tasks, false, None).await.unwrap();
    use ScheduleAnswer::{AlreadyByThisRequest as Again, Duplicate};
    assert_eq!(got, [Again, Again, Again, Duplicate]);
    assert_eq!(dump(&server, keys), d, "the retry wrote something");
    // The answer is kept for the request window only.
    let ttl = server.command(&["PTTL", &keys.request("r1")]).as_int().unwrap();
    assert!(ttl > 0 && ttl as u64 <= w.cfg.request_ttl_ms, "{ttl}");
}

/// One call may carry times on Redis's clock and delays side by side (the coalescer merges
/// `schedule_at` and `schedule` calls): each task gets its own kind of due time, with or without
/// `reset`.
#[tokio::test]
async fn a_call_mixes_delays_and_times_on_redis_clock() {
    let Some((server, timers)) = wheel("s-mixed").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let delayed = |key: &str, ms: u64| NewTask::new(key.into(), When::Delay(ms), b"y".to_vec());
    let (soon, far) = ((c + 3) * TICK_MS, (c + SLOTS + 5) * TICK_MS);
    for (reset, tag) in [(false, "n"), (true, "r")] {
        let before = redis_now_ms(&server);
        let tasks = [
            new_task(&format!("{tag}1"), soon),
            delayed(&format!("{tag}2"), 40_000),
            new_task(&format!("{tag}3"), far),
        ];
        let got = scripts::schedule(w, keys, &format!("mixed-{tag}"), &tasks, reset, None).await.unwrap();
        assert_eq!(got, [ScheduleAnswer::Created; 3]);
        let after = redis_now_ms(&server);
        let due = |k: &str| -> u64 {
            let rec = server.command(&["HGET", &keys.tasks(), k]);
            rec.as_str().unwrap().split(':').next().unwrap().parse().unwrap()
        };
        assert_eq!(due(&format!("{tag}1")), soon);
        let delayed_due = due(&format!("{tag}2"));
        assert!(delayed_due >= before + 40_000 && delayed_due <= after + 40_001, "{delayed_due}: {before}..{after}");
        assert_eq!(due(&format!("{tag}3")), far);
    }
}
/// The caller's hint that its tasks have slots of their own (each task's entry then goes at
/// once, not gathered by slot) is right only when no slot was named twice; and a wrong hint
/// changes how the entries are written (one RPUSH a task rather than one a slot), never what:
/// the same call with the hint right and wrong leaves the same keys.
#[tokio::test]
async fn own_slots_is_a_hint_that_changes_how_entries_are_written_not_what() {
    let Some((server, timers)) = wheel("s-own-slots").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let at = |tick: u64| When::At(tick * TICK_MS);
    assert!(w.slot_guess([at(c + 5), at(c + 9)]).own_slots);
    assert!(!w.slot_guess([at(c + 5), at(c + 9), at(c + 5)]).own_slots, "two tasks of one tick");
    // A tick the cursor has passed and the one a revolution later name the same slot; a tick more
    // than a revolution ahead names none (it waits in the far tier).
    let apart = w.slot_guess([at(c - 1), at(c - 1 + SLOTS)]);
    assert!(!apart.own_slots && apart.indices == [(c - 1) % SLOTS], "one slot, a revolution apart");
    assert!(w.slot_guess([at(c + 5), at(c + 5 + 1000 * SLOTS)]).own_slots);

    // x and y share tick c + 5's slot; w2 is a key given twice.
    let tasks = [
        new_task("x", (c + 5) * TICK_MS),
        new_task("z", (c + 6) * TICK_MS),
        new_task("y", (c + 5) * TICK_MS - 40),
        new_task("w2", (c + 7) * TICK_MS),
        new_task("w2", (c + 8) * TICK_MS),
    ];
    let right = w.slot_guess(tasks.iter().map(|t| t.when));
    assert!(!right.own_slots);
    let (mut after, mut pushes) = (Vec::new(), Vec::new());
    for (request, own_slots) in [("right", false), ("wrong", true)] {
        let guess = crate::durable::store::client::SlotGuess { indices: right.indices.clone(), own_slots };
        // The pushes are counted on Redis (`INFO commandstats`); what was written, on every store.
        if let Some(redis) = server.redis() {
            redis.command(&["CONFIG", "RESETSTAT"]);
        }
        let got = scripts::schedule_in(w, keys, request, &tasks, false, None, &guess).await.unwrap();
        if let Some(redis) = server.redis() {
            pushes.push(redis.command_calls().get("rpush").copied().unwrap_or(0));
        }
        assert_eq!(
            got,
            [
                ScheduleAnswer::Created,
                ScheduleAnswer::Created,
                ScheduleAnswer::Created,
                ScheduleAnswer::Created,
                ScheduleAnswer::Duplicate
            ]
        );
        let mut d = dump(&server, keys);
        d.remove(&format!("req:{request}"));
        after.push(d);
        for k in ["x", "y", "z", "w2"] {
            server.command(&["HDEL", &keys.tasks(), k]);
        }
        for t in 5..=8 {
            server.command(&["DEL", &keys.slot((c + t) % SLOTS)]);
        }
        server.command(&["DEL", &keys.ring(), &keys.request(request)]);
    }
    assert_eq!(after[0][&format!("slot:{}", (c + 5) % SLOTS)], "x y", "{:?}", after[0]);
    assert_eq!(after[0][&format!("slot:{}", (c + 7) % SLOTS)], "w2", "{:?}", after[0]);
    assert_eq!(after[0]["ring"], "4", "{:?}", after[0]);
    assert_eq!(after[1], after[0], "a wrong hint changed what was written");
    if server.redis().is_some() {
        assert_eq!(pushes, [3, 4], "gathered: one RPUSH a slot; at once: one a task");
    }
}

/// With `reset`, a call that makes one task ready and then moves a pending one still wakes a
/// worker: the move writes what the call placed before it, and that task's wake-up counts.
#[tokio::test]
async fn schedule_or_reset_wakes_for_a_ready_task_placed_before_a_move() {
    let Some((server, timers)) = wheel("s-reset-wake").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    seed_waiting(&server, keys, "pending", c + 3);
    let past = redis_now_ms(&server) - 1_000;
    let tasks = [new_task("now", past), new_task("pending", (c + 4) * TICK_MS)];
    let got = scripts::schedule(w, keys, "r-reset", &tasks, true, None).await.unwrap();
    assert_eq!(got, [ScheduleAnswer::Created, ScheduleAnswer::Moved]);
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("now@{past}"), "{d:?}");
    assert_eq!(d.get("wake").map(String::as_str), Some("1"), "no wake-up for the ready task: {d:?}");
}

/// What cancel answers and leaves, for every state a task can be in.
#[tokio::test]
async fn cancel_takes_waiting_ready_and_expired_tasks_and_leaves_running_ones() {
    let Some((server, timers)) = wheel("s-cancel").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let c = cursor(&server, keys);
    seed_waiting(&server, keys, "waiting", c + 2);
    seed_far(&server, keys, "far", 99_999_999_999_999);
    seed_ready(&server, keys, "ready", 5, "x");
    seed_running(&server, keys, "running", 5, 1, now + 60_000);
    seed_claimed(&server, keys, "expired", 5, 1, 8, now - 1_000);
    let before = dump(&server, keys);

    let names = ["waiting", "far", "ready", "running", "expired", "missing", "waiting"];
    let got = scripts::cancel(w, keys, "c1", &names).await.unwrap();
    use Cancelled::{NotPending, Running, Yes};
    assert_eq!(got, [Yes, Yes, Yes, Running, Yes, NotPending, NotPending], "{names:?}");

    // The ring's entry stays in its slot (the tick drops it); the rest is gone.
    let mut want = before.clone();
    want.insert("tasks".into(), hash(&[("running", rec(5, 1, 7, "", "x"))]));
    want.remove("far");
    want.remove("ready");
    want.insert("leased".into(), format!("7@{}", now + 60_000));
    want.insert("claimed".into(), "running@7".into());
    want.insert("req:c1".into(), "1112100".into());
    assert_eq!(dump(&server, keys), want);
    assert_eq!(meta(&server, keys, "cancelled"), 4);

    // A retry of the same call (its reply was lost) answers as the first did, and takes nothing
    // scheduled under the key since.
    seed_waiting(&server, keys, "waiting", c + 2);
    let got = scripts::cancel(w, keys, "c1", &names).await.unwrap();
    assert_eq!(got, [Yes, Yes, Yes, Running, Yes, NotPending, NotPending]);
    assert!(dump(&server, keys)["tasks"].contains("waiting="), "the retry cancelled a task scheduled since");
}

#[tokio::test]
async fn reschedule_moves_waiting_and_ready_tasks_and_leaves_a_running_one() {
    let Some((server, timers)) = wheel("s-move").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let c = cursor(&server, keys);
    seed_waiting(&server, keys, "a", c + 2);
    seed_ready(&server, keys, "b", 5, "x");
    seed_running(&server, keys, "run", 5, 1, now + 60_000);
    let before = dump(&server, keys);

    let got = scripts::reschedule(w, keys, &[("run", When::Delay(0)), ("nope", When::Delay(0))]).await.unwrap();
    assert_eq!(got, [Moved::Running, Moved::NotPending]);
    assert_eq!(dump(&server, keys), before, "a running task was touched");

    // `a` to the past (ready at once), `b` into the ring, then again: its last time counts.
    let (to, last) = ((c + 4) * TICK_MS, (c + 5) * TICK_MS);
    let moves = [("a", When::At(7)), ("b", When::At(to)), ("b", When::At(last))];
    assert_eq!(scripts::reschedule(w, keys, &moves).await.unwrap(), [Moved::Yes, Moved::Yes, Moved::Yes]);
    let d = dump(&server, keys);
    assert_eq!(d["ready"], "a@7");
    assert_eq!(d[&format!("slot:{}", (c + 5) % SLOTS)], "b");
    assert!(!d.contains_key(&format!("slot:{}", (c + 4) % SLOTS)), "{d:?}");
    // `a`'s old entry stays in its slot until the cursor passes it.
    assert_eq!(d[&format!("slot:{}", (c + 2) % SLOTS)], "a");
    assert_eq!(d["ring"], "2");
    assert!(d["tasks"].contains(&format!("a={}", rec(7, 0, 0, "", "x"))), "{d:?}");
    assert!(d["tasks"].contains(&format!("b={}", rec(last, 0, 0, "", "x"))), "{d:?}");
}

/// A batch moves its tasks in order, as so many calls one after the other, each answering for
/// itself: a key given twice is moved twice (the later time stands, and only it is placed), a
/// running task and a missing one are left alone, and a task moved into the past is ready and
/// wakes a worker. The old slot entries stay for the tick to drop.
#[tokio::test]
async fn reschedule_moves_a_batch_in_order_each_answering_for_itself() {
    let Some((server, timers)) = wheel("s-move-batch").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let now = redis_now_ms(&server);
    seed_waiting(&server, keys, "a", c + 2);
    seed_waiting(&server, keys, "b", c + 3);
    seed_running(&server, keys, "run", 5, 1, now + 60_000);
    let (first, last) = ((c + 5) * TICK_MS, (c + 6) * TICK_MS);
    let moves = [
        ("a", When::At(first)),
        ("run", When::Delay(0)),
        ("nope", When::Delay(0)),
        ("b", When::At(1)),
        ("a", When::At(last)),
    ];
    let got = scripts::reschedule(w, keys, &moves).await.unwrap();
    assert_eq!(got, [Moved::Yes, Moved::Running, Moved::NotPending, Moved::Yes, Moved::Yes]);
    let d = dump(&server, keys);
    assert!(!d.contains_key(&format!("slot:{}", (c + 5) % SLOTS)), "a's first move was placed: {d:?}");
    assert_eq!(d[&format!("slot:{}", (c + 6) % SLOTS)], "a");
    for (k, t) in [("a", c + 2), ("b", c + 3)] {
        assert_eq!(d[&format!("slot:{}", t % SLOTS)], k, "{d:?}");
    }
    assert_eq!(d["ring"], "3", "{d:?}");
    let records =
        hash(&[("a", rec(last, 0, 0, "", "x")), ("b", rec(1, 0, 0, "", "x")), ("run", rec(5, 1, 7, "", "x"))]);
    assert_eq!(d["tasks"], records, "(a running task must not be touched)");
    assert_eq!(d["ready"], "b@1");
    assert_eq!(d["wake"], "1", "the task made ready woke no worker");
}

/// A claim leases what is ready, oldest first; its retry (same id) gets the same tasks back
/// without another delivery; a replay-only call under a new id takes nothing.
#[tokio::test]
async fn claim_leases_ready_tasks_and_its_retry_gets_them_back() {
    let Some((server, timers)) = wheel("s-claim").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    for (k, due) in [("b", 20), ("a", 10), ("c", 30)] {
        seed_ready(&server, keys, k, due, k);
    }
    let before = redis_now_ms(&server);
    let got = scripts::claim(w, keys, 2, "k1", false, "").await.unwrap();
    let after = redis_now_ms(&server);
    let summary: Vec<(String, u32, String)> =
        got.iter().map(|c| (c.task.key.clone(), c.task.attempt, c.token.clone())).collect();
    assert_eq!(summary, [("a".into(), 1, "1".into()), ("b".into(), 1, "2".into())]);
    assert_eq!(got[0].task.payload, b"a");
    assert_eq!(got[0].task.due, crate::durable::time::from_unix_ms(10));

    let d = dump(&server, keys);
    assert_eq!(d["ready"], "c@30");
    // The call's record: when it claimed, and the range of claim tokens it gave.
    let (claimed_ms, tokens) = d["claim:k1"].split_once(':').unwrap();
    let claimed_ms: u64 = claimed_ms.parse().unwrap();
    assert!(claimed_ms >= before && claimed_ms <= after + 1, "claimed at {claimed_ms}, Redis's now {before}..{after}");
    assert_eq!(tokens, "1:2");
    assert_eq!(got[0].task.claimed_at, crate::durable::time::from_unix_ms(claimed_ms));
    assert_eq!(d["seq"], "2");
    assert!(d["tasks"].contains(&format!("a={}", rec(10, 1, 1, "", "a"))), "{d:?}");
    let leases: Vec<u64> = d["leased"].split(' ').map(|m| m.split('@').nth(1).unwrap().parse().unwrap()).collect();
    let lease = super::LEASE.as_millis() as u64;
    assert!(leases.iter().all(|&l| l >= before + lease && l <= after + lease + 1), "{leases:?}");
    assert_eq!(meta(&server, keys, "handed_out"), 2);

    // Its retry: the same tasks, tokens and attempts; nothing else changes.
    let again = scripts::claim(w, keys, 2, "k1", false, "").await.unwrap();
    assert_eq!(again, got);
    assert_eq!(dump(&server, keys), d);
    // A stopping worker's replay under an id that took nothing takes nothing.
    assert!(scripts::claim(w, keys, 2, "k2", true, "").await.unwrap().is_empty());
    assert_eq!(dump(&server, keys), d);
    // The next claim drops the answered one's record.
    let next = scripts::claim(w, keys, 2, "k3", false, "k1").await.unwrap();
    assert_eq!(next.len(), 1);
    let d = dump(&server, keys);
    assert!(!d.contains_key("claim:k1") && d.contains_key("claim:k3"), "{d:?}");
}

/// The sets a claim writes a task at a time leave Redis's compact encoding (every insert into a
/// listpack scans it) once they hold 32 members or more, and keep only their own members; a few
/// members stay compact.
#[tokio::test]
async fn a_claim_keeps_its_sets_in_the_skip_list_encoding() {
    let Some((server, timers)) = wheel("s-claim-encoding").await else { return };
    // Encodings are Redis's own: the embedded store keeps every set in one table.
    if server.redis().is_none() {
        return;
    }
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    for i in 0..40u64 {
        seed_ready(&server, keys, &format!("t{i:02}"), 10 + i, "x");
    }
    let encoding = |key: &str| server.command(&["OBJECT", "ENCODING", key]).as_str().unwrap_or("none").to_string();
    assert_eq!(scripts::claim(w, keys, 2, "k1", false, "").await.unwrap().len(), 2);
    assert_eq!(encoding(&keys.claimed()), "listpack", "two claims stay compact");
    assert_eq!(scripts::claim(w, keys, 38, "k2", false, "k1").await.unwrap().len(), 38);
    assert_eq!(encoding(&keys.claimed()), "skiplist");
    let d = dump(&server, keys);
    // One lease a claim call, whatever it took.
    assert_eq!(d["leased"].split(' ').count(), 2, "{d:?}");
    assert_eq!(d["claimed"].split(' ').count(), 40, "{d:?}");
    assert!(!d["leased"].contains("timewheel") && !d["claimed"].contains("timewheel"), "{d:?}");
}

/// A retried claim answers only the tasks still held under the tokens it gave: one whose lease
/// ended since (here acknowledged; a lease that ran out or a cancel end it alike) is left out,
/// and so is one claimed again since under a newer token.
#[tokio::test]
async fn a_retried_claim_answers_only_what_its_tokens_still_hold() {
    let Some((server, timers)) = wheel("s-claim-retry").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    for (k, due) in [("a", 10), ("b", 20), ("c", 30)] {
        seed_ready(&server, keys, k, due, k);
    }
    let got = scripts::claim(w, keys, 3, "k1", false, "").await.unwrap();
    let tokens: Vec<(&str, &str)> = got.iter().map(|c| (c.task.key.as_str(), c.token.as_str())).collect();
    assert_eq!(tokens, [("a", "1"), ("b", "2"), ("c", "3")]);
    // `a` ends; `c`'s lease is handed back and `c` is claimed again, under token 4.
    assert_eq!(scripts::ack(w, keys, &acks(&[("a", "1")]), Window::Default).await.unwrap(), [true]);
    server.command(&["ZREM", &keys.claimed(), "c"]);
    server.command(&["HSET", &keys.tasks(), "c", &rec(30, 1, 0, "", "c")]);
    server.command(&["ZADD", &keys.ready(), "30", "c"]);
    let again = scripts::claim(w, keys, 1, "k2", false, "").await.unwrap();
    assert_eq!((again[0].task.key.as_str(), again[0].token.as_str()), ("c", "4"));

    let retry = scripts::claim(w, keys, 3, "k1", false, "").await.unwrap();
    assert_eq!(retry, got[1..2], "only b is still held under k1's tokens");
}

/// A lease is its claim call's: one entry in `leased` for all the tasks a call took, extended by
/// a renewal of any of them, kept while any of them is claimed and dropped with the last. Tasks
/// given back leave for a call of their own under fresh tokens, whose lease has run out (the
/// tick hands them out again), while the others keep theirs.
#[tokio::test]
async fn a_claim_call_holds_one_lease_for_all_its_tasks() {
    let Some((server, timers)) = wheel("s-call-lease").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    for (k, due) in [("a", 10), ("b", 20), ("c", 30), ("d", 40)] {
        seed_ready(&server, keys, k, due, k);
    }
    let got = scripts::claim(w, keys, 4, "k1", false, "").await.unwrap();
    let tokens: Vec<&str> = got.iter().map(|c| c.token.as_str()).collect();
    assert_eq!(tokens, ["1", "2", "3", "4"]);
    let lease = super::LEASE.as_millis() as u64;
    let call_lease = |server: &super::Server| {
        server.command(&["ZSCORE", &keys.leased(), "1"]).as_str().map(|s| s.parse::<u64>().unwrap())
    };
    let d = dump(&server, keys);
    assert_eq!(d["leased"].split(' ').count(), 1, "one lease for the call: {d:?}");
    let first_end = call_lease(&server).expect("the call's lease");

    // Two end: the call keeps its lease for the other two.
    assert_eq!(scripts::ack(w, keys, &acks(&[("a", "1"), ("b", "2")]), Window::Default).await.unwrap(), [true, true]);
    assert_eq!(call_lease(&server), Some(first_end));

    // `c` is given back while `d` runs: `c` moves to a call of its own (token 5) whose lease has
    // run out, and `d` keeps the call's lease.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(renewed(scripts::renew(w, keys, &[("c", "3")], 0, Window::Default).await.unwrap()), [true]);
    let d = dump(&server, keys);
    assert_eq!(d["claimed"], "d@4 c@5", "{d:?}");
    assert_eq!(call_lease(&server), Some(first_end), "{d:?}");
    let given_back: u64 = server.command(&["ZSCORE", &keys.leased(), "5"]).as_str().unwrap().parse().unwrap();
    assert!(given_back <= redis_now_ms(&server) + 1, "{given_back}");
    assert!(d["tasks"].contains(&format!("c={}", rec(30, 1, 5, "", "c"))), "{d:?}");
    // A renewal of `d` extends its call's lease; `c`'s old token is refused.
    let before = redis_now_ms(&server);
    assert_eq!(
        renewed(scripts::renew(w, keys, &[("d", "4"), ("c", "3")], 2 * lease, Window::Default).await.unwrap()),
        [true, false]
    );
    assert!(call_lease(&server).unwrap() >= before + 2 * lease);

    // The tick hands `c` out again, and leaves `d` alone.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    server.command(&["SET", &keys.leader(), "me:1"]);
    scripts::tick(w, keys, "me:1", 128, 0..=0, 1).await.unwrap();
    let d = dump(&server, keys);
    assert_eq!(d["ready"], "c@30", "{d:?}");
    assert_eq!(d["claimed"], "d@4", "{d:?}");
    assert_eq!(d["leased"].split(' ').count(), 1, "{d:?}");
    assert!(d["tasks"].contains(&format!("d={}", rec(40, 1, 4, "", "d"))), "{d:?}");

    // The last of the call ends: its lease goes.
    assert_eq!(scripts::ack(w, keys, &acks(&[("d", "4")]), Window::Default).await.unwrap(), [true]);
    let d = dump(&server, keys);
    assert!(!d.contains_key("leased") && !d.contains_key("claimed"), "{d:?}");
}

/// A lease entry of a task's own, as wheels kept them before one lease a claim call (its member
/// the task's key): the tick requeues its task when it runs out, as any other, rather than fail.
#[tokio::test]
async fn the_tick_requeues_a_task_under_a_lease_entry_of_its_own() {
    let Some((server, timers)) = wheel("s-old-lease").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["HSET", &keys.tasks(), "old", &rec(5, 1, 8, "", "x")]);
    server.command(&["ZADD", &keys.claimed(), "8", "old"]);
    server.command(&["ZADD", &keys.leased(), &(now - 10).to_string(), "old"]);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let reply = scripts::tick(w, keys, "me:1", 128, 0..=0, 1).await.unwrap();
    assert_ne!(reply, TickReply::Refused);
    let d = dump(&server, keys);
    assert_eq!(d["ready"], "old@5", "{d:?}");
    assert!(!d.contains_key("leased") && !d.contains_key("claimed"), "{d:?}");
    assert!(d["tasks"].contains(&format!("old={}", rec(5, 1, 0, "lease expired", "x"))), "{d:?}");
}

#[tokio::test]
async fn ack_finishes_a_task_under_its_token_only() {
    let Some((server, timers)) = wheel("s-ack").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "a", 5, 1, now + 60_000);
    seed_running(&server, keys, "b", 5, 1, now + 60_000);
    // `a` twice in one call: acknowledged once.
    let got = scripts::ack(w, keys, &acks(&[("a", "7"), ("b", "6"), ("gone", "1"), ("a", "7")]), Window::Default)
        .await
        .unwrap();
    assert_eq!(got, [true, false, false, false]);
    let d = dump(&server, keys);
    assert_eq!(d["tasks"], hash(&[("b", rec(5, 1, 7, "", "x"))]));
    // `b`'s claim call (token 7) keeps its lease while `b` runs.
    assert_eq!(d["leased"], format!("7@{}", now + 60_000));
    assert_eq!(meta(&server, keys, "acked"), 1);
    // Repeated: refused, nothing changes.
    assert_eq!(scripts::ack(w, keys, &acks(&[("a", "7")]), Window::Default).await.unwrap(), [false]);
    assert_eq!(dump(&server, keys), d);
}

#[tokio::test]
async fn fail_retries_after_the_backoff_then_buries_on_the_last_attempt() {
    let Some((server, timers)) = wheel("s-fail").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "a", 5, 1, now + 60_000);
    assert_eq!(scripts::fail(w, keys, &Ack::plain("a", "6"), "boom", Window::Default).await.unwrap(), Failed::Refused);
    let before = redis_now_ms(&server);
    assert_eq!(scripts::fail(w, keys, &Ack::plain("a", "7"), "boom", Window::Default).await.unwrap(), Failed::Retried);
    let after = redis_now_ms(&server);
    let d = dump(&server, keys);
    // Attempt 1 failed: due a backoff (1 s) later (beyond the ring of 8 x 100 ms), not leased,
    // its error kept.
    let due: u64 = d["far"].strip_prefix("a@").unwrap().parse().unwrap();
    assert!(due >= before + 1000 && due <= after + 1001, "due {due}, now {before}..{after}");
    assert!(!d.contains_key("leased"), "{d:?}");
    assert_eq!(d["tasks"], hash(&[("a", rec(due, 1, 0, "boom", "x"))]));
    assert_eq!(meta(&server, keys, "retried"), 1);

    // Its third (last) delivery fails: a dead letter.
    server.command(&["DEL", &keys.far()]);
    seed_running(&server, keys, "a", 5, 3, now + 60_000);
    assert_eq!(
        scripts::fail(w, keys, &Ack::plain("a", "7"), "boom again", Window::Default).await.unwrap(),
        Failed::Dead
    );
    let d = dump(&server, keys);
    assert!(!d.contains_key("tasks") && !d.contains_key("leased"), "{d:?}");
    assert_eq!(d["dead_tasks"], hash(&[("a", dead_rec(5, 3, "boom again", "x"))]));
    assert!(d["dead"].starts_with("a@"), "{d:?}");
    assert_eq!(meta(&server, keys, "dead_lettered"), 1);
}

/// Renewal moves a held lease to Redis's now + lease; a lease that ran out but that nothing
/// acted on yet is still held. Once a tick handed the task out again (the lease went to another
/// worker), the old delivery's renewal is refused and changes nothing, and the new one's goes
/// through. A lease of 0 gives the lease back: the next tick hands the task out again.
#[tokio::test]
async fn renew_extends_held_leases_and_refuses_one_that_went_to_another_worker() {
    let Some((server, timers)) = wheel("s-renew").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "held", 5, 1, now + 500);
    seed_claimed(&server, keys, "lapsed", 5, 1, 8, now - 1_000);
    seed_waiting(&server, keys, "waiting", cursor(&server, keys) + 2);
    let lease = 5_000;
    let before = redis_now_ms(&server);
    let pairs = [("held", "7"), ("lapsed", "8"), ("held", "6"), ("waiting", "7"), ("gone", "7")];
    let got = renewed(scripts::renew(w, keys, &pairs, lease, Window::Default).await.unwrap());
    let after = redis_now_ms(&server);
    assert_eq!(got, [true, true, false, false, false], "{pairs:?}");
    // Each one's claim call (tokens 7 and 8) has its lease renewed.
    for call in ["7", "8"] {
        let until = server.command(&["ZSCORE", &keys.leased(), call]).as_str().unwrap().parse::<u64>().unwrap();
        assert!(until >= before + lease && until <= after + lease + 1, "{call}: {until}, now {before}..{after}");
    }
    assert!(!dump(&server, keys)["tasks"].contains("gone="), "a refused renewal created a task");

    // The lease runs out and a tick hands the task to another worker (a new claim, a new token).
    server.command(&["ZADD", &keys.leased(), "1", "7"]);
    server.command(&["SET", &keys.leader(), "me:1"]);
    scripts::tick(w, keys, "me:1", 128, 0..=0, 1).await.unwrap();
    let claimed = scripts::claim(w, keys, 1, "k1", false, "").await.unwrap();
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let (key, token) = (claimed[0].task.key.clone(), claimed[0].token.clone());
    assert_eq!((key.as_str(), claimed[0].task.attempt), ("held", 2));
    let taken = dump(&server, keys);
    assert_eq!(renewed(scripts::renew(w, keys, &[("held", "7")], lease, Window::Default).await.unwrap()), [false]);
    assert_eq!(dump(&server, keys), taken, "a refused renewal changed something");
    assert_eq!(renewed(scripts::renew(w, keys, &[("held", &token)], lease, Window::Default).await.unwrap()), [true]);

    // Given back: the lease runs out now, and the next tick makes the task ready again.
    assert_eq!(renewed(scripts::renew(w, keys, &[("held", &token)], 0, Window::Default).await.unwrap()), [true]);
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    scripts::tick(w, keys, "me:1", 128, 0..=0, 1).await.unwrap();
    let d = dump(&server, keys);
    assert!(d["ready"].contains("held@"), "{d:?}");
    let record = server.command(&["HGET", &keys.tasks(), "held"]);
    assert_eq!(record.as_str().unwrap().split(':').nth(2), Some("0"), "still claimed: {d:?}");
}

/// The tick script: refused under a wrong token; otherwise it requeues what has an expired
/// lease, moves a due slot to `ready` (dropping the entries that no longer match a record),
/// promotes far tasks into the declared slots, stops before a slot it was not given, and never
/// makes early what the clock has not reached, even with the cursor ahead of the clock.
#[tokio::test]
async fn tick_moves_due_tasks_requeues_expired_leases_and_is_never_early() {
    let Some((server, timers)) = wheel("s-tick").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    assert_eq!(scripts::tick(w, keys, "nobody:1", 128, 0..=0, 1).await.unwrap(), TickReply::Refused);
    server.command(&["SET", &keys.leader(), "me:1"]);

    let now = redis_now_ms(&server);
    let now_tick = now / TICK_MS;
    let start = now_tick - 3;
    // Due two ticks ago, in its slot; a cancelled task's entry; a rescheduled task's old entry;
    // a lease that ran out; a far task due three ticks from now, and one later.
    server.command(&["SET", &keys.cursor(), &start.to_string()]);
    seed_waiting(&server, keys, "due", now_tick - 2);
    seed_waiting(&server, keys, "cancelled", now_tick - 2);
    server.command(&["HDEL", &keys.tasks(), "cancelled"]);
    seed_waiting(&server, keys, "moved", now_tick - 1);
    seed_far(&server, keys, "moved", (now_tick + 30) * TICK_MS);
    server.command(&["HSET", &keys.tasks(), "moved", &rec((now_tick + 30) * TICK_MS, 0, 0, "", "x")]);
    seed_waiting(&server, keys, "next", now_tick);
    seed_claimed(&server, keys, "expired", 5, 1, 8, now - 10);
    // (Three ticks ahead: the seeding's commands may take the clock over a tick boundary.)
    seed_far(&server, keys, "near", (now_tick + 3) * TICK_MS);
    seed_far(&server, keys, "later", (now_tick + 40) * TICK_MS);
    // A stale lease entry of a claim call that holds no task: dropped.
    server.command(&["ZADD", &keys.leased(), &(now - 10).to_string(), "999"]);

    // Given only the first two slots after the cursor, it stops after them.
    let reply = scripts::tick(w, keys, "me:1", 128, start + 1..=start + 2, 1).await.unwrap();
    assert!(matches!(reply, TickReply::More { cursor, .. } if cursor == start + 2), "{reply:?}");
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("expired@5 due@{}", (now_tick - 2) * TICK_MS));
    assert_eq!(d["ring"], "1", "the cancelled and moved tasks' entries were not dropped: {d:?}");
    assert!(!d.contains_key("leased"), "{d:?}");

    // Given the rest, it catches up; the far task due soon enters its slot.
    let reply = scripts::tick(w, keys, "me:1", 128, start + 3..=now_tick + 4, 1).await.unwrap();
    let TickReply::Done { cursor, made_ready, .. } = reply else { panic!("{reply:?}") };
    assert!(cursor >= now_tick, "{reply:?}");
    assert_eq!(made_ready, 1);
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("expired@5 due@{} next@{}", (now_tick - 2) * TICK_MS, now_tick * TICK_MS));
    assert_eq!(d[&format!("slot:{}", (now_tick + 3) % SLOTS)], "near");
    assert_eq!(d["far"], format!("moved@{} later@{}", (now_tick + 30) * TICK_MS, (now_tick + 40) * TICK_MS));
    assert!(!d.contains_key("leased"), "{d:?}");
    assert!(d["tasks"].contains(&format!("expired={}", rec(5, 1, 0, "lease expired", "x"))), "{d:?}");
    assert_eq!(d["wake"], "1 1", "each call that made tasks ready wakes a worker");
    assert_eq!(meta(&server, keys, "retried"), 1);

    // The clock stepped back: the cursor is ahead of it. A task due between the clock and the
    // cursor is not made ready before the clock reaches it.
    let now = redis_now_ms(&server);
    let now_tick = now / TICK_MS;
    server.command(&["DEL", &keys.ready()]);
    server.command(&["SET", &keys.cursor(), &(now_tick + 50).to_string()]);
    seed_far(&server, keys, "soon", (now_tick + 20) * TICK_MS);
    scripts::tick(w, keys, "me:1", 128, now_tick + 51..=now_tick + 54, 1).await.unwrap();
    let d = dump(&server, keys);
    assert!(!d.contains_key("ready"), "made ready {:?} early", d.get("ready"));
    assert!(d["far"].contains("soon@"), "{d:?}");
}

/// The cursor runs a tick ahead of the clock: the next tick's tasks wait in `ready` before it
/// begins. A claim takes none of them before its due time; while it takes less than it asks for,
/// it answers when the first falls due, and takes it then.
#[tokio::test]
async fn the_next_ticks_tasks_wait_in_ready_and_a_claim_takes_each_once_due() {
    let Some((server, timers)) = wheel("s-ahead").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    server.command(&["SET", &keys.leader(), "me:1"]);
    // Early in a tick, so that the next tick's first due time is at least half a tick away.
    while redis_now_ms(&server) % TICK_MS > TICK_MS / 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let now_tick = redis_now_ms(&server) / TICK_MS;
    server.command(&["SET", &keys.cursor(), &now_tick.to_string()]);
    seed_waiting(&server, keys, "next", now_tick + 1);
    seed_waiting(&server, keys, "after", now_tick + 3);
    let reply = scripts::tick(w, keys, "me:1", 128, now_tick + 1..=now_tick + 4, 1).await.unwrap();
    let TickReply::Done { cursor, now_ms, .. } = reply else { panic!("{reply:?}") };
    assert_eq!(cursor, now_ms / TICK_MS + 1, "the cursor is a tick ahead of the clock");
    let due = (now_tick + 1) * TICK_MS;
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("next@{due}"), "{d:?}");
    assert_eq!(d[&format!("slot:{}", (now_tick + 3) % SLOTS)], "after");

    let claim_by = |id: &'static str, node: &'static str| {
        let call = Claim { n: 4, claim_id: id, replay_only: false, previous: "", node, acks: &[] };
        async move { scripts::claim_and_ack(w, keys, &call, Window::Response).await.unwrap() }
    };
    let claim = |id: &'static str| claim_by(id, "n");
    let before = redis_now_ms(&server);
    let early = claim("c1").await;
    let other = claim_by("c1b", "m").await;
    let again = claim("c1c").await;
    let after = redis_now_ms(&server);
    if after < due {
        assert!(early.claimed.is_empty(), "claimed before its due time {due}: {:?}", early.claimed);
        // In ms from the claim's reading of the clock, which came between `before` and `after`.
        let told = |c: &scripts::ClaimReply| c.claim_in.map(|d| d.as_millis() as u64);
        let within = |ms: Option<u64>| ms.is_some_and(|ms| ms >= due - after && ms <= due - before);
        assert!(within(told(&early)), "a claim that took nothing says when the first is due: {:?}", told(&early));
        // One worker claims at a due time: another node is not told it; the first still is.
        assert_eq!(other.claim_in, None, "two nodes told to claim at {due}");
        assert!(within(told(&again)), "the node told first is told again: {:?}", told(&again));
    } else if before >= due {
        assert_eq!(early.claimed.len(), 1, "not claimed once due");
    }
    if [&early, &other, &again].iter().all(|c| c.claimed.is_empty()) {
        while redis_now_ms(&server) < due {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let got = claim("c2").await;
        assert_eq!(got.claimed.len(), 1, "{got:?}");
        assert!(got.claimed[0].task.claimed_at >= crate::durable::time::from_unix_ms(due), "{got:?}");
        assert_eq!(got.claim_in, None, "nothing else in ready: {got:?}");
    }
}

/// A task due in `ready` for over a tick that nobody claimed (the worker told its time stopped or
/// died, or is busy): each tick wakes an idle worker for it, so it is at most two ticks late. One
/// not yet due wakes nobody.
#[tokio::test]
async fn a_tick_wakes_a_worker_for_a_due_task_nobody_claimed() {
    let Some((server, timers)) = wheel("s-unclaimed").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let now = redis_now_ms(&server);
    server.command(&["SET", &keys.cursor(), &(now / TICK_MS + 1).to_string()]);
    seed_ready(&server, keys, "later", now + 60_000, "x");
    let tick = |from: u64| scripts::tick(w, keys, "me:1", 128, from + 1..=from + 4, 1);
    tick(now / TICK_MS + 1).await.unwrap();
    assert!(!dump(&server, keys).contains_key("wake"), "woken for a task not due yet");
    seed_ready(&server, keys, "due", now - 2 * TICK_MS, "x");
    tick(now / TICK_MS + 1).await.unwrap();
    assert_eq!(dump(&server, keys)["wake"], "1", "no wake-up for a due task nobody claimed");
}

/// A worker told the next due time that then fills up (its claim takes all it asked for) may be
/// busy at that time: it forgets it was told, and the next worker to claim is told instead.
#[tokio::test]
async fn a_full_claim_hands_the_next_due_time_on() {
    let Some((server, timers)) = wheel("s-told").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let later = now + 60_000;
    seed_ready(&server, keys, "later", later, "x");
    let claim = |id: &'static str, node: &'static str, n: usize| {
        let call = Claim { n, claim_id: id, replay_only: false, previous: "", node, acks: &[] };
        async move { scripts::claim_and_ack(w, keys, &call, Window::Response).await.unwrap() }
    };
    let told = |c: &scripts::ClaimReply| c.claim_in.is_some();
    assert!(told(&claim("c1", "a", 4).await), "the first node to ask is told");
    assert!(!told(&claim("c2", "b", 4).await), "a second node is told too");
    seed_ready(&server, keys, "d1", now - 20, "x");
    seed_ready(&server, keys, "d2", now - 10, "x");
    assert_eq!(claim("c3", "a", 1).await.claimed.len(), 1, "a full claim");
    let next = server.command(&["HGET", &keys.meta(), "next_claim"]);
    assert!(next.as_str().is_none(), "a node that filled up is still told: {next:?}");
    let got = claim("c4", "b", 4).await;
    assert_eq!(got.claimed.len(), 1);
    assert!(told(&got), "the next node to claim is not told");
}

#[tokio::test]
async fn acquire_and_release_fence_the_leadership() {
    let Some((server, timers)) = wheel("s-lead").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let Bid::Won(token) = scripts::acquire(w, keys, "n1", 5_000).await.unwrap() else { panic!("no leader yet") };
    assert_eq!(token, "n1:1");
    // The holder's retry gets its token back; another node loses, told how long the lease has left.
    assert_eq!(scripts::acquire(w, keys, "n1", 5_000).await.unwrap(), Bid::Won("n1:1".into()));
    let Bid::Lost(Some(left)) = scripts::acquire(w, keys, "n2", 5_000).await.unwrap() else { panic!("n2 won") };
    assert!(left.as_millis() > 4_000 && left.as_millis() <= 5_000, "{left:?}");
    assert!(!scripts::release(w, keys, "n2:1").await.unwrap(), "a stranger released the lead");
    assert!(scripts::release(w, keys, &token).await.unwrap());
    let d = dump(&server, keys);
    assert!(!d.contains_key("leader"), "{d:?}");
    assert_eq!(d["lead"], "1", "a released lead leaves a token for a bid at once");
    assert_eq!(scripts::acquire(w, keys, "n2", 5_000).await.unwrap(), Bid::Won("n2:2".into()), "a new epoch");
}

#[tokio::test]
async fn requeue_dead_puts_a_dead_letter_back_and_recognises_its_retry() {
    let Some((server, timers)) = wheel("s-requeue").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    server.command(&["HSET", &keys.dead_tasks(), "a", &dead_rec(9, 3, "boom", "x")]);
    server.command(&["ZADD", &keys.dead(), "7", "a"]);
    assert_eq!(scripts::requeue_dead(w, keys, "nope", "q0").await.unwrap(), Requeued::NotDead);
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q1").await.unwrap(), Requeued::Yes);
    let d = dump(&server, keys);
    assert!(!d.contains_key("dead_tasks") && !d.contains_key("dead"), "{d:?}");
    let due: u64 = d["ready"].strip_prefix("a@").unwrap().parse().unwrap();
    assert_eq!(d["tasks"], hash(&[("a", rec(due, 0, 0, "", "x"))]));
    // Its retry (the reply was lost) still answers Yes and changes nothing.
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q1").await.unwrap(), Requeued::Yes);
    assert_eq!(dump(&server, keys), d);
    // A new dead letter under a key that is pending again stays.
    server.command(&["HSET", &keys.dead_tasks(), "a", &dead_rec(9, 3, "boom", "y")]);
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q2").await.unwrap(), Requeued::KeyPending);
}

/// A slot is a list: a key scheduled, cancelled and scheduled again into the same tick has two
/// entries there, and becomes ready once; an entry whose record moved to the tick after stays
/// out of `ready` (the later slot holds the task), and a claimed task's entry is dropped; when
/// the slot holds more than the budget, the rest waits for the next call and the cursor with it.
#[tokio::test]
async fn tick_hands_out_a_slot_entry_once_and_only_at_its_records_tick() {
    let Some((server, timers)) = wheel("s-tick-list").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    server.command(&["SET", &keys.leader(), "me:1"]);
    let now_tick = redis_now_ms(&server) / TICK_MS;
    let t = now_tick - 2;
    server.command(&["SET", &keys.cursor(), &(t - 1).to_string()]);
    seed_waiting(&server, keys, "twice", t);
    seed_waiting(&server, keys, "twice", t);
    seed_waiting(&server, keys, "later", t);
    server.command(&["HSET", &keys.tasks(), "later", &rec((t + 1) * TICK_MS, 0, 0, "", "x")]);
    seed_waiting(&server, keys, "claimed", t);
    server.command(&["HSET", &keys.tasks(), "claimed", &rec(t * TICK_MS, 1, 7, "", "x")]);
    for k in ["after0", "after1", "after2", "again", "again"] {
        seed_waiting(&server, keys, k, t);
    }
    // A budget of 5 takes the first five entries: `twice` twice, `later`, `claimed`, `after0`.
    let reply = scripts::tick(w, keys, "me:1", 5, t..=t + 4, 1).await.unwrap();
    assert!(matches!(reply, TickReply::More { cursor, .. } if cursor == t - 1), "{reply:?}");
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("after0@{} twice@{}", t * TICK_MS, t * TICK_MS), "{d:?}");
    assert_eq!(d[&format!("slot:{}", t % SLOTS)], "after1 after2 again again", "{d:?}");
    assert_eq!(d["ring"], "4");
    let reply = scripts::tick(w, keys, "me:1", 128, t..=now_tick + 4, 1).await.unwrap();
    let TickReply::Done { cursor, made_ready, .. } = reply else { panic!("{reply:?}") };
    assert!(cursor >= now_tick, "{reply:?}");
    assert_eq!(made_ready, 3, "after1, after2 and again (once)");
    let d = dump(&server, keys);
    assert!(!d.contains_key(&format!("slot:{}", t % SLOTS)), "{d:?}");
    assert!(!d["ready"].contains("later") && !d["ready"].contains("claimed"), "{d:?}");
    assert_eq!(d["ring"], "0");
}

#[tokio::test]
async fn stats_and_dead_letters_read_what_the_keys_hold() {
    let Some((server, timers)) = wheel("s-read").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    seed_waiting(&server, keys, "w", c + 1);
    seed_ready(&server, keys, "r", 1, "x");
    seed_running(&server, keys, "l", 1, 1, redis_now_ms(&server) + 60_000);
    for i in 0..5 {
        server.command(&["HSET", &keys.dead_tasks(), &format!("d{i}"), &dead_rec(9, 3, &format!("e:{i}"), "p")]);
        server.command(&["ZADD", &keys.dead(), &i.to_string(), &format!("d{i}")]);
    }
    let stats = scripts::stats(w, keys).await.unwrap();
    assert_eq!((stats.pending, stats.waiting, stats.ready, stats.in_flight, stats.dead), (3, 1, 1, 1, 5));
    let page = scripts::dead_letters(w, keys, 2, 3).await.unwrap();
    let seen: Vec<(&str, &str, &[u8])> =
        page.iter().map(|d| (d.key.as_str(), d.last_error.as_str(), d.payload.as_slice())).collect();
    assert_eq!(seen, [("d3", "e:3", &b"p"[..]), ("d4", "e:4", &b"p"[..])]);
    assert_eq!(page[0].attempts, 3);
}

/// A wheel recorded in another layout (or in none) is refused, whatever it holds; its own layout
/// opens.
#[tokio::test]
async fn open_refuses_a_wheel_of_another_layout() {
    let Some((server, timers)) = wheel("s-open").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    assert_eq!(server.command(&["HGET", &keys.meta(), "layout"]).as_str(), Some("1"));
    server.command(&["HSET", &keys.meta(), "layout", "2"]);
    assert_eq!(scripts::open(w, keys, 1, true).await.unwrap(), scripts::Opened::OtherLayout { layout: "2".into() });
    server.command(&["HDEL", &keys.meta(), "layout"]);
    assert_eq!(scripts::open(w, keys, 1, true).await.unwrap(), scripts::Opened::OtherLayout { layout: "".into() });
    server.command(&["HSET", &keys.meta(), "layout", "1"]);
    assert!(matches!(scripts::open(w, keys, 1, true).await.unwrap(), scripts::Opened::Yes { .. }));
}

/// An acknowledged run of a recurring task places the next one: at the fixed rate when on time;
/// when runs were missed, by its policy (burst: the fixed rate, at once; delay: a period after
/// now; skip: the next time of the original schedule). The last counted run ends the series.
#[tokio::test]
async fn ack_of_a_recurring_run_places_the_next_by_its_policy() {
    let Some((server, timers)) = wheel("s-recur").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let period = 10_000;
    // (key, due, runs left, policy) -> the range the next due time must be in, or none.
    type Case<'a> = (&'a str, u64, i64, u8, Option<(u64, u64)>);
    let late = now - 25_000;
    let cases: [Case<'_>; 5] = [
        ("on-time", now - 100, -1, 0, Some((now - 100 + period, now - 100 + period))),
        ("burst", late, -1, 0, Some((late + period, late + period))),
        ("delay", late, 3, 1, Some((now + period, now + period + 50))),
        ("skip", late, -1, 2, Some((late + 3 * period, late + 3 * period))),
        ("last", now - 100, 1, 0, None),
    ];
    for (k, due, runs, policy, _) in cases {
        let record = format!("{due}:1:7:{period}:{runs}:{policy}:0:x");
        server.command(&["HSET", &keys.tasks(), k, &record]);
        seed_lease(&server, keys, k, 7, now + 60_000);
    }
    let deliveries: Vec<Ack> = cases.iter().map(|c| Ack::plain(c.0, "7")).collect();
    assert_eq!(scripts::ack(w, keys, &deliveries, Window::Default).await.unwrap(), [true; 5]);
    let d = dump(&server, keys);
    assert!(!d.contains_key("leased"), "{d:?}");
    for (k, _, runs, policy, next) in cases {
        let record = server.command(&["HGET", &keys.tasks(), k]);
        match next {
            None => assert_eq!(record.as_str(), None, "{k}: the series did not end"),
            Some((from, to)) => {
                let record = record.as_str().unwrap_or_else(|| panic!("{k}: no next run")).to_string();
                let next_due: u64 = record.split(':').next().unwrap().parse().unwrap();
                assert!((from..=to).contains(&next_due), "{k}: next due {next_due}, wanted {from}..={to}");
                let left = if runs > 0 { runs - 1 } else { runs };
                assert_eq!(record, format!("{next_due}:0:0:{period}:{left}:{policy}:0:x"), "{k}");
            }
        }
    }
    assert_eq!(meta(&server, keys, "acked"), 5);
}

/// One call a cycle: the claim acknowledges what finished first (each delivery once, under its
/// token only), then claims, answering each task's record; its retry acknowledges nothing twice
/// and gets the same tasks back. A full claim passes a wake-up on only when none waits on `wake`
/// (busy workers take none, so they push none); a claim that comes back short pushes none.
#[tokio::test]
async fn claim_acknowledges_what_finished_then_claims() {
    let Some((server, timers)) = wheel("s-claim-ack").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "done", 5, 1, now + 60_000);
    seed_running(&server, keys, "other", 5, 1, now + 60_000);
    for (k, due) in [("b", 20), ("a", 10), ("c", 30)] {
        seed_ready(&server, keys, k, due, &format!("payload of {k}"));
    }
    let given = acks(&[("done", "7"), ("done", "7"), ("other", "6"), ("gone", "7")]);
    let call =
        scripts::Claim { n: 2, claim_id: "k1", replay_only: false, previous: "", node: "test-node", acks: &given };
    let got = scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap();
    assert_eq!(got.acked, [true, false, false, false], "{given:?}");
    let summary: Vec<(&str, u32, &str, &[u8])> =
        got.claimed.iter().map(|c| (c.task.key(), c.task.attempt(), c.token.as_str(), c.task.payload())).collect();
    assert_eq!(summary, [("a", 1, "1", &b"payload of a"[..]), ("b", 1, "2", &b"payload of b"[..])]);
    assert_eq!(got.claimed[1].task.due(), crate::durable::time::from_unix_ms(20));
    let d = dump(&server, keys);
    assert_eq!(
        d["tasks"],
        hash(&[
            ("a", rec(10, 1, 1, "", "payload of a")),
            ("b", rec(20, 1, 2, "", "payload of b")),
            ("c", rec(30, 0, 0, "", "payload of c")),
            ("other", rec(5, 1, 7, "", "x")),
        ])
    );
    assert_eq!(d["ready"], "c@30");
    assert_eq!(d["wake"], "1", "a full claim passes a wake-up on");
    assert_eq!(meta(&server, keys, "acked"), 1);
    assert_eq!(meta(&server, keys, "handed_out"), 2);

    // Its retry (the reply was lost): nothing acknowledged twice, the same tasks back, no change.
    let again = scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap();
    assert_eq!(again.acked, [false; 4]);
    assert_eq!(again.claimed, got.claimed);
    assert_eq!(dump(&server, keys), d);

    // A token waits already: a full claim pushes no second one; a short one pushes none.
    seed_ready(&server, keys, "d", 40, "x");
    let call =
        scripts::Claim { n: 1, claim_id: "k2", replay_only: false, previous: "k1", node: "test-node", acks: &[] };
    assert_eq!(scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap().claimed.len(), 1);
    assert_eq!(dump(&server, keys)["wake"], "1");
    server.command(&["DEL", &keys.wake()]);
    let call =
        scripts::Claim { n: 5, claim_id: "k3", replay_only: false, previous: "k2", node: "test-node", acks: &[] };
    let short = scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap();
    assert_eq!(short.claimed.len(), 1);
    let d = dump(&server, keys);
    assert!(!d.contains_key("wake"), "{d:?}");
    assert!(!d.contains_key("claim:k1") && !d.contains_key("claim:k2") && d.contains_key("claim:k3"), "{d:?}");

    // Acknowledging alone (n = 0) claims nothing and answers no time.
    let (k, tok) = (short.claimed[0].task.key().to_string(), short.claimed[0].token.clone());
    let given = [Ack::plain(&k, &tok)];
    let call =
        scripts::Claim { n: 0, claim_id: "k4", replay_only: false, previous: "k3", node: "test-node", acks: &given };
    let only = scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap();
    assert_eq!((only.acked.as_slice(), only.claimed.len()), (&[true][..], 0));
    assert!(!dump(&server, keys)["tasks"].contains(&format!("{k}=")));
}

/// `cancel_running.lua` asks only a running task (claimed, under a live lease), records the
/// request and adds it to the stream; the renewal then says so, and the delivery's outcome,
/// failure or acknowledgement, ends the task as cancelled, counted once.
#[tokio::test]
async fn cancel_running_asks_a_running_task_only_and_its_outcome_ends_it_as_cancelled() {
    let Some((server, timers)) = wheel("s-cancel-running").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "a", 5, 1, now + 60_000);
    seed_running(&server, keys, "b", 5, 1, now + 60_000);
    seed_claimed(&server, keys, "lapsed", 5, 1, 8, now - 1_000);
    seed_ready(&server, keys, "ready", 5, "x");
    let before = dump(&server, keys);
    for k in ["lapsed", "ready", "gone"] {
        assert!(!scripts::control::cancel_running(w, keys, k).await.unwrap(), "{k}");
    }
    assert_eq!(dump(&server, keys), before, "a refused request changed something");

    assert!(scripts::control::cancel_running(w, keys, "a").await.unwrap());
    assert!(scripts::control::cancel_running(w, keys, "a").await.unwrap(), "a retry answers the same");
    let d = dump(&server, keys);
    assert_eq!(d["cancelling"], "a=7");
    assert_eq!(d["cancels"], "(stream)");
    assert_eq!(server.command(&["XLEN", &keys.cancels()]).as_int(), Some(2));
    let renewed = scripts::renew(w, keys, &[("a", "7"), ("b", "7")], 60_000, Window::Default).await.unwrap();
    assert_eq!(renewed, [scripts::Renewal::CancelRequested, scripts::Renewal::Renewed]);
    // A handler's failure under another token is refused; under its own, the task is cancelled.
    assert_eq!(scripts::fail(w, keys, &Ack::plain("a", "6"), "boom", Window::Default).await.unwrap(), Failed::Refused);
    assert_eq!(
        scripts::fail(w, keys, &Ack::plain("a", "7"), "boom", Window::Default).await.unwrap(),
        Failed::Cancelled
    );
    let d = dump(&server, keys);
    assert!(!d["tasks"].contains("a=") && !d["leased"].contains("a@") && !d.contains_key("cancelling"), "{d:?}");
    assert!(!d.contains_key("far") && !d.contains_key("dead"), "neither retried nor buried: {d:?}");

    // An acknowledgement of a requested delivery is refused: the task ends as cancelled.
    assert!(scripts::control::cancel_running(w, keys, "b").await.unwrap());
    assert_eq!(scripts::ack(w, keys, &[Ack::plain("b", "7")], Window::Default).await.unwrap(), [false]);
    let d = dump(&server, keys);
    assert!(!d["tasks"].contains("b=") && !d.contains_key("cancelling"), "{d:?}");
    assert_eq!((meta(&server, keys, "cancelled"), meta(&server, keys, "acked")), (2, 0));
    assert_eq!(meta(&server, keys, "retried") + meta(&server, keys, "dead_lettered"), 0);
}

/// `list.lua` pages a state's sorted set by (score, key) from its cursor, through any number of
/// ties at one score, and on from the score when the cursor's task left meanwhile.
#[tokio::test]
async fn list_pages_through_ties_and_past_a_cursor_whose_task_left() {
    let Some((server, timers)) = wheel("s-list").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    seed_ready(&server, keys, "early", 3, "e");
    for i in 0..10 {
        seed_ready(&server, keys, &format!("tie-{i}"), 5, "t");
    }
    seed_ready(&server, keys, "late", 9, "l");
    let page = |from: u64, after: &'static str| async move {
        let listed = scripts::list(w, keys, TaskState::Ready, (from, after), 4).await.unwrap();
        let keys: Vec<String> = listed.tasks.iter().map(|(_, t)| t.key.clone()).collect();
        (keys, listed.full)
    };
    let (first, full) = page(0, "").await;
    assert_eq!(
        (first, full),
        (vec!["early".into(), "tie-0".into(), "tie-1".into(), "tie-2".into()], Some((5, "tie-2".into())))
    );
    let (second, _) = page(5, "tie-2").await;
    assert_eq!(second, ["tie-3", "tie-4", "tie-5", "tie-6"]);
    // `tie-6` left: the next page starts past the ties up to it all the same.
    server.command(&["ZREM", &keys.ready(), "tie-6"]);
    server.command(&["HDEL", &keys.tasks(), "tie-6"]);
    let (third, _) = page(5, "tie-6").await;
    assert_eq!(third, ["tie-7", "tie-8", "tie-9", "late"]);
    let (last, full) = page(9, "late").await;
    assert_eq!((last.len(), full), (0, None));
}

/// Each renewal's answer as renewed or not.
fn renewed(answers: Vec<scripts::Renewal>) -> Vec<bool> {
    answers.into_iter().map(|a| a != scripts::Renewal::Refused).collect()
}

/// The history's runs, oldest first, as `(end ms, the rest as written)`
/// (`store/lua/includes/history.lua`).
fn history(server: &super::Server, keys: &WheelKeys) -> Vec<(u64, String)> {
    let runs = server.command(&["LRANGE", &keys.history(), "0", "-1"]);
    runs.as_array()
        .iter()
        .map(|r| {
            let (ended, rest) = r.as_str().expect("a run").split_once(':').unwrap();
            (ended.parse().unwrap(), rest.to_string())
        })
        .collect()
}

/// The scripts that end a run write it to the history, with its due time, attempts, outcome,
/// the handler's start and duration as the worker reported them, and the error it died of: an
/// acknowledgement (`ack.lua`, `claim.lua`), a last failure (`fail.lua`), a cancel while it ran
/// (through `ack.lua`), a last lease that ran out (`tick.lua`). A refused outcome or a retry
/// writes nothing; each run's end is Redis's clock when it ended.
#[tokio::test]
async fn the_runs_that_end_go_in_the_history_and_nothing_else_does() {
    let Some((server, timers)) = wheel("s-history").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    for k in ["ok", "claimed-ok", "cancelled", "retried"] {
        seed_running(&server, keys, k, 5, 1, now + 60_000);
    }
    seed_running(&server, keys, "dies", 6, 3, now + 60_000);
    seed_claimed(&server, keys, "lapsed", 7, 3, 8, now - 1_000);
    let ran = |k: &str, due: u64, attempt: u32, started: u64, took: u64| Ack {
        run: Ack::run(k, due, attempt, Some((started, took))),
        ..Ack::plain(k, "7")
    };

    let before = redis_now_ms(&server);
    assert_eq!(
        scripts::ack(w, keys, &[ran("ok", 5, 1, 1_000, 2_500), ran("gone", 5, 1, 1, 1)], Window::Default)
            .await
            .unwrap(),
        [true, false]
    );
    // Without a run from the worker: read from the record, with no handler times.
    let given = [Ack::plain("claimed-ok", "7")];
    let call =
        scripts::Claim { n: 0, claim_id: "k1", replay_only: false, previous: "", node: "test-node", acks: &given };
    assert_eq!(scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap().acked, [true]);
    assert_eq!(
        scripts::fail(w, keys, &ran("retried", 5, 1, 3_000, 7), "once", Window::Default).await.unwrap(),
        Failed::Retried
    );
    assert_eq!(
        scripts::fail(w, keys, &ran("dies", 6, 3, 4_000, 9), "boom", Window::Default).await.unwrap(),
        Failed::Dead
    );
    assert!(scripts::control::cancel_running(w, keys, "cancelled").await.unwrap());
    assert_eq!(scripts::ack(w, keys, &[ran("cancelled", 5, 1, 5_000, 11)], Window::Default).await.unwrap(), [false]);
    let c = cursor(&server, keys);
    let reply = scripts::tick(w, keys, "no-leader", 100, c + 1..=c + SLOTS, 1).await.unwrap();
    assert_eq!(reply, TickReply::Refused, "only a leader's tick requeues");
    let Bid::Won(token) = scripts::acquire(w, keys, "n1", 10_000).await.unwrap() else { panic!("no lead") };
    let now = redis_now_ms(&server);
    scripts::tick(w, keys, &token, 100, c + 1..=now / TICK_MS + 1, 1).await.unwrap();
    let after = redis_now_ms(&server);

    let runs = history(&server, keys);
    let written: Vec<&str> = runs.iter().map(|(_, rest)| rest.as_str()).collect();
    assert_eq!(
        written,
        [
            "a:5:1:1000:2500:2:ok",
            "a:5:1:::10:claimed-ok",
            "d:6:3:4000:9:4:diesboom",
            "c:5:1:5000:11:9:cancelled",
            "d:7:3:::6:lapsedlease expired",
        ]
    );
    assert_eq!((meta(&server, keys, "history_seq"), meta(&server, keys, "history_dropped")), (5, 0));
    for (ended, rest) in &runs {
        assert!((before..=after).contains(ended), "{rest} ended at {ended}, within {before}..{after}");
    }
    // A repeated acknowledgement is refused and writes nothing more.
    assert_eq!(scripts::ack(w, keys, &[ran("ok", 5, 1, 1_000, 2_500)], Window::Default).await.unwrap(), [false]);
    assert_eq!(history(&server, keys).len(), 5);

    // `finished.lua` reads a page from a run's number on, older ones after it, and says how
    // many runs there are.
    let (numbered, page) = scripts::history(w, keys, Some(4), 2).await.unwrap();
    let keys_read: Vec<(u64, &str)> = page.iter().map(|r| (r.seq, r.task.key())).collect();
    assert_eq!((numbered, keys_read), (5, vec![(4, "cancelled"), (3, "dies")]));
    let (_, newest) = scripts::history(w, keys, None, 1).await.unwrap();
    assert_eq!(newest[0].task.last_error(), Some("lease expired"));
    assert_eq!(scripts::history(w, keys, Some(0), 10).await.unwrap().1.len(), 0);
}

/// With no history (a limit of 0, or an age of zero) the scripts that end runs write none.
#[tokio::test]
async fn no_history_writes_no_key() {
    let Some(server) = super::start_server() else { return };
    for (name, limit, age) in [("s-no-history", 0, Duration::from_secs(60)), ("s-no-age", 10, Duration::ZERO)] {
        let timers = crate::durable::DurableScheduler::builder(server.url(), name)
            .tick(Duration::from_millis(TICK_MS))
            .slots(SLOTS as usize)
            .max_attempts(1)
            .history_limit(limit)
            .history_age(age)
            .connect()
            .await
            .expect("connect");
        let (w, keys) = (&timers.wheel, &timers.wheel.base);
        let now = redis_now_ms(&server);
        seed_running(&server, keys, "ok", 5, 1, now + 60_000);
        seed_running(&server, keys, "dies", 5, 1, now + 60_000);
        let ran = |k: &str| Ack { run: Ack::run(k, 5, 1, Some((1, 1))), ..Ack::plain(k, "7") };
        assert_eq!(scripts::ack(w, keys, &[ran("ok")], Window::Default).await.unwrap(), [true]);
        assert_eq!(scripts::fail(w, keys, &ran("dies"), "boom", Window::Default).await.unwrap(), Failed::Dead);
        assert_eq!(server.command(&["EXISTS", &keys.history()]).as_int(), Some(0), "{name}");
    }
}

/// The bounds drop the oldest runs from the front of the history and count them, so that a
/// run's number still finds it: by count at once, by age once a run is added after it.
#[tokio::test]
async fn the_history_drops_its_oldest_runs_by_count_and_by_age_and_still_finds_each() {
    let Some(server) = super::start_server() else { return };
    let timers = crate::durable::DurableScheduler::builder(server.url(), "s-history-bounds")
        .tick(Duration::from_millis(TICK_MS))
        .slots(SLOTS as usize)
        .history_limit(3)
        .history_age(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    let names: Vec<String> = (1..=5).map(|i| format!("t{i}")).collect();
    for k in &names {
        seed_running(&server, keys, k, 5, 1, now + 60_000);
    }
    let acks: Vec<Ack> = names.iter().map(|k| Ack::plain(k, "7")).collect();
    assert_eq!(scripts::ack(w, keys, &acks, Window::Default).await.unwrap(), [true; 5]);
    let kept: Vec<String> = history(&server, keys).into_iter().map(|(_, rest)| rest).collect();
    assert_eq!(kept, ["a:5:1:::2:t3", "a:5:1:::2:t4", "a:5:1:::2:t5"], "the newest 3");
    assert_eq!((meta(&server, keys, "history_seq"), meta(&server, keys, "history_dropped")), (5, 2));
    let (_, page) = scripts::history(w, keys, Some(4), 10).await.unwrap();
    let read: Vec<(u64, &str)> = page.iter().map(|r| (r.seq, r.task.key())).collect();
    assert_eq!(read, [(4, "t4"), (3, "t3")], "from run 4 on; runs 1 and 2 are gone");

    tokio::time::sleep(Duration::from_millis(400)).await;
    seed_running(&server, keys, "t6", 5, 1, now + 60_000);
    assert_eq!(scripts::ack(w, keys, &[Ack::plain("t6", "7")], Window::Default).await.unwrap(), [true]);
    let kept: Vec<String> = history(&server, keys).into_iter().map(|(_, rest)| rest).collect();
    assert_eq!(kept, ["a:5:1:::2:t6"], "older than the age: gone");
    assert_eq!((meta(&server, keys, "history_seq"), meta(&server, keys, "history_dropped")), (6, 5));
    let (numbered, page) = scripts::history(w, keys, None, 10).await.unwrap();
    let read: Vec<(u64, &str)> = page.iter().map(|r| (r.seq, r.task.key())).collect();
    assert_eq!((numbered, read), (6, vec![(6, "t6")]));
}
