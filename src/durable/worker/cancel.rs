//! Following the stream of cancel requests (`cancel_running`): each worker reads every request of
//! its partitions with a blocking `XREAD` on a connection of its own, and cancels the token of a
//! delivery it holds, so that a handler learns of it within a round trip. The renewal of the
//! leases (`lease.rs`) learns of a request too, every third of the lease: a request missed here
//! (the connection was down) is still seen.

use std::sync::Arc;

use super::lease::Deliveries;
use crate::durable::config::MIN_WAIT;
use crate::durable::store::client::WheelClient;
use crate::durable::store::deployment::Connection;
use crate::durable::store::scripts::control;
use crate::durable::time::ceil_ms;

/// Cancels the tokens of partition `part`'s deliveries that `deliveries` holds as their cancel
/// requests come, until dropped (the claim loop aborts it at its end).
pub(super) async fn follow_cancels(wheel: Arc<WheelClient>, part: usize, deliveries: Arc<Deliveries>) {
    let keys = &wheel.partitions[part].keys;
    let on_error = wheel.cfg.tick().max(MIN_WAIT);
    let block_ms = ceil_ms(wheel.cfg.idle_wait()).max(1);
    let mut conn: Option<Connection> = None;
    // The id of the last request read; `None` until the stream's end is known.
    let mut after: Option<String> = None;
    loop {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match wheel.conn.dedicated(&wheel.cfg).await {
                Some(c) => conn.insert(c),
                None => {
                    tokio::time::sleep(on_error).await;
                    continue;
                }
            },
        };
        let from = match &after {
            Some(id) => id.clone(),
            None => match control::last_cancel_id(c, keys).await {
                Ok(id) => after.insert(id).clone(),
                Err(_) => {
                    conn = None;
                    tokio::time::sleep(on_error).await;
                    continue;
                }
            },
        };
        match control::read_cancels(c, keys, &from, block_ms).await {
            Ok(Some((last, requests))) => {
                after = Some(last);
                for (key, token) in requests {
                    if deliveries.cancel_requested(&token) {
                        tracing::debug!(wheel = %wheel.name(), key = %key, "cancel requested: the handler's token is cancelled");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(wheel = %wheel.name(), partition = part, error = %e, "reading the cancel requests failed; trying again");
                conn = None;
                tokio::time::sleep(on_error).await;
            }
        }
    }
}
