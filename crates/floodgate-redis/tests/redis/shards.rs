//! Sharded global keys (`Rule::shards`) on a real Redis Cluster: the limit spread over several
//! keys admits exactly the limit, and a request whose shard is empty tries the next one, once.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use floodgate::{Descriptors, Engine, Limit, Policy, Rule};
use floodgate_core::{FixedWindow, Rate, TokenBucket};
use floodgate_redis::RedisStore;

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap_or_default()
    )
}

fn per_hour(limit: u64) -> Limit {
    FixedWindow::try_new(NonZeroU64::new(limit).unwrap(), Duration::from_secs(3_600)).unwrap().into()
}

async fn engines(n: usize, rule: &Rule) -> Vec<Arc<Engine<RedisStore>>> {
    let mut engines = Vec::new();
    for _ in 0..n {
        let store = super::cluster_store().await;
        engines.push(Arc::new(Engine::new(Policy::new([rule.clone()]).unwrap(), store)));
    }
    engines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_limit_admits_exactly_the_limit() {
    // 103 over 4 shards: 26, 26, 26, 25.
    let rule = Rule::new(unique("sharded"), per_hour(103)).shards(4);
    let engines = engines(3, &rule).await;
    assert_eq!(super::hammer(&engines, 16, 1_000).await, 103);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_bucket_admits_exactly_its_burst() {
    let rate = Rate::try_new(NonZeroU64::new(50).unwrap(), Duration::from_secs(86_400)).unwrap();
    let bucket: Limit = TokenBucket::try_new(rate, NonZeroU64::new(50).unwrap()).unwrap().into();
    let rule = Rule::new(unique("sharded-bucket"), bucket).shards(3);
    let engines = engines(2, &rule).await;
    assert_eq!(super::hammer(&engines, 8, 400).await, 50);
}

#[tokio::test]
async fn an_empty_shard_sends_the_request_to_the_next_one_once() {
    // 4 over 2 shards: 2 each. Each instance takes shards in turn, from shard 0.
    let rule = Rule::new(unique("empty-shard"), per_hour(4)).shards(2);
    let engines = engines(2, &rule).await;
    let (a, b) = (&engines[0], &engines[1]);
    for _ in 0..3 {
        // Shards 0, 1, 0: shard 0 is empty, shard 1 holds one.
        assert!(a.check(&Descriptors::new(), 1).await.unwrap().allowed);
    }
    let moved = b.check(&Descriptors::new(), 1).await.unwrap();
    assert!(moved.allowed, "b's shard 0 is empty: the request is decided on shard 1");
    assert_eq!(moved.limits[0].decision.limit, 2, "a decision reports its shard's share");
    let denied = b.check(&Descriptors::new(), 1).await.unwrap();
    assert!(!denied.allowed, "both shards are empty");
    assert!(denied.retry_after().is_some());
    assert!(b.reset(rule.name(), &Descriptors::new()).await.unwrap(), "a reset forgets every shard");
    assert_eq!(super::hammer(&engines, 2, 20).await, 4);
}
