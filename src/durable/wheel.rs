//! [`Wheel`]: a durable wheel as this process sees it, shared by its handles and workers.

use super::config::Config;
use super::conn::Conn;
use super::ids::Ids;
use super::keys::WheelKeys;

/// What every handle and worker of one `connect` shares: the checked settings, the wheel's key
/// names, the connection and the id source.
pub(crate) struct Wheel {
    pub(crate) cfg: Config,
    pub(crate) keys: WheelKeys,
    pub(crate) conn: Conn,
    pub(crate) ids: Ids,
}

impl Wheel {
    /// The wheel's name, for logs and errors.
    pub(crate) fn name(&self) -> &str {
        &self.cfg.name
    }
}
