//! The actor: the one task that owns the wheel.
//!
//! Its loop is the classic ticker `for { select { ... } }`: handle requests as they arrive, and
//! advance the wheel either on an interval of one tick or by sleeping to the wheel's next
//! deadline. The tick is always read from the clock, so a late wake-up catches up in one
//! advance and the wheel never drifts from real time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::builder::Advance;
use super::clock::Clock;
use super::command::{Add, Command, Op, Timer};
use super::job::Starts;
use super::shared::{By, Shared};
use crate::wheel::{EntryId, Expired, ExternalIds};
use crate::Error;

/// Commands taken off the channel per wake-up.
const BATCH: usize = 64;

pub(crate) struct Config {
    pub clock: Clock,
    pub advance: Advance,
    pub tick: Duration,
}

struct Actor<W> {
    wheel: W,
    shared: Arc<Shared>,
    clock: Clock,
    /// Reused buffer of entries due in one advance.
    due: Vec<Expired<Timer>>,
    /// Ids of entries that left the wheel, by the shard whose pool they came from; given back
    /// when the actor next takes that shard's requests.
    dead: Vec<Vec<EntryId>>,
    /// Reused buffer that a shard's inbox is swapped into.
    ops: Vec<Op>,
    /// The jobs due in the current advance, started together once it is done.
    starts: Starts,
}

