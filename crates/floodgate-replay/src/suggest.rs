//! `--suggest`: limits read from what real clients did.
//!
//! For a rule of window `w` (a bucket's: the time it takes to fill), each algorithm is one family
//! of limits with one number `L`: `fixed_window`, `sliding_window` and `sliding_log` of `L` per
//! `w`; `token_bucket` and `gcra` of burst `L` refilled at `L` per `w` (at the rule's own `L` this
//! is the rule itself); a `quota` rule, `L` per its calendar period. Each key's **peak** for an
//! algorithm is the smallest `L` at which that algorithm would never have refused the key's
//! requests in the log — found by running the algorithm itself (floodgate-core, the engine's
//! arithmetic) over the key's request times, by bisection (never refusing is monotone in `L`).
//! For a window algorithm it is the most requests the key sent in one window as that algorithm
//! counts them.
//!
//! The suggested limit is the smallest `L` at which at most `max_refused_keys` of the keys would
//! ever have been refused: the peaks sorted, the `⌊share × keys⌋` highest left out, the highest
//! of the rest; then `--headroom` on top (`⌈L × (1 + headroom)⌉`). Each rule is considered alone:
//! its keys' requests are all the requests it matched (another rule's denial, which consumes
//! nothing, is not subtracted).

use std::fmt::Write as _;
use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Limit, LimitKind};
use floodgate_core::{
    Algorithm, FixedWindow, Gcra, Quota, Rate, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};
use serde::Serialize;

/// One suggestion: a rule, an algorithm, the limit, and the per-key peaks it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suggestion {
    /// The rule.
    pub rule: String,
    /// The algorithm.
    pub algorithm: &'static str,
    /// The suggested limit (a bucket's burst; see the module docs), headroom included.
    pub limit: u64,
    /// The median key's peak.
    pub peak_p50: u64,
    /// The 99th percentile of the keys' peaks.
    pub peak_p99: u64,
    /// The 99.9th percentile.
    pub peak_p999: u64,
    /// The highest peak.
    pub peak_max: u64,
    /// The window `L` counts over, in seconds (a quota: its current period's length).
    pub window_s: f64,
    /// Keys the rule matched.
    pub keys: u64,
    /// Whether this is the rule's own algorithm.
    pub current: bool,
    /// The rule's own limit (its capacity), on its own algorithm's row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_limit: Option<u64>,
    /// Keys the rule's own limit refuses at least once, on its own algorithm's row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_over_current: Option<u64>,
}

/// The family of limits of one algorithm at one window.
#[derive(Debug, Clone)]
pub enum Family {
    /// A window or bucket algorithm over `window`.
    Window(LimitKind, Duration),
    /// The rule's calendar quota.
    Quota(Quota),
}

impl Family {
    /// The algorithm's name.
    pub fn name(&self) -> &'static str {
        match self {
            Family::Window(k, _) => k.name(),
            Family::Quota(_) => LimitKind::Quota.name(),
        }
    }

    /// The limit `l` of this family.
    pub fn limit(&self, l: u64) -> Option<Limit> {
        let n = NonZeroU64::new(l)?;
        Some(match self {
            Family::Window(LimitKind::FixedWindow, w) => FixedWindow::try_new(n, *w).ok()?.into(),
            Family::Window(LimitKind::SlidingWindow, w) => SlidingWindow::try_new(n, *w).ok()?.into(),
            Family::Window(LimitKind::SlidingLog, w) => SlidingLog::try_new(n, *w).ok()?.into(),
            Family::Window(LimitKind::TokenBucket, w) => {
                TokenBucket::try_new(Rate::try_new(n, *w).ok()?, n).ok()?.into()
            }
            Family::Window(LimitKind::Gcra, w) => Gcra::try_new(Rate::try_new(n, *w).ok()?, n).ok()?.into(),
            Family::Window(_, _) => return None,
            Family::Quota(q) => Quota::new(n, q.calendar().clone()).into(),
        })
    }

    /// The window the family counts over, in seconds (a quota: the period holding `at_us`).
    fn window_s(&self, at_us: i64) -> f64 {
        match self {
            Family::Window(_, w) => w.as_secs_f64(),
            Family::Quota(q) => Limit::Quota(q.clone()).policy_window(stamp(at_us)).as_secs_f64(),
        }
    }
}

