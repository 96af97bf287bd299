//! Occupancy bitmaps: one bit per bucket, set while the bucket holds an entry.
//!
//! They let a wheel find its next non-empty bucket with a few `trailing_zeros` instead of walking
//! empty buckets, which is what makes "sleep straight to the next due bucket" cheap.

/// A fixed-size set of bucket numbers `0..len`. Bit `i % 64` of word `i / 64` is bucket `i`.
#[derive(Clone, Debug)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    pub fn new(len: usize) -> Self {
        Bitmap { words: vec![0; len.div_ceil(64)], len }
    }

    pub fn set(&mut self, i: usize) {
        debug_assert!(i < self.len, "bucket {i} out of range 0..{}", self.len);
        self.words[i / 64] |= 1 << (i % 64);
    }

    pub fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    /// The first set bit at or after `from`, going round past the end to the start:
    /// returned as the distance `k` from `from`, so the bucket is `(from + k) % len`.
    pub fn next_set_from(&self, from: usize) -> Option<usize> {
        debug_assert!(from < self.len, "cursor {from} out of range 0..{}", self.len);
        let first = from / 64;
        // The word holding `from`, with the bits below it masked off.
        let masked = self.words[first] & (!0u64 << (from % 64));
        if masked != 0 {
            return Some(first * 64 + masked.trailing_zeros() as usize - from);
        }
        let n = self.words.len();
        for step in 1..=n {
            let w = (first + step) % n;
            // On wrapping back to `first`, only the bits below `from` are left to look at.
            let word = if w == first { self.words[w] & !(!0u64 << (from % 64)) } else { self.words[w] };
            if word != 0 {
                let bit = w * 64 + word.trailing_zeros() as usize;
                return Some(if bit >= from { bit - from } else { bit + self.len - from });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `next_set_from` against a plain scan for every cursor and several bit patterns.
    #[test]
    fn next_set_from_matches_a_linear_scan() {
        for len in [1, 5, 63, 64, 65, 130, 200] {
            for pattern in [vec![], vec![0], vec![len - 1], vec![0, len / 2], vec![len / 3, len - 1]] {
                let mut map = Bitmap::new(len);
                for &i in &pattern {
                    map.set(i);
                }
                for from in 0..len {
                    let expected = (0..len).find(|k| pattern.contains(&((from + k) % len)));
                    assert_eq!(map.next_set_from(from), expected, "len {len} pattern {pattern:?} from {from}");
                }
            }
        }
    }
}
