//! Sliding window: a weighted two-window counter, O(1) state.

use std::num::NonZeroU64;
use std::time::Duration;

use super::fixed_window::ZeroWindow;
use super::{Algorithm, Grant, mul_div_floor};
use crate::time::micros;
use crate::{Decision, Timestamp};

/// Up to `limit` per sliding `window`, estimated from two fixed-window counts: the previous window's
/// count, weighted by the part of it still inside the sliding window, plus the current count.
///
/// The request passes when `previous × (window − elapsed) / window + current + cost ≤ limit`, computed
/// in exact integer arithmetic. The estimate assumes the previous window's traffic was spread evenly;
/// when it was not, the error is bounded: **any span of length `d ≤ window` admits at most
/// `limit + ⌊limit × d / window⌋`**, so never more than `2 × limit` in a window, and right after a
/// boundary at which the previous window was full, almost nothing passes (unlike a fixed window,
/// which admits `2 × limit` within a microsecond). [`super::SlidingLog`] is exact, at O(limit) memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window: u64,
}

/// The two counts, for the window starting at `start` and the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingState {
    /// Start of the current window, µs since the epoch.
    pub start: u64,
    /// Cost consumed in the previous window.
    pub prev: u64,
    /// Cost consumed in the current window.
    pub curr: u64,
}

impl SlidingState {
    /// `now`, or the start of the current window when `now` is before it: a key's time never runs
    /// backwards (see `WindowState::not_before`).
    #[inline]
    fn not_before(&self, now: Timestamp) -> Timestamp {
        now.max(Timestamp::from_micros(self.start))
    }
}

