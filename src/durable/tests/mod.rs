//! Tests inside the crate, against a real `redis-server` (the integration tests' harness, included
//! by path) or, with `TIMEWHEEL_TEST_STORE=sqlite`, the embedded store on a SQLite file (see
//! [`Server`]): one script at a time on seeded keys (`scripts`; `series` and `options` for what
//! recurring series and a task's own retry settings add), one table of cases for the fixed rate
//! that `advance.lua` moves on and the crate's rule for the next run (`advance`), and the retry
//! and fencing tests that need to choose a request id or a fencing token (`hooks`), which no
//! public method lets a caller do.

// The integration tests' support code, shared by path; it names the crate `tokio_timewheel`,
// which `lib.rs` makes resolve here too under `cfg(test)`.
#[path = "../../../tests/support/mod.rs"]
mod support;

mod advance;
mod costs;
mod formats;
mod hooks;
mod options;
mod paced;
mod scripts;
mod series;

use std::collections::BTreeMap;
use std::time::Duration;

use support::redis_server::{RedisServer, Reply};

use super::{DurableScheduler, WheelKeys};

/// The tick of the wheels these tests open, in ms.
const TICK_MS: u64 = 100;
/// Their slot count.
const SLOTS: u64 = 8;
/// Their lease: long enough that no lease runs out unless a test seeds one that has.
const LEASE: Duration = Duration::from_secs(60);

/// Where a test's wheel is kept, as `TIMEWHEEL_TEST_STORE` chooses (tests/support/store.rs): a
/// Redis server, or a SQLite file of the embedded store, into which the test's own commands (the
/// keys it seeds and reads) go through a keyspace connection of their own, as they would go to
/// Redis through a client beside the wheel's. The checks of what only Redis has (`INFO`'s
/// counters, an encoding) ask [`Server::redis`] and run on Redis alone.
pub(crate) enum Server {
    Redis(RedisServer),
    #[cfg(feature = "sqlite")]
    Sqlite {
        _dir: tempfile::TempDir,
        url: String,
        keyspace: std::sync::Mutex<super::store::sqlite::keyspace::Keyspace>,
    },
}

impl Server {
    /// The store the run is on, fresh and empty; `None` (the test returns) where no Redis server
    /// can be started.
    pub(crate) fn start() -> Option<Server> {
        match support::store::Kind::selected() {
            support::store::Kind::Redis => RedisServer::start().map(Server::Redis),
            support::store::Kind::Sqlite => Some(Self::sqlite()),
        }
    }

    #[cfg(feature = "sqlite")]
    fn sqlite() -> Server {
        use super::store::sqlite::keyspace::{Durability, Keyspace};
        let dir = tempfile::Builder::new().prefix("timewheel-unit-").tempdir().expect("a temp dir");
        let path = dir.path().join("wheel.db");
        let keyspace = Keyspace::open(Some(&path), Durability::Process).expect("a keyspace");
        Server::Sqlite {
            url: format!("sqlite:{}", path.display()),
            _dir: dir,
            keyspace: std::sync::Mutex::new(keyspace),
        }
    }

    #[cfg(not(feature = "sqlite"))]
    fn sqlite() -> Server {
        panic!("TIMEWHEEL_TEST_STORE=sqlite needs the crate's `sqlite` feature")
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Server::Redis(server) => server.url(),
            #[cfg(feature = "sqlite")]
            Server::Sqlite { url, .. } => url.clone(),
        }
    }

    /// The Redis server, when the run is on Redis.
    pub(crate) fn redis(&self) -> Option<&RedisServer> {
        match self {
            Server::Redis(server) => Some(server),
            #[cfg(feature = "sqlite")]
            Server::Sqlite { .. } => None,
        }
    }

    /// One command, as `redis-cli` would send it; on SQLite, in a transaction of its own on the
    /// store's wall clock.
    pub(crate) fn command(&self, args: &[&str]) -> Reply {
        match self {
            Server::Redis(server) => server.command(args),
            #[cfg(feature = "sqlite")]
            Server::Sqlite { keyspace, .. } => {
                let mut keyspace = keyspace.lock().unwrap_or_else(|p| p.into_inner());
                let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
                keyspace.begin().expect("begin");
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let answer = keyspace.command(&args, now_ms);
                keyspace.commit().expect("commit");
                match answer {
                    Ok(value) => reply_of(value),
                    Err(e) => Reply::Error(e.0),
                }
            }
        }
    }
}

impl Server {
    /// A connection for scripts of the test's own (`EVALSHA` after `SCRIPT LOAD`): to the server,
    /// or an embedded store of its own on the file.
    pub(crate) async fn connection(&self) -> super::store::deployment::Connection {
        use super::store::deployment::Connection;
        match self {
            Server::Redis(server) => {
                let client = redis::Client::open(server.url()).unwrap();
                Connection::Node(0, redis::aio::ConnectionManager::new(client).await.unwrap())
            }
            #[cfg(feature = "sqlite")]
            Server::Sqlite { url, .. } => {
                use super::store::sqlite::{Place, Store};
                let store = Store::open(&Place::parse(url).unwrap(), crate::durable::Durability::Process, &[]).unwrap();
                Connection::Embedded(store.connect())
            }
        }
    }

