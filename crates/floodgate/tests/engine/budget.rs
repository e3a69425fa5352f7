//! `budget`: an agent session's step budget on the memory store, on a manual clock — never
//! refilled, gone `ttl` after the first step, and a new one from the next step on.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::Rule;
use floodgate_core::Budget;

use super::{engine, request};

#[tokio::test]
async fn a_budget_never_refills_and_is_gone_ttl_after_its_first_use() {
    let day = Duration::from_secs(86_400);
    let steps = Budget::try_new(NonZeroU64::new(50).unwrap(), day).unwrap();
    let (engine, clock) = engine([Rule::new("agent-steps", steps).key(["session"])]);
    let s1 = request(&[("session", "s1")]);
    clock.advance(Duration::from_secs(3_600));
    for _ in 0..50 {
        assert!(engine.check(&s1, 1).await.unwrap().allowed);
        clock.advance(Duration::from_secs(60)); // 50 minutes of steps: nothing refills meanwhile
    }
    let denied = engine.check(&s1, 1).await.unwrap();
    assert!(!denied.allowed);
    // The first step was 50 minutes ago: the budget is gone a day after it.
    assert_eq!(denied.retry_after(), Some(day - Duration::from_secs(50 * 60)));
    assert!(
        engine.check(&request(&[("session", "s2")]), 1).await.unwrap().allowed,
        "budgets are per session"
    );

    clock.advance(day - Duration::from_secs(50 * 60) - Duration::from_micros(1));
    assert!(!engine.check(&s1, 1).await.unwrap().allowed, "1 µs before the end");
    clock.advance(Duration::from_micros(1));
    let fresh = engine.check(&s1, 1).await.unwrap();
    assert!(fresh.allowed, "gone a day after its first use");
    assert_eq!(fresh.limits[0].decision.remaining, 49, "a new budget");
    assert_eq!(fresh.limits[0].decision.reset_after, day, "whose ttl runs from this use");
}
