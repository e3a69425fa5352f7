//! Which key each request carries: uniform or Zipf over N keys, from a seeded generator (runs
//! are reproducible with `--seed`).

use crate::report::units::wall_micros;

/// A key no earlier run used: `boundary-<pid>-<µs since the epoch>`.
pub fn unique_key() -> String {
    format!("boundary-{}-{}", std::process::id(), wall_micros())
}

/// A small, fast, seedable generator (SplitMix64); statistical quality is ample for load shapes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// Generator number `index` of a family seeded with `seed`: its starting state is a hash of
    /// both, so two streams of one family do not run along the same sequence. (SplitMix64 steps
    /// its state by a constant; seeds that differ by multiples of that constant — `seed ^ k·γ`
    /// for small k — would give every stream the same keys a few steps apart, which bunches
    /// concurrent callers onto the same keys.)
    pub fn stream(seed: u64, index: u64) -> Self {
        let mut mix = Rng(seed);
        let a = mix.next_u64();
        Rng(Rng(a ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `[0, n)` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform integer in `[lo, hi]`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// An exponentially distributed value with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// How keys are drawn.
#[derive(Debug, Clone)]
pub enum KeyDistribution {
    /// Every key equally likely.
    Uniform {
        /// Number of keys.
        keys: u64,
    },
    /// Key `k` (0-based) with probability ∝ 1 / (k + 1)^s: a few hot keys, a long tail.
    Zipf {
        /// Cumulative probabilities, one per key.
        cdf: std::sync::Arc<[f64]>,
    },
}

/// The most keys a Zipf distribution tabulates (8 bytes each).
pub const MAX_ZIPF_KEYS: u64 = 10_000_000;

impl KeyDistribution {
    /// Uniform over `keys` keys (at least 1).
    pub fn uniform(keys: u64) -> Self {
        KeyDistribution::Uniform { keys: keys.max(1) }
    }

    /// Zipf over `keys` keys (at least 1, at most [`MAX_ZIPF_KEYS`]) with exponent `s`.
    pub fn zipf(keys: u64, s: f64) -> Self {
        let n = keys.clamp(1, MAX_ZIPF_KEYS) as usize;
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        KeyDistribution::Zipf { cdf: cdf.into() }
    }

    /// Draws a key index.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        match self {
            KeyDistribution::Uniform { keys } => rng.below(*keys),
            KeyDistribution::Zipf { cdf } => {
                let u = rng.unit();
                cdf.partition_point(|&c| c < u).min(cdf.len() - 1) as u64
            }
        }
    }

    /// A short name for reports: `uniform` or `zipf`.
    pub fn name(&self) -> &'static str {
        match self {
            KeyDistribution::Uniform { .. } => "uniform",
            KeyDistribution::Zipf { .. } => "zipf",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_of_one_family_do_not_share_their_sequence() {
        let window = |mut r: Rng| (0..1000).map(|_| r.next_u64()).collect::<std::collections::HashSet<_>>();
        let seen: Vec<_> = (0..64).map(|i| window(Rng::stream(0, i))).collect();
        for (i, a) in seen.iter().enumerate() {
            for b in &seen[i + 1..] {
                assert_eq!(a.intersection(b).count(), 0, "two streams met within 1000 draws");
            }
        }
        // The same seed and index give the same stream; another seed another one.
        assert_eq!(window(Rng::stream(7, 3)), window(Rng::stream(7, 3)));
        assert_ne!(window(Rng::stream(7, 3)), window(Rng::stream(8, 3)));
        // What a stepped seed would have done: stream w+1 is stream w one step later.
        let (mut a, mut b) =
            (Rng::new(0x9E37_79B9_7F4A_7C15), Rng::new(0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(2)));
        a.next_u64();
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn uniform_keys_cover_the_range_evenly() {
        let d = KeyDistribution::uniform(10);
        let mut rng = Rng::new(1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[d.sample(&mut rng) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipf_keys_are_hot_at_the_head() {
        let d = KeyDistribution::zipf(1_000, 1.0);
        let mut rng = Rng::new(2);
        let mut counts = vec![0u32; 1_000];
        for _ in 0..100_000 {
            counts[d.sample(&mut rng) as usize] += 1;
        }
        // H(1000) ≈ 7.485: key 0 gets ≈ 13.4 %, key 1 ≈ 6.7 %.
        assert!((12_500..14_300).contains(&counts[0]), "{}", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[9] && counts[9] > counts[999]);
    }

    #[test]
    fn the_generator_is_reproducible() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        let mut r = Rng::new(3);
        assert!((0..1000).all(|_| (5..=9).contains(&r.between(5, 9))));
    }
}
