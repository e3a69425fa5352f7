//! Every key the store writes expires, no later than its state needs, on Redis's clock.

use floodgate::Limit;
use floodgate::store::Mode;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{TestKey, every_algorithm};

#[tokio::test]
async fn every_write_leaves_the_key_with_an_expiry() {
    let server = RedisServer::shared();
    let store = crate::node_store().await;
    for limit in every_algorithm(5) {
        let name = limit.algorithm_name();
        let key = TestKey::new(&format!("expiry-{}-{name}", std::process::id()), "k");
        let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("an ASCII key");
        // How long the state may need, in ms (windows and leases of a minute, a bucket refilling a
        // cell every 12s — three of them — rounded up to whole seconds plus one, a quota's UTC day).
        let most: i64 = match limit {
            Limit::TokenBucket(_) | Limit::Gcra(_) => 3 * 12_000 + 2_000 + 1,
            Limit::Quota(_) => 86_400_000 + 1_000,
            Limit::SlidingWindow(_) => 120_000 + 1_000,
            _ => 60_000 + 1_000,
        };
        for round in 0..3 {
            let mut out = floodgate::store::Applied::default();
            floodgate::Store::apply(&store, &[key.op(&limit, 1)], Mode::Check, &mut out)
                .await
                .expect("a check");
            let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().expect("a number");
            assert!(
                ttl > 0 && ttl <= most,
                "{name}, write {round}: PTTL {ttl}ms, expected within (0, {most}]"
            );
        }
    }
}

#[tokio::test]
async fn a_partial_give_back_of_a_sliding_logs_only_entry_keeps_an_expiry() {
    let server = RedisServer::shared();
    let store = crate::node_store().await;
    let limit = every_algorithm(5)
        .into_iter()
        .find(|l| matches!(l, Limit::SlidingLog(_)))
        .expect("a sliding log among the algorithms");
    let key = TestKey::new(&format!("expiry-give-back-{}", std::process::id()), "k");
    let redis_key = String::from_utf8(store.redis_key(key.bytes(), &limit)).expect("an ASCII key");
    let mut out = floodgate::store::Applied::default();
    floodgate::Store::apply(&store, &[key.op(&limit, 3)], Mode::Check, &mut out).await.expect("a check");
    let grant = out.results[0].grant.expect("admitted");
    // A reservation of 3 committed at 2: 1 given back, out of the log's only entry, which the
    // script removes (deleting the key) and writes again with what is left.
    let part = floodgate::core::Grant { cost: 1, ..grant };
    floodgate::Store::refund(&store, key.bytes(), &limit, part).await.expect("a give-back");
    let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().expect("a number");
    assert!(ttl > 0 && ttl <= 60_000 + 1_000, "PTTL {ttl}ms after the give-back, expected within (0, 61000]");
}

