//! The embedded store's keyspace: the Redis commands that the wheel's Lua scripts and its plain
//! calls send, answered as Redis 7 answers them, over tables in SQLite.
//!
//! One table holds each key's record, and one table each type's contents, keyed so that every
//! command is a few indexed statements:
//! - `keys(key, kind, expire_at, len, head, last_ms, last_seq)`: the key's type, its expiry (ms on
//!   the store's clock, or NULL), and what a type needs to answer without a scan: a container's
//!   length, a list's head position, a stream's last id;
//! - `strings(key, value)`;
//! - `hashes(key, field, value)`;
//! - `zsets(key, member, score)`, and the index `zsets_by_score(key, score, member)` for ranks and
//!   score ranges, in Redis's order (by score, then by the member's bytes);
//! - `lists(key, pos, value)`: a list's items at consecutive positions from its head (`LPUSH`
//!   takes the position before the head, `RPUSH` the one after the tail), so an index is one
//!   lookup and a pop moves the head;
//! - `streams(key, ms, seq, fields)`: a stream's entries by id, each entry's field-value pairs
//!   packed in one blob.
//!
//! Expiry is checked against the `now_ms` of each command: a key whose expiry passed (`now_ms`
//! later than it) is deleted when a command looks it up, and a sweep every [`SWEEP_EVERY`]
//! commands deletes the expired keys that nothing reads again (a script's answer kept for its
//! retries, say). An emptied hash, sorted set or list is deleted; a stream stays, empty, as in
//! Redis.
//!
//! The file says what it holds in its header: `PRAGMA application_id` is [`APPLICATION_ID`] and
//! `PRAGMA user_version` the [`LAYOUT`] of these tables; [`Keyspace::open`] refuses any other.

use std::path::Path;
use std::time::Duration;

use redis::Value;
use rusqlite::{params, CachedStatement, Connection, ErrorCode, OpenFlags, OptionalExtension};

#[cfg(test)]
mod tests;

/// An error reply, as Redis words it ("ERR ...", "WRONGTYPE Operation against a key holding the
/// wrong kind of value", ...), without RESP's leading `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandError(pub(crate) String);

/// How durable a commit is. Both keep the file in WAL mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// `synchronous=NORMAL`: a commit survives the process's death; a power loss may take the
    /// last commits (never half of one).
    Process,
    /// `synchronous=FULL`: a commit is on the disk when it returns.
    Power,
}

/// The layout of the tables below: a keyspace's `PRAGMA user_version`. Raise it with any change
/// that an older version of this file would misread, and add the step from the previous layout
/// to [`Keyspace::open`].
const LAYOUT: i64 = 1;

/// A keyspace's `PRAGMA application_id` ("TWKS"): marks the file as this crate's, so that another
/// application's SQLite file is refused rather than written into.
const APPLICATION_ID: i64 = 0x5457_4b53;

/// How long `BEGIN IMMEDIATE` (and any statement) waits for another process's transaction on the
/// same file before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept by the connection: every statement of every command, with room.
const STATEMENT_CACHE: usize = 128;

/// Commands between two sweeps of expired keys.
const SWEEP_EVERY: u32 = 32;

/// Expired keys deleted by one sweep at most: more than [`SWEEP_EVERY`] commands can give an
/// expiry to, so the sweep keeps up with any load.
const SWEEP_BUDGET: i64 = 64;

/// The tables of [`LAYOUT`] 1.
const SCHEMA: &str = "
CREATE TABLE keys (
    key BLOB NOT NULL PRIMARY KEY,
    kind INTEGER NOT NULL,
    expire_at INTEGER,
    len INTEGER NOT NULL,
    head INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    last_seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX keys_by_expiry ON keys (expire_at) WHERE expire_at IS NOT NULL;
CREATE TABLE strings (key BLOB NOT NULL PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE hashes (
    key BLOB NOT NULL, field BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (key, field)
) WITHOUT ROWID;
CREATE TABLE zsets (
    key BLOB NOT NULL, member BLOB NOT NULL, score REAL NOT NULL, PRIMARY KEY (key, member)
) WITHOUT ROWID;
CREATE INDEX zsets_by_score ON zsets (key, score, member);
CREATE TABLE lists (
    key BLOB NOT NULL, pos INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (key, pos)
) WITHOUT ROWID;
CREATE TABLE streams (
    key BLOB NOT NULL, ms INTEGER NOT NULL, seq INTEGER NOT NULL, fields BLOB NOT NULL,
    PRIMARY KEY (key, ms, seq)
) WITHOUT ROWID;
";

/// The tables a keyspace of [`LAYOUT`] has, in name order.
const TABLES: [&str; 6] = ["hashes", "keys", "lists", "streams", "strings", "zsets"];

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const RANGE_NOT_FLOAT: &str = "ERR min or max is not a float";
const SYNTAX: &str = "ERR syntax error";
const OVERFLOW: &str = "ERR increment or decrement would overflow";
const BAD_STREAM_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const STREAM_TOP: &str = "ERR The ID specified in XADD is equal or smaller than the target stream top item";

/// A keyspace: one SQLite connection, to a file or to memory.
pub(crate) struct Keyspace {
    conn: Connection,
    /// Set when a statement failed inside the open transaction (I/O, a full disk, a corrupt
    /// page): a command may then have been half applied, so [`Keyspace::commit`] rolls back
    /// instead.
    broken: Option<String>,
    /// Commands since the last sweep of expired keys (see [`SWEEP_EVERY`]).
    since_sweep: u32,
    /// Whether a list or a stream was pushed to since [`Keyspace::take_pushed`]: what a
    /// blocking read waits for.
    pushed: bool,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace").field("path", &self.conn.path()).field("broken", &self.broken).finish()
    }
}

impl Keyspace {
    /// How many rows the keyspace's statements have written so far: a call that moves it wrote.
    pub(crate) fn writes(&self) -> u64 {
        self.conn.total_changes()
    }

    /// Whether a list or a stream was pushed to since the last call (a blocking read's wait is
    /// over only then); clears it.
    pub(crate) fn take_pushed(&mut self) -> bool {
        std::mem::take(&mut self.pushed)
    }

    /// Opens the keyspace in the file at `path` (created, with its tables, if missing), or in
    /// this process's memory for `None`.
    ///
    /// # Errors
    /// A sentence naming the file and what to do: a file that is not a keyspace of this version
    /// (not SQLite, another application's database, a newer layout), a read-only file, a path
    /// whose directory is missing, or a file that cannot be switched to WAL mode.
    pub(crate) fn open(path: Option<&Path>, durability: Durability) -> Result<Keyspace, String> {
        let (conn, shown) = match path {
            None => {
                let conn =
                    Connection::open_in_memory().map_err(|e| format!("cannot open an in-memory keyspace: {e}"))?;
                (conn, "the in-memory keyspace".to_string())
            }
            Some(path) => (open_file(path)?, path.display().to_string()),
        };
        let fail = |e: rusqlite::Error| describe(&shown, &e);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // The first read of the header: where a file that is not SQLite is found out.
        header(&conn).map_err(fail)?;
        if path.is_some() {
            // Before anything is written: switching to WAL mode is recorded in the file's header,
            // and another application's database is to be refused as it was found.
            check_or_create(&conn, &shown, false)?;
            let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(fail)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(format!(
                    "cannot switch {shown} to WAL mode (SQLite keeps it in `{mode}` mode): give the store a \
                     file on a local file system"
                ));
            }
        }
        let synchronous = match durability {
            Durability::Process => "NORMAL",
            Durability::Power => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous).map_err(fail)?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(fail)?;
        let checked = check_or_create(&conn, &shown, true);
        let ended = match checked {
            Ok(()) => conn.execute_batch("COMMIT"),
            Err(_) => conn.execute_batch("ROLLBACK"),
        };
        checked?;
        ended.map_err(fail)?;
        Ok(Keyspace { conn, broken: None, since_sweep: 0, pushed: false })
    }

    /// The names of every key, expired or not (`KEYS`, which no script sends, is not answered):
    /// for the crate's tests, which dump a wheel's keys and check each with `EXISTS`.
    #[cfg(test)]
    pub(crate) fn key_names(&self) -> Vec<Vec<u8>> {
        let mut names = self.conn.prepare("SELECT key FROM keys ORDER BY key").expect("a key query");
        let rows = names.query_map([], |row| row.get::<_, Vec<u8>>(0)).expect("keys");
        rows.map(|r| r.expect("a key")).collect()
    }

    /// Opens a transaction with `BEGIN IMMEDIATE`: takes the file's write lock, waiting up to
    /// [`BUSY_TIMEOUT`] for another process's transaction.
    ///
    /// # Errors
    /// SQLite's, when the lock is not had in time or a transaction is already open.
    pub(crate) fn begin(&mut self) -> Result<(), String> {
        self.broken = None;
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| format!("cannot begin a transaction: {e}"))
    }

    /// Commits the open transaction; rolls it back instead when a command met a storage error
    /// in it (see [`Keyspace::command`]).
    ///
    /// # Errors
    /// The storage error that broke the transaction (which is then rolled back), or SQLite's
    /// when the commit fails (the transaction may then still be open: call
    /// [`Keyspace::rollback`]).
    pub(crate) fn commit(&mut self) -> Result<(), String> {
        if let Some(why) = self.broken.take() {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(format!("a command failed in the store ({why}), so the transaction was rolled back"));
        }
        self.conn.execute_batch("COMMIT").map_err(|e| format!("cannot commit: {}", write_failed(&self.conn, &e)))
    }

    /// Rolls the open transaction back; nothing when none is open.
    ///
    /// # Errors
    /// SQLite's, when the rollback fails.
    pub(crate) fn rollback(&mut self) -> Result<(), String> {
        self.broken = None;
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.conn.execute_batch("ROLLBACK").map_err(|e| format!("cannot roll back: {e}"))
    }

    /// Runs one Redis command (`args[0]` its name, in any case) at `now_ms` (the store's clock:
    /// expiries, `TIME`, stream ids) inside the open transaction, or in a transaction of its own
    /// when none is open. The reply is Redis 7's (RESP2), with `OK` as
    /// `Value::SimpleString("OK")`.
    ///
    /// An error reply changes nothing, as in Redis. A storage error is answered as an `ERR`
    /// reply too, and marks the transaction broken: [`Keyspace::commit`] then rolls it back.
    ///
    /// # Errors
    /// The error reply Redis would give.
    pub(crate) fn command(&mut self, args: &[Vec<u8>], now_ms: u64) -> Result<Value, CommandError> {
        let own = self.conn.is_autocommit();
        if own {
            self.begin().map_err(|e| CommandError(format!("ERR the embedded store {e}")))?;
        }
        self.since_sweep += 1;
        let sweep = self.since_sweep >= SWEEP_EVERY;
        if sweep {
            self.since_sweep = 0;
        }
        let pushes = [&b"RPUSH"[..], b"LPUSH", b"XADD"];
        self.pushed |= args.first().is_some_and(|name| pushes.iter().any(|p| name.eq_ignore_ascii_case(p)));
        let tx = Tx { conn: &self.conn, now: i64::try_from(now_ms).unwrap_or(i64::MAX) };
        let answered = if sweep { tx.sweep() } else { Ok(()) }.and_then(|()| tx.run(args));
        let answer = match answered {
            Ok(value) => Ok(value),
            Err(Fail::Reply(message)) => Err(CommandError(message)),
            Err(Fail::Store(e)) => {
                self.broken = Some(write_failed(&self.conn, &e));
                Err(CommandError(format!("ERR the embedded store failed: {e}")))
            }
        };
        if own {
            if self.broken.is_some() {
                let _ = self.rollback();
            } else if let Err(e) = self.commit() {
                let _ = self.rollback();
                return Err(CommandError(format!("ERR the embedded store {e}")));
            }
        }
        answer
    }
}

