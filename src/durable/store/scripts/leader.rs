//! The scripts of the wheel's leadership and cursor: `open.lua`, `acquire.lua`, `release.lua`,
//! `tick.lua`.

use std::time::Duration;

use super::{declare_slots, invoke, SCRIPTS};
use crate::durable::store::client::WheelClient;
use crate::durable::store::shared_conn::Window;
use crate::durable::WheelKeys;
use crate::Error;

/// What `open.lua` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Opened {
    /// Opened; Redis's clock read then.
    Yes { now_ms: u64 },
    /// The wheel is recorded with another tick (ms), slot count or partition count.
    Mismatch { tick_ms: String, slots: String, partitions: String },
    /// The wheel is recorded in another layout than this version's (empty: none recorded).
    OtherLayout { layout: String },
}

/// Opens the wheel (or one partition of it) under `keys`: records its tick, slots and partition
/// count on first use, checks them afterwards; with `start_cursor`, starts its cursor
/// at the current tick if it has none (a partition; not the record of a partitioned wheel).
pub(crate) async fn open(
    wheel: &WheelClient,
    keys: &WheelKeys,
    partitions: usize,
    start_cursor: bool,
) -> Result<Opened, Error> {
    let mut inv = invoke(keys, &SCRIPTS.open);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots).arg(partitions).arg(if start_cursor { "1" } else { "0" });
    let reply: Vec<String> = wheel.conn.call(&inv, Window::Default).await?;
    let at = |i: usize| reply.get(i).cloned().unwrap_or_default();
    Ok(match reply.first().map(String::as_str) {
        Some("1") => Opened::Yes { now_ms: at(1).parse().unwrap_or(0) },
        Some("layout") => Opened::OtherLayout { layout: at(1) },
        _ => Opened::Mismatch { tick_ms: at(1), slots: at(2), partitions: at(3) },
    })
}

/// What one bid for the lead got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bid {
    /// The lead, under this fencing token.
    Won(String),
    /// Another node leads; its lease has this long left (`None`: it does not expire).
    Lost(Option<Duration>),
}

/// Bids for the lead as `node`, for a lease of `lease_ms`.
pub(crate) async fn acquire(wheel: &WheelClient, keys: &WheelKeys, node: &str, lease_ms: u64) -> Result<Bid, Error> {
    let mut inv = invoke(keys, &SCRIPTS.acquire);
    inv.arg(node).arg(lease_ms);
    let (token, left): (String, i64) = wheel.conn.call(&inv, Window::Response).await?;
    Ok(if token.is_empty() { Bid::Lost(u64::try_from(left).ok().map(Duration::from_millis)) } else { Bid::Won(token) })
}

/// Gives up the lead held under `token`; false if it was not the leader's.
pub(crate) async fn release(wheel: &WheelClient, keys: &WheelKeys, token: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.release);
    inv.arg(token);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}

/// What one call of `tick.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TickReply {
    /// The token is not the leader's.
    Refused,
    /// Did its budget, or reached the end of the slots it was given: call again at once, with
    /// the slots after this cursor (Redis's clock read at `now_ms`).
    More { cursor: u64, now_ms: u64 },
    /// The cursor is at Redis's tick, read at `now_ms`. `next_ms`, asked for on a store in this
    /// process alone only: when a tick next may have work (`None`: nothing waits).
    Done { cursor: u64, now_ms: u64, made_ready: u64, next_ms: Option<u64> },
}

/// One bounded call of the tick script under `token`: at most `budget` tasks, through the slots of
/// `ticks` (those after the cursor, from the last reply) at most, with the cursor `ahead` ticks
/// ahead of the clock (at least 1; more on a slow link, so that the tasks of the ticks before the
/// next call arrives are in `ready` when they fall due).
pub(crate) async fn tick(
    wheel: &WheelClient,
    keys: &WheelKeys,
    token: &str,
    budget: usize,
    ticks: std::ops::RangeInclusive<u64>,
    ahead: u64,
) -> Result<TickReply, Error> {
    let mut inv = invoke(keys, &SCRIPTS.tick);
    let indices: Vec<u64> = ticks.take(wheel.cfg.slots as usize).map(|t| t % wheel.cfg.slots).collect();
    let slots = declare_slots(&mut inv, keys, &indices);
    inv.arg(token)
        .arg(wheel.cfg.tick_ms)
        .arg(wheel.cfg.slots)
        .arg(wheel.cfg.leader_lease_ms())
        .arg(budget)
        .arg(wheel.cfg.max_attempts)
        .arg(wheel.cfg.dead_letter_limit)
        .arg(wheel.cfg.dead_letter_max_age_ms)
        .arg(slots)
        .arg(wheel.cfg.history_limit)
        .arg(wheel.cfg.history_age_ms)
        .arg(if wheel.cfg.local { "1" } else { "0" })
        .arg(ahead);
    let reply: Vec<String> = wheel.conn.call(&inv, Window::Response).await?;
    let number = |i: usize| reply.get(i).and_then(|n| n.parse().ok()).unwrap_or(0);
    if let Some(now_ms) = reply.get(2).and_then(|n| n.parse().ok()) {
        wheel.clock.learn(now_ms);
    }
    Ok(match reply.first().map(String::as_str) {
        Some("more") => TickReply::More { cursor: number(1), now_ms: number(2) },
        Some("done") => TickReply::Done {
            cursor: number(1),
            now_ms: number(2),
            made_ready: number(3),
            next_ms: reply.get(4).and_then(|n| n.parse().ok()),
        },
        _ => TickReply::Refused,
    })
}
