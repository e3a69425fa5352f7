//! Native configurations compiled and exercised through the engine.

use std::time::Duration;

use floodgate::Outcome;
use floodgate_config as config;
use floodgate_http::HeaderStyle;

use super::{engine, fixture, hammer, request};

#[tokio::test]
async fn builtin_example_allows_ten_chats_a_minute_then_429() {
    let config = config::builtin();
    let (engine, clock) = engine(config.policy);
    let chat = request(&[("user", "u1"), ("route", "POST /chat")]);
    let mut allowed = Vec::new();
    for _ in 0..12 {
        allowed.push(engine.check(&chat, 1).await.unwrap().allowed);
    }
    assert_eq!(allowed, [true, true, true, true, true, true, true, true, true, true, false, false]);
    let denied = engine.check(&chat, 1).await.unwrap();
    assert_eq!(&*denied.limits[0].rule, "chat-per-user");
    assert_eq!(denied.limits[0].decision.limit, 10);
    // Another user, and another route, are not affected.
    assert!(engine.check(&request(&[("user", "u2"), ("route", "POST /chat")]), 1).await.unwrap().allowed);
    assert!(engine.check(&request(&[("user", "u1"), ("route", "GET /models")]), 1).await.unwrap().allowed);
    // A minute later the sliding window has moved on.
    clock.advance(Duration::from_secs(120));
    assert!(engine.check(&chat, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn builtin_example_other_rules() {
    let config = config::builtin();
    assert_eq!(config.headers, HeaderStyle::Both);
    let (engine, _clock) = engine(config.policy);
    // api-burst: a bucket of 20.
    let (allowed, _) = hammer(&engine, &request(&[("api_key", "k1")]), 25).await;
    assert_eq!(allowed, 20);
    // monthly-quota: enterprise tenants are refused past 100 000, free ones tagged past 100.
    let free = request(&[("tenant", "t-free"), ("plan", "free")]);
    let (allowed, last) = hammer(&engine, &free, 101).await;
    assert_eq!(allowed, 101);
    let quota = last.limits.iter().find(|l| &*l.rule == "monthly-quota").unwrap();
    assert_eq!(quota.outcome, Outcome::Tagged);
}

#[tokio::test]
async fn limits_and_actions_vary_by_plan() {
    let config = config::load(&fixture("plans.yaml")).unwrap();
    let (engine, _clock) = engine(config.policy);

    // free: 3 a month, then allowed but tagged (overage: degrade).
    let free = request(&[("tenant", "t1"), ("plan", "free")]);
    let (allowed, last) = hammer(&engine, &free, 3).await;
    assert_eq!((allowed, last.limits[0].outcome), (3, Outcome::Allowed));
    assert_eq!(last.limits[0].decision.limit, 3);
    let over = engine.check(&free, 1).await.unwrap();
    assert!(over.allowed);
    assert_eq!(over.limits[0].outcome, Outcome::Tagged);
    assert_eq!(over.tags().collect::<Vec<_>>(), ["monthly-quota"]);

    // enterprise: 2 a month, then refused (overage: deny) until the 15th at midnight in Berlin.
    let enterprise = request(&[("tenant", "t2"), ("plan", "enterprise")]);
    let (allowed, _) = hammer(&engine, &enterprise, 2).await;
    assert_eq!(allowed, 2);
    let refused = engine.check(&enterprise, 1).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.limits[0].outcome, Outcome::Denied);
    // 2025-01-01T00:00Z to 2025-01-15T00:00 Berlin (2025-01-14T23:00Z).
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(13 * 86_400 + 23 * 3600)));

    // pro: no overage given, so the rule's action (deny) applies past 5.
    let pro = request(&[("tenant", "t3"), ("plan", "pro")]);
    let (allowed, last) = hammer(&engine, &pro, 7).await;
    assert_eq!(allowed, 5);
    assert_eq!(last.limits[0].outcome, Outcome::Denied);

    // No default: a plan not listed, or no plan, is not subject to the quota.
    for unlisted in [request(&[("tenant", "t4"), ("plan", "trial")]), request(&[("tenant", "t5")])] {
        let (allowed, last) = hammer(&engine, &unlisted, 10).await;
        assert_eq!(allowed, 10);
        assert!(last.limits.is_empty(), "{:?}", last.limits);
    }
}

