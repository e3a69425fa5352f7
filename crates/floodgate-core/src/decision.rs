//! The outcome of asking one limit for capacity.

use std::time::Duration;

/// What one limit says about one request.
///
/// Being limited is a result, not an error: a denied request gets a `Decision` with `allowed == false`
/// and an exact [`retry_after`](Decision::retry_after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The limit's capacity: the most a single window, bucket or period grants.
    pub limit: u64,
    /// Capacity left after this request (nothing is consumed by a denied request).
    pub remaining: u64,
    /// Time until the limit is fully replenished, given no further traffic.
    pub reset_after: Duration,
    /// For a denied request: the earliest time from now at which the same request, with the same cost
    /// and no other traffic, is allowed. Exact to the microsecond: it passes at `now + retry_after`
    /// and is refused one microsecond before. `None` when allowed.
    pub retry_after: Option<Duration>,
}

impl Decision {
    pub(crate) fn allow(limit: u64, remaining: u64, reset_after_us: u64) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_after_us),
            retry_after: None,
        }
    }

    pub(crate) fn deny(limit: u64, remaining: u64, reset_after_us: u64, retry_after_us: u64) -> Self {
        debug_assert!(retry_after_us > 0, "a denial must name a future time");
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_after_us),
            retry_after: Some(Duration::from_micros(retry_after_us)),
        }
    }

    /// `Retry-After` in whole seconds as sent over HTTP: `retry_after` rounded up, at least 1.
    /// `None` when allowed.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(ceil_secs_at_least_one)
    }
}

/// `d` in whole seconds, rounded up, and at least 1.
pub fn ceil_secs_at_least_one(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

/// A request that no amount of waiting can make pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// Every request costs at least 1.
    #[error("cost must be at least 1")]
    Zero,
    /// The cost exceeds what the limit can ever grant at once.
    #[error("cost {cost} can never be allowed: the limit grants at most {capacity} at once")]
    ExceedsCapacity {
        /// The requested cost.
        cost: u64,
        /// The most the limit grants to one request.
        capacity: u64,
    },
}

/// Checks that a request of `cost` can ever pass a limit that grants at most `capacity` at once.
pub fn validate_cost(cost: u64, capacity: u64) -> Result<(), CostError> {
    if cost == 0 {
        return Err(CostError::Zero);
    }
    if cost > capacity {
        return Err(CostError::ExceedsCapacity { cost, capacity });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_header_rounds_up_and_is_at_least_one() {
        assert_eq!(ceil_secs_at_least_one(Duration::from_micros(1)), 1);
        assert_eq!(ceil_secs_at_least_one(Duration::ZERO), 1);
        assert_eq!(ceil_secs_at_least_one(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs_at_least_one(Duration::from_micros(2_000_001)), 3);
    }
}
