//! `TimerHandle`: one pending timer named by where it is, for the calls that must be cheap (a
//! keep-alive pushed back on every message), and its `TimerGuard`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::key::Key;
use super::shards::{Shared, Ticket};
use crate::Error;

/// A handle to one timer, made when it is armed: it moves, cancels and reads that timer
/// without hashing its key or looking it up, by the wheel entry the timer sits in. Made by
/// [`Scheduler::schedule_or_reset_handle`](crate::Scheduler::schedule_or_reset_handle),
/// [`TimerQueue::schedule_or_reset_handle`](crate::TimerQueue::schedule_or_reset_handle) and
/// [`Scheduled::handle`](crate::Scheduled::handle).
///
/// A handle names its own timer only, never a later one that took the same key: once the timer
/// has ended (fired for the last time, cancelled or stopped), [`reschedule`](Self::reschedule)
/// returns [`Error::NotFound`] and [`cancel`](Self::cancel) `false`. Its calls are synchronous
/// and take one uncontended lock, like [`Scheduler::cancel_now`](crate::Scheduler::cancel_now);
/// they do not count against the task's cooperative budget. Dropping a handle does nothing to
/// the timer; [`cancel_on_drop`](Self::cancel_on_drop) makes a guard that cancels it.
///
/// Pushing a deadline back costs one write to the timer's entry: the entry stays where it is
/// until its old deadline comes, and is filed again then (as `tokio::time::Sleep::reset` does),
/// so a timeout pushed back on every message costs no wheel work per message.
///
/// # Examples
/// ```
/// # use std::time::Duration;
/// # use tokio_timewheel::{Error, Scheduler};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let timer = Scheduler::builder().start()?;
/// let idle = Duration::from_secs(30);
/// let on_idle = |key: String| async move { println!("{key}: idle, closing") };
/// let guard = timer.schedule_or_reset_handle("idle:conn-7", idle, on_idle).await?.cancel_on_drop();
/// for _message in 0..3 {
///     tokio::time::sleep(Duration::from_secs(20)).await;
///     guard.reschedule(idle)?; // traffic: push the idle timeout back
/// }
/// assert!(timer.contains("idle:conn-7"));
/// drop(guard); // the connection closed: its timeout goes with it
/// assert!(!timer.contains("idle:conn-7"));
/// # Ok(()) }
/// ```
// 40 bytes, laid out in this order so that what a push-back reads (the service and the
// ticket) is the first 24: the key is read only when the ticket's entry no longer holds the
// timer. (The clock is the service's, in `Shared`.)
#[repr(C)]
pub struct TimerHandle {
    shared: Arc<Shared>,
    ticket: Ticket,
    key: Key,
}

impl TimerHandle {
    pub(crate) fn new(shared: Arc<Shared>, key: Key, ticket: Ticket) -> Self {
        TimerHandle { shared, ticket, key }
    }

    /// The timer's key (for a [`TimerQueue`](crate::TimerQueue)'s timer, the key in its queue).
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// Moves the timer to `delay` after this call; a repeating timer continues at its period
    /// from there. As [`Scheduler::reschedule`](crate::Scheduler::reschedule), by handle: a
    /// [paused](crate::Scheduler::pause) timer is resumed there, every pause cleared, and a
    /// deadline too far for the wheel is clamped.
    ///
    /// # Errors
    /// [`Error::NotFound`] once the timer has ended, [`Error::Stopped`] once the service has
    /// stopped.
    ///
    /// # Examples
    /// See [`TimerHandle`].
    pub fn reschedule(&self, delay: Duration) -> Result<(), Error> {
        let (due, at) = self.shared.clock.moved(Instant::now(), delay);
        self.move_to(at, due.deadline, due.set_at)
    }

