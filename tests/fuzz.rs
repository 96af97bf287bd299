//! No panic on any input: every public constructor and method, called with arbitrary arguments
//! (keys of any UTF-8 up to 1 MiB, durations and instants at the extremes, every builder setting
//! at its extremes, the pure wheels with any tick and any forged `EntryId`), returns `Ok` or the
//! error its docs name for that class of input, and never panics, aborts or hangs; and the
//! service still fires a plain timer afterwards.
//!
//! Each case runs on a thread of its own under a paused Tokio clock, inside `tokio::time::timeout`
//! (a case that waits forever fails rather than blocks) and a wall-clock watchdog (a case that
//! spins fails too). A global allocator refuses any single request over [`REFUSE_OVER`] and keeps
//! the process under [`LIVE_LIMIT`], so that a huge `capacity` can never really take many GiB:
//! it records what was asked for, and the huge-capacity test checks that the crate refuses such
//! settings before it asks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;
use tokio::time::Instant;
use tokio_timewheel::wheel::{EntryId, HierarchicalWheel, RoundsWheel, Wheel, MAX_SLOTS};
use tokio_timewheel::{Advance, Builder, Error, Repeat, Scheduled, Scheduler, WheelKind, MAX_KEY_LEN, MIN_TICK};

// ---------------------------------------------------------------------------------------------
// The guard allocator.

/// Any single request larger than this is refused (the allocator returns null).
const REFUSE_OVER: usize = 1 << 30;
/// Requests that would take the live total past this are refused.
const LIVE_LIMIT: usize = 3 << 30;

struct Guard;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The largest single request seen since the last [`reset_largest`].
static LARGEST: AtomicUsize = AtomicUsize::new(0);

impl Guard {
    fn admit(size: usize) -> bool {
        LARGEST.fetch_max(size, Relaxed);
        size <= REFUSE_OVER && LIVE.load(Relaxed).saturating_add(size) <= LIVE_LIMIT
    }
}

unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !Guard::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !Guard::admit(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !Guard::admit(new_size - layout.size()) || new_size > REFUSE_OVER {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            LIVE.fetch_add(new_size, Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Guard = Guard;

/// Tests that ask for a lot of memory, or measure the largest request, run one at a time.
fn memory_heavy() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Running a case.

/// Wall-clock time a case may take before it counts as hung.
const WALL: Duration = Duration::from_secs(20);
/// Paused (virtual) time a case's async work may take before it counts as hung.
const VIRTUAL: Duration = Duration::from_secs(5_000 * 365 * 86_400);

/// Runs `case` on a thread of its own, on a current-thread runtime with the clock paused, under
/// a virtual-time timeout and a wall-clock watchdog; a panic in it is re-raised here.
fn run<F, Fut>(case: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("fuzz-case".into())
        .spawn(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let runtime =
                    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
                runtime.block_on(async {
                    tokio::time::timeout(VIRTUAL, case()).await.expect("hang: the case never finished (virtual time)")
                });
            }));
            let _ = done.send(outcome);
        })
        .unwrap();
    match finished.recv_timeout(WALL) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("hang: the case took more than {WALL:?} of wall time"),
    }
}

/// Cases per property: `n` by default (the whole file runs in a few seconds), or `FUZZ_CASES`
/// for a longer search.
fn cases(n: u32) -> u32 {
    std::env::var("FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(n)
}

// ---------------------------------------------------------------------------------------------
// Strategies.

static LONG_ASCII: LazyLock<String> = LazyLock::new(|| "k".repeat(1 << 20));
static LONG_MULTIBYTE: LazyLock<String> = LazyLock::new(|| "é🦀".repeat((1 << 20) / 6));

/// Keys of any UTF-8: empty, NUL, multi-byte, both sides of the 14-byte inline limit, long,
/// and (rarely) 1 MiB.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9:-]{1,20}",
        4 => any::<String>(),
        1 => Just(String::new()),
        1 => Just("\0".to_owned()),
        1 => Just("\0\0\0".to_owned()),
        1 => Just("\u{10FFFF}é漢🦀".to_owned()),
        1 => Just("x".repeat(14)),
        1 => Just("y".repeat(15)),
        1 => Just("🦀".repeat(4)),
        1 => Just(" ".to_owned()),
        1 => "\\PC{100,300}",
        1 => prop_oneof![Just(()).prop_map(|_| LONG_ASCII.clone()), Just(()).prop_map(|_| LONG_MULTIBYTE.clone())],
    ]
}

/// Durations at the extremes, and ordinary ones.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        2 => Just(Duration::ZERO),
        2 => Just(Duration::from_nanos(1)),
        2 => Just(Duration::MAX),
        2 => Just(Duration::from_nanos(u64::MAX)),
        1 => Just(Duration::from_nanos(u64::MAX) + Duration::from_nanos(1)),
        2 => Just(Duration::from_secs(u64::MAX)),
        1 => Just(Duration::from_secs(i64::MAX as u64)),
        1 => Just(Duration::from_secs(1 << 40)),
        1 => any::<u64>().prop_map(Duration::from_nanos),
        1 => (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        6 => (0..3_000u64).prop_map(Duration::from_millis),
        2 => (0..100_000u64).prop_map(Duration::from_nanos),
    ]
}

/// An instant relative to the time of the call: the far past and far future as far as an
/// `Instant` reaches (found with `checked_sub` / `checked_add`), and ordinary ones.
#[derive(Debug, Clone, Copy)]
enum When {
    Past(Duration),
    Future(Duration),
}

