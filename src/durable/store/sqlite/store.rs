//! The embedded store: the wheel's keyspace in SQLite (a file, or this process's memory) and the
//! wheel's own Lua scripts run against it in-process, behind the same connection the Redis
//! deployments give ([`EmbeddedConn`], a `redis::aio::ConnectionLike`). So every guarantee the
//! scripts give on Redis holds here too, written once: a script runs whole inside one SQLite
//! transaction, and the transaction holds SQLite's write lock, so no other script, of this
//! process or another on the same file, sees it half done.
//!
//! One thread owns the SQLite connection and the Lua state. Calls queue on a channel; the thread
//! takes every call waiting, runs them in order in one transaction and commits once: a thousand
//! callers share one disk flush where each would pay one alone (group commit).
//!
//! Time: a file store's clock is the wall clock (several processes read it); an in-memory one
//! follows Tokio's clock of the runtime that calls it, so it runs on paused time in tests.
//! Blocking reads (`BLPOP`, `XREAD BLOCK`) wait for the next commit of this process, and poll
//! for other processes' writes to a shared file.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::{oneshot, watch, Notify};

use super::keyspace::{self, CommandError, Keyspace};
use super::lua::LuaRunner;
use crate::durable::config::Durability;
use crate::Error;

/// How often a blocking read looks again for another process's write to a shared file.
const POLL: Duration = Duration::from_millis(25);
/// The most calls one transaction takes.
const MAX_BATCH: usize = 1024;
/// The Redis version the store answers `INFO` with: what the scripts were written for.
const SPEAKS: &str = "7.2.0";

/// Where a store keeps its keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A SQLite file, shared by every process that opens it.
    File(PathBuf),
    /// This process's memory, for one `connect` (and its clones) alone.
    Memory,
}

impl Place {
    /// The place a `sqlite:` URL names: `sqlite::memory:`, or `sqlite:<path>` (also
    /// `sqlite://<path>`), the path relative to the working directory unless absolute.
    pub(crate) fn parse(url: &str) -> Result<Place, Error> {
        let Some(rest) = url.strip_prefix("sqlite:") else {
            return Err(Error::invalid(format!("{url:?} is not a sqlite: URL")));
        };
        if rest == ":memory:" {
            return Ok(Place::Memory);
        }
        let path = rest.strip_prefix("//").unwrap_or(rest);
        if path.is_empty() {
            return Err(Error::invalid(format!(
                "the URL {url:?} names no file: write sqlite:<path> (sqlite:data/orders.db) or sqlite::memory:"
            )));
        }
        Ok(Place::File(PathBuf::from(path)))
    }
}

/// The store's clock, in ms since the Unix epoch.
#[derive(Debug, Clone, Copy)]
enum Clock {
    Wall,
    /// Tokio's clock, from the wall-clock time at `at` (read when the store opened).
    Tokio {
        base_ms: u64,
        at: tokio::time::Instant,
    },
}

