//! Tests of the shards: unit tests of the wake-up and room, and a model test of the whole.

use super::*;
use crate::service::job::Wake;
use crate::service::key::Key;

/// A clock of 1 ms ticks, for the shards' own clock.
fn ms_clock() -> Clock {
    Clock::new(std::time::Duration::from_millis(1)).unwrap()
}

/// The actor sleeps until tick 8,192, when one far timer's level-2 bucket (8,192..12,288 at
/// 64 slots) starts. Timers due in that bucket can wait for it, until there are enough of
/// them to drain the bucket ahead of its start, 4,096 ticks earlier: the request that makes
/// it busy enough wakes the actor for that, be it a schedule, a batch or a reschedule.
#[test]
fn a_request_that_makes_a_bucket_busy_enough_to_drain_wakes_the_actor() {
    for last in ["schedule", "schedule_many", "reschedule"] {
        let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0, ms_clock(), "test").unwrap();
        shared.will_wake_at(8192);
        let mut keys = (0..).map(|i| format!("k-{i}")).filter(|k| shared.locate(k.as_bytes()).0 == 0);
        let mut timer = || Timer::new(Key::from(keys.next().unwrap().as_str()), Run::Once(Box::new(Wake)));
        for i in 0..crate::wheel::DRAIN_MIN as u64 {
            shared.add(timer(), Due { deadline: 9_000 + i, set_at: 0 }, false).unwrap();
        }
        let far = timer();
        let far_key = far.key.as_str().to_owned();
        shared.add(far, Due { deadline: 100_000, set_at: 0 }, false).unwrap();
        assert!(!shared.wake.signalled(), "{last}: due after the actor's wake-up, and no drain yet");
        match last {
            "schedule" => shared.add(timer(), Due { deadline: 12_000, set_at: 0 }, false).map(drop),
            "schedule_many" => shared.add_many(vec![(timer(), 12_000)], 0).remove(0).map(drop),
            _ => shared.move_timer(far_key.as_bytes(), Instant::now(), 12_000, 0),
        }
        .unwrap();
        assert!(shared.wake.signalled(), "{last}: the bucket's drain starts at 4,096, before 8,192");
    }
}

/// With room for 10,000 timers, scheduling them rehashes no shard's key map: each keeps the
/// table it started with (a rehash would have replaced it by a larger one).
#[test]
fn room_made_at_the_start_is_used_without_growing() {
    let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 10_000, ms_clock(), "test").unwrap();
    let room = |shared: &Shared| (0..shared.shard_count()).map(|s| shared.lock(s).keys.capacity()).collect::<Vec<_>>();
    let before = room(&shared);
    assert!(before.iter().all(|&c| c * shared.shard_count() >= 10_000), "{before:?}");
    for i in 0..10_000u64 {
        let timer = Timer::new(Key::from(format!("t-{i}").as_str()), Run::Once(Box::new(Wake)));
        shared.add(timer, Due { deadline: 1_000 + i, set_at: 0 }, false).unwrap();
    }
    assert_eq!(room(&shared), before);
    let unreserved = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0, ms_clock(), "test").unwrap();
    assert!(room(&unreserved).iter().all(|&c| c == 0), "no room is made by default");
}

/// A `Scheduled` dropped unpolled clears its timer's `ARMED` bit, so the timer's end leaves
/// no outcome in `watchers` that nobody would collect; a watched timer's end leaves one.
#[test]
fn a_timer_whose_watcher_dropped_records_no_outcome() {
    for dropped in [true, false] {
        let shared = Shared::new(WheelKind::Hierarchical, 64, usize::MAX, 0, ms_clock(), "test").unwrap();
        let clock = Clock::new(std::time::Duration::from_millis(1)).unwrap();
        let key = "order-42";
        let due = Due { deadline: 5, set_at: 0 };
        let ticket = shared.add(Timer::new(Key::from(key), Run::Once(Box::new(Wake))), due, true).unwrap();
        if dropped {
            shared.unwatch(key.as_bytes(), ticket, false);
        }
        let mut fired = Fired::default();
        for shard in 0..shared.shard_count() {
            shared.fire(shard, clock.instant(10).unwrap(), &clock, &mut fired);
        }
        assert_eq!(shared.stats().fired, 1);
        let watchers: usize = (0..shared.shard_count()).map(|s| shared.lock(s).watchers.len()).sum();
        assert_eq!(watchers, usize::from(!dropped), "watcher dropped: {dropped}");
    }
}