/// Opens (or creates) the file at `path` for reading and writing.
fn open_file(path: &Path) -> Result<Connection, String> {
    let shown = path.display();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(dir) {
            Err(_) => {
                return Err(format!(
                    "cannot create the keyspace {shown}: its directory {} does not exist (create it first)",
                    dir.display()
                ))
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(format!("cannot create the keyspace {shown}: {} is not a directory", dir.display()))
            }
            Ok(_) => {}
        }
    }
    if path.is_dir() {
        return Err(format!("{shown} is a directory: give the store the path of a file"));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| describe(&shown.to_string(), &e))?;
    // SQLite opens a file it may not write read-only, silently.
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        return Err(format!("{shown} is read-only to this process: make it writable, or give the store another path"));
    }
    Ok(conn)
}

/// An error of SQLite's on the file `shown`, as a sentence that says what to do.
fn describe(shown: &str, e: &rusqlite::Error) -> String {
    // The file's folder, where SQLite also keeps its write-ahead log (`-wal`, `-shm`).
    let file = Path::new(shown);
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.display().to_string(),
        _ => "the working directory".to_string(),
    };
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => format!(
            "{shown} is not a SQLite database ({e}): give the store a path of its own, a new file or a keyspace it \
             created"
        ),
        // The file's own mode lets it be written: what SQLite could not make is its log, beside it.
        Some(ErrorCode::ReadOnly) if file.metadata().is_ok_and(|m| !m.permissions().readonly()) => format!(
            "{shown} cannot be written by this process ({e}): SQLite keeps its write-ahead log beside the file \
             ({shown}-wal, {shown}-shm), so its folder {dir} must be writable too: make {dir} writable, or give \
             the store a path in a writable folder"
        ),
        Some(ErrorCode::ReadOnly) => format!(
            "{shown} is read-only to this process ({e}): make it and its folder {dir} writable, or give the store \
             another path"
        ),
        Some(ErrorCode::CannotOpen) if !file.exists() => format!(
            "cannot create {shown} ({e}): this process may not create files in {dir}: make {dir} writable, or give \
             the store a path in a writable folder"
        ),
        Some(ErrorCode::CannotOpen) => {
            format!("cannot open {shown} ({e}): check that this process may read and write it and its folder {dir}")
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            format!("{shown} stayed locked by another process for {BUSY_TIMEOUT:?} ({e})")
        }
        Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => {
            format!("cannot open {shown}: {}", io_failed(shown, e))
        }
        _ => format!("cannot open {shown}: {e}"),
    }
}

/// A storage error of a write to the keyspace on `conn` (a statement or a commit), as a sentence
/// that says what to do.
fn write_failed(conn: &Connection, e: &rusqlite::Error) -> String {
    match conn.path().filter(|p| !p.is_empty()) {
        Some(path) => io_failed(path, e),
        None => e.to_string(),
    }
}

/// A full disk, or a write or read that failed, on the file `shown`: what to do about it. A
/// write cut short is SQLite's "database or disk is full"; one refused outright (no space, a
/// file-size limit, a failing disk) its "disk I/O error".
fn io_failed(shown: &str, e: &rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => format!(
            "the disk holding {shown} is full ({e}): free space on it (SQLite's write-ahead log, {shown}-wal, grows \
             with the writes between two checkpoints), then make the call again"
        ),
        Some(ErrorCode::SystemIoFailure) => format!(
            "{shown} could not be written or read ({e}): its disk may be full, the file past the size this process \
             may write (`ulimit -f`), or the disk failing: free space or fix the disk, then make the call again"
        ),
        _ => e.to_string(),
    }
}

/// The file's `(application_id, user_version)`.
fn header(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    let app = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let layout = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    Ok((app, layout))
}

/// Checks that the file is a keyspace of [`LAYOUT`], or an empty database, which it fills with
/// the tables if `create`. [`Keyspace::open`] calls it before it writes anything (not `create`),
/// and again inside its transaction (`create`).
fn check_or_create(conn: &Connection, shown: &str, create: bool) -> Result<(), String> {
    let fail = |e: rusqlite::Error| describe(shown, &e);
    let (app, layout) = header(conn).map_err(fail)?;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(fail)?;
    if app == 0 && layout == 0 && tables.is_empty() {
        if !create {
            return Ok(());
        }
        conn.execute_batch(SCHEMA).map_err(fail)?;
        conn.pragma_update(None, "application_id", APPLICATION_ID).map_err(fail)?;
        return conn.pragma_update(None, "user_version", LAYOUT).map_err(fail);
    }
    if app != APPLICATION_ID {
        let held = if tables.is_empty() { "no tables".to_string() } else { format!("tables {}", tables.join(", ")) };
        return Err(format!(
            "{shown} is another application's SQLite database (application id {app:#x}, {held}), not a \
             tokio-timewheel keyspace: give the store a path of its own"
        ));
    }
    if layout > LAYOUT {
        return Err(format!(
            "{shown} is a keyspace of a newer tokio-timewheel (layout {layout}; this version reads layout {LAYOUT}): \
             open it with that version, or give the store another path"
        ));
    }
    if layout < LAYOUT || tables != TABLES {
        let held = if tables.is_empty() { "no tables".to_string() } else { format!("tables {}", tables.join(", ")) };
        return Err(format!(
            "{shown} is a damaged keyspace (layout {layout}, {held}; layout {LAYOUT} has tables {}): restore it \
             from a copy, or give the store another path",
            TABLES.join(", ")
        ));
    }
    Ok(())
}

/// How a command fails: with an error reply, or on a storage error (which breaks the
/// transaction, see [`Keyspace::broken`]).
enum Fail {
    Reply(String),
    Store(rusqlite::Error),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Store(e)
    }
}

type Res<T> = Result<T, Fail>;

/// Fails the command with the error reply `message`.
fn reply<T>(message: impl Into<String>) -> Res<T> {
    Err(Fail::Reply(message.into()))
}

/// The type of a key: its `keys.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    String = 1,
    Hash = 2,
    Zset = 3,
    List = 4,
    Stream = 5,
}

impl Kind {
    fn from_code(code: i64) -> rusqlite::Result<Kind> {
        Ok(match code {
            1 => Kind::String,
            2 => Kind::Hash,
            3 => Kind::Zset,
            4 => Kind::List,
            5 => Kind::Stream,
            _ => return Err(rusqlite::Error::IntegralValueOutOfRange(1, code)),
        })
    }

    /// Its name, as `TYPE` answers.
    fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Zset => "zset",
            Kind::List => "list",
            Kind::Stream => "stream",
        }
    }

    /// The statement that deletes a key's contents.
    fn delete_sql(self) -> &'static str {
        match self {
            Kind::String => "DELETE FROM strings WHERE key = ?1",
            Kind::Hash => "DELETE FROM hashes WHERE key = ?1",
            Kind::Zset => "DELETE FROM zsets WHERE key = ?1",
            Kind::List => "DELETE FROM lists WHERE key = ?1",
            Kind::Stream => "DELETE FROM streams WHERE key = ?1",
        }
    }
}

