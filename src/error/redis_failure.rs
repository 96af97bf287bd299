//! `RedisFailure`: what went wrong between the crate and Redis, and whether trying again helps.

use std::fmt;
use std::sync::Arc;

/// A failed Redis call, carried by [`Error::Redis`](crate::Error::Redis).
///
/// It keeps the failure's category and message (so it can be compared and cloned) and the
/// original [`redis::RedisError`] as its [`source`](std::error::Error::source).
/// [`is_retryable`](Self::is_retryable) tells a transient failure (the connection dropped or
/// timed out, the server is loading its data, busy with a script, or a cluster is failing over),
/// which is worth the same call again after a short wait, from one that will fail the same way
/// again (a wrong password, a refused command, a server too old).
#[derive(Clone)]
pub struct RedisFailure {
    category: String,
    message: String,
    retryable: bool,
    source: Option<Arc<redis::RedisError>>,
}

impl RedisFailure {
    pub(crate) fn new(category: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        RedisFailure { category: category.into(), message: message.into(), retryable, source: None }
    }

    /// This failure, with `err` as its [`source`](std::error::Error::source).
    pub(crate) fn caused_by(mut self, err: redis::RedisError) -> Self {
        self.source = Some(Arc::new(err));
        self
    }

    /// What kind of failure this is, in a few words ("I/O error", "busy loading", "timed out", ...).
    pub fn category(&self) -> &str {
        &self.category
    }

    /// The failure's message, as Redis or the connection reported it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the same call is worth making again after a short wait: true for dropped or timed
    /// out connections and for `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN` and `MASTERDOWN`
    /// replies.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl From<redis::RedisError> for RedisFailure {
    fn from(err: redis::RedisError) -> Self {
        let retryable = is_transient(&err);
        let category = if err.is_timeout() { "timed out".to_string() } else { err.category().to_string() };
        RedisFailure { category, message: err.to_string(), retryable, source: Some(Arc::new(err)) }
    }
}

/// Whether `err` is a failure that goes away by itself: the connection, a timeout, or a server
/// that is loading, running a long script or failing over.
fn is_transient(err: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() || err.is_connection_refusal() {
        return true;
    }
    match err.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => true,
        ErrorKind::ClusterConnectionNotFound => true,
        _ => matches!(err.code(), Some("BUSY" | "LOADING" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "NOREPLICAS")),
    }
}

impl PartialEq for RedisFailure {
    fn eq(&self, other: &Self) -> bool {
        self.category == other.category && self.message == other.message && self.retryable == other.retryable
    }
}

impl Eq for RedisFailure {}

impl fmt::Debug for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFailure")
            .field("category", &self.category)
            .field("message", &self.message)
            .field("retryable", &self.retryable)
            .finish()
    }
}

impl fmt::Display for RedisFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The embedded SQLite store answers as Redis does, and says so in its errors: what
        // failed there is a file, not a server.
        let embedded = self.message.contains("the embedded store");
        let store = if embedded { "the embedded SQLite store" } else { "Redis" };
        write!(f, "{store} failed ({}): {}", self.category, self.message)?;
        if !embedded {
            if let Some(source) = &self.source {
                if source.is_timeout() {
                    f.write_str(" (no answer within the response timeout: the link to Redis is down or too slow)")?;
                } else if source.is_connection_dropped() || source.is_io_error() || source.is_connection_refusal() {
                    f.write_str(" (the connection to Redis failed: the link or the server is down)")?;
                }
            }
        }
        if self.retryable {
            f.write_str("; this is transient: make the same call again after a short wait")
        } else if embedded {
            f.write_str(
                "; check the file and its folder (free space on their disk, and that this process may write both), then make the call again",
            )
        } else {
            f.write_str("; trying again will not help: check the server, its settings and the URL")
        }
    }
}

impl std::error::Error for RedisFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_of_the_embedded_store_names_the_file_not_a_server() {
        let full = RedisFailure::new(
            "response error",
            "ERR the embedded store could not commit (nothing of these calls was kept): database or disk is full",
            false,
        );
        let text = full.to_string();
        assert!(text.starts_with("the embedded SQLite store failed (response error)"), "{text}");
        assert!(text.contains("free space") && !text.contains("server"), "{text}");
        let redis = RedisFailure::new("response error", "NOSCRIPT No matching script", false).to_string();
        assert!(redis.starts_with("Redis failed") && redis.contains("check the server"), "{redis}");
    }
}
