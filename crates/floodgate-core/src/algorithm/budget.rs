//! Budget: a count that never refills, and vanishes `ttl` after its first use.

use std::num::NonZeroU64;
use std::time::Duration;

use super::fixed_window::ZeroWindow;
use super::{Algorithm, Grant, WindowState};
use crate::time::micros;
use crate::{Decision, Timestamp};

/// Up to `limit` in all, from the first use until `ttl` after it; then the budget is gone, and the
/// next use starts a new one. Nothing refills meanwhile — an agent session's step budget (50 steps,
/// cleared a day after the session's first step).
///
/// ```
/// use std::num::NonZeroU64;
/// use std::time::Duration;
/// use floodgate_core::{Algorithm, Budget, Timestamp};
///
/// let steps = Budget::try_new(NonZeroU64::new(2).unwrap(), Duration::from_secs(3600))?;
/// let mut state = Default::default();
/// let first = Timestamp::from_secs(1_700_000_000);
/// assert!(steps.check(&mut state, first, 1)?.0.allowed);
/// assert!(steps.check(&mut state, first.saturating_add(Duration::from_secs(1800)), 1)?.0.allowed);
/// let (denied, _) = steps.check(&mut state, first.saturating_add(Duration::from_secs(2700)), 1)?;
/// assert_eq!(denied.retry_after, Some(Duration::from_secs(900)), "gone an hour after the first use");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    limit: u64,
    ttl: u64,
}

impl Budget {
    /// `limit` in all, for `ttl` from the first use.
    pub fn try_new(limit: NonZeroU64, ttl: Duration) -> Result<Self, ZeroWindow> {
        let ttl = micros(ttl);
        if ttl == 0 {
            return Err(ZeroWindow);
        }
        Ok(Budget { limit: limit.get(), ttl })
    }

    /// How long a budget lasts from its first use.
    pub fn ttl(&self) -> Duration {
        Duration::from_micros(self.ttl)
    }

    /// Whether `state` holds a budget in use at `now` (used, and not past its ttl).
    fn live(&self, state: &WindowState, now: Timestamp) -> bool {
        state.count > 0 && now.as_micros() < state.start.saturating_add(self.ttl)
    }
}

impl Algorithm for Budget {
    type State = WindowState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &WindowState, now: Timestamp, cost: u64) -> Decision {
        let now = state.not_before(now);
        let (start, used) =
            if self.live(state, now) { (state.start, state.count) } else { (now.as_micros(), 0) };
        let end_in = start + self.ttl - now.as_micros();
        match used.checked_add(cost).filter(|u| *u <= self.limit) {
            Some(after) => Decision::allow(self.limit, self.limit - after, end_in),
            // Nothing refills: the first moment it can pass is when the budget is gone.
            None => Decision::deny(self.limit, self.limit.saturating_sub(used), end_in, end_in.max(1)),
        }
    }

    fn consume(&self, state: &mut WindowState, now: Timestamp, cost: u64) -> Grant {
        // Taken no earlier than the budget it is taken from began, so that its refund finds it.
        let now = state.not_before(now);
        if !self.live(state, now) {
            *state = WindowState { start: now.as_micros(), count: 0 };
        }
        state.count = state.count.saturating_add(cost);
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut WindowState, now: Timestamp, grant: &Grant) {
        let now = state.not_before(now);
        // Only into the budget the grant was taken from.
        if self.live(state, now) && grant.at.as_micros() >= state.start {
            state.count = state.count.saturating_sub(grant.cost);
        }
    }

    fn status(&self, state: &WindowState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        if !self.live(state, now) {
            return (self.limit, 0);
        }
        (self.limit.saturating_sub(state.count), state.start + self.ttl - now.as_micros())
    }

    fn expires_at(&self, state: &WindowState) -> Timestamp {
        if state.count == 0 {
            Timestamp::EPOCH
        } else {
            Timestamp::from_micros(state.start.saturating_add(self.ttl))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_exact_retry, assert_late_arrival_counts_and_refunds};

    const T0: u64 = 1_700_000_000_000_000;

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    #[test]
    fn never_refills_and_vanishes_ttl_after_the_first_use() {
        let b = Budget::try_new(NonZeroU64::new(3).unwrap(), Duration::from_micros(1_000)).unwrap();
        let mut s = WindowState::default();
        for t in [0, 400, 999] {
            assert!(b.check(&mut s, at(t + 100), 1).unwrap().0.allowed, "at {t}");
        }
        // Used up at 1099: denied until 100 + 1000, exactly.
        let (d, _) = b.check(&mut s, at(1_000), 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_micros(100)));
        assert_exact_retry(&b, &s, at(1_000), 1);
        // Gone at 1100: a new budget starts with the next use.
        let (d, _) = b.check(&mut s, at(1_100), 2).unwrap();
        assert!(d.allowed && d.remaining == 1);
        assert_eq!(d.reset_after, Duration::from_micros(1_000), "the new budget's ttl from its first use");
        assert_eq!(b.expires_at(&s), at(2_100));
    }

    #[test]
    fn a_refund_goes_back_into_the_budget_it_came_from_only() {
        let b = Budget::try_new(NonZeroU64::new(3).unwrap(), Duration::from_micros(1_000)).unwrap();
        let mut s = WindowState::default();
        let (_, g) = b.check(&mut s, at(0), 2).unwrap();
        b.refund(&mut s, at(10), &g.unwrap());
        assert_eq!(b.status(&s, at(10)).0, 3);
        let (_, g) = b.check(&mut s, at(20), 2).unwrap();
        // Past its ttl, the budget is gone; a late refund changes nothing.
        b.refund(&mut s, at(5_000), &g.unwrap());
        assert_eq!(s.count, 2);
        assert_eq!(b.status(&s, at(5_000)), (3, 0));
    }

    #[test]
    fn a_late_arrival_counts_and_refunds_in_the_budget_it_reached() {
        let b = Budget::try_new(NonZeroU64::new(1_000).unwrap(), Duration::from_secs(3600)).unwrap();
        assert_late_arrival_counts_and_refunds(&b, at(0), 87);
    }
}
