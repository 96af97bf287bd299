//! Hostile keys: what keys chosen to collide cost through the service, against random keys.
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench hostile              # 10K and 1M pending
//! cargo bench -p tokio-timewheel-benches --bench hostile -- --quick   # 10K pending only
//! ```
//!
//! The benchmark measures through the public API alone. The key map on its own, fed hashes as an
//! attacker who knows the service's hash seed would pick them, is a unit test of the crate
//! (`src/service/index.rs`), since only the crate can hand the map chosen hashes.
//!
//! **The service** (`Scheduler`, through its public API, so with its own random seed) holds `N`
//! pending timers of a key family and schedules, then cancels, 4,096 more of it, one call each:
//! - `random` (16 random letters), `conn-<i>` (sequential ids);
//! - `complement`: 8-byte keys in pairs whose bytes are each other's complement, the one
//!   seed-independent relation known in foldhash's short-key path (a pair collides with
//!   probability about 2^-26.6 over the seed, against 2^-64 for a random pair);
//! - `prefix-1KiB`: a 1 KiB common prefix and a counter; `late-4KiB`: 4 KiB keys that differ
//!   only in their last 8 bytes; each against random keys of its own length;
//! - `1MiB`: 64 keys of 1 MiB that differ in their last bytes, among `N` random short keys.
//!
//! **The price of a keyed hash**: ns per hash of one key with the service's hasher (foldhash's
//! fast variant), foldhash's quality variant, and `std`'s SipHash-1-3 (`RandomState`, keyed from
//! the operating system's random source), which a service taking keys from untrusted clients
//! could use instead.
//!
//! Every figure is the median of 5 rounds of hashing (9 for the service) of the thread's CPU time
//! (see [`thread_cpu_ns`]); ratios are against `random` of the same length.

use std::hash::BuildHasher;
use std::time::Duration;

use tokio_timewheel::Scheduler;

/// Rounds of hashing.
const ROUNDS: usize = 5;
/// Calls measured per round in the service (64 for keys of 1 MiB), and rounds: a round takes
/// about a millisecond, so one that a busy machine interrupts is out-voted.
const CALLS: usize = 4_096;
const SERVICE_ROUNDS: usize = 9;

/// The CPU time of this thread so far, in ns: what a round costs, without the time the thread
/// waited for a core (the machines this runs on are shared, and a wall clock there measures
/// mostly the neighbours). On a current-thread runtime the service's own task runs on this
/// thread too, and is counted.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` only writes into the struct it is given.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) }, 0);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum KeyFamily {
    Random16,
    Conn,
    Complement,
    Random1K,
    Prefix1K,
    Random4K,
    Late4K,
    Random1M,
    Late1M,
}

impl KeyFamily {
    fn name(self) -> &'static str {
        match self {
            KeyFamily::Random16 => "random (16 B)",
            KeyFamily::Conn => "conn-<i>",
            KeyFamily::Complement => "complement pairs (8 B)",
            KeyFamily::Random1K => "random (1 KiB)",
            KeyFamily::Prefix1K => "prefix-1KiB",
            KeyFamily::Random4K => "random (4 KiB)",
            KeyFamily::Late4K => "late-4KiB",
            KeyFamily::Random1M => "random (1 MiB)",
            KeyFamily::Late1M => "late-1MiB",
        }
    }

    fn len(self) -> usize {
        match self {
            KeyFamily::Random16 | KeyFamily::Conn | KeyFamily::Complement => 16,
            KeyFamily::Random1K | KeyFamily::Prefix1K => 1 << 10,
            KeyFamily::Random4K | KeyFamily::Late4K => 4 << 10,
            KeyFamily::Random1M | KeyFamily::Late1M => 1 << 20,
        }
    }

    /// The random family of the same length, the baseline of the ratio.
    fn baseline(self) -> KeyFamily {
        match self.len() {
            16 => KeyFamily::Random16,
            1024 => KeyFamily::Random1K,
            4096 => KeyFamily::Random4K,
            _ => KeyFamily::Random1M,
        }
    }

    /// Member `i` of the family (distinct for distinct `i`).
    fn key(self, i: u64) -> String {
        let letters = |len: usize, seed: u64| -> String {
            let mut s = String::with_capacity(len);
            let mut x = seed;
            while s.len() < len {
                x = splitmix(x);
                s.extend(x.to_le_bytes().iter().take(len - s.len()).map(|b| (b'a' + b % 26) as char));
            }
            s
        };
        match self {
            KeyFamily::Random16 | KeyFamily::Random1K | KeyFamily::Random4K | KeyFamily::Random1M => {
                // Distinct: the first 8 letters spell `i` in base 26, the rest are random.
                let mut key = letters(self.len(), i);
                let head: String = (0..8).map(|d| (b'a' + (i / 26u64.pow(d) % 26) as u8) as char).collect();
                key.replace_range(..8, &head);
                key
            }
            KeyFamily::Conn => format!("conn-{i}"),
            KeyFamily::Complement => complement_key(i),
            KeyFamily::Prefix1K => format!("{}{i:020}", "p".repeat(1024 - 20)),
            KeyFamily::Late4K => format!("{}{i:08}", "q".repeat(4096 - 8)),
            KeyFamily::Late1M => format!("{}{i:08}", "r".repeat((1 << 20) - 8)),
        }
    }
}