/// A live key's row of `keys`.
#[derive(Debug, Clone, Copy)]
struct Record {
    kind: Kind,
    /// When the key expires (ms on the store's clock): gone once `now` is later.
    expire_at: Option<i64>,
    /// The number of fields, members, items or entries of a container; 0 for a string.
    len: i64,
    /// A list's head position: its items are at `head..head + len`.
    head: i64,
    /// A stream's last id, kept when its entries are trimmed: where `*` ids go on from.
    last: StreamId,
}

/// A stream entry's id, `<ms>-<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct StreamId {
    ms: u64,
    seq: u64,
}

impl StreamId {
    const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// The id just after this one, `None` after [`StreamId::MAX`].
    fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => Some(StreamId { ms: self.ms.checked_add(1)?, seq: 0 }),
        }
    }

    /// The id just before this one, `None` before [`StreamId::MIN`].
    fn prev(self) -> Option<StreamId> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => Some(StreamId { ms: self.ms.checked_sub(1)?, seq: u64::MAX }),
        }
    }

    fn text(self) -> Vec<u8> {
        format!("{}-{}", self.ms, self.seq).into_bytes()
    }
}

/// A `u64` as an `i64` that SQLite orders the same way (the sign bit flipped): stream ids use
/// all 64 bits, SQLite's integers are signed.
fn ordered(x: u64) -> i64 {
    (x ^ (1 << 63)) as i64
}

/// The inverse of [`ordered`].
fn unordered(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

/// The commands, over the open transaction, at one instant.
struct Tx<'c> {
    conn: &'c Connection,
    /// The command's clock, in ms.
    now: i64,
}

/// A bulk string reply.
fn bulk(bytes: impl Into<Vec<u8>>) -> Value {
    Value::BulkString(bytes.into())
}

/// The `+OK` reply.
fn ok() -> Value {
    Value::SimpleString("OK".into())
}

/// An argument as text, for an error message.
fn lossy(arg: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(arg)
}

/// Redis's arity of each command: the exact argument count (the name included), or, negative,
/// the least. `None` for a command this keyspace does not know.
fn arity(name: &[u8]) -> Option<i64> {
    Some(match name {
        b"GET" | b"INCR" | b"DECR" | b"PTTL" | b"TYPE" | b"HLEN" | b"HKEYS" | b"HGETALL" | b"ZCARD" | b"LLEN"
        | b"XLEN" => 2,
        b"INCRBY" | b"DECRBY" | b"HGET" | b"HEXISTS" | b"ZSCORE" | b"ZRANK" | b"LINDEX" => 3,
        b"HINCRBY" | b"HSETNX" | b"ZREMRANGEBYRANK" | b"ZREMRANGEBYSCORE" | b"ZCOUNT" | b"LRANGE" | b"LTRIM" => 4,
        b"TIME" => 1,
        b"DEL" | b"EXISTS" | b"LPOP" | b"OBJECT" => -2,
        b"SET" | b"PEXPIRE" | b"HMGET" | b"HDEL" | b"ZMSCORE" | b"ZREM" | b"RPUSH" | b"LPUSH" => -3,
        b"HSET" | b"ZADD" | b"ZRANGE" | b"ZRANGEBYSCORE" | b"ZREVRANGEBYSCORE" | b"XRANGE" | b"XREVRANGE"
        | b"XREAD" => -4,
        b"XADD" => -5,
        _ => return None,
    })
}

/// Redis's reply to the wrong number of arguments for `name`.
fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{}' command", name.to_ascii_lowercase())
}

/// Redis's reply to an unknown command.
fn unknown_command(args: &[Vec<u8>]) -> String {
    let mut rest = String::new();
    for arg in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        rest.push_str(&format!("'{}' ", lossy(&arg[..arg.len().min(room)])));
    }
    let name = lossy(&args[0][..args[0].len().min(128)]).into_owned();
    format!("ERR unknown command '{name}', with args beginning with: {rest}")
}

