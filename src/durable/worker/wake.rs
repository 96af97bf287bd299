//! The wake-up protocol: an idle worker blocks on `wake` (and `lead`) on a connection of its own
//! until a script that makes tasks ready pushes a token, or a leader gives up the lead; a worker
//! that claims a full batch passes a token on; a worker stopped while it waits unblocks its
//! `BLPOP` with `CLIENT UNBLOCK` and puts back a token it took.

use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::{watch, Notify};

use super::stop::{pause, stopped};
use crate::durable::scripts::WAKE_TOKENS;
use crate::durable::wheel::Wheel;

/// The shortest wait for a wake-up (with a very short tick and lease, waiting less would be
/// polling).
pub(super) const MIN_WAIT: Duration = Duration::from_millis(10);

pub(super) async fn pass_on_wake(wheel: &Wheel) {
    // As `wake()` in the scripts: at most WAKE_TOKENS tokens wait.
    push_token(wheel, &wheel.keys.wake(), WAKE_TOKENS - 1).await;
}

/// Pushes a token on the list `key`, keeping at most `keep + 1`.
async fn push_token(wheel: &Wheel, key: &str, keep: usize) {
    let mut conn = wheel.conn.shared();
    let _: Result<(), _> =
        redis::pipe().lpush(key, 1).ignore().ltrim(key, 0, keep as isize).ignore().query_async(&mut conn).await;
}

/// The connection an idle worker blocks on, and its client id on the server (to unblock it).
pub(super) struct Waker {
    conn: ConnectionManager,
    /// Read again after any error: the connection may have been made anew since.
    id: Option<i64>,
}

/// How long an idle worker waits for a wake-up before it claims anyway. Every script that makes
/// tasks ready (the tick moving them on or requeueing expired leases, a failure's retry due at
/// once, `schedule` or `reschedule` of a task already due, `requeue_dead`) pushes one, and a
/// worker that claims a full batch passes it on, so this is only a safety net (for a wake-up
/// lost with a connection, say): a third of the leadership's lease (at most 10 s / 3), or a tick
/// if that is longer. An idle worker costs one wait and one claim per this, not per tick.
fn idle_wait(wheel: &Wheel) -> Duration {
    (wheel.cfg.leader_lease() / 3).max(wheel.cfg.tick()).max(MIN_WAIT)
}

/// Waits for a wake-up token (pushed when tasks become ready) for up to [`idle_wait`], on a
/// connection of its own: a blocking `BLPOP` would hold up every other call on the shared one.
/// When the wait fails (the token may have been taken and its reply lost), it pauses a tick and
/// returns, so the worker claims.
pub(super) async fn wait_for_wake(
    wheel: &Wheel,
    waker: &mut Option<Waker>,
    stop: &mut watch::Receiver<bool>,
    bid_now: &Notify,
) {
    let wait = idle_wait(wheel);
    let on_error = wheel.cfg.tick().max(MIN_WAIT);
    if waker.is_none() {
        match wheel.conn.dedicated(wait + wheel.cfg.response_timeout).await {
            Some(conn) => *waker = Some(Waker { conn, id: None }),
            None => {
                pause(stop, on_error).await;
                return;
            }
        }
    }
    let Some(w) = waker.as_mut() else { return };
    let id = match w.id {
        Some(id) => Some(id),
        None => match redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut w.conn).await {
            Ok(id) => Some(*w.id.insert(id)),
            // A server that refuses `CLIENT ID` (renamed away, say): wait without it.
            Err(e) if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) => None,
            Err(_) => {
                pause(stop, on_error).await;
                return;
            }
        },
    };
    // Also on `lead`, where a leader giving up the lead leaves a token: this node then bids.
    let (wake, lead) = (wheel.keys.wake(), wheel.keys.lead());
    let mut cmd = redis::cmd("BLPOP");
    cmd.arg(&wake).arg(&lead).arg(wait.as_secs_f64());
    let mut blpop = std::pin::pin!(cmd.query_async::<Option<(String, redis::Value)>>(&mut w.conn));
    let r = tokio::select! {
        r = &mut blpop => r,
        () = stopped(stop) => {
            // Dropping the wait would leave the `BLPOP` on the server, where it could still take
            // a token meant for the others: unblock it and see what it got (bounded by the
            // connection's response timeout), and put back a token it took.
            let Some(id) = id else {
                // No id to unblock it with: a spare token makes up for one it may take.
                pass_on_wake(wheel).await;
                return;
            };
            let r = loop {
                let mut unblock = redis::cmd("CLIENT");
                unblock.arg("UNBLOCK").arg(id);
                let mut conn = wheel.conn.shared();
                let _: Result<i64, _> = unblock.query_async(&mut conn).await;
                if let Ok(r) = tokio::time::timeout(MIN_WAIT, &mut blpop).await {
                    break r;
                }
            };
            match r {
                Ok(Some((key, _))) => push_token(wheel, &key, if key == lead { 0 } else { WAKE_TOKENS - 1 }).await,
                Ok(None) => {}
                // Perhaps it took one, its reply lost: one spare token costs an empty claim.
                Err(_) => pass_on_wake(wheel).await,
            }
            return;
        }
    };
    match r {
        Ok(Some((key, _))) if key == lead => bid_now.notify_one(),
        Ok(_) => {}
        Err(_) => {
            w.id = None;
            pause(stop, on_error).await;
        }
    }
}
