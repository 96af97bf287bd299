//! The server's own figures that `connect` checks: its version (`INFO server`) and settings
//! (`CONFIG GET`), read on the node that holds the key `beside` (in a cluster).

use crate::durable::store::client::WheelClient;
use crate::Error;

/// The server's version as it reports it (`redis_version` of `INFO server`; Valkey reports its
/// Redis-compatible version there too), empty if it reports none.
pub(crate) async fn server_version(wheel: &WheelClient, beside: &str) -> Result<String, Error> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let info: String = wheel.conn.command_beside(&info, beside).await?;
    Ok(info.lines().find_map(|l| l.strip_prefix("redis_version:")).map(|v| v.trim().to_string()).unwrap_or_default())
}

/// The value of the server's `setting` (`CONFIG GET`), `None` if it has no such setting.
pub(crate) async fn config_value(wheel: &WheelClient, setting: &str, beside: &str) -> Result<Option<String>, Error> {
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg(setting);
    let pair: Vec<String> = wheel.conn.command_beside(&get, beside).await?;
    Ok(pair.into_iter().nth(1))
}