impl Tx<'_> {
    fn stmt(&self, sql: &str) -> rusqlite::Result<CachedStatement<'_>> {
        self.conn.prepare_cached(sql)
    }

    /// Checks the arity and runs the command.
    fn run(&self, args: &[Vec<u8>]) -> Res<Value> {
        let Some(name) = args.first() else { return reply("ERR empty command") };
        let name = name.to_ascii_uppercase();
        let Some(arity) = arity(&name) else { return reply(unknown_command(args)) };
        let n = args.len() as i64;
        if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
            return reply(wrong_arity(&lossy(&name)));
        }
        let key = args.get(1).map_or(&[][..], Vec::as_slice);
        match name.as_slice() {
            b"GET" => self.get(key),
            b"SET" => self.set(args),
            b"DEL" => self.del(&args[1..]),
            b"EXISTS" => self.exists(&args[1..]),
            b"INCR" => self.incr_by(key, 1),
            b"DECR" => self.incr_by(key, -1),
            b"INCRBY" => self.incr_by(key, int_arg(&args[2])?),
            b"DECRBY" => match int_arg(&args[2])? {
                i64::MIN => reply("ERR decrement would overflow"),
                by => self.incr_by(key, -by),
            },
            b"PEXPIRE" => self.pexpire(args),
            b"PTTL" => self.pttl(key),
            b"TIME" => Ok(self.time()),
            b"TYPE" => self.kind_of(key),
            b"OBJECT" => self.object(args),
            b"HSET" => self.hset(args),
            b"HGET" => self.hget(key, &args[2]),
            b"HMGET" => self.hmget(key, &args[2..]),
            b"HDEL" => self.hdel(key, &args[2..]),
            b"HLEN" => Ok(Value::Int(self.lookup_as(key, Kind::Hash)?.map_or(0, |r| r.len))),
            b"HEXISTS" => self.hexists(key, &args[2]),
            b"HINCRBY" => self.hincrby(key, &args[2], &args[3]),
            b"HSETNX" => self.hsetnx(key, &args[2], &args[3]),
            b"HKEYS" => self.hgetall(key, false),
            b"HGETALL" => self.hgetall(key, true),
            b"ZADD" => self.zadd(args),
            b"ZSCORE" => self.zscore_reply(key, &args[2]),
            b"ZMSCORE" => self.zmscore(key, &args[2..]),
            b"ZREM" => self.zrem(key, &args[2..]),
            b"ZRANGE" => self.zrange(args, Zrange::Any),
            b"ZRANGEBYSCORE" => self.zrange(args, Zrange::ByScore),
            b"ZREVRANGEBYSCORE" => self.zrange(args, Zrange::RevByScore),
            b"ZREMRANGEBYRANK" => self.zremrangebyrank(key, &args[2], &args[3]),
            b"ZREMRANGEBYSCORE" => self.zremrangebyscore(key, &args[2], &args[3]),
            b"ZCARD" => Ok(Value::Int(self.lookup_as(key, Kind::Zset)?.map_or(0, |r| r.len))),
            b"ZCOUNT" => self.zcount(key, &args[2], &args[3]),
            b"ZRANK" => self.zrank(key, &args[2]),
            b"RPUSH" => self.push(key, &args[2..], false),
            b"LPUSH" => self.push(key, &args[2..], true),
            b"LPOP" => self.lpop(args),
            b"LRANGE" => self.lrange(key, &args[2], &args[3]),
            b"LTRIM" => self.ltrim(key, &args[2], &args[3]),
            b"LINDEX" => self.lindex(key, &args[2]),
            b"LLEN" => Ok(Value::Int(self.lookup_as(key, Kind::List)?.map_or(0, |r| r.len))),
            b"XADD" => self.xadd(args),
            b"XRANGE" => self.xrange(args, false),
            b"XREVRANGE" => self.xrange(args, true),
            b"XREAD" => self.xread(args),
            b"XLEN" => Ok(Value::Int(self.lookup_as(key, Kind::Stream)?.map_or(0, |r| r.len))),
            _ => reply(unknown_command(args)),
        }
    }

    // ----- Keys -----

    /// The key's record, or `None` for a missing key; a key whose expiry has passed is deleted
    /// first, as Redis does when it looks one up.
    fn lookup(&self, key: &[u8]) -> Res<Option<Record>> {
        let record = self
            .stmt("SELECT kind, expire_at, len, head, last_ms, last_seq FROM keys WHERE key = ?1")?
            .query_row(params![key], |r| {
                Ok(Record {
                    kind: Kind::from_code(r.get(0)?)?,
                    expire_at: r.get(1)?,
                    len: r.get(2)?,
                    head: r.get(3)?,
                    last: StreamId { ms: unordered(r.get(4)?), seq: unordered(r.get(5)?) },
                })
            })
            .optional()?;
        match record {
            Some(r) if r.expire_at.is_some_and(|at| self.now > at) => {
                self.delete(key, r.kind)?;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// [`Tx::lookup`] of a key that must be of type `kind`: `WRONGTYPE` otherwise.
    fn lookup_as(&self, key: &[u8], kind: Kind) -> Res<Option<Record>> {
        match self.lookup(key)? {
            Some(r) if r.kind != kind => reply(WRONGTYPE),
            other => Ok(other),
        }
    }

    /// [`Tx::lookup_as`], creating an empty key of `kind` when it is missing.
    fn lookup_or_create(&self, key: &[u8], kind: Kind) -> Res<Record> {
        match self.lookup_as(key, kind)? {
            Some(r) => Ok(r),
            None => self.create(key, kind, None),
        }
    }

    /// Writes the record of a new key (replacing any row of it) with no contents.
    fn create(&self, key: &[u8], kind: Kind, expire_at: Option<i64>) -> Res<Record> {
        let record = Record { kind, expire_at, len: 0, head: 0, last: StreamId::MIN };
        self.stmt(
            "INSERT OR REPLACE INTO keys (key, kind, expire_at, len, head, last_ms, last_seq) \
             VALUES (?1, ?2, ?3, 0, 0, ?4, ?4)",
        )?
        .execute(params![key, kind as i64, expire_at, ordered(0)])?;
        Ok(record)
    }

    /// Writes a container's length, head and last id back, or deletes it when it is an emptied
    /// hash, sorted set or list (a stream stays, as in Redis).
    fn save(&self, key: &[u8], r: &Record) -> Res<()> {
        debug_assert!(r.len >= 0, "negative length {} of {:?}", r.len, lossy(key));
        if r.len == 0 && r.kind != Kind::Stream {
            return self.delete(key, r.kind);
        }
        self.stmt("UPDATE keys SET len = ?2, head = ?3, last_ms = ?4, last_seq = ?5 WHERE key = ?1")?
            .execute(params![key, r.len, r.head, ordered(r.last.ms), ordered(r.last.seq)])?;
        Ok(())
    }

    /// Deletes a key and its contents.
    fn delete(&self, key: &[u8], kind: Kind) -> Res<()> {
        self.stmt("DELETE FROM keys WHERE key = ?1")?.execute(params![key])?;
        self.stmt(kind.delete_sql())?.execute(params![key])?;
        Ok(())
    }

    /// Deletes up to [`SWEEP_BUDGET`] keys whose expiry has passed.
    fn sweep(&self) -> Res<()> {
        let expired: Vec<(Vec<u8>, i64)> = self
            .stmt("SELECT key, kind FROM keys WHERE expire_at IS NOT NULL AND expire_at < ?1 LIMIT ?2")?
            .query_map(params![self.now, SWEEP_BUDGET], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (key, kind) in expired {
            self.delete(&key, Kind::from_code(kind)?)?;
        }
        Ok(())
    }

    fn del(&self, keys: &[Vec<u8>]) -> Res<Value> {
        let mut deleted = 0;
        for key in keys {
            if let Some(r) = self.lookup(key)? {
                self.delete(key, r.kind)?;
                deleted += 1;
            }
        }
        Ok(Value::Int(deleted))
    }

    fn exists(&self, keys: &[Vec<u8>]) -> Res<Value> {
        let mut found = 0;
        for key in keys {
            found += i64::from(self.lookup(key)?.is_some());
        }
        Ok(Value::Int(found))
    }

    fn kind_of(&self, key: &[u8]) -> Res<Value> {
        let name = self.lookup(key)?.map_or("none", |r| r.kind.name());
        Ok(Value::SimpleString(name.into()))
    }

    /// `PEXPIRE key ms [NX|XX|GT|LT]`: 1 when the expiry is set (or, at or before now, the key
    /// deleted), 0 for a missing key or a condition not met.
    fn pexpire(&self, args: &[Vec<u8>]) -> Res<Value> {
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for opt in &args[3..] {
            match opt.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                _ => return reply(format!("ERR Unsupported option {}", lossy(opt))),
            }
        }
        if nx && (xx || gt || lt) {
            return reply("ERR NX and XX, GT or LT options at the same time are not compatible");
        }
        if gt && lt {
            return reply("ERR GT and LT options at the same time are not compatible");
        }
        let ms = int_arg(&args[2])?;
        let Some(when) = ms.checked_add(self.now) else {
            return reply("ERR invalid expire time in 'pexpire' command");
        };
        let key = &args[1];
        let Some(r) = self.lookup(key)? else { return Ok(Value::Int(0)) };
        let skip = match r.expire_at {
            None => xx || gt,
            Some(current) => nx || (gt && when <= current) || (lt && when >= current),
        };
        if skip {
            return Ok(Value::Int(0));
        }
        if when <= self.now {
            self.delete(key, r.kind)?;
        } else {
            self.stmt("UPDATE keys SET expire_at = ?2 WHERE key = ?1")?.execute(params![key, when])?;
        }
        Ok(Value::Int(1))
    }

    fn pttl(&self, key: &[u8]) -> Res<Value> {
        Ok(Value::Int(match self.lookup(key)? {
            None => -2,
            Some(Record { expire_at: None, .. }) => -1,
            Some(Record { expire_at: Some(at), .. }) => (at - self.now).max(0),
        }))
    }

    /// `TIME`: the store's clock as `[seconds, microseconds]`.
    fn time(&self) -> Value {
        let now = self.now.max(0);
        Value::Array(vec![bulk((now / 1000).to_string()), bulk((now % 1000 * 1000).to_string())])
    }

    /// `OBJECT ENCODING key`: `skiplist` for every sorted set (so that a script that moves a
    /// compact set to a skip list finds nothing to do), and Redis's names for the rest.
    fn object(&self, args: &[Vec<u8>]) -> Res<Value> {
        if !args[1].eq_ignore_ascii_case(b"ENCODING") {
            return reply(format!("ERR unknown subcommand '{}'. Try OBJECT HELP.", lossy(&args[1])));
        }
        if args.len() != 3 {
            return reply(wrong_arity("object|encoding"));
        }
        let Some(r) = self.lookup(&args[2])? else { return Ok(Value::Nil) };
        let encoding = match r.kind {
            Kind::String => {
                let value = self.string_value(&args[2])?;
                if parse_int(&value).is_some() {
                    "int"
                } else if value.len() <= 44 {
                    "embstr"
                } else {
                    "raw"
                }
            }
            Kind::Hash => "hashtable",
            Kind::Zset => "skiplist",
            Kind::List => "quicklist",
            Kind::Stream => "stream",
        };
        Ok(bulk(encoding))
    }

    // ----- Strings -----

    fn string_value(&self, key: &[u8]) -> Res<Vec<u8>> {
        Ok(self.stmt("SELECT value FROM strings WHERE key = ?1")?.query_row(params![key], |r| r.get(0))?)
    }

    fn put_string(&self, key: &[u8], value: &[u8]) -> Res<()> {
        self.stmt("INSERT OR REPLACE INTO strings (key, value) VALUES (?1, ?2)")?.execute(params![key, value])?;
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Res<Value> {
        match self.lookup_as(key, Kind::String)? {
            Some(_) => Ok(bulk(self.string_value(key)?)),
            None => Ok(Value::Nil),
        }
    }

    /// `SET key value [NX|XX] [GET] [PX ms|EX s|KEEPTTL]`.
    fn set(&self, args: &[Vec<u8>]) -> Res<Value> {
        let (key, value) = (&args[1], &args[2]);
        let (mut nx, mut xx, mut get, mut keep_ttl) = (false, false, false, false);
        // The expiry's argument and its unit in ms.
        let mut expire: Option<(&[u8], i64)> = None;
        let mut at = 3;
        while at < args.len() {
            let next = args.get(at + 1);
            match (args[at].to_ascii_uppercase().as_slice(), next) {
                (b"NX", _) if !xx => nx = true,
                (b"XX", _) if !nx => xx = true,
                (b"GET", _) => get = true,
                (b"KEEPTTL", _) if expire.is_none() => keep_ttl = true,
                (b"PX", Some(n)) if !keep_ttl && expire.is_none_or(|(_, unit)| unit == 1) => {
                    expire = Some((n, 1));
                    at += 1;
                }
                (b"EX", Some(n)) if !keep_ttl && expire.is_none_or(|(_, unit)| unit == 1000) => {
                    expire = Some((n, 1000));
                    at += 1;
                }
                _ => return reply(SYNTAX),
            }
            at += 1;
        }
        let expire_at = match expire {
            None => None,
            Some((n, unit)) => {
                let n = int_arg(n)?;
                let at = (n > 0 && n <= i64::MAX / unit).then(|| (n * unit).checked_add(self.now)).flatten();
                Some(at.ok_or_else(|| Fail::Reply("ERR invalid expire time in 'set' command".into()))?)
            }
        };
        let old = self.lookup(key)?;
        let answer = if get {
            match old {
                Some(r) if r.kind != Kind::String => return reply(WRONGTYPE),
                Some(_) => bulk(self.string_value(key)?),
                None => Value::Nil,
            }
        } else {
            ok()
        };
        if (nx && old.is_some()) || (xx && old.is_none()) {
            return Ok(if get { answer } else { Value::Nil });
        }
        if let Some(r) = old.filter(|r| r.kind != Kind::String) {
            self.delete(key, r.kind)?;
        }
        let expire_at = if keep_ttl { old.and_then(|r| r.expire_at) } else { expire_at };
        self.create(key, Kind::String, expire_at)?;
        self.put_string(key, value)?;
        Ok(answer)
    }

    /// `INCR`, `DECR`, `INCRBY`, `DECRBY`: the new value. The key keeps its expiry.
    fn incr_by(&self, key: &[u8], by: i64) -> Res<Value> {
        let current = match self.lookup_as(key, Kind::String)? {
            Some(_) => parse_int(&self.string_value(key)?).ok_or_else(|| Fail::Reply(NOT_INTEGER.into()))?,
            None => {
                self.create(key, Kind::String, None)?;
                0
            }
        };
        let Some(value) = current.checked_add(by) else { return reply(OVERFLOW) };
        self.put_string(key, value.to_string().as_bytes())?;
        Ok(Value::Int(value))
    }

    // ----- Hashes -----

    fn field(&self, key: &[u8], field: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self
            .stmt("SELECT value FROM hashes WHERE key = ?1 AND field = ?2")?
            .query_row(params![key, field], |r| r.get(0))
            .optional()?)
    }

    /// Sets a field; true when it is new.
    fn put_field(&self, key: &[u8], field: &[u8], value: &[u8]) -> Res<bool> {
        let added = self
            .stmt("INSERT OR IGNORE INTO hashes (key, field, value) VALUES (?1, ?2, ?3)")?
            .execute(params![key, field, value])?
            == 1;
        if !added {
            self.stmt("UPDATE hashes SET value = ?3 WHERE key = ?1 AND field = ?2")?
                .execute(params![key, field, value])?;
        }
        Ok(added)
    }

    /// `HSET key field value [field value ...]`: how many fields are new.
    fn hset(&self, args: &[Vec<u8>]) -> Res<Value> {
        if args.len() % 2 == 1 {
            return reply(wrong_arity("hset"));
        }
        let key = &args[1];
        let mut r = self.lookup_or_create(key, Kind::Hash)?;
        let mut added = 0;
        for pair in args[2..].chunks(2) {
            added += i64::from(self.put_field(key, &pair[0], &pair[1])?);
        }
        r.len += added;
        self.save(key, &r)?;
        Ok(Value::Int(added))
    }

    fn hget(&self, key: &[u8], field: &[u8]) -> Res<Value> {
        if self.lookup_as(key, Kind::Hash)?.is_none() {
            return Ok(Value::Nil);
        }
        Ok(self.field(key, field)?.map_or(Value::Nil, bulk))
    }

    fn hmget(&self, key: &[u8], fields: &[Vec<u8>]) -> Res<Value> {
        if self.lookup_as(key, Kind::Hash)?.is_none() {
            return Ok(Value::Array(vec![Value::Nil; fields.len()]));
        }
        let values = fields.iter().map(|f| Ok(self.field(key, f)?.map_or(Value::Nil, bulk))).collect::<Res<_>>()?;
        Ok(Value::Array(values))
    }

    fn hdel(&self, key: &[u8], fields: &[Vec<u8>]) -> Res<Value> {
        let Some(mut r) = self.lookup_as(key, Kind::Hash)? else { return Ok(Value::Int(0)) };
        let mut deleted = 0;
        for field in fields {
            deleted +=
                self.stmt("DELETE FROM hashes WHERE key = ?1 AND field = ?2")?.execute(params![key, field])? as i64;
        }
        r.len -= deleted;
        self.save(key, &r)?;
        Ok(Value::Int(deleted))
    }

    fn hexists(&self, key: &[u8], field: &[u8]) -> Res<Value> {
        let found = self.lookup_as(key, Kind::Hash)?.is_some() && self.field(key, field)?.is_some();
        Ok(Value::Int(i64::from(found)))
    }

    fn hincrby(&self, key: &[u8], field: &[u8], by: &[u8]) -> Res<Value> {
        let by = int_arg(by)?;
        let mut r = self.lookup_or_create(key, Kind::Hash)?;
        let current = match self.field(key, field)? {
            Some(v) => parse_int(&v).ok_or_else(|| Fail::Reply("ERR hash value is not an integer".into()))?,
            None => 0,
        };
        let Some(value) = current.checked_add(by) else { return reply(OVERFLOW) };
        r.len += i64::from(self.put_field(key, field, value.to_string().as_bytes())?);
        self.save(key, &r)?;
        Ok(Value::Int(value))
    }

    fn hsetnx(&self, key: &[u8], field: &[u8], value: &[u8]) -> Res<Value> {
        let mut r = self.lookup_or_create(key, Kind::Hash)?;
        let added = self
            .stmt("INSERT OR IGNORE INTO hashes (key, field, value) VALUES (?1, ?2, ?3)")?
            .execute(params![key, field, value])? as i64;
        r.len += added;
        self.save(key, &r)?;
        Ok(Value::Int(added))
    }

    /// `HKEYS` (`values` false) and `HGETALL`, in field order (Redis gives a small hash's fields
    /// in the order they were added, a large one's in no order: a caller relies on none).
    fn hgetall(&self, key: &[u8], values: bool) -> Res<Value> {
        if self.lookup_as(key, Kind::Hash)?.is_none() {
            return Ok(Value::Array(Vec::new()));
        }
        let mut stmt = self.stmt("SELECT field, value FROM hashes WHERE key = ?1 ORDER BY field")?;
        let mut rows = stmt.query(params![key])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(bulk(row.get::<_, Vec<u8>>(0)?));
            if values {
                out.push(bulk(row.get::<_, Vec<u8>>(1)?));
            }
        }
        Ok(Value::Array(out))
    }

    // ----- Sorted sets -----

    fn zscore(&self, key: &[u8], member: &[u8]) -> Res<Option<f64>> {
        Ok(self
            .stmt("SELECT score FROM zsets WHERE key = ?1 AND member = ?2")?
            .query_row(params![key, member], |r| r.get(0))
            .optional()?)
    }

    /// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
    fn zadd(&self, args: &[Vec<u8>]) -> Res<Value> {
        let key = &args[1];
        let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, false);
        let mut at = 2;
        while let Some(opt) = args.get(at) {
            match opt.to_ascii_uppercase().as_slice() {
                b"NX" => nx = true,
                b"XX" => xx = true,
                b"GT" => gt = true,
                b"LT" => lt = true,
                b"CH" => ch = true,
                b"INCR" => incr = true,
                _ => break,
            }
            at += 1;
        }
        let pairs = &args[at..];
        if pairs.is_empty() || pairs.len() % 2 == 1 {
            return reply(SYNTAX);
        }
        if nx && xx {
            return reply("ERR XX and NX options at the same time are not compatible");
        }
        if (nx && (gt || lt)) || (gt && lt) {
            return reply("ERR GT, LT, and/or NX options at the same time are not compatible");
        }
        if incr && pairs.len() > 2 {
            return reply("ERR INCR option supports a single increment-element pair");
        }
        let scores = pairs.chunks(2).map(|p| parse_score(&p[0])).collect::<Option<Vec<f64>>>();
        let Some(scores) = scores else { return reply(NOT_FLOAT) };
        let mut r = match self.lookup_as(key, Kind::Zset)? {
            Some(r) => r,
            None if xx => return Ok(if incr { Value::Nil } else { Value::Int(0) }),
            None => self.create(key, Kind::Zset, None)?,
        };
        let (mut added, mut updated) = (0, 0);
        // The score of the last member added or updated, for INCR's reply.
        let mut result = None;
        for (pair, &score) in pairs.chunks(2).zip(&scores) {
            let member = &pair[1];
            match self.zscore(key, member)? {
                Some(current) => {
                    if nx {
                        continue;
                    }
                    let new = if incr { current + score } else { score };
                    if new.is_nan() {
                        return reply("ERR resulting score is not a number (NaN)");
                    }
                    if (gt && new <= current) || (lt && new >= current) {
                        continue;
                    }
                    result = Some(new);
                    if new != current {
                        self.stmt("UPDATE zsets SET score = ?3 WHERE key = ?1 AND member = ?2")?.execute(params![
                            key,
                            member,
                            stored(new)
                        ])?;
                        updated += 1;
                    }
                }
                None if xx => {}
                None => {
                    self.stmt("INSERT INTO zsets (key, member, score) VALUES (?1, ?2, ?3)")?.execute(params![
                        key,
                        member,
                        stored(score)
                    ])?;
                    added += 1;
                    result = Some(score);
                }
            }
        }
        r.len += added;
        self.save(key, &r)?;
        Ok(match (incr, result) {
            (true, Some(score)) => bulk(format_score(score)),
            (true, None) => Value::Nil,
            (false, _) => Value::Int(if ch { added + updated } else { added }),
        })
    }

    fn zscore_reply(&self, key: &[u8], member: &[u8]) -> Res<Value> {
        if self.lookup_as(key, Kind::Zset)?.is_none() {
            return Ok(Value::Nil);
        }
        Ok(self.zscore(key, member)?.map_or(Value::Nil, |s| bulk(format_score(s))))
    }

    fn zmscore(&self, key: &[u8], members: &[Vec<u8>]) -> Res<Value> {
        if self.lookup_as(key, Kind::Zset)?.is_none() {
            return Ok(Value::Array(vec![Value::Nil; members.len()]));
        }
        let scores = members
            .iter()
            .map(|m| Ok(self.zscore(key, m)?.map_or(Value::Nil, |s| bulk(format_score(s)))))
            .collect::<Res<_>>()?;
        Ok(Value::Array(scores))
    }

    fn zrem(&self, key: &[u8], members: &[Vec<u8>]) -> Res<Value> {
        let Some(mut r) = self.lookup_as(key, Kind::Zset)? else { return Ok(Value::Int(0)) };
        let mut removed = 0;
        for member in members {
            removed +=
                self.stmt("DELETE FROM zsets WHERE key = ?1 AND member = ?2")?.execute(params![key, member])? as i64;
        }
        r.len -= removed;
        self.save(key, &r)?;
        Ok(Value::Int(removed))
    }

    /// The members (and their scores) of ranks `offset..offset + count` in Redis's order, or in
    /// reverse for `rev`; all from `offset` for a negative `count`.
    fn zrange_by_rank(&self, key: &[u8], rev: bool, offset: i64, count: i64) -> Res<Vec<(Vec<u8>, f64)>> {
        let sql = if rev {
            "SELECT member, score FROM zsets WHERE key = ?1 ORDER BY score DESC, member DESC LIMIT ?3 OFFSET ?2"
        } else {
            "SELECT member, score FROM zsets WHERE key = ?1 ORDER BY score, member LIMIT ?3 OFFSET ?2"
        };
        let mut stmt = self.stmt(sql)?;
        let rows = stmt.query_map(params![key, offset, count], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The members (and their scores) within `range`, in Redis's order or in reverse for `rev`,
    /// skipping `offset` and keeping `count` (all for a negative one).
    fn zrange_by_score(
        &self,
        key: &[u8],
        range: &ScoreRange,
        rev: bool,
        offset: i64,
        count: i64,
    ) -> Res<Vec<(Vec<u8>, f64)>> {
        let dir = if rev { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT member, score FROM zsets WHERE key = ?1 AND {} ORDER BY score {dir}, member {dir} \
             LIMIT ?5 OFFSET ?4",
            range.condition()
        );
        let mut stmt = self.stmt(&sql)?;
        let rows = stmt.query_map(params![key, range.min, range.max, offset, count], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]`,
    /// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]` and `ZREVRANGEBYSCORE key
    /// max min ...`, parsed as Redis parses them (`BYLEX` is not supported).
    fn zrange(&self, args: &[Vec<u8>], command: Zrange) -> Res<Value> {
        let key = &args[1];
        let (mut rev, mut by_score) = match command {
            Zrange::Any => (None, None),
            Zrange::ByScore => (Some(false), Some(true)),
            Zrange::RevByScore => (Some(true), Some(true)),
        };
        let (mut with_scores, mut offset, mut count) = (false, 0, -1);
        let mut at = 4;
        while at < args.len() {
            let left = args.len() - at - 1;
            match args[at].to_ascii_uppercase().as_slice() {
                b"WITHSCORES" => with_scores = true,
                b"LIMIT" if left >= 2 => {
                    offset = int_arg(&args[at + 1])?;
                    count = int_arg(&args[at + 2])?;
                    at += 2;
                }
                b"REV" if rev.is_none() => rev = Some(true),
                b"BYSCORE" if by_score.is_none() => by_score = Some(true),
                b"BYLEX" if by_score.is_none() => return reply("ERR the embedded store does not support BYLEX"),
                _ => return reply(SYNTAX),
            }
            at += 1;
        }
        let (rev, by_score) = (rev.unwrap_or(false), by_score.unwrap_or(false));
        if count != -1 && !by_score {
            return reply("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
        }
        let members = if by_score {
            let (min, max) = if rev { (&args[3], &args[2]) } else { (&args[2], &args[3]) };
            let Some(range) = ScoreRange::parse(min, max) else { return reply(RANGE_NOT_FLOAT) };
            let Some(r) = self.lookup_as(key, Kind::Zset)? else { return Ok(Value::Array(Vec::new())) };
            if offset < 0 || (offset > 0 && offset >= r.len) {
                Vec::new()
            } else {
                self.zrange_by_score(key, &range, rev, offset, count)?
            }
        } else {
            let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
            let Some(r) = self.lookup_as(key, Kind::Zset)? else { return Ok(Value::Array(Vec::new())) };
            match rank_window(start, stop, r.len) {
                Some((first, n)) => self.zrange_by_rank(key, rev, first, n)?,
                None => Vec::new(),
            }
        };
        let mut out = Vec::with_capacity(members.len() * if with_scores { 2 } else { 1 });
        for (member, score) in members {
            out.push(bulk(member));
            if with_scores {
                out.push(bulk(format_score(score)));
            }
        }
        Ok(Value::Array(out))
    }

    fn zremrangebyrank(&self, key: &[u8], start: &[u8], stop: &[u8]) -> Res<Value> {
        let (start, stop) = (int_arg(start)?, int_arg(stop)?);
        let Some(mut r) = self.lookup_as(key, Kind::Zset)? else { return Ok(Value::Int(0)) };
        let Some((first, n)) = rank_window(start, stop, r.len) else { return Ok(Value::Int(0)) };
        let removed = self
            .stmt(
                "DELETE FROM zsets WHERE key = ?1 AND member IN \
                 (SELECT member FROM zsets WHERE key = ?1 ORDER BY score, member LIMIT ?3 OFFSET ?2)",
            )?
            .execute(params![key, first, n])? as i64;
        r.len -= removed;
        self.save(key, &r)?;
        Ok(Value::Int(removed))
    }

    fn zremrangebyscore(&self, key: &[u8], min: &[u8], max: &[u8]) -> Res<Value> {
        let Some(range) = ScoreRange::parse(min, max) else { return reply(RANGE_NOT_FLOAT) };
        let Some(mut r) = self.lookup_as(key, Kind::Zset)? else { return Ok(Value::Int(0)) };
        let sql = format!("DELETE FROM zsets WHERE key = ?1 AND {}", range.condition());
        let removed = self.stmt(&sql)?.execute(params![key, range.min, range.max])? as i64;
        r.len -= removed;
        self.save(key, &r)?;
        Ok(Value::Int(removed))
    }

    fn zcount(&self, key: &[u8], min: &[u8], max: &[u8]) -> Res<Value> {
        let Some(range) = ScoreRange::parse(min, max) else { return reply(RANGE_NOT_FLOAT) };
        if self.lookup_as(key, Kind::Zset)?.is_none() {
            return Ok(Value::Int(0));
        }
        let sql = format!("SELECT count(*) FROM zsets WHERE key = ?1 AND {}", range.condition());
        Ok(Value::Int(self.stmt(&sql)?.query_row(params![key, range.min, range.max], |r| r.get(0))?))
    }

    fn zrank(&self, key: &[u8], member: &[u8]) -> Res<Value> {
        if self.lookup_as(key, Kind::Zset)?.is_none() {
            return Ok(Value::Nil);
        }
        let Some(score) = self.zscore(key, member)? else { return Ok(Value::Nil) };
        let rank: i64 = self
            .stmt(
                "SELECT (SELECT count(*) FROM zsets WHERE key = ?1 AND score < ?2) + \
                 (SELECT count(*) FROM zsets WHERE key = ?1 AND score = ?2 AND member < ?3)",
            )?
            .query_row(params![key, score, member], |r| r.get(0))?;
        Ok(Value::Int(rank))
    }

    // ----- Lists -----

    fn push(&self, key: &[u8], values: &[Vec<u8>], left: bool) -> Res<Value> {
        let mut r = self.lookup_or_create(key, Kind::List)?;
        for value in values {
            let pos = if left {
                r.head -= 1;
                r.head
            } else {
                r.head + r.len
            };
            self.stmt("INSERT INTO lists (key, pos, value) VALUES (?1, ?2, ?3)")?.execute(params![key, pos, value])?;
            r.len += 1;
        }
        self.save(key, &r)?;
        Ok(Value::Int(r.len))
    }

    /// The items at positions `from..=to`, in order.
    fn items(&self, key: &[u8], from: i64, to: i64) -> Res<Vec<Value>> {
        let mut stmt = self.stmt("SELECT value FROM lists WHERE key = ?1 AND pos BETWEEN ?2 AND ?3 ORDER BY pos")?;
        let rows = stmt.query_map(params![key, from, to], |r| r.get::<_, Vec<u8>>(0))?;
        Ok(rows.map(|v| v.map(bulk)).collect::<rusqlite::Result<_>>()?)
    }

    fn delete_items(&self, key: &[u8], from: i64, to: i64) -> Res<()> {
        self.stmt("DELETE FROM lists WHERE key = ?1 AND pos BETWEEN ?2 AND ?3")?.execute(params![key, from, to])?;
        Ok(())
    }

    /// `LPOP key [count]`: the head item, or an array of up to `count` (Nil for a missing key
    /// either way).
    fn lpop(&self, args: &[Vec<u8>]) -> Res<Value> {
        if args.len() > 3 {
            return reply(wrong_arity("lpop"));
        }
        let count = match args.get(2).map(|n| parse_int(n)) {
            None => None,
            Some(Some(n)) if n >= 0 => Some(n),
            Some(_) => return reply("ERR value is out of range, must be positive"),
        };
        let key = &args[1];
        let Some(mut r) = self.lookup_as(key, Kind::List)? else { return Ok(Value::Nil) };
        let n = count.unwrap_or(1).min(r.len);
        let mut items = if n > 0 { self.items(key, r.head, r.head + n - 1)? } else { Vec::new() };
        if n > 0 {
            self.delete_items(key, r.head, r.head + n - 1)?;
            r.head += n;
            r.len -= n;
            self.save(key, &r)?;
        }
        Ok(match count {
            Some(_) => Value::Array(items),
            None => items.pop().unwrap_or(Value::Nil),
        })
    }

    fn lrange(&self, key: &[u8], start: &[u8], stop: &[u8]) -> Res<Value> {
        let (start, stop) = (int_arg(start)?, int_arg(stop)?);
        let Some(r) = self.lookup_as(key, Kind::List)? else { return Ok(Value::Array(Vec::new())) };
        Ok(Value::Array(match rank_window(start, stop, r.len) {
            Some((first, n)) => self.items(key, r.head + first, r.head + first + n - 1)?,
            None => Vec::new(),
        }))
    }

    fn ltrim(&self, key: &[u8], start: &[u8], stop: &[u8]) -> Res<Value> {
        let (start, stop) = (int_arg(start)?, int_arg(stop)?);
        let Some(mut r) = self.lookup_as(key, Kind::List)? else { return Ok(ok()) };
        let (first, n) = rank_window(start, stop, r.len).unwrap_or((r.len, 0));
        let tail = r.head + r.len - 1;
        self.delete_items(key, r.head, r.head + first - 1)?;
        self.delete_items(key, r.head + first + n, tail)?;
        r.head += first;
        r.len = n;
        self.save(key, &r)?;
        Ok(ok())
    }

    fn lindex(&self, key: &[u8], index: &[u8]) -> Res<Value> {
        let Some(r) = self.lookup_as(key, Kind::List)? else { return Ok(Value::Nil) };
        let index = int_arg(index)?;
        let index = if index < 0 { index + r.len } else { index };
        if index < 0 || index >= r.len {
            return Ok(Value::Nil);
        }
        Ok(self.items(key, r.head + index, r.head + index)?.pop().unwrap_or(Value::Nil))
    }

    // ----- Streams -----

    /// `XADD key [NOMKSTREAM] [MAXLEN [=|~] n] *|id field value [field value ...]`. The
    /// approximate `~` trims exactly, which Redis allows (it keeps at least `n`); `MINID` and
    /// `LIMIT` are not supported.
    fn xadd(&self, args: &[Vec<u8>]) -> Res<Value> {
        let key = &args[1];
        let (mut no_create, mut max_len) = (false, None);
        // The id asked for: `None` for `*`; `Some((id, false))` for `<ms>-*`.
        let mut asked: Option<(StreamId, bool)> = None;
        let mut at = 2;
        while at < args.len() {
            let more = args.len() - 1 - at;
            let opt = &args[at];
            let upper = opt.to_ascii_uppercase();
            if opt.as_slice() == b"*" {
                break;
            } else if upper == b"MAXLEN" && more > 0 {
                if max_len.is_some() {
                    return reply("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
                }
                if more >= 2 && matches!(args[at + 1].as_slice(), b"~" | b"=") {
                    at += 1;
                }
                let n = int_arg(&args[at + 1])?;
                if n < 0 {
                    return reply("ERR The MAXLEN argument must be >= 0.");
                }
                max_len = Some(n);
                at += 1;
            } else if (upper == b"MINID" || upper == b"LIMIT") && more > 0 {
                return reply(format!("ERR the embedded store does not support XADD {}", lossy(&upper)));
            } else if upper == b"NOMKSTREAM" {
                no_create = true;
            } else {
                asked = Some(parse_xadd_id(opt)?);
                break;
            }
            at += 1;
        }
        let fields = args.get(at + 1..).unwrap_or_default();
        if fields.len() < 2 || fields.len() % 2 == 1 {
            return reply(wrong_arity("xadd"));
        }
        if asked == Some((StreamId::MIN, true)) {
            return reply("ERR The ID specified in XADD must be greater than 0-0");
        }
        let mut r = match self.lookup_as(key, Kind::Stream)? {
            Some(r) => r,
            None if no_create => return Ok(Value::Nil),
            None => self.create(key, Kind::Stream, None)?,
        };
        if r.last == StreamId::MAX {
            return reply("ERR The stream has exhausted the last possible ID, unable to add more items");
        }
        let id = match asked {
            None => match u64::try_from(self.now).unwrap_or(0) {
                ms if ms > r.last.ms => StreamId { ms, seq: 0 },
                _ => r.last.next().unwrap_or(StreamId::MAX),
            },
            Some((id, true)) if id > r.last => id,
            Some((id, false)) if id.ms > r.last.ms => id,
            Some((id, false)) if id.ms == r.last.ms && r.last.seq < u64::MAX => {
                StreamId { ms: id.ms, seq: r.last.seq + 1 }
            }
            Some(_) => return reply(STREAM_TOP),
        };
        self.stmt("INSERT INTO streams (key, ms, seq, fields) VALUES (?1, ?2, ?3, ?4)")?.execute(params![
            key,
            ordered(id.ms),
            ordered(id.seq),
            pack(fields)
        ])?;
        r.len += 1;
        r.last = id;
        if let Some(max) = max_len.filter(|&max| r.len > max) {
            let removed = self
                .stmt(
                    "DELETE FROM streams WHERE key = ?1 AND (ms, seq) IN \
                     (SELECT ms, seq FROM streams WHERE key = ?1 ORDER BY ms, seq LIMIT ?2)",
                )?
                .execute(params![key, r.len - max])? as i64;
            r.len -= removed;
        }
        self.save(key, &r)?;
        Ok(bulk(id.text()))
    }

    /// The entries from `first` to `last`, forwards or (`rev`) backwards, at most `count` (all for
    /// a negative one), each as `[id, [field, value, ...]]`.
    fn entries(&self, key: &[u8], first: StreamId, last: StreamId, rev: bool, count: i64) -> Res<Vec<Value>> {
        let sql = if rev {
            "SELECT ms, seq, fields FROM streams WHERE key = ?1 AND (ms, seq) >= (?2, ?3) AND (ms, seq) <= (?4, ?5) \
             ORDER BY ms DESC, seq DESC LIMIT ?6"
        } else {
            "SELECT ms, seq, fields FROM streams WHERE key = ?1 AND (ms, seq) >= (?2, ?3) AND (ms, seq) <= (?4, ?5) \
             ORDER BY ms, seq LIMIT ?6"
        };
        let bounds = (ordered(first.ms), ordered(first.seq), ordered(last.ms), ordered(last.seq));
        let mut stmt = self.stmt(sql)?;
        let rows = stmt.query_map(params![key, bounds.0, bounds.1, bounds.2, bounds.3, count], |r| {
            let id = StreamId { ms: unordered(r.get(0)?), seq: unordered(r.get(1)?) };
            Ok((id, r.get::<_, Vec<u8>>(2)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, fields) = row?;
            let Some(fields) = unpack(&fields) else {
                return reply(format!("ERR the entry {} of a stream is damaged", lossy(&id.text())));
            };
            out.push(Value::Array(vec![bulk(id.text()), Value::Array(fields)]));
        }
        Ok(out)
    }

    /// `XRANGE key start end [COUNT n]` and `XREVRANGE key end start [COUNT n]`.
    fn xrange(&self, args: &[Vec<u8>], rev: bool) -> Res<Value> {
        let key = &args[1];
        let (start, end) = if rev { (&args[3], &args[2]) } else { (&args[2], &args[3]) };
        let (start, exclusive) = parse_interval_id(start, 0)?;
        let Some(start) = (if exclusive { start.next() } else { Some(start) }) else {
            return reply("ERR invalid start ID for the interval");
        };
        let (end, exclusive) = parse_interval_id(end, u64::MAX)?;
        let Some(end) = (if exclusive { end.prev() } else { Some(end) }) else {
            return reply("ERR invalid end ID for the interval");
        };
        let mut count = -1;
        let mut at = 4;
        while at < args.len() {
            if args[at].eq_ignore_ascii_case(b"COUNT") && at + 1 < args.len() {
                count = int_arg(&args[at + 1])?.max(0);
                at += 2;
            } else {
                return reply(SYNTAX);
            }
        }
        if self.lookup_as(key, Kind::Stream)?.is_none() {
            return Ok(Value::Array(Vec::new()));
        }
        if count == 0 {
            return Ok(Value::Nil);
        }
        Ok(Value::Array(self.entries(key, start, end, rev, count)?))
    }

    /// `XREAD [COUNT n] [BLOCK ms] STREAMS key [key ...] id [id ...]`, without waiting (the
    /// store waits, calling again after each commit): each stream's entries after its id, Nil
    /// when none has any.
    fn xread(&self, args: &[Vec<u8>]) -> Res<Value> {
        let mut count = 0;
        let mut streams = None;
        let mut at = 1;
        while at < args.len() {
            let more = args.len() - at - 1;
            match args[at].to_ascii_uppercase().as_slice() {
                b"BLOCK" if more > 0 => {
                    at += 1;
                    let ms = parse_int(&args[at])
                        .ok_or_else(|| Fail::Reply("ERR timeout is not an integer or out of range".into()))?;
                    if ms < 0 {
                        return reply("ERR timeout is negative");
                    }
                }
                b"COUNT" if more > 0 => {
                    at += 1;
                    count = int_arg(&args[at])?.max(0);
                }
                b"STREAMS" if more > 0 => {
                    if !more.is_multiple_of(2) {
                        return reply(
                            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                        );
                    }
                    streams = Some(at + 1);
                    break;
                }
                _ => return reply(SYNTAX),
            }
            at += 1;
        }
        let Some(from) = streams else { return reply(SYNTAX) };
        let (keys, ids) = args[from..].split_at((args.len() - from) / 2);
        let mut after = Vec::with_capacity(keys.len());
        for (key, id) in keys.iter().zip(ids) {
            let r = self.lookup_as(key, Kind::Stream)?;
            after.push(match id.as_slice() {
                b"$" => r.map_or(StreamId::MIN, |r| r.last),
                b">" => {
                    return reply(
                        "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> \
                         <consumer> option.",
                    )
                }
                _ => parse_stream_id(id, 0, true)?,
            });
        }
        let mut out = Vec::new();
        for (key, after) in keys.iter().zip(after) {
            let Some(first) = after.next() else { continue };
            if self.lookup(key)?.is_none() {
                continue;
            }
            let entries = self.entries(key, first, StreamId::MAX, false, if count == 0 { -1 } else { count })?;
            if !entries.is_empty() {
                out.push(Value::Array(vec![bulk(key.clone()), Value::Array(entries)]));
            }
        }
        Ok(if out.is_empty() { Value::Nil } else { Value::Array(out) })
    }
}

/// Which of the `ZRANGE` commands is parsed.
#[derive(Debug, Clone, Copy)]
enum Zrange {
    /// `ZRANGE`: by rank unless `BYSCORE`, forwards unless `REV`.
    Any,
    ByScore,
    RevByScore,
}

/// A range of scores, each end inclusive or not (`(`).
#[derive(Debug, Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_exclusive: bool,
    max: f64,
    max_exclusive: bool,
}

impl ScoreRange {
    /// Reads `min` and `max` as Redis does (`zslParseRange`): a `(` before a bound excludes it;
    /// a bound is read by C's `strtod` (so `-inf`, `+inf`, leading white space and the empty
    /// string, which is 0, pass); NaN does not.
    fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let bound = |b: &[u8]| match b.split_first() {
            Some((b'(', rest)) => Some((strtod_whole(rest)?, true)),
            _ => Some((strtod_whole(b)?, false)),
        };
        let ((min, min_exclusive), (max, max_exclusive)) = (bound(min)?, bound(max)?);
        Some(ScoreRange { min, min_exclusive, max, max_exclusive })
    }

    /// The range as SQL over `score`, with `?2` the min and `?3` the max.
    fn condition(&self) -> &'static str {
        match (self.min_exclusive, self.max_exclusive) {
            (false, false) => "score >= ?2 AND score <= ?3",
            (true, false) => "score > ?2 AND score <= ?3",
            (false, true) => "score >= ?2 AND score < ?3",
            (true, true) => "score > ?2 AND score < ?3",
        }
    }
}

/// A score as it is kept: `-0` as `0`, as Redis keeps it in a small (listpack) sorted set, the
/// kind the wheel's sets mostly are. (A skip list keeps `-0`; only its printing differs.)
fn stored(score: f64) -> f64 {
    score + 0.0
}

/// Redis's clamp of the ranks `start..=stop` (negative ones counted from the end) to a length
/// `len`: the first rank and how many, or `None` for an empty range.
fn rank_window(start: i64, stop: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start, stop - start + 1))
}

/// An integer argument, or Redis's error for one that is not.
fn int_arg(arg: &[u8]) -> Res<i64> {
    parse_int(arg).ok_or_else(|| Fail::Reply(NOT_INTEGER.into()))
}

/// Redis's `string2ll`: a decimal `i64` with no sign but `-`, no leading zero and nothing
/// around it; at most 20 bytes.
fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut magnitude: u64 = 0;
    for d in digits {
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Redis's `string2ull` for stream ids: [`parse_int`] when it is not negative, else plain
/// digits up to `u64::MAX`.
fn parse_u64(s: &[u8]) -> Option<u64> {
    match parse_int(s) {
        Some(n) => u64::try_from(n).ok(),
        None if !s.is_empty() && s.iter().all(u8::is_ascii_digit) => std::str::from_utf8(s).ok()?.parse().ok(),
        None => None,
    }
}

/// A stream id as Redis reads one (`streamGenericParseIDOrReply`): `-` and `+` (unless
/// `strict`), `<ms>` (with `missing_seq`) or `<ms>-<seq>`.
fn parse_stream_id(s: &[u8], missing_seq: u64, strict: bool) -> Res<StreamId> {
    let bad = || Fail::Reply(BAD_STREAM_ID.into());
    if s.len() > 127 {
        return Err(bad());
    }
    match s {
        b"-" if !strict => return Ok(StreamId::MIN),
        b"+" if !strict => return Ok(StreamId::MAX),
        _ => {}
    }
    let (ms, seq) = match s.iter().position(|&b| b == b'-') {
        Some(dash) => (&s[..dash], Some(&s[dash + 1..])),
        None => (s, None),
    };
    let ms = parse_u64(ms).ok_or_else(bad)?;
    let seq = match seq {
        Some(seq) => parse_u64(seq).ok_or_else(bad)?,
        None => missing_seq,
    };
    Ok(StreamId { ms, seq })
}

/// An end of an `XRANGE` interval: an id, or `(` and an id for an exclusive end.
fn parse_interval_id(s: &[u8], missing_seq: u64) -> Res<(StreamId, bool)> {
    match s.split_first() {
        Some((b'(', rest)) if !rest.is_empty() => Ok((parse_stream_id(rest, missing_seq, true)?, true)),
        _ => Ok((parse_stream_id(s, missing_seq, false)?, false)),
    }
}

/// `XADD`'s explicit id: `<ms>-<seq>`, `<ms>` (sequence 0) or `<ms>-*` (the next sequence of
/// `ms`, the `false`).
fn parse_xadd_id(s: &[u8]) -> Res<(StreamId, bool)> {
    match s.strip_suffix(b"-*") {
        Some(ms) if !ms.is_empty() && !ms.contains(&b'-') => {
            let ms = parse_u64(ms).ok_or_else(|| Fail::Reply(BAD_STREAM_ID.into()))?;
            Ok((StreamId { ms, seq: 0 }, false))
        }
        _ => Ok((parse_stream_id(s, 0, true)?, true)),
    }
}

/// A stream entry's field-value pairs packed as one blob: each item's length (4 bytes, big
/// endian) and bytes.
fn pack(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 4).sum());
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_be_bytes());
        out.extend_from_slice(item);
    }
    out
}

