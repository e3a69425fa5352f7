//! The largest limits a Redis store takes (its Lua scripts compute in doubles, exact below 2^53:
//! `floodgate::doubles`), loaded from a configuration, decide on a real `redis-server` exactly as
//! on the memory store.

use floodgate::{Descriptors, Engine, MemoryConfig, MemoryStore, Verdict};
use floodgate_app::store::redis_config;
use floodgate_config::StoreConfig;
use floodgate_core::ManualClock;
use floodgate_redis::RedisStore;
use floodgate_testkit::START;
use floodgate_testkit::redis::RedisServer;

/// 2^52 − 1: the largest count, or length in µs, a Redis store takes.
const LARGEST: u64 = (1 << 52) - 1;

/// `(rule, its algorithm and parameters, its capacity)`, each at the largest value of one bound.
fn rules() -> [(&'static str, String, u64); 9] {
    [
        // 2 501 999 × 3.6 × 10^9 µs < 2^53.
        ("sliding-window", "algorithm: sliding_window\n    limit: 2501999\n    window: 1h".into(), 2_501_999),
        ("fixed-window", format!("algorithm: fixed_window\n    limit: {LARGEST}\n    window: 1h"), LARGEST),
        ("long-window", format!("algorithm: fixed_window\n    limit: 10\n    window: {LARGEST}us"), 10),
        ("sliding-log", format!("algorithm: sliding_log\n    limit: {LARGEST}\n    window: 1m"), LARGEST),
        // 1 250 999 × 3.6 × 10^9 µs < 2^52.
        ("token-bucket", "algorithm: token_bucket\n    rate: 1/h\n    burst: 1250999".into(), 1_250_999),
        ("gcra", format!("algorithm: gcra\n    rate: 1000/ms\n    burst: {LARGEST}"), LARGEST),
        (
            "concurrency",
            format!("algorithm: concurrency\n    limit: {LARGEST}\n    lease: {LARGEST}us"),
            LARGEST,
        ),
        ("quota", format!("algorithm: quota\n    limit: {LARGEST}\n    period: day"), LARGEST),
        ("budget", format!("algorithm: budget\n    limit: 10\n    ttl: {LARGEST}us"), 10),
    ]
}

#[tokio::test]
async fn the_largest_limits_a_redis_store_takes_load_and_decide_as_on_the_memory_store() {
    let server = RedisServer::shared();
    let mut yaml = format!(
        "store:\n  kind: redis\n  url: {:?}\n  prefix: largest-{}\n  deadline: 5s\n  connect_timeout: 10s\nrules:\n",
        server.url(),
        std::process::id()
    );
    for (name, limit, _) in rules() {
        yaml.push_str(&format!(
            "  - name: {name}\n    match: {{route: {name}}}\n    key: [user]\n    {limit}\n"
        ));
    }
    let parse = || floodgate_config::parse("largest.yaml", &yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let config = parse();
    let StoreConfig::Redis(settings) = &config.store else { panic!("a Redis store") };
    // A test clock on both stores, so that their decisions can be compared exactly.
    let clock = ManualClock::new(START);
    let redis = RedisStore::connect(redis_config(settings)).await.expect("connect to the shared node");
    let on_redis = Engine::new(config.policy, redis.with_clock(clock.clone()));
    let on_memory = Engine::new(parse().policy, MemoryStore::with_config(MemoryConfig::default(), clock));
    let decisions =
        |v: &Verdict| v.limits.iter().map(|l| (l.rule.to_string(), l.decision)).collect::<Vec<_>>();
    for (name, _, capacity) in rules() {
        let who = Descriptors::new().with("route", name).with("user", "u");
        // One unit, then all the rest, then one more than the limit holds.
        for (cost, allowed, remaining) in [(1, true, capacity - 1), (capacity - 1, true, 0), (1, false, 0)] {
            let redis = on_redis.check(&who, cost).await.expect("a possible request");
            let memory = on_memory.check(&who, cost).await.expect("a possible request");
            assert_eq!(redis.store_error, None, "{name}, cost {cost}");
            assert_eq!(decisions(&redis), decisions(&memory), "{name}, cost {cost}: Redis against memory");
            let decision = redis.limits[0].decision;
            assert_eq!((decision.allowed, decision.remaining), (allowed, remaining), "{name}, cost {cost}");
        }
    }
}
