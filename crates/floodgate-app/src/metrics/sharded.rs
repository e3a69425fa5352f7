//! Counters that many threads add to without contending for one cache line: one block of slots
//! per shard (a thread picks its shard once), summed when read. An increment is an uncontended
//! atomic add; the series are updated from the sums when `/metrics` is scraped.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots per cache line: each shard's block starts on a line of its own.
const PER_LINE: usize = 8;

/// How many shards: the machine's parallelism, at most 16.
pub fn shards() -> usize {
    static SHARDS: OnceLock<usize> = OnceLock::new();
    *SHARDS.get_or_init(|| std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 16))
}

/// The calling thread's shard.
pub fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    SHARD.with(|s| *s) % shards()
}

/// `len` counters, sharded.
#[derive(Debug)]
pub struct Sharded {
    stride: usize,
    len: usize,
    cells: Box<[AtomicU64]>,
}

impl Sharded {
    /// `len` counters at zero.
    pub fn new(len: usize) -> Self {
        let stride = len.div_ceil(PER_LINE).max(1) * PER_LINE;
        let cells = (0..stride * shards()).map(|_| AtomicU64::new(0)).collect();
        Sharded { stride, len, cells }
    }

    /// Adds `n` to counter `i` (ignored when out of range).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        if i < self.len
            && let Some(cell) = self.cells.get(shard() * self.stride + i)
        {
            cell.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counter `i`'s total.
    pub fn get(&self, i: usize) -> u64 {
        self.cells.iter().skip(i).step_by(self.stride).map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Counter `i`'s total since the last `take`, leaving it at zero.
    pub fn take(&self, i: usize) -> u64 {
        self.cells.iter().skip(i).step_by(self.stride).map(|c| c.swap(0, Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_add_to_their_own_shards_and_reads_sum_them() {
        let counters = std::sync::Arc::new(Sharded::new(3));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = std::sync::Arc::clone(&counters);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(1, 1);
                        c.add(2, 2);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!((counters.get(0), counters.get(1), counters.get(2)), (0, 8000, 16_000));
        assert_eq!(counters.take(1), 8000);
        assert_eq!(counters.get(1), 0, "taken");
        counters.add(7, 1);
        assert_eq!((0..3).map(|i| counters.get(i)).sum::<u64>(), 16_000, "out of range is ignored");
    }
}
