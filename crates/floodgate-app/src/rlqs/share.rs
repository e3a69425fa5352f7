//! The fairness rule: a global limit split among the streams that report a bucket group, by their
//! demand. Pure arithmetic over rates (requests per second).
//!
//! With `n` streams, `equal = limit / n` and `floor = floor_fraction × equal`:
//! - **Room for everyone** (`Σ max(floor, demandᵢ) ≤ limit`): each stream gets what it asks,
//!   at least the floor, and the rest of the limit is spread equally — unused share goes back to
//!   everyone, so that a stream whose demand grows has room before the next report.
//! - **Oversubscribed**: each stream gets the floor, and the rest of the limit in proportion to
//!   its demand.
//!
//! Either way the shares sum to the limit (never more: rounding is left to the caller, who rounds
//! down), every stream gets at least the floor, and with no demand at all the split is equal.

/// Splits `limit` among streams whose demands are `demand` (each ≥ 0, finite), writing one share
/// per stream into `out` (cleared first). `floor` is the fraction of an equal share each stream
/// keeps however idle, from 0 to 1.
///
/// ```
/// # use floodgate_app::rlqs::split;
/// let mut shares = Vec::new();
/// // One hot stream, three idle ones, total demand under the limit: the hot one gets its demand.
/// split(100.0, &[60.0, 0.0, 0.0, 0.0], 0.1, &mut shares);
/// assert!(shares[0] >= 60.0);
/// assert!((shares.iter().sum::<f64>() - 100.0).abs() < 1e-9);
/// ```
pub fn split(limit: f64, demand: &[f64], floor: f64, out: &mut Vec<f64>) {
    out.clear();
    let n = demand.len();
    if n == 0 || limit <= 0.0 {
        out.resize(n, 0.0);
        return;
    }
    let equal = limit / n as f64;
    let floor = floor.clamp(0.0, 1.0) * equal;
    let asked: f64 = demand.iter().map(|d| d.max(floor)).sum();
    if asked <= limit {
        let spare = (limit - asked) / n as f64;
        out.extend(demand.iter().map(|d| d.max(floor) + spare));
    } else {
        let total: f64 = demand.iter().sum();
        let rest = limit - floor * n as f64;
        // `asked > limit ≥ n × floor` means some demand exceeds the floor, so `total > 0`.
        out.extend(demand.iter().map(|d| floor + rest * d / total));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shares(limit: f64, demand: &[f64], floor: f64) -> Vec<f64> {
        let mut out = Vec::new();
        split(limit, demand, floor, &mut out);
        out
    }

    #[test]
    fn no_demand_splits_equally() {
        assert_eq!(shares(100.0, &[0.0; 4], 0.1), [25.0; 4]);
    }

    #[test]
    fn the_hot_stream_gets_its_demand_when_the_total_is_under_the_limit() {
        // 1 hot, 7 idle: a static split would give it 1/8.
        let s = shares(1000.0, &[900.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.1);
        assert!(s[0] >= 900.0, "{s:?}");
        assert!(s[1..].iter().all(|x| *x >= 12.5), "{s:?}");
    }

    #[test]
    fn oversubscribed_shares_follow_demand_above_the_floor() {
        let s = shares(100.0, &[300.0, 100.0], 0.0);
        assert!((s[0] - 75.0).abs() < 1e-9 && (s[1] - 25.0).abs() < 1e-9, "{s:?}");
    }

    /// The reference: what each stream must get, by the rule in the module docs.
    fn reference(limit: f64, demand: &[f64], floor: f64) -> Vec<f64> {
        let n = demand.len() as f64;
        let f = floor * limit / n;
        if demand.iter().map(|d| d.max(f)).sum::<f64>() <= limit {
            let spare = (limit - demand.iter().map(|d| d.max(f)).sum::<f64>()) / n;
            demand.iter().map(|d| d.max(f) + spare).collect()
        } else {
            let total: f64 = demand.iter().sum();
            demand.iter().map(|d| f + (limit - f * n) * d / total).collect()
        }
    }

    proptest! {
        #[test]
        fn shares_sum_to_the_limit_keep_the_floor_and_follow_the_reference(
            limit in 1.0f64..1e7,
            demand in proptest::collection::vec(0.0f64..1e7, 1..40),
            floor in 0.0f64..=1.0,
        ) {
            let s = shares(limit, &demand, floor);
            let sum: f64 = s.iter().sum();
            prop_assert!(sum <= limit * (1.0 + 1e-9), "sum {} > limit {}", sum, limit);
            prop_assert!(sum >= limit * (1.0 - 1e-9));
            let f = floor * limit / demand.len() as f64;
            for (x, r) in s.iter().zip(reference(limit, &demand, floor)) {
                prop_assert!(*x >= f * (1.0 - 1e-9));
                prop_assert!((x - r).abs() <= 1e-6 * limit);
            }
            // Under the limit, every stream gets at least its demand.
            if demand.iter().map(|d| d.max(f)).sum::<f64>() <= limit {
                for (x, d) in s.iter().zip(&demand) {
                    prop_assert!(*x >= d * (1.0 - 1e-9));
                }
            }
        }
    }
}
