//! A million timers created in a short time, then fired on time.
//!
//! Orders are re-checked at a random moment of the next ten seconds. They are scheduled with
//! `schedule_many` in batches of 1,024, and a tenth of them are cancelled by key with
//! `cancel_many`, as if the order had been paid. Every check that runs records how late it ran,
//! counted from the moment its batch was handed to the service: an upper bound, since the
//! service reads the clock for the batch a little later. The example prints progress as it goes
//! and the lateness percentiles at the end.
//!
//! Run it with `cargo run --release --example million` (about twelve seconds), or give the
//! number of timers and the spread in seconds: `cargo run --release --example million -- 200000 3`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_timewheel::{Error, Scheduler};

/// Timers per `schedule_many` / `cancel_many` call.
const BATCH: usize = 1_024;

/// Lateness histogram: buckets of 100 µs up to 100 ms, and one for anything later.
const BUCKET_US: u64 = 100;
const BUCKETS: usize = 1_000;

struct Checks {
    start: Instant,
    /// Each order's deadline, in microseconds after `start`.
    due_us: Vec<AtomicU64>,
    late: Vec<AtomicU64>,
    ran: AtomicU64,
    early: AtomicU64,
}

impl Checks {
    fn record(&self, key: &str) {
        let now_us = self.start.elapsed().as_micros() as u64;
        let index: usize = key.trim_start_matches("order-").parse().expect("keys are order-<n>");
        let due_us = self.due_us[index].load(Relaxed);
        if now_us < due_us {
            self.early.fetch_add(1, Relaxed);
        }
        let bucket = (now_us.saturating_sub(due_us) / BUCKET_US) as usize;
        self.late[bucket.min(BUCKETS)].fetch_add(1, Relaxed);
        self.ran.fetch_add(1, Relaxed);
    }

    /// The lateness under which a fraction `q` of the checks ran (the upper edge of its bucket).
    fn percentile(&self, q: f64) -> String {
        let counts: Vec<u64> = self.late.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return "n/a".into();
        }
        let target = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate().take(BUCKETS) {
            seen += count;
            if seen >= target {
                return format!("under {:.1} ms", ((bucket as u64 + 1) * BUCKET_US) as f64 / 1000.0);
            }
        }
        format!("over {} ms", BUCKETS as u64 * BUCKET_US / 1000)
    }
}

// One thread, as in the benchmarks: on a multi-thread runtime the scheduling task and the service
// compete for the cores of a small machine, and the lateness varies more from run to run.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: million [timers] [spread in seconds, at least 1]";
    let n: usize = args.next().map_or(Ok(1_000_000), |a| a.parse()).expect(usage);
    let spread_s: u64 = args.next().map_or(Ok(10), |a| a.parse()).expect(usage);
    let spread_us = spread_s.checked_mul(1_000_000).filter(|&us| us > 0).expect(usage);

    let checks = Arc::new(Checks {
        start: Instant::now(),
        due_us: (0..n).map(|_| AtomicU64::new(0)).collect(),
        late: (0..=BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        ran: AtomicU64::new(0),
        early: AtomicU64::new(0),
    });
    // Room for every timer from the start: no shard's key map is rehashed while the burst comes
    // in (each rehash would hold up the checks due meanwhile for milliseconds).
    let timer = Scheduler::builder().capacity(n).start()?;
    let check = {
        let checks = checks.clone();
        move |key: String| {
            checks.record(&key);
            async {}
        }
    };

    // A small xorshift generator, so the run needs no dependency and repeats itself.
    let mut state = 0x5EED_0001_u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };

    println!("scheduling {n} order checks over the next {spread_s} s ...");
    let keys: Vec<String> = (0..n).map(|i| format!("order-{i}")).collect();
    let began = Instant::now();
    for (chunk, names) in keys.chunks(BATCH).enumerate() {
        let delays: Vec<u64> = names.iter().map(|_| random() % spread_us).collect();
        let sent_us = checks.start.elapsed().as_micros() as u64;
        for (j, delay) in delays.iter().enumerate() {
            checks.due_us[chunk * BATCH + j].store(sent_us + delay, Relaxed);
        }
        let batch =
            names.iter().zip(&delays).map(|(key, &delay)| (key.as_str(), Duration::from_micros(delay), check.clone()));
        let refused: Vec<Error> = timer.schedule_many(batch).await.into_iter().filter_map(Result::err).collect();
        assert!(refused.is_empty(), "refused: {:?}", &refused[..refused.len().min(3)]);
        let done = (chunk + 1) * BATCH;
        if done % (256 * BATCH) < BATCH || done >= n {
            println!("  {:>9} scheduled in {:>6.0} ms", done.min(n), began.elapsed().as_secs_f64() * 1e3);
        }
    }

    // A tenth of the orders are paid meanwhile: their checks are cancelled by key.
    let paid: Vec<&str> = keys.iter().step_by(10).map(String::as_str).collect();
    let mut cancelled = 0;
    for names in paid.chunks(BATCH) {
        cancelled += timer.cancel_many(names.iter().copied()).await.into_iter().filter(|&c| c).count();
    }
    println!(
        "{cancelled} paid orders' checks cancelled ({} had run already); {} pending",
        paid.len() - cancelled,
        timer.stats().pending
    );

    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    while timer.stats().pending > 0 {
        ticker.tick().await;
        let stats = timer.stats();
        println!(
            "  t = {:>4.1} s: {:>9} run, {:>9} pending, p99 lateness so far {}",
            began.elapsed().as_secs_f64(),
            checks.ran.load(Relaxed),
            stats.pending,
            checks.percentile(0.99)
        );
    }
    timer.stop().await;

    let ran = checks.ran.load(Relaxed);
    assert_eq!(ran as usize + cancelled, n, "every check either ran once or was cancelled");
    println!(
        "{ran} checks ran, {} early; lateness p50 {}, p99 {}, p99.9 {}, all {}",
        checks.early.load(Relaxed),
        checks.percentile(0.5),
        checks.percentile(0.99),
        checks.percentile(0.999),
        checks.percentile(1.0)
    );
    Ok(())
}