/// The families a rule's limit is compared in: every window and bucket algorithm at its window,
/// or its own calendar; none for `concurrency` (a permit's peak needs request durations, which
/// are not a rate) nor for `budget` (a count per key over its life, not a rate).
pub fn families(limit: &Limit) -> Vec<Family> {
    let window = match limit {
        Limit::FixedWindow(a) => a.window(),
        Limit::SlidingWindow(a) => a.window(),
        Limit::SlidingLog(a) => a.window(),
        Limit::TokenBucket(a) => a.fill_time(),
        Limit::Gcra(a) => a.fill_time(),
        Limit::Quota(q) => return vec![Family::Quota(q.clone())],
        Limit::Concurrency(_) | Limit::Budget(_) => return Vec::new(),
    };
    // The registry's algorithms with a limit per window, in its order.
    floodgate_config::algorithm::ALGORITHMS
        .iter()
        .filter(|a| a.windowed)
        .map(|a| Family::Window(a.kind, window))
        .collect()
}

fn stamp(at_us: i64) -> Timestamp {
    Timestamp::from_micros(u64::try_from(at_us).unwrap_or(0))
}

fn never_refuses<A: Algorithm>(a: &A, times: &[i64]) -> bool {
    let mut state = A::State::default();
    times.iter().all(|t| matches!(a.check(&mut state, stamp(*t), 1), Ok((d, _)) if d.allowed))
}

/// Whether `limit` would have allowed every one of `times` (sorted, cost 1 each).
pub fn allows_all(limit: &Limit, times: &[i64]) -> bool {
    match limit {
        Limit::FixedWindow(a) => never_refuses(a, times),
        Limit::SlidingWindow(a) => never_refuses(a, times),
        Limit::SlidingLog(a) => never_refuses(a, times),
        Limit::TokenBucket(a) => never_refuses(a, times),
        Limit::Gcra(a) => never_refuses(a, times),
        Limit::Quota(a) => never_refuses(a, times),
        Limit::Concurrency(a) => never_refuses(a, times),
        Limit::Budget(a) => never_refuses(a, times),
    }
}

