//! Both wheels against a `BTreeMap` model, under random sequences of operations.
//!
//! The model is the contract of [`Wheel`]: `advance(now)` moves the clock to `max(clock, now)`
//! and yields exactly the entries due at or before it; `remove` gives a live entry back once and
//! refuses stale ids; `reschedule` moves a live entry, earlier or later, keeping its id, and
//! refuses stale ids; `next_deadline` is never after the earliest deadline and is `None` only
//! when the wheel is empty.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tokio_timewheel::wheel::{EntryId, HierarchicalWheel, RoundsWheel, Wheel};

#[derive(Debug, Clone)]
enum Op {
    /// Insert at `clock + delay` (wrapping to the far future when it overflows).
    Insert { delay: u64 },
    /// Insert at an absolute deadline (often in the past, sometimes near `u64::MAX`).
    InsertAt { deadline: u64 },
    /// Remove the `n`-th id ever handed out (live or stale).
    Remove { n: usize },
    /// Move the `n`-th id ever handed out (live or stale) to `clock + delay`, or back by `delay`
    /// (into the past, when it goes below the clock).
    Reschedule { n: usize, delay: u64, earlier: bool },
    /// Advance by `step` ticks past the clock (or go back by it, which must be harmless).
    Advance { step: u64, back: bool },
    /// Insert `count` entries at once, due `delay + i % spread` ticks from the clock: enough to
    /// fill one bucket past what a wheel moves in one go (see `DRAIN_MIN` in the hierarchical
    /// wheel).
    Burst { delay: u64, spread: u64, count: usize },
}

impl Op {
    /// The deadlines an insert op adds, with the clock at `clock`.
    fn deadlines(&self, clock: u64) -> Vec<u64> {
        match *self {
            Op::Insert { delay } => vec![clock.wrapping_add(delay)],
            Op::InsertAt { deadline } => vec![deadline],
            Op::Burst { delay, spread, count } => {
                (0..count as u64).map(|i| clock.saturating_add(delay + i % spread)).collect()
            }
            Op::Remove { .. } | Op::Reschedule { .. } | Op::Advance { .. } => Vec::new(),
        }
    }
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..70u64,                 // inside level 0 / one revolution
        3 => 0..5_000u64,              // a few levels up / a few rounds
        2 => 0..1_000_000u64,
        1 => any::<u64>(),             // anywhere in u64
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => delay().prop_map(|delay| Op::Insert { delay }),
        1 => prop_oneof![0..100u64, u64::MAX - 100..=u64::MAX, any::<u64>()].prop_map(|deadline| Op::InsertAt { deadline }),
        3 => any::<usize>().prop_map(|n| Op::Remove { n }),
        3 => (any::<usize>(), delay(), prop::bool::weighted(0.3))
            .prop_map(|(n, delay, earlier)| Op::Reschedule { n, delay, earlier }),
        3 => (delay(), prop::bool::weighted(0.1)).prop_map(|(step, back)| Op::Advance { step, back }),
    ]
}

/// `op()` plus bursts, and advances of a tick or two so that drains are seen tick by tick.
fn op_with_bursts() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => op(),
        1 => (0..300u64, 1..40u64, 250..700usize).prop_map(|(delay, spread, count)| Op::Burst { delay, spread, count }),
        3 => (0..3u64).prop_map(|step| Op::Advance { step, back: false }),
    ]
}

