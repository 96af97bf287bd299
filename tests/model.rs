//! The public API against a reference model of its contract, under paused time.
//!
//! Random sequences of every call (schedules one by one and in batches, repeating timers, keyed
//! sleeps awaited, held or dropped, cancels, moves, upserts, time passing and `stop`) run on a
//! paused current-thread runtime, and after every step the service must agree with a model that
//! is only a `BTreeMap` of pending keys, their deadline ticks and repeat state: which keys are
//! pending and when they are due, the counters, every `Scheduled`'s outcome and every job run,
//! to the instant.
//!
//! # When a timer fires, exactly
//! Tick `t` is the instant `origin + t * tick`, where `origin` is when the service started; a
//! deadline rounds up to its tick, and the timer is due once the clock's tick (rounded down)
//! reaches it. All times here are whole milliseconds, so every instant the service sleeps to is
//! one Tokio's paused clock stops at. Then:
//! - time passes by `tokio::time::sleep` (the runtime's clock moves to each wake-up in turn):
//!   with [`Advance::NextDeadline`] a timer fires at its deadline tick's instant; with
//!   [`Advance::Interval`] at the first tick instant at or after it on which the actor wakes
//!   (every tick), so a timer due already when it was set waits for the next tick;
//! - time jumps by `tokio::time::advance` (the service is held up meanwhile): every run due by
//!   the new time fires at that time, repeating timers' missed runs included ("made up at
//!   once"), as soon as the actor has a reason to wake (with `Interval`, a tick boundary crossed);
//! - with `NextDeadline`, a timer set or moved to a tick that has come already fires at once.
//!
//! After each step the test only yields until every task is idle, with no `flush`, so a service
//! that failed to wake itself for a due timer is caught; then it checks that a `flush` changes
//! nothing.
//!
//! So every run is checked for the exact instant the model predicts, and against the documented
//! bound independently of the model: never before its deadline, and at most one tick after the
//! latest of its deadline, the call that set it and the end of the last hold-up.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;
use tokio_timewheel::{Advance, Error, Repeat, Scheduler, WheelKind};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Keys `k0` to `k3`: few, so that requests collide on them all the time.
const KEYS: u8 = 4;

fn name(key: u8) -> String {
    format!("k{key}")
}

/// What the test does with the `Scheduled` a call returns.
#[derive(Debug, Clone, Copy)]
enum Watch {
    /// Drops it at once (which must not cancel the timer).
    Drop,
    /// Polls it after every step: pending exactly while the model's timer is.
    Poll,
    /// Keeps it unpolled until the end of the case, or until a `DropHandle` drops it.
    Unpolled,
    /// Turns it into a `CancelOnDrop` guard, kept unpolled: dropping it cancels the timer, if
    /// it is still the one pending under its key.
    Guard,
}

/// How a keyed sleep is used.
#[derive(Debug, Clone, Copy)]
enum SleepMode {
    /// Awaited to completion by a spawned task, which records its outcome and when it came.
    Spawned,
    /// Made and dropped before its first poll: the key was claimed at the call, and the drop
    /// cancels the sleep (as any drop of a keyed sleep does).
    Unpolled,
    /// Polled once and dropped at once: the sleep is cancelled.
    PolledOnce,
    /// Polled once and kept, polled after every step, until a `DropHandle` drops it.
    Held,
}

#[derive(Debug, Clone)]
enum Op {
    Schedule {
        key: u8,
        delay: u64,
        watch: Watch,
    },
    /// At `now + offset` milliseconds, possibly in the past.
    ScheduleAt {
        key: u8,
        offset: i64,
        watch: Watch,
    },
    Repeating {
        key: u8,
        period: u64,
        times: Option<u64>,
        watch: Watch,
    },
    SleepKeyed {
        key: u8,
        delay: u64,
        mode: SleepMode,
    },
    Cancel(u8),
    CancelNow(u8),
    Reschedule {
        key: u8,
        delay: u64,
    },
    RescheduleAt {
        key: u8,
        offset: i64,
    },
    ScheduleOrReset {
        key: u8,
        delay: u64,
    },
    ScheduleMany(Vec<(u8, u64)>),
    CancelMany(Vec<u8>),
    /// Drops one of the handles kept (a `Scheduled`, a guard or a held sleep).
    DropHandle(prop::sample::Index),
    /// `tokio::time::advance`: the clock jumps, as for a service held up.
    Jump(u64),
    /// `tokio::time::sleep`: the runtime's clock stops at every wake-up on the way.
    Sleep(u64),
    Stop,
}

