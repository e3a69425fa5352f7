//! The algorithms: pure functions of `(state, now, cost, params)`.
//!
//! Each algorithm is a parameter struct implementing [`Algorithm`] over a compact `State`. Stores
//! supply the atomic read-modify-write around these functions and hold no rate math of their own.
//!
//! | algorithm | state | memory per key | over-admission |
//! |---|---|---|---|
//! | [`FixedWindow`] | window start + count | 16 bytes | up to 2 × limit across a window boundary |
//! | [`SlidingWindow`] | window start + two counts | 24 bytes | at most `limit × (1 + d / window)` in any span of length `d ≤ window` |
//! | [`SlidingLog`] | one entry per admitted instant | O(limit) | none: never more than `limit` in any window |
//! | [`TokenBucket`] | theoretical arrival time | 8 bytes | none beyond `burst` |
//! | [`Gcra`] | theoretical arrival time | 8 bytes | none beyond `burst` |
//! | [`Concurrency`] | live leases | O(limit) | none |
//! | [`Quota`] | period start + count + the previous period's count | 24 bytes | none within a calendar period |
//! | [`Budget`] | first use + count | 16 bytes | none: never refills until `ttl` after the first use |

mod bucket;
mod budget;
mod concurrency;
mod fixed_window;
mod quota;
mod sliding_log;
mod sliding_window;

pub use bucket::{Gcra, TokenBucket};
pub use budget::Budget;
pub use concurrency::{Concurrency, LeaseState};
pub use fixed_window::{FixedWindow, WindowState};
pub use quota::{Quota, QuotaState};
pub use sliding_log::{LogState, SlidingLog};
pub use sliding_window::{SlidingState, SlidingWindow};

use crate::{CostError, Decision, Timestamp};

/// What a consumption granted, kept by the caller to give it back later
/// (a refund of a reservation, or the release of a concurrency permit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Grant {
    /// When the cost was consumed.
    pub at: Timestamp,
    /// The cost consumed.
    pub cost: u64,
    /// The permit's identity for [`Concurrency`]; 0 for every other algorithm.
    pub lease: u64,
}

/// A rate-limiting algorithm: its parameters, over a compact per-key state.
///
/// `decide` is pure; `consume` and `refund` mutate. A store runs them under one atomic
/// read-modify-write per key (a lock in memory, a Lua script in Redis).
pub trait Algorithm {
    /// Per-key state. `Default` is the state of a key never seen, or fully replenished.
    type State: Default;

    /// The largest cost one request may have; a larger cost can never be allowed.
    fn capacity(&self) -> u64;

    /// What a check of `cost` at `now` would decide, without changing anything.
    /// `cost` must be within `1..=capacity()` (see [`Algorithm::check`]).
    fn decide(&self, state: &Self::State, now: Timestamp, cost: u64) -> Decision;

    /// Consumes `cost` at `now` unconditionally (also past the limit, for reports).
    fn consume(&self, state: &mut Self::State, now: Timestamp, cost: u64) -> Grant;

    /// Gives back what `grant` consumed, as far as it still counts at `now`.
    fn refund(&self, state: &mut Self::State, now: Timestamp, grant: &Grant);

    /// `(remaining, reset_after in µs)` at `now`, without consuming.
    fn status(&self, state: &Self::State, now: Timestamp) -> (u64, u64);

    /// When `state` becomes indistinguishable from the default state with no further traffic;
    /// a store may forget the key from then on. [`Timestamp::EPOCH`] if it already is.
    fn expires_at(&self, state: &Self::State) -> Timestamp;

    /// Checks that `cost` can ever be allowed.
    fn validate_cost(&self, cost: u64) -> Result<(), CostError> {
        crate::validate_cost(cost, self.capacity())
    }

    /// Decides, and consumes `cost` when allowed. A denied request consumes nothing.
    fn check(
        &self,
        state: &mut Self::State,
        now: Timestamp,
        cost: u64,
    ) -> Result<(Decision, Option<Grant>), CostError> {
        self.validate_cost(cost)?;
        let decision = self.decide(state, now, cost);
        let grant = decision.allowed.then(|| self.consume(state, now, cost));
        Ok((decision, grant))
    }

    /// Consumes `cost` after the fact; never denies. The decision shows the state afterwards.
    fn report(&self, state: &mut Self::State, now: Timestamp, cost: u64) -> (Decision, Grant) {
        let grant = self.consume(state, now, cost);
        let (remaining, reset_after) = self.status(state, now);
        (Decision::allow(self.capacity(), remaining, reset_after), grant)
    }
}

/// `a * b / c` rounded down, without overflow in the product.
pub(crate) fn mul_div_floor(a: u64, b: u64, c: u64) -> u64 {
    u64::try_from(u128::from(a) * u128::from(b) / u128::from(c)).unwrap_or(u64::MAX)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Shared checks for every algorithm.
    use super::*;

    /// Asserts that a request reaching a key after another, having read the clock 1µs before it
    /// (the order two requests can take with the clock read before the key's lock), is counted
    /// beside it, in the window (or budget) the first one opened, and that both refunds give back
    /// exactly what was taken: the key's time never runs backwards. Pick `first` on a window
    /// boundary, so that the late request's own instant lies in the window before.
    pub(crate) fn assert_late_arrival_counts_and_refunds<A: Algorithm>(
        algo: &A,
        first: Timestamp,
        cost: u64,
    ) {
        let late = Timestamp::from_micros(first.as_micros() - 1);
        let mut state = A::State::default();
        let (opened, g1) = algo.check(&mut state, first, cost).expect("a valid cost");
        let (after, g2) = algo.check(&mut state, late, cost).expect("a valid cost");
        assert!(opened.allowed && after.allowed);
        assert_eq!(after.remaining, opened.remaining - cost, "the late request is counted beside the first");
        assert_eq!(
            algo.status(&state, first).0,
            algo.capacity() - 2 * cost,
            "nothing of the first one is lost"
        );
        algo.refund(&mut state, first, &g2.expect("allowed"));
        assert_eq!(algo.status(&state, first).0, algo.capacity() - cost, "the late grant is given back");
        algo.refund(&mut state, first, &g1.expect("allowed"));
        assert_eq!(algo.status(&state, first).0, algo.capacity(), "both grants are given back");
    }

    /// Asserts that a denied decision's `retry_after` is exact: the same request is allowed at
    /// `now + retry_after` and denied one microsecond before. Does not change `state`.
    pub(crate) fn assert_exact_retry<A: Algorithm>(algo: &A, state: &A::State, now: Timestamp, cost: u64)
    where
        A::State: Clone,
    {
        let d = algo.decide(state, now, cost);
        assert!(!d.allowed, "expected a denial at {now:?}");
        let retry = d.retry_after.expect("a denial has retry_after");
        let at = now.saturating_add(retry);
        assert!(algo.decide(state, at, cost).allowed, "not allowed at now + retry_after ({retry:?})");
        let just_before = Timestamp::from_micros(at.as_micros() - 1);
        assert!(
            !algo.decide(state, just_before, cost).allowed,
            "already allowed 1µs before now + retry_after ({retry:?})"
        );
    }
}
