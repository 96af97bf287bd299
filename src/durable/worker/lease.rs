//! The deliveries a worker holds and their leases: [`Deliveries`] lists them (by claim token) from
//! the claim until their outcome is recorded, and holds the buffer of those claimed ahead of the
//! free handlers, which the handlers take their next task from; [`renew_leases`] renews them all,
//! buffered ones too, every third of the lease, in one script call per round;
//! [`Deliveries::abandon`] gives back the leases of what is still running or buffered at the end
//! of `shutdown_timeout`. Each delivery's cancellation token ([`Task::cancel_token`]) is
//! cancelled here: on a cancel request, a lost lease, the approach of `shutdown_timeout`'s bound
//! and at the abandon.
//!
//! [`Task::cancel_token`]: crate::durable::Task::cancel_token

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::{self, Claimed, Renewal};
use crate::durable::store::shared_conn::Window;

/// The most deliveries one renewal call carries.
const RENEW_BATCH: usize = 128;

/// One delivery this worker holds.
struct Held {
    key: String,
    state: State,
    /// The handler's token (the task's [`cancel_token`](crate::durable::Task::cancel_token)).
    cancel: CancellationToken,
    /// Its cancel was requested (`cancel_running`): a buffered task does not start, and the
    /// outcome of a running one ends the task as cancelled.
    requested: bool,
    /// When its lease ends at the latest as this process knows it: the lease from when the
    /// call that claimed or last renewed it was sent (Redis started the lease after that). A
    /// buffered task found past it does not start: a process that was frozen or starved may
    /// wake with tasks whose leases ran out and went to another worker, before any renewal
    /// could tell it so.
    until: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Claimed ahead of the free handlers: in the buffer, its handler not started, under a lease
    /// this worker renews.
    Buffered,
    /// Its handler runs, under a lease this worker renews.
    Running,
    /// Its handler has finished and its outcome is on the way to Redis: still renewed until
    /// the outcome is recorded, and no longer given back by [`Deliveries::abandon`]. A refused
    /// renewal is then no news (the outcome may have landed first).
    Finished,
    /// A renewal was refused: its lease went to another worker. A running handler runs on (it
    /// may be mid-way through a side effect) unless the worker is abandoned, a buffered one
    /// never starts, and its outcome is not recorded (Redis would refuse it).
    Lost,
}

/// What the lock guards: the deliveries by claim token, and the buffer in claim order.
#[derive(Default)]
struct Inner {
    held: HashMap<String, Held>,
    buffer: VecDeque<Claimed>,
    /// Set by [`Deliveries::abandon`]: nothing more starts.
    abandoned: bool,
    /// Deliveries (key, token) this worker dropped while their tasks may still be leased to it:
    /// a lease is its claim call's, which the renewals of the call's other tasks keep alive, so
    /// the next renewal round gives these back (`renew.lua` with a lease of 0; one no longer
    /// the task's is refused there, harmlessly) rather than leave them to the call's lease.
    give_back: Vec<(String, String)>,
}

/// The deliveries of one partition that this worker holds, by claim token (unique within a
/// partition), from the claim until their outcome is recorded; and the buffer of those not
/// started yet.
#[derive(Default)]
pub(super) struct Deliveries {
    inner: Mutex<Inner>,
    /// Held through each renewal round and through [`abandon`](Self::abandon), so that a round
    /// that read a delivery before it was given back cannot renew it after.
    round: tokio::sync::Mutex<()>,
    /// Told whenever a handler takes a task from the buffer or a runner of handlers ends: the
    /// claim loop then sees whether to claim again.
    pub(super) changed: Notify,
    /// Told when tasks are buffered: the renewals, which wait while nothing is held, start.
    holding: Notify,
}

