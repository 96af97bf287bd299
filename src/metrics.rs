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
//! | `tokio_timewheel_durable_snoozed_total` | counter | `wheel`, `partition` | runs this process's handlers ended with `Task::snooze` |
//! | `tokio_timewheel_durable_tasks` | gauge | `wheel`, `partition`, `state` | the wheel's tasks by `state`: `waiting`, `ready`, `running`, `dead` |
//! | `tokio_timewheel_durable_cursor_lag_ticks` | gauge | `wheel`, `partition` | how many ticks the cursor is behind Redis's clock |
//! | `tokio_timewheel_durable_lateness_seconds` | histogram | `wheel`, `partition` | how late this process's workers claimed each delivery: claim time minus due time, both on Redis's clock |
//! | `tokio_timewheel_durable_acked_total` | counter | `wheel`, `partition` | deliveries whose handler succeeded in this process's workers, counted as the handler returns and sent to be acknowledged |
//! | `tokio_timewheel_durable_handler_seconds` | histogram | `wheel`, `partition` | how long each of this process's handler runs took, whatever its outcome |
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

// The metrics themselves are each mode's: `service/metrics/` and `durable/metrics/`, each with
// the stand-in of no size that does nothing beside it for builds without the feature.
