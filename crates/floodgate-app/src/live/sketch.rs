//! [`SpaceSaving`]: the heaviest hitters of a stream in bounded memory (Metwally, Agrawal and El
//! Abbadi's space-saving algorithm).
//!
//! At most `capacity` keys are counted. A key already counted adds to its count; a new key, when
//! the table is full, takes the place of the key with the smallest count and inherits that count
//! as its over-estimate (`error`). Hence, over a stream of `n` items:
//! - a counted key's true count lies in `count - error ..= count`, and `error ≤ n / capacity`;
//! - every key seen more than `n / capacity` times is counted.
//!
//! Keys are identified by a 64-bit hash; their text is kept for display, written only when a key
//! enters the table (into the buffer of the key it replaces: no allocation once the table is full
//! and its texts have grown to their length).

/// One counted key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// The key's text.
    pub key: String,
    /// Its count, an over-estimate by at most `error`.
    pub count: u64,
    /// How much of `count` it may have inherited from the key it replaced.
    pub error: u64,
}

/// The heavy hitters of a stream, in memory bounded by `capacity` keys.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    /// The longest key text kept (longer ones are cut at a character boundary).
    max_key_bytes: usize,
    hashes: Vec<u64>,
    entries: Vec<Counted>,
    /// Items counted in all.
    total: u64,
}

impl SpaceSaving {
    /// A sketch of at most `capacity` keys (at least 1), each text at most `max_key_bytes` long.
    pub fn new(capacity: usize, max_key_bytes: usize) -> Self {
        SpaceSaving {
            capacity: capacity.max(1),
            max_key_bytes,
            hashes: Vec::new(),
            entries: Vec::new(),
            total: 0,
        }
    }

