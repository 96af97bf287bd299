//! Pull-style delivery: timers that carry a value and, when due, come out of a `Stream`.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::clock::Due;
use super::handle::TimerHandle;
use super::job::{JobFuture, OnceJob};
use super::key::{queue_key, Key};
use super::scheduler::{Prepared, Scheduler};
use super::timer::Run;
use crate::error::check_key;
use crate::Error;

/// Schedules timers that carry a value of type `T` and are delivered, when due, by the
/// [`Expirations`] stream made with it, as tokio-util's `DelayQueue` delivers its items. Made
/// by [`Scheduler::queue`].
///
/// Unlike a `DelayQueue`, which one task owns, a `TimerQueue` is `Clone + Send + Sync`: any
/// task can schedule into it, move, cancel or look up its timers. Each queue has a key space of
/// its own: a key names one timer of this queue (and of its clones), never a timer of another
/// queue or of the [`Scheduler`] itself, so two queues can both use `"conn-1"`. Its timers count
/// toward the scheduler's [`len`](Scheduler::len) and `max_pending` like any other.
///
/// [`remove`](Self::remove) cancels a timer and hands its value back, as `DelayQueue::remove`
/// does; a timer cancelled otherwise (or dropped by a stop) drops its value, never delivered.
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
/// assert_eq!(timeouts.remove("conn-8"), Some(8)); // traffic on connection 8
/// assert!(!timer.contains("conn-7"), "the queue's keys are its own");
/// // The event loop selects over its sockets and `expired.recv()`.
/// assert_eq!(expired.recv().await, Some(("conn-7".to_string(), 7)));
/// # Ok(()) }
/// ```
pub struct TimerQueue<T> {
    scheduler: Scheduler,
    /// The queue's number, which names its key space.
    id: u64,
    tx: mpsc::UnboundedSender<(String, T)>,
    /// How many of the queue's timers have not ended (see [`Live`]).
    live: Arc<AtomicUsize>,
}

impl<T> Clone for TimerQueue<T> {
    fn clone(&self) -> Self {
        TimerQueue { scheduler: self.scheduler.clone(), id: self.id, tx: self.tx.clone(), live: self.live.clone() }
    }
}

/// The due timers of a [`TimerQueue`], as `(key, value)` in the order they fire. A
/// [`Stream`](futures_core::Stream) (the trait `futures` and `tokio-stream` both use), with
/// [`recv`](Self::recv) for use without either.
///
/// # A slow consumer
/// Firing never waits for the consumer: a due timer's `(key, value)` is queued at once, in
/// memory, and stays there until it is received, so a consumer that falls behind holds the
/// backlog (see [`len`](Self::len)) but delays no timer and loses nothing. The stream ends as
/// soon as every `TimerQueue` handle is dropped and every timer they scheduled has ended (a
/// cancelled one ends at its cancel); pending timers that the service drops when it stops are
/// not delivered.
pub struct Expirations<T> {
    rx: mpsc::UnboundedReceiver<(String, T)>,
}

impl Scheduler {
    /// A [`TimerQueue`] that schedules timers carrying a `T`, and the [`Expirations`] stream
    /// that yields them as `(key, value)` when they are due: the `DelayQueue` pattern, for an
    /// event loop that selects over its timeouts instead of running a job for each. Each call
    /// makes a queue with a key space of its own.
    ///
    /// # Examples
    /// See [`TimerQueue`].
    pub fn queue<T: Send + 'static>(&self) -> (TimerQueue<T>, Expirations<T>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.shared().next_queue.fetch_add(1, Relaxed);
        (TimerQueue { scheduler: self.clone(), id, tx, live: Arc::default() }, Expirations { rx })
    }
}

/// Counts one of a queue's timers from the moment it is made until it ends: fired (just before
/// its value is sent), cancelled, refused or dropped by a stop.
struct Live(Arc<AtomicUsize>);

