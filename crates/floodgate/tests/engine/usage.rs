//! `Policy::usage`: a rule's counter for a key, read without consuming, on a manual clock.

use std::time::Duration;

use floodgate::{Rule, UsageError};
use floodgate_testkit::START;

use super::{engine, per_minute, request, sliding};

#[tokio::test]
async fn usage_reads_a_counter_without_consuming_and_sums_shards() {
    let (engine, clock) = engine([
        Rule::new("per-user", sliding(10, Duration::from_secs(60))).key(["user"]),
        Rule::new("global", per_minute(100)).shards(4),
    ]);
    let u1 = request(&[("user", "u1")]);
    for _ in 0..3 {
        assert!(engine.check(&u1, 2).await.unwrap().allowed);
    }
    clock.advance(Duration::from_secs(5));
    let policy = engine.policy();
    for _ in 0..2 {
        let usage = policy.usage(engine.store(), "per-user", &u1).await.unwrap();
        assert_eq!((usage.limit, usage.used, usage.remaining), (10, 6, 4));
        let now = START.saturating_add(Duration::from_secs(5));
        assert_eq!(
            usage.period,
            Some((now.saturating_sub(Duration::from_secs(60)), now)),
            "the trailing window"
        );
    }
    let global = policy.usage(engine.store(), "global", &u1).await.unwrap();
    assert_eq!((global.limit, global.used, global.remaining), (100, 6, 94), "the shards summed");
    assert!(matches!(
        policy.usage(engine.store(), "per-user", &request(&[])).await,
        Err(UsageError::MissingDescriptor { missing, .. }) if missing == "user"
    ));
    assert!(matches!(policy.usage(engine.store(), "nope", &u1).await, Err(UsageError::UnknownRule(_))));
}
