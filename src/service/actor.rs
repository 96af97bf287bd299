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
use super::shared::{Shared, UNPLACED};
use crate::wheel::{EntryId, Expired, Wheel};
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
    /// Reschedules that overtook their timer's `Add` (sent from another handle while the `Add`
    /// was still on its way), by sequence number: the new due instant and deadline tick.
    early: HashMap<u64, (Instant, u64)>,
}

pub(crate) async fn run<W: Wheel<Timer>>(
    wheel: W,
    mut rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    config: Config,
) {
    let mut actor = Actor { wheel, shared, clock: config.clock, due: Vec::new(), early: HashMap::new() };
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
                    actor.shut_down(&mut rx).await;
                    return;
                }
                for command in batch.drain(..) {
                    if let Command::Stop(reply) = command {
                        let dropped = actor.shut_down(&mut rx).await;
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

impl<W: Wheel<Timer>> Actor<W> {
    fn handle(&mut self, command: Command) {
        match command {
            Command::Add(add) => self.add(add),
            Command::AddMany(adds) => adds.into_iter().for_each(|add| self.add(add)),
            Command::Remove { wheel_id } => drop(self.wheel.remove(EntryId::from_u64(wheel_id))),
            Command::RemoveMany(ids) => {
                for wheel_id in ids {
                    self.wheel.remove(EntryId::from_u64(wheel_id));
                }
            }
            Command::Reschedule { key, due, deadline, reply } => {
                let _ = reply.send(self.reschedule(key.as_str(), due, deadline));
            }
            Command::Flush(reply) => drop(reply.send(())),
            Command::Stop(_) => unreachable!("Stop is handled by the run loop"),
        }
    }

    fn add(&mut self, Add { mut timer, seq, mut deadline }: Add) {
        if let Some((due, tick)) = self.early.remove(&seq) {
            deadline = tick;
            if let Some(repeat) = timer.repeat.as_mut() {
                repeat.due = due;
            }
        }
        // No slot, or someone else's: the timer was cancelled while on its way (and the
        // canceller has ended it already).
        let Some(mut slot) = self.shared.keys.get_mut(timer.key.as_bytes()) else {
            return;
        };
        if slot.seq() == seq {
            slot.wheel_id = self.wheel.insert(deadline, timer).to_u64();
        }
    }

    fn reschedule(&mut self, key: &str, due: Instant, deadline: u64) -> Result<(), Error> {
        let Some(mut slot) = self.shared.keys.get_mut(key.as_bytes()) else {
            return Err(Error::NotFound);
        };
        if slot.wheel_id == UNPLACED {
            self.early.insert(slot.seq(), (due, deadline));
            return Ok(());
        }
        let mut timer = self.wheel.remove(EntryId::from_u64(slot.wheel_id)).ok_or(Error::NotFound)?;
        if let Some(repeat) = timer.repeat.as_mut() {
            repeat.due = due;
        }
        slot.wheel_id = self.wheel.insert(deadline, timer).to_u64();
        Ok(())
    }

    /// Advances the wheel to the clock's tick and starts every due job.
    fn fire_due(&mut self) {
        let now = self.clock.now();
        let due = &mut self.due;
        self.wheel.advance(now, |expired| due.push(expired));
        let mut due = std::mem::take(&mut self.due);
        for expired in due.drain(..) {
            self.fire(expired);
        }
        self.due = due;
    }

    fn fire(&mut self, Expired { id, value: mut timer, .. }: Expired<Timer>) {
        let id = id.to_u64();
        let key = timer.key.as_str().to_owned();
        let next = timer.repeat.as_mut().filter(|r| r.runs_left != Some(1)).and_then(|repeat| {
            // Fixed rate: the next run is due a period after this one was due, not after now.
            repeat.due = repeat.due.checked_add(repeat.period)?;
            repeat.runs_left = repeat.runs_left.map(|n| n - 1);
            self.clock.deadline(repeat.due).ok()
        });
        match next {
            Some(deadline) => {
                // More runs to come: the key stays claimed and the timer goes back in the wheel.
                let Some(mut slot) = self.shared.keys.get_mut(key.as_bytes()) else {
                    return;
                };
                if slot.wheel_id != id {
                    return; // cancelled a moment ago
                }
                self.shared.fired.fetch_add(1, Relaxed);
                if let Some(job) = &timer.job {
                    job.start(key);
                }
                slot.wheel_id = self.wheel.insert(deadline, timer).to_u64();
            }
            None => {
                // The last run: whoever releases the key ends the timer, and a cancel may have
                // got there first.
                if self.shared.end(&key, |slot| slot.wheel_id == id, Ok(())).is_some() {
                    if let Some(job) = &timer.job {
                        job.start(key);
                    }
                }
            }
        }
    }

    /// Ends every pending timer as stopped and returns how many there were. Requests already
    /// queued are answered first, so no accepted timer is left behind.
    async fn shut_down(&mut self, rx: &mut mpsc::Receiver<Command>) -> usize {
        rx.close();
        let mut dropped = 0;
        while let Some(command) = rx.recv().await {
            let adds = match command {
                Command::Add(add) => vec![add],
                Command::AddMany(adds) => adds,
                Command::Reschedule { reply, .. } => {
                    let _ = reply.send(Err(Error::Stopped));
                    continue;
                }
                Command::Flush(reply) => {
                    let _ = reply.send(());
                    continue;
                }
                Command::Stop(reply) => {
                    let _ = reply.send(0);
                    continue;
                }
                Command::Remove { .. } | Command::RemoveMany(_) => continue,
            };
            for Add { timer, seq, .. } in adds {
                let owns = |slot: &super::shared::Slot| slot.seq() == seq;
                let ended = self.shared.end(timer.key.as_str(), owns, Err(Error::Stopped));
                dropped += usize::from(ended.is_some());
            }
        }
        let shared = &self.shared;
        self.wheel.advance(u64::MAX, |Expired { id, value, .. }| {
            let id = id.to_u64();
            let ended = shared.end(value.key.as_str(), |slot| slot.wheel_id == id, Err(Error::Stopped));
            dropped += usize::from(ended.is_some());
        });
        self.early.clear();
        dropped
    }
}
