//! The claim loop: keeps the partition's buffer of claimed tasks topped up for the worker's
//! handlers (as many as are free, and as many more as they are expected to start within
//! [`AHEAD`](super::handler::AHEAD), at most the prefetch), claiming in one call that also
//! acknowledges what finished since the last (retried under the same claim id until a reply
//! comes); starts runners of handlers for what it buffered; and waits for a wake-up when nothing
//! is ready. Beside it, the partition's recorder of the acknowledgements no claim carried, and
//! renewer of leases. On stop, it gets back what an unanswered claim took and lets the handlers
//! run what the buffer holds and their outcomes be recorded, unless told to abandon them first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::cancel::follow_cancels;
use super::handler::{claimed_late, start_runners, Handler, Handlers, RunTimes};
use super::lease::{give_back_leases, renew_leases, Deliveries};
use super::outcome::{lost, record_outcomes, refused, Outcomes};
use super::stop::{abandoned, pause, stopped, stopping};
use super::wake::{self, Waker};
use crate::durable::series::Specs;
use crate::durable::store::client::WheelClient;
use crate::durable::store::scripts::{self, Claim, Claimed};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::{RedisClock, SLOW_LINK_MS};
use crate::durable::WheelKeys;
use crate::Error;

/// The most tasks one claim takes, and the most acknowledgements it carries: a claim with its
/// acknowledgements holds Redis for a few milliseconds in which it serves no one else, as a claim
/// of 64 did before it carried any (measured by `src/durable/tests/costs.rs`; BENCHMARKS.md).
const MAX_CLAIM: usize = 64;
/// How long the claim loop waits to gather free handlers while tasks are waiting and it claims
/// nothing ahead of them.
const GATHER: Duration = Duration::from_millis(2);
/// The least time between two claims made for a due time (the next task in `ready` falling due):
/// tasks due within it go out in one claim. It bounds what claiming at due times costs, and
/// trades lateness for the store's CPU (BENCHMARKS.md, "Due-time claims", has the curve).
const DUE_GAP: Duration = Duration::from_millis(5);

/// How a claim loop is told to stop, to abandon its handlers, and tells that it claims; and the
/// id of its worker's node, which its claims record.
#[derive(Clone)]
pub(super) struct Signals {
    /// True: stop claiming, let the handlers finish.
    pub(super) stop: watch::Receiver<bool>,
    /// True: drop the handlers still running (the end of `shutdown_timeout`).
    pub(super) abandon: watch::Receiver<bool>,
    /// True: cancel the running handlers' tokens (`shutdown_timeout`'s bound is near).
    pub(super) wind_down: watch::Receiver<bool>,
    /// Counts the loops of the worker that have had their first answer from Redis.
    pub(super) started: Arc<watch::Sender<usize>>,
    /// The id of the worker's node.
    pub(super) node: String,
}

/// Claims from partition `part` for handlers that hold one of `permits` each (the worker's
/// concurrency, shared by the claim loops of every partition). Each turn reads in the order its
/// phases happen: wait for room in the buffer (or make an unanswered claim again), claim and
/// acknowledge in one call, hand out what it took, and wait for a wake-up when it took less than
/// it asked for; a failed call backs off instead. Told to stop, it ends.
///
/// `pair` is shared with the partition's [`relay_loop`] (see [`Pair`]). A relay (`relay` true)
/// uses the first loop's handlers, and also ends when the link is no longer slow.
#[allow(clippy::too_many_arguments)]
pub(super) async fn claim_loop(
    wheel: &Arc<WheelClient>,
    part: usize,
    permits: Arc<Semaphore>,
    handler: Handler,
    freed: Arc<Notify>,
    signals: Signals,
    bid_now: &Notify,
    pair: &Pair,
    relay: bool,
) {
    let Some(mut claims) = ClaimLoop::start(wheel, part, permits, handler, freed, signals, bid_now, pair, relay) else {
        return;
    };
    // The waker's connection first, so that the worker can be woken once it says it is ready.
    let _ = wake::prepare(claims.wheel, claims.keys, &mut claims.waker).await;
    while !stopping(&claims.stop) && (!relay || wheel.clock.slow_link()) {
        claims.reap_runners();
        let Some(call) = claims.wait_for_room().await else {
            break;
        };
        // The other loop counts what this claim asks for as taken until it is answered.
        pair.asked.fetch_add(call.want, Ordering::SeqCst);
        pair.sent();
        let reply = claims.claim_and_ack(&call).await;
        pair.asked.fetch_sub(call.want, Ordering::SeqCst);
        claims.handlers.deliveries.changed.notify_waiters();
        let (acked, claimed, claim_in) = match reply {
            Ok(reply) => reply,
            Err(e) => {
                claims.back_off(call, &e).await;
                continue;
            }
        };
        let full = claims.hand_out(call, &acked, claimed).await;
        if !full {
            claims.wait_for_wake(claim_in).await;
        }
    }
    claims.finish().await;
}

