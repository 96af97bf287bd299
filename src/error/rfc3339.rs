//! Instants as RFC 3339 text in UTC (`2026-12-07T08:11:18.250Z`), for messages: a `SystemTime`'s
//! `Debug` prints `SystemTime { tv_sec: .., tv_nsec: .. }`, which no reader can use.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as RFC 3339 in UTC, to the millisecond: `2026-12-07T08:11:18.250Z` (before 1970, or after
/// the year 9999, the nearest of those two years' ends).
pub(crate) struct Rfc3339(pub(crate) SystemTime);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 9999-12-31T23:59:59.999Z
        const LAST_MS: u64 = 253_402_300_799_999;
        let ms = self.0.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis().min(u128::from(LAST_MS));
        let ms = ms as u64;
        let (days, ms_of_day) = (ms / 86_400_000, ms % 86_400_000);
        let (y, m, d) = civil_from_days(days);
        let (h, min, s, milli) =
            (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000);
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{milli:03}Z")
    }
}

/// The proleptic Gregorian date of the day `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> String {
        Rfc3339(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    }

    #[test]
    fn known_instants_print_as_rfc_3339() {
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_631_078_250), "2026-12-07T08:11:18.250Z");
        assert_eq!(at(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(at(u64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(Rfc3339(UNIX_EPOCH - Duration::from_secs(1)).to_string(), "1970-01-01T00:00:00.000Z");
    }

    /// Every day from 1970 to 2400 follows the one before it: the month and day roll over as the
    /// calendar says (leap years by the 4/100/400 rule).
    #[test]
    fn days_follow_the_gregorian_calendar() {
        let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        let month_len = |y: u64, m: u64| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut expected = (1970, 1, 1);
        for days in 0..157_000 {
            assert_eq!(civil_from_days(days), expected, "day {days}");
            let (y, m, d) = expected;
            expected = if d < month_len(y, m) {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
        }
    }
}
