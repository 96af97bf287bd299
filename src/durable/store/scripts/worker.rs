//! The scripts a worker calls for the tasks it runs: `claim.lua`, `ack.lua`, `fail.lua`,
//! `renew.lua`.

use super::{declare_slots, invoke, number, text, SCRIPTS};
use crate::durable::series::Spec;
use crate::durable::store::client::WheelClient;
use crate::durable::store::formats::{HistoryRun, Record, Retry};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::{from_unix_ms, When};
use crate::durable::{Task, TaskOptions, WheelKeys};
use crate::origin::Origin;
use crate::Error;

/// One task a claim took, and the claim token its outcome must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) task: Task,
    pub(crate) token: String,
    /// The spec of a series whose next run the node works out (see `series.rs`), read from the
    /// record; `None` for any other task.
    pub(crate) spec: Option<Spec>,
    /// Whether the task is one run of a series (a period or a spec).
    pub(crate) recurring: bool,
    /// The trace context of the span that scheduled the task, read from the record (of no size
    /// without the `opentelemetry` feature, which then reads past it).
    pub(crate) origin: Origin,
    /// The task's own retry settings, read from the record (empty for the node's).
    pub(crate) options: TaskOptions,
    /// When a rate limit lets its handler start (ms on the store's clock), if later than the
    /// claim: the worker holds it until then.
    pub(crate) start_at_ms: Option<u64>,
}

/// One delivery to acknowledge (or whose failure to record): its key, its claim token, the next
/// due time of its series (its spec's, from the worker's
/// [`Specs::next_due`](crate::durable::series::Specs::next_due); `""` for a task without a spec),
/// and its handler's run for the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) next_due: String,
    /// Its run as the history keeps it, packed by [`Ack::run`]; empty to let the script read
    /// the due time and deliveries from the record, with no handler times.
    pub(crate) run: String,
    /// The task's own retry settings (empty for the node's): should the delivery fail, the slots
    /// its retry may go to are declared for them.
    pub(crate) options: TaskOptions,
}

impl Ack {
    /// The acknowledgement of a task without a spec, with the node's retry settings and no run
    /// for the history.
    #[cfg(test)]
    pub(crate) fn plain(key: &str, token: &str) -> Self {
        Ack {
            key: key.to_string(),
            token: token.to_string(),
            next_due: String::new(),
            run: String::new(),
            options: TaskOptions::new(),
        }
    }

    /// The run of the delivery of `key` due at `due_ms`, its `attempt`-th, as the scripts put it
    /// in the history (`lua/includes/history.lua`): `<due ms>:<attempts>:<started ms>:<handler
    /// us>:<key length>:`, with `handler` (when it started, on Redis's clock as the node
    /// estimates it, and how long it ran, in µs) empty when it never started. Packed here so
    /// that the scripts only join strings.
    pub(crate) fn run(key: &str, due_ms: u64, attempt: u32, handler: Option<(u64, u64)>) -> String {
        HistoryRun::packed(key, due_ms, attempt, handler)
    }

    /// Its [`ACK_FIELDS`](super::ACK_FIELDS) arguments, as `ack.lua` and `claim.lua` take them.
    fn args(&self, inv: &mut redis::ScriptInvocation<'_>) {
        inv.arg(&self.key).arg(&self.token).arg(&self.next_due).arg(&self.run);
    }
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
    /// The deliveries whose handlers succeeded.
    pub(crate) acks: &'a [Ack],
}