#[tokio::test]
async fn a_default_limit_covers_unlisted_and_missing_values() {
    let config = config::load(&fixture("plans.yaml")).unwrap();
    let (engine, _clock) = engine(config.policy);
    let (allowed, _) = hammer(&engine, &request(&[("user", "u1"), ("plan", "pro")]), 6).await;
    assert_eq!(allowed, 4);
    let (allowed, _) = hammer(&engine, &request(&[("user", "u2"), ("plan", "free")]), 3).await;
    assert_eq!(allowed, 1);
    let (allowed, _) = hammer(&engine, &request(&[("user", "u3")]), 3).await;
    assert_eq!(allowed, 1);
}

#[tokio::test]
async fn a_not_condition_excludes_the_listed_values() {
    let config = config::parse(
        "not.yaml",
        "rules:
  - name: external
    match: { plan: { not: [internal, staff] } }
    key: [user]
    algorithm: fixed_window
    limit: 1
    window: 1m
",
    )
    .unwrap();
    let (engine, _clock) = engine(config.policy);
    let (allowed, _) = hammer(&engine, &request(&[("user", "u1"), ("plan", "free")]), 3).await;
    assert_eq!(allowed, 1);
    let (allowed, _) = hammer(&engine, &request(&[("user", "u2"), ("plan", "staff")]), 3).await;
    assert_eq!(allowed, 3, "a listed value is not subject to the rule");
    let (allowed, _) = hammer(&engine, &request(&[("user", "u3")]), 3).await;
    assert_eq!(allowed, 3, "without the descriptor the condition does not hold");
    let both = config::parse(
        "both.yaml",
        "rules:\n  - name: r\n    match: { plan: { present: true, not: [x] } }\n    algorithm: fixed_window\n    limit: 1\n    window: 1m\n",
    );
    assert!(both.unwrap_err().message.contains("either"), "present and not together are refused");
}

#[tokio::test]
async fn match_rollout_tag_and_concurrency_behave() {
    let config = config::load(&fixture("behaviour.yaml")).unwrap();
    assert_eq!(config.headers, HeaderStyle::Ietf);
    let names: Vec<&str> = config.policy.rules().map(|r| r.name()).collect();
    assert_eq!(names, ["writes", "new-limit-dry-run", "risky-sessions", "in-flight"]);
    let (engine, _clock) = engine(config.policy);

    // writes: POST or PUT, with a region, 2 a minute per user.
    let post = request(&[("user", "u1"), ("method", "POST"), ("region", "eu")]);
    let (allowed, _) = hammer(&engine, &post, 3).await;
    assert_eq!(allowed, 2);
    let put = request(&[("user", "u1"), ("method", "PUT"), ("region", "us")]);
    assert!(!engine.check(&put, 1).await.unwrap().allowed, "PUT shares the user's counter");
    let get = request(&[("user", "u1"), ("method", "GET"), ("region", "eu")]);
    assert!(engine.check(&get, 1).await.unwrap().limits.is_empty());
    let no_region = request(&[("user", "u1"), ("method", "POST")]);
    assert!(engine.check(&no_region, 1).await.unwrap().limits.is_empty());

    // rollout 0%: counted, never enforced.
    let ip = request(&[("ip", "192.0.2.1")]);
    let (allowed, last) = hammer(&engine, &ip, 3).await;
    assert_eq!(allowed, 3);
    assert_eq!(last.limits[0].outcome, Outcome::ShadowDenied);

    // tag: allowed, marked.
    let session = request(&[("session", "s1")]);
    let (allowed, last) = hammer(&engine, &session, 2).await;
    assert_eq!(allowed, 2);
    assert_eq!(last.limits[0].outcome, Outcome::Tagged);

    // concurrency: one in flight per API key.
    let key = request(&[("api_key", "k1")]);
    let first = engine.check(&key, 1).await.unwrap();
    assert!(first.allowed && first.holds_permits());
    assert!(!engine.check(&key, 1).await.unwrap().allowed);
}

