//! The scripts a worker calls for the tasks it runs: `claim.lua`, `ack.lua`, `fail.lua`,
//! `renew.lua`.

use super::{declare_slots, invoke, number, text, SCRIPTS};
use crate::durable::client::WheelClient;
use crate::durable::shared_conn::Window;
use crate::durable::time::{from_unix_ms, When};
use crate::durable::Task;
use crate::durable::WheelKeys;
use crate::Error;

/// One task a claim took, and the claim token its outcome must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) task: Task,
    pub(crate) token: String,
}

/// Claims up to `n` ready tasks under `claim_id`, leased for the wheel's lease. With
/// `replay_only` it takes nothing new and only gets back what an earlier attempt under this id
/// took; `previous` is the id of this worker's last answered claim, whose record can go.
pub(crate) async fn claim(
    wheel: &WheelClient,
    keys: &WheelKeys,
    n: usize,
    claim_id: &str,
    replay_only: bool,
    previous: &str,
) -> Result<Vec<Claimed>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.claim);
    let previous = if previous.is_empty() { claim_id } else { previous };
    inv.key(keys.claim(claim_id))
        .key(keys.claim(previous))
        .arg(n)
        .arg(wheel.cfg.lease_ms)
        .arg(if replay_only { "1" } else { "0" })
        .arg(wheel.cfg.request_ttl_ms);
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Response).await?;
    let Some((claimed, tasks)) = flat.split_first() else { return Ok(Vec::new()) };
    wheel.clock.learn(number(claimed));
    let claimed_at = from_unix_ms(number(claimed));
    Ok(tasks
        .chunks_exact(5)
        .map(|t| Claimed {
            task: Task {
                key: text(&t[0]),
                payload: t[1].clone(),
                attempt: u32::try_from(number(&t[2])).unwrap_or(u32::MAX),
                due: from_unix_ms(number(&t[3])),
                claimed_at,
            },
            token: text(&t[4]),
        })
        .collect())
}

/// Acknowledges `deliveries` (key, claim token) in one call; true for each one acknowledged,
/// false for one refused (its token is no longer the task's).
pub(crate) async fn ack(
    wheel: &WheelClient,
    keys: &WheelKeys,
    deliveries: &[(&str, &str)],
    window: Window,
) -> Result<Vec<bool>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.ack);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots);
    for (key, token) in deliveries {
        inv.arg(*key).arg(*token);
    }
    let reply: Vec<i64> = wheel.conn.call(&inv, window).await?;
    Ok(reply.into_iter().map(|r| r == 1).collect())
}

/// What `fail.lua` did with a failed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// It will be delivered again after its backoff.
    Retried,
    /// That was its last attempt: it went to the dead letters.
    Dead,
    /// The claim token is no longer the task's: nothing changed.
    Refused,
}

/// Reports that the delivery of `key` under `token` failed with `why`.
pub(crate) async fn fail(
    wheel: &WheelClient,
    keys: &WheelKeys,
    key: &str,
    token: &str,
    why: &str,
    window: Window,
) -> Result<Failed, Error> {
    let cfg = &wheel.cfg;
    let mut inv = invoke(keys, &SCRIPTS.fail);
    // The retry's due time is Redis's now plus the backoff for its attempt, which this side does
    // not know: the slots of every backoff it may be (a miss waits in the far tier).
    let backoffs = (0..cfg.max_attempts.min(24))
        .map(|a| When::Delay(cfg.backoff_ms.saturating_mul(1 << a).min(cfg.max_backoff_ms())));
    let slots = declare_slots(&mut inv, keys, &wheel.slot_indices(backoffs));
    inv.arg(key)
        .arg(token)
        .arg(why)
        .arg(cfg.max_attempts)
        .arg(cfg.backoff_ms)
        .arg(cfg.max_backoff_ms())
        .arg(cfg.tick_ms)
        .arg(cfg.slots)
        .arg(slots);
    Ok(match wheel.conn.call::<i64>(&inv, window).await? {
        1 => Failed::Retried,
        2 => Failed::Dead,
        _ => Failed::Refused,
    })
}

/// Renews the leases of `deliveries` (key, claim token) in one call, to Redis's now +
/// `lease_ms`, or gives them back with a `lease_ms` of 0; true for each one renewed, false for
/// one refused (its token is no longer the task's: the lease went to another delivery, or the
/// task finished).
pub(crate) async fn renew(
    wheel: &WheelClient,
    keys: &WheelKeys,
    deliveries: &[(&str, &str)],
    lease_ms: u64,
    window: Window,
) -> Result<Vec<bool>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.renew);
    inv.arg(lease_ms);
    for (key, token) in deliveries {
        inv.arg(*key).arg(*token);
    }
    let reply: Vec<i64> = wheel.conn.call(&inv, window).await?;
    Ok(reply.into_iter().map(|r| r == 1).collect())
}
