//! What a durable task carries: bytes, or with the `serde` feature any `Serialize` value as JSON
//! ([`Json`]). Every call that takes a payload takes an [`IntoPayload`], so there is one
//! `schedule` whatever the payload, not a `_json` twin of each call.

use crate::Error;

/// A payload a task can carry: anything that converts into bytes (`&str`, `String`, `Vec<u8>`,
/// `&[u8]`, `[u8; N]`, ...), or [`Json`]`(value)` with the `serde` feature. Implement it for a
/// type of your own to write it in another encoding.
pub trait IntoPayload {
    /// The bytes the task under `key` carries, or the error that says why `self` has none
    /// (for [`Json`], [`Error::Payload`] naming `key` and the type).
    ///
    /// # Errors
    /// What the conversion refuses.
    fn into_payload(self, key: &str) -> Result<Vec<u8>, Error>;
}

impl<T: Into<Vec<u8>>> IntoPayload for T {
    fn into_payload(self, _key: &str) -> Result<Vec<u8>, Error> {
        Ok(self.into())
    }
}

/// A payload written as JSON: `timers.schedule(key, delay, Json(&review))`, read back with
/// [`Task::json`](super::Task::json).
///
/// # Examples
/// ```no_run
/// use std::time::Duration;
/// use tokio_timewheel::durable::{DurableScheduler, Json};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Review {
///     order: u64,
/// }
///
/// # async fn run(timers: DurableScheduler) -> Result<(), tokio_timewheel::Error> {
/// timers.schedule("order-42:review", Duration::from_secs(48 * 3600), Json(&Review { order: 42 })).await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

#[cfg(feature = "serde")]
impl<T: serde::Serialize> IntoPayload for Json<T> {
    /// # Errors
    /// [`Error::Payload`] if the value cannot be written as JSON (a map whose keys are not
    /// strings, say, or a `Serialize` impl that fails).
    fn into_payload(self, key: &str) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(&self.0).map_err(|e| {
            Error::Payload(format!(
                "the value for task {key:?} (a {}) cannot be written as JSON: {e}",
                std::any::type_name::<T>()
            ))
        })
    }
}

/// The JSON payload of the task `key` read into a `T`: the other half of [`Json`].
#[cfg(feature = "serde")]
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(key: &str, payload: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(payload).map_err(|e| {
        Error::Payload(format!(
            "the payload of task {key:?} ({} bytes) is not the JSON of a {}: {e}",
            payload.len(),
            std::any::type_name::<T>()
        ))
    })
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn bytes_pass_through_and_json_is_written_or_refused_by_name() {
        assert_eq!("abc".into_payload("k").unwrap(), b"abc");
        assert_eq!(b"ab".into_payload("k").unwrap(), b"ab");
        assert_eq!(vec![1u8, 2].into_payload("k").unwrap(), [1, 2]);
        #[derive(serde::Serialize)]
        struct Review {
            order: u64,
        }
        assert_eq!(Json(&Review { order: 42 }).into_payload("k").unwrap(), br#"{"order":42}"#);
        let mut bad = std::collections::HashMap::new();
        bad.insert((1, 2), 3);
        let Err(Error::Payload(why)) = Json(&bad).into_payload("order-42") else { panic!("refused") };
        assert!(why.contains("\"order-42\"") && why.contains("HashMap"), "{why}");
        let back: Result<u64, _> = from_json("k", b"nope");
        assert!(matches!(back, Err(Error::Payload(why)) if why.contains("u64")));
    }
}