/// Delays in milliseconds: mostly within a few wheel revolutions at tiny slot counts, now and
/// then far enough to reach the hierarchical wheel's upper levels and many rounds of the ring.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..50, 1 => 0u64..3_000]
}

fn watch() -> impl Strategy<Value = Watch> {
    prop_oneof![Just(Watch::Drop), Just(Watch::Poll), Just(Watch::Unpolled), Just(Watch::Guard)]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..KEYS;
    let offset = prop_oneof![4 => -30i64..50, 1 => -30i64..3_000];
    let mode = prop_oneof![
        3 => Just(SleepMode::Spawned),
        1 => Just(SleepMode::Unpolled),
        1 => Just(SleepMode::PolledOnce),
        2 => Just(SleepMode::Held)
    ];
    prop_oneof![
        6 => (key.clone(), delay(), watch()).prop_map(|(key, delay, watch)| Op::Schedule { key, delay, watch }),
        2 => (key.clone(), offset.clone(), watch()).prop_map(|(key, offset, watch)| Op::ScheduleAt { key, offset, watch }),
        3 => (key.clone(), 1u64..25, prop::option::weighted(0.6, 1u64..5), watch())
            .prop_map(|(key, period, times, watch)| Op::Repeating { key, period, times, watch }),
        3 => (key.clone(), delay(), mode).prop_map(|(key, delay, mode)| Op::SleepKeyed { key, delay, mode }),
        3 => key.clone().prop_map(Op::Cancel),
        1 => key.clone().prop_map(Op::CancelNow),
        2 => (key.clone(), delay()).prop_map(|(key, delay)| Op::Reschedule { key, delay }),
        1 => (key.clone(), offset).prop_map(|(key, offset)| Op::RescheduleAt { key, offset }),
        2 => (key.clone(), delay()).prop_map(|(key, delay)| Op::ScheduleOrReset { key, delay }),
        1 => prop::collection::vec((key.clone(), delay()), 0..6).prop_map(Op::ScheduleMany),
        1 => prop::collection::vec(key, 0..6).prop_map(Op::CancelMany),
        1 => any::<prop::sample::Index>().prop_map(Op::DropHandle),
        4 => prop_oneof![6 => 0u64..30, 1 => 0u64..3_000].prop_map(Op::Jump),
        6 => prop_oneof![6 => 0u64..40, 1 => 0u64..3_000].prop_map(Op::Sleep),
    ]
}

#[derive(Debug, Clone, Copy)]
struct Config {
    wheel: WheelKind,
    advance: Advance,
    slots: usize,
    tick: Duration,
    /// `usize::MAX` for no cap.
    max_pending: usize,
}

fn config(wheel: WheelKind, advance: Advance) -> impl Strategy<Value = Config> {
    (prop::sample::select(vec![2usize, 3, 4, 64]), prop::sample::select(vec![1u64, 7]), prop::bool::weighted(0.25))
        .prop_map(move |(slots, tick, capped)| Config {
            wheel,
            advance,
            slots,
            tick: ms(tick),
            max_pending: if capped { 3 } else { usize::MAX },
        })
}

/// A repeating timer's schedule, as the model keeps it.
#[derive(Debug, Clone)]
struct Repeating {
    period: Duration,
    /// Runs left, including the one waited for; `None` for ever.
    runs_left: Option<u64>,
}

/// A pending timer in the model.
#[derive(Debug, Clone)]
struct Timer {
    /// Names the timer for its job's log and its handles (keys are reused).
    id: u64,
    /// The deadline tick the timer waits for.
    tick: u64,
    /// The exact instant the run waited for is due: never fire before it.
    due: Instant,
    /// When the call that set the current deadline was made.
    set_at: Instant,
    repeat: Option<Repeating>,
    /// Whether a run starts a job (a keyed sleep's does not).
    job: bool,
    /// Whether a spawned task awaits the timer as a keyed sleep.
    sleeper: bool,
}

/// The counters of `Stats`, which the test cannot build (it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    pending: usize,
    scheduled: u64,
    fired: u64,
    cancelled: u64,
    stopped: u64,
}

