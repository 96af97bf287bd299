//! The dead-letter calls, an `impl` block of [`DurableScheduler`] of their own: listing the dead
//! letters, putting one back and deleting one. Every Redis call these make goes through `scripts`.

use super::store::scripts::{self, Requeued};
use super::{DeadTask, DurableScheduler};
use crate::Error;

/// How many dead letters one `dead_letters` script call reads at most (payloads included).
const DEAD_LETTERS_PAGE: usize = 128;

impl DurableScheduler {
    /// Up to `limit` dead letters, oldest first (read a page of 128 per call, so a large
    /// `limit` does not hold Redis up; a list that changes meanwhile can skip or repeat one).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// for dead in timers.dead_letters(100).await? {
    ///     println!("{} died after {} attempts: {}", dead.key(), dead.attempts(), dead.last_error());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadTask>, Error> {
        let mut out = Vec::new();
        // Each partition's oldest `limit`, a page per call (so a large `limit` never holds Redis
        // up for long), then the oldest `limit` of them all.
        for part in &self.wheel.partitions {
            let mut read = 0;
            while read < limit {
                let page = (limit - read).min(DEAD_LETTERS_PAGE);
                let got = scripts::dead_letters(&self.wheel, &part.keys, page, read).await?;
                let full = got.len() == page;
                read += got.len();
                out.extend(got);
                if !full {
                    break;
                }
            }
        }
        out.sort_by(|a, b| a.died.cmp(&b.died).then_with(|| a.key.cmp(&b.key)));
        out.truncate(limit);
        Ok(out)
    }

    /// Puts the dead task under `key` back, due at once with its attempts reset to 0. Returns
    /// whether there was such a dead letter (true also when a retry after an ambiguous failure
    /// finds that its first attempt did put it back).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// for dead in timers.dead_letters(100).await? {
    ///     timers.requeue_dead(dead.key()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::DuplicateKey`] if a new task with this key is pending (the dead letter stays);
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still requeue the task.
    pub async fn requeue_dead(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        let keys = &self.wheel.partition_of(key).keys;
        match scripts::requeue_dead(&self.wheel, keys, key, &self.wheel.ids.next()).await? {
            Requeued::Yes => self.wheel.conn.replicate(&keys.meta()).await.map(|()| true),
            Requeued::KeyPending => Err(Error::DuplicateKey(key.to_string())),
            Requeued::NotDead => Ok(false),
        }
    }

    /// Deletes the dead letter under `key` for good; false if there was none.
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Dropping the future after the request was sent may still delete it.
    pub async fn delete_dead(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        let keys = &self.wheel.partition_of(key).keys;
        let deleted = scripts::delete_dead(&self.wheel, keys, key).await?;
        if deleted {
            self.wheel.conn.replicate(&keys.meta()).await?;
        }
        Ok(deleted)
    }
}