/// The shards against a model (a `BTreeMap` of pending timers): schedules one by one and in
/// batches, watched or not, one-shot and repeating; cancels by key, by serial number and in
/// batches; moves; dropped watchers; advances; and a final stop. After every step each key is
/// pending exactly when the model says and the counters agree; at the end each watched timer that
/// ended has its outcome recorded, and nothing else is.
mod model {
    use super::*;
    use crate::service::job::Wake;
    use crate::service::key::Key;
    use crate::service::timer::Repeating;
    use proptest::prelude::*;
    use std::collections::btree_map::Entry;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    #[derive(Debug, Clone)]
    enum Op {
        Add {
            key: u8,
            delay: u8,
            repeat: Option<(u8, Option<u8>)>,
            watched: bool,
        },
        AddMany(Vec<(u8, u8)>),
        Cancel {
            key: u8,
            serial: u8,
        },
        CancelMany(Vec<u8>),
        Move {
            key: u8,
            delay: u8,
        },
        Unwatch(u8),
        /// Drops the watcher of a watched timer that has ended, picked among them.
        DropEnded(prop::sample::Index),
        Advance(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u8..KEYS;
        prop_oneof![
            6 => (key.clone(), 0u8..40, prop::option::weighted(0.4, (1u8..6, prop::option::of(1u8..5))), any::<bool>())
                .prop_map(|(key, delay, repeat, watched)| Op::Add { key, delay, repeat, watched }),
            2 => prop::collection::vec((key.clone(), 0u8..40), 0..8).prop_map(Op::AddMany),
            4 => (key.clone(), 0u8..3).prop_map(|(key, serial)| Op::Cancel { key, serial }),
            1 => prop::collection::vec(key.clone(), 0..8).prop_map(Op::CancelMany),
            2 => (key.clone(), 0u8..40).prop_map(|(key, delay)| Op::Move { key, delay }),
            1 => key.clone().prop_map(Op::Unwatch),
            1 => any::<prop::sample::Index>().prop_map(Op::DropEnded),
            4 => (0u8..12).prop_map(Op::Advance),
        ]
    }

    struct M {
        serial: u64,
        /// What the timer's `Scheduled` would hold; its entry goes stale as the timer moves.
        ticket: Ticket,
        deadline: u64,
        repeat: Option<(u64, Option<u64>)>,
        watched: bool,
    }

    /// Keys `key-0` to `key-23`, few enough that they collide often.
    const KEYS: u8 = 24;

    fn name(k: u8) -> String {
        format!("key-{k}")
    }

