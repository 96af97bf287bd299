//! One script at a time, in the style of asynq's `rdb_test.go`: seed the wheel's keys, run one
//! script through its Rust function, compare the keys afterwards (every key but `meta`, whose
//! counters are checked one by one). Deterministic: no worker or leader runs, so nothing moves
//! but what the script under test moves; times are chosen relative to the cursor and to Redis's
//! clock read by the test.

use super::{dump, expect, meta, redis_now_ms, wheel, SLOTS, TICK_MS};
use crate::durable::conn::Window;
use crate::durable::scripts::{self, Bid, Cancelled, Failed, Moved, NewTask, Requeued, Scheduled, TickReply};
use crate::durable::time::When;
use crate::durable::WheelKeys;

/// The cursor the wheel was opened with.
fn cursor(server: &super::RedisServer, keys: &WheelKeys) -> u64 {
    server.command(&["GET", &keys.cursor()]).as_int().expect("cursor") as u64
}

/// Seeds task `k` as `schedule` would leave it, due at tick `tick` (in its slot if the tick is
/// ahead of the cursor, else ready).
fn seed_waiting(server: &super::RedisServer, keys: &WheelKeys, k: &str, tick: u64) {
    let due = (tick * TICK_MS).to_string();
    server.command(&["HSET", &keys.task(k), "p", "x", "due", &due, "tick", &tick.to_string(), "a", "0", "rid", "r1"]);
    server.command(&["ZADD", &keys.slot(tick % SLOTS), &due, k]);
    server.command(&["INCR", &keys.ring()]);
}

/// Seeds task `k` as a claim leaves it: delivery 1 under token `7`, its lease ending at `lease_end`.
fn seed_running(server: &super::RedisServer, keys: &WheelKeys, k: &str, due: u64, lease_end: u64) {
    let due = due.to_string();
    server.command(&["HSET", &keys.task(k), "p", "x", "due", &due, "tick", &due, "a", "1", "rid", "r1", "tok", "7"]);
    server.command(&["ZADD", &keys.leased(), &lease_end.to_string(), k]);
}

fn new_task(key: &str, due_ms: u64, rid: &str) -> NewTask {
    NewTask { key: key.to_string(), when: When::At(due_ms), payload: b"x".to_vec(), request_id: rid.to_string() }
}

#[tokio::test]
async fn schedule_writes_the_task_its_slot_and_the_ring_and_recognises_its_retry() {
    let Some((server, timers)) = wheel("s-schedule").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let tick = c + 3;
    let due = tick * TICK_MS;
    let far_due = (c + SLOTS + 5) * TICK_MS;
    let got = scripts::schedule(w, keys, &[new_task("a", due, "r1"), new_task("b", far_due, "r2")]).await.unwrap();
    assert_eq!(got, [Scheduled::Created, Scheduled::Created]);
    let slot = format!("slot:{}", tick % SLOTS);
    let task = |due: u64, tick: u64, rid: &str| format!("a=0 due={due} p=x rid={rid} tick={tick}");
    let want = expect(&[
        ("cursor", &c.to_string()),
        (&slot, &format!("a@{due}")),
        ("ring", "1"),
        ("far", &format!("b@{far_due}")),
        ("t:a", &task(due, tick, "r1")),
        ("t:b", &task(far_due, c + SLOTS + 5, "r2")),
    ]);
    assert_eq!(dump(&server, keys), want);
    assert_eq!(meta(&server, keys, "scheduled"), 2);

    // The same request again is recognised; another request for the key is a duplicate. Neither
    // writes anything.
    let got = scripts::schedule(w, keys, &[new_task("a", due, "r1"), new_task("a", due, "r9")]).await.unwrap();
    assert_eq!(got, [Scheduled::AlreadyByThisRequest, Scheduled::Duplicate]);
    assert_eq!(dump(&server, keys), want);
    assert_eq!(meta(&server, keys, "scheduled"), 2);

    // After the task finished, its `done:` record still recognises the retry.
    server.command(&["DEL", &keys.task("a"), &keys.slot(tick % SLOTS), &keys.ring()]);
    server.command(&["SET", &keys.done("a"), "r1"]);
    let got = scripts::schedule(w, keys, &[new_task("a", due, "r1")]).await.unwrap();
    assert_eq!(got, [Scheduled::AlreadyByThisRequest]);
    assert!(!dump(&server, keys).contains_key("t:a"), "the retry created the task again");
}

