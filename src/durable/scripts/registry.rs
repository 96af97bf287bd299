//! The registry of the workers that run on a wheel: the sorted set `workers`, each worker's node
//! id scored by the last time (ms, Redis's clock) it said it runs. A worker says so every
//! [`HEARTBEAT`], drops the entries not heard from for [`FORGET_AFTER`] every tenth time, and
//! takes its own out when it stops; a reader lists those heard from within [`HEARD_WITHIN`].
//! For `DurableScheduler::workers` and the dashboard: nothing else depends on it, so a failed
//! call is only a gap that the next heartbeat mends.

use std::time::Duration;

use crate::durable::client::WheelClient;
use crate::Error;

/// How often a worker says it runs.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);
/// A worker not heard from for this long is taken for gone.
pub(crate) const HEARD_WITHIN: Duration = Duration::from_secs(6);
/// An entry not heard from for this long is dropped.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Says that worker `node` runs, at `now_ms`; every tenth `beat` also drops the entries of
/// workers not heard from for [`FORGET_AFTER`].
pub(crate) async fn beat(wheel: &WheelClient, node: &str, now_ms: u64, beat: u64) {
    let key = wheel.base.workers();
    let mut add = redis::cmd("ZADD");
    add.arg(&key).arg(now_ms).arg(node);
    let _ = wheel.conn.command::<i64>(&add).await;
    if beat.is_multiple_of(10) {
        let mut trim = redis::cmd("ZREMRANGEBYSCORE");
        trim.arg(&key).arg("-inf").arg(now_ms.saturating_sub(FORGET_AFTER.as_millis() as u64));
        let _ = wheel.conn.command::<i64>(&trim).await;
    }
}

/// Takes worker `node` out of the registry.
pub(crate) async fn leave(wheel: &WheelClient, node: &str) {
    let _ = wheel.conn.command::<i64>(redis::cmd("ZREM").arg(wheel.base.workers()).arg(node)).await;
}

/// The workers heard from within [`HEARD_WITHIN`] of `now_ms`.
pub(crate) async fn heard(wheel: &WheelClient, now_ms: u64) -> Result<Vec<String>, Error> {
    let since = now_ms.saturating_sub(HEARD_WITHIN.as_millis() as u64);
    let mut range = redis::cmd("ZRANGEBYSCORE");
    range.arg(wheel.base.workers()).arg(since).arg("+inf");
    wheel.conn.command(&range).await
}