impl Clock {
    fn now_ms(&self) -> u64 {
        match self {
            Clock::Wall => wall_ms(),
            Clock::Tokio { base_ms, at } => {
                base_ms
                    + u64::try_from(tokio::time::Instant::now().saturating_duration_since(*at).as_millis()).unwrap_or(0)
            }
        }
    }
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One call for the store's thread: a command's arguments and where its answer goes.
struct Call {
    args: Vec<Vec<u8>>,
    answer: oneshot::Sender<Result<Value, CommandError>>,
}

/// Where a store's calls run.
enum Runner {
    /// A file's: on the store's thread, calls that arrive together in one transaction (one disk
    /// flush for all of them).
    Thread(mpsc::Sender<Call>),
    /// Memory's: in the caller's task, one call a transaction, at once (no disk to wait for; and
    /// on paused time a call handed to another thread would let Tokio's clock jump ahead while
    /// it runs).
    Inline(Box<Mutex<Engine>>),
}

/// The keyspace and the Lua that runs the scripts against it.
struct Engine {
    keyspace: Keyspace,
    lua: LuaRunner,
    /// The scripts (by SHA1, in lowercase hex) whose writes are not changes a leader waits for:
    /// the tick's own.
    quiet: Vec<Vec<u8>>,
}

impl Engine {
    /// Runs `calls` (their arguments) in one transaction: their answers, or each an error if the
    /// transaction could not begin or commit (then none of them is kept), and what the
    /// transaction changed. Every call reads `clock` as it was once the transaction began (with
    /// the file's write lock held): the store's time moves on from one transaction to the next
    /// whatever process runs it, and a call that waited for the lock reads the time it ran at,
    /// as a script on Redis reads `TIME` when it runs.
    fn transaction<'a>(&mut self, calls: impl Iterator<Item = &'a [Vec<u8>]>, clock: Clock) -> Transaction {
        if let Err(e) = self.keyspace.begin() {
            let why = CommandError(format!("ERR the embedded store could not begin a transaction: {e}"));
            return Transaction { answers: calls.map(|_| Err(why.clone())).collect(), ..Transaction::default() };
        }
        let now_ms = clock.now_ms();
        let mut changed = false;
        let answers: Vec<_> = calls
            .map(|args| {
                let before = self.keyspace.writes();
                let answer = execute(&mut self.keyspace, &mut self.lua, args, now_ms);
                changed |= self.keyspace.writes() != before && !self.is_quiet(args);
                answer
            })
            .collect();
        let pushed = self.keyspace.take_pushed();
        match self.keyspace.commit() {
            Ok(()) => Transaction { answers, pushed, changed },
            Err(e) => {
                let _ = self.keyspace.rollback();
                let why = CommandError(format!(
                    "ERR the embedded store could not commit (nothing of these calls was kept): {e}"
                ));
                Transaction { answers: answers.iter().map(|_| Err(why.clone())).collect(), ..Transaction::default() }
            }
        }
    }

    /// Whether `args` runs one of the quiet scripts.
    fn is_quiet(&self, args: &[Vec<u8>]) -> bool {
        args.len() > 1
            && args[0].eq_ignore_ascii_case(b"EVALSHA")
            && self.quiet.iter().any(|sha| sha.eq_ignore_ascii_case(&args[1]))
    }
}

/// What one transaction did.
#[derive(Default)]
struct Transaction {
    answers: Vec<Result<Value, CommandError>>,
    /// It pushed to a list or a stream: what a blocking read waits for.
    pushed: bool,
    /// One of its calls, not a quiet one, wrote to the keyspace: what a leader that sleeps until
    /// its next due time waits for.
    changed: bool,
}

/// A store: where its calls run, and what its callers share.
pub(crate) struct Store {
    runner: Runner,
    clock: Clock,
    /// Woken after a commit that pushed to a list or a stream: the blocking reads of this
    /// process look again.
    committed: Arc<Notify>,
    /// Whether other processes may write (a file): blocking reads poll too.
    shared: bool,
    /// How many calls went to the store's thread, and how many transactions it ran for them.
    batches: Arc<Batches>,
    /// Counted up after each transaction that changed the keyspace (but for the quiet scripts'
    /// calls), for the memory store's leader: nothing else writes to that store.
    changes: watch::Sender<u64>,
    /// How many commands this process ran on the store (a blocking read's each look counts).
    calls: AtomicU64,
    /// The clients whose blocking read `CLIENT UNBLOCK` ended.
    unblocked: Mutex<HashSet<u64>>,
    next_client: AtomicU64,
    /// The `BLPOP`s of this process that wait, in the order they began (a ticket, their keys):
    /// as in Redis, an element pushed goes to the one that has waited longest on its key.
    blocked: Mutex<Vec<(u64, Vec<Vec<u8>>)>>,
}

