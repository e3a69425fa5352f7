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
