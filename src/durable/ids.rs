//! Ids unique across processes and calls: request ids of `schedule`, ids of cancels and claims,
//! node ids of workers. Not secret; only unique.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Hands out `<process-unique prefix>.<counter>`.
#[derive(Debug)]
pub(crate) struct Ids {
    prefix: String,
    next: AtomicU64,
}

impl Ids {
    pub(crate) fn new() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos());
        Ids { prefix: format!("{:016x}", h.finish()), next: AtomicU64::new(0) }
    }

    pub(crate) fn next(&self) -> String {
        format!("{}.{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique() {
        let (a, b) = (Ids::new(), Ids::new());
        let ids = [a.next(), a.next(), b.next(), b.next()];
        for (i, x) in ids.iter().enumerate() {
            for y in &ids[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }
}