impl Store {
    /// Opens the keyspace at `place` and starts its thread. The writes of the scripts `quiet`
    /// names (SHA1s) are not counted as changes ([`Store::changes`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming what to do, for a file that cannot be created or opened, is
    /// not a wheel's, or is of another version.
    pub(crate) fn open(place: &Place, durability: Durability, quiet: &[&str]) -> Result<Arc<Store>, Error> {
        let quiet: Vec<Vec<u8>> = quiet.iter().map(|sha| sha.as_bytes().to_vec()).collect();
        let path = match place {
            Place::File(path) => Some(path.as_path()),
            Place::Memory => None,
        };
        let durability = match durability {
            Durability::Process => keyspace::Durability::Process,
            Durability::PowerLoss => keyspace::Durability::Power,
        };
        if let Some((file, dir)) = path.and_then(|p| Some((p, p.parent()?))).filter(|(_, d)| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::invalid(format!(
                    "cannot create the folder {} for the wheel's file {}: {e}; give a path whose folder can be made",
                    dir.display(),
                    file.display()
                ))
            })?;
        }
        let keyspace = Keyspace::open(path, durability).map_err(Error::invalid)?;
        let committed = Arc::new(Notify::new());
        let batches = Arc::new(Batches::default());
        let lua_failed = |e: String| Error::invalid(format!("the embedded Lua did not start: {e}"));
        let runner = match place {
            Place::Memory => Runner::Inline(Box::new(Mutex::new(Engine {
                keyspace,
                lua: LuaRunner::new().map_err(lua_failed)?,
                quiet,
            }))),
            Place::File(_) => {
                let (calls, queue) = mpsc::channel();
                let woken = committed.clone();
                let counted = batches.clone();
                let lua = LuaRunner::new().map_err(lua_failed)?;
                std::thread::Builder::new()
                    .name("timewheel-sqlite".into())
                    .spawn(move || serve(Engine { keyspace, lua, quiet }, &queue, &woken, &counted))
                    .map_err(|e| Error::invalid(format!("the embedded store's thread did not start: {e}")))?;
                Runner::Thread(calls)
            }
        };
        let clock = match place {
            Place::File(_) => Clock::Wall,
            Place::Memory => Clock::Tokio { base_ms: wall_ms(), at: tokio::time::Instant::now() },
        };
        Ok(Arc::new(Store {
            runner,
            clock,
            committed,
            shared: matches!(place, Place::File(_)),
            changes: watch::Sender::new(0),
            batches,
            calls: AtomicU64::new(0),
            unblocked: Mutex::new(HashSet::new()),
            next_client: AtomicU64::new(1),
            blocked: Mutex::new(Vec::new()),
        }))
    }

    /// A connection on the store.
    pub(crate) fn connect(self: &Arc<Self>) -> EmbeddedConn {
        EmbeddedConn { store: self.clone(), id: self.next_client.fetch_add(1, Ordering::Relaxed) }
    }

    /// Runs one command, as its own transaction or in one with the calls waiting beside it.
    async fn run(&self, args: Vec<Vec<u8>>) -> Result<Value, CommandError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match &self.runner {
            Runner::Inline(engine) => {
                let mut engine = engine.lock().unwrap_or_else(|p| p.into_inner());
                let mut done = engine.transaction(std::iter::once(args.as_slice()), self.clock);
                // Counted before the lock is let go: a leader that read the count before its
                // tick sees every change its tick did not.
                if done.changed {
                    self.changes.send_modify(|n| *n += 1);
                }
                drop(engine);
                if done.pushed {
                    self.committed.notify_waiters();
                }
                done.answers.remove(0)
            }
            Runner::Thread(calls) => {
                let (answer, answered) = oneshot::channel();
                self.batches.sent.fetch_add(1, Ordering::Relaxed);
                if calls.send(Call { args, answer }).is_err() {
                    return Err(CommandError("ERR the embedded store has stopped".into()));
                }
                answered.await.unwrap_or_else(|_| Err(CommandError("ERR the embedded store has stopped".into())))
            }
        }
    }

    /// Waits until something may have changed: a commit of this process, or (for a file that
    /// other processes share) a poll's interval, but no longer than `left`.
    async fn wait_for_change(&self, notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>, left: Duration) {
        let wait = if self.shared { left.min(POLL) } else { left };
        let _ = tokio::time::timeout(wait, notified).await;
    }

    /// How many commands this process ran on the store: what the tests of an idle wheel count.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The store's clock when it is Tokio's (memory): ms at an instant, from which it counts.
    pub(crate) fn tokio_clock(&self) -> Option<(u64, tokio::time::Instant)> {
        match self.clock {
            Clock::Tokio { base_ms, at } => Some((base_ms, at)),
            Clock::Wall => None,
        }
    }

    /// The count of changes, for a store in this process alone (memory): whoever sleeps until
    /// the next due time wakes when it moves. `None` for a file, which other processes write.
    pub(crate) fn changes(&self) -> Option<watch::Receiver<u64>> {
        matches!(self.runner, Runner::Inline(_)).then(|| self.changes.subscribe())
    }

    fn take_unblocked(&self, client: u64) -> bool {
        self.unblocked.lock().unwrap_or_else(|p| p.into_inner()).remove(&client)
    }
}