/// What cancel answers and leaves, for every state a task can be in.
#[tokio::test]
async fn cancel_takes_waiting_ready_and_expired_tasks_and_leaves_running_ones() {
    let Some((server, timers)) = wheel("s-cancel").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let now = redis_now_ms(&server);
    seed_waiting(&server, keys, "waiting", c + 2);
    server.command(&["HSET", &keys.task("far"), "p", "x", "due", "99999999999999", "tick", "1", "a", "0", "rid", "r1"]);
    server.command(&["ZADD", &keys.far(), "99999999999999", "far"]);
    server.command(&["HSET", &keys.task("ready"), "p", "x", "due", "5", "tick", "1", "a", "0", "rid", "r1"]);
    server.command(&["ZADD", &keys.ready(), "5", "ready"]);
    seed_running(&server, keys, "running", 5, now + 60_000);
    seed_running(&server, keys, "expired", 5, now - 1_000);
    let before = dump(&server, keys);

    let names = ["waiting", "far", "ready", "running", "expired", "missing", "waiting"];
    let got = scripts::cancel(w, keys, "c1", &names).await.unwrap();
    use Cancelled::{NotPending, Running, Yes};
    assert_eq!(got, [Yes, Yes, Yes, Running, Yes, NotPending, NotPending], "{names:?}");

    let mut want = before.clone();
    for k in ["waiting", "far", "ready", "expired"] {
        want.remove(&format!("t:{k}"));
        want.insert(format!("done:{k}"), "r1/c1".to_string());
    }
    for gone in [format!("slot:{}", (c + 2) % SLOTS), "far".into(), "ready".into()] {
        want.remove(&gone);
    }
    want.insert("ring".into(), "0".into());
    want.insert("leased".into(), format!("running@{}", now + 60_000));
    assert_eq!(dump(&server, keys), want);

    // A retry of the same call (its reply was lost) answers as the first did for what it took,
    // and takes nothing scheduled under the key since.
    seed_waiting(&server, keys, "waiting", c + 2);
    let got = scripts::cancel(w, keys, "c1", &["waiting", "running"]).await.unwrap();
    assert_eq!(got, [Yes, Running]);
    assert!(dump(&server, keys).contains_key("t:waiting"), "the retry cancelled a task scheduled since");
}

#[tokio::test]
async fn reschedule_moves_a_waiting_task_and_leaves_a_running_one() {
    let Some((server, timers)) = wheel("s-move").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let now = redis_now_ms(&server);
    seed_waiting(&server, keys, "a", c + 2);
    seed_running(&server, keys, "run", 5, now + 60_000);
    let before_running = dump(&server, keys);

    let one = |key: &'static str, when: When| async move { scripts::reschedule(w, keys, &[(key, when)]).await };
    assert_eq!(one("run", When::Delay(0)).await.unwrap(), [Moved::Running]);
    assert_eq!(dump(&server, keys), before_running, "a running task was touched");
    assert_eq!(one("nope", When::Delay(0)).await.unwrap(), [Moved::NotPending]);
    assert_eq!(dump(&server, keys), before_running, "a call that moved nothing wrote something");

    let to = (c + 5) * TICK_MS;
    assert_eq!(one("a", When::At(to)).await.unwrap(), [Moved::Yes]);
    let d = dump(&server, keys);
    assert_eq!(d.get(&format!("slot:{}", (c + 5) % SLOTS)).map(String::as_str), Some(format!("a@{to}").as_str()));
    assert!(!d.contains_key(&format!("slot:{}", (c + 2) % SLOTS)), "{d:?}");
    assert_eq!(d["ring"], "1");
    assert_eq!(d["t:a"], format!("a=0 due={to} p=x rid=r1 tick={}", c + 5));
}

/// A batch moves its tasks in order, as so many calls one after the other, each answering for
/// itself: a key given twice is moved twice (the later time stands), a running task and a
/// missing one are left alone, and a task moved into the past is ready and wakes a worker.
#[tokio::test]
async fn reschedule_moves_a_batch_in_order_each_answering_for_itself() {
    let Some((server, timers)) = wheel("s-move-batch").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    let now = redis_now_ms(&server);
    seed_waiting(&server, keys, "a", c + 2);
    seed_waiting(&server, keys, "b", c + 3);
    seed_running(&server, keys, "run", 5, now + 60_000);
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
    for t in [c + 2, c + 3, c + 5] {
        assert!(!d.contains_key(&format!("slot:{}", t % SLOTS)), "slot of tick {t} left: {d:?}");
    }
    assert_eq!(d[&format!("slot:{}", (c + 6) % SLOTS)], format!("a@{last}"));
    assert_eq!(d["ring"], "1", "{d:?}");
    assert_eq!(d["t:a"], format!("a=0 due={last} p=x rid=r1 tick={}", c + 6));
    assert_eq!(d["ready"], "b@1");
    assert_eq!(d["wake"], "1", "the task made ready woke no worker");
    assert_eq!(d["t:run"], "a=1 due=5 p=x rid=r1 tick=5 tok=7", "a running task was touched");
}

