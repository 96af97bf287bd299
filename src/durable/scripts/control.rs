//! The plain commands of a wheel's controls: the `paused` field of each partition's `meta` hash,
//! which `claim.lua` reads, and the wake-up tokens that end the workers' idle wait at a resume.

use crate::durable::client::WheelClient;
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