/// A partition's second claim loop, which claims only while the link to the store is slow. One
/// loop has one claim on the way at a time, so on a link of a round trip `r` a task that falls
/// due just after a claim reached the store waits `r` for the next; a second loop, its claims
/// half a round trip from the first's ([`Pair`]), halves that wait. Its claims go to the first
/// loop's buffer, handlers, leases and acknowledgements. It starts when the link turns slow, and
/// ends when it is fast again (passing a wake-up on to the first loop, and letting the runners
/// it started finish); it does not count towards `Worker::ready`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn relay_loop(
    wheel: &Arc<WheelClient>,
    part: usize,
    permits: Arc<Semaphore>,
    handler: Handler,
    freed: Arc<Notify>,
    signals: Signals,
    bid_now: &Notify,
    pair: &Pair,
) {
    let mut stop = signals.stop.clone();
    let signals = Signals { started: Arc::new(watch::Sender::new(0)), ..signals };
    loop {
        tokio::select! {
            () = wheel.clock.until_slow_link() => {}
            () = stopped(&mut stop) => return,
        }
        let (p, h, f, s) = (permits.clone(), handler.clone(), freed.clone(), signals.clone());
        claim_loop(wheel, part, p, h, f, s, bid_now, pair, true).await;
    }
}

/// What a partition's two claim loops share: the first loop's handlers (one buffer, one list of
/// deliveries, one recorder of outcomes, one renewer), which the relay's claims feed too; how
/// many tasks the claims on the way ask for, which neither loop counts as room; when the last
/// claim went, so that on a slow link a claim goes at least half a round trip after the other
/// loop's (the two reach the store at even intervals instead of together); and whether the
/// relay runs, so that the first loop records every outcome before it ends.
pub(super) struct Pair {
    handlers: OnceLock<Handlers>,
    asked: AtomicUsize,
    last_sent: Mutex<Option<tokio::time::Instant>>,
    relay_running: watch::Sender<bool>,
}

/// The most a claim waits for the other loop's (half a round trip, at most this).
const MAX_PACE: Duration = Duration::from_secs(1);

impl Pair {
    pub(super) fn new() -> Self {
        Pair {
            handlers: OnceLock::new(),
            asked: AtomicUsize::new(0),
            last_sent: Mutex::new(None),
            relay_running: watch::Sender::new(false),
        }
    }

    /// On a slow link, the instant the next claim may go: half a round trip after the last one
    /// sent. `None`: at once (a fast link, or the last went long enough ago).
    fn next(&self, clock: &RedisClock) -> Option<tokio::time::Instant> {
        if !clock.slow_link() {
            return None;
        }
        let half = Duration::from_millis(clock.round_trip_ms() / 2).min(MAX_PACE);
        let last = *self.last_sent.lock().unwrap_or_else(PoisonError::into_inner);
        last.map(|last| last + half).filter(|at| *at > tokio::time::Instant::now())
    }

    /// A claim goes now.
    fn sent(&self) {
        *self.last_sent.lock().unwrap_or_else(PoisonError::into_inner) = Some(tokio::time::Instant::now());
    }
}

/// One claim call: its id (the same for each attempt), the acknowledgements it carries, how many
/// tasks it asks for, and when it was first sent (the leases of what it took, if it took
/// anything, started after that).
struct Call {
    id: String,
    acks: Vec<scripts::Ack>,
    want: usize,
    sent: tokio::time::Instant,
}

