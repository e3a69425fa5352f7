//! Quota calendars per tenant on real `redis-server` processes: each request's period is its own
//! zone's, computed before the one store call, on a node and on a cluster; refunds go back to the
//! period they were taken in; usage reads the tenant's bounds.

use std::num::NonZeroU64;
use std::time::Duration;

use floodgate::{CalendarBy, Descriptors, Engine, FromDescriptor, Policy, Rule, Store};
use floodgate_core::calendar::Period;
use floodgate_core::{Calendar, ManualClock, Quota, Timestamp};

use super::{cluster_store, node_store};

/// 2024-05-17T12:00:00Z.
const NOON: Timestamp = Timestamp::from_secs(1_715_947_200);
/// Midnight in Tokyo (UTC+9), then in Berlin (UTC+2), after [`NOON`].
const TOKYO_MIDNIGHT: Timestamp = Timestamp::from_secs(1_715_958_000);
const BERLIN_MIDNIGHT: Timestamp = Timestamp::from_secs(1_715_983_200);

/// 2 a day per tenant, in the zone of the `tz` descriptor.
fn policy() -> Policy {
    let daily = Quota::new(NonZeroU64::new(2).expect("not zero"), Calendar::utc(Period::Day));
    Policy::new([Rule::new("daily", daily)
        .key(["tenant"])
        .calendar_by(CalendarBy::new().time_zone(FromDescriptor::new("tz")))])
    .expect("a policy")
}

/// A tenant per test and process: the shared servers hold every test's keys.
fn tenant(name: &str, tz: &str) -> Descriptors {
    Descriptors::new().with("tenant", format!("{name}-{}", std::process::id())).with("tz", tz)
}

async fn tenants_renew_at_their_own_midnight<S: Store>(store: S, clock: ManualClock, run: &str) {
    let engine = Engine::new(policy(), store);
    let berlin = tenant(&format!("{run}-berlin"), "Europe/Berlin");
    let tokyo = tenant(&format!("{run}-tokyo"), "Asia/Tokyo");
    for t in [&berlin, &tokyo] {
        for _ in 0..2 {
            assert!(engine.check(t, 1).await.unwrap().allowed);
        }
    }
    let denied = engine.check(&berlin, 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(10 * 3600)), "{run}: Berlin's midnight");
    let denied = engine.check(&tokyo, 1).await.unwrap();
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(3 * 3600)), "{run}: Tokyo's midnight");

    clock.set(TOKYO_MIDNIGHT);
    assert!(engine.check(&tokyo, 1).await.unwrap().allowed, "{run}: a new day in Tokyo");
    assert!(!engine.check(&berlin, 1).await.unwrap().allowed, "{run}: the same day in Berlin");
    let usage = engine.policy().usage(engine.store(), "daily", &tokyo).await.unwrap();
    assert_eq!(usage.period, Some((TOKYO_MIDNIGHT, Timestamp::from_secs(1_716_044_400))), "{run}");
    assert_eq!(usage.used, 1, "{run}");

    clock.set(BERLIN_MIDNIGHT.saturating_sub(Duration::from_secs(60)));
    let usage = engine.policy().usage(engine.store(), "daily", &berlin).await.unwrap();
    assert_eq!(usage.period, Some((Timestamp::from_secs(1_715_896_800), BERLIN_MIDNIGHT)), "{run}");
    assert_eq!(usage.used, 2, "{run}");
    clock.set(BERLIN_MIDNIGHT);
    let verdict = engine.check(&berlin, 2).await.unwrap();
    assert!(verdict.allowed, "{run}: a new day in Berlin");
    engine.refund(&berlin, &verdict).await.unwrap();
    let usage = engine.policy().usage(engine.store(), "daily", &berlin).await.unwrap();
    assert_eq!(usage.used, 0, "{run}: refunded to the Berlin day it was taken in");

    let martian = tenant(&format!("{run}-mars"), "Mars/Olympus");
    let err = engine.check(&martian, 1).await.unwrap_err().to_string();
    assert!(err.contains("\"tz\"") && err.contains("\"Mars/Olympus\""), "{run}: {err}");
}

#[tokio::test]
async fn on_a_node_tenants_renew_at_their_own_midnight() {
    let clock = ManualClock::new(NOON);
    tenants_renew_at_their_own_midnight(node_store().await.with_clock(clock.clone()), clock, "node").await;
}

#[tokio::test]
async fn on_a_cluster_tenants_renew_at_their_own_midnight() {
    let clock = ManualClock::new(NOON);
    tenants_renew_at_their_own_midnight(cluster_store().await.with_clock(clock.clone()), clock, "cluster")
        .await;
}

/// A quota's value as a release that kept no previous count wrote it, 16 bytes ('<dd': period
/// start, count as doubles), still counts: a peek reads its count and a previous count of 0, and the
/// next write keeps the count in the new 32-byte shape, with the previous period's count from then on.
#[tokio::test]
async fn a_quota_value_without_a_previous_count_still_reads() {
    use floodgate::store::{Applied, Mode};
    use floodgate_testkit::TestKey;
    use floodgate_testkit::redis::RedisServer;

    let clock = ManualClock::new(NOON);
    let store = node_store().await.with_clock(clock.clone());
    let limit: floodgate::Limit =
        Quota::new(NonZeroU64::new(10).expect("not zero"), Calendar::utc(Period::Day)).into();
    let key = TestKey::new(&format!("old-quota-{}", std::process::id()), "k");
    let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("an ASCII key");
    let midnight = Timestamp::from_secs(1_715_904_000); // 2024-05-17T00:00:00Z
    // Written as that release's script wrote it.
    let old = "return redis.call('SET', KEYS[1], struct.pack('<dd', tonumber(ARGV[1]), 4), 'PX', 600000)";
    RedisServer::shared().cli(&["EVAL", old, "1", &redis_key, &midnight.as_micros().to_string()]);
    assert_eq!(RedisServer::shared().cli(&["STRLEN", &redis_key]), "16");

    let apply = async |mode: Mode, cost: u64| {
        let mut out = Applied::default();
        store.apply(&[key.op(&limit, cost)], mode, &mut out).await.expect("the store answers");
        out.results[0]
    };
    let peeked = apply(Mode::Peek, 1).await;
    assert_eq!(
        (peeked.decision.remaining, peeked.previous),
        (5, Some(0)),
        "4 counted today, none kept before"
    );
    assert!(apply(Mode::Check, 2).await.decision.allowed);
    assert_eq!(RedisServer::shared().cli(&["STRLEN", &redis_key]), "32", "rewritten in the new shape");
    let peeked = apply(Mode::Peek, 1).await;
    assert_eq!((peeked.decision.remaining, peeked.previous), (3, Some(0)));
    let pttl: i64 = RedisServer::shared().cli(&["PTTL", &redis_key]).parse().expect("a number");
    assert!(pttl > 600_000, "the longer expiry of the new shape: {pttl}ms");
    clock.set(Timestamp::from_secs(1_715_990_400)); // the next day
    assert_eq!(apply(Mode::Peek, 1).await.previous, Some(6), "yesterday's count, from the rewritten value");
}
