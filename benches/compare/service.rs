//! `tokio-timewheel-service`, `tokio-timewheel-service-batch` and (W4 only) `tokio-timewheel-service-interval`: the Tokio timer
//! service with 1 ms ticks and a 64-slot hierarchical wheel, fed from a task of the same runtime.
//!
//! Every timer's job is `sink::fire_keyed`, a plain function: the service stores its own copy of the key (it
//! needs one to cancel by key), and the job finds its index, hence its deadline, from that key.

use std::time::Duration;

use tokio_timewheel::{Advance, Scheduler, WheelKind};

use crate::inputs::{self, W12Inputs, W4_DELAY_MS};
use crate::measure::{self, IdleWindow, Rt, Snapshot, ROUNDS};
use crate::sink::{self, fire_keyed};
use crate::Workload;

/// Timers per `schedule_many` / `cancel_many` call in the batch variant: large enough to amortise the call's fixed
/// costs (a yield, one lock per shard), small enough that one call holds the thread for well under a millisecond.
/// 4,096 per call (until 2026-11-22) took 1.3-2.4 ms in W3, while the timers due meanwhile waited: W3's p99
/// lateness read 11-12 ms with it and 4.6-6.2 ms with 1,024 (three interleaved runs), for the same CPU; W1 moved
/// within the noise (medians of four pairs at 1M: 256 ns with 4,096, 270 with 1,024).
pub const BATCH: usize = 1024;

/// How the bench talks to the service.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Calls {
    /// One `schedule` / `cancel` call per timer.
    One,
    /// `schedule_many` / `cancel_many` in chunks of `BATCH`.
    Batch,
}

fn start(advance: Advance) -> Scheduler {
    Scheduler::builder()
        .tick(Duration::from_millis(1))
        .slots(64)
        .wheel(WheelKind::Hierarchical)
        .advance(advance)
        .start()
        .expect("start the timer service")
}

pub fn run(imp: &'static str, calls: Calls, advance: Advance, rt: Rt, workload: Workload, n: usize, idle: IdleWindow) {
    match workload {
        Workload::W12 => measure::run_in_task(rt, w12(imp, calls, rt, n)),
        Workload::W3 => measure::run_in_task(rt, w3(imp, calls, rt, n)),
        Workload::W4 | Workload::W4Base => {
            let with_timers = workload == Workload::W4;
            let cpu_ms = measure::idle_runtime(rt, idle, move || async move {
                if !with_timers {
                    return None;
                }
                let timer = start(advance);
                for key in inputs::keys(n) {
                    timer.schedule(key, Duration::from_millis(W4_DELAY_MS), fire_keyed).await.expect("schedule");
                }
                timer.flush().await;
                Some(timer)
            });
            measure::emit(imp, workload.name(), n, rt, &[("cpu_ms", cpu_ms)]);
        }
    }
}

async fn w12(imp: &'static str, calls: Calls, rt: Rt, n: usize) {
    let inputs = W12Inputs::new(n);
    // The caller's keys, built and touched before the baseline. They are passed as &str: the service makes the
    // copy it keeps, which is part of its cost.
    let keys = inputs::keys(n);
    let timer = start(Advance::NextDeadline);
    // Reused per-chunk buffers for the batch calls. (Handing the service a lazy iterator with a closure inside
    // would not do: such a future is not Send, for want of higher-ranked lifetimes in closure signatures.)
    let mut batch = Vec::with_capacity(BATCH);
    let mut names: Vec<&str> = Vec::with_capacity(BATCH);
    for round in ROUNDS {
        let snap = Snapshot::take();
        let failed = match calls {
            Calls::One => {
                let mut failed = 0;
                for (key, &delay) in keys.iter().zip(&inputs.delays_ms) {
                    let result = timer.schedule(key.as_str(), Duration::from_millis(delay), fire_keyed).await;
                    failed += result.is_err() as usize;
                }
                failed
            }
            Calls::Batch => {
                let mut failed = 0;
                for (keys, delays) in keys.chunks(BATCH).zip(inputs.delays_ms.chunks(BATCH)) {
                    batch.extend(
                        keys.iter()
                            .zip(delays)
                            .map(|(key, &delay)| (key.as_str(), Duration::from_millis(delay), fire_keyed)),
                    );
                    failed += timer.schedule_many(batch.drain(..)).await.iter().filter(|r| r.is_err()).count();
                }
                failed
            }
        };
        // Everything sent is registered once the service has caught up with it.
        timer.flush().await;
        let w1 = snap.finish();
        assert_eq!(failed, 0, "{imp}: failed schedules");

        let snap = Snapshot::take();
        let missed = match calls {
            Calls::One => {
                let mut missed = 0;
                for &i in &inputs.cancel_order {
                    missed += !timer.cancel(&keys[i as usize]).await as usize;
                }
                missed
            }
            Calls::Batch => {
                let mut missed = 0;
                for chunk in inputs.cancel_order.chunks(BATCH) {
                    names.extend(chunk.iter().map(|&i| keys[i as usize].as_str()));
                    missed += timer.cancel_many(names.drain(..)).await.iter().filter(|c| !**c).count();
                }
                missed
            }
        };
        timer.flush().await;
        let w2 = snap.finish();
        assert_eq!(timer.len(), 0, "{imp}: pending after W2");
        // A cancel finds no timer only if it fired first: the shortest W1 delay is 1 s, which a slow W1 + W2
        // outlasts at large N. Reported, so that a suspiciously high count is seen.
        let fired = [("fired_before_cancel", missed as f64)];
        measure::emit_w12(imp, round, n, rt, &w1, &w2, &fired);
    }
    timer.stop().await;
}

async fn w3(imp: &'static str, calls: Calls, rt: Rt, n: usize) {
    let delays = inputs::w3_delays_ms(n);
    let keys = inputs::keys(n);
    let sink = sink::install(n);
    let timer = start(Advance::NextDeadline);

    let cpu_before = measure::cpu_ns();
    let start = sink.now_ns();
    match calls {
        Calls::One => {
            for (i, (key, &delay)) in keys.iter().zip(&delays).enumerate() {
                // The service takes its own clock reading after ours, so its deadline is never the earlier one.
                sink.set_deadline(i, sink.now_ns() + delay * 1_000_000);
                timer.schedule(key.as_str(), Duration::from_millis(delay), fire_keyed).await.expect("schedule");
            }
        }
        Calls::Batch => {
            let mut batch = Vec::with_capacity(BATCH);
            for (chunk, (keys, delays)) in keys.chunks(BATCH).zip(delays.chunks(BATCH)).enumerate() {
                let now = sink.now_ns();
                for (j, &delay) in delays.iter().enumerate() {
                    sink.set_deadline(chunk * BATCH + j, now + delay * 1_000_000);
                }
                batch.extend(
                    keys.iter()
                        .zip(delays)
                        .map(|(key, &delay)| (key.as_str(), Duration::from_millis(delay), fire_keyed)),
                );
                let results = timer.schedule_many(batch.drain(..)).await;
                assert!(results.iter().all(|r| r.is_ok()), "{imp}: failed schedules");
            }
        }
    }
    let insert_end = sink.now_ns();
    sink.wait_all_fired(inputs::w3_time_limit()).await;
    let cpu_ms = (measure::cpu_ns() - cpu_before) as f64 / 1e6;
    measure::emit(imp, "W3", n, rt, &sink.w3_fields(start, insert_end, cpu_ms));
    timer.stop().await;
}
