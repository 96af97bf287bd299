//! The scripts that read the wheel, and the dead letters' upkeep: `stats.lua`, `get.lua`,
//! `dead_letters.lua`, `delete_dead.lua`.

use super::{invoke, number, text, SCRIPTS};
use crate::durable::conn::Window;
use crate::durable::time::from_unix_ms;
use crate::durable::wheel::Wheel;
use crate::durable::WheelKeys;
use crate::durable::{DeadTask, DurableStats, TaskInfo, TaskState};
use crate::Error;

/// The wheel's gauges and counters, read at one moment.
pub(crate) async fn stats(wheel: &Wheel, keys: &WheelKeys) -> Result<DurableStats, Error> {
    let mut inv = invoke(keys, &SCRIPTS.stats);
    inv.arg(wheel.cfg.tick_ms);
    let r: Vec<i64> = wheel.conn.call(&inv, Window::Default).await?;
    let at = |i: usize| r.get(i).copied().unwrap_or(0).max(0) as u64;
    let (waiting, ready, leased) = (at(0) as usize, at(1) as usize, at(2) as usize);
    Ok(DurableStats {
        pending: waiting + ready + leased,
        waiting,
        ready,
        in_flight: leased,
        dead: at(3) as usize,
        cursor_lag_ticks: at(4),
        scheduled: at(5),
        handed_out: at(6),
        acked: at(7),
        retried: at(8),
        dead_lettered: at(9),
        cancelled: at(10),
    })
}

/// Up to `limit` dead letters from rank `offset` on, oldest first.
pub(crate) async fn dead_letters(
    wheel: &Wheel,
    keys: &WheelKeys,
    limit: usize,
    offset: usize,
) -> Result<Vec<DeadTask>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.dead_letters);
    inv.arg(limit).arg(offset);
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(flat
        .chunks_exact(6)
        .map(|d| DeadTask {
            key: text(&d[0]),
            payload: d[1].clone(),
            attempts: u32::try_from(number(&d[2])).unwrap_or(u32::MAX),
            last_error: text(&d[3]),
            died: from_unix_ms(number(&d[4])),
            due: from_unix_ms(number(&d[5])),
        })
        .collect())
}

/// The task under `key`, pending or dead.
pub(crate) async fn get(wheel: &Wheel, keys: &WheelKeys, key: &str) -> Result<Option<TaskInfo>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.get);
    inv.arg(key);
    let r: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    let Ok([state, due, attempt, err, payload]) = <[Vec<u8>; 5]>::try_from(r) else { return Ok(None) };
    let state = match state.as_slice() {
        b"waiting" => TaskState::Waiting,
        b"ready" => TaskState::Ready,
        b"running" => TaskState::Running,
        b"dead" => TaskState::Dead,
        _ => return Ok(None),
    };
    Ok(Some(TaskInfo {
        key: key.to_string(),
        payload,
        due: from_unix_ms(number(&due)),
        attempt: u32::try_from(number(&attempt)).unwrap_or(u32::MAX),
        state,
        last_error: Some(text(&err)).filter(|e| !e.is_empty()),
    }))
}

/// Deletes the dead letter `key`; false if there was none.
pub(crate) async fn delete_dead(wheel: &Wheel, keys: &WheelKeys, key: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.delete_dead);
    inv.arg(key);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}