/// A `BLPOP`'s place in the line of [`Store::blocked`], from its start until it returns (or is
/// dropped): only the first in line of a key pops from it.
struct InLine<'a> {
    store: &'a Store,
    ticket: u64,
}

impl<'a> InLine<'a> {
    fn join(store: &'a Store, keys: &[Vec<u8>]) -> InLine<'a> {
        let ticket = store.next_client.fetch_add(1, Ordering::Relaxed);
        store.blocked.lock().unwrap_or_else(|p| p.into_inner()).push((ticket, keys.to_vec()));
        InLine { store, ticket }
    }

    /// Whether no `BLPOP` that began earlier waits on `key`: as in Redis, an element pushed to a
    /// key goes to whoever has waited longest on that key, whatever other keys each waits on.
    fn is_first_for(&self, key: &[u8]) -> bool {
        let line = self.store.blocked.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = line.iter().position(|(t, _)| *t == self.ticket) else { return true };
        !line[..at].iter().any(|(_, earlier)| earlier.iter().any(|k| k == key))
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.store.blocked.lock().unwrap_or_else(|p| p.into_inner()).retain(|(t, _)| *t != self.ticket);
        // The next in line looks: what was pushed may be for it now.
        self.store.committed.notify_waiters();
    }
}

/// What a file store's thread did: for the test that shows calls sharing a commit.
#[derive(Default)]
struct Batches {
    /// Calls handed to the thread.
    sent: AtomicU64,
    /// Transactions it ran for them (one disk flush each, with `Durability::PowerLoss`).
    transactions: AtomicU64,
}

/// The store's thread: takes the calls waiting, runs them in one transaction, commits, answers.
fn serve(mut engine: Engine, queue: &mpsc::Receiver<Call>, committed: &Notify, batches: &Batches) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        let done = engine.transaction(batch.iter().map(|c| c.args.as_slice()), Clock::Wall);
        batches.transactions.fetch_add(1, Ordering::Relaxed);
        for (call, answer) in batch.into_iter().zip(done.answers) {
            let _ = call.answer.send(answer);
        }
        if done.pushed {
            committed.notify_waiters();
        }
    }
}