/// A job run the model expects: timer id, key, when (since the origin), and the bound it must
/// be within: its exact deadline and the instant it may be at most a tick after.
#[derive(Debug, Clone)]
struct Run {
    id: u64,
    key: String,
    at: Duration,
    due: Instant,
    latest: Instant,
}

struct Model {
    cfg: Config,
    origin: Instant,
    now: Instant,
    /// The end of the last jump of the clock: the service was held up until then.
    held_until: Instant,
    stopped: bool,
    pending: BTreeMap<u8, Timer>,
    counts: Counts,
    next_id: u64,
    /// How each timer that has ended, ended.
    ended: HashMap<u64, Result<(), Error>>,
    /// Job runs since the last check.
    runs: Vec<Run>,
    /// Keyed sleeps awaited by spawned tasks that ended since the last check: id, outcome, when.
    woke: Vec<(u64, Result<(), Error>, Duration)>,
}

impl Model {
    fn new(cfg: Config, origin: Instant) -> Self {
        Model {
            cfg,
            origin,
            now: origin,
            held_until: origin,
            stopped: false,
            pending: BTreeMap::new(),
            counts: Counts::default(),
            next_id: 0,
            ended: HashMap::new(),
            runs: Vec::new(),
            woke: Vec::new(),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn tick_nanos(&self) -> u128 {
        self.cfg.tick.as_nanos()
    }

    /// The tick of a deadline, rounded up (0 before the origin).
    fn deadline_tick(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.origin).as_nanos().div_ceil(self.tick_nanos())) as u64
    }

    /// The clock's tick at `at`, rounded down.
    fn tick_at(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.origin).as_nanos() / self.tick_nanos()) as u64
    }

    fn instant(&self, tick: u64) -> Instant {
        self.origin + self.cfg.tick * u32::try_from(tick).expect("a tick the test reaches")
    }

    fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }

    /// Whether a new timer under `key` is accepted; if not, the errors the contract allows.
    fn admit(&self, key: u8) -> Result<(), Vec<Error>> {
        if self.stopped {
            return Err(vec![Error::Stopped]);
        }
        let mut refusals = Vec::new();
        if self.pending.len() >= self.cfg.max_pending {
            refusals.push(Error::Full(self.cfg.max_pending));
        }
        if self.pending.contains_key(&key) {
            refusals.push(Error::DuplicateKey(name(key)));
        }
        if refusals.is_empty() {
            Ok(())
        } else {
            Err(refusals)
        }
    }

    /// Accepts a timer due at `due` (a repeating one's first run), and returns its id.
    fn add(&mut self, key: u8, due: Instant, repeat: Option<Repeating>, job: bool, sleeper: bool) -> u64 {
        let id = self.id();
        let timer = Timer { id, tick: self.deadline_tick(due), due, set_at: self.now, repeat, job, sleeper };
        assert!(self.pending.insert(key, timer).is_none(), "admitted first");
        self.counts.scheduled += 1;
        id
    }

    fn end(&mut self, timer: Timer, outcome: Result<(), Error>) {
        if timer.sleeper {
            self.woke.push((timer.id, outcome.clone(), self.since(self.now)));
        }
        self.ended.insert(timer.id, outcome);
    }

    fn cancel(&mut self, key: u8) -> bool {
        let Some(timer) = self.pending.remove(&key) else {
            return false;
        };
        self.counts.cancelled += 1;
        self.end(timer, Err(Error::Cancelled));
        true
    }

    /// Moves the pending timer under `key` to `due`; a repeating one goes on at its period from
    /// there.
    fn move_to(&mut self, key: u8, due: Instant) -> Result<(), Error> {
        if self.stopped {
            return Err(Error::Stopped);
        }
        let tick = self.deadline_tick(due);
        let now = self.now;
        let timer = self.pending.get_mut(&key).ok_or(Error::NotFound)?;
        timer.tick = tick;
        timer.due = due;
        timer.set_at = now;
        Ok(())
    }

    /// The deadline `deadline(key)` reports: the tick's instant, or a repeating timer's exact
    /// next run.
    fn deadline(&self, key: u8) -> Option<Instant> {
        let timer = self.pending.get(&key)?;
        Some(if timer.repeat.is_some() { timer.due } else { self.instant(timer.tick) })
    }

    /// The actor wakes at `self.now`: every run due by its tick starts now, missed runs of
    /// repeating timers included.
    fn fire_due(&mut self) {
        let now_tick = self.tick_at(self.now);
        let latest_base = self.held_until;
        let keys: Vec<u8> = self.pending.keys().copied().collect();
        for key in keys {
            while self.pending[&key].tick <= now_tick {
                let mut timer = self.pending.remove(&key).expect("pending");
                self.counts.fired += 1;
                if timer.job {
                    let latest = timer.due.max(timer.set_at).max(latest_base) + self.cfg.tick;
                    let at = self.since(self.now);
                    self.runs.push(Run { id: timer.id, key: name(key), at, due: timer.due, latest });
                }
                match &mut timer.repeat {
                    Some(repeat) if repeat.runs_left != Some(1) => {
                        repeat.runs_left = repeat.runs_left.map(|n| n - 1);
                        timer.due += repeat.period;
                        timer.tick = self.deadline_tick(timer.due);
                        self.pending.insert(key, timer);
                    }
                    _ => {
                        self.end(timer, Ok(()));
                        break;
                    }
                }
            }
        }
    }

    /// The actor's wake-ups as the clock moves from `self.now` to `to`. `jump`: at once, as
    /// `tokio::time::advance` does; otherwise stopping at each tick on the way.
    fn pass_time(&mut self, to: Instant, jump: bool) {
        if self.stopped {
            self.now = to;
            return;
        }
        let interval = self.cfg.advance == Advance::Interval;
        if jump {
            let crossed = self.tick_at(to) > self.tick_at(self.now);
            self.now = to;
            self.held_until = to;
            if crossed || !interval {
                self.fire_due();
            }
            return;
        }
        // Each tick boundary on the way: the interval ticks there, and every deadline the
        // actor sleeps to is one.
        for tick in self.tick_at(self.now) + 1..=self.tick_at(to) {
            self.now = self.instant(tick);
            self.fire_due();
        }
        self.now = to;
    }

    /// After a step: with `NextDeadline` the actor has been woken for, and started, whatever is
    /// due by now (a timer set or moved to a tick that has come fires at once).
    fn after_step(&mut self) {
        if !self.stopped && self.cfg.advance == Advance::NextDeadline {
            self.fire_due();
        }
    }

    fn stop(&mut self) -> usize {
        if self.stopped {
            return 0;
        }
        self.stopped = true;
        let timers = std::mem::take(&mut self.pending);
        self.counts.stopped += timers.len() as u64;
        for timer in timers.values() {
            self.end(timer.clone(), Err(Error::Stopped));
        }
        timers.len()
    }
}