    /// The names of the keys that start with `prefix` (`KEYS prefix*` on Redis), live ones only.
    fn keys_with(&self, prefix: &str) -> Vec<String> {
        match self {
            Server::Redis(server) => {
                let names = server.command(&["KEYS", &format!("{prefix}*")]);
                names.as_array().iter().filter_map(Reply::as_str).map(str::to_owned).collect()
            }
            #[cfg(feature = "sqlite")]
            Server::Sqlite { keyspace, .. } => {
                let names = keyspace.lock().unwrap_or_else(|p| p.into_inner()).key_names();
                names
                    .into_iter()
                    .filter_map(|n| String::from_utf8(n).ok())
                    .filter(|n| n.starts_with(prefix))
                    .filter(|n| self.command(&["EXISTS", n]).as_int() == Some(1))
                    .collect()
            }
        }
    }
}

/// A reply of the embedded keyspace as the harness reads Redis's.
#[cfg(feature = "sqlite")]
fn reply_of(value: redis::Value) -> Reply {
    use redis::Value;
    match value {
        Value::Nil => Reply::Bulk(None),
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Bulk(Some(b)),
        Value::Array(items) => Reply::Array(Some(items.into_iter().map(reply_of).collect())),
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".into()),
        Value::Double(d) => Reply::Bulk(Some(d.to_string().into_bytes())),
        other => panic!("the keyspace answered {other:?}"),
    }
}

/// The store of a test, or `None` (the test returns) where none can be started.
pub(crate) fn start_server() -> Option<Server> {
    Server::start()
}

/// A server and a wheel `name` opened on it (nothing scheduled, nothing running).
async fn wheel(name: &str) -> Option<(Server, DurableScheduler)> {
    wheel_keeping(name, crate::durable::DEFAULT_HISTORY_LIMIT).await
}

/// [`wheel`], keeping a history of at most `history` finished runs (0: none).
async fn wheel_keeping(name: &str, history: usize) -> Option<(Server, DurableScheduler)> {
    let server = Server::start()?;
    let timers = DurableScheduler::builder(server.url(), name)
        .history_limit(history)
        .tick(Duration::from_millis(TICK_MS))
        .slots(SLOTS as usize)
        .lease(LEASE)
        .max_attempts(3)
        .backoff(Duration::from_millis(1000))
        .connect()
        .await
        .expect("connect");
    Some((server, timers))
}

/// Redis's clock in ms.
fn redis_now_ms(server: &Server) -> u64 {
    let t = server.command(&["TIME"]);
    let part = |i: usize| t.as_array()[i].as_str().and_then(|s| s.parse::<u64>().ok()).expect("TIME");
    part(0) * 1000 + part(1) / 1000
}

/// Every key of the wheel but its `meta` hash, by suffix, with a readable value: a string as is,
/// a hash as `field=value` pairs in field order, a sorted set as `member@score` in rank order, a
/// list as its items.
fn dump(server: &Server, keys: &WheelKeys) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for name in &server.keys_with(keys.prefix()) {
        let suffix = name.strip_prefix(keys.prefix()).unwrap().to_string();
        if suffix == "meta" {
            continue;
        }
        let strings = |r: Reply| r.as_array().iter().map(|x| x.as_str().unwrap_or("?").to_string()).collect::<Vec<_>>();
        let value = match server.command(&["TYPE", name]).as_str().unwrap() {
            "string" => server.command(&["GET", name]).as_str().unwrap_or("?").to_string(),
            "hash" => {
                let flat = strings(server.command(&["HGETALL", name]));
                let mut pairs: Vec<String> = flat.chunks(2).map(|p| format!("{}={}", p[0], p[1])).collect();
                pairs.sort();
                pairs.join(" ")
            }
            "zset" => {
                let flat = strings(server.command(&["ZRANGE", name, "0", "-1", "WITHSCORES"]));
                flat.chunks(2).map(|p| format!("{}@{}", p[0], p[1])).collect::<Vec<_>>().join(" ")
            }
            "list" => strings(server.command(&["LRANGE", name, "0", "-1"])).join(" "),
            other => format!("({other})"),
        };
        out.insert(suffix, value);
    }
    out
}

/// One field of the wheel's `meta` hash, as a number (0 when unset).
fn meta(server: &Server, keys: &WheelKeys, field: &str) -> i64 {
    server.command(&["HGET", &keys.meta(), field]).as_int().unwrap_or(0)
}

/// Seeds the claim of task `k` under claim token `token` as `claim.lua` leaves it (its record,
/// written by the caller, holds that token): its key in `claimed`, a claim call of that one token
/// in `claims`, the call's lease ending at `until` in `leased`.
fn seed_lease(server: &Server, keys: &WheelKeys, k: &str, token: u64, until: u64) {
    server.command(&["ZADD", &keys.claimed(), &token.to_string(), k]);
    server.command(&["ZADD", &keys.claims(), &token.to_string(), &format!("{token}:1:0:test")]);
    server.command(&["ZADD", &keys.leased(), &until.to_string(), &token.to_string()]);
}

/// Acknowledgements of tasks without a spec, from (key, claim token) pairs.
fn acks(pairs: &[(&str, &str)]) -> Vec<super::store::scripts::Ack> {
    pairs.iter().map(|(k, t)| super::store::scripts::Ack::plain(k, t)).collect()
}

/// The expected dump: `(suffix, value)` pairs.
fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