impl When {
    fn at(self, now: Instant) -> Instant {
        let mut d = match self {
            When::Past(d) | When::Future(d) => d,
        };
        // The farthest instant in that direction up to `d` that exists.
        loop {
            let at = match self {
                When::Past(_) => now.checked_sub(d),
                When::Future(_) => now.checked_add(d),
            };
            if let Some(at) = at {
                return at;
            }
            d /= 2;
        }
    }
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![duration().prop_map(When::Past), duration().prop_map(When::Future)]
}

/// What the service promises of the arguments: every one-shot delay or instant is accepted (a
/// deadline past the latest one is clamped to it); a key is 1 to `MAX_KEY_LEN` bytes.
#[derive(Debug, Clone, Copy)]
struct Model {
    max_pending: usize,
}

impl Model {
    /// Whether a repeating timer set at `now` with `period` has a first run: its instant must
    /// exist.
    fn first_run_ok(&self, now: Instant, period: Duration) -> bool {
        now.checked_add(period).is_some()
    }
}

/// A key that every call refuses (or, answering without a `Result`, finds nothing under).
fn bad(key: &str) -> bool {
    key.is_empty() || key.len() > MAX_KEY_LEN
}

#[derive(Debug, Clone)]
enum Op {
    Schedule(usize, Duration),
    ScheduleAt(usize, When),
    Repeating(usize, Duration, Option<u64>),
    SleepKeyed(usize, Duration),
    ScheduleMany(Vec<(usize, Duration)>),
    CancelMany(Vec<usize>),
    ScheduleOrReset(usize, Duration),
    Cancel(usize),
    CancelNow(usize),
    Reschedule(usize, Duration),
    RescheduleAt(usize, When),
    Look(usize),
    Guard(usize, Duration, bool),
    QueueSchedule(usize, Duration),
    QueueScheduleAt(usize, When),
    QueueScheduleOrReset(usize, Duration),
    Flush,
    ShrinkToFit,
    Sleep(Duration),
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0usize..8;
    let times = prop_oneof![Just(None), Just(Some(0)), Just(Some(1)), Just(Some(u64::MAX)), (0..5u64).prop_map(Some)];
    prop_oneof![
        4 => (k(), duration()).prop_map(|(k, d)| Op::Schedule(k, d)),
        2 => (k(), when()).prop_map(|(k, w)| Op::ScheduleAt(k, w)),
        2 => (k(), duration(), times).prop_map(|(k, d, t)| Op::Repeating(k, d, t)),
        2 => (k(), duration()).prop_map(|(k, d)| Op::SleepKeyed(k, d)),
        2 => prop::collection::vec((k(), duration()), 0..12).prop_map(Op::ScheduleMany),
        1 => prop::collection::vec(k(), 0..12).prop_map(Op::CancelMany),
        2 => (k(), duration()).prop_map(|(k, d)| Op::ScheduleOrReset(k, d)),
        2 => k().prop_map(Op::Cancel),
        1 => k().prop_map(Op::CancelNow),
        2 => (k(), duration()).prop_map(|(k, d)| Op::Reschedule(k, d)),
        2 => (k(), when()).prop_map(|(k, w)| Op::RescheduleAt(k, w)),
        2 => k().prop_map(Op::Look),
        1 => (k(), duration(), any::<bool>()).prop_map(|(k, d, b)| Op::Guard(k, d, b)),
        1 => (k(), duration()).prop_map(|(k, d)| Op::QueueSchedule(k, d)),
        1 => (k(), when()).prop_map(|(k, w)| Op::QueueScheduleAt(k, w)),
        1 => (k(), duration()).prop_map(|(k, d)| Op::QueueScheduleOrReset(k, d)),
        1 => Just(Op::Flush),
        1 => Just(Op::ShrinkToFit),
        2 => (0..300u64).prop_map(|ms| Op::Sleep(Duration::from_millis(ms))),
    ]
}

// ---------------------------------------------------------------------------------------------
// Checking results.

/// `result` is `Err(Error::Invalid(_))`.
#[track_caller]
fn invalid<T: std::fmt::Debug>(result: &Result<T, Error>, what: &str) {
    assert!(matches!(result, Err(Error::Invalid(_))), "{what}: expected Error::Invalid, got {result:?}");
}

/// The result of claiming `key` with a representable deadline: `Ok`, or `DuplicateKey(key)` if
/// the key was pending before the call, or `Full` if `max_pending` timers were.
#[track_caller]
fn claimed<T: std::fmt::Debug>(result: &Result<T, Error>, key: &str, was_pending: bool, len: usize, model: &Model) {
    match result {
        Ok(_) => {}
        Err(Error::DuplicateKey(k)) => {
            assert!(was_pending, "DuplicateKey for {} a key that was not pending", short(key));
            assert_eq!(k, key, "DuplicateKey carries the key");
        }
        Err(Error::Full(max)) => {
            assert_eq!(*max, model.max_pending, "Full carries max_pending");
            assert!(len >= model.max_pending, "Full with {len} of {} pending", model.max_pending);
        }
        Err(e) => panic!("claiming {} gave {e:?}", short(key)),
    }
}

fn short(key: &str) -> String {
    let mut s: String = key.chars().take(20).collect();
    if s.len() < key.len() {
        s.push_str(&format!("…({} bytes)", key.len()));
    }
    format!("{s:?}")
}