type Outcome = Result<(), Error>;

/// A handle the test keeps: the future of one timer's outcome.
struct Handle<'a> {
    id: u64,
    future: Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>,
    /// Polled after every step (else only once the case ends).
    poll: bool,
    /// Dropping it cancels its timer if that is still pending.
    cancels: bool,
}

fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// What the jobs and the spawned sleepers record.
#[derive(Clone, Default)]
struct Logs {
    runs: Arc<Mutex<Vec<(u64, String, Instant)>>>,
    woke: Arc<Mutex<Vec<(u64, Outcome, Instant)>>>,
}

impl Logs {
    /// The job of timer `id`: records its key and the instant its future was first polled.
    fn job(&self, id: u64) -> impl Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static {
        let runs = self.runs.clone();
        move |key: String| {
            let runs = runs.clone();
            Box::pin(async move { runs.lock().unwrap().push((id, key, Instant::now())) })
        }
    }
}

/// The id given to the job of a `schedule_or_reset` that moved a pending timer: that job is
/// dropped unused, so a run with this id is an error.
const UNUSED: u64 = u64::MAX;

/// Lets every task that has work run (the actor, the jobs it started, the sleepers it woke), all
/// at the same instant, until nothing more happens: an actor making up many missed runs yields
/// to other tasks when its cooperative budget is spent, and goes on afterwards. No `flush`: the
/// service must wake by itself for whatever is due, and only `yield_now` runs, so Tokio's paused
/// clock does not move meanwhile.
async fn settle(timer: &Scheduler, logs: &Logs) {
    let mut last = None;
    loop {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        let seen = (timer.stats(), logs.runs.lock().unwrap().len(), logs.woke.lock().unwrap().len());
        if last == Some(seen) {
            return;
        }
        last = Some(seen);
    }
}