/// The state of one partition's claim loop, between its phases.
struct ClaimLoop<'a> {
    wheel: &'a Arc<WheelClient>,
    part: usize,
    keys: &'a WheelKeys,
    /// The id of the worker's node, which its claims record.
    node: String,
    /// Notified when a wait for a wake-up learns that the partition's leader gave up the lead,
    /// so that this node's leader bids at once.
    bid_now: &'a Notify,
    stop: watch::Receiver<bool>,
    abandon: watch::Receiver<bool>,
    wind_down: watch::Receiver<bool>,
    started: Arc<watch::Sender<usize>>,
    handlers: Handlers,
    runners: JoinSet<()>,
    /// The partition's recorder of outcomes, renewer of leases and follower of cancel requests
    /// (the first loop's; a relay has none of its own).
    tasks: Option<(JoinHandle<()>, JoinHandle<()>, JoinHandle<()>)>,
    /// Shared with the partition's other loop.
    pair: &'a Pair,
    relay: bool,
    /// The connection its waits for a wake-up block on, made at the first.
    waker: Option<Waker>,
    /// Claims failed in a row.
    failures: u32,
    /// The last claim took all it asked for: tasks are perhaps still waiting.
    backlog: bool,
    /// The loop has had its first answer from Redis.
    claimed_once: bool,
    /// A claim that failed, perhaps after it landed (its reply lost): it is made again with the
    /// same id and the same acknowledgements, so that it gets back the tasks its first attempt
    /// took.
    unanswered: Option<Call>,
    /// The id of the last claim answered: its record of what it took is no longer needed.
    answered: String,
}

impl<'a> ClaimLoop<'a> {
    /// The loop's state: the first loop's with the partition's handlers, recorder, renewer and
    /// cancel follower started; a relay's with the first loop's handlers (`None` if it has made
    /// none yet).
    #[allow(clippy::too_many_arguments)]
    fn start(
        wheel: &'a Arc<WheelClient>,
        part: usize,
        permits: Arc<Semaphore>,
        handler: Handler,
        freed: Arc<Notify>,
        signals: Signals,
        bid_now: &'a Notify,
        pair: &'a Pair,
        relay: bool,
    ) -> Option<Self> {
        let Signals { stop, abandon, wind_down, started, node } = signals;
        let (handlers, tasks) = if relay {
            let handlers = pair.handlers.get()?.clone();
            pair.relay_running.send_replace(true);
            (handlers, None)
        } else {
            let deliveries = Arc::new(Deliveries::default());
            let outcomes = Arc::new(Outcomes::new(deliveries.clone()));
            let recorder = tokio::spawn(record_outcomes(wheel.clone(), part, outcomes.clone()));
            let renewer = tokio::spawn(renew_leases(wheel.clone(), part, deliveries.clone()));
            let cancels = tokio::spawn(follow_cancels(wheel.clone(), part, deliveries.clone()));
            let handlers = Handlers {
                handler,
                timeout: wheel.cfg.handler_timeout,
                outcomes,
                deliveries,
                permits,
                freed,
                runs: Arc::new(RunTimes::default()),
                specs: Arc::new(Specs::default()),
                wheel: wheel.clone(),
                part,
            };
            let _ = pair.handlers.set(handlers.clone());
            (handlers, Some((recorder, renewer, cancels)))
        };
        Some(ClaimLoop {
            wheel,
            part,
            keys: &wheel.partitions[part].keys,
            node,
            bid_now,
            stop,
            abandon,
            wind_down,
            started,
            handlers,
            runners: JoinSet::new(),
            tasks,
            pair,
            relay,
            waker: None,
            failures: 0,
            backlog: false,
            claimed_once: false,
            unanswered: None,
            answered: String::new(),
        })
    }

    /// Forgets the runners that have ended.
    fn reap_runners(&mut self) {
        while self.runners.try_join_next().is_some() {}
    }

