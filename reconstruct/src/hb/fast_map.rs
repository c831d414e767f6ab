//! The hash maps of the engine's hot paths, keyed by small integers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hash for the small integer keys of the hot maps: the default SipHash
/// costs more than the rest of matching an event. 32-bit fields (a message key is four) are
/// taken two to a word, so a key costs half the multiplications.
#[derive(Default, Clone, Copy)]
pub(super) struct FastHasher {
    hash: u64,
    /// A 32-bit field waiting for the next to fill its word (bit 32 set while one waits).
    half: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.flush_half();
        self.mix(word);
    }

    #[inline]
    fn mix(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn add_half(&mut self, v: u32) {
        if self.half == 0 {
            self.half = (1 << 32) | u64::from(v);
        } else {
            let word = (self.half << 32) | u64::from(v);
            self.half = 0;
            self.mix(word);
        }
    }

    #[inline]
    fn flush_half(&mut self) {
        if self.half != 0 {
            let word = self.half;
            self.half = 0;
            self.mix(word);
        }
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.add_half(v);
    }
    fn write_i32(&mut self, v: i32) {
        self.add_half(v as u32);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        let mut h = *self;
        h.flush_half();
        // Spread the low bits' entropy into the high bits the table's control bytes use.
        h.hash ^ (h.hash >> 29)
    }
}

pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
