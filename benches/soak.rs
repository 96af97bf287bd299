//! A churn soak: a steady 200,000 pending timers, scheduled, rescheduled, cancelled and fired
//! continuously by 4 tasks on a multi-thread runtime, checked for exactly-once and for memory
//! that stays flat.
//!
//! Each of the 4 tasks owns 50,000 keys (`soak-<n>`, and one key in eight long enough to be
//! stored behind an `Arc`). Every key always has a timer, due 100 ms to 10 s from when it was
//! set; each new timer of a key is a new *generation* of it, and its job knows its generation.
//! Every 10 ms each task reschedules 50 of its keys to a new random delay, cancels 25 and
//! schedules them again at once, and schedules again every key whose timer fired meanwhile (in
//! one `schedule_many` call when there are many). The program fails (exit code 1) if:
//! - a job runs before its deadline (the deadline its task recorded before the call, which is
//!   never later than the service's own), or runs twice for one generation, or runs after a
//!   cancel of its generation returned `true`;
//! - a call fails (no call in this pattern may: keys are never duplicated);
//! - after the run the ledger does not balance: every generation accepted ended exactly once,
//!   fired or cancelled or stopped, by the program's counts and by `Scheduler::stats`;
//! - the resident set after the warm-up rises above the highest resident set of the warm-up by
//!   more than [`RSS_TOLERANCE_PERCENT`] percent plus [`RSS_TOLERANCE_MIB`] MiB (Linux only).
//!
//! Every few seconds it prints the resident set, the lateness of the jobs run since the last
//! report (p50, p99, max; lateness is the job's start minus its recorded deadline, so it
//! includes the rounding up to the 1 ms tick), and the rates.
//!
//! ```sh
//! cargo bench -p tokio-timewheel-benches --bench soak -- --quick       # about 20 s
//! cargo bench -p tokio-timewheel-benches --bench soak -- --minutes 30
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_timewheel::{Error, Scheduler};

#[path = "process.rs"]
#[allow(dead_code)]
mod process;
use process::rss;

/// Timers pending at any time (less those between firing and being scheduled again).
const PENDING: usize = 200_000;
/// Churning tasks, each owning `PENDING / TASKS` keys.
const TASKS: usize = 4;
/// Delays are drawn uniformly from this range, in milliseconds.
const DELAY_MS: std::ops::Range<u64> = 100..10_000;
/// Each task's round: this often, this many reschedules and this many cancel-then-schedules.
const ROUND: Duration = Duration::from_millis(10);
const RESCHEDULES_PER_ROUND: usize = 50;
const CANCELS_PER_ROUND: usize = 25;
/// Freed keys scheduled again with one `schedule_many` call, when at least this many wait.
const BATCH_FROM: usize = 32;
/// How far the resident set may rise after the warm-up, over the warm-up's highest.
const RSS_TOLERANCE_PERCENT: u64 = 10;
const RSS_TOLERANCE_MIB: u64 = 8;

/// What the program knows about one key.
#[derive(Default)]
struct Slot {
    /// The generation of its current timer (1 for the first).
    generation: AtomicU64,
    /// Its current timer's deadline, in µs after `start`; never later than the service's.
    deadline_us: AtomicU64,
    /// The last generation whose job ran.
    fired: AtomicU64,
    /// The last generation cancelled by a call that returned `true`.
    cancelled: AtomicU64,
}

struct Soak {
    start: Instant,
    slots: Vec<Slot>,
    /// Lateness in µs of the jobs run since the last report, and over the whole run.
    window: Mutex<Histogram<u64>>,
    /// Generations accepted, jobs run, cancels that returned `true`.
    accepted: AtomicU64,
    ran: AtomicU64,
    cancelled: AtomicU64,
    rescheduled: AtomicU64,
    /// Violations: early, twice, after a cancel, failed calls.
    early: AtomicU64,
    twice: AtomicU64,
    after_cancel: AtomicU64,
    failed: AtomicU64,
}

impl Soak {
    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn key(slot: usize) -> String {
        if slot.is_multiple_of(8) {
            format!("soak-long-key-stored-behind-an-arc-{slot}")
        } else {
            format!("soak-{slot}")
        }
    }

