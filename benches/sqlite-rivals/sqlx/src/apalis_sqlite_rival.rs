//! apalis-sqlite 1.0 in its best normal configuration for these workloads:
//! - the file in WAL mode with the pragmas of apalis's own `SqliteStorage::setup` on every connection of the pool
//!   (`temp_store = MEMORY`, `cache_size = 64000`, `journal_size_limit = 64 MiB`, and `synchronous = OFF`: setup
//!   runs its pragmas on whichever one connection of the pool it gets, so the benchmark sets them on each);
//!   `--durability=flush` sets `synchronous = FULL` instead (a flush of the WAL at every commit). SQLx's pool
//!   otherwise as `SqlitePool::connect` makes it (up to 10 connections), with a 5 s busy timeout (SQLx's default);
//! - a task is a `String` (the 32-byte payload; JSON adds two quotes); its key is apalis's idempotency key (the
//!   insert is `ON CONFLICT (job_type, idempotency_key) DO NOTHING`, a unique index), its id a ULID that carries
//!   the task's index (apalis-sqlite reads ids back as ULIDs);
//! - run times are Unix *seconds* in apalis: the due time is rounded *up* to the next second
//!   (`run_at_timestamp`), which is what a user who must not run early has to do;
//! - workers poll every 100 ms (`poll_with_interval`; without a strategy a worker with nothing ready looks again
//!   only at its 30 s heartbeat) and fetch up to 100 tasks a poll (`batch_size`, default 10), with the workload's
//!   handlers in flight each (`concurrency`);
//! - apalis-sqlite has no cancel call (its docs name none; `kill` ends only a task a worker holds), so D4 deletes
//!   the pending task by its key from apalis's own table, one statement on the unique index
//!   (`DELETE FROM Jobs WHERE job_type = ? AND idempotency_key = ? AND status = 'Pending'`).

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_sqlite::{Config, SqliteStorage};
use riverqueue::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use riverqueue::sqlx::SqlitePool;
use ulid::Ulid;

use crate::common::{Rival, Shared};
use crate::inputs::{concurrency, workers, PAYLOAD};

const QUEUE: &str = "bench";
const POLL: Duration = Duration::from_millis(100);
const FETCH_BATCH: usize = 100;

pub struct Apalis {
    pool: SqlitePool,
    storage: SqliteStorage<String>,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The task for index `i` (key `key`), due `delay_ms` from now: apalis's due second rounded up (never early).
fn task(i: usize, key: &str, delay_ms: u64) -> Task<String> {
    let now = now_ms();
    TaskBuilder::new(PAYLOAD.to_string())
        .task_id(TaskId::from_ulid(Ulid::from_parts(now, i as u128)))
        .idempotency_key(key)
        .run_at_timestamp((now + delay_ms).div_ceil(1000))
        .build()
}

async fn handle(_payload: String, id: TaskId, shared: Data<Arc<Shared>>) -> Result<(), BoxDynError> {
    let i = id.as_ulid().expect("apalis-sqlite ids are ULIDs").random() as usize;
    shared.handle(i);
    Ok(())
}

/// A running worker: sending on `stop` (or dropping it) shuts it down.
type Running = (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>);

impl Rival for Apalis {
    type Id = ();
    type Running = Vec<Running>;
    const WHOLE_SECONDS: bool = true;

    async fn open(dir: &Path, flush: bool) -> Apalis {
        let path = dir.join("apalis.db");
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .expect("sqlite URL")
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if flush { SqliteSynchronous::Full } else { SqliteSynchronous::Off })
            .pragma("temp_store", "MEMORY")
            .pragma("cache_size", "64000")
            .pragma("journal_size_limit", "67108864")
            .busy_timeout(Duration::from_secs(5));
        // apalis's setup (its migrations, WAL), then a fresh pool: setup's own pragmas went to one connection.
        let pool = SqlitePoolOptions::new().connect_with(options.clone()).await.expect("apalis-sqlite pool");
        SqliteStorage::setup(&pool).await.expect("apalis-sqlite setup");
        pool.close().await;
        let pool = SqlitePoolOptions::new().connect_with(options).await.expect("apalis-sqlite pool");
        let storage = SqliteStorage::new(&pool).with_config(Config::default().queue(QUEUE).batch_size(FETCH_BATCH));
        Apalis { pool, storage }
    }

    async fn schedule(&self, i: usize, key: &str, delay_ms: u64) {
        let mut storage = self.storage.clone();
        storage.push_task(task(i, key, delay_ms)).await.expect("apalis-sqlite push_task");
    }

    async fn schedule_many(&self, keys: &[String], items: &[(usize, u64)]) {
        let tasks: Vec<Task<String>> = items.iter().map(|&(i, d)| task(i, &keys[i], d)).collect();
        let mut storage = self.storage.clone();
        storage.push_all(futures::stream::iter(tasks)).await.expect("apalis-sqlite push_all");
    }

    async fn cancel(&self, _i: usize, key: &str, _id: ()) -> bool {
        let done = riverqueue::sqlx::query(
            "DELETE FROM Jobs WHERE job_type = ?1 AND idempotency_key = ?2 AND status = 'Pending'",
        )
        .bind(QUEUE)
        .bind(key)
        .execute(&self.pool)
        .await
        .expect("apalis-sqlite cancel");
        done.rows_affected() == 1
    }

    async fn checkpoint(&self) {
        riverqueue::sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await.expect("checkpoint");
    }

    async fn start(&self, shared: Arc<Shared>) -> Vec<Running> {
        (0..workers())
            .map(|w| {
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let worker = WorkerBuilder::new(format!("bench-worker-{w}"))
                    .backend(self.storage.clone().poll_with_interval(POLL))
                    .data(shared.clone())
                    .concurrency(concurrency())
                    .build(handle);
                let join = tokio::spawn(async move {
                    let asked = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let flag = asked.clone();
                    let run = worker.run_until(async move {
                        let _ = stopped.await;
                        flag.store(true, std::sync::atomic::Ordering::Relaxed);
                        Ok::<(), WorkerError>(())
                    });
                    if let Err(e) = run.await {
                        if !asked.load(std::sync::atomic::Ordering::Relaxed) {
                            eprintln!("  apalis-sqlite worker {w} stopped: {e}");
                        }
                    }
                });
                (stop, join)
            })
            .collect()
    }

    async fn left(&self) -> u64 {
        let (left,): (i64,) =
            riverqueue::sqlx::query_as("SELECT count(*) FROM Jobs WHERE job_type = ?1 AND status != 'Done'")
                .bind(QUEUE)
                .fetch_one(&self.pool)
                .await
                .expect("apalis-sqlite count");
        left as u64
    }

    async fn stop(&self, running: Vec<Running>) {
        for (stop, join) in running {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(10), join).await;
        }
    }
}
