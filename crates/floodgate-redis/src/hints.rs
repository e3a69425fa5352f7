//! Which keys denied lately, so that a check whose keys span slots asks their slots first
//! ([`CrossSlot::DeniedFirst`](crate::CrossSlot::DeniedFirst)).
//!
//! A fixed table of [`SETS`] sets of two entries, each an atomic word holding a key's fingerprint
//! and the time (ms, on the store's process clock) until which that key is presumed to deny. A
//! key's hash picks its set and its fingerprint; a denial takes the set's entry of the same key,
//! else one that has ended, else the one ending first. Lock-free and allocation-free. A hint only
//! orders a request's calls: it never decides one. A hint lost to another key, one that outlives a
//! reset, or one lost to a race cost at most a round trip (or a transient under-admission, as
//! without hints), never a wrong decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sets in the table (a power of two), of two entries each: 256 KiB.
const SETS: usize = 16_384;

/// Bits of an entry holding the time (ms since the epoch: enough until the year 2109); the rest
/// hold the fingerprint.
const TIME_BITS: u32 = 42;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

/// The least time a denial is remembered: a denial with no time to retry at (a concurrency limit
/// whose permits are all held) is likely to deny again within a round trip or two.
pub(crate) const FLOOR: Duration = Duration::from_millis(50);

/// The longest a denial is remembered: a key denied for the rest of a long period (a monthly
/// quota) is asked for first at most this long after its last denial seen, so a reset by an
/// operator (or another instance's refund) costs at most this long of ordered calls.
pub(crate) const MOST: Duration = Duration::from_secs(60);

pub(crate) struct Hints {
    entries: Box<[AtomicU64]>,
}

/// Where a key's hint lives: its set's first entry, and its fingerprint (never 0, so that an
/// empty entry is no key's).
struct Slot {
    first: usize,
    fingerprint: u64,
}

fn until_of(entry: u64) -> u64 {
    entry & TIME_MASK
}

fn fingerprint_of(entry: u64) -> u64 {
    entry >> TIME_BITS
}

impl Hints {
    pub(crate) fn new() -> Self {
        Hints { entries: (0..2 * SETS).map(|_| AtomicU64::new(0)).collect() }
    }

    fn slot(key: &[u8]) -> Slot {
        // FNV-1a, then a finaliser to spread its bits: keys are short, and an adversary who makes
        // two keys share a set only reorders the calls of their own requests.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        let set = usize::try_from(h).unwrap_or(0) & (SETS - 1);
        let fingerprint = (h >> TIME_BITS).max(1);
        Slot { first: 2 * set, fingerprint }
    }

    /// Whether `key` denied within its hint, at `now_us`.
    pub(crate) fn is_hot(&self, key: &[u8], now_us: u64) -> bool {
        let slot = Self::slot(key);
        let now_ms = now_us / 1000;
        self.entries[slot.first..slot.first + 2].iter().any(|e| {
            let entry = e.load(Ordering::Relaxed);
            fingerprint_of(entry) == slot.fingerprint && until_of(entry) > now_ms
        })
    }

    /// `key` denied at `now_us`; it may admit again after `retry` (`None`: not known).
    pub(crate) fn denied(&self, key: &[u8], now_us: u64, retry: Option<Duration>) {
        let slot = Self::slot(key);
        let hold = retry.unwrap_or(FLOOR).clamp(FLOOR, MOST);
        let now_ms = now_us / 1000;
        let until = (now_ms + u64::try_from(hold.as_millis()).unwrap_or(u64::MAX)).min(TIME_MASK);
        let entries = &self.entries[slot.first..slot.first + 2];
        let seen = [entries[0].load(Ordering::Relaxed), entries[1].load(Ordering::Relaxed)];
        let k = match seen.iter().position(|e| fingerprint_of(*e) == slot.fingerprint) {
            Some(k) if until_of(seen[k]) >= until => return,
            Some(k) => k,
            None => match seen.iter().position(|e| until_of(*e) <= now_ms) {
                Some(k) => k,
                None => usize::from(until_of(seen[1]) < until_of(seen[0])),
            },
        };
        entries[k].store(slot.fingerprint << TIME_BITS | until, Ordering::Relaxed);
    }

    /// `key` admitted: its slot need not be asked first.
    pub(crate) fn admitted(&self, key: &[u8]) {
        let slot = Self::slot(key);
        for e in &self.entries[slot.first..slot.first + 2] {
            let entry = e.load(Ordering::Relaxed);
            if fingerprint_of(entry) == slot.fingerprint {
                // Only if it is still this key's: another key's denial may have taken it since.
                let _ = e.compare_exchange(entry, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_765_000_000_000_000; // µs, December 2025

    #[test]
    fn a_denial_is_remembered_between_the_floor_and_the_most() {
        let hints = Hints::new();
        hints.denied(b"a", NOW, Some(Duration::from_millis(1)));
        assert!(hints.is_hot(b"a", NOW + 49_999));
        assert!(!hints.is_hot(b"a", NOW + 50_000), "held for the floor, 50 ms");
        hints.denied(b"b", NOW, Some(Duration::from_secs(3600)));
        assert!(hints.is_hot(b"b", NOW + 59_999_999));
        assert!(!hints.is_hot(b"b", NOW + 60_000_000), "held for at most a minute");
        hints.denied(b"c", NOW, None);
        assert!(hints.is_hot(b"c", NOW + 49_999) && !hints.is_hot(b"c", NOW + 50_000));
    }

    #[test]
    fn an_admission_clears_only_its_own_hint_and_a_shorter_denial_never_shortens_one() {
        let hints = Hints::new();
        hints.denied(b"k", NOW, Some(Duration::from_secs(10)));
        hints.denied(b"k", NOW, Some(Duration::from_millis(100)));
        assert!(hints.is_hot(b"k", NOW + 9_999_000), "the longer hint stands");
        hints.admitted(b"never-denied");
        assert!(hints.is_hot(b"k", NOW), "another key's admission leaves it");
        hints.admitted(b"k");
        assert!(!hints.is_hot(b"k", NOW));
        assert!(!hints.is_hot(b"never-seen", NOW));
    }

    #[test]
    fn keys_sharing_a_set_keep_their_own_hints_two_at_a_time() {
        let hints = Hints::new();
        let set = |k: &[u8]| Hints::slot(k).first;
        let keys: Vec<Vec<u8>> = (0u32..)
            .map(|i| format!("user-{i}").into_bytes())
            .filter(|k| set(k) == set(b"user-0"))
            .take(3)
            .collect();
        hints.denied(&keys[0], NOW, Some(Duration::from_secs(10)));
        hints.denied(&keys[1], NOW, Some(Duration::from_secs(20)));
        hints.admitted(&keys[2]);
        assert!(hints.is_hot(&keys[0], NOW) && hints.is_hot(&keys[1], NOW), "two keys, one set");
        assert!(!hints.is_hot(&keys[2], NOW));
        // A third takes the entry ending first.
        hints.denied(&keys[2], NOW, Some(Duration::from_secs(30)));
        assert!(!hints.is_hot(&keys[0], NOW) && hints.is_hot(&keys[1], NOW) && hints.is_hot(&keys[2], NOW));
    }
}
