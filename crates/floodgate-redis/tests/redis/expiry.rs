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