/// A builder for the service cases: valid settings only, at their extremes.
#[derive(Debug, Clone)]
struct Settings {
    tick: Duration,
    slots: usize,
    wheel: WheelKind,
    advance: Advance,
    max_pending: usize,
    capacity: usize,
    lag_warning: u64,
}

fn settings() -> impl Strategy<Value = Settings> {
    let tick = prop_oneof![
        5 => Just(MIN_TICK),
        1 => Just(MIN_TICK + Duration::from_nanos(7)),
        1 => Just(Duration::from_secs(1)),
        1 => Just(Duration::from_secs(3600)),
        1 => Just(Duration::from_nanos(u64::MAX)),
    ];
    let wheel = prop_oneof![Just(WheelKind::Hierarchical), Just(WheelKind::Rounds)];
    let advance = prop_oneof![3 => Just(Advance::NextDeadline), 1 => Just(Advance::Interval)];
    let slots = prop_oneof![Just(2usize), Just(3), Just(4), Just(64), Just(100), 2..300usize];
    let max_pending = prop_oneof![Just(1usize), Just(2), Just(5), Just(usize::MAX)];
    let capacity = prop_oneof![Just(0usize), Just(1), Just(1_000), Just(usize::MAX)];
    let lag = prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()];
    (tick, slots, wheel, advance, max_pending, capacity, lag).prop_map(
        |(tick, slots, wheel, advance, max_pending, capacity, lag_warning)| {
            // A rounds wheel takes one slot too; a capacity past max_pending is cut to it, and
            // usize::MAX with no max_pending is for the huge-capacity test.
            let capacity = if max_pending == usize::MAX { capacity.min(1_000) } else { capacity };
            Settings { tick, slots, wheel, advance, max_pending, capacity, lag_warning }
        },
    )
}

impl Settings {
    fn builder(&self) -> Builder {
        Scheduler::builder()
            .tick(self.tick)
            .slots(self.slots)
            .wheel(self.wheel)
            .advance(self.advance)
            .max_pending(self.max_pending)
            .capacity(self.capacity)
            .lag_warning(self.lag_warning)
    }
}

/// Checks that the service still works: every timer the case left is cancelled, then a plain
/// timer is scheduled and fires.
async fn still_works(timer: &Scheduler, keys: &[String], tick: Duration) {
    timer.cancel_many(keys).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let delay = tick.max(Duration::from_millis(1));
    let done = timer
        .schedule("fuzz:sentinel", delay, move |key| async move {
            let _ = tx.send(key);
        })
        .await
        .unwrap_or_else(|e| panic!("a plain timer after the case's calls: {e:?} ({:?})", timer.stats()));
    let limit = tick.saturating_mul(4).saturating_add(Duration::from_secs(10));
    let outcome = tokio::time::timeout(limit, done).await.expect("the plain timer fired in time");
    assert_eq!(outcome, Ok(()));
    assert_eq!(rx.await.as_deref(), Ok("fuzz:sentinel"));
}