    /// The next claim to make: the unanswered one again, at once (asking for what there is
    /// room for now, at least one), else a new one once a claim is worth making (and, on a slow
    /// link, half a round trip after the partition's last, see [`Pair`]), carrying the
    /// acknowledgements waiting; `None` when told to stop.
    async fn wait_for_room(&mut self) -> Option<Call> {
        let (concurrency, prefetch) = (self.wheel.cfg.concurrency, self.wheel.cfg.prefetch);
        let asked = &self.pair.asked;
        if let Some(mut call) = self.unanswered.take() {
            call.want = room(&self.handlers, concurrency, prefetch, asked.load(Ordering::SeqCst)).max(1);
            return Some(call);
        }
        let want = loop {
            let want = room_to_claim(
                &self.handlers,
                (concurrency, prefetch),
                asked,
                self.backlog,
                &mut self.runners,
                &mut self.stop,
            )
            .await?;
            let Some(at) = self.pair.next(&self.wheel.clock) else { break want };
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = stopped(&mut self.stop) => return None,
            }
            // The other loop's claim may have taken the room meanwhile.
            match room(&self.handlers, concurrency, prefetch, asked.load(Ordering::SeqCst)) {
                0 => continue,
                want => break want,
            }
        };
        // The leases of what this call claims start after it is sent.
        let (id, acks) = (self.wheel.ids.next(), self.handlers.outcomes.take(MAX_CLAIM));
        Some(Call { id, acks, want, sent: tokio::time::Instant::now() })
    }

    /// Acknowledges what `call` carries and claims what it asks for, in one `claim.lua` call:
    /// whether each acknowledgement was taken, and the tasks claimed.
    async fn claim_and_ack(&self, call: &Call) -> Result<(Vec<bool>, Vec<Claimed>, Option<Duration>), Error> {
        let claim = Claim {
            n: call.want,
            claim_id: &call.id,
            replay_only: false,
            previous: &self.answered,
            node: &self.node,
            acks: &call.acks,
        };
        let sent = tokio::time::Instant::now();
        let reply = scripts::claim_and_ack(self.wheel, self.keys, &claim, Window::Response).await?;
        self.wheel.clock.note_round_trip(sent.elapsed());
        Ok((reply.acked, reply.claimed, reply.claim_in))
    }

    /// After a failed claim: keeps it to make again, and pauses, longer after each failure in a
    /// row but soon enough that the retry finds the claimed tasks still leased to it.
    async fn back_off(&mut self, call: Call, e: &Error) {
        self.unanswered = Some(call);
        self.failures += 1;
        if self.failures == 1 {
            tracing::warn!(wheel = %self.wheel.name(), partition = self.part, error = %e, "claiming failed; retrying with a backoff");
        }
        pause(&mut self.stop, retry_delay(self.failures).min(self.wheel.cfg.lease() / 4)).await;
    }

    /// After an answered claim: logs the acknowledgements refused (`acked` answers each), notes
    /// the claim answered (and the loop's first answer), and buffers what it `claimed` for the
    /// handlers. Returns whether it took all it asked for: then perhaps more are ready (the claim
    /// passed a wake-up on to an idle worker, if none was waiting yet), and the loop claims again
    /// once there is room.
    async fn hand_out(&mut self, call: Call, acked: &[bool], claimed: Vec<Claimed>) -> bool {
        let Call { id, acks, want, sent } = call;
        self.acknowledged(&acks, acked);
        self.answered = id;
        if self.failures > 0 {
            tracing::info!(wheel = %self.wheel.name(), "claiming works again");
            self.failures = 0;
        }
        if !self.claimed_once {
            self.claimed_once = true;
            self.started.send_modify(|n| *n += 1);
        }
        let full = claimed.len() == want;
        self.backlog = full;
        run(&self.handlers, claimed, sent + self.wheel.cfg.lease(), &mut self.runners).await;
        full
    }

    /// Logs the acknowledgements `acks` that Redis refused, and forgets their deliveries.
    fn acknowledged(&self, acks: &[scripts::Ack], answers: &[bool]) {
        refused(self.wheel, acks, answers);
        for ack in acks {
            self.handlers.deliveries.forget(&ack.token);
        }
    }

    /// Waits for a wake-up: nothing more is ready, or (`claim_in`, from the claim) the
    /// next task in `ready` is due then (the tick moves a tick's tasks there before it begins),
    /// or a rate limit holds tasks back until then, when the loop claims again.
    ///
    /// A claim due within a tick (and a round trip, on a slow link) is waited for here, on
    /// Tokio's timer, at least [`DUE_GAP`]
    /// after the last (so that tasks due close together go out in one claim): Redis serves a
    /// `BLPOP`'s timeout only on its own timer, up to 100 ms late at its default `hz`. The next
    /// claim carries the acknowledgements. A longer wait blocks on `wake`; meanwhile no claim is
    /// coming to carry the acknowledgements, which the recorder then sends at once.
    async fn wait_for_wake(&mut self, claim_in: Option<Duration>) {
        if self.relay && !self.wheel.clock.slow_link() {
            // The link is fast again: the relay ends (and passes a wake-up on) instead.
            return;
        }
        // Counted from the reply, which took the way back: the claim, which takes the way there,
        // goes a round trip early on a slow link, to reach the store when due (one that arrives
        // early takes nothing and is told again). On a fast one the reply's way is within
        // DUE_GAP, and a claim a little early would cost a second.
        let round_trip = self.wheel.clock.round_trip_ms();
        let early = Duration::from_millis(if round_trip >= SLOW_LINK_MS { round_trip } else { 0 });
        let until_room = claim_in.map(|d| d.saturating_sub(early) + Duration::from_millis(1));
        // The tick moves tasks to `ready` a tick ahead, and a round trip more on a slow link.
        if let Some(until) = until_room.filter(|until| *until <= self.wheel.cfg.tick() + early) {
            pause(&mut self.stop, until.max(DUE_GAP)).await;
            return;
        }
        let outcomes = &self.handlers.outcomes;
        outcomes.set_idle(true);
        wake::wait_for_wake(self.wheel, self.keys, &mut self.waker, &mut self.stop, self.bid_now, until_room).await;
        outcomes.set_idle(false);
    }

    /// Told to stop: gets back what an unanswered claim took, lets the handlers run what the
    /// buffer holds (or drops them when told to abandon them), and ends the partition's recorder
    /// once every outcome is recorded (the relay's runners' too), and its renewer and cancel
    /// follower. A relay ends as [`finish_relay`](Self::finish_relay) says.
    async fn finish(mut self) {
        self.replay_unanswered().await;
        if self.relay {
            self.finish_relay().await;
            return;
        }
        self.drain().await;
        // The relay's last claim may have buffered tasks since: once it has ended, they run too.
        let mut relay = self.pair.relay_running.subscribe();
        if *relay.borrow_and_update() {
            let _ = relay.wait_for(|running| !running).await;
            self.drain().await;
        }
        let ClaimLoop { handlers, mut runners, tasks, .. } = self;
        let outcomes = handlers.outcomes.clone();
        drop(handlers);
        while runners.join_next().await.is_some() {}
        outcomes.close();
        if let Some((recorder, renewer, cancels)) = tasks {
            let _ = recorder.await;
            renewer.abort();
            cancels.abort();
        }
    }

    /// A relay that ends (the link is fast again, or the worker stops): passes a wake-up on to
    /// the first loop, since it may have taken one, or been told a due time, that no one else
    /// then claims for; and waits for the runners it started, which run the partition's buffer
    /// beside the first loop's (dropped if the worker is told to abandon its handlers, as the
    /// first loop drops its own and gives back the leases).
    async fn finish_relay(mut self) {
        wake::pass_on_wake(self.wheel, self.keys).await;
        loop {
            tokio::select! {
                ended = self.runners.join_next() => {
                    if ended.is_none() {
                        break;
                    }
                }
                () = abandoned(&mut self.abandon) => {
                    self.runners.abort_all();
                    while self.runners.join_next().await.is_some() {}
                    break;
                }
            }
        }
        self.pair.relay_running.send_replace(false);
    }

    /// A claim left unanswered at the stop may have taken tasks: one last try gets them back
    /// (taking nothing new) and runs them like the others in flight, rather than leaving them to
    /// come back after the lease as another attempt.
    async fn replay_unanswered(&mut self) {
        let Some(Call { id, acks, sent, .. }) = self.unanswered.take() else {
            return;
        };
        let call = Claim { n: 0, claim_id: &id, replay_only: true, previous: "", node: &self.node, acks: &acks };
        match scripts::claim_and_ack(self.wheel, self.keys, &call, Window::Response).await {
            Ok(reply) => {
                self.acknowledged(&acks, &reply.acked);
                run(&self.handlers, reply.claimed, sent + self.wheel.cfg.lease(), &mut self.runners).await;
            }
            Err(e) => {
                lost(self.wheel, "(an unanswered claim)", &e);
                self.handlers.outcomes.put_back(acks);
            }
        }
    }

    /// Waits for the handlers to run what the buffer holds (each runner holds a permit until the
    /// buffer is empty), or drops those still running when told to abandon them.
    async fn drain(&mut self) {
        let all = u32::try_from(self.wheel.cfg.concurrency).unwrap_or(u32::MAX);
        let (wheel, part) = (self.wheel, self.part);
        let ClaimLoop { handlers, runners, wind_down, abandon, .. } = self;
        let deliveries = &handlers.deliveries;
        let mut wound_down = false;
        loop {
            tokio::select! {
                told = async { wind_down.wait_for(|w| *w).await.map(|_| ()) }, if !wound_down => {
                    wound_down = true;
                    if told.is_ok() {
                        deliveries.cancel_running();
                    }
                }
                held = handlers.permits.clone().acquire_many_owned(all) => {
                    if deliveries.buffered() == 0 {
                        break;
                    }
                    // A runner ended just as tasks came: start runners again.
                    drop(held);
                    start_free_runners(handlers, runners);
                    tokio::task::yield_now().await;
                }
                () = abandoned(abandon) => {
                    runners.abort_all();
                    deliveries.abandon(wheel, part).await;
                    break;
                }
            }
        }
    }
}

