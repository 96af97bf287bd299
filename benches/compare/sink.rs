//! The W3 fire sink that every timer callback calls: lateness histogram, early-fire count, fired counter.
//!
//! There is one sink per process (each measurement runs in its own process), reachable through a global so that
//! a keyed job can be a plain `fn(String)` capturing nothing: it parses its index from the key and looks its
//! deadline up in the shared table, exactly like the other implementations that are handed the index directly.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Log-linear histogram of microsecond values: exact below 128 us, then 64 linear buckets per power of two
/// (relative error under 1.6 %). Buckets are atomics because callbacks fire on several threads.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

const LINEAR: u64 = 128;
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

impl Histogram {
    fn new() -> Self {
        let len = Self::index(u64::MAX) + 1;
        Histogram { buckets: (0..len).map(|_| AtomicU64::new(0)).collect() }
    }

    fn index(us: u64) -> usize {
        if us < LINEAR {
            return us as usize;
        }
        let exp = 63 - us.leading_zeros(); // >= 7
        let mantissa = us >> (exp - SUB_BITS); // in [SUB, 2 * SUB)
        (LINEAR + (exp as u64 - 7) * SUB + (mantissa - SUB)) as usize
    }

    /// The smallest value that falls in bucket `index`.
    fn lower_bound(index: usize) -> u64 {
        let index = index as u64;
        if index < LINEAR {
            return index;
        }
        let exp = (index - LINEAR) / SUB + 7;
        let mantissa = (index - LINEAR) % SUB + SUB;
        mantissa << (exp - SUB_BITS as u64)
    }

    pub fn record(&self, us: u64) {
        self.buckets[Self::index(us)].fetch_add(1, Relaxed);
    }

    /// The value at quantile `q` (0..=1), as the upper end of its bucket, in microseconds.
    pub fn quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::lower_bound(i + 1) - 1;
            }
        }
        0
    }
}

/// Where W3 callbacks report. Deadlines are nanoseconds since `origin`, written by the inserting code before it
/// hands the timer to the implementation.
pub struct Sink {
    origin: Instant,
    deadlines: Box<[AtomicU64]>,
    hist: Histogram,
    max_late_ns: AtomicU64,
    early: AtomicU64,
    fired: AtomicUsize,
    last_fire_ns: AtomicU64,
    all_fired: Notify,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Creates the process's sink for `n` timers; the clock origin is now.
pub fn install(n: usize) -> &'static Sink {
    let sink = Sink {
        origin: Instant::now(),
        deadlines: (0..n).map(|_| AtomicU64::new(0)).collect(),
        hist: Histogram::new(),
        max_late_ns: AtomicU64::new(0),
        early: AtomicU64::new(0),
        fired: AtomicUsize::new(0),
        last_fire_ns: AtomicU64::new(0),
        all_fired: Notify::new(),
    };
    assert!(SINK.set(sink).is_ok(), "sink installed twice");
    get()
}

fn get() -> &'static Sink {
    SINK.get().expect("sink installed")
}

/// What every timer callback calls with its index. Outside W3 there is no sink and it does nothing: a slow
/// implementation may see its shortest W1 timers (1 s) come due before W2 has cancelled them.
pub fn fire(i: usize) {
    if let Some(sink) = SINK.get() {
        sink.fire(i);
    }
}

/// The keyed job handed to the tokio-timewheel service: a plain function, so every scheduled timer carries nothing
/// but its key.
pub async fn fire_keyed(key: String) {
    fire(crate::inputs::index_of(&key));
}

impl Sink {
    pub fn origin(&self) -> Instant {
        self.origin
    }

    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Records timer `i`'s deadline, `at_ns` after the origin.
    pub fn set_deadline(&self, i: usize, at_ns: u64) {
        self.deadlines[i].store(at_ns, Relaxed);
    }

    /// What every callback does: lateness into the histogram, early fires counted, one counter bumped.
    pub fn fire(&self, i: usize) {
        let now = self.now_ns();
        let deadline = self.deadlines[i].load(Relaxed);
        let late_ns = match now.checked_sub(deadline) {
            Some(late) => late,
            None => {
                self.early.fetch_add(1, Relaxed);
                0
            }
        };
        self.hist.record(late_ns / 1_000);
        self.max_late_ns.fetch_max(late_ns, Relaxed);
        if self.fired.fetch_add(1, Relaxed) + 1 == self.deadlines.len() {
            self.last_fire_ns.store(now, Relaxed);
            self.all_fired.notify_one();
        }
    }

    pub fn fired(&self) -> usize {
        self.fired.load(Relaxed)
    }

    pub fn all_fired(&self) -> bool {
        self.fired() == self.deadlines.len()
    }

    /// Waits until every timer has fired, or `limit` has passed (then the report shows how many did).
    pub async fn wait_all_fired(&self, limit: Duration) {
        if !self.all_fired() {
            // notify_one stores a permit if the last fire comes before we wait, so this cannot miss it.
            let _ = tokio::time::timeout(limit, self.all_fired.notified()).await;
        }
    }

    /// The W3 result fields (the names of the result lines) plus `fired`, given when the insert phase started and ended.
    pub fn w3_fields(&self, start_ns: u64, insert_end_ns: u64, cpu_ms: f64) -> Vec<(&'static str, f64)> {
        let end_ns = if self.all_fired() { self.last_fire_ns.load(Relaxed) } else { self.now_ns() };
        let ms = |ns: u64| ns as f64 / 1e6;
        let q = |q: f64| self.hist.quantile(q) as f64 / 1e3;
        vec![
            ("wall_ms_all_fired", ms(end_ns - start_ns)),
            ("insert_phase_ms", ms(insert_end_ns - start_ns)),
            ("cpu_ms", cpu_ms),
            ("late_p50_ms", q(0.50)),
            ("late_p99_ms", q(0.99)),
            ("late_p999_ms", q(0.999)),
            ("late_max_ms", ms(self.max_late_ns.load(Relaxed))),
            ("early_fires", self.early.load(Relaxed) as f64),
            ("fired", self.fired() as f64),
        ]
    }
}
