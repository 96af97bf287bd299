//! Metrics of both modes through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`): counters, gauges and the lateness histogram, for any exporter (Prometheus, StatsD,
//! OpenTelemetry, ...) that the application installs.
//!
//! Install the exporter's recorder before starting a [`Scheduler`](crate::Scheduler) or
//! connecting a [`DurableScheduler`](crate::durable::DurableScheduler): each registers its
//! metrics once, when it starts, with the recorder installed then (none installed: nothing is
//! recorded). Without the feature nothing of this is compiled.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tokio_timewheel::Error> {
//! // First the recorder (here none: an application installs its exporter's), then the services.
//! let timer = tokio_timewheel::Scheduler::builder().name("sessions").start()?;
//! timer.schedule("session-1", std::time::Duration::from_secs(30), |_key| async {}).await?;
//! // `stats()` publishes the counters and gauges at once; they are also published every second.
//! let _ = timer.stats();
//! # Ok(()) }
//! ```
//!
//! # The metrics
//! Names follow Prometheus's conventions: counters end in `_total`, times are in seconds. Every
//! metric carries the label `wheel`: the in-process scheduler's name ([`Builder::name`], by
//! default `default`) or the durable wheel's. The durable mode's also carry `partition` (`0` for
//! a wheel of one partition; see
//! [`DurableBuilder::partitions`](crate::durable::DurableBuilder::partitions)).
//!
//! The in-process scheduler ([`Scheduler`](crate::Scheduler)):
//!
//! | metric | type | labels | what it counts |
//! |---|---|---|---|
//! | `tokio_timewheel_scheduled_total` | counter | `wheel` | timers accepted |
//! | `tokio_timewheel_fired_total` | counter | `wheel` | runs started: each run of a repeating timer, and each keyed sleep that woke |
//! | `tokio_timewheel_cancelled_total` | counter | `wheel` | timers ended by a cancel |
//! | `tokio_timewheel_stopped_total` | counter | `wheel` | timers ended because the service stopped |
//! | `tokio_timewheel_pending` | gauge | `wheel` | timers accepted and not yet ended |
//! | `tokio_timewheel_lateness_seconds` | histogram | `wheel` | how late each run fired, from the start of its deadline tick |
//!
//! The counters and the gauge are the service's [`Stats`](crate::Stats), published every second
//! by a task of the service's own (and by each call of
//! [`Scheduler::stats`](crate::Scheduler::stats)), so they are at most a second old; the
//! lateness is recorded as the timers fire. On a paused Tokio clock (a test's `start_paused`)
//! the task stops at the first jump, and only `stats` publishes.
//!
//! The durable mode ([`DurableScheduler`](crate::durable::DurableScheduler)):
//!
//! | metric | type | labels | what it counts |
//! |---|---|---|---|
//! | `tokio_timewheel_durable_scheduled_total` | counter | `wheel`, `partition` | tasks this process scheduled |
//! | `tokio_timewheel_durable_fired_total` | counter | `wheel`, `partition` | deliveries this process's workers claimed and handed to the handler (each retry counts) |
//! | `tokio_timewheel_durable_cancelled_total` | counter | `wheel`, `partition` | tasks this process cancelled |
//! | `tokio_timewheel_durable_retried_total` | counter | `wheel`, `partition` | failed deliveries of this process's workers that were scheduled again |
//! | `tokio_timewheel_durable_dead_total` | counter | `wheel`, `partition` | tasks this process's workers sent to the dead letters |
//! | `tokio_timewheel_durable_tasks` | gauge | `wheel`, `partition`, `state` | the wheel's tasks by `state`: `waiting`, `ready`, `running`, `dead` |
//! | `tokio_timewheel_durable_cursor_lag_ticks` | gauge | `wheel`, `partition` | how many ticks the cursor is behind Redis's clock |
//! | `tokio_timewheel_durable_lateness_seconds` | histogram | `wheel`, `partition` | how late this process's workers claimed each delivery: claim time minus due time, both on Redis's clock |
//!
//! The counters and the lateness count what this process did, so a sum over the processes is
//! the wheel's whole. The gauges are the whole wheel's, as
//! [`DurableScheduler::stats`](crate::durable::DurableScheduler::stats) reads them: every
//! [`Worker`](crate::durable::Worker) reads them every 5 s (one script call per partition) and
//! each call of `stats` publishes them too, so every process with a worker reports the same
//! figures: aggregate them with `max`, not `sum`. A task whose last lease ran out goes to the
//! dead letters by the leader's tick rather than a worker's failure report; it shows in the
//! `dead` gauge, not in `tokio_timewheel_durable_dead_total`.
//!
//! [`Builder::name`]: crate::Builder::name

