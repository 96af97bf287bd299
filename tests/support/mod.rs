//! Helpers shared by the integration tests (and, by path, the crate's own durable tests). Each
//! test binary compiles this module on its own and uses a different part of it, hence the
//! `dead_code` allowance.
#![allow(dead_code, unused_imports)]

#[cfg(feature = "redis")]
pub mod durable;
pub mod logs;
#[cfg(feature = "redis")]
pub mod node;
pub mod redis_server;
#[cfg(feature = "redis")]
pub mod topology;

pub use redis_server::{RedisServer, Reply};