    /// Moves the timer to the absolute `deadline`; a repeating timer continues at its period
    /// from there. A deadline in the past fires on the next tick.
    ///
    /// # Errors
    /// As [`reschedule`](Self::reschedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let review = timer.schedule("order-42:review", Duration::from_secs(3600), |_| async {}).await?.handle();
    /// let at = Instant::now() + Duration::from_secs(60);
    /// review.reschedule_at(at)?;
    /// assert_eq!(review.deadline(), Some(at));
    /// # Ok(()) }
    /// ```
    pub fn reschedule_at(&self, deadline: Instant) -> Result<(), Error> {
        let due = self.shared.clock.at(deadline);
        self.move_to(deadline, due.deadline, due.set_at)
    }

    fn move_to(&self, at: Instant, deadline: u64, set_at: u64) -> Result<(), Error> {
        self.shared.move_ticket(&self.key, self.ticket, at, deadline, set_at)
    }

    /// Cancels the timer, as [`Scheduler::cancel_now`](crate::Scheduler::cancel_now) does for its
    /// key. Returns `true` if it was pending, `false` if it had ended already.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let handle = timer.schedule("req-9", Duration::from_secs(5), |_| async {}).await?.handle();
    /// assert!(handle.cancel());
    /// assert!(!handle.cancel(), "ended already");
    /// # Ok(()) }
    /// ```
    pub fn cancel(&self) -> bool {
        self.shared.cancel(self.key.as_bytes(), Some(self.ticket.serial))
    }

    /// When the timer is next due, as [`Scheduler::deadline`](crate::Scheduler::deadline) says,
    /// or `None` once it has ended.
    ///
    /// # Examples
    /// See [`reschedule_at`](Self::reschedule_at).
    pub fn deadline(&self) -> Option<Instant> {
        match self.shared.deadline_ticket(&self.key, self.ticket)? {
            (_, Some(exact)) => Some(exact),
            (tick, None) => self.shared.clock.instant(tick),
        }
    }

    /// Whether the timer is still pending.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let handle = timer.schedule("t", Duration::from_millis(5), |_| async {}).await?.handle();
    /// assert!(handle.is_pending());
    /// tokio::time::sleep(Duration::from_millis(10)).await;
    /// assert!(!handle.is_pending(), "fired");
    /// # Ok(()) }
    /// ```
    pub fn is_pending(&self) -> bool {
        self.shared.contains_ticket(&self.key, self.ticket)
    }

    /// A guard that cancels the timer when it is dropped, for a timeout that belongs to a
    /// connection or a request. It derefs to the handle, so the guard moves the timer too.
    ///
    /// # Examples
    /// See [`TimerHandle`].
    pub fn cancel_on_drop(self) -> TimerGuard {
        TimerGuard { handle: Some(self) }
    }
}

impl std::fmt::Debug for TimerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerHandle").field("key", &self.key).finish_non_exhaustive()
    }
}

/// A [`TimerHandle`] that cancels its timer when dropped (if the timer is still pending). Made by
/// [`TimerHandle::cancel_on_drop`]; derefs to the handle.
#[must_use = "dropping a TimerGuard cancels its timer at once"]
pub struct TimerGuard {
    /// `None` once disarmed.
    handle: Option<TimerHandle>,
}

impl TimerGuard {
    /// Gives the handle back without cancelling the timer.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let guard = timer.schedule_or_reset_handle("t", Duration::from_secs(5), |_| async {}).await?.cancel_on_drop();
    /// let handle = guard.disarm();
    /// assert!(handle.is_pending(), "a disarmed guard cancels nothing");
    /// # Ok(()) }
    /// ```
    pub fn disarm(mut self) -> TimerHandle {
        self.handle.take().expect("a guard holds its handle until it is disarmed")
    }
}

impl std::ops::Deref for TimerGuard {
    type Target = TimerHandle;

    fn deref(&self) -> &TimerHandle {
        self.handle.as_ref().expect("a guard holds its handle until it is disarmed")
    }
}

impl Drop for TimerGuard {
    fn drop(&mut self) {
        if let Some(handle) = &self.handle {
            handle.cancel();
        }
    }
}

impl std::fmt::Debug for TimerGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerGuard").field("handle", &self.handle).finish()
    }
}
