//! Scale: N pending timers (10 million by default) in one service, what each costs in memory and
//! how long it takes to schedule them, one call per timer and in batches.
//!
//! Each way runs in a fresh child process of this program, so that neither inherits the other's
//! heap. It builds the keys (`conn-<i>`) first, then schedules N timers due one to two hours away
//! (none fires while measured, however slow the machine), printing progress, and reports:
//! - the time per timer, one `schedule` call each, or `schedule_many` with 1,024 per call, by the
//!   wall clock and in CPU time (user and system, all threads), which a busy machine inflates less;
//! - bytes per timer as the growth of the resident set (VmRSS, Linux) over the scheduling,
//!   and as the bytes the service holds allocated on the heap for them (counted by a global
//!   allocator that wraps the system's): the first includes the pages of tables freed when they
//!   grew, which the allocator keeps; the second does not.
//!
//! The job is a plain `fn`, which the service stores without allocating; a job that captures
//! data costs a boxed closure on top.
//!
//! ```sh
//! cargo bench -p tokio-timewheel-benches --bench scale              # 10,000,000 timers, about a minute
//! cargo bench -p tokio-timewheel-benches --bench scale -- 200000    # the short mode
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::time::Instant;
use tokio_timewheel::Scheduler;

#[path = "process.rs"]
mod process;
use process::{cpu_ns, rss};

/// Bytes allocated through the global allocator and not yet freed.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to `System` unchanged; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            ALLOCATED.fetch_sub(layout.size(), Relaxed);
            ALLOCATED.fetch_add(new_size, Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Timers per `schedule_many` call.
const BATCH: usize = 1_024;

async fn job(_key: String) {}

/// SplitMix64: delays that repeat from run to run, with no dependency.
fn delay(i: usize) -> Duration {
    let mut z = (i as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    Duration::from_millis(3_600_000 + z % 3_600_000)
}

/// Schedules `n` timers one way (in this process) and prints one `result` line for the parent.
async fn measure(n: usize, batched: bool) {
    let way = if batched { "schedule_many" } else { "schedule" };
    let keys: Vec<String> = (0..n).map(|i| format!("conn-{i}")).collect();
    let timer = Scheduler::builder().start().expect("the service starts");
    let (rss_before, heap_before) = (rss(), ALLOCATED.load(Relaxed));
    let progress_every = (n / 10).max(1);
    let (began, cpu_began) = (Instant::now(), cpu_ns());
    if batched {
        for (chunk, names) in keys.chunks(BATCH).enumerate() {
            let batch = names.iter().enumerate().map(|(j, key)| (key.as_str(), delay(chunk * BATCH + j), job));
            let refused = timer.schedule_many(batch).await.into_iter().filter(Result::is_err).count();
            assert_eq!(refused, 0, "every timer is accepted");
            let done = (chunk + 1) * BATCH;
            if done % progress_every < BATCH && done < n {
                progress(way, done, n, began);
            }
        }
    } else {
        for (i, key) in keys.iter().enumerate() {
            // Dropping the `Scheduled` does not cancel the timer.
            timer.schedule(key, delay(i), job).await.expect("every timer is accepted");
            if (i + 1) % progress_every == 0 && i + 1 < n {
                progress(way, i + 1, n, began);
            }
        }
    }
    let (elapsed, cpu) = (began.elapsed(), cpu_ns() - cpu_began);
    let (rss_after, heap_after) = (rss(), ALLOCATED.load(Relaxed));
    assert_eq!(timer.len(), n, "no timer has fired yet");
    let rss_per = match (rss_before, rss_after) {
        (Some(b), Some(a)) => format!("{:.1}", a.saturating_sub(b) as f64 / n as f64),
        _ => "n/a".into(),
    };
    println!(
        "result {way} n={n} ns_per_timer={:.0} cpu_ns_per_timer={:.0} total_s={:.2} rss_bytes_per_timer={rss_per} \
         heap_bytes_per_timer={:.1}",
        elapsed.as_nanos() as f64 / n as f64,
        cpu as f64 / n as f64,
        elapsed.as_secs_f64(),
        heap_after.saturating_sub(heap_before) as f64 / n as f64,
    );
    // Ending ten million timers takes a moment; the process exits right after.
    let stop = Instant::now();
    timer.stop().await;
    println!("  stopped {n} timers in {:.2} s", stop.elapsed().as_secs_f64());
}

fn progress(way: &str, done: usize, n: usize, began: Instant) {
    println!("  {way}: {done:>10} / {n} in {:>6.2} s", began.elapsed().as_secs_f64());
}

fn main() {
    let usage = "usage: scale [N]";
    // `cargo bench` adds `--bench` to the arguments of a benchmark without a harness.
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: usize = args.next().map_or(Ok(10_000_000), |a| a.replace('_', "").parse()).expect(usage);
    // A child measures one way; the parent runs one child per way.
    if let Some(way) = args.next() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(measure(n, way == "batched"));
        return;
    }
    println!("scale: {n} pending timers, due 1 h to 2 h away; one process per way");
    let exe = std::env::current_exe().expect("the program's own path");
    let mut failed = false;
    for way in ["single", "batched"] {
        let status = std::process::Command::new(&exe).arg(n.to_string()).arg(way).status().expect("the child starts");
        failed |= !status.success();
    }
    if failed {
        std::process::exit(1);
    }
}
