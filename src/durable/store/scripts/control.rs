//! The calls of a wheel's controls: `cancel_running.lua`; the plain commands of the pause (the
//! `paused` field of each partition's `meta` hash, which `claim.lua` reads); and the reading of
//! the stream of cancel requests that every worker follows.

use super::{invoke, text, SCRIPTS};
use crate::durable::store::client::WheelClient;
use crate::durable::store::deployment::Connection;
use crate::durable::store::shared_conn::Window;
use crate::durable::WheelKeys;
use crate::Error;

/// The field of `meta` that, while present, stops `claim.lua` from claiming.
const PAUSED: &str = "paused";

/// Sets (`HSET meta paused 1`) or clears (`HDEL meta paused`) the partition's pause.
pub(crate) async fn set_paused(wheel: &WheelClient, keys: &WheelKeys, paused: bool) -> Result<(), Error> {
    let mut cmd = if paused { redis::cmd("HSET") } else { redis::cmd("HDEL") };
    cmd.arg(keys.meta()).arg(PAUSED);
    if paused {
        cmd.arg(1);
    }
    let _: i64 = wheel.conn.command(&cmd).await?;
    Ok(())
}

/// Whether the partition is paused (`HEXISTS meta paused`).
pub(crate) async fn is_paused(wheel: &WheelClient, keys: &WheelKeys) -> Result<bool, Error> {
    wheel.conn.command(redis::cmd("HEXISTS").arg(keys.meta()).arg(PAUSED)).await
}

/// Requests the cancel of the running task `key` (`cancel_running.lua`): true if it was running
/// (claimed, under a live lease), false if not (nothing changed).
pub(crate) async fn cancel_running(wheel: &WheelClient, keys: &WheelKeys, key: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.cancel_running);
    inv.arg(key);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}

/// The id of the last entry of the stream of cancel requests (`XREVRANGE cancels + - COUNT 1`),
/// or `0-0` while it has none: where a worker starts to follow it.
pub(crate) async fn last_cancel_id(conn: &mut Connection, keys: &WheelKeys) -> redis::RedisResult<String> {
    let mut cmd = redis::cmd("XREVRANGE");
    cmd.arg(keys.cancels()).arg("+").arg("-").arg("COUNT").arg(1);
    let last: Vec<(String, redis::Value)> = cmd.query_async(conn).await?;
    Ok(last.into_iter().next().map_or_else(|| "0-0".to_string(), |(id, _)| id))
}

/// Waits up to `block_ms` for cancel requests after the entry `after` (`XREAD BLOCK`), on a
/// connection of the worker's own: the id of the last entry read and each request's (key, claim
/// token); `None` when the wait ran out.
pub(crate) async fn read_cancels(
    conn: &mut Connection,
    keys: &WheelKeys,
    after: &str,
    block_ms: u64,
) -> redis::RedisResult<Option<(String, Vec<(String, String)>)>> {
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT").arg(128).arg("BLOCK").arg(block_ms).arg("STREAMS").arg(keys.cancels()).arg(after);
    type Entry = (String, Vec<(Vec<u8>, Vec<u8>)>);
    let reply: Option<Vec<(String, Vec<Entry>)>> = cmd.query_async(conn).await?;
    let Some(entries) = reply.and_then(|streams| streams.into_iter().next()).map(|(_, entries)| entries) else {
        return Ok(None);
    };
    let Some(last) = entries.last().map(|(id, _)| id.clone()) else { return Ok(None) };
    let requests = entries
        .into_iter()
        .filter_map(|(_, fields)| {
            let field = |name: &[u8]| fields.iter().find(|(f, _)| f == name).map(|(_, v)| text(v));
            Some((field(b"key")?, field(b"token")?))
        })
        .collect();
    Ok(Some((last, requests)))
}

/// Sets the limit (`limit.lua`'s text) on `prefix`: true if the prefix had none.
pub(crate) async fn set_limit(wheel: &WheelClient, keys: &WheelKeys, prefix: &str, limit: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.limit);
    inv.arg("set").arg(prefix).arg(limit);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}

/// Clears the limit on `prefix`: true if it had one.
pub(crate) async fn clear_limit(wheel: &WheelClient, keys: &WheelKeys, prefix: &str) -> Result<bool, Error> {
    let mut inv = invoke(keys, &SCRIPTS.limit);
    inv.arg("clear").arg(prefix);
    Ok(wheel.conn.call::<i64>(&inv, Window::Default).await? == 1)
}

/// The limits set: (prefix, the store's text of its limit), in the prefixes' order.
pub(crate) async fn limits(wheel: &WheelClient, keys: &WheelKeys) -> Result<Vec<(String, String)>, Error> {
    let mut inv = invoke(keys, &SCRIPTS.limit);
    inv.arg("list");
    let flat: Vec<Vec<u8>> = wheel.conn.call(&inv, Window::Default).await?;
    Ok(flat.chunks_exact(2).map(|pair| (text(&pair[0]), text(&pair[1]))).collect())
}