/// One command, inside the open transaction: a script, a server command answered here, or a
/// command of the keyspace.
fn execute(keyspace: &mut Keyspace, lua: &mut LuaRunner, args: &[Vec<u8>], now_ms: u64) -> Result<Value, CommandError> {
    let name = args.first().map(|n| n.to_ascii_uppercase()).unwrap_or_default();
    let text = |v: &str| Value::BulkString(v.as_bytes().to_vec());
    match name.as_slice() {
        b"EVALSHA" => {
            let sha = std::str::from_utf8(args.get(1).map_or(&[][..], Vec::as_slice)).unwrap_or("");
            let numkeys: usize = std::str::from_utf8(args.get(2).map_or(&[][..], Vec::as_slice))
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| CommandError("ERR value is not an integer or out of range".into()))?;
            let rest = args.get(3..).unwrap_or_default();
            if numkeys > rest.len() {
                return Err(CommandError("ERR Number of keys can't be greater than number of args".into()));
            }
            let (keys, argv) = rest.split_at(numkeys);
            lua.eval_sha(sha, keys, argv, &mut |call| keyspace.command(call, now_ms))
        }
        b"SCRIPT" if args.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"LOAD")) => {
            let source = args.get(2).ok_or_else(|| CommandError("ERR wrong number of arguments".into()))?;
            lua.load(source).map(|sha| text(&sha))
        }
        b"PING" => Ok(Value::SimpleString("PONG".into())),
        b"INFO" => Ok(text(&format!("# Server\r\nredis_version:{SPEAKS}\r\nredis_mode:standalone\r\n"))),
        b"CONFIG" => {
            let setting = args.get(2).map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).unwrap_or_default();
            let value = match setting.as_str() {
                "appendonly" => "yes",
                "maxmemory-policy" => "noeviction",
                _ => return Ok(Value::Array(Vec::new())),
            };
            Ok(Value::Array(vec![text(&setting), text(value)]))
        }
        b"ROLE" => Ok(Value::Array(vec![text("master"), Value::Int(0), Value::Array(Vec::new())])),
        // No replica to wait for: every write is in the file once its call returns.
        b"WAIT" => Ok(Value::Int(0)),
        _ => keyspace.command(args, now_ms),
    }
}

/// A connection on an embedded store: what `Connection::Embedded` holds. Each has a client id of
/// its own, for `CLIENT ID` and `CLIENT UNBLOCK`.
#[derive(Clone)]
pub(crate) struct EmbeddedConn {
    store: Arc<Store>,
    id: u64,
}

impl EmbeddedConn {
    async fn command(&self, args: Vec<Vec<u8>>) -> RedisResult<Value> {
        let name = args.first().map(|n| n.to_ascii_uppercase()).unwrap_or_default();
        let answer = match name.as_slice() {
            b"BLPOP" => self.blpop(&args).await,
            b"XREAD" => self.xread(args).await,
            b"CLIENT" => Ok(self.client(&args)),
            _ => self.store.run(args).await,
        };
        answer.map_err(server_error)
    }

    fn client(&self, args: &[Vec<u8>]) -> Value {
        let sub = args.get(1).map(|s| s.to_ascii_uppercase()).unwrap_or_default();
        match sub.as_slice() {
            b"ID" => Value::Int(i64::try_from(self.id).unwrap_or(i64::MAX)),
            b"UNBLOCK" => {
                let id = args.get(2).and_then(|i| std::str::from_utf8(i).ok()?.parse().ok()).unwrap_or(0);
                self.store.unblocked.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
                self.store.committed.notify_waiters();
                Value::Int(1)
            }
            _ => Value::SimpleString("OK".into()),
        }
    }