pub(crate) async fn run<W: ExternalIds<Timer>>(
    wheel: W,
    mut rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    config: Config,
) {
    let mut actor = Actor {
        wheel,
        dead: vec![Vec::new(); shared.shard_count()],
        shared: shared.clone(),
        clock: config.clock,
        due: Vec::new(),
        ops: Vec::new(),
        starts: Starts::default(),
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut ticker = (config.advance == Advance::Interval).then(|| {
        let mut ticker = tokio::time::interval_at(Instant::now() + config.tick, config.tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
        ticker
    });
    // One sleep, reset only when the next deadline changes.
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let mut sleeping_until: Option<Instant> = None;
    let mut advance = true;
    loop {
        actor.take_requests();
        if advance {
            actor.fire_due();
        }
        let next_deadline = actor.wheel.next_deadline();
        // In interval mode the actor takes requests in on every tick, so none is urgent.
        let wakes_at = if ticker.is_some() { 0 } else { next_deadline.unwrap_or(u64::MAX).max(1) };
        // Requests that came in while the actor was busy are taken at once (after the channel's
        // commands have had their turn), rather than waited for.
        let requests_waiting = actor.shared.will_wake_at(wakes_at);
        let wake_at = match ticker {
            Some(_) => None,
            None => next_deadline.map(|t| actor.clock.instant(t).unwrap_or_else(far_future)),
        };
        if let Some(at) = wake_at.filter(|&at| sleeping_until != Some(at)) {
            sleep.as_mut().reset(at);
            sleeping_until = Some(at);
        }
        let timed = ticker.is_some() || wake_at.is_some();
        // Time first: requests can keep the actor busy, but a tick or deadline completes at most
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
                // The requests queued before these commands were sent come first.
                actor.take_requests();
                let mut commands = batch.drain(..);
                while let Some(command) = commands.next() {
                    match command {
                        Command::Flush(reply) => drop(reply.send(())),
                        Command::Stop(reply) => {
                            // Whatever came in after the Stop is refused like the rest of the queue.
                            let after = commands.collect();
                            let dropped = actor.shut_down(&mut rx, after).await;
                            let _ = reply.send(dropped);
                            return;
                        }
                    }
                }
                // In interval mode the wheel moves on ticks only, like the classic ticker loop.
                advance = ticker.is_none();
            }
            () = shared.ready(), if !requests_waiting => advance = ticker.is_none(),
            // Ready at once unless the task's budget is spent, so a steady stream of requests
            // cannot hold the thread.
            () = tokio::task::coop::consume_budget(), if requests_waiting => advance = ticker.is_none(),
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

impl<W: ExternalIds<Timer>> Actor<W> {
    /// Takes every shard's queued requests and carries them out, giving back dead ids on the way.
    fn take_requests(&mut self) {
        let mut ops = std::mem::take(&mut self.ops);
        for shard in 0..self.dead.len() {
            self.shared.take_requests(shard, &mut ops, &mut self.dead[shard]);
            ops.drain(..).for_each(|op| self.apply(op));
        }
        self.ops = ops;
    }

    fn apply(&mut self, op: Op) {
        match op {
            // No look at the key map: if the timer was cancelled meanwhile, its `Remove` follows.
            Op::Add(Add { timer, id, deadline }) => self.wheel.insert_at(id, deadline, timer),
            // A stale id (the timer fired meanwhile) finds nothing.
            Op::Remove(id) => {
                if self.wheel.remove(id).is_some() {
                    self.bury(id);
                }
            }
            Op::Move { id, due, deadline, reply } => drop(reply.send(self.move_timer(id, due, deadline))),
        }
    }

    /// Takes note that `id`'s entry has left the wheel, so the id can be drawn again.
    fn bury(&mut self, id: EntryId) {
        self.dead[self.shared.shard_of_id(id)].push(id);
    }

    /// Gives a pending timer a new deadline under the same id, so the key map needs no update.
    /// Its `Add` came before this request, so it is in the wheel unless it has fired.
    fn move_timer(&mut self, id: EntryId, due: Instant, deadline: u64) -> Result<(), Error> {
        let mut timer = self.wheel.remove(id).ok_or(Error::NotFound)?;
        if let Some(repeat) = timer.repeat.as_mut() {
            repeat.due = due;
        }
        self.wheel.insert_at(id, deadline, timer);
        Ok(())
    }

    /// Advances the wheel to the clock's tick and starts every due job, in deadline order.
    fn fire_due(&mut self) {
        let now = self.clock.now();
        let due = &mut self.due;
        self.wheel.advance(now, |expired| due.push(expired));
        let mut due = std::mem::take(&mut self.due);
        // The timers on their last run end here, all in one pass over the key map. Whoever
        // releases a key ends its timer, and a cancel may have got there first.
        let last: Vec<(&[u8], Option<EntryId>)> = due
            .iter()
            .filter(|e| self.next_run(&e.value).is_none())
            .map(|e| (e.value.key.as_bytes(), Some(e.id)))
            .collect();
        let mut ended = self.shared.end_many(&last, Ok(()), By::Actor).into_iter();
        drop(last);
        for Expired { id, value: mut timer, .. } in due.drain(..) {
            match self.next_run(&timer) {
                None => {
                    self.bury(id);
                    let ended_here = ended.next().flatten().is_some();
                    if let (true, Some(job)) = (ended_here, &timer.job) {
                        self.starts.push(job.as_ref(), timer.key.as_str().to_owned());
                    }
                }
                // More runs to come, and still wanted: the key stays claimed and the timer goes
                // back in the wheel under the same id. A cancel from here on stops the runs after
                // this one.
                Some((next_due, next)) if self.shared.ran_again(timer.key.as_bytes(), id) => {
                    if let Some(job) = &timer.job {
                        self.starts.push(job.as_ref(), timer.key.as_str().to_owned());
                    }
                    if let Some(repeat) = timer.repeat.as_mut() {
                        repeat.due = next_due;
                        repeat.runs_left = repeat.runs_left.map(|n| n - 1);
                    }
                    self.wheel.insert_at(id, next, timer);
                }
                // Cancelled a moment ago (its `Remove` is still queued).
                Some(_) => self.bury(id),
            }
        }
        self.due = due;
        self.starts.spawn();
    }

    /// When a repeating timer's next run is due (instant and tick), or `None` if this run is
    /// its last. Fixed rate: a period after this run was due, not after now.
    fn next_run(&self, timer: &Timer) -> Option<(Instant, u64)> {
        let repeat = timer.repeat.as_ref().filter(|r| r.runs_left != Some(1))?;
        let due = repeat.due.checked_add(repeat.period)?;
        Some((due, self.clock.deadline(due).ok()?))
    }

    /// Ends every pending timer as stopped and returns how many there were. Requests already
    /// queued are carried out first and commands answered, so no accepted timer is left behind;
    /// from here on, every shard refuses new ones.
    async fn shut_down(&mut self, rx: &mut mpsc::Receiver<Command>, taken: Vec<Command>) -> usize {
        rx.close();
        let mut ops = std::mem::take(&mut self.ops);
        for shard in 0..self.dead.len() {
            self.shared.close(shard, &mut ops);
        }
        ops.into_iter().for_each(|op| self.apply(op));
        let refuse = |command: Command| match command {
            Command::Flush(reply) => drop(reply.send(())),
            Command::Stop(reply) => drop(reply.send(0)),
        };
        taken.into_iter().for_each(refuse);
        while let Some(command) = rx.recv().await {
            refuse(command);
        }
        let due = &mut self.due;
        self.wheel.advance(u64::MAX, |expired| due.push(expired));
        let timers: Vec<(&[u8], Option<EntryId>)> =
            self.due.iter().map(|e| (e.value.key.as_bytes(), Some(e.id))).collect();
        let dropped = self.shared.end_many(&timers, Err(Error::Stopped), By::Actor).iter().flatten().count();
        drop(timers);
        self.due.clear();
        dropped
    }
}

impl<W> Drop for Actor<W> {
    /// If the actor's task is dropped without stopping (its runtime shut down), the shards still
    /// refuse requests from then on, so that none is accepted that nobody would carry out.
    fn drop(&mut self) {
        let mut ignored = Vec::new();
        for shard in 0..self.dead.len() {
            self.shared.close(shard, &mut ignored);
        }
    }
}
