//! Limits by key prefix, kept with the wheel so that every node obeys the same ones: [`Limit`]
//! and the calls of [`DurableScheduler`] that set, clear and list them. The store keeps and
//! enforces them (`lua/includes/limits.lua`): every claim of every worker reads them.

use std::fmt;
use std::time::Duration;

use super::store::scripts::control;
use super::time::ceil_ms;
use super::DurableScheduler;
use crate::Error;

/// A limit on the handlers of the tasks whose keys start with a prefix, across every worker of
/// every node: at most so many handler starts in any window of a given length, at most so many
/// handlers running at once, or both ([`and`](Self::and)). Set it with
/// [`DurableScheduler::set_limit`].
///
/// # What it promises
/// - **Rate** (`Limit::rate(20, 1 s)`): the handler starts under the prefix are spaced evenly,
///   one every `per / starts` (and 2 % more: 51 ms for 20 a second), on one schedule that every
///   node shares in the store, so no window of the rate's length, anywhere in time, holds more
///   starts than the rate. No bursts: 200 tasks due at once start over about 10 s, 20 in each
///   second, which suits an API whose own quota counts in windows you cannot see. The 2 % is a
///   margin for the handler's own start, which comes a few ms after its start time (its
///   worker's wake-up): the handlers' clocks see the rate kept too. A claim hands out the starts
///   of the next 250 ms (at most a quarter of the lease) at once, each with its start time; the
///   worker holds such a task until then (it takes a handler's place meanwhile: with a rate of
///   20 a second, about 5 of them), so a rate of thousands a second costs a claim every 250 ms,
///   not a claim a start.
/// - **Running** (`Limit::running(1)`): no more handlers under the prefix hold a live lease at
///   once than the limit. A handler counts from its claim until its outcome is recorded, or
///   until its lease runs out (a node that died holds its room that long, no longer). An
///   outcome that frees room wakes an idle worker at once.
/// - A task held back by a limit waits, ready, at no cost to other tasks; it is not an attempt,
///   and it starts as soon as its limits let it, in due order among the tasks held (checked at
///   every claim; an idle worker claims again when the rate's next start comes near, and the
///   leader's tick looks too).
/// - **Lateness**: a task under a limit is late only from when its limits let it start (its
///   start time under a rate, the last outcome that freed room under a running limit), not from
///   its due time: the wait the limit imposed is not the wheel's lateness.
/// - A key under several prefixes obeys every limit over it.
/// - A limit set or changed takes effect at the next claim of every worker; cleared, its held
///   tasks go back to their places at once.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tokio_timewheel::durable::Limit;
///
/// let api = Limit::rate(20, Duration::from_secs(1)).and(Limit::running(5));
/// assert_eq!(api.rate_limit(), Some((20, Duration::from_secs(1))));
/// assert_eq!(api.running_limit(), Some(5));
/// assert_eq!(api.to_string(), "20 starts per 1s, 5 running");
/// assert_eq!(Limit::rate(20, Duration::from_secs(1)).spacing(), Some(Duration::from_millis(51)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    rate: Option<(u32, Duration)>,
    running: Option<u32>,
}

impl Limit {
    /// At most `starts` handler starts in any window of length `per`. A zero `starts` or `per`
    /// is refused by [`set_limit`](DurableScheduler::set_limit).
    pub fn rate(starts: u32, per: Duration) -> Limit {
        Limit { rate: Some((starts, per)), running: None }
    }

    /// At most `handlers` handlers running at once. Zero is refused by
    /// [`set_limit`](DurableScheduler::set_limit).
    pub fn running(handlers: u32) -> Limit {
        Limit { rate: None, running: Some(handlers) }
    }

    /// Both limits: `self`'s and `other`'s (where both have a part, `other`'s).
    #[must_use]
    pub fn and(self, other: Limit) -> Limit {
        Limit { rate: other.rate.or(self.rate), running: other.running.or(self.running) }
    }

    /// The rate part: starts per window.
    pub fn rate_limit(&self) -> Option<(u32, Duration)> {
        self.rate
    }

