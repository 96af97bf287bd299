//! The reading calls of [`DurableScheduler`]: what is pending and when it is due, one task, the
//! wheel's figures, the leaders and the workers. The handle's scheduling calls are in
//! `scheduler.rs`, the dead letters' in `dead_letters.rs`; every Redis call these make goes
//! through `scripts`.

use std::time::{Duration, SystemTime};

use super::store::scripts;
use super::time::{unix_ms, MAX_DUE_MS};
use super::{
    DurableScheduler, DurableStats, Figures, ListCursor, ListPage, MinuteCounts, TaskInfo, TaskState, WheelKeys,
};
use crate::{Error, Lateness};

/// The most tasks one page of `list` or `due_next` holds.
pub const MAX_PAGE: usize = 1000;
/// How many minutes of figures Redis keeps (`store/lua/includes/figures.lua`'s `FIGURES_MINUTES`).
pub const FIGURES_MINUTES: usize = 120;

impl DurableScheduler {
    /// The wheel's name, as given to [`builder`](Self::builder) (or `sentinel`, `cluster`).
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::DurableScheduler;
    /// # async fn run() -> Result<(), tokio_timewheel::Error> {
    /// let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").connect().await?;
    /// assert_eq!(timers.name(), "orders");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.wheel.name()
    }

    /// Whether a task with this key is pending: waiting, ready or running (claimed by a worker
    /// and not yet acknowledged; a running task cannot be cancelled or moved).
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// if !timers.contains("order-42:review").await? {
    ///     timers.schedule("order-42:review", Duration::from_secs(60), Vec::new()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn contains(&self, key: impl AsRef<str>) -> Result<bool, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        scripts::contains(&self.wheel, &self.wheel.partition_of(key).keys, key).await
    }

    /// How many tasks are pending: scheduled and not yet acknowledged, cancelled or dead.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// println!("{} tasks pending", timers.len().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn len(&self) -> Result<usize, Error> {
        Ok(self.stats().await?.pending)
    }

    /// Whether no task is pending.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// assert!(timers.is_empty().await? == (timers.len().await? == 0));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.len().await? == 0)
    }

    /// A snapshot of the wheel's gauges and counters. With the `metrics` feature, the call also
    /// publishes the gauges (see [`metrics`]).
    ///
    /// [`metrics`]: https://docs.rs/tokio-timewheel/latest/tokio_timewheel/metrics/index.html
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let stats = timers.stats().await?;
    /// println!("{} pending, {} dead, cursor {} ticks behind", stats.pending, stats.dead, stats.cursor_lag_ticks);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn stats(&self) -> Result<DurableStats, Error> {
        let mut total = DurableStats::default();
        for part in &self.wheel.partitions {
            let stats = scripts::stats(&self.wheel, &part.keys).await?;
            self.wheel.metrics.partition(part.index).gauges(&stats);
            total.add(&stats);
        }
        Ok(total)
    }

    /// How late this process's workers claimed their deliveries over the last
    /// [`LATENESS_WINDOW`](crate::LATENESS_WINDOW) to twice that: p50, p99 and max of the claim
    /// time minus the due time ([`Task::claimed_at`](super::Task::claimed_at) minus
    /// [`Task::due`](super::Task::due), both on Redis's clock, in whole milliseconds), for every
    /// delivery claimed by a [`Worker`](super::Worker) started from this handle or a clone of it
    /// (another `connect`, in this process or another, keeps its own).
    /// Each partition's deliveries count alike.
    ///
    /// A task is claimed on the first tick at or after its due time, when a worker is free: a
    /// lateness of a tick or two is the wheel at work; more says the workers are too few or too
    /// slow for the load, or that no leader ticked for a while.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let late = timers.lateness();
    /// println!("{} claimed, p99 {:?} late", late.count, late.p99);
    /// # Ok(()) }
    /// ```
    pub fn lateness(&self) -> Lateness {
        self.wheel.lateness()
    }

    /// Reads the task under `key`: its payload, due time, deliveries so far, state and last
    /// error, whether it is pending or a dead letter; `None` if there is neither.
    ///
    /// # Examples
    /// ```no_run
    /// # use std::time::{Duration, SystemTime};
    /// # use tokio_timewheel::{durable::{DurableScheduler, TaskState}, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// timers.schedule("order-950:review", Duration::from_secs(48 * 3600), "order 950").await?;
    /// let task = timers.get("order-950:review").await?.expect("pending");
    /// assert_eq!(task.state(), TaskState::Waiting);
    /// assert_eq!(task.payload(), b"order 950");
    /// println!("due at {:?}, {} deliveries so far", task.due(), task.attempt());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn get(&self, key: impl AsRef<str>) -> Result<Option<TaskInfo>, Error> {
        let key = key.as_ref();
        crate::error::check_key(key)?;
        scripts::get(&self.wheel, &self.wheel.partition_of(key).keys, key).await
    }

    /// When the pending task under `key` is due, on Redis's clock; `None` if no task is pending
    /// under it (a dead letter is not pending). A running task answers its delivery's due time.
    ///
    /// # Errors
    /// - [`Error::Invalid`] for an empty key, or one over [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) bytes;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn deadline(&self, key: impl AsRef<str>) -> Result<Option<SystemTime>, Error> {
        Ok(self.get(key).await?.filter(|t| t.state() != TaskState::Dead).map(|t| t.due()))
    }

    /// The waiting and ready tasks due next, by due time then key, `limit` at a time (at most
    /// [`MAX_PAGE`]): pass the page's [`next`](ListPage::next) to read on. Running tasks are not
    /// listed (see [`get`](Self::get)); a task overdue and ready comes first.
    ///
    /// The one pager of the crate, as [`list`](Self::list) takes it (`after`, then `limit`), in
    /// the same order: a page's cursor is a [`Waiting`](TaskState::Waiting) one, which
    /// `list(TaskState::Waiting, ..)` reads on from too, and a cursor of the waiting or the ready
    /// tasks reads on here (both are by due time, then key).
    ///
    /// Each page takes a few bounded script calls per partition (one per 64 ticks of the ring
    /// that it reads, and one for the far tier), never a scan of the whole wheel.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let mut page = timers.due_next(None, 100).await?;
    /// loop {
    ///     for task in page.tasks() {
    ///         println!("{} due at {:?}", task.key(), task.due());
    ///     }
    ///     let Some(next) = page.next().cloned() else { break };
    ///     page = timers.due_next(Some(&next), 100).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for a `limit` of 0 or over [`MAX_PAGE`], or a cursor of a state
    ///   other than waiting or ready;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn due_next(&self, after: Option<&ListCursor>, limit: usize) -> Result<ListPage, Error> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(format!("a page holds 1 to {MAX_PAGE} tasks (got {limit})")));
        }
        if let Some(cursor) = after.filter(|c| !matches!(c.state, TaskState::Waiting | TaskState::Ready)) {
            return Err(Error::invalid(format!(
                "a cursor of {} tasks cannot page the tasks due next: give one of due_next's or of the waiting or \
                 ready tasks' pages",
                cursor.state
            )));
        }
        let (from_ms, after_key) = after.map_or((0, ""), |c| (c.score, c.key.as_str()));
        let mut tasks = Vec::new();
        for part in &self.wheel.partitions {
            tasks.extend(self.due_next_in(&part.keys, (from_ms, after_key), limit, false).await?);
        }
        tasks.sort_by(|a, b| a.due.cmp(&b.due).then_with(|| a.key.cmp(&b.key)));
        let full = tasks.len() >= limit;
        tasks.truncate(limit);
        let next = tasks.last().filter(|_| full).map(|t| ListCursor {
            state: TaskState::Waiting,
            score: unix_ms(t.due),
            key: t.key.clone(),
        });
        Ok(ListPage { tasks, next })
    }

    /// One partition's first `limit` tasks after the cursor (only the waiting ones with
    /// `waiting_only`): the ring a window of ticks at a time (its slots named), then the far tier
    /// beyond it.
    pub(super) async fn due_next_in(
        &self,
        keys: &WheelKeys,
        (from_ms, after): (u64, &str),
        limit: usize,
        waiting_only: bool,
    ) -> Result<Vec<TaskInfo>, Error> {
        const WINDOW_TICKS: u64 = 64;
        let (tick_ms, slots) = (self.wheel.cfg.tick_ms, self.wheel.cfg.slots);
        let cursor = scripts::cursor(&self.wheel, keys).await?.unwrap_or_else(|| self.wheel.clock.now_ms() / tick_ms);
        let horizon = cursor + slots;
        let mut found: Vec<TaskInfo> = Vec::new();
        let (mut from, mut after) = (from_ms, after.to_string());
        loop {
            let first = from.div_ceil(tick_ms).max(cursor + 1);
            // The ring's ticks this call reads (none beyond the ring: the far tier only).
            let (ticks, until) = if first > horizon {
                (None, MAX_DUE_MS)
            } else {
                let last = (first + WINDOW_TICKS - 1).min(horizon);
                let until = if last == horizon { MAX_DUE_MS } else { last * tick_ms };
                (Some(first..=last), until)
            };
            let want = limit - found.len();
            let got = scripts::due_next(&self.wheel, keys, (from, &after), until, ticks, want, waiting_only).await?;
            found.extend(got);
            if found.len() >= limit || until == MAX_DUE_MS {
                return Ok(found);
            }
            (from, after) = (until + 1, String::new());
        }
    }

    /// How many waiting and ready tasks fall due in each of `buckets` spans of `bucket` from
    /// `from` (on Redis's clock): the plot of what comes next. Tasks already due count in the
    /// first span. Ring slots count whole by their tick, so a task cancelled within a revolution
    /// of its due time still counts until the cursor passes it.
    ///
    /// # Errors
    /// - [`Error::Invalid`] for a bucket under a millisecond, or 0 or over 1,000 buckets;
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn due_counts(&self, from: SystemTime, bucket: Duration, buckets: usize) -> Result<Vec<u64>, Error> {
        let bucket_ms = u64::try_from(bucket.as_millis()).unwrap_or(u64::MAX);
        if bucket_ms == 0 || buckets == 0 || buckets > 1000 {
            return Err(Error::invalid("due_counts takes 1 to 1,000 buckets of at least a millisecond"));
        }
        let (tick_ms, slots) = (self.wheel.cfg.tick_ms, self.wheel.cfg.slots);
        let from_ms = unix_ms(from);
        let mut counts = vec![0u64; buckets];
        for part in &self.wheel.partitions {
            let cursor =
                scripts::cursor(&self.wheel, &part.keys).await?.unwrap_or_else(|| self.wheel.clock.now_ms() / tick_ms);
            let ticks = cursor + 1..=cursor + slots;
            let got = scripts::due_counts(&self.wheel, &part.keys, from_ms, bucket_ms, buckets, ticks).await?;
            for (c, n) in counts.iter_mut().zip(got) {
                *c += n;
            }
        }
        Ok(counts)
    }

    /// The node that leads each partition (its id, as its worker logs it), `None` for a
    /// partition no node leads now (no worker runs, or a takeover is under way).
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leaders(&self) -> Result<Vec<Option<String>>, Error> {
        let mut out = Vec::with_capacity(self.wheel.partitions.len());
        for part in &self.wheel.partitions {
            out.push(scripts::leader(&self.wheel, &part.keys).await?);
        }
        Ok(out)
    }

    /// The node ids of the workers that run on this wheel, from any node: each worker says so
    /// every 2 s, and one not heard from for 6 s is left out (a clean `shutdown` takes it out at
    /// once); on `sqlite::memory:`, whose workers all run in this process, every two hours and
    /// six. The ids are those [`leaders`](Self::leaders) names.
    ///
    /// # Errors
    /// [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn workers(&self) -> Result<Vec<String>, Error> {
        scripts::registry::heard(&self.wheel, self.wheel.clock.now_ms()).await
    }

    /// The wheel-wide figures of the last `minutes` minutes (the current one included): per
    /// minute, the deliveries handed out, acknowledged and failed and the tasks sent to the dead
    /// letters, and how late deliveries were claimed. Every node's scripts count them in Redis in
    /// the calls they make anyway (no call of their own), so any process reads the same figures,
    /// one with no worker too (an admin process, the dashboard's, the `timewheel` command line).
    /// Redis keeps [`FIGURES_MINUTES`] minutes; minutes are Redis's clock's.
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::{durable::DurableScheduler, Error};
    /// # async fn run(timers: DurableScheduler) -> Result<(), Error> {
    /// let hour = timers.figures(60).await?;
    /// let acked: u64 = hour.minutes().iter().map(|m| m.acked).sum();
    /// println!("{acked} acknowledged in the last hour, p99 claimed within {:?}", hour.lateness_quantile(0.99));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::Invalid`] for 0 minutes or more than [`FIGURES_MINUTES`];
    /// - [`Error::Redis`] if Redis failed.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn figures(&self, minutes: usize) -> Result<Figures, Error> {
        if minutes == 0 || minutes > FIGURES_MINUTES {
            return Err(Error::invalid(format!(
                "figures of {minutes} minutes: ask for 1 to {FIGURES_MINUTES} (what Redis keeps)"
            )));
        }
        let last = self.wheel.clock.now_ms() / 60_000;
        let first = last + 1 - minutes as u64;
        let mut counts = vec![[0u64; 4]; minutes];
        let mut late = [0u64; 25];
        for part in &self.wheel.partitions {
            for (field, n) in scripts::figures(&self.wheel, &part.keys).await? {
                let Some((minute, what)) = field.split_once(':') else { continue };
                let Some(minute) = minute.parse::<u64>().ok().filter(|m| (first..=last).contains(m)) else { continue };
                let i = (minute - first) as usize;
                match what {
                    "h" => counts[i][0] += n,
                    "a" => counts[i][1] += n,
                    "f" => counts[i][2] += n,
                    "d" => counts[i][3] += n,
                    _ => {
                        if let Some(b) = what.strip_prefix('l').and_then(|b| b.parse::<usize>().ok()) {
                            late[b.min(late.len() - 1)] += n;
                        }
                    }
                }
            }
        }
        let minutes = counts
            .iter()
            .enumerate()
            .map(|(i, &[handed_out, acked, failed, dead])| MinuteCounts {
                start: SystemTime::UNIX_EPOCH + Duration::from_secs((first + i as u64) * 60),
                handed_out,
                acked,
                failed,
                dead,
            })
            .collect();
        // Bucket b holds [2^(b-1), 2^b) ms (bucket 0 under 1 ms); the last is open-ended.
        let lateness = late
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(b, &n)| (if b + 1 == late.len() { Duration::MAX } else { Duration::from_millis(1 << b) }, n))
            .collect();
        Ok(Figures { minutes, lateness })
    }
}