fn check<W: Wheel<u32>>(mut wheel: W, ops: Vec<Op>) -> Result<(), TestCaseError> {
    // Live entries by id, as the model sees them: id -> (deadline, value).
    let mut model: BTreeMap<EntryId, (u64, u32)> = BTreeMap::new();
    let mut ids: Vec<EntryId> = Vec::new();
    let mut clock = 0u64;
    for (step, op) in ops.into_iter().enumerate() {
        let value = step as u32;
        match op {
            Op::Insert { .. } | Op::InsertAt { .. } | Op::Burst { .. } => {
                for deadline in op.deadlines(clock) {
                    let id = wheel.insert(deadline, value);
                    prop_assert!(model.insert(id, (deadline, value)).is_none(), "id {id:?} handed out twice");
                    ids.push(id);
                }
            }
            Op::Remove { n } => {
                if ids.is_empty() {
                    continue;
                }
                let id = ids[n % ids.len()];
                prop_assert_eq!(wheel.deadline(id), model.get(&id).map(|e| e.0));
                prop_assert_eq!(wheel.remove(id), model.remove(&id).map(|e| e.1), "remove {:?}", id);
                prop_assert_eq!(wheel.remove(id), None, "second remove of {:?}", id);
            }
            Op::Reschedule { n, delay, earlier } => {
                if ids.is_empty() {
                    continue;
                }
                let id = ids[n % ids.len()];
                let deadline = match model.get(&id) {
                    Some(&(old, _)) if earlier => old.saturating_sub(delay),
                    _ => clock.saturating_add(delay),
                };
                let moved = wheel.reschedule(id, deadline);
                match model.get_mut(&id) {
                    Some(entry) => {
                        prop_assert_eq!(moved, Some(id), "a live entry keeps its id");
                        entry.0 = deadline;
                    }
                    None => prop_assert_eq!(moved, None, "a stale id is refused"),
                }
                prop_assert_eq!(wheel.deadline(id), model.get(&id).map(|e| e.0));
            }
            Op::Advance { step, back } => {
                let now = if back { clock.saturating_sub(step) } else { clock.saturating_add(step) };
                clock = clock.max(now);
                let mut got = Vec::new();
                wheel.advance(now, |e| got.push((e.id, e.deadline, e.value)));
                got.sort();
                let due: Vec<EntryId> = model.iter().filter(|(_, e)| e.0 <= clock).map(|(id, _)| *id).collect();
                let want: Vec<(EntryId, u64, u32)> = due
                    .iter()
                    .map(|id| {
                        let (d, v) = model.remove(id).unwrap();
                        (*id, d, v)
                    })
                    .collect();
                prop_assert_eq!(got, want, "advance to {} (clock {})", now, clock);
                prop_assert_eq!(wheel.now(), clock);
            }
        }
        prop_assert_eq!(wheel.len(), model.len());
        let earliest = model.values().map(|e| e.0).min();
        match (wheel.next_deadline(), earliest) {
            (None, None) => {}
            (Some(next), Some(earliest)) => {
                prop_assert!(next <= earliest.max(clock), "next_deadline {} after earliest deadline {}", next, earliest)
            }
            (next, earliest) => prop_assert!(false, "next_deadline {:?} but earliest deadline {:?}", next, earliest),
        }
    }
    // Whatever is left comes out at the end of time, exactly once.
    let mut got = Vec::new();
    wheel.advance(u64::MAX, |e| got.push(e.id));
    got.sort();
    prop_assert_eq!(got, model.keys().copied().collect::<Vec<_>>());
    prop_assert!(wheel.is_empty());
    prop_assert_eq!(wheel.next_deadline(), None);
    Ok(())
}

/// Drives the wheel only through `next_deadline`, as a sleeping driver would, and checks that
/// every entry comes out on its own deadline, never early and never late.
fn check_precise_advance<W: Wheel<u64>>(mut wheel: W, deadlines: Vec<u64>) -> Result<(), TestCaseError> {
    for &d in &deadlines {
        wheel.insert(d, d);
    }
    let mut fired = 0;
    while let Some(next) = wheel.next_deadline() {
        prop_assert!(next >= wheel.now(), "next_deadline {} behind the clock {}", next, wheel.now());
        wheel.advance(next, |e| {
            assert_eq!(e.deadline, e.value);
            assert_eq!(e.deadline, next, "fired at {next}, due at {}", e.deadline);
            fired += 1;
        });
    }
    prop_assert_eq!(fired, deadlines.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn hierarchical_pow2_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        check(HierarchicalWheel::new(8).unwrap(), ops)?;
    }

    #[test]
    fn hierarchical_odd_slots_match_model(slots in 2usize..30, ops in prop::collection::vec(op(), 1..200)) {
        check(HierarchicalWheel::new(slots).unwrap(), ops)?;
    }

    #[test]
    fn hierarchical_with_bursts_matches_model(slots in prop_oneof![Just(8usize), 2usize..30], ops in prop::collection::vec(op_with_bursts(), 1..80)) {
        check(HierarchicalWheel::new(slots).unwrap(), ops)?;
    }

    #[test]
    fn rounds_matches_model(slots in 1usize..80, ops in prop::collection::vec(op(), 1..200)) {
        check(RoundsWheel::new(slots).unwrap(), ops)?;
    }

    #[test]
    fn hierarchical_fires_on_the_exact_tick(slots in 2usize..70, deadlines in prop::collection::vec(delay().prop_map(|d| d.saturating_add(1)), 1..60)) {
        check_precise_advance(HierarchicalWheel::new(slots).unwrap(), deadlines)?;
    }

    #[test]
    fn hierarchical_fires_bursts_on_the_exact_tick(slots in 2usize..70, base in 0..5_000u64, deadlines in prop::collection::vec(0..200u64, 300..1500)) {
        check_precise_advance(HierarchicalWheel::new(slots).unwrap(), deadlines.into_iter().map(|d| base + d + 1).collect())?;
    }

    #[test]
    fn rounds_fires_on_the_exact_tick(slots in 1usize..70, deadlines in prop::collection::vec(0..20_000u64, 1..60)) {
        check_precise_advance(RoundsWheel::new(slots).unwrap(), deadlines.into_iter().map(|d| d + 1).collect())?;
    }
}

#[test]
fn zero_and_oversized_slot_counts_are_refused() {
    assert!(HierarchicalWheel::<()>::new(0).is_err());
    assert!(HierarchicalWheel::<()>::new(1).is_err(), "one slot per level never reaches further");
    assert!(RoundsWheel::<()>::new(0).is_err());
    assert!(RoundsWheel::<()>::new(1).is_ok());
    assert!(RoundsWheel::<()>::new(tokio_timewheel::wheel::MAX_SLOTS + 1).is_err());
}
