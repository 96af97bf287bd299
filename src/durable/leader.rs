//! The leader loop: competes for the wheel's leadership and, while it holds it, moves the cursor
//! on every tick boundary of Redis's clock.

use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::conn::Inner;
use super::scripts::SCRIPTS;
use crate::Error;

/// The most tasks one tick script call moves.
const TICK_BUDGET: usize = 128;
/// The most ticks one tick script call steps through.
const TICK_MAX_STEPS: usize = 64;
/// How long the loop sleeps past a tick boundary, so Redis's clock has surely crossed it.
const PAST_BOUNDARY: Duration = Duration::from_millis(1);

/// A node that does not lead bids for the lead at least this many times per leadership lease
/// (and just after the holder's lease runs out): not every tick, which would cost every node
/// but one a script call per tick on an idle wheel.
const BID_EVERY: u32 = 4;

/// What one bid for the lead got.
enum Bid {
    /// The lead, under this fencing token.
    Won(String),
    /// Another node leads; its lease has this long left (`None`: it does not expire).
    Lost(Option<Duration>),
}

/// What one round of ticking found.
enum Round {
    /// The cursor is at Redis's tick; the next boundary is this far away.
    CaughtUp(Duration),
    /// The token is no longer the leader's.
    Refused,
}

/// Runs until `stop` turns true (or its sender is dropped), then gives up the leadership.
///
/// `bid_now` is notified when a worker of this node learns that the leader gave up the lead: a
/// node that does not lead then bids at once.
pub(crate) async fn run(inner: &Inner, node: String, mut stop: watch::Receiver<bool>, bid_now: &Notify) {
    let renew = (inner.cfg.leader_lease() / 3).max(Duration::from_millis(1));
    let bid = (inner.cfg.leader_lease() / BID_EVERY).max(Duration::from_millis(1));
    let mut token: Option<String> = None;
    let mut failures = 0u32;
    loop {
        if *stop.borrow() {
            break;
        }
        let wait = match &token {
            None => match acquire(inner, &node).await {
                Ok(Bid::Won(t)) => {
                    tracing::info!(wheel = %inner.name, token = %t, "took the leadership");
                    token = Some(t);
                    failures = 0;
                    Duration::ZERO
                }
                Ok(Bid::Lost(left)) => {
                    failures = 0;
                    // Bid again just after the holder's lease runs out, and meanwhile once a
                    // quarter lease (the holder may give it up): a takeover within the lease,
                    // without a call per tick.
                    left.map_or(bid, |left| (left + PAST_BOUNDARY).min(bid))
                }
                Err(e) => backoff(inner, &mut failures, &e),
            },
            Some(t) => match tick(inner, t).await {
                Ok(Round::CaughtUp(next)) => {
                    failures = 0;
                    next.min(renew)
                }
                Ok(Round::Refused) => {
                    tracing::warn!(wheel = %inner.name, token = %t, "lost the leadership: another node ticks");
                    token = None;
                    Duration::ZERO
                }
                Err(e) => backoff(inner, &mut failures, &e),
            },
        };
        if !wait.is_zero() {
            let follower = token.is_none();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.changed() => {}
                () = bid_now.notified(), if follower => {}
            }
        }
    }
    if let Some(t) = token {
        let mut inv = inner.script(&SCRIPTS.release);
        inv.arg(&t);
        if let Err(e) = inner.run::<i64>(&inv).await {
            tracing::warn!(wheel = %inner.name, error = %e, "could not give up the leadership; it lapses after the lease");
        }
    }
}

fn backoff(inner: &Inner, failures: &mut u32, e: &Error) -> Duration {
    *failures += 1;
    if *failures == 1 {
        tracing::warn!(wheel = %inner.name, error = %e, "ticking failed; retrying with a backoff");
    }
    let base = Duration::from_millis(50) * 2u32.saturating_pow((*failures - 1).min(6));
    base.min(Duration::from_secs(2)).min(inner.cfg.leader_lease() / 3)
}

async fn acquire(inner: &Inner, node: &str) -> Result<Bid, Error> {
    let mut inv = inner.script(&SCRIPTS.acquire);
    inv.arg(node).arg(inner.cfg.leader_lease_ms());
    let (token, left): (String, i64) = inner.call(&inv, inner.cfg.response_timeout).await?;
    Ok(if token.is_empty() { Bid::Lost(u64::try_from(left).ok().map(Duration::from_millis)) } else { Bid::Won(token) })
}

/// Calls the tick script until it has caught up; false if refused.
pub(crate) async fn tick_once(inner: &Inner, token: &str) -> Result<bool, Error> {
    Ok(matches!(tick(inner, token).await?, Round::CaughtUp(_)))
}

/// Calls the tick script until it has caught up (each call is bounded; "more" means call again).
async fn tick(inner: &Inner, token: &str) -> Result<Round, Error> {
    let mut inv = inner.script(&SCRIPTS.tick);
    inv.arg(token)
        .arg(inner.cfg.tick_ms)
        .arg(inner.cfg.slots)
        .arg(inner.cfg.leader_lease_ms())
        .arg(TICK_BUDGET)
        .arg(TICK_MAX_STEPS)
        .arg(inner.cfg.max_attempts)
        .arg(inner.cfg.done_ttl_ms);
    loop {
        let reply: Vec<String> = inner.call(&inv, inner.cfg.response_timeout).await?;
        match reply.first().map(String::as_str) {
            Some("more") => continue,
            Some("done") => {
                let now_ms: u64 = reply.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                let tick = inner.cfg.tick_ms;
                let next = tick - now_ms % tick;
                return Ok(Round::CaughtUp(Duration::from_millis(next) + PAST_BOUNDARY));
            }
            _ => return Ok(Round::Refused),
        }
    }
}