/// Whether metrics are recorded: the loops that only publish them are not started otherwise.
#[allow(dead_code)] // Read only where a loop publishes.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// The names, written once (the tables above list them for readers).
#[cfg(feature = "metrics")]
#[allow(dead_code)] // The durable ones need the `redis` feature too.
mod names {
    pub(super) const SCHEDULED: &str = "tokio_timewheel_scheduled_total";
    pub(super) const FIRED: &str = "tokio_timewheel_fired_total";
    pub(super) const CANCELLED: &str = "tokio_timewheel_cancelled_total";
    pub(super) const STOPPED: &str = "tokio_timewheel_stopped_total";
    pub(super) const PENDING: &str = "tokio_timewheel_pending";
    pub(super) const LATENESS: &str = "tokio_timewheel_lateness_seconds";

    pub(super) const D_SCHEDULED: &str = "tokio_timewheel_durable_scheduled_total";
    pub(super) const D_FIRED: &str = "tokio_timewheel_durable_fired_total";
    pub(super) const D_CANCELLED: &str = "tokio_timewheel_durable_cancelled_total";
    pub(super) const D_RETRIED: &str = "tokio_timewheel_durable_retried_total";
    pub(super) const D_DEAD: &str = "tokio_timewheel_durable_dead_total";
    pub(super) const D_TASKS: &str = "tokio_timewheel_durable_tasks";
    pub(super) const D_CURSOR_LAG: &str = "tokio_timewheel_durable_cursor_lag_ticks";
    pub(super) const D_LATENESS: &str = "tokio_timewheel_durable_lateness_seconds";
}

#[cfg(feature = "metrics")]
pub(crate) use on::ServiceMetrics;
#[cfg(all(feature = "metrics", feature = "redis"))]
pub(crate) use on::WheelMetrics;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::ServiceMetrics;
#[cfg(all(not(feature = "metrics"), feature = "redis"))]
pub(crate) use off::WheelMetrics;

#[cfg(feature = "metrics")]
mod on {
    #[cfg(feature = "redis")]
    use std::time::Duration;

    use ::metrics::{
        counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram,
        Unit,
    };

    use super::names::*;
    use crate::service::lateness;
    use crate::Stats;

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
            describe_histogram!(
                LATENESS,
                Unit::Seconds,
                "How late timers fired, from the start of their deadline tick."
            );
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

    /// A durable wheel's metrics, registered once at `connect`, one set per partition.
    #[cfg(feature = "redis")]
    pub(crate) struct WheelMetrics {
        /// Never empty: one per partition.
        partitions: Vec<PartitionMetrics>,
    }

    #[cfg(feature = "redis")]
    impl WheelMetrics {
        /// Registers the metrics of the durable wheel `wheel` of `partitions` partitions.
        pub(crate) fn new(wheel: &str, partitions: usize) -> Self {
            describe_counter!(D_SCHEDULED, Unit::Count, "Tasks this process scheduled.");
            describe_counter!(
                D_FIRED,
                Unit::Count,
                "Deliveries this process's workers claimed and handed to the handler (each retry counts)."
            );
            describe_counter!(D_CANCELLED, Unit::Count, "Tasks this process cancelled.");
            describe_counter!(D_RETRIED, Unit::Count, "Failed deliveries of this process's workers scheduled again.");
            describe_counter!(D_DEAD, Unit::Count, "Tasks this process's workers sent to the dead letters.");
            describe_gauge!(D_TASKS, Unit::Count, "The wheel's tasks by state (waiting, ready, running, dead).");
            describe_gauge!(D_CURSOR_LAG, Unit::Count, "How many ticks the cursor is behind Redis's clock.");
            describe_histogram!(
                D_LATENESS,
                Unit::Seconds,
                "How late this process's workers claimed deliveries, on Redis's clock."
            );
            let partitions = (0..partitions.max(1)).map(|p| PartitionMetrics::new(wheel, p)).collect();
            WheelMetrics { partitions }
        }

