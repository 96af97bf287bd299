//! The keyspace's tests: its replies against a real `redis-server`'s under thousands of random
//! commands (`differential`), and, with no server, the number forms, expiry, streams' ids, the
//! transaction's rollback after a storage error, and what `open` accepts and refuses.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::ConnectionLike;

use super::*;

/// Runs one command given as text.
fn run(ks: &mut Keyspace, now_ms: u64, args: &[&str]) -> Result<Value, CommandError> {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    ks.command(&args, now_ms)
}

/// [`run`], for a command that must succeed.
fn ok_at(ks: &mut Keyspace, now_ms: u64, args: &[&str]) -> Value {
    run(ks, now_ms, args).unwrap_or_else(|e| panic!("{args:?}: {e:?}"))
}

fn memory() -> Keyspace {
    Keyspace::open(None, Durability::Process).expect("an in-memory keyspace")
}

fn b(s: &str) -> Value {
    bulk(s.as_bytes())
}

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| b(s)).collect())
}

// ----- Numbers -----

#[test]
fn scores_print_as_printf_17g() {
    let cases: &[(f64, &str)] = &[
        (1_796_631_456_149.0, "1796631456149"),
        (0.0, "0"),
        (-0.0, "-0"),
        (1.5, "1.5"),
        (-2.0, "-2"),
        (0.1, "0.10000000000000001"),
        (1e3, "1000"),
        (1e16, "10000000000000000"),
        (1e17, "1e+17"),
        (123_456_789_012_345_680.0, "1.2345678901234568e+17"),
        (1e-4, "0.0001"),
        (1e-5, "1.0000000000000001e-05"),
        (2.5e-7, "2.4999999999999999e-07"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::MAX, "1.7976931348623157e+308"),
        (5e-324, "4.9406564584124654e-324"),
        (9_007_199_254_740_993.0, "9007199254740992"),
        (0.3, "0.29999999999999999"),
        (-123.456, "-123.456"),
    ];
    for &(score, printed) in cases {
        assert_eq!(format_score(score), printed, "{score:e}");
        if score.is_finite() {
            assert_eq!(parse_score(printed.as_bytes()), Some(score), "{printed} reads back");
        }
    }
}

#[test]
fn integers_are_read_as_string2ll() {
    let good: &[(&str, i64)] =
        &[("0", 0), ("7", 7), ("-7", -7), ("9223372036854775807", i64::MAX), ("-9223372036854775808", i64::MIN)];
    for &(text, n) in good {
        assert_eq!(parse_int(text.as_bytes()), Some(n), "{text}");
    }
    for text in ["", "-", "-0", "01", "+1", " 1", "1 ", "1.0", "9223372036854775808", "-9223372036854775809", "1e3"] {
        assert_eq!(parse_int(text.as_bytes()), None, "{text:?}");
    }
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_u64(b"-1"), None);
}

#[test]
fn scores_and_bounds_are_read_as_strtod() {
    for (text, score) in [("1", 1.0), ("-1.5", -1.5), ("+inf", f64::INFINITY), ("-Infinity", f64::NEG_INFINITY)] {
        assert_eq!(parse_score(text.as_bytes()), Some(score), "{text}");
    }
    for (text, score) in [(".5", 0.5), ("5.", 5.0), ("1E+2", 100.0), ("1e-2", 0.01), ("+3", 3.0)] {
        assert_eq!(parse_score(text.as_bytes()), Some(score), "{text}");
    }
    // A score: no white space, no NaN, nothing out of a double's range, nothing left over.
    for text in ["", " 1", "\x0b1", "1 ", "nan", "NaN", "1e400", "1e-400", "abc", "1e", "0x10", "--1", "."] {
        assert_eq!(parse_score(text.as_bytes()), None, "{text:?}");
    }
    // A range's bounds: `strtod`'s leniency, `(` for an exclusive end.
    let range = ScoreRange::parse(b"(1", b" 2").expect("a range");
    assert_eq!((range.min, range.min_exclusive, range.max, range.max_exclusive), (1.0, true, 2.0, false));
    let range = ScoreRange::parse(b"", b"1e400").expect("a range");
    assert_eq!((range.min, range.max), (0.0, f64::INFINITY));
    let range = ScoreRange::parse(b"(", b"-inf").expect("a range");
    assert_eq!((range.min, range.min_exclusive, range.max), (0.0, true, f64::NEG_INFINITY));
    assert!(ScoreRange::parse(b"nan", b"1").is_none());
    assert!(ScoreRange::parse(b"1", b" ").is_none());
    assert!(ScoreRange::parse(b"(a", b"1").is_none());
}

#[test]
fn ranks_clamp_as_redis_does() {
    assert_eq!(rank_window(0, -1, 5), Some((0, 5)));
    assert_eq!(rank_window(-2, -1, 5), Some((3, 2)));
    assert_eq!(rank_window(-100, 1, 5), Some((0, 2)));
    assert_eq!(rank_window(3, 100, 5), Some((3, 2)));
    assert_eq!(rank_window(5, 10, 5), None);
    assert_eq!(rank_window(2, 1, 5), None);
    assert_eq!(rank_window(0, -1, 0), None);
    assert_eq!(rank_window(i64::MIN, i64::MAX, 3), Some((0, 3)));
}

// ----- Commands at chosen instants -----

