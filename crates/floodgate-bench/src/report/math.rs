//! The report math: latency percentiles, admissions per time bucket, the most admitted in any
//! window-length span, and over-admission. Pure functions over event streams, unit-tested with
//! synthetic streams.

use hdrhistogram::Histogram;

/// Latency percentiles in microseconds (fractional: in-process decisions take well under 1 µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest value recorded.
    pub max_us: f64,
}

/// A latency histogram in nanoseconds, 1 ns to 60 s, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts.
    Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap_or_else(|_| Histogram::new(3).expect("hdr"))
}

/// The percentiles of a histogram of nanoseconds, in microseconds (all zero when empty).
pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let us = |ns: u64| ns as f64 / 1_000.0;
    Percentiles {
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
    }
}

/// The most cost admitted within any span of `window_us` (a half-open interval `[t, t + window)`),
/// given admissions `(time_us, cost)` sorted by time.
///
/// Two pointers over the sorted stream: every maximal span starts at an admission, so it is enough
/// to look, for each admission, at the admissions less than one window before it.
pub fn max_admitted_in_any_window(admitted: &[(u64, u64)], window_us: u64) -> u64 {
    debug_assert!(admitted.windows(2).all(|w| w[0].0 <= w[1].0), "admissions must be sorted");
    let (mut start, mut sum, mut best) = (0usize, 0u64, 0u64);
    for &(t, cost) in admitted {
        sum += cost;
        while t - admitted[start].0 >= window_us {
            sum -= admitted[start].1;
            start += 1;
        }
        best = best.max(sum);
    }
    best
}

/// `admitted / limit`: 1.0 means exactly the limit, 2.0 twice the limit (0 when the limit is 0).
pub fn over_admission_ratio(admitted: u64, limit: u64) -> f64 {
    if limit == 0 { 0.0 } else { admitted as f64 / limit as f64 }
}

/// Admitted and denied requests per time bucket (100 ms by default), for plots.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Timeline {
    /// The bucket width in milliseconds.
    pub bucket_ms: u64,
    /// `[admitted, denied]` per bucket, from time 0.
    pub buckets: Vec<[u64; 2]>,
}

/// The most buckets a timeline keeps (a 100 ms timeline of 10 hours); later events go to the last.
const MAX_BUCKETS: usize = 360_000;

impl Timeline {
    /// An empty timeline of `bucket_ms` buckets.
    pub fn new(bucket_ms: u64) -> Self {
        Timeline { bucket_ms: bucket_ms.max(1), buckets: Vec::new() }
    }

    /// Counts one decision at `at_ms` after the start.
    pub fn record(&mut self, at_ms: u64, admitted: bool) {
        let i = usize::try_from(at_ms / self.bucket_ms).unwrap_or(usize::MAX).min(MAX_BUCKETS - 1);
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, [0, 0]);
        }
        self.buckets[i][usize::from(!admitted)] += 1;
    }

    /// Adds `other` (same bucket width) into this timeline.
    pub fn merge(&mut self, other: &Timeline) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), [0, 0]);
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            mine[0] += theirs[0];
            mine[1] += theirs[1];
        }
    }

    /// Total admitted and denied.
    pub fn totals(&self) -> (u64, u64) {
        self.buckets.iter().fold((0, 0), |(a, d), b| (a + b[0], d + b[1]))
    }
}

/// `part / whole`, 0 when `whole` is 0.
pub fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_stream_are_where_expected() {
        let mut h = latency_histogram();
        for us in 1..=10_000u64 {
            h.record(us * 1_000).unwrap();
        }
        let p = percentiles(&h);
        let close = |got: f64, want: f64| (got - want).abs() / want < 0.002;
        assert!(close(p.p50_us, 5_000.0), "{p:?}");
        assert!(close(p.p90_us, 9_000.0), "{p:?}");
        assert!(close(p.p99_us, 9_900.0), "{p:?}");
        assert!(close(p.p999_us, 9_990.0), "{p:?}");
        assert!(close(p.max_us, 10_000.0), "{p:?}");
    }

    #[test]
    fn percentiles_keep_sub_microsecond_resolution() {
        let mut h = latency_histogram();
        for ns in [120u64, 130, 140, 150, 5_000] {
            h.record(ns).unwrap();
        }
        let p = percentiles(&h);
        assert!((p.p50_us - 0.140).abs() < 0.001, "{p:?}");
        assert!((p.max_us - 5.0).abs() < 0.01, "{p:?}");
        assert_eq!(percentiles(&latency_histogram()), Percentiles::default());
    }

    #[test]
    fn a_fixed_window_double_burst_spans_twice_the_limit() {
        // 10 admitted 1 ms before a boundary at 1 s, 10 admitted 1 ms after it.
        let mut admitted: Vec<(u64, u64)> = (0..10).map(|_| (999_000, 1)).collect();
        admitted.extend((0..10).map(|_| (1_001_000, 1)));
        assert_eq!(max_admitted_in_any_window(&admitted, 1_000_000), 20);
        assert_eq!(over_admission_ratio(20, 10), 2.0);
        // With a window of 2 ms the spans are [999 ms, 1001 ms) and [1001 ms, 1003 ms): 10 each.
        assert_eq!(max_admitted_in_any_window(&admitted, 2_000), 10);
        assert_eq!(max_admitted_in_any_window(&admitted, 2_001), 20);
    }

    #[test]
    fn spans_are_half_open_and_weighted_by_cost() {
        // A steady 1 per 100 ms for 2 s in a 1 s window: exactly 10 fit in [t, t + 1 s).
        let steady: Vec<(u64, u64)> = (0..20).map(|i| (i * 100_000, 1)).collect();
        assert_eq!(max_admitted_in_any_window(&steady, 1_000_000), 10);
        let costly = [(0, 5), (500_000, 3), (1_000_000, 4), (1_400_000, 4)];
        assert_eq!(max_admitted_in_any_window(&costly, 1_000_000), 11);
        assert_eq!(max_admitted_in_any_window(&[], 1_000_000), 0);
    }

    #[test]
    fn the_span_matches_a_brute_force_reference() {
        let mut x = 7u64;
        let mut admitted = Vec::new();
        let mut t = 0;
        for _ in 0..500 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            t += (x >> 33) % 50_000;
            admitted.push((t, 1 + (x >> 60)));
        }
        for window in [1, 10_000, 123_456, 1_000_000] {
            let brute: u64 = admitted
                .iter()
                .map(|&(s, _)| {
                    admitted.iter().filter(|&&(u, _)| u >= s && u < s + window).map(|e| e.1).sum::<u64>()
                })
                .max()
                .unwrap();
            assert_eq!(max_admitted_in_any_window(&admitted, window), brute, "window {window}");
        }
    }

    #[test]
    fn over_admission_of_a_zero_limit_is_zero() {
        assert_eq!(over_admission_ratio(5, 0), 0.0);
        assert_eq!(over_admission_ratio(300, 100), 3.0);
        assert_eq!(rate(1, 0), 0.0);
        assert_eq!(rate(1, 4), 0.25);
    }

    #[test]
    fn timelines_bucket_and_merge() {
        let mut a = Timeline::new(100);
        a.record(0, true);
        a.record(99, false);
        a.record(250, true);
        let mut b = Timeline::new(100);
        b.record(420, false);
        a.merge(&b);
        assert_eq!(a.buckets, vec![[1, 1], [0, 0], [1, 0], [0, 0], [0, 1]]);
        assert_eq!(a.totals(), (2, 2));
    }
}
