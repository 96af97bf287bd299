//! The store a durable behaviour test runs on, chosen for the whole run by the environment
//! variable `TIMEWHEEL_TEST_STORE`: one source of tests for every store, as one driver suite
//! serves several databases.
//!
//! - `redis` (the default, also when unset or empty): a throwaway `redis-server` of its own
//!   ([`RedisServer::start`], AOF on), `redis://127.0.0.1:<port>/`. Valkey too, through
//!   `TIMEWHEEL_REDIS_SERVER` (see `redis_server.rs`).
//! - `sqlite`: the embedded store (the crate's `sqlite` feature) on a fresh SQLite file in a temp
//!   directory of its own, `sqlite:<tmpdir>/wheel.db`, kept until the [`TestStore`] is dropped.
//!   Every `connect` of the test on that URL, and every node process it starts, shares the
//!   file, on the wall clock, as processes sharing a server would.
//!
//! A test written for every store starts with `let Some(store) = TestStore::start() else {
//! return };` and connects to [`TestStore::url`]. The few checks that read or write Redis's own
//! keys (the wheel's layout, `INFO`, `DEBUG`) take the server from [`TestStore::redis`] and run
//! on Redis only; everything the wheel's public API says is checked on every store. A test that
//! needs Redis itself (killing it, Sentinel, Cluster, TLS) starts a [`RedisServer`] as before,
//! and skips when the run is on another store (see [`RedisServer::start`]): the run on SQLite
//! runs the tests of every store, not the Redis ones again.
//!
//! ```text
//! cargo test -p tokio-timewheel --features redis,sqlite,serde,metrics,dashboard,cron,opentelemetry \
//!     --test durable_basic                                    # on Redis
//! TIMEWHEEL_TEST_STORE=sqlite cargo test -p tokio-timewheel \
//!     --features redis,sqlite,serde,metrics,dashboard,cron,opentelemetry --test durable_basic
//! ```
//!
//! The skip rules are [`RedisServer::start`]'s: on Redis, `None` (a skip note) when there is no
//! `redis-server`, except under `CI=true`, where that panics. `sqlite` needs the `sqlite`
//! feature, and panics without it (a run that asks for a store must not pass by skipping).

use std::path::PathBuf;

use super::redis_server::RedisServer;

/// The environment variable that chooses the store.
pub const ENV: &str = "TIMEWHEEL_TEST_STORE";

/// A store the tests can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Sqlite,
}

impl Kind {
    /// The store `TIMEWHEEL_TEST_STORE` names (Redis when unset or empty); panics on a name it
    /// does not know, rather than running on a store nobody asked for.
    pub fn selected() -> Kind {
        match std::env::var(ENV).unwrap_or_default().trim().to_ascii_lowercase().as_str() {
            "" | "redis" => Kind::Redis,
            "sqlite" => Kind::Sqlite,
            other => panic!("{ENV}={other:?}: expected `redis` (the default) or `sqlite`"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Sqlite => "sqlite",
        }
    }
}

/// A store for one test: a Redis server, or a SQLite file; dropped (the server killed, the file
/// and its directory removed) with the test.
pub struct TestStore {
    inner: Inner,
}

enum Inner {
    Redis(RedisServer),
    /// The file, in a directory of its own that goes with the store.
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
}

impl TestStore {
    /// The store `TIMEWHEEL_TEST_STORE` selects, fresh and empty; `None` (with a skip note) when
    /// it is Redis and there is no `redis-server`, a panic for that under `CI=true`.
    pub fn start() -> Option<TestStore> {
        Self::start_with_redis_args(&[])
    }

    /// [`start`](Self::start), with `extra` arguments for `redis-server` when the store is Redis
    /// (settings of what only the run on Redis measures, like `SLOWLOG`'s).
    pub fn start_with_redis_args(extra: &[&str]) -> Option<TestStore> {
        match Kind::selected() {
            Kind::Redis => RedisServer::start_with(super::redis_server::Persistence::Aof, extra)
                .map(|server| TestStore { inner: Inner::Redis(server) }),
            Kind::Sqlite => {
                if !cfg!(feature = "sqlite") {
                    panic!("{ENV}=sqlite needs the crate's `sqlite` feature: add it to the test's --features");
                }
                let dir =
                    tempfile::Builder::new().prefix("timewheel-sqlite-").tempdir().expect("a temp dir for SQLite");
                let path = dir.path().join("wheel.db");
                Some(TestStore { inner: Inner::Sqlite { _dir: dir, path } })
            }
        }
    }

    /// The URL every node of the test connects to: `redis://127.0.0.1:<port>/` or
    /// `sqlite:<tmpdir>/wheel.db`.
    pub fn url(&self) -> String {
        match &self.inner {
            Inner::Redis(server) => server.url(),
            Inner::Sqlite { path, .. } => format!("sqlite:{}", path.display()),
        }
    }

    pub fn kind(&self) -> Kind {
        match &self.inner {
            Inner::Redis(_) => Kind::Redis,
            Inner::Sqlite { .. } => Kind::Sqlite,
        }
    }

    pub fn is_redis(&self) -> bool {
        self.kind() == Kind::Redis
    }

    /// The Redis server, for the checks that read Redis's own keys; `None` on another store.
    pub fn redis(&self) -> Option<&RedisServer> {
        match &self.inner {
            Inner::Redis(server) => Some(server),
            Inner::Sqlite { .. } => None,
        }
    }
}

impl std::fmt::Debug for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Redis(server) => server.fmt(f),
            Inner::Sqlite { path, .. } => f.debug_struct("TestStore").field("sqlite", path).finish(),
        }
    }
}
