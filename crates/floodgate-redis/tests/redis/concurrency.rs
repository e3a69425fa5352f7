//! Exactness under concurrency: 8 engine instances, each with its own connection, × 64 tasks.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::{Descriptors, Engine, Limit, OnStoreError, Policy, Rule};
use floodgate_core::{Gcra, Rate, SlidingLog, TokenBucket};
use floodgate_redis::{RedisConfig, RedisStore};
use floodgate_testkit::redis::{RedisCluster, RedisServer};

const INSTANCES: usize = 8;
const TASKS: usize = 64;
const ATTEMPTS: usize = 5_000;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).expect("not zero")
}

/// `limit` a day, starting full: nothing refills during the test.
fn per_day(limit: u64) -> Limit {
    let rate = Rate::try_new(nz(limit), Duration::from_secs(86_400)).expect("a rate");
    TokenBucket::try_new(rate, nz(limit)).expect("a bucket").into()
}

/// Runs `ATTEMPTS` checks of `request` through `INSTANCES` engines × `TASKS` tasks; how many passed.
async fn hammer(config: &RedisConfig, policy: impl Fn() -> Policy, request: &Descriptors) -> usize {
    let mut engines = Vec::new();
    for _ in 0..INSTANCES {
        let store = RedisStore::connect(config.clone()).await.expect("connect");
        engines.push(Arc::new(Engine::new(policy(), store)));
    }
    let tickets = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for engine in &engines {
        for _ in 0..TASKS {
            let (engine, tickets, admitted, request) =
                (Arc::clone(engine), Arc::clone(&tickets), Arc::clone(&admitted), request.clone());
            tasks.push(tokio::spawn(async move {
                while tickets.fetch_add(1, Ordering::Relaxed) < ATTEMPTS {
                    let verdict = engine.check(&request, 1).await.expect("a valid request");
                    assert_eq!(verdict.store_error, None, "no store errors under load");
                    if verdict.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("a task");
    }
    admitted.load(Ordering::Relaxed)
}

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap_or_default()
    )
}

fn load_config(config: RedisConfig) -> RedisConfig {
    RedisConfig { deadline: Duration::from_secs(5), connect_timeout: super::CONNECT, ..config }
}

async fn one_rule_is_exact(config: RedisConfig) {
    let config = load_config(config);
    let user = unique("u");
    let policy = || {
        Policy::new([Rule::new("per-user", per_day(1_000))
            .key(["user"])
            .on_store_error(OnStoreError::FailClosed)])
        .expect("a policy")
    };
    let admitted = hammer(&config, policy, &Descriptors::new().with("user", user)).await;
    assert_eq!(admitted, 1_000, "exactly the limit under {INSTANCES} × {TASKS} concurrent checks");
}

/// The stricter rule admits exactly its limit; the looser one is charged only for admitted
/// requests.
async fn overlapping_rules_are_exact(config: RedisConfig) {
    let config = load_config(config);
    let (user, tenant) = (unique("u"), unique("t"));
    let rules = || {
        let strict: Limit = SlidingLog::try_new(nz(1_000), Duration::from_secs(3_600)).expect("a log").into();
        let loose: Limit =
            Gcra::try_new(Rate::try_new(nz(1_500), Duration::from_secs(86_400)).expect("a rate"), nz(1_500))
                .expect("a gcra")
                .into();
        Policy::new([
            Rule::new("per-user", strict).key(["user"]).on_store_error(OnStoreError::FailClosed),
            Rule::new("per-tenant", loose).key(["tenant"]).on_store_error(OnStoreError::FailClosed),
        ])
        .expect("a policy")
    };
    let request = Descriptors::new().with("user", user).with("tenant", tenant);
    let admitted = hammer(&config, rules, &request).await;
    assert_eq!(admitted, 1_000, "exactly the stricter limit");
    let store = RedisStore::connect(config).await.expect("connect");
    let engine = Engine::new(rules(), store);
    let peek = engine.peek(&request, 1).await.expect("a peek");
    let tenant = &peek.limits[1];
    // The request is denied (the user limit is exhausted), so the tenant limit reports its state as
    // it stays: 1 500 − 1 000 admitted.
    assert!(!peek.allowed);
    assert_eq!(tenant.decision.remaining, 500, "the looser limit was charged for admitted requests only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_admits_exactly_the_limit() {
    one_rule_is_exact(crate::node_config(RedisServer::shared())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_overlapping_rules_admit_exactly_the_stricter_limit() {
    overlapping_rules_are_exact(crate::node_config(RedisServer::shared())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_admits_exactly_the_limit() {
    one_rule_is_exact(RedisConfig::cluster(RedisCluster::shared().urls())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_overlapping_rules_across_slots_admit_exactly_the_stricter_limit() {
    let config = RedisConfig::cluster(RedisCluster::shared().urls());
    overlapping_rules_are_exact(config).await;
}