fn check_refusal<T: std::fmt::Debug>(
    got: Result<T, Error>,
    allowed: &[Error],
    what: &str,
) -> Result<(), TestCaseError> {
    match got {
        Err(e) if allowed.contains(&e) => Ok(()),
        other => Err(TestCaseError::fail(format!("{what}: expected one of {allowed:?}, got {other:?}"))),
    }
}

async fn run_case(cfg: Config, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let origin = Instant::now();
    let timer = Scheduler::builder()
        .wheel(cfg.wheel)
        .advance(cfg.advance)
        .slots(cfg.slots)
        .tick(cfg.tick)
        .max_pending(cfg.max_pending)
        .start()
        .expect("valid settings");
    let logs = Logs::default();
    // The actor's first poll, at the origin: an interval then ticks on the service's ticks.
    settle(&timer, &logs).await;
    let mut model = Model::new(cfg, origin);
    let mut handles: Vec<Handle<'_>> = Vec::new();

    for (step, op) in ops.into_iter().enumerate() {
        let now = model.now;
        let at_offset = |offset: i64| {
            if offset >= 0 {
                now + ms(offset.unsigned_abs())
            } else {
                now - ms(offset.unsigned_abs())
            }
        };
        match op {
            Op::Schedule { key, delay, watch } => {
                let id = model.next_id + 1;
                let got = timer.schedule(name(key), ms(delay), logs.job(id)).await;
                scheduled(&mut model, &mut handles, key, now + ms(delay), None, watch, got, "schedule")?;
            }
            Op::ScheduleAt { key, offset, watch } => {
                let id = model.next_id + 1;
                let got = timer.schedule_at(name(key), at_offset(offset), logs.job(id)).await;
                scheduled(&mut model, &mut handles, key, at_offset(offset), None, watch, got, "schedule_at")?;
            }
            Op::Repeating { key, period, times, watch } => {
                let id = model.next_id + 1;
                let repeat = times.map_or(Repeat::Forever, Repeat::Times);
                let got = timer.schedule_repeating(name(key), ms(period), repeat, logs.job(id)).await;
                let repeating = Repeating { period: ms(period), runs_left: times };
                let due = now + ms(period);
                scheduled(&mut model, &mut handles, key, due, Some(repeating), watch, got, "schedule_repeating")?;
            }
            Op::SleepKeyed { key, delay, mode } => {
                let delay = ms(delay);
                match mode {
                    SleepMode::Unpolled => {
                        drop(timer.sleep_keyed(name(key), delay));
                        // A refused call's error is in the dropped future: nothing to record.
                        if model.admit(key).is_ok() {
                            model.add(key, now + delay, None, false, false);
                            prop_assert!(model.cancel(key), "the model had just added it");
                        }
                    }
                    SleepMode::Spawned => {
                        let id = match model.admit(key) {
                            Ok(()) => model.add(key, now + delay, None, false, true),
                            Err(refusals) => {
                                // The first of the allowed refusals: the test's log compares one.
                                let id = model.id();
                                model.woke.push((id, Err(refusals[0].clone()), model.since(now)));
                                id
                            }
                        };
                        let (sleeper, woke) = (timer.clone(), logs.woke.clone());
                        tokio::spawn(async move {
                            let outcome = sleeper.sleep_keyed(name(key), delay).await;
                            woke.lock().unwrap().push((id, outcome, Instant::now()));
                        });
                    }
                    SleepMode::PolledOnce | SleepMode::Held => {
                        let mut future: Pin<Box<dyn Future<Output = Outcome> + Send + '_>> =
                            Box::pin(timer.sleep_keyed(name(key), delay));
                        let got = poll_once(future.as_mut());
                        match model.admit(key) {
                            Ok(()) => {
                                prop_assert!(got.is_pending(), "step {step}: a keyed sleep that claimed its key waits");
                                let id = model.add(key, now + delay, None, false, false);
                                if let SleepMode::Held = mode {
                                    handles.push(Handle { id, future, poll: true, cancels: true });
                                } else {
                                    drop(future);
                                    prop_assert!(model.cancel(key), "the model had just added it");
                                }
                            }
                            Err(refusals) => {
                                let Poll::Ready(got) = got else {
                                    return Err(TestCaseError::fail(format!(
                                        "step {step}: a refused keyed sleep ends at its first poll"
                                    )));
                                };
                                check_refusal(got, &refusals, "sleep_keyed")?;
                            }
                        }
                    }
                }
            }
            Op::Cancel(key) => {
                let got = timer.cancel(&name(key)).await;
                prop_assert_eq!(got, model.cancel(key), "step {}: cancel(k{})", step, key);
            }
            Op::CancelNow(key) => {
                let got = timer.cancel_now(&name(key));
                prop_assert_eq!(got, model.cancel(key), "step {}: cancel_now(k{})", step, key);
            }
            Op::Reschedule { key, delay } => {
                let got = timer.reschedule(&name(key), ms(delay)).await;
                prop_assert_eq!(got, model.move_to(key, now + ms(delay)), "step {}: reschedule", step);
            }
            Op::RescheduleAt { key, offset } => {
                let got = timer.reschedule_at(&name(key), at_offset(offset)).await;
                prop_assert_eq!(got, model.move_to(key, at_offset(offset)), "step {}: reschedule_at", step);
            }
            Op::ScheduleOrReset { key, delay } => {
                let due = now + ms(delay);
                let moving = !model.stopped && model.pending.contains_key(&key);
                let id = if moving { UNUSED } else { model.next_id + 1 };
                let got = timer.schedule_or_reset(name(key), ms(delay), logs.job(id)).await;
                if moving {
                    prop_assert_eq!(got, Ok(false), "step {}: schedule_or_reset of a pending key", step);
                    model.move_to(key, due).expect("pending");
                } else {
                    match model.admit(key) {
                        Ok(()) => {
                            prop_assert_eq!(got, Ok(true), "step {}: schedule_or_reset of a free key", step);
                            model.add(key, due, None, true, false);
                        }
                        Err(refusals) => check_refusal(got, &refusals, "schedule_or_reset")?,
                    }
                }
            }
            Op::ScheduleMany(items) => {
                let first = model.next_id + 1;
                let batch = items
                    .iter()
                    .enumerate()
                    .map(|(i, &(key, delay))| (name(key), ms(delay), logs.job(first + i as u64)));
                let got = timer.schedule_many(batch.collect::<Vec<_>>()).await;
                prop_assert_eq!(got.len(), items.len());
                // Ids are handed out per item, accepted or not, to match the jobs above.
                for (&(key, delay), got) in items.iter().zip(got) {
                    match model.admit(key) {
                        Ok(()) => {
                            prop_assert_eq!(got, Ok(()), "step {}: schedule_many item k{}", step, key);
                            model.add(key, now + ms(delay), None, true, false);
                        }
                        Err(refusals) => {
                            check_refusal(got, &refusals, "schedule_many item")?;
                            model.id();
                        }
                    }
                }
            }
            Op::CancelMany(keys) => {
                let got = timer.cancel_many(keys.iter().map(|&k| name(k))).await;
                let expected: Vec<bool> = keys.iter().map(|&k| model.cancel(k)).collect();
                prop_assert_eq!(got, expected, "step {}: cancel_many({:?})", step, keys);
            }
            Op::DropHandle(pick) => {
                if !handles.is_empty() {
                    let handle = handles.swap_remove(pick.index(handles.len()));
                    let id = handle.id;
                    drop(handle.future);
                    if handle.cancels {
                        let key = model.pending.iter().find(|(_, t)| t.id == id).map(|(&k, _)| k);
                        if let Some(key) = key {
                            model.cancel(key);
                        }
                    }
                }
            }
            Op::Jump(by) => {
                tokio::time::advance(ms(by)).await;
                model.pass_time(now + ms(by), true);
            }
            Op::Sleep(by) => {
                // An interval wakes on every tick: keep its walks short.
                let by = if cfg.advance == Advance::Interval { by.min(200) } else { by };
                tokio::time::sleep(ms(by)).await;
                model.pass_time(now + ms(by), false);
            }
            Op::Stop => {
                let got = timer.stop().await;
                prop_assert_eq!(got, model.stop(), "step {}: stop", step);
            }
        }
        settle(&timer, &logs).await;
        model.after_step();
        check(&timer, &mut model, &logs, &mut handles, step).await?;
        // A flush changes nothing then: the service had done by itself whatever was due.
        timer.flush().await;
        settle(&timer, &logs).await;
        check(&timer, &mut model, &logs, &mut handles, step).await?;
    }

    // The end: stop, then every handle reports its timer's outcome, and nothing runs any more.
    let got = timer.stop().await;
    prop_assert_eq!(got, model.stop(), "final stop");
    settle(&timer, &logs).await;
    check(&timer, &mut model, &logs, &mut handles, usize::MAX).await?;
    for mut handle in handles.drain(..) {
        let expected = model.ended.get(&handle.id).cloned();
        let got = match poll_once(handle.future.as_mut()) {
            Poll::Ready(outcome) => Some(outcome),
            Poll::Pending => None,
        };
        prop_assert_eq!(got, expected, "the outcome of timer {} at the end", handle.id);
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    model.pass_time(model.now + Duration::from_secs(10), true);
    settle(&timer, &logs).await;
    check(&timer, &mut model, &logs, &mut handles, usize::MAX).await?;
    Ok(())
}

/// Records a watched schedule call's result in the model and keeps its handle as asked.
#[allow(clippy::too_many_arguments)]
fn scheduled<'a>(
    model: &mut Model,
    handles: &mut Vec<Handle<'a>>,
    key: u8,
    due: Instant,
    repeat: Option<Repeating>,
    watch: Watch,
    got: Result<tokio_timewheel::Scheduled, Error>,
    what: &str,
) -> Result<(), TestCaseError> {
    match model.admit(key) {
        Ok(()) => {
            let scheduled = got.map_err(|e| TestCaseError::fail(format!("{what}(k{key}) refused: {e:?}")))?;
            prop_assert_eq!(scheduled.key(), name(key));
            let id = model.add(key, due, repeat, true, false);
            match watch {
                Watch::Drop => drop(scheduled),
                Watch::Poll => handles.push(Handle { id, future: Box::pin(scheduled), poll: true, cancels: false }),
                Watch::Unpolled => {
                    handles.push(Handle { id, future: Box::pin(scheduled), poll: false, cancels: false })
                }
                Watch::Guard => {
                    let guard = scheduled.cancel_on_drop();
                    handles.push(Handle { id, future: Box::pin(guard), poll: false, cancels: true });
                }
            }
        }
        Err(refusals) => {
            check_refusal(got.map(drop), &refusals, what)?;
            // The job made for the refused call had this id: keep the next one fresh.
            model.id();
        }
    }
    Ok(())
}