    /// The job of generation `generation` of key `slot`: checks it and hands the key back to its
    /// task to be scheduled again.
    fn job(
        self: &Arc<Self>,
        slot: usize,
        generation: u64,
        freed: &mpsc::UnboundedSender<usize>,
    ) -> impl Fn(String) -> std::future::Ready<()> + Send + Sync + 'static {
        let (soak, freed) = (self.clone(), freed.clone());
        move |_key| {
            soak.fire(slot, generation);
            let _ = freed.send(slot);
            std::future::ready(())
        }
    }

    fn fire(&self, slot: usize, generation: u64) {
        let now = self.now_us();
        let s = &self.slots[slot];
        let deadline = s.deadline_us.load(SeqCst);
        if s.fired.swap(generation, SeqCst) >= generation {
            self.twice.fetch_add(1, Relaxed);
            eprintln!("key {slot}: generation {generation} ran twice (or after a later one)");
        }
        if s.cancelled.load(SeqCst) == generation {
            self.after_cancel.fetch_add(1, Relaxed);
            eprintln!("key {slot}: generation {generation} ran after its cancel returned true");
        }
        // The recorded deadline belongs to this generation unless the key was scheduled again
        // since, which waits for this job to hand it back.
        if s.generation.load(SeqCst) == generation && now < deadline {
            self.early.fetch_add(1, Relaxed);
            eprintln!("key {slot}: generation {generation} ran {} µs early", deadline - now);
        }
        let late = now.saturating_sub(deadline).max(1);
        self.window.lock().unwrap().saturating_record(late);
        self.ran.fetch_add(1, Relaxed);
    }

    fn fail(&self, what: &str, error: &Error) {
        if self.failed.fetch_add(1, Relaxed) < 10 {
            eprintln!("{what} failed: {error}");
        }
    }

    /// Starts the next generation of `slot` due `delay_ms` from now; returns it with its job.
    fn next_generation(
        self: &Arc<Self>,
        slot: usize,
        delay_ms: u64,
        freed: &mpsc::UnboundedSender<usize>,
    ) -> impl Fn(String) -> std::future::Ready<()> + Send + Sync + 'static {
        let s = &self.slots[slot];
        s.deadline_us.store(self.now_us() + delay_ms * 1000, SeqCst);
        let generation = s.generation.fetch_add(1, SeqCst) + 1;
        self.job(slot, generation, freed)
    }
}

/// xorshift64*: the run needs no dependency for its randomness.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn delay_ms(&mut self) -> u64 {
        DELAY_MS.start + self.below(DELAY_MS.end - DELAY_MS.start)
    }
}

