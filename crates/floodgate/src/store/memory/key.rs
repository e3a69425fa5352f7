//! Keys as the memory store holds them, and the borrowed form a lookup compares them with.

use std::hash::{BuildHasher, Hash, Hasher};

/// The longest key stored inline in the table entry.
pub(super) const INLINE: usize = 38;

/// A key as stored: up to [`INLINE`] bytes inline in the table entry (most keys: a rule name and
/// an id), saving the pointer chase to a separate allocation on every lookup; longer keys spill to
/// the heap. 40 bytes either way.
#[derive(Clone)]
pub(super) enum StoredKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl StoredKey {
    pub(super) fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            StoredKey::Inline { len: key.len() as u8, bytes }
        } else {
            StoredKey::Heap(key.into())
        }
    }

    #[inline]
    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            StoredKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredKey::Heap(bytes) => bytes,
        }
    }
}

/// Heap bytes a stored key of `len` bytes uses beside its table entry.
pub(super) fn spilled(len: usize) -> usize {
    if len > INLINE { len } else { 0 }
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_bytes().escape_ascii().to_string())
    }
}

/// Hashed as its bytes, in one write (see [`KeyHasher`]).
impl Hash for StoredKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
    }
}

impl PartialEq for StoredKey {
    fn eq(&self, other: &Self) -> bool {
        same(self.as_bytes(), other.as_bytes())
    }
}

impl Eq for StoredKey {}

/// A key being looked up, borrowed from the request, with its hash computed once by the store (the
/// table's hasher passes it on): compared with stored keys word by word, inline, rather than through
/// a call to `memcmp`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lookup<'a> {
    bytes: &'a [u8],
    hash: u64,
}

/// Hashed as its hash, which [`KeyHashing::lookup`] computed as the table's hasher hashes the
/// stored key.
impl Hash for Lookup<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl papaya::Equivalent<StoredKey> for Lookup<'_> {
    #[inline]
    fn equivalent(&self, key: &StoredKey) -> bool {
        same(self.bytes, key.as_bytes())
    }
}

/// The table's hasher: foldhash, seeded at random per store, with keys of 17 to 32 bytes (most
/// keys: a rule name and an id) hashed inline in foldhash's way rather than through its
/// out-of-line path for long inputs.
#[derive(Debug, Clone)]
pub(super) struct KeyHashing {
    fold: foldhash::fast::RandomState,
    seeds: [u64; 6],
}

impl Default for KeyHashing {
    fn default() -> Self {
        let fold = foldhash::fast::RandomState::default();
        let seeds = std::array::from_fn(|i| fold.hash_one(i as u64) | 1);
        KeyHashing { fold, seeds }
    }
}

impl KeyHashing {
    /// `key`, hashed, to look up.
    #[inline]
    pub(super) fn lookup<'a>(&self, key: &'a [u8]) -> Lookup<'a> {
        Lookup { bytes: key, hash: self.hash_bytes(key) }
    }

    #[inline]
    fn hash_bytes(&self, bytes: &[u8]) -> u64 {
        let n = bytes.len();
        if (17..=32).contains(&n) {
            let k = &self.seeds;
            let a = folded_multiply(word(bytes, 0) ^ k[0], word(bytes, n - 16) ^ k[1]);
            let b = folded_multiply(word(bytes, 8) ^ k[2], word(bytes, n - 8) ^ k[3]);
            folded_multiply(a ^ k[4] ^ n as u64, b ^ k[5])
        } else {
            self.fold.hash_one(bytes)
        }
    }
}

impl BuildHasher for KeyHashing {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { hashing: self.clone(), hash: 0 }
    }
}

/// See [`KeyHashing`]: hashes a stored key's bytes (its one write), and passes on the hash of a
/// [`Lookup`] (its one `u64`).
#[derive(Debug, Clone)]
pub(super) struct KeyHasher {
    hashing: KeyHashing,
    hash: u64,
}