impl SlidingWindow {
    /// `limit` per sliding `window`.
    pub fn try_new(limit: NonZeroU64, window: Duration) -> Result<Self, ZeroWindow> {
        let window = micros(window);
        if window == 0 {
            return Err(ZeroWindow);
        }
        Ok(SlidingWindow { limit: limit.get(), window })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    /// `(start of the current window, previous count, current count)` as seen at `now`.
    fn counts(&self, state: &SlidingState, now: Timestamp) -> (u64, u64, u64) {
        let t = now.as_micros();
        let start = t - t % self.window;
        if state.start == start {
            (start, state.prev, state.curr)
        } else if state.start.checked_add(self.window) == Some(start) {
            (start, state.curr, 0)
        } else {
            (start, 0, 0)
        }
    }

    /// `prev` weighted by the part of the previous window still inside the sliding window,
    /// scaled by `window` (so comparisons stay in integers): `prev × (window − elapsed)`.
    fn weighted(&self, prev: u64, elapsed: u64) -> u128 {
        u128::from(prev) * u128::from(self.window - elapsed)
    }

    /// Time from the window start until the estimate leaves room for `room` more, given `prev`
    /// still decaying and nothing else: the least `e` with `prev × (window − e) ≤ room × window`.
    fn decayed_by(&self, prev: u64, room: u64) -> u64 {
        if prev == 0 {
            return 0;
        }
        let keep = mul_div_floor(room, self.window, prev);
        self.window.saturating_sub(keep)
    }

    fn reset_after(&self, start: u64, prev: u64, curr: u64, now: u64) -> u64 {
        if curr > 0 {
            start + 2 * self.window - now
        } else if prev > 0 {
            start + self.window - now
        } else {
            0
        }
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &SlidingState, now: Timestamp, cost: u64) -> Decision {
        let now = state.not_before(now);
        let (start, prev, curr) = self.counts(state, now);
        let t = now.as_micros();
        let elapsed = t - start;
        let w = u128::from(self.window);
        let budget = u128::from(self.limit) * w;
        let used = self.weighted(prev, elapsed) + u128::from(curr.saturating_add(cost)) * w;
        if used <= budget {
            let remaining = u64::try_from((budget - used) / w).unwrap_or(u64::MAX);
            return Decision::allow(self.limit, remaining, self.reset_after(start, prev, curr + cost, t));
        }
        let remaining = budget
            .saturating_sub(self.weighted(prev, elapsed) + u128::from(curr) * w)
            .checked_div(w)
            .map_or(0, |r| u64::try_from(r).unwrap_or(u64::MAX));
        let room = self.limit - cost; // cost ≤ limit (validated)
        // Either the previous window's weight decays enough within this window…
        let retry_at = if curr <= room && prev > 0 && self.decayed_by(prev, room - curr) < self.window {
            start + self.decayed_by(prev, room - curr)
        } else {
            // …or the current count becomes the previous one and decays in the next window.
            start + self.window + self.decayed_by(curr, room)
        };
        Decision::deny(self.limit, remaining, self.reset_after(start, prev, curr, t), retry_at - t)
    }

    fn consume(&self, state: &mut SlidingState, now: Timestamp, cost: u64) -> Grant {
        let now = state.not_before(now);
        let (start, prev, curr) = self.counts(state, now);
        *state = SlidingState { start, prev, curr: curr.saturating_add(cost) };
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut SlidingState, _now: Timestamp, grant: &Grant) {
        let t = grant.at.as_micros();
        let taken_in = t - t % self.window;
        if taken_in == state.start {
            state.curr = state.curr.saturating_sub(grant.cost);
        } else if taken_in.checked_add(self.window) == Some(state.start) {
            state.prev = state.prev.saturating_sub(grant.cost);
        }
    }

    fn status(&self, state: &SlidingState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        let (start, prev, curr) = self.counts(state, now);
        let t = now.as_micros();
        let w = u128::from(self.window);
        let used = self.weighted(prev, t - start) + u128::from(curr) * w;
        let remaining = (u128::from(self.limit) * w).saturating_sub(used) / w;
        (u64::try_from(remaining).unwrap_or(u64::MAX), self.reset_after(start, prev, curr, t))
    }

    fn expires_at(&self, state: &SlidingState) -> Timestamp {
        let end = if state.curr > 0 {
            state.start + 2 * self.window
        } else if state.prev > 0 {
            state.start + self.window
        } else {
            0
        };
        Timestamp::from_micros(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_exact_retry, assert_late_arrival_counts_and_refunds};
    use proptest::prelude::*;

    const MIN: u64 = 60_000_000;
    const T0: u64 = 28_333_333 * MIN;

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    fn sw(limit: u64, window_us: u64) -> SlidingWindow {
        SlidingWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_micros(window_us)).unwrap()
    }

    #[test]
    fn previous_window_weighs_in_and_decays() {
        let s_w = sw(10, MIN);
        let mut s = SlidingState::default();
        s_w.check(&mut s, at(MIN - 1), 10).unwrap();
        // Just after the boundary the previous 10 still weigh ~10: denied.
        let d = s_w.decide(&s, at(MIN), 1);
        assert!(!d.allowed);
        // 10 × (60 − e)/60 ≤ 9 ⇔ e ≥ 6s.
        assert_eq!(d.retry_after, Some(Duration::from_secs(6)));
        assert_exact_retry(&s_w, &s, at(MIN), 1);
        // Halfway, half of the previous window is left: 5 more fit.
        let d = s_w.decide(&s, at(MIN + MIN / 2), 5);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn exact_retry_when_the_current_window_is_full() {
        let s_w = sw(10, MIN);
        let mut s = SlidingState::default();
        s_w.check(&mut s, at(10), 3).unwrap();
        s_w.check(&mut s, at(20), 7).unwrap();
        // Current window full: wait for the next one, where the 10 decay.
        assert_exact_retry(&s_w, &s, at(30), 1);
        assert_exact_retry(&s_w, &s, at(30), 10);
        assert_exact_retry(&s_w, &s, at(MIN + 5), 4);
        let d = s_w.decide(&s, at(30), 10);
        // cost = limit needs the previous window to be completely gone: two windows from its start.
        assert_eq!(d.retry_after, Some(Duration::from_micros(2 * MIN - 30)));
    }

    proptest! {
        #[test]
        fn decisions_follow_the_weighted_formula_and_retry_is_exact(
            limit in 1u64..30,
            window in 1u64..2_000,
            steps in prop::collection::vec((0u64..1_500, 1u64..30), 1..200),
        ) {
            let s_w = sw(limit, window);
            let mut s = SlidingState::default();
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            let mut now = T0;
            for (dt, cost) in steps {
                now += dt;
                let cost = cost.min(limit);
                // Reference: counts per aligned window from the raw admission list.
                let start = now - now % window;
                let curr: u64 = admitted.iter().filter(|(t, _)| *t >= start).map(|(_, c)| c).sum();
                let prev: u64 = admitted
                    .iter()
                    .filter(|(t, _)| *t >= start.saturating_sub(window) && *t < start)
                    .map(|(_, c)| c)
                    .sum();
                let (d, _) = s_w.check(&mut s, Timestamp::from_micros(now), cost).unwrap();
                let model = (prev as u128) * u128::from(window - (now - start))
                    + u128::from(curr + cost) * u128::from(window)
                    <= u128::from(limit) * u128::from(window);
                prop_assert_eq!(d.allowed, model);
                if d.allowed {
                    admitted.push((now, cost));
                } else {
                    assert_exact_retry(&s_w, &s, Timestamp::from_micros(now), cost);
                }
            }
        }

        #[test]
        fn any_span_admits_at_most_the_documented_bound(
            limit in 1u64..20,
            window in 10u64..500,
            gaps in prop::collection::vec(0u64..40, 1..400),
        ) {
            let s_w = sw(limit, window);
            let mut s = SlidingState::default();
            let mut admitted: Vec<u64> = Vec::new();
            let mut now = T0;
            for gap in gaps {
                now += gap;
                if s_w.check(&mut s, Timestamp::from_micros(now), 1).unwrap().0.allowed {
                    admitted.push(now);
                }
            }
            for d in [1, window / 4, window / 2, window] {
                let d = d.max(1);
                let bound = limit + limit * d / window;
                for (i, t) in admitted.iter().enumerate() {
                    // The span [t, t + d) starting at each admission holds the most for that start.
                    let n = admitted[i..].iter().take_while(|u| **u < t + d).count() as u64;
                    prop_assert!(n <= bound, "{} admitted in a span of {}µs (bound {})", n, d, bound);
                }
            }
        }
    }

    #[test]
    fn a_late_arrival_at_a_window_boundary_counts_in_the_open_window() {
        let w = SlidingWindow::try_new(NonZeroU64::new(10).unwrap(), Duration::from_micros(MIN)).unwrap();
        assert_late_arrival_counts_and_refunds(&w, at(MIN), 3);
    }
}
