//! Time: `retry_after` and `reset_after` are exact through the store.

use std::time::Duration;

use floodgate::{Limit, Store};
use floodgate_core::{Decision, ManualClock, Timestamp};

use crate::{StoreUnderTest, TestKey, every_algorithm};

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

/// `retry_after` is exact through the store, for every algorithm: drive a fresh key to a denial,
/// then the same request is denied 1µs before `now + retry_after` and allowed at it. From several
/// phases of the minute (fresh windows, just before a boundary), at several request rates (so
/// windows roll over and buckets partly refill), with several costs, and across midnight.
pub async fn every_algorithm_retry_after_is_exact_through_the_store<S: Store>(
    make: impl FnOnce(ManualClock) -> S,
) {
    let t = StoreUnderTest::new(make, "every_algorithm_retry_after_is_exact_through_the_store");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        for phase_ms in [0, 31_500, 59_999] {
            for step_s in [0, 3, 7] {
                for cost in [1, 3, 5] {
                    t.advance_to_phase(MINUTE, Duration::from_millis(phase_ms));
                    let case =
                        format!("{name}, from {phase_ms}ms into a minute, every {step_s}s, cost {cost}");
                    let key = t.key(&case, "k");
                    let step = Duration::from_secs(step_s);
                    let denied = drive_to_denial(&t, &key, &limit, step, cost, &case).await;
                    assert_exact_retry(&t, &key, &limit, cost, denied, &case).await;
                }
            }
        }
        t.advance_to_phase(DAY, DAY - Duration::from_secs(10));
        let case = format!("{name}, from 10s before midnight, every 3s, cost 2");
        let key = t.key(&case, "k");
        let denied = drive_to_denial(&t, &key, &limit, Duration::from_secs(3), 2, &case).await;
        assert_exact_retry(&t, &key, &limit, 2, denied, &case).await;
    }
}

/// Checks `cost` every `step` until denied; the denial.
async fn drive_to_denial<S: Store>(
    t: &StoreUnderTest<S>,
    key: &TestKey,
    limit: &Limit,
    step: Duration,
    cost: u64,
    case: &str,
) -> Decision {
    for i in 0..200 {
        if i > 0 {
            t.advance(step);
        }
        let d = t.check(key, limit, cost).await.decision;
        if !d.allowed {
            return d;
        }
    }
    panic!("{case}: never denied");
}

async fn assert_exact_retry<S: Store>(
    t: &StoreUnderTest<S>,
    key: &TestKey,
    limit: &Limit,
    cost: u64,
    denied: Decision,
    case: &str,
) {
    let retry = denied.retry_after.expect("a denial has a retry_after");
    let at = t.now().saturating_add(retry);
    t.set(Timestamp::from_micros(at.as_micros() - 1));
    let before = t.peek(key, limit, cost).await.decision;
    assert!(!before.allowed, "{case}: already allowed 1µs before retry_after ({retry:?})");
    t.set(at);
    let on_time = t.peek(key, limit, cost).await.decision;
    assert!(on_time.allowed, "{case}: still denied at retry_after ({retry:?}): {on_time:?}");
    assert!(t.check(key, limit, cost).await.decision.allowed, "{case}: a check at retry_after is allowed");
}

/// `reset_after` of an allowed check is when the limit is full again, given no more traffic: the
/// whole capacity fits at `now + reset_after` and not 1µs before. For every algorithm, with the
/// traffic inside one minute and across a minute boundary.
pub async fn reset_after_is_when_the_limit_is_full_again<S: Store>(make: impl FnOnce(ManualClock) -> S) {
    let t = StoreUnderTest::new(make, "reset_after_is_when_the_limit_is_full_again");
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        for phase_s in [0, 55] {
            t.advance_to_phase(MINUTE, Duration::from_secs(phase_s));
            let case = format!("{name}, 2 at {phase_s}s into a minute and 3 seven seconds later");
            let key = t.key(&case, "k");
            assert!(t.check(&key, &limit, 2).await.decision.allowed, "{case}: the first 2");
            t.advance(Duration::from_secs(7));
            let last = t.check(&key, &limit, 3).await.decision;
            assert!(last.allowed, "{case}: the next 3");
            let full_at = t.now().saturating_add(last.reset_after);
            t.set(Timestamp::from_micros(full_at.as_micros() - 1));
            let before = t.peek(&key, &limit, 5).await.decision;
            assert!(!before.allowed, "{case}: full 1µs before reset_after ({:?})", last.reset_after);
            t.set(full_at);
            let full = t.peek(&key, &limit, 5).await.decision;
            assert!(full.allowed, "{case}: not full at reset_after ({:?}): {full:?}", last.reset_after);
        }
    }
}
