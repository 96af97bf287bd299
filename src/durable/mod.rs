//! A durable timing wheel: timers that survive restarts and deploys, handed to workers at least
//! once, kept in an embedded SQLite file (feature `sqlite`) or in Redis/Valkey (feature `redis`).
//!
//! The in-process [`Scheduler`](crate::Scheduler) loses its timers when the process ends. A
//! durable wheel keeps them in a store: a task scheduled for "48 hours after delivery" fires
//! even if every node was redeployed in between. Any number of nodes connect to the same wheel
//! (by its name); one at a time, elected through a lease in the store, moves the cursor; all of
//! them run handlers.
//!
//! The guide walks through it: [a node from start to stop](crate::guide::durable_mode), and
//! [operating a running wheel](crate::guide::operating). This page holds the rules.
//!
//! # Stores
//! One API over two stores; moving from one to the other is a change of URL.
//!
//! | URL | store | for |
//! |---|---|---|
//! | `sqlite:data/orders.db` (or `sqlite://<path>`) | a SQLite file, created with its folders if missing | one host: one process, or several that open the same file (a CLI and a dashboard among them) |
//! | `sqlite::memory:` | this process's memory, for this `connect` and its clones | tests: its clock is Tokio's, so it runs on paused time |
//! | `redis://`, `rediss://`, [Sentinel](DurableScheduler::sentinel), [Cluster](DurableScheduler::cluster) | Redis 6.2+ or Valkey | nodes on several hosts, or a wheel shared by services |
//!
//! Both run the same Lua scripts, so every rule below holds on both. What differs:
//! - **Durability.** A SQLite file commits in WAL mode; by default ([`Durability::Process`]) a
//!   call returns once its change survives the death of the process (`kill -9`), and a power
//!   loss may take the last commits (never half of one). [`Durability::PowerLoss`] flushes every
//!   commit to the disk first. Calls that arrive together share one transaction and one flush,
//!   so a thousand concurrent callers pay for one. Redis keeps what its own `appendonly` and
//!   `appendfsync` say.
//! - **Clock.** "The store's clock" below is Redis's `TIME`, a file's wall clock, or, for
//!   `sqlite::memory:`, Tokio's (from the wall-clock time at `connect`). Under
//!   `#[tokio::test(start_paused = true)]` a task due in 48 hours runs, once, as soon as the
//!   runtime is idle: an idle wheel in memory sleeps until its next due time (its leader is
//!   woken by every change the process makes), so two days of paused time take a fraction of
//!   a second. `connect` to any other store on a paused clock fails at once, saying so.
//! - **Sharing.** Processes that open one file share the wheel through SQLite's locks; they
//!   learn of each other's pushes by polling every 25 ms (a worker in the same process wakes at
//!   once). A `sqlite::memory:` wheel lives and dies with its `connect`.
//! - **Pace in memory.** On `sqlite::memory:` no other process can lead or add a task, so the
//!   rules below on ticking, takeovers and idle costs read differently there: the leader ticks
//!   only when a tick has work (or every two hours, to renew its 6-hour lead), a leader that
//!   stops hands over at once (the change wakes the others), an idle wheel makes about 25
//!   calls every two hours, and the cursor stands still while nothing is due (its lag in
//!   [`DurableStats`] says nothing there).
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
//!   that is pending is [`Error::DuplicateKey`]; the key is free
//!   again once its task is acknowledged, cancelled or dead.
//! - **Time is the store's.** Every script reads the store's clock (Redis's `TIME`): a task is
//!   due `delay` after the call reaches the store, and `schedule_at` and [`Task::due`] are on
//!   its clock. The clocks of the nodes never matter. A task is never handed out before its due time; it is handed out
//!   at it, within a round trip and a few milliseconds when a worker is free, not on the next tick: the leader moves
//!   each tick's tasks to `ready` a tick before it begins, and a worker claims each once the store's clock reaches its
//!   due time (one worker of the wheel's, the first told of that time; [`DurableBuilder::tick`]).
//! - **At least once.** A worker claims a due task with a lease on Redis's clock, runs the
//!   handler and acknowledges. While the handler runs, the worker renews its lease every third
//!   of the lease, so a handler may run longer than the lease (up to
//!   [`DurableBuilder::handler_timeout`], after which it is dropped and its delivery fails). A
//!   task whose worker died or was cut off from Redis (or paused) past its lease is handed out
//!   again, within about one lease, with [`Task::attempt`] one higher; no task is handed out
//!   twice while a lease on it is live, a renewal from a worker whose lease already went to
//!   another is refused (and logged), and such a worker cannot acknowledge the next holder's
//!   delivery. A handler that finishes is acknowledged whether or not its worker is shutting
//!   down. So a handler can run more than once for one task: **make handlers idempotent on the
//!   key** (an upsert, a conditional update, a processed-keys table).
//! - **Cancel and reschedule take back only what has not started.** A task is *waiting* (in the
//!   wheel), *ready* (due, not yet claimed) or *running* (claimed by a worker under a live
//!   lease: its handler runs, or it waits in the worker's short buffer of tasks claimed ahead of
//!   its free handlers, [`prefetch`](DurableBuilder::prefetch)). [`cancel`](DurableScheduler::cancel) answers `true` for a waiting or ready task, and
//!   then no handler of it starts after the call returns, on any node; it answers `false` for a
//!   running task, which it leaves to its lease (acknowledged on success, retried on failure),
//!   and for no task. [`reschedule`](DurableScheduler::reschedule) moves a waiting or ready task
//!   and answers [`Error::NotFound`] for a running one. A task whose
//!   lease ran out is no longer running: it is cancelled or moved, and its late handler's
//!   acknowledgement changes nothing.
//! - **Recurring tasks** ([`DurableScheduler::schedule_recurring`] with a [`Recurrence`]: a cron
//!   expression in a time zone with the `cron` feature, or a fixed rate) are one task whose runs
//!   follow one another: the end of a run places the next in the same script, worked out by the
//!   node that ran it (a fixed rate without an end, by Redis), so no run is handed out twice
//!   whatever nodes race. After an outage a series runs once for its missed runs, then on its
//!   schedule again ([`MissedRuns::Skip`], the default here).
//!   [`DurableScheduler::upsert_recurring`] keeps the same series as it is (its next run too)
//!   and replaces another whole, atomically; a run in flight (running, its lease run out, or
//!   waiting for its retry) is finished first, and the new series takes over after it.
//! - **Failures** (an `Err`, a panic, or a run past the handler timeout) are retried after `backoff * 2^(n-1)`
//!   (at most [`MAX_BACKOFF`]) until `max_attempts` deliveries; then the task goes to the dead
//!   letters, which [`DurableScheduler::dead_letters`] lists and
//!   [`DurableScheduler::requeue_dead`] puts back. `max_attempts` and `backoff` are the node's
//!   ([`DurableBuilder`]), or the task's own when it was scheduled with [`TaskOptions`]
//!   ([`DurableScheduler::with_options`]).
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
//!   the calls of an idle wheel). A worker with handlers running adds one call per partition
//!   every third of the lease, which renews all their leases.
//!
//! # Running workers
//! [`DurableScheduler::run`] starts a [`Worker`] on the current runtime.
//! [`Worker::ready`] waits until it runs (its first bid for the leadership and its first claim
//! answered by Redis); [`Worker::is_leader`] tells whether it ticks the wheel, and
//! [`Worker::partitions_led`] how many partitions of a partitioned wheel it ticks.
//! [`Worker::shutdown`] stops claiming and returns once every handler has finished (the tasks it
//! claimed ahead of them run too) and its outcome is recorded; [`Worker::shutdown_timeout`] returns within a bound, dropping the
//! handlers still running then and giving their leases back, so their tasks are handed out
//! again on the next tick.
//!
//! # Typed payloads
//! Payloads are bytes ([`IntoPayload`]). With the `serde` feature, a payload [`Json`]`(&value)`
//! is any `Serialize` value written as JSON, wherever a payload goes (`schedule`, `schedule_at`,
//! `schedule_many`, `schedule_or_reset`, `schedule_recurring`, `upsert_recurring`, ...), and
//! [`Task::json`] (or [`DeadTask::json`]) reads it back; a payload
//! that is not the JSON of the type asked for is [`Error::Payload`],
//! which a handler can return with `?` to fail the delivery.
//!
//! ```no_run
//! # #[cfg(feature = "serde")]
//! # async fn run(timers: tokio_timewheel::durable::DurableScheduler) -> Result<(), tokio_timewheel::durable::Error> {
//! use std::time::Duration;
//! use tokio_timewheel::durable::{Error, Json, Task};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Review {
//!     order: u64,
//! }
//!
//! timers.schedule("order-42:review", Duration::from_secs(48 * 3600), Json(&Review { order: 42 })).await?;
//! let worker = timers.run(|task: Task| async move {
//!     let review: Review = task.json()?;
//!     println!("review order {}", review.order);
//!     Ok::<(), Error>(())
//! });
//! worker.ready().await;
//! # Ok(()) }
//! ```
//!
//! # Errors and retries
//! Redis failures are [`Error::Redis`]. Every call retries transient ones
//! (a dropped connection, a timeout, `LOADING`, `BUSY`, `TRYAGAIN`, ...) by itself for up to the
//! connect timeout ([`DurableBuilder::connect_timeout`] bounds both `connect` and every call's
//! retries), and every script is safe to run twice: a `schedule` carries a request id, so
//! a retry whose first attempt did land returns `Ok` and creates no second task. When a call
//! still fails, [`Error::is_retryable`] tells what to do: when it
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
//! attempt; with the `opentelemetry` feature that span is linked to the span that scheduled the
//! task (or its child: `DurableBuilder::trace_parent`), whose trace context the task keeps.
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
//! ([`Error::is_retryable`]). Tested on Redis 7.0 (Debian 12's `redis-server`): one node, TLS,
//! Sentinel and a 3-primary cluster; and on Valkey 8.1, all but TLS, which the Valkey build the
//! tests use lacks. The scripts declare every key they touch (see [Redis layout](#redis-layout)),
//! which the crate's tests check by running every script behind a guard that refuses an
//! undeclared key, as servers that enforce declarations do.
//!
//! # Redis layout
//! For the wheel `orders` every key starts with `tw:{orders}:`; [`WheelKeys`] names them. Every
//! key a script touches is declared in its `KEYS` (the fixed keys below, in this order, then the
//! call's own: its retry record or claim records, and the ring slots it may write), so the
//! scripts are correct on Redis Cluster and on servers that refuse undeclared keys. The text of
//! each entry (the record, the dead letter, the history's runs, ...) is one table in the
//! repository's docs/DESIGN.md ("The stored formats"), with the code that writes and reads each.
//!
//! | key            | type   | holds |
//! |----------------|--------|-------|
//! | `meta`         | hash   | `tick_ms`, `slots`, `partitions` (a node with other values is refused), `layout`, the counters of [`DurableStats`], `history_seq` and `history_dropped` (the runs the history took and dropped), and `paused` while [`DurableScheduler::pause`] holds |
//! | `cursor`       | string | the last tick processed: every task due at or before it has left the ring |
//! | `tasks`        | hash   | the pending tasks (waiting, ready or running) by key, each a record: due time, deliveries, claim token, series, optional fields (spec, trace, retry settings, a debounce burst's cap), last error, payload |
//! | `ring`         | string | how many entries the ring's slots hold together |
//! | `far`          | zset   | keys of the tasks due beyond the ring's revolution, scored by due ms; promoted into the ring as the cursor nears |
//! | `ready`        | zset   | due keys waiting for a worker, scored by due time in ms (oldest first); a task a [`Limit`] holds back is scored 2^50 above its due time, after every other, until the tick finds it room |
//! | `leased`       | zset   | one lease per claim call: the call's first claim token, scored by the lease's end in ms on Redis's clock, there while any task the call took is still claimed |
//! | `dead`         | zset   | dead keys, scored by when they died |
//! | `dead_tasks`   | hash   | the dead letters by key: due time, deliveries, retry settings, last error, payload |
//! | `leader`       | string | the fencing token (node and epoch) of the node ticking the wheel, expiring after the lease |
//! | `epoch`        | string | leaderships so far; the fencing token's counter |
//! | `seq`          | string | claim tokens handed out so far |
//! | `wake`         | list   | wake-up tokens for idle workers, pushed when tasks become ready |
//! | `lead`         | list   | a token pushed when a leader gives up the lead, so that an idle worker's node bids at once |
//! | `figures`      | hash   | the wheel-wide figures a minute (handed out, acknowledged, failed, dead, and claims by lateness bucket), counted by the scripts that do the work and kept two hours; read by [`DurableScheduler::figures`] |
//! | `upserts`      | hash   | a series upserted while a run of its key was in flight, by key: the record that takes the series' place when the run ends ([`DurableScheduler::upsert_recurring`]) |
//! | `cancelling`   | hash   | the running tasks whose cancel [`DurableScheduler::cancel_running`] requested, by key: the claim token of the delivery to cancel; gone when its outcome lands |
//! | `cancels`      | stream | the cancel requests (`key`, `token`), about the last 1,000, which every worker follows to cancel its handlers' tokens at once |
//! | `claimed`      | zset   | the running tasks' keys by claim token (a key is here exactly while its record's claim token is not 0): the order they were claimed in, which [`DurableScheduler::list`] lists them in, and what a retried claim finds its tasks by (its record holds its tokens' range) |
//! | `claims`       | zset   | the claim calls running tasks came from (first token, tasks, when, node) scored by first token (a call's tokens are consecutive); those before the oldest running task's go at the next claim |
//! | `history`      | list   | the runs that ended (acknowledged, dead, cancelled while running, or snoozed), oldest first: when each ended, its outcome, due time, attempts, handler's start and time, key and error (`meta`'s `history_seq` counts them, `history_dropped` those the bounds dropped); the last [`DurableBuilder::history_limit`] runs, none older than [`DurableBuilder::history_age`]; read by [`DurableScheduler::list`] as [`TaskState::Finished`] |
//! | `limits`       | hash   | the limits by key prefix ([`DurableScheduler::set_limit`]), with the notes that enforce them (a rate limit's next free start, which tasks run under a running limit and when it last gained room) |
//! | `workers`      | zset   | the node ids of the workers that run, scored by when each last said so (every 2 s; two hours on `sqlite::memory:`); read by [`DurableScheduler::workers`], nothing else depends on it |
//! | `slot:<i>`     | list   | keys of the tasks due at the tick `t` with `t % slots == i`, for `t` in `cursor+1 ..= cursor+slots` (the slot's tick is their due time, to the tick; the record has the ms) |
//! | `req:<id>`     | string | what the call `id` answered, for a minute or more, so that its retry answers the same and changes nothing |
//! | `claim:<id>`   | string | when one claim ran and the range of claim tokens it gave, for a lease, so that a retry of the claim gets back the tasks `claimed` still holds under them |
//!
//! A task is due at `due_ms` and placed at tick `ceil(due_ms / tick_ms)`; the cursor reaches
//! that tick when Redis's clock has passed it, so nothing is ever early.
//!
//! What Redis does per task, and why:
//! - `schedule`: per call, one `HMGET` (which keys are pending) and one `HSET` (the new records),
//!   one `RPUSH` per ring slot the call's tasks go to, and a `ZADD` each for the far tier and
//!   `ready`, the counters, the wake-up and the retry record; so per task a field in each hash
//!   command and usually an `RPUSH` of its own (tasks of one tick share theirs). Retry safety
//!   costs one `SET` per call, not a read per task: a retried call finds its answer under its
//!   request id. The caller names the slots its tasks may go to from its estimate of Redis's
//!   clock (within 25 ms); a task whose slot it did not name waits in the far tier instead, and
//!   is promoted into the ring as the cursor nears. The numbers travel packed (the slots' indices
//!   and the tasks' times as two MessagePack arrays, read by `cmsgpack`), and the answer is one
//!   digit per task in one string: parsing and formatting numbers one argument at a time had
//!   been a fifth of Redis's work per task.
//! - `cancel`: one `HMGET`, one `HDEL` and a `ZREM` from the far tier and from `ready` for the
//!   lot, and for a claimed task a look-up of its claim call's lease (and, if it ran out, a
//!   `ZREM` from `claimed`); `reschedule`: an `HGET` and an `HSET` per task and those `ZREM`s for the lot. The
//!   task's entry in its ring slot is left there: the caller cannot name a slot it does not
//!   know, and the cursor drops an entry whose task's record no longer places it at that tick
//!   (unclaimed) when it passes it. So a cancelled task holds its slot entry (its key and a few
//!   bytes) until its due time, and `cancel` costs O(1) plus a far-tier or `ready` `ZREM`:
//!   O(log n), never a scan.
//! - the leader's tick: per slot it steps, one `LPOP` (up to its budget), one `HMGET` (each
//!   entry checked against its record), one `ZADD` to `ready` and an `EXISTS`; far-tier tasks it
//!   promotes go in one `RPUSH` per slot.
//! - a claim: one `ZRANGE` and one `ZREMRANGEBYRANK` of `ready`, one `HMGET` and one `HSET`
//!   (each record's head rewritten: its delivery count and claim token), and a `ZADD` to
//!   `claimed` (its claim, for `list`) for the lot, and for the call a `ZADD` to `claims` and
//!   its upkeep, one `ZADD` to `leased` (the lease of all the call's tasks) and one `SET` of its
//!   retry record (its token range: `claimed` names the tasks), and an `OBJECT ENCODING` of
//!   `claimed` (with 32 members or more in Redis's compact listpack encoding, which each insert
//!   scans, a long member added and removed moves it to a skip list; the tick does the same for
//!   `ready`); an acknowledgement one `HMGET`, one `HDEL` and one `ZREM` (the claim) for the lot
//!   (and an `HSET` per recurring task, its next run), and for the one or two calls its tokens
//!   came from a look-up in `claims` and a `ZCOUNT` of `claimed` (a call left with no task loses
//!   its lease), carried by the worker's next claim where one comes, and an `HLEN` of
//!   `cancelling` (more only for a task whose cancel was requested); a renewal one `HMGET`, a
//!   look-up in `claims` per call, one `ZMSCORE` and one `ZADD` of `leased` for the lot, and the
//!   `HLEN`. While paused, a claim reads the `paused` field and takes nothing.
//!
//! A wheel recorded in another layout than this version's (the keys and formats of
//! docs/DESIGN.md's table; layout 1 is the first release's) is refused by `connect`. Nodes of two
//! layouts must not serve one wheel at once (a node checks the layout when it connects, not on
//! every call): stop the old nodes before the new ones connect.

