//! Connecting: checks the settings, connects to the deployment, checks the server and opens the
//! wheel (each of its partitions), all within one connect timeout.

use std::sync::Mutex;
use std::time::Duration;

use super::config::{Config, Settings};
use super::ids::Ids;
use super::metrics::WheelMetrics;
use super::store::client::WheelClient;
use super::store::keys::WheelKeys;
use super::store::scripts::{self, Opened};
use super::store::shared_conn::{unreachable, SharedConn};
use super::time::RedisClock;
use super::DurableScheduler;
use crate::Error;

/// The oldest Redis the scripts run on (`ZRANGE ... WITHSCORES` forms, `SPOP` with a count, ...).
const MIN_REDIS: (u32, u32) = (6, 2);

/// Connects to the wheel `settings.name` where `settings.topology` says.
pub(crate) async fn connect(settings: &Settings) -> Result<DurableScheduler, Error> {
    let cfg = Config::new(settings)?;
    // One deadline for the whole of `connect`: connecting, checking the server and opening the
    // wheel each could otherwise take the connect timeout in turn.
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let long_response = cfg.idle_wait() + cfg.response_timeout;
    // The tick's writes are the leader's own: a store in this process does not wake it for them.
    let quiet = [scripts::tick_sha()];
    let conn = SharedConn::connect(&settings.topology, &settings.tls, &cfg, long_response, deadline, &quiet).await?;
    let mut wheel = client(cfg, conn);
    let timeout = wheel.cfg.connect_timeout;
    tokio::time::timeout_at(deadline, check_server(&wheel)).await.map_err(|_| unreachable(timeout))??;
    // Within the deadline, and never an error: a script not loaded here loads on first use.
    let _ = tokio::time::timeout_at(deadline, scripts::preload(&wheel)).await;
    if settings.only_existing {
        let recorded = tokio::time::timeout_at(deadline, scripts::recorded(&wheel, &wheel.base))
            .await
            .map_err(|_| unreachable(timeout))??;
        let Some((tick_ms, slots, partitions)) = recorded else {
            return Err(Error::invalid(format!(
                "the store holds no wheel named {:?}: check the name (a node records a wheel when it first connects \
                 to it), and the URL (the address and database, or the file)",
                wheel.name()
            )));
        };
        let adopted = Settings { tick: Duration::from_millis(tick_ms), slots, partitions, ..settings.clone() };
        wheel = client(Config::new(&adopted)?, wheel.conn);
    }
    tokio::time::timeout_at(deadline, open(&wheel)).await.map_err(|_| unreachable(timeout))??;
    Ok(DurableScheduler::new(wheel))
}

/// The context of a wheel opened with `cfg` on `conn`.
fn client(cfg: Config, conn: SharedConn) -> WheelClient {
    WheelClient {
        base: WheelKeys::new(&cfg.name),
        partitions: WheelClient::partitions(&cfg.name, cfg.partitions),
        lateness: Mutex::default(),
        metrics: WheelMetrics::new(&cfg.name, cfg.partitions),
        cfg,
        clock: RedisClock::new(conn.tokio_clock()),
        conn,
        ids: Ids::new(),
    }
}

/// Opens the wheel: its record first (which refuses another tick, slot or partition count),
/// then each partition.
async fn open(wheel: &WheelClient) -> Result<(), Error> {
    let count = wheel.partitions.len();
    let single = count == 1;
    let mut keys = vec![(&wheel.base, single)];
    if !single {
        keys.extend(wheel.partitions.iter().map(|p| (&p.keys, true)));
    }
    for (keys, start_cursor) in keys {
        let sent = tokio::time::Instant::now();
        match scripts::open(wheel, keys, count, start_cursor).await? {
            Opened::Yes { now_ms } => {
                wheel.clock.learn(now_ms);
                // The first measure of the link, before the worker's calls give more.
                wheel.clock.note_round_trip(sent.elapsed());
            }
            Opened::Mismatch { tick_ms, slots, partitions } => {
                return Err(Error::invalid(format!(
                    "the wheel {:?} in Redis runs with a {tick_ms} ms tick, {slots} slots and {partitions} partition(s), \
                     not {} ms, {} and {count}: connect with the same settings as the other nodes (tick, slots and \
                     partitions), or use another name",
                    wheel.name(),
                    wheel.cfg.tick_ms,
                    wheel.cfg.slots
                )));
            }
            Opened::OtherLayout { layout } => {
                return Err(Error::invalid(format!(
                    "the wheel {:?} in Redis is recorded in layout {layout:?}, which this version of tokio-timewheel \
                     does not read (it reads layout 1): connect with the version that wrote it, or use another name",
                    wheel.name(),
                )));
            }
        }
    }
    Ok(())
}

/// Checks the server's version and warns about settings that can lose tasks (on the node that
/// holds the wheel's record, in a cluster).
async fn check_server(wheel: &WheelClient) -> Result<(), Error> {
    let beside = wheel.base.meta();
    let version = scripts::server_version(wheel, &beside).await?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < MIN_REDIS {
        return Err(Error::invalid(format!(
            "the durable wheel needs Redis {}.{} or later, and this server runs {version:?}: upgrade it",
            MIN_REDIS.0, MIN_REDIS.1
        )));
    }
    for (setting, safe) in [("maxmemory-policy", "noeviction"), ("appendonly", "yes")] {
        match scripts::config_value(wheel, setting, &beside).await {
            Ok(Some(value)) if value != safe => tracing::warn!(
                wheel = %wheel.name(),
                "Redis runs with {setting} {value}: it can lose scheduled tasks; set {setting} {safe}"
            ),
            Ok(_) => {}
            Err(e) => tracing::debug!(wheel = %wheel.name(), error = %e, "could not read {setting} with CONFIG GET"),
        }
    }
    Ok(())
}