#[test]
fn expiry_is_checked_against_now() {
    let mut ks = memory();
    assert_eq!(ok_at(&mut ks, 1000, &["SET", "k", "v", "PX", "100"]), ok());
    assert_eq!(ok_at(&mut ks, 1050, &["PTTL", "k"]), Value::Int(50));
    assert_eq!(ok_at(&mut ks, 1100, &["GET", "k"]), b("v"), "alive at its expiry");
    assert_eq!(ok_at(&mut ks, 1100, &["PTTL", "k"]), Value::Int(0));
    assert_eq!(ok_at(&mut ks, 1101, &["GET", "k"]), Value::Nil, "gone after it");
    assert_eq!(ok_at(&mut ks, 1101, &["EXISTS", "k"]), Value::Int(0));
    assert_eq!(ok_at(&mut ks, 1101, &["TYPE", "k"]), Value::SimpleString("none".into()));
    // A hash with an expiry, renewed, then expired: a new HSET makes a key with none.
    ok_at(&mut ks, 2000, &["HSET", "h", "f", "1"]);
    assert_eq!(ok_at(&mut ks, 2000, &["PEXPIRE", "h", "10"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 2005, &["PEXPIRE", "h", "10", "GT"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 2015, &["HGET", "h", "f"]), b("1"));
    assert_eq!(ok_at(&mut ks, 2016, &["HSET", "h", "g", "2"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 2016, &["HLEN", "h"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 2016, &["PTTL", "h"]), Value::Int(-1));
    // PEXPIRE at or before now deletes; INCR keeps an expiry, SET drops it.
    assert_eq!(ok_at(&mut ks, 3000, &["PEXPIRE", "h", "0"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 3000, &["EXISTS", "h"]), Value::Int(0));
    ok_at(&mut ks, 3000, &["SET", "n", "1", "PX", "500"]);
    assert_eq!(ok_at(&mut ks, 3100, &["INCR", "n"]), Value::Int(2));
    assert_eq!(ok_at(&mut ks, 3100, &["PTTL", "n"]), Value::Int(400));
    ok_at(&mut ks, 3100, &["SET", "n", "5"]);
    assert_eq!(ok_at(&mut ks, 3100, &["PTTL", "n"]), Value::Int(-1));
    assert_eq!(ok_at(&mut ks, 3100, &["PTTL", "missing"]), Value::Int(-2));
}

#[test]
fn a_sweep_deletes_expired_keys_that_nothing_reads() {
    let mut ks = memory();
    for i in 0..100 {
        ok_at(&mut ks, 0, &["SET", &format!("answer:{i}"), "x", "PX", "10"]);
    }
    ok_at(&mut ks, 0, &["SET", "kept", "x"]);
    let rows = |ks: &Keyspace| ks.conn.query_row("SELECT count(*) FROM keys", [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(rows(&ks), 101);
    for _ in 0..(2 * SWEEP_EVERY) {
        ok_at(&mut ks, 100, &["GET", "kept"]);
    }
    assert_eq!(rows(&ks), 1, "two sweeps delete up to {} keys", 2 * SWEEP_BUDGET);
}

#[test]
fn time_answers_the_store_clock() {
    let mut ks = memory();
    assert_eq!(ok_at(&mut ks, 1_700_000_123_456, &["TIME"]), strings(&["1700000123", "456000"]));
}

#[test]
fn emptied_containers_cease_to_exist_but_streams_stay() {
    let mut ks = memory();
    ok_at(&mut ks, 0, &["HSET", "h", "f", "v"]);
    ok_at(&mut ks, 0, &["HDEL", "h", "f"]);
    ok_at(&mut ks, 0, &["ZADD", "z", "1", "m"]);
    ok_at(&mut ks, 0, &["ZREMRANGEBYSCORE", "z", "-inf", "+inf"]);
    ok_at(&mut ks, 0, &["RPUSH", "l", "a", "b"]);
    ok_at(&mut ks, 0, &["LPOP", "l", "5"]);
    ok_at(&mut ks, 0, &["XADD", "x", "MAXLEN", "0", "*", "f", "v"]);
    assert_eq!(ok_at(&mut ks, 0, &["EXISTS", "h", "z", "l", "x"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, 0, &["TYPE", "x"]), Value::SimpleString("stream".into()));
    assert_eq!(ok_at(&mut ks, 0, &["XLEN", "x"]), Value::Int(0));
    for table in ["hashes", "zsets", "lists", "streams"] {
        let n: i64 = ks.conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0, "{table}");
    }
}

#[test]
fn stream_ids_follow_now_and_never_go_back() {
    let mut ks = memory();
    let add =
        |ks: &mut Keyspace, now| ok_at(ks, now, &["XADD", "x", "MAXLEN", "~", "3", "*", "key", "k", "token", "t"]);
    assert_eq!(add(&mut ks, 5), b("5-0"));
    assert_eq!(add(&mut ks, 5), b("5-1"));
    assert_eq!(add(&mut ks, 4), b("5-2"), "a clock that went back");
    assert_eq!(add(&mut ks, 7), b("7-0"));
    assert_eq!(ok_at(&mut ks, 7, &["XLEN", "x"]), Value::Int(3), "trimmed to 3");
    let last = ok_at(&mut ks, 7, &["XREVRANGE", "x", "+", "-", "COUNT", "1"]);
    assert_eq!(last, Value::Array(vec![Value::Array(vec![b("7-0"), strings(&["key", "k", "token", "t"])])]));
    let read = ok_at(&mut ks, 7, &["XREAD", "COUNT", "128", "STREAMS", "x", "5-1"]);
    let entry = |id: &str| Value::Array(vec![b(id), strings(&["key", "k", "token", "t"])]);
    assert_eq!(read, Value::Array(vec![Value::Array(vec![b("x"), Value::Array(vec![entry("5-2"), entry("7-0")])])]));
    assert_eq!(ok_at(&mut ks, 7, &["XREAD", "COUNT", "128", "STREAMS", "x", "7-0"]), Value::Nil, "nothing newer");
    assert_eq!(ok_at(&mut ks, 7, &["XREAD", "BLOCK", "10", "STREAMS", "x", "$"]), Value::Nil);
    assert_eq!(ok_at(&mut ks, 7, &["XREAD", "STREAMS", "missing", "0"]), Value::Nil);
    assert_eq!(ok_at(&mut ks, 7, &["XREVRANGE", "missing", "+", "-", "COUNT", "1"]), Value::Array(Vec::new()));
    // Ids beyond i64: SQLite's signed integers keep their order.
    ok_at(&mut ks, 7, &["XADD", "y", "9223372036854775807-0", "a", "1"]);
    ok_at(&mut ks, 7, &["XADD", "y", "9223372036854775808-0", "a", "2"]);
    ok_at(&mut ks, 7, &["XADD", "y", "18446744073709551615-*", "a", "3"]);
    let ids = ok_at(&mut ks, 7, &["XRANGE", "y", "-", "+"]);
    let Value::Array(entries) = ids else { panic!("{ids:?}") };
    let ids: Vec<_> = entries.iter().map(|e| if let Value::Array(e) = e { e[0].clone() } else { Value::Nil }).collect();
    assert_eq!(ids, vec![b("9223372036854775807-0"), b("9223372036854775808-0"), b("18446744073709551615-0")]);
}

#[test]
fn object_encoding_keeps_the_scripts_skiplist_check_a_no_op() {
    let mut ks = memory();
    assert_eq!(ok_at(&mut ks, 0, &["OBJECT", "ENCODING", "z"]), Value::Nil);
    for i in 0..40 {
        ok_at(&mut ks, 0, &["ZADD", "z", &i.to_string(), &format!("m{i}")]);
    }
    // zadd_all.lua's keep_skiplist moves a set whose encoding is listpack or ziplist.
    assert_eq!(ok_at(&mut ks, 0, &["OBJECT", "ENCODING", "z"]), b("skiplist"));
    ok_at(&mut ks, 0, &["SET", "n", "12"]);
    assert_eq!(ok_at(&mut ks, 0, &["OBJECT", "encoding", "n"]), b("int"));
    assert_eq!(
        run(&mut ks, 0, &["OBJECT", "FREQ", "n"]),
        Err(CommandError("ERR unknown subcommand 'FREQ'. Try OBJECT HELP.".into()))
    );
}

#[test]
fn negative_zero_is_kept_as_zero() {
    let mut ks = memory();
    ok_at(&mut ks, 0, &["ZADD", "z", "-0", "a", "0", "b", "-1", "c"]);
    assert_eq!(ok_at(&mut ks, 0, &["ZSCORE", "z", "a"]), b("0"), "as a small Redis set keeps it");
    assert_eq!(ok_at(&mut ks, 0, &["ZADD", "z", "INCR", "-0", "d"]), b("-0"), "the sum, as Redis answers it");
    assert_eq!(
        ok_at(&mut ks, 0, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
        strings(&["c", "-1", "a", "0", "b", "0", "d", "0"])
    );
    assert_eq!(ok_at(&mut ks, 0, &["ZADD", "z", "CH", "-0", "a"]), Value::Int(0), "-0 == 0: no change");
}

/// The forms the wheel's scripts and calls send, each answered as they expect.
#[test]
fn the_crates_command_forms() {
    let mut ks = memory();
    let long = format!("~timewheel: a member longer than zset-max-listpack-value~{}", "~".repeat(200));
    let at = 1_796_631_456_149u64;
    ok_at(&mut ks, at, &["ZADD", "ready", "1796631456149", "a", "1796631456150", "b"]);
    assert_eq!(ok_at(&mut ks, at, &["ZADD", "ready", "NX", "0", &long]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, at, &["ZREM", "ready", &long]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, at, &["ZRANGE", "ready", "0", "0", "WITHSCORES"]), strings(&["a", "1796631456149"]));
    assert_eq!(
        ok_at(&mut ks, at, &["ZREVRANGEBYSCORE", "ready", "1796631456150", "-inf", "WITHSCORES", "LIMIT", "0", "1"]),
        strings(&["b", "1796631456150"])
    );
    assert_eq!(ok_at(&mut ks, at, &["ZREMRANGEBYSCORE", "ready", "-inf", "(1796631456150"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, at, &["ZMSCORE", "ready", "a", "b"]), Value::Array(vec![Value::Nil, b("1796631456150")]));
    assert_eq!(ok_at(&mut ks, at, &["SET", "leader", "node:1", "PX", "3000"]), ok());
    assert_eq!(ok_at(&mut ks, at, &["SET", "leader", "node:2", "PX", "3000", "NX"]), Value::Nil);
    assert_eq!(ok_at(&mut ks, at, &["HMGET", "meta", "tick_ms", "slots"]), Value::Array(vec![Value::Nil, Value::Nil]));
    assert_eq!(ok_at(&mut ks, at, &["HINCRBY", "meta", "scheduled", "3"]), Value::Int(3));
    assert_eq!(ok_at(&mut ks, at, &["LPUSH", "wake", "1"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, at, &["LTRIM", "wake", "0", "0"]), ok());
    assert_eq!(ok_at(&mut ks, at, &["LPOP", "sk", "10"]), Value::Nil);
    assert_eq!(ok_at(&mut ks, at, &["INCRBY", "ring", "5"]), Value::Int(5));
    assert_eq!(ok_at(&mut ks, at, &["DECRBY", "ring", "2"]), Value::Int(3));
    assert_eq!(ok_at(&mut ks, at, &["HSETNX", "tasks", "k", "v"]), Value::Int(1));
    assert_eq!(ok_at(&mut ks, at, &["HSETNX", "tasks", "k", "w"]), Value::Int(0));
    assert_eq!(ok_at(&mut ks, at, &["HGETALL", "tasks"]), strings(&["k", "v"]));
    assert_eq!(run(&mut ks, at, &["GET", "tasks"]), Err(CommandError(WRONGTYPE.into())));
    assert_eq!(ok_at(&mut ks, at, &["xadd", "cancels", "maxlen", "~", "1000", "*", "key", "k"]), b("1796631456149-0"));
}

// ----- Transactions -----

#[test]
fn a_storage_error_rolls_the_transaction_back() {
    let mut ks = memory();
    ks.begin().unwrap();
    ok_at(&mut ks, 0, &["SET", "a", "1"]);
    // A table gone inside the transaction stands for a failed write.
    ks.conn.execute_batch("DROP TABLE hashes").unwrap();
    let failed = run(&mut ks, 0, &["HSET", "h", "f", "v"]).unwrap_err();
    assert!(failed.0.starts_with("ERR the embedded store failed"), "{failed:?}");
    let refused = ks.commit().unwrap_err();
    assert!(refused.contains("rolled back"), "{refused}");
    assert_eq!(ok_at(&mut ks, 0, &["GET", "a"]), Value::Nil, "the SET went with it");
    assert_eq!(ok_at(&mut ks, 0, &["HSET", "h", "f", "v"]), Value::Int(1), "the table is back");
    // An error reply breaks nothing.
    ks.begin().unwrap();
    ok_at(&mut ks, 0, &["SET", "a", "1"]);
    run(&mut ks, 0, &["INCR", "h"]).unwrap_err();
    ks.commit().unwrap();
    assert_eq!(ok_at(&mut ks, 0, &["GET", "a"]), b("1"));
    ks.rollback().unwrap();
}

#[test]
fn the_hot_queries_use_the_indexes() {
    let ks = memory();
    let plan = |sql: &str| -> String {
        let mut stmt = ks.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let mut rows = stmt.raw_query();
        let mut plan = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            plan.push(row.get::<_, String>(3).unwrap());
        }
        plan.join("; ")
    };
    let by_score = plan(&format!(
        "SELECT member, score FROM zsets WHERE key = ?1 AND {} ORDER BY score DESC, member DESC LIMIT ?5 OFFSET ?4",
        ScoreRange { min: 0.0, min_exclusive: true, max: 1.0, max_exclusive: false }.condition()
    ));
    assert!(by_score.contains("zsets_by_score") && !by_score.contains("TEMP B-TREE"), "{by_score}");
    let sweep = plan("SELECT key, kind FROM keys WHERE expire_at IS NOT NULL AND expire_at < ?2 LIMIT ?4");
    assert!(sweep.contains("keys_by_expiry"), "{sweep}");
    let range = plan(
        "SELECT ms, seq, fields FROM streams WHERE key = ?1 AND (ms, seq) >= (?4, ?5) AND (ms, seq) <= (?4, ?5) \
         ORDER BY ms, seq LIMIT ?6",
    );
    assert!(range.contains("(key=? AND") && !range.contains("TEMP B-TREE"), "{range}");
}

// ----- Open -----

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

#[test]
fn a_file_keeps_its_keys_across_opens() {
    for durability in [Durability::Process, Durability::Power] {
        let dir = dir();
        let path = dir.path().join("wheel.db");
        {
            let mut ks = Keyspace::open(Some(&path), durability).unwrap();
            ks.begin().unwrap();
            ok_at(&mut ks, 0, &["HSET", "tasks", "a", "1", "b", "2"]);
            ok_at(&mut ks, 0, &["ZADD", "ready", "5", "a"]);
            ok_at(&mut ks, 0, &["RPUSH", "wake", "x", "y"]);
            ok_at(&mut ks, 0, &["XADD", "cancels", "*", "key", "a"]);
            ok_at(&mut ks, 0, &["SET", "leader", "n:1", "PX", "1000"]);
            ks.commit().unwrap();
            ks.begin().unwrap();
            ok_at(&mut ks, 0, &["SET", "uncommitted", "1"]);
            ks.rollback().unwrap();
            let mode: String = ks.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
            let sync: i64 = ks.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
            assert_eq!((mode.as_str(), sync), ("wal", if durability == Durability::Power { 2 } else { 1 }));
        }
        let mut ks = Keyspace::open(Some(&path), durability).unwrap();
        assert_eq!(ok_at(&mut ks, 10, &["HGET", "tasks", "b"]), b("2"));
        assert_eq!(ok_at(&mut ks, 10, &["ZSCORE", "ready", "a"]), b("5"));
        assert_eq!(ok_at(&mut ks, 10, &["LRANGE", "wake", "0", "-1"]), strings(&["x", "y"]));
        assert_eq!(ok_at(&mut ks, 10, &["XLEN", "cancels"]), Value::Int(1));
        assert_eq!(ok_at(&mut ks, 10, &["PTTL", "leader"]), Value::Int(990));
        assert_eq!(ok_at(&mut ks, 10, &["EXISTS", "uncommitted"]), Value::Int(0));
    }
}

/// `open`'s error for `path`, which must fail.
fn refused(path: &Path) -> String {
    match Keyspace::open(Some(path), Durability::Process) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e,
    }
}

#[test]
fn open_refuses_a_file_that_is_not_sqlite() {
    let dir = dir();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "a text file, long enough to be more than a SQLite header would be. ".repeat(20)).unwrap();
    let e = refused(&path);
    assert!(e.contains("is not a SQLite database") && e.contains("notes.txt"), "{e}");
    assert!(std::fs::read_to_string(&path).unwrap().starts_with("a text file"), "left as it was");
}

#[test]
fn open_refuses_another_applications_database() {
    let dir = dir();
    let path = dir.path().join("app.db");
    let other = Connection::open(&path).unwrap();
    other.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)").unwrap();
    drop(other);
    let e = refused(&path);
    assert!(e.contains("another application's SQLite database") && e.contains("users"), "{e}");
    // The same with an application id of its own and no tables.
    let path = dir.path().join("marked.db");
    Connection::open(&path).unwrap().pragma_update(None, "application_id", 42).unwrap();
    let e = refused(&path);
    assert!(e.contains("another application's") && e.contains("0x2a"), "{e}");
}

#[test]
fn open_refuses_a_newer_or_damaged_layout() {
    let dir = dir();
    let path = dir.path().join("wheel.db");
    drop(Keyspace::open(Some(&path), Durability::Process).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", LAYOUT + 1).unwrap();
    drop(conn);
    let e = refused(&path);
    assert!(e.contains("newer tokio-timewheel") && e.contains(&format!("layout {}", LAYOUT + 1)), "{e}");
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", LAYOUT).unwrap();
    conn.execute_batch("DROP TABLE streams").unwrap();
    drop(conn);
    let e = refused(&path);
    assert!(e.contains("damaged keyspace"), "{e}");
}

#[test]
fn open_refuses_a_read_only_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir();
    let path = dir.path().join("wheel.db");
    drop(Keyspace::open(Some(&path), Durability::Process).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    if std::fs::OpenOptions::new().write(true).open(&path).is_ok() {
        eprintln!("skipped: this process writes read-only files (root)");
        return;
    }
    let e = refused(&path);
    assert!(e.contains("read-only"), "{e}");
}

#[test]
fn open_refuses_a_path_it_cannot_create() {
    let dir = dir();
    let missing: PathBuf = dir.path().join("no-such-dir").join("wheel.db");
    let e = refused(&missing);
    assert!(e.contains("does not exist") && e.contains("no-such-dir"), "{e}");
    assert!(!dir.path().join("no-such-dir").exists(), "nothing created");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let e = refused(&file.join("wheel.db"));
    assert!(e.contains("is not a directory"), "{e}");
    let e = refused(dir.path());
    assert!(e.contains("is a directory"), "{e}");
}

// ----- Against Redis -----

/// A small deterministic generator (SplitMix64): the same seed, the same commands.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const STRING_KEYS: &[&str] = &["s1", "s2"];
const HASH_KEYS: &[&str] = &["h1", "h2"];
const ZSET_KEYS: &[&str] = &["z1", "z2"];
const LIST_KEYS: &[&str] = &["l1", "l2"];
const STREAM_KEYS: &[&str] = &["x1", "x2"];
const ALL_KEYS: &[&str] = &["s1", "s2", "h1", "h2", "z1", "z2", "l1", "l2", "x1", "x2", "missing"];
const VALUES: &[&str] = &["0", "1", "-3", "10", "abc", "", "01", "-0", "9223372036854775806", "-9223372036854775807"];
const INCREMENTS: &[&str] = &["1", "-1", "5", "0", "9223372036854775807", "-9223372036854775808", "abc", "1.5"];
const FIELDS: &[&str] = &["f0", "f1", "f2", "f3"];
const MEMBERS: &[&str] = &["m0", "m1", "m2", "m3", "m4", ""];
/// Scores that Redis 7.0 and later print alike, and a few that no ZADD takes.
#[rustfmt::skip]
const SCORES: &[&str] =
    &["0", "1", "2", "-1", "1.5", "-0", "1e3", "+inf", "-inf", "inf", "1796631456149", "2.5", "abc", "nan", " 1", "1e400"];
/// Scores that Redis 7.0 prints with 17 digits and later versions with the fewest.
const LONG_SCORES: &[&str] = &["0.1", "3.0000000000000004", "1e-5", "123456789.123"];
const BOUNDS: &[&str] =
    &["-inf", "+inf", "(1", "(0", "1.5", "2", "(2", "0", "-1", "abc", "", "(", "1e400", " 1", "(-inf", "inf", "nan"];
const RANKS: &[&str] = &["-4", "-3", "-2", "-1", "0", "1", "2", "3", "5", "x"];

/// One random command over a few keys of each type (now and then another type's, for
/// `WRONGTYPE`), in the forms the keyspace supports, but for those that depend on the clock or
/// on Redis's encodings (`TIME`, `*` ids, `OBJECT ENCODING`: tested above); `long_scores` adds
/// scores that only Redis 7.0 prints as the keyspace does.
fn random_command(rng: &mut Rng, step: usize, long_scores: bool) -> Vec<String> {
    let key = |rng: &mut Rng, family: &[&'static str]| -> String {
        if rng.chance(8) { rng.pick(ALL_KEYS) } else { rng.pick(family) }.to_string()
    };
    let score = |rng: &mut Rng| {
        if long_scores && rng.chance(15) { rng.pick(LONG_SCORES) } else { rng.pick(SCORES) }.to_string()
    };
    let s = |x: &str| x.to_string();
    let mut cmd: Vec<String>;
    match rng.below(42) {
        0 => cmd = vec![s("GET"), key(rng, STRING_KEYS)],
        1 => {
            cmd = vec![s("SET"), key(rng, STRING_KEYS), s(rng.pick(VALUES))];
            for _ in 0..rng.below(3) {
                match rng.below(10) {
                    0 => cmd.push(s("NX")),
                    1 => cmd.push(s("XX")),
                    2 => cmd.push(s("GET")),
                    3 => cmd.push(s("KEEPTTL")),
                    4 => cmd.extend([s("EX"), s(rng.pick(&["100", "0", "x"]))]),
                    5 => cmd.push(s("PX")),
                    _ => cmd.extend([s("PX"), s(rng.pick(&["60000", "90000", "0", "-5", "x"]))]),
                }
            }
        }
        2 => cmd = vec![s("DEL"), key(rng, ALL_KEYS), key(rng, ALL_KEYS)],
        3 => cmd = vec![s("EXISTS"), key(rng, ALL_KEYS), key(rng, ALL_KEYS), key(rng, ALL_KEYS)],
        4 => {
            let k = key(rng, STRING_KEYS);
            cmd = match rng.below(4) {
                0 => vec![s("INCR"), k],
                1 => vec![s("DECR"), k],
                2 => vec![s("INCRBY"), k, s(rng.pick(INCREMENTS))],
                _ => vec![s("DECRBY"), k, s(rng.pick(INCREMENTS))],
            }
        }
        5 => {
            cmd = vec![s("PEXPIRE"), key(rng, ALL_KEYS), s(rng.pick(&["60000", "120000", "0", "-5", "x"]))];
            if rng.chance(40) {
                cmd.push(s(rng.pick(&["NX", "XX", "GT", "LT", "nx", "FOO"])));
            }
            if rng.chance(10) {
                cmd.push(s(rng.pick(&["XX", "LT"])));
            }
        }
        6 => cmd = vec![s("PTTL"), key(rng, ALL_KEYS)],
        7 => cmd = vec![s("TYPE"), key(rng, ALL_KEYS)],
        8 => {
            cmd = vec![s("HSET"), key(rng, HASH_KEYS)];
            for _ in 0..=rng.below(3) {
                cmd.extend([s(rng.pick(FIELDS)), s(rng.pick(VALUES))]);
            }
            if rng.chance(5) {
                cmd.pop();
            }
        }
        9 => cmd = vec![s("HGET"), key(rng, HASH_KEYS), s(rng.pick(FIELDS))],
        10 => {
            cmd = vec![s("HMGET"), key(rng, HASH_KEYS), s(rng.pick(FIELDS)), s(rng.pick(FIELDS)), s(rng.pick(FIELDS))]
        }
        11 => {
            cmd = vec![s("HDEL"), key(rng, HASH_KEYS), s(rng.pick(FIELDS))];
            if rng.chance(50) {
                cmd.push(s(rng.pick(FIELDS)));
            }
        }
        12 => cmd = vec![s("HLEN"), key(rng, HASH_KEYS)],
        13 => cmd = vec![s("HEXISTS"), key(rng, HASH_KEYS), s(rng.pick(FIELDS))],
        14 => cmd = vec![s("HINCRBY"), key(rng, HASH_KEYS), s(rng.pick(FIELDS)), s(rng.pick(INCREMENTS))],
        15 => cmd = vec![s("HSETNX"), key(rng, HASH_KEYS), s(rng.pick(FIELDS)), s(rng.pick(VALUES))],
        16 => cmd = vec![s("HKEYS"), key(rng, HASH_KEYS)],
        17 => cmd = vec![s("HGETALL"), key(rng, HASH_KEYS)],
        18 => {
            cmd = vec![s("ZADD"), key(rng, ZSET_KEYS)];
            if rng.chance(35) {
                for _ in 0..=rng.below(2) {
                    cmd.push(s(rng.pick(&["NX", "XX", "GT", "LT", "CH", "INCR"])));
                }
            }
            for _ in 0..=rng.below(3) {
                cmd.extend([score(rng), s(rng.pick(MEMBERS))]);
            }
            if rng.chance(3) {
                cmd.pop();
            }
        }
        19 => cmd = vec![s("ZSCORE"), key(rng, ZSET_KEYS), s(rng.pick(MEMBERS))],
        20 => cmd = vec![s("ZMSCORE"), key(rng, ZSET_KEYS), s(rng.pick(MEMBERS)), s(rng.pick(MEMBERS))],
        21 => {
            cmd = vec![s("ZREM"), key(rng, ZSET_KEYS), s(rng.pick(MEMBERS))];
            if rng.chance(50) {
                cmd.push(s(rng.pick(MEMBERS)));
            }
        }
        22 => {
            cmd = vec![s("ZRANGE"), key(rng, ZSET_KEYS)];
            if rng.chance(30) {
                cmd.extend([s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS)), s("BYSCORE")]);
                if rng.chance(50) {
                    cmd.push(s("REV"));
                }
                if rng.chance(50) {
                    cmd.extend([s("LIMIT"), s(rng.pick(RANKS)), s(rng.pick(RANKS))]);
                }
            } else {
                cmd.extend([s(rng.pick(RANKS)), s(rng.pick(RANKS))]);
                if rng.chance(20) {
                    cmd.push(s("REV"));
                }
                if rng.chance(3) {
                    cmd.extend([s("LIMIT"), s("0"), s(rng.pick(&["1", "-1"]))]);
                }
            }
            if rng.chance(50) {
                cmd.push(s("WITHSCORES"));
            }
        }
        23 | 24 => {
            let name = if rng.chance(50) { "ZRANGEBYSCORE" } else { "ZREVRANGEBYSCORE" };
            cmd = vec![s(name), key(rng, ZSET_KEYS), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))];
            if rng.chance(50) {
                cmd.push(s("WITHSCORES"));
            }
            if rng.chance(50) {
                cmd.extend([s("LIMIT"), s(rng.pick(RANKS)), s(rng.pick(RANKS))]);
            }
            if rng.chance(3) {
                cmd.push(s(rng.pick(&["REV", "LIMIT", "WITHSCORES"])));
            }
        }
        25 => cmd = vec![s("ZREMRANGEBYRANK"), key(rng, ZSET_KEYS), s(rng.pick(RANKS)), s(rng.pick(RANKS))],
        26 => cmd = vec![s("ZREMRANGEBYSCORE"), key(rng, ZSET_KEYS), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))],
        27 => cmd = vec![s("ZCARD"), key(rng, ZSET_KEYS)],
        28 => cmd = vec![s("ZCOUNT"), key(rng, ZSET_KEYS), s(rng.pick(BOUNDS)), s(rng.pick(BOUNDS))],
        29 => cmd = vec![s("ZRANK"), key(rng, ZSET_KEYS), s(rng.pick(MEMBERS))],
        30 | 31 => {
            cmd = vec![s(if rng.chance(50) { "RPUSH" } else { "LPUSH" }), key(rng, LIST_KEYS)];
            for _ in 0..=rng.below(3) {
                cmd.push(s(rng.pick(VALUES)));
            }
        }
        32 => {
            cmd = vec![s("LPOP"), key(rng, LIST_KEYS)];
            if rng.chance(50) {
                cmd.push(s(rng.pick(&["0", "1", "2", "5", "-1", "x"])));
            }
            if rng.chance(2) {
                cmd.push(s("1"));
            }
        }
        33 => cmd = vec![s("LRANGE"), key(rng, LIST_KEYS), s(rng.pick(RANKS)), s(rng.pick(RANKS))],
        34 => cmd = vec![s("LTRIM"), key(rng, LIST_KEYS), s(rng.pick(RANKS)), s(rng.pick(RANKS))],
        35 => cmd = vec![s("LINDEX"), key(rng, LIST_KEYS), s(rng.pick(RANKS))],
        36 => cmd = vec![s("LLEN"), key(rng, LIST_KEYS)],
        37 => {
            cmd = vec![s("XADD"), key(rng, STREAM_KEYS)];
            if rng.chance(10) {
                cmd.push(s("NOMKSTREAM"));
            }
            match rng.below(6) {
                0 => cmd.extend([s("MAXLEN"), s(rng.pick(&["3", "0", "-1"]))]),
                1 => cmd.extend([s("MAXLEN"), s("="), s("5")]),
                2 => cmd.extend([s("MAXLEN"), s("~"), s("1000")]),
                _ => {}
            }
            let ms = step / 40 + rng.below(4);
            let id = match rng.below(20) {
                0 => s(rng.pick(&["0-0", "0", "0-*", "abc", "-", "1-x"])),
                1..=9 => format!("{ms}-{}", rng.below(3)),
                10..=13 => format!("{ms}"),
                _ => format!("{ms}-*"),
            };
            cmd.push(id);
            for _ in 0..=rng.below(2) {
                cmd.extend([s(rng.pick(FIELDS)), s(rng.pick(VALUES))]);
            }
            if rng.chance(3) {
                cmd.pop();
            }
        }
        38 | 39 => {
            const IDS: &[&str] = &["-", "+", "0", "3", "5-1", "(5-1", "(3", "10", "(-", "(+", "abc"];
            let rev = rng.chance(50);
            cmd = vec![s(if rev { "XREVRANGE" } else { "XRANGE" }), key(rng, STREAM_KEYS)];
            if rng.chance(40) {
                cmd.extend(if rev { [s("+"), s("-")] } else { [s("-"), s("+")] });
            } else {
                cmd.extend([s(rng.pick(IDS)), s(rng.pick(IDS))]);
            }
            if rng.chance(60) {
                cmd.extend([s("COUNT"), s(rng.pick(&["1", "2", "0", "-1", "x"]))]);
            }
        }
        40 => {
            const IDS: &[&str] = &["0", "0-0", "3", "5-1", "$", "abc", "10-0"];
            cmd = vec![s("XREAD")];
            if rng.chance(60) {
                cmd.extend([s("COUNT"), s(rng.pick(&["1", "2", "128", "0"]))]);
            }
            cmd.push(s("STREAMS"));
            if rng.chance(30) {
                cmd.extend([key(rng, STREAM_KEYS), key(rng, STREAM_KEYS), s(rng.pick(IDS)), s(rng.pick(IDS))]);
            } else {
                cmd.extend([key(rng, STREAM_KEYS), s(rng.pick(IDS))]);
            }
            if rng.chance(3) {
                cmd.pop();
            }
        }
        _ => cmd = vec![s("XLEN"), key(rng, STREAM_KEYS)],
    }
    cmd
}

/// A reply in a form that both sides give alike: errors as text, `OK` as a status.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Nil,
    Int(i64),
    Bytes(Vec<u8>),
    Status(String),
    Array(Vec<Seen>),
    Error(String),
}

