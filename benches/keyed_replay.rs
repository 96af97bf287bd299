//! W1 and W2 of the compare benchmark (the service, one call per timer, the same keys, delays and
//! cancel order), replayed for callgrind: the calls run on a Tokio runtime that is entered but
//! never driven, so the service's actor never fires or sweeps meanwhile and every run does the
//! same work, whatever else the machine does. `w1_round` and `w2_round` are the functions to
//! count (BENCHMARKS.md, "Keyed cancel"):
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench keyed_replay --no-run
//! valgrind --tool=callgrind --cache-sim=yes --LL=1048576,16,64 --toggle-collect='*w2_round*' \
//!     target/release/deps/keyed_replay-<hash> 1000000
//! ```
//!
//! Instructions per cancel are the total over two rounds divided by `2 * N`. Run without
//! valgrind, it only checks that every cancel found its timer.

#[path = "compare/inputs.rs"]
#[allow(dead_code)]
mod inputs;

use std::time::Duration;

use tokio_timewheel::{Advance, Scheduler, WheelKind};

async fn fire_keyed(key: String) {
    std::hint::black_box(key);
}

#[inline(never)]
fn w1_round(timer: &Scheduler, keys: &[String], delays_ms: &[u64]) {
    for (key, &delay) in keys.iter().zip(delays_ms) {
        let scheduled =
            futures::executor::block_on(timer.schedule(key.as_str(), Duration::from_millis(delay), fire_keyed));
        scheduled.expect("schedule");
    }
}

#[inline(never)]
fn w2_round(timer: &Scheduler, keys: &[String], order: &[u32]) -> usize {
    order.iter().filter(|&&i| !timer.cancel_now(&keys[i as usize])).count()
}

fn main() {
    // `cargo bench` passes `--bench`; the first other argument is N.
    let n = std::env::args().skip(1).find(|a| !a.starts_with("--")).map_or(1_000_000, |a| a.parse().expect("N"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let _entered = runtime.enter();
    let inputs = inputs::W12Inputs::new(n);
    let keys = inputs::keys(n);
    let timer = Scheduler::builder()
        .tick(Duration::from_millis(1))
        .slots(64)
        .wheel(WheelKind::Hierarchical)
        .advance(Advance::NextDeadline)
        .start()
        .expect("start the timer service");
    for round in 1..=2 {
        w1_round(&timer, &keys, &inputs.delays_ms);
        let missed = w2_round(&timer, &keys, &inputs.cancel_order);
        assert_eq!(missed, 0, "round {round}: every cancel finds its timer");
    }
    println!("keyed_replay: {n} timers scheduled and cancelled, twice");
}
