//! The actor: the one task that owns the wheel.
//!
//! Its loop is the classic ticker `for { select { ... } }`: handle requests as they arrive, and
//! advance the wheel either on an interval of one tick or by sleeping to the wheel's next
//! deadline. The tick is always read from the clock, so a late wake-up catches up in one
//! advance and the wheel never drifts from real time.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::builder::Advance;
use super::clock::Clock;
use super::command::{Add, Command, Timer};
use super::job::Starts;
use super::key::Key;
use super::shared::Shared;
use crate::wheel::{EntryId, Expired, ExternalIds};
use crate::Error;

/// Requests taken off the channel per wake-up.
const BATCH: usize = 256;

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
    /// Ids of entries that left the wheel, given back to the pool once per loop iteration.
    dead: Vec<EntryId>,
    /// Reschedules that overtook their timer's `Add` (sent from another handle while the `Add`
    /// was still on its way), by id: the key, the new due instant and deadline tick.
    early: HashMap<EntryId, (Key, Instant, u64)>,
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
        shared,
        clock: config.clock,
        due: Vec::new(),
        dead: Vec::new(),
        early: HashMap::new(),
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
        if advance {
            actor.fire_due();
        }
        actor.shared.ids.give_back_all(&mut actor.dead);
        let wake_at = match ticker {
            Some(_) => None,
            None => actor.wheel.next_deadline().map(|t| actor.clock.instant(t).unwrap_or_else(far_future)),
        };
        if let Some(at) = wake_at.filter(|&at| sleeping_until != Some(at)) {
            sleep.as_mut().reset(at);
            sleeping_until = Some(at);
        }
        let timed = ticker.is_some() || wake_at.is_some();
        // Time first: requests can keep the channel busy, but a tick or deadline completes at
        // most once per tick, so neither side starves the other.
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
                let mut commands = batch.drain(..);
                while let Some(command) = commands.next() {
                    if let Command::Stop(reply) = command {
                        // Whatever came in after the Stop is refused like the rest of the queue.
                        let after = commands.collect();
                        let dropped = actor.shut_down(&mut rx, after).await;
                        let _ = reply.send(dropped);
                        return;
                    }
                    actor.handle(command);
                }
                // In interval mode the wheel moves on ticks only, like the classic ticker loop.
                advance = ticker.is_none();
            }
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
    fn handle(&mut self, command: Command) {
        match command {
            Command::Add(add) => self.add(add),
            Command::AddMany(adds) => adds.into_iter().for_each(|add| self.add(add)),
            Command::Remove { id } => self.remove(id),
            Command::RemoveMany(ids) => ids.into_iter().for_each(|id| self.remove(id)),
            Command::Reschedule { key, due, deadline, reply } => {
                let _ = reply.send(self.reschedule(key.as_str(), due, deadline));
            }
            Command::Flush(reply) => drop(reply.send(())),
            Command::Stop(_) => unreachable!("Stop is handled by the run loop"),
        }
    }

    /// Puts a timer in the wheel under the id its handle chose. No look at the key map: if the
    /// timer was cancelled on its way, the check before it fires finds that out.
    fn add(&mut self, Add { mut timer, id, mut deadline }: Add) {
        if !self.early.is_empty() {
            if let Some((_, due, tick)) = self.early.remove(&id) {
                deadline = tick;
                if let Some(repeat) = timer.repeat.as_mut() {
                    repeat.due = due;
                }
            }
        }
        self.wheel.insert_at(id, deadline, timer);
    }

    fn remove(&mut self, id: EntryId) {
        // A stale id (the timer fired meanwhile, or its Add is still on its way) finds nothing.
        if self.wheel.remove(id).is_some() {
            self.dead.push(id);
        }
    }

    fn reschedule(&mut self, key: &str, due: Instant, deadline: u64) -> Result<(), Error> {
        let id = self.shared.id_of(key).ok_or(Error::NotFound)?;
        match self.wheel.remove(id) {
            Some(mut timer) => {
                if let Some(repeat) = timer.repeat.as_mut() {
                    repeat.due = due;
                }
                // Same id, new deadline: the key map needs no update.
                self.wheel.insert_at(id, deadline, timer);
            }
            // Pending but not in the wheel: its Add is still on its way. Forget earlier ones whose
            // key has moved on (their Add was abandoned, or the timer cancelled), so the map only
            // holds what can still arrive.
            None => {
                let shared = &self.shared;
                self.early.retain(|id, (key, ..)| shared.id_of(key.as_str()) == Some(*id));
                self.early.insert(id, (Key::from(key), due, deadline));
            }
        }
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
        let mut ended = self.shared.end_many(&last, Ok(())).into_iter();
        drop(last);
        for Expired { id, value: mut timer, .. } in due.drain(..) {
            match self.next_run(&timer) {
                None => {
                    self.dead.push(id);
                    let ended_here = ended.next().flatten().is_some();
                    if let (true, Some(job)) = (ended_here, &timer.job) {
                        self.starts.push(job.as_ref(), timer.key.as_str().to_owned());
                    }
                }
                // More runs to come, and still wanted: the key stays claimed and the timer goes
                // back in the wheel under the same id. A cancel from here on stops the runs after
                // this one.
                Some((next_due, next)) if self.shared.id_of(timer.key.as_str()) == Some(id) => {
                    self.shared.fired.fetch_add(1, Relaxed);
                    if let Some(job) = &timer.job {
                        self.starts.push(job.as_ref(), timer.key.as_str().to_owned());
                    }
                    if let Some(repeat) = timer.repeat.as_mut() {
                        repeat.due = next_due;
                        repeat.runs_left = repeat.runs_left.map(|n| n - 1);
                    }
                    self.wheel.insert_at(id, next, timer);
                }
                // Cancelled a moment ago (its Remove is still on its way, or was never sent).
                Some(_) => self.dead.push(id),
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
    /// taken off the channel (`taken`) or still queued are answered first, so no accepted timer
    /// is left behind.
    async fn shut_down(&mut self, rx: &mut mpsc::Receiver<Command>, taken: Vec<Command>) -> usize {
        rx.close();
        let mut dropped = 0;
        let mut stop = |key: &str, id: EntryId| {
            let ended = self.shared.end(key, |slot| slot.id() == id, Err(Error::Stopped));
            dropped += usize::from(ended.is_some());
        };
        {
            let mut refuse = |command: Command| match command {
                Command::Add(Add { timer, id, .. }) => stop(timer.key.as_str(), id),
                Command::AddMany(adds) => adds.iter().for_each(|add| stop(add.timer.key.as_str(), add.id)),
                Command::Reschedule { reply, .. } => drop(reply.send(Err(Error::Stopped))),
                Command::Flush(reply) => drop(reply.send(())),
                Command::Stop(reply) => drop(reply.send(0)),
                Command::Remove { .. } | Command::RemoveMany(_) => {}
            };
            taken.into_iter().for_each(&mut refuse);
            while let Some(command) = rx.recv().await {
                refuse(command);
            }
        }
        self.wheel.advance(u64::MAX, |Expired { id, value, .. }| stop(value.key.as_str(), id));
        self.early.clear();
        dropped
    }
}
