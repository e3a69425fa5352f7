//! Quota: a counter per calendar period (day, week, billing month) in a time zone.

use std::num::NonZeroU64;
use std::sync::Arc;

use super::{Algorithm, Grant, WindowState};
use crate::{Calendar, Decision, Timestamp};

/// Up to `limit` per calendar period: "10 000 calls a month, renewed on the 15th at midnight in Berlin".
///
/// A fixed window whose windows are the periods of a [`Calendar`], so they follow local midnight
/// and daylight-saving changes. A denied request may retry when the period ends; nothing is
/// granted early, and a client can spend `limit` at the end of one period and `limit` again at the
/// start of the next.
///
/// ```
/// use std::num::NonZeroU64;
/// use floodgate_core::{Algorithm, Quota, Calendar, calendar::Period, Timestamp};
///
/// let billing = Calendar::try_new(Period::Month { anchor_day: 15 }, "Europe/Berlin")?;
/// let quota = Quota::new(NonZeroU64::new(1_000).unwrap(), billing);
/// let mut state = Default::default();
///
/// let now = Timestamp::from_secs(1_736_510_400); // 2025-01-10T12:00:00Z
/// assert!(quota.check(&mut state, now, 1_000)?.0.allowed);
/// let (decision, _) = quota.check(&mut state, now, 1)?;
/// assert!(!decision.allowed);
/// // The next period begins on 15 January at 00:00 in Berlin: 2025-01-14T23:00:00Z.
/// let renewal = now.saturating_add(decision.retry_after.unwrap());
/// assert_eq!(renewal, Timestamp::from_secs(1_736_895_600));
/// assert!(quota.check(&mut state, renewal, 1)?.0.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    limit: u64,
    /// Shared, so that quotas of one calendar (a rule's tenants in one time zone) share its cache
    /// of the current period, and a clone costs no allocation.
    calendar: Arc<Calendar>,
}

impl Quota {
    /// `limit` per period of `calendar`.
    pub fn new(limit: NonZeroU64, calendar: Calendar) -> Quota {
        Quota { limit: limit.get(), calendar: Arc::new(calendar) }
    }

    /// The same limit per period of another calendar, shared with whoever else holds it: a
    /// tenant's own time zone or billing day.
    pub fn in_calendar(&self, calendar: Arc<Calendar>) -> Quota {
        Quota { limit: self.limit, calendar }
    }

    /// The most granted per period.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The periods.
    pub fn calendar(&self) -> &Calendar {
        &self.calendar
    }

    /// The period containing `now`, in µs: `(start, end)`.
    fn period(&self, now: Timestamp) -> (u64, u64) {
        let (start, end) = self.calendar.bounds(now);
        (start.as_micros(), end.as_micros())
    }
}

