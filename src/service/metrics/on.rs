//! The in-process service's metrics through the `metrics` facade.

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit,
};

use crate::lateness;
use crate::Stats;

/// The names, written once (the crate's `metrics` module lists them for readers).
const SCHEDULED: &str = "tokio_timewheel_scheduled_total";
const FIRED: &str = "tokio_timewheel_fired_total";
const CANCELLED: &str = "tokio_timewheel_cancelled_total";
const STOPPED: &str = "tokio_timewheel_stopped_total";
const PENDING: &str = "tokio_timewheel_pending";
const LATENESS: &str = "tokio_timewheel_lateness_seconds";

/// The in-process service's metrics, registered once when it starts.
pub(crate) struct ServiceMetrics {
    scheduled: Counter,
    fired: Counter,
    cancelled: Counter,
    stopped: Counter,
    pending: Gauge,
    lateness: Histogram,
}

impl ServiceMetrics {
    /// Registers the metrics of the scheduler `wheel` with the recorder installed now.
    pub(crate) fn new(wheel: &str) -> Self {
        describe_counter!(SCHEDULED, Unit::Count, "Timers accepted.");
        describe_counter!(FIRED, Unit::Count, "Runs of timers started (each run of a repeating timer counts).");
        describe_counter!(CANCELLED, Unit::Count, "Timers ended by a cancel.");
        describe_counter!(STOPPED, Unit::Count, "Timers ended because the service stopped.");
        describe_gauge!(PENDING, Unit::Count, "Timers accepted and not yet ended.");
        describe_histogram!(LATENESS, Unit::Seconds, "How late timers fired, from the start of their deadline tick.");
        let labels = [("wheel", wheel.to_owned())];
        ServiceMetrics {
            scheduled: counter!(SCHEDULED, &labels),
            fired: counter!(FIRED, &labels),
            cancelled: counter!(CANCELLED, &labels),
            stopped: counter!(STOPPED, &labels),
            pending: gauge!(PENDING, &labels),
            lateness: histogram!(LATENESS, &labels),
        }
    }

    /// Publishes the service's counters (they only grow, so each is set to its total).
    pub(crate) fn publish(&self, stats: &Stats) {
        self.scheduled.absolute(stats.scheduled);
        self.fired.absolute(stats.fired);
        self.cancelled.absolute(stats.cancelled);
        self.stopped.absolute(stats.stopped);
        self.pending.set(stats.pending as f64);
    }

    /// Records how late the timers of one advance fired, each at its bucket's upper bound.
    pub(crate) fn lateness(&self, late: &lateness::Histogram) {
        for (upper, count) in late.buckets() {
            self.lateness.record_many(upper.as_secs_f64(), usize::try_from(count).unwrap_or(usize::MAX));
        }
    }
}
