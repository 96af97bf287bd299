//! D3's sink: every handler reports its task's index and lateness (handler start minus due time), and the sink
//! keeps an hdrhistogram of lateness, counts early starts and tasks handled twice, and notes when the last one
//! came. A second histogram holds the tasks due after the insert phase ended: the tasks due while 100,000
//! schedules are still arriving wait behind them, and the two together show how much of the tail that is.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

pub struct Sink {
    started: Instant,
    /// Handler starts per task index.
    handled: Box<[AtomicU32]>,
    /// Lateness in microseconds, 1 us resolution up to an hour at 3 significant digits.
    hist: Mutex<Histogram<u64>>,
    /// Lateness of the tasks due after `insert_end_us`.
    hist_after_insert: Mutex<Histogram<u64>>,
    /// When the insert phase ended (Unix microseconds); `i64::MAX` until it has.
    insert_end_us: std::sync::atomic::AtomicI64,
    early: AtomicU64,
    duplicates: AtomicU64,
    distinct: AtomicU64,
    /// Microseconds after `started` at which the last task was handled for the first time.
    last_first_us: AtomicU64,
    done: tokio::sync::Notify,
}

/// Microseconds since the Unix epoch on this host's clock (the one `redis-server` reads for `TIME` too).
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_micros() as i64
}

pub fn system_time_us(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).expect("due after 1970").as_micros() as i64
}

impl Sink {
    pub fn new(n: usize) -> Sink {
        Sink {
            started: Instant::now(),
            handled: (0..n).map(|_| AtomicU32::new(0)).collect(),
            hist: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")),
            hist_after_insert: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")),
            insert_end_us: std::sync::atomic::AtomicI64::new(i64::MAX),
            early: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            distinct: AtomicU64::new(0),
            last_first_us: AtomicU64::new(0),
            done: tokio::sync::Notify::new(),
        }
    }

    /// What every handler calls first: task `i`, due at `due_us` (microseconds since the epoch), starts now.
    pub fn handle(&self, i: usize, due_us: i64) {
        let late_us = now_us() - due_us;
        if self.handled[i].fetch_add(1, Relaxed) > 0 {
            self.duplicates.fetch_add(1, Relaxed);
            return;
        }
        if late_us < 0 {
            self.early.fetch_add(1, Relaxed);
        }
        self.hist.lock().unwrap().saturating_record(late_us.max(1) as u64);
        if due_us > self.insert_end_us.load(Relaxed) {
            self.hist_after_insert.lock().unwrap().saturating_record(late_us.max(1) as u64);
        }
        if self.distinct.fetch_add(1, Relaxed) + 1 == self.handled.len() as u64 {
            self.last_first_us.store(self.started.elapsed().as_micros() as u64, Relaxed);
            self.done.notify_one();
        }
    }

    /// Marks the end of the insert phase (call it once every task has been scheduled).
    pub fn insert_done(&self) {
        self.insert_end_us.store(now_us(), Relaxed);
    }

    pub fn distinct(&self) -> u64 {
        self.distinct.load(Relaxed)
    }

    /// Waits until every task was handled once, or `limit` passed, or nothing was handled for `STALL` after the
    /// last task could have come due (an implementation whose workers died).
    pub async fn wait_all(&self, limit: Duration) -> bool {
        const STALL: Duration = Duration::from_secs(15);
        let deadline = Instant::now() + limit;
        let mut last = (self.distinct(), Instant::now());
        while self.distinct() < self.handled.len() as u64 && Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.done.notified()).await;
            let now = self.distinct();
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > STALL && self.started.elapsed() > STALL + Duration::from_secs(10) {
                eprintln!("  no task handled for {} s: giving up with {now} handled", STALL.as_secs());
                break;
            }
        }
        self.distinct() == self.handled.len() as u64
    }

    /// D3's fields; `wall_ms` is measured by the caller (until the last acknowledgement).
    pub fn fields(&self, wall_ms: f64) -> Vec<(&'static str, f64)> {
        let hist = self.hist.lock().unwrap();
        let after = self.hist_after_insert.lock().unwrap();
        let ms = |us: u64| us as f64 / 1e3;
        vec![
            ("late_p50_after_insert_ms", ms(after.value_at_quantile(0.50))),
            ("late_p99_after_insert_ms", ms(after.value_at_quantile(0.99))),
            ("due_after_insert", after.len() as f64),
            ("late_p50_ms", ms(hist.value_at_quantile(0.50))),
            ("late_p99_ms", ms(hist.value_at_quantile(0.99))),
            ("late_max_ms", ms(hist.max())),
            ("duplicates", self.duplicates.load(Relaxed) as f64),
            ("early", self.early.load(Relaxed) as f64),
            ("handled", self.distinct() as f64),
            ("wall_ms", wall_ms),
        ]
    }
}
