//! Connecting: checks the settings, connects, checks the server and opens the wheel, all within
//! one connect timeout.

use std::sync::Arc;

use super::config::{Config, Settings};
use super::conn::{unreachable, Conn};
use super::ids::Ids;
use super::keys::WheelKeys;
use super::scripts::{self, Opened};
use super::wheel::Wheel;
use super::DurableScheduler;
use crate::Error;

/// The oldest Redis the scripts run on (`ZRANGE ... WITHSCORES` forms, `SPOP` with a count, ...).
const MIN_REDIS: (u32, u32) = (6, 2);

/// Connects to the wheel `settings.name` on the Redis at `url`.
pub(crate) async fn connect(url: &str, settings: &Settings) -> Result<DurableScheduler, Error> {
    let cfg = Config::new(settings)?;
    // One deadline for the whole of `connect`: connecting, checking the server and opening the
    // wheel each could otherwise take the connect timeout in turn.
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let conn = Conn::connect(url, &cfg, deadline).await?;
    let wheel = Wheel { keys: WheelKeys::new(&cfg.name), cfg, conn, ids: Ids::new() };
    let timeout = wheel.cfg.connect_timeout;
    tokio::time::timeout_at(deadline, check_server(&wheel)).await.map_err(|_| unreachable(timeout))??;
    let opened = tokio::time::timeout_at(deadline, scripts::open(&wheel)).await.map_err(|_| unreachable(timeout))??;
    if let Opened::Mismatch { tick_ms, slots } = opened {
        return Err(Error::invalid(format!(
            "the wheel {:?} in Redis runs with a {tick_ms} ms tick and {slots} slots, not {} ms and {}: connect \
             with the same settings as the other nodes, or use another name",
            wheel.name(),
            wheel.cfg.tick_ms,
            wheel.cfg.slots
        )));
    }
    Ok(DurableScheduler { wheel: Arc::new(wheel) })
}

/// Checks the server's version and warns about settings that can lose tasks.
async fn check_server(wheel: &Wheel) -> Result<(), Error> {
    let mut conn = wheel.conn.shared();
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
    let version =
        info.lines().find_map(|l| l.strip_prefix("redis_version:")).map(|v| v.trim().to_string()).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < MIN_REDIS {
        return Err(Error::invalid(format!(
            "the durable wheel needs Redis {}.{} or later, and this server runs {version:?}: upgrade it",
            MIN_REDIS.0, MIN_REDIS.1
        )));
    }
    for (setting, safe) in [("maxmemory-policy", "noeviction"), ("appendonly", "yes")] {
        let reply: Result<Vec<String>, _> = redis::cmd("CONFIG").arg("GET").arg(setting).query_async(&mut conn).await;
        match reply {
            Ok(pair) => match pair.get(1) {
                Some(value) if value != safe => tracing::warn!(
                    wheel = %wheel.name(),
                    "Redis runs with {setting} {value}: it can lose scheduled tasks; set {setting} {safe}"
                ),
                _ => {}
            },
            Err(e) => tracing::debug!(wheel = %wheel.name(), error = %e, "could not read {setting} with CONFIG GET"),
        }
    }
    Ok(())
}
