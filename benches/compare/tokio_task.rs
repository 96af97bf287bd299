//! `tokio-task`: one `tokio::spawn` + `sleep` per timer, `JoinHandle::abort` to cancel. The task knows its index
//! and calls the same sink as everyone else.
//!
//! "Really registered" needs every task to have polled its `Sleep` once (that is when the timer enters Tokio's
//! wheel), and "really released" needs every aborted task to have been dropped. Both are counted with one
//! atomic per event and a `Notify` when the count completes: a few ns against a task's several hundred.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant, Sleep};

use crate::inputs::{self, W12Inputs, W4_DELAY_MS};
use crate::measure::{self, IdleWindow, Rt, Snapshot, ROUNDS};
use crate::sink;
use crate::Workload;

const NAME: &str = "tokio-task";

/// Counts tasks whose sleep is registered and tasks still alive, and wakes the measuring task when a count it
/// waits for is reached.
struct Tracker {
    registered: AtomicUsize,
    registered_target: AtomicUsize,
    live: AtomicUsize,
    changed: Notify,
}

static TRACKER: Tracker = Tracker {
    registered: AtomicUsize::new(0),
    registered_target: AtomicUsize::new(usize::MAX),
    live: AtomicUsize::new(0),
    changed: Notify::const_new(),
};

impl Tracker {
    fn on_registered(&self) {
        if self.registered.fetch_add(1, Relaxed) + 1 == self.registered_target.load(Relaxed) {
            self.changed.notify_one();
        }
    }

    async fn wait_registered(&self, target: usize) {
        self.registered_target.store(target, Relaxed);
        // A loop, because a permit left over from an earlier count may wake us early.
        while self.registered.load(Relaxed) < target {
            self.changed.notified().await;
        }
    }

    async fn wait_all_dropped(&self) {
        while self.live.load(Relaxed) > 0 {
            self.changed.notified().await;
        }
    }
}

/// Held by each task's future: counts it alive from spawn until the future is dropped (fired or aborted).
struct Live;

impl Live {
    fn new() -> Self {
        TRACKER.live.fetch_add(1, Relaxed);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if TRACKER.live.fetch_sub(1, Relaxed) == 1 {
            TRACKER.changed.notify_one();
        }
    }
}

/// Awaits `sleep`, reporting to the tracker once its first poll has registered it with the time driver (or
/// found it already due: at 10 M, spawning outlasts the shortest W1 delay).
async fn registered_sleep(sleep: Sleep) {
    let mut sleep = pin!(sleep);
    let mut first = true;
    std::future::poll_fn(|cx| {
        let poll = sleep.as_mut().poll(cx);
        if std::mem::take(&mut first) {
            TRACKER.on_registered();
        }
        poll
    })
    .await
}

fn spawn_timer(i: usize, sleep: Sleep) -> JoinHandle<()> {
    let live = Live::new();
    tokio::spawn(async move {
        let _live = live;
        registered_sleep(sleep).await;
        sink::fire(i);
    })
}

pub fn run(rt: Rt, workload: Workload, n: usize, idle: IdleWindow) {
    match workload {
        Workload::W12 => measure::run_in_task(rt, w12(rt, n)),
        Workload::W3 => measure::run_in_task(rt, w3(rt, n)),
        Workload::W4 | Workload::W4Base => {
            let with_timers = workload == Workload::W4;
            let cpu_ms = measure::idle_runtime(rt, idle, move || async move {
                let timers: Vec<_> = (0..if with_timers { n } else { 0 })
                    .map(|i| spawn_timer(i, sleep(Duration::from_millis(W4_DELAY_MS))))
                    .collect();
                TRACKER.wait_registered(timers.len()).await;
                timers
            });
            measure::emit(NAME, workload.name(), n, rt, &[("cpu_ms", cpu_ms)]);
        }
    }
}

async fn w12(rt: Rt, n: usize) {
    let inputs = W12Inputs::new(n);
    // The caller's handle array (Option<JoinHandle> is one pointer), allocated and touched before the baseline.
    let mut handles: Vec<Option<JoinHandle<()>>> = (0..n).map(|_| None).collect();
    for round in ROUNDS {
        let registered_before = TRACKER.registered.load(Relaxed);
        let snap = Snapshot::take();
        for (i, &delay) in inputs.delays_ms.iter().enumerate() {
            handles[i] = Some(spawn_timer(i, sleep(Duration::from_millis(delay))));
        }
        TRACKER.wait_registered(registered_before + n).await;
        let w1 = snap.finish();

        let snap = Snapshot::take();
        for &i in &inputs.cancel_order {
            handles[i as usize].take().expect("spawned in W1").abort();
        }
        TRACKER.wait_all_dropped().await;
        let w2 = snap.finish();
        measure::emit_w12(NAME, round, n, rt, &w1, &w2, &[]);
    }
}

async fn w3(rt: Rt, n: usize) {
    let delays = inputs::w3_delays_ms(n);
    let sink = sink::install(n);
    let origin = Instant::from_std(sink.origin());

    let cpu_before = measure::cpu_ns();
    let start = sink.now_ns();
    for (i, &delay) in delays.iter().enumerate() {
        let deadline = sink.now_ns() + delay * 1_000_000;
        sink.set_deadline(i, deadline);
        // Tasks are detached: nothing cancels them in W3.
        drop(spawn_timer(i, sleep_until(origin + Duration::from_nanos(deadline))));
    }
    let insert_end = sink.now_ns();
    sink.wait_all_fired(inputs::w3_time_limit()).await;
    let cpu_ms = (measure::cpu_ns() - cpu_before) as f64 / 1e6;
    measure::emit(NAME, "W3", n, rt, &sink.w3_fields(start, insert_end, cpu_ms));
}