/// How many tasks the buffer has room for: the free handlers, and as many more as the handlers
/// are expected to start within `AHEAD`, less what the buffer holds.
/// What the claims on the way ask for (`asked`, the partition's two loops') counts as buffered.
fn room(handlers: &Handlers, concurrency: usize, prefetch: usize, asked: usize) -> usize {
    let ahead = handlers.runs.ahead(concurrency, prefetch);
    let free = handlers.permits.available_permits();
    let held = handlers.deliveries.buffered() + asked;
    (free + ahead).saturating_sub(held).min(MAX_CLAIM)
}

/// Waits until a claim is worth making, and returns how many tasks it is to take; `None` when
/// told to stop. A claim is worth making when handlers are free and the buffer is empty, or when
/// the buffer has run down far enough for a full claim (or to half of what is claimed ahead,
/// when that is less than two claims' worth), so that a busy worker's claims are full ones. While tasks are waiting (`backlog`)
/// and nothing is claimed ahead, it gathers free handlers a moment rather than claiming one task
/// per round trip.
async fn room_to_claim(
    handlers: &Handlers,
    (concurrency, prefetch): (usize, usize),
    asked: &AtomicUsize,
    backlog: bool,
    runners: &mut JoinSet<()>,
    stop: &mut watch::Receiver<bool>,
) -> Option<usize> {
    let mut gather_until = None;
    loop {
        let mut changed = std::pin::pin!(handlers.deliveries.changed.notified());
        changed.as_mut().enable();
        let mut freed = std::pin::pin!(handlers.freed.notified());
        freed.as_mut().enable();
        // Tasks wait in the buffer and a handler is free (another partition's runner gave its
        // permit back): run them.
        start_free_runners(handlers, runners);
        let ahead = handlers.runs.ahead(concurrency, prefetch);
        let (free, buffered, asked) =
            (handlers.permits.available_permits(), handlers.deliveries.buffered(), asked.load(Ordering::SeqCst));
        let room = room(handlers, concurrency, prefetch, asked);
        let low_water = ahead.saturating_sub(MAX_CLAIM).max(ahead / 2);
        // A claim on the way (the other loop's, on a slow link) takes from the room, not from
        // the reason to claim: free handlers and an empty buffer.
        let worth = room > 0 && ((buffered == 0 && free > 0) || (ahead > 0 && buffered + asked <= low_water));
        if worth {
            let few = backlog && ahead == 0 && room < concurrency.min(MAX_CLAIM).div_ceil(4);
            let until = *gather_until.get_or_insert_with(|| tokio::time::Instant::now() + GATHER);
            if !few || tokio::time::Instant::now() >= until {
                return Some(room);
            }
            tokio::select! {
                () = &mut changed => {}
                () = &mut freed => {}
                () = tokio::time::sleep_until(until) => {}
                () = stopped(stop) => return None,
            }
            continue;
        }
        tokio::select! {
            () = &mut changed => {}
            () = &mut freed => {}
            () = stopped(stop) => return None,
        }
    }
}

