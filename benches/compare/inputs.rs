//! Workload inputs, exactly as BENCHMARKS.md defines them: every implementation draws the same delays, the same
//! cancel order and the same keys.

/// Base seed of every generator.
pub const SEED: u64 = 0x5EED_0001;

/// W1 delays: U[1 s, 3600 s] in whole milliseconds, so nothing fires while W1/W2 are measured.
pub const W1_DELAY_MS: (u64, u64) = (1_000, 3_600_000);

/// W3 delays: U[0 ms, 2000 ms].
pub const W3_DELAY_MS: (u64, u64) = (0, 2_000);

/// How long W3 waits for the last fire before it reports what it has: the longest delay plus a minute.
pub fn w3_time_limit() -> std::time::Duration {
    std::time::Duration::from_millis(W3_DELAY_MS.1 + 60_000)
}

/// W4: the pending timers' delay (one hour).
pub const W4_DELAY_MS: u64 = 3_600_000;

/// SplitMix64, the generator of every workload's inputs.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next() % n`, bias and all: the point is to draw the same numbers as every other implementation.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// `n` delays in whole milliseconds, `lo + below(hi - lo + 1)`.
pub fn delays_ms(seed: u64, n: usize, (lo, hi): (u64, u64)) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| lo + rng.below(hi - lo + 1)).collect()
}

/// The W2 cancel order: a Fisher-Yates shuffle of `0..n` from its own generator.
pub fn cancel_order(n: usize) -> Vec<u32> {
    let mut rng = SplitMix64::new(SEED ^ 0xC0FFEE);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// The W1/W2 inputs: delays drawn from `SEED`, cancel order from `SEED ^ 0xC0FFEE`.
pub struct W12Inputs {
    pub delays_ms: Vec<u64>,
    pub cancel_order: Vec<u32>,
}

impl W12Inputs {
    pub fn new(n: usize) -> Self {
        W12Inputs { delays_ms: delays_ms(SEED, n, W1_DELAY_MS), cancel_order: cancel_order(n) }
    }
}

/// The W3 delays, drawn from `SEED + 3`.
pub fn w3_delays_ms(n: usize) -> Vec<u64> {
    delays_ms(SEED + 3, n, W3_DELAY_MS)
}

/// Keys `conn-{i}` for `0..n`, built before any measurement so the loops do not allocate them.
pub fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("conn-{i}")).collect()
}

/// The timer index a `conn-{i}` key carries (how a keyed job finds its own deadline).
pub fn index_of(key: &str) -> usize {
    key.strip_prefix("conn-").and_then(|i| i.parse().ok()).unwrap_or_else(|| panic!("unexpected key {key:?}"))
}
