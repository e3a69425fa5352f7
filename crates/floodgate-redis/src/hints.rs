//! Which keys denied lately, so that a check whose keys span slots asks their slots first
//! ([`CrossSlot::DeniedFirst`](crate::CrossSlot::DeniedFirst)).
//!
//! A fixed table of [`SLOTS`] atomics indexed by a hash of the Redis key, each holding the time
//! (µs, on the store's process clock) until which a key that hashes there is presumed to deny.
//! Lock-free and allocation-free. A hint only orders a request's calls: it never decides one. Two
//! keys that share an entry, a hint that outlives a reset, or one lost to a race all cost at most
//! a round trip (or a transient under-admission, as without hints), never a wrong decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Entries in the table (a power of two): 32 KiB.
const SLOTS: usize = 4096;

/// The least time a denial is remembered: a denial with no time to retry at (a concurrency limit
/// whose permits are all held) is likely to deny again within a round trip or two.
pub(crate) const FLOOR: Duration = Duration::from_millis(50);

/// The longest a denial is remembered: a key denied for the rest of a long period (a monthly
/// quota) is asked for first at most this long after its last denial seen, so a reset by an
/// operator (or another instance's refund) costs at most this long of ordered calls.
pub(crate) const MOST: Duration = Duration::from_secs(60);

pub(crate) struct Hints {
    until: Box<[AtomicU64]>,
}

impl Hints {
    pub(crate) fn new() -> Self {
        Hints { until: (0..SLOTS).map(|_| AtomicU64::new(0)).collect() }
    }

    fn entry(&self, key: &[u8]) -> &AtomicU64 {
        // FNV-1a: keys are short, and an adversary who makes two keys share an entry only reorders
        // the calls of their own requests.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.until[usize::try_from(h).unwrap_or(0) & (SLOTS - 1)]
    }

    /// Whether `key` denied within its hint, at `now_us`.
    pub(crate) fn is_hot(&self, key: &[u8], now_us: u64) -> bool {
        self.entry(key).load(Ordering::Relaxed) > now_us
    }

    /// `key` denied at `now_us`; it may admit again after `retry` (`None`: not known).
    pub(crate) fn denied(&self, key: &[u8], now_us: u64, retry: Option<Duration>) {
        let hold = retry.unwrap_or(FLOOR).clamp(FLOOR, MOST);
        let until = now_us.saturating_add(u64::try_from(hold.as_micros()).unwrap_or(u64::MAX));
        self.entry(key).fetch_max(until, Ordering::Relaxed);
    }

    /// `key` admitted: its slot need not be asked first.
    pub(crate) fn admitted(&self, key: &[u8]) {
        let entry = self.entry(key);
        if entry.load(Ordering::Relaxed) != 0 {
            entry.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_is_remembered_between_the_floor_and_the_most() {
        let hints = Hints::new();
        hints.denied(b"a", 1_000, Some(Duration::from_millis(1)));
        assert!(hints.is_hot(b"a", 1_000 + 49_999));
        assert!(!hints.is_hot(b"a", 1_000 + 50_000), "held for the floor, 50 ms");
        hints.denied(b"b", 0, Some(Duration::from_secs(3600)));
        assert!(hints.is_hot(b"b", 59_999_999));
        assert!(!hints.is_hot(b"b", 60_000_000), "held for at most a minute");
        hints.denied(b"c", 0, None);
        assert!(hints.is_hot(b"c", 49_999) && !hints.is_hot(b"c", 50_000));
    }

    #[test]
    fn an_admission_clears_the_hint_and_a_shorter_denial_never_shortens_it() {
        let hints = Hints::new();
        hints.denied(b"k", 0, Some(Duration::from_secs(10)));
        hints.denied(b"k", 0, Some(Duration::from_millis(100)));
        assert!(hints.is_hot(b"k", 9_999_999), "the longer hint stands");
        hints.admitted(b"k");
        assert!(!hints.is_hot(b"k", 0));
        assert!(!hints.is_hot(b"never-seen", 0));
    }
}