/// Buffers what a claim took (how late each was claimed recorded first) and starts runners for
/// it on the free handlers. A claim answered after the worker was abandoned gives its tasks
/// back at once.
async fn run(handlers: &Handlers, claimed: Vec<Claimed>, until: tokio::time::Instant, runners: &mut JoinSet<()>) {
    if claimed.is_empty() {
        return;
    }
    claimed_late(&handlers.wheel, handlers.part, &claimed);
    let back = handlers.deliveries.buffer(claimed, until);
    if !back.is_empty() {
        let back: Vec<(String, String)> = back.into_iter().map(|c| (c.task.key, c.token)).collect();
        let _ = give_back_leases(&handlers.wheel, handlers.part, &back).await;
    }
    start_free_runners(handlers, runners);
}

/// Starts a runner on each free handler, up to what the buffer holds.
fn start_free_runners(handlers: &Handlers, runners: &mut JoinSet<()>) {
    let mut held = Vec::new();
    while held.len() < handlers.deliveries.buffered() {
        match handlers.permits.clone().try_acquire_owned() {
            Ok(p) => held.push(p),
            Err(_) => break,
        }
    }
    start_runners(handlers, held, runners);
}

fn retry_delay(failures: u32) -> Duration {
    (Duration::from_millis(50) * 2u32.saturating_pow(failures.saturating_sub(1).min(6))).min(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_with_round_trips(ms: u64, count: usize) -> RedisClock {
        let clock = RedisClock::new(None);
        for _ in 0..count {
            clock.note_round_trip(Duration::from_millis(ms));
        }
        clock
    }

    /// On a slow link a claim goes half a round trip after the last one sent (by either loop);
    /// one wanted later than that goes at once.
    #[tokio::test(start_paused = true)]
    async fn on_a_slow_link_claims_go_half_a_round_trip_apart() {
        let (pair, clock) = (Pair::new(), clock_with_round_trips(400, 8));
        let start = tokio::time::Instant::now();
        assert_eq!(pair.next(&clock), None, "the first claim waited");
        pair.sent();
        assert_eq!(pair.next(&clock), Some(start + Duration::from_millis(200)));
        tokio::time::advance(Duration::from_millis(150)).await;
        assert_eq!(pair.next(&clock), Some(start + Duration::from_millis(200)), "asking again moved it");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(pair.next(&clock), None, "a claim after the half waited");
        // A round trip of minutes (a reconnect, say) holds a claim back a second at most.
        let clock = clock_with_round_trips(600_000, 8);
        pair.sent();
        assert_eq!(pair.next(&clock), Some(tokio::time::Instant::now() + MAX_PACE));
    }

    #[tokio::test(start_paused = true)]
    async fn on_a_fast_link_claims_are_not_paced() {
        let (pair, clock) = (Pair::new(), clock_with_round_trips(1, 8));
        pair.sent();
        assert_eq!(pair.next(&clock), None);
        // A slow round trip now and then does not make the link slow.
        let clock = clock_with_round_trips(400, 3);
        clock.note_round_trip(Duration::from_millis(1));
        clock.note_round_trip(Duration::from_millis(400));
        assert_eq!(pair.next(&clock), None);
    }
}
