//! The service's own key type: short keys stored inline, long ones behind one shared allocation.
//!
//! A pending timer's key is stored in its wheel entry (the key map holds only where that entry
//! is), and copied into its `Scheduled` future and, when it fires, its job's call. Most keys are
//! short ids like `conn-123456`: storing up to [`INLINE`] bytes inline keeps a key at 16 bytes
//! with no heap allocation, and a copy is a copy; longer keys share one `Arc`.

use std::sync::Arc;

/// Keys of at most this many bytes are stored inline.
const INLINE: usize = 14;

#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<Box<[u8]>>),
}

/// The first byte of a [`TimerQueue`](crate::TimerQueue)'s key: a byte that no UTF-8 text
/// holds, so that a queue's keys never equal the scheduler's own. It is followed by the queue's
/// number (7 bits a byte, low bits first, the high bit set on every byte but the last) and then
/// the key the user gave.
const QUEUE: u8 = 0xFF;

/// The stored form of `key` in the key space of queue `queue`, written into `out`.
pub(crate) fn queue_key(queue: u64, key: &str, out: &mut Vec<u8>) {
    let (prefix, len) = queue_prefix(queue);
    out.clear();
    out.extend_from_slice(&prefix[..len]);
    out.extend_from_slice(key.as_bytes());
}

/// The prefix of queue `queue`'s keys (its first `len` bytes): [`QUEUE`], then the number.
fn queue_prefix(queue: u64) -> ([u8; 11], usize) {
    let mut prefix = [QUEUE; 11];
    let mut len = 1;
    let mut n = queue;
    while n >= 0x80 {
        prefix[len] = n as u8 | 0x80;
        len += 1;
        n >>= 7;
    }
    prefix[len] = n as u8;
    (prefix, len + 1)
}

impl Key {
    /// The key as the user gave it (without a queue's prefix).
    pub fn as_str(&self) -> &str {
        // Only ever built from a whole `&str`, after a queue's prefix if any, so the rest is
        // valid UTF-8.
        std::str::from_utf8(user_part(self.as_bytes())).expect("a key is UTF-8")
    }

    /// The stored form of `key` in queue `queue`'s key space (see [`queue_key`]).
    pub fn in_queue(queue: u64, key: &str) -> Self {
        let (prefix, len) = queue_prefix(queue);
        let total = len + key.len();
        if total <= INLINE {
            // Built in place: a short key's push-back allocates nothing.
            let mut bytes = [0; INLINE];
            bytes[..len].copy_from_slice(&prefix[..len]);
            bytes[len..total].copy_from_slice(key.as_bytes());
            return Key::Inline { len: total as u8, bytes };
        }
        let mut bytes = Vec::with_capacity(total);
        queue_key(queue, key, &mut bytes);
        Key::from_bytes(&bytes)
    }

    /// A key of bytes that are UTF-8, after a queue's prefix if any.
    fn from_bytes(key: &[u8]) -> Self {
        match Probe::new(key) {
            Probe::Inline { len, bytes } => Key::Inline { len, bytes },
            // A long key keeps its bytes as they are; `as_str` checks them.
            Probe::Long(_) => Key::Shared(Arc::new(boxed(key))),
        }
    }

    /// The key's bytes: what the key map hashes and compares, so lookups skip UTF-8 checks.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..*len as usize],
            Key::Shared(s) => s,
        }
    }
}

/// The part of a stored key that the user gave: all of it, or what follows a queue's prefix.
fn user_part(bytes: &[u8]) -> &[u8] {
    if bytes.first() != Some(&QUEUE) {
        return bytes;
    }
    let prefix = 1 + bytes[1..].iter().position(|&b| b < 0x80).expect("a queue's number ends") + 1;
    &bytes[prefix..]
}

/// The bytes of a long key, for its shared allocation. A queue's key is not UTF-8 as a whole
/// (its prefix is not), so keys are kept as bytes rather than as a `String`.
fn boxed(key: &[u8]) -> Box<[u8]> {
    key.into()
}

impl From<&str> for Key {
    fn from(key: &str) -> Self {
        Key::from_bytes(key.as_bytes())
    }
}

/// A key to look for, borrowed from the caller: a short one copied into the inline form, so
/// that comparing it with a stored key is a fixed-size compare rather than a call to `memcmp`.
pub(crate) enum Probe<'a> {
    Inline { len: u8, bytes: [u8; INLINE] },
    Long(&'a [u8]),
}

impl<'a> Probe<'a> {
    pub fn new(key: &'a [u8]) -> Self {
        if key.len() > INLINE {
            return Probe::Long(key);
        }
        let mut bytes = [0; INLINE];
        bytes[..key.len()].copy_from_slice(key);
        Probe::Inline { len: key.len() as u8, bytes }
    }
}

impl Key {
    /// Whether this is the key `probe` looks for. Inline keys are zero-padded, so equal short
    /// keys have equal arrays; and a key is inline exactly when it is short, so an inline key
    /// never equals a long probe, nor the other way round.
    pub fn matches(&self, probe: &Probe<'_>) -> bool {
        match (self, probe) {
            (Key::Inline { len, bytes }, Probe::Inline { len: l, bytes: b }) => len == l && bytes == b,
            (Key::Shared(key), Probe::Long(b)) => ***key == **b,
            _ => false,
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        other.matches(&match self {
            Key::Inline { len, bytes } => Probe::Inline { len: *len, bytes: *bytes },
            Key::Shared(key) => Probe::Long(key),
        })
    }
}

impl Eq for Key {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 16);
    }

    #[test]
    fn inline_and_shared_keys_behave_like_their_str() {
        for s in
            ["", "a", "conn-123456", "exactly-14-byt", "fifteen-bytes!!", "order:auto-review:2026-11-21:42", "ключ"]
        {
            let key = Key::from(s);
            assert_eq!(key.as_str(), s);
            // Built again from a separate copy: a long key then has its own allocation.
            assert_eq!(Key::from(s.to_owned().as_str()), key);
            assert_eq!(matches!(key, Key::Inline { .. }), s.len() <= INLINE, "{s}");
        }
    }

    #[test]
    fn a_key_matches_the_probe_of_its_bytes_and_no_other() {
        let keys = ["", "a", "conn-1", "conn-12", "exactly-14-byt", "fifteen-bytes!!", "fifteen-bytes!?", "a\0"];
        for s in keys {
            for t in keys {
                let (key, probe) = (Key::from(s), Probe::new(t.as_bytes()));
                assert_eq!(key.matches(&probe), s == t, "{s:?} against {t:?}");
                assert_eq!(key == Key::from(t), s == t, "{s:?} == {t:?}");
            }
        }
    }
}
