//! The one error type of the crate.

use std::fmt;

/// Everything that can go wrong when scheduling, cancelling or configuring timers.
///
/// Each variant says what happened and its [`Display`](fmt::Display) text says what to do next.
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a catch-all arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A timer with this key is already pending; the existing timer was left untouched.
    DuplicateKey(String),
    /// No timer with this key is pending (it fired, was cancelled, or never existed).
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
}

impl Error {
    pub(crate) fn invalid(why: impl Into<String>) -> Self {
        Error::Invalid(why.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::DuplicateKey(key) => write!(
                f,
                "a timer with key {key:?} is already pending: cancel or reschedule it, or use another key"
            ),
            Error::NotFound => f.write_str("no timer with this key is pending: it fired, was cancelled, or never existed"),
            Error::Cancelled => f.write_str("the timer was cancelled by key before it fired"),
            Error::Stopped => f.write_str("the timer service has stopped: start a new Scheduler to schedule more timers"),
            Error::Full(max) => write!(
                f,
                "the timer service already holds its maximum of {max} pending timers: wait for some to end, or raise Builder::max_pending"
            ),
            Error::Invalid(why) => write!(f, "invalid argument: {why}"),
        }
    }
}

impl std::error::Error for Error {}
