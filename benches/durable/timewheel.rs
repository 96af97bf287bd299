//! tokio-timewheel's durable mode, in this process.
//!
//! Configuration: a 100 ms tick, because D3 asks for a handler start within one tick + 50 ms of the due time and
//! the other implementations promote delayed work every 100 ms or sooner; 36,000 slots, so that one revolution
//! is an hour and every task of D1/D5 (at most an hour away) sits in the ring rather than the far tier; the
//! other settings are the defaults (lease 30 s, 16 handlers in flight per worker). `--tick-ms` and `--slots`
//! change the first two.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_timewheel::durable::{DurableScheduler, Limit, Task, Worker};

use crate::inputs::{concurrency, index_of, workers, Inputs, BATCH, D5_DELAY_MS, IN_FLIGHT, PAYLOAD};
use crate::lateness::{system_time_us, Sink};
use crate::server::{self, RedisServer};
use crate::{Fields, Options};

const WHEEL: &str = "bench";

async fn connect(server: &RedisServer, options: &Options) -> DurableScheduler {
    let builder = DurableScheduler::builder(server.url(), WHEEL)
        .tick(Duration::from_millis(options.tick_ms))
        .slots(options.slots)
        .concurrency(concurrency());
    let builder = if options.history_off { builder.history_limit(0) } else { builder };
    let timers = builder.connect().await.expect("tokio-timewheel connect");
    if options.limit_other {
        let limit = Limit::rate(1000, Duration::from_secs(1)).and(Limit::running(8));
        timers.set_limit("other:", limit).await.expect("set_limit");
    }
    timers
}

async fn schedule_batches(timers: &DurableScheduler, keys: &[String], delay_ms: impl Fn(usize) -> u64) {
    for (c, chunk) in keys.chunks(BATCH).enumerate() {
        let items = chunk.iter().enumerate().map(|(j, key)| {
            let i = c * BATCH + j;
            (key.as_str(), Duration::from_millis(delay_ms(i)), PAYLOAD.as_bytes())
        });
        let results = timers.schedule_many(items).await.expect("schedule_many");
        assert!(results.iter().all(Result::is_ok), "tokio-timewheel: a batch item was refused");
    }
}

