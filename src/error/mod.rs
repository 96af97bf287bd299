//! The one error type of the crate.

use std::fmt;

#[cfg(feature = "redis")]
mod redis_failure;
mod rfc3339;
#[cfg(feature = "redis")]
pub use redis_failure::RedisFailure;
pub(crate) use rfc3339::Rfc3339;

/// Everything that can go wrong when scheduling, cancelling or configuring timers.
///
/// Each variant says what happened and its [`Display`](fmt::Display) text says what to do next.
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a catch-all arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A timer (or durable task) with this key is already pending; it was left untouched.
    DuplicateKey(String),
    /// Nothing is pending under the key: it fired (or, durable, a worker runs it), was
    /// cancelled, or never existed. It carries no key, so that it compares by value
    /// (`Err(Error::NotFound)`); the caller has the key it asked for.
    NotFound,
    /// The timer was cancelled by key before it fired.
    Cancelled,
    /// The service was stopped (by [`Scheduler::stop`](crate::Scheduler::stop) or by dropping its
    /// last handle) before the timer could fire, or the call was made after it stopped.
    Stopped,
    /// The service already holds `max_pending` timers (the value carried here).
    Full(usize),
    /// An argument or setting was rejected; the text says which and why.
    Invalid(String),
    /// A call to Redis failed (durable mode only). [`Error::is_retryable`] tells whether the same
    /// call is worth making again after a short wait.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Redis(RedisFailure),
    /// A typed payload could not be written or read as JSON (durable mode's
    /// `Json` payloads and `Task::json`); the text names the task, the type and what did not fit.
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    Payload(String),
}

impl Error {
    pub(crate) fn invalid(why: impl Into<String>) -> Self {
        Error::Invalid(why.into())
    }

    /// Whether the call that returned this error is worth making again, unchanged, after a short
    /// wait: true only for a transient Redis failure (a dropped or timed-out connection, a server
    /// that is loading, busy or failing over). Every other error will come back the same way.
    ///
    /// Durable calls are safe to repeat: a `schedule` whose first attempt did reach Redis is
    /// recognised by its request id while the call retries internally; a caller that repeats the
    /// call itself after a retryable error may see [`Error::DuplicateKey`], which then means the
    /// earlier attempt landed.
    pub fn is_retryable(&self) -> bool {
        match self {
            #[cfg(feature = "redis")]
            Error::Redis(failure) => failure.is_retryable(),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DuplicateKey(key) => write!(
                f,
                "the key {key:?} is taken by a pending timer or task: cancel or reschedule it, or use another key"
            ),
            Error::NotFound => f.write_str(
                "nothing is pending under this key: it fired (or, in the durable mode, a worker is running it), was \
                 cancelled, or never existed",
            ),
            Error::Cancelled => f.write_str("the timer was cancelled by key before it fired"),
            Error::Stopped => f.write_str("the timer service has stopped: start a new Scheduler to schedule more timers"),
            Error::Full(max) => write!(
                f,
                "the timer service already holds its maximum of {max} pending timers: wait for some to end, or raise Builder::max_pending"
            ),
            Error::Invalid(why) => write!(f, "invalid argument: {why}"),
            #[cfg(feature = "redis")]
            Error::Redis(failure) => fmt::Display::fmt(failure, f),
            #[cfg(feature = "serde")]
            Error::Payload(why) => write!(
                f,
                "{why}: schedule it as Json(value) and read it with json() as the same type, or read the bytes \
                 with payload()"
            ),
        }
    }
}

/// The longest key, in bytes, of a timer or a durable task. A key names what it is for
/// (`order-42:review`); data belongs in the payload, or elsewhere behind a reference.
pub const MAX_KEY_LEN: usize = 4096;

/// The one rule for keys, in every call of both modes that takes one and returns a `Result`: an
/// empty key, or one over [`MAX_KEY_LEN`] bytes, is [`Error::Invalid`]. (A call that answers
/// without a `Result`, such as `contains` or `deadline`, answers as for a key with nothing under
/// it: no timer can have such a key.)
pub(crate) fn check_key(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::invalid("the key is empty: name the timer or task (for example \"order-42:review\")"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "the key is {} bytes, over the maximum of {MAX_KEY_LEN} (starting {:?}): keep data in the payload and \
             name the timer or task with a short key",
            key.len(),
            prefix(key, 40)
        )));
    }
    Ok(())
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "redis")]
            Error::Redis(failure) => Some(failure),
            _ => None,
        }
    }
}

#[cfg(feature = "redis")]
impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        Error::Redis(err.into())
    }
}
