//! apalis-redis 1.x (Rust, in this process) in its best normal configuration for these workloads:
//! - tasks are `String`s (the 32-byte payload; JSON adds two quotes) whose task id is the key `order-{i}`: the
//!   push script stores a task only if its id is new, so the id is apalis's unique key (an idempotency key set
//!   on the task builder does not reach Redis through `push_task` / `push_all` in apalis-redis 1.0);
//! - run times are Unix *seconds* in apalis (`TaskBuilder::run_after` floors them, so a task could start up to a
//!   second early); the bench rounds the due time *up* to the next second with `run_at_timestamp`, which is what a
//!   user who must not run early has to do;
//! - workers poll every 100 ms (`poll_with_interval`; without it a worker with nothing ready only looks again at
//!   its heartbeat) and fetch up to 100 tasks per poll (`batch_size`, default 10), with 16 handlers in flight;
//! - apalis-redis has no cancel call, so D4 runs a three-line script on apalis's own key layout (remove the task
//!   from the scheduled set, its data and its metadata).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_redis::{Config, ConnectionManager, RedisStorage};
use futures::StreamExt;

use crate::inputs::{concurrency, index_of, workers, Inputs, BATCH, D5_DELAY_MS, IN_FLIGHT, PAYLOAD};
use crate::lateness::{now_us, Sink};
use crate::server::{self, RedisServer};
use crate::Fields;

const QUEUE: &str = "bench";
const POLL: Duration = Duration::from_millis(100);
const FETCH_BATCH: usize = 100;

/// apalis-redis has no cancel: this undoes what its push script wrote for one scheduled task.
const CANCEL_LUA: &str = r"
-- KEYS[1] scheduled set, KEYS[2] task data hash, KEYS[3] metadata prefix
-- ARGV[1] the task id. Returns 1 if a scheduled task was removed, else 0.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3] .. ':' .. ARGV[1])
return 1
";

type Storage = RedisStorage<String, ConnectionManager>;

/// apalis-redis's `connect`, with a 5 s response timeout instead of redis-rs's default (the same order as
/// tokio-timewheel's 2 s plus its retries), so that a busy moment of the shared machine is not a failure.
async fn storage(server: &RedisServer) -> Storage {
    let client = redis::Client::open(server.url()).expect("redis URL");
    let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(Some(Duration::from_secs(5)));
    let conn = client.get_connection_manager_with_config(config).await.expect("apalis-redis connect");
    RedisStorage::new(conn).with_config(Config::default().queue(QUEUE).batch_size(FETCH_BATCH))
}

/// The task for index `i`, due `delay_ms` from now: apalis's due second rounded up (never early).
fn task(keys: &[String], i: usize, delay_ms: u64) -> Task<String> {
    let due_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + delay_ms;
    TaskBuilder::new(PAYLOAD.to_string())
        .task_id(TaskId::from_string(&keys[i]))
        .run_at_timestamp(due_ms.div_ceil(1000))
        .build()
}

async fn push_all(storage: &Storage, tasks: Vec<Task<String>>) {
    let mut storage = storage.clone();
    storage.push_all(futures::stream::iter(tasks)).await.expect("apalis push_all");
}

