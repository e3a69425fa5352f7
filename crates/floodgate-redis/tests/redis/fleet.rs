//! The fleet: heartbeats counting the live instances that share a store, on a real node and a
//! real cluster, following instances that come, leave and die.

use std::time::Duration;

use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::redis::{RedisCluster, RedisServer};

/// A store on the shared node with a prefix of its own, so that each test has its own fleet.
async fn member(prefix: &str) -> RedisStore {
    let config = RedisConfig { prefix: prefix.to_owned(), ..crate::node_config(RedisServer::shared()) };
    RedisStore::connect(config).await.expect("connect to the shared node")
}

fn prefix(test: &str) -> String {
    format!("fleet-{test}-{}:", std::process::id())
}

#[tokio::test]
async fn instances_that_come_are_counted_and_one_that_leaves_is_gone_at_once() {
    let prefix = prefix("leave");
    let store = member(&prefix).await;
    let ttl = Duration::from_secs(30);
    assert_eq!(store.heartbeat("a", ttl).await.expect("a"), 1);
    assert_eq!(store.heartbeat("b", ttl).await.expect("b"), 2);
    assert_eq!(store.heartbeat("c", ttl).await.expect("c"), 3);
    // A heartbeat again from a live instance refreshes it, it does not count it twice.
    assert_eq!(store.heartbeat("a", ttl).await.expect("a again"), 3);
    store.leave("c").await.expect("c leaves");
    assert_eq!(store.heartbeat("a", ttl).await.expect("a after c left"), 2);

    let key = String::from_utf8(store.fleet_key()).expect("a UTF-8 key");
    assert_eq!(key, format!("{prefix}{{fleet}}"));
    let members = RedisServer::shared().cli(&["ZRANGE", &key, "0", "-1"]);
    let mut members: Vec<&str> = members.lines().collect();
    members.sort_unstable();
    assert_eq!(members, ["a", "b"], "the live members");
    let ttl_ms: i64 = RedisServer::shared().cli(&["PTTL", &key]).parse().expect("a PTTL");
    assert!(ttl_ms > 30_000 && ttl_ms <= 60_000, "the set expires when its members would have: {ttl_ms} ms");
}

#[tokio::test]
async fn an_instance_that_stops_beating_is_no_longer_counted_once_its_announcement_expires() {
    let store = member(&prefix("expiry")).await;
    let long = Duration::from_secs(30);
    let short = Duration::from_millis(300);
    assert_eq!(store.heartbeat("steady", long).await.expect("steady"), 1);
    assert_eq!(store.heartbeat("dies", short).await.expect("dies"), 2);
    // Redis's clock decides the expiry: wait for it past the short announcement.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(store.heartbeat("steady", long).await.expect("steady again"), 1, "the dead one expired");
}

#[tokio::test]
async fn a_fleet_on_a_cluster_lives_in_one_slot_and_counts_like_on_a_node() {
    let config = RedisConfig {
        prefix: prefix("cluster"),
        deadline: crate::SHARED_DEADLINE,
        connect_timeout: crate::CONNECT,
        ..RedisConfig::cluster(RedisCluster::shared().urls())
    };
    let store = RedisStore::connect(config).await.expect("connect to the shared cluster");
    let ttl = Duration::from_secs(30);
    for (n, instance) in ["x", "y", "z"].iter().enumerate() {
        assert_eq!(store.heartbeat(instance, ttl).await.expect("heartbeat"), n as u32 + 1);
    }
    store.leave("y").await.expect("y leaves");
    assert_eq!(store.heartbeat("x", ttl).await.expect("x"), 2);
}