async fn service_case(settings: Settings, pool: Vec<String>, ops: Vec<Op>, stop_at_end: bool) {
    let timer = settings.builder().start().expect("valid settings start");
    let model = Model { max_pending: settings.max_pending };
    let (queue, mut expired) = timer.queue::<u32>();
    let key = |k: usize| pool[k % pool.len()].as_str();
    let mut watching: Vec<Scheduled> = Vec::new();
    for op in ops {
        let now = Instant::now();
        let len = timer.len();
        assert_eq!(timer.stats().pending, len);
        assert!(len <= settings.max_pending, "{len} pending past max_pending {}", settings.max_pending);
        match op {
            Op::Schedule(k, delay) => {
                let (key, was) = (key(k), timer.contains(key(k)));
                let r = timer.schedule(key, delay, |_| async {}).await;
                if bad(key) {
                    invalid(&r, &format!("schedule({}, {delay:?})", short(key)));
                } else {
                    claimed(&r, key, was, len, &model);
                }
                if let Ok(s) = r {
                    assert_eq!(s.key(), key);
                    watching.push(s);
                }
            }
            Op::ScheduleAt(k, w) => {
                let (key, was, at) = (key(k), timer.contains(key(k)), w.at(now));
                let r = timer.schedule_at(key, at, |_| async {}).await;
                if bad(key) {
                    invalid(&r, &format!("schedule_at({}, {w:?})", short(key)));
                } else {
                    claimed(&r, key, was, len, &model);
                }
            }
            Op::Repeating(k, period, times) => {
                let (key, was) = (key(k), timer.contains(key(k)));
                let repeat = times.map_or(Repeat::Forever, Repeat::Times);
                let r = timer.schedule_repeating(key, period, repeat, |_| async {}).await;
                // Periods under 1 ms are refused: the service could never make up their runs.
                let too_short = period < Duration::from_millis(1);
                if bad(key) || too_short || times == Some(0) || !model.first_run_ok(now, period) {
                    invalid(&r, &format!("schedule_repeating({}, {period:?}, {repeat:?})", short(key)));
                } else {
                    claimed(&r, key, was, len, &model);
                }
            }
            Op::SleepKeyed(k, delay) => {
                let (key, was) = (key(k), timer.contains(key(k)));
                let polled = timer.sleep_keyed(key, delay).now_or_never();
                if bad(key) {
                    invalid(&polled.expect("a refused sleep is ready at once"), "sleep_keyed");
                } else if let Some(r) = polled {
                    // Ready on its first poll: only a refusal (a sleep is due a tick on at least).
                    assert!(r.is_err(), "a keyed sleep of {delay:?} ended on its first poll");
                    claimed(&r, key, was, len, &model);
                } else if delay <= Duration::from_millis(50) && settings.tick <= Duration::from_millis(1) {
                    // Short enough to sleep through: it ends Ok, unless it was refused.
                    let r = timer.sleep_keyed(key, delay).await;
                    if r.is_err() {
                        claimed(&r, key, timer.contains(key), timer.len(), &model);
                    }
                }
                // Dropped pending: the keyed sleep is cancelled, the key free again.
            }
            Op::ScheduleMany(items) => {
                let items: Vec<(String, Duration)> = items.into_iter().map(|(k, d)| (key(k).to_owned(), d)).collect();
                let was: Vec<bool> = items.iter().map(|(k, _)| timer.contains(k)).collect();
                let rs = timer.schedule_many(items.iter().map(|(k, d)| (k.as_str(), *d, |_: String| async {}))).await;
                assert_eq!(rs.len(), items.len(), "one result per item");
                for (i, ((key, delay), r)) in items.iter().zip(&rs).enumerate() {
                    if bad(key) {
                        invalid(r, &format!("schedule_many item {i}: ({}, {delay:?})", short(key)));
                    } else {
                        // A duplicate may be an earlier item of the same batch.
                        let earlier = items[..i].iter().any(|(k, _)| k == key);
                        claimed(r, key, was[i] || earlier, usize::MAX, &model);
                    }
                }
            }
            Op::CancelMany(ks) => {
                let ks: Vec<&str> = ks.into_iter().map(key).collect();
                let rs = timer.cancel_many(&ks).await;
                assert_eq!(rs.len(), ks.len());
                for (k, cancelled) in ks.iter().zip(rs) {
                    assert!(!cancelled || !bad(k), "cancelled under a key no timer can have");
                    assert!(!timer.contains(k), "{} still pending after cancel_many", short(k));
                }
            }
            Op::ScheduleOrReset(k, delay) => {
                let key = key(k);
                let r = timer.schedule_or_reset(key, delay, |_| async {}).await;
                if bad(key) {
                    invalid(&r, &format!("schedule_or_reset({}, {delay:?})", short(key)));
                } else {
                    claimed(&r, key, false, len, &model);
                }
            }
            Op::Cancel(k) => {
                let key = key(k);
                let cancelled = timer.cancel(key).await;
                assert!(!cancelled || !bad(key));
                assert!(!timer.contains(key));
            }
            Op::CancelNow(k) => {
                let key = key(k);
                let _ = timer.cancel_now(key);
                assert!(!timer.contains(key));
            }
            Op::Reschedule(k, delay) => {
                let (key, was) = (key(k), timer.contains(key(k)));
                let r = timer.reschedule(key, delay).await;
                match &r {
                    Ok(()) => assert!(was, "moved {}", short(key)),
                    Err(Error::NotFound) => assert!(!was && !bad(key), "reschedule({}) not found", short(key)),
                    Err(Error::Invalid(_)) => assert!(bad(key), "reschedule({}, {delay:?}) refused", short(key)),
                    Err(e) => panic!("reschedule gave {e:?}"),
                }
            }
            Op::RescheduleAt(k, w) => {
                let (key, was, at) = (key(k), timer.contains(key(k)), w.at(now));
                let r = timer.reschedule_at(key, at).await;
                match &r {
                    Ok(()) => assert!(was, "moved {}", short(key)),
                    Err(Error::NotFound) => assert!(!was && !bad(key), "reschedule_at({}) not found", short(key)),
                    Err(Error::Invalid(_)) => assert!(bad(key), "reschedule_at({}, {w:?}) refused", short(key)),
                    Err(e) => panic!("reschedule_at gave {e:?}"),
                }
            }
            Op::Look(k) => {
                let key = key(k);
                let pending = timer.contains(key);
                let deadline = timer.deadline(key);
                // No case pauses a timer, so every pending one has a deadline, however far.
                assert_eq!(pending, deadline.is_some(), "{}: pending {pending}, deadline {deadline:?}", short(key));
                let _ = (timer.is_empty(), timer.stats(), timer.lateness(), format!("{timer:?}"));
            }
            Op::Guard(k, delay, disarm) => {
                let (key, was) = (key(k), timer.contains(key(k)));
                let r = timer.schedule(key, delay, |_| async {}).await;
                if bad(key) {
                    invalid(&r, "schedule for a guard");
                    continue;
                }
                claimed(&r, key, was, len, &model);
                let Ok(s) = r else { continue };
                let guard = s.cancel_on_drop();
                assert_eq!(guard.key(), key);
                let _ = format!("{guard:?}");
                if disarm {
                    watching.push(guard.disarm());
                } else {
                    drop(guard);
                    assert!(!timer.contains(key), "a dropped guard cancels its timer");
                }
            }
            Op::QueueSchedule(k, delay) => {
                // A queue's keys are its own: a duplicate is a pending timer of the queue.
                let (key, was) = (key(k), queue.contains(key(k)));
                let r = queue.schedule(key, delay, 7).await;
                if bad(key) {
                    invalid(&r, "TimerQueue::schedule");
                } else {
                    claimed(&r, key, was, len, &model);
                }
            }
            Op::QueueScheduleAt(k, w) => {
                let (key, was, at) = (key(k), queue.contains(key(k)), w.at(now));
                let r = queue.schedule_at(key, at, 8).await;
                if bad(key) {
                    invalid(&r, "TimerQueue::schedule_at");
                } else {
                    claimed(&r, key, was, len, &model);
                }
            }
            Op::QueueScheduleOrReset(k, delay) => {
                let key = key(k);
                let r = queue.schedule_or_reset(key, delay, 9).await;
                if bad(key) {
                    invalid(&r, "TimerQueue::schedule_or_reset");
                } else {
                    claimed(&r, key, false, len, &model);
                }
            }
            Op::Flush => timer.flush().await,
            Op::ShrinkToFit => timer.shrink_to_fit().await,
            Op::Sleep(d) => tokio::time::sleep(d).await,
        }
    }
    // The watched timers that ended by now resolve; the rest are dropped unpolled-through.
    for s in watching.drain(..) {
        if let Some(outcome) = s.now_or_never() {
            assert!(matches!(outcome, Ok(()) | Err(Error::Cancelled)), "a Scheduled ended with {outcome:?}");
        }
    }
    let _ = (expired.len(), expired.is_empty(), format!("{expired:?} {queue:?}"), queue.scheduler().len());
    while let Some(Some((k, v))) = expired.recv().now_or_never() {
        assert!(!k.is_empty() && (7..=9).contains(&v), "delivered ({}, {v})", short(&k));
    }
    // The queue's timers are in the queue's own key space: cancel them through it.
    for k in &pool {
        queue.remove(k);
    }
    assert!(queue.is_empty(), "{} of the queue's timers left after removing every key", queue.len());
    still_works(&timer, &pool, settings.tick).await;
    if stop_at_end {
        let pending = timer.len();
        assert_eq!(timer.stop().await, pending);
        let r = timer.schedule("after-stop", Duration::from_millis(1), |_| async {}).await;
        assert_eq!(r.unwrap_err(), Error::Stopped);
        assert_eq!(timer.reschedule("after-stop", Duration::ZERO).await, Err(Error::Stopped));
        assert_eq!(timer.schedule_or_reset("after-stop", Duration::ZERO, |_| async {}).await, Err(Error::Stopped));
        assert_eq!(
            timer.schedule_many([("after-stop", Duration::ZERO, |_: String| async {})]).await[0],
            Err(Error::Stopped)
        );
        invalid(&timer.schedule("", Duration::ZERO, |_| async {}).await, "an empty key after stop");
        assert_eq!(timer.stop().await, 0);
        timer.flush().await;
        timer.shrink_to_fit().await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(160), max_shrink_iters: 64, ..ProptestConfig::default() })]

    /// Every call of the handle, the queue and the guards with arbitrary keys, delays and
    /// instants, on services with settings at their extremes.
    #[test]
    fn every_call_returns_ok_or_its_documented_error(
        settings in settings(),
        pool in prop::collection::vec(key(), 1..5),
        ops in prop::collection::vec(op(), 1..16),
        stop_at_end in any::<bool>(),
    ) {
        if std::env::var_os("FUZZ_TRACE").is_some() {
            eprintln!("case: {settings:?} {:?} {ops:?} {stop_at_end}", pool.iter().map(|k| short(k)).collect::<Vec<_>>());
        }
        run(move || service_case(settings, pool, ops, stop_at_end));
    }
}