/// D1 (one `push_task` per task, 64 in flight, or `push_all` of 1,024), D2, and D4 (one script call per task,
/// 64 in flight; the batched run has no batch cancel to measure); D1 and D4 with Redis's work over their timed
/// phases ([`server::Work`]), read as for tokio-timewheel.
pub async fn d124(server: &RedisServer, inputs: &Inputs, batch: bool) -> Vec<(&'static str, Fields)> {
    let storage = storage(server).await;
    let n = inputs.n;
    let before = server::used_memory(server).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    if batch {
        for chunk in (0..n).collect::<Vec<_>>().chunks(BATCH) {
            let tasks = chunk.iter().map(|&i| task(&inputs.keys, i, inputs.d1_delays_ms[i])).collect();
            push_all(&storage, tasks).await;
        }
    } else {
        futures::stream::iter(0..n)
            .map(|i| {
                let mut storage = storage.clone();
                let task = task(&inputs.keys, i, inputs.d1_delays_ms[i]);
                async move { storage.push_task(task).await.expect("apalis push_task") }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<()>()
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
        return out;
    }

    let config = storage.get_config().clone();
    let script = redis::Script::new(CANCEL_LUA);
    let conn = storage.clone().get_connection().clone();
    let work = server::Work::read(server);
    let started = Instant::now();
    let cancelled: usize = futures::stream::iter(inputs.cancel_order.iter().copied())
        .map(|i| {
            let mut conn = conn.clone();
            let mut call = script.prepare_invoke();
            call.key(config.scheduled_jobs_set())
                .key(config.job_data_hash())
                .key(config.job_meta_hash())
                .arg(&inputs.keys[i as usize]);
            async move { call.invoke_async::<usize>(&mut conn).await.expect("apalis cancel script") }
        })
        .buffer_unordered(IN_FLIGHT)
        .fold(0, |a, b| async move { a + b })
        .await;
    let d4_s = started.elapsed().as_secs_f64();
    let d4_work = work.per_task(server, n);
    assert_eq!(cancelled, n, "apalis-redis: every scheduled task cancelled once");
    out.push(("D4", [("cancels_per_s", n as f64 / d4_s)].into_iter().chain(d4_work).collect()));
    out
}

/// What every D3 handler can reach: the sink and each task's due time (Unix microseconds, the client's clock).
struct Shared {
    sink: Sink,
    due_us: Box<[std::sync::atomic::AtomicI64]>,
}

async fn handle(_payload: String, id: TaskId, shared: Data<Arc<Shared>>) -> Result<(), BoxDynError> {
    let i = index_of(&id.to_string());
    shared.sink.handle(i, shared.due_us[i].load(std::sync::atomic::Ordering::Relaxed));
    Ok(())
}

/// A running worker: dropping `stop` (or sending on it) shuts it down.
type Running = (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Starts the workers.
fn start_workers(storage: &Storage, shared: Arc<Shared>) -> Vec<Running> {
    (0..workers())
        .map(|w| {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let worker = WorkerBuilder::new(format!("bench-worker-{w}"))
                .backend(storage.clone().poll_with_interval(POLL))
                .data(shared.clone())
                .concurrency(concurrency())
                .build(handle);
            let join = tokio::spawn(async move {
                // Errors once the worker was asked to stop (the server goes away right after) are not news.
                let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let flag = asked.clone();
                let run = worker.run_until(async move {
                    let _ = stopped.await;
                    flag.store(true, std::sync::atomic::Ordering::Relaxed);
                    Ok::<(), WorkerError>(())
                });
                if let Err(e) = run.await {
                    if !asked.load(std::sync::atomic::Ordering::Relaxed) {
                        eprintln!("  apalis-redis worker {w} stopped: {e}");
                    }
                }
            });
            (stop, join)
        })
        .collect()
}

pub async fn d3(server: &RedisServer, inputs: &Inputs) -> Fields {
    let storage = storage(server).await;
    let n = inputs.n;
    let shared = Arc::new(Shared {
        sink: Sink::new(n),
        due_us: (0..n).map(|_| std::sync::atomic::AtomicI64::new(i64::MAX)).collect(),
    });
    let workers = start_workers(&storage, shared.clone());
    let work = server::Work::read(server);
    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(BATCH) {
        let tasks = chunk
            .iter()
            .map(|&i| {
                let delay = inputs.d3_delays_ms[i];
                shared.due_us[i].store(now_us() + delay as i64 * 1000, std::sync::atomic::Ordering::Relaxed);
                task(&inputs.keys, i, delay)
            })
            .collect();
        push_all(&storage, tasks).await;
    }
    shared.sink.insert_done();
    let all = shared.sink.wait_all(crate::D3_LIMIT).await;
    // Acknowledged: nothing left in the scheduled set, the ready list or any worker's in-flight set.
    let wall_ms = wait_acked(server, all).await.map_or(-1.0, |_| started.elapsed().as_secs_f64() * 1e3);
    let cpu = work.per_task(server, n);
    tokio::time::sleep(crate::D3_DUPLICATE_WATCH).await;
    stop(workers).await;
    shared.sink.fields(wall_ms).into_iter().chain(cpu).collect()
}

/// D7: N tasks due now (pushed while no worker runs), then the workers start: from their start to the last
/// acknowledgement, acknowledgements per second and Redis's work per task.
pub async fn d7(server: &RedisServer, inputs: &Inputs) -> Fields {
    let storage = storage(server).await;
    let n = inputs.n;
    for chunk in (0..n).collect::<Vec<_>>().chunks(BATCH) {
        push_all(&storage, chunk.iter().map(|&i| task(&inputs.keys, i, 0)).collect()).await;
    }
    let shared = Arc::new(Shared { sink: Sink::new(n), due_us: (0..n).map(|_| Default::default()).collect() });
    // Due by apalis's clock (whole seconds, rounded up): wait for that second to pass.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let work = server::Work::read(server);
    let started = Instant::now();
    let workers = start_workers(&storage, shared.clone());
    let all = shared.sink.wait_all(crate::D3_LIMIT).await;
    let wall_s = wait_acked(server, all).await.map_or(-1.0, |_| started.elapsed().as_secs_f64());
    let cpu = work.per_task(server, n);
    stop(workers).await;
    crate::d7_fields(&shared.sink, wall_s, n).into_iter().chain(cpu).collect()
}

/// Polls every 5 ms until apalis holds no pending task (scheduled, active or in flight).
async fn wait_acked(server: &RedisServer, all_handled: bool) -> Option<()> {
    if !all_handled {
        return None;
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let limit = Instant::now() + Duration::from_secs(30);
    while Instant::now() < limit {
        let (scheduled, active): (u64, u64) = redis::pipe()
            .zcard(format!("{QUEUE}:scheduled"))
            .llen(format!("{QUEUE}:active"))
            .query_async(&mut conn)
            .await
            .ok()?;
        let mut inflight = 0u64;
        for w in 0..workers() {
            inflight += redis::cmd("SCARD")
                .arg(format!("{QUEUE}:inflight:bench-worker-{w}"))
                .query_async::<u64>(&mut conn)
                .await
                .ok()?;
        }
        if scheduled + active + inflight == 0 {
            return Some(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

async fn stop(workers: Vec<Running>) {
    for (stop, join) in workers {
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), join).await;
    }
}

/// D5: 100,000 tasks an hour away and the four workers idle; the caller measures.
pub async fn d5_setup(server: &RedisServer, inputs: &Inputs) -> impl Sized {
    let storage = storage(server).await;
    for chunk in (0..inputs.n).collect::<Vec<_>>().chunks(BATCH) {
        push_all(&storage, chunk.iter().map(|&i| task(&inputs.keys, i, D5_DELAY_MS)).collect()).await;
    }
    let shared =
        Arc::new(Shared { sink: Sink::new(inputs.n), due_us: (0..inputs.n).map(|_| Default::default()).collect() });
    start_workers(&storage, shared)
}