    /// Counts `n` of the key whose hash is `hash`; `write` writes its text when it enters the table.
    pub fn add(&mut self, hash: u64, n: u64, write: impl FnOnce(&mut String)) {
        self.total = self.total.saturating_add(n);
        if let Some(i) = self.hashes.iter().position(|h| *h == hash) {
            self.entries[i].count = self.entries[i].count.saturating_add(n);
            return;
        }
        if self.entries.len() < self.capacity {
            let mut key = String::new();
            write(&mut key);
            truncate(&mut key, self.max_key_bytes);
            self.hashes.push(hash);
            self.entries.push(Counted { key, count: n, error: 0 });
            return;
        }
        // Full: the key with the smallest count makes room, and its count is the newcomer's error.
        let Some((i, _)) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.count) else { return };
        let entry = &mut self.entries[i];
        entry.key.clear();
        write(&mut entry.key);
        truncate(&mut entry.key, self.max_key_bytes);
        entry.error = entry.count;
        entry.count = entry.count.saturating_add(n);
        self.hashes[i] = hash;
    }

    /// Adds every key of `other` to this sketch (the merge of two sketches: a key's error is the sum
    /// of its errors, and a key one of them does not count gets that one's smallest count as error
    /// when it is full).
    pub fn merge(&mut self, other: &SpaceSaving) {
        let floor = |s: &SpaceSaving| {
            if s.entries.len() < s.capacity {
                0
            } else {
                s.entries.iter().map(|e| e.count).min().unwrap_or(0)
            }
        };
        let (mine, theirs) = (floor(self), floor(other));
        let mut merged: Vec<(u64, Counted)> = Vec::with_capacity(self.entries.len() + other.entries.len());
        for (hash, e) in self.hashes.iter().zip(&self.entries) {
            let (count, error) = match other.hashes.iter().position(|h| h == hash) {
                Some(j) => (other.entries[j].count, other.entries[j].error),
                None => (theirs, theirs),
            };
            merged.push((
                *hash,
                Counted { key: e.key.clone(), count: e.count + count, error: e.error + error },
            ));
        }
        for (hash, e) in other.hashes.iter().zip(&other.entries) {
            if !self.hashes.contains(hash) {
                merged.push((
                    *hash,
                    Counted { key: e.key.clone(), count: e.count + mine, error: e.error + mine },
                ));
            }
        }
        merged.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.1.key.cmp(&b.1.key)));
        merged.truncate(self.capacity);
        self.total = self.total.saturating_add(other.total);
        (self.hashes, self.entries) = merged.into_iter().unzip();
    }

    /// The counted keys, most counted first.
    pub fn top(&self, n: usize) -> Vec<Counted> {
        let mut top = self.entries.clone();
        top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        top.truncate(n);
        top
    }

    /// Items counted in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets everything, keeping the table's memory.
    pub fn clear(&mut self) {
        self.hashes.clear();
        self.entries.clear();
        self.total = 0;
    }

    /// The bytes it holds: the tables and the key texts' buffers.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.hashes.capacity() * size_of::<u64>()
            + self.entries.capacity() * size_of::<Counted>()
            + self.entries.iter().map(|e| e.key.capacity()).sum::<usize>()
    }
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::fmt::Write as _;

    use super::*;

    /// A deterministic Zipf-like stream over `keys` keys: key `i` drawn with weight `1 / (i+1)^s`.
    fn zipf(n: usize, keys: u64, s: f64, seed: u64) -> Vec<u64> {
        let weights: Vec<f64> = (0..keys).map(|i| 1.0 / ((i + 1) as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let cumulative: Vec<f64> = weights
            .iter()
            .scan(0.0, |acc, w| {
                *acc += w / total;
                Some(*acc)
            })
            .collect();
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                cumulative.partition_point(|c| *c < u).min(keys as usize - 1) as u64
            })
            .collect()
    }

    fn feed(sketch: &mut SpaceSaving, stream: &[u64]) {
        for &k in stream {
            sketch.add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, |t| {
                let _ = write!(t, "user={k}");
            });
        }
    }

    fn exact(stream: &[u64]) -> HashMap<String, u64> {
        let mut counts = HashMap::new();
        for k in stream {
            *counts.entry(format!("user={k}")).or_insert(0) += 1;
        }
        counts
    }

    /// Every guarantee of space-saving, against the exact counts.
    fn assert_bounds(sketch: &SpaceSaving, exact: &HashMap<String, u64>, n: u64, capacity: usize) {
        let bound = n / capacity as u64;
        let counted = sketch.top(capacity);
        for c in &counted {
            let truth = exact.get(&c.key).copied().unwrap_or(0);
            assert!(c.count >= truth && c.count - c.error <= truth, "{c:?}: true count {truth}");
            assert!(c.error <= bound, "{c:?}: error above n / capacity = {bound}");
        }
        for (key, &truth) in exact {
            if truth > bound {
                assert!(counted.iter().any(|c| c.key == *key), "{key} ({truth} > {bound}) is missing");
            }
        }
    }

    #[test]
    fn counts_on_skewed_streams_are_within_the_error_bound_of_the_exact_counts() {
        for (s, seed) in [(0.8, 1), (1.0, 2), (1.2, 3), (1.5, 4)] {
            let stream = zipf(200_000, 50_000, s, seed);
            let mut sketch = SpaceSaving::new(64, 64);
            feed(&mut sketch, &stream);
            let exact = exact(&stream);
            assert_eq!(sketch.total(), stream.len() as u64);
            assert_bounds(&sketch, &exact, stream.len() as u64, 64);
            // The heaviest key is found first, and its count is close to the truth.
            let top = &sketch.top(1)[0];
            let heaviest = exact.iter().max_by_key(|(_, c)| **c).unwrap();
            assert_eq!(&top.key, heaviest.0, "s = {s}");
        }
    }

    #[test]
    fn a_flooding_key_among_a_million_distinct_ones_is_on_top_with_its_exact_count() {
        // One key in three is the flood; the rest are all different (a cardinality attack).
        let stream: Vec<u64> = (0..1_000_000u64).map(|i| if i % 3 == 0 { 0 } else { i }).collect();
        let mut sketch = SpaceSaving::new(32, 64);
        feed(&mut sketch, &stream);
        let top = &sketch.top(1)[0];
        assert_eq!(top.key, "user=0");
        assert_eq!(top.count - top.error, 333_334, "it entered first: no error");
        assert_bounds(&sketch, &exact(&stream), stream.len() as u64, 32);
    }

    #[test]
    fn merged_shards_keep_the_bounds_of_the_whole_stream() {
        let stream = zipf(100_000, 10_000, 1.1, 7);
        let mut shards = [SpaceSaving::new(32, 64), SpaceSaving::new(32, 64), SpaceSaving::new(32, 64)];
        for (i, chunk) in stream.chunks(1000).enumerate() {
            feed(&mut shards[i % 3], chunk);
        }
        let mut merged = SpaceSaving::new(32, 64);
        for shard in &shards {
            merged.merge(shard);
        }
        assert_eq!(merged.total(), 100_000);
        let exact = exact(&stream);
        for c in merged.top(32) {
            let truth = exact[&c.key];
            assert!(c.count >= truth && c.count - c.error <= truth, "{c:?}: true count {truth}");
        }
        // 3 × 32 slots over 100 000 items: a key above 3 × n / 32 cannot be missed.
        let heaviest = exact.iter().max_by_key(|(_, c)| **c).unwrap();
        assert_eq!(&merged.top(1)[0].key, heaviest.0);
    }

    #[test]
    fn memory_stays_bounded_at_ten_million_distinct_keys() {
        const PADDING: &str =
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
        let mut sketch = SpaceSaving::new(32, 64);
        let mut after_warmup = 0;
        for i in 0..10_000_000u64 {
            sketch.add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555, 1, |t| {
                // Keys of every length up to ~100 bytes: the texts are cut at 64.
                let _ = write!(
                    t,
                    "ip=10.{}.{}.{}/{}",
                    i >> 16 & 255,
                    i >> 8 & 255,
                    i & 255,
                    &PADDING[..(i % 80) as usize]
                );
            });
            if i == 1_000 {
                after_warmup = sketch.bytes();
            }
        }
        assert_eq!(sketch.total(), 10_000_000);
        assert_eq!(sketch.top(usize::MAX).len(), 32);
        // 32 entries, each text at most 64 bytes (its buffer grown to at most the longest text
        // written into it): a few kilobytes, whatever the number of keys seen.
        let bound = 32 * (size_of::<u64>() + size_of::<Counted>()) * 2 + 32 * 128;
        assert!(sketch.bytes() <= bound, "{} bytes > {bound}", sketch.bytes());
        assert!(
            sketch.bytes() <= after_warmup + 32 * 128,
            "grew after warm-up: {after_warmup} → {}",
            sketch.bytes()
        );
        assert!(sketch.top(32).iter().all(|c| c.key.len() <= 64));
    }
}
