//! Tests inside the crate, against a real `redis-server` (the integration tests' harness, included
//! by path): one script at a time on seeded keys (`scripts`; `series` and `options` for what
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

/// A Redis server for a test, or `None` (the test returns) where none can be started.
pub(crate) fn start_server() -> Option<RedisServer> {
    RedisServer::start()
}

/// A server and a wheel `name` opened on it (nothing scheduled, nothing running).
async fn wheel(name: &str) -> Option<(RedisServer, DurableScheduler)> {
    wheel_keeping(name, crate::durable::DEFAULT_HISTORY_LIMIT).await
}

/// [`wheel`], keeping a history of at most `history` finished runs (0: none).
async fn wheel_keeping(name: &str, history: usize) -> Option<(RedisServer, DurableScheduler)> {
    let server = RedisServer::start()?;
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
fn redis_now_ms(server: &RedisServer) -> u64 {
    let t = server.command(&["TIME"]);
    let part = |i: usize| t.as_array()[i].as_str().and_then(|s| s.parse::<u64>().ok()).expect("TIME");
    part(0) * 1000 + part(1) / 1000
}

/// Every key of the wheel but its `meta` hash, by suffix, with a readable value: a string as is,
/// a hash as `field=value` pairs in field order, a sorted set as `member@score` in rank order, a
/// list as its items.
fn dump(server: &RedisServer, keys: &WheelKeys) -> BTreeMap<String, String> {
    let pattern = format!("{}*", keys.prefix());
    let names = server.command(&["KEYS", &pattern]);
    let mut out = BTreeMap::new();
    for name in names.as_array().iter().filter_map(Reply::as_str) {
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
fn meta(server: &RedisServer, keys: &WheelKeys, field: &str) -> i64 {
    server.command(&["HGET", &keys.meta(), field]).as_int().unwrap_or(0)
}

/// The expected dump: `(suffix, value)` pairs.
/// Acknowledgements of tasks without a spec, from (key, claim token) pairs.
fn acks(pairs: &[(&str, &str)]) -> Vec<super::store::scripts::Ack> {
    pairs.iter().map(|(k, t)| super::store::scripts::Ack::plain(k, t)).collect()
}

fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
