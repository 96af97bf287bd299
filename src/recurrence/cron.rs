//! A cron expression in an IANA time zone, behind the `cron` feature: the calendar half of a
//! [`Recurrence`](super::Recurrence).
//!
//! [croner](https://docs.rs/croner) parses the expression and walks the zone's wall clock to
//! its runs, with the daylight-saving rules of `Recurrence`'s docs (those of Vixie cron and of
//! the Open Cron Pattern Specification). chrono-tz compiles the IANA zone database into the
//! crate, so no run depends on the host's zone files. Every conversion between `SystemTime`
//! and the calendar is here, and each is checked: a time the calendar cannot hold has no run,
//! never a panic.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

use crate::Error;

/// A parsed cron expression and the zone its fields are read in (UTC unless told).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cron {
    /// The expression as it was given, for messages and for [`expression`](Self::expression).
    expression: Box<str>,
    pattern: croner::Cron,
    zone: Tz,
}

impl Cron {
    /// Parses five fields (minute, hour, day of month, month, day of week) or six (a second
    /// first), or a nickname such as `@daily`.
    pub fn parse(expression: &str) -> Result<Self, Error> {
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let pattern = parser.parse(expression).map_err(|e| {
            Error::invalid(format!(
                "cron expression {expression:?}: {e} (expected 5 fields, minute hour day-of-month month \
                 day-of-week, or 6 with a second first)"
            ))
        })?;
        Ok(Cron { expression: expression.into(), pattern, zone: Tz::UTC })
    }

    /// Reads the fields in the IANA zone `zone` (such as `Europe/Berlin`).
    pub fn in_zone(&mut self, zone: &str) -> Result<(), Error> {
        self.zone = Tz::from_str(zone).map_err(|_| {
            Error::invalid(format!(
                "time zone {zone:?} of cron expression {:?} is not an IANA zone name (such as \
                 \"Europe/Berlin\" or \"UTC\")",
                self.expression
            ))
        })?;
        Ok(())
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    pub fn zone(&self) -> &str {
        self.zone.name()
    }

    /// The first run strictly after `t`, or `None` if there is none the calendar can hold.
    pub fn after(&self, t: SystemTime) -> Option<SystemTime> {
        // Runs fall on whole seconds, so a run after `t` is a run after its second.
        let from = to_zoned(t, self.zone)?;
        let run = self.pattern.find_next_occurrence(&from, false).ok()?;
        let run = from_zoned(&run)?;
        debug_assert!(run > t, "the run after {t:?} is {run:?}");
        Some(run)
    }

    /// The first run at `t` or after it.
    pub fn at_or_after(&self, t: SystemTime) -> Option<SystemTime> {
        let from = to_zoned(t, self.zone)?;
        // An inclusive search from a time with a fraction of a second could name that second,
        // which is before `t`: then the run after it is the one.
        let run = from_zoned(&self.pattern.find_next_occurrence(&from, true).ok()?)?;
        if run >= t {
            Some(run)
        } else {
            self.after(t)
        }
    }
}

/// `t` in `zone`, truncated to its second, or `None` if the calendar cannot hold it.
fn to_zoned(t: SystemTime, zone: Tz) -> Option<DateTime<Tz>> {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).ok()?,
        // Before 1970: round down to the second, as after it.
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).ok()?;
            -whole - i64::from(before.subsec_nanos() > 0)
        }
    };
    Some(DateTime::<Utc>::from_timestamp(secs, 0)?.with_timezone(&zone))
}

fn from_zoned(t: &DateTime<Tz>) -> Option<SystemTime> {
    let secs = t.timestamp();
    match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH.checked_add(Duration::from_secs(secs)),
        Err(_) => UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs())),
    }
}