// The files and their order: docs/DESIGN.md's table, the one map of them; each file imports only
// from those below it there, which the crate's `layering` tests check.
mod admin;
mod builder;
mod coalesce;
mod config;
mod control;
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard;
mod dead_letters;
mod ids;
mod leader;
mod limits;
mod list;
mod metrics;
mod open;
mod options;
mod payload;
mod recurring;
mod routes;
mod scheduler;
mod series;
mod store;
mod task;
#[cfg(test)]
mod tests;
mod time;
mod worker;

pub use crate::error::RedisFailure;
// What both modes' recurring tasks take, here too, so that durable code needs one import.
pub use crate::recurrence::{MissedRuns, Recurrence, Repeat};
// The crate's one error type, here too, so that durable code needs one import.
pub use crate::Error;
pub use admin::{FIGURES_MINUTES, MAX_PAGE};
pub use builder::DurableBuilder;
pub use config::{
    Durability, DEFAULT_BACKOFF, DEFAULT_CONCURRENCY, DEFAULT_CONNECT_TIMEOUT, DEFAULT_HANDLER_TIMEOUT,
    DEFAULT_HISTORY_AGE, DEFAULT_HISTORY_LIMIT, DEFAULT_LEASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_PAYLOAD,
    DEFAULT_PREFETCH, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SLOTS, DEFAULT_TICK, MAX_BACKOFF, MAX_HISTORY_AGE,
    MAX_HISTORY_LIMIT, MAX_PARTITIONS, MAX_SLOTS,
};
pub use limits::Limit;
pub use options::TaskOptions;
pub use payload::IntoPayload;
#[cfg(feature = "serde")]
pub use payload::Json;
pub use routes::Routes;
pub use scheduler::DurableScheduler;
pub use series::MAX_BURST;
pub use store::keys::WheelKeys;
pub use task::{
    DeadTask, DurableStats, Figures, FinishedRun, ListCursor, ListPage, MinuteCounts, Outcome, Task, TaskInfo,
    TaskState,
};
/// The type of a handler's [`Task::cancel_token`], tokio-util's, here so that durable code needs
/// one import.
pub use tokio_util::sync::CancellationToken;
pub use worker::Worker;
