//! [`AddrMap`]: a hash map keyed by the address of a live object (a DOCA object, a
//! connection), for the runtime's lookups on a data path.
//!
//! The standard map hashes with SipHash, which resists keys an adversary chooses. Addresses
//! are not chosen by anyone who could attack the table, so one multiplication spreads them
//! well enough: Comch's receive callback looked up its endpoint and its connection by
//! address at every message, and SipHash was 284 of the 4 006 instructions of a message
//! (`op_cost comch`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from an object's address to `V`, hashed with [`AddrHasher`].
pub(crate) type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// Hashes an address: a multiplication by a 64-bit odd constant (Fibonacci hashing), whose
/// high bits the table uses.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `usize` keys; correct for any key anyway.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, addr: usize) {
        self.0 = (addr as u64 ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_and_spread() {
        let mut m: AddrMap<u32> = AddrMap::default();
        // Aligned addresses, as objects have: their low bits are all zero.
        for i in 0..1000usize {
            m.insert(0x7f00_0000_0000 + i * 64, i as u32);
        }
        assert!((0..1000usize).all(|i| m.get(&(0x7f00_0000_0000 + i * 64)) == Some(&(i as u32))));
        let mut h = AddrHasher::default();
        h.write_usize(64);
        let mut g = AddrHasher::default();
        g.write_usize(128);
        assert_ne!(h.finish() >> 57, g.finish() >> 57, "neighbours differ in the top bits the table uses");
    }
}
