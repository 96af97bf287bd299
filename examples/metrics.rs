//! Both modes' metrics, exported for Prometheus.
//!
//! Installs `metrics-exporter-prometheus`'s recorder, puts a small workload on an in-process
//! scheduler (timers that fire, some cancelled, some ended by a stop) and on a durable wheel of
//! two partitions (tasks that run, some cancelled, some that fail once and are retried, some that
//! fail for good and die), then prints the scrape a Prometheus server would read: every metric
//! that `tokio_timewheel::metrics` lists, with its help text. Times are histograms with buckets
//! from 1 ms to 10 s.
//!
//! Run it with `cargo run --release --features metrics --example metrics` (a few seconds). It
//! starts its own `redis-server` in a temp directory unless `REDIS_URL` names one, where it uses
//! a wheel of its own. In an application, serve `PrometheusHandle::render()` on a `/metrics`
//! route, or use the exporter's own listener (its `http-listener` feature).
//!
//! The test `tests/metrics.rs` runs [`workload`] too, and checks that every metric the docs list
//! is in the scrape, and nothing else.

#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
pub mod redis_server;

use std::error::Error;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_timewheel::durable::{DurableScheduler, Task};
use tokio_timewheel::Scheduler;

/// The buckets of the `_seconds` histograms, in seconds.
const BUCKETS: &[f64] = &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// How long the durable workload may take before the example gives up.
const DURABLE_WITHIN: Duration = Duration::from_secs(30);

#[allow(dead_code)] // The test calls `workload` and has a `main` of its own.
#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let recorder = recorder()?;
    // A wheel of its own on a Redis named by REDIS_URL, else "orders" on a server of its own.
    let (_server, url, wheel) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url, format!("metrics-example-{}", std::process::id())),
        Err(_) => match redis_server::RedisServer::start() {
            Some(server) => {
                let url = server.url();
                (Some(server), url, "orders".to_owned())
            }
            None => {
                eprintln!("this example needs a redis-server: {}, or set REDIS_URL", redis_server::INSTALL_HINT);
                std::process::exit(2);
            }
        },
    };
    let scrape = workload(&recorder, &url, &wheel).await?;
    print!("{scrape}");
    Ok(())
}

/// The exporter's recorder, installed for the whole process (before any scheduler starts: each
/// registers its metrics with the recorder installed when it starts).
pub fn recorder() -> Result<PrometheusHandle, Box<dyn Error>> {
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install_recorder()?)
}

/// Runs the workload on an in-process scheduler and on the durable wheel `wheel` at
/// `redis_url`, and returns the scrape.
pub async fn workload(recorder: &PrometheusHandle, redis_url: &str, wheel: &str) -> Result<String, Box<dyn Error>> {
    in_process().await?;
    durable(redis_url, wheel).await?;
    Ok(recorder.render())
}

/// 100 session timeouts: 80 fire, 10 are cancelled, 10 are still pending when the service stops.
async fn in_process() -> Result<(), Box<dyn Error>> {
    let timer = Scheduler::builder().name("sessions").start()?;
    let mut firing = Vec::new();
    for i in 0..80u64 {
        firing.push(timer.schedule(format!("session-{i}"), Duration::from_millis(i % 20), |_key| async {}).await?);
    }
    for i in 80..100 {
        timer.schedule(format!("session-{i}"), Duration::from_secs(3600), |_key| async {}).await?;
    }
    for i in 80..90 {
        timer.cancel(&format!("session-{i}")).await;
    }
    for fired in firing {
        fired.await?;
    }
    let stopped = timer.stop().await;
    println!("in-process: {:?}, {stopped} stopped", timer.stats());
    Ok(())
}

/// 60 order reviews on a wheel of two partitions: 40 run at once, 10 fail once and are retried,
/// 5 fail for good and die, 5 are cancelled before they are due.
async fn durable(redis_url: &str, wheel: &str) -> Result<(), Box<dyn Error>> {
    let timers = DurableScheduler::builder(redis_url, wheel)
        .tick(Duration::from_millis(50))
        .partitions(2)
        .max_attempts(2)
        .backoff(Duration::from_millis(100))
        .connect()
        .await?;
    let worker = timers.run(|task: Task| async move {
        match task.key() {
            key if key.starts_with("broken-") => Err(format!("{key} cannot be reviewed")),
            key if key.starts_with("flaky-") && task.attempt() == 1 => Err(format!("{key}: the shop did not answer")),
            _ => Ok(()),
        }
    });
    let mut items = Vec::new();
    for i in 0..40 {
        items.push((format!("order-{i}"), Duration::from_millis(i * 10)));
    }
    for i in 0..10 {
        items.push((format!("flaky-{i}"), Duration::from_millis(i * 10)));
    }
    for i in 0..5 {
        items.push((format!("broken-{i}"), Duration::ZERO));
    }
    for i in 0..5 {
        items.push((format!("later-{i}"), Duration::from_secs(3600)));
    }
    for result in timers.schedule_many(items.into_iter().map(|(key, delay)| (key, delay, Vec::new()))).await? {
        result?;
    }
    let cancelled = timers.cancel_many((0..5).map(|i| format!("later-{i}"))).await?;
    assert!(cancelled.iter().all(|&c| c), "nothing ran the later reviews");

    // Until every review has come to its end; `stats` also publishes the gauges.
    let deadline = tokio::time::Instant::now() + DURABLE_WITHIN;
    let stats = loop {
        let stats = timers.stats().await?;
        if stats.acked == 50 && stats.dead == 5 {
            break stats;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("the reviews did not end within {DURABLE_WITHIN:?}: {stats:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    worker.shutdown().await;
    println!("durable: {stats:?}, lateness {:?}", timers.lateness());
    Ok(())
}