/// What a `claim.lua` call answered.
#[derive(Debug, Default)]
pub(crate) struct ClaimReply {
    /// One per delivery of [`Claim::acks`]: acknowledged, or refused (its token is no longer
    /// the task's, or an earlier attempt of this call acknowledged it).
    pub(crate) acked: Vec<bool>,
    pub(crate) claimed: Vec<Claimed>,
    /// When to claim again, counted from the claim's reading of the store's clock, for a claim
    /// that took less than it asked for: the next task in `ready` falls due then, or a rate
    /// limit has room for a task it holds back, whichever is first. The worker claims then
    /// (counting from when the reply reached it) rather than waiting for a wake-up.
    pub(crate) claim_in: Option<std::time::Duration>,
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
        .arg(call.node)
        .arg(wheel.cfg.history_limit)
        .arg(wheel.cfg.history_age_ms);
    for ack in call.acks {
        ack.args(&mut inv);
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
    let claim_in =
        flat.get(2).filter(|hint| !hint.is_empty()).map(|hint| std::time::Duration::from_millis(number(hint)));
    let mut starts = flat.get(3).filter(|s| !s.is_empty()).map(|s| s.split(|&b| b == b',').map(number));
    let tasks = flat.get(4..).unwrap_or_default().chunks_exact(2);
    let claimed = tasks
        .filter_map(|t| {
            let start = starts.as_mut().and_then(Iterator::next).filter(|&ms| ms > 0);
            Some(Claimed { start_at_ms: start, ..claimed_task(&t[0], &t[1], claimed_at)? })
        })
        .collect();
    Ok(ClaimReply { acked: digits(acked), claimed, claim_in })
}

/// A claimed task from its key and its record as `claim.lua` answers it ([`Record`]); `None`
/// for a record that does not read (none does: the scripts write every one).
fn claimed_task(key: &[u8], record: &[u8], claimed_at: std::time::SystemTime) -> Option<Claimed> {
    let r = Record::read(record)?;
    Some(Claimed {
        task: Task {
            key: text(key),
            payload: r.payload.to_vec(),
            attempt: r.deliveries,
            due: from_unix_ms(r.due_ms),
            claimed_at,
            cancel: tokio_util::sync::CancellationToken::new(),
            snooze: Default::default(),
        },
        token: text(r.token),
        recurring: r.spec.is_some() || r.every_ms != 0,
        spec: r.spec.map(|spec| Spec { text: text(spec), missed: r.missed }),
        origin: r.trace.map_or_else(Origin::none, |trace| Origin::from_text(&text(trace))),
        options: r.retry.map_or_else(TaskOptions::new, Retry::options_of),
        start_at_ms: None,
    })
}

/// An answer of one digit per item, as one string: true for each `1`.
fn digits(answer: &[u8]) -> Vec<bool> {
    answer.iter().map(|&d| d == b'1').collect()
}

/// Acknowledges `deliveries` in one call; true for each one acknowledged, false for one
/// refused (its token is no longer the task's).
pub(crate) async fn ack(
    wheel: &WheelClient,
    keys: &WheelKeys,
    deliveries: &[Ack],
    window: Window,
) -> Result<Vec<bool>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.ack);
    inv.arg(wheel.cfg.tick_ms).arg(wheel.cfg.slots).arg(wheel.cfg.history_limit).arg(wheel.cfg.history_age_ms);
    for ack in deliveries {
        ack.args(&mut inv);
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
    /// Snoozed: due again after its delay, its attempt not counted.
    Snoozed,
}

/// Reports that the delivery of `key` under `token` failed with `why`; `next_due` is its
/// series' next run should this be its last attempt (as for [`ack`]).
pub(crate) async fn fail(
    wheel: &WheelClient,
    keys: &WheelKeys,
    delivery: &Ack,
    why: &str,
    window: Window,
) -> Result<Failed, Error> {
    ended(wheel, keys, delivery, why, None, window).await
}

/// Reports that the delivery of `key` under `token` ended as snoozed (`Task::snooze`): due again
/// `snooze_ms` from the store's now, its attempt not counted.
pub(crate) async fn snooze(
    wheel: &WheelClient,
    keys: &WheelKeys,
    delivery: &Ack,
    snooze_ms: u64,
    window: Window,
) -> Result<Failed, Error> {
    ended(wheel, keys, delivery, "", Some(snooze_ms), window).await
}

