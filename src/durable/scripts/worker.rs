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
#[cfg(test)]
pub(crate) async fn claim(
    wheel: &WheelClient,
    keys: &WheelKeys,
    n: usize,
    claim_id: &str,
    replay_only: bool,
    previous: &str,
) -> Result<Vec<Claimed>, Error> {
    let call = Claim { n, claim_id, replay_only, previous, node: "test-node", acks: &[] };
    Ok(claim_and_ack(wheel, keys, &call, Window::Response).await?.claimed)
}

/// One call of `claim.lua`: the deliveries to acknowledge first, then what to claim.
pub(crate) struct Claim<'a> {
    /// How many ready tasks to claim at most (0: none, only acknowledge).
    pub(crate) n: usize,
    /// The claim's id, the same for every retry of this call.
    pub(crate) claim_id: &'a str,
    /// Take nothing new, only get back what an earlier attempt under this id took.
    pub(crate) replay_only: bool,
    /// The id of this worker's last answered claim (its record can go), or "".
    pub(crate) previous: &'a str,
    /// The id of the worker's node, recorded with each claim.
    pub(crate) node: &'a str,
    /// The deliveries (key, claim token) whose handlers succeeded.
    pub(crate) acks: &'a [(&'a str, &'a str)],
}

/// What a `claim.lua` call answered.
#[derive(Debug, Default)]
pub(crate) struct ClaimReply {
    /// One per delivery of [`Claim::acks`]: acknowledged, or refused (its token is no longer
    /// the task's, or an earlier attempt of this call acknowledged it).
    pub(crate) acked: Vec<bool>,
    pub(crate) claimed: Vec<Claimed>,
}

/// Acknowledges `call.acks` and claims up to `call.n` ready tasks in one call.
pub(crate) async fn claim_and_ack(
    wheel: &WheelClient,
    keys: &WheelKeys,
    call: &Claim<'_>,
    window: Window,
) -> Result<ClaimReply, Error> {
    let mut inv = invoke(keys, &SCRIPTS.claim);
    let previous = if call.previous.is_empty() { call.claim_id } else { call.previous };
    inv.key(keys.claim(call.claim_id))
        .key(keys.claim(previous))
        .arg(call.n)
        .arg(wheel.cfg.lease_ms)
        .arg(if call.replay_only { "1" } else { "0" })
        .arg(wheel.cfg.request_ttl_ms)
        .arg(wheel.cfg.tick_ms)
        .arg(wheel.cfg.slots)
        .arg(call.node);
    for (key, token) in call.acks {
        inv.arg(*key).arg(*token);
    }
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, window).await?;
    let (Some(claimed), Some(acked)) = (flat.first(), flat.get(1)) else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "claim.lua answered fewer than two entries",
        ))
        .into());
    };
    let claimed_ms = number(claimed);
    if claimed_ms > 0 {
        wheel.clock.learn(claimed_ms);
    }
    let claimed_at = from_unix_ms(claimed_ms);
    Ok(ClaimReply {
        acked: digits(acked),
        claimed: flat[2..].chunks_exact(2).filter_map(|t| claimed_task(&t[0], &t[1], claimed_at)).collect(),
    })
}

/// A claimed task from its key and its record as `claim.lua` answers it: record.lua's format,
/// `<due ms>:<deliveries>:<claim token>:<period ms>:<runs left>:<missed runs>:<error length>:<error><payload>`.
/// `None` for a record that does not read (none does: the scripts write every one).
fn claimed_task(key: &[u8], record: &[u8], claimed_at: std::time::SystemTime) -> Option<Claimed> {
    let mut rest = record;
    let mut field = || -> Option<&[u8]> {
        let at = rest.iter().position(|&b| b == b':')?;
        let (f, tail) = (&rest[..at], &rest[at + 1..]);
        rest = tail;
        Some(f)
    };
    let (due, attempt, token) = (field()?, field()?, field()?);
    let (_every, _runs, _missed, error_len) = (field()?, field()?, field()?, field()?);
    let error_len = usize::try_from(number(error_len)).ok()?;
    let payload = rest.get(error_len..)?;
    Some(Claimed {
        task: Task {
            key: text(key),
            payload: payload.to_vec(),
            attempt: u32::try_from(number(attempt)).unwrap_or(u32::MAX),
            due: from_unix_ms(number(due)),
            claimed_at,
            cancel: tokio_util::sync::CancellationToken::new(),
        },
        token: text(token),
    })
}

/// An answer of one digit per item, as one string: true for each `1`.
fn digits(answer: &[u8]) -> Vec<bool> {
    answer.iter().map(|&d| d == b'1').collect()
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
    let reply: Vec<u8> = wheel.conn.call(&inv, window).await?;
    Ok(digits(&reply))
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
    /// Its cancel was requested (`cancel_running`): it ended as cancelled.
    Cancelled,
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
        3 => Failed::Cancelled,
        _ => Failed::Refused,
    })
}

/// What `renew.lua` answered for one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed (or given back).
    Renewed,
    /// Refused: its token is no longer the task's (the lease went to another delivery, or the
    /// task finished).
    Refused,
    /// Renewed, and its cancel was requested (`cancel_running`).
    CancelRequested,
}

/// Renews the leases of `deliveries` (key, claim token) in one call, to Redis's now +
/// `lease_ms`, or gives them back with a `lease_ms` of 0: what became of each.
pub(crate) async fn renew(
    wheel: &WheelClient,
    keys: &WheelKeys,
    deliveries: &[(&str, &str)],
    lease_ms: u64,
    window: Window,
) -> Result<Vec<Renewal>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.renew);
    inv.arg(lease_ms);
    for (key, token) in deliveries {
        inv.arg(*key).arg(*token);
    }
    let reply: Vec<u8> = wheel.conn.call(&inv, window).await?;
    Ok(reply
        .iter()
        .map(|d| match d {
            b'1' => Renewal::Renewed,
            b'2' => Renewal::CancelRequested,
            _ => Renewal::Refused,
        })
        .collect())
}