    /// `BLPOP key... timeout`: the first list with an element, or `Nil` when `timeout` seconds
    /// (0: no limit) pass, or `CLIENT UNBLOCK` ends the wait. The `BLPOP`s of this process that
    /// wait on a key pop from it in the order they began, as Redis serves its blocked clients
    /// (idle workers take the wake-ups in turn).
    async fn blpop(&self, args: &[Vec<u8>]) -> Result<Value, CommandError> {
        let (timeout, keys) = match args.get(1..).and_then(<[Vec<u8>]>::split_last) {
            Some((timeout, keys)) if !keys.is_empty() => (timeout, keys),
            _ => return Err(CommandError("ERR wrong number of arguments for 'blpop' command".into())),
        };
        let secs: f64 = std::str::from_utf8(timeout)
            .ok()
            .and_then(|t| t.parse().ok())
            .filter(|t: &f64| *t >= 0.0)
            .ok_or_else(|| CommandError("ERR timeout is not a float or out of range".into()))?;
        let limit = (secs > 0.0).then(|| tokio::time::Instant::now() + Duration::from_secs_f64(secs));
        let in_line = InLine::join(&self.store, keys);
        loop {
            let notified = self.store.committed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            for key in keys.iter().filter(|key| in_line.is_first_for(key)) {
                if let Value::BulkString(v) = self.store.run(vec![b"LPOP".to_vec(), key.clone()]).await? {
                    return Ok(Value::Array(vec![Value::BulkString(key.clone()), Value::BulkString(v)]));
                }
            }
            if self.store.take_unblocked(self.id) {
                return Ok(Value::Nil);
            }
            let left = match limit {
                Some(at) if tokio::time::Instant::now() >= at => return Ok(Value::Nil),
                Some(at) => at - tokio::time::Instant::now(),
                None => Duration::from_secs(3600),
            };
            self.store.wait_for_change(notified, left).await;
        }
    }

    /// `XREAD [COUNT n] [BLOCK ms] STREAMS key id`: the non-blocking read, again after each
    /// change until it finds an entry or `ms` (0: no limit) pass.
    async fn xread(&self, mut args: Vec<Vec<u8>>) -> Result<Value, CommandError> {
        let block = args.iter().position(|a| a.eq_ignore_ascii_case(b"BLOCK"));
        let Some(at) = block else { return self.store.run(args).await };
        let ms: u64 = args
            .get(at + 1)
            .and_then(|m| std::str::from_utf8(m).ok()?.parse().ok())
            .ok_or_else(|| CommandError("ERR timeout is not an integer or out of range".into()))?;
        args.drain(at..at + 2);
        let limit = (ms > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(ms));
        loop {
            let notified = self.store.committed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let read = self.store.run(args.clone()).await?;
            if read != Value::Nil || self.store.take_unblocked(self.id) {
                return Ok(read);
            }
            let left = match limit {
                Some(at) if tokio::time::Instant::now() >= at => return Ok(Value::Nil),
                Some(at) => at - tokio::time::Instant::now(),
                None => Duration::from_secs(3600),
            };
            self.store.wait_for_change(notified, left).await;
        }
    }
}

/// An error reply as the redis crate reads one from a server, so that its callers (a script's
/// `NOSCRIPT`, say) see what a Redis server would give.
fn server_error(e: CommandError) -> redis::RedisError {
    let text = e.0.replace(['\r', '\n'], " ");
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(err)) => err.into(),
        _ => redis::RedisError::from((redis::ErrorKind::Io, "the embedded store failed", text)),
    }
}

/// The arguments of `cmd`, as bytes.
fn args_of(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            // A cursor (`SCAN`'s) is never sent to the embedded store; anything else is empty.
            _ => Vec::new(),
        })
        .collect()
}

