//! Fixed window: a counter per window, windows aligned to the Unix epoch.

use std::num::NonZeroU64;
use std::time::Duration;

use super::{Algorithm, Grant};
use crate::time::micros;
use crate::{Decision, Timestamp};

/// Up to `limit` per window; windows start on multiples of `window` since the Unix epoch
/// (a 1-minute window starts on the minute).
///
/// Cheap and easy to reason about, but a client can spend `limit` just before a boundary and `limit`
/// again just after it: up to `2 × limit` within a very short span. Use [`super::SlidingWindow`] or
/// [`super::SlidingLog`] where that matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: u64,
}

/// A counter for one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowState {
    /// Start of the window the count belongs to, µs since the epoch.
    pub start: u64,
    /// Cost consumed in that window.
    pub count: u64,
}

impl WindowState {
    /// The count if it belongs to the window starting at `start`, else 0.
    pub(crate) fn used_in(&self, start: u64) -> u64 {
        if self.start == start { self.count } else { 0 }
    }

    pub(crate) fn add(&mut self, start: u64, cost: u64) {
        if self.start != start {
            *self = WindowState { start, count: 0 };
        }
        self.count = self.count.saturating_add(cost);
    }

    /// `now`, or the start of the counted window when `now` is before it: a key's time never runs
    /// backwards. A request that read the clock before another but reached the key after it is
    /// counted, and given back, in the window the other one opened (with a lock-free clock read
    /// before the key's lock, two requests can arrive in that order; counted in an older window, it
    /// would reset the newer count).
    #[inline]
    pub(crate) fn not_before(&self, now: Timestamp) -> Timestamp {
        now.max(Timestamp::from_micros(self.start))
    }

    pub(crate) fn take_back(&mut self, start: u64, cost: u64) {
        if self.start == start {
            self.count = self.count.saturating_sub(cost);
        }
    }
}

/// A window too short to be represented (under one microsecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the window must be at least 1µs")]
pub struct ZeroWindow;

impl FixedWindow {
    /// `limit` per `window`.
    pub fn try_new(limit: NonZeroU64, window: Duration) -> Result<Self, ZeroWindow> {
        let window = micros(window);
        if window == 0 {
            return Err(ZeroWindow);
        }
        Ok(FixedWindow { limit: limit.get(), window })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    fn start_of(&self, now: Timestamp) -> u64 {
        let t = now.as_micros();
        t - t % self.window
    }
}

impl Algorithm for FixedWindow {
    type State = WindowState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &WindowState, now: Timestamp, cost: u64) -> Decision {
        let now = state.not_before(now);
        let start = self.start_of(now);
        let used = state.used_in(start);
        let end_in = start + self.window - now.as_micros();
        match used.checked_add(cost).filter(|u| *u <= self.limit) {
            Some(after) => Decision::allow(self.limit, self.limit - after, end_in),
            // The count only resets at the end of the window: that is the first moment it can pass.
            None => Decision::deny(self.limit, self.limit.saturating_sub(used), end_in, end_in),
        }
    }

    fn consume(&self, state: &mut WindowState, now: Timestamp, cost: u64) -> Grant {
        let now = state.not_before(now);
        state.add(self.start_of(now), cost);
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut WindowState, _now: Timestamp, grant: &Grant) {
        state.take_back(self.start_of(grant.at), grant.cost);
    }

    fn status(&self, state: &WindowState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        let start = self.start_of(now);
        let used = state.used_in(start);
        let reset = if used == 0 { 0 } else { start + self.window - now.as_micros() };
        (self.limit.saturating_sub(used), reset)
    }

    fn expires_at(&self, state: &WindowState) -> Timestamp {
        if state.count == 0 { Timestamp::EPOCH } else { Timestamp::from_micros(state.start + self.window) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_exact_retry, assert_late_arrival_counts_and_refunds};
    use proptest::prelude::*;

    const MIN: u64 = 60_000_000;
    const T0: u64 = 28_333_333 * MIN; // on a minute boundary

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    fn fw(limit: u64, window_us: u64) -> FixedWindow {
        FixedWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_micros(window_us)).unwrap()
    }

    #[test]
    fn denies_until_the_window_ends_exactly() {
        let f = fw(10, MIN);
        let mut s = WindowState::default();
        for i in 0..10 {
            let (d, _) = f.check(&mut s, at(1_000 + i), 1).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 9 - i);
        }
        let d = f.decide(&s, at(30 * 1_000_000), 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_secs(30)));
        assert_exact_retry(&f, &s, at(30 * 1_000_000), 1);
        assert_exact_retry(&f, &s, at(MIN - 1), 1);
    }

    #[test]
    fn cost_greater_than_one_uses_what_is_left() {
        let f = fw(10, MIN);
        let mut s = WindowState::default();
        f.check(&mut s, at(0), 7).unwrap();
        assert!(!f.decide(&s, at(5), 4).allowed);
        assert!(f.check(&mut s, at(5), 3).unwrap().0.allowed);
        assert_exact_retry(&f, &s, at(5), 4);
        assert!(matches!(f.check(&mut s, at(5), 11), Err(crate::CostError::ExceedsCapacity { .. })));
    }

    #[test]
    fn admits_two_limits_across_a_boundary() {
        let f = fw(10, MIN);
        let mut s = WindowState::default();
        let admitted = (0..20)
            .filter(|i| {
                let t = if *i < 10 { at(MIN - 1) } else { at(MIN) };
                f.check(&mut s, t, 1).unwrap().0.allowed
            })
            .count();
        assert_eq!(admitted, 20, "the documented 2 × limit burst within 1µs");
    }

    #[test]
    fn refund_counts_only_in_the_window_it_was_taken() {
        let f = fw(10, MIN);
        let mut s = WindowState::default();
        let (_, g) = f.check(&mut s, at(0), 4).unwrap();
        f.refund(&mut s, at(1), &g.unwrap());
        assert_eq!(f.status(&s, at(1)).0, 10);
        let (_, g) = f.check(&mut s, at(0), 4).unwrap();
        f.check(&mut s, at(MIN), 2).unwrap();
        f.refund(&mut s, at(MIN), &g.unwrap());
        assert_eq!(f.status(&s, at(MIN)).0, 8, "a refund from the last window must not credit this one");
    }

    proptest! {
        #[test]
        fn matches_a_list_of_admissions(
            limit in 1u64..20,
            window in 1u64..1_000,
            steps in prop::collection::vec((0u64..300, 1u64..20), 1..300),
        ) {
            let f = fw(limit, window);
            let mut s = WindowState::default();
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            let mut now = T0;
            for (dt, cost) in steps {
                now += dt;
                let cost = cost.min(limit);
                let start = now - now % window;
                let used: u64 = admitted.iter().filter(|(t, _)| *t >= start).map(|(_, c)| c).sum();
                let (d, _) = f.check(&mut s, Timestamp::from_micros(now), cost).unwrap();
                prop_assert_eq!(d.allowed, used + cost <= limit);
                if d.allowed {
                    admitted.push((now, cost));
                } else {
                    assert_exact_retry(&f, &s, Timestamp::from_micros(now), cost);
                }
            }
        }
    }

    #[test]
    fn a_late_arrival_at_a_window_boundary_counts_in_the_open_window() {
        assert_late_arrival_counts_and_refunds(&fw(10, MIN), at(MIN), 3);
    }
}
