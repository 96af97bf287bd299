//! `bullmq-official` 1.4 (the official Rust port of BullMQ, library `bullmq`; in this process) in its best
//! normal configuration for these workloads, the Node rival's (`bullmq/bench.mjs`) in Rust:
//! - job id = the key `order-{i}` (BullMQ's unique key: a second add with the same id is ignored),
//!   `remove_on_complete` and `remove_on_fail` (finished jobs would otherwise stay in Redis), the job's data the
//!   32-byte payload as a JSON string;
//! - one `Queue` (its default connection options: one multiplexed connection, 10 s response timeout), `add` per
//!   job with 64 in flight, or `add_bulk` of 1,024 (which sends one `addDelayedJob` script call per job over the
//!   multiplexed connection, all at once); `remove` per job with 64 in flight (no call removes many jobs by id,
//!   so the `-batch` run has no D4);
//! - workers with `concurrency` = the handlers of the workload (16 by default; the crate's default of 1 cannot
//!   keep up), the rest the crate's defaults (the worker promotes delayed jobs itself, blocks on the queue's
//!   marker until the next one is due, and takes the next job in the same call that completes one);
//! - lateness from the job's `timestamp` (its creation, this host's clock) + delay, as for the Node rival; done =
//!   the worker's `Completed` event, sent once `moveToFinished` has run in Redis (the acknowledgement).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bullmq::options::RedisConnectionOptions;
use bullmq::types::RemoveOnFinish;
use bullmq::worker::WorkerEvent;
use bullmq::{BulkJob, Job, JobOptions, Queue, QueueOptions, Worker, WorkerOptions};
use futures::StreamExt;

use crate::inputs::{concurrency, index_of, workers, Inputs, BATCH, D5_DELAY_MS, IN_FLIGHT, PAYLOAD};
use crate::lateness::Sink;
use crate::server::{self, RedisServer};
use crate::Fields;

const QUEUE: &str = "bench";

fn connection(server: &RedisServer) -> RedisConnectionOptions {
    RedisConnectionOptions { url: server.url(), ..Default::default() }
}

async fn queue(server: &RedisServer) -> Queue {
    Queue::with_options(QUEUE, QueueOptions::default().connection(connection(server)))
        .await
        .expect("bullmq-official queue")
}

fn job_options(i: usize, inputs: &Inputs, delay_ms: u64) -> JobOptions {
    JobOptions {
        job_id: Some(inputs.keys[i].clone()),
        delay: (delay_ms > 0).then_some(delay_ms),
        remove_on_complete: Some(RemoveOnFinish::Bool(true)),
        remove_on_fail: Some(RemoveOnFinish::Bool(true)),
        ..Default::default()
    }
}

/// `add_bulk` in calls of 1,024 jobs, job `i` `delay_of(i)` ms away.
async fn add_all(queue: &Queue, inputs: &Inputs, delay_of: impl Fn(usize) -> u64) {
    for chunk in (0..inputs.n).collect::<Vec<_>>().chunks(BATCH) {
        let jobs = chunk
            .iter()
            .map(|&i| BulkJob::with_options("review", PAYLOAD, job_options(i, inputs, delay_of(i))))
            .collect();
        queue.add_bulk(jobs).await.expect("bullmq-official add_bulk");
    }
}

/// D1 (`add` per job with 64 in flight, or `add_bulk` of 1,024), D2, and D4 (`remove` per job, 64 in flight;
/// the batched run has no D4), with Redis's work over the timed phases ([`server::Work`]).
pub async fn d124(server: &RedisServer, inputs: &Inputs, batch: bool) -> Vec<(&'static str, Fields)> {
    let queue = queue(server).await;
    let n = inputs.n;
    let before = server::used_memory(server).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    if batch {
        add_all(&queue, inputs, |i| inputs.d1_delays_ms[i]).await;
    } else {
        futures::stream::iter(0..n)
            .map(|i| {
                let add = queue.add("review", PAYLOAD).options(job_options(i, inputs, inputs.d1_delays_ms[i]));
                async move { add.await.expect("bullmq-official add") }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
    }
    let d1_s = started.elapsed().as_secs_f64();
    let d1_work = work.per_task(server, n);
    let after = server::used_memory(server).await;
    let mut out = vec![
        ("D1", [("tasks_per_s", n as f64 / d1_s)].into_iter().chain(d1_work).collect()),
        ("D2", vec![("redis_bytes_per_task", (after - before) / n as f64)]),
    ];
    if batch {
        queue.close().await;
        return out;
    }
    let work = server::Work::read(server);
    let started = Instant::now();
    let removed = futures::stream::iter(inputs.cancel_order.iter().copied())
        .map(|i| {
            let queue = &queue;
            async move { queue.remove(&inputs.keys[i as usize]).await.expect("bullmq-official remove") as usize }
        })
        .buffer_unordered(IN_FLIGHT)
        .fold(0, |a, b| async move { a + b })
        .await;
    let d4_s = started.elapsed().as_secs_f64();
    let d4_work = work.per_task(server, n);
    assert_eq!(removed, n, "bullmq-official: every delayed job removed once");
    out.push(("D4", [("cancels_per_s", n as f64 / d4_s)].into_iter().chain(d4_work).collect()));
    queue.close().await;
    out
}

/// Counts the workers' `Completed` events and notes when the `n`th came.
struct Acks {
    n: usize,
    completed: AtomicUsize,
    last: std::sync::Mutex<Option<Instant>>,
    done: tokio::sync::Notify,
}

impl Acks {
    fn new(n: usize) -> Arc<Acks> {
        Arc::new(Acks { n, completed: AtomicUsize::new(0), last: Default::default(), done: Default::default() })
    }

    /// One `Completed` event.
    fn ack(&self) {
        if self.completed.fetch_add(1, Relaxed) + 1 == self.n {
            *self.last.lock().unwrap() = Some(Instant::now());
            self.done.notify_one();
        }
    }

    /// Waits for every acknowledgement, for at most `limit` after the sink's own wait; `None` if some is missing.
    async fn wait(&self, all_handled: bool, limit: Duration) -> Option<Instant> {
        if !all_handled {
            return None;
        }
        let deadline = Instant::now() + limit;
        while self.completed.load(Relaxed) < self.n && Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_millis(100), self.done.notified()).await;
        }
        *self.last.lock().unwrap()
    }
}