/// Everything observable against the model, after a step.
async fn check(
    timer: &Scheduler,
    model: &mut Model,
    logs: &Logs,
    handles: &mut Vec<Handle<'_>>,
    step: usize,
) -> Result<(), TestCaseError> {
    let (now, expected) = (model.since(Instant::now()), model.since(model.now));
    prop_assert_eq!(now, expected, "step {}: the clock moved only as the test moved it", step);
    // Every job run, to the instant: how many runs each timer started at each instant.
    let mut runs: BTreeMap<(u64, String, Duration), usize> = BTreeMap::new();
    for (id, key, at) in logs.runs.lock().unwrap().drain(..) {
        *runs.entry((id, key, model.since(at))).or_default() += 1;
    }
    let expected: Vec<Run> = std::mem::take(&mut model.runs);
    let mut expected_runs: BTreeMap<(u64, String, Duration), usize> = BTreeMap::new();
    for run in &expected {
        *expected_runs.entry((run.id, run.key.clone(), run.at)).or_default() += 1;
    }
    prop_assert_eq!(&runs, &expected_runs, "step {}: job runs ((id, key, since the origin) -> runs)", step);
    // The documented bound, on its own: never early, at most a tick late when not held up.
    for run in &expected {
        let at = model.origin + run.at;
        prop_assert!(at >= run.due, "step {}: timer {} ran {:?} early", step, run.id, run.due - at);
        prop_assert!(at <= run.latest, "step {}: timer {} ran {:?} late", step, run.id, at - run.latest);
    }
    // The keyed sleeps awaited by tasks.
    let mut woke: Vec<(u64, Outcome, Duration)> =
        logs.woke.lock().unwrap().drain(..).map(|(id, outcome, at)| (id, outcome, model.since(at))).collect();
    woke.sort_by_key(|w| w.0);
    let mut expected_woke = std::mem::take(&mut model.woke);
    expected_woke.sort_by_key(|w| w.0);
    prop_assert_eq!(woke, expected_woke, "step {}: keyed sleeps (id, outcome, ms since the origin)", step);
    // The handles polled after every step.
    let mut i = 0;
    while i < handles.len() {
        let handle = &mut handles[i];
        if !handle.poll {
            i += 1;
            continue;
        }
        let expected = model.ended.get(&handle.id).cloned();
        match (poll_once(handle.future.as_mut()), expected) {
            (Poll::Pending, None) => i += 1,
            (Poll::Ready(got), Some(expected)) => {
                prop_assert_eq!(got, expected, "step {}: outcome of timer {}", step, handle.id);
                handles.swap_remove(i);
            }
            (got, expected) => {
                return Err(TestCaseError::fail(format!(
                    "step {step}: timer {}'s handle is {got:?}, the model has it ended as {expected:?}",
                    handle.id
                )))
            }
        }
    }
    // Keys, deadlines and counters.
    for key in 0..KEYS {
        prop_assert_eq!(
            timer.contains(&name(key)),
            model.pending.contains_key(&key),
            "step {}: contains(k{})",
            step,
            key
        );
        let got = timer.deadline(&name(key)).map(|at| model.since(at));
        let expected = model.deadline(key).map(|at| model.since(at));
        prop_assert_eq!(got, expected, "step {}: deadline(k{})", step, key);
    }
    let stats = timer.stats();
    model.counts.pending = model.pending.len();
    let got = Counts {
        pending: stats.pending,
        scheduled: stats.scheduled,
        fired: stats.fired,
        cancelled: stats.cancelled,
        stopped: stats.stopped,
    };
    prop_assert_eq!(got, model.counts, "step {}: stats", step);
    prop_assert_eq!(timer.len(), model.pending.len(), "step {}: len", step);
    prop_assert_eq!(timer.is_empty(), model.pending.is_empty());
    Ok(())
}

