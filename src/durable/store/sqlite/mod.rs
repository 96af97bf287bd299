//! The embedded store (feature `sqlite`): a durable wheel in a SQLite file, or in this process's
//! memory, with no server. It runs the wheel's own Lua scripts (`lua.rs`) against a keyspace that
//! speaks the Redis commands they use, kept in SQLite (`keyspace.rs`), behind a connection like
//! the Redis deployments' (`store.rs`): the rest of the durable mode does not know which store
//! it runs on.

pub(crate) mod keyspace;
pub(crate) mod lua;
pub(crate) mod store;

pub(crate) use store::{EmbeddedConn, Place, Store};