/// D1 (`schedule` per task with 64 in flight, or `schedule_many` of 1,024), D2, and D4 (`cancel` per task with 64
/// in flight, or `cancel_many` of 1,024); D1 and D4 with Redis's work over their timed phases
/// ([`server::Work`]).
pub async fn d124(
    server: &RedisServer,
    options: &Options,
    inputs: &Inputs,
    batch: bool,
) -> Vec<(&'static str, Fields)> {
    let timers = connect(server, options).await;
    let n = inputs.n;
    let before = server::used_memory(server).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    if batch {
        schedule_batches(&timers, &inputs.keys, |i| inputs.d1_delays_ms[i]).await;
    } else {
        futures::stream::iter(0..n)
            .map(|i| {
                let timers = &timers;
                let key = inputs.keys[i].as_str();
                let delay = Duration::from_millis(inputs.d1_delays_ms[i]);
                async move { timers.schedule(key, delay, PAYLOAD.as_bytes()).await.expect("schedule") }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<()>()
            .await;
    }
    let d1_s = started.elapsed().as_secs_f64();
    let d1_work = work.per_task(server, n);
    let after = server::used_memory(server).await;

    let work = server::Work::read(server);
    let started = Instant::now();
    let cancelled = if batch {
        let mut cancelled = 0;
        for chunk in inputs.cancel_order.chunks(BATCH) {
            let keys = chunk.iter().map(|&i| inputs.keys[i as usize].as_str());
            cancelled += timers.cancel_many(keys).await.expect("cancel_many").into_iter().filter(|&c| c).count();
        }
        cancelled
    } else {
        futures::stream::iter(inputs.cancel_order.iter().copied())
            .map(|i| {
                let timers = &timers;
                let key = inputs.keys[i as usize].as_str();
                async move { timers.cancel(key).await.expect("cancel") as usize }
            })
            .buffer_unordered(IN_FLIGHT)
            .fold(0, |a, b| async move { a + b })
            .await
    };
    let d4_s = started.elapsed().as_secs_f64();
    let d4_work = work.per_task(server, n);
    assert_eq!(cancelled, n, "tokio-timewheel: every pending task cancelled once");
    vec![
        ("D1", [("tasks_per_s", n as f64 / d1_s)].into_iter().chain(d1_work).collect()),
        ("D2", vec![("redis_bytes_per_task", (after - before) / n as f64)]),
        ("D4", [("cancels_per_s", n as f64 / d4_s)].into_iter().chain(d4_work).collect()),
    ]
}

fn start_workers(timers: &DurableScheduler, sink: Arc<Sink>) -> Vec<Worker> {
    (0..workers())
        .map(|_| {
            let sink = sink.clone();
            timers.run(move |task: Task| {
                // Due on Redis's clock (the schedule script's `TIME` + delay), start on this host's clock: the
                // same clock, since the server runs here.
                sink.handle(index_of(task.key()), system_time_us(task.due()));
                async { Ok::<(), std::convert::Infallible>(()) }
            })
        })
        .collect()
}

pub async fn d3(server: &RedisServer, options: &Options, inputs: &Inputs) -> Fields {
    let timers = connect(server, options).await;
    let sink = Arc::new(Sink::new(inputs.n));
    let workers = start_workers(&timers, sink.clone());
    let work = server::Work::read(server);
    let started = Instant::now();
    schedule_batches(&timers, &inputs.keys, |i| inputs.d3_delays_ms[i]).await;
    sink.insert_done();
    let all = sink.wait_all(crate::D3_LIMIT).await;
    // Acknowledged: nothing pending any more.
    let mut wall_ms = -1.0;
    let limit = Instant::now() + Duration::from_secs(30);
    while all && Instant::now() < limit {
        if timers.len().await.expect("len") == 0 {
            wall_ms = started.elapsed().as_secs_f64() * 1e3;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = work.per_task(server, inputs.n);
    tokio::time::sleep(crate::D3_DUPLICATE_WATCH).await;
    for w in workers {
        w.shutdown().await;
    }
    sink.fields(wall_ms).into_iter().chain(cpu).collect()
}

/// D7: N tasks already due (scheduled with no delay while no worker runs), then the workers start: from their
/// start to the last acknowledgement, acknowledgements per second and Redis's work per task.
pub async fn d7(server: &RedisServer, options: &Options, inputs: &Inputs) -> Fields {
    let timers = connect(server, options).await;
    schedule_batches(&timers, &inputs.keys, |_| 0).await;
    let sink = Arc::new(Sink::new(inputs.n));
    let work = server::Work::read(server);
    let started = Instant::now();
    let workers = start_workers(&timers, sink.clone());
    let all = sink.wait_all(crate::D3_LIMIT).await;
    let mut wall_s = -1.0;
    // Acknowledged: nothing pending any more.
    while all && wall_s < 0.0 {
        if timers.len().await.expect("len") == 0 {
            wall_s = started.elapsed().as_secs_f64();
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let cpu = work.per_task(server, inputs.n);
    for w in workers {
        w.shutdown().await;
    }
    crate::d7_fields(&sink, wall_s, inputs.n).into_iter().chain(cpu).collect()
}

/// D5: 100,000 tasks an hour away and four idle workers; the caller measures.
pub async fn d5_setup(server: &RedisServer, options: &Options, inputs: &Inputs) -> impl Sized {
    let timers = connect(server, options).await;
    schedule_batches(&timers, &inputs.keys, |_| D5_DELAY_MS).await;
    let workers = start_workers(&timers, Arc::new(Sink::new(inputs.n)));
    (timers, workers)
}
