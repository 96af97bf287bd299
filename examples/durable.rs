//! Order reviews that outlive a crash of Redis itself.
//!
//! "Review the order 48 hours after delivery" cannot live in one process's memory: deploys and
//! crashes come sooner. Here the reviews live in a durable wheel in Redis, and three workers (as
//! three nodes would, each with its own connection) hand them to a handler. A few thousand
//! reviews are scheduled over a few seconds, due one to four seconds later; halfway through,
//! Redis is killed with SIGKILL and restarted on the same data directory. Every review whose
//! `schedule` returned `Ok` is still applied, once, and none before its time.
//!
//! Delivery is at least once: a review handed out just before the crash, whose acknowledgement
//! was lost with the connection, comes back after its lease. The handler is idempotent on the
//! key (it applies a review only if it was not applied yet), which is what makes that harmless;
//! the example counts such redeliveries separately.
//!
//! Beside the reviews it shows a recurring task (a sweep every second, five times, upserted as a
//! node does at every start, so that a restart replaces the series rather than adding one), a typed
//! payload (an audit record as JSON, read back with `Task::json`), and a task read back with
//! `get` before it fires.
//!
//! Run it with `cargo run --release --features redis --example durable` (about eight seconds).
//! It starts its own `redis-server` (append-only file on, in a temp directory) unless `REDIS_URL`
//! names one, in which case it uses a wheel of its own there and does not kill the server.

#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use redis_server::RedisServer;
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, Json, MissedRuns, Recurrence, Task, Worker};

/// A typed payload: what an audit of an order found.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Audit {
    order: usize,
    finding: String,
}

/// How many order reviews to schedule.
const ORDERS: usize = 3_000;
/// Over how long they are scheduled.
const SCHEDULING: Duration = Duration::from_secs(4);
/// How long Redis stays down.
const OUTAGE: Duration = Duration::from_secs(1);
/// The lease: a review handed out but not acknowledged comes back after this.
const LEASE: Duration = Duration::from_secs(3);

/// What the handlers did, shared by the three workers.
struct Reviews {
    /// Per order: 0 = not applied yet, 1 = applied.
    applied: Vec<AtomicU8>,
    /// Per order: the earliest time its review may run (`now + delay`, read before `schedule`).
    not_before_ms: Vec<AtomicU64>,
    /// Per order: whether its `schedule` returned `Ok`.
    scheduled: Vec<AtomicBool>,
    deliveries: AtomicU64,
    redeliveries: AtomicU64,
    early: AtomicU64,
    by_worker: [AtomicU64; 3],
    /// Runs of the recurring sweep, and audits read back from their JSON.
    sweeps: AtomicU64,
    audits: AtomicU64,
}

impl Reviews {
    /// The handler's body: apply the review once, whatever the number of deliveries (and count
    /// the sweeps and audits).
    fn review(&self, task: &Task, worker: usize) {
        if task.key() == "sweep" {
            self.sweeps.fetch_add(1, Relaxed);
            return;
        }
        if task.key().starts_with("audit:") {
            match task.json::<Audit>() {
                Ok(audit) => {
                    println!("audit of order {}: {} (attempt {})", audit.order, audit.finding, task.attempt());
                    self.audits.fetch_add(1, Relaxed);
                }
                Err(e) => println!("{}: not an audit: {e}", task.key()),
            }
            return;
        }
        let order: usize = task.key().trim_start_matches("order-").trim_end_matches(":review").parse().unwrap();
        self.deliveries.fetch_add(1, Relaxed);
        if millis(SystemTime::now()) < self.not_before_ms[order].load(Relaxed) {
            self.early.fetch_add(1, Relaxed);
        }
        if self.applied[order].swap(1, Relaxed) == 1 {
            self.redeliveries.fetch_add(1, Relaxed);
        } else {
            self.by_worker[worker].fetch_add(1, Relaxed);
        }
    }

    fn applied(&self) -> usize {
        self.applied.iter().filter(|a| a.load(Relaxed) == 1).count()
    }

    fn scheduled(&self) -> usize {
        self.scheduled.iter().filter(|s| s.load(Relaxed)).count()
    }

