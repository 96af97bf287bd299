//! ChasquiMQ 1.3 (`chasquimq`, Rust, in this process). Its consumer reads jobs from a Redis stream and
//! acknowledges them with `XACKDEL` (Redis 8.2), and a job added with no delay goes to the stream through
//! `XADD ... IDMP` (Redis 8.6): on Debian's Redis 7.0 neither exists, so there it runs D1, D2 and D4 (its
//! producer's delayed path) and skips D3, D5 and D7; with `TIMEWHEEL_REDIS_SERVER` naming a Redis 8.6 or later
//! it runs them all (BENCHMARKS.md says where that server came from). The delayed path: a delayed job with a
//! stable id is one script call (`SET NX EX` of its dedup marker, `ZADD` of the encoded job into the delayed
//! sorted set, `SET EX` of a side index from id to member), and its cancel one script call (`GET` the member,
//! `ZREM`, `DEL` both keys).
//!
//! Best normal configuration: the job id is the key `order-{i}` (`add_in_with_id`, ChasquiMQ's idempotent
//! schedule: a second add with the same id is ignored while its marker lives), the payload the 32-byte string
//! (MessagePack), `ProducerConfig`'s defaults otherwise (a pool of 8 connections, each pipelining the calls in
//! flight on it). D1 one call per job with 64 in flight; D4 `cancel_delayed` per job, 64 in flight. ChasquiMQ
//! has no batch schedule with a due time per job (`add_in_bulk_with_ids` gives every job of a call the same
//! delay), so the `-batch` run has no D1 or D2: it schedules as the one-call run does, untimed, and measures D4
//! through `cancel_delayed_bulk` of 1,024 ids (one pipeline of script calls).
//!
//! Workers (D3, D5, D7): one `Consumer` per worker of the workload, all in one consumer group, each with
//! `concurrency` = the workload's handlers, the rest `ConsumerConfig`'s defaults (reads of up to 64 entries,
//! acknowledgements batched up to 256 or 5 ms, each consumer's promoter polling the delayed set every 100 ms for
//! up to 256 due jobs under a shared lock, the events stream written). D3 schedules one call per job, 64 in
//! flight (no batch call takes a due time per job); D7 adds the jobs due now through `add_in_bulk_with_ids` with
//! no delay (pipelined `XADD`s of 1,024). Lateness on the client's clock (due = the time just before the add +
//! delay); done = the stream and the delayed set empty (`XACKDEL` deletes the entry it acknowledges).
//!
//! `--chasquimq=tuned` runs it instead as its own benchmarks do (the configuration issue 48 measured), its
//! rows named `chasquimq-tuned`: `ConsumerConfig` with reads of 256 (`batch`), acknowledgements flushed after
//! 2 ms idle (`ack_idle_ms`), `block_ms` 100, the events stream off, and its delayed path promoting 1,024 due
//! jobs a poll (`delayed_promote_batch`); D7's jobs are added with a 1 s delay, so that they go through its
//! delayed set, and the consumers start once the last is due (the clock starts then).

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chasquimq::{Consumer, ConsumerConfig, Producer, ProducerConfig};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::inputs::{concurrency, index_of, workers, Inputs, BATCH, D5_DELAY_MS, IN_FLIGHT, PAYLOAD};
use crate::lateness::{now_us, Sink};
use crate::server::{self, RedisServer};
use crate::Fields;

const QUEUE: &str = "bench";

/// Whether this run drives ChasquiMQ as its own benchmarks do (`--chasquimq=tuned`; see above).
pub fn tuned() -> bool {
    std::env::args().any(|a| a == "--chasquimq=tuned")
}

/// The name of ChasquiMQ's rows in this run.
pub fn row_name() -> &'static str {
    if tuned() {
        "chasquimq-tuned"
    } else {
        "chasquimq"
    }
}

/// The consumer's configuration: `ConsumerConfig`'s defaults, or its own benchmarks' (see above).
fn consumer_config() -> ConsumerConfig {
    let base = ConsumerConfig { queue_name: QUEUE.into(), concurrency: concurrency(), ..Default::default() };
    if !tuned() {
        return base;
    }
    ConsumerConfig {
        batch: 256,
        ack_idle_ms: 2,
        block_ms: 100,
        events_enabled: false,
        delayed_promote_batch: 1024,
        ..base
    }
}