// ---------------------------------------------------------------------------------------------
// The builder.

fn any_tick() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(MIN_TICK - Duration::from_nanos(1)),
        Just(MIN_TICK),
        Just(Duration::from_nanos(u64::MAX)),
        Just(Duration::from_nanos(u64::MAX) + Duration::from_nanos(1)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        (1..1_000_000_000u64).prop_map(Duration::from_nanos),
    ]
}

fn any_slots() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1),
        Just(2),
        Just(3),
        Just(64),
        Just(MAX_SLOTS + 1),
        Just(usize::MAX),
        Just(usize::MAX / 2 + 1),
        0..200usize,
    ]
}

const MAX_PERMITS: usize = tokio::sync::Semaphore::MAX_PERMITS;

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(200), max_shrink_iters: 64, ..ProptestConfig::default() })]

    /// `start` accepts exactly the settings its docs allow and says `Invalid` for the rest; a
    /// service it starts fires a timer.
    #[test]
    fn the_builder_accepts_valid_settings_and_refuses_the_rest(
        tick in any_tick(),
        slots in any_slots(),
        rounds in any::<bool>(),
        interval in any::<bool>(),
        max_pending in prop_oneof![Just(0usize), Just(1), Just(2), Just(usize::MAX), any::<usize>()],
        capacity in prop_oneof![Just(0usize), Just(1), Just(100), 0..5_000usize],
        channel in prop_oneof![Just(0usize), Just(1), Just(2), Just(MAX_PERMITS), Just(MAX_PERMITS + 1), Just(usize::MAX)],
        lag in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
    ) {
        run(move || async move {
            let builder = Scheduler::builder()
                .tick(tick)
                .slots(slots)
                .wheel(if rounds { WheelKind::Rounds } else { WheelKind::Hierarchical })
                .advance(if interval { Advance::Interval } else { Advance::NextDeadline })
                .max_pending(max_pending)
                .capacity(capacity)
                .channel_capacity(channel)
                .lag_warning(lag);
            let _ = format!("{:?}", builder.clone());
            let valid = (MIN_TICK.as_nanos()..=u128::from(u64::MAX)).contains(&tick.as_nanos())
                && (if rounds { 1 } else { 2 }..=MAX_SLOTS).contains(&slots)
                && max_pending >= 1
                && (1..=MAX_PERMITS).contains(&channel);
            let r = builder.start();
            if !valid {
                invalid(&r, &format!("start with tick {tick:?}, slots {slots}, max_pending {max_pending}, channel {channel}"));
                return;
            }
            let timer = r.unwrap_or_else(|e| panic!("valid settings refused: {e}"));
            still_works(&timer, &[], tick).await;
        });
    }
}

