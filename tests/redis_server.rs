//! The Redis harness itself (`support/redis_server.rs`), which the durable tests and the durable
//! benchmark start their servers with: what they rely on it for holds.
//!
//! Run with `cargo test --features redis --test redis_server`. Without a `redis-server` the tests
//! print a skip note and pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::redis_server::{Persistence, RedisServer};

/// A write that AOF flushed survives SIGKILL and restart on the same directory; without AOF it
/// does not.
#[test]
fn harness_restart_keeps_aof_and_loses_without() {
    for (persistence, survives) in [(Persistence::Aof, true), (Persistence::None, false)] {
        let Some(mut server) = RedisServer::start_with(persistence, &[]) else { return };
        assert_eq!(server.command(&["SET", "k", "v"]).as_str(), Some("OK"));
        std::thread::sleep(Duration::from_millis(1100)); // appendfsync everysec
        let port = server.port();
        server.kill();
        assert!(server.command_timeout(&["PING"], Duration::from_millis(200)).is_err(), "killed server answers");
        server.restart();
        assert_eq!(server.port(), port);
        let got = server.command(&["GET", "k"]);
        assert_eq!(got.as_str().is_some(), survives, "{persistence:?}: GET k after restart = {got:?}");
    }
}

/// `INFO` reads as fields, and the command counts count what was sent, leaving out the `INFO`
/// that reads them.
#[test]
fn info_and_command_counts_read_what_the_server_did() {
    let Some(server) = RedisServer::start_with(Persistence::Aof, &["--maxmemory-policy", "noeviction"]) else {
        return;
    };
    assert_eq!(server.info("memory").get("maxmemory_policy").map(String::as_str), Some("noeviction"));
    server.command(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        server.command(&["SET", "k", "v"]);
    }
    server.command(&["GET", "k"]);
    let calls = server.command_calls();
    assert_eq!((calls.get("set"), calls.get("get")), (Some(&3), Some(&1)), "{calls:?}");
    assert!(!calls.contains_key("info"), "{calls:?}");
}
