//! A durable timing wheel kept in Redis, shared by many nodes: timers that survive restarts and
//! deploys, handed to workers at least once.
//!
//! The in-process [`Scheduler`](crate::Scheduler) loses its timers when the process ends. A
//! durable wheel keeps them in Redis: a task scheduled for "48 hours after delivery" fires even
//! if every node was redeployed in between. Any number of nodes connect to the same wheel (by
//! its name); one at a time, elected through a lease in Redis, moves the cursor; all of them run
//! handlers.
//!
//! # Examples
//! ```no_run
//! use std::time::Duration;
//! use tokio_timewheel::durable::{DurableScheduler, Task};
//!
//! # async fn run() -> Result<(), tokio_timewheel::Error> {
//! let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders")
//!     .tick(Duration::from_secs(1))
//!     .slots(3600)
//!     .connect()
//!     .await?;
//! timers.schedule("order-42:review", Duration::from_secs(48 * 3600), b"order-42".to_vec()).await?;
//!
//! // On every node that does the work:
//! let worker = timers.run(|task: Task| async move {
//!     println!("review {} (attempt {})", task.key(), task.attempt());
//!     Ok::<(), std::io::Error>(())
//! });
//! // ... and when the node stops:
//! worker.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Semantics
//! - **Keys** are unique among pending tasks, as in the in-process scheduler: scheduling a key
//!   that is pending is [`Error::DuplicateKey`](crate::Error::DuplicateKey); the key is free
//!   again once its task is acknowledged, cancelled or dead.
//! - **Time is Redis's.** Every script reads Redis's `TIME`: a task is due `delay` after the
//!   call reaches Redis, and `schedule_at` and [`Task::due`] are on Redis's clock. The clocks of
//!   the nodes never matter. A task is never handed out before its due time; it is handed out on
//!   the first tick at or after it (within one tick and a round trip, when a worker is free).
//! - **At least once.** A worker claims a due task with a lease on Redis's clock, runs the
//!   handler and acknowledges. A task whose worker died, or whose handler outran the lease, is
//!   handed out again with [`Task::attempt`] one higher; no task is handed out twice while a
//!   lease on it is live, and a worker whose lease ran out cannot acknowledge the next holder's
//!   delivery. So a handler can run more than once for one task: **make handlers idempotent on
//!   the key** (an upsert, a conditional update, a processed-keys table).
//! - **Cancel and reschedule take back only what has not started.** A task is *waiting* (in the
//!   wheel), *ready* (due, not yet claimed) or *running* (claimed by a worker under a live
//!   lease). [`cancel`](DurableScheduler::cancel) answers `true` for a waiting or ready task, and
//!   then no handler of it starts after the call returns, on any node; it answers `false` for a
//!   running task, which it leaves to its lease (acknowledged on success, retried on failure),
//!   and for no task. [`reschedule`](DurableScheduler::reschedule) moves a waiting or ready task
//!   and answers [`Error::NotFound`](crate::Error::NotFound) for a running one. A task whose
//!   lease ran out is no longer running: it is cancelled or moved, and its late handler's
//!   acknowledgement changes nothing.
//! - **Failures** (an `Err` or a panic in the handler) are retried after `backoff * 2^(n-1)`
//!   (at most [`MAX_BACKOFF`]) until `max_attempts` deliveries; then the task goes to the dead
//!   letters, which [`DurableScheduler::dead_letters`] lists and
//!   [`DurableScheduler::requeue_dead`] puts back.
//! - **One leader ticks.** Workers compete for a lease in Redis; the holder moves the cursor
//!   every tick and renews the lease as it does. Each leadership carries a fencing token that
//!   every cursor-moving script checks, so a leader that was paused or cut off past its lease is
//!   refused and steps down; another worker takes over within the lease (at most 10 s: a long
//!   lease for slow handlers does not leave the wheel unticked that long). The moves are atomic
//!   scripts, so even two nodes ticking at once hand every task out once.
//! - **Downtime.** When no worker ran for a while (longer than a revolution, even), the next
//!   leader catches up in bounded steps: every overdue task fires once, none early.
//! - **Bounded work.** Every script does a bounded amount of work per call (at most 128 tasks,
//!   or 64 ticks) and tells the caller to call again, so a million tasks due at once never
//!   block Redis for long. An idle wheel costs O(1) Redis calls per tick: one tick call by the
//!   leader; each other worker bids for the lead four times per leadership lease, just after
//!   the holder's runs out, and at once when an idle worker of its node hears that the holder
//!   gave it up; not every tick; and each idle worker blocks for a wake-up on
//!   a connection of its own, pushed whenever tasks become ready, and claims when one arrives or,
//!   as a safety net, after a third of the leadership lease without one (BENCHMARKS.md counts
//!   the calls of an idle wheel).
//!
//! # Errors and retries
//! Redis failures are [`Error::Redis`](crate::Error::Redis). Every call retries transient ones
//! (a dropped connection, a timeout, `LOADING`, `BUSY`, `TRYAGAIN`, ...) by itself for up to the
//! connect timeout, and every script is safe to run twice: a `schedule` carries a request id, so
//! a retry whose first attempt did land returns `Ok` and creates no second task. When a call
//! still fails, [`Error::is_retryable`](crate::Error::is_retryable) tells what to do: when it
//! is true Redis is away or overloaded for now, so wait (a second, say, backing off) and make
//! the same call again; a `schedule` repeated this way that reports `DuplicateKey` means the
//! earlier attempt did land. When it is false, trying again will not help: fix the input, the
//! settings or the server. Workers keep retrying with a backoff while Redis is away
//! and resume when it returns; nothing is lost (what was acknowledged stays acknowledged, what
//! was not is handed out again after its lease).
//!
//! # Watching it
//! [`DurableScheduler::stats`] reads the counts by state and the counters;
//! [`DurableScheduler::lateness`] says how late this process's workers claimed their
//! deliveries; [`DurableScheduler::dead_letters`] lists the tasks that failed for good. With the
//! `metrics` feature the same figures go to the application's metrics exporter (see
//! [`metrics`]), and with the `dashboard` feature [`dashboard::router`] is a web page of them to
//! mount in the application's server. Handlers run inside a `tracing` span with the key and the
//! attempt.
//!
//! [`metrics`]: https://docs.rs/tokio-timewheel/latest/tokio_timewheel/metrics/index.html
//! [`dashboard::router`]: https://docs.rs/tokio-timewheel/latest/tokio_timewheel/durable/dashboard/fn.router.html
//!
//! # Redis settings
//! - **Redis 6.2 or later** (`connect` checks).
//! - **`appendonly yes`**: without the append-only file a restart loses every task scheduled
//!   since the last snapshot. With `appendfsync everysec` a crash of the machine (not of Redis
//!   alone) can lose the last second of writes; `appendfsync always` loses none, at a cost in
//!   throughput. `connect` warns through `tracing` when `appendonly` is off.
//! - **`maxmemory-policy noeviction`**: any other policy lets Redis delete tasks under memory
//!   pressure. `connect` warns when it is not set; with `noeviction` a full Redis refuses new
//!   tasks with an error instead.
//! - **Replicas:** a failover can lose writes not yet replicated. To make a `schedule` survive a
//!   failover, have it `WAIT` for the replicas with [`DurableBuilder::wait_for_replicas`]
//!   (`WAIT` counts the writes of the connection it runs on, so it has to be the wheel's own),
//!   and set `min-replicas-to-write 1` on the primary so that an old primary cut off from its
//!   replicas refuses writes.
//!
//! # Deployments
//! Every setting and every method works the same on each of these, and over TLS:
//! - **One node** ([`DurableScheduler::builder`]): `redis://host:port/db`, or `rediss://` for TLS,
//!   verified against the system's roots or [`DurableBuilder::tls_root_ca`], with
//!   [`DurableBuilder::tls_client_auth`] for mutual TLS. A URL that names a replica is refused
//!   (`READONLY`), and one that names a cluster node says to use `cluster`.
//! - **Redis Sentinel** ([`DurableScheduler::sentinel`]): the sentinels' URLs and the master's
//!   name. The wheel follows every failover: after a dropped connection, a timeout or
//!   `READONLY` it asks the sentinels again and checks `ROLE` before it writes to a node, so a
//!   revived old primary is never written to; the workers' wake-up connections follow too.
//! - **Redis Cluster** ([`DurableScheduler::cluster`]): any seed nodes. `MOVED` and `ASK` are
//!   followed, never returned; commands with no key go to the primary of the wheel's slot.
//!   Every key a partition uses shares one hash tag, so one partition lives on one slot.
//! - **Partitions** ([`DurableBuilder::partitions`]): one busy wheel split into `n` wheels under
//!   their own hash tags, so a cluster spreads it over its primaries.
//!
//! During a failover or a slot migration every error a call returns is retryable
//! ([`Error::is_retryable`](crate::Error::is_retryable)). Tested on Redis 7.0 (Debian's).
//!
//! # Redis layout
//! For the wheel `orders` every key starts with `tw:{orders}:`; [`WheelKeys`] names them:
//!
//! | key            | type   | holds |
//! |----------------|--------|-------|
//! | `meta`         | hash   | `tick_ms`, `slots` (a node with other values is refused) and the counters of [`DurableStats`] |
//! | `cursor`       | string | the last tick processed: every task due at or before it has left the ring |
//! | `ring`         | string | how many tasks the ring's slots hold together |
//! | `slot:<i>`     | zset   | keys of the tasks due at the tick `t` with `t % slots == i`, for `t` in `cursor+1 ..= cursor+slots`, scored by due ms |
//! | `far`          | zset   | keys of the tasks due later, scored by due ms; promoted into the ring as the cursor nears |
//! | `ready`        | zset   | due keys waiting for a worker, scored by due time in ms (oldest first) |
//! | `leased`       | zset   | claimed keys, scored by lease expiry in ms on Redis's clock |
//! | `t:<key>`      | hash   | one task: payload `p`, due ms `due`, due tick `tick` (absolute, never a rounds count), deliveries `a`, claim token `tok`, request id `rid`, last error `err` |
//! | `done:<key>`   | string | the request id of a task just finished (and `/<cancel id>` if it was cancelled), for a minute or more, so a late retry of its `schedule` or `cancel` is recognised |
//! | `dead`         | zset   | dead keys, scored by when they died |
//! | `d:<key>`      | hash   | one dead letter: payload, deliveries, last error |
//! | `leader`       | string | `<node>:<epoch>` of the node ticking the wheel, expiring after the lease |
//! | `epoch`        | string | leaderships so far; the fencing token's counter |
//! | `seq`          | string | claim tokens handed out so far |
//! | `claim:<id>`   | list   | the keys and claim tokens one claim took, for a lease, so that a retry of the claim gets them back |
//! | `wake`         | list   | wake-up tokens for idle workers, pushed when tasks become ready |
//! | `lead`         | list   | a token pushed when a leader gives up the lead, so that an idle worker's node bids at once |
//!
//! A task is due at `due_ms` and placed at tick `ceil(due_ms / tick_ms)`; the cursor reaches
//! that tick when Redis's clock has passed it, so nothing is ever early. Cancel and reschedule
//! remove a task from its slot, the far tier, the ready set or (when its lease ran out) the leased set with `ZREM`: O(log n),
//! never a scan. Moving a tick's tasks on is one `ZPOPMIN` and one `ZADD` for the lot.

// Each file imports only from those below it in the layering of docs/DESIGN.md (from the bottom:
// time, config, keys, ids, task, link, conn, wheel, scripts, leader, worker, scheduler, connect,
// builder, dashboard), which `tests::no_import_runs_back_up` checks.
mod builder;
mod config;
mod conn;
mod connect;
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard;
mod ids;
mod keys;
mod leader;
mod link;
mod scheduler;
mod scripts;
mod task;
#[cfg(test)]
mod tests;
mod time;
mod wheel;
mod worker;

pub use crate::error::RedisFailure;
pub use builder::DurableBuilder;
pub use config::{
    DEFAULT_BACKOFF, DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SLOTS, DEFAULT_TICK, MAX_BACKOFF, MAX_PARTITIONS, MAX_SLOTS,
};
pub use keys::WheelKeys;
pub use scheduler::DurableScheduler;
pub use task::{DeadTask, DurableStats, Task};
pub use worker::Worker;