#[test]
fn builder_defaults_and_outside_a_runtime() {
    let r = Builder::default().start();
    invalid(&r, "start outside a runtime");
    // A runtime without the time driver.
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async { invalid(&Scheduler::builder().start(), "start without a time driver") });
}

/// `MAX_SLOTS` works for both wheels, with a timer near the far end of `u64` ticks (clamped to
/// the latest deadline).
#[test]
fn max_slots_work_for_both_wheels() {
    let _one = memory_heavy();
    for wheel in [WheelKind::Hierarchical, WheelKind::Rounds] {
        run(move || async move {
            let timer = Scheduler::builder().slots(MAX_SLOTS).wheel(wheel).tick(MIN_TICK).start().unwrap();
            let far = Duration::from_millis(u64::MAX - 1_000);
            timer.schedule("far", far, |_| async {}).await.unwrap();
            timer.schedule_at("near", Instant::now(), |_| async {}).await.unwrap();
            still_works(&timer, &["far".into()], MIN_TICK).await;
        });
    }
}

/// Capacities no service could hold are refused before anything large is allocated; ones the
/// process cannot allocate (the guard allocator refuses past 1 GiB) are refused with
/// `Invalid`, never a panic or an abort. Capacity past `max_pending` is cut to it.
#[test]
fn huge_capacities_are_refused_before_allocating() {
    let _one = memory_heavy();
    // Past what 64 shards of at most 2^31 - 1 entries each hold, whatever the core count.
    let beyond_any_service = [1usize << 37, 1 << 40, 1 << 50, usize::MAX / 2, usize::MAX - 1, usize::MAX];
    for capacity in beyond_any_service {
        for wheel in [WheelKind::Hierarchical, WheelKind::Rounds] {
            run(move || async move {
                LARGEST.store(0, Relaxed);
                let r = Scheduler::builder().wheel(wheel).capacity(capacity).start();
                let largest = LARGEST.load(Relaxed);
                invalid(&r, &format!("capacity {capacity}"));
                assert!(
                    largest < 64 << 20,
                    "capacity {capacity}: asked the allocator for {largest} bytes before refusing"
                );
            });
        }
    }
    // Possible in principle but not in this process: the allocations fail and say so.
    for capacity in [1usize << 28, (1 << 31) - 1, 1 << 32, 1 << 34] {
        run(move || async move {
            LARGEST.store(0, Relaxed);
            let r = Scheduler::builder().capacity(capacity).start();
            invalid(&r, &format!("capacity {capacity} past what the allocator gives"));
            eprintln!("capacity {capacity}: largest request {} MiB before Invalid", LARGEST.load(Relaxed) >> 20);
        });
    }
    // Clamped to max_pending: cheap, and the service works.
    run(|| async {
        let timer = Scheduler::builder().capacity(usize::MAX).max_pending(3).start().unwrap();
        still_works(&timer, &[], Duration::from_millis(1)).await;
    });
}

/// More timers than a service reserves room for (2^28), hundreds of GiB of them, are refused
/// before anything is allocated. (They were not: each shard's key map was allocated and written
/// first, 8 GiB per shard at 2^32 on a 2-core machine, so without this file's guard allocator
/// the process was killed for want of memory instead of getting `Error::Invalid`.)
#[test]
fn capacities_past_what_a_wheel_holds_are_refused_before_allocating() {
    let _one = memory_heavy();
    for capacity in [1usize << 32, 1 << 33] {
        run(move || async move {
            LARGEST.store(0, Relaxed);
            let r = Scheduler::builder().capacity(capacity).start();
            let largest = LARGEST.load(Relaxed);
            invalid(&r, &format!("capacity {capacity}"));
            assert!(largest < 64 << 20, "capacity {capacity}: asked the allocator for {largest} bytes before refusing");
        });
    }
}

/// A guard awaited to completion has nothing left to disarm or cancel.
#[test]
fn a_finished_guard_is_harmless() {
    run(|| async {
        let timer = Scheduler::builder().start().unwrap();
        let mut guard = timer.schedule("g", Duration::from_millis(5), |_| async {}).await.unwrap().cancel_on_drop();
        assert_eq!((&mut guard).await, Ok(()));
        assert_eq!(guard.key(), "");
        drop(guard);
        still_works(&timer, &[], Duration::from_millis(1)).await;
    });
}

/// `disarm` on a guard that has completed panics, as its docs say (there is no `Scheduled` left
/// to give back); the service is untouched.
#[test]
fn disarming_a_finished_guard_panics_as_documented() {
    run(|| async {
        let timer = Scheduler::builder().start().unwrap();
        let mut guard = timer.schedule("g", Duration::from_millis(5), |_| async {}).await.unwrap().cancel_on_drop();
        assert_eq!((&mut guard).await, Ok(()));
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(guard.disarm())))
            .expect_err("disarm after completion panics");
        let message = match (panic.downcast_ref::<String>(), panic.downcast_ref::<&str>()) {
            (Some(s), _) => s.clone(),
            (_, Some(s)) => s.to_string(),
            _ => String::new(),
        };
        assert!(message.contains("disarmed or finished"), "{message}");
        still_works(&timer, &[], Duration::from_millis(1)).await;
    });
}

