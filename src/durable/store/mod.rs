//! The stores, below the durable core: everything the handle, the worker and the leader ask of
//! a store goes through here, and nothing here knows of handlers, futures or tasks in flight.
//!
//! **The seam** is [`scripts`]: one Rust function an operation, at the grain of the Lua scripts
//! that carry the durable semantics (schedule a batch, cancel, reschedule, upsert, tick the due
//! tasks to ready, claim with the acknowledgements it carries, fail, renew, release, list, get,
//! stats, history, figures, pause, cancel-running requests). Every guarantee is written once,
//! in `lua/`, and both stores run those same scripts:
//! - **Redis and Valkey** (`deployment.rs`: one node, TLS, Sentinel, Cluster) run them on the
//!   server, as `EVALSHA`;
//! - **the embedded SQLite store** (`sqlite/`, feature `sqlite`) runs them in this process, on
//!   Lua 5.1 (mlua), against a keyspace that answers the Redis commands they send as Redis 7.0
//!   does, kept in SQLite tables (a file that several processes share, or this process's memory).
//!
//! One link carries every call to whichever store the URL named ([`shared_conn`]): a
//! [`deployment::Connection`] is a Redis connection of any deployment or an embedded one, so the
//! core above never asks which it has. Two facts differ by store and are asked for by name: a
//! store in this process alone tells its leader of every change
//! ([`SharedConn::changes`](shared_conn::SharedConn::changes)), and its clock is Tokio's
//! ([`SharedConn::tokio_clock`](shared_conn::SharedConn::tokio_clock)).
//!
//! The key names ([`keys`]) and the texts stored under them ([`formats`]) are the stores'
//! shared layout: `docs/DESIGN.md` has its tables.

pub(crate) mod client;
pub(crate) mod deployment;
pub(crate) mod formats;
pub(crate) mod keys;
pub(crate) mod scripts;
pub(crate) mod shared_conn;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
