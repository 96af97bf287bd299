//! The leader loop: competes for the wheel's leadership and, while it holds it, moves the cursor
//! on every tick boundary of Redis's clock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::store::client::{Partition, WheelClient};
use super::store::scripts::{self, Bid, TickReply};
use crate::Error;

/// The most tasks one tick script call moves: a few milliseconds of Redis's time at most (about
/// 3 ms on a busy 2-core machine), so that a burst falling due does not hold other clients up
/// for long (the 100,000-on-one-tick test holds every call under 10 ms).
const TICK_BUDGET: usize = 256;
/// How many ticks past Redis's clock a tick call's slots reach: far-tier tasks due that soon
/// enter the ring, and a clock estimate a little behind still covers the current tick.
const LOOKAHEAD_TICKS: u64 = 4;
/// The most slot keys one tick call names: a cursor further behind catches up over several calls.
const MAX_STEP_SLOTS: u64 = 256;
/// How long the loop sleeps past a tick boundary, so Redis's clock has surely crossed it.
const PAST_BOUNDARY: Duration = Duration::from_millis(1);

/// A node that does not lead bids for the lead at least this many times per leadership lease
/// (and just after the holder's lease runs out): not every tick, which would cost every node
/// but one a script call per tick on an idle wheel.
const BID_EVERY: u32 = 4;

/// What one round of ticking found.
enum Round {
    /// The cursor is at Redis's tick; the next boundary is `boundary` away. On a store in this
    /// process alone, `work` is how long until a tick may have work again (`None`: nothing
    /// waits).
    CaughtUp { boundary: Duration, work: Option<Duration> },
    /// The token is no longer the leader's.
    Refused,
}

/// Whether a leader loop leads its partition, as far as it can tell.
#[derive(Debug, Default)]
pub(crate) struct Lead {
    /// Until when (this machine's clock) the leadership is surely this loop's: one leadership
    /// lease after the start of the last call that won or renewed it (Redis set the lease
    /// later than that, so this runs out first). `None` while it does not lead.
    until: Mutex<Option<Instant>>,
}

impl Lead {
    /// Whether the loop leads: it won or renewed the leadership less than a lease ago, and has
    /// not been refused or given it up since.
    pub(crate) fn holds(&self) -> bool {
        matches!(*self.until.lock().unwrap_or_else(|p| p.into_inner()), Some(until) if Instant::now() < until)
    }

    fn set(&self, until: Option<Instant>) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = until;
    }
}