/// A claim leases what is ready, oldest first; its retry (same id) gets the same tasks back
/// without another delivery; a replay-only call under a new id takes nothing.
#[tokio::test]
async fn claim_leases_ready_tasks_and_its_retry_gets_them_back() {
    let Some((server, timers)) = wheel("s-claim").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    for (k, due) in [("b", "20"), ("a", "10"), ("c", "30")] {
        server.command(&["HSET", &keys.task(k), "p", k, "due", due, "tick", "0", "a", "0", "rid", "r"]);
        server.command(&["ZADD", &keys.ready(), due, k]);
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
    let (claimed_ms, record) = d["claim:k1"].split_once(' ').unwrap();
    let claimed_ms: u64 = claimed_ms.parse().unwrap();
    assert!(claimed_ms >= before && claimed_ms <= after + 1, "claimed at {claimed_ms}, Redis's now {before}..{after}");
    assert_eq!(record, "a 1 b 2");
    assert_eq!(got[0].task.claimed_at, crate::durable::time::from_unix_ms(claimed_ms));
    assert_eq!(d["seq"], "2");
    assert_eq!(d["t:a"], "a=1 due=10 p=a rid=r tick=0 tok=1");
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

#[tokio::test]
async fn ack_finishes_a_task_under_its_token_only() {
    let Some((server, timers)) = wheel("s-ack").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "a", 5, now + 60_000);
    seed_running(&server, keys, "b", 5, now + 60_000);
    let got = scripts::ack(w, keys, &[("a", "7"), ("b", "6"), ("gone", "1")], Window::Default).await.unwrap();
    assert_eq!(got, [true, false, false]);
    let d = dump(&server, keys);
    assert!(!d.contains_key("t:a"));
    assert_eq!(d["done:a"], "r1");
    assert_eq!(d["leased"], format!("b@{}", now + 60_000));
    assert_eq!(d["t:b"], "a=1 due=5 p=x rid=r1 tick=5 tok=7");
    assert_eq!(meta(&server, keys, "acked"), 1);
    // Repeated: refused, nothing changes.
    assert_eq!(scripts::ack(w, keys, &[("a", "7")], Window::Default).await.unwrap(), [false]);
    assert_eq!(dump(&server, keys), d);
}

#[tokio::test]
async fn fail_retries_after_the_backoff_then_buries_on_the_last_attempt() {
    let Some((server, timers)) = wheel("s-fail").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    seed_running(&server, keys, "a", 5, now + 60_000);
    assert_eq!(scripts::fail(w, keys, "a", "6", "boom", Window::Default).await.unwrap(), Failed::Refused);
    let before = redis_now_ms(&server);
    assert_eq!(scripts::fail(w, keys, "a", "7", "boom", Window::Default).await.unwrap(), Failed::Retried);
    let after = redis_now_ms(&server);
    let task = server.command(&["HGET", &keys.task("a"), "due"]).as_int().unwrap() as u64;
    // Attempt 1 failed: due a backoff (1 s) later, in the far tier or the ring, not leased.
    assert!(task >= before + 1000 && task <= after + 1001, "due {task}, now {before}..{after}");
    let d = dump(&server, keys);
    assert!(!d.contains_key("leased"), "{d:?}");
    assert!(d["t:a"].contains("err=boom") && !d["t:a"].contains("tok="), "{d:?}");
    assert_eq!(meta(&server, keys, "retried"), 1);

    // Its third (last) delivery fails: a dead letter.
    server.command(&["HSET", &keys.task("a"), "a", "3", "tok", "9"]);
    server.command(&["ZADD", &keys.leased(), &(now + 60_000).to_string(), "a"]);
    assert_eq!(scripts::fail(w, keys, "a", "9", "boom again", Window::Default).await.unwrap(), Failed::Dead);
    let d = dump(&server, keys);
    assert!(!d.contains_key("t:a") && !d.contains_key("leased"), "{d:?}");
    assert_eq!(d["d:a"], "a=3 err=boom again p=x");
    assert_eq!(d["done:a"], "r1");
    assert!(d["dead"].starts_with("a@"), "{d:?}");
    assert_eq!(meta(&server, keys, "dead_lettered"), 1);
}

/// The tick script: refused under a wrong token; otherwise it requeues what has an expired
/// lease, moves a due slot to `ready`, and never makes early what the clock has not reached, even
/// with the cursor ahead of the clock (the clock stepped back).
#[tokio::test]
async fn tick_moves_due_tasks_requeues_expired_leases_and_is_never_early() {
    let Some((server, timers)) = wheel("s-tick").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    assert_eq!(scripts::tick(w, keys, "nobody:1", 128, 64).await.unwrap(), TickReply::Refused);
    server.command(&["SET", &keys.leader(), "me:1"]);

    let now = redis_now_ms(&server);
    let now_tick = now / TICK_MS;
    // Due two ticks ago, in its slot; a lease that ran out; and a far task due later.
    server.command(&["SET", &keys.cursor(), &(now_tick - 3).to_string()]);
    seed_waiting(&server, keys, "due", now_tick - 2);
    seed_running(&server, keys, "expired", 5, now - 10);
    let later = (now_tick + SLOTS * 4) * TICK_MS;
    server.command(&["HSET", &keys.task("later"), "p", "x", "due", &later.to_string(), "tick", "0", "a", "0"]);
    server.command(&["ZADD", &keys.far(), &later.to_string(), "later"]);

    let reply = scripts::tick(w, keys, "me:1", 128, 64).await.unwrap();
    let TickReply::Done { cursor, made_ready, .. } = reply else { panic!("{reply:?}") };
    assert!(cursor >= now_tick, "{reply:?}");
    assert_eq!(made_ready, 2);
    let d = dump(&server, keys);
    assert_eq!(d["ready"], format!("expired@5 due@{}", (now_tick - 2) * TICK_MS));
    assert_eq!(d["far"], format!("later@{later}"));
    assert!(!d.contains_key("leased"), "{d:?}");
    assert!(d["t:expired"].contains("err=lease expired") && !d["t:expired"].contains("tok="), "{d:?}");
    assert_eq!(d["wake"], "1");

    // The clock stepped back: the cursor is ahead of it. A task due between the clock and the
    // cursor is not made ready before the clock reaches it.
    let now = redis_now_ms(&server);
    let now_tick = now / TICK_MS;
    server.command(&["DEL", &keys.ready()]);
    server.command(&["SET", &keys.cursor(), &(now_tick + 50).to_string()]);
    let soon = (now_tick + 20) * TICK_MS;
    server.command(&["HSET", &keys.task("soon"), "p", "x", "due", &soon.to_string(), "tick", "0", "a", "0"]);
    server.command(&["ZADD", &keys.far(), &soon.to_string(), "soon"]);
    scripts::tick(w, keys, "me:1", 128, 64).await.unwrap();
    let d = dump(&server, keys);
    assert!(!d.contains_key("ready"), "made ready {:?} early", d.get("ready"));
    assert!(d["far"].contains("soon@"), "{d:?}");
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
    server.command(&["HSET", &keys.dead_task("a"), "p", "x", "a", "3", "err", "boom"]);
    server.command(&["ZADD", &keys.dead(), "7", "a"]);
    assert_eq!(scripts::requeue_dead(w, keys, "nope", "q1").await.unwrap(), Requeued::NotDead);
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q1").await.unwrap(), Requeued::Yes);
    let d = dump(&server, keys);
    assert!(!d.contains_key("d:a") && !d.contains_key("dead"), "{d:?}");
    assert!(d["ready"].starts_with("a@") && d["t:a"].contains("a=0") && d["t:a"].contains("rid=q1"), "{d:?}");
    // Its retry (the reply was lost) still answers Yes and changes nothing.
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q1").await.unwrap(), Requeued::Yes);
    assert_eq!(dump(&server, keys), d);
    // A new dead letter under a key that is pending again stays.
    server.command(&["HSET", &keys.dead_task("a"), "p", "y", "a", "3", "err", "boom"]);
    assert_eq!(scripts::requeue_dead(w, keys, "a", "q2").await.unwrap(), Requeued::KeyPending);
}

#[tokio::test]
async fn stats_and_dead_letters_read_what_the_keys_hold() {
    let Some((server, timers)) = wheel("s-read").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let c = cursor(&server, keys);
    seed_waiting(&server, keys, "w", c + 1);
    server.command(&["ZADD", &keys.ready(), "1", "r"]);
    server.command(&["ZADD", &keys.leased(), "1", "l"]);
    for i in 0..5 {
        server.command(&["HSET", &keys.dead_task(&format!("d{i}")), "p", "x", "a", "3", "err", &format!("e{i}")]);
        server.command(&["ZADD", &keys.dead(), &i.to_string(), &format!("d{i}")]);
    }
    let stats = scripts::stats(w, keys).await.unwrap();
    assert_eq!((stats.pending, stats.waiting, stats.ready, stats.in_flight, stats.dead), (3, 1, 1, 1, 5));
    let page = scripts::dead_letters(w, keys, 2, 3).await.unwrap();
    let seen: Vec<(&str, &str)> = page.iter().map(|d| (d.key.as_str(), d.last_error.as_str())).collect();
    assert_eq!(seen, [("d3", "e3"), ("d4", "e4")]);
    assert_eq!(page[0].attempts, 3);
}
