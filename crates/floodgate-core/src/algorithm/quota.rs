//! Quota: a counter per calendar period (day, week, billing month) in a time zone.

use std::num::NonZeroU64;
use std::sync::Arc;

use super::{Algorithm, Grant};
use crate::{Calendar, Decision, Timestamp};

/// Up to `limit` per calendar period: "10 000 calls a month, renewed on the 15th at midnight in Berlin".
///
/// A fixed window whose windows are the periods of a [`Calendar`], so they follow local midnight
/// and daylight-saving changes. A denied request may retry when the period ends; nothing is
/// granted early, and a client can spend `limit` at the end of one period and `limit` again at the
/// start of the next.
///
/// A key also keeps what it counted in the period before its current one ([`QuotaState::prev`]),
/// so that the spend of the last period stays readable ([`Quota::previous`]) for the whole of the
/// next: older periods are not kept.
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

/// A quota's count for one calendar period, and the count of the period just before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaState {
    /// Start of the period the count belongs to, µs since the epoch.
    pub start: u64,
    /// Cost consumed in that period.
    pub count: u64,
    /// Cost consumed in the period immediately before it (the one ending at `start`); 0 when the
    /// key counted nothing then (a period with no traffic came between).
    pub prev: u64,
}

impl QuotaState {
    /// The count if it belongs to the period starting at `start`, else 0.
    fn used_in(&self, start: u64) -> u64 {
        if self.start == start { self.count } else { 0 }
    }

    /// `now`, or the start of the counted period when `now` is before it: a key's time never runs
    /// backwards (see `WindowState::not_before`).
    #[inline]
    fn not_before(&self, now: Timestamp) -> Timestamp {
        now.max(Timestamp::from_micros(self.start))
    }
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

    /// Whether the period starting at `earlier` is the one right before the period starting at
    /// `start`: whether it ends where that one begins.
    fn just_before(&self, earlier: u64, start: u64) -> bool {
        earlier < start && self.period(Timestamp::from_micros(earlier)).1 == start
    }

    /// What the key counted in the period before the one containing `now` (the state's time never
    /// runs backwards: a `now` before the counted period reads as its start). Older periods are not
    /// kept: their count reads as 0.
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use floodgate_core::{Algorithm, Quota, QuotaState, Calendar, calendar::Period, Timestamp};
    ///
    /// let daily = Quota::new(NonZeroU64::new(100).unwrap(), Calendar::utc(Period::Day));
    /// let mut state = QuotaState::default();
    /// let day = 86_400;
    /// daily.check(&mut state, Timestamp::from_secs(20_000 * day + 60), 30)?;
    /// assert_eq!(daily.previous(&state, Timestamp::from_secs(20_001 * day)), 30, "the next day: yesterday's");
    /// daily.check(&mut state, Timestamp::from_secs(20_001 * day + 60), 5)?;
    /// assert_eq!(daily.previous(&state, Timestamp::from_secs(20_001 * day + 120)), 30);
    /// assert_eq!(daily.previous(&state, Timestamp::from_secs(20_002 * day)), 5);
    /// assert_eq!(daily.previous(&state, Timestamp::from_secs(20_003 * day)), 0, "two days on: not kept");
    /// # Ok::<(), floodgate_core::CostError>(())
    /// ```
    pub fn previous(&self, state: &QuotaState, now: Timestamp) -> u64 {
        let start = self.period(state.not_before(now)).0;
        if state.start == start {
            state.prev
        } else if state.count > 0 && self.just_before(state.start, start) {
            state.count
        } else {
            0
        }
    }

    /// The period before the one containing `now`: `[start, end)`, `end` the current period's start.
    /// The period containing the Unix epoch has none before it: then `(EPOCH, EPOCH)`.
    pub fn previous_period(&self, now: Timestamp) -> (Timestamp, Timestamp) {
        let (start, _) = self.calendar.bounds(now);
        match start.as_micros().checked_sub(1) {
            Some(before) => (self.calendar.bounds(Timestamp::from_micros(before)).0, start),
            None => (Timestamp::EPOCH, Timestamp::EPOCH),
        }
    }
}

