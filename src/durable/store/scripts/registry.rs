//! The registry of the workers that run on a wheel: the sorted set `workers`, each worker's node
//! id scored by the last time (ms, Redis's clock) it said it runs. A worker says so every
//! heartbeat (`Config::heartbeat`), drops the entries not heard from for 30 heartbeats every
//! tenth time, and takes its own out when it stops; a reader lists those heard from within
//! three heartbeats.
//! For `DurableScheduler::workers` and the dashboard: nothing else depends on it, so a failed
//! call is only a gap that the next heartbeat mends.

use std::time::Duration;

use crate::durable::store::client::WheelClient;
use crate::Error;

/// A worker not heard from for this many heartbeats is taken for gone.
const HEARD_WITHIN: u32 = 3;
/// An entry not heard from for this many heartbeats is dropped.
const FORGET_AFTER: u32 = 30;

/// Says that worker `node` runs, at `now_ms`; every tenth `beat` also drops the entries of
/// workers not heard from for [`FORGET_AFTER`] heartbeats.
pub(crate) async fn beat(wheel: &WheelClient, node: &str, now_ms: u64, beat: u64) {
    let key = wheel.base.workers();
    let mut add = redis::cmd("ZADD");
    add.arg(&key).arg(now_ms).arg(node);
    let _ = wheel.conn.command::<i64>(&add).await;
    if beat.is_multiple_of(10) {
        let mut trim = redis::cmd("ZREMRANGEBYSCORE");
        trim.arg(&key).arg("-inf").arg(now_ms.saturating_sub(ms(wheel.cfg.heartbeat() * FORGET_AFTER)));
        let _ = wheel.conn.command::<i64>(&trim).await;
    }
}

/// Takes worker `node` out of the registry.
pub(crate) async fn leave(wheel: &WheelClient, node: &str) {
    let _ = wheel.conn.command::<i64>(redis::cmd("ZREM").arg(wheel.base.workers()).arg(node)).await;
}

/// The workers heard from within [`HEARD_WITHIN`] heartbeats of `now_ms`.
pub(crate) async fn heard(wheel: &WheelClient, now_ms: u64) -> Result<Vec<String>, Error> {
    let since = now_ms.saturating_sub(ms(wheel.cfg.heartbeat() * HEARD_WITHIN));
    let mut range = redis::cmd("ZRANGEBYSCORE");
    range.arg(wheel.base.workers()).arg(since).arg("+inf");
    wheel.conn.command(&range).await
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