/// The high and low halves of the full product, folded together.
#[inline(always)]
fn folded_multiply(x: u64, y: u64) -> u64 {
    let full = u128::from(x) * u128::from(y);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.hash = self.hashing.hash_bytes(bytes);
    }

    #[inline]
    fn write_u64(&mut self, hash: u64) {
        self.hash = hash;
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Eight bytes of `b` from `i` (in bounds by the callers' length checks).
#[inline(always)]
fn word(b: &[u8], i: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_ne_bytes(w)
}

/// `a == b`, with the short lengths of most keys compared in a few overlapping 8-byte words.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let diff = |i: usize| word(a, i) ^ word(b, i);
    match n {
        0..8 => a == b,
        8..=16 => diff(0) | diff(n - 8) == 0,
        17..=32 => diff(0) | diff(8) | diff(n - 16) | diff(n - 8) == 0,
        33..=48 => diff(0) | diff(8) | diff(16) | diff(24) | diff(n - 16) | diff(n - 8) == 0,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_are_compact_and_inline_up_to_the_limit() {
        assert_eq!(std::mem::size_of::<StoredKey>(), 40);
        assert!(matches!(StoredKey::new(&[7; INLINE]), StoredKey::Inline { .. }));
        assert!(matches!(StoredKey::new(&[7; INLINE + 1]), StoredKey::Heap(_)));
        assert_eq!(spilled(INLINE), 0);
        assert_eq!(spilled(INLINE + 1), INLINE + 1);
    }

    proptest! {
        #[test]
        fn comparison_is_byte_equality(
            a in prop::collection::vec(any::<u8>(), 0..64),
            flip in any::<prop::sample::Index>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let h = KeyHashing::default();
            let stored = StoredKey::new(&a);
            prop_assert_eq!(stored.as_bytes(), &a[..]);
            prop_assert!(papaya::Equivalent::equivalent(&h.lookup(&a), &stored));
            if !a.is_empty() {
                // One byte different, anywhere.
                let mut b = a.clone();
                b[flip.index(a.len())] ^= 1 << (flip.index(8)) as u8;
                prop_assert!(!papaya::Equivalent::equivalent(&h.lookup(&b), &stored));
                prop_assert!(stored != StoredKey::new(&b));
                // A prefix.
                let short = &a[..cut.index(a.len())];
                prop_assert!(!papaya::Equivalent::equivalent(&h.lookup(short), &stored));
            }
        }
    }

    #[test]
    fn a_lookup_hashes_as_its_stored_key() {
        let s = KeyHashing::default();
        for len in [0, 1, 8, 16, 17, 29, 32, 33, INLINE, INLINE + 1, 100] {
            let k: Vec<u8> = (0..len as u8).collect();
            assert_eq!(s.hash_one(s.lookup(&k)), s.hash_one(StoredKey::new(&k)));
        }
    }

    #[test]
    fn hashes_spread_in_the_low_and_high_bits() {
        // papaya indexes by the low bits and filters by the top 7: keys differing in one byte
        // anywhere must spread over both.
        let s = KeyHashing::default();
        for len in [12, 17, 29, 32, 40] {
            let mut low = std::collections::HashSet::new();
            let mut high = std::collections::HashSet::new();
            for i in 0..len {
                for v in 0..=255u8 {
                    let mut k = vec![b'k'; len];
                    k[i] = v;
                    let h = s.hash_one(s.lookup(&k));
                    low.insert(h & 0xff);
                    high.insert(h >> 57);
                }
            }
            assert!(
                low.len() > 250 && high.len() == 128,
                "{len} bytes: {} low, {} high",
                low.len(),
                high.len()
            );
        }
    }

    #[test]
    fn stores_hash_differently() {
        let k = b"8:per-user4:user10:user-12345";
        let (a, b) = (KeyHashing::default(), KeyHashing::default());
        assert_ne!(a.hash_one(a.lookup(k)), b.hash_one(b.lookup(k)));
    }
}
