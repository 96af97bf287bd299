//! `tokio-timewheel-hierarchical` and `tokio-timewheel-rounds`: the pure wheels, driven directly on the bench's thread with
//! no runtime. Ticks are 1 ms; the value stored is the timer index.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio_timewheel::wheel::{EntryId, HierarchicalWheel, RoundsWheel, Wheel};

use crate::inputs::{self, W12Inputs, W4_DELAY_MS};
use crate::measure::{self, IdleWindow, Rt, Snapshot, ROUNDS};
use crate::sink;
use crate::Workload;

/// Slots per level of the hierarchical wheel: 64 fits one level's occupancy bitmap in a u64.
pub const HIERARCHICAL_SLOTS: usize = 64;
/// Slots of the single-level rounds wheel. Its advance and cancel cost grow with entries per slot, i.e. with
/// pending / slots, so it gets a large ring: 4096 slots of 1 ms is about 4 s per revolution.
pub const ROUNDS_SLOTS: usize = 4096;

const TICK_NS: u64 = 1_000_000;

pub fn run(imp: &str, hierarchical: bool, workload: Workload, n: usize, idle: IdleWindow) {
    if hierarchical {
        let new = || HierarchicalWheel::new(HIERARCHICAL_SLOTS).expect("hierarchical wheel");
        run_with(imp, new, workload, n, idle)
    } else {
        let new = || RoundsWheel::new(ROUNDS_SLOTS).expect("rounds wheel");
        run_with(imp, new, workload, n, idle)
    }
}

fn run_with<W, F>(imp: &str, new: F, workload: Workload, n: usize, idle: IdleWindow)
where
    W: Wheel<u32> + Send + 'static,
    F: Fn() -> W,
{
    match workload {
        Workload::W12 => w12(imp, new(), n),
        Workload::W3 => w3(imp, new(), n),
        Workload::W4 => w4(imp, new(), n, idle),
        Workload::W4Base => unreachable!("the pure wheels have no runtime to measure bare"),
    }
}

fn w12<W: Wheel<u32>>(imp: &str, mut wheel: W, n: usize) {
    let inputs = W12Inputs::new(n);
    // The caller's own handle array, allocated and touched before the RSS baseline.
    let mut ids: Vec<Option<EntryId>> = vec![None; n];
    for round in ROUNDS {
        let snap = Snapshot::take();
        for (i, &delay) in inputs.delays_ms.iter().enumerate() {
            ids[i] = Some(wheel.insert(delay, i as u32));
        }
        let w1 = snap.finish();
        assert_eq!(wheel.len(), n, "{imp}: pending after W1");

        let snap = Snapshot::take();
        let mut wrong = 0usize;
        for &i in &inputs.cancel_order {
            let id = ids[i as usize].take().expect("inserted in W1");
            if wheel.remove(id) != Some(i) {
                wrong += 1;
            }
        }
        let w2 = snap.finish();
        assert_eq!(wrong, 0, "{imp}: removes that did not return their own value");
        assert!(wheel.is_empty(), "{imp}: pending after W2");
        measure::emit_w12(imp, round, n, Rt::None, &w1, &w2, &[]);
    }
}

/// W3 on one thread: insert everything (deadline rounded up to the next tick, so firing at a tick boundary is
/// never early), then advance with the clock, sleeping until the wheel's next deadline in between.
fn w3<W: Wheel<u32>>(imp: &str, mut wheel: W, n: usize) {
    let delays = inputs::w3_delays_ms(n);
    let sink = sink::install(n);
    let give_up_ns = inputs::w3_time_limit().as_nanos() as u64;

    let cpu_before = measure::cpu_ns();
    let start = sink.now_ns();
    for (i, &delay) in delays.iter().enumerate() {
        let deadline = sink.now_ns() + delay * TICK_NS;
        sink.set_deadline(i, deadline);
        wheel.insert(deadline.div_ceil(TICK_NS), i as u32);
    }
    let insert_end = sink.now_ns();

    while !wheel.is_empty() && sink.now_ns() < give_up_ns {
        wheel.advance(sink.now_ns() / TICK_NS, |e| sink.fire(e.value as usize));
        let Some(next) = wheel.next_deadline() else {
            break;
        };
        let now = sink.now_ns();
        if next * TICK_NS > now {
            std::thread::sleep(Duration::from_nanos(next * TICK_NS - now));
        }
    }
    let cpu_ms = (measure::cpu_ns() - cpu_before) as f64 / 1e6;
    measure::emit(imp, "W3", n, Rt::None, &sink.w3_fields(start, insert_end, cpu_ms));
}

/// W4: a driver thread holds `n` one-hour timers and sleeps until the wheel's next deadline, as an application
/// driving the wheel by hand would.
fn w4<W: Wheel<u32> + Send + 'static>(imp: &str, mut wheel: W, n: usize, idle: IdleWindow) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let driver = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let origin = Instant::now();
            for i in 0..n {
                wheel.insert(W4_DELAY_MS, i as u32);
            }
            ready_tx.send(()).expect("main thread waits");
            while !stop.load(Ordering::Relaxed) {
                let now = origin.elapsed();
                wheel.advance(now.as_millis() as u64, |_| {});
                match wheel.next_deadline() {
                    Some(tick) => {
                        std::thread::park_timeout(Duration::from_millis(tick).saturating_sub(origin.elapsed()))
                    }
                    None => std::thread::park(),
                }
            }
        })
    };
    ready_rx.recv().expect("W4 setup finished");
    let cpu_ms = idle.measure();
    stop.store(true, Ordering::Relaxed);
    driver.thread().unpark();
    driver.join().expect("W4 driver thread");
    measure::emit(imp, "W4", n, Rt::None, &[("cpu_ms", cpu_ms)]);
}
