//! riverqueue 0.5 (River's Rust client, on its SQLite driver) in its best normal configuration for these
//! workloads:
//! - the pool as River's SQLite docs and example set it up: WAL and a 5 s busy timeout, SQLx's pool otherwise
//!   (up to 10 connections; `synchronous` is SQLx's and SQLite's default, FULL: "River uses the caller's pool as
//!   configured and doesn't change connection pragmas"), so its default durability is already a flush of the
//!   WAL at every commit and `--durability=flush` changes nothing;
//! - a job's arguments are `{"key": "order-{i}", "payload": <the 32 bytes>}`: River has no key of its own, and a
//!   handler needs the key; the key is not made unique (River's unique jobs would add a unique key and its index
//!   to every insert), so a schedule is a plain insert with `scheduled_at`;
//! - River's cancel takes its job id: the benchmark keeps the id each insert returned (what an application
//!   must keep to cancel by its own key) and cancels with `client.jobs().cancel(id)`;
//! - workers: one `Client` per worker of the workload, each working queue `default` with the workload's handlers
//!   (`QueueConfig::new(handlers)`), polling for jobs every 100 ms (`with_fetch_poll_interval`; River's default
//!   is 1 s, its fetch cooldown 100 ms) and, on the elected leader, making scheduled jobs available every 100 ms
//!   (`MaintenanceConfig::with_scheduler_interval`; default 5 s): the other stores' 100 ms. The inserts go
//!   through a client of their own with no workers, as a service's request handlers would hold one.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use riverqueue::jiff::{SignedDuration, Timestamp};
use riverqueue::migrate::SqliteMigrator;
use riverqueue::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use riverqueue::sqlx::SqlitePool;
use riverqueue::{
    Client, InsertOpts, Job, JobArgs, MaintenanceConfig, QueueConfig, RunHandle, WorkContext, WorkOutcome, Workers,
};
use serde::{Deserialize, Serialize};

use crate::common::{Rival, Shared};
use crate::inputs::{concurrency, index_of, workers, PAYLOAD};

const INTERVAL: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench")]
struct BenchJob {
    key: String,
    payload: String,
}

pub struct River {
    pool: SqlitePool,
    client: Client,
}

fn job(key: &str, delay_ms: u64) -> (BenchJob, InsertOpts) {
    let at = Timestamp::now() + SignedDuration::from_millis(delay_ms as i64);
    (BenchJob { key: key.to_string(), payload: PAYLOAD.to_string() }, InsertOpts::default().with_scheduled_at(at))
}

impl Rival for River {
    type Id = i64;
    type Running = Vec<(Client, RunHandle)>;
    const WHOLE_SECONDS: bool = false;

    async fn open(dir: &Path, _flush: bool) -> River {
        let path = dir.join("river.db");
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .expect("sqlite URL")
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new().connect_with(options).await.expect("riverqueue pool");
        SqliteMigrator::new(pool.clone()).migrate_up().await.expect("riverqueue migrations");
        let client = Client::builder(pool.clone()).build().expect("riverqueue insert client");
        River { pool, client }
    }

    async fn schedule(&self, _i: usize, key: &str, delay_ms: u64) -> i64 {
        let (args, opts) = job(key, delay_ms);
        self.client.insert(args).opts(opts).await.expect("riverqueue insert").id()
    }

    async fn schedule_many(&self, keys: &[String], items: &[(usize, u64)]) {
        let jobs: Vec<(BenchJob, InsertOpts)> = items.iter().map(|&(i, d)| job(&keys[i], d)).collect();
        self.client.insert_many(jobs).await.expect("riverqueue insert_many");
    }

    async fn cancel(&self, _i: usize, _key: &str, id: i64) -> bool {
        self.client.jobs().cancel(id).await.is_ok()
    }

    async fn checkpoint(&self) {
        riverqueue::sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await.expect("checkpoint");
    }

    async fn start(&self, shared: Arc<Shared>) -> Vec<(Client, RunHandle)> {
        let mut running = Vec::new();
        for _ in 0..workers() {
            let mut handlers = Workers::new();
            let shared = shared.clone();
            handlers
                .add_fn(move |_context: WorkContext, job: Job<BenchJob>| {
                    shared.handle(index_of(&job.args.key));
                    async { Ok::<_, std::convert::Infallible>(WorkOutcome::Complete) }
                })
                .expect("riverqueue worker");
            let client = Client::builder(self.pool.clone())
                .workers(handlers)
                .queue("default", QueueConfig::new(concurrency()).with_fetch_poll_interval(INTERVAL))
                .maintenance(MaintenanceConfig::default().with_scheduler_interval(INTERVAL))
                .build()
                .expect("riverqueue client");
            let handle = client.start().expect("riverqueue start");
            running.push((client, handle));
        }
        running
    }

    async fn left(&self) -> u64 {
        let (left,): (i64,) = riverqueue::sqlx::query_as(
            "SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')",
        )
        .fetch_one(&self.pool)
        .await
        .expect("riverqueue count");
        left as u64
    }

    async fn stop(&self, running: Vec<(Client, RunHandle)>) {
        for (_client, mut handle) in running {
            let _ = tokio::time::timeout(Duration::from_secs(10), handle.stop()).await;
        }
    }
}
