//! `Recurrence` as a pure value: its bounds, its missed-run policies and, with the `cron`
//! feature, its runs across the daylight-saving transitions of 2026 and 2027 in Berlin and New
//! York, pinned by the table in its docs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{MissedRuns, Recurrence};
use crate::Error;

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Every run of `r` after `from` up to `to`, both excluded, by `next_after`.
fn runs(r: &Recurrence, from: SystemTime, to: SystemTime) -> Vec<SystemTime> {
    let mut found = Vec::new();
    let mut t = from;
    while let Some(run) = r.next_after(t).filter(|&run| run < to) {
        assert!(run > t, "{r:?}: the run after {t:?} is {run:?}");
        found.push(run);
        t = run;
    }
    found
}

fn invalid(result: Result<impl std::fmt::Debug, Error>) -> String {
    match result {
        Err(Error::Invalid(why)) => why,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn every_without_a_start_runs_a_period_after_the_time_asked() {
    let r = Recurrence::every(100 * MS);
    let t = at(1_000) + Duration::from_nanos(7);
    assert_eq!(r.next_after(t), Some(t + 100 * MS));
    assert_eq!(r.period(), Some(100 * MS));
    assert_eq!(r.missed_runs(), MissedRuns::Burst);
    assert_eq!((r.max_runs(), r.start(), r.end()), (None, None, None));
}

#[test]
fn every_with_a_start_keeps_its_grid_and_counts_its_limit_from_the_start() {
    let start = at(1_000);
    let r = Recurrence::every(100 * MS).starting(start).limit(3);
    assert_eq!(r.next_after(at(0)), Some(start), "the first run is the start itself, as interval_at");
    assert_eq!(r.next_after(start - MS), Some(start));
    assert_eq!(r.next_after(start), Some(start + 100 * MS));
    assert_eq!(r.next_after(start + 150 * MS), Some(start + 200 * MS), "on the grid, not 100 ms after t");
    assert_eq!(r.next_after(start + 199 * MS), Some(start + 200 * MS));
    assert_eq!(r.next_after(start + 200 * MS), None, "three runs made: start, +100 ms, +200 ms");
    assert_eq!(runs(&r, at(0), at(2_000)), [start, start + 100 * MS, start + 200 * MS]);
}

#[test]
fn until_ends_the_series_and_a_run_at_the_end_is_made() {
    let start = at(1_000);
    let r = Recurrence::every(SEC).starting(start).until(start + 2 * SEC);
    assert_eq!(runs(&r, at(0), at(2_000)), [start, start + SEC, start + 2 * SEC]);
    let r = Recurrence::every(SEC).until(at(10));
    assert_eq!(r.next_after(at(9)), Some(at(10)));
    assert_eq!(r.next_after(at(9) + MS), None);
}

#[test]
fn bad_bounds_are_invalid_and_have_no_runs() {
    let why = invalid(Recurrence::every(Duration::ZERO).validate());
    assert!(why.contains("every(0s)"), "{why}");
    assert_eq!(Recurrence::every(Duration::ZERO).next_after(at(5)), None, "and never divides by zero");
    let why = invalid(Recurrence::every(SEC).limit(0).validate());
    assert!(why.contains("limit(0)"), "{why}");
    let why = invalid(Recurrence::every(SEC).starting(at(10)).until(at(5)).validate());
    assert!(why.contains("until") && why.contains("starting"), "{why}");
    assert_eq!(Recurrence::every(SEC).starting(at(10)).until(at(5)).next_after(at(0)), None);
    assert!(Recurrence::every(SEC).starting(at(10)).until(at(10)).validate().is_ok(), "one run, at the start");
}

#[test]
fn far_times_have_no_run_rather_than_a_panic() {
    // SystemTime holds some 2^63 seconds after the epoch (on Linux): the run after the first is
    // past that.
    let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
    let r = Recurrence::every(Duration::from_secs(u64::MAX / 2)).starting(far);
    assert_eq!(r.next_after(far - SEC), Some(far));
    assert_eq!(r.next_after(far), None);
    assert_eq!(Recurrence::every(Duration::MAX).next_after(at(1)), None);
}

#[test]
fn every_places_missed_runs_as_its_policy_says() {
    let due = at(100);
    // The run due at 100 s fires at 103.5 s: the runs at 101, 102 and 103 s were missed.
    let now = due + Duration::from_millis(3_500);
    let every = |missed| Recurrence::every(SEC).missed(missed);
    assert_eq!(every(MissedRuns::Burst).next_run(due, now, None), Some(due + SEC), "made up one by one");
    assert_eq!(every(MissedRuns::Delay).next_run(due, now, None), Some(now + SEC), "a period after the late run");
    assert_eq!(every(MissedRuns::Skip).next_run(due, now, None), Some(at(104)), "back on the grid");
    // Late by less than a period: nothing missed, the fixed rate kept under every policy.
    for missed in [MissedRuns::Burst, MissedRuns::Delay, MissedRuns::Skip] {
        assert_eq!(every(missed).next_run(due, due + 300 * MS, None), Some(due + SEC), "{missed:?}");
    }
    let ends = Recurrence::every(SEC).until(at(101));
    assert_eq!(ends.next_run(due, due, None), Some(at(101)));
    assert_eq!(ends.next_run(at(101), at(101), None), None);
}

/// A burst capped at `n` runs makes up the last `n` of the missed runs, none after the end.
#[test]
fn a_capped_burst_makes_up_the_last_runs() {
    let due = at(100);
    let burst = Recurrence::every(SEC).missed(MissedRuns::Burst);
    // The runs at 101 ..= 110 s were missed.
    let now = at(110) + 500 * MS;
    assert_eq!(burst.next_run(due, now, Some(3)), Some(at(108)), "the last three: 108, 109 and 110 s");
    assert_eq!(burst.next_run(due, now, Some(10)), Some(at(101)), "no more than the cap: every one");
    assert_eq!(burst.next_run(due, at(110), Some(3)), Some(at(108)), "a run due at now is missed");
    let ends = burst.clone().until(at(105));
    assert_eq!(ends.next_run(due, now, Some(3)), Some(at(103)), "the last three up to the end");
    assert_eq!(ends.next_run(at(105), now, Some(3)), None, "past the end");
    // A policy other than Burst has no burst to cap.
    assert_eq!(burst.clone().missed(MissedRuns::Skip).next_run(due, now, Some(3)), Some(at(111)));
}

#[test]
fn the_first_run_is_the_start_or_a_period_after_now() {
    let now = at(50);
    assert_eq!(Recurrence::every(SEC).first_due(now), Some(now + SEC));
    assert_eq!(Recurrence::every(SEC).starting(at(40)).first_due(now), Some(at(40)), "missed, fires at once");
    assert_eq!(Recurrence::every(SEC).starting(at(60)).first_due(now), Some(at(60)));
    assert_eq!(Recurrence::every(SEC).until(at(50)).first_due(now), None, "no run before the end");
}

#[cfg(feature = "cron")]
mod cron {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use chrono::{NaiveDate, TimeZone};
    use chrono_tz::Tz;
    use proptest::prelude::*;

    use super::{at, invalid, runs, MissedRuns, Recurrence, SEC};

    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    /// The instant of a wall-clock time in `zone` that exists once.
    fn local(zone: &str, (y, m, d): (i32, u32, u32), h: u32, min: u32) -> SystemTime {
        let zone: Tz = zone.parse().unwrap();
        let naive = NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_opt(h, min, 0).unwrap();
        let t = zone.from_local_datetime(&naive).single().unwrap_or_else(|| panic!("{naive} in {zone}"));
        UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap())
    }

    /// The instant of a UTC wall-clock time.
    fn utc(day: (i32, u32, u32), h: u32, min: u32) -> SystemTime {
        local("UTC", day, h, min)
    }

    fn cron(expression: &str, zone: &str) -> Recurrence {
        Recurrence::cron(expression).unwrap().in_tz(zone).unwrap()
    }

    /// A transition day: its zone, its date, the day after, its length in hours, and the hour
    /// whose wall-clock times are skipped (spring) or repeated (autumn).
    struct Day {
        zone: &'static str,
        date: (i32, u32, u32),
        next: (i32, u32, u32),
        hours: u64,
        changed_hour: u32,
    }

    const DAYS: [Day; 8] = [
        Day { zone: "Europe/Berlin", date: (2026, 3, 29), next: (2026, 3, 30), hours: 23, changed_hour: 2 },
        Day { zone: "Europe/Berlin", date: (2026, 10, 25), next: (2026, 10, 26), hours: 25, changed_hour: 2 },
        Day { zone: "Europe/Berlin", date: (2027, 3, 28), next: (2027, 3, 29), hours: 23, changed_hour: 2 },
        Day { zone: "Europe/Berlin", date: (2027, 10, 31), next: (2027, 11, 1), hours: 25, changed_hour: 2 },
        Day { zone: "America/New_York", date: (2026, 3, 8), next: (2026, 3, 9), hours: 23, changed_hour: 2 },
        Day { zone: "America/New_York", date: (2026, 11, 1), next: (2026, 11, 2), hours: 25, changed_hour: 1 },
        Day { zone: "America/New_York", date: (2027, 3, 14), next: (2027, 3, 15), hours: 23, changed_hour: 2 },
        Day { zone: "America/New_York", date: (2027, 11, 7), next: (2027, 11, 8), hours: 25, changed_hour: 1 },
    ];

    impl Day {
        fn start(&self) -> SystemTime {
            local(self.zone, self.date, 0, 0)
        }
        fn end(&self) -> SystemTime {
            local(self.zone, self.next, 0, 0)
        }
        /// The runs of `expression` in this day, midnight included.
        fn runs(&self, expression: &str) -> Vec<SystemTime> {
            runs(&cron(expression, self.zone), self.start() - SEC, self.end())
        }
    }

    #[test]
    fn the_transition_days_are_as_long_as_the_table_says() {
        for day in &DAYS {
            assert_eq!(
                day.end().duration_since(day.start()).unwrap(),
                HOUR * day.hours as u32,
                "{} {:?}",
                day.zone,
                day.date
            );
        }
    }

    #[test]
    fn a_fixed_time_in_a_gap_runs_once_at_the_first_instant_after_it() {
        for day in DAYS.iter().filter(|d| d.hours == 23) {
            let found = day.runs(&format!("30 {} * * *", day.changed_hour));
            let after_gap = local(day.zone, day.date, day.changed_hour + 1, 0);
            assert_eq!(found, [after_gap], "{} {:?}", day.zone, day.date);
            // The day before and the day after, at the time itself.
            let before = cron(&format!("30 {} * * *", day.changed_hour), day.zone);
            let next = local(day.zone, day.next, day.changed_hour, 30);
            assert_eq!(before.next_after(after_gap), Some(next), "{} {:?}", day.zone, day.date);
        }
        // Berlin's example of the docs: 02:30 on the spring day runs at 03:00 CEST, 01:00 UTC.
        assert_eq!(
            cron("30 2 * * *", "Europe/Berlin").next_after(utc((2026, 3, 29), 0, 0)),
            Some(utc((2026, 3, 29), 1, 0))
        );
        // Six fields, and a time whose seconds are in the gap too.
        let six = cron("15 30 2 * * *", "Europe/Berlin");
        assert_eq!(six.next_after(utc((2026, 3, 29), 0, 0)), Some(utc((2026, 3, 29), 1, 0)));
    }

    #[test]
    fn a_fixed_time_in_a_fold_runs_once_at_its_first_occurrence() {
        for day in DAYS.iter().filter(|d| d.hours == 25) {
            let found = day.runs(&format!("30 {} * * *", day.changed_hour));
            assert_eq!(found.len(), 1, "{} {:?}: {found:?}", day.zone, day.date);
            // The first occurrence is the one an hour before the second, still on summer time.
            let first = found[0];
            let zone: Tz = day.zone.parse().unwrap();
            let naive = NaiveDate::from_ymd_opt(day.date.0, day.date.1, day.date.2)
                .unwrap()
                .and_hms_opt(day.changed_hour, 30, 0)
                .unwrap();
            let earliest = zone.from_local_datetime(&naive).earliest().unwrap();
            assert_eq!(first, UNIX_EPOCH + Duration::from_secs(earliest.timestamp() as u64), "{}", day.zone);
        }
        assert_eq!(
            cron("30 2 * * *", "Europe/Berlin").next_after(utc((2026, 10, 25), 0, 0)),
            Some(utc((2026, 10, 25), 0, 30)),
            "02:30 CEST"
        );
        assert_eq!(
            cron("30 2 * * *", "Europe/Berlin").next_after(utc((2026, 10, 25), 0, 30)),
            Some(utc((2026, 10, 26), 1, 30)),
            "not 02:30 CET an hour later: the next day's 02:30 CET"
        );
    }

    #[test]
    fn an_interval_runs_at_every_real_instant_it_names() {
        for day in &DAYS {
            let quarters = day.runs("*/15 * * * *");
            assert_eq!(quarters.len() as u64, day.hours * 4, "{} {:?}", day.zone, day.date);
            let hourly = day.runs("0 */1 * * *");
            assert_eq!(hourly.len() as u64, day.hours, "{} {:?}", day.zone, day.date);
            // A run every 15 minutes of real time, across the transition too: none twice, none lost.
            for (runs, step) in [(&quarters, 15 * MINUTE), (&hourly, HOUR)] {
                assert_eq!(runs[0], day.start());
                for pair in runs.windows(2) {
                    assert_eq!(pair[1].duration_since(pair[0]).unwrap(), step, "{} {:?}", day.zone, day.date);
                }
            }
        }
    }

    #[test]
    fn an_interval_inside_the_changed_hour_follows_the_wall_clock() {
        for day in &DAYS {
            let found = day.runs(&format!("*/15 {} * * *", day.changed_hour));
            let expected = if day.hours == 23 { 0 } else { 8 };
            assert_eq!(found.len(), expected, "{} {:?}: {found:?}", day.zone, day.date);
        }
    }

    #[test]
    fn a_fixed_time_outside_the_changed_hour_runs_once_a_day() {
        for day in &DAYS {
            assert_eq!(day.runs("0 5 * * *"), [local(day.zone, day.date, 5, 0)], "{} {:?}", day.zone, day.date);
        }
    }

    #[test]
    fn a_cron_defaults_to_utc_and_the_in_process_burst() {
        let r = Recurrence::cron("0 3 * * *").unwrap();
        assert_eq!((r.zone(), r.expression(), r.period()), (Some("UTC"), Some("0 3 * * *"), None));
        assert_eq!(r.missed_runs(), MissedRuns::Burst);
        assert_eq!(r.clone().missed(MissedRuns::Skip).missed_runs(), MissedRuns::Skip);
        assert_eq!(r.next_after(utc((2026, 3, 29), 0, 0)), Some(utc((2026, 3, 29), 3, 0)));
        assert_eq!(r.clone().missed(MissedRuns::Burst).missed_runs(), MissedRuns::Burst);
        assert_eq!(r, Recurrence::cron("0 3 * * *").unwrap());
        assert_ne!(r, r.clone().in_tz("Europe/Berlin").unwrap());
    }

    #[test]
    fn six_fields_run_on_seconds_and_a_fraction_of_a_second_is_not_a_run() {
        let r = Recurrence::cron("*/1 * * * * *").unwrap();
        let t = at(1_000) + Duration::from_millis(500);
        assert_eq!(r.next_after(t), Some(at(1_001)));
        assert_eq!(r.next_after(at(1_001)), Some(at(1_002)));
        assert_eq!(Recurrence::cron("*/1 * * * * *").unwrap().starting(t).next_after(at(0)), Some(at(1_001)));
    }

    #[test]
    fn bad_expressions_and_zones_are_invalid_and_named() {
        for bad in ["", "0 3 * *", "0 3 * * * * *", "61 * * * *", "0 25 * * *", "0 3 32 * *", "0 3 * * MON-XYZ", "?!"] {
            let why = invalid(Recurrence::cron(bad));
            assert!(why.contains(&format!("{bad:?}")), "{why}");
        }
        let why = invalid(Recurrence::cron("0 3 * * *").unwrap().in_tz("Europe/Atlantis"));
        assert!(why.contains("\"Europe/Atlantis\"") && why.contains("IANA"), "{why}");
        let why = invalid(Recurrence::every(SEC).in_tz("Europe/Berlin"));
        assert!(why.contains("every") && why.contains("\"Europe/Berlin\""), "{why}");
    }

    #[test]
    fn an_expression_with_no_date_has_no_run() {
        let never = Recurrence::cron("0 0 30 2 *").unwrap();
        assert_eq!(never.next_after(at(0)), None);
        assert_eq!(never.first_due(at(0)), None);
    }

    #[test]
    fn a_limit_counts_cron_runs_from_the_start() {
        let start = utc((2026, 1, 1), 0, 0);
        let r = cron("0 3 * * *", "Europe/Berlin").starting(start).limit(2);
        let all = runs(&r, start - SEC, utc((2026, 2, 1), 0, 0));
        assert_eq!(all, [utc((2026, 1, 1), 2, 0), utc((2026, 1, 2), 2, 0)]);
        assert_eq!(r.next_after(utc((2026, 1, 1), 2, 0)), Some(utc((2026, 1, 2), 2, 0)));
        assert_eq!(r.next_after(utc((2026, 1, 2), 2, 0)), None);
        // Until: the run at the end is made, none after.
        let r = cron("0 3 * * *", "Europe/Berlin").until(utc((2026, 1, 2), 2, 0));
        assert_eq!(runs(&r, start, utc((2026, 2, 1), 0, 0)), [utc((2026, 1, 1), 2, 0), utc((2026, 1, 2), 2, 0)]);
    }

    #[test]
    fn cron_places_missed_runs_as_its_policy_says() {
        let r = cron("0 * * * *", "UTC");
        let due = utc((2026, 5, 1), 10, 0);
        let now = utc((2026, 5, 1), 13, 20);
        let skip = r.clone().missed(MissedRuns::Skip);
        assert_eq!(skip.next_run(due, now, None), Some(utc((2026, 5, 1), 14, 0)), "Skip: the next hour after now");
        assert_eq!(r.next_run(due, now, None), Some(utc((2026, 5, 1), 11, 0)), "in process, Burst by default");
        assert_eq!(r.clone().missed(MissedRuns::Delay).next_run(due, now, None), Some(utc((2026, 5, 1), 14, 0)));
        assert_eq!(r.clone().missed(MissedRuns::Burst).next_run(due, now, None), Some(utc((2026, 5, 1), 11, 0)));
        assert_eq!(r.next_run(due, due + SEC, None), Some(utc((2026, 5, 1), 11, 0)), "on time: the next hour");
        assert_eq!(r.first_due(due), Some(utc((2026, 5, 1), 11, 0)), "strictly after now");
        assert_eq!(r.clone().starting(due).first_due(now), Some(due), "at or after the start");
    }

    /// A calendar's capped burst walks its runs to the last `n` missed, none after the end.
    #[test]
    fn a_capped_burst_walks_a_calendar() {
        let r = cron("0 * * * *", "UTC").missed(MissedRuns::Burst);
        let due = utc((2026, 5, 1), 10, 0);
        // The runs at 11:00 ..= 20:00 were missed.
        let now = utc((2026, 5, 1), 20, 30);
        assert_eq!(r.next_run(due, now, Some(3)), Some(utc((2026, 5, 1), 18, 0)), "18, 19 and 20:00");
        assert_eq!(r.next_run(due, now, Some(10)), Some(utc((2026, 5, 1), 11, 0)), "every one");
        let ends = r.until(utc((2026, 5, 1), 15, 0));
        assert_eq!(ends.next_run(due, now, Some(3)), Some(utc((2026, 5, 1), 13, 0)), "up to the end");
    }

    /// Instants near each transition of the table (within four hours) and anywhere in 2026 and
    /// 2027, with a fraction of a second.
    fn instant() -> impl Strategy<Value = SystemTime> {
        let near = (0..DAYS.len(), 0u64..8 * 3600, 0u32..1_000_000_000).prop_map(|(i, s, n)| {
            let day = &DAYS[i];
            let middle = local(day.zone, day.date, 4, 0);
            middle - 4 * HOUR + Duration::new(s, n)
        });
        let anywhere =
            (1_767_225_600u64..1_830_297_600, 0u32..1_000_000_000).prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n));
        prop_oneof![3 => near, 1 => anywhere]
    }

    const EXPRESSIONS: [&str; 7] =
        ["*/15 * * * *", "0 */1 * * *", "30 2 * * *", "30 1 * * *", "*/15 2 * * *", "0 0 3 * * *", "*/7 * * * * *"];
    const ZONES: [&str; 3] = ["Europe/Berlin", "America/New_York", "UTC"];

    proptest! {
        /// `next_after(t)` is after `t`, never earlier for a later `t`, and skips no run: any
        /// time between `t` and its run has the same run next.
        #[test]
        fn next_after_moves_forward_and_skips_nothing(
            e in 0..EXPRESSIONS.len(),
            z in 0..ZONES.len(),
            t in instant(),
            step in 0u64..7_200_000,
            within in 0.0f64..1.0,
        ) {
            let r = cron(EXPRESSIONS[e], ZONES[z]);
            let run = r.next_after(t).expect("runs every day");
            prop_assert!(run > t);
            let later = t + Duration::from_millis(step);
            let later_run = r.next_after(later).unwrap();
            prop_assert!(later_run >= run, "{later:?} -> {later_run:?} before {t:?} -> {run:?}");
            let gap = run.duration_since(t).unwrap();
            let between = t + gap.mul_f64(within);
            if between < run {
                prop_assert_eq!(r.next_after(between), Some(run));
            }
        }
    }
}
