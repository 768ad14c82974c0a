//! Seeded randomness: the only source of randomness in the core.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

/// A deterministic cryptographically secure generator (ChaCha20) seeded by the caller.
///
/// The runtime seeds it from the operating system; the simulator from its run seed.
/// Its position is part of persisted state, so a restored agent never repeats output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetRng(ChaCha20Rng);

impl DetRng {
    /// A generator from a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        DetRng(ChaCha20Rng::from_seed(seed))
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        self.0.fill_bytes(buf);
    }

    /// 32 random bytes.
    pub fn bytes32(&mut self) -> [u8; 32] {
        let mut b = [0u8; 32];
        self.fill(&mut b);
        b
    }

    /// A random u64.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A lowercase base32-like identifier of `len` characters with a prefix, e.g. `thr_k3j9...`.
    pub fn id(&mut self, prefix: &str, len: usize) -> String {
        const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";
        let mut s = String::with_capacity(prefix.len() + len);
        s.push_str(prefix);
        for _ in 0..len {
            let i = (self.0.next_u32() % ALPHABET.len() as u32) as usize;
            // `i` is below the alphabet's length (the modulo): `get` always finds it.
            if let Some(&c) = ALPHABET.get(i) {
                s.push(char::from(c));
            }
        }
        s
    }
}

impl RngCore for DetRng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.0.try_fill_bytes(dest)
    }
}

impl rand_core::CryptoRng for DetRng {}
