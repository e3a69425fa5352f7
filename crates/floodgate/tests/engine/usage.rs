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

/// An instant written in UTC, such as `"2024-03-31T01:00:00Z"`.
fn utc(text: &str) -> floodgate_core::Timestamp {
    let t: jiff::Timestamp = text.parse().expect("an instant");
    floodgate_core::Timestamp::from_micros(u64::try_from(t.as_microsecond()).expect("after the epoch"))
}

#[tokio::test]
async fn usage_reads_a_quotas_previous_period_summed_over_shards_and_in_the_tenants_calendar() {
    use floodgate::{CalendarBy, FromDescriptor, Previous};
    use floodgate_core::calendar::Period;
    use floodgate_core::{Calendar, Quota};

    let monthly = Quota::new(super::nz(1_000), Calendar::utc(Period::Month { anchor_day: 1 }));
    let (engine, clock) = engine([
        Rule::new("spend", monthly.clone())
            .key(["tenant"])
            .calendar_by(CalendarBy::new().time_zone(FromDescriptor::new("tz"))),
        Rule::new("all", monthly).shards(4),
        Rule::new("per-user", per_minute(10)).key(["user"]),
    ]);
    let acme = request(&[("tenant", "acme"), ("tz", "Europe/Berlin")]);
    let policy = engine.policy();
    clock.set(utc("2025-01-20T12:00:00Z"));
    for cost in [100, 23] {
        assert!(engine.check(&acme, cost).await.unwrap().allowed);
    }
    let january = (utc("2024-12-31T23:00:00Z"), utc("2025-01-31T23:00:00Z")); // Berlin's January
    let usage = policy.usage(engine.store(), "spend", &acme).await.unwrap();
    assert_eq!(usage.used, 123);
    assert_eq!(
        usage.previous,
        Some(Previous { used: 0, period: (utc("2024-11-30T23:00:00Z"), january.0) }),
        "nothing counted in December"
    );

    // February in Berlin, before anyone spends: January's count is the previous period's.
    clock.set(utc("2025-01-31T23:00:00Z"));
    let usage = policy.usage(engine.store(), "spend", &acme).await.unwrap();
    assert_eq!((usage.used, usage.previous), (0, Some(Previous { used: 123, period: january })));
    assert!(engine.check(&acme, 5).await.unwrap().allowed);
    let usage = policy.usage(engine.store(), "spend", &acme).await.unwrap();
    assert_eq!((usage.used, usage.previous), (5, Some(Previous { used: 123, period: january })));
    // March: February's 5; January is no longer kept.
    clock.set(utc("2025-03-10T00:00:00Z"));
    let usage = policy.usage(engine.store(), "spend", &acme).await.unwrap();
    assert_eq!(usage.previous.map(|p| p.used), Some(5));
    // April, after a March without spend: nothing.
    clock.set(utc("2025-04-02T00:00:00Z"));
    let usage = policy.usage(engine.store(), "spend", &acme).await.unwrap();
    assert_eq!(usage.previous.map(|p| p.used), Some(0));

    // A sharded quota: the shards' previous counts summed.
    for _ in 0..7 {
        assert!(engine.check(&request(&[]), 3).await.unwrap().allowed);
    }
    clock.set(utc("2025-05-01T00:00:00Z"));
    let all = policy.usage(engine.store(), "all", &request(&[])).await.unwrap();
    assert_eq!(
        all.previous,
        Some(Previous { used: 21, period: (utc("2025-04-01T00:00:00Z"), utc("2025-05-01T00:00:00Z")) })
    );
    // Rules other than quotas keep no past.
    let per_user = policy.usage(engine.store(), "per-user", &request(&[("user", "u1")])).await.unwrap();
    assert_eq!(per_user.previous, None);
}
