//! A dead letter: `DeadTask`, a task whose last attempt failed.

use std::time::SystemTime;

/// A task that failed `max_attempts` times, kept in the dead letters until
/// [`requeue_dead`](crate::durable::DurableScheduler::requeue_dead) puts it back.
///
/// Its key is free again: a new task may be scheduled under it (and if that one dies too, its
/// record replaces this one).
///
/// With the `serde` feature it serialises to the JSON that the dashboard answers and the command
/// line prints with `--json`: see its `Serialize` implementation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadTask {
    pub(crate) key: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempts: u32,
    pub(crate) last_error: String,
    pub(crate) died: SystemTime,
    pub(crate) due: SystemTime,
}

impl DeadTask {
    /// The key the task was scheduled under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload given to `schedule`.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// How many deliveries the task had.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last failure: the handler's error text, its panic message, "the handler timed out
    /// after ..." (the handler timeout), or "lease expired" (its worker died or was cut off).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// When the task went to the dead letters, on Redis's clock.
    pub fn died(&self) -> SystemTime {
        self.died
    }

    /// When its last delivery was due, on Redis's clock.
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// The payload read as JSON into a `T`, as [`Task::json`](super::Task::json) reads it.
    ///
    /// # Errors
    /// [`Error::Payload`](crate::Error::Payload) when the payload is not the JSON of a `T`.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, crate::Error> {
        crate::durable::payload::from_json(&self.key, &self.payload)
    }
}