/// `fail.lua`'s call for a failure (`snooze_ms` `None`) or a snooze.
async fn ended(
    wheel: &WheelClient,
    keys: &WheelKeys,
    delivery: &Ack,
    why: &str,
    snooze_ms: Option<u64>,
    window: Window,
) -> Result<Failed, Error> {
    let (key, token) = (delivery.key.as_str(), delivery.token.as_str());
    let cfg = &wheel.cfg;
    let mut inv = invoke(keys, &SCRIPTS.fail);
    // The retry's due time is Redis's now plus the backoff for its attempt, which this side does
    // not know: the slots of every backoff it may be (a miss waits in the far tier), by the
    // task's own retry settings where it has them, else the node's; a snooze's, its delay.
    let slots = match snooze_ms {
        Some(ms) => declare_slots(&mut inv, keys, &wheel.slot_indices([When::Delay(ms)])),
        None => {
            let max_attempts = delivery.options.own_max_attempts().unwrap_or(cfg.max_attempts);
            let backoff_ms = delivery.options.own_backoff_ms().unwrap_or(cfg.backoff_ms);
            let backoffs = (0..max_attempts.min(24))
                .map(|a| When::Delay(backoff_ms.saturating_mul(1 << a).min(cfg.max_backoff_ms())));
            declare_slots(&mut inv, keys, &wheel.slot_indices(backoffs))
        }
    };
    inv.arg(key)
        .arg(token)
        .arg(why)
        .arg(cfg.max_attempts)
        .arg(cfg.backoff_ms)
        .arg(cfg.max_backoff_ms())
        .arg(cfg.tick_ms)
        .arg(cfg.slots)
        .arg(slots)
        .arg(&delivery.next_due)
        .arg(cfg.history_limit)
        .arg(cfg.history_age_ms)
        .arg(&delivery.run)
        .arg(snooze_ms.map_or_else(String::new, |ms| ms.to_string()));
    Ok(match wheel.conn.call::<i64>(&inv, window).await? {
        1 => Failed::Retried,
        2 => Failed::Dead,
        3 => Failed::Cancelled,
        4 => Failed::Snoozed,
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 rojo=00f067aa0ba902b7";

    /// A record with both optional fields reads whole in every build: the trace is read past
    /// (kept only with the `opentelemetry` feature), and the error and payload after it stay
    /// intact; one without them reads as before.
    #[test]
    fn a_record_reads_with_and_without_its_optional_fields() {
        let at = std::time::SystemTime::UNIX_EPOCH;
        let spec = "0 every 100";
        let record = format!("1000:2:77:0:-1:2:c{}:{spec}t{}:{TRACE}4:boompay:load", spec.len(), TRACE.len());
        let c = claimed_task(b"k", record.as_bytes(), at).expect("the record reads");
        assert_eq!((c.task.payload.as_slice(), c.task.attempt, c.token.as_str()), (&b"pay:load"[..], 2, "77"));
        assert_eq!(c.spec.map(|s| s.text), Some(spec.to_string()));
        assert!(c.recurring);
        #[cfg(feature = "opentelemetry")]
        assert_eq!(c.origin.to_text(), TRACE);
        #[cfg(not(feature = "opentelemetry"))]
        assert_eq!(c.origin, Origin::none());

        let plain = claimed_task(b"k", b"1000:1:5:0:0:0:0:x", at).expect("the record reads");
        assert_eq!((plain.task.payload.as_slice(), plain.recurring, plain.origin), (&b"x"[..], false, Origin::none()));
        let fixed_rate = claimed_task(b"k", format!("1000:1:5:250:-1:0:t{}:{TRACE}0:x", TRACE.len()).as_bytes(), at);
        assert!(fixed_rate.expect("the record reads").recurring);
        assert_eq!(plain.options, TaskOptions::new(), "the node's retry settings");
    }

    /// The task's own retry settings, the third optional field, read after the other two or
    /// alone; the error and payload after them stay intact.
    #[test]
    fn a_record_reads_with_its_own_retry_settings() {
        let at = std::time::SystemTime::UNIX_EPOCH;
        let spec = "0 every 100";
        let record = format!("1000:2:77:0:-1:2:c{}:{spec}t{}:{TRACE}r5:3/2504:boompay:load", spec.len(), TRACE.len());
        let c = claimed_task(b"k", record.as_bytes(), at).expect("the record reads");
        assert_eq!((c.task.payload.as_slice(), c.task.attempt, c.token.as_str()), (&b"pay:load"[..], 2, "77"));
        assert_eq!(c.options, TaskOptions::new().max_attempts(3).backoff(std::time::Duration::from_millis(250)));
        let alone = claimed_task(b"k", b"1000:1:5:0:0:0:r2:1/3:errx", at).expect("the record reads");
        assert_eq!((alone.task.payload.as_slice(), alone.options), (&b"x"[..], TaskOptions::new().max_attempts(1)));
    }
}