impl Algorithm for Quota {
    type State = QuotaState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn decide(&self, state: &QuotaState, now: Timestamp, cost: u64) -> Decision {
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

    fn consume(&self, state: &mut QuotaState, now: Timestamp, cost: u64) -> Grant {
        let now = state.not_before(now);
        let start = self.period(now).0;
        if state.start != start {
            // A new period: the count of the one just ended becomes the previous period's (a
            // calendar lookup once per key and period, not per decision).
            let prev = if state.count > 0 && self.just_before(state.start, start) { state.count } else { 0 };
            *state = QuotaState { start, count: 0, prev };
        }
        state.count = state.count.saturating_add(cost);
        Grant { at: now, cost, lease: 0 }
    }

    fn refund(&self, state: &mut QuotaState, _now: Timestamp, grant: &Grant) {
        // Into the period the grant was taken in: the current one, or the one before it (a grant
        // taken before the rollover and given back after), where its count is kept as `prev`.
        let (start, end) = self.period(grant.at);
        if state.start == start {
            state.count = state.count.saturating_sub(grant.cost);
        } else if state.start == end {
            state.prev = state.prev.saturating_sub(grant.cost);
        }
    }

    fn status(&self, state: &QuotaState, now: Timestamp) -> (u64, u64) {
        let now = state.not_before(now);
        let (start, end) = self.period(now);
        let used = state.used_in(start);
        let reset = if used == 0 { 0 } else { end - now.as_micros() };
        (self.limit.saturating_sub(used), reset)
    }

    /// The end of the period after the key's own while it counted anything in its own (its count
    /// is then the previous period's for that whole period); else the end of its own while its
    /// previous count is above 0.
    fn expires_at(&self, state: &QuotaState) -> Timestamp {
        if state.count == 0 && state.prev == 0 {
            return Timestamp::EPOCH;
        }
        let end = self.calendar.bounds(Timestamp::from_micros(state.start)).1;
        if state.count == 0 { end } else { self.calendar.bounds(end).1 }
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
        let mut s = QuotaState::default();
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
        let mut s = QuotaState::default();
        let morning = utc("2024-03-30T23:00:00Z"); // 31 March, 00:00 CET; clocks go forward at 02:00
        assert!(q.check(&mut s, morning, 1).unwrap().0.allowed);
        let d = q.decide(&s, morning, 1);
        assert_eq!(d.retry_after, Some(Duration::from_secs(23 * 3600)));
        assert_exact_retry(&q, &s, morning, 1);
    }

    #[test]
    fn cost_greater_than_one_uses_what_is_left() {
        let q = billing();
        let mut s = QuotaState::default();
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
        let mut s = QuotaState::default();
        let now = utc("2025-01-10T12:00:00Z");
        assert_eq!(q.check(&mut s, now, 101), Err(CostError::ExceedsCapacity { cost: 101, capacity: 100 }));
        assert_eq!(q.check(&mut s, now, 0), Err(CostError::Zero));
        assert_eq!(s, QuotaState::default());
        assert_eq!(q.capacity(), q.limit());
    }

    #[test]
    fn refund_across_a_period_boundary_credits_nothing() {
        let q = billing();
        let mut s = QuotaState::default();
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
        let mut s = QuotaState::default();
        let now = utc("2025-01-10T12:00:00Z");
        assert_eq!(q.status(&s, now), (100, 0));
        assert_eq!(q.expires_at(&s), Timestamp::EPOCH);
        q.check(&mut s, now, 3).unwrap();
        let end = utc("2025-01-14T23:00:00Z");
        assert_eq!(q.status(&s, now), (97, end.as_micros() - now.as_micros()));
        assert_eq!(q.expires_at(&s), utc("2025-02-14T23:00:00Z"), "readable as the previous period's");
        assert_eq!(q.status(&s, end), (100, 0), "a new period starts unused");
    }

    #[test]
    fn the_previous_period_is_kept_across_a_23_hour_day() {
        let q = quota(100, Period::Day, "Europe/Berlin");
        let mut s = QuotaState::default();
        // 30 March (24 h), then 31 March, 23 h long: clocks go forward at 02:00.
        q.check(&mut s, utc("2024-03-30T10:00:00Z"), 7).unwrap();
        let march_31 = utc("2024-03-30T23:00:00Z");
        assert_eq!(q.previous_period(march_31), (utc("2024-03-29T23:00:00Z"), march_31));
        assert_eq!(q.previous(&s, march_31), 7, "nobody wrote yet today: yesterday's count");
        q.check(&mut s, utc("2024-03-31T12:00:00Z"), 3).unwrap();
        assert_eq!(s, QuotaState { start: march_31.as_micros(), count: 3, prev: 7 });
        assert_eq!(q.previous(&s, utc("2024-03-31T21:59:59.999999Z")), 7);
        // 1 April begins 23 hours after 31 March did, at 22:00Z (CEST).
        let april_1 = utc("2024-03-31T22:00:00Z");
        assert_eq!(q.previous_period(april_1), (march_31, april_1));
        assert_eq!(q.previous(&s, april_1), 3);
        assert_eq!(q.expires_at(&s), utc("2024-04-01T22:00:00Z"), "readable through 1 April");
        q.check(&mut s, april_1, 1).unwrap();
        assert_eq!(s.prev, 3);
    }

    #[test]
    fn the_previous_period_follows_months_of_different_lengths() {
        // Anchored on the 31st: the periods begin on 31 January, 29 February (2024 is a leap year)
        // and 31 March.
        let q = quota(1_000, Period::Month { anchor_day: 31 }, "UTC");
        let mut s = QuotaState::default();
        q.check(&mut s, utc("2024-02-10T00:00:00Z"), 40).unwrap();
        assert_eq!(s.start, utc("2024-01-31T00:00:00Z").as_micros());
        let feb_29 = utc("2024-02-29T00:00:00Z");
        q.check(&mut s, feb_29, 2).unwrap();
        assert_eq!(
            s,
            QuotaState { start: feb_29.as_micros(), count: 2, prev: 40 },
            "a 29-day period follows"
        );
        let mar_31 = utc("2024-03-31T00:00:00Z");
        assert_eq!(q.previous_period(mar_31), (feb_29, mar_31), "31 days long");
        assert_eq!(q.previous(&s, utc("2024-03-30T23:59:59.999999Z")), 40);
        assert_eq!(q.previous(&s, mar_31), 2);
        q.check(&mut s, utc("2024-04-10T00:00:00Z"), 5).unwrap();
        assert_eq!(s, QuotaState { start: mar_31.as_micros(), count: 5, prev: 2 });
        assert_eq!(q.expires_at(&s), utc("2024-05-31T00:00:00Z"), "the end of the period after its own");
    }

    #[test]
    fn a_skipped_period_leaves_nothing_to_keep() {
        let q = billing();
        let mut s = QuotaState::default();
        q.check(&mut s, utc("2025-01-10T12:00:00Z"), 9).unwrap();
        // The next period (15 January to 15 February) sees no traffic: its previous is January's.
        assert_eq!(q.previous(&s, utc("2025-02-01T00:00:00Z")), 9);
        // The one after it: the period before it counted nothing, and the count is older still.
        let march = utc("2025-03-01T00:00:00Z");
        assert_eq!(q.previous(&s, march), 0);
        q.check(&mut s, march, 4).unwrap();
        assert_eq!(s, QuotaState { start: utc("2025-02-14T23:00:00Z").as_micros(), count: 4, prev: 0 });
        assert_eq!(q.previous(&s, march), 0);
    }

    #[test]
    fn a_refund_across_the_rollover_comes_off_the_previous_period() {
        let q = billing();
        let renewal = utc("2025-01-14T23:00:00Z");
        let before = utc("2025-01-14T22:59:59Z");
        // Nobody wrote after the rollover: the grant's count is still the state's count.
        let mut s = QuotaState::default();
        q.check(&mut s, utc("2025-01-10T12:00:00Z"), 20).unwrap();
        let (_, g) = q.check(&mut s, before, 30).unwrap();
        assert_eq!(q.previous(&s, renewal), 50);
        q.refund(&mut s, utc("2025-01-14T23:00:01Z"), &g.unwrap());
        assert_eq!(q.previous(&s, utc("2025-01-14T23:00:01Z")), 20);
        assert_eq!(q.status(&s, renewal), (100, 0), "the new period owes nothing");

        // Someone wrote after the rollover: the grant's count is now the previous period's.
        let mut s = QuotaState::default();
        q.check(&mut s, utc("2025-01-10T12:00:00Z"), 20).unwrap();
        let (_, g) = q.check(&mut s, before, 30).unwrap();
        q.check(&mut s, renewal, 10).unwrap();
        assert_eq!(s, QuotaState { start: renewal.as_micros(), count: 10, prev: 50 });
        q.refund(&mut s, utc("2025-01-14T23:00:01Z"), &g.unwrap());
        assert_eq!(s, QuotaState { start: renewal.as_micros(), count: 10, prev: 20 });
        assert_eq!(q.status(&s, renewal).0, 90, "the new period's count is untouched");

        // A grant from two periods back gives nothing back to either.
        let (_, g) = q.check(&mut s, utc("2025-03-01T00:00:00Z"), 1).unwrap();
        let mut later = s;
        q.check(&mut later, utc("2025-04-01T00:00:00Z"), 1).unwrap();
        let kept = later;
        q.check(&mut later, utc("2025-05-01T00:00:00Z"), 1).unwrap();
        let kept_may = later;
        q.refund(&mut later, utc("2025-05-01T00:00:01Z"), &g.unwrap());
        assert_eq!(later, kept_may);
        assert_eq!(kept.prev, 1);
    }

    #[test]
    fn expiry_keeps_the_count_readable_for_one_more_period_and_no_longer() {
        let q = billing();
        let mut s = QuotaState::default();
        let now = utc("2025-01-10T12:00:00Z");
        let (_, g) = q.check(&mut s, now, 3).unwrap();
        assert_eq!(q.expires_at(&s), utc("2025-02-14T23:00:00Z"), "the end of the next period");
        q.refund(&mut s, now, &g.unwrap());
        assert_eq!(q.expires_at(&s), Timestamp::EPOCH, "nothing left to read");
        q.check(&mut s, now, 3).unwrap();
        let renewal = utc("2025-01-14T23:00:00Z");
        let (_, g) = q.check(&mut s, renewal, 1).unwrap();
        q.refund(&mut s, renewal, &g.unwrap());
        assert_eq!(s, QuotaState { start: renewal.as_micros(), count: 0, prev: 3 });
        assert_eq!(q.expires_at(&s), utc("2025-02-14T23:00:00Z"), "the previous count, for this period only");
    }

    #[test]
    fn report_consumes_past_the_limit() {
        let q = billing();
        let mut s = QuotaState::default();
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
            let mut s = QuotaState::default();
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
                        // The period before this one: what its grants, less those given back, add up to.
                        let (before, _) = q.previous_period(at);
                        let previous: u64 =
                            admitted.iter().filter(|g| g.at >= before && g.at < begin).map(|g| g.cost).sum();
                        prop_assert_eq!(q.previous(&s, at), previous);
                        if let Some(g) = g {
                            admitted.push(g);
                            prop_assert_eq!(q.expires_at(&s), q.calendar().bounds(end).1, "kept through the next period");
                        } else {
                            prop_assert_eq!(d.retry_after, Some(end.saturating_since(at)));
                            assert_exact_retry(&q, &s, at, cost);
                        }
                    }
                    Step::Refund { dt, which } => {
                        now += dt;
                        if !admitted.is_empty() {
                            let g = admitted.remove(which.index(admitted.len()));
                            let at = Timestamp::from_micros(now);
                            q.refund(&mut s, at, &g);
                            let (before, begin) = q.previous_period(at);
                            let previous: u64 =
                                admitted.iter().filter(|g| g.at >= before && g.at < begin).map(|g| g.cost).sum();
                            prop_assert_eq!(q.previous(&s, at), previous, "after a refund");
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