impl Live {
    fn new(live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Relaxed);
        Live(live.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A queue's timer's job: sends `(key, value)` to the stream. It finishes at once, so a firing
/// costs no task.
struct Deliver<T> {
    tx: mpsc::UnboundedSender<(String, T)>,
    value: T,
    live: Live,
}

impl<T: Send + 'static> OnceJob for Deliver<T> {
    fn call_once(self: Box<Self>, key: String) -> Option<JobFuture> {
        let Deliver { tx, value, live } = *self;
        // Ended before it is delivered, so that a received item is no longer counted.
        drop(live);
        // The receiver may be gone: then nobody wants the value.
        let _ = tx.send((key, value));
        None
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

impl<T: Send + 'static> TimerQueue<T> {
    /// Delivers `(key, value)` on the stream once `delay` has passed, counted from this call.
    /// The key is claimed when this method is called; the future reports the outcome.
    ///
    /// # Errors
    /// As [`Scheduler::schedule`], [`Error::DuplicateKey`] meaning a pending timer of this
    /// queue.
    ///
    /// # Cancel safety
    /// If this future is dropped before it completes, the timer it scheduled at the call is
    /// cancelled and `value` dropped.
    ///
    /// # Examples
    /// See [`TimerQueue`].
    pub fn schedule<K: AsRef<str>>(
        &self,
        key: K,
        delay: Duration,
        value: T,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let prepared =
            Prepared::stored(key.as_ref(), self.store(), Ok(self.scheduler.clock().after(delay)), self.deliver(value));
        self.scheduler.submit_unwatched(prepared)
    }

    /// Delivers `(key, value)` on the stream at `deadline`.
    ///
    /// # Errors
    /// As [`schedule`](Self::schedule).
    ///
    /// # Cancel safety
    /// As [`schedule`](Self::schedule).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (reviews, mut due) = timer.queue::<u32>();
    /// let at = Instant::now() + Duration::from_secs(48 * 3600);
    /// reviews.schedule_at("order-42", at, 42).await?;
    /// assert_eq!(reviews.deadline("order-42"), Some(at));
    /// assert_eq!(due.recv().await, Some(("order-42".to_string(), 42)));
    /// # Ok(()) }
    /// ```
    pub fn schedule_at<K: AsRef<str>>(
        &self,
        key: K,
        deadline: Instant,
        value: T,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let prepared =
            Prepared::stored(key.as_ref(), self.store(), Ok(self.scheduler.clock().at(deadline)), self.deliver(value));
        self.scheduler.submit_unwatched(prepared)
    }

    /// Moves the pending timer with this key to `delay` from this call, or schedules `value`
    /// under it if none is pending, as [`Scheduler::schedule_or_reset`] does: `Ok(true)` if
    /// `value` was scheduled, `Ok(false)` if a pending timer was moved (it keeps its own value;
    /// `value` is dropped). [`schedule_or_reset_handle`](Self::schedule_or_reset_handle) hands
    /// back a [`TimerHandle`] instead.
    ///
    /// # Errors
    /// As [`Scheduler::schedule_or_reset`].
    ///
    /// # Cancel safety
    /// The timer was armed or moved when the method was called; dropping the future does not
    /// undo it.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (idle, _expired) = timer.queue::<u64>();
    /// assert!(idle.schedule_or_reset("conn-7", Duration::from_secs(30), 7).await?, "armed");
    /// assert!(!idle.schedule_or_reset("conn-7", Duration::from_secs(30), 7).await?, "pushed back");
    /// # Ok(()) }
    /// ```
    pub fn schedule_or_reset<K: AsRef<str>>(
        &self,
        key: K,
        delay: Duration,
        value: T,
    ) -> impl Future<Output = Result<bool, Error>> + Send + '_ {
        let upserted = self.scheduler.upsert_stored(key.as_ref(), self.store(), delay, || self.deliver(value));
        Scheduler::report(upserted.map(|(claimed, ..)| claimed))
    }

    /// As [`schedule_or_reset`](Self::schedule_or_reset), and hands back a [`TimerHandle`] to
    /// the pending timer, new or moved, which moves it with no key lookup and can cancel it on
    /// drop (see [`Scheduler::schedule_or_reset_handle`]).
    ///
    /// # Errors
    /// As [`Scheduler::schedule_or_reset`].
    ///
    /// # Cancel safety
    /// As [`schedule_or_reset`](Self::schedule_or_reset).
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (idle, _expired) = timer.queue::<u64>();
    /// let guard = idle.schedule_or_reset_handle("conn-7", Duration::from_secs(30), 7).await?.cancel_on_drop();
    /// guard.reschedule(Duration::from_secs(30))?; // traffic
    /// drop(guard); // the connection closed
    /// assert!(idle.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn schedule_or_reset_handle<K: AsRef<str>>(
        &self,
        key: K,
        delay: Duration,
        value: T,
    ) -> impl Future<Output = Result<TimerHandle, Error>> + Send + '_ {
        let upserted = self.scheduler.upsert_stored(key.as_ref(), self.store(), delay, || self.deliver(value));
        Scheduler::report(upserted.map(|(_, key, ticket)| self.scheduler.handle(key, ticket)))
    }

    /// Cancels this queue's pending timer with this key and hands its value back, or `None` if
    /// none is pending (it was delivered, removed or never scheduled). Synchronous, like
    /// `DelayQueue::remove`: one uncontended lock; the value comes back before the call returns.
    ///
    /// # Examples
    /// See [`TimerQueue`].
    pub fn remove(&self, key: &str) -> Option<T> {
        let run = self.with_key(key, |key| self.scheduler.shared().take(key, None))?;
        let Run::Once(job) = run else {
            unreachable!("a queue's timers are one-shot");
        };
        let Ok(deliver) = job.into_any().downcast::<Deliver<T>>() else {
            unreachable!("a queue's key names its own timers");
        };
        let Deliver { value, .. } = *deliver;
        Some(value)
    }

    /// Cancels this queue's pending timer with this key, dropping its value, as
    /// [`Scheduler::cancel`] does. Returns whether one was pending.
    ///
    /// # Cancel safety
    /// As [`Scheduler::cancel`].
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (timeouts, _expired) = timer.queue::<u64>();
    /// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
    /// assert!(timeouts.cancel("conn-7").await);
    /// assert!(!timeouts.cancel("conn-7").await);
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, key: &str) -> bool {
        let cancelled = self.with_key(key, |key| self.scheduler.shared().take(key, None)).is_some();
        tokio::task::coop::consume_budget().await;
        cancelled
    }

    /// Moves this queue's pending timer with this key to `delay` after the call, as
    /// [`Scheduler::reschedule`] does.
    ///
    /// # Errors
    /// As [`Scheduler::reschedule`].
    ///
    /// # Cancel safety
    /// As [`Scheduler::reschedule`].
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (timeouts, _expired) = timer.queue::<u64>();
    /// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
    /// timeouts.reschedule("conn-7", Duration::from_secs(60)).await?;
    /// assert_eq!(timeouts.reschedule("conn-8", Duration::from_secs(1)).await, Err(Error::NotFound));
    /// # Ok(()) }
    /// ```
    pub fn reschedule<'a>(
        &'a self,
        key: &'a str,
        delay: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        let moved = check_key(key).map(|()| self.scheduler.clock().moved(Instant::now(), delay));
        self.move_timer(key, moved)
    }

    /// Moves this queue's pending timer with this key to the absolute `deadline`.
    ///
    /// # Errors
    /// As [`Scheduler::reschedule`].
    ///
    /// # Cancel safety
    /// As [`Scheduler::reschedule`].
    ///
    /// # Examples
    /// See [`deadline`](Self::deadline).
    pub fn reschedule_at<'a>(
        &'a self,
        key: &'a str,
        deadline: Instant,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.move_timer(key, check_key(key).map(|()| (self.scheduler.clock().at(deadline), deadline)))
    }

    async fn move_timer(&self, key: &str, moved: Result<(Due, Instant), Error>) -> Result<(), Error> {
        let mut stored = Vec::new();
        queue_key(self.id, key, &mut stored);
        self.scheduler.move_timer(&stored, moved).await
    }

    /// When this queue's pending timer with this key is due, or `None` if none is pending, as
    /// [`Scheduler::deadline`] says.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (timeouts, _expired) = timer.queue::<u64>();
    /// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
    /// let at = Instant::now() + Duration::from_secs(5);
    /// timeouts.reschedule_at("conn-7", at).await?;
    /// assert_eq!(timeouts.deadline("conn-7"), Some(at));
    /// assert_eq!(timeouts.deadline("conn-8"), None);
    /// # Ok(()) }
    /// ```
    pub fn deadline(&self, key: &str) -> Option<Instant> {
        let (tick, _) = self.with_key(key, |key| self.scheduler.shared().deadline(key))?;
        self.scheduler.clock().instant(tick)
    }

    /// When this queue's next timer is due (the earliest [`deadline`](Self::deadline) of its
    /// pending timers), or `None` if it has none pending.
    ///
    /// # Cost
    /// Nothing is kept up to date for it, so scheduling, moving, cancelling and firing pay
    /// nothing. A call takes each shard's lock in turn and reads its wheel in the order the
    /// buckets come due, up to the bucket of the queue's first timer there: it reads the timers
    /// (of any queue, or of the scheduler) filed to come due before this queue's next one, not
    /// every pending timer. An empty queue answers at once. Meant for an event loop's bookkeeping
    /// (a metric, a shutdown deadline) more than for every turn of a busy loop.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio::time::Instant;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (timeouts, _expired) = timer.queue::<u64>();
    /// assert_eq!(timeouts.next_deadline(), None);
    /// let start = Instant::now();
    /// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
    /// timeouts.schedule("conn-8", Duration::from_secs(10), 8).await?;
    /// assert_eq!(timeouts.next_deadline(), Some(start + Duration::from_secs(10)));
    /// timeouts.remove("conn-8");
    /// assert_eq!(timeouts.next_deadline(), timeouts.deadline("conn-7"));
    /// # Ok(()) }
    /// ```
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.is_empty() {
            return None;
        }
        let tick = self.with_key("", |prefix| self.scheduler.shared().earliest_with_prefix(prefix))?;
        self.scheduler.clock().instant(tick)
    }

    /// Whether this queue has a pending timer with this key.
    ///
    /// # Examples
    /// See [`TimerQueue`].
    pub fn contains(&self, key: &str) -> bool {
        self.with_key(key, |key| self.scheduler.shared().contains(key))
    }

    /// The scheduler this queue schedules into.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Makes the key of this queue's key space for `key`.
    fn store(&self) -> impl FnOnce(&str) -> Key {
        let id = self.id;
        move |key| Key::in_queue(id, key)
    }

    /// Calls `f` with the stored form of `key` in this queue's key space.
    fn with_key<R>(&self, key: &str, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut stored = Vec::with_capacity(key.len() + 10);
        queue_key(self.id, key, &mut stored);
        f(&stored)
    }

    /// The job of a new timer of this queue, carrying `value`.
    fn deliver(&self, value: T) -> Run {
        Run::Once(Box::new(Deliver { tx: self.tx.clone(), value, live: Live::new(&self.live) }))
    }
}

impl<T> TimerQueue<T> {
    /// How many of this queue's timers are pending: scheduled, and neither delivered nor
    /// cancelled yet.
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().start()?;
    /// let (timeouts, mut expired) = timer.queue::<u64>();
    /// timeouts.schedule("conn-7", Duration::from_secs(30), 7).await?;
    /// timer.schedule("other", Duration::from_secs(30), |_| async {}).await?;
    /// assert_eq!((timeouts.len(), timer.len()), (1, 2));
    /// expired.recv().await;
    /// assert!(timeouts.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.live.load(Relaxed)
    }

    /// Whether none of this queue's timers is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        f.debug_struct("TimerQueue").field("pending", &self.len()).finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Expirations<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expirations").field("waiting", &self.rx.len()).finish()
    }
}