impl Algorithm for Quota {
    type State = WindowState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &WindowState, now: Timestamp, cost: u64) -> Decision {
        let now = state.not_before(now);
        let (start, end) = self.period(now);
        let used = state.used_in(start);
        let end_in = end - now.as_micros();
        match used.checked_add(cost).filter(|u| *u <= self.limit) {
            Some(after) => Decision::allow(self.limit, self.limit - after, end_in),
            // The count only resets when the period ends: that is the first moment it can pass. (Only
            // at the very end of time, in the last period, is there no later moment.)
            None => Decision::deny(self.limit, self.limit.saturating_sub(used), end_in, end_in.max(1)),
        }
    }

    fn consume(&self, state: &mut WindowState, now: Timestamp, cost: u64) -> Grant {
        let now = state.not_before(now);
        state.add(self.period(now).0, cost);
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut WindowState, _now: Timestamp, grant: &Grant) {
        state.take_back(self.period(grant.at).0, grant.cost);
    }

    fn status(&self, state: &WindowState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        let (start, end) = self.period(now);
        let used = state.used_in(start);
        let reset = if used == 0 { 0 } else { end - now.as_micros() };
        (self.limit.saturating_sub(used), reset)
    }

    fn expires_at(&self, state: &WindowState) -> Timestamp {
        if state.count == 0 {
            Timestamp::EPOCH
        } else {
            self.calendar.bounds(Timestamp::from_micros(state.start)).1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CostError;
    use crate::algorithm::testing::{assert_exact_retry, assert_late_arrival_counts_and_refunds};
    use crate::calendar::Period;
    use proptest::prelude::*;
    use std::time::Duration;

    /// An instant written in UTC, such as `"2025-01-10T12:00:00Z"`.
    fn utc(text: &str) -> Timestamp {
        let t: jiff::Timestamp = text.parse().unwrap();
        Timestamp::from_micros(u64::try_from(t.as_microsecond()).unwrap())
    }

    fn quota(limit: u64, period: Period, zone: &str) -> Quota {
        Quota::new(NonZeroU64::new(limit).unwrap(), Calendar::try_new(period, zone).unwrap())
    }

    fn billing() -> Quota {
        quota(100, Period::Month { anchor_day: 15 }, "Europe/Berlin")
    }

    #[test]
    fn a_monthly_quota_renews_at_local_midnight_on_the_anchor_day() {
        let q = billing();
        let mut s = WindowState::default();
        let now = utc("2025-01-10T12:00:00Z");
        for i in 0..100 {
            let (d, _) = q.check(&mut s, now, 1).unwrap();
            assert!(d.allowed);
            assert_eq!(d.remaining, 99 - i);
        }
        assert_eq!(s.start, utc("2024-12-14T23:00:00Z").as_micros(), "15 December, 00:00 CET");

        let d = q.decide(&s, now, 1);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        let renewal = utc("2025-01-14T23:00:00Z"); // 15 January, 00:00 CET
        assert_eq!(d.retry_after, Some(renewal.saturating_since(now)));
        assert_eq!(d.reset_after, renewal.saturating_since(now));
        assert_exact_retry(&q, &s, now, 1);
        assert_exact_retry(&q, &s, utc("2025-01-14T22:59:59.999999Z"), 1);

        let (d, _) = q.check(&mut s, renewal, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 99);
        assert_eq!(d.reset_after, utc("2025-02-14T23:00:00Z").saturating_since(renewal));
    }

    #[test]
    fn a_daily_quota_waits_out_a_23_hour_day() {
        let q = quota(1, Period::Day, "Europe/Berlin");
        let mut s = WindowState::default();
        let morning = utc("2024-03-30T23:00:00Z"); // 31 March, 00:00 CET; clocks go forward at 02:00
        assert!(q.check(&mut s, morning, 1).unwrap().0.allowed);
        let d = q.decide(&s, morning, 1);
        assert_eq!(d.retry_after, Some(Duration::from_secs(23 * 3600)));
        assert_exact_retry(&q, &s, morning, 1);
    }

    #[test]
    fn cost_greater_than_one_uses_what_is_left() {
        let q = billing();
        let mut s = WindowState::default();
        let now = utc("2025-01-10T12:00:00Z");
        q.check(&mut s, now, 70).unwrap();
        let d = q.decide(&s, now, 31);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 30);
        assert_exact_retry(&q, &s, now, 31);
        let (d, _) = q.check(&mut s, now, 30).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn a_cost_above_the_limit_is_an_error() {
        let q = billing();
        let mut s = WindowState::default();
        let now = utc("2025-01-10T12:00:00Z");
        assert_eq!(q.check(&mut s, now, 101), Err(CostError::ExceedsCapacity { cost: 101, capacity: 100 }));
        assert_eq!(q.check(&mut s, now, 0), Err(CostError::Zero));
        assert_eq!(s, WindowState::default());
        assert_eq!(q.capacity(), q.limit());
    }

    #[test]
    fn refund_across_a_period_boundary_credits_nothing() {
        let q = billing();
        let mut s = WindowState::default();
        let (_, g) = q.check(&mut s, utc("2025-01-14T22:00:00Z"), 40).unwrap();
        q.refund(&mut s, utc("2025-01-14T22:30:00Z"), &g.unwrap());
        assert_eq!(q.status(&s, utc("2025-01-14T22:30:00Z")), (100, 0), "same period: credited");

        let (_, g) = q.check(&mut s, utc("2025-01-14T22:59:59Z"), 40).unwrap();
        q.check(&mut s, utc("2025-01-14T23:00:00Z"), 10).unwrap();
        q.refund(&mut s, utc("2025-01-14T23:00:01Z"), &g.unwrap());
        assert_eq!(
            q.status(&s, utc("2025-01-14T23:00:01Z")).0,
            90,
            "last period's grant must not credit this one"
        );
    }

    #[test]
    fn status_and_expiry_follow_the_period() {
        let q = billing();
        let mut s = WindowState::default();
        let now = utc("2025-01-10T12:00:00Z");
        assert_eq!(q.status(&s, now), (100, 0));
        assert_eq!(q.expires_at(&s), Timestamp::EPOCH);
        q.check(&mut s, now, 3).unwrap();
        let end = utc("2025-01-14T23:00:00Z");
        assert_eq!(q.status(&s, now), (97, end.as_micros() - now.as_micros()));
        assert_eq!(q.expires_at(&s), end);
        assert_eq!(q.status(&s, end), (100, 0), "a new period starts unused");
    }

    #[test]
    fn report_consumes_past_the_limit() {
        let q = billing();
        let mut s = WindowState::default();
        let now = utc("2025-01-10T12:00:00Z");
        let (d, _) = q.report(&mut s, now, 150);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        assert!(!q.decide(&s, now, 1).allowed);
        assert_exact_retry(&q, &s, now, 1);
    }

    fn any_calendar() -> impl Strategy<Value = (Period, &'static str)> {
        let period = prop_oneof![
            Just(Period::Day),
            Just(Period::Week { starts_on: jiff::civil::Weekday::Sunday }),
            (1u8..=31).prop_map(|anchor_day| Period::Month { anchor_day }),
        ];
        (period, prop::sample::select(&["UTC", "Europe/Berlin", "America/Santiago", "Asia/Beirut"][..]))
    }

    /// A step of traffic: time passes, then a request, or a refund of an earlier grant.
    #[derive(Debug, Clone)]
    enum Step {
        Check { dt: u64, cost: u64 },
        Refund { dt: u64, which: prop::sample::Index },
    }

    fn any_step(period_us: u64) -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..period_us / 4, 1u64..20).prop_map(|(dt, cost)| Step::Check { dt, cost }),
            1 => (0..period_us / 4, any::<prop::sample::Index>()).prop_map(|(dt, which)| Step::Refund { dt, which }),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_list_of_admissions(
            limit in 1u64..20,
            (period, zone) in any_calendar(),
            // 2000 to 2033, around the zones' changes.
            start in 946_684_800_000_000u64..2_000_000_000_000_000,
            steps in prop::collection::vec(any_step(86_400_000_000), 1..200),
        ) {
            let q = quota(limit, period, zone);
            let mut s = WindowState::default();
            let mut admitted: Vec<Grant> = Vec::new();
            let mut now = start;
            for step in steps {
                match step {
                    Step::Check { dt, cost } => {
                        now += dt;
                        let cost = cost.min(limit);
                        let at = Timestamp::from_micros(now);
                        let (begin, end) = q.calendar().bounds(at);
                        let used: u64 =
                            admitted.iter().filter(|g| g.at >= begin && g.at < end).map(|g| g.cost).sum();
                        let (d, g) = q.check(&mut s, at, cost).unwrap();
                        prop_assert_eq!(d.allowed, used + cost <= limit);
                        if let Some(g) = g {
                            admitted.push(g);
                            prop_assert_eq!(q.expires_at(&s), end);
                        } else {
                            prop_assert_eq!(d.retry_after, Some(end.saturating_since(at)));
                            assert_exact_retry(&q, &s, at, cost);
                        }
                    }
                    Step::Refund { dt, which } => {
                        now += dt;
                        if !admitted.is_empty() {
                            let g = admitted.remove(which.index(admitted.len()));
                            q.refund(&mut s, Timestamp::from_micros(now), &g);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_late_arrival_at_the_renewal_counts_in_the_new_period() {
        assert_late_arrival_counts_and_refunds(&billing(), utc("2025-01-14T23:00:00Z"), 7);
    }
}