/// Starts the workers, each with a task draining its events into `acks`; the handler reports to `sink`, the due
/// time being the job's `timestamp` + `delay_ms(i)`.
async fn start_workers(
    server: &RedisServer,
    sink: Arc<Sink>,
    acks: Arc<Acks>,
    delay_ms: Arc<dyn Fn(usize) -> u64 + Send + Sync>,
) -> Vec<Arc<Worker>> {
    let mut out = Vec::new();
    for _ in 0..workers() {
        let (sink, delay_ms) = (sink.clone(), delay_ms.clone());
        let processor = move |job: Job, _token| {
            let i = index_of(job.id());
            sink.handle(i, (job.timestamp() + delay_ms(i)) as i64 * 1000);
            async { Ok(serde_json::Value::Null) }
        };
        let options =
            WorkerOptions { connection: connection(server), concurrency: concurrency(), ..Default::default() };
        let worker = Arc::new(Worker::with_options(QUEUE, processor, options).await.expect("bullmq-official worker"));
        let (events, acks) = (worker.clone(), acks.clone());
        tokio::spawn(async move {
            while let Some(event) = events.next_event().await {
                match event {
                    WorkerEvent::Completed { .. } => acks.ack(),
                    WorkerEvent::Closed => break,
                    _ => {}
                }
            }
        });
        out.push(worker);
    }
    out
}

async fn close(workers: Vec<Arc<Worker>>) {
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w.close(5_000)).await;
    }
}

/// D3, with Redis's work from the start of the inserts to the last acknowledgement.
pub async fn d3(server: &RedisServer, inputs: &'static Inputs) -> Fields {
    let n = inputs.n;
    let sink = Arc::new(Sink::new(n));
    let acks = Acks::new(n);
    let workers = start_workers(server, sink.clone(), acks.clone(), Arc::new(|i| inputs.d3_delays_ms[i])).await;
    let queue = queue(server).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    add_all(&queue, inputs, |i| inputs.d3_delays_ms[i]).await;
    sink.insert_done();
    let all = sink.wait_all(crate::D3_LIMIT).await;
    let wall_ms = acks
        .wait(all, Duration::from_secs(30))
        .await
        .map_or(-1.0, |last| last.duration_since(started).as_secs_f64() * 1e3);
    let cpu = work.per_task(server, n);
    tokio::time::sleep(crate::D3_DUPLICATE_WATCH).await;
    close(workers).await;
    queue.close().await;
    sink.fields(wall_ms).into_iter().chain(cpu).collect()
}

/// D7: N jobs added with no delay while no worker runs, then the workers start; from their start to the last
/// acknowledgement, acknowledgements per second and Redis's work per task.
pub async fn d7(server: &RedisServer, inputs: &Inputs) -> Fields {
    let n = inputs.n;
    let queue = queue(server).await;
    add_all(&queue, inputs, |_| 0).await;
    let sink = Arc::new(Sink::new(n));
    let acks = Acks::new(n);
    let work = server::Work::read(server);
    let started = Instant::now();
    let workers = start_workers(server, sink.clone(), acks.clone(), Arc::new(|_| 0)).await;
    let all = sink.wait_all(crate::D3_LIMIT).await;
    let wall_s =
        acks.wait(all, Duration::from_secs(30)).await.map_or(-1.0, |last| last.duration_since(started).as_secs_f64());
    let cpu = work.per_task(server, n);
    close(workers).await;
    queue.close().await;
    crate::d7_fields(&sink, wall_s, n).into_iter().chain(cpu).collect()
}

/// D5: 100,000 jobs an hour away and the workers idle; the caller measures.
pub async fn d5_setup(server: &RedisServer, inputs: &Inputs) -> impl Sized {
    let queue = queue(server).await;
    add_all(&queue, inputs, |_| D5_DELAY_MS).await;
    let sink = Arc::new(Sink::new(inputs.n));
    (queue, start_workers(server, sink, Acks::new(inputs.n), Arc::new(|_| 0)).await)
}