fn run(cfg: Config, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime");
    runtime.block_on(run_case(cfg, ops))
}

/// A case: up to 80 steps, and in about a third of the cases a `stop` somewhere among them
/// (the end of every case stops the service anyway).
fn ops() -> impl Strategy<Value = Vec<Op>> {
    (prop::collection::vec(op(), 1..80), prop::option::weighted(0.35, any::<prop::sample::Index>())).prop_map(
        |(mut ops, stop)| {
            if let Some(at) = stop {
                ops.insert(at.index(ops.len() + 1), Op::Stop);
            }
            ops
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn hierarchical_next_deadline(cfg in config(WheelKind::Hierarchical, Advance::NextDeadline), ops in ops()) {
        run(cfg, ops)?;
    }

    #[test]
    fn hierarchical_interval(cfg in config(WheelKind::Hierarchical, Advance::Interval), ops in ops()) {
        run(cfg, ops)?;
    }

    #[test]
    fn rounds_next_deadline(cfg in config(WheelKind::Rounds, Advance::NextDeadline), ops in ops()) {
        run(cfg, ops)?;
    }

    #[test]
    fn rounds_interval(cfg in config(WheelKind::Rounds, Advance::Interval), ops in ops()) {
        run(cfg, ops)?;
    }
}

/// Found by the model: with [`Advance::Interval`], the runs of a repeating timer missed while
/// the service was held up were made up one per tick instead of at once, so a timer whose
/// hold-up was more than Tokio's 5 ms allowance for a late interval tick stayed behind its fixed
/// rate for good (a 1 ms timer held up 10 ms ran once at 10 ms, then once per tick, 9 runs
/// behind). [`Advance::NextDeadline`] made them up at once, as documented.
#[tokio::test(start_paused = true)]
async fn missed_runs_are_made_up_at_once_in_either_advance_mode() {
    for wheel in [WheelKind::Hierarchical, WheelKind::Rounds] {
        for advance in [Advance::NextDeadline, Advance::Interval] {
            let origin = Instant::now();
            let timer = Scheduler::builder().wheel(wheel).advance(advance).start().unwrap();
            timer.flush().await;
            let runs = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counter = runs.clone();
            let job = move |_key: String| {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::future::ready(())
            };
            timer.schedule_repeating("tick", ms(1), Repeat::Forever, job).await.unwrap();
            tokio::time::advance(ms(10)).await;
            settle(&timer, &Logs::default()).await;
            let runs = runs.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(runs, 10, "{wheel:?}/{advance:?}: the runs due at 1..=10 ms all start at 10 ms");
            assert_eq!(timer.deadline("tick"), Some(origin + ms(11)));
        }
    }
}