    /// Orders scheduled with `Ok` whose review never ran.
    fn missing(&self) -> usize {
        (0..ORDERS).filter(|&i| self.scheduled[i].load(Relaxed) && self.applied[i].load(Relaxed) == 0).count()
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A spread of delays from 1 s to 4 s without a random-number crate: an LCG is plenty here.
fn delay_of(order: usize) -> Duration {
    let x = (order as u64).wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 33;
    Duration::from_millis(1_000 + x % 3_000)
}

fn settings(url: &str, name: &str) -> DurableBuilder {
    DurableScheduler::builder(url, name)
        .tick(Duration::from_millis(100))
        .slots(600)
        .lease(LEASE)
        .max_attempts(5)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut server, url, name) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("using the Redis at REDIS_URL ({url}); it will not be killed, so this run shows no crash");
            (None, url, format!("orders-example-{}", std::process::id()))
        }
        Err(_) if !redis_server::installed() => {
            eprintln!(
                "this example needs a redis-server (6.2 or later): {}, or set REDIS_URL to a running one",
                redis_server::INSTALL_HINT
            );
            std::process::exit(2);
        }
        Err(_) => {
            let server = RedisServer::start().expect("redis-server is installed");
            println!(
                "started redis-server on {} (appendonly yes, appendfsync everysec), data in {}",
                server.url(),
                server.dir().display()
            );
            let url = server.url();
            (Some(server), url, "orders".to_string())
        }
    };

    let reviews = Arc::new(Reviews {
        applied: (0..ORDERS).map(|_| AtomicU8::new(0)).collect(),
        not_before_ms: (0..ORDERS).map(|_| AtomicU64::new(0)).collect(),
        scheduled: (0..ORDERS).map(|_| AtomicBool::new(false)).collect(),
        deliveries: AtomicU64::new(0),
        redeliveries: AtomicU64::new(0),
        early: AtomicU64::new(0),
        by_worker: Default::default(),
        sweeps: AtomicU64::new(0),
        audits: AtomicU64::new(0),
    });

    // Three workers, each on its own connection, as three nodes would be.
    let mut workers: Vec<Worker> = Vec::new();
    for w in 0..3 {
        let timers = settings(&url, &name).connect().await?;
        let reviews = reviews.clone();
        workers.push(timers.run(move |task: Task| {
            reviews.review(&task, w);
            std::future::ready(Ok::<(), std::io::Error>(()))
        }));
    }
    let timers = settings(&url, &name).connect().await?;

    // A recurring sweep (every second, five runs, each made up if Redis is away when it falls
    // due) and a typed audit, read back before it fires.
    let sweep = Recurrence::every(Duration::from_secs(1)).limit(5).missed(MissedRuns::Burst);
    timers.upsert_recurring("sweep", sweep, "sweep").await?;
    let audit = Audit { order: 42, finding: "shipped late, refund the postage".into() };
    timers.schedule("audit:42", Duration::from_secs(2), Json(&audit)).await?;
    if let Some(task) = timers.get("audit:42").await? {
        println!(
            "audit:42 is {:?}, due in {:?}, {} deliveries so far, payload {}",
            task.state(),
            task.due().duration_since(SystemTime::now()).unwrap_or_default(),
            task.attempt(),
            String::from_utf8_lossy(task.payload())
        );
    }

    let start = Instant::now();
    let redis_down = Arc::new(AtomicBool::new(false));
    let progress = tokio::spawn({
        let (reviews, redis_down) = (reviews.clone(), redis_down.clone());
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                println!(
                    "{:>5.1} s  scheduled {:>5}  reviewed {:>5}  redeliveries {:>3}  redis {}",
                    start.elapsed().as_secs_f64(),
                    reviews.scheduled(),
                    reviews.applied(),
                    reviews.redeliveries.load(Relaxed),
                    if redis_down.load(Relaxed) { "DOWN" } else { "up" },
                );
            }
        }
    });

    println!("scheduling {ORDERS} order reviews over {SCHEDULING:?}, each due 1-4 s later");
    // Halfway through the scheduling, while calls are in flight, Redis dies and comes back.
    let crash = server.take().map(|mut server| {
        let redis_down = redis_down.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SCHEDULING / 2).await;
            println!("--- SIGKILL to redis-server (pid {})", server.pid().unwrap_or(0));
            tokio::task::block_in_place(|| server.kill());
            redis_down.store(true, Relaxed);
            tokio::time::sleep(OUTAGE).await;
            tokio::task::block_in_place(|| server.restart());
            redis_down.store(false, Relaxed);
            println!("--- redis-server restarted on the same directory after {OUTAGE:?}");
            server
        })
    });

    // Orders arrive in small groups, each review scheduled by its own call (calls that meet the
    // outage retry until Redis is back, up to the connect timeout).
    const GROUP: usize = 20;
    let scheduling_started = tokio::time::Instant::now();
    for group in (0..ORDERS).step_by(GROUP) {
        let mut calls = tokio::task::JoinSet::new();
        for order in group..(group + GROUP).min(ORDERS) {
            let (timers, reviews) = (timers.clone(), reviews.clone());
            calls.spawn(async move {
                let delay = delay_of(order);
                reviews.not_before_ms[order].store(millis(SystemTime::now() + delay), Relaxed);
                match timers.schedule(format!("order-{order}:review"), delay, order.to_string()).await {
                    Ok(()) => reviews.scheduled[order].store(true, Relaxed),
                    Err(e) => println!("order-{order}: not scheduled, and the caller knows it: {e}"),
                }
            });
        }
        calls.join_all().await;
        let next = SCHEDULING.mul_f64((group + GROUP) as f64 / ORDERS as f64);
        tokio::time::sleep_until(scheduling_started + next).await;
    }
    let server = match crash {
        Some(crash) => Some(crash.await?),
        None => None,
    };

    // The last review is due 4 s after it was scheduled; one whose ack was lost in the crash
    // comes back after its lease.
    let deadline = Instant::now() + Duration::from_secs(4) + LEASE * 2;
    while reviews.missing() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    progress.abort();
    for worker in workers {
        worker.shutdown().await;
    }

    let (scheduled, missing, early) = (reviews.scheduled(), reviews.missing(), reviews.early.load(Relaxed));
    let by_worker: Vec<u64> = reviews.by_worker.iter().map(|n| n.load(Relaxed)).collect();
    println!();
    println!("scheduled with Ok   {scheduled}");
    println!("reviews applied     {} (by worker: {by_worker:?})", reviews.applied());
    println!("deliveries          {}", reviews.deliveries.load(Relaxed));
    println!(
        "redeliveries        {} (after an ack lost with Redis; the idempotent handler skipped them)",
        reviews.redeliveries.load(Relaxed)
    );
    println!("missing             {missing}");
    println!("early               {early}");
    println!(
        "sweeps              {} of 5, audits read back {}",
        reviews.sweeps.load(Relaxed),
        reviews.audits.load(Relaxed)
    );
    if missing > 0 || early > 0 {
        println!("FAILED: every scheduled review should fire once, none early");
        std::process::exit(1);
    }
    let across = if server.is_some() { ", across a SIGKILL of Redis" } else { "" };
    println!("every review scheduled with Ok was applied once, none early{across}");
    Ok(())
}
