//! The durable benchmark's SQLite rival effectum 0.7, one measurement per run (`../common.rs` says how the
//! benchmark calls it), in its best normal configuration for these workloads:
//! - the queue as `Queue::new(path)` opens it: effectum's one writer thread takes the operations waiting and
//!   runs them in one transaction (group commit), readers come from a pool. Its connection asks for
//!   `PRAGMA journal = wal`, which names no pragma (SQLite ignores it), so the file stays in SQLite's rollback
//!   journal mode (`DELETE`) with `synchronous = NORMAL`: a commit syncs the journal and the database before it
//!   returns, a flush at every commit already. That is its default and its only durability (no option changes
//!   it), so `--durability=flush` changes nothing;
//! - a job's payload is the 32 bytes, its name the key (`JobBuilder::name`, not unique: effectum has no keyed
//!   insert); due times are Unix *seconds* in effectum, so the due time is rounded *up* to the next second;
//! - effectum's cancel takes the job's id (a UUID): the benchmark keeps the id each insert returned (what an
//!   application must keep to cancel by its own key) and cancels with `Queue::cancel_job(id)`;
//! - workers: one `Worker` per worker of the workload with `max_concurrency` = its handlers (default 1), the
//!   rest effectum's defaults (its pending-jobs monitor wakes the workers at the next due time; no polling).

#[allow(dead_code)]
#[path = "../../common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../../../compare/inputs.rs"]
mod compare_inputs;
#[allow(dead_code)]
#[path = "../../../durable/inputs.rs"]
mod inputs;
#[allow(dead_code)]
#[path = "../../../durable/lateness.rs"]
mod lateness;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effectum::{Job, JobRunner, Queue, RunningJob, Worker};
use time::OffsetDateTime;
use uuid::Uuid;

use common::{Rival, Shared};
use inputs::{concurrency, index_of, workers, PAYLOAD};

const JOB_TYPE: &str = "bench";

struct Effectum {
    queue: Queue,
    path: PathBuf,
}

/// Job `key`, due `delay_ms` from now: effectum's due second rounded up (never early).
fn job(key: &str, delay_ms: u64) -> Job {
    let due_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64 + delay_ms;
    let at = OffsetDateTime::from_unix_timestamp(due_ms.div_ceil(1000) as i64).expect("due time");
    Job::builder(JOB_TYPE).name(key).run_at(at).payload(PAYLOAD.as_bytes().to_vec()).build()
}

async fn handle(job: RunningJob, shared: Arc<Shared>) -> Result<(), effectum::Error> {
    shared.handle(index_of(job.name.as_deref().expect("a named job")));
    Ok(())
}

/// One query on a connection of the benchmark's own (effectum's rusqlite).
fn query(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("open effectum's file");
    conn.busy_timeout(Duration::from_secs(5)).expect("busy timeout");
    conn.query_row(sql, [], |r| r.get(0)).expect("effectum query")
}

impl Rival for Effectum {
    type Id = Uuid;
    type Running = Vec<Worker>;
    const WHOLE_SECONDS: bool = true;

    async fn open(dir: &Path, _flush: bool) -> Effectum {
        let path = dir.join("effectum.db");
        let queue = Queue::new(&path).await.expect("effectum queue");
        Effectum { queue, path }
    }

    async fn schedule(&self, _i: usize, key: &str, delay_ms: u64) -> Uuid {
        self.queue.add_job(job(key, delay_ms)).await.expect("effectum add_job")
    }

    async fn schedule_many(&self, keys: &[String], items: &[(usize, u64)]) {
        let jobs = items.iter().map(|&(i, d)| job(&keys[i], d)).collect();
        self.queue.add_jobs(jobs).await.expect("effectum add_jobs");
    }

    async fn cancel(&self, _i: usize, _key: &str, id: Uuid) -> bool {
        self.queue.cancel_job(id).await.is_ok()
    }

    async fn checkpoint(&self) {
        // A rollback-journal file has no WAL; say so if it ever has one.
        let path = self.path.clone();
        let mode = tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&path).expect("open effectum's file");
            let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("journal_mode");
            if mode.eq_ignore_ascii_case("wal") {
                let _: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0)).expect("checkpoint");
            }
            mode
        })
        .await
        .expect("checkpoint");
        eprintln!("  effectum's journal mode: {mode}");
    }

    async fn start(&self, shared: Arc<Shared>) -> Vec<Worker> {
        let mut running = Vec::new();
        for _ in 0..workers() {
            let runner = JobRunner::builder(JOB_TYPE, handle).build();
            let worker = Worker::builder(&self.queue, shared.clone())
                .max_concurrency(concurrency() as u16)
                .jobs([runner])
                .build()
                .await
                .expect("effectum worker");
            running.push(worker);
        }
        running
    }

    async fn left(&self) -> u64 {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || query(&path, "SELECT count(*) FROM active_jobs")).await.expect("count")
            as u64
    }

    async fn stop(&self, running: Vec<Worker>) {
        for worker in running {
            let _ = worker.unregister(Some(Duration::from_secs(10))).await;
        }
    }

    async fn close(self) {
        let _ = self.queue.close(Duration::from_secs(10)).await;
    }
}

fn main() {
    let args = common::Args::parse();
    match args.workload.as_str() {
        "D124" => common::run::<Effectum, _, _>(args, |a, i| common::d124::<Effectum>(a, i)),
        "D3" => common::run::<Effectum, _, _>(args, |a, i| common::d3::<Effectum>(a, i)),
        "D7" => common::run::<Effectum, _, _>(args, |a, i| common::d7::<Effectum>(a, i)),
        other => panic!("unknown workload {other:?}"),
    }
}