impl Seen {
    fn of(value: Value) -> Seen {
        match value {
            Value::Nil => Seen::Nil,
            Value::Int(n) => Seen::Int(n),
            Value::BulkString(b) => Seen::Bytes(b),
            Value::SimpleString(s) => Seen::Status(s),
            Value::Okay => Seen::Status("OK".into()),
            Value::Array(items) => Seen::Array(items.into_iter().map(Seen::of).collect()),
            Value::ServerError(e) => Seen::Error(format!("{} {}", e.code(), e.details().unwrap_or_default())),
            other => panic!("a reply of a kind neither side gives: {other:?}"),
        }
    }

    /// Puts the replies whose order Redis does not fix (a hash's fields) in order.
    fn normalised(self, command: &str) -> Seen {
        match (command, self) {
            ("HKEYS", Seen::Array(mut items)) => {
                items.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
                Seen::Array(items)
            }
            ("HGETALL", Seen::Array(items)) => {
                let mut pairs: Vec<Vec<Seen>> = items.chunks(2).map(<[Seen]>::to_vec).collect();
                pairs.sort_by(|a, b| format!("{:?}", a[0]).cmp(&format!("{:?}", b[0])));
                Seen::Array(pairs.into_iter().flatten().collect())
            }
            (_, seen) => seen,
        }
    }
}

