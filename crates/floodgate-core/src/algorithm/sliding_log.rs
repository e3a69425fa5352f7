//! Sliding log: the exact sliding window, one entry per admitted instant.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use super::fixed_window::ZeroWindow;
use super::{Algorithm, Grant};
use crate::time::micros;
use crate::{Decision, Timestamp};

/// Up to `limit` in **any** span of length `window`: exact, never over-admits.
///
/// Keeps the time and cost of every admission still inside the window (entries at the same
/// microsecond are merged), so memory grows with the limit: use it where exactness is worth
/// O(limit) per key, and [`super::SlidingWindow`] elsewhere. An admission at `t` counts until
/// `t + window`, exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window: u64,
}

/// The admissions still inside the window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    /// `(time µs, cost)` of each admission, oldest first.
    pub entries: VecDeque<(u64, u64)>,
}

impl LogState {
    /// `now`, or the latest admission when `now` is before it: a key's time never runs backwards,
    /// so the log stays in order (see `WindowState::not_before`).
    #[inline]
    fn not_before(&self, now: Timestamp) -> Timestamp {
        self.entries.back().map_or(now, |(t, _)| now.max(Timestamp::from_micros(*t)))
    }
}

impl SlidingLog {
    /// `limit` per sliding `window`.
    pub fn try_new(limit: NonZeroU64, window: Duration) -> Result<Self, ZeroWindow> {
        let window = micros(window);
        if window == 0 {
            return Err(ZeroWindow);
        }
        Ok(SlidingLog { limit: limit.get(), window })
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window)
    }

    /// The entries still counting at `now`.
    fn live<'s>(&self, state: &'s LogState, now: Timestamp) -> impl Iterator<Item = (u64, u64)> + 's {
        let now = now.as_micros();
        let window = self.window;
        state.entries.iter().copied().skip_while(move |(t, _)| t + window <= now)
    }

    fn reset_after(&self, state: &LogState, now: u64) -> u64 {
        state.entries.back().map_or(0, |(t, _)| (t + self.window).saturating_sub(now))
    }
}

impl Algorithm for SlidingLog {
    type State = LogState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &LogState, now: Timestamp, cost: u64) -> Decision {
        let now = state.not_before(now);
        let used: u64 = self.live(state, now).map(|(_, c)| c).fold(0, u64::saturating_add);
        let t = now.as_micros();
        if let Some(after) = used.checked_add(cost).filter(|u| *u <= self.limit) {
            return Decision::allow(self.limit, self.limit - after, self.window);
        }
        // The oldest entries leave first: wait until enough of them have.
        let mut left = used;
        let mut retry_at = t;
        for (at, c) in self.live(state, now) {
            left -= c;
            retry_at = at + self.window;
            if left + cost <= self.limit {
                break;
            }
        }
        Decision::deny(self.limit, self.limit.saturating_sub(used), self.reset_after(state, t), retry_at - t)
    }

    fn consume(&self, state: &mut LogState, now: Timestamp, cost: u64) -> Grant {
        let now = state.not_before(now);
        let t = now.as_micros();
        while state.entries.front().is_some_and(|(at, _)| at + self.window <= t) {
            state.entries.pop_front();
        }
        match state.entries.back_mut() {
            Some((at, c)) if *at == t => *c = c.saturating_add(cost),
            _ => state.entries.push_back((t, cost)),
        }
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut LogState, _now: Timestamp, grant: &Grant) {
        let at = grant.at.as_micros();
        if let Some(i) = state.entries.iter().rposition(|(t, _)| *t == at) {
            let c = &mut state.entries[i].1;
            *c = c.saturating_sub(grant.cost);
            if *c == 0 {
                state.entries.remove(i);
            }
        }
    }

    fn status(&self, state: &LogState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        let used: u64 = self.live(state, now).map(|(_, c)| c).fold(0, u64::saturating_add);
        (self.limit.saturating_sub(used), self.reset_after(state, now.as_micros()))
    }

    fn expires_at(&self, state: &LogState) -> Timestamp {
        Timestamp::from_micros(state.entries.back().map_or(0, |(t, _)| t + self.window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::testing::{assert_exact_retry, assert_late_arrival_counts_and_refunds};
    use proptest::prelude::*;

    const T0: u64 = 1_700_000_000_000_000;

    fn at(us: u64) -> Timestamp {
        Timestamp::from_micros(T0 + us)
    }

    fn log(limit: u64, window_us: u64) -> SlidingLog {
        SlidingLog::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_micros(window_us)).unwrap()
    }

    #[test]
    fn oldest_entries_free_capacity_in_order() {
        let l = log(5, 1_000);
        let mut s = LogState::default();
        for t in [0, 100, 200, 300, 400] {
            assert!(l.check(&mut s, at(t), 1).unwrap().0.allowed);
        }
        let d = l.decide(&s, at(500), 1);
        assert_eq!(d.retry_after, Some(Duration::from_micros(500)));
        // cost 3 needs the three oldest gone: the one at 200 leaves at 1200.
        let d = l.decide(&s, at(500), 3);
        assert_eq!(d.retry_after, Some(Duration::from_micros(700)));
        assert_exact_retry(&l, &s, at(500), 3);
        assert_exact_retry(&l, &s, at(1_050), 2);
    }

    #[test]
    fn same_instant_admissions_share_one_entry_and_expire_together() {
        let l = log(10, 1_000);
        let mut s = LogState::default();
        l.check(&mut s, at(0), 4).unwrap();
        l.check(&mut s, at(0), 6).unwrap();
        assert_eq!(s.entries.len(), 1);
        assert_exact_retry(&l, &s, at(0), 1);
        assert_eq!(l.expires_at(&s), at(1_000));
        l.consume(&mut s, at(1_000), 1);
        assert_eq!(s.entries.len(), 1, "expired entries are pruned on write");
    }

    proptest! {
        #[test]
        fn never_more_than_limit_in_any_window(
            limit in 1u64..20,
            window in 1u64..1_000,
            steps in prop::collection::vec((0u64..200, 1u64..20), 1..300),
        ) {
            let l = log(limit, window);
            let mut s = LogState::default();
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            let mut now = T0;
            for (dt, cost) in steps {
                now += dt;
                let cost = cost.min(limit);
                let in_window: u64 = admitted.iter().filter(|(t, _)| t + window > now).map(|(_, c)| c).sum();
                let (d, _) = l.check(&mut s, Timestamp::from_micros(now), cost).unwrap();
                prop_assert_eq!(d.allowed, in_window + cost <= limit);
                if d.allowed {
                    admitted.push((now, cost));
                } else {
                    assert_exact_retry(&l, &s, Timestamp::from_micros(now), cost);
                }
            }
            for (t, _) in &admitted {
                let n: u64 = admitted.iter().filter(|(u, _)| u >= t && *u < t + window).map(|(_, c)| c).sum();
                prop_assert!(n <= limit, "{} admitted in a window starting at {}", n, t);
            }
        }
    }

    #[test]
    fn a_late_arrival_is_logged_in_order_and_refunded() {
        let l = SlidingLog::try_new(NonZeroU64::new(10).unwrap(), Duration::from_secs(60)).unwrap();
        assert_late_arrival_counts_and_refunds(&l, at(0), 3);
    }
}