impl Deliveries {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists `tasks` as buffered, at the back of the buffer, their leases good `until` (see
    /// [`Held::until`]). Given back at once, rather, when the worker has been abandoned: returns
    /// those.
    pub(super) fn buffer(&self, tasks: Vec<Claimed>, until: Instant) -> Vec<Claimed> {
        let mut inner = self.inner();
        if inner.abandoned {
            return tasks;
        }
        for c in tasks {
            let held = Held {
                key: c.task.key.clone(),
                state: State::Buffered,
                cancel: c.task.cancel.clone(),
                requested: false,
                until,
            };
            inner.held.insert(c.token.clone(), held);
            inner.buffer.push_back(c);
        }
        drop(inner);
        self.holding.notify_one();
        Vec::new()
    }

    /// Waits until a lease is held or one is to be given back (at once if so).
    async fn until_holding(&self) {
        loop {
            let buffered = self.holding.notified();
            if !self.idle() {
                return;
            }
            buffered.await;
        }
    }

    /// Whether no lease is held and none is to be given back: no renewal round has work.
    fn idle(&self) -> bool {
        let inner = self.inner();
        inner.held.is_empty() && inner.give_back.is_empty()
    }

    /// The next buffered task, now running; `None` when the buffer is empty or the worker was
    /// abandoned. A buffered task whose lease went to another worker, or ran out as far as this
    /// process knows (see [`Held::until`]), is skipped and forgotten: the tick hands it out again.
    pub(super) fn next(&self) -> Option<Claimed> {
        let mut inner = self.inner();
        let now = Instant::now();
        let next = loop {
            if inner.abandoned {
                return None;
            }
            let c = inner.buffer.pop_front()?;
            match inner.held.get_mut(&c.token) {
                Some(h) if h.state == State::Buffered && now < h.until => {
                    h.state = State::Running;
                    break c;
                }
                held => {
                    if held.is_some_and(|h| h.state == State::Buffered) {
                        tracing::debug!(key = %c.task.key, "a task claimed ahead outlived its lease in the buffer; it will not start here");
                        inner.give_back.push((c.task.key.clone(), c.token.clone()));
                        self.holding.notify_one();
                    }
                    inner.held.remove(&c.token);
                }
            }
        };
        drop(inner);
        self.changed.notify_one();
        Some(next)
    }

    /// How many tasks wait in the buffer.
    pub(super) fn buffered(&self) -> usize {
        self.inner().buffer.len()
    }

    /// Marks the handler of `token` finished. False when its outcome must not be recorded: its
    /// lease went to another worker, or it was abandoned (its lease given back).
    pub(super) fn finish(&self, token: &str) -> bool {
        let mut inner = self.inner();
        match inner.held.get_mut(token) {
            Some(h) if h.state == State::Running => {
                h.state = State::Finished;
                true
            }
            Some(_) => {
                inner.held.remove(token);
                false
            }
            None => false,
        }
    }

    /// Forgets `token`: its outcome is recorded (or given up on), and its lease no longer renewed.
    pub(super) fn forget(&self, token: &str) {
        self.inner().held.remove(token);
    }

    /// Forgets `token` of task `key` with no outcome recorded (one could not be sent, or it was
    /// told to stop before it started): the next renewal round gives its lease back.
    pub(super) fn forget_and_give_back(&self, key: &str, token: &str) {
        let mut inner = self.inner();
        inner.held.remove(token);
        inner.give_back.push((key.to_string(), token.to_string()));
        drop(inner);
        self.holding.notify_one();
    }

    /// The deliveries to give back (see [`Inner::give_back`]), taken.
    fn take_give_back(&self) -> Vec<(String, String)> {
        std::mem::take(&mut self.inner().give_back)
    }

    /// Puts back deliveries whose giving back failed, for the next round.
    fn give_back_later(&self, mut deliveries: Vec<(String, String)>) {
        self.inner().give_back.append(&mut deliveries);
    }

    /// The deliveries whose leases are this worker's to renew, as (key, token).
    fn renewable(&self) -> Vec<(String, String)> {
        let inner = self.inner();
        inner
            .held
            .iter()
            .filter(|(_, h)| h.state != State::Lost)
            .map(|(token, h)| (h.key.clone(), token.clone()))
            .collect()
    }

    /// The deliveries whose lease ran out by `now` as this process knows it (no renewal since
    /// reached Redis: the worker is cut off, or Redis is away): another worker may hold their
    /// tasks now. Each is lost, as a refused renewal makes it: its handler's token is cancelled,
    /// a buffered one does not start, and no outcome is sent. Returns the keys of the running ones.
    fn expire(&self, now: Instant) -> Vec<String> {
        let mut inner = self.inner();
        let (mut running, mut give_back) = (Vec::new(), Vec::new());
        for (token, h) in inner.held.iter_mut() {
            if matches!(h.state, State::Running | State::Buffered) && h.until <= now {
                if h.state == State::Running {
                    running.push(h.key.clone());
                }
                h.state = State::Lost;
                h.cancel.cancel();
                // Redis may still lease it to this worker under its call's lease, which another
                // round's renewals can have kept alive: given back once Redis answers.
                give_back.push((h.key.clone(), token.clone()));
            }
        }
        inner.give_back.append(&mut give_back);
        running
    }

    /// The leases of `tokens` were renewed by a call sent at `sent`: good until `sent + lease`.
    fn renewed(&self, tokens: &[&str], until: Instant) {
        let mut inner = self.inner();
        for token in tokens {
            if let Some(h) = inner.held.get_mut(*token) {
                h.until = until;
            }
        }
    }

    /// The cancel of the delivery `token` was requested (`cancel_running`): cancels its handler's
    /// token. False if this worker does not hold it.
    pub(super) fn cancel_requested(&self, token: &str) -> bool {
        let mut inner = self.inner();
        let Some(h) = inner.held.get_mut(token) else { return false };
        h.requested = true;
        h.cancel.cancel();
        true
    }

    /// Whether the cancel of the delivery `token` was requested.
    pub(super) fn requested(&self, token: &str) -> bool {
        self.inner().held.get(token).is_some_and(|h| h.requested)
    }

    /// Cancels the tokens of the handlers running: `shutdown_timeout`'s bound is near.
    pub(super) fn cancel_running(&self) {
        for h in self.inner().held.values().filter(|h| h.state == State::Running) {
            h.cancel.cancel();
        }
    }

    /// A renewal of `token` was refused: another worker has its task now (this one was cut off
    /// or paused past its lease), or its outcome landed just before. The state it was in.
    fn lost(&self, token: &str) -> Option<State> {
        match self.inner().held.get_mut(token) {
            Some(h) if matches!(h.state, State::Running | State::Buffered) => {
                let was = h.state;
                h.state = State::Lost;
                h.cancel.cancel();
                Some(was)
            }
            _ => None,
        }
    }

    /// Stops every start from the buffer, and gives back the leases of what is buffered or
    /// still running (the caller has dropped the running handlers), so that the next tick hands
    /// those tasks out again (rather than after the lease). A handler that finished meanwhile
    /// keeps its outcome on its way.
    pub(super) async fn abandon(&self, wheel: &WheelClient, part: usize) {
        let _round = self.round.lock().await;
        let (mut dropped, mut give_back) = (0, Vec::new());
        {
            let mut inner = self.inner();
            inner.abandoned = true;
            inner.buffer.clear();
            inner.held.retain(|token, h| {
                if h.state == State::Finished {
                    return true;
                }
                if h.state == State::Running {
                    dropped += 1;
                }
                h.cancel.cancel();
                if h.state != State::Lost {
                    give_back.push((std::mem::take(&mut h.key), token.clone()));
                }
                false
            });
        }
        if give_back.is_empty() {
            return;
        }
        tracing::warn!(
            wheel = %wheel.name(), partition = part, handlers = dropped, claimed_ahead = give_back.len() - dropped,
            "shutdown_timeout ran out: dropped the handlers still running; their tasks, and those claimed ahead, \
             are handed out again"
        );
        // Those not given back come back when their leases run out: the worker is going.
        let _ = give_back_leases(wheel, part, &give_back).await;
    }
}

/// Gives back the leases of `deliveries` (key, token) of partition `part` (`renew.lua` with a
/// lease of 0): the next tick hands those tasks out again.
/// Returns those that could not be given back (Redis did not answer).
pub(super) async fn give_back_leases(
    wheel: &WheelClient,
    part: usize,
    deliveries: &[(String, String)],
) -> Vec<(String, String)> {
    let keys = &wheel.partitions[part].keys;
    let mut failed = Vec::new();
    for chunk in deliveries.chunks(RENEW_BATCH) {
        let pairs: Vec<(&str, &str)> = chunk.iter().map(|(k, t)| (k.as_str(), t.as_str())).collect();
        if let Err(e) = scripts::renew(wheel, keys, &pairs, 0, Window::Response).await {
            tracing::warn!(
                wheel = %wheel.name(), error = %e,
                "could not give back the leases of dropped deliveries; their tasks come back when the leases run out"
            );
            failed.extend_from_slice(chunk);
        }
    }
    failed
}

/// Renews the leases `running` holds in partition `part`, every third of the lease, until
/// dropped (the claim loop aborts it once the last outcome is recorded). A delivery whose
/// renewal is refused lost its lease to another worker: it is logged and no longer renewed, and
/// its outcome will be refused too.
pub(super) async fn renew_leases(wheel: Arc<WheelClient>, part: usize, deliveries: Arc<Deliveries>) {
    let every = wheel.cfg.renew_every();
    let keys = &wheel.partitions[part].keys;
    let mut rounds = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u32;
    loop {
        // While nothing is held, no rounds: an idle worker's would wake the runtime every third
        // of a lease for nothing. The first round comes a third of a lease after a claim.
        if deliveries.idle() {
            deliveries.until_holding().await;
            rounds.reset();
        }
        rounds.tick().await;
        let _round = deliveries.round.lock().await;
        let back = deliveries.take_give_back();
        if !back.is_empty() {
            let failed = give_back_leases(&wheel, part, &back).await;
            deliveries.give_back_later(failed);
        }
        let held = deliveries.renewable();
        for chunk in held.chunks(RENEW_BATCH) {
            let pairs: Vec<(&str, &str)> = chunk.iter().map(|(k, t)| (k.as_str(), t.as_str())).collect();
            let sent = Instant::now();
            match scripts::renew(&wheel, keys, &pairs, wheel.cfg.lease_ms, Window::Response).await {
                Ok(answers) => {
                    if failures > 0 {
                        tracing::info!(wheel = %wheel.name(), partition = part, "renewing leases works again");
                        failures = 0;
                    }
                    let renewed: Vec<&str> = chunk
                        .iter()
                        .zip(&answers)
                        .filter(|(_, a)| **a != Renewal::Refused)
                        .map(|((_, t), _)| t.as_str())
                        .collect();
                    deliveries.renewed(&renewed, sent + wheel.cfg.lease());
                    for ((key, token), answer) in chunk.iter().zip(answers) {
                        match answer {
                            Renewal::Renewed => continue,
                            Renewal::CancelRequested => {
                                // Missed on the stream of cancel requests (or not read yet).
                                deliveries.cancel_requested(token);
                                continue;
                            }
                            Renewal::Refused => {}
                        }
                        let lost = deliveries.lost(token);
                        if lost == Some(State::Buffered) {
                            tracing::debug!(wheel = %wheel.name(), key = %key, "a task claimed ahead lost its lease before it started; it will not start here");
                        } else if lost == Some(State::Running) {
                            tracing::warn!(
                                wheel = %wheel.name(), key = %key,
                                "a running handler's lease went to another worker (this one was cut off from Redis \
                                 or paused past its lease): another delivery of the task may run beside it, and \
                                 this one's outcome will not be recorded"
                            );
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            wheel = %wheel.name(), partition = part, error = %e,
                            "could not renew the leases of running handlers; trying again next round"
                        );
                    }
                    // Cut off from Redis: a lease that ran out unrenewed meanwhile (by this
                    // process's count, which starts when the claim or the last renewal that
                    // landed was sent, before Redis started it) may be another worker's now. Its
                    // handler is told within a round of the lease's end, not when the link comes
                    // back and a renewal is refused. (Only after a failed renewal: on a link that
                    // works, a renewal that lands is the truth, however late this count is.)
                    let expired = deliveries.expire(Instant::now());
                    if !expired.is_empty() {
                        tracing::warn!(
                            wheel = %wheel.name(), partition = part, handlers = expired.len(), first = %expired[0],
                            "leases ran out while Redis could not be reached: their handlers' tokens are cancelled, \
                             their tasks go to another worker, and their outcomes will not be recorded"
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::durable::Task;
    use crate::origin::Origin;

    fn claimed(key: &str, token: &str) -> Claimed {
        Claimed {
            task: Task {
                key: key.to_string(),
                payload: Vec::new(),
                attempt: 1,
                due: SystemTime::UNIX_EPOCH,
                claimed_at: SystemTime::UNIX_EPOCH,
                cancel: CancellationToken::new(),
                snooze: Default::default(),
            },
            token: token.to_string(),
            spec: None,
            recurring: false,
            origin: Origin::none(),
            options: crate::durable::TaskOptions::new(),
            start_at_ms: None,
        }
    }

    /// A process frozen (or starved) past its leases wakes with tasks in its buffer that the
    /// tick may have handed to another worker meanwhile: they do not start, whatever a renewal
    /// has not yet said. A renewal moves the bound on.
    #[tokio::test(start_paused = true)]
    async fn a_buffered_task_past_its_lease_does_not_start() {
        let lease = Duration::from_secs(1);
        let deliveries = Deliveries::default();
        let sent = Instant::now();
        assert!(deliveries
            .buffer(vec![claimed("a", "1"), claimed("b", "2"), claimed("c", "3")], sent + lease)
            .is_empty());
        assert_eq!(deliveries.next().map(|c| c.token), Some("1".to_string()), "within its lease it starts");

        // "b" renewed by a call sent half a lease in; "c" not.
        tokio::time::advance(lease / 2).await;
        deliveries.renewed(&["2"], Instant::now() + lease);
        tokio::time::advance(lease * 3 / 4).await;
        assert_eq!(deliveries.next().map(|c| c.token), Some("2".to_string()), "its renewal kept it");
        assert!(deliveries.next().is_none(), "c's lease ran out in the buffer: it must not start");
        assert_eq!(deliveries.buffered(), 0);
        assert!(!deliveries.finish("3"), "and its outcome is never recorded");
        assert_eq!(deliveries.take_give_back(), [("c".to_string(), "3".to_string())], "its lease is given back");
    }

    /// A lease is its claim call's, which renewals of the call's other tasks keep alive: what the
    /// worker drops without an outcome recorded (its lease ran out by this process's count while
    /// Redis could not be reached, or its outcome could not be sent) goes back at the next round
    /// of renewals, and a failed giving back is tried again.
    #[tokio::test(start_paused = true)]
    async fn what_a_worker_drops_is_given_back() {
        let lease = Duration::from_secs(1);
        let deliveries = Deliveries::default();
        assert!(deliveries
            .buffer(vec![claimed("a", "1"), claimed("b", "2"), claimed("c", "3")], Instant::now() + lease)
            .is_empty());
        assert!(!deliveries.idle());
        let a = deliveries.next().expect("a starts");
        assert_eq!(a.token, "1");
        // "b" renewed; "a" (running) and "c" (buffered) not, and the process counts their leases out.
        deliveries.renewed(&["2"], Instant::now() + lease * 3);
        tokio::time::advance(lease * 2).await;
        assert_eq!(deliveries.expire(Instant::now()), ["a".to_string()], "the running one's handler is told");
        let mut back = deliveries.take_give_back();
        back.sort();
        assert_eq!(back, [("a".to_string(), "1".to_string()), ("c".to_string(), "3".to_string())]);
        assert!(deliveries.take_give_back().is_empty(), "taken once");

        // "b" runs; its outcome cannot be sent: forgotten, and given back.
        assert_eq!(deliveries.next().map(|c| c.token), Some("2".to_string()));
        assert!(deliveries.finish("2"));
        deliveries.forget_and_give_back("b", "2");
        assert!(!deliveries.idle(), "a round has work: the giving back");
        assert_eq!(deliveries.take_give_back(), [("b".to_string(), "2".to_string())]);
        // A giving back that failed waits for the next round.
        deliveries.give_back_later(vec![("b".to_string(), "2".to_string())]);
        assert_eq!(deliveries.take_give_back(), [("b".to_string(), "2".to_string())]);
        assert!(!deliveries.finish("1"), "a's outcome is not recorded");
        assert!(deliveries.next().is_none(), "c does not start");
        assert!(deliveries.take_give_back().is_empty(), "c went back already");
        assert!(deliveries.idle(), "nothing held, nothing to give back");
    }
}
