//! Helpers shared by the integration tests. Each test binary compiles this module on its own and
//! uses a different part of it, hence the `dead_code` allowance.
#![allow(dead_code, unused_imports)]

pub mod redis_server;

pub use redis_server::{RedisServer, Reply};