        /// The metrics of partition `index` (of the first, for an index out of range).
        pub(crate) fn partition(&self, index: usize) -> &PartitionMetrics {
            self.partitions.get(index).unwrap_or(&self.partitions[0])
        }
    }

    /// One partition's metrics.
    #[cfg(feature = "redis")]
    pub(crate) struct PartitionMetrics {
        scheduled: Counter,
        fired: Counter,
        cancelled: Counter,
        retried: Counter,
        dead: Counter,
        /// `waiting`, `ready`, `running`, `dead`.
        tasks: [Gauge; 4],
        cursor_lag: Gauge,
        lateness: Histogram,
    }

    #[cfg(feature = "redis")]
    impl PartitionMetrics {
        fn new(wheel: &str, partition: usize) -> Self {
            let labels = [("wheel", wheel.to_owned()), ("partition", partition.to_string())];
            let state = |state: &'static str| {
                let [wheel, partition] = labels.clone();
                gauge!(D_TASKS, &[wheel, partition, ("state", state.to_owned())])
            };
            PartitionMetrics {
                scheduled: counter!(D_SCHEDULED, &labels),
                fired: counter!(D_FIRED, &labels),
                cancelled: counter!(D_CANCELLED, &labels),
                retried: counter!(D_RETRIED, &labels),
                dead: counter!(D_DEAD, &labels),
                tasks: [state("waiting"), state("ready"), state("running"), state("dead")],
                cursor_lag: gauge!(D_CURSOR_LAG, &labels),
                lateness: histogram!(D_LATENESS, &labels),
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

        pub(crate) fn retried(&self) {
            self.retried.increment(1);
        }

        pub(crate) fn dead(&self) {
            self.dead.increment(1);
        }

        /// Publishes the partition's gauges as `stats.lua` read them.
        pub(crate) fn gauges(&self, stats: &crate::durable::DurableStats) {
            let [waiting, ready, running, dead] = &self.tasks;
            waiting.set(stats.waiting as f64);
            ready.set(stats.ready as f64);
            running.set(stats.in_flight as f64);
            dead.set(stats.dead as f64);
            self.cursor_lag.set(stats.cursor_lag_ticks as f64);
        }
    }
}

/// Without the feature: the same calls, doing nothing, in types of no size.
#[cfg(not(feature = "metrics"))]
mod off {
    #[cfg(feature = "redis")]
    use std::time::Duration;

    use crate::service::lateness;
    use crate::Stats;

    pub(crate) struct ServiceMetrics;

    impl ServiceMetrics {
        #[inline(always)]
        pub(crate) fn new(_wheel: &str) -> Self {
            ServiceMetrics
        }

        #[inline(always)]
        pub(crate) fn publish(&self, _stats: &Stats) {}

        #[inline(always)]
        pub(crate) fn lateness(&self, _late: &lateness::Histogram) {}
    }

    #[cfg(feature = "redis")]
    pub(crate) struct WheelMetrics;

    #[cfg(feature = "redis")]
    impl WheelMetrics {
        #[inline(always)]
        pub(crate) fn new(_wheel: &str, _partitions: usize) -> Self {
            WheelMetrics
        }

        #[inline(always)]
        pub(crate) fn partition(&self, _index: usize) -> &PartitionMetrics {
            &PartitionMetrics
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) struct PartitionMetrics;

    #[cfg(feature = "redis")]
    impl PartitionMetrics {
        #[inline(always)]
        pub(crate) fn scheduled(&self, _tasks: u64) {}

        #[inline(always)]
        pub(crate) fn cancelled(&self, _tasks: u64) {}

        #[inline(always)]
        pub(crate) fn fired(&self, _late: Duration) {}

        #[inline(always)]
        pub(crate) fn retried(&self) {}

        #[inline(always)]
        pub(crate) fn dead(&self) {}

        #[inline(always)]
        pub(crate) fn gauges(&self, _stats: &crate::durable::DurableStats) {}
    }
}
