//! Failure tests of the durable mode, each against a real `redis-server` started by the test.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::redis_server::{Persistence, RedisServer};

/// The harness itself: a write that AOF flushed survives SIGKILL and restart on the same
/// directory; without AOF it does not.
#[test]
fn harness_restart_keeps_aof_and_loses_without() {
    for (persistence, survives) in [(Persistence::Aof, true), (Persistence::None, false)] {
        let Some(mut server) = RedisServer::start_with(persistence, &[]) else { return };
        assert_eq!(server.command(&["SET", "k", "v"]).as_str(), Some("OK"));
        std::thread::sleep(Duration::from_millis(1500)); // appendfsync everysec
        let port = server.port();
        server.kill();
        assert!(server.command_timeout(&["PING"], Duration::from_millis(200)).is_err(), "killed server answers");
        server.restart();
        assert_eq!(server.port(), port);
        let got = server.command(&["GET", "k"]);
        assert_eq!(got.as_str().is_some(), survives, "{persistence:?}: GET k after restart = {got:?}");
    }
}