/// One churning task: keys `first..first + count`, until `until`.
async fn churn(soak: Arc<Soak>, timer: Scheduler, task: usize, until: Instant) {
    let count = PENDING / TASKS;
    let first = task * count;
    let mut random = Random(0x9E37_79B9_7F4A_7C15 ^ (task as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    let (freed_tx, mut freed) = mpsc::unbounded_channel();
    let keys: Vec<String> = (first..first + count).map(Soak::key).collect();
    // Whether the task believes the key's timer pending: a fired one is not, until scheduled again.
    let mut pending = vec![false; count];

    // The first generation of every key, spread over the delay range.
    for slots in (0..count).collect::<Vec<_>>().chunks(1024) {
        let items: Vec<_> = slots
            .iter()
            .map(|&i| {
                let delay = random.delay_ms();
                (keys[i].as_str(), Duration::from_millis(delay), soak.next_generation(first + i, delay, &freed_tx))
            })
            .collect();
        for (result, &i) in timer.schedule_many(items).await.into_iter().zip(slots) {
            match result {
                Ok(()) => {
                    soak.accepted.fetch_add(1, Relaxed);
                    pending[i] = true;
                }
                Err(e) => soak.fail("schedule_many", &e),
            }
        }
    }

    let mut round = tokio::time::interval(ROUND);
    round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut back: Vec<usize> = Vec::new();
    while Instant::now() < until {
        round.tick().await;
        // Keys whose timers fired: schedule them again.
        back.clear();
        while let Ok(slot) = freed.try_recv() {
            back.push(slot - first);
        }
        if back.len() >= BATCH_FROM {
            let items: Vec<_> = back
                .iter()
                .map(|&i| {
                    let delay = random.delay_ms();
                    (keys[i].as_str(), Duration::from_millis(delay), soak.next_generation(first + i, delay, &freed_tx))
                })
                .collect();
            for (result, &i) in timer.schedule_many(items).await.into_iter().zip(&back) {
                pending[i] = result.is_ok();
                match result {
                    Ok(()) => _ = soak.accepted.fetch_add(1, Relaxed),
                    Err(e) => soak.fail("schedule_many", &e),
                }
            }
        } else {
            for &i in &back {
                let delay = random.delay_ms();
                let job = soak.next_generation(first + i, delay, &freed_tx);
                pending[i] = schedule(&soak, &timer, &keys[i], delay, job).await;
            }
        }

        for _ in 0..RESCHEDULES_PER_ROUND {
            let i = random.below(count as u64) as usize;
            if !pending[i] {
                continue;
            }
            let delay = random.delay_ms();
            let s = &soak.slots[first + i];
            // The recorded deadline stays at or before the service's: the earlier of the two
            // while the move is under way, the new one once it is done.
            let new_deadline = soak.now_us() + delay * 1000;
            s.deadline_us.fetch_min(new_deadline, SeqCst);
            match timer.reschedule(&keys[i], Duration::from_millis(delay)).await {
                Ok(()) => {
                    s.deadline_us.store(new_deadline, SeqCst);
                    soak.rescheduled.fetch_add(1, Relaxed);
                }
                // It fired meanwhile: its job hands the key back.
                Err(Error::NotFound) => pending[i] = false,
                Err(e) => soak.fail("reschedule", &e),
            }
        }

        for _ in 0..CANCELS_PER_ROUND {
            let i = random.below(count as u64) as usize;
            if !pending[i] {
                continue;
            }
            let s = &soak.slots[first + i];
            let generation = s.generation.load(SeqCst);
            if timer.cancel(&keys[i]).await {
                s.cancelled.store(generation, SeqCst);
                soak.cancelled.fetch_add(1, Relaxed);
                if s.fired.load(SeqCst) == generation {
                    soak.after_cancel.fetch_add(1, Relaxed);
                    eprintln!("key {}: generation {generation} ran, yet its cancel returned true", first + i);
                }
                let delay = random.delay_ms();
                let job = soak.next_generation(first + i, delay, &freed_tx);
                pending[i] = schedule(&soak, &timer, &keys[i], delay, job).await;
            } else {
                // It fired meanwhile: its job hands the key back.
                pending[i] = false;
            }
        }
    }
}

async fn schedule<F>(soak: &Soak, timer: &Scheduler, key: &str, delay_ms: u64, job: F) -> bool
where
    F: Fn(String) -> std::future::Ready<()> + Send + Sync + 'static,
{
    match timer.schedule(key, Duration::from_millis(delay_ms), job).await {
        // Dropping the `Scheduled` does not cancel the timer.
        Ok(_scheduled) => {
            soak.accepted.fetch_add(1, Relaxed);
            true
        }
        Err(e) => {
            soak.fail("schedule", &e);
            false
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let usage = "usage: soak [--quick | --minutes M]";
    // `cargo bench` adds `--bench` to the arguments of a benchmark without a harness.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let (mut run, mut warm_up, mut every) = (Duration::from_secs(60), Duration::from_secs(20), Duration::from_secs(5));
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                (run, warm_up, every) = (Duration::from_secs(20), Duration::from_secs(8), Duration::from_secs(2));
            }
            "--minutes" => {
                let minutes: f64 = args.next().and_then(|m| m.parse().ok()).expect(usage);
                run = Duration::from_secs_f64(minutes * 60.0);
                // A few rounds of every delay, and no more than a fifth of the run.
                warm_up = Duration::from_secs(120).min(run / 5);
                every = Duration::from_secs(if minutes >= 5.0 { 10 } else { 5 });
            }
            _ => panic!("{usage}"),
        }
    }

    let soak = Arc::new(Soak {
        start: Instant::now(),
        slots: (0..PENDING).map(|_| Slot::default()).collect(),
        window: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()),
        accepted: AtomicU64::new(0),
        ran: AtomicU64::new(0),
        cancelled: AtomicU64::new(0),
        rescheduled: AtomicU64::new(0),
        early: AtomicU64::new(0),
        twice: AtomicU64::new(0),
        after_cancel: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let timer = Scheduler::builder().start().expect("the service starts");
    let rss_before = rss();
    println!(
        "soak: {PENDING} pending, {TASKS} tasks on 4 worker threads ({} cores), delays {}..{} ms, \
         for {:.0} s (warm-up {:.0} s); RSS before {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        DELAY_MS.start,
        DELAY_MS.end,
        run.as_secs_f64(),
        warm_up.as_secs_f64(),
        rss_before.map_or("n/a".into(), |b| format!("{:.1} MiB", mib(b)))
    );

    let until = soak.start + run;
    let tasks: Vec<_> = (0..TASKS).map(|task| tokio::spawn(churn(soak.clone(), timer.clone(), task, until))).collect();

    let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut warm_peak = 0u64;
    let mut worst_after = 0u64;
    let mut rss_samples: Vec<(f64, u64)> = Vec::new();
    let mut last = (
        soak.ran.load(Relaxed),
        soak.accepted.load(Relaxed),
        soak.rescheduled.load(Relaxed),
        soak.cancelled.load(Relaxed),
    );
    let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
    while Instant::now() < until {
        ticker.tick().await;
        let t = soak.start.elapsed();
        let window =
            std::mem::replace(&mut *soak.window.lock().unwrap(), Histogram::new_with_bounds(1, 60_000_000, 3).unwrap());
        total.add(&window).unwrap();
        let now = (
            soak.ran.load(Relaxed),
            soak.accepted.load(Relaxed),
            soak.rescheduled.load(Relaxed),
            soak.cancelled.load(Relaxed),
        );
        let per_s = |a: u64, b: u64| (a - b) as f64 / every.as_secs_f64() / 1000.0;
        let rss_now = rss().unwrap_or(0);
        let phase = if t <= warm_up {
            warm_peak = warm_peak.max(rss_now);
            "warm-up"
        } else {
            worst_after = worst_after.max(rss_now);
            rss_samples.push((t.as_secs_f64(), rss_now));
            "steady"
        };
        println!(
            "t={:>6.0}s {phase:<7} RSS {:>7.1} MiB  pending {:>6}  late p50 {:>5.2} p99 {:>6.2} max {:>7.2} ms  \
             k/s: fired {:>5.1} sched {:>5.1} resched {:>5.1} cancel {:>5.1}",
            t.as_secs_f64(),
            mib(rss_now),
            timer.stats().pending,
            window.value_at_quantile(0.5) as f64 / 1e3,
            window.value_at_quantile(0.99) as f64 / 1e3,
            window.max() as f64 / 1e3,
            per_s(now.0, last.0),
            per_s(now.1, last.1),
            per_s(now.2, last.2),
            per_s(now.3, last.3),
        );
        last = now;
    }
    for task in tasks {
        task.await.expect("a churning task panicked");
    }

    // Every timer still pending ends as stopped; then the ledger must balance.
    timer.flush().await;
    let stopped = timer.stop().await as u64;
    tokio::time::sleep(Duration::from_millis(200)).await;
    total.add(&*soak.window.lock().unwrap()).unwrap();
    let stats = timer.stats();
    let (accepted, ran, cancelled) = (soak.accepted.load(SeqCst), soak.ran.load(SeqCst), soak.cancelled.load(SeqCst));
    let mut failures = Vec::new();
    for (what, n) in [
        ("jobs ran before their deadline", soak.early.load(SeqCst)),
        ("generations ran twice", soak.twice.load(SeqCst)),
        ("jobs ran after their cancel returned true", soak.after_cancel.load(SeqCst)),
        ("calls failed", soak.failed.load(SeqCst)),
    ] {
        if n > 0 {
            failures.push(format!("{n} {what}"));
        }
    }
    if accepted != ran + cancelled + stopped {
        failures.push(format!("{accepted} accepted != {ran} ran + {cancelled} cancelled + {stopped} stopped"));
    }
    if (stats.scheduled, stats.fired, stats.cancelled, stats.stopped, stats.pending)
        != (accepted, ran, cancelled, stopped, 0)
    {
        failures.push(format!("stats {stats:?} disagree with the program's counts"));
    }

    // The resident set after the warm-up against the warm-up's highest, and its trend.
    let allowed = warm_peak + warm_peak * RSS_TOLERANCE_PERCENT / 100 + (RSS_TOLERANCE_MIB << 20);
    let slope = slope_mib_per_hour(&rss_samples);
    if let Some(before) = rss_before {
        println!(
            "RSS: {:.1} MiB before, warm-up peak {:.1} MiB, highest after {:.1} MiB (allowed {:.1}), trend {:+.2} MiB/h",
            mib(before),
            mib(warm_peak),
            mib(worst_after),
            mib(allowed),
            slope
        );
        if worst_after > allowed {
            failures.push(format!("RSS grew after the warm-up: {:.1} MiB > {:.1} MiB", mib(worst_after), mib(allowed)));
        }
    }
    println!(
        "{accepted} generations: {ran} fired, {cancelled} cancelled, {stopped} stopped; {} reschedules; \
         lateness p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        soak.rescheduled.load(SeqCst),
        total.value_at_quantile(0.5) as f64 / 1e3,
        total.value_at_quantile(0.99) as f64 / 1e3,
        total.value_at_quantile(0.999) as f64 / 1e3,
        total.max() as f64 / 1e3,
    );
    if failures.is_empty() {
        println!("soak passed");
    } else {
        for f in &failures {
            eprintln!("FAIL: {f}");
        }
        std::process::exit(1);
    }
}

/// The least-squares slope of the resident set over time, in MiB per hour.
fn slope_mib_per_hour(samples: &[(f64, u64)]) -> f64 {
    if samples.len() < 2 {
        return 0.0;
    }
    let n = samples.len() as f64;
    let (mt, mr) = samples.iter().fold((0.0, 0.0), |(t, r), &(ti, ri)| (t + ti / n, r + mib(ri) / n));
    let (cov, var) =
        samples.iter().fold((0.0, 0.0), |(c, v), &(ti, ri)| (c + (ti - mt) * (mib(ri) - mr), v + (ti - mt).powi(2)));
    if var == 0.0 {
        0.0
    } else {
        cov / var * 3600.0
    }
}
