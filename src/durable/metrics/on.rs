//! The durable wheel's metrics through the `metrics` facade.

use std::time::Duration;

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit,
};

use crate::durable::DurableStats;

/// The names, written once (the crate's `metrics` module lists them for readers).
const SCHEDULED: &str = "tokio_timewheel_durable_scheduled_total";
const FIRED: &str = "tokio_timewheel_durable_fired_total";
const CANCELLED: &str = "tokio_timewheel_durable_cancelled_total";
const RETRIED: &str = "tokio_timewheel_durable_retried_total";
const DEAD: &str = "tokio_timewheel_durable_dead_total";
const SNOOZED: &str = "tokio_timewheel_durable_snoozed_total";
const TASKS: &str = "tokio_timewheel_durable_tasks";
const CURSOR_LAG: &str = "tokio_timewheel_durable_cursor_lag_ticks";
const LATENESS: &str = "tokio_timewheel_durable_lateness_seconds";
const ACKED: &str = "tokio_timewheel_durable_acked_total";
const HANDLER: &str = "tokio_timewheel_durable_handler_seconds";

/// A durable wheel's metrics, registered once at `connect`, one set per partition.
pub(crate) struct WheelMetrics {
    /// Never empty: one per partition.
    partitions: Vec<PartitionMetrics>,
}

impl WheelMetrics {
    /// Registers the metrics of the durable wheel `wheel` of `partitions` partitions.
    pub(crate) fn new(wheel: &str, partitions: usize) -> Self {
        describe_counter!(SCHEDULED, Unit::Count, "Tasks this process scheduled.");
        describe_counter!(
            FIRED,
            Unit::Count,
            "Deliveries this process's workers claimed and handed to the handler (each retry counts)."
        );
        describe_counter!(CANCELLED, Unit::Count, "Tasks this process cancelled.");
        describe_counter!(RETRIED, Unit::Count, "Failed deliveries of this process's workers scheduled again.");
        describe_counter!(DEAD, Unit::Count, "Tasks this process's workers sent to the dead letters.");
        describe_counter!(SNOOZED, Unit::Count, "Runs this process's handlers ended by snoozing their task.");
        describe_gauge!(TASKS, Unit::Count, "The wheel's tasks by state (waiting, ready, running, dead).");
        describe_gauge!(CURSOR_LAG, Unit::Count, "How many ticks the cursor is behind Redis's clock.");
        describe_histogram!(
            LATENESS,
            Unit::Seconds,
            "How late this process's workers claimed deliveries, on Redis's clock."
        );
        describe_counter!(
            ACKED,
            Unit::Count,
            "Deliveries whose handler succeeded in this process's workers, sent to be acknowledged."
        );
        describe_histogram!(HANDLER, Unit::Seconds, "How long this process's handlers ran, each delivery's run.");
        let partitions = (0..partitions.max(1)).map(|p| PartitionMetrics::new(wheel, p)).collect();
        WheelMetrics { partitions }
    }

    /// The metrics of partition `index` (of the first, for an index out of range).
    pub(crate) fn partition(&self, index: usize) -> &PartitionMetrics {
        self.partitions.get(index).unwrap_or(&self.partitions[0])
    }
}

/// One partition's metrics.
pub(crate) struct PartitionMetrics {
    scheduled: Counter,
    fired: Counter,
    cancelled: Counter,
    retried: Counter,
    dead: Counter,
    snoozed: Counter,
    acked: Counter,
    handler: Histogram,
    /// `waiting`, `ready`, `running`, `dead`.
    tasks: [Gauge; 4],
    cursor_lag: Gauge,
    lateness: Histogram,
}

impl PartitionMetrics {
    fn new(wheel: &str, partition: usize) -> Self {
        let labels = [("wheel", wheel.to_owned()), ("partition", partition.to_string())];
        let state = |state: &'static str| {
            let [wheel, partition] = labels.clone();
            gauge!(TASKS, &[wheel, partition, ("state", state.to_owned())])
        };
        PartitionMetrics {
            scheduled: counter!(SCHEDULED, &labels),
            fired: counter!(FIRED, &labels),
            cancelled: counter!(CANCELLED, &labels),
            retried: counter!(RETRIED, &labels),
            dead: counter!(DEAD, &labels),
            snoozed: counter!(SNOOZED, &labels),
            acked: counter!(ACKED, &labels),
            handler: histogram!(HANDLER, &labels),
            tasks: [state("waiting"), state("ready"), state("running"), state("dead")],
            cursor_lag: gauge!(CURSOR_LAG, &labels),
            lateness: histogram!(LATENESS, &labels),
        }
    }

    pub(crate) fn scheduled(&self, tasks: u64) {
        self.scheduled.increment(tasks);
    }

    pub(crate) fn cancelled(&self, tasks: u64) {
        self.cancelled.increment(tasks);
    }

    /// One delivery claimed, `late` after its due time.
    pub(crate) fn fired(&self, late: Duration) {
        self.fired.increment(1);
        self.lateness.record(late.as_secs_f64());
    }

    /// One handler's run ended after `run`, successfully when `ok`.
    pub(crate) fn handled(&self, run: Duration, ok: bool) {
        self.handler.record(run.as_secs_f64());
        if ok {
            self.acked.increment(1);
        }
    }

    pub(crate) fn retried(&self) {
        self.retried.increment(1);
    }

    pub(crate) fn dead(&self) {
        self.dead.increment(1);
    }

    pub(crate) fn snoozed(&self) {
        self.snoozed.increment(1);
    }

    /// Publishes the partition's gauges as `stats.lua` read them.
    pub(crate) fn gauges(&self, stats: &DurableStats) {
        let [waiting, ready, running, dead] = &self.tasks;
        waiting.set(stats.waiting as f64);
        ready.set(stats.ready as f64);
        running.set(stats.in_flight as f64);
        dead.set(stats.dead as f64);
        self.cursor_lag.set(stats.cursor_lag_ticks as f64);
    }
}
