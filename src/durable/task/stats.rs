//! What `stats` and `figures` report: `DurableStats`, and `Figures` with its `MinuteCounts`.

use std::time::{Duration, SystemTime};

/// A snapshot of a durable wheel, read from Redis in one call per partition.
///
/// The gauges (`pending` to `cursor_lag_ticks`) are exact at the moment of the call; the
/// counters (`scheduled` to `cancelled`) count since the wheel was first used and are kept
/// by every node together.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurableStats {
    /// Tasks scheduled and not yet acknowledged, cancelled or dead: `waiting + ready + in_flight`.
    pub pending: usize,
    /// Tasks not yet due (or waiting out a retry backoff).
    pub waiting: usize,
    /// Due tasks waiting for a worker.
    pub ready: usize,
    /// Tasks claimed by a worker and not yet acknowledged.
    pub in_flight: usize,
    /// Tasks in the dead letters.
    pub dead: usize,
    /// How many ticks the cursor is behind the store's clock: 0 or 1 while a leader ticks;
    /// larger when no worker runs or while the cursor catches up. On `sqlite::memory:`, whose
    /// leader ticks only when a tick has work, it grows while nothing is due and says nothing.
    pub cursor_lag_ticks: u64,
    /// Tasks accepted by `schedule` and its kin.
    pub scheduled: u64,
    /// Deliveries to handlers (each retry counts).
    pub handed_out: u64,
    /// Deliveries acknowledged.
    pub acked: u64,
    /// Deliveries that failed and were scheduled again.
    pub retried: u64,
    /// Tasks moved to the dead letters.
    pub dead_lettered: u64,
    /// Tasks cancelled by `cancel` and `cancel_many`, and running tasks that ended as cancelled
    /// after `cancel_running`.
    pub cancelled: u64,
    /// Whether the wheel is paused (for a partitioned wheel: any of its partitions), by
    /// [`pause`](crate::durable::DurableScheduler::pause): workers claim nothing new, while the
    /// leader ticks and tasks fall due and wait, ready.
    pub paused: bool,
}

impl DurableStats {
    /// Adds a partition's figures: sums, and the largest cursor lag.
    pub(crate) fn add(&mut self, part: &DurableStats) {
        self.pending += part.pending;
        self.waiting += part.waiting;
        self.ready += part.ready;
        self.in_flight += part.in_flight;
        self.dead += part.dead;
        self.cursor_lag_ticks = self.cursor_lag_ticks.max(part.cursor_lag_ticks);
        self.scheduled += part.scheduled;
        self.handed_out += part.handed_out;
        self.acked += part.acked;
        self.retried += part.retried;
        self.dead_lettered += part.dead_lettered;
        self.cancelled += part.cancelled;
        self.paused |= part.paused;
    }
}

/// The wheel-wide figures of the last minutes, as
/// [`figures`](crate::durable::DurableScheduler::figures) read them from Redis: what every node's
/// workers did, whichever process asks.
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub(crate) minutes: Vec<MinuteCounts>,
    pub(crate) lateness: Vec<(Duration, u64)>,
}

impl Figures {
    /// One entry a minute, oldest first, the current (unfinished) minute last; minutes in which
    /// nothing happened count zeros.
    pub fn minutes(&self) -> &[MinuteCounts] {
        &self.minutes
    }

    /// How late deliveries were claimed over those minutes, after their due time on Redis's
    /// clock: `(bound, count)` buckets in rising order, each counting the deliveries later than
    /// the previous bound and no later than this one (under 1 ms, under 2 ms, 4 ms, ... a bucket
    /// an octave, the last open-ended, given as `Duration::MAX`). Empty buckets are left out.
    pub fn lateness(&self) -> &[(Duration, u64)] {
        &self.lateness
    }

    /// The upper bound of the bucket that holds the `q` quantile of the lateness (`q` from 0 to
    /// 1), within a factor of two; `None` when nothing was claimed.
    pub fn lateness_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.lateness.iter().map(|&(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        self.lateness
            .iter()
            .find(|&&(_, n)| {
                seen += n;
                seen >= rank
            })
            .map(|&(bound, _)| bound)
    }
}

/// What the wheel's workers did in one minute of Redis's clock, all nodes together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinuteCounts {
    /// When the minute began.
    pub start: SystemTime,
    /// Deliveries handed to workers (claimed).
    pub handed_out: u64,
    /// Deliveries acknowledged (handlers that succeeded).
    pub acked: u64,
    /// Deliveries that failed: a handler's error, panic or timeout, or a lease that ran out
    /// (each retried or sent to the dead letters).
    pub failed: u64,
    /// Tasks sent to the dead letters.
    pub dead: u64,
}