/// Runs until `stop` turns true (or its sender is dropped), then gives up the leadership.
///
/// `bid_now` is notified when a worker of this node learns that the leader gave up the lead: a
/// node that does not lead then bids at once. `lead` tells the worker whether this loop leads;
/// `started` is counted up once, at the first answer to a bid.
pub(crate) async fn run(
    wheel: &WheelClient,
    part: &Partition,
    node: String,
    mut stop: watch::Receiver<bool>,
    bid_now: &Notify,
    lead: &Lead,
    started: &watch::Sender<usize>,
) {
    let renew = (wheel.cfg.leader_lease() / 3).max(Duration::from_millis(1));
    let bid = (wheel.cfg.leader_lease() / BID_EVERY).max(Duration::from_millis(1));
    let mut token: Option<String> = None;
    // The token of a lead the tick script just refused, until the next bid tells why.
    let mut refused: Option<String> = None;
    let mut failures = 0u32;
    let mut answered = false;
    // On a store in this process alone: the count of its changes, which a leader that sleeps
    // until its next due time watches (a change may bring that time forward).
    let mut changes = wheel.conn.changes();
    loop {
        if *stop.borrow() {
            break;
        }
        // Read before the tick: a change made during or after it wakes the leader.
        if let Some(c) = changes.as_mut() {
            c.borrow_and_update();
        }
        let asked = Instant::now();
        let wait = match &token {
            None => match scripts::acquire(wheel, &part.keys, &node, wheel.cfg.leader_lease_ms()).await {
                Ok(answer) => {
                    failures = 0;
                    if let Some(old) = refused.take() {
                        report_refusal(wheel, part, &old, &answer);
                    }
                    if let (false, Bid::Lost(left)) = (answered, &answer) {
                        // Most often another live node; after a restart, possibly this node's
                        // previous run, whose lead nobody gave up: it comes to a bidder once its
                        // lease runs out.
                        let left = left.map_or_else(|| "no expiry".to_owned(), |left| format!("{left:.1?} left"));
                        tracing::info!(
                            wheel = %wheel.name(),
                            partition = part.index,
                            "another node leads ({left} on its lease): if that is this node's previous run, which \
                             did not give the lead up, a node that bids takes it once the lease runs out"
                        );
                    }
                    let wait = match answer {
                        Bid::Won(t) => {
                            tracing::info!(wheel = %wheel.name(), partition = part.index, token = %t, "took the leadership");
                            lead.set(Some(asked + wheel.cfg.leader_lease()));
                            token = Some(t);
                            Duration::ZERO
                        }
                        // Bid again just after the holder's lease runs out, and meanwhile once a
                        // quarter lease (the holder may give it up): a takeover within the lease,
                        // without a call per tick.
                        Bid::Lost(left) => left.map_or(bid, |left| (left + PAST_BOUNDARY).min(bid)),
                    };
                    // Counted once `lead` tells the outcome: a caller of `Worker::ready` asks
                    // `is_leader` next.
                    if !answered {
                        answered = true;
                        started.send_modify(|n| *n += 1);
                    }
                    wait
                }
                Err(e) => backoff(wheel, &mut failures, &e),
            },
            Some(t) => match tick(wheel, part, t).await {
                Ok(Round::CaughtUp { boundary, work }) => {
                    lead.set(Some(asked + wheel.cfg.leader_lease()));
                    failures = 0;
                    if changes.is_some() {
                        work.unwrap_or(renew).min(renew)
                    } else {
                        boundary.min(renew)
                    }
                }
                // The lead is no longer this token's: its lease ran out, and another node may
                // have taken it or nobody. The bid that follows at once tells which, and says so.
                Ok(Round::Refused) => {
                    lead.set(None);
                    refused = token.take();
                    Duration::ZERO
                }
                Err(e) => backoff(wheel, &mut failures, &e),
            },
        };
        if !wait.is_zero() {
            let follower = token.is_none();
            let mut until = Instant::now() + wait;
            // A change wakes a leader that sleeps past the next tick boundary: it ticks on that
            // boundary, as a leader that ticks every tick would (never early, at most a tick late).
            // A node that does not lead bids then too: the change may be the leader giving the
            // lead up (a lost bid writes nothing, so it wakes nobody).
            let mut watching = changes.as_mut();
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => break,
                    _ = stop.changed() => break,
                    () = bid_now.notified(), if follower => break,
                    r = async { watching.as_mut().expect("guarded").changed().await }, if watching.is_some() => {
                        watching = None;
                        if r.is_ok() {
                            until = until.min(Instant::now() + to_boundary(wheel));
                        }
                    }
                }
            }
        }
    }
    lead.set(None);
    if let Some(t) = token {
        if let Err(e) = scripts::release(wheel, &part.keys, &t).await {
            tracing::warn!(wheel = %wheel.name(), error = %e, "could not give up the leadership; it lapses after the lease");
        }
    }
}

/// Says why the lead held under `old` was refused, from the bid made just after: won back, it
/// had lapsed with no other node taking it (Redis restarted or was out of reach, or this process
/// stalled, for longer than the leadership's lease); lost, another node took it meanwhile.
fn report_refusal(wheel: &WheelClient, part: &Partition, old: &str, bid: &Bid) {
    let lease = wheel.cfg.leader_lease();
    match bid {
        Bid::Won(_) => tracing::warn!(
            wheel = %wheel.name(),
            partition = part.index,
            token = %old,
            "the leadership lapsed and this node took it back: no other node held it, but its lease of {lease:?} \
             ran out before this node renewed it (Redis restarted or was out of reach, or this process stalled, for \
             that long)"
        ),
        Bid::Lost(_) => tracing::warn!(
            wheel = %wheel.name(),
            partition = part.index,
            token = %old,
            "lost the leadership to another node: its lease of {lease:?} ran out before this node renewed it (Redis \
             was out of reach, or this process stalled, for that long), and another node took it; this node bids \
             again when that node's lease runs out"
        ),
    }
}