/// Every key a mixed workload leaves on a Redis of its own — the limits of every algorithm (one
/// limit per request and nine at once), reports and refunds, reservations reserved, committed
/// under and over their estimate, released and left to expire, the notes that make settlements
/// once, and the fleet's heartbeat set — has an expiry, and none later than the docs say (README,
/// "Every Redis key expires").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_a_workload_leaves_expires_no_later_than_documented() {
    use std::time::Duration;

    use floodgate::{Costs, Descriptors, Engine, Hit, Policy, Rule, Settlement};
    use floodgate_core::{Budget, FixedWindow};
    use floodgate_redis::{RedisConfig, RedisStore};

    let nz = |n: u64| std::num::NonZeroU64::new(n).expect("not zero");
    let server = tokio::task::block_in_place(RedisServer::start);
    let config = RedisConfig {
        deadline: Duration::from_secs(30),
        connect_timeout: crate::CONNECT,
        ..RedisConfig::node(server.url())
    };
    let store = RedisStore::connect(config).await.expect("connect");
    // Every algorithm per user (windows and leases of a minute, a quota's UTC day), a budget of
    // a minute, and tokens per tenant.
    let mut rules: Vec<Rule> =
        every_algorithm(50).into_iter().map(|l| Rule::new(l.algorithm_name(), l).key(["user"])).collect();
    rules.push(
        Rule::new("budget", Budget::try_new(nz(50), Duration::from_secs(60)).expect("a budget"))
            .key(["user"]),
    );
    let tokens = FixedWindow::try_new(nz(100_000), Duration::from_secs(60)).expect("a window");
    rules.push(Rule::new("tokens", tokens).key(["tenant"]).cost("tokens"));
    let engine = Engine::new(Policy::new(rules).expect("a policy"), store.clone());

    for n in 0..3 {
        let who = Descriptors::new().with("user", format!("u{n}")).with("tenant", "t");
        for _ in 0..3 {
            let verdict = engine.check(&who, 1).await.expect("a check");
            assert!(verdict.allowed && verdict.store_error.is_none(), "{verdict:?}");
        }
        let verdict = engine.check(&who, 2).await.expect("a check");
        engine.refund(&who, &verdict).await.expect("a refund");
        engine.decide(floodgate::Mode::Report, Hit::new(&who, 1)).await.expect("a report");
    }
    let tenant = Descriptors::new().with("tenant", "t");
    let ttl = Duration::from_secs(5);
    let estimate = Costs::new().with("tokens", 600);
    let reserve = || async {
        let reserved = engine.reserve(Hit::with_costs(&tenant, &estimate), ttl).await.expect("a reserve");
        reserved.reservation.expect("granted").id
    };
    let under = reserve().await;
    engine.settle(&under, Settlement::Commit(&Costs::new().with("tokens", 250))).await.expect("commit under");
    let over = reserve().await;
    engine.settle(&over, Settlement::Commit(&Costs::new().with("tokens", 900))).await.expect("commit over");
    let released = reserve().await;
    engine.settle(&released, Settlement::Release).await.expect("release");
    let _unsettled = reserve().await;
    let heartbeat = Duration::from_secs(5);
    store.heartbeat("a", heartbeat).await.expect("a heartbeat");

    // The documented bounds, in ms (plus a second of rounding).
    // A record: its ttl, then kept as long again, at least a minute.
    let record = (ttl.as_millis() + ttl.as_millis().max(60_000)) as i64 + 1_000;
    let fleet = 2 * heartbeat.as_millis() as i64 + 1_000;
    let limit_bound = |key: &str| -> i64 {
        let by = |name: &str, ms: i64| key.contains(name).then_some(ms);
        by("quota", 86_400_000 + 1_000)
            .or_else(|| by("sliding_window", 120_000 + 1_000))
            .or_else(|| by("token_bucket", 60_000 + 2_000 + 1))
            .or_else(|| by("gcra", 60_000 + 2_000 + 1))
            .unwrap_or(60_000 + 1_000)
    };
    let keys = server.cli(&["--scan"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    let (mut records, mut notes, mut limits, mut fleets) = (0, 0, 0, 0);
    for key in &keys {
        let (what, most) = if key.ends_with("{fleet}") {
            fleets += 1;
            ("the fleet set", fleet)
        } else if key.ends_with('R') && key.contains("{r") {
            records += 1;
            ("a reservation record", record)
        } else if key.ends_with(":back") || key.ends_with(":more") {
            notes += 1;
            ("a settlement's note", record)
        } else {
            limits += 1;
            ("a limit's key", limit_bound(key))
        };
        let ttl: i64 = server.cli(&["PTTL", key]).parse().expect("a number");
        assert!(ttl > 0 && ttl <= most, "{what} {key:?}: PTTL {ttl}ms, expected within (0, {most}]");
    }
    assert_eq!(fleets, 1, "the fleet set among {keys:?}");
    assert_eq!(records, 4, "one record per reservation among {keys:?}");
    assert!(notes >= 2, "the settlements' notes among {keys:?}");
    assert!(limits >= 9, "every rule's keys among {keys:?}");
}
