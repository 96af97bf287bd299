//! The actor: the one task that moves the wheels on.
//!
//! Its loop is the classic ticker `for { select { ... } }`: advance the wheels either on an
//! interval of one tick or by sleeping to their next deadline, and answer the commands that come
//! over the channel. Timers themselves never pass through it: handles place and remove them in
//! the shards (see `shards`). The tick is always read from the clock, so a late wake-up catches up
//! in one advance and the wheels never drift from real time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use super::clock::Clock;
use super::config::Advance;
use super::job::Starts;
use super::shards::{Fired, Shared};

/// Requests that go over the channel: what needs the actor itself, not just the timers.
pub(crate) enum Command {
    /// Reply once every command sent before this one has been handled.
    Flush(oneshot::Sender<()>),
    Stop(oneshot::Sender<usize>),
    /// Give back the memory the timers no longer need, then reply.
    ShrinkToFit(oneshot::Sender<()>),
}

/// Commands taken off the channel per wake-up.
const BATCH: usize = 64;

pub(crate) struct Config {
    pub clock: Clock,
    pub advance: Advance,
    pub tick: Duration,
    /// Warn when a wake-up fires timers more than this many ticks late.
    pub lag_warning: u64,
}

/// The shortest period the actor's interval uses with [`Advance::Interval`]: the resolution of
/// Tokio's timer.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The least time between two warnings that timers fire late.
const WARN_EVERY: Duration = Duration::from_secs(10);

struct Actor {
    shared: Arc<Shared>,
    clock: Clock,
    lag_warning: u64,
    /// When the last lateness warning was logged.
    warned_at: Option<Instant>,
    /// Reused buffers of what one advance fired.
    fired: Fired,
    /// The jobs due in the current advance, started together once it is done.
    starts: Starts,
}

/// Spawns the actor on `runtime`. The actor is made here, before its task exists, so that its
/// shutdown path (its `Drop`) is there from the start: a runtime that goes away before the task
/// first runs drops the task's future, and with it the actor, which ends the accepted timers as
/// stopped and closes every shard to new ones.
pub(crate) fn spawn(
    runtime: &tokio::runtime::Handle,
    rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    config: Config,
) {
    let actor = Actor {
        starts: Starts::new(&shared.name),
        shared,
        clock: config.clock,
        lag_warning: config.lag_warning,
        warned_at: None,
        fired: Fired::default(),
    };
    drop(runtime.spawn(run(rx, actor, config.advance, config.tick)));
}

async fn run(mut rx: mpsc::Receiver<Command>, mut actor: Actor, mode: Advance, tick: Duration) {
    let shared = actor.shared.clone();
    let mut batch = Vec::with_capacity(BATCH);
    let mut ticker = (mode == Advance::Interval).then(|| {
        // Tokio's timer cannot wait less than its resolution: an interval of a shorter period
        // makes up the ticks it missed at once, one wake-up per tick. `Builder::start` refuses
        // such a tick (see `MIN_TICK`); the period is kept at `MIN_INTERVAL` or more all the same.
        let period = tick.max(MIN_INTERVAL);
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        ticker
    });
    // In interval mode the actor advances on every tick, so no timer is urgent.
    if ticker.is_some() {
        shared.will_wake_at(0);
    }
    // One sleep, reset only when the next deadline changes.
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let mut sleeping_until: Option<Instant> = None;
    let mut advance = true;
    loop {
        // Timers placed meanwhile that are due before the published wake-up: advance again at once
        // (after the channel's commands have had their turn) rather than wait.
        let mut missed = false;
        if ticker.is_some() {
            if advance {
                // Runs of repeating timers missed while the service was held up are due already:
                // make them up at once (advancing again at once), not one per tick.
                missed = actor.fire_due().is_some_and(|next| next <= actor.clock.now());
            }
        } else {
            let next_deadline = actor.fire_due();
            missed = shared.will_wake_at(next_deadline.unwrap_or(u64::MAX).max(1));
            let wake_at = next_deadline.map(|t| actor.clock.instant(t).unwrap_or_else(far_future));
            if let Some(at) = wake_at.filter(|&at| sleeping_until != Some(at)) {
                sleep.as_mut().reset(at);
                sleeping_until = Some(at);
            }
            if wake_at.is_none() {
                sleeping_until = None;
            }
        }
        let timed = ticker.is_some() || sleeping_until.is_some();
        // Time first: commands can keep the actor busy, but a tick or deadline completes at most
        // once per tick, so neither side starves the other.
        tokio::select! {
            biased;
            () = wait(&mut ticker, sleep.as_mut()), if timed => {
                sleeping_until = None;
                advance = true;
            }
            received = rx.recv_many(&mut batch, BATCH) => {
                if received == 0 {
                    // Every handle is gone: nobody can cancel or stop any more, so stop now.
                    actor.shut_down(&mut rx, Vec::new()).await;
                    return;
                }
                // A flush is answered once the timers due and the cancels made before it are
                // dealt with (the top of the loop would do it too, but after the answer).
                if ticker.is_none() {
                    actor.fire_due();
                } else {
                    actor.sweep();
                }
                let mut commands = batch.drain(..);
                while let Some(command) = commands.next() {
                    match command {
                        Command::Flush(reply) => drop(reply.send(())),
                        Command::ShrinkToFit(reply) => {
                            actor.shrink_to_fit();
                            let _ = reply.send(());
                        }
                        Command::Stop(reply) => {
                            // Whatever came in after the Stop is refused like the rest of the queue.
                            let after = commands.collect();
                            let dropped = actor.shut_down(&mut rx, after).await;
                            let _ = reply.send(dropped);
                            return;
                        }
                    }
                }
                // In interval mode the wheels move on ticks only, like the classic ticker loop,
                // and at once while missed runs are made up.
                advance = missed;
            }
            () = shared.ready(), if !missed => advance = false,
            // Ready at once unless the task's budget is spent, so a steady stream of timers
            // cannot hold the thread. (In interval mode: advance again for the runs missed.)
            () = tokio::task::coop::consume_budget(), if missed => advance = true,
        }
    }
}

