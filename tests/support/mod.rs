//! Helpers shared by the integration tests (and, by path, the crate's own durable tests). Each
//! test binary compiles this module on its own and uses a different part of it, hence the
//! `dead_code` allowance.
//!
//! The durable behaviour tests run on the store that `TIMEWHEEL_TEST_STORE` selects (`redis`, the
//! default, or `sqlite`): they start it with [`TestStore::start`] (`store.rs`), one source for
//! every store. The tests that need Redis itself start a [`RedisServer`] (`redis_server.rs`),
//! which skips them when the run is on another store.
#![allow(dead_code, unused_imports)]

#[cfg(feature = "redis")]
pub mod durable;
pub mod logs;
#[cfg(feature = "redis")]
pub mod node;
pub mod proxy;
pub mod redis_server;
pub mod store;
#[cfg(feature = "redis")]
pub mod topology;

pub use redis_server::{RedisServer, Reply};
pub use store::TestStore;