#[test]
fn every_rule_has_a_fingerprint() {
    let config = config::load(&fixture("behaviour.yaml")).unwrap();
    let keys: Vec<&str> = config.fingerprints.keys().map(String::as_str).collect();
    assert_eq!(keys, ["in-flight", "new-limit-dry-run", "risky-sessions", "writes"]);
    // Stable: the same text gives the same fingerprints.
    let again = config::parse("again", &config.source.text).unwrap();
    assert_eq!(again.fingerprints, config.fingerprints);
    assert_eq!(again.source.hash, config.source.hash);
}

#[test]
fn a_redis_store_section_sets_the_breaker_and_the_local_share() {
    let config = config::parse(
        "survival.yaml",
        "store:
  kind: redis
  url: redis://127.0.0.1:6379
  deadline: 30ms
  instances: 3
  local_factor: 1.5
  breaker: { failure_rate: 25%, min_calls: 40, consecutive_failures: 5, window: 5s, open_for: 1500ms }
rules:
  - name: r
    key: [user]
    algorithm: fixed_window
    limit: 10
    window: 1m
    on_store_error: local
",
    )
    .unwrap();
    let survival = &config.survival;
    assert_eq!(survival.instances, config::Instances::Fixed(3));
    assert_eq!(survival.local_factor, 1.5);
    let breaker = &survival.breaker;
    assert_eq!(breaker.failure_rate, 0.25);
    assert_eq!((breaker.min_calls, breaker.consecutive_failures), (40, 5));
    assert_eq!((breaker.window, breaker.open_for), (Duration::from_secs(5), Duration::from_millis(1500)));
    // A probe is bounded by the store's deadline: set where the store is opened (floodgate-app,
    // `probes_are_bounded_by_the_stores_deadline`).

    let defaults = config::parse("d.yaml", "store: { kind: redis, url: redis://127.0.0.1:6379 }\n").unwrap();
    assert_eq!(defaults.survival.instances, config::Instances::Discover);
    assert_eq!(defaults.survival.local_factor, 2.0);
    let plain =
        config::parse("p.yaml", "store: { kind: redis, url: redis://h:1, breaker: { failure_rate: 50 } }\n");
    assert_eq!(plain.unwrap().survival.breaker.failure_rate, 0.5, "a bare number is a percentage");
}

#[test]
fn bad_survival_settings_are_refused_where_they_are() {
    let refused = |store: &str, field: &str, says: &str| {
        let text = format!("store: {{ kind: redis, url: redis://h:1, {store} }}\n");
        let err = config::parse("bad.yaml", &text).expect_err(store);
        assert_eq!(err.field.as_deref(), Some(field), "{}", err.message);
        assert!(err.message.contains(says), "{store}: {:?} does not say {says:?}", err.message);
    };
    refused("instances: 0", "store.instances", "at least 1");
    refused("instances: many", "store.instances", "expected a number (instances: 3) or discover");
    refused("local_factor: 0", "store.local_factor", "above 0");
    refused("local_factor: -1", "store.local_factor", "above 0");
    refused("breaker: { failure_rate: 0% }", "store.breaker.failure_rate", "above 0% and at most 100%");
    refused("breaker: { failure_rate: 150% }", "store.breaker.failure_rate", "at most 100%");
    refused("breaker: { open_for: 0s }", "store.breaker.open_for", "open_for");
    refused("breaker: { opn_for: 1s }", "store.breaker.opn_for", "unknown field");
    // The memory store has no breaker nor share: those fields are not its own.
    let err = config::parse("m.yaml", "store: { kind: memory, instances: 2 }\n").expect_err("memory");
    assert!(err.message.contains("does not apply to store kind memory"), "{}", err.message);
    // A concurrency limit holds permits that a local share cannot: refused, at the rule.
    let err = config::parse(
        "c.yaml",
        "rules:\n  - name: c\n    key: [user]\n    algorithm: concurrency\n    limit: 3\n    on_store_error: local\n",
    )
    .expect_err("local on concurrency");
    assert_eq!(err.field.as_deref(), Some("rules[0].on_store_error"), "{}", err.message);
}