/// Member `i` of the complement family: 8 bytes, the complement of member `i ^ 1`'s, both UTF-8.
/// A unit of two bytes is either `C2 80+x` (the character U+0080+x) or its complement
/// `3D 7F-x` (`=` and an ASCII character), for x below 64; four units make a key.
fn complement_key(i: u64) -> String {
    let (pair, flip) = (i >> 1, i & 1 == 1);
    let mut bytes = Vec::with_capacity(8);
    for unit in 0..4 {
        let x = (pair >> (6 * unit)) as u8 & 63;
        let unit = [0xC2, 0x80 + x];
        bytes.extend(if flip { unit.map(|b| !b) } else { unit });
    }
    assert!(pair < 1 << 24, "the family has 2^25 members");
    String::from_utf8(bytes).expect("both forms are UTF-8")
}

async fn job(_key: String) {}

/// ns per schedule and per cancel of `CALLS` (64 for 1 MiB keys) members of `family`, with `n`
/// timers pending: members of the family, or random 16-byte keys for the long families.
async fn service(n: usize, family: KeyFamily) -> (f64, f64) {
    let measured = if family.len() >= 1 << 20 { 64 } else { CALLS };
    let background = if family.len() > 16 { KeyFamily::Random16 } else { family };
    let far = Duration::from_secs(3600);
    let timer = Scheduler::builder().capacity(n + measured).start().expect("the service starts");
    let pending: Vec<String> = (0..n as u64).map(|i| background.key(measured as u64 + i)).collect();
    for chunk in pending.chunks(1024) {
        let results = timer.schedule_many(chunk.iter().map(|k| (k.as_str(), far, job))).await;
        assert!(results.iter().all(Result::is_ok));
    }
    // Each key in an allocation of its own size, as the random ones are: `format!` leaves up to
    // twice the room, which alone made the late-4KiB keys' cancels 2x dearer (more memory read
    // per key, none of it the service's doing).
    let keys: Vec<String> = (0..measured as u64).map(|i| family.key(i).into_boxed_str().into_string()).collect();
    let (mut schedules, mut cancels) = (Vec::new(), Vec::new());
    for _ in 0..SERVICE_ROUNDS {
        let began = thread_cpu_ns();
        for key in &keys {
            timer.schedule(key, far, job).await.expect("a distinct key is accepted");
        }
        schedules.push((thread_cpu_ns() - began) as f64 / measured as f64);
        let began = thread_cpu_ns();
        for key in &keys {
            assert!(timer.cancel(key).await);
        }
        cancels.push((thread_cpu_ns() - began) as f64 / measured as f64);
    }
    timer.stop().await;
    (median(schedules), median(cancels))
}

/// ns per hash of keys of `len` bytes with `hasher`.
fn hash_ns(hasher: &impl BuildHasher, len: usize) -> f64 {
    let keys: Vec<Vec<u8>> = (0..64u64).map(|i| KeyFamily::Random1M.key(i).into_bytes()[..len].to_vec()).collect();
    let reps = (1 << 24) / (len + 64);
    let times = (0..ROUNDS).map(|_| {
        let began = thread_cpu_ns();
        let mut sink = 0u64;
        for r in 0..reps {
            sink ^= hasher.hash_one(std::hint::black_box(keys[r % keys.len()].as_slice()));
        }
        std::hint::black_box(sink);
        (thread_cpu_ns() - began) as f64 / reps as f64
    });
    median(times.collect())
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick { &[10_000] } else { &[10_000, 1_000_000] };

    println!("# The price of a keyed hash (ns per key hashed, median of {ROUNDS} rounds)\n");
    println!("| key bytes | foldhash fast (the service's) | foldhash quality | SipHash-1-3 (std) |");
    println!("|---|---|---|---|");
    for len in [8, 16, 64, 1 << 10, 1 << 20] {
        let fast = hash_ns(&foldhash::fast::RandomState::default(), len);
        let quality = hash_ns(&foldhash::quality::RandomState::default(), len);
        let sip = hash_ns(&std::hash::RandomState::new(), len);
        println!("| {len} | {fast:.1} | {quality:.1} | {sip:.1} |");
    }
    println!();

    println!("# The service, one call each (ns per call, median of {SERVICE_ROUNDS} rounds)\n");
    println!("| pending N | keys | schedule ns | cancel ns | schedule × random | cancel × random |");
    println!("|---|---|---|---|---|---|");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for &n in sizes {
        let mut baselines = std::collections::HashMap::new();
        for family in [
            KeyFamily::Random16,
            KeyFamily::Conn,
            KeyFamily::Complement,
            KeyFamily::Random1K,
            KeyFamily::Prefix1K,
            KeyFamily::Random4K,
            KeyFamily::Late4K,
        ] {
            let (s, c) = runtime.block_on(service(n, family));
            let (bs, bc) = *baselines.entry(family.baseline()).or_insert((s, c));
            println!("| {n} | {} | {s:.0} | {c:.0} | {:.2} | {:.2} |", family.name(), s / bs, c / bc);
        }
    }
    // Keys over MAX_KEY_LEN (the 1 MiB families) are refused before they are hashed or stored.
    runtime.block_on(async {
        let timer = Scheduler::builder().start().expect("the service starts");
        for family in [KeyFamily::Random1M, KeyFamily::Late1M] {
            let refused = timer.schedule(family.key(0), Duration::from_secs(3600), job).await;
            assert!(matches!(refused, Err(tokio_timewheel::Error::Invalid(_))), "{}: {refused:?}", family.name());
        }
        timer.stop().await;
    });
    println!(
        "\nKeys over {} bytes (the 1 MiB families) are refused with Error::Invalid.",
        tokio_timewheel::MAX_KEY_LEN
    );
}