    fn run(kind: WheelKind, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let shared = Shared::new(kind, 4, usize::MAX, 0, ms_clock(), "test").unwrap();
        shared.will_wake_at(0);
        let clock = Clock::new(std::time::Duration::from_millis(1)).unwrap();
        let job: Arc<dyn crate::service::job::Job> = Arc::new(|_k: String| async {});
        let mut model: BTreeMap<u8, M> = BTreeMap::new();
        let mut outcomes: BTreeMap<(usize, u64), Outcome> = BTreeMap::new();
        // The watched timers that ended, whose watchers are still there.
        let mut watching_ended: Vec<(u8, Ticket)> = Vec::new();
        let mut now = 0u64;
        let mut fired_total = 0u64;
        let mut fired = Fired::default();
        for op in ops {
            match op {
                Op::Add { key, delay, repeat, watched } => {
                    let deadline = now + delay as u64;
                    let rep = repeat.map(|(p, runs)| {
                        Box::new(Repeating {
                            period: std::time::Duration::from_millis(p as u64),
                            missed: crate::MissedRuns::Burst,
                            due: clock.instant(deadline).unwrap(),
                            runs_left: runs.map(u64::from),
                            job: job.clone(),
                            calendar: None,
                        })
                    });
                    let r = shared.add(
                        Timer::new(
                            Key::from(name(key).as_str()),
                            rep.map_or_else(|| Run::Once(Box::new(Wake)), Run::Repeat),
                        ),
                        Due { deadline, set_at: now },
                        watched,
                    );
                    match model.entry(key) {
                        Entry::Occupied(_) => prop_assert!(matches!(r, Err(Error::DuplicateKey(_)))),
                        Entry::Vacant(vacant) => {
                            let repeat = repeat.map(|(p, r)| (p as u64, r.map(u64::from)));
                            let ticket = r.unwrap();
                            vacant.insert(M { serial: ticket.serial, ticket, deadline, repeat, watched });
                        }
                    }
                }
                Op::AddMany(items) => {
                    let timers = items
                        .iter()
                        .map(|&(k, d)| {
                            (Timer::new(Key::from(name(k).as_str()), Run::Once(Box::new(Wake))), now + d as u64)
                        })
                        .collect();
                    let rs = shared.add_many(timers, now);
                    for (&(k, d), r) in items.iter().zip(rs) {
                        let Entry::Vacant(vacant) = model.entry(k) else {
                            prop_assert!(matches!(r, Err(Error::DuplicateKey(_))));
                            continue;
                        };
                        prop_assert!(r.is_ok());
                        // A batch returns no serial numbers: read it from the shard.
                        let (shard, hash) = shared.locate(name(k).as_bytes());
                        let s = shared.lock(shard);
                        let pos = s.find(hash, name(k).as_bytes(), None).unwrap();
                        let entry = s.keys.index_at(pos);
                        let serial = s.wheel.at(entry).1.serial();
                        drop(s);
                        let ticket = Ticket { shard: shard as u32, entry, serial };
                        vacant.insert(M { serial, ticket, deadline: now + d as u64, repeat: None, watched: false });
                    }
                }
                Op::Cancel { key, serial } => {
                    let m = model.get(&key);
                    let given = match (serial, m) {
                        (0, _) => None,
                        (1, Some(m)) => Some(m.serial),
                        _ => Some(u64::MAX >> 2),
                    };
                    let ended = shared.cancel(name(key).as_bytes(), given);
                    let expect = m.is_some() && serial != 2;
                    prop_assert_eq!(ended, expect);
                    if ended {
                        let m = model.remove(&key).unwrap();
                        if m.watched {
                            outcomes.insert((shared.locate(name(key).as_bytes()).0, m.serial), Err(Error::Cancelled));
                            watching_ended.push((key, m.ticket));
                        }
                    }
                }
                Op::CancelMany(keys) => {
                    let names: Vec<String> = keys.iter().map(|&k| name(k)).collect();
                    let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                    let ended = shared.cancel_many(&refs);
                    for (&k, e) in keys.iter().zip(ended) {
                        prop_assert_eq!(e, model.contains_key(&k));
                        if let Some(m) = model.remove(&k) {
                            if m.watched {
                                outcomes.insert((shared.locate(name(k).as_bytes()).0, m.serial), Err(Error::Cancelled));
                                watching_ended.push((k, m.ticket));
                            }
                        }
                    }
                }
                Op::Move { key, delay } => {
                    let deadline = now + delay as u64;
                    let r = shared.move_timer(name(key).as_bytes(), clock.instant(deadline).unwrap(), deadline, now);
                    match model.get_mut(&key) {
                        Some(m) => {
                            prop_assert!(r.is_ok());
                            m.deadline = deadline;
                        }
                        None => prop_assert!(matches!(r, Err(Error::NotFound))),
                    }
                }
                Op::Unwatch(key) => {
                    if let Some(m) = model.get_mut(&key) {
                        shared.unwatch(name(key).as_bytes(), m.ticket, false);
                        m.watched = false;
                    }
                }
                Op::DropEnded(pick) => {
                    if !watching_ended.is_empty() {
                        let (key, ticket) = watching_ended.swap_remove(pick.index(watching_ended.len()));
                        shared.unwatch(name(key).as_bytes(), ticket, false);
                        outcomes.remove(&(ticket.shard as usize, ticket.serial));
                    }
                }
                Op::Advance(dt) => {
                    now += dt as u64;
                    for shard in 0..shared.shard_count() {
                        shared.fire(shard, clock.instant(now).unwrap(), &clock, &mut fired);
                    }
                    fired.jobs.clear();
                    fired.wakers.clear();
                    fired.swept.clear();
                    let due: Vec<u8> = model.iter().filter(|(_, m)| m.deadline <= now).map(|(&k, _)| k).collect();
                    for k in due {
                        fired_total += 1;
                        let m = model.get_mut(&k).unwrap();
                        match m.repeat {
                            Some((p, runs)) if runs != Some(1) => {
                                m.deadline += p;
                                m.repeat = Some((p, runs.map(|n| n - 1)));
                            }
                            _ => {
                                let m = model.remove(&k).unwrap();
                                if m.watched {
                                    outcomes.insert((shared.locate(name(k).as_bytes()).0, m.serial), Ok(()));
                                    watching_ended.push((k, m.ticket));
                                }
                            }
                        }
                    }
                }
            }
            for k in 0..KEYS {
                prop_assert_eq!(shared.contains(name(k).as_bytes()), model.contains_key(&k), "key {}", k);
            }
            let st = shared.stats();
            prop_assert_eq!(st.pending, model.len());
            prop_assert_eq!(st.fired, fired_total);
        }
        // Every recorded outcome is there for its watcher.
        for ((shard, serial), outcome) in &outcomes {
            let found = shared.lock(*shard).watchers.outcome(*serial);
            prop_assert_eq!(found.as_ref(), Some(outcome), "serial {}", serial);
        }
        let total: usize = (0..shared.shard_count()).map(|s| shared.lock(s).watchers.len()).sum();
        prop_assert_eq!(total, outcomes.len(), "watchers hold exactly the outcomes of watched timers that ended");
        let stopped: usize = (0..shared.shard_count()).map(|s| shared.close(s)).sum();
        prop_assert_eq!(stopped, model.len());
        for (k, m) in &model {
            if m.watched {
                let shard = shared.locate(name(*k).as_bytes()).0;
                let found = shared.lock(shard).watchers.outcome(m.serial);
                prop_assert_eq!(found, Some(Err(Error::Stopped)));
            }
        }
        prop_assert_eq!(shared.stats().pending, 0);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn shared_matches_model_hierarchical(ops in prop::collection::vec(op(), 1..200)) { run(WheelKind::Hierarchical, ops)?; }
        #[test]
        fn shared_matches_model_rounds(ops in prop::collection::vec(op(), 1..200)) { run(WheelKind::Rounds, ops)?; }
    }
}