/// A key's peak in `family`: the smallest limit that never refuses `times` (sorted).
pub fn peak(family: &Family, times: &[i64]) -> u64 {
    if times.is_empty() {
        return 0;
    }
    // `times.len()` always suffices: no window or bucket of that size can run out.
    let (mut lo, mut hi) = (1u64, times.len() as u64);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if family.limit(mid).is_some_and(|l| allows_all(&l, times)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The nearest-rank percentile `q` (0–1) of `sorted`.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The smallest limit at which at most `share` (0–1) of the keys, whose peaks are `sorted`,
/// would be refused.
pub fn smallest_limit(sorted: &[u64], share: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // Float noise (0.1 % of 1000 keys is 0.99999…) must not cost a key.
    let refused = ((share * sorted.len() as f64) + 1e-9).floor() as usize;
    sorted[sorted.len() - 1 - refused.min(sorted.len() - 1)]
}

/// Every key's peak, per family, of one rule.
#[derive(Debug, Clone)]
pub struct Peaks {
    /// The rule.
    pub rule: String,
    /// The rule's own limit.
    pub limit: Limit,
    /// Per family: the family and the keys' peaks, sorted.
    pub families: Vec<(Family, Vec<u64>)>,
    /// A time inside the log (for a quota's period length).
    pub at_us: i64,
}

impl Peaks {
    /// The peaks of the keys of a rule of `limit`, each key's request times given (sorted).
    pub fn new<'t>(
        rule: &str,
        limit: &Limit,
        keys: impl Iterator<Item = &'t [i64]> + Clone,
        at_us: i64,
    ) -> Self {
        let families = families(limit)
            .into_iter()
            .map(|f| {
                let mut peaks: Vec<u64> = keys.clone().map(|t| peak(&f, t)).collect();
                peaks.sort_unstable();
                (f, peaks)
            })
            .collect();
        Peaks { rule: rule.to_owned(), limit: limit.clone(), families, at_us }
    }

    /// The suggestions: one per family.
    pub fn suggest(&self, share: f64, headroom: f64) -> Vec<Suggestion> {
        self.families
            .iter()
            .map(|(family, peaks)| {
                let base = smallest_limit(peaks, share);
                let limit = (base as f64 * (1.0 + headroom) - 1e-9).ceil().max(base as f64) as u64;
                let current = family.name() == self.limit.algorithm_name();
                let capacity = self.limit.capacity();
                Suggestion {
                    rule: self.rule.clone(),
                    algorithm: family.name(),
                    limit,
                    peak_p50: percentile(peaks, 0.5),
                    peak_p99: percentile(peaks, 0.99),
                    peak_p999: percentile(peaks, 0.999),
                    peak_max: peaks.last().copied().unwrap_or(0),
                    window_s: family.window_s(self.at_us),
                    keys: peaks.len() as u64,
                    current,
                    current_limit: current.then_some(capacity),
                    keys_over_current: current
                        .then(|| peaks.iter().filter(|p| **p > capacity).count() as u64),
                }
            })
            .collect()
    }
}

/// The suggestions as a table.
pub fn table(rows: &[Suggestion]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "  suggested limits: {:<22} {:<15} {:>9} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8}  now",
        "rule", "algorithm", "window s", "limit", "p50", "p99", "p99.9", "max", "keys"
    );
    for r in rows {
        let now = match (r.current_limit, r.keys_over_current) {
            (Some(l), Some(over)) => format!("{l} (refuses {over} keys)"),
            _ => String::new(),
        };
        let _ = writeln!(
            t,
            "                    {:<22} {:<15} {:>9} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8}  {}",
            r.rule,
            r.algorithm,
            format!("{:.0}", r.window_s),
            r.limit,
            r.peak_p50,
            r.peak_p99,
            r.peak_p999,
            r.peak_max,
            r.keys,
            now
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;
    const T0: i64 = 1_796_169_600 * S; // 2026-12-02T00:00:00Z, minute-aligned

    fn window_limit(kind: LimitKind, l: u64) -> Limit {
        Family::Window(kind, Duration::from_secs(60)).limit(l).unwrap()
    }

    #[test]
    fn a_burst_inside_one_window_is_a_peak_of_its_size_for_every_algorithm() {
        // 7 requests within one second, well inside a minute, then nothing for 5 minutes, then 3.
        let mut times: Vec<i64> = (0..7).map(|i| T0 + 10 * S + i * 100_000).collect();
        times.extend((0..3).map(|i| T0 + 400 * S + i * S));
        for family in families(&window_limit(LimitKind::FixedWindow, 1)) {
            assert_eq!(peak(&family, &times), 7, "{}", family.name());
        }
    }

    #[test]
    fn a_fixed_window_peak_ignores_a_burst_split_by_a_boundary_and_a_sliding_log_does_not() {
        // 4 just before a minute boundary and 4 just after.
        let times: Vec<i64> =
            (0..4).map(|i| T0 + 59 * S + i * 1000).chain((0..4).map(|i| T0 + 60 * S + i * 1000)).collect();
        let w = Duration::from_secs(60);
        assert_eq!(peak(&Family::Window(LimitKind::FixedWindow, w), &times), 4);
        assert_eq!(peak(&Family::Window(LimitKind::SlidingLog, w), &times), 8);
    }

    #[test]
    fn the_peak_is_the_smallest_limit_that_never_refuses() {
        let times: Vec<i64> = (0..50).map(|i| T0 + i * 700_000).collect();
        for family in families(&window_limit(LimitKind::SlidingWindow, 1)) {
            let p = peak(&family, &times);
            assert!(allows_all(&family.limit(p).unwrap(), &times), "{}", family.name());
            assert!(p == 1 || !allows_all(&family.limit(p - 1).unwrap(), &times), "{}", family.name());
        }
    }

    #[test]
    fn the_limit_leaves_out_at_most_the_share_of_keys() {
        let peaks: Vec<u64> = (1..=1000).collect();
        assert_eq!(smallest_limit(&peaks, 0.001), 999);
        assert_eq!(smallest_limit(&peaks, 0.0), 1000);
        assert_eq!(smallest_limit(&peaks, 0.01), 990);
        assert_eq!(smallest_limit(&peaks, 1.0), 1);
        assert_eq!(percentile(&peaks, 0.5), 500);
        assert_eq!(percentile(&peaks, 0.99), 990);
        assert_eq!(percentile(&peaks, 0.999), 999);
        assert_eq!(smallest_limit(&[], 0.001), 0);
    }

    proptest::proptest! {
        #[test]
        fn the_peak_of_a_sliding_log_is_the_most_requests_in_any_window(
            gaps in proptest::collection::vec(0i64..30_000_000, 1..60)
        ) {
            let mut t = T0;
            let times: Vec<i64> = gaps.iter().map(|g| { t += g; t }).collect();
            let w = 60 * S;
            // Reference: the most requests in any half-open span (t - w, t].
            let most = times.iter().map(|end| times.iter().filter(|x| **x > end - w && *x <= end).count()).max().unwrap();
            let family = Family::Window(LimitKind::SlidingLog, Duration::from_secs(60));
            proptest::prop_assert_eq!(peak(&family, &times), most as u64);
        }
    }
}