async fn producer(server: &RedisServer) -> Producer<String> {
    let config = ProducerConfig { queue_name: QUEUE.into(), ..Default::default() };
    Producer::connect(&server.url(), config).await.expect("chasquimq producer")
}

async fn schedule_each(producer: &Producer<String>, inputs: &Inputs) {
    futures::stream::iter(0..inputs.n)
        .map(|i| {
            let delay = Duration::from_millis(inputs.d1_delays_ms[i]);
            let add = producer.add_in_with_id(inputs.keys[i].clone(), delay, PAYLOAD.to_string());
            async move { add.await.expect("chasquimq add_in_with_id") }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
}

/// D1 (`add_in_with_id` per job, 64 in flight), D2 and D4 (`cancel_delayed` per job, 64 in flight); the batched
/// run: D4 alone, through `cancel_delayed_bulk` of 1,024. Redis's work over the timed phases ([`server::Work`]).
pub async fn d124(server: &RedisServer, inputs: &Inputs, batch: bool) -> Vec<(&'static str, Fields)> {
    let producer = producer(server).await;
    let n = inputs.n;
    let mut out = Vec::new();
    if batch {
        schedule_each(&producer, inputs).await;
    } else {
        let before = server::used_memory(server).await;
        let work = server::Work::read(server);
        let started = Instant::now();
        schedule_each(&producer, inputs).await;
        let d1_s = started.elapsed().as_secs_f64();
        let d1_work = work.per_task(server, n);
        let after = server::used_memory(server).await;
        out.push(("D1", [("tasks_per_s", n as f64 / d1_s)].into_iter().chain(d1_work).collect()));
        out.push(("D2", vec![("redis_bytes_per_task", (after - before) / n as f64)]));
    }
    let work = server::Work::read(server);
    let started = Instant::now();
    let cancelled = if batch {
        let mut cancelled = 0;
        for chunk in inputs.cancel_order.chunks(BATCH) {
            let ids: Vec<String> = chunk.iter().map(|&i| inputs.keys[i as usize].clone()).collect();
            let done = producer.cancel_delayed_bulk(&ids).await.expect("chasquimq cancel_delayed_bulk");
            cancelled += done.iter().filter(|&&c| c).count();
        }
        cancelled
    } else {
        futures::stream::iter(inputs.cancel_order.iter().copied())
            .map(|i| {
                let producer = &producer;
                async move {
                    producer.cancel_delayed(&inputs.keys[i as usize]).await.expect("chasquimq cancel_delayed") as usize
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .fold(0, |a, b| async move { a + b })
            .await
    };
    let d4_s = started.elapsed().as_secs_f64();
    let d4_work = work.per_task(server, n);
    assert_eq!(cancelled, n, "chasquimq: every delayed job cancelled once");
    out.push(("D4", [("cancels_per_s", n as f64 / d4_s)].into_iter().chain(d4_work).collect()));
    let _ = producer.shutdown().await;
    out
}

/// What every handler reaches: the sink and each job's due time (Unix microseconds, the client's clock).
struct Shared {
    sink: Sink,
    due_us: Box<[AtomicI64]>,
}

/// Starts one consumer per worker; cancelling the token stops them.
fn start_workers(
    server: &RedisServer,
    shared: Arc<Shared>,
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workers())
        .map(|w| {
            let consumer = Consumer::<String>::new(server.url(), consumer_config());
            let (shared, stop) = (shared.clone(), stop.clone());
            tokio::spawn(async move {
                let handler = move |job: chasquimq::Job<String>| {
                    let i = index_of(&job.id);
                    shared.sink.handle(i, shared.due_us[i].load(Relaxed));
                    async { Ok(chasquimq::Bytes::new()) }
                };
                let asked = stop.clone();
                if let Err(e) = consumer.run(handler, stop).await {
                    if !asked.is_cancelled() {
                        eprintln!("  chasquimq consumer {w} stopped: {e}");
                    }
                }
            })
        })
        .collect()
}

async fn stop(token: CancellationToken, workers: Vec<tokio::task::JoinHandle<()>>) {
    token.cancel();
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
    }
}

/// Polls every 5 ms until the stream and the delayed set are empty: every job promoted, handled and acknowledged.
async fn wait_acked(server: &RedisServer, producer: &Producer<String>, all_handled: bool) -> Option<()> {
    if !all_handled {
        return None;
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let limit = Instant::now() + Duration::from_secs(30);
    while Instant::now() < limit {
        let (stream, delayed): (u64, u64) = redis::pipe()
            .xlen(producer.stream_key())
            .zcard(producer.delayed_key())
            .query_async(&mut conn)
            .await
            .ok()?;
        if stream + delayed == 0 {
            return Some(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

fn shared(n: usize) -> Arc<Shared> {
    Arc::new(Shared { sink: Sink::new(n), due_us: (0..n).map(|_| AtomicI64::new(i64::MAX)).collect() })
}

/// D3 (Redis 8.6 or later), with Redis's work from the first schedule to the last acknowledgement.
pub async fn d3(server: &RedisServer, inputs: &Inputs) -> Fields {
    let producer = producer(server).await;
    let n = inputs.n;
    let shared = shared(n);
    let token = CancellationToken::new();
    let workers = start_workers(server, shared.clone(), &token);
    // Let the consumers create their group before the first job can come due.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let delay = inputs.d3_delays_ms[i];
            shared.due_us[i].store(now_us() + delay as i64 * 1000, Relaxed);
            let add =
                producer.add_in_with_id(inputs.keys[i].clone(), Duration::from_millis(delay), PAYLOAD.to_string());
            async move { add.await.expect("chasquimq add_in_with_id") }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    shared.sink.insert_done();
    let all = shared.sink.wait_all(crate::D3_LIMIT).await;
    let wall_ms = wait_acked(server, &producer, all).await.map_or(-1.0, |_| started.elapsed().as_secs_f64() * 1e3);
    let cpu = work.per_task(server, n);
    tokio::time::sleep(crate::D3_DUPLICATE_WATCH).await;
    stop(token, workers).await;
    shared.sink.fields(wall_ms).into_iter().chain(cpu).collect()
}

/// D7 (Redis 8.6 or later): N jobs due now, added while no consumer runs, then the consumers start.
pub async fn d7(server: &RedisServer, inputs: &Inputs) -> Fields {
    let producer = producer(server).await;
    let n = inputs.n;
    // Tuned: through its delayed set, every job due by the time the consumers start.
    let delay = if tuned() { Duration::from_secs(1) } else { Duration::ZERO };
    for chunk in (0..n).collect::<Vec<_>>().chunks(BATCH) {
        let items = chunk.iter().map(|&i| (inputs.keys[i].clone(), PAYLOAD.to_string())).collect();
        producer.add_in_bulk_with_ids(delay, items).await.expect("chasquimq add_in_bulk_with_ids");
    }
    tokio::time::sleep(delay).await;
    let shared = shared(n);
    let token = CancellationToken::new();
    let work = server::Work::read(server);
    let started = Instant::now();
    let workers = start_workers(server, shared.clone(), &token);
    let all = shared.sink.wait_all(crate::D3_LIMIT).await;
    let wall_s = wait_acked(server, &producer, all).await.map_or(-1.0, |_| started.elapsed().as_secs_f64());
    let cpu = work.per_task(server, n);
    stop(token, workers).await;
    crate::d7_fields(&shared.sink, wall_s, n).into_iter().chain(cpu).collect()
}

/// D5 (Redis 8.6 or later): N jobs an hour away and the consumers idle; the caller measures.
pub async fn d5_setup(server: &RedisServer, inputs: &Inputs) -> impl Sized {
    let producer = producer(server).await;
    for chunk in (0..inputs.n).collect::<Vec<_>>().chunks(BATCH) {
        let items = chunk.iter().map(|&i| (inputs.keys[i].clone(), PAYLOAD.to_string())).collect();
        producer
            .add_in_bulk_with_ids(Duration::from_millis(D5_DELAY_MS), items)
            .await
            .expect("chasquimq add_in_bulk_with_ids");
    }
    let token = CancellationToken::new();
    start_workers(server, shared(inputs.n), &token);
    Idle(token)
}

/// Dropping it stops the consumers.
struct Idle(CancellationToken);

impl Drop for Idle {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
