//! The service's counters, kept by the shards and read through the handle.

/// A snapshot of the service's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timers accepted and not yet ended.
    pub pending: usize,
    /// Timers accepted since the start.
    pub scheduled: u64,
    /// Runs started: each run of a repeating timer counts, and so does a keyed sleep waking.
    pub fired: u64,
    /// Timers ended by a cancel.
    pub cancelled: u64,
    /// Timers ended because the service stopped.
    pub stopped: u64,
}

impl Stats {
    /// Adds another shard's counters to these.
    pub(crate) fn add(&mut self, other: &Stats) {
        self.pending += other.pending;
        self.scheduled += other.scheduled;
        self.fired += other.fired;
        self.cancelled += other.cancelled;
        self.stopped += other.stopped;
    }
}
