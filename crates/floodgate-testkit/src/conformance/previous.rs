//! A quota's previous calendar period, kept and read through the store.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{Limit, Store};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, ManualClock, Quota};

use crate::{START, StoreUnderTest};

const DAY: Duration = Duration::from_secs(86_400);

/// A quota keeps what a key counted in the calendar period before the current one, and a peek
/// reads it (`OpResult::previous`): the key's own count until it counts in the new period, then
/// the count kept at the rollover; 0 once a period without traffic came between. A refund of a
/// grant taken before the rollover comes off it, whether or not the key counted since. Days, and
/// months of different lengths (anchored on the 31st: 31 October to 30 November, 30 November to 31
/// December). Checks and reports never carry it.
pub async fn a_quota_keeps_the_previous_period<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "a_quota_keeps_the_previous_period");
    let hundred = NonZeroU64::new(100).expect("100 is not 0");
    let daily: Limit = Quota::new(hundred, Calendar::utc(Period::Day)).into();
    let key = t.key("daily", "k");
    let previous = async |limit: &Limit| t.peek(&key, limit, 1).await.previous;

    // Day 0 (START is a UTC midnight).
    assert_eq!(previous(&daily).await, Some(0), "a key never seen");
    let first = t.check(&key, &daily, 30).await;
    assert_eq!(first.previous, None, "a check does not read the previous period");
    let first = first.grant.expect("allowed");
    assert_eq!(t.report(&key, &daily, 12).await.previous, None, "nor does a report");
    t.set(START.saturating_add(DAY - Duration::from_secs(1)));
    let late = t.check(&key, &daily, 8).await.grant.expect("allowed");
    assert_eq!(previous(&daily).await, Some(0), "the day before was not counted");

    // Day 1, before the key counts in it: its count is day 0's.
    t.set(START.saturating_add(DAY));
    let peeked = t.peek(&key, &daily, 1).await;
    assert_eq!((peeked.previous, peeked.decision.remaining), (Some(50), 99), "day 0's count, day 1 unused");
    t.refund(&key, &daily, late).await;
    assert_eq!(previous(&daily).await, Some(42), "a refund before anyone counted today");
    // The key counts on day 1: day 0's count is kept beside it.
    t.advance(Duration::from_secs(3600));
    assert!(t.check(&key, &daily, 5).await.decision.allowed);
    let peeked = t.peek(&key, &daily, 1).await;
    assert_eq!((peeked.previous, peeked.decision.remaining), (Some(42), 94));
    t.refund(&key, &daily, first).await;
    let peeked = t.peek(&key, &daily, 1).await;
    assert_eq!(
        (peeked.previous, peeked.decision.remaining),
        (Some(12), 94),
        "off day 0's count, not day 1's"
    );

    // Day 2: day 1's count. Day 4, after a day 3 without traffic: nothing is kept.
    t.set(START.saturating_add(2 * DAY));
    assert_eq!(previous(&daily).await, Some(5));
    t.set(START.saturating_add(4 * DAY));
    assert_eq!(previous(&daily).await, Some(0));
    assert!(t.check(&key, &daily, 1).await.decision.allowed);
    assert_eq!(previous(&daily).await, Some(0), "the rollover skipped a period: nothing kept");

    // Months: START + 4 days is 19 November 2023, in the period from 31 October to 30 November.
    let monthly: Limit = Quota::new(hundred, Calendar::utc(Period::Month { anchor_day: 31 })).into();
    let key = t.key("monthly", "k");
    let previous = async || t.peek(&key, &monthly, 1).await.previous;
    assert!(t.check(&key, &monthly, 7).await.decision.allowed);
    let november_30 = START.saturating_add(15 * DAY);
    t.set(november_30);
    assert_eq!(previous().await, Some(7), "a 30-day period before");
    assert!(t.check(&key, &monthly, 3).await.decision.allowed);
    t.set(november_30.saturating_add(31 * DAY - Duration::from_micros(1)));
    assert_eq!(previous().await, Some(7), "30 November to 31 December: 31 days");
    t.advance(Duration::from_micros(1));
    assert_eq!(previous().await, Some(3));

    // Other algorithms keep no past.
    for limit in crate::every_algorithm(5).iter().filter(|l| !matches!(l, Limit::Quota(_))) {
        let key = t.key(limit.algorithm_name(), "k");
        assert_eq!(t.peek(&key, limit, 1).await.previous, None, "{}", limit.algorithm_name());
    }
}