impl redis::aio::ConnectionLike for EmbeddedConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let args = args_of(cmd);
        Box::pin(self.command(args))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let cmds: Vec<Vec<Vec<u8>>> = pipeline.cmd_iter().map(args_of).collect();
        Box::pin(async move {
            let mut out = Vec::with_capacity(cmds.len());
            for args in cmds {
                out.push(self.command(args).await?);
            }
            Ok(out.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Calls that arrive while a transaction is under way wait for the next one, together: a
    /// thousand callers share one commit (one disk flush, with `PowerLoss`), not one each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_that_wait_together_share_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wheel.db");
        let store = Store::open(&Place::File(path.clone()), Durability::PowerLoss, &[]).unwrap();
        // Another connection holds the file's write lock: the store's first transaction waits
        // for it (up to its busy timeout of 5 s), and every call made meanwhile queues.
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let calls: Vec<_> = (0..1000)
            .map(|i| {
                let conn = store.connect();
                let args = vec![b"SET".to_vec(), format!("k{i}").into_bytes(), b"v".to_vec()];
                tokio::spawn(async move { conn.command(args).await })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(4);
        while store.batches.sent.load(Ordering::Relaxed) < 1000 {
            assert!(Instant::now() < deadline, "the calls were not all made");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        other.execute_batch("COMMIT").unwrap();
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap(), Value::SimpleString("OK".into()));
        }
        let transactions = store.batches.transactions.load(Ordering::Relaxed);
        // The first transaction took the calls there when it began; the next took the rest.
        assert!(transactions <= 2, "1,000 calls made while the file was locked took {transactions} transactions");
    }

    /// A call that waited for the file's lock reads the store's clock when it runs, not when it
    /// was made: its `TIME` is no earlier than the moment the lock was let go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_waited_for_the_lock_reads_the_time_it_ran_at() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wheel.db");
        let store = Store::open(&Place::File(path.clone()), Durability::Process, &[]).unwrap();
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let conn = store.connect();
        let call = tokio::spawn(async move { conn.command(vec![b"TIME".to_vec()]).await });
        while store.batches.sent.load(Ordering::Relaxed) < 1 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let let_go = wall_ms();
        other.execute_batch("COMMIT").unwrap();
        let Value::Array(time) = call.await.unwrap().unwrap() else { panic!("TIME answers an array") };
        let part = |i: usize| match &time[i] {
            Value::BulkString(b) => std::str::from_utf8(b).unwrap().parse::<u64>().unwrap(),
            v => panic!("{v:?}"),
        };
        let ran_ms = part(0) * 1000 + part(1) / 1000;
        assert!(ran_ms >= let_go, "the call read {ran_ms}, the lock was let go at {let_go}");
    }

    /// Waiting `BLPOP`s are served as Redis serves them: an element goes to whoever has waited
    /// longest on its key; one that waits on other keys too is not held back on those.
    #[tokio::test]
    async fn a_push_goes_to_the_longest_waiter_on_its_key() {
        let store = Store::open(&Place::Memory, Durability::Process, &[]).unwrap();
        let blpop = |keys: &[&str]| {
            let conn = store.connect();
            let mut args = vec![b"BLPOP".to_vec()];
            args.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
            args.push(b"0".to_vec());
            tokio::spawn(async move { conn.command(args).await })
        };
        let waiting = |n: usize| {
            let store = store.clone();
            async move {
                while store.blocked.lock().unwrap().len() < n {
                    tokio::task::yield_now().await;
                }
            }
        };
        let first = blpop(&["a"]);
        waiting(1).await;
        let second = blpop(&["a", "b"]);
        waiting(2).await;
        let third = blpop(&["a"]);
        waiting(3).await;
        let push = |key: &str, value: &str| {
            let conn = store.connect();
            let args = vec![b"RPUSH".to_vec(), key.as_bytes().to_vec(), value.as_bytes().to_vec()];
            async move { conn.command(args).await.unwrap() }
        };
        let popped = |key: &str, value: &str| {
            Value::Array(vec![Value::BulkString(key.as_bytes().to_vec()), Value::BulkString(value.as_bytes().to_vec())])
        };
        // `b`: only the second waits on it, though an earlier one waits on `a`.
        push("b", "x").await;
        let got = tokio::time::timeout(Duration::from_secs(5), second).await.expect("served at once").unwrap().unwrap();
        assert_eq!(got, popped("b", "x"));
        // `a`: the longest waiter on it first, then the next.
        push("a", "y").await;
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), first).await.unwrap().unwrap().unwrap(),
            popped("a", "y")
        );
        push("a", "z").await;
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), third).await.unwrap().unwrap().unwrap(),
            popped("a", "z")
        );
    }
}