    /// The running part: handlers at once.
    pub fn running_limit(&self) -> Option<u32> {
        self.running
    }

    /// The time between two starts under the rate part: `per / starts` and 2 % (see [`Limit`]),
    /// to the microsecond.
    pub fn spacing(&self) -> Option<Duration> {
        let (starts, per) = self.rate?;
        let nanos = per.as_nanos() * 102 / 100 / u128::from(starts.max(1));
        Some(Duration::from_micros(u64::try_from(nanos / 1000).unwrap_or(u64::MAX)))
    }

    /// The limit as the store keeps it, `<rate>/<window ms>/<running>`, checked.
    pub(crate) fn text(&self) -> Result<String, Error> {
        let (rate, window_ms) = match self.rate {
            Some((0, _)) => {
                return Err(Error::invalid("a rate limit of 0 starts would never start a task: give at least 1"))
            }
            Some((_, per)) if per.is_zero() => {
                return Err(Error::invalid(
                    "a rate limit over a window of 0 means nothing: give a window of at least 1 ms",
                ))
            }
            Some((_, per)) if per > MAX_WINDOW => {
                return Err(Error::invalid(format!(
                    "the rate limit's window {per:?} is too long: at most {MAX_WINDOW:?}"
                )))
            }
            Some((starts, per)) => (starts, ceil_ms(per)),
            None => (0, 0),
        };
        let running = match self.running {
            Some(0) => return Err(Error::invalid("a running limit of 0 would never start a task: give at least 1")),
            Some(n) => n,
            None => 0,
        };
        Ok(format!("{rate}/{window_ms}/{running}"))
    }

    /// The limit the store's text `text` says, if it reads.
    pub(crate) fn from_text(text: &str) -> Option<Limit> {
        let mut parts = text.split('/').map(|p| p.parse::<u64>().ok());
        let (rate, window, running) = (parts.next()??, parts.next()??, parts.next()??);
        let rate = (rate > 0).then(|| (u32::try_from(rate).unwrap_or(u32::MAX), Duration::from_millis(window)));
        let running = (running > 0).then(|| u32::try_from(running).unwrap_or(u32::MAX));
        Some(Limit { rate, running })
    }
}

/// The longest window of a rate limit: a day.
const MAX_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

impl fmt::Display for Limit {
    /// `20 starts per 1s`, `5 running`, or both, joined by `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rate, self.running) {
            (Some((n, per)), Some(r)) => write!(f, "{n} starts per {per:?}, {r} running"),
            (Some((n, per)), None) => write!(f, "{n} starts per {per:?}"),
            (None, Some(r)) => write!(f, "{r} running"),
            (None, None) => f.write_str("no limit"),
        }
    }
}

/// Checks a limit's prefix: not empty, within the key length, and free of the bytes the store
/// uses to set its own fields apart.
fn check_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.is_empty() {
        return Err(Error::invalid(
            "a limit's prefix is empty: a limit on every key needs a prefix all your keys share, such as \"task:\"",
        ));
    }
    crate::error::check_key(prefix)?;
    if prefix.bytes().any(|b| b == 0) || prefix.as_bytes()[0] < 4 {
        return Err(Error::invalid("a limit's prefix may not hold a NUL byte, nor start with a byte below 4"));
    }
    Ok(())
}

