//! The wake-up protocol: an idle worker blocks on `wake` (and `lead`) on a connection of its own
//! until a script that makes tasks ready pushes a token, or a leader gives up the lead; a claim
//! that takes all it asked for passes a token on inside `claim.lua`, unless one waits already
//! (so busy workers pass none); a worker stopped while it waits unblocks its `BLPOP` with
//! `CLIENT UNBLOCK` and puts back a token it took.

use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::stop::{pause, stopped};
use crate::durable::config::MIN_WAIT;
use crate::durable::store::client::WheelClient;
use crate::durable::store::deployment::Connection;
use crate::durable::store::scripts::{wake, WAKE_TOKENS};
use crate::durable::WheelKeys;

/// Lets one more idle worker of the partition whose keys are `keys` know that tasks are ready: a
/// stopping worker puts back a token its wait may have taken.
pub(super) async fn pass_on_wake(wheel: &WheelClient, keys: &WheelKeys) {
    // As `wake()` in the scripts: at most WAKE_TOKENS tokens wait.
    wake::push_token(wheel, &keys.wake(), WAKE_TOKENS - 1).await;
}

/// The connection an idle worker blocks on, and its client id on the server (to unblock it).
pub(super) struct Waker {
    conn: Connection,
    /// Read again after any error: the connection may have been made anew since.
    id: Option<i64>,
}

/// Makes the waker's connection and reads its client id, if not done yet: the claim loop does so
/// before its first claim, so that a worker is ready to be woken once `Worker::ready` says so (a
/// new connection takes a few round trips, which on a slow link would delay the first wake-up).
/// `None` when that failed (the connection is made anew next time); else the client id, itself
/// `None` on a server that refuses `CLIENT ID`.
pub(super) async fn prepare(wheel: &WheelClient, keys: &WheelKeys, waker: &mut Option<Waker>) -> Option<Option<i64>> {
    if waker.is_none() {
        *waker = Some(Waker { conn: wheel.conn.dedicated(&wheel.cfg).await?, id: None });
    }
    let w = waker.as_mut()?;
    if let Some(id) = w.id {
        return Some(Some(id));
    }
    // On the node that holds the partition's lists, which the `BLPOP` goes to.
    match wake::client_id(&mut w.conn, &keys.wake()).await {
        Ok(id) => Some(Some(*w.id.insert(id))),
        // A server that refuses `CLIENT ID` (renamed away, say): wait without it.
        Err(e) if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) => Some(None),
        Err(_) => {
            // A connection that failed is made anew (for Sentinel: to the primary named now).
            *waker = None;
            None
        }
    }
}

/// Waits for a wake-up token (pushed when tasks become ready) for up to the idle wait (a safety
/// net: see `Config::idle_wait`), or `until` when given and shorter (a limit's room), on a
/// connection of its own: a blocking `BLPOP` would hold up every other call on the shared one.
/// When the wait fails (the token may have been taken and its reply lost), it pauses a tick and
/// returns, so the worker claims.
pub(super) async fn wait_for_wake(
    wheel: &WheelClient,
    keys: &WheelKeys,
    waker: &mut Option<Waker>,
    stop: &mut watch::Receiver<bool>,
    bid_now: &Notify,
    until: Option<Duration>,
) {
    let wait = until.map_or(wheel.cfg.idle_wait(), |until| until.min(wheel.cfg.idle_wait()));
    let on_error = wheel.cfg.tick().max(MIN_WAIT);
    let Some(id) = prepare(wheel, keys, waker).await else {
        pause(stop, on_error).await;
        return;
    };
    let Some(w) = waker.as_mut() else { return };
    // Also on `lead`, where a leader giving up the lead leaves a token: this node then bids.
    let (wake, lead) = (keys.wake(), keys.lead());
    let cmd = wake::wait_for_token(&wake, &lead, wait.as_secs_f64());
    let r = {
        let mut blpop = std::pin::pin!(cmd.query_async::<Option<(String, redis::Value)>>(&mut w.conn));
        tokio::select! {
            r = &mut blpop => r,
            () = stopped(stop) => {
                // Dropping the wait would leave the `BLPOP` on the server, where it could still take
                // a token meant for the others: unblock it and see what it got (bounded by the
                // connection's response timeout), and put back a token it took.
                let Some(id) = id else {
                    // No id to unblock it with: a spare token makes up for one it may take.
                    pass_on_wake(wheel, keys).await;
                    return;
                };
                let r = loop {
                    wake::unblock(wheel, id, &wake).await;
                    if let Ok(r) = tokio::time::timeout(MIN_WAIT, &mut blpop).await {
                        break r;
                    }
                };
                match r {
                    Ok(Some((key, _))) => {
                        wake::push_token(wheel, &key, if key == lead { 0 } else { WAKE_TOKENS - 1 }).await
                    }
                    Ok(None) => {}
                    // Perhaps it took one, its reply lost: one spare token costs an empty claim.
                    Err(_) => pass_on_wake(wheel, keys).await,
                }
                return;
            }
        }
    };
    match r {
        Ok(Some((key, _))) if key == lead => bid_now.notify_one(),
        Ok(_) => {}
        Err(_) => {
            // Made anew next time: a connection to Sentinel's old primary never comes back, and
            // a reconnected one has another client id.
            *waker = None;
            pause(stop, on_error).await;
        }
    }
}