// ---------------------------------------------------------------------------------------------
// The pure wheels.

fn tick() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => Just(0u64),
        2 => Just(u64::MAX),
        2 => Just(u64::MAX - 1),
        1 => Just(u64::MAX / 2),
        1 => Just(1u64 << 63),
        1 => (0..1_000u64).prop_map(|d| u64::MAX - d),
        1 => any::<u64>(),
        4 => 0..5_000u64,
    ]
}

#[derive(Debug, Clone)]
enum WheelOp {
    Insert(u64),
    /// Relative to the wheel's clock, saturating.
    InsertAhead(u64),
    Remove(usize),
    RemoveForged(u64),
    Advance(u64),
    AdvanceBy(u64),
    Reserve(usize),
}

fn wheel_op() -> impl Strategy<Value = WheelOp> {
    prop_oneof![
        4 => tick().prop_map(WheelOp::Insert),
        4 => (0..10_000u64).prop_map(WheelOp::InsertAhead),
        3 => any::<usize>().prop_map(WheelOp::Remove),
        2 => prop_oneof![any::<u64>(), Just(0u64), Just(u64::MAX), (0..4u64), (0..4u64).prop_map(|i| 1 << 32 | i)]
            .prop_map(WheelOp::RemoveForged),
        2 => tick().prop_map(WheelOp::Advance),
        3 => (0..20_000u64).prop_map(WheelOp::AdvanceBy),
        1 => prop_oneof![Just(0usize), Just(1), Just(100), Just(usize::MAX), Just((1 << 31) - 1), Just(1 << 31), Just(usize::MAX / 64)]
            .prop_map(WheelOp::Reserve),
    ]
}

/// Drives `wheel` with `ops` against a map of the live entries: removes and lookups agree with
/// it (a forged or stale id names nothing unless it is a live entry's id), and each advance
/// yields exactly the entries due by the clock.
fn drive<W: Wheel<u32>>(wheel: &mut W, ops: &[WheelOp], reserve: impl Fn(&mut W, usize) -> Result<(), Error>) {
    let mut live: std::collections::HashMap<EntryId, (u64, u32)> = Default::default();
    let mut ids: Vec<EntryId> = Vec::new();
    let mut value = 0u32;
    for op in ops {
        match *op {
            WheelOp::Insert(deadline) | WheelOp::InsertAhead(deadline) => {
                let deadline =
                    if matches!(op, WheelOp::InsertAhead(_)) { wheel.now().saturating_add(deadline) } else { deadline };
                value += 1;
                let id = wheel.insert(deadline, value);
                assert!(live.insert(id, (deadline, value)).is_none(), "id {id:?} handed out twice");
                assert_eq!(wheel.deadline(id), Some(deadline));
                ids.push(id);
            }
            WheelOp::Remove(i) if !ids.is_empty() => {
                let id = ids[i % ids.len()];
                assert_eq!(wheel.remove(id), live.remove(&id).map(|(_, v)| v), "remove {id:?}");
                assert_eq!(wheel.remove(id), None, "a removed id is stale");
                assert_eq!(wheel.deadline(id), None);
            }
            WheelOp::Remove(_) => {}
            WheelOp::RemoveForged(raw) => {
                let id = EntryId::from_u64(raw);
                assert_eq!(id.to_u64(), raw);
                assert_eq!(wheel.deadline(id), live.get(&id).map(|&(d, _)| d));
                assert_eq!(wheel.remove(id), live.remove(&id).map(|(_, v)| v), "forged {raw:#x}");
            }
            WheelOp::Advance(now) | WheelOp::AdvanceBy(now) => {
                let now = if matches!(op, WheelOp::AdvanceBy(_)) { wheel.now().saturating_add(now) } else { now };
                let mut fired = Vec::new();
                wheel.advance(now, |e| fired.push(e));
                let clock = wheel.now();
                assert_eq!(clock, now.max(clock), "the clock never goes back");
                for e in fired {
                    assert_eq!(live.remove(&e.id), Some((e.deadline, e.value)), "expired {e:?}");
                    assert!(e.deadline <= clock, "{} expired at {clock}", e.deadline);
                }
                let late: Vec<_> = live.values().filter(|&&(d, _)| d <= clock).collect();
                assert!(late.is_empty(), "due by {clock} but not expired: {late:?}");
            }
            WheelOp::Reserve(n) => {
                let r = reserve(wheel, n);
                if n.saturating_add(wheel.len()) > (1 << 31) - 1 {
                    invalid(&r, &format!("try_reserve({n})"));
                } else {
                    assert!(r.is_ok() || matches!(r, Err(Error::Invalid(_))), "try_reserve({n}): {r:?}");
                }
            }
        }
        assert_eq!(wheel.len(), live.len());
        assert_eq!(wheel.is_empty(), live.is_empty());
        let (now, next) = (wheel.now(), wheel.next_deadline());
        match live.values().map(|&(d, _)| d).min() {
            None => assert_eq!(next, None, "an empty wheel has no next deadline"),
            Some(first) => {
                let next = next.expect("a wheel with entries has a next deadline");
                assert!(next <= first.max(now), "next deadline {next} after the first entry's {first} (now {now})");
            }
        }
    }
    // The end of time expires everything.
    let mut n = 0;
    wheel.advance(u64::MAX, |_| n += 1);
    assert_eq!(n, live.len());
    assert!(wheel.is_empty() && wheel.next_deadline().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), max_shrink_iters: 256, ..ProptestConfig::default() })]

    /// Both wheels, any slot count the constructor takes or refuses, any ticks and any ids.
    #[test]
    fn the_wheels_take_any_tick_and_any_id(
        slots in prop_oneof![Just(0usize), Just(1), Just(2), Just(3), Just(64), Just(MAX_SLOTS + 1), Just(usize::MAX), 0..300usize],
        ops in prop::collection::vec(wheel_op(), 0..48),
    ) {
        let _one = memory_heavy();
        match HierarchicalWheel::<u32>::new(slots) {
            Ok(mut wheel) => {
                prop_assert!((2..=MAX_SLOTS).contains(&slots));
                prop_assert_eq!(wheel.slots(), slots);
                drive(&mut wheel, &ops, |w, n| w.try_reserve(n));
                let _ = wheel.levels();
            }
            Err(e) => {
                prop_assert!(!(2..=MAX_SLOTS).contains(&slots));
                prop_assert!(matches!(e, Error::Invalid(_)));
            }
        }
        match RoundsWheel::<u32>::new(slots) {
            Ok(mut wheel) => {
                prop_assert!((1..=MAX_SLOTS).contains(&slots));
                prop_assert_eq!(wheel.slots(), slots);
                drive(&mut wheel, &ops, |w, n| w.try_reserve(n));
                let _ = format!("{wheel:?}");
            }
            Err(e) => {
                prop_assert!(!(1..=MAX_SLOTS).contains(&slots));
                prop_assert!(matches!(e, Error::Invalid(_)));
            }
        }
    }

    #[test]
    fn entry_ids_round_trip(raw in any::<u64>()) {
        prop_assert_eq!(EntryId::from_u64(raw).to_u64(), raw);
    }
}

