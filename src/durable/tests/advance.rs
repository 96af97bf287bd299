//! One table of cases for the two places that move a fixed rate on: [`Recurrence::next_run`], the
//! crate's one rule for every series' next run (through `series::next_due`, the durable mode's
//! call of it, which caps a burst at [`MAX_BURST`]), and `store/lua/includes/advance.lua`, the Lua that
//! moves a fixed rate without an end on inside the script that ends its run. Each case runs
//! through both, the Lua on a real server.

use std::time::Duration;

use redis::Script;

use crate::durable::series::{missed_digit, next_due, MAX_BURST};
use crate::durable::store::scripts::assemble;
use crate::MissedRuns::{self, Burst, Delay, Skip};
use crate::Recurrence;

/// Some time in 2027, in ms: any will do.
const T0: u64 = 1_800_000_000_000;

/// A run due at `due` of a series every `every` ms, ending at `now` under the `missed` policy,
/// and when the next run is due.
struct Case {
    due: u64,
    every: u64,
    now: u64,
    missed: MissedRuns,
    next: u64,
}

const fn case(due: u64, every: u64, now: u64, missed: MissedRuns, next: u64) -> Case {
    Case { due, every, now, missed, next }
}

/// The cases, each policy on time, late by less than a period, at the next run and past it, a
/// burst below, at and over the cap, and periods that do not divide the lateness.
const CASES: &[Case] = &[
    // Ended before its due time, on it, or late by less than a period: a period after `due`.
    case(T0, 1000, T0 - 500, Burst, T0 + 1000),
    case(T0, 1000, T0 - 500, Delay, T0 + 1000),
    case(T0, 1000, T0 - 500, Skip, T0 + 1000),
    case(T0, 1000, T0, Burst, T0 + 1000),
    case(T0, 1000, T0, Delay, T0 + 1000),
    case(T0, 1000, T0, Skip, T0 + 1000),
    case(T0, 1000, T0 + 999, Burst, T0 + 1000),
    case(T0, 1000, T0 + 999, Delay, T0 + 1000),
    case(T0, 1000, T0 + 999, Skip, T0 + 1000),
    // Ended when the next run was due: that run is missed.
    case(T0, 1000, T0 + 1000, Burst, T0 + 1000),
    case(T0, 1000, T0 + 1000, Delay, T0 + 2000),
    case(T0, 1000, T0 + 1000, Skip, T0 + 2000),
    // Three runs missed.
    case(T0, 1000, T0 + 3500, Burst, T0 + 1000),
    case(T0, 1000, T0 + 3500, Delay, T0 + 4500),
    case(T0, 1000, T0 + 3500, Skip, T0 + 4000),
    // A burst of MAX_BURST (100) runs is made up whole; from 101 on, the earliest are skipped.
    case(T0, 1000, T0 + 100_999, Burst, T0 + 1000),
    case(T0, 1000, T0 + 101_000, Burst, T0 + 2000),
    case(T0, 1000, T0 + 1_000_500, Burst, T0 + 901_000),
    case(T0, 1000, T0 + 1_000_500, Skip, T0 + 1_001_000),
    // A million runs missed: counted, not walked.
    case(T0, 10, T0 + 10_000_000, Burst, T0 + 9_999_010),
    case(T0, 10, T0 + 10_000_000, Delay, T0 + 10_000_010),
    case(T0, 10, T0 + 10_000_000, Skip, T0 + 10_000_010),
    // A period that does not divide the lateness.
    case(T0, 7, T0 + 50, Burst, T0 + 7),
    case(T0, 7, T0 + 50, Delay, T0 + 57),
    case(T0, 7, T0 + 50, Skip, T0 + 56),
    case(T0 + 3, 1, T0 + 5, Skip, T0 + 6),
    case(T0, 86_400_000, T0 + 86_400_001, Skip, T0 + 172_800_000),
];

/// The cases through the crate's one rule, as the durable mode asks it.
#[test]
fn the_cases_hold_in_rust() {
    for &Case { due, every, now, missed, next } in CASES {
        let recurrence = Recurrence::every(Duration::from_millis(every)).missed(missed);
        assert_eq!(next_due(&recurrence, due, now), Some(next), "every {every} ms, due {due}, ended {now}, {missed:?}");
    }
}

/// The cases through `advance.lua`, on a record as the scripts keep it: due at `due`, its first
/// delivery under claim token 7, every `every` ms with no limit, its policy's digit.
#[tokio::test]
async fn the_cases_hold_in_lua() {
    let Some(server) = super::start_server() else { return };
    let mut conn = server.connection().await;
    let script = Script::new(&assemble(
        "-- @include record\n-- @include advance\n\
         local t = decode(ARGV[1])\n\
         if not advance(t, tonumber(ARGV[2]), nil) then return false end\n\
         return {string.format('%d', t.due), t.a, t.tok}",
    ));
    assert_eq!(MAX_BURST, 100, "the cases count on it");
    for &Case { due, every, now, missed, next } in CASES {
        let record = format!("{due}:1:7:{every}:-1:{}:0:", missed_digit(missed));
        let moved: Option<(String, u32, String)> = script.arg(&record).arg(now).invoke_async(&mut conn).await.unwrap();
        let case = format!("every {every} ms, due {due}, ended {now}, {missed:?}");
        assert_eq!(moved, Some((next.to_string(), 0, "0".to_string())), "{case}: the next run, undelivered");
    }
}