/// How long until just past the tick boundary at or after now on the wheel's clock (a change
/// made on a boundary may be due on that tick, which no tick has looked at yet).
fn to_boundary(wheel: &WheelClient) -> Duration {
    let tick = wheel.cfg.tick_ms;
    Duration::from_millis((tick - wheel.clock.now_ms() % tick) % tick) + PAST_BOUNDARY
}

fn backoff(wheel: &WheelClient, failures: &mut u32, e: &Error) -> Duration {
    *failures += 1;
    if *failures == 1 {
        tracing::warn!(wheel = %wheel.name(), error = %e, "ticking failed; retrying with a backoff");
    }
    let base = Duration::from_millis(50) * 2u32.saturating_pow((*failures - 1).min(6));
    base.min(Duration::from_secs(2)).min(wheel.cfg.leader_lease() / 3)
}

/// Calls the tick script until it has caught up (each call is bounded; "more" means call again).
/// Each call names the slots after the cursor up to a few ticks past Redis's clock, both as the
/// last reply gave them (at first, an estimate: a wrong one costs one more call).
async fn tick(wheel: &WheelClient, part: &Partition, token: &str) -> Result<Round, Error> {
    let tick_ms = wheel.cfg.tick_ms;
    let mut cursor = wheel.clock.now_ms() / tick_ms - 1;
    let mut now_ms = wheel.clock.now_ms();
    loop {
        // Redis's clock moves on while the call travels: on a slow link (hundreds of ms each
        // way) a lookahead of a few ticks past the last reply's clock would stop the cursor short
        // of Redis's now, and every round would take a second call. The last round trip is added.
        let travel = wheel.clock.round_trip_ms().div_ceil(tick_ms);
        // On a slow link, tasks go to `ready` three round trips ahead rather than one: the
        // rounds come a round trip apart, and an idle worker then learns of them by a wake-up
        // (half a round trip) and claims (one more) before they fall due, to be told their time.
        let reach = if wheel.clock.slow_link() { 3 * travel } else { travel };
        let last = (now_ms / tick_ms).max(cursor) + LOOKAHEAD_TICKS + reach;
        let ticks = cursor + 1..=last.min(cursor + MAX_STEP_SLOTS);
        let sent = Instant::now();
        // Ahead by a tick more than the round trip: a tick's tasks are in `ready` a whole tick
        // before it begins, whenever in the tick the call lands.
        let reply = scripts::tick(wheel, &part.keys, token, TICK_BUDGET, ticks, 1 + reach.max(1)).await?;
        wheel.clock.note_round_trip(sent.elapsed());
        match reply {
            TickReply::More { cursor: c, now_ms: n } => (cursor, now_ms) = (c, n),
            TickReply::Done { now_ms, next_ms, .. } => {
                let tick = wheel.cfg.tick_ms;
                let boundary = Duration::from_millis(tick - now_ms % tick) + PAST_BOUNDARY;
                // The boundary of the tick that holds `at`, where the cursor reaches it.
                let work = next_ms.map(|at| {
                    let on = at.div_ceil(tick).saturating_mul(tick);
                    Duration::from_millis(on.saturating_sub(now_ms)) + PAST_BOUNDARY
                });
                return Ok(Round::CaughtUp { boundary, work });
            }
            TickReply::Refused => return Ok(Round::Refused),
        }
    }
}

/// Ticks once under `token` as a leader would, until caught up; false if refused. For the tests
/// of fencing and concurrent tickers.
#[cfg(test)]
pub(crate) async fn tick_once(wheel: &WheelClient, part: &Partition, token: &str) -> Result<bool, Error> {
    Ok(matches!(tick(wheel, part, token).await?, Round::CaughtUp { .. }))
}