/// The wheels at `MAX_SLOTS` and with their default, at the ends of `u64`.
#[test]
fn the_wheels_at_max_slots_and_by_default() {
    let _one = memory_heavy();
    let ops = [
        WheelOp::Insert(u64::MAX),
        WheelOp::Insert(0),
        WheelOp::Insert(u64::MAX - 1),
        WheelOp::Insert(1 << 63),
        WheelOp::RemoveForged(u64::MAX),
        WheelOp::Advance(u64::MAX - 2),
        WheelOp::InsertAhead(5),
        WheelOp::Advance(u64::MAX - 1),
        WheelOp::Reserve(usize::MAX),
    ];
    drive(&mut HierarchicalWheel::<u32>::new(MAX_SLOTS).unwrap(), &ops, |w, n| w.try_reserve(n));
    drive(&mut HierarchicalWheel::<u32>::new(MAX_SLOTS - 1).unwrap(), &ops, |w, n| w.try_reserve(n));
    drive(&mut RoundsWheel::<u32>::new(MAX_SLOTS).unwrap(), &ops, |w, n| w.try_reserve(n));
    drive(&mut HierarchicalWheel::<u32>::default(), &ops, |w, n| w.try_reserve(n));
}

/// A case CI's fuzzing found to hang (shrunk): kept as it is, so that it runs every time.
#[test]
fn a_case_that_hung() {
    let settings = Settings {
        tick: Duration::new(0, 1000000),
        slots: 2,
        wheel: WheelKind::Hierarchical,
        advance: Advance::NextDeadline,
        max_pending: 1,
        capacity: 0,
        lag_warning: 0,
    };
    let pool = vec!["v".to_string(), "0-7-67-hl-15-2".to_string(), "\0\0\0".to_string()];
    let ops = vec![
        Op::SleepKeyed(7, Duration::new(1, 713000000)),
        Op::Schedule(7, Duration::new(1, 540000000)),
        Op::ScheduleAt(6, When::Past(Duration::new(18446744073709551615, 999999999))),
        Op::ScheduleMany(vec![
            (1, Duration::new(0, 8378)),
            (4, Duration::new(18446744073709551615, 999999999)),
            (6, Duration::new(0, 19243)),
            (7, Duration::new(18446744073709551615, 0)),
            (5, Duration::new(0, 414000000)),
            (0, Duration::new(18446744073, 709551615)),
            (2, Duration::new(6635728669727918869, 434710381)),
            (5, Duration::new(2, 775000000)),
            (6, Duration::new(18446744073709551615, 999999999)),
            (6, Duration::new(18446744073, 709551615)),
        ]),
        Op::SleepKeyed(1, Duration::new(2, 545000000)),
        Op::CancelMany(vec![1, 2, 7, 0, 3, 5, 1, 4, 4, 2]),
        Op::Repeating(4, Duration::new(2, 118000000), Some(18446744073709551615)),
        Op::Reschedule(4, Duration::new(18446744073709551615, 999999999)),
        Op::CancelMany(vec![6]),
        Op::Sleep(Duration::new(0, 260000000)),
        Op::ShrinkToFit,
        Op::RescheduleAt(1, When::Past(Duration::new(1099511627776, 0))),
        Op::Cancel(2),
        Op::Sleep(Duration::new(0, 137000000)),
    ];

    run(move || service_case(settings, pool, ops, false));
}
