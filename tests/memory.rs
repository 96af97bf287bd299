//! Memory comes back after a burst: measured as bytes allocated (a counting global allocator),
//! not RSS, so the figures are the crate's own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use tokio_timewheel::{Scheduler, WheelKind};

struct Counting;

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

std::thread_local! {
    /// Allocations made by this thread (tests run on threads of their own).
    static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        ALLOCATED.fetch_add(layout.size() as isize, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size() as isize, Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocated() -> isize {
    ALLOCATED.load(Relaxed)
}

/// The allocations this thread makes in `f`.
fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = ALLOCATIONS.with(|n| n.get());
    let r = f();
    (ALLOCATIONS.with(|n| n.get()) - before, r)
}

/// A push-back through `schedule_or_reset` builds no timer: with its (short) key pending, the
/// call allocates nothing, the scheduler's or a queue's; arming the key allocates the job's box.
#[test]
fn a_push_back_builds_no_timer() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let timer = Scheduler::builder().start().unwrap();
        let state = std::sync::Arc::new(7);
        let job = |state: std::sync::Arc<i32>| move |_: String| async move { drop(state) };
        let idle = Duration::from_secs(30);
        let (armed, future) = allocations(|| timer.schedule_or_reset("conn-7", idle, job(state.clone())));
        assert!(future.await.unwrap());
        assert!(armed >= 1, "arming boxes the job: {armed} allocations");
        let (pushed, future) = allocations(|| timer.schedule_or_reset("conn-7", idle, job(state.clone())));
        assert!(!future.await.unwrap());
        assert_eq!(pushed, 0, "a push-back allocated");

        let (queue, _expired) = timer.queue::<String>();
        let (armed, future) = allocations(|| queue.schedule_or_reset("conn-7", idle, "seven".to_string()));
        assert!(future.await.unwrap());
        assert!(armed >= 2, "the value and its delivery's box: {armed} allocations");
        let value = "seven".to_string();
        let (pushed, future) = allocations(|| queue.schedule_or_reset("conn-7", idle, value));
        assert!(!future.await.unwrap());
        assert_eq!(pushed, 0, "a queue's push-back allocated");
    });
}

const BURST: usize = 200_000;

/// How the burst ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Fire,
    /// Cancel one timer in `every`.
    Cancel {
        every: usize,
    },
}

/// Runs a burst of timers through a fresh service and returns the bytes it allocated (above the
/// idle service's) at its peak, once the burst has ended and the service has had a turn, and
/// after `shrink_to_fit`.
fn burst(kind: WheelKind, end: End) -> (isize, isize, isize) {
    burst_of(kind, end, "burst-")
}

/// [`burst`] with keys `{prefix}{i}`.
fn burst_of(kind: WheelKind, end: End, prefix: &str) -> (isize, isize, isize) {
    // The count is the process's: one burst at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let timer = Scheduler::builder().wheel(kind).start().unwrap();
        let keys: Vec<String> = (0..BURST).map(|i| format!("{prefix}{i}")).collect();
        timer.flush().await;
        let idle = allocated();
        // Spread over 2 s so that no one advance fires a large share: the actor's own buffers
        // stay small and what is measured is the shards'.
        for (c, chunk) in keys.chunks(1_024).enumerate() {
            let items = chunk.iter().enumerate().map(|(i, key)| {
                (key.as_str(), Duration::from_micros(((c * 1_024 + i) * 10) as u64 + 1_000), |_: String| async {})
            });
            assert!(timer.schedule_many(items).await.iter().all(Result::is_ok));
        }
        let peak = allocated() - idle;
        match end {
            End::Fire => {
                tokio::time::sleep(Duration::from_secs(3)).await;
                assert_eq!(timer.len(), 0);
            }
            End::Cancel { every } => {
                let cancel: Vec<&String> =
                    keys.iter().enumerate().filter(|(i, _)| i % every == 0).map(|(_, k)| k).collect();
                timer.cancel_many(cancel).await;
                assert_eq!(timer.len(), BURST - BURST.div_ceil(every));
            }
        }
        timer.flush().await;
        let after = allocated() - idle;
        timer.shrink_to_fit().await;
        let shrunk = allocated() - idle;
        (peak, after, shrunk)
    })
}

/// A fired burst's room goes back as it fires: once the shards hold under a quarter of their
/// room, each moves what is left into a wheel and key map of its size.
#[test]
fn a_fired_burst_gives_its_memory_back_by_itself() {
    for kind in [WheelKind::Hierarchical, WheelKind::Rounds] {
        let (peak, after, shrunk) = burst(kind, End::Fire);
        eprintln!("{kind:?}: peak {peak} after {after} shrunk {shrunk}");
        assert!(peak > 10_000_000, "{kind:?}: 200,000 timers take some room: {peak} bytes");
        assert!(after < peak / 10, "{kind:?}: {after} of {peak} bytes still held once every timer fired");
    }
}

/// So does a cancelled one, at the service's next wake-up.
#[test]
fn a_cancelled_burst_gives_its_memory_back_at_the_next_wake_up() {
    let (peak, after, _) = burst(WheelKind::Hierarchical, End::Cancel { every: 1 });
    assert!(after < peak / 10, "{after} of {peak} bytes still held once every timer but one was cancelled");
}

/// A cancelled timer's long key, which has an allocation of its own (short keys are stored
/// inline), is freed when its entry is swept, as its job was at the cancel.
#[test]
fn a_cancelled_burst_of_long_keys_gives_their_memory_back() {
    let (peak, after, _) =
        burst_of(WheelKind::Hierarchical, End::Cancel { every: 1 }, "a-key-too-long-to-be-stored-inline-");
    assert!(after < peak / 10, "{after} of {peak} bytes still held once every timer but one was cancelled");
}

/// A shard that keeps more than a quarter of its room keeps the room, until `shrink_to_fit`
/// sizes its wheel and key map to the timers left.
#[test]
fn shrink_to_fit_gives_back_what_a_partial_cancel_left() {
    let (peak, after, shrunk) = burst(WheelKind::Hierarchical, End::Cancel { every: 3 });
    eprintln!("peak {peak} after {after} shrunk {shrunk}");
    assert!(after > peak * 3 / 4, "two thirds of the timers left: the room stays ({after} of {peak})");
    assert!(shrunk < after * 3 / 4, "{shrunk} of {after} bytes held after shrink_to_fit");
}