#[tokio::test]
async fn a_heartbeat_to_a_dead_node_is_a_transient_store_error() {
    let mut server = RedisServer::start();
    let config = RedisConfig { deadline: Duration::from_millis(200), ..crate::node_config(&server) };
    let store = RedisStore::connect(config).await.expect("connect");
    assert_eq!(store.heartbeat("only", Duration::from_secs(5)).await.expect("alive"), 1);
    server.stop();
    let error = store.heartbeat("only", Duration::from_secs(5)).await.expect_err("the node is gone");
    assert!(error.is_transient(), "a dead node is worth retrying later: {error}");
}

// === RLQS claims ===

use floodgate_redis::rlqs::MemberDemand;

fn demand<'a>(name: &'a str, demand: f64, desired: f64) -> MemberDemand<'a> {
    MemberDemand { name, demand, desired }
}

#[tokio::test]
async fn rlqs_claims_never_sum_past_the_limit_and_room_given_back_is_claimed() {
    let store = member(&prefix("rlqs-claims")).await;
    let ttl = Duration::from_secs(30);
    let group = 7;
    // Instance a, alone: it desires the whole limit and gets it.
    let a = store.rlqs_demand(group, "a", 100.0, &[demand("a/1/x", 80.0, 100.0)], ttl).await.unwrap();
    assert_eq!(a.granted, 1.0);
    assert!(a.others.is_empty());
    // Instance b joins: by its own view it desires 50, but a holds all 100: b gets nothing yet,
    // and a sees b waiting (desired above assigned).
    let b = store.rlqs_demand(group, "b", 100.0, &[demand("b/1/x", 80.0, 50.0)], ttl).await.unwrap();
    assert_eq!(b.granted, 0.0);
    assert_eq!(b.others.len(), 1);
    assert_eq!((b.others[0].demand, b.others[0].assigned, b.others[0].desired), (80.0, 100.0, 100.0));
    // a hears of b and desires half: it claims 50, and reads b waiting for 50 with nothing.
    let a = store.rlqs_demand(group, "a", 100.0, &[demand("a/1/x", 80.0, 50.0)], ttl).await.unwrap();
    assert_eq!(a.granted, 1.0);
    assert_eq!((a.others[0].assigned, a.others[0].desired), (0.0, 50.0));
    // b asks again: what a gave back is b's.
    let b = store.rlqs_demand(group, "b", 100.0, &[demand("b/1/x", 80.0, 50.0)], ttl).await.unwrap();
    assert_eq!(b.granted, 1.0);
    // b desires 70 with two buckets while a holds 50: b is granted 50 of its 70, each bucket the
    // same fraction.
    let two = [demand("b/1/x", 80.0, 35.0), demand("b/1/y", 80.0, 35.0)];
    let b = store.rlqs_demand(group, "b", 100.0, &two, ttl).await.unwrap();
    assert!((b.granted - 50.0 / 70.0).abs() < 1e-9, "{}", b.granted);
    // a reads b's claims as granted: 25 each, not the 35 desired.
    let a = store.rlqs_demand(group, "a", 100.0, &[demand("a/1/x", 80.0, 50.0)], ttl).await.unwrap();
    let held: f64 = a.others.iter().map(|m| m.assigned).sum();
    assert!((held - 50.0).abs() < 1e-9, "{held}");
    assert!(a.others.iter().all(|m| m.desired == 35.0));
}

#[tokio::test]
async fn rlqs_claims_of_an_instance_that_stops_writing_expire_and_free_their_room() {
    let store = member(&prefix("rlqs-expiry")).await;
    let group = 8;
    store
        .rlqs_demand(group, "a", 100.0, &[demand("a/1/x", 80.0, 100.0)], Duration::from_millis(1))
        .await
        .unwrap();
    // a's claim lives for 1 ms on Redis's clock; b asks until it has expired.
    floodgate_testkit::wait::until("a's claim expired", || async {
        let b = store
            .rlqs_demand(group, "b", 100.0, &[demand("b/1/x", 80.0, 100.0)], Duration::from_secs(30))
            .await
            .unwrap();
        (b.granted == 1.0 && b.others.is_empty()).then_some(())
    })
    .await;
}
