//! How late timers fire, in both modes: a fixed-size histogram that the in-process actor and the
//! durable workers fill, and the recent window each keeps.

use std::time::Duration;

use tokio::time::Instant;

/// Exact buckets below this many microseconds, then eight per power of two.
const LINEAR: u64 = 16;
/// Sub-buckets per power of two: about 12 % resolution.
const SUB_BITS: u32 = 3;
/// Covers up to 2^40 us (12.7 days); anything later lands in the last bucket.
const TOP_EXP: u32 = 40;
const BUCKETS: usize = LINEAR as usize + (((TOP_EXP - LINEAR.trailing_zeros() + 1) as usize) << SUB_BITS);

/// A log-linear histogram of lateness in microseconds: recording is a few arithmetic operations
/// and one increment, and it never allocates.
#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    max_us: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: Box::new([0; BUCKETS]), count: 0, max_us: 0 }
    }
}

fn bucket(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let exp = (63 - us.leading_zeros()).min(TOP_EXP);
    let sub = if exp == TOP_EXP && us >> TOP_EXP > 1 {
        (1 << SUB_BITS) - 1
    } else {
        (us >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1)
    };
    LINEAR as usize + (((exp - LINEAR.trailing_zeros()) as usize) << SUB_BITS) + sub as usize
}

/// The largest value in bucket `b`: quantiles are reported as upper bounds.
fn upper(b: usize) -> u64 {
    if b < LINEAR as usize {
        return b as u64;
    }
    let b = b - LINEAR as usize;
    let exp = (b >> SUB_BITS) as u32 + LINEAR.trailing_zeros();
    let sub = (b & ((1 << SUB_BITS) - 1)) as u64;
    ((1u64 << exp) + ((sub + 1) << (exp - SUB_BITS))) - 1
}

impl Histogram {
    pub fn record(&mut self, late: Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket(us)] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.max_us = self.max_us.max(other.max_us);
    }

    pub fn clear(&mut self) {
        if self.count > 0 {
            self.counts.fill(0);
            self.count = 0;
            self.max_us = 0;
        }
    }

    /// The value at quantile `q` (0..=1), as the upper bound of its bucket (never above the max).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Duration::from_micros(upper(b).min(self.max_us));
            }
        }
        Duration::from_micros(self.max_us)
    }

    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
    }

    #[cfg(feature = "metrics")]
    /// The buckets that hold a value, in order: each bucket's upper bound and how many values
    /// it holds.
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        self.counts.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(b, &n)| (Duration::from_micros(upper(b)), n))
    }
}

/// How late timers fired over a recent window: between [`LATENESS_WINDOW`] and twice that,
/// ending now. Read with [`Scheduler::lateness`](crate::Scheduler::lateness).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lateness {
    /// Firings measured: every run of every timer, keyed sleeps included.
    pub count: u64,
    /// Half of the firings were at most this late (upper bound of its bucket, about 12 % wide).
    pub p50: Duration,
    /// 99 % of the firings were at most this late.
    pub p99: Duration,
    /// The latest firing.
    pub max: Duration,
}

/// The length of one window of [`Lateness`]: the figures cover the current window and the one
/// before it.
pub const LATENESS_WINDOW: Duration = Duration::from_secs(10);

/// The current window and the one before, shared by the actor (which records) and the handles
/// (which read).
#[derive(Default)]
pub(crate) struct Recent {
    current: Histogram,
    previous: Histogram,
    started: Option<Instant>,
}

impl Recent {
    /// Adds what one advance measured, moving to a new window when the current one is over.
    pub fn add(&mut self, advance: &Histogram, now: Instant) {
        self.rotate(now);
        self.current.merge(advance);
    }

    /// Adds one measure, moving to a new window when the current one is over.
    #[cfg(feature = "redis")]
    pub fn record(&mut self, late: Duration, now: Instant) {
        self.rotate(now);
        self.current.record(late);
    }

    /// Moves to a new window when the current one is over (and forgets the previous one when it
    /// is two windows old): so a read after a quiet spell does not report what is long gone.
    pub fn rotate(&mut self, now: Instant) {
        let started = *self.started.get_or_insert(now);
        if now.saturating_duration_since(started) >= LATENESS_WINDOW {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
            // A window with nothing in it is not worth keeping as "previous".
            if now.saturating_duration_since(started) >= 2 * LATENESS_WINDOW {
                self.previous.clear();
            }
            self.started = Some(now);
        }
    }

    pub fn read(&self) -> Lateness {
        let both = self.histogram();
        Lateness { count: both.count(), p50: both.quantile(0.5), p99: both.quantile(0.99), max: both.max() }
    }

    /// Both windows in one histogram.
    pub fn histogram(&self) -> Histogram {
        let mut both = self.previous.clone();
        both.merge(&self.current);
        both
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_bound_holds_it() {
        let mut previous = 0;
        for us in (0..5000).chain([1 << 20, (1 << 20) + 1, 123_456_789, 1 << 40, u64::MAX]) {
            let b = bucket(us);
            assert!(b < BUCKETS, "{us} -> {b}");
            assert!(b >= previous || us == 0, "buckets grow with the value");
            previous = b;
            if us < 1 << 41 {
                assert!(upper(b) >= us, "{us} in bucket {b} with upper bound {}", upper(b));
                assert!(upper(b) <= us + us / 8 + 1, "{us}: bound {} within 12.5 %", upper(b));
            }
        }
    }

    #[test]
    fn quantiles_of_a_known_spread() {
        let mut h = Histogram::default();
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).as_micros() as f64;
        assert!((50_000.0..=50_000.0 * 1.125).contains(&p50), "p50 {p50}");
        let p99 = h.quantile(0.99).as_micros() as f64;
        assert!((99_000.0..=100_000.0).contains(&p99), "p99 {p99}");
        assert_eq!(h.max(), Duration::from_millis(100));
        assert_eq!(h.count(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_forgets_what_is_two_windows_old() {
        let mut recent = Recent::default();
        let mut late = Histogram::default();
        late.record(Duration::from_millis(500));
        recent.add(&late, Instant::now());
        assert_eq!(recent.read().max, Duration::from_millis(500));
        tokio::time::advance(LATENESS_WINDOW).await;
        recent.add(&Histogram::default(), Instant::now());
        assert_eq!(recent.read().count, 1, "the previous window is still reported");
        tokio::time::advance(LATENESS_WINDOW).await;
        recent.add(&Histogram::default(), Instant::now());
        assert_eq!(recent.read(), Lateness::default(), "two windows on, it is gone");
    }
}