/// Whether two replies agree: equal, or two remaining times (`PTTL`) within the clocks' skew.
fn agree(command: &str, ours: &Seen, theirs: &Seen) -> bool {
    match (command, ours, theirs) {
        ("PTTL", Seen::Int(a), Seen::Int(b)) if *a >= 0 && *b >= 0 => (a - b).abs() <= 1500,
        _ => ours == theirs,
    }
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

/// Runs `args` on both sides: the reply they agree on, or how they differ, with the history of
/// the keys involved.
fn compare(
    server: &mut redis::Connection,
    ks: &mut Keyspace,
    args: &[String],
    history: &[Vec<String>],
    seed: u64,
    step: usize,
) -> Result<Seen, String> {
    let mut cmd = redis::cmd(&args[0]);
    for arg in &args[1..] {
        cmd.arg(arg.as_bytes());
    }
    let theirs = Seen::of(server.req_command(&cmd).expect("the server answers")).normalised(&args[0]);
    let bytes: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let ours = match ks.command(&bytes, wall_ms()) {
        Ok(value) => Seen::of(value),
        Err(CommandError(message)) => Seen::Error(message),
    }
    .normalised(&args[0]);
    if agree(&args[0], &ours, &theirs) {
        return Ok(ours);
    }
    let touched: Vec<_> = history
        .iter()
        .filter(|h| h.iter().skip(1).any(|a| ALL_KEYS.contains(&a.as_str()) && args[1..].contains(a)))
        .collect();
    let recent = &touched[touched.len().saturating_sub(30)..];
    Err(format!(
        "seed {seed}, step {step}: {args:?}\n  keyspace: {ours:?}\n  redis:    {theirs:?}\n\
         earlier commands on its keys:\n{}",
        recent.iter().map(|h| format!("    {h:?}")).collect::<Vec<_>>().join("\n")
    ))
}

/// Commands of each seed.
const STEPS: usize = 5000;
/// Seeds: each runs on a flushed server and a fresh keyspace.
const SEEDS: [u64; 4] = [1, 2, 3, 0x5eed];

/// Thousands of random commands on a real server and on the keyspace, every reply compared;
/// then each key's whole contents.
#[test]
fn differential_against_redis() {
    let Some(server) = crate::durable::tests::start_server() else { return };
    let mut conn = redis::Client::open(server.url()).unwrap().get_connection().expect("a connection");
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("0").to_string();
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    // Redis 7.2 prints scores with the fewest digits that read back; 7.0 (and the keyspace) with 17.
    let long_scores = parts.as_slice() < [7, 2].as_slice();
    let (mut compared, mut errors, mut differences) = (0, 0, Vec::new());
    let mut tally = |compared_reply: Result<Seen, String>| {
        compared += 1;
        match compared_reply {
            Ok(Seen::Error(_)) => errors += 1,
            Ok(_) => {}
            Err(difference) => differences.push(difference),
        }
    };
    for seed in SEEDS {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let mut ks = memory();
        let mut rng = Rng(seed);
        let mut history: Vec<Vec<String>> = Vec::new();
        for step in 0..STEPS {
            let args = random_command(&mut rng, step, long_scores);
            // In transactions of 100 commands, as the store runs its batches.
            if step % 100 == 0 {
                ks.begin().unwrap();
            }
            tally(compare(&mut conn, &mut ks, &args, &history, seed, step));
            if step % 100 == 99 {
                ks.commit().unwrap();
            }
            history.push(args);
        }
        for key in ALL_KEYS {
            let dump = |name: &str, rest: &[&str]| {
                let mut args = vec![name.to_string(), key.to_string()];
                args.extend(rest.iter().map(|s| s.to_string()));
                args
            };
            for args in [
                dump("TYPE", &[]),
                dump("PTTL", &[]),
                dump("GET", &[]),
                dump("HGETALL", &[]),
                dump("ZRANGE", &["0", "-1", "WITHSCORES"]),
                dump("LRANGE", &["0", "-1"]),
                dump("XRANGE", &["-", "+"]),
            ] {
                tally(compare(&mut conn, &mut ks, &args, &history, seed, STEPS));
            }
        }
    }
    let shown = differences.iter().take(30).cloned().collect::<Vec<_>>().join("\n");
    assert!(differences.is_empty(), "{} of {compared} replies differ; the first ones:\n{shown}", differences.len());
    eprintln!("{compared} replies alike ({errors} of them errors), against redis {version}");
}
