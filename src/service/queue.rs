//! Pull-style delivery: timers that carry a value and, when due, come out of a `Stream`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::clock::Clock;
use super::job::Once;
use super::scheduler::{Prepared, Scheduler};
use super::timer::Run;
use crate::Error;

/// Schedules timers that carry a value of type `T` and are delivered, when due, by the
/// [`Expirations`] stream made with it, as tokio-util's `DelayQueue` delivers its items. Made
/// by [`Scheduler::queue`].
///
/// Unlike a `DelayQueue`, which one task owns, a `TimerQueue` is `Clone + Send + Sync`: any
/// task can schedule into it, and the timers it schedules live in the same key space as every
/// other timer of its [`Scheduler`], so any clone of the `Scheduler` can
/// [`cancel`](Scheduler::cancel), [`reschedule`](Scheduler::reschedule) or read the
/// [`deadline`](Scheduler::deadline) of one by key, from any task. A cancelled timer's value is
/// dropped, never delivered.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tokio_timewheel::{Error, Scheduler};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let timer = Scheduler::builder().start()?;
/// let (timeouts, mut expired) = timer.queue::<u64>();
/// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
/// timeouts.schedule("conn-8", Duration::from_secs(30), 8).await?;
/// timer.cancel("conn-8").await; // traffic on connection 8
/// // The event loop selects over its sockets and `expired.recv()`.
/// assert_eq!(expired.recv().await, Some(("conn-7".to_string(), 7)));
/// # Ok(()) }
/// ```
pub struct TimerQueue<T> {
    scheduler: Scheduler,
    tx: mpsc::UnboundedSender<(String, T)>,
}

impl<T> Clone for TimerQueue<T> {
    fn clone(&self) -> Self {
        TimerQueue { scheduler: self.scheduler.clone(), tx: self.tx.clone() }
    }
}

/// The due timers of a [`TimerQueue`], as `(key, value)` in the order they fire. A
/// [`Stream`](futures_core::Stream) (the trait `futures` and `tokio-stream` both use), with
/// [`recv`](Self::recv) for use without either.
///
/// # A slow consumer
/// Firing never waits for the consumer: a due timer's `(key, value)` is queued at once, in
/// memory, and stays there until it is received, so a consumer that falls behind holds the
/// backlog (see [`len`](Self::len)) but delays no timer and loses nothing. The stream ends once
/// every `TimerQueue` handle is dropped and every timer they scheduled has ended; pending
/// timers that the service drops when it stops are not delivered.
pub struct Expirations<T> {
    rx: mpsc::UnboundedReceiver<(String, T)>,
}

impl Scheduler {
    /// A [`TimerQueue`] that schedules timers carrying a `T`, and the [`Expirations`] stream
    /// that yields them as `(key, value)` when they are due: the `DelayQueue` pattern, for an
    /// event loop that selects over its timeouts instead of running a job for each.
    ///
    /// # Examples
    /// See [`TimerQueue`].
    pub fn queue<T: Send + 'static>(&self) -> (TimerQueue<T>, Expirations<T>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (TimerQueue { scheduler: self.clone(), tx }, Expirations { rx })
    }
}

impl<T: Send + 'static> TimerQueue<T> {
    /// Delivers `(key, value)` on the stream once `delay` has passed, counted from this call.
    ///
    /// # Errors
    /// As [`Scheduler::schedule`].
    ///
    /// # Cancel safety
    /// If this future is dropped before it completes, the timer is not scheduled and `value`
    /// is dropped.
    pub fn schedule<K: AsRef<str>>(
        &self,
        key: K,
        delay: Duration,
        value: T,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let prepared = Prepared::new(key.as_ref(), self.scheduler.clock().after(delay), self.deliver(value));
        self.scheduler.submit_unwatched(prepared)
    }

    /// Delivers `(key, value)` on the stream at `deadline`.
    ///
    /// # Errors
    /// As [`Scheduler::schedule`].
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    pub fn schedule_at<K: AsRef<str>>(
        &self,
        key: K,
        deadline: Instant,
        value: T,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let prepared = Prepared::new(key.as_ref(), self.scheduler.clock().at(deadline), self.deliver(value));
        self.scheduler.submit_unwatched(prepared)
    }

    /// Moves the pending timer with this key to `delay` from this call, or schedules `value`
    /// under it if none is pending, as [`Scheduler::schedule_or_reset`] does: `Ok(true)` if
    /// `value` was scheduled, `Ok(false)` if a pending timer was moved (it keeps its own value;
    /// `value` is dropped).
    ///
    /// # Errors
    /// As [`Scheduler::schedule_or_reset`].
    ///
    /// # Cancel safety
    /// If the future is dropped before it completes, nothing has changed.
    pub fn schedule_or_reset<K: AsRef<str>>(
        &self,
        key: K,
        delay: Duration,
        value: T,
    ) -> impl Future<Output = Result<bool, Error>> + Send + '_ {
        let now = Instant::now();
        let at = Clock::instant_after(now, delay);
        let prepared = Prepared::new(key.as_ref(), self.scheduler.clock().after_from(now, delay), self.deliver(value));
        self.scheduler.upsert(prepared.and_then(|prepared| Ok((prepared, at?))))
    }

    /// The [`Scheduler`] this queue schedules into: cancel, reschedule and look up its timers
    /// by key through it.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// A one-shot job that sends `(key, value)` to the stream. It returns a finished future,
    /// so a firing costs no task.
    fn deliver(&self, value: T) -> Run {
        let tx = self.tx.clone();
        Run::Once(Box::new(Once(move |key: String| {
            // The receiver may be gone: then nobody wants the value.
            let _ = tx.send((key, value));
            std::future::ready(())
        })))
    }
}

impl<T> Expirations<T> {
    /// The next due timer's `(key, value)`, or `None` once the stream has ended.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped before it completes, no item is lost.
    pub async fn recv(&mut self) -> Option<(String, T)> {
        self.rx.recv().await
    }

    /// Polls for the next due timer, for use in a hand-written future.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<(String, T)>> {
        self.rx.poll_recv(cx)
    }

    /// How many due timers are waiting to be received.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no due timer is waiting to be received.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

impl<T> Stream for Expirations<T> {
    type Item = (String, T);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl<T> std::fmt::Debug for TimerQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerQueue").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Expirations<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expirations").field("waiting", &self.rx.len()).finish()
    }
}
