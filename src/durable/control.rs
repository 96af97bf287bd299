//! The calls that control a running wheel, an `impl` block of [`DurableScheduler`] of their own:
//! pausing and resuming the workers' claims, and cancelling a running task's handler. Every Redis
//! call these make goes through `scripts`.

use super::store::scripts::{self, control, wake};
use super::DurableScheduler;
use crate::Error;

impl DurableScheduler {
    /// Pauses the wheel: from now on no worker, on any node, claims a task, until
    /// [`resume`](Self::resume). Handlers already running finish and their outcomes are recorded,
    /// and a worker runs what it claimed ahead; the leader goes on ticking, so tasks fall due and
    /// wait, ready, and `schedule`, `cancel` and the other calls work as ever.
    ///
    /// The pause is kept in Redis (a field of each partition's `meta` hash), so it holds across
    /// restarts of every node, and for workers that start later. A partitioned wheel is paused a
    /// partition after another: should the call fail part way, call it again.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// timers.pause().await?; // while a downstream service is down
    /// assert!(timers.is_paused().await?);
    /// // ...
    /// timers.resume().await?; // the workers claim what fell due meanwhile, at once
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed (some partitions may be paused already).
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still pause the wheel, or part of it.
    pub async fn pause(&self) -> Result<(), Error> {
        for part in &self.wheel.partitions {
            control::set_paused(&self.wheel, &part.keys, true).await?;
            self.wheel.conn.replicate(&part.keys.meta()).await?;
        }
        Ok(())
    }

    /// Resumes a wheel that [`pause`](Self::pause) paused, and wakes its idle workers at once, so
    /// the tasks that fell due meanwhile are claimed without waiting for the next tick. Resuming
    /// a wheel that is not paused changes nothing.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if timers.is_paused().await? {
    ///     timers.resume().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed (some partitions may be resumed already).
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still resume the wheel, or part of it.
    pub async fn resume(&self) -> Result<(), Error> {
        for part in &self.wheel.partitions {
            control::set_paused(&self.wheel, &part.keys, false).await?;
            wake::push_tokens(&self.wheel, &part.keys.wake(), scripts::WAKE_TOKENS).await;
        }
        Ok(())
    }

    /// Whether the wheel is paused: any of its partitions (all of them, unless a
    /// [`pause`](Self::pause) or [`resume`](Self::resume) failed part way).
    /// [`stats`](Self::stats) says it too.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// println!("paused: {}", timers.is_paused().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_paused(&self) -> Result<bool, Error> {
        for part in &self.wheel.partitions {
            if control::is_paused(&self.wheel, &part.keys).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Asks the handler of the running task `key` to stop: the [cancellation
    /// token](super::Task::cancel_token) of its delivery is cancelled, on whichever node runs it
    /// (within a round trip of Redis's: every worker follows the requests as they come), and
    /// whatever the handler then returns, `Ok` or `Err`, the task ends as cancelled: it is
    /// removed, neither retried nor a dead letter, and counted in
    /// [`DurableStats::cancelled`](super::DurableStats::cancelled). A task claimed ahead by a
    /// worker and not started yet does not start. A recurring task's series ends with it.
    ///
    /// Returns true if the task was running (claimed, under a live lease), false if not: a task
    /// waiting or ready is not touched (that is [`cancel`](Self::cancel)'s work), nor one whose
    /// lease ran out. The handler is not dropped: one that does not watch its token runs on until
    /// it returns, and its task stays leased meanwhile. Should its worker die first, the task ends
    /// as cancelled when its lease runs out, rather than being handed out again.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// // Not yet running: take it back; running: stop its handler.
    /// if !timers.cancel("export-7").await? && timers.cancel_running("export-7").await? {
    ///     println!("export-7's handler was told to stop");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still cancel the handler.
    pub async fn cancel_running(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        control::cancel_running(&self.wheel, &self.wheel.partition_of(key).keys, key).await
    }
}
