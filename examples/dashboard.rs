//! Two live durable wheels and their dashboard.
//!
//! Starts a `redis-server` of its own (append-only file on, in a temp directory) unless
//! `REDIS_URL` names one, opens the wheels `shop` and `mail` there and puts a steady workload on
//! them. On `shop`: invoice reminders spread over the next hour (a JSON payload each), and a few
//! tasks a second due within half a minute, run by two workers (as two nodes would): order
//! reviews that take a moment, payments that fail now and then (retried, and after three
//! failures dead), exports that always fail (dead letters to requeue from the page). On `mail`:
//! newsletters over the next hours, and digests whose handler runs until it is told to stop
//! (the page's Cancel running). It serves the dashboard of both, with its actions, under
//! `/admin/timers` on 127.0.0.1 and prints the address and, every five seconds, the counts.
//! Ctrl-C stops it.
//!
//! Run it with `cargo run --release --features dashboard --example dashboard`. `PORT` picks the
//! port (else a free one).

#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_server::RedisServer;
use tokio_timewheel::durable::dashboard::{self, Dashboard};
use tokio_timewheel::durable::{DurableScheduler, Task, Worker};

/// How often new tasks are scheduled, and how many each time.
const EVERY: Duration = Duration::from_millis(250);
const BATCH: u64 = 6;
/// The invoice reminders spread over the next hour at the start.
const REMINDERS: u64 = 400;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_server, url, name) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("using the Redis at REDIS_URL ({url})");
            (None, url, format!("shop-{}", std::process::id()))
        }
        Err(_) => match RedisServer::start() {
            Some(server) => {
                println!("started redis-server on {}, data in {}", server.url(), server.dir().display());
                let url = server.url();
                (Some(server), url, "shop".to_owned())
            }
            None => {
                eprintln!(
                    "this example needs a redis-server (6.2 or later): {}, or set REDIS_URL to a running one",
                    redis_server::INSTALL_HINT
                );
                std::process::exit(2);
            }
        },
    };
    let timers = DurableScheduler::builder(&url, &name)
        .tick(Duration::from_millis(100))
        .slots(600)
        .partitions(2)
        .max_attempts(3)
        .backoff(Duration::from_millis(500))
        .lease(Duration::from_secs(10))
        .concurrency(16)
        .connect()
        .await?;

    let mail =
        DurableScheduler::builder(&url, format!("mail{}", name.strip_prefix("shop").unwrap_or(""))).connect().await?;

    // Two workers, as two nodes would run them, and one for the mail.
    let mut workers: Vec<Worker> = (0..2).map(|_| timers.run(handle)).collect();
    workers.push(mail.run(send_mail));

    let port: u16 = match std::env::var("PORT") {
        Ok(port) if !port.is_empty() => {
            port.parse().map_err(|_| format!("PORT must be a port number, not {port:?}"))?
        }
        _ => 0,
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let address = listener.local_addr()?;
    let page = Dashboard::new(timers.clone()).wheel(mail.clone()).actions(true).router();
    let app =
        axum::Router::new().route("/", axum::routing::get(|| async { "the shop; its timers are at /admin/timers/" }));
    let app = dashboard::mount(app, "/admin/timers", page);
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("the dashboard of the wheels {name:?} and mail: http://{address}/admin/timers/  (Ctrl-C stops)");

    let reminders = (0..REMINDERS).map(|i| {
        let delay = Duration::from_secs(30 + (3570 * i / REMINDERS));
        let payload = format!(r#"{{"invoice":{i},"customer":"customer-{}","total_cents":{}}}"#, i % 37, 1000 + i * 7);
        (format!("invoice-{i}:remind"), delay, payload.into_bytes())
    });
    for result in timers.schedule_many(reminders).await? {
        if let Err(e) = result {
            println!("a reminder was not scheduled: {e}");
        }
    }

    let letters = (0..200u64).map(|i| {
        let kind = if i % 20 == 0 { "digest" } else { "newsletter" };
        (format!("{kind}-{i}"), Duration::from_secs(if kind == "digest" { 5 + i } else { 600 + i * 60 }), Vec::new())
    });
    for result in mail.schedule_many(letters).await? {
        if let Err(e) = result {
            println!("a letter was not scheduled: {e}");
        }
    }

    let load = tokio::spawn(workload(timers.clone()));
    let report = tokio::spawn(report(timers.clone()));
    tokio::signal::ctrl_c().await?;
    println!("stopping: the handlers in flight finish first");
    load.abort();
    report.abort();
    for worker in workers {
        worker.shutdown().await;
    }
    Ok(())
}

/// The handler: what a task's key says it is.
async fn handle(task: Task) -> Result<(), String> {
    let roll = random() % 100;
    match task.key().split('-').next().unwrap_or("") {
        "order" => {
            tokio::time::sleep(Duration::from_millis(50 + random() % 400)).await;
            Ok(())
        }
        "payment" if roll < 35 => {
            Err(format!("card declined on attempt {}: the issuer answered 05 (do not honour)", task.attempt()))
        }
        "export" => Err("the export bucket refused the upload: 507 insufficient storage".to_owned()),
        _ => Ok(()),
    }
}

/// The mail's handler: a digest runs until the page's Cancel running stops it (or ten minutes).
async fn send_mail(task: Task) -> Result<(), String> {
    if task.key().starts_with("digest") {
        let stop = task.cancel_token();
        tokio::select! {
            () = stop.cancelled() => return Err("stopped from the dashboard".to_owned()),
            () = tokio::time::sleep(Duration::from_secs(600)) => {}
        }
    }
    Ok(())
}

/// A few tasks every [`EVERY`], due within half a minute; every tenth round, the reviews of
/// twenty rounds before are cancelled (those that have not run yet).
async fn workload(timers: DurableScheduler) {
    let mut every = tokio::time::interval(EVERY);
    for round in 0u64.. {
        every.tick().await;
        let batch: Vec<(String, Duration, Vec<u8>)> = (round * BATCH..(round + 1) * BATCH)
            .map(|n| (format!("{}-{n}", kind(n)), Duration::from_millis(random() % 30_000), Vec::new()))
            .collect();
        if let Err(e) = timers.schedule_many(batch).await {
            println!("scheduling failed: {e}");
        }
        if round % 10 == 0 && round >= 20 {
            let old = (round - 20) * BATCH..(round - 19) * BATCH;
            let reviews: Vec<String> = old.filter(|&n| kind(n) == "order").map(|n| format!("order-{n}")).collect();
            if let Err(e) = timers.cancel_many(reviews).await {
                println!("cancelling failed: {e}");
            }
        }
    }
}

/// What the `n`th task is: mostly order reviews, a third payments, one in forty an export.
fn kind(n: u64) -> &'static str {
    match n % 40 {
        0 => "export",
        k if k % 3 == 0 => "payment",
        _ => "order",
    }
}

/// The wheel's counts every five seconds.
async fn report(timers: DurableScheduler) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        match timers.stats().await {
            Ok(s) => println!(
                "waiting {:5}  ready {:3}  running {:3}  dead {:3} | acked {:6}  retried {:5}  lateness p99 {:?}",
                s.waiting,
                s.ready,
                s.in_flight,
                s.dead,
                s.acked,
                s.retried,
                timers.lateness().p99
            ),
            Err(e) => println!("could not read the counts: {e}"),
        }
    }
}

/// A small random number (xorshift, seeded from the clock): the workload needs variety, not
/// quality.
fn random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Relaxed);
    if x == 0 {
        x = SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Relaxed);
    x
}