/// The items of a [`pack`]ed blob, `None` for a damaged one.
fn unpack(mut blob: &[u8]) -> Option<Vec<Value>> {
    let mut items = Vec::new();
    while !blob.is_empty() {
        let (len, rest) = blob.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        items.push(bulk(rest.get(..len)?));
        blob = &rest[len..];
    }
    Some(items)
}

/// A score as Redis 7.0 reads one (`string2d`): C's `strtod` over the whole argument, with no
/// leading white space, no NaN, and no decimal too large for a double or too small to be
/// anything but zero.
fn parse_score(s: &[u8]) -> Option<f64> {
    if s.first().is_none_or(u8::is_ascii_whitespace) || s.first() == Some(&0x0b) {
        return None;
    }
    let (value, out_of_range) = strtod(s)?;
    (!value.is_nan() && !out_of_range).then_some(value)
}

/// A range bound's number (see [`ScoreRange::parse`]): `strtod` over the whole of `s`, NaN
/// refused; the empty string is 0, as `strtod` reads nothing and leaves nothing.
fn strtod_whole(s: &[u8]) -> Option<f64> {
    if s.is_empty() {
        return Some(0.0);
    }
    strtod(s).map(|(v, _)| v).filter(|v| !v.is_nan())
}

/// C's `strtod` where it must read all of `s`: leading white space, a sign, then `inf`,
/// `infinity` or `nan` in any case, or a decimal with an optional exponent. The flag says the
/// decimal was out of a double's range (`ERANGE`): too large, or too small for anything but 0.
/// Hexadecimal numbers are not read.
fn strtod(s: &[u8]) -> Option<(f64, bool)> {
    let start = s.iter().position(|b| !(b.is_ascii_whitespace() || *b == 0x0b))?;
    let s = &s[start..];
    let (negative, body) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let sign = if negative { -1.0 } else { 1.0 };
    let lower = body.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Some((sign * f64::INFINITY, false));
    }
    if lower == b"nan"
        || (lower.starts_with(b"nan(")
            && lower.ends_with(b")")
            && lower[4..lower.len() - 1].iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_'))
    {
        return Some((f64::NAN, false));
    }
    // digits [. digits] [e [sign] digits], with a digit before or after the point.
    let digits = |from: usize| body[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let whole = digits(0);
    let mut at = whole;
    let mut fraction = 0;
    if body.get(at) == Some(&b'.') {
        fraction = digits(at + 1);
        at += 1 + fraction;
    }
    if whole + fraction == 0 {
        return None;
    }
    let mantissa_end = at;
    if matches!(body.get(at), Some(b'e' | b'E')) {
        let signed = usize::from(matches!(body.get(at + 1), Some(b'+' | b'-')));
        let exponent = digits(at + 1 + signed);
        if exponent == 0 {
            return None;
        }
        at += 1 + signed + exponent;
    }
    if at != body.len() {
        return None;
    }
    let magnitude: f64 = std::str::from_utf8(body).ok()?.parse().ok()?;
    let nonzero = body[..mantissa_end].iter().any(|b| matches!(b, b'1'..=b'9'));
    let out_of_range = magnitude.is_infinite() || (magnitude == 0.0 && nonzero);
    Some((sign * magnitude, out_of_range))
}

/// A score as Redis 7.0 prints one (`%.17g`, `inf` and `-inf`): the shortest of the two forms
/// of 17 significant digits, trailing zeros dropped, so an integral score has no point
/// ("1796631456149") and any double reads back exactly.
fn format_score(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // 17 significant digits, rounded once, and the decimal exponent of the first.
    let scientific = format!("{:.16e}", d.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    debug_assert_eq!(digits.len(), 17, "{scientific}");
    let sign = if d < 0.0 { "-" } else { "" };
    let trim = |s: &[u8]| {
        let end = s.iter().rposition(|&b| b != b'0').map_or(0, |i| i + 1);
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    if !(-4..17).contains(&exponent) {
        let fraction = trim(&digits[1..]);
        let point = if fraction.is_empty() { "" } else { "." };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{}{point}{fraction}e{exp_sign}{:02}", digits[0] as char, exponent.unsigned_abs());
    }
    let (whole, fraction) = if exponent >= 0 {
        let split = exponent as usize + 1;
        (String::from_utf8_lossy(&digits[..split]).into_owned(), trim(&digits[split..]))
    } else {
        let zeros = "0".repeat(exponent.unsigned_abs() as usize - 1);
        ("0".to_string(), trim(format!("{zeros}{}", String::from_utf8_lossy(&digits)).as_bytes()))
    };
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}
