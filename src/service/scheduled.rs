//! The future a schedule call returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::handle::TimerHandle;
use super::key::Key;
use super::shards::{Shared, Ticket};
use crate::Error;

/// Resolves when its timer ends: `Ok(())` after the timer's last run, `Err(Error::Cancelled)`
/// if it was cancelled by key, `Err(Error::Stopped)` if the service stopped first.
///
/// Dropping a `Scheduled` does **not** cancel the timer: it only stops listening. An unpolled
/// `Scheduled` allocates nothing, so scheduling and dropping it is as cheap as it gets.
///
/// # Examples
/// ```
/// # use std::time::Duration;
/// # use tokio_timewheel::{Error, Scheduler};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let timer = Scheduler::builder().start()?;
/// let done = timer.schedule("review-order-42", Duration::from_secs(48 * 3600), |key| async move {
///     println!("auto-reviewing {key}");
/// }).await?;
/// timer.cancel("review-order-42").await;
/// assert_eq!(done.await, Err(Error::Cancelled));
/// # Ok(()) }
/// ```
pub struct Scheduled {
    shared: Arc<Shared>,
    key: Key,
    /// Where the timer is: its shard, its serial number there, and the entry it was placed in.
    ticket: Ticket,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never polled: nothing is registered beyond the `ARMED` bit.
    Armed,
    /// Polled at least once: a waker is parked in the watchers.
    Polled,
    /// The outcome has been returned.
    Finished,
}

impl Scheduled {
    pub(crate) fn new(shared: Arc<Shared>, key: Key, ticket: Ticket) -> Self {
        Scheduled { shared, key, ticket, state: State::Armed }
    }

    /// The key of the timer this future watches.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// A [`TimerHandle`] to this future's timer, which moves, cancels and reads it without
    /// hashing its key, from any task (this future can go on watching it meanwhile).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let done = timer.schedule("heartbeat:node-3", Duration::from_secs(10), |_| async {}).await?;
    /// let handle = done.handle();
    /// handle.reschedule(Duration::from_secs(10))?; // a heartbeat arrived
    /// assert!(handle.cancel());
    /// assert_eq!(done.await, Err(Error::Cancelled));
    /// # Ok(()) }
    /// ```
    pub fn handle(&self) -> TimerHandle {
        TimerHandle::new(self.shared.clone(), self.key.clone(), self.ticket)
    }

    /// Turns this future into one that also cancels its timer when dropped before the timer
    /// ends, like tokio's `AbortOnDropHandle`: for a timeout that belongs to a connection or a
    /// request, so that dropping the guard with its owner cancels it. It cancels only this
    /// timer, never a later one that took the same key.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let guard = timer.schedule("req-9", Duration::from_secs(5), |_| async {}).await?.cancel_on_drop();
    /// assert!(timer.contains("req-9"));
    /// drop(guard); // the request finished in time
    /// assert!(!timer.contains("req-9"));
    /// # Ok(()) }
    /// ```
    pub fn cancel_on_drop(self) -> CancelOnDrop {
        CancelOnDrop { scheduled: Some(self) }
    }
}

/// A [`Scheduled`] that cancels its timer when dropped before the timer ends. Made by
/// [`Scheduled::cancel_on_drop`]; it is itself a future with the same output.
#[must_use = "dropping a CancelOnDrop cancels its timer at once"]
pub struct CancelOnDrop {
    /// `None` once disarmed or finished.
    scheduled: Option<Scheduled>,
}

impl CancelOnDrop {
    /// The key of the timer this guard watches.
    pub fn key(&self) -> &str {
        self.scheduled.as_ref().map_or("", Scheduled::key)
    }

    /// A [`TimerHandle`] to this guard's timer (see [`Scheduled::handle`]).
    ///
    /// # Panics
    /// If the guard has already completed, as [`disarm`](Self::disarm).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let guard = timer.schedule("req-9", Duration::from_secs(5), |_| async {}).await?.cancel_on_drop();
    /// guard.handle().reschedule(Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn handle(&self) -> TimerHandle {
        self.scheduled.as_ref().expect("a guard holds its future until it is disarmed or finished").handle()
    }

    /// Gives the [`Scheduled`] back without cancelling the timer.
    ///
    /// # Panics
    /// If the guard has already completed (it was awaited through `&mut` to its output): its
    /// [`Scheduled`] was used up then, and there is nothing left to give back or to cancel.
    pub fn disarm(mut self) -> Scheduled {
        self.scheduled.take().expect("a guard holds its future until it is disarmed or finished")
    }
}

impl Future for CancelOnDrop {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let scheduled = self.scheduled.as_mut().expect("CancelOnDrop polled after it completed");
        let outcome = std::task::ready!(Pin::new(scheduled).poll(cx));
        // The timer has ended: nothing is left to cancel.
        self.scheduled = None;
        Poll::Ready(outcome)
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(scheduled) = &self.scheduled {
            scheduled.shared.cancel(scheduled.key.as_bytes(), Some(scheduled.ticket.serial));
        }
    }
}

impl std::fmt::Debug for CancelOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelOnDrop").field("scheduled", &self.scheduled).finish()
    }
}

impl Future for Scheduled {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert_ne!(self.state, State::Finished, "Scheduled polled after it completed");
        match self.shared.poll_outcome(self.ticket.shard, self.ticket.serial, cx.waker()) {
            Some(outcome) => {
                self.state = State::Finished;
                Poll::Ready(outcome)
            }
            None => {
                self.state = State::Polled;
                Poll::Pending
            }
        }
    }
}

impl Drop for Scheduled {
    fn drop(&mut self) {
        if self.state != State::Finished {
            self.shared.unwatch(self.key.as_bytes(), self.ticket, self.state == State::Polled);
        }
    }
}

impl std::fmt::Debug for Scheduled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduled").field("key", &self.key).field("state", &self.state).finish()
    }
}
