//! The durable workloads' inputs: the same keys, payload, delays and cancel order for every implementation.
//! The generator, the delay formula and the cancel order are the in-process benchmark's (`compare/inputs.rs`).

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::compare_inputs::{cancel_order, delays_ms, SEED};

/// The durable workloads' delays are drawn from `SEED + 5`.
pub const DURABLE_SEED: u64 = SEED + 5;

/// D1 (and D2, D4): delays U[1 s, 3600 s], so nothing comes due while they are measured.
pub const D1_DELAY_MS: (u64, u64) = (1_000, 3_600_000);

/// D3: delays U[0 ms, 10,000 ms].
pub const D3_DELAY_MS: (u64, u64) = (0, 10_000);

/// D5: every task an hour away.
pub const D5_DELAY_MS: u64 = 3_600_000;

/// Every task carries these 32 bytes (ASCII, so the JSON-based rivals store them as they are, plus quotes).
pub const PAYLOAD: &str = "order-review:payload-0123456789a";

/// Calls in flight at once in D1/D4's one-call-per-task mode.
pub const IN_FLIGHT: usize = 64;

/// Tasks per call in the batched modes (and in D3/D5's insert phases, where every implementation uses its batch
/// call so that inserting takes as little of the window as possible).
pub const BATCH: usize = 1_024;

/// Workers in D3, D5 and D7, each allowed this many handlers in flight: 4 of 16 unless `--workers` and
/// `--concurrency` say otherwise (`--workers=1 --concurrency=4`: one worker of four handlers).
static WORKERS: AtomicUsize = AtomicUsize::new(4);
static CONCURRENCY: AtomicUsize = AtomicUsize::new(16);

/// How many workers D3, D5 and D7 run.
pub fn workers() -> usize {
    WORKERS.load(Relaxed)
}

/// How many handlers each worker runs at once.
pub fn concurrency() -> usize {
    CONCURRENCY.load(Relaxed)
}

/// Sets [`workers`] and [`concurrency`] (from the command line, before anything runs).
pub fn set_shape(workers: usize, concurrency: usize) {
    WORKERS.store(workers, Relaxed);
    CONCURRENCY.store(concurrency, Relaxed);
}

/// The inputs of one run of `n` tasks.
pub struct Inputs {
    pub n: usize,
    pub keys: Vec<String>,
    pub d1_delays_ms: Vec<u64>,
    pub d3_delays_ms: Vec<u64>,
    /// A permutation of `0..n`: the order D4 cancels in.
    pub cancel_order: Vec<u32>,
}

impl Inputs {
    pub fn new(n: usize) -> Self {
        Inputs {
            n,
            keys: (0..n).map(|i| format!("order-{i}")).collect(),
            d1_delays_ms: delays_ms(DURABLE_SEED, n, D1_DELAY_MS),
            d3_delays_ms: delays_ms(DURABLE_SEED, n, D3_DELAY_MS),
            cancel_order: cancel_order(n),
        }
    }

    /// Writes the inputs for the Node rival as one JSON object, so that it uses exactly these numbers.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let list = |v: &mut dyn Iterator<Item = u64>| v.map(|x| x.to_string()).collect::<Vec<_>>().join(",");
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        write!(
            f,
            "{{\"n\":{},\"payload\":\"{PAYLOAD}\",\"batch\":{BATCH},\"in_flight\":{IN_FLIGHT},\"workers\":{},\
             \"concurrency\":{},\"d5_delay_ms\":{D5_DELAY_MS},\"d1_delays_ms\":[{}],\"d3_delays_ms\":[{}],\
             \"cancel_order\":[{}]}}",
            self.n,
            workers(),
            concurrency(),
            list(&mut self.d1_delays_ms.iter().copied()),
            list(&mut self.d3_delays_ms.iter().copied()),
            list(&mut self.cancel_order.iter().map(|&i| i as u64)),
        )?;
        f.flush()
    }
}

/// The index a key `order-{i}` carries.
pub fn index_of(key: &str) -> usize {
    key.strip_prefix("order-").and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("unexpected key {key:?}"))
}