async fn wait(ticker: &mut Option<tokio::time::Interval>, sleep: std::pin::Pin<&mut tokio::time::Sleep>) {
    match ticker {
        Some(ticker) => drop(ticker.tick().await),
        None => sleep.await,
    }
}

/// An instant later than any deadline worth waiting for (about 30 years on).
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

impl Actor {
    /// Advances every shard's wheel to the clock's tick and starts every due job, in deadline
    /// order. Returns the earliest next deadline of the wheels.
    fn fire_due(&mut self) -> Option<u64> {
        self.shared.clear_signal();
        let now = Instant::now();
        let mut next: Option<u64> = None;
        for shard in 0..self.shared.shard_count() {
            let shard_next = self.shared.fire(shard, now, &self.clock, &mut self.fired);
            next = match (next, shard_next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.fired.note_use();
        self.note_lateness(now);
        self.fired.wakers.drain(..).for_each(std::task::Waker::wake);
        self.fired.swept.clear();
        // A wheel yields its due entries in no set order, and the shards' lists follow one another:
        // sort them by deadline (a stable sort, cheap on the runs of one tick it mostly sees).
        self.fired.jobs.sort_by_key(|&(deadline, ..)| deadline);
        for (_, job, key) in self.fired.jobs.drain(..) {
            self.starts.push(job, key);
        }
        self.starts.spawn();
        self.fired.trim();
        next
    }

    /// Adds how late this advance's timers were to the recent window, and warns (at most once
    /// every [`WARN_EVERY`]) if any was more than `lag_warning` ticks late.
    fn note_lateness(&mut self, now: Instant) {
        if self.fired.late.count() == 0 {
            return;
        }
        self.shared.lateness.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(&self.fired.late, now);
        self.shared.metrics.lateness(&self.fired.late);
        let lag = std::mem::take(&mut self.fired.lag);
        if lag > self.lag_warning && self.warned_at.is_none_or(|at| now.duration_since(at) >= WARN_EVERY) {
            self.warned_at = Some(now);
            tracing::warn!(
                lag_ticks = lag,
                p99_late_ms = self.fired.late.quantile(0.99).as_secs_f64() * 1e3,
                "timers are firing {lag} ticks late: the runtime is too busy for the timer service \
                 (long synchronous jobs, blocking code on its threads, or more firings than it can \
                 start); see Scheduler::lateness"
            );
        }
        self.fired.late.clear();
    }

    /// Gives back what every shard and the actor's own buffers no longer need.
    fn shrink_to_fit(&mut self) {
        for shard in 0..self.shared.shard_count() {
            self.shared.shrink(shard);
        }
        self.fired.shrink_to_fit();
        self.starts.shrink_to_fit();
    }

    /// Takes the cancelled timers of every shard out of its wheel, and drops them.
    fn sweep(&mut self) {
        for shard in 0..self.shared.shard_count() {
            self.shared.sweep(shard, &mut self.fired.swept);
        }
        self.fired.note_use();
        self.fired.swept.clear();
        self.fired.trim();
    }

    /// Ends every pending timer as stopped and returns how many there were. Commands already
    /// queued are answered; from here on, every shard refuses new timers.
    async fn shut_down(&mut self, rx: &mut mpsc::Receiver<Command>, taken: Vec<Command>) -> usize {
        rx.close();
        let dropped = (0..self.shared.shard_count()).map(|shard| self.shared.close(shard)).sum();
        let refuse = |command: Command| match command {
            Command::Flush(reply) | Command::ShrinkToFit(reply) => drop(reply.send(())),
            Command::Stop(reply) => drop(reply.send(0)),
        };
        taken.into_iter().for_each(refuse);
        while let Some(command) = rx.recv().await {
            refuse(command);
        }
        dropped
    }
}

impl Drop for Actor {
    /// If the actor's task is dropped without stopping (its runtime shut down), the shards still
    /// end their timers as stopped and refuse new ones from then on, so that none is accepted
    /// that nobody would fire.
    fn drop(&mut self) {
        for shard in 0..self.shared.shard_count() {
            self.shared.close(shard);
        }
    }
}