impl DurableScheduler {
    /// Limits the handlers of the tasks whose keys start with `prefix`, on every node: see
    /// [`Limit`] for what it promises. Keys under no limit pay nothing measurable for it (see
    /// BENCHMARKS.md, D7 with a limit on another prefix). Replaces the prefix's limit if it had one. It is kept with
    /// the wheel, so it holds across restarts and for nodes that start later, and it takes
    /// effect at the next claim of every worker (tasks it held go when the next tick finds room).
    /// `timewheel limits`, `timewheel stats` and the dashboard show it.
    ///
    /// Returns whether the prefix had no limit before.
    ///
    /// # Examples
    /// ```no_run
    /// use std::time::Duration;
    /// use tokio_timewheel::durable::{DurableScheduler, Limit};
    ///
    /// # async fn run(timers: DurableScheduler) -> Result<(), tokio_timewheel::Error> {
    /// timers.set_limit("api:", Limit::rate(20, Duration::from_secs(1))).await?; // the API's quota
    /// timers.set_limit("report:", Limit::running(1)).await?; // never two reports at once
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty prefix (or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN)
    ///   bytes, or with a NUL byte), a rate of 0 starts or over a zero window (or one over a
    ///   day), a running limit of 0, or a wheel of more than one partition (each partition is a
    ///   store of its own, which no limit spans: use one partition for limited tasks);
    /// - [`Error::Redis`] if the store failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still set the limit.
    pub async fn set_limit(&self, prefix: impl AsRef<str>, limit: Limit) -> Result<bool, Error> {
        let prefix = prefix.as_ref();
        check_prefix(prefix)?;
        let text = limit.text()?;
        let part = self.limited_partition()?;
        control::set_limit(&self.wheel, &part.keys, prefix, &text).await
    }

    /// Clears the limit on `prefix`: its tasks start as fast as the workers take them, from the
    /// next claim on. Returns whether the prefix had a limit.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::DurableScheduler;
    /// # async fn run(timers: DurableScheduler) -> Result<(), tokio_timewheel::Error> {
    /// if timers.clear_limit("api:").await? {
    ///     println!("the API's limit is gone");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a prefix [`set_limit`](Self::set_limit) refuses; [`Error::Redis`] if
    /// the store failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still clear the limit.
    pub async fn clear_limit(&self, prefix: impl AsRef<str>) -> Result<bool, Error> {
        let prefix = prefix.as_ref();
        check_prefix(prefix)?;
        let part = self.limited_partition()?;
        control::clear_limit(&self.wheel, &part.keys, prefix).await
    }

    /// The limits set, by prefix, in the prefixes' order.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::DurableScheduler;
    /// # async fn run(timers: DurableScheduler) -> Result<(), tokio_timewheel::Error> {
    /// for (prefix, limit) in timers.limits().await? {
    ///     println!("{prefix}: {limit}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if the store failed.
    pub async fn limits(&self) -> Result<Vec<(String, Limit)>, Error> {
        let Some(part) = self.wheel.partitions.first().filter(|_| self.wheel.partitions.len() == 1) else {
            return Ok(Vec::new());
        };
        let listed = control::limits(&self.wheel, &part.keys).await?;
        Ok(listed.into_iter().filter_map(|(prefix, text)| Some((prefix, Limit::from_text(&text)?))).collect())
    }

    /// The one partition that limits live in.
    fn limited_partition(&self) -> Result<&crate::durable::store::client::Partition, Error> {
        match self.wheel.partitions.as_slice() {
            [part] => Ok(part),
            parts => Err(Error::invalid(format!(
                "this wheel has {} partitions, and a limit cannot span them (each is a store of its own): \
                 limits need a wheel of one partition",
                parts.len()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_read_back_as_written() {
        let both = Limit::rate(20, Duration::from_secs(1)).and(Limit::running(5));
        for limit in [Limit::rate(3, Duration::from_millis(1500)), Limit::running(1), both] {
            assert_eq!(Limit::from_text(&limit.text().unwrap()), Some(limit));
        }
        assert_eq!(both.text().unwrap(), "20/1000/5");
    }

    #[test]
    fn bad_limits_say_what_to_give() {
        for bad in [
            Limit::rate(0, Duration::from_secs(1)),
            Limit::rate(1, Duration::ZERO),
            Limit::rate(1, Duration::from_secs(2 * 24 * 3600)),
            Limit::running(0),
        ] {
            assert!(matches!(bad.text(), Err(Error::Invalid(_))), "{bad:?}");
        }
        assert!(matches!(check_prefix(""), Err(Error::Invalid(_))));
        assert!(matches!(check_prefix("a\0b"), Err(Error::Invalid(_))));
        assert!(check_prefix("api:").is_ok());
    }
}
