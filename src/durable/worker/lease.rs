//! The leases of the deliveries a worker runs: [`Deliveries`] lists them (by claim token) from the
//! claim until their outcome is recorded; [`renew_leases`] renews them all every third of the
//! lease, in one script call per round; [`Deliveries::abandon`] drops the handlers still running at
//! the end of `shutdown_timeout` and gives their leases back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;

use crate::durable::client::WheelClient;
use crate::durable::scripts;
use crate::durable::shared_conn::Window;

/// The most deliveries one renewal call carries.
const RENEW_BATCH: usize = 128;

/// One delivery this worker holds.
struct Held {
    key: String,
    state: State,
    /// Drops its handler; `None` once it finished.
    abort: Option<AbortHandle>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Its handler runs, under a lease this worker renews.
    Running,
    /// Its handler has finished and its outcome is on the way to Redis: still renewed until
    /// the outcome is recorded, and no longer dropped by [`Deliveries::abandon`]. A refused
    /// renewal is then no news (the outcome may have landed first).
    Finished,
    /// A renewal was refused: its lease went to another worker. Its handler runs on (it may be
    /// mid-way through a side effect) unless the worker is abandoned, and its outcome is not
    /// recorded (Redis would refuse it).
    Lost,
}

/// The deliveries of one partition that this worker holds, by claim token (unique within a
/// partition), from the claim until their outcome is recorded.
#[derive(Default)]
pub(super) struct Deliveries {
    held: Mutex<HashMap<String, Held>>,
    /// Held through each renewal round and through [`abandon`](Self::abandon), so that a round
    /// that read a delivery before it was given back cannot renew it after.
    round: tokio::sync::Mutex<()>,
}

impl Deliveries {
    fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists the delivery of `key` under `token`, and runs `spawn` (which starts its handler)
    /// inside the list's lock, so that the handler cannot finish before it is listed.
    pub(super) fn start(&self, key: &str, token: &str, spawn: impl FnOnce() -> AbortHandle) {
        let mut held = self.held();
        let abort = spawn();
        held.insert(token.to_string(), Held { key: key.to_string(), state: State::Running, abort: Some(abort) });
    }

    /// Marks the handler of `token` finished. False when its outcome must not be recorded: its
    /// lease went to another worker, or it was abandoned (its lease given back).
    pub(super) fn finish(&self, token: &str) -> bool {
        let mut held = self.held();
        match held.get_mut(token) {
            Some(h) if h.state == State::Running => {
                h.state = State::Finished;
                h.abort = None;
                true
            }
            Some(_) => {
                held.remove(token);
                false
            }
            None => false,
        }
    }

    /// Forgets `token`: its outcome is recorded (or given up on), and its lease no longer renewed.
    pub(super) fn forget(&self, token: &str) {
        self.held().remove(token);
    }

    /// The deliveries whose leases are this worker's to renew, as (key, token).
    fn renewable(&self) -> Vec<(String, String)> {
        let held = self.held();
        held.iter().filter(|(_, h)| h.state != State::Lost).map(|(token, h)| (h.key.clone(), token.clone())).collect()
    }

    /// A renewal of `token` was refused: another worker has its task now (this one was cut off
    /// or paused past its lease), or its outcome landed just before. Whether its handler was
    /// still running.
    fn lost(&self, token: &str) -> bool {
        match self.held().get_mut(token) {
            Some(h) if h.state == State::Running => {
                h.state = State::Lost;
                true
            }
            _ => false,
        }
    }

    /// Drops every handler still running and gives its lease back, so that the next tick hands
    /// its task out again (rather than after the lease). A handler that finished meanwhile
    /// keeps its outcome on its way.
    pub(super) async fn abandon(&self, wheel: &WheelClient, part: usize) {
        let _round = self.round.lock().await;
        let (mut dropped, mut give_back) = (0, Vec::new());
        {
            let mut held = self.held();
            held.retain(|token, h| {
                if h.state == State::Finished {
                    return true;
                }
                if let Some(abort) = h.abort.take() {
                    abort.abort();
                }
                dropped += 1;
                if h.state == State::Running {
                    give_back.push((std::mem::take(&mut h.key), token.clone()));
                }
                false
            });
        }
        if dropped == 0 {
            return;
        }
        tracing::warn!(
            wheel = %wheel.name(), partition = part, handlers = dropped,
            "shutdown_timeout ran out: dropped the handlers still running; their tasks are handed out again"
        );
        let keys = &wheel.partitions[part].keys;
        for chunk in give_back.chunks(RENEW_BATCH) {
            let pairs: Vec<(&str, &str)> = chunk.iter().map(|(k, t)| (k.as_str(), t.as_str())).collect();
            if let Err(e) = scripts::renew(wheel, keys, &pairs, 0, Window::Response).await {
                tracing::warn!(
                    wheel = %wheel.name(), error = %e,
                    "could not give back the leases of dropped handlers; their tasks come back when the leases run out"
                );
            }
        }
    }
}

/// Renews the leases `running` holds in partition `part`, every third of the lease, until
/// dropped (the claim loop aborts it once the last outcome is recorded). A delivery whose
/// renewal is refused lost its lease to another worker: it is logged and no longer renewed, and
/// its outcome will be refused too.
pub(super) async fn renew_leases(wheel: Arc<WheelClient>, part: usize, deliveries: Arc<Deliveries>) {
    let every = wheel.cfg.renew_every();
    let keys = &wheel.partitions[part].keys;
    let mut rounds = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u32;
    loop {
        rounds.tick().await;
        let _round = deliveries.round.lock().await;
        let held = deliveries.renewable();
        for chunk in held.chunks(RENEW_BATCH) {
            let pairs: Vec<(&str, &str)> = chunk.iter().map(|(k, t)| (k.as_str(), t.as_str())).collect();
            match scripts::renew(&wheel, keys, &pairs, wheel.cfg.lease_ms, Window::Response).await {
                Ok(renewed) => {
                    if failures > 0 {
                        tracing::info!(wheel = %wheel.name(), partition = part, "renewing leases works again");
                        failures = 0;
                    }
                    for ((key, token), renewed) in chunk.iter().zip(renewed) {
                        if !renewed && deliveries.lost(token) {
                            tracing::warn!(
                                wheel = %wheel.name(), key = %key,
                                "a running handler's lease went to another worker (this one was cut off from Redis \
                                 or paused past its lease): another delivery of the task may run beside it, and \
                                 this one's outcome will not be recorded"
                            );
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            wheel = %wheel.name(), partition = part, error = %e,
                            "could not renew the leases of running handlers; trying again next round"
                        );
                    }
                }
            }
        }
    }
}
